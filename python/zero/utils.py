"""DeepSpeed's deepspeed.utils functions for a parameter's full value, for a module zero trains,
its logger, its ThroughputTimer (engine.tput_timer) and the attribute paths of
deepspeed.compression.helper.

    from zero.utils import safe_get_full_fp32_param, safe_set_full_fp32_param
    value = safe_get_full_fp32_param(model.lm_head.weight)       # collective
    safe_set_full_fp32_param(model.lm_head.weight, value * 0.5)  # every rank, the same value
    log_dist(f"step {step}: loss {loss:.4f}", ranks=[0])

Owns nothing: each call finds the engine of the parameter through _inplace.owner_of; `logger`
and `log_dist` are _logging's (the "zero" logger, DeepSpeed's line format).
"""

from __future__ import annotations

import time
from typing import Any, TYPE_CHECKING

import torch

from ._inplace import owner_of
from ._library import ZeroError
from ._logging import log_dist, logger

__all__ = ["safe_get_full_fp32_param", "safe_set_full_fp32_param", "logger", "log_dist",
           "ThroughputTimer", "recursive_getattr", "recursive_setattr"]

if TYPE_CHECKING:
    from ._hooks import Param
    from ._inplace import InplaceEdits


def _owner(param: torch.Tensor, what: str) -> tuple[InplaceEdits, Param]:
    found = owner_of(param)
    if found is None:
        raise ZeroError(f"{what}: the tensor is not a parameter of a module a live zero engine "
                        "trains (pass the module's own parameter, after zero.initialize and "
                        "before engine.destroy())")
    return found


def safe_get_full_fp32_param(param: torch.Tensor) -> torch.Tensor:
    """The parameter's full value as fp32 on its device: the fp32 master where there is one,
    whatever the stage. Collective: every rank calls it for the same parameter."""
    edits, p = _owner(param, "safe_get_full_fp32_param")
    return edits.read(p).to(param.device)


def safe_set_full_fp32_param(param: torch.Tensor, value: torch.Tensor) -> None:
    """Sets the parameter's full value (its fp32 master and its compute copy or shards; the
    optimizer's moments kept), between passes or after backward and before engine.step().
    Every rank calls it with the same value (each writes the part it keeps)."""
    edits, p = _owner(param, "safe_set_full_fp32_param")
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != p.shape:
        got = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise ZeroError(f"safe_set_full_fp32_param: {p.name} has shape {p.shape}; the value "
                        f"given is {got}")
    edits.write(p, value)


def recursive_getattr(model: torch.nn.Module, path: str) -> Any:
    """The attribute at the dotted `path` under `model` ("layers.0.attn.q_proj"), as
    DeepSpeed's deepspeed.compression.helper.recursive_getattr."""
    found: Any = model
    for name in path.split("."):
        found = getattr(found, name)
    return found


def recursive_setattr(model: torch.nn.Module, path: str, value: Any) -> None:
    """Sets the attribute at the dotted `path` under `model` to `value` (a module swapped for
    another, as LoRA does), as DeepSpeed's recursive_setattr."""
    *parents, last = path.split(".")
    setattr(recursive_getattr(model, ".".join(parents)) if parents else model, last, value)


class ThroughputTimer:
    """DeepSpeed's engine.tput_timer: samples a second over the optimizer steps, counted from
    the engine's forward (start) to its step (stop). The engine drives it; scripts read it
    (avg_samples_per_sec()) and mark epochs (update_epoch_count()). Logs nothing: zero's
    engine logs its own step lines."""

    def __init__(self, batch_size: int, start_step: int = 2) -> None:
        self.batch_size: int = batch_size
        self.start_step: int = start_step  # optimizer steps left out of the average (warm-up)
        self.epoch_count: int = 0
        self.micro_step_count: int = 0
        self.global_step_count: int = 0
        self.total_elapsed_time: float = 0.0
        self._started: float | None = None
        self._step_elapsed: float = 0.0

    def update_epoch_count(self) -> None:
        self.epoch_count += 1
        self.micro_step_count = 0

    def start(self) -> None:
        if self._started is None:
            self._started = time.perf_counter()

    def stop(self, global_step: bool = False, report_speed: bool = True) -> None:
        """Ends the micro-batch's interval; at an optimizer step (global_step) the window's
        time counts once the warm-up steps are past."""
        if self._started is None:
            return
        self._step_elapsed += time.perf_counter() - self._started
        self._started = None
        self.micro_step_count += 1
        if global_step:
            self.global_step_count += 1
            if self.global_step_count > self.start_step:
                self.total_elapsed_time += self._step_elapsed
            self._step_elapsed = 0.0

    def avg_samples_per_sec(self) -> float:
        """Samples (train_batch_size a step) a second over the steps after the warm-up; 0
        before any."""
        steps = self.global_step_count - self.start_step
        if steps <= 0 or self.total_elapsed_time <= 0:
            return 0.0
        return self.batch_size * steps / self.total_elapsed_time
