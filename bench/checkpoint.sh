#!/usr/bin/env bash
# bench/checkpoint.sh: the checkpoint figures in bench/results/, measured on this machine.
#
#   bench/checkpoint.sh [BUILD_DIR] [DIR]
#
# Builds nothing: BUILD_DIR (default build-cpu) must hold zero-bench and zero-ckpt. DIR (default
# BUILD_DIR) is where the checkpoints go (about 10 GB for gpt2-774m; the engine holds ~12.5 GB
# of memory for it). Writes bench/results/checkpoint.txt and checkpoint.jsonl: save and load
# GB/s, zero-ckpt inspect and export times with their peak resident memory.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
dir=${2:-$build}
bench=$build/tools/zero-bench/zero-bench
results=bench/results
[[ -x $bench ]] || { echo "bench/checkpoint.sh: build $bench first" >&2; exit 1; }
mkdir -p "$results"
rm -f "$results/checkpoint.jsonl"
{
  echo "# zero-bench checkpoint, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  echo "# checkpoint on $(findmnt -n -o SOURCE,FSTYPE -T "$dir" | xargs)"
  status=0
  for model in gpt2-124m gpt2-774m; do
    command=("$bench" checkpoint "$dir" --model "$model" --json "$results/checkpoint.jsonl")
    echo "# command: ${command[*]}"
    OMP_NUM_THREADS=2 ZERO_LOG_LEVEL=warn "${command[@]}" || status=$?
    echo
  done
  exit $status
} 2>&1 | tee "$results/checkpoint.txt"
