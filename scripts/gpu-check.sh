#!/usr/bin/env bash
# scripts/gpu-check.sh: the GPU verification, run on the GPU machine (`make gpu-check`).
#
#   scripts/gpu-check.sh [BUNDLE] [RESULTS_DIR]      the checks, on a GPU machine
#   scripts/gpu-check.sh --plan                      print the plan and stop
#   scripts/gpu-check.sh --dry-run [RESULTS_DIR]     the whole run here, GPU programs stood in for
#   scripts/gpu-check.sh --help                      this text
#
# BUNDLE (default gpu-bundle/zero-gpu.tar.gz) comes from scripts/gpu-bundle.sh on a machine
# that builds CUDA; RESULTS_DIR defaults to $OUT when set, else gpu-results. The first run's
# purpose is a verdict on correctness, then speed, so the checks go in the order of what they
# prove, each made of items (one program run each):
#   env        the machine (GPU, driver, CPU, memory, disk, glibc, NCCL, cuBLASLt, PyTorch, which
#              Open MPI the programs load), then env.mpi: MPI_Init in zero_mpi_probe alone and
#              on 2 ranks through zero-run and mpirun, printing the MPI library that ran
#              (MPI_Get_library_version) and the file it came from. Always runs first.
#   gpu-tests  every [gpu] test but the models' layer cases (device kernels and memory, the GPU
#              fused Adam, NCCL on one rank, the engine on a GPU); the layer cases ("cuda
#              layers: *") in a process of their own, since a kernel that faults spoils the
#              CUDA context for every later case; then compute-sanitizer --tool memcheck on
#              two small layer cases and on the C training test (skipped, saying so, where the
#              machine has no compute-sanitizer or it cannot use the GPU)
#   engine     the engine on GPU 0 through zero.h at one rank: the C training test, the
#              equivalence matrix (stages 0-3, fp32/bf16/fp16, offload, accumulation, clipping;
#              the engine under test on NCCL), the overlap of communication with compute from
#              CUDA events (wall_clock_breakdown), ZeRO++'s quantized gathers and gradients on
#              2 ranks sharing the GPU (the CUDA quantization kernels in the engine)
#   models     the CUDA models beside the CPU models: zero_gpu_model_tests (GPT-2, Llama and
#              Qwen2 through the engine: loss, gradient norm, update directions, logits), then
#              zero-train on the CPU (--device 1) and on the GPU (--device 2) from the same seed
#              and data, bf16, 10 steps of each family at a tiny size (gpt2: tiny; llama:
#              llama-tiny; qwen2: qwen2.5-0.5b cut to 4 layers of 128 channels), their losses
#              side by side, step by step, within bf16's tolerance (scripts/compare-losses.py);
#              then GPT-2 1.5B from the same weights as PyTorch, on the same batches, 20 steps,
#              each loss within 2% of PyTorch's (bench/gpt_vs_torch.py)
#   python     the PyTorch front end (python/zero over the bundle's libzero, the machine's
#              PyTorch and transformers): tiny seeded Hugging Face models
#              (tests/python/make_tiny_models.py), a Llama through zero.initialize on the GPU
#              against PyTorch on it step by step at stages 0-3 (tests/python/train_parity.py),
#              then GPT-2 124M in bf16 through zero.initialize at stage 3 against FSDP2
#              (fully_shard), and with the optimizer on the CPU against FSDP2's
#              CPUOffloadPolicy (bench/frontend.py), a run an item, tokens/s side by side
#   speed      bench/gpu.sh on the first of MODELS (default gpt2-1.5b gpt2-124m), one run an
#              item, the PyTorch baselines first: SPEED_RUNS (default "torch-plain
#              torch-fsdp2-offload zero-stage0 zero-stage3-optcpu", the two like-for-like pairs;
#              "all": the nine runs bench/gpu.sh knows, among them zero-stage3-optcpu-super, the
#              offloaded step overlapped with backward, and zero-stage3-optcpu-accum, the same
#              accumulating 4 micro-batches summed on the GPU), STEPS timed (5) after WARMUP (2)
# CHECKS (default "gpu-tests engine models python speed") names the checks after env. The default is
# sized to the default budget; these are left out of it for their length:
#   engine-ranks  the equivalence matrix on 2 and 4 ranks sharing the GPU through MPI
#   llama      llama-3.2-1b through the engine (bf16, stage 0, 8 steps) and in PyTorch eager
#   more-models the other MODELS: ours at stage 0 against plain PyTorch
#   compile    torch.compile for the first model and the Llama
#   cpu-bench  zero-bench adam (this machine's cores), aio (its disk) and blas (the CPU layers'
#              products with zero's choice of OpenBLAS kernels, and with the SSE fallback)
#   coverage   what the default plan has no room for, a call of its own (CHECKS=coverage):
#              super_offload's equivalence cases on CUDA (early placement, rollback, the fp16
#              skip, NVMe), memcheck on them and on ZeRO++'s quantized cases (2 ranks)
#   profile    Nsight Systems (nsys, where the machine has it) on 3 steps each of zero-train's
#              gpt2-1.5b at stage 0 and at stage 3 with the optimizer on the CPU: the top
#              kernels, the copies and their overlap with compute, as text (CHECKS=profile)
#   deepspeed  DeepSpeed itself beside zero, sized for a call of its own (CHECKS=deepspeed, the
#              default budget): its wheels from the bundle installed into a venv over the
#              machine's site packages (deepspeed.install, saying whether a compiler is there for
#              its JIT-built FusedAdam and DeepSpeedCPUAdam), then bench/gpu.sh's rows on the
#              first of MODELS with one config file a pair: FSDP2, DeepSpeed ZeRO-3 and
#              zero-train stage 3 (the stage-3 row without offload), DeepSpeed ZeRO-3 + CPU offload and zero-train stage 3 with the optimizer on the
#              CPU; then the front end's GPT-2 124M through deepspeed.initialize and
#              zero.initialize, one script (bench/frontend.py) and one config, stage 3 without and
#              with CPU offload
#   largest    the largest Llama that trains on this one GPU with the optimizer state between
#              host memory and NVMe (LARGEST, default llama-2-13b; NVME_DIR, default
#              /tmp/zero-largest): zero-mem's plan for this machine, zero-train for 3 steps with
#              the keys it recommends, reserved bytes per tier and the step time side by side
#
# The plan and the budget. Each item's expected seconds and time limit are in
# bench/gpu-check-times.txt (GPU_CHECK_TIMES), measured on a GPU machine or estimated, as each
# line says; scripts/gpu-check-times.py update folds a run's measured seconds back into it. The
# run prints the plan first: every item, its expected seconds, when it ends, and whether it fits
# BUDGET (seconds, default 480: with the transfers, one command within the device's 10 minutes).
# An item starts only while its expected seconds fit in what is left, under a time limit cut to
# what is left; otherwise it is skipped, with a line saying so.
#
# The dry run (--dry-run, or GPU_CHECK_DRY_RUN=1) runs this whole script here, without a GPU or
# a bundle: every GPU program (the bundle's, nvidia-smi, compute-sanitizer, PyTorch's python3)
# is scripts/gpu-check-standin.sh, which prints what the program prints when it passes, and each
# item takes its expected seconds on the run's clock, of which it sleeps TIME_SCALE (default
# 0.1). It proves the order, the plan, the budget's skips and the summary; the test "tool:
# gpu-check's dry run reaches every check within the default budget" runs it.
#
# Writes into RESULTS_DIR: summary.txt (the plan, the headline of each item, the models' loss
# tables, bench/gpu.sh's table, and the outcome of every check and item: passed, failed with
# the reason, or skipped with the reason), results.jsonl (a line for the run, one per item and
# one per measurement), train_gpu.txt and train_gpu.jsonl (bench/gpu.sh's table and records),
# largest-plan.json and largest.jsonl (the largest check's plan and metrics), and logs.tar.gz
# (each item's full log and the models' metrics; logs/ until the end): seven files at most,
# within the GPU machine's eight. Exit status: 0 when every item that ran passed, 1 when one
# failed, 2 when the run could not start (a usage error, no bundle).
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dry_run=${GPU_CHECK_DRY_RUN:-0}
[[ $dry_run == 0 ]] && dry_run=
plan_only=
args=()
while (($#)); do
  case $1 in
    --dry-run) dry_run=1 ;;
    --plan) plan_only=1 ;;
    -h | --help)
      sed -n '2,/^set -uo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    -*) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) args+=("$1") ;;
  esac
  shift
done
cd "$root" || exit 2
if [[ -n $dry_run ]]; then
  bundle=
  out=${args[0]:-${OUT:-gpu-results}}
else
  bundle=${args[0]:-gpu-bundle/zero-gpu.tar.gz}
  out=${args[1]:-${OUT:-gpu-results}}
fi
budget=${BUDGET:-480}
scale=${TIME_SCALE:-0.1}
times=${GPU_CHECK_TIMES:-bench/gpu-check-times.txt}
read -r -a models <<<"${MODELS:-gpt2-1.5b gpt2-124m}"
all_speed_runs=(torch-plain torch-fsdp2 torch-fsdp2-offload zero-stage0 zero-stage3
                zero-stage3-optcpu zero-stage3-optcpu-super zero-stage3-optcpu-accum
                zero-stage3-allcpu)
read -r -a speed_runs <<<"${SPEED_RUNS:-torch-plain torch-fsdp2-offload zero-stage0 zero-stage3-optcpu}"
[[ ${speed_runs[*]} == all ]] && speed_runs=("${all_speed_runs[@]}")
families=(gpt2 llama qwen2)
known_checks=(env gpu-tests engine models python speed engine-ranks llama more-models compile
              cpu-bench largest deepspeed coverage profile)
# The front end's runs on one GPU, each against its peer (python check)
python_runs=(fsdp2 zero-stage3 fsdp2-offload zero-stage3-offload)
checks=(env)
for check in ${CHECKS:-gpu-tests engine models python speed}; do
  [[ $check == env ]] && continue
  if [[ " ${known_checks[*]} " != *" $check "* ]]; then
    echo "gpu-check: unknown check '$check' in CHECKS (known: ${known_checks[*]})" >&2
    exit 2
  fi
  checks+=("$check")
done
for run in "${speed_runs[@]}"; do
  if [[ " ${all_speed_runs[*]} " != *" $run "* ]]; then
    echo "gpu-check: unknown run '$run' in SPEED_RUNS (known: all ${all_speed_runs[*]})" >&2
    exit 2
  fi
done

# items_of CHECK: its items, in the order they run (the names in bench/gpu-check-times.txt)
items_of() {
  local f r m
  case $1 in
    env) echo env env.mpi ;;
    gpu-tests) echo gpu-tests.unit gpu-tests.layers gpu-tests.memcheck-layers \
                    gpu-tests.memcheck-engine ;;
    engine) echo engine.c-train engine.equivalence-1 engine.overlap engine.quantized-2 ;;
    models)
      echo models.tests
      for f in "${families[@]}"; do echo "models.$f-cpu models.$f-gpu"; done
      echo models.gpt2-1.5b-vs-torch
      ;;
    python) echo python.models python.parity; for r in "${python_runs[@]}"; do echo "python.$r"; done ;;
    speed) for r in "${speed_runs[@]}"; do echo "speed.$r"; done ;;
    engine-ranks) echo engine-ranks.equivalence-2 engine-ranks.equivalence-4 ;;
    llama) echo llama.zero-train llama.torch-eager ;;
    more-models) for m in "${models[@]:1}"; do echo "more-models.$m"; done ;;
    compile) echo compile.gpt compile.llama ;;
    cpu-bench) echo cpu-bench.adam cpu-bench.aio cpu-bench.blas ;;
    coverage) echo coverage.super-offload coverage.memcheck-super-offload \
                   coverage.memcheck-quantized ;;
    profile) echo profile.nsys-stage0 profile.nsys-stage3-optcpu ;;
    deepspeed) echo deepspeed.install deepspeed.torch-fsdp2 deepspeed.stage3 deepspeed.zero-stage3 \
                    deepspeed.stage3-optcpu deepspeed.zero-stage3-optcpu \
                    deepspeed.python-deepspeed-stage3 deepspeed.python-zero-stage3 \
                    deepspeed.python-deepspeed-stage3-offload deepspeed.python-zero-stage3-offload ;;
    largest) echo largest.plan largest.train ;;
  esac
}
planned=()
for check in "${checks[@]}"; do read -r -a items <<<"$(items_of "$check" | xargs)"; planned+=("${items[@]}"); done

# ---- the plan: every item's expected seconds against the budget
declare -A expected limit_of
while read -r item seconds limit _; do
  [[ -z $item || $item == \#* ]] && continue
  expected[$item]=$seconds
  limit_of[$item]=$limit
done <"$times"
plan=$(python3 scripts/gpu-check-times.py plan "$times" "$budget" "${planned[@]}") || exit 2
if [[ -n $plan_only ]]; then
  echo "$plan"
  exit 0
fi

logs=$out/logs  # every item's full log, packed into logs.tar.gz at the end
mkdir -p "$out" "$logs" || exit 2
summary=$out/summary.txt
jsonl=$out/results.jsonl
: >"$summary"
: >"$jsonl"
status=0

say() { echo "$*" | tee -a "$summary"; }

# ---- the bundle, or the dry run's stand-ins
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
# python3 itself, not a version manager's shim: pyenv's runs about ten processes a call, more
# than the work of most of this script's calls (about a hundred in a dry run). A script that
# execs the interpreter, not a link to it, so that a venv's stays that venv.
if real_python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) &&
  [[ -x $real_python ]]; then
  mkdir -p "$dest/python"
  printf '#!/bin/sh\nexec %q "$@"\n' "$real_python" >"$dest/python/python3"
  chmod +x "$dest/python/python3"
  export PATH=$dest/python:$PATH
fi
z=$dest/zero-gpu
torch_python=${TORCH_PYTHON:-python3}
bundle_programs=(zero_gpu_tests zero_gpu_model_tests zero_c_train_gpu_test
                 zero_engine_equivalence_gpu zero_engine_overlap_gpu zero_mpi_probe zero-train
                 zero-run zero-bench zero-mem)
if [[ -n $dry_run ]]; then
  mkdir -p "$z/bin" "$z/lib/mpi" "$dest/standin"
  echo "dry run" >"$z/COMMIT"
  echo 90 >"$z/CUDA_ARCHS"
  for p in "${bundle_programs[@]}"; do ln -s "$root/scripts/gpu-check-standin.sh" "$z/bin/$p"; done
  for p in nvidia-smi compute-sanitizer python3-torch; do
    ln -s "$root/scripts/gpu-check-standin.sh" "$dest/standin/$p"
  done
  export PATH=$dest/standin:$PATH
  torch_python=$dest/standin/python3-torch
else
  if [[ ! -f $bundle ]]; then
    echo "gpu-check: no bundle at $bundle: build it where CUDA compiles (make gpu-bundle) and" \
         "carry gpu-bundle; or --dry-run to rehearse here" >&2
    exit 2
  fi
  tar -C "$dest" -xzf "$bundle" || { echo "gpu-check: $bundle does not unpack" >&2; exit 2; }
fi

# ---- the clock, the items and their outcomes
# The run's clock: the seconds since this script started (SECONDS: the bundle's unpacking is in
# the budget); in the dry run, the expected seconds of the items run so far (each slept
# TIME_SCALE of), so the plan is proved whatever this machine's speed.
spent=0
elapsed() { if [[ -n $dry_run ]]; then echo "$spent"; else echo "$SECONDS"; fi; }
declare -A outcome note took
item_limit=0 item_t0=0
# record ITEM OUTCOME EXIT SECONDS NOTE: its line in results.jsonl
record() {
  python3 -c 'import json, sys
item, outcome, code, seconds, expected, limit, note = sys.argv[1:8]
print(json.dumps({"check": item.split(".")[0], "item": item, "outcome": outcome,
                  "exit": int(code) if code else None, "seconds": int(seconds),
                  "expected": int(expected), "limit": int(limit), "note": note}))' \
    "$1" "$2" "$3" "$4" "${expected[$1]}" "${limit_of[$1]}" "$5" >>"$jsonl"
}
# skip ITEM REASON: ITEM does not run
skip() {
  outcome[$1]=skipped note[$1]=$2 took[$1]=0
  say "$1: skipped: $2"
  record "$1" skipped "" 0 "$2"
}
# begin ITEM: true, with item_limit set (its time limit, cut to what is left of the budget),
# when its expected seconds fit in what is left; else ITEM is skipped, saying so.
begin() {
  local item=$1 left=$((budget - $(elapsed)))
  if ((${expected[$item]} > left)); then
    skip "$item" "the budget is spent: $(elapsed) s of $budget s gone, it expects ${expected[$item]} s"
    return 1
  fi
  item_limit=$((${limit_of[$item]} < left ? ${limit_of[$item]} : left))
  item_t0=$SECONDS
  export GPU_CHECK_ITEM=$item
}
# tmo COMMAND...: COMMAND under the item's time limit
tmo() { timeout -k 10 "$item_limit" "$@"; }
# finish ITEM EXIT [REASON]: ITEM's outcome from its exit status: 0 passed, 77 skipped (no GPU),
# else failed; REASON says why when it did not pass.
finish() {
  local item=$1 rc=$2 why=${3:-} seconds result
  if [[ -n $dry_run ]]; then
    seconds=$((${expected[$item]} < item_limit ? ${expected[$item]} : item_limit))
    sleep "$(awk -v s="$seconds" -v k="$scale" 'BEGIN {printf "%.3f", s * k}')"
    spent=$((spent + seconds))
    if ((${expected[$item]} > item_limit)); then
      rc=124 why="timed out after $item_limit s (dry run: it expects ${expected[$item]} s)"
    fi
  else
    seconds=$((SECONDS - item_t0))
  fi
  case $rc in
    0) result=passed ;;
    77) result=skipped why=${why:-no GPU} why=${why#SKIPPED: } ;;
    124 | 137) result=failed why=${why:-timed out after $item_limit s} ;;
    *) result=failed why=${why:-exit $rc} ;;
  esac
  if ((rc > 128 && rc != 137)); then  # a crash: the signal, which the log does not show
    why="killed by SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))): $why"
  fi
  [[ $result == failed ]] && status=1
  outcome[$item]=$result note[$item]=$why took[$item]=$seconds
  say "$item: $result${why:+: $why} ($seconds s, expected ${expected[$item]} s)"
  record "$item" "$result" "$rc" "$seconds" "$why"
  unset GPU_CHECK_ITEM
}
# last_line LOG: its last line that says something, cut to 160 characters
last_line() { grep -v '^\s*$' "$1" 2>/dev/null | grep -v '^[-=.]\+$' | tail -1 | cut -c1-160; }
# fail_reason LOG: its first FAIL line, else its last line
fail_reason() {
  local line
  line=$(grep -m1 '^FAIL' "$1" | cut -c1-160)
  echo "${line:-$(last_line "$1")}"
}
# catch_reason LOG EXIT: why a Catch2 program did not pass: the first failing case and the count
catch_reason() {
  local log=$1 rc=$2 first count
  ((rc == 0)) && return
  if unmatched_spec "$log" >/dev/null; then unmatched_spec "$log"; return; fi
  if ((rc == 77)); then grep -m1 '^SKIPPED' "$log" | cut -c1-160; return; fi
  # Catch2 names a failing case (and its sections, over lines when long) between two rules.
  first=$(awk '/^-+$/ {if (open) {name = text; open = 0} else {open = 1; text = ""}; next}
               open {sub(/^ +/, ""); text = text (text == "" ? "" : " ") $0; next}
               /FAILED:|due to a fatal error/ {print name; exit}' "$log" | cut -c1-160)
  count=$(grep -m1 '^test cases:' "$log")
  local parts=()
  [[ -n $count ]] && parts+=("$count")
  [[ -n $first ]] && parts+=("the first to fail: $first")
  ((${#parts[@]} > 0)) || parts+=("$(last_line "$log")")
  local IFS=';'
  echo "${parts[*]}" | sed 's/;/; /g'
}

# ---- the libraries: the bundle's, the machine's NCCL, cuBLASLt and Open MPI
nccl_dir=$(dirname "$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)
libs=$z/lib${nccl_dir:+:$nccl_dir}
# cuBLASLt (the models' products) is the machine's: its CUDA toolkit's, else PyTorch's wheel's
# (the bundle cannot carry its 500 MB).
cublas_dir=$(dirname "$( (ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null;
  find /usr /opt -name 'libcublasLt.so.13' 2>/dev/null) | head -1)" 2>/dev/null)
libs=$libs${cublas_dir:+:$cublas_dir}
# Open MPI: the machine's where it has one, since a core library of one version with the
# plugins of another (the machine's, found by the path built into the library) fails in
# MPI_Init: the libmpi.so.40 beside the first mpirun on PATH, else the loader's. Only where the
# machine has none, the bundle's copy (lib/mpi), which loads the programs; without Open MPI's
# plugins and mpirun it cannot start ranks, and env.mpi says so.
mpirun_path=$(command -v mpirun || true)
mpi_lib=
if [[ -n $mpirun_path ]]; then
  mpi_lib=$(dirname "$(readlink -f "$mpirun_path")")/../lib/libmpi.so.40
  [[ -e $mpi_lib ]] && libs=$libs:$(dirname "$mpi_lib") || mpi_lib=
fi
[[ -n $mpi_lib ]] || mpi_lib=$(ldconfig -p 2>/dev/null | awk '$1 == "libmpi.so.40" {print $NF; exit}')
if [[ -n $mpi_lib ]]; then
  mpi_source="the machine's Open MPI, $(readlink -f "$mpi_lib")"
else
  libs=$libs:$z/lib/mpi
  mpi_source="the bundle's Open MPI libraries (lib/mpi): the machine has no libmpi.so.40"
fi
# The bundled libstdc++ only where the machine's lacks a version we were built against.
if [[ -z $dry_run ]] && LD_LIBRARY_PATH=$libs ldd "$z"/bin/* 2>&1 | grep -q 'GLIBCXX\|CXXABI\|GCC_'; then
  libs=$libs:$z/lib/fallback
fi
export ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn}
run_z() { LD_LIBRARY_PATH=$libs "$@"; }
# The bundle's zero-train with its libraries, for bench/gpu.sh (ZERO_TRAIN).
cat >"$dest/zero-train" <<EOF
#!/usr/bin/env bash
LD_LIBRARY_PATH=$libs exec $z/bin/zero-train "\$@"
EOF
chmod +x "$dest/zero-train"

gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1)
say "# zero gpu-check, $(date -u +%Y-%m-%dT%H:%MZ), bundle $(head -c 12 "$z/COMMIT")" \
    "(CUDA archs $(cat "$z/CUDA_ARCHS")), ${gpu_name:-no GPU found}" \
    "${dry_run:+(a dry run: stand-ins for the GPU programs, TIME_SCALE $scale)}"
python3 -c 'import json, sys
print(json.dumps({"kind": "run", "gpu": sys.argv[1] or None, "dry_run": sys.argv[2] == "1",
                  "budget": int(sys.argv[3]), "checks": sys.argv[4].split(),
                  "items": sys.argv[5].split()}))' \
  "$gpu_name" "${dry_run:-0}" "$budget" "${checks[*]}" "${planned[*]}" >>"$jsonl"
say "$plan"

# ---- env
mpi_ranks=  # set when env.mpi started 2 ranks
step_env() {
  say ""
  say "## env: the machine, and which MPI runs"
  if begin env; then
    {
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
      echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
      echo "cpu layers' blas: $(run_z "$z/bin/zero-bench" blas --info 2>&1 | grep -v '^  library:' | tr -s '\n ' ' ')"
      echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB; disk: $(df -h /tmp | awk 'NR == 2 {print $4}') free in /tmp"
      echo "glibc: $(ldd --version | head -1)"
      echo "nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1)"
      echo "nccl: ${nccl_dir:-none found}"
      echo "cublasLt: ${cublas_dir:-none found}"
      echo "mpi: $mpi_source; mpirun: ${mpirun_path:-none}${mpirun_path:+ ($(mpirun --version 2>&1 | head -1))}"
      echo "python3: $("$torch_python" -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
      if [[ -n $dry_run ]]; then
        echo "missing libraries: none looked for (a dry run: the programs are stand-ins)"
      else
        echo "missing libraries:"
        LD_LIBRARY_PATH=$libs ldd "$z"/bin/* "$z"/lib/libzero.so.0 | grep 'not found' | sort -u ||
          echo "  none"
      fi
    } 2>&1 | tee -a "$summary" "$logs/env.log"
    finish env 0
  fi
  if [[ ! -e $z/bin/zero_mpi_probe ]]; then
    skip env.mpi "the bundle has no zero_mpi_probe (built before it was added)"
    return
  fi
  begin env.mpi || return
  local log=$logs/env.mpi.log rc1 rc2=0 why=
  run_z timeout -k 5 $((item_limit / 2)) "$z/bin/zero_mpi_probe" >"$log" 2>&1
  rc1=$?
  say "MPI_Init alone: $(grep -m1 '^zero_mpi_probe:' "$log" || echo "exit $rc1: $(last_line "$log")")"
  if [[ -z $mpirun_path ]]; then
    say "MPI_Init on 2 ranks: not tried, no mpirun on this machine"
    why="no mpirun: the checks on several ranks cannot run"
  else
    run_z timeout -k 5 $((item_limit / 2)) "$z/bin/zero-run" -n 2 -- "$z/bin/zero_mpi_probe" \
      >"$log.2" 2>&1
    rc2=$?
    if ((rc2 == 0)); then
      mpi_ranks=1
      say "MPI_Init on 2 ranks (zero-run, mpirun):" \
          "$(grep -m1 '^zero_mpi_probe: rank 0 of 2' "$log.2")$(grep -q '^zero_mpi_probe: rank 1 of 2' \
          "$log.2" && echo "; rank 1 too")"
    else
      say "MPI_Init on 2 ranks (zero-run, mpirun): exit $rc2: $(last_line "$log.2")"
    fi
    cat "$log.2" >>"$log" && rm -f "$log.2"
  fi
  if ((rc1 != 0 || rc2 != 0)); then
    why="MPI_Init failed ($([[ $rc1 != 0 ]] && echo "alone, exit $rc1")$([[ $rc1 != 0 && $rc2 != 0 ]] && echo "; ")$([[ $rc2 != 0 ]] && echo "on 2 ranks, exit $rc2")): $(last_line "$log")"
    finish env.mpi 1 "$why"
  else
    finish env.mpi 0 "$why"
  fi
}

# ---- gpu-tests
# The two smallest layer cases that cover the hand-written kernels (layernorm, attention) for
# memcheck; Catch2 takes a list of names separated by commas.
memcheck_layer_cases="cuda layers: layernorm forward and backward match the CPU layer,cuda layers: attention's tile ranges follow the window edges across four tiles"
# catch_item ITEM PROGRAM SPEC: one run of a Catch2 [gpu] program
catch_item() {
  local item=$1 program=$2 spec=$3 log=$logs/$1.log rc
  begin "$item" || return
  run_z tmo "$z/bin/$program" --durations yes --warn NoTests ${spec:+"$spec"} >"$log" 2>&1
  rc=$?
  ((rc == 0)) && unmatched_spec "$log" >/dev/null && rc=1
  grep -E '^(test cases|All tests passed|SKIPPED)|losses .* \(GPU\)' "$log" | tee -a "$summary"
  finish "$item" "$rc" "$(catch_reason "$log" "$rc")"
}
# unmatched_spec LOG: the case names of a Catch2 spec that matched nothing (Catch2 runs the
# others and passes: a renamed case would drop out of a check unseen)
unmatched_spec() { grep -m1 '^No test cases matched' "$1"; }
# memcheck_item ITEM PROGRAM [ARGS...]: PROGRAM under compute-sanitizer's memcheck
memcheck_item() {
  local item=$1 log=$logs/$1.log rc why='' sanitizer
  shift
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  if [[ -z $sanitizer ]]; then
    skip "$item" "no compute-sanitizer on this machine"
    return
  fi
  begin "$item" || return
  # MEMCHECK_RANKS=N: each of N ranks under memcheck, started by the bundle's zero-run.
  local launch=()
  [[ -n ${MEMCHECK_RANKS:-} ]] && launch=("$z/bin/zero-run" -n "$MEMCHECK_RANKS" --)
  run_z tmo "${launch[@]}" "$sanitizer" --tool memcheck --error-exitcode 99 --print-limit 20 \
    "$@" >"$log" 2>&1
  rc=$?
  say "$item: $(grep -m1 -o 'ERROR SUMMARY: .*' "$log" || echo "no error summary")"
  if unmatched_spec "$log" >/dev/null; then
    rc=1 why=$(unmatched_spec "$log")
  elif grep -q 'Device not supported\|not supported on this platform' "$log"; then
    rc=77 why="compute-sanitizer cannot use this GPU: $(grep -m1 'not supported' "$log" | cut -c1-120)"
  elif ((rc == 99)); then
    why="memcheck: $(grep -m1 -o 'ERROR SUMMARY: .*' "$log"); the first: $(grep -m1 '^========= [A-Z]' "$log" | grep -v COMPUTE-SANITIZER | cut -c11-170)"
  elif ((rc != 0)); then
    why=$(catch_reason "$log" "$rc")
  fi
  finish "$item" "$rc" "$why"
}
step_gpu_tests() {
  say ""
  say "## gpu-tests: the [gpu] tests, the layer cases apart, then memcheck"
  catch_item gpu-tests.unit zero_gpu_tests "~cuda layers: *"
  catch_item gpu-tests.layers zero_gpu_tests "cuda layers: *"
  memcheck_item gpu-tests.memcheck-layers "$z/bin/zero_gpu_tests" --warn NoTests \
    "$memcheck_layer_cases"
  memcheck_item gpu-tests.memcheck-engine "$z/bin/zero_c_train_gpu_test"
}

# ---- engine
# engine_item ITEM COMMAND...: one engine test, its last line and its failures
engine_item() {
  local item=$1 log=$logs/$1.log rc
  shift
  begin "$item" || return
  ZERO_TEST_NVME_DIR=$dest/swap run_z tmo "$@" >"$log" 2>&1
  rc=$?
  say "$item: $(last_line "$log")"
  # Failures, and wall_clock_breakdown's lines (time per step; concurrent with compute).
  grep '^FAIL\|time per step\|concurrent with compute' "$log" | head -12 | tee -a "$summary"
  finish "$item" "$rc" "$( ((rc == 0)) || fail_reason "$log")"
}
step_engine() {
  say ""
  say "## engine: the engine on GPU 0 through zero.h, one rank"
  mkdir -p "$dest/swap"
  engine_item engine.c-train "$z/bin/zero_c_train_gpu_test"
  engine_item engine.equivalence-1 "$z/bin/zero-run" -n 1 -- \
    "$z/bin/zero_engine_equivalence_gpu" --device cuda
  engine_item engine.overlap "$z/bin/zero_engine_overlap_gpu"
  # ZeRO++'s quantized gathers and gradients: the CUDA quantization kernels in the engine, on 2
  # ranks sharing the GPU through MPI (an all-to-all staged through pinned memory).
  if [[ -z $mpi_ranks ]]; then
    skip engine.quantized-2 "MPI did not start 2 ranks in env.mpi: ${note[env.mpi]:-not probed}"
  else
    engine_item engine.quantized-2 "$z/bin/zero-run" -n 2 -- \
      "$z/bin/zero_engine_equivalence_gpu" --device cuda --quantized
  fi
  rm -rf "$dest/swap"
}
step_engine_ranks() {
  say ""
  say "## engine-ranks: the equivalence matrix on 2 and 4 ranks sharing GPU 0 through MPI"
  mkdir -p "$dest/swap"
  local ranks
  for ranks in 2 4; do
    if [[ -z $mpi_ranks ]]; then
      skip "engine-ranks.equivalence-$ranks" \
           "MPI did not start 2 ranks in env.mpi: ${note[env.mpi]:-not probed}"
      continue
    fi
    engine_item "engine-ranks.equivalence-$ranks" "$z/bin/zero-run" -n "$ranks" -- \
      "$z/bin/zero_engine_equivalence_gpu" --device cuda
  done
  rm -rf "$dest/swap"
}

# ---- models
# The tiny models of each family, byte-level (data/fortunes.txt as bytes).
family_args() {
  case $1 in
    gpt2) echo --model tiny ;;
    llama) echo --model llama-tiny ;;
    qwen2) echo --model qwen2.5-0.5b --layers 4 --heads 4 --kv-heads 2 --channels 128 \
                --intermediate 352 --positions 64 --vocab 256 ;;
  esac
}
step_models() {
  say ""
  say "## models: the CUDA models beside the CPU models, from the same initial values and data"
  catch_item models.tests zero_gpu_model_tests ""
  # bf16 (the CUDA models' only format), AdamW at lr 5e-4 (a smooth start: at 1e-3 the tiny
  # GPT's loss jumps at step 8 on either device), stage 0, one rank.
  printf '%s\n' '{"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": true},' \
    '"steps_per_print": 1, "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},' \
    '"optimizer": {"type": "AdamW", "params": {"lr": 5e-4, "weight_decay": 0.0}}}' \
    >"$dest/models.json"
  say "zero-train, 10 steps of 8 x 64 tokens from seed 1234, bf16, on the CPU (--device 1) and" \
      "the GPU (--device 2); scripts/compare-losses.py's tolerances"
  local family device rc why log fargs
  for family in "${families[@]}"; do
    read -r -a fargs <<<"$(family_args "$family")"
    declare -A ran=()
    for device in cpu gpu; do
      local item=models.$family-$device
      begin "$item" || continue
      log=$logs/$item.log
      rm -f "$logs/$item.jsonl"
      run_z tmo "$z/bin/zero-train" --device "$([[ $device == cpu ]] && echo 1 || echo 2)" \
        --config "$dest/models.json" "${fargs[@]}" --data data/fortunes.txt \
        --seq 64 --micro-batch 8 --steps 10 --seed 1234 --eval-batches 4 --no-progress \
        --metrics "$logs/$item.jsonl" >"$log" 2>&1
      rc=$?
      why=
      ((rc == 0)) || why=$(grep '^zero-train: \|rror' "$log" | tail -1 | cut -c1-160)
      if [[ $device == gpu && $rc == 0 ]]; then
        if [[ ${ran[cpu]:-} == 1 ]]; then
          python3 scripts/compare-losses.py --label "$family" "$logs/models.$family-cpu.jsonl" \
            "$logs/$item.jsonl" >"$log.compare" 2>&1
          rc=$?
          tee -a "$summary" <"$log.compare"
          ((rc == 0)) || why=$(tail -1 "$log.compare" | cut -c1-200)
          rm -f "$log.compare"
        else
          why="nothing to compare with: the CPU run did not pass"
          say "$family: $why"
        fi
      fi
      ((rc == 0)) && ran[$device]=1
      finish "$item" "$rc" "$why"
    done
  done
  # GPT-2 1.5B at its real size from the same weights as PyTorch, on the same batches, 20 steps
  # (bench/gpt_vs_torch.py): zero-train's CUDA layers against PyTorch plain, bf16, each step's
  # loss within 2% of PyTorch's. The speed check's figures count only beside this.
  if begin models.gpt2-1.5b-vs-torch; then
    log=$logs/models.gpt2-1.5b-vs-torch.log
    tmo "$torch_python" bench/gpt_vs_torch.py --zero-train "$dest/zero-train" \
      --python "$torch_python" --model gpt2-1.5b --device cuda --dtype bf16 --micro-batch 4 \
      --seq 1024 --steps 20 --tol 0.02 --out "$dest/gpt2-1.5b-vs-torch" >"$log" 2>&1
    rc=$?
    tail -26 "$log" | tee -a "$summary"
    finish models.gpt2-1.5b-vs-torch "$rc" "$( ((rc == 0)) || tail -1 "$log" | cut -c1-200)"
    cp "$dest/gpt2-1.5b-vs-torch/losses.json" "$logs/models.gpt2-1.5b-vs-torch.json" 2>/dev/null
    rm -rf "$dest/gpt2-1.5b-vs-torch"  # 3 GB of weights
  fi
}

# ---- python: the PyTorch front end (python/zero over the bundle's libzero) on the GPU
# The machine's python3 with PyTorch and transformers, the package from this checkout, the
# bundle's library.
run_py() {
  PYTHONPATH=$root/python ZERO_LIBRARY=$z/lib/libzero.so.0 HF_HUB_OFFLINE=1 \
    TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false LD_LIBRARY_PATH=$libs \
    tmo "$torch_python" "$@"
}
# python_item ITEM SCRIPT ARGS...: one front-end script, its verdict lines
python_item() {
  local item=$1 log=$logs/$1.log rc
  shift
  begin "$item" || return
  run_py "$@" >"$log" 2>&1
  rc=$?
  grep '^rank .* steps \(ok\|FAILED\)\|^  rank \|^skipped' "$log" | head -8 | tee -a "$summary"
  finish "$item" "$rc" "$( ((rc == 0)) || fail_reason "$log")"
}
# The model of the speed runs: GPT-2 124M (transformers' GPT2LMHeadModel, random), bf16 with
# fp32 master weights, 8 x 1024 tokens a step, AdamW, clipping at 1.0.
python_shape=(--device cuda --dtype bf16 --layers 12 --hidden 768 --vocab 50257 --micro 8
              --seq 1024 --steps 5 --warmup 2)
step_python() {
  say ""
  say "## python: zero.initialize on the GPU: a Hugging Face Llama against PyTorch step by" \
      "step, then GPT-2 124M against FSDP2"
  python_item python.models tests/python/make_tiny_models.py "$dest/hf"
  if [[ ${outcome[python.models]} == passed ]]; then
    python_item python.parity tests/python/train_parity.py "$dest/hf/llama" --device cuda \
      --offload none --loss-tol 1e-5 --norm-tol 1e-4
  else
    skip python.parity "no tiny models: python.models did not pass"
  fi
  local run framework offload log rc line
  for run in "${python_runs[@]}"; do
    framework=${run%%-*} offload=none
    [[ $run == *-offload ]] && offload=cpu
    begin "python.$run" || continue
    log=$logs/python.$run.log
    run_py bench/frontend.py --framework "$framework" --stage 3 --offload "$offload" \
      "${python_shape[@]}" >"$log" 2>&1
    rc=$?
    line=$(grep '^{' "$log" | tail -1)
    [[ -n $line ]] && python3 -c 'import json, sys
r = json.loads(sys.argv[1]); r["kind"] = "python"; r["run"] = sys.argv[2]
print(json.dumps(r))' "$line" "$run" >>"$jsonl"
    finish "python.$run" "$rc" "$( ((rc == 0)) || last_line "$log")"
  done
  python3 - "$jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = {r["run"]: r for r in map(json.loads, filter(str.strip, open(sys.argv[1])))
        if r.get("kind") == "python"}
print(f"{'GPT-2 124M, bf16, 8 x 1024':<28} {'tokens/s':>10} {'s/step':>8} {'loss':>7}  vs FSDP2")
for run in ["fsdp2", "zero-stage3", "fsdp2-offload", "zero-stage3-offload"]:
    r = rows.get(run)
    if not r:
        print(f"{run:<28} {'-':>10}")
        continue
    peer = rows.get("fsdp2-offload" if run.endswith("offload") else "fsdp2")
    ratio = f"{r['tokens_per_s'] / peer['tokens_per_s']:.2f}x" if peer and run.startswith("zero") else ""
    print(f"{run:<28} {r['tokens_per_s']:>10} {r['seconds_per_step']:>8} {r['loss']:>7}  {ratio}")
PY
}

# ---- speed
# speed_run ITEM RUNS MODEL: one bench/gpu.sh call; its table and records go to RESULTS_DIR
speed_run() {
  local item=$1 run=$2 model=$3 rc why
  begin "$item" || return
  STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} RUN_TIMEOUT=$((item_limit > 20 ? item_limit - 10 : item_limit)) \
    RUNS=$run RESULTS_DIR=$out ZERO_TRAIN=$dest/zero-train TORCH_PYTHON=$torch_python \
    DS_PYTHON=${DS_PYTHON:-$torch_python} \
    tmo bash bench/gpu.sh "$dest/none" "$model" >>"$logs/speed.log" 2>&1
  rc=$?
  why=$(python3 -c 'import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs, model = sys.argv[2].split(), sys.argv[3]
got = {r["run"]: r for r in rows if r.get("run") in runs and r.get("model") == model}
print("; ".join(f"{run}: " + ("no record" if run not in got else got[run].get("error", "ok"))
                for run in runs if run not in got or not got[run].get("ok")))' \
    "$out/train_gpu.jsonl" "$run" "$model" 2>/dev/null)
  finish "$item" "$rc" "$( ((rc == 0)) || echo "${why:-no record}" | cut -c1-200)"
}
step_speed() {
  say ""
  say "## speed: zero-train (bf16, CUDA models) against PyTorch on ${models[0]}, the PyTorch" \
      "baselines first"
  local run
  for run in "${speed_runs[@]}"; do speed_run "speed.$run" "$run" "${models[0]}"; done
  sed -n "/^## ${models[0]} /,/^\$/p" "$out/train_gpu.txt" 2>/dev/null | tee -a "$summary"
}
step_more_models() {
  say ""
  say "## more models: stage 0 against plain PyTorch, ${models[*]:1}"
  local model
  for model in "${models[@]:1}"; do
    speed_run "more-models.$model" "torch-plain zero-stage0" "$model"
    sed -n "/^## $model /,/^\$/p" "$out/train_gpu.txt" 2>/dev/null | tee -a "$summary"
  done
}

# ---- llama, compile: the Llama and torch.compile
# The Llama's shape for transformers' LlamaForCausalLM (bench/torch_lm.py).
llama_shape=(--family llama --layers 16 --heads 32 --kv-heads 8 --channels 2048
             --intermediate 8192 --vocab 128256 --positions 131072 --tied --micro-batch 4
             --seq 1024 --device cuda --dtype bf16)
# torch_json ITEM LABEL COMMAND...: a PyTorch benchmark printing a JSON line; its tokens/s
torch_json() {
  local item=$1 label=$2 log=$logs/$1.log rc line
  shift 2
  begin "$item" || return
  tmo "$@" >"$log" 2>&1
  rc=$?
  line=$(grep '^{' "$log" | tail -1)
  if [[ -n $line ]]; then
    echo "$line" >>"$jsonl"
    say "$label: $(python3 -c 'import json, sys
r = json.loads(sys.argv[1])
print("%.0f tokens/s" % r["tokens_per_s"] + (", MFU %.1f%%" % (100 * r["mfu"]) if r.get("mfu") else ""))' "$line")"
  else
    say "$label: exit $rc: $(last_line "$log")"
  fi
  finish "$item" "$rc" "$( ((rc == 0)) || last_line "$log")"
}
step_llama() {
  say ""
  say "## llama: llama-3.2-1b through the engine (bf16, stage 0, 8 steps) and in PyTorch eager"
  local item=llama.zero-train rc
  printf '%s\n' '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},' \
    '"steps_per_print": 1, "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},' \
    '"optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}}}' \
    >"$dest/llama.json"
  if begin "$item"; then
    run_z tmo "$z/bin/zero-train" --device 2 --config "$dest/llama.json" \
      --data data/fortunes.txt --model llama-3.2-1b --seq 1024 --steps 8 --no-progress \
      --metrics "$logs/$item.jsonl" >"$logs/$item.log" 2>&1
    rc=$?
    say "zero-train llama-3.2-1b: exit $rc:" \
        "$(grep '^done:\|^zero-train: ' "$logs/$item.log" | tail -1 | cut -c1-200)"
    grep '"kind": *"summary"' "$logs/$item.jsonl" >>"$jsonl" 2>/dev/null
    finish "$item" "$rc" "$( ((rc == 0)) || last_line "$logs/$item.log")"
  fi
  torch_json llama.torch-eager "llama-3.2-1b in PyTorch eager" "$torch_python" bench/torch_lm.py \
    "${llama_shape[@]}" --steps 5 --warmup-steps 2
}
step_compile() {
  say ""
  say "## compile: torch.compile, ${models[0]} and llama-3.2-1b"
  local batch seq
  read -r batch seq < <(case ${models[0]} in gpt2-124m | gpt2-350m) echo "8 1024" ;;
                        *) echo "4 1024" ;; esac)
  torch_json compile.gpt "${models[0]} with torch.compile, $batch x $seq" "$torch_python" \
    bench/torch_gpt.py --model "${models[0]}" --mode plain --device cuda --micro-batch "$batch" \
    --seq "$seq" --steps 5 --warmup-steps 3 --data data/fortunes.txt --json --compile
  torch_json compile.llama "llama-3.2-1b with torch.compile" "$torch_python" bench/torch_lm.py \
    "${llama_shape[@]}" --steps 5 --warmup-steps 3 --compile
}

# ---- cpu-bench
step_cpu_bench() {
  say ""
  say "## cpu-bench: zero-bench adam, aio and blas on this machine"
  local cores rc
  cores=$(nproc)
  if begin cpu-bench.adam; then
    run_z tmo "$z/bin/zero-bench" adam --elements 100e6 --threads 1 $((cores / 2)) "$cores" \
      --repeats 3 --json "$jsonl" >"$logs/cpu-bench.adam.log" 2>&1
    rc=$?
    tail -12 "$logs/cpu-bench.adam.log" | tee -a "$summary"
    finish cpu-bench.adam "$rc" "$( ((rc == 0)) || last_line "$logs/cpu-bench.adam.log")"
  fi
  if begin cpu-bench.aio; then
    mkdir -p "$dest/aio"
    run_z tmo "$z/bin/zero-bench" aio "$dest/aio" --size 1G --block-sizes 1M \
      --queue-depths 8,32 --repeats 3 --settle 0 --fio no --json "$jsonl" \
      >"$logs/cpu-bench.aio.log" 2>&1
    rc=$?
    tail -8 "$logs/cpu-bench.aio.log" | tee -a "$summary"
    finish cpu-bench.aio "$rc" "$( ((rc == 0)) || last_line "$logs/cpu-bench.aio.log")"
    rm -rf "$dest/aio"
  fi
  # The CPU layers' products with zero's choice of OpenBLAS kernels and with the SSE fallback
  # OpenBLAS 0.3.21 picks by itself on CPUs it does not recognise (Sapphire Rapids among them).
  if begin cpu-bench.blas; then
    {
      run_z tmo "$z/bin/zero-bench" blas --threads 1 "$cores" --vocab 8192 --repeats 3 --json "$jsonl" &&
        OPENBLAS_CORETYPE=Prescott run_z tmo "$z/bin/zero-bench" blas --threads 1 "$cores" \
          --vocab 8192 --repeats 3 --json "$jsonl"
    } >"$logs/cpu-bench.blas.log" 2>&1
    rc=$?
    grep -E '^zero-bench blas|^  CPU|^warning|^all of the above' "$logs/cpu-bench.blas.log" | tee -a "$summary"
    finish cpu-bench.blas "$rc" "$( ((rc == 0)) || last_line "$logs/cpu-bench.blas.log")"
  fi
}

# ---- deepspeed (not in the default CHECKS: a call of its own, CHECKS=deepspeed)
ds_python=
step_deepspeed() {
  say ""
  say "## deepspeed: DeepSpeed ZeRO-3, with and without CPU offload, beside zero on the same" \
      "model, batches and config file"
  local log=$logs/deepspeed.install.log rc compiler
  if begin deepspeed.install; then
    compiler="c++: $(command -v c++ || echo none); nvcc: $(command -v nvcc || echo none)"
    if [[ -n $dry_run ]]; then
      ds_python=$torch_python
      say "deepspeed: not installed (a dry run); $compiler"
      finish deepspeed.install 0
    elif ! compgen -G "$z/wheels/deepspeed-*.whl" >/dev/null; then
      finish deepspeed.install 1 "the bundle carries no DeepSpeed wheels (gpu-bundle made none)"
    else
      {
        "$torch_python" -m venv --system-site-packages "$dest/ds-venv" &&
          "$dest/ds-venv/bin/python" -m pip install --no-index --find-links "$z/wheels" \
            deepspeed &&
          "$dest/ds-venv/bin/python" -c 'import deepspeed, torch
print("deepspeed", deepspeed.__version__, "over torch", torch.__version__)'
      } >"$log" 2>&1
      rc=$?
      say "deepspeed: $(tail -1 "$log"); its FusedAdam and DeepSpeedCPUAdam are built by its JIT" \
          "on first use ($compiler)"
      ((rc == 0)) && ds_python=$dest/ds-venv/bin/python
      finish deepspeed.install "$rc" "$( ((rc == 0)) || last_line "$log")"
    fi
  fi
  local item run
  for item in torch-fsdp2 stage3 zero-stage3 stage3-optcpu zero-stage3-optcpu; do
    run=$item
    [[ $item == stage3* ]] && run=deepspeed-$item
    if [[ $run == deepspeed-* && -z $ds_python ]]; then
      skip "deepspeed.$item" "no DeepSpeed: deepspeed.install did not pass"
      continue
    fi
    DS_PYTHON=$ds_python speed_run "deepspeed.$item" "$run" "${models[0]}"
  done
  sed -n "/^## ${models[0]} /,/^\$/p" "$out/train_gpu.txt" 2>/dev/null | tee -a "$summary"
  local framework offload
  for item in python-deepspeed-stage3 python-zero-stage3 python-deepspeed-stage3-offload \
              python-zero-stage3-offload; do
    framework=${item#python-}
    framework=${framework%%-*}
    offload=none
    [[ $item == *-offload ]] && offload=cpu
    if [[ $framework == deepspeed && -z $ds_python ]]; then
      skip "deepspeed.$item" "no DeepSpeed: deepspeed.install did not pass"
      continue
    fi
    begin "deepspeed.$item" || continue
    log=$logs/deepspeed.$item.log
    torch_python=${ds_python:-$torch_python} run_py bench/frontend.py --framework "$framework" \
      --stage 3 --offload "$offload" "${python_shape[@]}" >"$log" 2>&1
    rc=$?
    grep '^{' "$log" | tail -1 | tee -a "$summary"
    finish "deepspeed.$item" "$rc" "$( ((rc == 0)) || last_line "$log")"
  done
}

# ---- coverage (not in the default CHECKS: a call of its own, CHECKS=coverage)
# What the default plan has no room for: super_offload's equivalence cases on CUDA (early
# placement, rollback, the fp16 skip, NVMe), and memcheck on a super_offload engine and on
# ZeRO++'s quantized engine (2 ranks sharing the GPU).
step_coverage() {
  say ""
  say "## coverage: super_offload's equivalence cases on CUDA; memcheck on super_offload and" \
      "ZeRO++'s quantized engine"
  mkdir -p "$dest/swap"
  engine_item coverage.super-offload "$z/bin/zero-run" -n 1 -- \
    "$z/bin/zero_engine_equivalence_gpu" --device cuda --super-offload
  ZERO_TEST_NVME_DIR=$dest/swap memcheck_item coverage.memcheck-super-offload \
    "$z/bin/zero_engine_equivalence_gpu" --device cuda --super-offload
  if [[ -z $mpi_ranks ]]; then
    skip coverage.memcheck-quantized \
      "MPI did not start 2 ranks in env.mpi: ${note[env.mpi]:-not probed}"
  else
    MEMCHECK_RANKS=2 memcheck_item coverage.memcheck-quantized \
      "$z/bin/zero_engine_equivalence_gpu" --device cuda --quantized
  fi
  rm -rf "$dest/swap"
}

# ---- profile (not in the default CHECKS: CHECKS=profile): Nsight Systems on 3 steps each of
# zero-train's gpt2-1.5b at stage 0 and at stage 3 with the optimizer on the CPU: the top
# kernels, the copies, and how much of the copies' time ran while a kernel did (nsys stats'
# reports and scripts/nsys-overlap.py over the trace), as text in the summary.
step_profile() {
  say ""
  say "## profile: Nsight Systems, 3 steps of gpt2-1.5b at stage 0 and at stage 3 with the" \
      "optimizer on the CPU"
  local nsys item config log rc report
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    2>/dev/null | head -1)
  for item in nsys-stage0 nsys-stage3-optcpu; do
    if [[ -z $nsys ]]; then
      skip "profile.$item" "no nsys (Nsight Systems) on this machine"
      continue
    fi
    begin "profile.$item" || continue
    config=bench/configs/gpu_stage0.json
    [[ $item == nsys-stage3-optcpu ]] && config=bench/configs/gpu_stage3_offload_optimizer.json
    log=$logs/profile.$item.log
    report=$dest/$item
    {
      run_z tmo "$nsys" profile --trace cuda,nvtx,osrt --sample none --cpuctxsw none \
        --force-overwrite true --output "$report" "$z/bin/zero-train" --device 2 \
        --config "$config" --model "${models[0]}" --data data/fortunes.txt --micro-batch 4 \
        --seq 1024 --steps 3 --eval-batches 1 --no-progress &&
        "$nsys" stats --force-export true --format csv --output "$report" \
          --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_gpu_trace "$report.nsys-rep" &&
        python3 scripts/nsys-summary.py "$report"
    } >"$log" 2>&1
    rc=$?
    sed -n '/^== nsys summary/,$p' "$log" | tee -a "$summary"
    finish "profile.$item" "$rc" "$( ((rc == 0)) || last_line "$log")"
    rm -f "$report".*
  done
}

# ---- largest (not in the default CHECKS: a run of its own, CHECKS=largest)
# The largest Llama that trains on this one GPU with the optimizer state split between host
# memory and NVMe (LARGEST, default llama-2-13b, 13.0B parameters): zero-mem plans it for this
# machine's GPU memory, host memory (less 8 GiB) and free disk under NVME_DIR (less 4 GiB);
# zero-train then trains it for 3 steps (micro-batch 1, sequence 1024, activation
# checkpointing) with the config keys zero-mem recommends, and the two are set side by side:
# reserved bytes per tier, and the step time against zero-mem's lower bound.
step_largest() {
  local model=${LARGEST:-llama-2-13b} swap=${NVME_DIR:-/tmp/zero-largest} rc
  local gpu_gib host_gib nvme_gib
  say ""
  say "## largest: $model on one GPU, its optimizer state in host memory and on NVMe"
  begin largest.plan || { skip largest.train "no plan: largest.plan did not run"; return; }
  mkdir -p "$swap"
  gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null |
    head -1)
  if [[ ! $gpu_gib =~ ^[0-9]+$ ]]; then
    finish largest.plan 77 "nvidia-smi names no GPU"
    skip largest.train "no plan: largest.plan did not run"
    return
  fi
  gpu_gib=$((gpu_gib / 1024))
  host_gib=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1048576 - 8))
  nvme_gib=$(($(df -k --output=avail "$swap" | tail -1) / 1048576 - 4))
  printf '%s\n' '{"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},' \
    '"steps_per_print": 1, "gradient_clipping": 1.0,' \
    '"optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "weight_decay": 0.1}},' \
    '"zero_optimization": {"stage": 3, "sub_group_size": 1e8, "offload_optimizer":' \
    "{\"device\": \"nvme\", \"nvme_path\": \"$swap\", \"pin_memory\": true}}}" \
    >"$dest/largest.json"
  run_z tmo "$z/bin/zero-mem" --model "$model" --seq 1024 --gpus-per-node 1 \
    --gpu-mem "${gpu_gib}GiB" --cpu-mem "${host_gib}GiB" --nvme "${nvme_gib}GiB" \
    --config "$dest/largest.json" --stage 3 --activation-checkpointing --json \
    >"$out/largest-plan.json" 2>"$logs/largest.plan.log"
  rc=$?
  local sets=()
  if [[ $rc -eq 0 ]]; then
    mapfile -t sets < <(python3 -c 'import json, sys
plan = json.load(open(sys.argv[1]))
if plan.get("recommended") is not None:
    for k, v in plan["rows"][plan["recommended"]]["keys"].items():
        print("--set")
        print(k + "=" + json.dumps(v))' "$out/largest-plan.json")
  fi
  if [[ ${#sets[@]} -eq 0 ]]; then
    local why="no stage or offload mode fits (largest-plan.json has every row)"
    [[ $rc -eq 0 ]] || why=$(last_line "$logs/largest.plan.log")
    say "zero-mem (exit $rc) recommends nothing for $model on ${gpu_gib} GiB, ${host_gib} GiB" \
        "of host memory and ${nvme_gib} GiB of disk: $why"
    finish largest.plan 1 "$why"
    skip largest.train "no plan: zero-mem recommends nothing"
    rm -rf "$swap"
    return
  fi
  say "zero-mem: ${gpu_gib} GiB GPU, ${host_gib} GiB host, ${nvme_gib} GiB disk: ${sets[*]}"
  finish largest.plan 0
  if ! begin largest.train; then
    rm -rf "$swap"
    return
  fi
  run_z tmo "$z/bin/zero-train" --device 2 \
    --config "$dest/largest.json" "${sets[@]}" --model "$model" --seq 1024 --steps 3 \
    --activation-checkpointing --data data/fortunes.txt --no-progress \
    --metrics "$out/largest.jsonl" >"$logs/largest.train.log" 2>&1
  rc=$?
  say "zero-train $model: exit $rc:" \
      "$(grep '^done:\|^zero-train: ' "$logs/largest.train.log" | tail -1 | cut -c1-200)"
  python3 - "$out/largest-plan.json" "$out/largest.jsonl" <<'PY' 2>&1 | tee -a "$summary"
import json, sys
plan = json.load(open(sys.argv[1]))
row = plan["rows"][plan["recommended"]]
try:
    lines = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
except OSError:
    lines = []  # zero-train stopped before its first metrics line
summary = next((l for l in reversed(lines) if l.get("kind") == "summary"), None)
steps = [l for l in lines if l.get("kind") == "train"]
gib = lambda b: f"{b / 2**30:8.2f} GiB"
print(f"{'tier':<8} {'zero-mem':>12} {'zero-train':>12}")
for tier in ["device", "pinned", "host", "nvme"]:
    want = sum(a["capacity"] for a in row["arenas"] if a["tier"] == tier)
    want += row["scratch"].get(tier, 0) if tier in ("device", "host") else 0
    got = summary["memory_reserved_bytes"][tier] if summary else None
    print(f"{tier:<8} {gib(want):>12} {gib(got) if got is not None else '-':>12}")
bound = row["step_lower_bound"]
last = steps[-1]["step_time_s"] if steps else None
print(f"step: zero-mem's lower bound {bound['seconds']:.2f} s ({bound['bound_by']}), "
      f"zero-train's last step {last:.2f} s" if last else
      f"step: zero-mem's lower bound {bound['seconds']:.2f} s ({bound['bound_by']}); no step ran")
print(f"parameters: {plan['model']['params'] / 1e9:.2f}B")
PY
  finish largest.train "$rc" "$( ((rc == 0)) || last_line "$logs/largest.train.log")"
  rm -rf "$swap"
}

for check in "${checks[@]}"; do
  "step_${check//-/_}"
done

# ---- the outcome of every check and item
say ""
say "## outcome: every check, then its items"
for check in "${checks[@]}"; do
  read -r -a items <<<"$(items_of "$check" | xargs)"
  failed=() passed=0 skipped=()
  for item in "${items[@]}"; do
    if [[ -z ${outcome[$item]:-} ]]; then  # a check that forgot an item: gpu-check's own bug
      outcome[$item]=failed note[$item]="no outcome recorded" took[$item]=0
      status=1
    fi
    case ${outcome[$item]} in
      passed) passed=$((passed + 1)) ;;
      failed) failed+=("$item: ${note[$item]}") ;;
      skipped) skipped+=("$item") ;;
    esac
  done
  if ((${#items[@]} == 0)); then
    line="skipped: it has nothing to run (more-models: MODELS names one model)"
  elif ((${#failed[@]} > 0)); then
    line="failed: ${failed[0]}${failed[1]:+ (and $((${#failed[@]} - 1)) more)}"
  elif ((passed == 0)); then
    line="skipped: ${note[${items[0]}]}"
  else
    line="passed${skipped[0]:+, ${#skipped[@]} of ${#items[@]} items skipped}"
  fi
  say "$(printf '%-13s %s' "$check" "$line")"
  for item in "${items[@]}"; do
    say "$(printf '  %-31s %-8s %4s s  %s' "$item" "${outcome[$item]}" "${took[$item]}" \
      "${note[$item]}" | sed 's/ *$//')"
  done
done
say ""
say "gpu-check: $(elapsed) s of the $budget s budget, exit $status${dry_run:+ (a dry run)}"
# At most 8 files come back from the GPU machine: the logs travel as one archive.
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
exit $status
