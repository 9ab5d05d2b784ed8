"""DeepSpeed's deepspeed.utils functions for a parameter's full value, for a module zero trains,
and its logger.

    from zero.utils import safe_get_full_fp32_param, safe_set_full_fp32_param
    value = safe_get_full_fp32_param(model.lm_head.weight)       # collective
    safe_set_full_fp32_param(model.lm_head.weight, value * 0.5)  # every rank, the same value
    log_dist(f"step {step}: loss {loss:.4f}", ranks=[0])

Owns nothing: each call finds the engine of the parameter through _inplace.owner_of; `logger`
and `log_dist` are _logging's (the "zero" logger, DeepSpeed's line format).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ._inplace import owner_of
from ._library import ZeroError
from ._logging import log_dist, logger

__all__ = ["safe_get_full_fp32_param", "safe_set_full_fp32_param", "logger", "log_dist"]

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
