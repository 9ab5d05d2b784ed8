"""zero's Python logger and DeepSpeed's log_dist, which zero.utils offers as DeepSpeed's
deepspeed.utils does.

The logger is named "zero" and writes DeepSpeed's line format to stderr, beside the engine's
own log lines. Its level follows the engine's: info on rank 0 and warning on the others, and
ZERO_LOG_LEVEL (trace, debug, info, warn, error, off) sets every rank's, as it does the
engine's.

Owns: the "zero" logger's handler and level, set once at import.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from .distributed import launcher_ranks

__all__ = ["logger", "log_dist"]

# ZERO_LOG_LEVEL's names (the engine's, spdlog's) as logging's levels.
_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
           "warn": logging.WARNING, "warning": logging.WARNING, "error": logging.ERROR,
           "critical": logging.CRITICAL, "off": logging.CRITICAL + 10}


def _make_logger() -> logging.Logger:
    made = logging.getLogger("zero")
    if not any(getattr(h, "_zero_handler", False) for h in made.handlers):
        handler = logging.StreamHandler(stream=sys.stderr)
        handler.setFormatter(logging.Formatter(
            "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"))
        handler._zero_handler = True  # type: ignore[attr-defined]
        made.addHandler(handler)
    made.propagate = False
    named = os.environ.get("ZERO_LOG_LEVEL", "").strip().lower()
    if named in _LEVELS:
        made.setLevel(_LEVELS[named])
    else:
        made.setLevel(logging.INFO if launcher_ranks()[0] == 0 else logging.WARNING)
    return made


logger: logging.Logger = _make_logger()


def _rank() -> int:
    """torch.distributed's rank where it is set up, else the launcher's (zero's engine does not
    need torch.distributed, so the launcher's rank is the job's either way)."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return launcher_ranks()[0]


def log_dist(message: str, ranks: Sequence[int] | None = (0,), level: int = logging.INFO) -> None:
    """Logs "[Rank r] message" on the ranks listed (all of them when `ranks` starts with -1, as
    in DeepSpeed; None or empty: rank 0), at `level`, through the "zero" logger."""
    rank = _rank()
    listed = list(ranks) if ranks else [0]
    if listed[0] == -1 or rank in listed:
        logger.log(level, "[Rank %d] %s", rank, message, stacklevel=2)
