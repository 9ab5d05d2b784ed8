#!/usr/bin/env bash
# bench/zeropp.sh: ZeRO++'s quantized communication against exact runs, the figures in
# bench/results/zeropp.txt and docs/multinode.md.
#
#   bench/zeropp.sh [BUILD_DIR] [RANKS]      (default: build, 2)
#
# Builds nothing: BUILD_DIR must hold zero-train, zero-run and zero-ckpt. Two trainings, each
# exact and with zero_quantized_weights (qwZ), zero_quantized_gradients (qgZ) and both, every
# quantized run with zero_quantized_error_check (the error of each step's quantized collectives
# against exact ones):
#   1. the demo: make demo's run (GPT 'tiny' on data/fortunes.txt, configs/demo.json: stage 3,
#      the optimizer on the CPU, 600 steps);
#   2. a Llama fine-tune: llama-tiny trained 300 steps exactly on the corpus and exported as a
#      Hugging Face directory, then fine-tuned from it with configs/finetune_bf16.json (bf16,
#      stage 3, the optimizer on the CPU) at lr 3e-4 for 200 steps.
# Per run: the first and the final loss (means of the first and last 20 steps), the validation
# loss at the end, the largest and the
# mean |loss - exact loss| over the steps, and the measured errors (mean and largest over the
# steps). Writes bench/results/zeropp.txt and bench/results/zeropp.jsonl. Exit status: the last
# failing run's, else 0.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
build=${1:-build}
ranks=${2:-2}
train=$build/tools/zero-train/zero-train
run=$build/tools/zero-run/zero-run
ckpt=$build/tools/zero-ckpt/zero-ckpt
for tool in "$train" "$run" "$ckpt"; do
  if [[ ! -x $tool ]]; then
    echo "bench/zeropp.sh: $tool is missing; build it first: cmake --build $build" \
         "--target zero-train zero-run zero-ckpt" >&2
    exit 1
  fi
done
results=bench/results
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$results"
export ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn}
status=0

variants=(exact qwz qgz both)
flags_of() {
  local q=(--set zero_optimization.zero_quantized_error_check=true)
  case $1 in
    exact) ;;
    qwz) echo "--set zero_optimization.zero_quantized_weights=true ${q[*]}" ;;
    qgz) echo "--set zero_optimization.zero_quantized_gradients=true ${q[*]}" ;;
    both) echo "--set zero_optimization.zero_quantized_weights=true" \
      "--set zero_optimization.zero_quantized_gradients=true ${q[*]}" ;;
  esac
}

# train NAME VARIANT ARGS...: one run, its metrics in $work/NAME-VARIANT.jsonl.
train() {
  local name=$1 variant=$2
  shift 2
  echo "== $name, $variant"
  # shellcheck disable=SC2046
  if ! "$run" -n "$ranks" -- "$train" "$@" $(flags_of "$variant") --no-progress \
      --metrics "$work/$name-$variant.jsonl" >"$work/$name-$variant.log" 2>&1; then
    echo "bench/zeropp.sh: $name $variant failed:" >&2
    tail -20 "$work/$name-$variant.log" >&2
    status=1
  fi
  tail -1 "$work/$name-$variant.log" | grep -v "^$" || true
}

for v in "${variants[@]}"; do
  train demo "$v" --config configs/demo.json --model tiny --data data/fortunes.txt --steps 600 \
    --eval-every 600
done

# The Llama base: trained exactly, exported for --init.
echo "== llama-tiny base: 300 steps, exported"
if "$run" -n "$ranks" -- "$train" --config configs/demo.json --model llama-tiny \
    --data data/fortunes.txt --steps 300 --no-progress --save "$work/base" \
    >"$work/base.log" 2>&1 &&
  "$ckpt" export "$work/base" --out "$work/base-hf" >>"$work/base.log" 2>&1; then
  for v in "${variants[@]}"; do
    train finetune "$v" --config configs/finetune_bf16.json --init "$work/base-hf" \
      --data data/fortunes.txt --steps 200 --eval-every 200 \
      --set optimizer.params.lr=3e-4 --set scheduler.params.warmup_max_lr=3e-4 \
      --set gradient_accumulation_steps=2 --set train_micro_batch_size_per_gpu=8
  done
else
  echo "bench/zeropp.sh: the Llama base failed:" >&2
  tail -20 "$work/base.log" >&2
  status=1
fi

ZEROPP_BUILD=$build python3 - "$work" "$ranks" "$results/zeropp.txt" "$results/zeropp.jsonl" <<'PY' || status=1
import json, os, platform, subprocess, sys
work, ranks, text_out, json_out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def read(name, variant):
    path = os.path.join(work, f"{name}-{variant}.jsonl")
    if not os.path.exists(path): return None
    train, val = {}, None
    for line in open(path):
        r = json.loads(line)
        if r.get("kind") == "train": train[r["step"]] = r
        if r.get("kind") == "eval": val = r.get("eval_loss")
    return train, val

def stats(values):
    values = [v for v in values if v is not None]
    if not values: return None, None
    return sum(values) / len(values), max(values)

titles = {"demo": "the demo: GPT tiny, data/fortunes.txt, configs/demo.json (stage 3, optimizer "
                  "on the CPU, fp32), 600 steps",
          "finetune": "a Llama fine-tune: llama-tiny (300 exact steps, exported) fine-tuned with "
                      "configs/finetune_bf16.json (bf16, stage 3, optimizer on the CPU), lr 3e-4, "
                      "200 steps"}
lines, records = [], []
rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
lines.append(f"bench/zeropp.sh on {platform.node()} ({os.cpu_count()} cores), {ranks} ranks, "
             f"commit {rev}: ZeRO++ quantized communication against exact runs")
lines += subprocess.run(["bash", "bench/machine.sh",
                        os.path.join(os.environ["ZEROPP_BUILD"], "tools/zero-bench/zero-bench")],
                       capture_output=True, text=True).stdout.splitlines()
lines.append("errors: relative L2 error of each step's quantized collectives against exact ones "
             "(zero_quantized_error_check), mean / largest over the steps")
for name in ("demo", "finetune"):
    exact = read(name, "exact")
    if exact is None: continue
    lines.append("")
    lines.append(titles[name])
    lines.append(f"{'run':<8} {'first loss':>10} {'final loss':>10} {'val loss':>9} {'|dloss| max':>11} "
                 f"{'|dloss| mean':>12} {'qwZ error':>17} {'qgZ error':>17} {'tokens/s':>9}")
    for variant in ("exact", "qwz", "qgz", "both"):
        got = read(name, variant)
        if got is None: continue
        train, val = got
        steps = sorted(train)
        final = sum(train[s]["loss"] for s in steps[-20:]) / len(steps[-20:])
        first = sum(train[s]["loss"] for s in steps[:20]) / len(steps[:20])
        deltas = [abs(train[s]["loss"] - exact[0][s]["loss"]) for s in steps if s in exact[0]]
        dmean, dmax = stats(deltas)
        w = stats([train[s].get("quantization_error_weights") for s in steps])
        g = stats([train[s].get("quantization_error_gradients") for s in steps])
        tps = stats([train[s]["tokens_per_s"] for s in steps[1:]])[0]
        fmt = lambda m: "-" if m[0] is None else f"{100*m[0]:.3f}% / {100*m[1]:.3f}%"
        lines.append(f"{variant:<8} {first:>10.4f} {final:>10.4f} {val if val is not None else float('nan'):>9.4f} "
                     f"{dmax:>11.4f} {dmean:>12.4f} {fmt(w):>17} {fmt(g):>17} {tps:>9.0f}")
        records.append({"run": name, "variant": variant, "ranks": ranks, "first_loss": first,
                        "final_loss": final,
                        "val_loss": val, "dloss_max": dmax, "dloss_mean": dmean,
                        "weights_error_mean": w[0], "weights_error_max": w[1],
                        "gradients_error_mean": g[0], "gradients_error_max": g[1],
                        "tokens_per_s": tps, "commit": rev})
open(text_out, "w").write("\n".join(lines) + "\n")
with open(json_out, "w") as f:
    for r in records: f.write(json.dumps(r) + "\n")
print("\n".join(lines))
PY
exit $status
