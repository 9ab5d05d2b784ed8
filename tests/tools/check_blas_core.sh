#!/usr/bin/env bash
# The CPU layers' BLAS as the tools report it (models/blas/openblas.h):
# check_blas_core.sh ZERO_BENCH ZERO_TRAIN SOURCE_DIR WORK.
#   - zero-bench blas --info names the kernels zero chose, and on a CPU with AVX2 or AVX-512
#     they are that set, not a generic fallback, with no warning;
#   - a user's OPENBLAS_CORETYPE is kept (Prescott here), and a fallback is warned of, by
#     zero-bench and in zero-train's start-up lines, and zero-train's summary records it;
#   - a core this CPU cannot run (SkylakeX without AVX-512, Bulldozer without FMA4) is refused
#     with what it lacks, before OpenBLAS would stop the program with an illegal instruction.
set -euo pipefail

bench=$1
train=$2
source_dir=$3
work=$4
rm -rf "$work"
mkdir -p "$work"
export ZERO_LOG_LEVEL=warn OMP_NUM_THREADS=1
unset OPENBLAS_CORETYPE

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
best=unknown
if [[ $(uname -m) == x86_64 ]]; then
  best=SSE
  has avx && best=AVX
  has avx2 && has fma && best=AVX2
  has avx512f && has avx512cd && has avx512bw && has avx512dq && has avx512vl && has avx2 && best=AVX-512
fi
echo "this CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), best kernel set $best"

# 1. zero's own choice.
out=$("$bench" blas --info 2>&1) || fail "zero-bench blas --info failed: $out"
echo "$out"
[[ $out == *"OpenBLAS"*"core "* ]] || fail "no OpenBLAS core named: $out"
if [[ $best == AVX2 || $best == AVX-512 ]]; then
  [[ $out == *"core "*": $best kernels, chosen by zero, from cpuid"* ]] ||
    fail "the kernels are not this CPU's best ($best) as zero's choice: $out"
  [[ $out != *warning* ]] || fail "a warning with zero's own choice: $out"
fi

# 2. The user's own core is kept, and a fallback is said.
out=$(OPENBLAS_CORETYPE=Prescott "$bench" blas --info 2>&1) || fail "Prescott refused: $out"
[[ $out == *"core Prescott: SSE kernels, chosen by OPENBLAS_CORETYPE=Prescott"* ]] ||
  fail "OPENBLAS_CORETYPE=Prescott not kept: $out"
if [[ $best != SSE && $best != unknown ]]; then
  [[ $out == *"warning: OpenBLAS runs its Prescott kernels (SSE) on a CPU that runs $best"*"unset OPENBLAS_CORETYPE"* ]] ||
    fail "no warning of the fallback: $out"
fi
cat >"$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
 "zero_optimization": {"stage": 0}, "steps_per_print": 1}
JSON
out=$(OPENBLAS_CORETYPE=Prescott "$train" --config "$work/config.json" --model tiny --device 1 \
  --data "$source_dir/data/fortunes.txt" --seq 16 --steps 1 --no-progress --metrics "$work/m.jsonl" 2>&1) ||
  fail "zero-train failed: $out"
[[ $out == *"matrix products: OpenBLAS"*"core Prescott: SSE kernels, chosen by OPENBLAS_CORETYPE=Prescott on "* ]] ||
  fail "zero-train does not say what runs its products: $out"
if [[ $best != SSE && $best != unknown ]]; then
  [[ $out == *"warning: OpenBLAS runs its Prescott kernels"* ]] || fail "zero-train does not warn: $out"
fi
grep -q '"kind":"summary".*"cpu":".*"blas":{.*"core":"Prescott"' "$work/m.jsonl" ||
  fail "the summary does not record the CPU and the core: $(tail -1 "$work/m.jsonl")"

# 3. A core the CPU cannot run is refused, saying what it lacks.
if [[ $best == unknown ]]; then
  echo "not x86-64: no core to refuse"
  exit 0
fi
if ! has avx512f; then
  core=SkylakeX lacks=AVX-512
elif ! has fma4; then
  core=Bulldozer lacks=FMA4
else
  echo "this CPU runs every core zero knows the needs of: nothing to refuse"
  exit 0
fi
rc=0
out=$(OPENBLAS_CORETYPE=$core "$bench" blas --info 2>&1) || rc=$?
[[ $rc -eq 1 ]] || fail "OPENBLAS_CORETYPE=$core: exit status $rc, expected 1: $out"
[[ $out == *"OPENBLAS_CORETYPE=$core: OpenBLAS's $core kernels use $lacks"*"illegal instruction"*"unset it"* ]] ||
  fail "OPENBLAS_CORETYPE=$core: not refused with what the CPU lacks: $out"
rc=0
out=$(OPENBLAS_CORETYPE=$core "$train" --config "$work/config.json" --model tiny --device 1 \
  --data "$source_dir/data/fortunes.txt" --seq 16 --steps 1 --no-progress 2>&1) || rc=$?
[[ $rc -eq 1 && $out == *"zero-train: OPENBLAS_CORETYPE=$core: OpenBLAS's $core kernels use $lacks"* ]] ||
  fail "zero-train with OPENBLAS_CORETYPE=$core: exit status $rc: $out"
echo "PASS"
