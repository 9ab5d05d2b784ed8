#!/usr/bin/env bash
# make demo: trains the reference GPT 'tiny' on the shipped corpus (data/fortunes.txt, byte-level)
# on 2 ranks with ZeRO stage 3 and the optimizer offloaded to the CPU (configs/demo.json), saves
# a checkpoint, verifies it, and draws the loss. Run from the repository root after the build:
#   scripts/demo.sh BUILD_DIR [extra zero-train flags]
set -euo pipefail

build=${1:?usage: scripts/demo.sh BUILD_DIR [zero-train flags]}
shift
out=$build/demo
rm -rf "$out"
mkdir -p "$out"

echo "== zero-train: tiny on data/fortunes.txt, 2 ranks, ZeRO stage 3, optimizer on the CPU"
ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn} "$build/tools/zero-run/zero-run" -n 2 -- \
  "$build/tools/zero-train/zero-train" --config configs/demo.json --model tiny \
  --data data/fortunes.txt --steps 600 --eval-every 100 \
  --save "$out/checkpoints" --metrics "$out/metrics.jsonl" "$@"

echo
echo "== zero-ckpt inspect: the checkpoint it saved, every checksum verified"
"$build/tools/zero-ckpt/zero-ckpt" inspect "$out/checkpoints"

echo
if command -v gnuplot >/dev/null || python3 -c 'import matplotlib' 2>/dev/null; then
  tools/plot-metrics "$out/metrics.jsonl" -o "$out/loss.png" --title "zero-train tiny, make demo"
else
  echo "(no gnuplot or matplotlib: apt-get install gnuplot-nox to draw $out/loss.png)"
fi
echo "metrics: $out/metrics.jsonl (plot again with tools/plot-metrics)"
