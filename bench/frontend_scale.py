#!/usr/bin/env python3
"""A big model through PyTorch, measured: Llama 3.2 3B (its published shape, weights made here:
bench/make_llama_weights.py) fine-tuned through zero.initialize on 2 CPU ranks with its
parameters and optimizer on NVMe, built under zero.zero.Init without its weights and loaded by
shard; each rank's peak resident memory against what zero-mem --front-end predicts for it;
then save_pretrained by streaming and the saved directory loaded with from_pretrained in one
process (bf16), whose loss on the evaluation batch must be zero's. Short sequences (16 tokens):
on this machine's CPU (no AVX512-BF16) PyTorch's bf16 matmul forward and backward runs about 7
times slower than fp32's, a step of 3B at 64 tokens about half an hour; in fp32 the gathered
parameters and gradients would not fit 2 ranks in 24 GiB.

    bench/frontend_scale.py [--build build] [--work .scale-frontend] [--steps 3] [--seq 64]
                            [--model llama-3.2-3b]

WORK (on the disk to measure: O_DIRECT) holds the made-up weights (kept for the next run), the
swap files and the saved directory (both removed at the end). Writes
bench/results/frontend_scale.txt and frontend_scale.json.
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30
PYTHON = sys.executable


def environment(build: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "python")
    env["ZERO_LIBRARY"] = str(build / "engine" / "libzero.so")
    env.setdefault("ZERO_LOG_LEVEL", "warn")
    for key in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                "OMPI_MCA_rmaps_base_oversubscribe"):
        env.setdefault(key, "1")
    return env


def available_memory() -> int:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--work", type=Path, default=ROOT / ".scale-frontend")
    parser.add_argument("--model", default="llama-3.2-3b")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--config", type=Path, default=ROOT / "bench/configs/frontend_scale.json")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results")
    args = parser.parse_args()
    env = environment(args.build.resolve())
    work = args.work.resolve()
    weights = work / args.model
    swap, saved = work / "swap", work / "saved"
    shutil.rmtree(swap, ignore_errors=True)
    shutil.rmtree(saved, ignore_errors=True)
    if not (weights / "model.safetensors.index.json").exists():
        subprocess.run([PYTHON, str(ROOT / "bench/make_llama_weights.py"), str(weights),
                        "--model", args.model], env=env, check=True)
    swap.mkdir(parents=True)
    config = json.loads(args.config.read_text())
    for section in ("offload_optimizer", "offload_param"):
        config["zero_optimization"][section]["nvme_path"] = str(swap)
    config_file = work / "run.json"
    config_file.write_text(json.dumps(config, indent=1))

    # zero-mem's prediction for the row the config is, per rank (2 ranks on one node).
    memory = available_memory()
    free_disk = shutil.disk_usage(work).free
    mem = subprocess.run(
        [str(args.build / "tools/zero-mem/zero-mem"), "--model", str(weights), "--front-end",
         "--device", "cpu", "--ranks-per-node", "2", "--cpu-mem", str(memory),
         "--nvme", str(free_disk), "--stage", "3", "--seq", str(args.seq), "--config",
         str(config_file), "--json"], env=env, check=True, capture_output=True, text=True)
    plan = json.loads(mem.stdout)
    row = next(r for r in plan["rows"] if r["offload"] == "params nvme")
    if not row["fits"]["all"]:
        print(f"zero-mem says the row does not fit: {row['short']}", file=sys.stderr)
        return 1
    per_rank = row["per_gpu"]["total"] + (row["per_node"]["host"] + row["per_node"]["pinned"]) / 2
    # The row's keys (zero-mem sizes offload_param.buffer_size to the largest shard).
    for dotted, value in row["keys"].items():
        section = config
        *path, last = dotted.split(".")
        for key in path:
            section = section.setdefault(key, {})
        section[last] = value
    config_file.write_text(json.dumps(config, indent=1))

    began = time.time()
    job = subprocess.run(
        [str(args.build / "tools/zero-run/zero-run"), "-n", "2", "--", PYTHON,
         str(ROOT / "bench/frontend_scale_job.py"), str(weights), str(config_file), str(saved),
         "--steps", str(args.steps), "--seq", str(args.seq)],
        env=env, capture_output=True, text=True)
    wall = time.time() - began
    if job.returncode != 0 or "RESULT " not in job.stdout:
        print(job.stdout[-4000:], job.stderr[-8000:], sep="\n", file=sys.stderr)
        return 1
    result = json.loads(job.stdout.split("RESULT ", 1)[1].splitlines()[0])

    # The saved directory in one process, in bf16 as zero computed, on the evaluation batch.
    def reload(dtype: str) -> float:
        check = subprocess.run(
            [PYTHON, "-c", (
                "import json, sys, torch\n"
                "from transformers import AutoModelForCausalLM\n"
                "model = AutoModelForCausalLM.from_pretrained(sys.argv[1], "
                "dtype=getattr(torch, sys.argv[3]))\n"
                "ids = torch.tensor(json.loads(sys.argv[2]))\n"
                "with torch.no_grad():\n"
                "    print('LOSS', float(model(input_ids=ids, labels=ids).loss))\n"),
             str(saved), json.dumps(result["eval_ids"]), dtype],
            env=env, capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(check.stderr[-8000:])
        return float(check.stdout.split("LOSS ", 1)[1].split()[0])

    reloaded = reload("bfloat16")
    saved_bytes = sum(f.stat().st_size for f in saved.iterdir())
    shutil.rmtree(swap, ignore_errors=True)
    shutil.rmtree(saved, ignore_errors=True)

    peaks = result["peak_bytes"]
    ratios = [p / per_rank for p in peaks]
    lines = [
        f"# bench/frontend_scale.py, "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}",
        f"# machine: {os.cpu_count()} cores, {memory / GIB:.2f} GiB available at the start, "
        f"{free_disk / GIB:.2f} GiB free disk under {work}",
        f"# command: zero-run -n 2 -- python bench/frontend_scale_job.py {weights} {config_file} "
        f"{saved} --steps {args.steps} --seq {args.seq}",
        f"# config: {json.dumps(config, separators=(',', ':'))}",
        "",
        f"model: {plan['model']['description']}",
        "route: zero.zero.Init + from_pretrained (no weights made), zero.initialize reading the "
        "shards (each rank its part), 2 CPU ranks, stage 3, parameters and optimizer on NVMe",
        "",
        "rank  peak resident  zero-mem --front-end predicts  ratio",
    ]
    for rank, (peak, ratio) in enumerate(zip(peaks, ratios)):
        lines.append(f"{rank:>4}  {peak / GIB:10.2f} GiB  {per_rank / GIB:26.2f} GiB  "
                     f"{ratio:5.2f}x")
    lines += ["", "step  seconds   loss (mean of the ranks)"]
    for number, step in enumerate(result["steps"], 1):
        lines.append(f"{number:>4}  {step['seconds']:7.1f}  {step['loss']:.4f}")
    times = result["times"]
    lines += [
        "",
        f"zero.initialize (build and load by shard): {times['initialize']:.1f} s; evaluation: "
        f"{times['evaluation']:.1f} s; save_pretrained (bf16, streamed): "
        f"{times['save_pretrained']:.1f} s, {saved_bytes / 1e9:.2f} GB written",
        f"evaluation loss: zero {result['eval_loss']:.6f}; the saved directory through "
        f"from_pretrained in one process (bf16): {reloaded:.6f}",
        f"wall time of the job: {wall:.0f} s",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "frontend_scale.txt").write_text(text)
    (args.out / "frontend_scale.json").write_text(json.dumps({
        "model": plan["model"], "row": {k: row[k] for k in ("per_gpu", "per_node", "keys")},
        "predicted_per_rank": per_rank, "peak_bytes": peaks, "ratios": ratios,
        "steps": result["steps"], "times": times, "eval_loss": result["eval_loss"],
        "reloaded_eval_loss": reloaded, "wall_seconds": wall,
        "memory_report": result["memory_report"]}, indent=1) + "\n")
    ok = all(r <= 1.25 for r in ratios) and abs(reloaded - result["eval_loss"]) <= 1e-5 * abs(
        reloaded)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
