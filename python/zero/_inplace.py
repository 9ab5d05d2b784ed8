"""A parameter changed in place after zero.initialize: found, and written into zero.

A script may change a parameter's values itself: a weight clamp after each step
(`p.data.clamp_(-c, c)`), a head re-initialised (`nn.init.normal_(head.weight)`), a row
renormalised (nn.Embedding's max_norm does it in forward). At stages 0-2 the parameter is a view
of zero's compute copy, so such an edit reached the forward; but at stages 1-2 (and in mixed
precision) zero keeps the values in fp32 masters, and the next step wrote the compute copy over
from them: the edit was undone, silently, where stage 0 kept it.

Every in-place operation bumps the tensor's version counter; `.data` hands out a tensor with a
counter of its own, so while zero trains a plain nn.Parameter its class is ZeroParameter, whose
`.data` is the parameter detached (the same memory and counter). Before each forward, each
step and each read of the values (checkpoint, consolidated_state_dict) the versions are
compared, and a parameter changed since is written into zero with zero_write_param (its master
and compute copy; the optimizer's moments kept), as safe_set_full_fp32_param does. At stage 3 a
parameter holds its values only inside its modules' forward, and an edit there is released with
the gathered copy: it is refused, naming the parameter and the way that works.

Owns: the recorded versions, the class of the parameters it adopted (given back at release)
and their entries in _OWNERS.
"""

from __future__ import annotations

import ctypes
from typing import Any, TYPE_CHECKING

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ._library import ZeroError, call

if TYPE_CHECKING:
    from ._hooks import Param

# parameter -> (its InplaceEdits, its index): how zero.utils finds the engine of a parameter,
# without putting anything in the parameter's __dict__ (which pickling and deepcopy carry).
_OWNERS = WeakIdKeyDictionary()


def owner_of(param: object) -> tuple[InplaceEdits, Param] | None:
    """(InplaceEdits, the parameter's _hooks entry) of a parameter a live engine trains, or
    None."""
    entry = _OWNERS.get(param) if isinstance(param, torch.Tensor) else None
    return None if entry is None else (entry[0], entry[0].param_of(entry[1]))


class ZeroParameter(torch.nn.Parameter):
    """A parameter zero trains: `.data` is the parameter detached, sharing its version counter,
    so that an in-place edit through it is seen; setting `.data` is as before."""

    @property
    def data(self) -> torch.Tensor:
        return self.detach()

    @data.setter
    def data(self, value: torch.Tensor) -> None:
        torch.nn.Parameter.data.__set__(self, value)

    def __deepcopy__(self, memo: dict[int, Any]) -> torch.nn.Parameter:
        """A copy is a plain nn.Parameter: zero's class stays with zero's parameters."""
        if id(self) not in memo:
            memo[id(self)] = torch.nn.Parameter(
                self.detach().clone(memory_format=torch.preserve_format), self.requires_grad)
        return memo[id(self)]


class InplaceEdits:
    def __init__(self, handle: ctypes.c_void_p, params: list[Param], stage: int) -> None:
        self._handle: ctypes.c_void_p = handle
        self._params: list[Param] = params
        self._stage: int = stage
        self._adopted: list[torch.nn.Parameter] = []
        for p in params:
            if type(p.param) is torch.nn.Parameter:
                p.param.__class__ = ZeroParameter
                self._adopted.append(p.param)
            _OWNERS[p.param] = (self, p.index)
        self._versions: list[int] = [p.param._version for p in params]
        # The engine these edits are of, set by it (zero.zero.GatheredParameters reaches it
        # from a parameter through owner_of).
        self.engine: Any = None

    def take(self, where: str) -> None:
        """Writes every parameter changed in place since the last look into zero (stages 0-2);
        at stage 3 refuses the change. `where`: what is about to run, for the message."""
        for p in self._params:
            if p.param._version == self._versions[p.index]:
                continue
            if self._stage == 3:
                self._versions[p.index] = p.param._version
                raise ZeroError(
                    f"parameter {p.name} was changed in place after zero.initialize (seen before "
                    f"{where}): at ZeRO stage 3 it holds its values only inside its modules' "
                    "forward, and a change there goes with the gathered copy. Set values with "
                    "zero.utils.safe_set_full_fp32_param(param, value) between steps (every "
                    "rank, the same value), or use ZeRO stage 0-2, where in-place changes are "
                    "kept")
            self.write(p, p.param.detach())

    def write(self, p: Param, value: torch.Tensor) -> None:
        """Sets parameter `p` to `value` (its shape) in zero, and records its version."""
        value = value.detach().to(device="cpu", dtype=torch.float32).contiguous()
        pointer = ctypes.cast(value.data_ptr(), ctypes.POINTER(ctypes.c_float))
        call("zero_write_param", self._handle, p.index, pointer, value.numel())
        self._versions[p.index] = p.param._version

    def seen(self, p: Param) -> None:
        """Takes parameter `p` as it is now as zero's (a change made to a gathered copy that
        went with it)."""
        self._versions[p.index] = p.param._version

    def read(self, p: Param) -> torch.Tensor:
        """Parameter `p`'s full value, the fp32 master where there is one (collective)."""
        out = torch.empty(p.shape, dtype=torch.float32)
        pointer = ctypes.cast(out.data_ptr(), ctypes.POINTER(ctypes.c_float))
        call("zero_read_param", self._handle, p.index, pointer, out.numel())
        return out

    def forget(self) -> None:
        """The values now are zero's (a checkpoint was loaded): earlier changes are gone."""
        self._versions = [p.param._version for p in self._params]

    def param_of(self, index: int) -> Param:
        return self._params[index]

    def release(self) -> None:
        """Gives the adopted parameters their class back (destroy)."""
        for param in self._adopted:
            param.__class__ = torch.nn.Parameter
        for p in self._params:
            _OWNERS.pop(p.param, None)
        self._adopted = []
