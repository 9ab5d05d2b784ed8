#!/usr/bin/env bash
# tests/python/run.sh PYTHON LIBZERO SOURCE_DIR [zero-run -n N --] SCRIPT ARGS...: runs a front-end
# test with the package from the source tree (python/) and the library just built.
set -euo pipefail
python=$1 library=$2 source=$3
shift 3
export PYTHONPATH="$source/python${PYTHONPATH:+:$PYTHONPATH}" ZERO_LIBRARY=$library
export ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn} OMP_NUM_THREADS=1 TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# mpirun as root (CI runs as root) and with more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$1" = "-n" ]; then
  zero_run=$(dirname "$library")/../tools/zero-run/zero-run
  ranks=$2
  shift 2
  exec "$zero_run" -n "$ranks" -- "$python" "$@"
fi
exec "$python" "$@"
