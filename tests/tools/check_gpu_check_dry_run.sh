#!/usr/bin/env bash
# gpu-check's dry run: scripts/gpu-check.sh --dry-run, every GPU program a stand-in
# (scripts/gpu-check-standin.sh) and each item its expected seconds (bench/gpu-check-times.txt)
# on the run's clock, slept at a small TIME_SCALE. Usage: check_gpu_check_dry_run.sh SOURCE_DIR
# WORK. Asserts reached and skipped, never durations:
#   1. at the default BUDGET and CHECKS the plan says every item fits, the checks run in the
#      order of what they prove (env, gpu-tests, engine, models, python, speed), and the
#      summary lists each of them, and each of their items, as passed: the default budget
#      reaches every check;
#   2. with a budget that ends with the models check the same assertion fails: the later items
#      are skipped, the summary says the budget is the reason, and the run still exits 0 (a
#      skip is not a failure);
#   3. a stand-in that fails (GPU_CHECK_STANDIN_FAIL=gpu-tests.layers) makes its item and check
#      "failed" with the first failing case as the reason, exit 1, and the next check still runs;
#   4. every program gpu-check runs from the bundle is one scripts/gpu-bundle.sh packs (the dry
#      run itself fails an item whose program has no stand-in).
set -uo pipefail

source_dir=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
check=$source_dir/scripts/gpu-check.sh
expected_checks=(env gpu-tests engine models python speed)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# every_check_passed OUT: the default checks, in order, each with every item passed
every_check_passed() {
  local out=$1 check
  python3 - "$out/results.jsonl" "${expected_checks[@]}" <<'PY' || return 1
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
run = next(l for l in lines if l.get("kind") == "run")
items = {l["item"]: l for l in lines if "item" in l}
if run["checks"] != sys.argv[2:]:
    sys.exit(f"the checks ran as {run['checks']}, not {sys.argv[2:]}")
for item in run["items"]:
    if item not in items:
        sys.exit(f"{item}: planned, no outcome")
    if items[item]["outcome"] != "passed":
        sys.exit(f"{item}: {items[item]['outcome']}: {items[item]['note']}")
PY
  for check in "${expected_checks[@]}"; do
    grep -Eq "^$check +passed$" "$out/summary.txt" || {
      echo "the summary's outcome does not list $check as passed" >&2
      return 1
    }
  done
  # the checks' sections in the order of what they prove
  grep -o '^## [a-z-]*:' "$out/summary.txt" | grep -v -e '^## plan:' -e '^## outcome:' |
    sed 's/^## //; s/:$//' | xargs | grep -qx "${expected_checks[*]}" || {
    echo "the sections are not in the order ${expected_checks[*]}" >&2
    return 1
  }
}

# 1. the default budget reaches every check
env -u BUDGET -u CHECKS -u SPEED_RUNS -u MODELS TIME_SCALE=0.01 \
  bash "$check" --dry-run "$work/default" >"$work/default.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || { tail -40 "$work/default.log"; fail "the default dry run exits $rc"; }
grep -q '^## plan: .* of the 480 s budget' "$work/default/summary.txt" ||
  fail "the summary does not start with the plan at the default budget"
grep -q '^every item fits the 480 s budget' "$work/default/summary.txt" ||
  fail "the plan does not say every item fits the default budget"
every_check_passed "$work/default" || {
  sed -n '/^## outcome/,$p' "$work/default/summary.txt"
  fail "the default budget does not reach every check"
}
[[ -f $work/default/logs.tar.gz && -f $work/default/train_gpu.txt ]] ||
  fail "the logs or bench/gpu.sh's table are missing"
(($(find "$work/default" -type f | wc -l) <= 8)) || fail "more than the 8 files that come back"

# 2. a budget too small: the assertion above fails, and the summary says why. The budget ends
# where the models check is expected to end (the plan's figures), so nothing after it fits.
small=$(env -u BUDGET -u CHECKS -u SPEED_RUNS -u MODELS bash "$check" --plan |
  awk '$1 ~ /^models\./ {end = $6} END {print end}')
[[ $small =~ ^[0-9]+$ ]] || fail "the plan does not say when the models check ends"
env -u CHECKS -u SPEED_RUNS -u MODELS BUDGET=$small TIME_SCALE=0.002 \
  bash "$check" --dry-run "$work/small" >"$work/small.log" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "a dry run that skips items for the budget exits $rc, not 0"
every_check_passed "$work/small" 2>/dev/null && fail "BUDGET=$small reaches every check too"
grep -q "beyond the $small s budget" "$work/small/summary.txt" ||
  fail "the plan does not name the items beyond BUDGET=$small"
grep -Eq '^speed +skipped: the budget is spent' "$work/small/summary.txt" ||
  fail "the summary does not say speed was skipped for the budget"

# 3. a failing program: its item and check fail with the reason, the next check runs
env -u BUDGET -u SPEED_RUNS -u MODELS CHECKS="gpu-tests engine" TIME_SCALE=0.002 \
  GPU_CHECK_STANDIN_FAIL=gpu-tests.layers bash "$check" --dry-run "$work/fail" \
  >"$work/fail.log" 2>&1
rc=$?
[[ $rc -eq 1 ]] || fail "a failing item gives exit $rc, not 1"
grep -Eq '^gpu-tests +failed: gpu-tests.layers: test cases: .*1 failed; the first to fail: cuda layers: layernorm' \
  "$work/fail/summary.txt" || fail "the summary does not say which case failed"
grep -Eq '^engine +passed$' "$work/fail/summary.txt" || fail "the check after a failure did not run"

# 4. the programs gpu-check runs from the bundle (its dry run's stand-ins) are in the bundle
packed=$(sed -n '/^programs=(/,/)$/p' "$source_dir/scripts/gpu-bundle.sh" | grep -o '/[a-zA-Z0-9_-]*"' |
  tr -d '/"' | sort -u)
for p in $(sed -n '/^bundle_programs=(/,/)$/p' "$check" | sed 's/.*(//; s/)//'); do
  grep -qx "$p" <<<"$packed" || fail "gpu-check runs $p, which scripts/gpu-bundle.sh does not pack"
done
echo "gpu-check's dry run: every default check reached within the default budget"
