"""zero.ops.lion: DeepSpeed's deepspeed.ops.lion optimizers, FusedLion and DeepSpeedCPULion,
as descriptions zero.initialize turns into zero's fused Lion (lr, betas, decoupled weight
decay), run where the config's offload_optimizer says."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from ._described import DescribedOptimizer

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch

__all__ = ["FusedLion", "DeepSpeedCPULion"]


class FusedLion(DescribedOptimizer):
    """deepspeed.ops.lion.FusedLion's arguments."""

    config_type = "Lion"

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 0.0, set_grad_none: bool = True) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay),
                         set_grad_none)


class DeepSpeedCPULion(DescribedOptimizer):
    """deepspeed.ops.lion.DeepSpeedCPULion's arguments (fp32_optimizer_states=False is refused
    by zero.initialize, as for DeepSpeedCPUAdam)."""

    config_type = "Lion"

    def __init__(self, model_params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 0.0, fp32_optimizer_states: bool = True) -> None:
        super().__init__(model_params, dict(lr=lr, betas=betas, weight_decay=weight_decay))
        self.fp32_optimizer_states: bool = bool(fp32_optimizer_states)
