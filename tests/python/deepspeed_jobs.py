"""What the tests that run one script under DeepSpeed and under zero share (test_deepspeed_examples,
test_deepspeed_chat, test_hf_trainer): the jobs' environment, the 2-rank launch on either side,
and DeepSpeed's side live or recorded. Not a test module.

DeepSpeed's side is started as DeepSpeed's launcher starts ranks (deepspeed/launcher/launch.py:
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, a free MASTER_PORT, and --local_rank=N after the
script's arguments), through zero-run without --as-deepspeed, with DS_ACCELERATOR=cpu (gloo).

On CPU ranks DeepSpeed JIT-compiles ops before it trains (FusedAdam or DeepSpeedCPUAdam, its
shared-memory allreduce: minutes of CPU on a fresh machine). So a script's DeepSpeed run is
live only where those ops are built already in torch's extensions folder, or with
ZERO_TEST_DEEPSPEED_OPS=1 (which lets DeepSpeed build them); always with
ZERO_TEST_DEEPSPEED_LIVE=1 and never with ZERO_TEST_DEEPSPEED_LIVE=0. A comparison that needs
no op (the Trainer's) runs live only with one of the two set. Elsewhere zero is compared with
the outcome DeepSpeed gave when it was recorded (a JSON file beside the fixtures). A live run is checked against the record, or
rewrites it under ZERO_RECORD_DEEPSPEED_LOSSES=1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

LIBRARY = Path(os.environ["ZERO_LIBRARY"]).resolve()
ZERO_RUN = LIBRARY.parent.parent / "tools" / "zero-run" / "zero-run"
RANKS = 2
_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def environment(**extra: str) -> dict[str, str]:
    """This process's environment for a job: the package and the library by absolute paths
    (the job runs in its own folder), no as-deepspeed folder and no launcher variables of this
    process's, one OpenMP thread a rank, no network for Hugging Face; `extra` over that."""
    env = dict(os.environ, OMP_NUM_THREADS="1", ZERO_LIBRARY=str(LIBRARY), HF_HUB_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    env.pop("ZERO_AS_DEEPSPEED", None)
    env["PYTHONPATH"] = os.pathsep.join(
        str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep)
        if p and "as-deepspeed" not in p)
    for key in _LAUNCHER_VARIABLES:
        env.pop(key, None)
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_job(on: str, script: Sequence[str], cwd: Path, env: dict[str, str],
            timeout: float = 900) -> str:
    """`python script...` on RANKS ranks: on zero ("zero": zero-run --as-deepspeed, the
    script's `import deepspeed` is zero) or on DeepSpeed ("deepspeed", as its launcher starts
    ranks). Returns the ranks' output, stdout and stderr together; fails the test, with the
    output's end, when the job fails."""
    cwd.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-u", *script]
    if on == "zero":
        command = [str(ZERO_RUN), "--as-deepspeed", "-n", str(RANKS), "--", *command]
    else:
        env = dict(env, DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(free_port()))
        as_launcher = ('RANK=$OMPI_COMM_WORLD_RANK LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK '
                       'WORLD_SIZE=$OMPI_COMM_WORLD_SIZE exec "$@" '
                       '--local_rank=$OMPI_COMM_WORLD_LOCAL_RANK')
        command = [str(ZERO_RUN), "-n", str(RANKS), "--", "bash", "-c", as_launcher, "-",
                   *command]
    run = subprocess.run(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, timeout=timeout)
    (cwd / "output.log").write_text(run.stdout)
    assert run.returncode == 0, (f"{Path(script[0]).name} on {on} exited {run.returncode}:\n"
                                 f"{run.stdout[-8000:]}")
    return run.stdout


def ops_built(names: Sequence[str]) -> bool:
    """Whether DeepSpeed's JIT ops `names` are built in torch's extensions folder already."""
    try:
        from torch.utils.cpp_extension import _get_build_directory
    except ImportError:  # a private torch function: absent means not known built
        return False
    return all((Path(_get_build_directory(name, verbose=False)) / f"{name}.so").exists()
               for name in names)


def not_live(ops: Sequence[str]) -> str:
    """Why DeepSpeed does not run live here, needing `ops`, or "" where it does. A comparison
    that needs no op (the Trainer's) runs live only with ZERO_TEST_DEEPSPEED_LIVE=1 or
    ZERO_TEST_DEEPSPEED_OPS=1: its DeepSpeed side costs CI about a minute of CPU."""
    live = os.environ.get("ZERO_TEST_DEEPSPEED_LIVE")
    if live == "0":
        return "ZERO_TEST_DEEPSPEED_LIVE=0"
    if importlib.util.find_spec("deepspeed") is None:
        return "DeepSpeed is not installed in this Python (the tests' venv has 0.19.8)"
    if live == "1":
        return ""
    if not ops and os.environ.get("ZERO_TEST_DEEPSPEED_OPS") != "1":
        return "its side is recorded by default (ZERO_TEST_DEEPSPEED_LIVE=1 runs it)"
    if os.environ.get("ZERO_TEST_DEEPSPEED_OPS") != "1" and not ops_built(ops):
        return (f"its CPU ops {', '.join(ops)} are not built (ZERO_TEST_DEEPSPEED_OPS=1 "
                "builds them)")
    return ""


class Record:
    """DeepSpeed's recorded outcomes, by name, in the JSON file `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.outcomes: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}

    def recorded(self, name: str, why_not_live: str) -> Any:
        """The outcome recorded for `name`; the test is skipped, saying both why, where there
        is none."""
        if name not in self.outcomes:
            pytest.skip(f"no DeepSpeed outcome recorded for {name!r} in {self.path.name}, and "
                        f"DeepSpeed does not run here: {why_not_live} (ZERO_TEST_DEEPSPEED_OPS=1"
                        " ZERO_RECORD_DEEPSPEED_LOSSES=1 records it)")
        return self.outcomes[name]

    def after_live(self, name: str, live: Any, check: Callable[[str, Any, Any], None]) -> None:
        """A live run's outcome (as recorded: JSON data) against the record: written under
        ZERO_RECORD_DEEPSPEED_LOSSES=1, else check(what, recorded, live) where one is."""
        if os.environ.get("ZERO_RECORD_DEEPSPEED_LOSSES") == "1":
            self.outcomes[name] = live
            self.path.write_text(json.dumps(self.outcomes, indent=1) + "\n")
        elif name in self.outcomes:
            check(f"{self.path.name}'s {name!r} against a live DeepSpeed run",
                  self.outcomes[name], live)
