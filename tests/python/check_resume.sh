#!/usr/bin/env bash
# tests/python/check_resume.sh RUN... MODEL_DIR WORK: a checkpoint of the front end saved on 2
# ranks at stage 3 with CPU offload after step 2, and the losses of steps 3-4 after it; then
# one rank at stage 1 loads it and must give those same losses (train_parity.py --resume).
# RUN is tests/python/run.sh with its three arguments.
set -euo pipefail
run=("${@:1:$#-2}")
model=${*: -2:1}
work=${*: -1}
rm -rf "$work"
"${run[@]}" -n 2 "$(dirname "$0")/train_parity.py" "$model" --stages 3 --offload cpu \
  --save "$work" --save-after 2
"${run[@]}" "$(dirname "$0")/train_parity.py" "$model" --stages 1 --offload none \
  --resume "$work" --steps 2
