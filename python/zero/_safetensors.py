"""safetensors files a tensor at a time, without the whole file in memory (and without numpy).

Reading: read_header gives where each tensor lies (FileTensor), and FileTensor.read one tensor's
values (zero_load_pretrained reads the parameters; this is for the few buffers beside them).

Writing: StreamWriter lays the header out first from the tensors' names, dtypes and shapes, then
each tensor's bytes go to their place as they come, so that the writer holds one tensor, never
the file's. The layout is the safetensors library's own (its
save_file gives the same bytes for the same tensors: tests/python/test_streaming_save.py):
tensors ordered by dtype, the dtype safetensors lists last first, then by name; the header
compact JSON with "__metadata__" first, padded with spaces to a multiple of 8 bytes.

Owns: StreamWriter, its open file until close(); FileTensor, nothing (it opens and closes the
file for each read).
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from ._library import ZeroError

# safetensors' dtypes in the order of its Dtype enum (files order tensors by it, descending)
_ORDER = ["BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16",
          "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]
NAMES = {torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16",
         torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32",
         torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
DTYPES = {name: dtype for dtype, name in NAMES.items()}


@dataclass(frozen=True)
class FileTensor:
    """Where one tensor lies in a safetensors file, as its header says."""

    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute offsets in the file
    end: int

    def read(self) -> torch.Tensor:
        """The tensor's values, on the CPU."""
        if self.dtype not in DTYPES:
            raise ZeroError(f"safetensors: {self.file}: a tensor stored as {self.dtype} at bytes "
                            f"{self.begin}-{self.end}, which zero does not read; store it as "
                            f"one of {', '.join(DTYPES)}")
        with open(self.file, "rb") as f:
            f.seek(self.begin)
            raw = bytearray(f.read(self.end - self.begin))
        if not raw:
            return torch.empty(self.shape, dtype=DTYPES[self.dtype])
        return torch.frombuffer(raw, dtype=DTYPES[self.dtype]).reshape(self.shape)


def read_header(file: Path) -> dict[str, FileTensor]:
    """The tensors of one safetensors file (its 8-byte length and JSON header)."""
    try:
        with open(file, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
    except (OSError, struct.error, ValueError) as error:
        raise ZeroError(f"safetensors: cannot read the header of {file} (its first 8 bytes give "
                        f"the header's length, then JSON): {error}") from None
    start = 8 + length
    return {name: FileTensor(file, entry["dtype"], tuple(entry["shape"]),
                             start + entry["data_offsets"][0], start + entry["data_offsets"][1])
            for name, entry in header.items() if name != "__metadata__"}


class StreamWriter:
    """One safetensors file: StreamWriter(path, [(name, dtype, shape)], metadata), then
    write(name, tensor) for each in any order, then close()."""

    def __init__(self, path: str | Path, tensors: list[tuple[str, torch.dtype, tuple[int, ...]]],
                 metadata: dict[str, str] | None = None) -> None:
        for name, dtype, _ in tensors:
            if dtype not in NAMES:
                raise ZeroError(f"safetensors: {name} is {dtype}, which the format has no name "
                                "for here")
        ordered = sorted(tensors, key=lambda t: (-_ORDER.index(NAMES[t[1]]), t[0]))
        header: dict[str, object] = {}
        if metadata:
            header["__metadata__"] = metadata
        self._places: dict[str, tuple[int, int, torch.dtype, tuple[int, ...]]] = {}
        offset = 0
        for name, dtype, shape in ordered:
            size = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            header[name] = {"dtype": NAMES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + size]}
            self._places[name] = (offset, size, dtype, tuple(shape))
            offset += size
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        self._start = 8 + len(text)
        self._path = Path(path)
        self._file: BinaryIO | None = open(self._path, "wb")
        self._file.write(struct.pack("<Q", len(text)) + text)
        self._file.truncate(self._start + offset)
        self._left = set(self._places)

    def write(self, name: str, tensor: torch.Tensor) -> None:
        """`tensor`'s bytes at `name`'s place; its dtype and shape must be those declared."""
        offset, size, dtype, shape = self._places[name]
        if tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise ZeroError(f"safetensors: {name} was declared {dtype} {list(shape)} and is "
                            f"{tensor.dtype} {list(tensor.shape)}")
        assert self._file is not None, "write after close"
        data = tensor.detach().to("cpu").contiguous().view(-1)
        self._file.seek(self._start + offset)
        if size:  # the tensor's memory as it lies, without a copy (and without numpy)
            self._file.write(memoryview((ctypes.c_char * size).from_address(data.data_ptr())))
        self._left.discard(name)

    def close(self) -> None:
        """Ends the file; every declared tensor must have been written."""
        if self._file is None:
            return
        self._file.close()
        self._file = None
        if self._left:
            raise ZeroError(f"safetensors: {self._path} was closed before "
                            f"{sorted(self._left)[:3]} were written")
