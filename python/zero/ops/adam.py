"""zero.ops.adam: DeepSpeed's deepspeed.ops.adam optimizers, FusedAdam and DeepSpeedCPUAdam,
as descriptions zero.initialize turns into zero's fused Adam or AdamW.

    optimizer = FusedAdam(model.parameters(), lr=1e-4, betas=(0.9, 0.95))
    engine, optimizer, _, _ = zero.initialize(model=model, optimizer=optimizer, config=cfg)

zero runs both the same way: on the GPU or the CPU as the config's offload_optimizer says,
whichever class names it. AdamW (decoupled weight decay) with the w-mode on, Adam with L2
decay otherwise; bias_correction as given. AMSGrad is refused.
"""

from __future__ import annotations

from typing import Any, TYPE_CHECKING

from ._described import DescribedOptimizer, refuse_amsgrad

if TYPE_CHECKING:
    from collections.abc import Iterable

    import torch

__all__ = ["FusedAdam", "DeepSpeedCPUAdam"]


class FusedAdam(DescribedOptimizer):
    """deepspeed.ops.adam.FusedAdam's arguments: AdamW with adam_w_mode=True (the default), Adam
    with L2 decay with adam_w_mode=False. set_grad_none: zero_grad() sets gradients to None."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 adam_w_mode: bool = True, weight_decay: float = 0.0, amsgrad: bool = False,
                 set_grad_none: bool = True) -> None:
        refuse_amsgrad("FusedAdam", amsgrad)
        super().__init__(params, dict(lr=lr, bias_correction=bias_correction, betas=betas,
                                      eps=eps, weight_decay=weight_decay), set_grad_none)
        self.adam_w_mode: bool = bool(adam_w_mode)
        self.config_type = "AdamW" if self.adam_w_mode else "Adam"


class DeepSpeedCPUAdam(DescribedOptimizer):
    """deepspeed.ops.adam.DeepSpeedCPUAdam's arguments: AdamW with adamw_mode=True (the
    default), Adam with L2 decay otherwise. It does not choose where the step runs: the
    config's zero_optimization.offload_optimizer does (DeepSpeed pairs this class with
    "device": "cpu"). fp32_optimizer_states=False is refused by zero.initialize: zero's moments
    are fp32 unless the config's bf16 section sets bf16_optimizer_states."""

    def __init__(self, model_params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, adamw_mode: bool = True,
                 fp32_optimizer_states: bool = True) -> None:
        refuse_amsgrad("DeepSpeedCPUAdam", amsgrad)
        super().__init__(model_params, dict(lr=lr, betas=betas, eps=eps,
                                            weight_decay=weight_decay,
                                            bias_correction=bias_correction, amsgrad=amsgrad))
        self.adam_w_mode: bool = bool(adamw_mode)
        self.fp32_optimizer_states: bool = bool(fp32_optimizer_states)
        self.config_type = "AdamW" if self.adam_w_mode else "Adam"
