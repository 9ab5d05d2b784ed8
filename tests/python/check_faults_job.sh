#!/usr/bin/env bash
# A rank's failure is the job's: tests/python/check_faults_job.sh PYTHON LIBZERO SOURCE_DIR CASE
# runs fault_job.py CASE, a rank program that fails by design, on 2 ranks through zero-run under
# a timeout of its own (90 s, never ctest's), and requires the job to end within 45 s, failed
# (not 0, not the timeout's 124), with the cause in its output:
#   raises   rank 1's exception ("ValueError: boom on rank 1"), rank 1 named as the cause
#   exits    rank 1 left after sys.exit(0): rank 0 names it and ends the job
#   uneven   3 steps against 5: the rank with more names the one that left
# Exit status 77 (skipped) without mpirun.
set -uo pipefail
python=$1 library=$2 source=$3 case_name=$4
command -v mpirun >/dev/null || { echo "SKIPPED: no mpirun"; exit 77; }
case $case_name in
  raises) want=("ValueError: boom on rank 1" "rank 1: ValueError") ;;
  exits) want=("rank 1 (it left after" "left the job before issuing it") ;;
  uneven) want=("rank 0 (it left after" "different numbers of steps") ;;
  *) echo "check_faults_job.sh: unknown case $case_name" >&2; exit 2 ;;
esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$SECONDS
timeout -k 10 90 bash "$source/tests/python/run.sh" "$python" "$library" "$source" -n 2 \
  "$source/tests/python/fault_job.py" "$case_name" >"$out" 2>&1
rc=$?
took=$((SECONDS - start))
fail() {
  echo "FAIL ($case_name): $*"
  tail -40 "$out"
  exit 1
}
((rc != 124 && rc != 137)) || fail "the job did not end: still running after 90 s"
((rc != 0)) || fail "the job ended with status 0"
((took <= 45)) || fail "the job took $took s to end"
for w in "${want[@]}"; do
  grep -qF "$w" "$out" || fail "its output lacks '$w'"
done
echo "ok ($case_name): the job ended in $took s, exit $rc, naming the cause:"
grep -F -e "${want[0]}" -e "${want[1]}" "$out" | head -4
