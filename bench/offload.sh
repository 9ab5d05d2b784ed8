#!/usr/bin/env bash
# bench/offload.sh: the NVMe-offloaded optimizer step figures in bench/results/, measured on
# this machine's disk.
#
#   bench/offload.sh [BUILD_DIR] [SWAP_DIR] [EXTRA zero-bench offload ARGS...]
#
# Builds nothing: BUILD_DIR (default build-cpu) must hold tools/zero-bench/zero-bench. SWAP_DIR
# (default .swap-bench in the repository) must be on a disk that takes O_DIRECT (not tmpfs).
# Writes
#   bench/results/offload_nvme.txt    zero-bench offload: the step over 50M and 100M elements of
#                                     AdamW state (sub-groups of 10M, 4 buffers) next to the
#                                     same I/O alone and the Adam alone, with 1 and 2 threads
#   bench/results/offload_nvme.jsonl  the same figures, one JSON line per run
# with a header naming the date, the machine and the commands. Exit status: the last failing
# zero-bench's, else 0.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
swap=${2:-.swap-bench}
[[ $# -gt 0 ]] && shift
[[ $# -gt 0 ]] && shift
extra=("$@")

bench=$build/tools/zero-bench/zero-bench
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/offload.sh: $bench is missing; build it first:" \
       "cmake -S . -B $build && cmake --build $build --target zero-bench" >&2
  exit 1
fi
mkdir -p "$results" "$swap"
rm -f "$results/offload_nvme.jsonl"
{
  status=0
  echo "# zero-bench offload, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
       "$(free -g | awk '/Mem:/{print $2}') GiB; swap directory on" \
       "$(findmnt -n -o SOURCE,FSTYPE -T "$swap" | xargs)"
  echo "# each figure is the best of 3 runs; the target is step <= 1.15 x max(I/O, Adam)"
  for elements in 50e6 100e6; do
    for threads in 1 2; do
      command=("$bench" offload "$swap" --elements "$elements" --sub-group 10e6 --buffers 4
               --threads "$threads" --repeats 3 --json "$results/offload_nvme.jsonl" "${extra[@]}")
      echo
      echo "# command: ${command[*]}"
      "${command[@]}" 2>&1 || status=$?
    done
  done
  exit "$status"
} | tee "$results/offload_nvme.txt"
status=${PIPESTATUS[0]}
rmdir "$swap" 2>/dev/null
exit "$status"
