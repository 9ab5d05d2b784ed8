"""zero.ops.adagrad: DeepSpeed's deepspeed.ops.adagrad.DeepSpeedCPUAdagrad, as a description
zero.initialize turns into zero's fused Adagrad (lr, eps, L2 weight decay), run where the
config's offload_optimizer says."""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from ._described import DescribedOptimizer, refuse_amsgrad

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch

__all__ = ["DeepSpeedCPUAdagrad"]


class DeepSpeedCPUAdagrad(DescribedOptimizer):
    """deepspeed.ops.adagrad.DeepSpeedCPUAdagrad's arguments (amsgrad=True is refused, and
    fp32_optimizer_states=False by zero.initialize, as for DeepSpeedCPUAdam)."""

    config_type = "Adagrad"

    def __init__(self, model_params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 lr: float = 1e-2, eps: float = 1e-10, weight_decay: float = 0.0,
                 amsgrad: bool = False, fp32_optimizer_states: bool = True) -> None:
        refuse_amsgrad("DeepSpeedCPUAdagrad", amsgrad)
        super().__init__(model_params, dict(lr=lr, eps=eps, weight_decay=weight_decay,
                                            amsgrad=amsgrad))
        self.fp32_optimizer_states: bool = bool(fp32_optimizer_states)
