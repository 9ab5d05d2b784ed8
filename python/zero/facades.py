"""The optimizer and scheduler zero.initialize returns: views of zero's own, for code written
against DeepSpeed's (reading param_groups' learning rates, calling get_last_lr). zero steps
both inside engine.step()."""

from __future__ import annotations

from typing import Any, NoReturn, TYPE_CHECKING

from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from ._hooks import Param
    from .engine import ZeroEngine


class OptimizerView:
    """param_groups as torch shows them (params, lr, weight_decay), read from the engine."""

    def __init__(self, engine: ZeroEngine, params: list[Param], membership: dict[int, int],
                 group_ids: list[int], specs: list[tuple[str, float, float]]) -> None:
        self._engine: ZeroEngine = engine
        groups: list[list[torch.nn.Parameter]] = [[] for _ in group_ids]
        for p in params:
            if p.trainable:
                groups[membership.get(id(p.param), 0)].append(p.param)
        self._groups: list[list[torch.nn.Parameter]] = groups
        self._decays: list[float] = [engine._base_decay()] + [decay for _, decay, _ in specs]

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        lrs = self._engine.get_lr()
        return [{"params": params, "lr": lrs[i], "weight_decay": self._decays[i]}
                for i, params in enumerate(self._groups) if params or i == 0]

    def step(self, closure: Callable[[], Any] | None = None) -> NoReturn:
        raise ZeroError("optimizer.step(): call engine.step(), which runs zero's optimizer at "
                        "the accumulation boundary")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to do: zero clears its gradient buffers itself."""

    def state_dict(self) -> NoReturn:
        raise ZeroError("optimizer.state_dict(): zero keeps the optimizer state sharded; save "
                        "it with engine.save_checkpoint")


class LRSchedulerView:
    """The config's schedule, as DeepSpeed's scheduler object shows it."""

    def __init__(self, engine: ZeroEngine) -> None:
        self._engine: ZeroEngine = engine

    def get_lr(self) -> list[float]:
        return self._engine.get_lr()

    def get_last_lr(self) -> list[float]:
        return self._engine.get_lr()

    def step(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to do: engine.step() advances zero's schedule."""

    @property
    def last_epoch(self) -> int:
        return self._engine.global_steps
