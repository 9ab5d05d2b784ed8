"""zero: ZeRO data parallelism for PyTorch modules, a drop-in for deepspeed.initialize.

    import zero
    engine, optimizer, _, scheduler = zero.initialize(model=model, config="ds_config.json")
    loss = engine(input_ids, labels=labels).loss
    engine.backward(loss)
    engine.step()

Launch with `zero-run -n N -- python train.py`. See docs/python.md.
"""

from . import utils
from ._initialize import initialize
from ._library import ZeroError, version
from ._units import register_external_parameter
from .distributed import add_config_arguments, init_distributed
from .engine import ZeroEngine

__all__ = ["initialize", "init_distributed", "add_config_arguments", "ZeroEngine", "ZeroError",
           "register_external_parameter", "utils", "version"]
__version__ = "0.1.0"
