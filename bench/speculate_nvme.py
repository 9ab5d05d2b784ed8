#!/usr/bin/env python3
"""The bigger-than-memory step with and without super_offload, measured (bench/offload.sh,
OFFLOAD_BENCH=bigger, calls it).

zero-train trains a Llama-shaped model (default llama-3.2-1b, random initialisation) at stage 3
in bf16 on one rank with its parameters and its optimizer state on NVMe (bench/configs/scale.json,
no gradient clipping), once with the offloaded step after backward and once with
offload_optimizer.super_offload, and reports each step's forward, backward and engine step, the
median over the steps after the first (which also writes the initial state), and

    step with super_offload / max(forward + backward, the step alone)

where forward + backward and the step alone are those of the run without it (its backward
does not share the disk with the optimizer). Each step's disk bytes (the process's read_bytes and
write_bytes between step lines) give its I/O floor, read / R + write / W at the rates zero-bench
aio measures on the swap directory first (1 MiB x 8): the step can be no shorter on this disk,
overlapped or not. The engine's wall_clock_breakdown lines for super_offload (the optimizer's
time in backward, the counts) are kept beside the table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scale import disk_rates, machine_lines, proc_field

ROOT = Path(__file__).resolve().parent.parent


def train(build, swap, model, steps, seq, super_offload, rates, params, sub_group):
    config = json.loads((ROOT / "bench/configs/scale.json").read_text())
    zero = config["zero_optimization"]
    zero["offload_param"]["device"] = params
    zero["sub_group_size"] = sub_group
    zero["offload_optimizer"]["nvme_path"] = str(swap)
    zero["offload_param"]["nvme_path"] = str(swap)
    # Llama 3.2's tied embedding (262M elements) is one shard: the read buffers take it whole.
    zero["offload_param"]["buffer_size"] = 3e8
    zero["offload_optimizer"]["super_offload"] = super_offload
    config["wall_clock_breakdown"] = True
    swap.mkdir(parents=True, exist_ok=True)
    path = swap / "run.json"
    path.write_text(json.dumps(config))
    metrics = swap / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    command = [str(build / "tools/zero-train/zero-train"), "--config", str(path), "--model", model,
               "--seq", str(seq), "--steps", str(steps), "--device", "1",
               "--activation-checkpointing", "--data", str(ROOT / "data/fortunes.txt"),
               "--val-fraction", "0", "--no-progress", "--metrics", str(metrics)]
    log = swap / "train.log"
    start = time.time()
    io = {}  # steps seen -> (read_bytes, write_bytes) when the count was first seen
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            seen = 0
            if metrics.exists():
                seen = sum(1 for line in open(metrics) if '"kind":"train"' in line)
            read = proc_field(proc.pid, "io", "read_bytes")
            if seen not in io and read is not None:
                io[seen] = (read, proc_field(proc.pid, "io", "write_bytes"))
            time.sleep(0.2)
    wall = time.time() - start
    text = log.read_text()
    log.unlink()
    if proc.returncode != 0:
        sys.stderr.write(text[-4000:])
        raise SystemExit(f"speculate_nvme.py: zero-train failed ({proc.returncode}): "
                         + " ".join(command))
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows = [r for r in rows if r.get("kind") == "train"]
    for k, r in enumerate(rows, start=1):
        if k - 1 in io and k in io:
            r["read_bytes"] = io[k][0] - io[k - 1][0]
            r["write_bytes"] = io[k][1] - io[k - 1][1]
            r["io_floor_s"] = r["read_bytes"] / (rates[0] * 1e9) + \
                r["write_bytes"] / (rates[1] * 1e9)
    notes = [line.split("] ", 2)[-1] for line in text.splitlines() if "super_offload:" in line]
    metrics.unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    return command, config, rows, notes, wall


def median(rows, key):
    return statistics.median(r[key] for r in rows[1:] or rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build", type=Path)
    parser.add_argument("--swap", default=ROOT / ".swap-bench", type=Path)
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--steps", default=4, type=int)
    parser.add_argument("--seq", default=64, type=int)
    parser.add_argument("--params", default="nvme", choices=("nvme", "none"),
                        help="offload_param.device (none: the compute shards in memory)")
    parser.add_argument("--sub-group", default=5e7, type=float,
                        help="zero_optimization.sub_group_size (elements per step group)")
    parser.add_argument("--out", default=ROOT / "bench/results/offload_bigger", type=Path)
    args = parser.parse_args()

    args.swap.mkdir(parents=True, exist_ok=True)
    rates = disk_rates(args.build / "tools/zero-bench/zero-bench", args.swap.resolve(), "1G")[:2]
    runs = {}
    for super_offload in (False, True):
        runs[super_offload] = train(args.build.resolve(), args.swap.resolve(), args.model,
                                    args.steps, args.seq, super_offload, rates, args.params,
                                    args.sub_group)
        sys.stderr.write(json.dumps(runs[super_offload][2]) + "\n")
    plain_rows, spec_rows = runs[False][2], runs[True][2]
    compute = median(plain_rows, "forward_s") + median(plain_rows, "backward_s")
    alone = median(plain_rows, "engine_step_s")
    bound = max(compute, alone)
    cores = os.cpu_count()
    text = [f"# bench/speculate_nvme.py, {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}",
            *machine_lines(args.build),
            f"# swap directory {args.swap}",
            f"# model {args.model}, stage 3, bf16, "
            f"{'parameters and optimizer' if args.params == 'nvme' else 'optimizer'} on NVMe, "
            f"step groups of {args.sub_group:.3g} elements, 1 rank, "
            f"sequence {args.seq}, activation checkpointing, {args.steps} steps (medians over "
            f"steps 2-{args.steps}); the target is step <= 1.15 x max(forward + backward, the "
            f"step alone)",
            f"# disk: zero-bench aio (1 MiB x 8) {rates[0]:.2f} GB/s read, {rates[1]:.2f} GB/s "
            f"write"]
    for super_offload, (command, config, rows, notes, wall) in runs.items():
        text.append("")
        text.append(f"# {'super_offload' if super_offload else 'step after backward'}: "
                    + " ".join(command))
        text.append("# config: " + json.dumps(config, separators=(",", ":")))
        text.append("step  seconds  forward  backward  engine step   loss  read GB  write GB  "
                    "I/O floor s")
        for r in rows:
            line = (f"{r['step']:>4} {r['step_time_s']:>8.2f} {r['forward_s']:>8.2f} "
                    f"{r['backward_s']:>9.2f} {r['engine_step_s']:>12.2f} {r['loss']:>6.3f}")
            if "io_floor_s" in r:
                line += (f" {r['read_bytes'] / 1e9:>8.2f} {r['write_bytes'] / 1e9:>9.2f} "
                         f"{r['io_floor_s']:>12.2f}")
            text.append(line)
        text.append(f"median {median(rows, 'step_time_s'):.2f} s a step; wall time {wall:.0f} s")
        text.extend("  " + n for n in notes[-2:])
    step_plain = median(plain_rows, "step_time_s")
    step_spec = median(spec_rows, "step_time_s")
    text.append("")
    text.append(f"forward + backward {compute:.2f} s, the step alone {alone:.2f} s "
                f"(the run without super_offload)")
    text.append(f"step after backward  {step_plain:.2f} s = {step_plain / bound:.3f} x "
                f"max(forward + backward, step alone)")
    text.append(f"super_offload        {step_spec:.2f} s = {step_spec / bound:.3f} x "
                f"(target <= 1.15); its step after backward {median(spec_rows, 'engine_step_s'):.2f}"
                f" s, its forward + backward "
                f"{median(spec_rows, 'forward_s') + median(spec_rows, 'backward_s'):.2f} s")
    floors = {}
    for super_offload, rows in ((False, plain_rows), (True, spec_rows)):
        if all("io_floor_s" in r for r in rows[1:] or rows):
            floors[super_offload] = median(rows, "io_floor_s")
    if len(floors) == 2:
        text.append(f"I/O floor {floors[False]:.2f} s a step without super_offload, "
                    f"{floors[True]:.2f} s with it: the steps are {step_plain / floors[False]:.3f}x"
                    f" and {step_spec / floors[True]:.3f}x their floors")
    out = "\n".join(text) + "\n"
    sys.stdout.write(out)
    args.out.with_suffix(".txt").write_text(out)
    record = {"model": args.model, "steps_after_backward": plain_rows,
              "steps_super_offload": spec_rows, "forward_backward_s": compute,
              "step_alone_s": alone,
              "after_backward_s": step_plain, "super_offload_s": step_spec,
              "ratio_after_backward": step_plain / bound, "ratio_super_offload": step_spec / bound,
              "disk_read_gbps": rates[0], "disk_write_gbps": rates[1],
              "io_floor_after_backward_s": floors.get(False),
              "io_floor_super_offload_s": floors.get(True)}
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
