#!/usr/bin/env bash
# bench/comm.sh: the communicator figures in bench/results/, measured on this machine.
#
#   bench/comm.sh [BUILD_DIR] [EXTRA zero-bench comm ARGS...]
#
# Builds nothing: BUILD_DIR (default build-cpu; relative to the repository root, or absolute)
# must hold tools/zero-bench/zero-bench, and should hold tools/zero-run/zero-run (else mpirun is
# called directly with the settings zero-run would give it). Writes
#   bench/results/comm_mpi_2ranks.txt     zero-bench comm on 2 ranks, poll and thread progress
#   bench/results/comm_mpi_4ranks.txt     the same on 4 ranks
#   bench/results/comm_overlap_2ranks.txt zero-bench comm --overlap on 2 ranks: progress thread,
#                                         poll, poll with work.test() every 4 and 64 chunks
# each with a header naming the date, the machine, the MPI and every exact command. EXTRA args
# go to every zero-bench run (e.g. --max-bytes 1M for a quick try). Exit status: 1 when a run
# failed (its output is still in the file).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
[[ $# -gt 0 ]] && shift
extra=("$@")

bench=$build/tools/zero-bench/zero-bench
zero_run=$build/tools/zero-run/zero-run
results=bench/results
if [[ ! -x $bench ]]; then
  echo "bench/comm.sh: $bench is missing; build it first:" \
       "cmake -S . -B $build && cmake --build $build --target zero-bench zero-run" >&2
  exit 1
fi
if ! command -v mpirun >/dev/null; then
  echo "bench/comm.sh: mpirun not found (Debian: openmpi-bin)" >&2
  exit 1
fi
mkdir -p "$results"

# The launcher words for N ranks: zero-run, else mpirun as zero-run would call it.
launcher() {
  if [[ -x $zero_run ]]; then
    words=("$zero_run" -n "$1" --)
  else
    words=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
           OMPI_MCA_rmaps_base_oversubscribe=1 mpirun -n "$1" --bind-to none)
  fi
}

header() {  # FILE TITLE
  local cpu
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
  {
    echo "# $2"
    echo "# date:    $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "# machine: $(hostname), nproc $(nproc), CPU $cpu," \
         "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "# BLAS:    none used (collectives only)"
    echo "# MPI:     $(mpirun --version 2>/dev/null | head -n 1)"
    echo "# load:    $(cut -d' ' -f1-3 /proc/loadavg) (load average over 1, 5, 15 min, before the runs)"
    echo "# zero:    $(git describe --always --dirty 2>/dev/null || echo unknown)"
    echo "# script:  bench/comm.sh $build${extra[*]:+ ${extra[*]}}"
    echo "#"
  } >"$1"
}

failed=0
run() {  # FILE RANKS ARGS...
  local file=$1 ranks=$2
  shift 2
  launcher "$ranks"
  local command=("${words[@]}" "$bench" comm "$@" "${extra[@]}")
  local start=$SECONDS status
  echo "bench/comm.sh: $(printf '%q ' "${command[@]}")" >&2
  echo "# command: $(printf '%q ' "${command[@]}")" >>"$file"
  timeout 600 "${command[@]}" >>"$file" 2>&1
  status=$?
  printf '# exit status %d, %d s\n\n' "$status" "$((SECONDS - start))" >>"$file"
  if ((status != 0)); then
    echo "bench/comm.sh: the run failed (exit status $status); see $file" >&2
    failed=1
  fi
}

file=$results/comm_mpi_2ranks.txt
header "$file" "zero-bench comm, MPI backend, 2 ranks"
run "$file" 2 --progress poll --check
run "$file" 2 --progress thread --check

file=$results/comm_mpi_4ranks.txt
header "$file" "zero-bench comm, MPI backend, 4 ranks (oversubscribed where nproc < 4)"
run "$file" 4 --progress poll --check
run "$file" 4 --progress thread --check

file=$results/comm_overlap_2ranks.txt
header "$file" "zero-bench comm --overlap, MPI backend, 2 ranks"
run "$file" 2 --overlap --time-per-size 2 --progress thread
run "$file" 2 --overlap --time-per-size 2 --progress poll
run "$file" 2 --overlap --time-per-size 2 --progress poll --poll-every 4
run "$file" 2 --overlap --time-per-size 2 --progress poll --poll-every 64

exit $failed
