"""zero.ops.lamb: DeepSpeed's deepspeed.ops.lamb.FusedLamb, refused: zero has no LAMB.

The name exists so that a script importing it loads; building one says which optimizers zero
runs instead.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch

from .._library import ZeroError

__all__ = ["FusedLamb"]


class FusedLamb(torch.optim.Optimizer):
    """Refused at construction: zero runs Adam, AdamW, Adagrad, Lion and SGD."""

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> NoReturn:  # type: ignore[misc]
        raise ZeroError("FusedLamb: zero has no LAMB optimizer; it runs Adam and AdamW "
                        "(zero.ops.FusedAdam, DeepSpeedCPUAdam), Lion (FusedLion, "
                        "DeepSpeedCPULion), Adagrad (DeepSpeedCPUAdagrad) and SGD "
                        "(torch.optim.SGD), or any of them named in the config's optimizer "
                        "section. Use one of those instead")
