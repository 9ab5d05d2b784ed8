"""The table bench/frontend.sh prints: each variant of bench/frontend.py started through
zero-run REPEATS times (default 3; the pair's runs interleaved), the median tokens/s, and the
ratio of zero.initialize's median to its peer's in the same run. The offloaded pairs run twice:
on MODEL_ARGS's model, and on OFFLOAD_ARGS's (default a GPT-2 of 8 x 512, vocabulary 32000,
one sequence of 64 tokens per rank: fine-tuning with small micro-batches, where the step's
engine work, not the model's arithmetic, is most of the time, as in the offloaded runs of
larger models)."""

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
zero_run = os.path.join(root, "build", "tools", "zero-run", "zero-run")
python = sys.executable
model_args = os.environ.get("MODEL_ARGS", "").split()
offload_args = os.environ.get("OFFLOAD_ARGS", "--layers 8 --hidden 512 --vocab 32000 --micro 1 "
                              "--seq 64").split()
cores = os.cpu_count()
repeats = int(os.environ.get("REPEATS", "3"))


def run(ranks, framework, stage, offload, args):
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, cores // ranks)))
    command = [zero_run, "-n", str(ranks), "--", python, os.path.join(root, "bench", "frontend.py"),
               "--framework", framework, "--stage", str(stage), "--offload", offload] + args
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [l for l in done.stdout.splitlines() if l.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        print(f"# {framework} stage {stage} {offload} on {ranks} ranks failed: {' | '.join(tail)}",
              flush=True)
        return None
    return json.loads(lines[-1])["tokens_per_s"]


def pair(ranks, peer, stage, offload, args):
    """Medians of the peer's and zero's tokens/s, their runs interleaved."""
    peer_runs, zero_runs = [], []
    for _ in range(repeats):
        if peer:
            peer_runs.append(run(ranks, peer, stage, offload, args))
        zero_runs.append(run(ranks, "zero", stage, offload, args))
    return median(peer_runs), median(zero_runs)


def median(values):
    values = sorted(v for v in values if v)
    return values[len(values) // 2] if values else None


def row(label, ranks, stage, offload, tokens, base):
    ratio = f"{tokens / base:.2f}" if tokens and base else "-"
    print(f"{label:<22} {stage:>5} {offload:<8} {ranks:>6} {tokens or 'failed':>12} {ratio:>8}",
          flush=True)


def main():
    try:
        import deepspeed
        deepspeed_version = deepspeed.__version__
    except ImportError:
        deepspeed_version = None
    import torch
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"# zero.initialize against plain PyTorch and deepspeed.initialize on CPU ranks, "
          f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%MZ}")
    blas = "MKL" if "USE_MKL=ON" in torch.__config__.show() else "its own BLAS"
    print(f"# machine: {cores} cores, {cpu}; torch {torch.__version__} (matrix products: {blas}), "
          f"deepspeed {deepspeed_version or 'absent'}; the models run on torch, zero's CPU "
          "layers and their OpenBLAS are not used")
    print(f"# command: bench/frontend.sh; OMP threads = cores / ranks; median of {repeats} runs "
          "each, interleaved; ratio = zero.initialize / the row above it")
    header = (f"{'framework':<22} {'stage':>5} {'offload':<8} {'ranks':>6} {'tokens/s':>12} "
              f"{'ratio':>8}")
    print(f"\n## bench/frontend.py {' '.join(model_args) or '(its defaults)'}")
    print(header)
    for ranks in (1, 2):
        base, tokens = pair(ranks, "torch", 0, "none", model_args)
        row("torch (DDP on gloo)" if ranks > 1 else "torch", ranks, 0, "none", base, None)
        row("zero.initialize", ranks, 0, "none", tokens, base)
    offloaded(model_args, deepspeed_version)
    print(f"\n## bench/frontend.py {' '.join(offload_args)}: small micro-batches, the engine's "
          "share of the step large")
    print(header)
    offloaded(offload_args, deepspeed_version)


def offloaded(args, deepspeed_version):
    for stage in (2, 3):
        base, tokens = pair(2, "deepspeed" if deepspeed_version else None, stage, "cpu", args)
        if deepspeed_version:
            row("deepspeed.initialize", 2, stage, "cpu", base, None)
        else:
            print(f"# deepspeed.initialize: skipped, no deepspeed in {python}")
        row("zero.initialize", 2, stage, "cpu", tokens, base)


if __name__ == "__main__":
    main()
