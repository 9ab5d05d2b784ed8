#!/usr/bin/env bash
# A save killed at POINT on rank RANK of N, then a new job that must find the previous
# checkpoint as latest and load it (the one just saved when the crash came while pruning), and
# zero-ckpt inspect verifying it.
#   checkpoint_crash.sh ZERO_RUN PROGRAM ZERO_CKPT DIR POINT RANK N
set -uo pipefail
run=$1 program=$2 ckpt=$3 dir=$4 point=$5 victim=$6 n=$7
rm -rf "$dir"
mkdir -p "$dir"
export OMP_NUM_THREADS=1 ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-error}
status=0
"$run" -n "$n" -- "$program" crash "$dir" "$point" "$victim" || status=$?
if [ "$status" -ne 3 ]; then
  echo "FAIL: the job whose save was to die at $point ended with status $status, not the" \
       "crash's 3" >&2
  exit 1
fi
expected=good
[ "$point" = pruning ] && expected=bad
"$run" -n "$n" -- "$program" check "$dir" "$expected" || exit 1
"$ckpt" inspect "$dir" || exit 1
rm -rf "$dir"
