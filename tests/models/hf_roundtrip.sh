#!/usr/bin/env bash
# The Hugging Face round trip through the tools, for each golden model (tests/models/goldens:
# llama, qwen2, gpt2): zero-train --init DIR (the shape from DIR/config.json) trains one step at
# learning rate 0 and saves, zero-ckpt export --out OUT writes a model directory, and
# check_hf_export.py finds OUT/model.safetensors equal, tensor for tensor and bit for bit, to
# what save_pretrained wrote, and OUT/config.json with the same shape. With TORCH_PYTHON set (a
# Python with torch and transformers), transformers also loads OUT and gives the logits of the
# saved model. With ZERO_RUN only the Llama runs, on 2 ranks at stage 3, each reading only its
# shards of the file (exit 77, skipped, without mpirun). Without it, stale models too: an export
# over a sharded model removes its index and shards, and --init refuses a directory holding a
# model.safetensors and an index of another model (and takes one holding the same model twice).
#   hf_roundtrip.sh PYTHON ZERO_TRAIN ZERO_CKPT SOURCE_DIR WORK [ZERO_RUN]
set -euo pipefail
python=$1
train=$2
ckpt=$3
source_dir=$4
work=$5
zero_run=${6:-}
rm -rf "$work"
mkdir -p "$work"
check=$source_dir/tests/models/check_hf_export.py

# An llm.c shard (uint32, magic 20240801, version 1) of tokens below the models' vocabulary (61).
"$python" - "$work/tokens.bin" <<'PY'
import sys
import numpy as np
header = np.zeros(256, dtype="<i4")
tokens = np.random.default_rng(5).integers(0, 61, size=4000, dtype=np.uint32)
header[0], header[1], header[2] = 20240801, 1, tokens.size
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(tokens.astype("<u4").tobytes())
PY
cat >"$work/config.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0, "weight_decay": 0.1}},
 "zero_optimization": {"stage": 3}}
JSON

models=(llama qwen2 gpt2)
launch=()
if [ -n "$zero_run" ]; then
  command -v mpirun >/dev/null || exit 77
  models=(llama)
  launch=("$zero_run" -n 2 --)
fi
for model in "${models[@]}"; do
  golden=$source_dir/tests/models/goldens/$model
  out=$("${launch[@]}" "$train" --config "$work/config.json" --init "$golden" --data "$work/tokens.bin" --seq 12 \
    --steps 1 --no-progress --save "$work/$model-ckpt" 2>&1) || { echo "FAIL ($model): zero-train: $out" >&2; exit 1; }
  [[ $out == *"weights from $golden"* ]] || { echo "FAIL ($model): no 'weights from' line: $out" >&2; exit 1; }
  "$ckpt" export "$work/$model-ckpt" --out "$work/$model-hf" >/dev/null
  "$python" "$check" "$golden" "$work/$model-hf"
  if [ -n "${TORCH_PYTHON:-}" ]; then
    "$TORCH_PYTHON" "$check" --transformers "$golden" "$work/$model-hf"
  fi
done
[ -z "$zero_run" ] || exit 0

# Stale models. The golden Llama sharded in two with an index (save_pretrained's layout), one
# shard's weights changed: the "old" model.
golden=$source_dir/tests/models/goldens/llama
"$python" - "$golden" "$work/sharded" <<'PY'
import json, os, sys
from safetensors.numpy import load_file, save_file
golden, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
tensors = load_file(os.path.join(golden, "model.safetensors"))
names = sorted(tensors)
halves = [names[: len(names) // 2], names[len(names) // 2:]]
weight_map = {}
for k, part in enumerate(halves):
    file = f"model-0000{k + 1}-of-00002.safetensors"
    shard = {n: tensors[n] * (2 if k == 1 else 1) for n in part}
    save_file(shard, os.path.join(out, file), metadata={"format": "pt"})
    weight_map.update({n: file for n in part})
json.dump({"metadata": {}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"))
PY
cp "$golden/config.json" "$work/sharded/"
# An export over it replaces the whole model: the index and its shards go, and it says so.
cp -r "$work/sharded" "$work/over"
out=$("$ckpt" export "$work/llama-ckpt" --out "$work/over") || { echo "FAIL: export over a sharded model: $out" >&2; exit 1; }
[[ $out == *"removed the earlier model's model.safetensors.index.json, model-00001-of-00002.safetensors, model-00002-of-00002.safetensors"* ]] ||
  { echo "FAIL: the export did not say what it removed: $out" >&2; exit 1; }
for f in model.safetensors.index.json model-00001-of-00002.safetensors model-00002-of-00002.safetensors; do
  [ ! -e "$work/over/$f" ] || { echo "FAIL: the export left the old $f" >&2; exit 1; }
done
"$python" "$check" "$golden" "$work/over"
# A directory holding both an index and a different model.safetensors is refused by --init,
# naming both; the same model twice is taken.
cp -r "$work/sharded" "$work/both"
cp "$golden/model.safetensors" "$work/both/"
rc=0
out=$("$train" --config "$work/config.json" --init "$work/both" --data "$work/tokens.bin" --seq 12 \
  --steps 1 --no-progress 2>&1) || rc=$?
[ "$rc" -ne 0 ] || { echo "FAIL: --init took a directory holding two different models" >&2; exit 1; }
[[ $out == *"holds both model.safetensors.index.json (with its shards) and model.safetensors, and they are different models (tensor "*"holds other values"* ]] ||
  { echo "FAIL: --init did not name the two models: $out" >&2; exit 1; }
"$python" - "$work/both" <<'PY'
import os, sys
from safetensors.numpy import load_file, save_file
d = sys.argv[1]
for f in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
    save_file({n: v for n, v in load_file(os.path.join(d, f)).items()}, os.path.join(d, f),
              metadata={"format": "pt"})
whole = load_file(os.path.join(d, "model.safetensors"))
second = load_file(os.path.join(d, "model-00002-of-00002.safetensors"))
save_file({n: whole[n] for n in second}, os.path.join(d, "model-00002-of-00002.safetensors"),
          metadata={"format": "pt"})
PY
out=$("$train" --config "$work/config.json" --init "$work/both" --data "$work/tokens.bin" --seq 12 \
  --steps 1 --no-progress 2>&1) || { echo "FAIL: --init refused the same model twice: $out" >&2; exit 1; }
echo "ok   stale models: an export replaces a sharded one, --init refuses two different ones"
