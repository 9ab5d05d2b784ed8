#!/usr/bin/env bash
# bench/machine.sh [ZERO_BENCH]: the header lines every CPU result in bench/results/ starts
# with, naming the machine it was measured on:
#   # machine: 2 cores, AMD EPYC, 23 GiB
#   # CPU layers' BLAS: OpenBLAS 0.3.21 (OpenMP), core Zen: AVX2 kernels, chosen by zero, from cpuid
# The second is ZERO_BENCH's `zero-bench blas --info` (default build/tools/zero-bench/zero-bench):
# the OpenBLAS kernels zero-train's CPU layers run on this CPU (docs/zero-train.md, "Matrix
# products on the CPU"), or why it could not say.
set -uo pipefail
bench=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/tools/zero-bench/zero-bench}
echo "# machine: $(nproc --all) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "$(free -g | awk '/Mem:/{print $2}') GiB"
if [[ -x $bench ]]; then
  blas=$("$bench" blas --info 2>&1 | head -1)
  echo "# CPU layers' BLAS: ${blas#zero-bench blas: }"
else
  echo "# CPU layers' BLAS: not known ($bench is missing)"
fi
