#!/usr/bin/env bash
# bench/train.sh: zero-train's CPU tokens/s for the reference GPT, the figures in bench/results/.
#
#   bench/train.sh [BUILD_DIR] [MODELS...]      (default: build-cpu, tiny gpt2-124m)
#
# Builds nothing: BUILD_DIR must hold tools/zero-train/zero-train and tools/zero-run/zero-run.
# For each model, ZeRO stages 0-3 on 1 and 2 ranks (zero-run gives each rank the cores / ranks as
# OpenMP threads), with and without activation checkpointing; fp32, AdamW, no offload, trained
# on data/fortunes.txt. tokens/s is the mean over the steps after the first (zero-train's
# summary). Writes
#   bench/results/train_cpu.txt    a table per model, with the machine and the commands
#   bench/results/train_cpu.jsonl  zero-train's summary line of every run, with its settings
# Exit status: the last failing run's, else 0.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
[[ $# -gt 0 ]] && shift
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(tiny gpt2-124m)

train=$build/tools/zero-train/zero-train
run=$build/tools/zero-run/zero-run
results=bench/results
for tool in "$train" "$run"; do
  if [[ ! -x $tool ]]; then
    echo "bench/train.sh: $tool is missing; build it first: cmake --build $build" \
         "--target zero-train zero-run" >&2
    exit 1
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
rm -f "$results/train_cpu.jsonl"

# Per model: micro-batch, sequence, steps.
settings() {
  case $1 in
    tiny) echo "8 64 30" ;;
    gpt2-124m) echo "1 256 6" ;;
    *) echo "1 128 4" ;;
  esac
}

{
  status=0
  echo "# zero-train CPU throughput, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$build/tools/zero-bench/zero-bench"
  echo "# fp32, AdamW, no offload; tokens/s = tokens per step / step time, mean after the first step"
  for model in "${models[@]}"; do
    read -r batch seq steps <<<"$(settings "$model")"
    echo
    echo "## $model: micro-batch $batch x $seq positions per rank, $steps steps"
    echo "# command: $run -n RANKS -- $train --config CONFIG --model $model --data data/fortunes.txt" \
         "--micro-batch $batch --seq $seq --steps $steps --no-progress [--activation-checkpointing]"
    printf '%-6s %-6s %-22s %12s %14s %16s\n' stage ranks "activation ckpt" "tokens/s" \
           "step time (s)" "activations"
    for stage in 0 1 2 3; do
      cat >"$work/config.json" <<JSON
{"train_micro_batch_size_per_gpu": $batch,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "zero_optimization": {"stage": $stage},
 "steps_per_print": 1000}
JSON
      for ranks in 1 2; do
        for ac in no yes; do
          flags=()
          [[ $ac == yes ]] && flags=(--activation-checkpointing)
          rm -f "$work/metrics.jsonl"
          ZERO_LOG_LEVEL=warn "$run" -n "$ranks" -- "$train" --config "$work/config.json" \
            --model "$model" --data data/fortunes.txt --micro-batch "$batch" --seq "$seq" \
            --steps "$steps" --no-progress --metrics "$work/metrics.jsonl" "${flags[@]}" \
            >"$work/log" 2>&1 || { status=$?; tail -5 "$work/log"; continue; }
          summary=$(grep '"kind":"summary"' "$work/metrics.jsonl")
          python3 - "$stage" "$ranks" "$ac" "$summary" "$results/train_cpu.jsonl" <<'PY'
import json, sys
stage, ranks, ac, line, out = sys.argv[1:6]
s = json.loads(line)
s.update({"stage": int(stage), "ranks": int(ranks)})
tokens_per_step = s["tokens"] / s["steps"]
mib = s["activation_bytes"] / 2**20
print(f'{stage:<6} {ranks:<6} {ac:<22} {s["tokens_per_s"]:12.0f} '
      f'{tokens_per_step / s["tokens_per_s"]:14.3f} {mib:13.1f} MiB')
with open(out, "a") as f:
    f.write(json.dumps(s) + "\n")
PY
        done
      done
    done
  done
  exit "$status"
} | tee "$results/train_cpu.txt"
exit "${PIPESTATUS[0]}"
