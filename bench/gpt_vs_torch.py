#!/usr/bin/env python3
"""zero-train against PyTorch from the same weights and the same batches, step by step.

    python3 bench/gpt_vs_torch.py --build BUILD --model gpt2-1.5b --device cuda --dtype bf16 \\
        --micro-batch 4 --seq 1024 --steps 20 --tol 0.02 --out DIR
    python3 bench/gpt_vs_torch.py --build build --model tiny --device cpu --dtype fp32 \\
        --micro-batch 4 --seq 64 --steps 20 --tol 1e-4 --out DIR          (the CI test)

1. bench/torch_gpt.py --save-init DIR/init writes its initial weights (GPT-2's initialisation,
   seeded) as a Hugging Face GPT-2 directory, in --dtype (bf16: the values both sides start from
   are bf16 numbers, held in fp32 by PyTorch's parameters and zero's masters alike);
2. zero-train --init DIR/init trains them at stage 0 on one rank (on the GPU with --device cuda:
   the CUDA layers in bf16; on the CPU: the CPU layers, fp32 or bf16 compute copies), with the
   hyperparameters torch_gpt.py uses (AdamW lr 3e-4, betas 0.9 0.95, eps 1e-8, weight decay 0.1
   on matrices and embeddings, none on biases and LayerNorm, clipping at 1.0, no schedule);
3. bench/torch_gpt.py --init DIR/init trains the same weights, plain PyTorch (bf16 through
   torch.autocast), on the same batches of --data (both split and batch a file alike: the last
   5% held out, step s takes sequences s * B onwards);
4. their losses, step by step: each of zero's within --tol (relative) of PyTorch's, and both
   falling. Prints the table (and writes DIR/losses.txt, DIR/losses.json); exit status 0 when
   every step agrees, 1 when one does not, 2 when a run failed.
"""

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build", help="the build folder with tools/zero-train")
    p.add_argument("--zero-train", help="zero-train itself (default: BUILD's)")
    p.add_argument("--python", default=sys.executable, help="a Python with torch and safetensors")
    p.add_argument("--model", default="tiny", help="a named GPT-2 size (bench/torch_gpt.py's)")
    for flag in ("layers", "heads", "channels", "positions", "vocab"):
        p.add_argument("--" + flag, type=int, help="custom: " + flag)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--data", default=os.path.join(ROOT, "data", "fortunes.txt"))
    p.add_argument("--seed", type=int, default=1234, help="torch_gpt.py's initialisation")
    p.add_argument("--tol", type=float, default=0.02, help="relative difference allowed per step")
    p.add_argument("--out", required=True, help="a folder for the weights, metrics and table")
    p.add_argument("--timeout", type=float, default=1800, help="seconds for each run")
    return p.parse_args(argv)


def shape_flags(a):
    flags = ["--model", a.model]
    for flag in ("layers", "heads", "channels", "positions", "vocab"):
        value = getattr(a, flag)
        if value is not None:
            flags += ["--" + flag, str(value)]
    return flags


def run(command, timeout, env=None):
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        print(f"gpt_vs_torch.py: {' '.join(command)} failed (exit {done.returncode}):\n"
              f"{done.stderr[-3000:] or done.stdout[-3000:]}", file=sys.stderr)
        sys.exit(2)
    return done.stdout, time.monotonic() - began


def main(argv):
    a = parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    init = os.path.join(a.out, "init")
    torch_gpt = [a.python, os.path.join(ROOT, "bench", "torch_gpt.py")] + shape_flags(a)
    run(torch_gpt + ["--device", "cpu", "--dtype", a.dtype, "--seed", str(a.seed),
                     "--save-init", init], a.timeout)

    config = {
        "train_micro_batch_size_per_gpu": a.micro_batch,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": 0.1}},
        "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 0},
        "steps_per_print": 1000000,
        "wall_clock_breakdown": True,
    }
    if a.dtype == "bf16":
        config["bf16"] = {"enabled": True}
    config_path = os.path.join(a.out, "zero_config.json")
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)
    metrics = os.path.join(a.out, "zero_metrics.jsonl")
    train = a.zero_train or os.path.join(a.build, "tools", "zero-train", "zero-train")
    zero_command = [train, "--config", config_path, "--init", init, "--data", a.data,
                    "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
                    "--steps", str(a.steps), "--device", "2" if a.device == "cuda" else "1",
                    "--no-progress", "--metrics", metrics]
    _, zero_seconds = run(zero_command, a.timeout, dict(os.environ, ZERO_LOG_LEVEL="warn"))
    zero = [json.loads(line) for line in open(metrics)]
    zero_losses = [r["loss"] for r in zero if r.get("kind") == "train"]

    torch_command = torch_gpt + ["--mode", "plain", "--device", a.device, "--dtype", a.dtype,
                                 "--init", init, "--data", a.data,
                                 "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
                                 "--steps", str(a.steps), "--warmup-steps", "0", "--json"]
    out, torch_seconds = run(torch_command, a.timeout)
    torch_result = json.loads(out.strip().splitlines()[-1])
    torch_losses = torch_result["losses"]

    lines = [f"# zero-train against PyTorch from the same weights ({a.model}, {a.dtype}, "
             f"{a.device}, {a.micro_batch} x {a.seq}, {a.steps} steps); tolerance {a.tol:g} "
             "relative per step",
             f"#   weights: {' '.join(torch_gpt[1:])} --save-init {init}",
             f"#   zero:    {' '.join(zero_command)}   ({zero_seconds:.0f} s)",
             f"#   torch:   {' '.join(torch_command[1:])}   ({torch_seconds:.0f} s)",
             f"{'step':>4} {'zero':>10} {'torch':>10} {'rel. diff':>10}"]
    worst, failed = 0.0, []
    if len(zero_losses) != len(torch_losses):
        failed.append(f"zero-train logged {len(zero_losses)} steps, torch {len(torch_losses)}")
    for step, (z, t) in enumerate(zip(zero_losses, torch_losses), 1):
        rel = abs(z - t) / abs(t)
        worst = max(worst, rel)
        lines.append(f"{step:>4} {z:>10.5f} {t:>10.5f} {rel:>10.2e}{'  <-' if rel > a.tol else ''}")
        if rel > a.tol:
            failed.append(f"step {step}: zero {z:.5f}, torch {t:.5f} ({rel:.2e} relative)")
    if zero_losses and torch_losses and not (zero_losses[-1] < zero_losses[0] and
                                             torch_losses[-1] < torch_losses[0]):
        failed.append("the losses do not fall")
    verdict = (f"agree: every step within {a.tol:g} (largest {worst:.2e}); "
               f"{zero_losses[0]:.4f} -> {zero_losses[-1]:.4f}" if not failed
               else "DIFFER: " + "; ".join(failed[:5]))
    lines.append(verdict)
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(a.out, "losses.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "losses.json"), "w") as f:
        json.dump({"model": a.model, "dtype": a.dtype, "device": a.device, "tol": a.tol,
                   "zero": zero_losses, "torch": torch_losses, "largest_relative": worst,
                   "agree": not failed,
                   "zero_breakdown": [{k: r.get(k) for k in ("forward_s", "backward_s",
                                                            "engine_step_s")}
                                      for r in zero if r.get("kind") == "train"]}, f)
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
