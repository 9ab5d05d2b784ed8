#!/usr/bin/env bash
# NVMe swap directories at the ends of a job, one ctest test per case:
# check_zero_swap.sh ZERO_RUN ZERO_TRAIN ZERO_SWAP SOURCE_DIR WORK CASE. zero-train runs tiny
# on 2 ranks (Open MPI; exit 77 without mpirun) with the optimizer on NVMe under WORK/nvme.
set -euo pipefail

zero_run=$1
train=$2
swap=$3
source_dir=$4
work=$5
case_name=$6
rm -rf "$work"
mkdir -p "$work"
export ZERO_LOG_LEVEL=warn OMP_NUM_THREADS=1
nvme=$work/nvme

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}
have_mpirun() { command -v mpirun >/dev/null || [ -n "${ZERO_MPIRUN:-}" ]; }

cat >"$work/config.json" <<JSON
{"train_micro_batch_size_per_gpu": 4,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
 "zero_optimization": {"stage": 2, "sub_group_size": 1e5,
   "offload_optimizer": {"device": "nvme", "nvme_path": "$nvme"}},
 "steps_per_print": 1000}
JSON

train_args=(--config "$work/config.json" --model tiny --data "$source_dir/data/fortunes.txt"
            --seq 32 --no-progress)
# Starts a long run in the background (pid in $job) and waits until both ranks' swap files exist.
start_long_run() {
  "$zero_run" -n 2 -- "$train" "${train_args[@]}" --steps 1000000 >"$work/out" 2>"$work/err" &
  job=$!
  for _ in $(seq 300); do
    if compgen -G "$nvme/zero/*/rank1/optimizer.swap" >/dev/null &&
       compgen -G "$nvme/zero/*/rank0/optimizer.swap" >/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  kill -KILL "$job" 2>/dev/null || true
  fail "no swap files after 30 s; stderr: $(<"$work/err")"
}
jobs_left() { find "$nvme/zero" -mindepth 1 -maxdepth 1 | wc -l; }

case $case_name in
  sigterm_removes)
    have_mpirun || exit 77
    start_long_run
    kill -TERM "$job"
    wait "$job" || true
    [ "$(jobs_left)" -eq 0 ] || fail "swap directories left after SIGTERM: $(find "$nvme")"
    # The ranks' lines go through mpirun, which may be gone before it forwards them: the
    # directories are the test; the lines are checked where no launcher stands between
    # (tests/offload/test_swap_jobs.cpp).
    grep -q "SIGTERM: removed swap directory" "$work/err" ||
      echo "note: mpirun did not pass on the ranks' removal lines this time"
    ;;
  abort_after_init_removes)
    have_mpirun || exit 77
    # --resume of a checkpoint that is not there fails after init: zero-train aborts the job.
    rc=0
    "$zero_run" -n 2 -- "$train" "${train_args[@]}" --steps 3 --resume "$work/none" \
      >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -ne 0 ] || fail "a resume from nothing succeeded"
    [ "$(jobs_left)" -eq 0 ] || fail "swap directories left after zero_abort: $(find "$nvme")"
    grep -q "removed swap directory" "$work/err" || fail "no removal line: $(<"$work/err")"
    ;;
  sigkill_named_and_cleaned)
    have_mpirun || exit 77
    start_long_run
    # SIGKILL to this job's ranks alone (their pids are in their owner records; a pattern
    # could match another test's job under ctest -j): nothing of theirs runs; the directory
    # stays, stale.
    for owner in "$nvme"/zero/*/rank*/owner.json; do
      pid=$(sed -n 's/.*"pid": *\([0-9][0-9]*\).*/\1/p' "$owner")
      [ -n "$pid" ] || fail "no pid in $owner: $(<"$owner")"
      kill -KILL "$pid" || true
    done
    wait "$job" || true
    for _ in $(seq 50); do
      "$swap" list "$nvme" | grep -q stale && break
      sleep 0.1
    done
    listing=$("$swap" list "$nvme")
    [[ $listing == *"gone (pid"*"[stale]"* ]] || fail "zero-swap list: $listing"
    dead=$(find "$nvme/zero" -mindepth 1 -maxdepth 1)
    # The next run names it.
    "$train" "${train_args[@]}" --steps 1 >"$work/out" 2>"$work/err"
    grep -q "stale swap directory.*$dead.*zero-swap clean $nvme" "$work/err" ||
      fail "the next run did not name $dead: $(<"$work/err")"
    [ -d "$dead" ] || fail "the next run removed $dead itself"
    dry=$("$swap" clean --dry-run "$nvme")
    [[ $dry == *"would remove $dead"* ]] || fail "clean --dry-run: $dry"
    [ -d "$dead" ] || fail "clean --dry-run removed $dead"
    cleaned=$("$swap" clean --config "$work/config.json")
    [[ $cleaned == *"removed $dead"*"1 job directory removed"* ]] || fail "clean: $cleaned"
    [ "$(jobs_left)" -eq 0 ] || fail "left after clean: $(find "$nvme")"
    ;;
  usage_errors)
    rc=0
    "$swap" list >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -eq 2 ] || fail "no path: exit $rc"
    grep -q "name the nvme_path" "$work/err" || fail "no path: $(<"$work/err")"
    echo '{"zero_optimization": {"stage": 2}}' >"$work/none.json"
    rc=0
    "$swap" clean --config "$work/none.json" >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -eq 1 ] || fail "a config without nvme_path: exit $rc"
    grep -q "no zero_optimization.offload_optimizer or offload_param nvme_path" "$work/err" ||
      fail "config without nvme_path: $(<"$work/err")"
    "$swap" --help | grep -q "clean" || fail "--help lacks clean"
    "$swap" clean --help | grep -q -- "--other-hosts" || fail "clean --help lacks --other-hosts"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "PASS ($case_name)"
