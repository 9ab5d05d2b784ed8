"""zero.checkpointing: DeepSpeed's activation checkpointing calls (deepspeed.checkpointing),
over torch.utils.checkpoint.

    hidden = zero.checkpointing.checkpoint(block, hidden, mask)

checkpoint(function, *args) saves only the inputs and runs `function` again in backward, as
torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False) does (it is that call):
zero's hooks find a recomputed module's parameters gathered for backward, at every stage
(docs/python.md, "Activation checkpointing"). The random state is restored for the
recomputation (dropout draws the same mask), CPU and CUDA alike.

configure(...) takes DeepSpeed's arguments. What DeepSpeed does with them across model-parallel
ranks has no counterpart in a data-parallel engine: partition_activations splits each saved
input over the model-parallel group, which for zero is one rank, so it has no effect. Moving
the saved inputs to the CPU (checkpoint_in_cpu, the config's cpu_checkpointing) and copying
them into one buffer (contiguous_checkpointing, the config's contiguous_memory_optimization)
zero does not do: they are refused, naming the argument. synchronize waits for the device
before and after each checkpointed call, and profile logs each call's time (zero.utils.logger).

Owns: the settings configure() made (module state, as DeepSpeed's).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TYPE_CHECKING

import torch
import torch.utils.checkpoint

from ._initialize import read_config_file
from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["checkpoint", "non_reentrant_checkpoint", "configure", "is_configured", "reset"]


@dataclass
class _Settings:
    configured: bool = False
    synchronize: bool = False
    profile: bool = False
    num_checkpoints: int | None = None


_settings = _Settings()

# The config's activation_checkpointing keys zero cannot honour here, and configure()'s names
# for them.
_REFUSED = {
    "cpu_checkpointing": ("checkpoint_in_cpu", "moves the saved inputs to host memory"),
    "contiguous_memory_optimization": ("contiguous_checkpointing",
                                       "copies the saved inputs into one buffer"),
}


def checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """function(*args, **kwargs), keeping only its inputs for backward and running it again
    there (torch.utils.checkpoint.checkpoint with use_reentrant=False). Returns what
    `function` returns."""
    if _settings.synchronize or _settings.profile:
        function = _observed(function)
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, **kwargs)


# DeepSpeed's name for its non-reentrant variant; zero's checkpoint is non-reentrant already.
non_reentrant_checkpoint = checkpoint


def _observed(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` with configure()'s synchronize and profile around it (each run: the forward
    and the recomputation in backward)."""
    from .accelerator import get_accelerator
    from .utils import logger

    def run(*args: Any, **kwargs: Any) -> Any:
        accelerator = get_accelerator()
        if _settings.synchronize:
            accelerator.synchronize()
        start = time.perf_counter()
        result = function(*args, **kwargs)
        if _settings.synchronize or _settings.profile:
            accelerator.synchronize()
        if _settings.profile:  # each run: the forward, then its recomputation in backward
            logger.info("checkpointing: %s ran in %.3f ms",
                        getattr(function, "__name__", type(function).__name__),
                        (time.perf_counter() - start) * 1e3)
        return result

    return run


def _config_section(deepspeed_config: Any) -> dict[str, Any]:
    """The activation_checkpointing section of a DeepSpeed config: a dict, a path to a JSON
    file (read as zero.initialize reads it), or an object holding the dict in `_param_dict`
    (DeepSpeed's DeepSpeedConfig)."""
    config = getattr(deepspeed_config, "_param_dict", deepspeed_config)
    if isinstance(config, (str, Path)):
        config = read_config_file(config, "zero.checkpointing.configure")
    if not isinstance(config, dict):
        raise ZeroError("zero.checkpointing.configure: deepspeed_config must be a dict or a path "
                        f"to a DeepSpeed JSON config, not {type(config).__name__}")
    section = config.get("activation_checkpointing", {})
    if not isinstance(section, dict):
        raise ZeroError("zero.checkpointing.configure: the config's activation_checkpointing is "
                        f"a {type(section).__name__}; it must be an object")
    return section


def configure(mpu_: Any = None, deepspeed_config: Any = None,
              partition_activations: bool | None = None,
              contiguous_checkpointing: bool | None = None, num_checkpoints: int | None = None,
              checkpoint_in_cpu: bool | None = None, synchronize: bool | None = None,
              profile: bool | None = None) -> None:
    """DeepSpeed's deepspeed.checkpointing.configure: the settings for checkpoint(), from the
    config's activation_checkpointing section and then the arguments given (which win), as in
    DeepSpeed. Refused: an mpu (zero has no model parallelism), checkpoint_in_cpu /
    cpu_checkpointing and contiguous_checkpointing / contiguous_memory_optimization.
    partition_activations has no effect (it splits over model-parallel ranks: one here)."""
    if mpu_ is not None:
        raise ZeroError("zero.checkpointing.configure: mpu_ (model parallelism) is not "
                        "supported: zero is data parallel only; pass None")
    section = _config_section(deepspeed_config) if deepspeed_config is not None else {}
    given = {"partition_activations": partition_activations,
             "cpu_checkpointing": checkpoint_in_cpu,
             "contiguous_memory_optimization": contiguous_checkpointing,
             "number_checkpoints": num_checkpoints,
             "synchronize_checkpoint_boundary": synchronize, "profile": profile}
    settings = {**section, **{k: v for k, v in given.items() if v is not None}}
    for key, (argument, what) in _REFUSED.items():
        if settings.get(key):
            source = (f"{argument}=True" if given[key] else
                      f"the config's activation_checkpointing.{key}")
            raise ZeroError(f"zero.checkpointing.configure: {source} {what}, which zero does not "
                            f"do; remove it (zero's checkpoint keeps the inputs where they are)")
    number = settings.get("number_checkpoints")
    _settings.configured = True
    _settings.synchronize = bool(settings.get("synchronize_checkpoint_boundary", False))
    _settings.profile = bool(settings.get("profile", False))
    _settings.num_checkpoints = int(number) if isinstance(number, (int, float)) else None


def is_configured() -> bool:
    """Whether configure() was called, as DeepSpeed's is_configured."""
    return _settings.configured


def reset() -> None:
    """DeepSpeed's reset frees its contiguous buffers between passes; zero keeps none, so there
    is nothing to free."""
