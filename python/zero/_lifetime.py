"""Every engine's end: destroyed at exit when the program did not destroy it, and a rank's
uncaught exception made the whole job's.

Owns the list of live engines. They are held here, not weakly: destroying an engine is
collective, and it tells the other ranks that this one is leaving (a rank still waiting for a
collective this one never made then fails at once, naming it, instead of waiting out
comm_timeout_s); an engine left to the garbage collector would do neither.
"""

from __future__ import annotations

import atexit
import sys
import warnings
from typing import Any, TYPE_CHECKING

from . import _library
from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

    from .engine import ZeroEngine

_live: list[ZeroEngine] = []


def register(engine: ZeroEngine) -> None:
    if not _live:
        atexit.register(_destroy_all)
        sys.excepthook = _failing_rank_ends_job(sys.excepthook)
    _live.append(engine)


def forget(engine: ZeroEngine) -> None:
    """engine.destroy() ran: nothing is left to do at exit."""
    if engine in _live:
        _live.remove(engine)


def _failing_rank_ends_job(
        previous: Callable[[type[BaseException], BaseException, TracebackType | None], Any]
) -> Callable[[type[BaseException], BaseException, TracebackType | None], None]:
    """sys.excepthook: an exception no one caught on one rank ends the whole job at once, with
    it as the cause, instead of leaving the other ranks waiting for this one in a collective
    (and this one waiting for them in the teardown at exit) until comm_timeout_s. The
    traceback prints first, as always; then zero_abort ends every rank (MPI_Abort)."""

    def hook(kind: type[BaseException], value: BaseException,
             traceback: TracebackType | None) -> None:
        previous(kind, value, traceback)
        for engine in list(_live):
            if not engine._destroyed and engine.world_size > 1:
                reason = f"rank {engine.global_rank}: {kind.__name__}: {value}".splitlines()[0]
                sys.stderr.flush()
                _library.lib().zero_abort(engine._handle, 1, reason[:500].encode())
    return hook


def _destroy_all() -> None:
    for engine in reversed(list(_live)):
        try:
            engine.destroy()
        except ZeroError as error:
            warnings.warn(f"zero: at exit: {error}")
    _live.clear()
