#!/usr/bin/env bash
# tools/plot-metrics on small metrics files made here: it writes a PNG (default name and -o,
# one file and two overlaid) with every plotter present, and fails with a message on a file
# with no train lines and on a missing file. Exits 77 (ctest: skipped) when neither gnuplot
# nor python3's matplotlib is installed.
#   tests/tools/plot_metrics.sh [TOOL]     (default: tools/plot-metrics of this checkout)
set -euo pipefail

tool=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/plot-metrics}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL (plot_metrics): $*" >&2
  exit 1
}

backends=()
command -v gnuplot >/dev/null && backends+=(gnuplot)
python3 -c 'import matplotlib' 2>/dev/null && backends+=(matplotlib)
if ((${#backends[@]} == 0)); then
  echo "SKIP: neither gnuplot nor matplotlib (apt-get install gnuplot-nox or python3-matplotlib)"
  exit 77
fi

# 40 steps of falling loss, an eval every 10, a summary; the second run a little slower.
for run in a b; do
  speed=40000
  [[ $run == a ]] || speed=30000
  for ((step = 1; step <= 40; step++)); do
    printf '{"kind":"train","step":%d,"loss":%d.%02d,"lr":0.0003,"loss_scale":1,' \
      "$step" $((5 - step / 10)) $((99 - step * 2))
    printf '"grad_norm":1.5,"tokens_per_s":%d,"step_time_s":0.1,"tokens":%d,"elapsed_s":%d}\n' \
      $((speed + step * 10)) $((step * 4096)) "$step"
    ((step % 10)) || printf '{"kind":"eval","step":%d,"eval_loss":3.5,"elapsed_s":%d}\n' \
      "$step" "$step"
  done >"$work/run-$run.jsonl"
  echo '{"kind":"summary","steps":40}' >>"$work/run-$run.jsonl"
done
printf '{"kind":"eval","step":10,"eval_loss":3.5}\n{"kind":"summary"}\n' >"$work/no-train.jsonl"

check_png() {
  [[ -s $1 ]] || fail "$2: $1 missing or empty"
  [[ $(head -c 8 "$1" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
    fail "$2: $1 does not start with the PNG signature"
}

"$tool" --help | grep -q '^usage: tools/plot-metrics METRICS.jsonl' || fail "--help lacks the usage"

for backend in "${backends[@]}"; do
  export PLOT_METRICS_BACKEND=$backend
  rm -f "$work"/*.png
  "$tool" "$work/run-a.jsonl" >"$work/out" 2>&1 || fail "$backend: one file: $(<"$work/out")"
  check_png "$work/run-a.png" "$backend, default output"
  "$tool" "$work/run-a.jsonl" "$work/run-b.jsonl" -o "$work/both.png" --title "a vs b" \
    >"$work/out" 2>&1 || fail "$backend: two files: $(<"$work/out")"
  check_png "$work/both.png" "$backend, two files with -o"

  rc=0
  "$tool" "$work/no-train.jsonl" >"$work/out" 2>&1 || rc=$?
  ((rc != 0)) || fail "$backend: a file with no train lines exited 0"
  grep -q 'no-train.jsonl: no train lines' "$work/out" || fail "$backend: no message: $(<"$work/out")"
  [[ ! -e $work/no-train.png ]] || fail "$backend: a PNG was written for a file with no train lines"
done

rc=0
"$tool" "$work/absent.jsonl" >"$work/out" 2>&1 || rc=$?
((rc != 0)) || fail "a missing file exited 0"
grep -q 'absent.jsonl: no such file' "$work/out" || fail "missing file, no message: $(<"$work/out")"
echo "plot_metrics: passed with ${backends[*]}"
