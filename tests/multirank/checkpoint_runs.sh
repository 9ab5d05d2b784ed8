#!/usr/bin/env bash
# One checkpoint test as two jobs: save at N ranks, then resume in new processes at M ranks.
#   checkpoint_runs.sh ZERO_RUN PROGRAM DIR SET N M
set -euo pipefail
run=$1 program=$2 dir=$3 set=$4 n=$5 m=$6
rm -rf "$dir"
mkdir -p "$dir"
export OMP_NUM_THREADS=1 ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn}
"$run" -n "$n" -- "$program" save "$dir" "$set"
"$run" -n "$m" -- "$program" resume "$dir" "$set"
rm -rf "$dir"
