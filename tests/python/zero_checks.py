"""What the front end's tests share: this process's rank and the job's size, a small config, a
small model with a BatchNorm, and `refused`, the check that a call is refused with a message
that names what it must. Not a test module (pytest collects test_*.py); fault_job.py, the
failing rank programs, uses it too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
import torch

from zero import ZeroError

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
WORLD_SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))


@contextlib.contextmanager
def refused(what: str, words: Iterable[str], absent: Iterable[str] = ()) -> Iterator[None]:
    """The block must raise a ZeroError whose message has every one of `words` and none of
    `absent`; otherwise the test fails, saying `what` was not refused or what the message
    lacked. Any other exception goes through, failing the test with it.

        with refused("a key given twice is refused, naming it", ["duplicate key"]):
            zero.initialize(model=model, config=path)
    """
    try:
        yield
    except ZeroError as error:
        text = str(error)
        missing = [w for w in words if w not in text]
        present = [w for w in absent if w in text]
        if missing or present:
            pytest.fail(f"{what}: the message lacks {missing} / has {present}: {text}")
        return
    pytest.fail(f"{what}: no ZeroError was raised")


def config(stage: int = 0, **extra: Any) -> dict[str, Any]:
    """A config for the small models here: micro-batch 2, AdamW at 1e-2, `stage`, and `extra`'s
    keys over those."""
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": stage}}
    cfg.update(extra)
    return cfg


class Norms(torch.nn.Module):
    """Linear, BatchNorm (buffers: running statistics and a batch count), Linear; seeded, so
    every rank and every construction starts from the same weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.out = torch.nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.bn(self.lin(x)))).pow(2).mean()
