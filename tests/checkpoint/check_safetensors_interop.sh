#!/usr/bin/env bash
# Our safetensors files against the Python package, both ways:
#   check_safetensors_interop.sh FIXTURE PYTHON CHECK_SCRIPT WORK_DIR
# FIXTURE (safetensors_fixture) writes a file, CHECK_SCRIPT run by PYTHON (the venv of
# scripts/python-test-env.sh) reads it and writes its own, which FIXTURE then reads. Any step
# failing fails the test.
set -euo pipefail

if [ $# -ne 4 ]; then
  echo "usage: $0 FIXTURE PYTHON CHECK_SCRIPT WORK_DIR" >&2
  exit 2
fi
fixture="$1" python="$2" script="$3"
dir="$4/safetensors-interop-$$"
rm -rf "$dir"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT

"$fixture" write "$dir/ours.safetensors"
"$python" "$script" "$dir/ours.safetensors" "$dir/theirs.safetensors"
"$fixture" read "$dir/theirs.safetensors"
