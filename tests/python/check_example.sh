#!/usr/bin/env bash
# tests/python/check_example.sh RUN... MODELS SOURCE_DIR WORK: examples/finetune_hf.py as
# docs/python.md runs it (2 ranks, a DeepSpeed config with bf16, stage 2 and CPU offload) on
# the shipped corpus: the loss falls, and the directory it writes loads with transformers'
# from_pretrained and scores the text better than the model it started from.
# RUN is tests/python/run.sh with its three arguments.
set -euo pipefail
run=("${@:1:$#-3}")
models=${*: -3:1}
source=${*: -2:1}
work=${*: -1}
rm -rf "$work"
mkdir -p "$work"
"${run[@]}" -n 2 "$source/examples/finetune_hf.py" --model "$models/gpt2-text" \
  --data "$source/data/fortunes.txt" --deepspeed_config "$source/tests/python/finetune_config.json" \
  --out "$work/out" --steps 30 --seq 64 | tee "$work/log"
grep -E "^finetune: 30 steps, loss [0-9.]+ -> [0-9.]+; wrote" "$work/log" >/dev/null
"${run[@]}" - "$models/gpt2-text" "$work/out" "$source/data/fortunes.txt" <<'PY'
import sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
before_dir, after_dir, text = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(after_dir)
ids = torch.tensor(tokenizer(open(text).read()[:20000])["input_ids"][:512]).view(8, 64)
losses = []
for directory in (before_dir, after_dir):
    model = AutoModelForCausalLM.from_pretrained(directory).eval()
    with torch.no_grad():
        losses.append(model(ids, labels=ids).loss.item())
print(f"from_pretrained: loss {losses[0]:.4f} before, {losses[1]:.4f} after fine-tuning")
assert losses[1] < losses[0] - 0.3, losses
PY
