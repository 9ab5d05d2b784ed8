#!/usr/bin/env bash
# bench/aio.sh: the direct-I/O figures in bench/results/, measured on this machine.
#
#   bench/aio.sh [BUILD_DIR] [DIR] [EXTRA zero-bench aio ARGS...]
#
# Builds nothing: BUILD_DIR (default build-cpu; relative to the repository root, or absolute)
# must hold tools/zero-bench/zero-bench. DIR (default BUILD_DIR) is where the scratch file
# goes: a directory on the disk to measure, not tmpfs. Writes
#   bench/results/aio.txt    zero-bench aio: read and write GB/s per block size and queue depth
#                            through io_uring, next to fio's io_uring engine on the same file
#   bench/results/aio.jsonl  the same figures, one JSON line per measurement
# with a header naming the date, the machine, the disk and the exact command. EXTRA args go to
# zero-bench (e.g. --full for every block size and depth). Exit status: that of zero-bench.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
[[ $# -gt 0 ]] && shift
dir=${1:-$build}
[[ $# -gt 0 ]] && shift
extra=("$@")

bench=$build/tools/zero-bench/zero-bench
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/aio.sh: $bench is missing; build it first:" \
       "cmake -S . -B $build && cmake --build $build --target zero-bench" >&2
  exit 1
fi
mkdir -p "$results"
rm -f "$results/aio.jsonl"

command=("$bench" aio "$dir" --repeats 5 --json "$results/aio.jsonl" "${extra[@]}")
{
  echo "# zero-bench aio, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$bench"
  echo "# kernel $(uname -r)"
  echo "# disk: $(findmnt -n -o SOURCE,FSTYPE -T "$dir" | xargs)"
  echo "# command: ${command[*]}"
  echo "# GB/s are medians; ratio = ours / fio's (same file, block size and depth)."
  "${command[@]}" 2>&1
} | tee "$results/aio.txt"
exit "${PIPESTATUS[0]}"
