#!/usr/bin/env bash
# The Hugging Face round trip through the tools, for each golden model (tests/models/goldens:
# llama, qwen2, gpt2): zero-train --init DIR (the shape from DIR/config.json) trains one step at
# learning rate 0 and saves, zero-ckpt export --out OUT writes a model directory, and
# check_hf_export.py finds OUT/model.safetensors equal, tensor for tensor and bit for bit, to
# what save_pretrained wrote, and OUT/config.json with the same shape. With TORCH_PYTHON set (a
# Python with torch and transformers), transformers also loads OUT and gives the logits of the
# saved model. With ZERO_RUN only the Llama runs, on 2 ranks at stage 3, each reading only its
# shards of the file (exit 77, skipped, without mpirun).
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
