"""The Python safetensors package's side of the cross-check with safetensors_fixture.cpp.

check_safetensors.py OURS THEIRS: reads OURS (written by our writer) with safetensors.safe_open
and checks every value and the metadata exactly, then writes THEIRS with
safetensors.numpy.save_file for our reader. Values follow the fixture's formula: element i of a
float tensor is i * 0.25 - 3, of an integer tensor (i - 2) * 3000000000123.
"""
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file


def float_values(n, dtype):
    return (np.arange(n, dtype=np.float64) * 0.25 - 3).astype(dtype)


def int_values(n):
    return (np.arange(n, dtype=np.int64) - 2) * 3000000000123


def check(ok, what):
    if not ok:
        raise SystemExit(f"check_safetensors: {what}")


def check_array(name, got, want):
    check(got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}")
    check(got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}")
    check(np.array_equal(got, want), f"{name}: {got.ravel().tolist()} != {want.ravel().tolist()}")


def check_ours(path):
    expected = {
        "f32": float_values(6, np.float32).reshape(2, 3),
        "f16": float_values(5, np.float16),
        "i64": int_values(4),
        "scalar": np.array(42.5, dtype=np.float32),
        "empty": np.zeros((2, 0), dtype=np.float16),
    }
    with safe_open(path, framework="numpy") as f:
        check(f.metadata() == {"producer": "zero", "note": 'caf\u00e9 "x"'},
              f"metadata {f.metadata()}")
        check(sorted(f.keys()) == sorted(list(expected) + ["bf16"]), f"keys {list(f.keys())}")
        for name, want in expected.items():
            check_array(name, f.get_tensor(name), want)
        bf16 = f.get_slice("bf16")
        check(bf16.get_dtype() == "BF16" and bf16.get_shape() == [3, 2],
              f"bf16: {bf16.get_dtype()} {bf16.get_shape()}")
    # numpy has no bfloat16: take the raw bytes from the package's own parser and widen them.
    with open(path, "rb") as f:
        tensors = dict(safetensors.deserialize(f.read()))
    raw = np.frombuffer(bytes(tensors["bf16"]["data"]), dtype="<u2")
    widened = (raw.astype(np.uint32) << 16).view(np.float32).reshape(3, 2)
    check_array("bf16", widened, float_values(6, np.float32).reshape(3, 2))


def write_theirs(path):
    save_file(
        {
            "f32": float_values(12, np.float32).reshape(3, 4),
            "f16": float_values(7, np.float16),
            "i64": int_values(6).reshape(2, 3),
            "scalar": np.array(1.5, dtype=np.float32),
        },
        path,
        metadata={"source": "python", "n": "3"},
    )


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: check_safetensors.py OURS THEIRS")
    check_ours(sys.argv[1])
    write_theirs(sys.argv[2])
    print(f"check_safetensors: {sys.argv[1]} read and checked with safetensors "
          f"{safetensors.__version__}; wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
