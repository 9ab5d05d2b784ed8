#!/usr/bin/env bash
# scripts/test-tsan.sh [--build | --run] [BUILD_DIR]: ThreadSanitizer over the asynchronous CPU
# device (`make test-tsan`; CI runs it; `make tsan-build` is --build alone).
#
# Builds BUILD_DIR (default build-tsan: ZERO_SANITIZE=thread at -O1 with line tables, without
# CUDA) with the unit tests, the equivalence program and zero-run (--build: only that), then runs
# (--run: only that), with ZERO_CPU_DEVICE=async (every stream a worker thread, events as
# markers in the queues):
#   1. every unit test but the numeric sweeps ([sweep]: one kernel over every format at 100003
#      elements, 106 of the 154 s the unit tests took under TSan): they run on the calling
#      thread alone here (see OpenMP below), so there is nothing in them to race;
#   2. the equivalence matrix (stages 0-3, every precision, offload) on 2 ranks, its
#      super_offload cases (the speculation's worker thread beside the streams), and on 4 ranks
#      the hybrid sharding cases (the replicas' all-reduce on the epilogue stream) and hpZ's
#      (the secondary copies), and ZeRO++'s quantized cases on 2 ranks (dequantization on the
#      default and epilogue streams);
# in two lanes at once: the checkpoint cases ([checkpoint], the slowest group here), then the
# super_offload, hybrid and hpZ cases; the other unit tests, then the matrix and the quantized
# cases.
# The races this looks for are between the engine's threads: the device's stream workers, the
# caller, MPI's progress thread, the swap I/O. OpenMP regions run on one thread
# (OMP_NUM_THREADS=1, OMP_THREAD_LIMIT=1): libgomp is not built with TSan, so its barriers are
# invisible to it and every parallel loop would be reported as a race. Any report fails the run
# (TSAN_OPTIONS halt_on_error=1, exit code 66), with the report on stderr.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_it=1 run_it=1
case ${1:-} in
  --build) run_it=0 && shift ;;
  --run) build_it=0 && shift ;;
  -*)
    echo "usage: scripts/test-tsan.sh [--build | --run] [BUILD_DIR]" >&2
    exit 2
    ;;
esac
build=${1:-build-tsan}
jobs=${JOBS:-$(nproc)}
generator=Ninja
command -v ninja >/dev/null || generator="Unix Makefiles"

if ((build_it)); then
  # UNITY_FLAGS (make test-tsan passes the Makefile's): a unity build, about half the time.
  read -r -a unity <<<"${UNITY_FLAGS:-}"
  cmake -S . -B "$build" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG" \
    -DZERO_DEBUG_INFO=lines -DZERO_WITH_CUDA=OFF -DZERO_SANITIZE=thread "${unity[@]}" >/dev/null
  cmake --build "$build" -j "$jobs" --target zero_unit_tests zero_engine_equivalence zero-run
fi
((run_it)) || exit 0

export ZERO_CPU_DEVICE=async OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 ZERO_LOG_LEVEL=warn
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1 exitcode=66 second_deadlock_stack=1}
# mpirun as root (CI runs as root) and with more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

start=$SECONDS
# Two lanes at once, one core each: the checkpoint cases ([checkpoint], the slowest group under
# TSan), then the super_offload cases on 2 ranks and the hybrid and hpZ ones on 4 (about 50 s
# here); the other cases, then the equivalence matrix on 2 ranks (about 30 s).
echo "test-tsan: the unit tests and the equivalence matrix, in two lanes"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
unit() { (cd "$build/tests" && timeout 1200 ./zero_unit_tests "$1"); }
equivalence() {
  local ranks=$1
  shift
  (cd "$build/tests" &&
    timeout 1200 ../tools/zero-run/zero-run -n "$ranks" -- ./zero_engine_equivalence "$@")
}
lane0() {
  unit '[checkpoint]~[.]~[sweep]' && equivalence 2 --super-offload && equivalence 4 --hybrid &&
    equivalence 4 --hpz
}
lane1() { unit '~[checkpoint]~[.]~[sweep]' && equivalence 2 && equivalence 2 --quantized; }
lanes=("the unit tests [checkpoint], then the super_offload, hybrid (4 ranks) and hpZ (4 ranks) cases"
  "the other unit tests, then the equivalence matrix and the quantized cases")
pids=()
for i in "${!lanes[@]}"; do
  "lane$i" >"$logs/$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!lanes[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  if ((rc != 0)); then
    cat "$logs/$i.log"
    echo "test-tsan: ${lanes[$i]} failed (exit $rc)" >&2
    failed=1
  else
    grep -E '^(All tests passed|[0-9]+ case\(s\) failed)' "$logs/$i.log" || true
  fi
done
((failed == 0)) || exit 1
echo "test-tsan: no race reported ($((SECONDS - start)) s)"
