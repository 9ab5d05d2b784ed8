"""What the front end's case scripts (check_faults.py, check_answers.py) share: a check that
prints and records, a refusal that must name given words, a small config, and the main that
runs one case by name.

    SCRIPT.py CASE [WORK_DIR]      runs case_CASE (dashes as underscores) with its work folder
"""

import os
import sys
import tempfile
from pathlib import Path

from zero import ZeroError

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
failures = []


def check(what, condition, detail=""):
    print(f"{'ok  ' if condition else 'FAIL'} {what}{': ' + detail if detail else ''}",
          flush=True)
    if not condition:
        failures.append(what)


def refused(what, words, action, absent=()):
    """`action` must raise a ZeroError whose message has every one of `words` and none of
    `absent`."""
    try:
        action()
    except ZeroError as error:
        text = str(error)
        missing = [w for w in words if w not in text]
        present = [w for w in absent if w in text]
        check(what, not missing and not present,
              f"message lacks {missing} / has {present}: {text}" if missing or present else text)
        return
    check(what, False, "no error")


def config(stage=0, **extra):
    cfg = {"train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
           "zero_optimization": {"stage": stage}}
    cfg.update(extra)
    return cfg


def main(namespace, per_rank=lambda case: True):
    """Runs the case sys.argv[1] names from `namespace` (a script's globals) in its work folder
    (per rank where `per_rank(case)`); 0 when every check passed, else 1."""
    case = sys.argv[1]
    work = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(tempfile.mkdtemp())
    if per_rank(case):
        work = work / f"rank{RANK}"
    work.mkdir(parents=True, exist_ok=True)
    namespace["case_" + case.replace("-", "_")](work)
    if failures:
        print(f"FAIL {len(failures)} check(s): {failures}")
        return 1
    return 0
