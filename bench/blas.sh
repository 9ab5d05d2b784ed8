#!/usr/bin/env bash
# bench/blas.sh: the CPU layers' matrix products under every OpenBLAS kernel set this CPU runs,
# as ratios in one run: zero-bench blas (a GPT-2 block's products and its head, forward and
# backward, N = 256 rows, C = 768, V = 50257) with zero's own choice of kernels, then with each
# OPENBLAS_CORETYPE the CPU can run, at 1 and 2 threads; and zero-train's gpt2-124m at stage 0,
# one rank, 1 thread, micro-batch 1 x 256, with zero's choice and with the SSE fallback that
# OpenBLAS 0.3.21 picks on CPUs it does not recognise (Prescott).
#
#   bench/blas.sh [BUILD_DIR]     (default: build; needs tools/zero-bench and tools/zero-train)
#
# Writes bench/results/blas_cores.txt (the table, with the CPU and the commands) and
# bench/results/blas_cores.jsonl (zero-bench's JSON lines).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build}
bench=$build/tools/zero-bench/zero-bench
train=$build/tools/zero-train/zero-train
for p in "$bench" "$train"; do
  [[ -x $p ]] || { echo "bench/blas.sh: $p is missing; build it first (make build)" >&2; exit 1; }
done
unset OPENBLAS_CORETYPE
results=bench/results
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$results/blas_cores.jsonl"

# The cores to compare: zero's choice, then each of OpenBLAS's x86-64 kernel sets that this CPU
# runs (zero-bench refuses the others, and they are left out).
cores=("" Prescott Nehalem Sandybridge Haswell Zen SkylakeX Cooperlake)
{
  echo "# The CPU layers' BLAS per kernel set, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  "$bench" blas --info | tail -n +2 | sed 's/^ */# /'
  echo "# products: OPENBLAS_CORETYPE=CORE $bench blas --threads 1 2 (a GPT-2 block and its head,"
  echo "#   N = 256 rows, C = 768, V = 50257; the median of 5 calls each); GFLOP/s over all of them"
  echo
  printf '%-26s %-24s %12s %12s\n' "OPENBLAS_CORETYPE" "core (kernel set)" "1 thread" "2 threads"
  for core in "${cores[@]}"; do
    if ! out=$(OPENBLAS_CORETYPE=$core "$bench" blas --threads 1 2 --json "$work/b.jsonl" 2>&1); then
      printf '%-26s %s\n' "$core" "refused: $(tail -1 <<<"$out" | sed 's/.*kernels use \(.*\), which this CPU.*/needs \1/')"
      continue
    fi
    cat "$work/b.jsonl" >>"$results/blas_cores.jsonl"
    rm -f "$work/b.jsonl"
    name=$(sed -n 's/.*core \([^:]*\): \([^ ]*\) kernels.*/\1 (\2)/p' <<<"$out" | head -1)
    mapfile -t totals < <(awk '$1 == "all" {print $NF}' <<<"$out")
    printf '%-26s %-24s %12s %12s\n' "${core:-unset (zero chooses)}" "$name" "${totals[0]:-?}" "${totals[1]:-?}"
  done

  echo
  echo "# zero-train: OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=CORE $train --config CFG --model gpt2-124m"
  echo "#   --data data/fortunes.txt --micro-batch 1 --seq 256 --steps 5 (CFG: stage 0, AdamW,"
  echo "#   clipping 1.0); tokens/s: the summary's mean after the first step"
  cat >"$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 0}, "steps_per_print": 1000}
JSON
  printf '%-26s %-24s %12s %12s\n' "OPENBLAS_CORETYPE" "core (kernel set)" "tokens/s" "final loss"
  for core in "" Prescott; do
    OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=$core "$train" --config "$work/config.json" --model gpt2-124m \
      --data data/fortunes.txt --micro-batch 1 --seq 256 --steps 5 --no-progress \
      --metrics "$work/m.jsonl" >"$work/out" 2>&1 || { echo "zero-train failed: $(tail -3 "$work/out")"; continue; }
    summary=$(grep '"kind":"summary"' "$work/m.jsonl")
    tps=$(sed 's/.*"tokens_per_s":\([^,]*\),.*/\1/' <<<"$summary")
    loss=$(sed 's/.*"final_loss":\([^,]*\),.*/\1/' <<<"$summary")
    name=$(sed 's/.*"core":"\([^"]*\)".*"kernel_set":"\([^"]*\)".*/\1 (\2)/' <<<"$summary")
    printf '%-26s %-24s %12.1f %12.4f\n' "${core:-unset (zero chooses)}" "$name" "$tps" "$loss"
  done
} | tee "$results/blas_cores.txt"
