"""DescribedOptimizer: the base of zero.ops' optimizers, which describe an optimizer and do not
run one.

A DeepSpeed script builds `FusedAdam(params, lr=...)` and passes it to `deepspeed.initialize`.
On zero, zero.initialize reads such an object (its class, its hyperparameters and its parameter
groups) into the config's optimizer section, and zero's own fused kernels run that optimizer
inside engine.step(). The object itself only holds its param_groups, as torch's Optimizer does.
"""

from __future__ import annotations

from typing import Any, NoReturn, TYPE_CHECKING

import torch

from .._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


class DescribedOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer that zero.initialize(optimizer=...) translates to zero's
    optimizer (`config_type` in the config's optimizer section). Its step() is refused: zero
    keeps the masters and the optimizer state, and engine.step() runs the update."""

    # zero's optimizer.type for this object: set by each subclass (or its __init__)
    config_type: str = ""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
                 defaults: dict[str, Any], set_grad_none: bool = True) -> None:
        super().__init__(params, defaults)
        self.set_grad_none: bool = set_grad_none

    def step(self, closure: Callable[[], Any] | None = None) -> NoReturn:  # type: ignore[override]
        name = type(self).__name__
        raise ZeroError(f"{name}.step(): zero runs this optimizer itself, as its fused "
                        f"{self.config_type}, inside engine.step(); pass the {name} to "
                        "zero.initialize(optimizer=...) and call engine.step() after "
                        "engine.backward(loss)")

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Clears the gradients of the parameters it lists (to None with set_grad_none, as
        DeepSpeed's fused optimizers do). After zero.initialize zero holds the gradients."""
        super().zero_grad(self.set_grad_none if set_to_none is None else set_to_none)


def refuse_amsgrad(name: str, amsgrad: bool) -> None:
    if amsgrad:
        raise ZeroError(f"{name}(amsgrad=True): zero has no AMSGrad; its Adam keeps the two "
                        "moments only. Pass amsgrad=False")
