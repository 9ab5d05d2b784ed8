"""zero.moe.layer: DeepSpeed's deepspeed.moe.layer.MoE, refused at construction (zero has no
mixture of experts). The name exists so that a script that imports it, and builds experts only
when asked to (DeepSpeedExamples' cifar10_deepspeed.py with --moe), loads and trains dense."""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from .._library import ZeroError

__all__ = ["MoE"]


class MoE(torch.nn.Module):
    """Refused at construction: zero is data parallel only."""

    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[misc]
        raise ZeroError("zero.moe.layer.MoE: zero has no mixture of experts (it is data "
                        "parallel only: no expert parallelism or expert groups); use a dense "
                        "layer (the expert module itself), or train MoE models with DeepSpeed")
