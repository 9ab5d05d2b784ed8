"""zero.zero: DeepSpeed's deepspeed.zero calls for a module zero trains.

    with zero.zero.GatheredParameters(model.embed.weight, modifier_rank=0):
        if rank == 0:
            model.embed.weight[-1].normal_()      # at stage 3 too: the whole tensor is here
    # every rank now trains the changed value

GatheredParameters(params, modifier_rank=None, fwd_module=None, enabled=True) gives the listed
parameters their full values for the block, at every stage. At stage 3, where a parameter
holds a placeholder outside its modules' forward, it holds its full value (in the compute dtype,
from the fp32 master) inside the block, and the placeholder again after it. With modifier_rank
R, the values rank R holds at the block's end are broadcast and written into zero on every
rank (master and compute copy; the optimizer's moments are kept), at any stage; without it a
change made at stage 3 is dropped with the gathered copy, as in DeepSpeed, and at stages 0-2 a
change to the parameter itself is kept as any in-place change is. Tensors no zero engine trains
are left alone, as DeepSpeed leaves its non-ZeRO parameters. Collective: every rank enters the
block with the same parameters, between steps (not inside a forward or backward). When the
block raises, the placeholders come back and nothing is written.

Inside the block a stage-3 parameter's ds_status is ZeroParamStatus.AVAILABLE, and
NOT_AVAILABLE again after it (DeepSpeed's marks: _hooks.py).

register_external_parameter is zero.register_external_parameter; ZeroParamStatus is DeepSpeed's
enum of ds_status; Init is DeepSpeed's deepspeed.zero.Init, which builds the model whole here
(below).

Owns: the placeholders it lifts, for the block.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TYPE_CHECKING

import torch

from ._hooks import ZeroParamStatus
from ._inplace import owner_of
from ._library import ZeroError, call
from ._units import register_external_parameter

if TYPE_CHECKING:
    from ._hooks import Param
    from ._inplace import InplaceEdits

__all__ = ["GatheredParameters", "Init", "ZeroParamStatus", "register_external_parameter"]


class GatheredParameters:
    """DeepSpeed's deepspeed.zero.GatheredParameters, for parameters zero trains."""

    def __init__(self, params: torch.Tensor | Iterable[torch.Tensor],
                 modifier_rank: int | None = None, fwd_module: Any = None,
                 enabled: bool = True) -> None:
        listed = [params] if isinstance(params, torch.Tensor) else list(params)
        self._owned: list[tuple[InplaceEdits, Param]] = []
        if enabled:
            for tensor in listed:
                found = owner_of(tensor)
                if found is not None and all(found[1] is not p for _, p in self._owned):
                    self._owned.append(found)
        engines = {id(edits.engine): edits.engine for edits, _ in self._owned}
        if len(engines) > 1:
            raise ZeroError("GatheredParameters: the parameters belong to several zero engines; "
                            "gather each engine's in a block of its own")
        self._engine: Any = next(iter(engines.values()), None)
        self._modifier_rank: int | None = modifier_rank
        if modifier_rank is not None and self._engine is not None and not (
                0 <= modifier_rank < self._engine.world_size):
            raise ZeroError(f"GatheredParameters(modifier_rank={modifier_rank}): the job has "
                            f"ranks 0 to {self._engine.world_size - 1}")
        self._lifted: list[tuple[Param, torch.Tensor]] = []  # stage 3: (param, its placeholder)

    def __enter__(self) -> GatheredParameters:
        if self._engine is None:
            return self
        self._engine._require_between_passes("GatheredParameters")
        self._engine._edits.take("GatheredParameters")
        if self._engine.zero_optimization_stage() == 3:
            for edits, p in self._owned:  # collective: every rank reads every parameter
                full = edits.read(p).to(device=p.param.device, dtype=p.param.dtype)
                self._lifted.append((p, p.param.data))
                p.param.data = full
                p.param.ds_status = ZeroParamStatus.AVAILABLE
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._engine is None:
            return
        try:
            if kind is None and self._modifier_rank is not None:
                self._write_modified()
        finally:
            for p, placeholder in self._lifted:
                p.param.data = placeholder
                p.param.ds_status = ZeroParamStatus.NOT_AVAILABLE
                self._engine._edits.seen(p)  # a change to the gathered copy went with it
            self._lifted = []

    def _write_modified(self) -> None:
        """Rank modifier_rank's values, broadcast and written into zero on every rank."""
        for edits, p in self._owned:
            value = p.param.detach().to(device="cpu", dtype=torch.float32).contiguous()
            call("zero_broadcast", self._engine._handle, ctypes.c_void_p(value.data_ptr()),
                 value.numel() * value.element_size(), self._modifier_rank)
            edits.write(p, value)


class Init:
    """DeepSpeed's deepspeed.zero.Init: the context a model is built under.

    zero builds the model whole on each rank under it, as outside it: zero.initialize shards it
    then, with rank 0's values, and places it as its config says (offload_param). It takes
    DeepSpeed's arguments (config_dict_or_path, config, remote_device, pin_memory, dtype,
    enabled, ...) so that code written for DeepSpeed (transformers' from_pretrained under a
    stage-3 DeepSpeed config, DeepSpeed-Chat) runs; `module=`, which partitions a module built
    already, is refused: give that module to zero.initialize. Construction without the full
    weights on each rank is not done yet (the model must fit each rank's memory whole)."""

    def __init__(self, module: torch.nn.Module | None = None, *args: Any,
                 enabled: bool = True, **kwargs: Any) -> None:
        if module is not None and enabled:
            raise ZeroError("zero.zero.Init(module=...): zero shards a module built already "
                            "when it is given to zero.initialize; pass it there")
        self.enabled: bool = enabled

    def __enter__(self) -> Init:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        return None
