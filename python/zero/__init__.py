"""zero: ZeRO data parallelism for PyTorch modules, a drop-in for deepspeed.initialize.

    import zero
    engine, optimizer, _, scheduler = zero.initialize(model=model, config="ds_config.json")
    loss = engine(input_ids, labels=labels).loss
    engine.backward(loss)
    engine.step()

Launch with `zero-run -n N -- python train.py`. See docs/python.md.

The modules a DeepSpeed script imports beside deepspeed.initialize have zero's counterparts
under the same names (docs/from-deepspeed.md, "Modules"): zero.accelerator (get_accelerator),
zero.comm, zero.ops (FusedAdam, DeepSpeedCPUAdam, ...), zero.checkpointing, zero.moe,
zero.pipe, and zero.utils' logger and log_dist.
"""

from . import accelerator, checkpointing, comm, moe, ops, pipe, utils, zero
from ._initialize import initialize
from ._library import ZeroError, version
from ._units import register_external_parameter
from .accelerator import get_accelerator
from .distributed import add_config_arguments, init_distributed
from .engine import ZeroEngine
from .utils import log_dist, logger

__all__ = ["initialize", "init_distributed", "add_config_arguments", "ZeroEngine", "ZeroError",
           "register_external_parameter", "utils", "version", "accelerator", "get_accelerator",
           "comm", "ops", "checkpointing", "moe", "pipe", "log_dist", "logger", "zero"]
__version__ = "0.1.0"
