"""Torch tensors over zero's memory, without copies.

Host memory (the CPU device) is wrapped with torch.frombuffer over a ctypes array at the
address; a GPU's memory through __cuda_array_interface__ (bf16 as int16 reinterpreted, since
the interface has no bf16 type code). The tensor keeps no ownership: the engine owns the memory
and the front end drops every view before zero_destroy.
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
_CAI_TYPES = {torch.float32: "<f4", torch.float16: "<f2", torch.bfloat16: "<i2"}


class _CudaMemory:
    """The minimal __cuda_array_interface__ torch.as_tensor reads."""

    def __init__(self, address: int, count: int, typestr: str) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {
            "shape": (count,),
            "typestr": typestr,
            "data": (address, False),
            "version": 3,
            "strides": None,
        }


def view(address: int | None, shape: tuple[int, ...], dtype: torch.dtype,
         device: torch.device) -> torch.Tensor:
    """A tensor of `shape` and `dtype` over `address` on `device` (torch.device)."""
    count = math.prod(shape)
    if count == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    if not address:
        raise _library.ZeroError("zero: a parameter's memory is not available here (null "
                                 "address); this is a bug in the front end, please report it", 8)
    if device.type == "cuda":
        memory = _CudaMemory(address, count, _CAI_TYPES[dtype])
        flat = torch.as_tensor(memory, device=device)
        if dtype == torch.bfloat16:
            flat = flat.view(torch.bfloat16)
    else:
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        flat = torch.frombuffer((ctypes.c_char * nbytes).from_address(address), dtype=dtype)
    return flat.view(shape)


def placeholder(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """What a stage-3 parameter holds outside its module's hooks: its shape, dtype and device,
    over one NaN (stride 0), so that reading its values outside forward shows at once."""
    return torch.full((1,), float("nan"), dtype=dtype, device=device).expand(shape)
