"""zero.pipe: DeepSpeed's deepspeed.pipe names (PipelineModule, LayerSpec, TiedLayerSpec),
refused at construction: zero has no pipeline parallelism. The names exist so that a script
that imports them loads, and building one says what to do instead.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from ._library import ZeroError

__all__ = ["PipelineModule", "LayerSpec", "TiedLayerSpec"]


def _refuse(name: str) -> NoReturn:
    raise ZeroError(f"zero.pipe.{name}: zero has no pipeline parallelism (it is data parallel "
                    "only, with ZeRO stage 3 to shard the parameters); build the model as one "
                    "torch.nn.Module (e.g. torch.nn.Sequential of its layers) and pass it to "
                    "zero.initialize, or use DeepSpeed for pipeline parallelism")


class PipelineModule(torch.nn.Module):
    """Refused at construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[misc]
        _refuse("PipelineModule")


class LayerSpec:
    """Refused at construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse("LayerSpec")


class TiedLayerSpec(LayerSpec):
    """Refused at construction."""

    def __init__(self, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[misc]
        _refuse("TiedLayerSpec")
