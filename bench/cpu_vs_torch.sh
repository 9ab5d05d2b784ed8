#!/usr/bin/env bash
# bench/cpu_vs_torch.sh: zero-train's CPU tokens/s against PyTorch eager training the same model
# (transformers' LlamaForCausalLM / GPT2LMHeadModel through bench/torch_lm.py) on the same
# machine, same micro-batch and sequence, fp32, AdamW with the same groups and clipping, one
# rank, at 1 and 2 threads; the ratio in one run.
#
#   bench/cpu_vs_torch.sh [BUILD_DIR] [PYTHON]   (default: build-cpu, python3; PYTHON needs torch
#                                                  and transformers)
# Writes bench/results/cpu_vs_torch.txt (a table with the machine, the BLAS core zero-train's
# products ran on and the commands) and bench/results/cpu_vs_torch.jsonl (every run's summary,
# zero-train's with its "cpu" and "blas").
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build-cpu}
python=${2:-python3}
train=$build/tools/zero-train/zero-train
if [[ ! -x $train ]]; then
  echo "bench/cpu_vs_torch.sh: $train is missing; build it first: cmake --build $build --target zero-train" >&2
  exit 1
fi
if ! "$python" -c "import torch, transformers" 2>/dev/null; then
  echo "bench/cpu_vs_torch.sh: $python lacks torch or transformers; give a Python that has them" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=bench/results
mkdir -p "$results"
: >"$results/cpu_vs_torch.jsonl"

# name | zero-train model flags | torch_lm.py flags | micro-batch seq steps
models=(
  "llama-tiny|--model llama-tiny|--family llama --layers 4 --heads 4 --kv-heads 2 --channels 128 --intermediate 352 --vocab 256 --positions 64|8 64 11"
  "llama-125m|--model llama-tiny --layers 12 --heads 12 --kv-heads 4 --channels 768 --intermediate 2048 --positions 256 --vocab 32000|--family llama --layers 12 --heads 12 --kv-heads 4 --channels 768 --intermediate 2048 --vocab 32000 --positions 256|1 256 5"
  "gpt2-124m|--model gpt2-124m|--family gpt2 --layers 12 --heads 12 --channels 768 --vocab 50257 --positions 1024|1 256 5"
)

{
  echo "# zero-train against PyTorch eager on the CPU, $(date -u +%Y-%m-%dT%H:%MZ)"
  bash bench/machine.sh "$build/tools/zero-bench/zero-bench"
  echo "# torch $("$python" -c 'import torch; print(torch.__version__)')," \
       "transformers $("$python" -c 'import transformers; print(transformers.__version__)')"
  echo "# torch's matrix products: $("$python" -c 'import torch; c = torch.__config__.show(); print("MKL" if "USE_MKL=ON" in c else "its own BLAS")' 2>/dev/null)"
  echo "# fp32, one rank, AdamW (weight decay on matrices), clipping 1.0; tokens/s: mean step time after"
  echo "# the first step (zero-train's summary; torch: 1 untimed step, then steps - 1 timed)."
  echo "#   zero: OMP_NUM_THREADS=N $train --config CFG MODEL --data data/fortunes.txt --micro-batch B --seq T --steps S"
  echo "#         (CFG: stage 0, AdamW lr 1e-4, betas 0.9 0.95, weight decay 0.01, clipping 1.0)"
  echo "#   torch: $python bench/torch_lm.py FLAGS --micro-batch B --seq T --steps S-1 --threads N"
  echo
  printf '%-11s %-9s %-7s %14s %14s %8s\n' model batch threads "zero tok/s" "torch tok/s" ratio
  for entry in "${models[@]}"; do
    IFS='|' read -r name zflags tflags shape <<<"$entry"
    read -r batch seq steps <<<"$shape"
    cat >"$work/config.json" <<JSON
{"train_micro_batch_size_per_gpu": $batch, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "weight_decay": 0.01}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 0}, "steps_per_print": 1000}
JSON
    for threads in 1 2; do
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=$threads "$train" --config "$work/config.json" $zflags --data data/fortunes.txt \
        --micro-batch "$batch" --seq "$seq" --steps "$steps" --no-progress --metrics "$work/m.jsonl" \
        >/dev/null 2>"$work/err" || { echo "zero-train failed: $(cat "$work/err")" >&2; continue; }
      zero=$(grep '"kind":"summary"' "$work/m.jsonl" | sed 's/.*"tokens_per_s":\([^,]*\),.*/\1/')
      # shellcheck disable=SC2086
      torch_line=$(OMP_NUM_THREADS=$threads "$python" bench/torch_lm.py $tflags --micro-batch "$batch" \
        --seq "$seq" --steps $((steps - 1)) --threads "$threads" 2>/dev/null | tail -1)
      torch=$(sed 's/.*"tokens_per_s": \([^,]*\),.*/\1/' <<<"$torch_line")
      ratio=$(awk -v a="$zero" -v b="$torch" 'BEGIN { printf "%.2f", a / b }')
      printf '%-11s %-9s %-7s %14.0f %14.0f %7sx\n' "$name" "${batch}x$seq" "$threads" "$zero" "$torch" "$ratio"
      echo "{\"model\":\"$name\",\"threads\":$threads,\"batch\":$batch,\"seq\":$seq,\"zero_tokens_per_s\":$zero,\"zero\":$(grep '"kind":"summary"' "$work/m.jsonl"),\"torch\":$torch_line}" \
        >>"$results/cpu_vs_torch.jsonl"
    done
  done
} | tee "$results/cpu_vs_torch.txt"
