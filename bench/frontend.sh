#!/usr/bin/env bash
# bench/frontend.sh [PYTHON]: the Python front end's speed as ratios in one run on CPU ranks
# (bench/frontend.py for one variant, bench/frontend_table.py for the table; docs/python.md).
#   zero.initialize against plain PyTorch at stage 0, on 1 and 2 ranks   (goal: >= 0.95)
#   zero.initialize against deepspeed.initialize with CPU optimizer offload, stages 2 and 3,
#   on 2 ranks                                                           (goal: >= 1.2)
# PYTHON (default: the tests' venv) needs torch and transformers, and deepspeed for its rows
# (pip install deepspeed py-cpuinfo ninja; without it they are skipped, saying so). The library
# and zero-run are build/'s. MODEL_ARGS changes the model (bench/frontend.py --help; default a
# GPT-2 of 4 layers x 512, vocabulary 8192, micro-batch 4 x 256 tokens, 12 timed steps); the
# offloaded pairs run again on OFFLOAD_ARGS's (default 8 layers x 512, vocabulary 32000, one
# sequence of 64 tokens a rank: small micro-batches, the engine's share of the step large);
# REPEATS (default 3) runs of each, interleaved with its peer's, and their medians.
# Writes bench/results/frontend_cpu.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-$root/build-python-env/bin/python}
for f in "$root/build/engine/libzero.so" "$root/build/tools/zero-run/zero-run"; do
  [ -e "$f" ] || { echo "frontend.sh: $f is missing: build first (make)" >&2; exit 1; }
done
export PYTHONPATH=$root/python ZERO_LIBRARY=$root/build/engine/libzero.so
export DS_ACCELERATOR=cpu ZERO_LOG_LEVEL=warn TRANSFORMERS_VERBOSITY=error
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
"$python" "$root/bench/frontend_table.py" | tee "$root/bench/results/frontend_cpu.txt"
