"""zero.hf.Trainer: a Hugging Face Trainer fine-tune on 2 CPU ranks through zero equals the
same Trainer script through DeepSpeed, step by step, across a checkpoint and a resume, and the
model it saves loads with from_pretrained and evaluates as the Trainer evaluated it.

One job of 2 ranks a backend runs tests/python/hf_trainer_job.py (each rank imports the Trainer,
seconds of CPU, so the job runs every case in one process): DeepSpeed's through
torch.distributed.run (its own free port) with DS_ACCELERATOR=cpu, zero's through zero-run.
DeepSpeed's side runs live with ZERO_TEST_DEEPSPEED_LIVE=1 (or ZERO_TEST_DEEPSPEED_OPS=1) and is
otherwise its outcome recorded in hf_trainer_deepspeed.json (deepspeed_jobs.not_live): it would
cost CI about a minute of CPU.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from deepspeed_jobs import ZERO_RUN, Record, environment, not_live

JOB = Path(__file__).with_name("hf_trainer_job.py")
RECORD = Path(__file__).with_name("hf_trainer_deepspeed.json")
MISSING = [name for name in ("transformers", "accelerate")
           if importlib.util.find_spec(name) is None]
RELATIVE = 1e-5  # fp32 on both sides: the same sums in another order


def run_job(backend: str, out: Path) -> dict:
    """The job's RESULT (rank 0's), launched as a user of that backend launches it."""
    env = environment()
    out.mkdir(parents=True, exist_ok=True)
    job = [str(JOB), backend, str(out)]
    if backend == "deepspeed":
        env["DS_ACCELERATOR"] = "cpu"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc_per_node", "2", *job]
    else:
        command = [str(ZERO_RUN), "-n", "2", "--", sys.executable, *job]
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280,
                         cwd=out)
    assert run.returncode == 0 and "RESULT " in run.stdout, (
        f"{backend} job failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-8000:]}")
    result = run.stdout.split("RESULT ", 1)[1].splitlines()[0]
    (out / "result.json").write_text(result)
    return json.loads(result)


def close(a: float, b: float, relative: float = RELATIVE) -> bool:
    return abs(a - b) <= relative * max(abs(a), abs(b))


def check_steps(ours: list[dict], theirs: list[dict], what: str) -> None:
    """Each logged step's loss and gradient norm within RELATIVE, its learning rate equal."""
    assert [s["step"] for s in ours] == [s["step"] for s in theirs], (what, ours, theirs)
    for mine, other in zip(ours, theirs):
        for key in ("loss", "grad_norm"):
            assert close(mine[key], other[key]), (
                f"{what}, step {mine['step']}: {key} {mine[key]} on zero, {other[key]} on "
                f"DeepSpeed")
        assert close(mine["learning_rate"], other["learning_rate"], 1e-12), (what, mine, other)


def check_record(what: str, recorded: dict, live: dict) -> None:
    """A live DeepSpeed run against its record: every case's steps and evaluation loss."""
    assert recorded.keys() == live.keys(), (what, recorded.keys(), live.keys())
    for case, theirs in live.items():
        check_steps(recorded[case]["straight"], theirs["straight"], f"{what}, {case}")
        check_steps(recorded[case]["resumed"], theirs["resumed"], f"{what}, {case}")
        assert close(recorded[case]["eval_loss"], theirs["eval_loss"]), (what, case)


def deepspeed_outcome(work: Path) -> dict:
    """DeepSpeed's outcome for the job: live where not_live allows it, else the record."""
    record = Record(RECORD)
    why_not = not_live([])
    if why_not:
        return record.recorded("trainer", why_not)
    live = run_job("deepspeed", work / "deepspeed")
    record.after_live("trainer", live, check_record)
    return live


@pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} cannot be imported: the "
                    "Trainer needs transformers and accelerate (the tests' venv has them)")
def test_the_hf_trainer_on_zero_equals_it_on_deepspeed(work: Path) -> None:
    results = {"deepspeed": deepspeed_outcome(work), "zero": run_job("zero", work / "zero")}
    said = results["zero"].pop("refusals")
    assert "gradient_accumulation_steps=4" in said.get("mismatch", ""), said
    assert "use_cpu=True" in said.get("one_process", ""), said
    for case, ours in results["zero"].items():
        theirs = results["deepspeed"][case]
        assert [s["step"] for s in ours["straight"]] == list(range(1, 9)), ours["straight"]
        assert [s["step"] for s in ours["resumed"]] == list(range(5, 9)), ours["resumed"]
        check_steps(ours["straight"], theirs["straight"], f"{case}, straight run")
        check_steps(ours["resumed"], theirs["resumed"], f"{case}, resumed at step 4")
        # The resumed run continues the straight one exactly: the checkpoint holds the fp32
        # masters, the moments, the schedule, the data position and the RNG states.
        assert ours["resumed"] == ours["straight"][4:], (case, ours["resumed"],
                                                         ours["straight"][4:])
        assert close(ours["eval_loss"], theirs["eval_loss"]), (case, ours, theirs)
        assert close(ours["saved_eval_loss"], ours["eval_loss"]), (
            f"{case}: the saved directory evaluates to {ours['saved_eval_loss']} through "
            f"from_pretrained, the trainer to {ours['eval_loss']}")
