"""A module zero trains, seen through state_dict() and copy.deepcopy.

At stage 3 a parameter holds a NaN placeholder of its shape outside the forward and backward
of its modules (_hooks.py). module.state_dict() there answers as DeepSpeed's does: each
parameter that holds its placeholder is an empty tensor of its dtype (DeepSpeed's partitioned
parameter data), which load_state_dict refuses by its size rather than loading NaN, and the
first such state_dict logs a warning naming what gives the real values
(engine.consolidated_state_dict(), collective); inside zero.zero.GatheredParameters, and in the
front end's own calls (allow_state_dict), the values are whole. copy.deepcopy(module) is refused
there. At stages 0-2 the parameters are views of zero's memory with their real values, so both
work; deepcopy makes a plain module without zero's hooks (an EMA or teacher copy must not drive
the engine's hooks).

Owns: the state_dict hooks and the __deepcopy__ attributes it puts on the modules.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError
from ._logging import logger

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from torch.utils.hooks import RemovableHandle

# What zero puts in a module's __dict__, left out of a copy: this file's __deepcopy__ and the
# engine's mark (engine.py), which a plain copy must not carry.
_ZERO_ATTRS = ("__deepcopy__", "_zero_engine")
_STAGE3_FIX = ("engine.consolidated_state_dict() (collective: every rank calls it) gives the "
               "full fp32 values under the module's names; engine.save_16bit_model(dir) and "
               "engine.save_pretrained(dir) write them")


class ModuleCopies:
    def __init__(self, model: torch.nn.Module, stage: int,
                 hook_handles: list[RemovableHandle],
                 is_placeholder: Callable[[torch.Tensor], bool]) -> None:
        self._model: torch.nn.Module = model
        self._stage: int = stage
        # zero's forward hooks, left out of copies
        self._hook_handles: list[RemovableHandle] = hook_handles
        self._is_placeholder: Callable[[torch.Tensor], bool] = is_placeholder
        self._allowed: int = 0
        self._warned: bool = False
        self._handles: list[RemovableHandle] = []
        for module in model.modules():
            if stage == 3:
                # (a function, not the bound method: torch marks the hook with an attribute)
                self._handles.append(module.register_state_dict_post_hook(
                    lambda *args: self._state_dict_post(*args)))
            object.__setattr__(module, "__deepcopy__", self._deepcopier(module))

    @contextlib.contextmanager
    def allow_state_dict(self) -> Iterator[None]:
        """The front end's own state_dict() calls (consolidated_state_dict, destroy)."""
        self._allowed += 1
        try:
            yield
        finally:
            self._allowed -= 1

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for module in self._model.modules():
            module.__dict__.pop("__deepcopy__", None)

    def _state_dict_post(self, module: torch.nn.Module, state: dict[str, Any], prefix: str,
                         metadata: Any) -> None:
        """Stage 3: each of the module's own parameters that holds its placeholder becomes an
        empty tensor in `state`, as DeepSpeed's partitioned parameters are."""
        if self._allowed:
            return
        emptied = []
        for name, param in module.named_parameters(recurse=False):
            key = prefix + name
            if key in state and self._is_placeholder(param.data):
                state[key] = torch.empty(0, dtype=param.dtype, device=param.device)
                emptied.append(key)
        if emptied and not self._warned:
            self._warned = True
            logger.warning(
                "state_dict() of %s at ZeRO stage 3 holds each sharded parameter as an empty "
                "tensor (%s%s), as DeepSpeed's does: load_state_dict would refuse it. %s; or read "
                "parameters inside zero.zero.GatheredParameters(...)", type(module).__name__,
                emptied[0], ", ..." if len(emptied) > 1 else "", _STAGE3_FIX)

    def _deepcopier(self, module: torch.nn.Module) -> Callable[[dict[int, Any]], torch.nn.Module]:
        def deepcopy(memo: dict[int, Any]) -> torch.nn.Module:
            if self._stage == 3:
                raise ZeroError(f"copy.deepcopy of {type(module).__name__} at ZeRO stage 3: "
                                "its parameters are placeholders (NaN) outside forward, and a "
                                "copy would carry zero's hooks. Build the copy from the values: "
                                f"copy = Model(...); copy.load_state_dict(state), where {_STAGE3_FIX}")
            with self._plain(module):
                return copy.deepcopy(module, memo)
        return deepcopy

    @contextlib.contextmanager
    def _plain(self, root: torch.nn.Module) -> Iterator[None]:
        """The module tree under `root` without zero's hooks and attributes, while
        a copy is made; everything is put back as it was, in order."""
        saved_attrs = [(m, name, m.__dict__.pop(name)) for m in root.modules()
                       for name in _ZERO_ATTRS if name in m.__dict__]
        saved_hooks = {}  # id(dict) -> (dict, its items before)
        for handle in self._hook_handles:
            hooks = handle.hooks_dict_ref()
            if hooks is not None and handle.id in hooks:
                saved_hooks.setdefault(id(hooks), (hooks, list(hooks.items())))
        for handle in self._hook_handles:
            hooks = handle.hooks_dict_ref()
            if hooks is not None:
                hooks.pop(handle.id, None)
        try:
            yield
        finally:
            for hooks, items in saved_hooks.values():
                hooks.clear()
                hooks.update(items)
            for module, name, attr in saved_attrs:
                module.__dict__[name] = attr
