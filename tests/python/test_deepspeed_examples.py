"""DeepSpeedExamples' scripts, vendored unchanged but for their data (deepspeed_examples/*/
ORIGIN.md), train on zero with only the launcher line changed, and their losses are
DeepSpeed's (issue 54): at every step and on every rank, within 1e-5 relative in fp32, and
within bf16's tolerance in bf16. Each run is a job of 2 CPU ranks that this 1-process test
launches:

    zero:      zero-run --as-deepspeed -n 2 -- python run_example.py SCRIPT ARGS
    DeepSpeed: zero-run -n 2 -- (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_* and --local_rank=N, as
               DeepSpeed's launcher gives them) python run_example.py SCRIPT ARGS,
               with DS_ACCELERATOR=cpu (torch.distributed over gloo)

run_example.py seeds the run and records every training loss at full precision (the scripts
print theirs rounded; the printed ones are checked against the recorded ones too).

DeepSpeed runs live where it needs no compiling (deepspeed_jobs.py: its CPU ops, fused_adam for
the cifar script, cpu_adam for HelloDeepSpeed's, deepspeed_shm_comm for both, built already, or
ZERO_TEST_DEEPSPEED_OPS=1); elsewhere zero's losses are compared with DeepSpeed's as this test
recorded them (deepspeed_examples/deepspeed_losses.json: DeepSpeed 0.19.8, torch 2.15, 2 CPU
ranks).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from deepspeed_jobs import Record, environment, not_live, run_job
EXAMPLES = Path(__file__).resolve().parent / "deepspeed_examples"
RUNNER = EXAMPLES / "run_example.py"
CIFAR = EXAMPLES / "cifar" / "cifar10_deepspeed.py"
BERT = EXAMPLES / "HelloDeepSpeed" / "train_bert_ds.py"
RECORD = EXAMPLES / "deepspeed_losses.json"

FP32_RTOL = 1e-5
# The bf16 runs' losses are bf16 themselves (8 significant bits): two units in their last place.
BF16_RTOL = 2.0 ** -6

# DeepSpeed's own modules the scripts' configs make it JIT-compile on CPU ranks.
DEEPSPEED_OPS = {"cifar": ("fused_adam", "deepspeed_shm_comm"),
                 "HelloDeepSpeed": ("cpu_adam", "deepspeed_shm_comm")}
# What HelloDeepSpeed's script imports beyond the tests' venv (its requirements.txt, and
# torch.utils.tensorboard's tensorboard).
BERT_PACKAGES = ("fire", "loguru", "pytz", "sh", "tensorboard")


def cifar_args(stage: int, dtype: str) -> list[str]:
    """cifar10_deepspeed.py's own flags: one epoch of the 160 synthetic images (10 steps of
    16), each step's loss printed."""
    return ["-e", "1", "--log-interval", "1", "--dtype", dtype, "--stage", str(stage)]


def bert_args() -> list[str]:
    """train_bert_ds.py's own flags: a tiny RoBERTa (its vocabulary stays 50265), the local
    tokenizer, no dropout, 8 steps (its loop stops at num_iterations - 1), each logged, its
    experiment folder in the job's; bf16, as the script trains only in bf16 or fp16."""
    return ["--checkpoint_dir", "experiments",
            "--tokenizer", str(EXAMPLES / "HelloDeepSpeed" / "tokenizer"),
            "--num_layers", "2", "--num_heads", "2", "--ff_dim", "32", "--h_dim", "16",
            "--dropout", "0", "--batch_size", "4", "--max_seq_length", "32",
            "--num_iterations", "9", "--log_every", "1", "--dtype", "bf16"]


def launch(on: str, script: Path, args: list[str], work: Path) -> dict[str, Any]:
    """Runs `script` on 2 ranks on zero (`on` "zero") or DeepSpeed ("deepspeed"); returns each
    rank's recorded losses and the job's output."""
    # ZERO_LOG_LEVEL info: the engine's start-up line names its compute dtype, which the bf16
    # cases check (ctest's runs set warn)
    env = environment(ZERO_EXAMPLE_LOSSES=str(work / "losses"), ZERO_LOG_LEVEL="info")
    output = run_job(on, [str(RUNNER), str(script), *args], work, env)
    losses = {f"rank{r}": json.loads((work / f"losses.rank{r}.json").read_text())
              for r in range(2)}
    return {"losses": losses, "output": output}


def printed_match_recorded(script: Path, output: str, losses: list[float]) -> None:
    """The losses the script printed (rank 0's, rounded) are the ones recorded."""
    if script == CIFAR:  # "[ 1,     3] loss:  2.319": each step's, to 3 decimals
        printed = [float(v) for v in re.findall(r"\] loss:\s+(-?[\d.]+)", output)]
        expected = losses
        tolerance = 0.5e-3 * (1 + 1e-6)
    else:  # "Loss: 10.8958": the mean of the losses so far, to 4 decimals
        printed = [float(v) for v in re.findall(r"\] Loss: (-?[\d.]+)", output)]
        expected = [sum(losses[:n]) / n for n in range(1, len(losses) + 1)]
        tolerance = 0.5e-4 * (1 + 1e-6)
    assert len(printed) == len(expected) and all(
        abs(p - e) <= tolerance for p, e in zip(printed, expected)), \
        f"{script.name} printed {printed}, and the losses recorded are {expected}"


def assert_close(what: str, ours: dict[str, list[float]], theirs: dict[str, list[float]],
                 rtol: float) -> None:
    """Every rank's loss at every step within rtol of DeepSpeed's, listed side by side if not."""
    for rank, reference in theirs.items():
        mine = ours[rank]
        assert len(mine) == len(reference) and reference, \
            f"{what}: {rank} took {len(mine)} steps on zero, {len(reference)} on DeepSpeed"
        far = [(step, z, d) for step, (z, d) in enumerate(zip(mine, reference))
               if not abs(z - d) <= rtol * abs(d)]
        table = "\n".join(f"  step {s}: zero {z!r:<22} DeepSpeed {d!r}"
                          for s, (z, d) in enumerate(zip(mine, reference)))
        assert not far, f"{what}, {rank}: steps {[s for s, _, _ in far]} differ by more than " \
                        f"{rtol} relative:\n{table}"


class DeepSpeedLosses:
    """DeepSpeed's losses for a run: live where DeepSpeed can run it (deepspeed_jobs.not_live),
    else the record's; a live run is checked against the record, or rewrites it. Each run
    once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.record = Record(RECORD)
        self.live: dict[str, dict[str, list[float]]] = {}

    def __call__(self, name: str, example: str, script: Path, args: list[str]
                 ) -> dict[str, list[float]]:
        if name in self.live:
            return self.live[name]
        why_not = not_live(DEEPSPEED_OPS[example])
        if why_not:
            return self.record.recorded(name, why_not)
        run = launch("deepspeed", script, args, self.root / re.sub(r"\W+", "_", name))
        printed_match_recorded(script, run["output"], run["losses"]["rank0"])
        self.live[name] = run["losses"]
        self.record.after_live(name, run["losses"],
                               lambda what, recorded, live: assert_close(what, recorded, live,
                                                                         FP32_RTOL))
        return run["losses"]


@pytest.fixture(scope="module")
def deepspeed(tmp_path_factory: pytest.TempPathFactory) -> DeepSpeedLosses:
    return DeepSpeedLosses(tmp_path_factory.mktemp("deepspeed"))


@pytest.mark.parametrize("stage", [2, 3])
def test_cifar10_fp32_on_zero_equals_deepspeed(stage: int, work: Path,
                                               deepspeed: DeepSpeedLosses) -> None:
    args = cifar_args(stage, "fp32")
    theirs = deepspeed(f"cifar fp32 stage {stage}", "cifar", CIFAR, args)
    ours = launch("zero", CIFAR, args, work)
    printed_match_recorded(CIFAR, ours["output"], ours["losses"]["rank0"])
    assert_close(f"cifar10_deepspeed.py fp32 stage {stage}", ours["losses"], theirs, FP32_RTOL)


def test_cifar10_bf16_on_zero_is_deepspeeds_fp32_within_bf16(work: Path,
                                                             deepspeed: DeepSpeedLosses) -> None:
    theirs = deepspeed("cifar fp32 stage 2", "cifar", CIFAR, cifar_args(2, "fp32"))
    ours = launch("zero", CIFAR, cifar_args(2, "bf16"), work)
    assert "bf16 compute" in ours["output"], "the script's --dtype bf16 did not train in bf16"
    assert_close("cifar10_deepspeed.py bf16 stage 2 (DeepSpeed's fp32)", ours["losses"], theirs,
                 BF16_RTOL)


def test_hello_deepspeed_bert_bf16_on_zero_is_deepspeeds_within_bf16(
        work: Path, deepspeed: DeepSpeedLosses) -> None:
    missing = [p for p in BERT_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"train_bert_ds.py imports {', '.join(missing)}, not installed here "
                    f"(pip install {' '.join(missing)})")
    theirs = deepspeed("HelloDeepSpeed bf16 stage 1", "HelloDeepSpeed", BERT,
                       bert_args())
    ours = launch("zero", BERT, bert_args(), work)
    printed_match_recorded(BERT, ours["output"], ours["losses"]["rank0"])
    assert_close("train_bert_ds.py bf16 (stage 1, optimizer offloaded)", ours["losses"], theirs,
                 BF16_RTOL)
