"""Torch tensors over zero's memory, without copies, through DLPack.

`view` hands torch a DLPack 1.0 tensor (torch.from_dlpack) over the engine's memory: the host's
(the CPU device) or a GPU's, with its real dtype (bf16 as DLPack's bfloat, not reinterpreted)
and its device. The descriptor lives in one malloc'd block that libc's free releases when torch
drops the tensor (its deleter), so no Python code runs at that moment, whichever thread or
however late it comes. The tensor keeps no ownership of the memory: the engine owns it and the
front end drops every view before zero_destroy.

Streams: torch passes its current stream to __dlpack__. Nothing is waited on there: making a view
writes nothing, and the memory's contents are ordered on the caller's stream by the zero_ calls
that write them (zero.h, "Streams"), so the consumer's stream needs no event from the producer.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import torch

from . import _library

TORCH_DTYPES = {
    _library.FP32: torch.float32,
    _library.FP16: torch.float16,
    _library.BF16: torch.bfloat16,
}

# dlpack.h 1.0: DLDeviceType, DLDataTypeCode and the structures, as ctypes lays them out.
KDL_CPU = 1
KDL_CUDA = 2
_KDL_FLOAT = 2
_KDL_BFLOAT = 4
_DL_TYPES = {torch.float32: (_KDL_FLOAT, 32), torch.float16: (_KDL_FLOAT, 16),
             torch.bfloat16: (_KDL_BFLOAT, 16)}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64),
                ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = [ctypes.c_size_t]
_FREE = ctypes.cast(_libc.free, ctypes.c_void_p).value
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
# The capsules' names, kept alive here: a capsule holds the pointer, not a copy.
_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"


def dl_device(device: torch.device) -> tuple[int, int]:
    """DLPack's (device type, device id) for `device`."""
    if device.type == "cuda":
        return KDL_CUDA, device.index if device.index is not None else torch.cuda.current_device()
    if device.type == "cpu":
        return KDL_CPU, 0
    raise _library.ZeroError(f"zero: no DLPack view of memory on a {device.type} device; the "
                             "engine's memory is on the CPU or a CUDA GPU", 2)


class Memory:
    """A DLPack producer over `shape` elements of `dtype` at `address` on `device`: what
    torch.from_dlpack takes. Each __dlpack__ makes one capsule, for one consumer; a capsule no
    consumer takes keeps its few bytes."""

    def __init__(self, address: int, shape: tuple[int, ...], dtype: torch.dtype,
                 device: torch.device) -> None:
        self.address = address
        self.shape = shape
        self.dtype = dtype
        self.device = dl_device(device)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        if copy:
            raise BufferError("zero: a view of the engine's memory is never a copy")
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"zero: the memory is on DLPack device {self.device}, not "
                              f"{tuple(dl_device)}")
        versioned = max_version is not None and max_version[0] >= 1
        kind = DLManagedTensorVersioned if versioned else DLManagedTensor
        head = ctypes.sizeof(kind)
        block = _libc.malloc(head + 8 * max(len(self.shape), 1))
        if not block:
            raise MemoryError("zero: no memory for a DLPack descriptor")
        managed = kind.from_address(block)
        ctypes.memset(block, 0, head)
        if versioned:
            managed.version.major, managed.version.minor = 1, 0
        managed.deleter = _FREE  # free(self): the descriptor and its shape are one block
        tensor = managed.dl_tensor
        tensor.data = self.address
        tensor.device.device_type, tensor.device.device_id = self.device
        tensor.ndim = len(self.shape)
        code, bits = _DL_TYPES[self.dtype]
        tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes = code, bits, 1
        shape = (ctypes.c_int64 * max(len(self.shape), 1)).from_address(block + head)
        for i, extent in enumerate(self.shape):
            shape[i] = extent
        tensor.shape = ctypes.cast(block + head, ctypes.POINTER(ctypes.c_int64))
        tensor.strides = None  # compact, row-major
        return _capsule_new(block, _NAME_VERSIONED if versioned else _NAME, None)


def view(address: int | None, shape: tuple[int, ...], dtype: torch.dtype,
         device: torch.device) -> torch.Tensor:
    """A tensor of `shape` and `dtype` over `address` on `device` (torch.device)."""
    if math.prod(shape) == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    if not address:
        raise _library.ZeroError("zero: a parameter's memory is not available here (null "
                                 "address); this is a bug in the front end, please report it", 8)
    return torch.from_dlpack(Memory(address, shape, dtype, device))


def placeholder(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """What a stage-3 parameter holds outside its module's hooks: its shape, dtype and device,
    over one NaN (stride 0), so that reading its values outside forward shows at once."""
    return torch.full((1,), float("nan"), dtype=dtype, device=device).expand(shape)
