"""Reads a zero-ckpt export with the safetensors package and checks it against the values the
engine had (little-endian float32 in the order given by NAMES, one after another).

    python check_export.py MODEL.safetensors EXPECTED.bin NAME...
"""
import sys

import numpy as np
from safetensors import safe_open


def main():
    model, expected_path, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    expected = np.fromfile(expected_path, dtype="<f4")
    at = 0
    with safe_open(model, framework="numpy") as f:
        keys = set(f.keys())
        if keys != set(names):
            sys.exit(f"FAIL: the export holds {sorted(keys)}, expected {sorted(names)}")
        for name in names:
            tensor = f.get_tensor(name)
            if tensor.dtype != np.float32:
                sys.exit(f"FAIL: {name} is {tensor.dtype}, expected float32")
            flat = tensor.reshape(-1)
            want = expected[at:at + flat.size]
            if flat.size != want.size or not np.array_equal(flat.view("<u4"), want.view("<u4")):
                sys.exit(f"FAIL: {name} differs from the engine's values")
            at += flat.size
        metadata = f.metadata() or {}
    if at != expected.size:
        sys.exit(f"FAIL: the export has {at} values, the engine {expected.size}")
    if metadata.get("format") != "pt":
        sys.exit(f"FAIL: metadata {metadata} lacks format=pt")
    print(f"ok   the safetensors package reads {len(names)} tensors, {at} values, equal to the engine's")


if __name__ == "__main__":
    main()
