#!/usr/bin/env bash
# bench/scale.sh: bigger than memory, measured (bench/scale.py does the work). Trains the
# largest Llama-shaped model that zero-mem --device cpu says fits this machine's available
# memory and free disk (candidates from the largest down: llama-3.1-8b, mistral-7b,
# llama-3.2-3b, llama-3.2-1b), 3 steps at sequence 64 with activation checkpointing, stage 3,
# on the row zero-mem recommends with the disk's rates as zero-bench aio measures them first.
#
#   bench/scale.sh [BUILD_DIR] [SWAP_DIR] [bench/scale.py options: --models, --steps, --seq,
#                  --config, --aio-size, --disk-margin, --out]
#
# BUILD_DIR (default build) must hold zero-bench, zero-mem and zero-train. SWAP_DIR (default
# .swap-scale in the repository) must be on the disk to measure (O_DIRECT: not tmpfs); the
# swap files are removed when the run ends. The base config is bench/configs/scale.json (the
# script sets its nvme_path and the row's keys). Writes bench/results/scale.txt (the table:
# parameters, bytes per tier predicted and reserved, peak resident memory against the
# prediction, each step's time, disk bytes and I/O floor) and bench/results/scale.json.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${1:-build}
swap=${2:-.swap-scale}
[[ $# -gt 0 ]] && shift
[[ $# -gt 0 ]] && shift
status=0
python3 bench/scale.py --build "$build" --swap "$swap" "$@" || status=$?
rm -rf "$swap"
exit "$status"
