#!/usr/bin/env python3
"""scripts/compare-losses.py: zero-train's losses on the GPU beside the CPU's, step by step.

  compare-losses.py [--label NAME] [--first-tol R] [--tol R] [--learn F] CPU.jsonl GPU.jsonl

CPU.jsonl and GPU.jsonl are zero-train --metrics files of two runs from the same initial values
(--seed) and the same data, one with --device 1 and one with --device 2, in bf16. Prints a table
(step, CPU loss, GPU loss, relative difference, tolerance; then the validation loss) and one
verdict line; exits 0 when every step agrees and the GPU run learns, 1 when not, 2 when a file
lacks the lines to compare.

The tolerances are those of tests/gpu/test_gpu_models.cpp, which compares the same models through
the engine, for the same reasons: both runs start from the same bf16 weights, but the GPU rounds
every activation to bf16 (2^-8 relative at most, a few roundings per block) where the CPU layers
keep fp32, so the first loss moves by parts in a thousand: --first-tol 1e-2 relative. Each later
step adds the difference of the updates: Adam's early steps move an element by about lr whatever
its gradient's size, so elements whose gradient is near zero may move either way on either
device, and the losses drift apart with the steps: --tol 2e-2 relative for the later steps and
the validation loss, at lr 5e-4 over about ten steps. For scale: on the CPU, bf16 weights against
fp32 weights move the losses of gpu-check's three tiny models (GPT-2, Llama, Qwen2 shapes) by at
most 7e-4 relative over ten such steps; a wrong index or a missing term moves them by far more
once the models learn (about 20% in ten steps). Learning: the GPU's last loss must be at most
--learn (0.9) of its first.
"""
import argparse
import json
import sys


def read(path):
    train, evals = {}, []
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("kind") == "train":
                train[r["step"]] = r["loss"]
            elif r.get("kind") == "eval":
                evals.append(r["eval_loss"])
    return train, (evals[-1] if evals else None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cpu")
    p.add_argument("gpu")
    p.add_argument("--label", default="model")
    p.add_argument("--first-tol", type=float, default=1e-2)
    p.add_argument("--tol", type=float, default=2e-2)
    p.add_argument("--learn", type=float, default=0.9)
    a = p.parse_args()
    try:
        (cpu, cpu_eval), (gpu, gpu_eval) = read(a.cpu), read(a.gpu)
    except OSError as e:
        print(f"{a.label}: no losses to compare: {e}")
        return 2
    steps = sorted(set(cpu) & set(gpu))
    if not steps:
        print(f"{a.label}: no steps to compare ({len(cpu)} on the CPU, {len(gpu)} on the GPU)")
        return 2
    print(f"{a.label}: {'step':>5} {'CPU loss':>10} {'GPU loss':>10} {'rel. diff':>10} "
          f"{'tolerance':>10}")
    worst = None  # (excess over tolerance, what)
    rows = [(s, cpu[s], gpu[s], a.first_tol if s == steps[0] else a.tol) for s in steps]
    if cpu_eval is not None and gpu_eval is not None:
        rows.append(("valid", cpu_eval, gpu_eval, a.tol))
    for what, c, g, tol in rows:
        rel = abs(g - c) / max(abs(c), 1e-12)
        mark = "" if rel <= tol else "  <- over"
        print(f"{a.label}: {what:>5} {c:10.4f} {g:10.4f} {rel:10.1e} {tol:10.1e}{mark}")
        if rel > tol and (worst is None or rel / tol > worst[0]):
            worst = (rel / tol, f"step {what}: {g:.4f} on the GPU against {c:.4f} on the CPU "
                                f"({rel:.1e} relative, tolerance {tol:.0e})")
    missing = sorted(set(cpu) ^ set(gpu))
    first, last = gpu[steps[0]], gpu[steps[-1]]
    learns = last <= a.learn * first
    if worst is not None:
        print(f"{a.label}: the GPU's losses leave bf16's tolerance at {worst[1]}")
    elif missing:
        print(f"{a.label}: steps {missing} ran on one device only")
    elif not learns:
        print(f"{a.label}: the GPU's loss does not fall: {first:.4f} -> {last:.4f} (at most "
              f"{a.learn:.0%} of the first was wanted)")
    else:
        print(f"{a.label}: the GPU's losses agree with the CPU's within bf16's tolerance over "
              f"{len(steps)} steps and fall {first:.4f} -> {last:.4f} ({last / first:.0%})")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
