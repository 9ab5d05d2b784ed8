#!/usr/bin/env python3
"""Bigger than memory, measured: the largest Llama-shaped model zero-mem says fits this
machine's memory and free disk, trained a few steps on the CPU device with everything it
needs swapped to NVMe, beside the prediction.

bench/scale.sh runs it; see there for the arguments. It
  1. measures the disk under SWAP_DIR with zero-bench aio (read and write GB/s);
  2. asks zero-mem --device cpu, for each candidate model from the largest down, whether a
     stage-3 row fits the memory available now and the free disk (with the disk's measured
     rates), and takes the largest model that has one, on zero-mem's recommended row;
  3. trains it with zero-train (--device 1, activation checkpointing) and samples the process's
     resident memory and its disk bytes (/proc/PID/status, /proc/PID/io) at every step line;
  4. writes bench/results/scale.txt (a table) and scale.json: parameters, bytes per tier
     predicted and reserved, peak resident memory against the prediction, each step's time,
     its disk bytes and the I/O floor (its read bytes over the read rate plus its write bytes
     over the write rate: one disk does one at a time).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

GIB = 1 << 30


def meminfo(key):
    for line in open("/proc/meminfo"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def cgroup_limit():
    """The cgroup v2 memory limit of this process, or None."""
    try:
        rel = open("/proc/self/cgroup").read().strip().split("::")[-1]
        text = open(f"/sys/fs/cgroup{rel}/memory.max").read().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None


def proc_field(pid, name, key):
    try:
        for line in open(f"/proc/{pid}/{name}"):
            if line.startswith(key + ":"):
                value = int(line.split()[1])
                return value * 1024 if name == "status" else value
    except OSError:
        pass
    return None


def run(cmd, **kw):
    print("+ " + " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, text=True, **kw)


def machine_lines(build):
    """bench/machine.sh's header lines: the machine, and the kernels of the CPU layers' BLAS."""
    bench = Path(build) / "tools/zero-bench/zero-bench"
    return subprocess.run(["bash", str(Path(__file__).parent / "machine.sh"), str(bench)],
                          capture_output=True, text=True).stdout.splitlines()


def disk_rates(bench, swap, size):
    """zero-bench aio's median read and write GB/s at 1 MiB x 8 (the engine's defaults)."""
    out = swap / "aio.jsonl"
    out.unlink(missing_ok=True)
    run([bench, "aio", swap, "--size", size, "--block-sizes", "1M", "--queue-depths", "8",
         "--repeats", "3", "--fio", "no", "--json", out])
    line = json.loads(out.read_text().splitlines()[-1])
    out.unlink()
    return float(line["read_GBps"]), float(line["write_GBps"]), line


def plan(zmem, config, model, seq, cpu_mem, nvme, rates):
    out = subprocess.run(
        [str(zmem), "--device", "cpu", "--ranks-per-node", "1", "--config", str(config),
         "--model", model, "--seq", str(seq), "--stage", "3", "--activation-checkpointing",
         "--cpu-mem", str(cpu_mem), "--nvme", str(nvme), "--nvme-read-gbps", str(rates[0]),
         "--nvme-write-gbps", str(rates[1]), "--json"],
        check=True, text=True, capture_output=True).stdout
    return json.loads(out)


def tier_sums(row):
    sums = {"device": 0, "pinned": 0, "host": 0, "nvme": 0}
    for arena in row["arenas"]:
        sums[arena["tier"]] += arena["capacity"]
    sums["device"] += row["scratch"]["device"]
    sums["host"] += row["scratch"]["host"]
    return sums


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--swap", default=".swap-scale")
    ap.add_argument("--models", nargs="+",
                    default=["llama-3.1-8b", "mistral-7b", "llama-3.2-3b", "llama-3.2-1b"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--config", default="bench/configs/scale.json")
    ap.add_argument("--aio-size", default="2G")
    ap.add_argument("--disk-margin", default=2 * GIB, type=int,
                    help="bytes of the free disk left aside (logs, the data, the filesystem)")
    ap.add_argument("--memory-margin", default=2 * GIB, type=int,
                    help="bytes of the available memory left aside (the program itself, its "
                         "libraries and thread stacks, the rest of the machine)")
    ap.add_argument("--out", default="bench/results/scale")
    a = ap.parse_args()

    root = Path(__file__).resolve().parent.parent
    os.chdir(root)
    build = Path(a.build)
    bench, zmem = build / "tools/zero-bench/zero-bench", build / "tools/zero-mem/zero-mem"
    train = build / "tools/zero-train/zero-train"
    for program in (bench, zmem, train):
        if not program.exists():
            sys.exit(f"bench/scale.py: {program} is missing; build it first (make build)")
    swap = Path(a.swap).resolve()
    swap.mkdir(parents=True, exist_ok=True)

    # What this machine has now.
    available = meminfo("MemAvailable")
    limit = cgroup_limit()
    cpu_mem = (min(available, limit) if limit else available) - a.memory_margin
    rates = disk_rates(bench, swap, a.aio_size)[:2]
    free_disk = shutil.disk_usage(swap).free
    nvme = free_disk - a.disk_margin
    print(f"machine: {os.cpu_count()} cores, {meminfo('MemTotal') / GIB:.1f} GiB "
          f"({cpu_mem / GIB:.1f} available beyond the margin), {free_disk / GIB:.1f} GiB free under {swap}, "
          f"disk {rates[0]:.2f} GB/s read, {rates[1]:.2f} GB/s write", flush=True)

    # The config with the swap directory.
    config = json.loads(Path(a.config).read_text())
    for section in ("offload_optimizer", "offload_param"):
        config["zero_optimization"].setdefault(section, {})["nvme_path"] = str(swap)
    base = swap / "base.json"
    base.write_text(json.dumps(config, indent=2))

    # The largest candidate with a row that fits.
    chosen = None
    for model in a.models:
        p = plan(zmem, base, model, a.seq, cpu_mem, nvme, rates)
        if p["recommended"] is not None:
            chosen = (model, p, p["rows"][p["recommended"]])
            break
        print(f"{model}: nothing fits ({p['model']['params'] / 1e9:.2f}B parameters)", flush=True)
    if chosen is None:
        sys.exit("bench/scale.py: no candidate fits this machine")
    model, p, row = chosen
    print(f"{model}: {p['model']['params'] / 1e9:.3f}B parameters, {row['offload']}", flush=True)
    for key, value in row["keys"].items():
        node = config
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    run_config = swap / "run.json"
    run_config.write_text(json.dumps(config, indent=2))

    # Train, sampling memory and disk bytes at each step line.
    metrics = swap / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    log = swap / "train.log"
    cmd = [str(train), "--config", str(run_config), "--model", model, "--seq", str(a.seq),
           "--steps", str(a.steps), "--device", "1", "--activation-checkpointing",
           "--data", "data/fortunes.txt", "--val-fraction", "0", "--no-progress",
           "--metrics", str(metrics)]
    print("+ " + " ".join(cmd), flush=True)
    start = time.time()
    samples = []  # (seconds, steps seen, rss, hwm, read_bytes, write_bytes)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        seen = -1
        while proc.poll() is None:
            steps = 0
            if metrics.exists():
                steps = sum(1 for line in open(metrics) if '"kind":"train"' in line)
            hwm = proc_field(proc.pid, "status", "VmHWM")
            if steps != seen and hwm is not None:
                samples.append((time.time() - start, steps,
                                proc_field(proc.pid, "status", "VmRSS"), hwm,
                                proc_field(proc.pid, "io", "read_bytes"),
                                proc_field(proc.pid, "io", "write_bytes")))
                seen = steps
            elif hwm is not None:
                samples[-1] = samples[-1][:3] + (hwm,) + samples[-1][4:]
            time.sleep(0.2)
    wall = time.time() - start
    if proc.returncode != 0:
        print(open(log).read()[-4000:])
        sys.exit(f"bench/scale.py: zero-train exited {proc.returncode} (log: {log})")
    peak_rss = max(s[3] for s in samples)

    lines = [json.loads(line) for line in open(metrics)]
    steps = [line for line in lines if line.get("kind") == "train"]
    summary = [line for line in lines if line.get("kind") == "summary"][-1]
    predicted = tier_sums(row)
    activations = row["per_gpu"]["activations"]
    predicted_resident = row["per_gpu"]["total"] + row["per_node"]["pinned"] + row["per_node"]["host"]

    # Per step: its time, its disk bytes (between consecutive step lines) and the floor.
    per_step = []
    by_steps = {s[1]: s for s in samples}
    for k, step in enumerate(steps, start=1):
        before, after = by_steps.get(k - 1), by_steps.get(k)
        entry = {"step": step["step"], "seconds": step["step_time_s"], "loss": step["loss"],
                 "forward_s": step["forward_s"], "backward_s": step["backward_s"],
                 "engine_step_s": step["engine_step_s"]}
        if before and after and before[4] is not None:
            read, write = after[4] - before[4], after[5] - before[5]
            entry.update(read_bytes=read, write_bytes=write,
                         io_floor=read / (rates[0] * 1e9) + write / (rates[1] * 1e9))
        per_step.append(entry)

    result = {
        "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "machine": {"cores": os.cpu_count(), "memory": meminfo("MemTotal"),
                    "available": cpu_mem, "free_disk": free_disk,
                    "read_gbps": rates[0], "write_gbps": rates[1]},
        "model": model, "params": p["model"]["params"], "row": row["offload"],
        "keys": row["keys"], "config": config, "command": cmd,
        "training_state_bytes": p["model"]["params"] * 16,
        "predicted": {"tiers": predicted, "activations_and_copies": activations,
                      "resident": predicted_resident},
        "reserved": summary.get("memory_reserved_bytes"),
        "peak_rss": peak_rss, "rss_over_prediction": peak_rss / predicted_resident,
        "steps": per_step, "wall_seconds": wall,
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    Path(str(out) + ".json").write_text(json.dumps(result, indent=2) + "\n")

    g = lambda b: f"{b / GIB:.2f} GiB"
    text = [f"# bench/scale.sh, {result['date']}",
            *machine_lines(build),
            f"# memory: {g(meminfo('MemTotal'))} "
            f"({g(cpu_mem)} available at the start, beyond a {g(a.memory_margin)} margin), {g(free_disk)} free disk under the swap "
            f"directory; zero-bench aio (1 MiB x 8): {rates[0]:.2f} GB/s read, "
            f"{rates[1]:.2f} GB/s write",
            f"# command: {' '.join(cmd)}",
            f"# config: {json.dumps(config, separators=(',', ':'))}",
            "",
            f"model: {model}, {p['model']['params'] / 1e9:.3f}B parameters; zero-mem's row: "
            f"stage 3, {row['offload']}, activation checkpointing",
            f"training state (bf16 parameters and gradients, fp32 masters and two fp32 "
            f"moments, 16 bytes a parameter): {g(result['training_state_bytes'])}, "
            f"{result['training_state_bytes'] / meminfo('MemTotal'):.2f}x this machine's memory",
            "",
            "tier      predicted      reserved (zero-train's summary)"]
    for tier in ("device", "pinned", "host", "nvme"):
        got = (summary.get("memory_reserved_bytes") or {}).get(tier, 0)
        text.append(f"{tier:<8} {g(predicted[tier]):>12} {g(got):>14}")
    text += ["",
             f"activations and compute copies (declared): {g(activations)}",
             f"resident memory: predicted {g(predicted_resident)} (the device tier, the "
             f"activations and copies, pinned and host), peak {g(peak_rss)}: "
             f"{peak_rss / predicted_resident:.2f}x the prediction",
             "",
             "step  seconds  forward  backward  optimizer   loss   read GiB  write GiB  "
             "I/O floor s  step / floor"]
    for s in per_step:
        line = (f"{s['step']:>4} {s['seconds']:>8.1f} {s['forward_s']:>8.1f} "
                f"{s['backward_s']:>9.1f} {s['engine_step_s']:>10.1f} {s['loss']:>6.3f}")
        if "io_floor" in s:
            line += (f" {s['read_bytes'] / GIB:>10.2f} {s['write_bytes'] / GIB:>10.2f} "
                     f"{s['io_floor']:>12.1f} {s['seconds'] / s['io_floor']:>13.2f}")
        text.append(line)
    text.append("(forward and backward: the passes, stage-3 gathers included; optimizer: the "
                "engine's step, the NVMe groups' reads, Adam and writes; step 1's write bytes "
                "include init's writing of the initial state)")
    text.append(f"\nwall time of the run, init included: {wall:.0f} s")
    Path(str(out) + ".txt").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    for f in (metrics, base, run_config):
        f.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
