#!/usr/bin/env bash
# bench/adam.sh: the CPU optimizer figures in bench/results/, measured on this machine.
#
#   bench/adam.sh [BUILD_DIR] [EXTRA zero-bench adam ARGS...]
#
# Builds nothing: BUILD_DIR (default build-cpu; relative to the repository root, or absolute)
# must hold tools/zero-bench/zero-bench. Writes
#   bench/results/adam_cpu.txt    zero-bench adam over every ISA this CPU has, 1 and 2 threads,
#                                 100M parameters: each variant against its bandwidth floor,
#                                 and the fused copy-out against a step then a cast pass
#   bench/results/adam_cpu.jsonl  the same figures, one JSON line per measurement
# with a header naming the date, the machine and the exact command. EXTRA args go to
# zero-bench (e.g. --elements 10e6 for a quick try). Exit status: that of zero-bench.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
[[ $# -gt 0 ]] && shift
extra=("$@")

bench=$build/tools/zero-bench/zero-bench
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/adam.sh: $bench is missing; build it first:" \
       "cmake -S . -B $build && cmake --build $build --target zero-bench" >&2
  exit 1
fi
mkdir -p "$results"
rm -f "$results/adam_cpu.jsonl"

command=("$bench" adam --isa all --threads 1 2 --elements 100e6 --repeats 7
         --json "$results/adam_cpu.jsonl" "${extra[@]}")
{
  echo "# zero-bench adam, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  echo "# command: OMP_PROC_BIND=close ${command[*]}"
  echo "# step ms and floor ms are medians; 'of floor' = floor time / step time (1.0 = at the"
  echo "# memory-bandwidth limit); GB/s counts the bytes the step must read and write."
  OMP_PROC_BIND=close "${command[@]}" 2>&1
} | tee "$results/adam_cpu.txt"
exit "${PIPESTATUS[0]}"
