#!/usr/bin/env bash
# Export then import: a checkpoint saved at 2 ranks (stage 3), exported by zero-ckpt to one
# safetensors file, is read by the safetensors Python package and loaded back through
# zero_load_pretrained at 1 and 2 ranks; both must equal the engine's values at the save.
#   checkpoint_export.sh ZERO_RUN PROGRAM ZERO_CKPT PYTHON CHECK_SCRIPT DIR
set -euo pipefail
run=$1 program=$2 ckpt=$3 python=$4 script=$5 dir=$6
rm -rf "$dir"
mkdir -p "$dir"
export OMP_NUM_THREADS=1 ZERO_LOG_LEVEL=${ZERO_LOG_LEVEL:-warn}
"$run" -n 2 -- "$program" save "$dir" reshard
"$ckpt" inspect "$dir/s3-fp32" --params
# A link planted at the export's temporary name: the export replaces it, never writes through.
echo precious >"$dir/victim"
ln -s "$dir/victim" "$dir/model.safetensors.tmp"
"$ckpt" export "$dir/s3-fp32" --out "$dir/model.safetensors"
[ "$(cat "$dir/victim")" = precious ] || { echo "FAIL: the export wrote through a link" >&2; exit 1; }
[ ! -e "$dir/model.safetensors.tmp" ] || { echo "FAIL: the export left its .tmp" >&2; exit 1; }
"$python" "$script" "$dir/model.safetensors" "$dir/s3-fp32/at_save.bin" \
  embed.weight block.weight block.bias block.frozen sometimes.weight head.weight
# A byte changed in a rank file: zero-ckpt inspect fails, naming the file.
cp -r "$dir/s3-fp32" "$dir/damaged"
file=$(ls "$dir"/damaged/step5/rank00001-of-*.safetensors)
size=$(stat -c %s "$file")
old=$(od -An -tu1 -j $((size - 3)) -N1 "$file" | tr -d ' ')
printf "\\x$(printf %02x $((old ^ 255)))" | dd of="$file" bs=1 seek=$((size - 3)) conv=notrunc status=none
if "$ckpt" inspect "$dir/damaged" 2> "$dir/inspect.err"; then
  echo "FAIL: zero-ckpt inspect passed a damaged checkpoint" >&2
  exit 1
fi
grep -q "rank00001-of-" "$dir/inspect.err" || { cat "$dir/inspect.err" >&2; exit 1; }
echo "ok   zero-ckpt inspect refuses a damaged rank file: $(cat "$dir/inspect.err")"
for n in 1 2; do
  "$run" -n "$n" -- "$program" import "$dir/model.safetensors" "$dir/s3-fp32/at_save.bin"
done
rm -rf "$dir"
