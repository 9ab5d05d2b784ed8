#!/usr/bin/env bash
# scripts/gpu-check.sh: the GPU verification, run on the GPU machine (`make gpu-check`).
#
#   scripts/gpu-check.sh [BUNDLE] [RESULTS_DIR]
#
# BUNDLE (default gpu-bundle/zero-gpu.tar.gz) comes from scripts/gpu-bundle.sh on a machine
# that builds CUDA; RESULTS_DIR defaults to $OUT when set, else gpu-results. Planned to end
# within about 8 minutes on one H100 or H200; every step has its own time limit and the later
# steps are skipped, with a line saying so, when the budget (BUDGET seconds, default 420) is
# spent. Steps:
#   env        the machine: GPU, driver, CPU, memory, disk, glibc, mpirun, NCCL, PyTorch
#   gpu-tests  every [gpu] test (device kernels and memory, the GPU fused Adam, NCCL on one
#              rank, the models' CUDA layers against their CPU layers): the Catch2 program, each
#              case's time; then the CUDA models against the CPU models, whole
#   compare    bench/gpu.sh: zero-train (the CUDA GPT, bf16) against PyTorch on the same model,
#              micro-batch and sequence, for the first of MODELS (default gpt2-1.5b gpt2-124m):
#              ours at stage 0, stage 3, stage 3 + CPU optimizer, stage 3 + CPU optimizer and
#              parameters; PyTorch plain, FSDP2, FSDP2 + CPUOffloadPolicy; tokens/s, MFU, memory,
#              and the ratios (STEPS timed after WARMUP)
#   llama      llama-3.2-1b through the engine (bf16, stage 0, 8 steps: tokens/s, MFU) and the
#              same Llama in PyTorch eager (bench/torch_lm.py)
#   engine     the engine on GPU 0 through zero.h: the C training test, the equivalence
#              matrix (stages 0-3, fp32/bf16/fp16, offload, accumulation, clipping) at 1 rank
#              (NCCL) and at 2 and 4 ranks sharing the GPU through MPI, and the overlap of
#              communication with compute from CUDA events (wall_clock_breakdown)
#   more models the other MODELS: ours at stage 0 against plain PyTorch
#   compile    torch.compile for the first model and the Llama
#   cpu-bench  zero-bench adam (this machine's cores) and aio (its disk)
# Writes into RESULTS_DIR: summary.txt (the headline of each step), results.jsonl (a line per
# step and per measurement), train_gpu.txt and train_gpu.jsonl (bench/gpu.sh's tables and
# records), and logs.tar.gz (each step's full log; logs/ until the end): five files, within the
# GPU machine's eight. Exit status: 0 when every step that ran
# passed, else 1.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
bundle=${1:-gpu-bundle/zero-gpu.tar.gz}
out=${2:-${OUT:-gpu-results}}
budget=${BUDGET:-420}
models=(${MODELS:-gpt2-1.5b gpt2-124m})
start=$SECONDS
logs=$out/logs  # every step's full log, packed into logs.tar.gz at the end
mkdir -p "$out" "$logs"
summary=$out/summary.txt
jsonl=$out/results.jsonl
: >"$summary"
: >"$jsonl"
status=0

say() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $((SECONDS - start)); }
# record STEP RC SECONDS [NOTE]: one JSON line per step
record() {
  python3 -c 'import json,sys; print(json.dumps({"step": sys.argv[1], "exit": int(sys.argv[2]),
    "seconds": int(sys.argv[3]), "note": sys.argv[4]}))' "$1" "$2" "$3" "${4:-}" >>"$jsonl"
}
# left SECONDS: true when SECONDS still fit in the budget
left() { (($(elapsed) + $1 <= budget)); }

if [[ ! -f $bundle ]]; then
  echo "gpu-check: no bundle at $bundle: build it where CUDA compiles (make gpu-bundle) and" \
       "carry gpu-bundle" >&2
  exit 2
fi
dest=$(mktemp -d)
tar -C "$dest" -xzf "$bundle" || { echo "gpu-check: $bundle does not unpack" >&2; exit 2; }
z=$dest/zero-gpu

say "# zero gpu-check, $(date -u +%Y-%m-%dT%H:%MZ), bundle $(head -c 12 "$z/COMMIT")" \
    "(CUDA archs $(cat "$z/CUDA_ARCHS"))"

# ---- env
nccl_dir=$(dirname "$(find /usr /opt -name 'libnccl.so.2' 2>/dev/null | head -1)" 2>/dev/null)
libs=$z/lib${nccl_dir:+:$nccl_dir}
# cuBLASLt (the models' products) is the machine's: its CUDA toolkit's, else PyTorch's wheel's
# (the bundle cannot carry its 500 MB).
cublas_dir=$(dirname "$( (ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null;
  find /usr /opt -name 'libcublasLt.so.13' 2>/dev/null) | head -1)" 2>/dev/null)
libs=$libs${cublas_dir:+:$cublas_dir}
# The bundled libstdc++ only where the machine's lacks a version we were built against.
if LD_LIBRARY_PATH=$libs ldd "$z"/bin/* 2>&1 | grep -q 'GLIBCXX\|CXXABI\|GCC_'; then
  libs=$libs:$z/lib/fallback
fi
export ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn}
run_z() { LD_LIBRARY_PATH=$libs "$@"; }
{
  echo "## env"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  echo "cpu: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB; disk: $(df -h /tmp | awk 'NR == 2 {print $4}') free in /tmp"
  echo "glibc: $(ldd --version | head -1)"
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -2 | head -1)"
  echo "mpirun: $(command -v mpirun || echo none)"
  echo "nccl: ${nccl_dir:-none found}"
  echo "cublasLt: ${cublas_dir:-none found}"
  echo "python3: $(python3 -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
  echo "missing libraries:"
  LD_LIBRARY_PATH=$libs ldd "$z"/bin/* "$z"/lib/libzero.so.0 | grep 'not found' | sort -u || echo "  none"
} 2>&1 | tee -a "$summary"
record env 0 "$(elapsed)"

# ---- gpu-tests
say ""
say "## gpu-tests: every [gpu] test"
t=$SECONDS
run_z timeout 240 "$z/bin/zero_gpu_tests" --durations yes >"$logs/gpu_tests.log" 2>&1
rc=$?
grep -E '^(test cases|All tests passed|SKIPPED)' "$logs/gpu_tests.log" | tee -a "$summary"
if [[ $rc -ne 0 && $rc -ne 77 ]]; then
  status=1
  say "gpu-tests: exit $rc; the failures:"
  grep -B2 -A8 'FAILED\|failed\|Segmentation\|error' "$logs/gpu_tests.log" | head -60 | tee -a "$summary"
fi
record gpu-tests "$rc" $((SECONDS - t))
t=$SECONDS
run_z timeout 120 "$z/bin/zero_gpu_model_tests" --durations yes >"$logs/gpu_model_tests.log" 2>&1
rc=$?
say "models (the CUDA models against the CPU models):"
grep -E '^(test cases|All tests passed|SKIPPED)|losses .* \(GPU\)' "$logs/gpu_model_tests.log" |
  tee -a "$summary"
if [[ $rc -ne 0 && $rc -ne 77 ]]; then
  status=1
  grep -B2 -A8 'FAILED\|failed\|Segmentation\|error' "$logs/gpu_model_tests.log" | head -60 |
    tee -a "$summary"
fi
record gpu-model-tests "$rc" $((SECONDS - t))

# ---- compare
# bench/gpu.sh, zero-train from the bundle against PyTorch on the same GPT-2, same micro-batch
# and sequence: the first model (gpt2-1.5b: the issue's goals) with every run, the others at
# stage 0 against plain PyTorch when the budget allows.
cat >"$dest/zero-train" <<EOF
#!/usr/bin/env bash
LD_LIBRARY_PATH=$libs exec $z/bin/zero-train "\$@"
EOF
chmod +x "$dest/zero-train"
# bench/gpu.sh keeps its records in bench/results/train_gpu.*, which this run starts afresh and
# copies out after each call (removed at the end).
rm -f bench/results/train_gpu.txt bench/results/train_gpu.jsonl
# compare_run RUNS MODELS...: one bench/gpu.sh call; its tables go to the summary.
compare_run() {
  local runs=$1 t0=$SECONDS rc
  shift
  STEPS=${STEPS:-5} WARMUP=${WARMUP:-2} RUN_TIMEOUT=${RUN_TIMEOUT:-100} RUNS=$runs \
    ZERO_TRAIN=$dest/zero-train timeout $((budget - $(elapsed) - 30)) \
    bash bench/gpu.sh "$dest/none" "$@" >>"$logs/compare.log" 2>&1
  rc=$?
  cp bench/results/train_gpu.txt bench/results/train_gpu.jsonl "$out/" 2>/dev/null
  for model in "$@"; do
    sed -n "/^## $model /,/^\$/p" "$out/train_gpu.txt" 2>/dev/null | tee -a "$summary"
  done
  record "compare-$*" "$rc" $((SECONDS - t0))
  [[ $rc -eq 0 ]] || status=1
}
say ""
say "## compare: zero-train (bf16, CUDA models) against PyTorch, ${models[0]}"
if left 150; then
  compare_run "zero-stage0 zero-stage3 zero-stage3-optcpu zero-stage3-allcpu torch-plain \
torch-fsdp2 torch-fsdp2-offload" "${models[0]}"
else
  say "skipped: the budget is spent ($(elapsed) s)"
fi

# ---- llama
say ""
say "## llama: llama-3.2-1b through the engine (bf16, stage 0, 8 steps) and in PyTorch eager"
cat >"$dest/train.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true}, "steps_per_print": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 0}}
JSON
# The Llama's shape for transformers' LlamaForCausalLM (bench/torch_lm.py).
llama_shape=(--family llama --layers 16 --heads 32 --kv-heads 8 --channels 2048
             --intermediate 8192 --vocab 128256 --positions 131072 --tied --micro-batch 4
             --seq 1024 --device cuda --dtype bf16)
# torch_llama LIMIT LABEL FLAGS...: the Llama in PyTorch, its tokens/s.
torch_llama() {
  local limit=$1 label=$2 log=$logs/torch-llama-$2.log rc line
  shift 2
  timeout "$limit" python3 bench/torch_lm.py "${llama_shape[@]}" "$@" >"$log" 2>&1
  rc=$?
  line=$(grep '^{' "$log" | tail -1)
  if [[ -n $line ]]; then
    echo "$line" >>"$jsonl"
    say "llama-3.2-1b in PyTorch $label: $(python3 -c 'import json, sys; r = json.loads(sys.argv[1])
print("%.0f tokens/s" % r["tokens_per_s"])' "$line")"
  else
    say "llama-3.2-1b in PyTorch $label: exit $rc: $(tail -1 "$log" | cut -c1-160)"
  fi
  record "torch-llama-$label" "$rc" 0
}
if left 80; then
  t=$SECONDS
  run_z timeout 75 "$z/bin/zero-train" --device 2 --config "$dest/train.json" --data data/fortunes.txt \
    --model llama-3.2-1b --seq 1024 --steps 8 --no-progress --metrics "$logs/train-llama.jsonl" \
    >"$logs/train-llama.log" 2>&1
  rc=$?
  say "zero-train llama-3.2-1b: exit $rc: $(grep '^done:\|^zero-train: ' "$logs/train-llama.log" | tail -1 | cut -c1-200)"
  [[ $rc -eq 0 ]] || { status=1; tail -5 "$logs/train-llama.log" | tee -a "$summary"; }
  grep '"kind":"summary"' "$logs/train-llama.jsonl" >>"$jsonl" 2>/dev/null
  record train-llama "$rc" $((SECONDS - t))
else
  say "zero-train llama-3.2-1b: skipped, the budget is spent ($(elapsed) s)"
fi
if left 75; then
  torch_llama 70 eager --steps 5 --warmup-steps 2
else
  say "llama-3.2-1b in PyTorch eager: skipped, the budget is spent ($(elapsed) s)"
fi

# ---- engine
say ""
say "## engine: the engine on GPU 0 through zero.h"
t=$SECONDS
swap=$dest/swap
mkdir -p "$swap"
# engine_run NAME LIMIT COMMAND...: one engine test, its exit status and last line.
engine_run() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  if ! left "$limit"; then
    say "$name: skipped, the budget is spent ($(elapsed) s)"
    return
  fi
  local log=$logs/engine-$name.log
  ZERO_TEST_NVME_DIR=$swap run_z timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  say "$name: exit $rc: $(grep -v '^\s*$' "$log" | grep -v '^-\+$' | tail -1 | cut -c1-160)"
  # Failures, and wall_clock_breakdown's lines (time per step; concurrent with compute).
  grep '^FAIL\|time per step\|concurrent with compute' "$log" | head -12 | tee -a "$summary"
  record "engine-$name" "$rc" $((SECONDS - t0))
  [[ $rc -eq 0 ]] || status=1
}
engine_run c-train 60 "$z/bin/zero_c_train_gpu_test"
for ranks in 1 2 4; do
  engine_run "equivalence-$ranks" 150 "$z/bin/zero-run" -n "$ranks" -- \
    "$z/bin/zero_engine_equivalence_gpu" --device cuda
done
engine_run overlap 60 "$z/bin/zero_engine_overlap_gpu"
rm -rf "$swap"

# ---- more models
if ((${#models[@]} > 1)); then
  say ""
  say "## more models: stage 0 against plain PyTorch, ${models[*]:1}"
  if left 90; then
    compare_run "zero-stage0 torch-plain" "${models[@]:1}"
  else
    say "skipped: the budget is spent ($(elapsed) s)"
  fi
fi

# ---- compile
say ""
say "## compile: torch.compile, ${models[0]} and llama-3.2-1b"
read -r batch seq < <(case ${models[0]} in gpt2-124m | gpt2-350m) echo "8 1024" ;;
                      *) echo "4 1024" ;; esac)
if left 120; then
  timeout 110 python3 bench/torch_gpt.py --model "${models[0]}" --mode plain --device cuda \
    --micro-batch "$batch" --seq "$seq" --steps 5 --warmup-steps 3 --data data/fortunes.txt \
    --json --compile >"$logs/compile.log" 2>&1
  rc=$?
  line=$(grep '^{' "$logs/compile.log" | tail -1)
  if [[ -n $line ]]; then
    echo "$line" >>"$jsonl"
    python3 -c 'import json, sys; r = json.loads(sys.argv[1])
print("%s, %s x %s: %.0f tokens/s, MFU %.1f%%" % (sys.argv[2], sys.argv[3], sys.argv[4],
      r["tokens_per_s"], 100 * r["mfu"]))' "$line" "${models[0]}" "$batch" "$seq" |
      tee -a "$summary"
  else
    say "${models[0]}: exit $rc: $(tail -1 "$logs/compile.log")"
  fi
  record compile "$rc" 0
else
  say "${models[0]}: skipped, the budget is spent ($(elapsed) s)"
fi
if left 120; then
  torch_llama 110 compile --steps 5 --warmup-steps 3 --compile
else
  say "llama-3.2-1b with torch.compile: skipped, the budget is spent ($(elapsed) s)"
fi

# ---- cpu-bench
say ""
say "## cpu-bench: zero-bench adam and aio on this machine"
t=$SECONDS
if left 60; then
  cores=$(nproc)
  run_z timeout 40 "$z/bin/zero-bench" adam --elements 100e6 --threads 1 $((cores / 2)) "$cores" \
    --repeats 3 --json "$jsonl" >"$logs/cpu_bench.log" 2>&1
  rc=$?
  tail -12 "$logs/cpu_bench.log" | tee -a "$summary"
  record adam "$rc" $((SECONDS - t))
  mkdir -p /tmp/zero-aio
  run_z timeout 40 "$z/bin/zero-bench" aio /tmp/zero-aio --size 1G --block-sizes 1M \
    --queue-depths 8,32 --repeats 3 --settle 0 --fio no --json "$jsonl" >>"$logs/cpu_bench.log" 2>&1
  rc=$?
  tail -8 "$logs/cpu_bench.log" | tee -a "$summary"
  record aio "$rc" $((SECONDS - t))
  rm -rf /tmp/zero-aio
else
  say "skipped: the budget is spent ($(elapsed) s)"
fi

say ""
say "gpu-check: $(elapsed) s, exit $status"
# At most 8 files come back from the GPU machine: the logs travel as one archive.
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
rm -f bench/results/train_gpu.txt bench/results/train_gpu.jsonl
rm -rf "$dest"
exit $status
