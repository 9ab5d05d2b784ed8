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
# CHECKS (default: all of the above, in that order) names the checks to run. One more is left
# out of the default for its length (about 5 minutes, LARGEST_TIMEOUT seconds for zero-train):
#   largest    the largest Llama that trains on this one GPU with the optimizer state between
#              host memory and NVMe (LARGEST, default llama-2-13b; NVME_DIR, default
#              /tmp/zero-largest): zero-mem's plan for this machine, zero-train for 3 steps with
#              the keys it recommends, reserved bytes per tier and the step time side by side
#              (CHECKS=largest make gpu-check)
# Writes into RESULTS_DIR: summary.txt (the headline of each step), results.jsonl (a line per
# step and per measurement), train_gpu.txt and train_gpu.jsonl (bench/gpu.sh's tables and
# records), largest-plan.json and largest.jsonl (the largest check's plan and metrics), and
# logs.tar.gz (each step's full log; logs/ until the end): seven files at most, within the GPU
# machine's eight. Exit status: 0 when every step that ran
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

# ---- helpers of the steps
# The bundle's zero-train with its libraries, for bench/gpu.sh (ZERO_TRAIN).
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
    say "llama-3.2-1b in PyTorch $label: $(python3 -c 'import json, sys
print("%.0f tokens/s" % json.loads(sys.argv[1])["tokens_per_s"])' "$line")"
  else
    say "llama-3.2-1b in PyTorch $label: exit $rc: $(tail -1 "$log" | cut -c1-160)"
  fi
  record "torch-llama-$label" "$rc" 0
}
# engine_run NAME LIMIT COMMAND...: one engine test, its exit status and last line.
engine_run() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  if ! left "$limit"; then
    say "$name: skipped, the budget is spent ($(elapsed) s)"
    return
  fi
  local log=$logs/engine-$name.log
  ZERO_TEST_NVME_DIR=$dest/swap run_z timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  say "$name: exit $rc: $(grep -v '^\s*$' "$log" | grep -v '^-\+$' | tail -1 | cut -c1-160)"
  # Failures, and wall_clock_breakdown's lines (time per step; concurrent with compute).
  grep '^FAIL\|time per step\|concurrent with compute' "$log" | head -12 | tee -a "$summary"
  record "engine-$name" "$rc" $((SECONDS - t0))
  [[ $rc -eq 0 ]] || status=1
}

# ---- gpu-tests
step_gpu_tests() {
  say ""
  say "## gpu-tests: every [gpu] test"
  local t=$SECONDS rc
  run_z timeout 240 "$z/bin/zero_gpu_tests" --durations yes >"$logs/gpu_tests.log" 2>&1
  rc=$?
  grep -E '^(test cases|All tests passed|SKIPPED)' "$logs/gpu_tests.log" | tee -a "$summary"
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    status=1
    say "gpu-tests: exit $rc; the failures:"
    grep -B2 -A8 'FAILED\|failed\|Segmentation\|error' "$logs/gpu_tests.log" | head -60 |
      tee -a "$summary"
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
}

# ---- compare
# bench/gpu.sh, zero-train from the bundle against PyTorch on the same GPT-2, same micro-batch
# and sequence: the first model (gpt2-1.5b: the issue's goals) with every run.
step_compare() {
  say ""
  say "## compare: zero-train (bf16, CUDA models) against PyTorch, ${models[0]}"
  if left 150; then
    compare_run "zero-stage0 zero-stage3 zero-stage3-optcpu zero-stage3-allcpu torch-plain \
torch-fsdp2 torch-fsdp2-offload" "${models[0]}"
  else
    say "skipped: the budget is spent ($(elapsed) s)"
  fi
}

# ---- llama
step_llama() {
  say ""
  say "## llama: llama-3.2-1b through the engine (bf16, stage 0, 8 steps) and in PyTorch eager"
  local t=$SECONDS rc
  printf '%s\n' '{"train_micro_batch_size_per_gpu": 4, "bf16": {"enabled": true},' \
    '"steps_per_print": 1, "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},' \
    '"optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}}}' \
    >"$dest/llama.json"
  if left 80; then
    run_z timeout 75 "$z/bin/zero-train" --device 2 --config "$dest/llama.json" \
      --data data/fortunes.txt --model llama-3.2-1b --seq 1024 --steps 8 --no-progress \
      --metrics "$logs/train-llama.jsonl" >"$logs/train-llama.log" 2>&1
    rc=$?
    say "zero-train llama-3.2-1b: exit $rc:" \
        "$(grep '^done:\|^zero-train: ' "$logs/train-llama.log" | tail -1 | cut -c1-200)"
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
}

# ---- engine
step_engine() {
  say ""
  say "## engine: the engine on GPU 0 through zero.h"
  mkdir -p "$dest/swap"
  engine_run c-train 60 "$z/bin/zero_c_train_gpu_test"
  local ranks
  for ranks in 1 2 4; do
    engine_run "equivalence-$ranks" 150 "$z/bin/zero-run" -n "$ranks" -- \
      "$z/bin/zero_engine_equivalence_gpu" --device cuda
  done
  engine_run overlap 60 "$z/bin/zero_engine_overlap_gpu"
  rm -rf "$dest/swap"
}

# ---- more-models
step_more_models() {
  ((${#models[@]} > 1)) || return 0
  say ""
  say "## more models: stage 0 against plain PyTorch, ${models[*]:1}"
  if left 90; then
    compare_run "zero-stage0 torch-plain" "${models[@]:1}"
  else
    say "skipped: the budget is spent ($(elapsed) s)"
  fi
}

# ---- compile
step_compile() {
  say ""
  say "## compile: torch.compile, ${models[0]} and llama-3.2-1b"
  local batch seq rc line
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
      say "${models[0]}, $batch x $seq: $(python3 -c 'import json, sys
r = json.loads(sys.argv[1])
print("%.0f tokens/s, MFU %.1f%%" % (r["tokens_per_s"], 100 * r["mfu"]))' "$line")"
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
}

# ---- cpu-bench
step_cpu_bench() {
  say ""
  say "## cpu-bench: zero-bench adam and aio on this machine"
  local t=$SECONDS rc cores
  if ! left 60; then
    say "skipped: the budget is spent ($(elapsed) s)"
    return
  fi
  cores=$(nproc)
  run_z timeout 40 "$z/bin/zero-bench" adam --elements 100e6 --threads 1 $((cores / 2)) "$cores" \
    --repeats 3 --json "$jsonl" >"$logs/cpu_bench.log" 2>&1
  rc=$?
  tail -12 "$logs/cpu_bench.log" | tee -a "$summary"
  record adam "$rc" $((SECONDS - t))
  mkdir -p "$dest/aio"
  run_z timeout 40 "$z/bin/zero-bench" aio "$dest/aio" --size 1G --block-sizes 1M \
    --queue-depths 8,32 --repeats 3 --settle 0 --fio no --json "$jsonl" \
    >>"$logs/cpu_bench.log" 2>&1
  rc=$?
  tail -8 "$logs/cpu_bench.log" | tee -a "$summary"
  record aio "$rc" $((SECONDS - t))
  rm -rf "$dest/aio"
}

# ---- largest (not in the default CHECKS: a run of its own, CHECKS=largest)
# The largest Llama that trains on this one GPU with the optimizer state split between host
# memory and NVMe (LARGEST, default llama-2-13b, 13.0B parameters): zero-mem plans it for this
# machine's GPU memory, host memory (less 8 GiB) and free disk under NVME_DIR (less 4 GiB);
# zero-train then trains it for 3 steps (micro-batch 1, sequence 1024, activation
# checkpointing) with the config keys zero-mem recommends, and the two are set side by side:
# reserved bytes per tier, and the step time against zero-mem's lower bound.
step_largest() {
  local model=${LARGEST:-llama-2-13b} swap=${NVME_DIR:-/tmp/zero-largest} t=$SECONDS rc
  local gpu_gib host_gib nvme_gib
  say ""
  say "## largest: $model on one GPU, its optimizer state in host memory and on NVMe"
  mkdir -p "$swap"
  gpu_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 2>/dev/null |
    head -1)
  if [[ ! $gpu_gib =~ ^[0-9]+$ ]]; then
    say "skipped: nvidia-smi names no GPU"
    record largest 77 0 "no GPU"
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
  run_z "$z/bin/zero-mem" --model "$model" --seq 1024 --gpus-per-node 1 \
    --gpu-mem "${gpu_gib}GiB" --cpu-mem "${host_gib}GiB" --nvme "${nvme_gib}GiB" \
    --config "$dest/largest.json" --stage 3 --activation-checkpointing --json \
    >"$out/largest-plan.json" 2>"$logs/largest-plan.log"
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
    [[ $rc -eq 0 ]] || why=$(tail -1 "$logs/largest-plan.log")
    say "zero-mem (exit $rc) recommends nothing for $model on ${gpu_gib} GiB, ${host_gib} GiB" \
        "of host memory and ${nvme_gib} GiB of disk: $why"
    status=1
    record largest 1 $((SECONDS - t)) "no plan"
    rm -rf "$swap"
    return
  fi
  say "zero-mem: ${gpu_gib} GiB GPU, ${host_gib} GiB host, ${nvme_gib} GiB disk: ${sets[*]}"
  run_z timeout "${LARGEST_TIMEOUT:-420}" "$z/bin/zero-train" --device 2 \
    --config "$dest/largest.json" "${sets[@]}" --model "$model" --seq 1024 --steps 3 \
    --activation-checkpointing --data data/fortunes.txt --no-progress \
    --metrics "$out/largest.jsonl" >"$logs/largest.log" 2>&1
  rc=$?
  say "zero-train $model: exit $rc:" \
      "$(grep '^done:\|^zero-train: ' "$logs/largest.log" | tail -1 | cut -c1-200)"
  [[ $rc -eq 0 ]] || { status=1; tail -5 "$logs/largest.log" | tee -a "$summary"; }
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
  record largest "$rc" $((SECONDS - t))
  rm -rf "$swap"
}

checks=(${CHECKS:-gpu-tests compare llama engine more-models compile cpu-bench})
for check in "${checks[@]}"; do
  if ! declare -F "step_${check//-/_}" >/dev/null; then
    say "gpu-check: unknown check '$check' in CHECKS (known: gpu-tests compare llama engine" \
        "more-models compile cpu-bench largest)"
    status=1
    continue
  fi
  "step_${check//-/_}"
done

say ""
say "gpu-check: $(elapsed) s, exit $status"
# At most 8 files come back from the GPU machine: the logs travel as one archive.
tar -C "$out" -czf "$out/logs.tar.gz" logs && rm -rf "$logs"
rm -f bench/results/train_gpu.txt bench/results/train_gpu.jsonl
rm -rf "$dest"
exit $status
