"""Runs a vendored DeepSpeedExamples script unchanged, as `python run_example.py SCRIPT ARGS...`,
and records each training step's loss at full precision for test_deepspeed_examples.py.

The scripts print their losses rounded (cifar10_deepspeed.py to 3 decimals, train_bert_ds.py to 4
and averaged), too coarse for a comparison at 1e-5; so this records the value of every loss
module (torch.nn's `_Loss` subclasses, CrossEntropyLoss here) computed with gradients enabled,
through torch's global forward hook, on every rank, and writes them as JSON to
`$ZERO_EXAMPLE_LOSSES.rank<R>.json` when the script returns. It also seeds torch, numpy and
random with 0 first: cifar10_deepspeed.py builds its model unseeded, and two runs to compare must
start from the same weights (train_bert_ds.py seeds itself, after this). The script runs as
`__main__` with its own arguments; nothing of it is changed.
"""

from __future__ import annotations

import json
import os
import random
import runpy
import sys
from typing import Any

import numpy
import torch


def main() -> None:
    """Seeds, hooks the loss modules, runs sys.argv[1] with sys.argv[2:], writes the losses."""
    script = sys.argv[1]
    out = os.environ["ZERO_EXAMPLE_LOSSES"]
    losses: list[float] = []

    def record(module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if isinstance(module, torch.nn.modules.loss._Loss) and torch.is_grad_enabled():
            losses.append(float(output.detach().float()))

    torch.manual_seed(0)
    numpy.random.seed(0)
    random.seed(0)
    handle = torch.nn.modules.module.register_module_forward_hook(record)
    sys.argv = [script, *sys.argv[2:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    handle.remove()
    rank = os.environ.get("RANK", "0")
    with open(f"{out}.rank{rank}.json", "w") as file:
        json.dump(losses, file)


if __name__ == "__main__":
    main()
