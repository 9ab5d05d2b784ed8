#!/usr/bin/env bash
# bench/cpu_offload_vs_deepspeed.sh: zero-train against DeepSpeed with the optimizer offloaded to
# the CPU, on CPU ranks, as ratios in one run. The same GPT-2 shape on both sides (gpt2-124m:
# 12 layers x 768, vocabulary 50257), micro-batch 1 x 256 per rank, fp32, AdamW, clipping 1.0,
# ZeRO stages 2 and 3 with offload_optimizer cpu, 2 ranks of 1 thread each:
#   zero:      zero-run -n 2 -- zero-train --model gpt2-124m ...   (its CPU layers)
#   deepspeed: zero-run -n 2 -- python bench/frontend.py --framework deepspeed ...
#              (transformers' GPT2LMHeadModel through deepspeed.initialize, DeepSpeedCPUAdam,
#              torch.distributed on gloo, DS_ACCELERATOR=cpu)
# and zero-train again with OpenBLAS's SSE fallback (OPENBLAS_CORETYPE=Prescott), the kernels
# OpenBLAS 0.3.21 picks by itself on CPUs it does not recognise.
#
#   bench/cpu_offload_vs_deepspeed.sh [BUILD_DIR] [PYTHON]
#       (default: build, build-python-env/bin/python; PYTHON needs torch, transformers and
#       deepspeed: pip install deepspeed==0.19.8 py-cpuinfo ninja)
# Writes bench/results/cpu_offload_vs_deepspeed.txt (the table, with the CPU, the BLAS core and
# the commands) and .jsonl (each run's summary).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build}
python=${2:-$root/build-python-env/bin/python}
train=$build/tools/zero-train/zero-train
zero_run=$build/tools/zero-run/zero-run
bench=$build/tools/zero-bench/zero-bench
for p in "$train" "$zero_run" "$bench"; do
  [[ -x $p ]] || { echo "bench/cpu_offload_vs_deepspeed.sh: $p is missing; build first (make build)" >&2; exit 1; }
done
"$python" -c "import torch, transformers, deepspeed" 2>/dev/null || {
  echo "bench/cpu_offload_vs_deepspeed.sh: $python lacks torch, transformers or deepspeed" >&2
  exit 1
}
unset OPENBLAS_CORETYPE
export OMP_NUM_THREADS=1 DS_ACCELERATOR=cpu ZERO_LOG_LEVEL=warn TRANSFORMERS_VERBOSITY=error
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
steps=${STEPS:-6}
results=bench/results
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$results/cpu_offload_vs_deepspeed.jsonl"

zero_row() {  # STAGE CORE: zero-train's tokens/s and final loss
  cat >"$work/config.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": $1, "offload_optimizer": {"device": "cpu"}},
 "steps_per_print": 1000}
JSON
  OPENBLAS_CORETYPE=$2 "$zero_run" -n 2 -- "$train" --config "$work/config.json" --model gpt2-124m \
    --data data/fortunes.txt --micro-batch 1 --seq 256 --steps "$steps" --no-progress \
    --metrics "$work/m.jsonl" >"$work/out" 2>&1 || { echo "failed: $(tail -2 "$work/out" | tr '\n' ' ')"; return; }
  local summary
  summary=$(grep '"kind":"summary"' "$work/m.jsonl")
  echo "$summary" >>"$results/cpu_offload_vs_deepspeed.jsonl"
  printf '%.0f %.4f %s' "$(sed 's/.*"tokens_per_s":\([^,]*\),.*/\1/' <<<"$summary")" \
    "$(sed 's/.*"final_loss":\([^,]*\),.*/\1/' <<<"$summary")" \
    "$(sed 's/.*"core":"\([^"]*\)".*/\1/' <<<"$summary")"
}
deepspeed_row() {  # STAGE: DeepSpeed's tokens/s and last loss
  local line
  line=$("$zero_run" -n 2 -- "$python" bench/frontend.py --framework deepspeed --stage "$1" \
    --offload cpu --layers 12 --hidden 768 --vocab 50257 --micro 1 --seq 256 --steps "$((steps - 1))" \
    --warmup 1 2>"$work/err" | tail -1)
  [[ $line == "{"* ]] || { echo "failed: $(tail -2 "$work/err" | tr '\n' ' ')"; return; }
  echo "$line" >>"$results/cpu_offload_vs_deepspeed.jsonl"
  printf '%s %s' "$(sed 's/.*"tokens_per_s": \([^,]*\),.*/\1/' <<<"$line")" \
    "$(sed 's/.*"loss": \([^,]*\),.*/\1/' <<<"$line")"
}

{
  echo "# zero-train against DeepSpeed, optimizer offloaded to the CPU, 2 CPU ranks, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  echo "# torch $("$python" -c 'import torch; print(torch.__version__)'), deepspeed $("$python" -c 'import deepspeed; print(deepspeed.__version__)' 2>/dev/null)"
  echo "# gpt2-124m (vocabulary 50257), fp32, micro-batch 1 x 256 per rank, AdamW lr 1e-4, clipping 1.0,"
  echo "# OMP_NUM_THREADS=1; tokens/s of both ranks, mean over the steps after the first ($steps steps)."
  echo "#   zero:      $zero_run -n 2 -- $train --config CFG --model gpt2-124m --data data/fortunes.txt --micro-batch 1 --seq 256 --steps $steps"
  echo "#   deepspeed: $zero_run -n 2 -- $python bench/frontend.py --framework deepspeed --stage S --offload cpu --layers 12 --hidden 768 --vocab 50257 --micro 1 --seq 256 --steps $((steps - 1)) --warmup 1"
  echo "# (losses differ: the data differ, fortunes.txt for zero-train, random tokens for frontend.py)"
  echo
  printf '%-6s %-36s %10s %10s %8s\n' stage run "tokens/s" loss ratio
  for stage in 2 3; do
    read -r ds ds_loss <<<"$(deepspeed_row "$stage")"
    printf '%-6s %-36s %10s %10s %8s\n' "$stage" "deepspeed.initialize" "$ds" "$ds_loss" "-"
    for core in "" Prescott; do
      read -r z z_loss z_core <<<"$(zero_row "$stage" "$core")"
      ratio=$(awk -v a="$z" -v b="$ds" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2fx", a / b; else print "-" }')
      printf '%-6s %-36s %10s %10s %8s\n' "$stage" "zero-train, core $z_core${core:+ (forced)}" "$z" "$z_loss" "$ratio"
    done
  done
} | tee "$results/cpu_offload_vs_deepspeed.txt"
