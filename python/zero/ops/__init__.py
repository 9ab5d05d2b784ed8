"""zero.ops: the names DeepSpeed's deepspeed.ops offers a training script, for zero.

    from zero.ops.adam import FusedAdam, DeepSpeedCPUAdam

Each optimizer here describes one of zero's fused optimizers and runs nothing itself: pass it
to zero.initialize(optimizer=...), which reads its hyperparameters and parameter groups into
the config's optimizer section; engine.step() runs it. FusedLamb is refused (zero has no LAMB).
DeepSpeed's other ops (transformer kernels, quantizers, async I/O) have no counterpart.
"""

from __future__ import annotations

from . import adagrad, adam, lamb, lion
from .adagrad import DeepSpeedCPUAdagrad
from .adam import DeepSpeedCPUAdam, FusedAdam
from .lamb import FusedLamb
from .lion import DeepSpeedCPULion, FusedLion

__all__ = ["adam", "adagrad", "lamb", "lion", "FusedAdam", "DeepSpeedCPUAdam", "FusedLion",
           "DeepSpeedCPULion", "DeepSpeedCPUAdagrad", "FusedLamb"]
