#!/usr/bin/env bash
# bench/gpu.sh: zero-train against PyTorch (plain, FSDP2, FSDP2 with CPU offload) on one GPU,
# the same GPT-2 (bench/torch_gpt.py is models/gpt in PyTorch) at the same micro-batch and
# sequence; the figures in bench/results/train_gpu.{txt,jsonl}.
#
#   bench/gpu.sh [BUILD_DIR] [MODELS...]     (default: build, gpt2-124m gpt2-350m gpt2-1.5b)
#
#   bench/gpu.sh build gpt2-124m             one model; the results of the others are kept
#   RUNS="torch-plain torch-fsdp2" bench/gpu.sh build     only these runs
#   DTYPE=fp32 bench/gpu.sh build            PyTorch in fp32 (zero-train refuses: bf16 only on a GPU)
#
# Builds nothing: BUILD_DIR should hold tools/zero-train/zero-train (a CUDA build:
# cmake -B build -DZERO_WITH_CUDA=ON && cmake --build build --target zero-train), or ZERO_TRAIN
# names the zero-train to run (gpu-check's bundle). When it is missing, or a run fails, that
# run's row records the failure (its last error line) and the others go on. PyTorch comes from
# $TORCH_PYTHON. zero-train trains its CUDA GPT in bf16; its CUDA models are bf16 only, so with
# DTYPE=fp32 its rows record zero-train's refusal and only PyTorch's rows run.
#
# Per model, one rank on GPU $GPU (CUDA_VISIBLE_DEVICES), in this order (the PyTorch baselines
# first: what ours is measured against, on the same machine):
#   torch-plain            bench/torch_gpt.py --mode plain (torch.autocast bf16)
#   torch-fsdp2            ... --mode fsdp2 (fully_shard per block and root, bf16 params, fp32 reduce)
#   torch-fsdp2-offload    ... --mode fsdp2-offload (CPUOffloadPolicy: params, grads, AdamW on the CPU)
#   zero-stage0            zero-train --device 2 --config bench/configs/gpu_stage0.json
#   zero-stage3            ... gpu_stage3.json
#   zero-stage3-optcpu     ... gpu_stage3_offload_optimizer.json (offload_optimizer cpu;
#                          super_offload unset, so on where it fits, but with clipping at 1.0
#                          every speculated step is rolled back and speculation stops after 3:
#                          the step after backward, as DeepSpeed's default)
#   zero-stage3-optcpu-super ... gpu_stage3_offload_optimizer_super.json (the same with
#                          super_offload, the CPU step overlapped with backward, and without
#                          clipping: a randomly initialised GPT-2's norm exceeds 1.0 at every
#                          step, each would be rolled back, and speculation would stop after 3)
#   zero-stage3-optcpu-accum ... gpu_stage3_offload_optimizer_accum.json (the super_offload run
#                          with gradient accumulation 4, each window summed on the GPU:
#                          offload_optimizer.accumulate_on_device; its tokens are a window's)
#   zero-stage3-allcpu     ... gpu_stage3_offload_all.json (offload_optimizer and offload_param cpu)
#   deepspeed-stage3       bench/torch_gpt.py --mode deepspeed --deepspeed-config gpu_stage3.json:
#                          DeepSpeed ZeRO-3 on the same model, batches and config file as
#                          zero-stage3 ($DS_PYTHON, default $TORCH_PYTHON, must have deepspeed)
#   deepspeed-stage3-optcpu  ... gpu_stage3_offload_optimizer.json (DeepSpeedCPUAdam), as
#                          zero-stage3-optcpu's
# The configs: bf16, AdamW (lr 3e-4, betas 0.9 0.95, weight decay 0.1), clipping 1.0,
# wall_clock_breakdown on; the micro-batch and sequence per model below go to every side as
# --micro-batch and --seq. Data: data/fortunes.txt as bytes for all, the same sequences each step.
# Per phase: zero-train's runs record the mean forward, backward (waited for on the GPU) and
# engine step of the timed steps from its --metrics, and the engine's own breakdown line of the
# last step (reductions, stage-3 gathers, optimizer, what ran concurrently with compute): the
# table prints them under each row.
#
# Measured alike on both sides: WARMUP steps untimed, then STEPS steps; tokens/s = tokens per step
# / mean step time (zero-train's steps from its --metrics lines; torch_gpt.py synchronises the
# device around each step). MFU: 6N + 12LCT FLOPs per token (torch_gpt.py's flops_per_token: N
# without the position embedding) over the GPU's dense bf16 peak (torch_gpt.py's table, or
# PEAK_TFLOPS). Memory: "allocator peak" is torch.cuda.max_memory_allocated for PyTorch and the
# engine's device arenas for zero-train (its summary; the model's activations are not in them);
# "GPU used" is nvidia-smi's memory.used, sampled every 100 ms, its maximum less the idle value
# before the run: the one column measured the same way for both.
#
# Writes, in RESULTS_DIR (default bench/results),
#   train_gpu.jsonl   a line per run (ok or not), with its exact command
#   train_gpu.txt     the commands, then a table per model and the ratios ours / PyTorch of
#                     tokens/s (ours / FSDP2-offload first)
# both after every run, so a call cut short (gpu-check's budget) leaves the rows measured so far.
# The earlier lines of the runs this call makes (model, dtype and run) are replaced; the others
# stay, so the runs can be split across calls, one run a call if need be (gpu-check does).
# Environment: STEPS (10), WARMUP (3), RUN_TIMEOUT seconds per run (300), GPU (0), DTYPE (bf16),
# RUNS (all), TORCH_PYTHON (python3), DS_PYTHON (the Python with deepspeed), PEAK_TFLOPS, TORCH_FLAGS (more torch_gpt.py flags, e.g.
# --compile), MICRO_BATCH and SEQ (override the table below), ZERO_TRAIN (the zero-train to run),
# RESULTS_DIR (bench/results).
# Exit status: 1 when a run failed (every run is still attempted and recorded), else 0.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build}
[[ $# -gt 0 ]] && shift
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(gpt2-124m gpt2-350m gpt2-1.5b)

steps=${STEPS:-10}
warmup=${WARMUP:-3}
run_timeout=${RUN_TIMEOUT:-300}
gpu=${GPU:-0}
dtype=${DTYPE:-bf16}
torch_python=${TORCH_PYTHON:-python3}
all_runs=(torch-plain torch-fsdp2 torch-fsdp2-offload deepspeed-stage3 deepspeed-stage3-optcpu
          zero-stage0 zero-stage3 zero-stage3-optcpu zero-stage3-optcpu-super
          zero-stage3-optcpu-accum zero-stage3-allcpu)
ds_python=${DS_PYTHON:-$torch_python}
read -r -a runs <<<"${RUNS:-${all_runs[*]}}"
train=${ZERO_TRAIN:-$build/tools/zero-train/zero-train}
data=data/fortunes.txt
results=${RESULTS_DIR:-bench/results}
jsonl=$results/train_gpu.jsonl
case $dtype in bf16 | fp32) ;; *) echo "bench/gpu.sh: DTYPE is bf16 or fp32, not $dtype" >&2; exit 1 ;; esac
for r in "${runs[@]}"; do
  [[ " ${all_runs[*]} " == *" $r "* ]] || { echo "bench/gpu.sh: unknown run '$r' in RUNS" \
    "(known: ${all_runs[*]})" >&2; exit 1; }
done

# Per model: micro-batch and sequence (one rank; the same on both sides). gpt2-1.5b's 4 x 1024
# takes 45.5 GiB at stage 0 (zero-mem); 10 x 1024 fills an 80 GiB GPU (76.0 GiB): MICRO_BATCH=10.
settings() {
  case $1 in
    tiny) echo "16 64" ;;
    gpt2-124m | gpt2-350m) echo "8 1024" ;;
    gpt2-774m | gpt2-1.5b) echo "4 1024" ;;
    *) echo "bench/gpu.sh: no settings for model '$1'" >&2; return 1 ;;
  esac
}
for model in "${models[@]}"; do settings "$model" >/dev/null; done

work=$(mktemp -d)
sampler=
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$results"
export CUDA_VISIBLE_DEVICES=$gpu ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn} PYTHONDONTWRITEBYTECODE=1

# The records of earlier calls stay, but those of the runs this call makes.
: >"$work/kept.jsonl"
if [[ -f $jsonl ]]; then
  python3 - "$jsonl" "$dtype" "${runs[*]}" "${models[@]}" >"$work/kept.jsonl" <<'PY'
import json, sys
path, dtype, runs, models = sys.argv[1], sys.argv[2], set(sys.argv[3].split()), set(sys.argv[4:])
for line in open(path):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if not (r.get("model") in models and r.get("dtype") == dtype and r.get("run") in runs):
        print(json.dumps(r))
PY
fi
cp "$work/kept.jsonl" "$jsonl"

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "$gpu" 2>/dev/null | head -1 || true)
gpu_name=${gpu_name:-unknown GPU}

# nvidia-smi's memory.used, MiB, sampled while a run lasts: start_sampler; ...; stop_sampler
# sets used_mib to the maximum less the value before the run (empty without nvidia-smi).
start_sampler() {
  : >"$work/mem"
  idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu" 2>/dev/null |
         head -1 || true)
  if [[ -n $idle ]]; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu" -lms 100 \
      >"$work/mem" 2>/dev/null &
    sampler=$!
  fi
}
stop_sampler() {  # sets used_mib
  used_mib=
  if [[ -n $sampler ]]; then
    kill "$sampler" 2>/dev/null || true
    wait "$sampler" 2>/dev/null || true
    sampler=
    used_mib=$(awk -v idle="$idle" '$1 ~ /^[0-9]+$/ && $1 > max {max = $1}
                                    END {if (max != "") print max - idle}' "$work/mem")
  fi
}

# Runs "$@" under the timeout with its output in $work/log; sets rc and used_mib.
measure() {
  start_sampler
  rc=0
  timeout --kill-after=30 "$run_timeout" "$@" >"$work/log" 2>&1 || rc=$?
  stop_sampler
  if [[ $rc -ne 0 ]]; then
    echo "  failed (exit $rc); the end of its output:"
    tail -5 "$work/log" | sed 's/^/    /'
  fi
}

# A run's record (ok or failed) onto the JSON lines; prints its table row.
record() {  # side run model batch seq command
  python3 - "$@" "$rc" "${used_mib:-}" "$dtype" "$steps" "$warmup" "$gpu_name" \
    "$work/log" "$work/metrics.jsonl" "$jsonl" "${PEAK_TFLOPS:-}" <<'PY'
import json, sys
sys.path.insert(0, "bench")
import torch_gpt  # flops_per_token, peak_tflops_for, SIZES (it imports torch only to train)

(side, run, model, batch, seq, command, rc, used_mib, dtype, steps, warmup, gpu_name, log,
 metrics, out, peak_override) = sys.argv[1:17]
batch, seq, rc, steps, warmup = int(batch), int(seq), int(rc), int(steps), int(warmup)
r = {"side": side, "run": run, "model": model, "dtype": dtype, "batch": batch, "seq": seq,
     "tokens_per_step": batch * seq, "gpu": gpu_name, "command": command, "exit": rc,
     "gpu_used_bytes": int(float(used_mib) * 2**20) if used_mib else None}
lines = open(log, errors="replace").read().splitlines()
peak = float(peak_override) if peak_override else torch_gpt.peak_tflops_for(gpu_name)
layers, heads, channels, positions, vocab = torch_gpt.SIZES[model]
fpt = torch_gpt.flops_per_token(layers, channels, positions, vocab, seq)
error = None
if rc == 0 and side == "torch":
    found = [l for l in lines if l.startswith("{")]
    if found:
        t = json.loads(found[-1])
        r.update({"tokens_per_s": t["tokens_per_s"], "step_time_s": t["step_time_s"],
                  "mfu": t["mfu"], "peak_mem_bytes": t["peak_mem_bytes"],
                  "params": t["params"], "losses": t.get("losses"), "torch_gpt": t})
    else:
        error = "no JSON line in torch_gpt.py's output"
elif rc == 0:
    train, summary = [], None
    try:
        for l in open(metrics):
            m = json.loads(l)
            if m.get("kind") == "train":
                train.append(m)
            elif m.get("kind") == "summary":
                summary = m
    except (OSError, ValueError) as e:
        error = f"zero-train's metrics: {e}"
    timed = [m["step_time_s"] for m in train if m["step"] > warmup]
    if error is None and (not timed or summary is None):
        error = f"zero-train's metrics hold {len(train)} steps and no summary" \
            if summary is None else f"zero-train's metrics hold only {len(train)} steps"
    if error is None:
        step_time = sum(timed) / len(timed)
        device = summary["memory_peak_bytes"][0:5]  # rank 0, tier device, every kind
        phases = {k: sum(m[k] for m in train if m["step"] > warmup) / len(timed)
                  for k in ("forward_s", "backward_s", "engine_step_s")}
        engine = [l.split("] ", 3)[-1] for l in lines
                  if "time per step (ms)" in l or "concurrent with compute" in l]
        # A step is a window of the config's gradient_accumulation_steps micro-batches.
        r["tokens_per_step"] = batch * seq * int(summary.get("accumulation", 1))
        r.update({"tokens_per_s": r["tokens_per_step"] / step_time, "step_time_s": step_time,
                  "peak_mem_bytes": int(sum(device)), "params": summary["parameters"],
                  "phases": phases, "engine_breakdown": engine[-2:], "losses":
                  [m["loss"] for m in train], "zero_train": summary})
        r["mfu"] = r["tokens_per_s"] * fpt / (peak * 1e12) if peak else None
else:
    error = next((l.strip() for l in reversed(lines)
                  if "error" in l.lower() or "zero-train:" in l or "torch_gpt.py:" in l
                  or "Error" in l), None)
    if error is None:
        error = next((l.strip() for l in reversed(lines) if l.strip()), "no output")
    if rc == 124 or rc == 137:
        error = f"timed out; {error}"
    if rc == 127:
        error = f"not found: {error}"
r["ok"] = error is None
if error is not None:
    r["error"] = error[:300]
expected = torch_gpt.parameter_count(layers, channels, positions, vocab)
if r.get("params") not in (None, expected):
    r["note"] = f"{r['params']} parameters, torch_gpt.py's formula says {expected}"
with open(out, "a") as f:
    f.write(json.dumps(r) + "\n")
if r["ok"]:
    print(f"  {r['tokens_per_s']:.0f} tokens/s, {1e3 * r['step_time_s']:.1f} ms per step")
else:
    print(f"  recorded as failed: {r['error']}")
PY
}

# The table (train_gpu.txt) from every record so far: written after each run.
write_table() {
  python3 - "$jsonl" "$results/train_gpu.txt" "$gpu_name" "$steps" "$warmup" <<'PY'
import json, sys
from datetime import datetime, timezone
sys.path.insert(0, "bench")
import torch_gpt

path, txt, gpu_name, steps, warmup = sys.argv[1:6]
records = [json.loads(l) for l in open(path) if l.strip()]
order = ["zero-stage0", "zero-stage3", "zero-stage3-optcpu", "zero-stage3-optcpu-super",
         "zero-stage3-optcpu-accum", "zero-stage3-allcpu",
         "torch-plain", "torch-fsdp2", "torch-fsdp2-offload", "deepspeed-stage3",
         "deepspeed-stage3-optcpu"]
label = {"zero-stage0": "ours, stage 0", "zero-stage3": "ours, stage 3",
         "zero-stage3-optcpu": "ours, stage 3 + optimizer on CPU",
         "zero-stage3-optcpu-super": "ours, stage 3 + CPU optimizer, super_offload, no clip",
         "zero-stage3-optcpu-accum":
             "ours, the same accumulating 4, summed on the GPU (accumulate_on_device)",
         "zero-stage3-allcpu": "ours, stage 3 + optimizer + params on CPU",
         "torch-plain": "PyTorch plain", "torch-fsdp2": "PyTorch FSDP2",
         "torch-fsdp2-offload": "PyTorch FSDP2 + CPUOffloadPolicy",
         "deepspeed-stage3": "DeepSpeed ZeRO-3",
         "deepspeed-stage3-optcpu": "DeepSpeed ZeRO-3 + CPU offload (DeepSpeedCPUAdam)"}
short = {"torch-plain": "plain", "torch-fsdp2": "FSDP2", "torch-fsdp2-offload": "FSDP2-offload",
         "deepspeed-stage3": "DeepSpeed-3", "deepspeed-stage3-optcpu": "DeepSpeed-3-offload"}
# Like for like: each of ours against the PyTorch run that keeps the same state in the same place.
ratios = [("zero-stage3-allcpu", "torch-fsdp2-offload"),
          ("zero-stage3-optcpu", "torch-fsdp2-offload"),
          ("zero-stage3-optcpu-super", "torch-fsdp2-offload"),
          ("zero-stage3", "torch-fsdp2"), ("zero-stage0", "torch-plain"),
          ("zero-stage3", "deepspeed-stage3"), ("zero-stage3-optcpu", "deepspeed-stage3-optcpu")]


def size(model):
    layers, _, channels, positions, vocab = torch_gpt.SIZES[model]
    return torch_gpt.parameter_count(layers, channels, positions, vocab)


def gib(b):
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


records.sort(key=lambda r: (size(r["model"]), r["dtype"], order.index(r["run"])))
lines = [f"# zero-train against PyTorch on one GPU, {datetime.now(timezone.utc):%Y-%m-%dT%H:%MZ}",
         f"# GPU: {gpu_name}; {warmup} warm-up steps untimed, then {steps} timed; tokens/s = "
         "tokens per step / mean step time",
         "# MFU: (6 N + 12 L C T) FLOPs per token (N: parameters without wpe) over the GPU's "
         "dense bf16 peak",
         "# allocator peak: torch.cuda.max_memory_allocated, or zero's device arenas (without the "
         "model's activations); GPU used: nvidia-smi memory.used, its maximum less the idle value",
         "# commands (RUN.jsonl: a temporary metrics file):"]
lines += [f"#   {r['command']}" for r in records]
for model, dtype in dict.fromkeys((r["model"], r["dtype"]) for r in records):
    rows = [r for r in records if r["model"] == model and r["dtype"] == dtype]
    by_run = {r["run"]: r for r in rows}
    lines += ["", f"## {model} ({size(model) / 1e6:.1f}M parameters), {dtype}",
              f"{'run':<54} {'batch x seq':>11} {'tokens/step':>11} {'tokens/s':>10} {'MFU':>6} "
              f"{'alloc. peak':>11} {'GPU used':>10}"]
    for r in rows:
        head = f"{label[r['run']]:<54} {str(r['batch']) + ' x ' + str(r['seq']):>11} " \
               f"{r['tokens_per_step']:>11}"
        if r["ok"]:
            mfu = "-" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"
            lines.append(f"{head} {r['tokens_per_s']:>10.0f} {mfu:>6} "
                         f"{gib(r.get('peak_mem_bytes')):>11} {gib(r.get('gpu_used_bytes')):>10}"
                         + (f"  ({r['note']})" if r.get("note") else ""))
            if r.get("losses"):
                lines.append(f"    losses: {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}")
            if r.get("phases"):
                p = r["phases"]
                lines.append(f"    per step: forward {1e3 * p['forward_s']:.1f} ms | backward "
                             f"{1e3 * p['backward_s']:.1f} ms | engine step "
                             f"{1e3 * p['engine_step_s']:.1f} ms")
            for engine_line in r.get("engine_breakdown") or []:
                lines.append(f"    engine: {engine_line}")
        else:
            lines.append(f"{head} failed (exit {r['exit']}): {r['error']}")
    for ours, theirs in ratios:
        a, b = by_run.get(ours), by_run.get(theirs)
        if a is None or b is None:
            continue
        value = f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}" if a["ok"] and b["ok"] else "-"
        lines.append(f"ours / {short[theirs]}: {value} ({label[ours]} against "
                     f"{label[theirs]}, tokens/s)")
    # What offloading the optimizer costs us: its throughput against our own stage 0 (with
    # super_offload, accumulating 4, the target is at least 0.8).
    for offloaded in ("zero-stage3-optcpu", "zero-stage3-optcpu-super",
                      "zero-stage3-optcpu-accum"):
        a, b = by_run.get(offloaded), by_run.get("zero-stage0")
        if a is None or b is None:
            continue
        value = f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}" if a["ok"] and b["ok"] else "-"
        lines.append(f"offload / stage 0: {value} ({label[offloaded]} against "
                     f"{label['zero-stage0']}, tokens/s)")
with open(txt, "w") as f:
    f.write("\n".join(lines) + "\n")
PY
}

status=0
for model in "${models[@]}"; do
  read -r batch seq <<<"$(settings "$model")"
  batch=${MICRO_BATCH:-$batch}
  seq=${SEQ:-$seq}
  for run in "${runs[@]}"; do
    echo "== $model, $run, $batch x $seq, $dtype"
    rm -f "$work/metrics.jsonl"
    case $run in
      zero-*)
        case $run in
          zero-stage0) config=bench/configs/gpu_stage0.json ;;
          zero-stage3) config=bench/configs/gpu_stage3.json ;;
          zero-stage3-optcpu) config=bench/configs/gpu_stage3_offload_optimizer.json ;;
          zero-stage3-optcpu-super)
            config=bench/configs/gpu_stage3_offload_optimizer_super.json ;;
          zero-stage3-optcpu-accum)
            config=bench/configs/gpu_stage3_offload_optimizer_accum.json ;;
          zero-stage3-allcpu) config=bench/configs/gpu_stage3_offload_all.json ;;
        esac
        cmd=("$train" --device 2 --config "$config" --model "$model" --data "$data"
             --micro-batch "$batch" --seq "$seq" --steps $((warmup + steps)) --eval-batches 1
             --set "steps_per_print=$((warmup + steps))" --no-progress
             --metrics "$work/metrics.jsonl")
        [[ $dtype == fp32 ]] && cmd+=(--set bf16.enabled=false)
        if [[ -x $train ]]; then
          ZERO_LOG_LEVEL=info measure "${cmd[@]}"  # the engine's breakdown line
        else
          rc=127 used_mib=
          echo "zero-train: $train is missing (build it: cmake --build $build --target zero-train)" \
            >"$work/log"
          echo "  $train is missing"
        fi
        shown=("${cmd[@]}")
        shown[${#shown[@]} - 1]=RUN.jsonl  # the metrics file, a temporary one
        record zero "$run" "$model" "$batch" "$seq" "${shown[*]}" || status=1
        ;;
      deepspeed-*)
        case $run in
          deepspeed-stage3) config=bench/configs/gpu_stage3.json ;;
          deepspeed-stage3-optcpu) config=bench/configs/gpu_stage3_offload_optimizer.json ;;
        esac
        cmd=("$ds_python" bench/torch_gpt.py --model "$model" --mode deepspeed
             --deepspeed-config "$config" --device cuda --dtype "$dtype" --micro-batch "$batch"
             --seq "$seq" --steps "$steps" --warmup-steps "$warmup" --data "$data" --json
             ${PEAK_TFLOPS:+--peak-tflops "$PEAK_TFLOPS"})
        measure "${cmd[@]}"
        record torch "$run" "$model" "$batch" "$seq" "${cmd[*]}" || status=1
        ;;
      torch-*)
        # TORCH_FLAGS is split into words on purpose: several flags.
        # shellcheck disable=SC2206
        cmd=("$torch_python" bench/torch_gpt.py --model "$model" --mode "${run#torch-}"
             --device cuda --dtype "$dtype" --micro-batch "$batch" --seq "$seq"
             --steps "$steps" --warmup-steps "$warmup" --data "$data" --json
             ${PEAK_TFLOPS:+--peak-tflops "$PEAK_TFLOPS"} ${TORCH_FLAGS:-})
        measure "${cmd[@]}"
        record torch "$run" "$model" "$batch" "$seq" "${cmd[*]}" || status=1
        ;;
    esac
    [[ $rc -eq 0 ]] || status=1
    write_table
  done
done

[[ -f $results/train_gpu.txt ]] || write_table
echo
cat "$results/train_gpu.txt"
exit "$status"
