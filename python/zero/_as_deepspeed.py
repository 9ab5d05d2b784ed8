"""`import deepspeed` resolved to zero, for `zero-run --as-deepspeed` (python/as-deepspeed).

The folder zero-run puts first on the job's PYTHONPATH holds one file, deepspeed/__init__.py,
which calls take_over: the `deepspeed` module gets zero's DeepSpeed names (initialize,
init_distributed, DeepSpeedEngine, ...), and an import finder resolves DeepSpeed's submodules
to zero's counterparts (deepspeed.comm -> zero.comm, deepspeed.ops.adam -> zero.ops.adam, ...).
A submodule zero has no counterpart for fails to import (ModuleNotFoundError, which scripts'
optional imports expect), naming what zero provides. Rank 0 says once which DeepSpeed this is
and which installed DeepSpeed, if any, it leaves unused.

Owns: the finder it puts first on sys.meta_path, and the modules it makes for DeepSpeed names
that are no module of zero's (deepspeed.zero, deepspeed.runtime...).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any, NoReturn

from ._library import ZeroError

# The DeepSpeed release whose interface zero's surface follows (the one its tests compare with):
# deepspeed.__version__, for scripts that check it; deepspeed.__zero_version__ is zero's own.
DEEPSPEED_VERSION = "0.19.8"

# DeepSpeed's submodules and the zero modules they are. A name that is a package here
# (deepspeed.runtime) is one of this file's own modules; its listed children resolve too.
_MODULES = {
    "deepspeed.accelerator": "zero.accelerator",
    "deepspeed.comm": "zero.comm",
    "deepspeed.ops": "zero.ops",
    "deepspeed.ops.adam": "zero.ops.adam",
    "deepspeed.ops.adagrad": "zero.ops.adagrad",
    "deepspeed.ops.lion": "zero.ops.lion",
    "deepspeed.ops.lamb": "zero.ops.lamb",
    "deepspeed.checkpointing": "zero.checkpointing",
    "deepspeed.runtime.activation_checkpointing.checkpointing": "zero.checkpointing",
    "deepspeed.moe": "zero.moe",
    "deepspeed.moe.utils": "zero.moe.utils",
    "deepspeed.moe.layer": "zero.moe.layer",
    "deepspeed.pipe": "zero.pipe",
    "deepspeed.utils": "zero.utils",
}
_PACKAGES = ("deepspeed.runtime", "deepspeed.runtime.activation_checkpointing",
             "deepspeed.runtime.zero", "deepspeed.compression")


def _refuse(name: str, instead: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise ZeroError(f"{name}: zero has no counterpart ({instead})")
    refused.__name__ = name.rsplit(".", 1)[-1]
    return refused


def _zero_module(name: str = "deepspeed.zero") -> types.ModuleType:
    """deepspeed.zero (and deepspeed.runtime.zero, the same names): zero.zero's
    GatheredParameters, Init, ZeroParamStatus and register_external_parameter."""
    from . import zero as zero_zero
    module = types.ModuleType(name, "DeepSpeed's deepspeed.zero, on zero.")
    for attribute in ("register_external_parameter", "GatheredParameters", "Init",
                      "ZeroParamStatus"):
        setattr(module, attribute, getattr(zero_zero, attribute))
    return module


def _partition_parameters() -> types.ModuleType:
    """deepspeed.runtime.zero.partition_parameters: deepspeed.zero's names, and the two that
    transformers swaps while its from_pretrained builds a model under Init (zero's Init wraps
    no tensor constructor, so they go unused)."""
    import torch

    from .accelerator import get_accelerator
    module = _zero_module("deepspeed.runtime.zero.partition_parameters")
    module.zero_wrapper_for_fp_tensor_constructor = lambda fn, *args, **kwargs: fn
    module._orig_torch_arange = torch.arange
    module.get_accelerator = get_accelerator
    return module


def _compression_helper() -> types.ModuleType:
    """deepspeed.compression.helper: its attribute-path functions (LoRA scripts import them)."""
    from . import utils
    module = types.ModuleType("deepspeed.compression.helper",
                              "DeepSpeed's deepspeed.compression.helper, on zero.")
    module.recursive_getattr = utils.recursive_getattr
    module.recursive_setattr = utils.recursive_setattr
    return module


def _available(made: dict[str, types.ModuleType]) -> str:
    return ", ".join(["deepspeed", *sorted({*_MODULES, *made})])


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves deepspeed.* to zero's modules; refuses the rest by name."""

    def __init__(self, made: dict[str, types.ModuleType]) -> None:
        self._made = made

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("deepspeed."):
            return None
        if fullname not in _MODULES and fullname not in self._made:
            raise ModuleNotFoundError(
                f"{fullname}: zero (zero-run --as-deepspeed, `import deepspeed` is zero) has "
                f"no counterpart for it; zero provides {_available(self._made)} "
                "(docs/from-deepspeed.md)", name=fullname)
        return importlib.util.spec_from_loader(fullname, self,
                                               is_package=fullname in _PACKAGES)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        made = self._made.get(spec.name)
        return made if made is not None else importlib.import_module(_MODULES[spec.name])

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing: the module is zero's, already run."""


def _real_deepspeed(shim: Path) -> str:
    """Where an installed DeepSpeed is, and its version, or that there is none."""
    others = [p for p in sys.path if Path(p or ".").resolve() != shim]
    spec = importlib.machinery.PathFinder.find_spec("deepspeed", others)
    if spec is None or spec.origin is None:
        return "no DeepSpeed is installed beside it"
    try:
        version = importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    return f"the DeepSpeed {version} at {Path(spec.origin).parent} is installed and not used"


def take_over(name: str) -> None:
    """Makes the module `name` (python/as-deepspeed's deepspeed) zero's DeepSpeed."""
    import zero

    module = sys.modules[name]
    made = {"deepspeed.zero": _zero_module(),
            "deepspeed.runtime.zero.partition_parameters": _partition_parameters(),
            "deepspeed.compression.helper": _compression_helper()}
    for package in _PACKAGES:
        made[package] = (_zero_module(package) if package == "deepspeed.runtime.zero" else
                         types.ModuleType(package, "A DeepSpeed package, on zero."))
        made[package].__path__ = []
    for attribute in ("initialize", "init_distributed", "add_config_arguments", "ZeroError",
                      "get_accelerator", "comm", "ops", "checkpointing", "moe", "pipe", "utils",
                      "accelerator", "logger", "log_dist"):
        setattr(module, attribute, getattr(zero, attribute))
    module.DeepSpeedEngine = zero.ZeroEngine
    module.zero = made["deepspeed.zero"]
    module.init_inference = _refuse("deepspeed.init_inference",
                                    "zero trains; serve the saved model with transformers")
    module.__version__ = DEEPSPEED_VERSION
    module.__zero_version__ = zero.__version__
    sys.modules["deepspeed.zero"] = made["deepspeed.zero"]
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder(made))
    rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    if rank == "0":
        shim = Path(module.__file__).resolve().parent.parent
        how = ("zero-run --as-deepspeed" if os.environ.get("ZERO_AS_DEEPSPEED")
               else f"{shim} is on PYTHONPATH")
        print(f"zero: `import deepspeed` is zero {zero.__version__} ({how}); "
              f"{_real_deepspeed(shim)}", file=sys.stderr, flush=True)
