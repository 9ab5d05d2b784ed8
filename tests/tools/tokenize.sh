#!/usr/bin/env bash
# tools/zero-tokenize against a small byte-level BPE tokenizer trained here on the shipped
# corpus with Hugging Face `tokenizers`: the shard's header and size, every document decoded
# back to its text after its delimiter, shards that concatenate to the single file, uint16
# shards with the same tokens, refusals that name the problem, and zero-train training on the
# shard with a model of that vocabulary.
#   tests/tools/tokenize.sh PYTHON ZERO_TRAIN CONFIG      (PYTHON: the tests' venv)
set -euo pipefail

python=$1
zero_train=$2
config=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tool=$root/tools/zero-tokenize
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL (tokenize): $*" >&2
  exit 1
}
"$python" -c 'import tokenizers' 2>/dev/null || { echo "SKIP: no tokenizers in $python"; exit 77; }

# The corpus's first 200 kB as one text file, and 30 of its lines as JSON lines.
head -c 200000 "$root/data/fortunes.txt" >"$work/part.txt"
"$python" - "$work" <<'PY'
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
work = sys.argv[1]
text = open(f"{work}/part.txt", encoding="utf-8").read()
lines = [l for l in text.splitlines() if l.strip()][:30]
with open(f"{work}/docs.jsonl", "w") as f:
    for l in lines:
        f.write(json.dumps({"text": l, "id": len(l)}) + "\n")
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tok.train([f"{work}/part.txt"], trainer)
tok.save(f"{work}/tokenizer.json")
PY

"$python" "$tool" --tokenizer "$work/tokenizer.json" --out "$work/one.bin" \
  "$work/part.txt" "$work/docs.jsonl" >"$work/out.txt" || fail "zero-tokenize: $(<"$work/out.txt")"
grep -q "31 document(s)" "$work/out.txt" || fail "not 31 documents: $(<"$work/out.txt")"
"$python" "$tool" --tokenizer "$work/tokenizer.json" --out "$work/many" --shard-tokens 5000 \
  "$work/part.txt" "$work/docs.jsonl" >/dev/null || fail "zero-tokenize --shard-tokens failed"
"$python" "$tool" --tokenizer "$work/tokenizer.json" --out "$work/small.bin" --uint16 \
  "$work/part.txt" "$work/docs.jsonl" >/dev/null || fail "zero-tokenize --uint16 failed"

"$python" - "$work" <<'PY' || exit 1
import glob, json, struct, sys
from tokenizers import Tokenizer
work = sys.argv[1]
def read(path, width, magic):
    data = open(path, "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[0] == magic and header[1] == 1, f"{path}: header {header[:3]}"
    assert len(data) == 1024 + header[2] * width, f"{path}: {len(data)} bytes for {header[2]} tokens"
    return list(struct.unpack(f"<{header[2]}{'I' if width == 4 else 'H'}", data[1024:]))
tok = Tokenizer.from_file(f"{work}/tokenizer.json")
eot = tok.token_to_id("<|endoftext|>")
tokens = read(f"{work}/one.bin", 4, 20240801)
want = [open(f"{work}/part.txt", encoding="utf-8").read()]
want += [json.loads(l)["text"] for l in open(f"{work}/docs.jsonl")]
docs, current = [], None
for t in tokens:
    if t == eot:
        if current is not None:
            docs.append(current)
        current = []
    else:
        current.append(t)
docs.append(current)
assert tokens[0] == eot, "the first token is not the delimiter"
assert len(docs) == len(want), f"{len(docs)} documents, {len(want)} written"
for i, (ids, text) in enumerate(zip(docs, want)):
    assert tok.decode(ids) == text, f"document {i} does not decode to its text"
shards = sorted(glob.glob(f"{work}/many_*.bin"))
assert len(shards) == (len(tokens) + 4999) // 5000, f"{len(shards)} shards for {len(tokens)} tokens"
joined = [t for s in shards for t in read(s, 4, 20240801)]
assert joined == tokens, "the shards do not concatenate to the single file"
assert read(f"{work}/small.bin", 2, 20240520) == tokens, "uint16 tokens differ"
print(f"tokenize: {len(tokens)} tokens, {len(docs)} documents, {len(shards)} shards: ok")
PY

# Refusals: exit status 2, a message naming the problem and what to do.
refused() {
  local want=$1
  shift
  if "$python" "$tool" "$@" >"$work/err.txt" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$want" "$work/err.txt" || fail "'$*' did not say '$want': $(<"$work/err.txt")"
}
echo '{"body": "no text field"}' >"$work/bad.jsonl"
refused "bad.jsonl:1: no string field 'text'" --tokenizer "$work/tokenizer.json" \
  --out "$work/x.bin" "$work/bad.jsonl"
refused "not a tokenizer.json" --tokenizer "$work/part.txt" --out "$work/x.bin" "$work/part.txt"
refused "no such token" --tokenizer "$work/tokenizer.json" --delimiter "<|nope|>" \
  --out "$work/x.bin" "$work/part.txt"
refused "cannot open it" --tokenizer "$work/tokenizer.json" --out "$work/x.bin" "$work/missing.txt"
refused "check that the --out folder exists" --tokenizer "$work/tokenizer.json" \
  --out "$work/no-such-folder/x.bin" "$work/part.txt"
# A bad document after thousands of good ones (a line each, so tokens are written before it):
# nothing that looks like a shard stays.
refused "bad.jsonl:1: no string field" --tokenizer "$work/tokenizer.json" --out "$work/x.bin" \
  --lines "$work/part.txt" "$work/bad.jsonl"
[ ! -e "$work/x.bin" ] && [ ! -e "$work/x.bin.tmp" ] || fail "a refused run left $work/x.bin*"
# An --out that is a directory is named as given; one that is an input is refused, the input
# left as it was.
mkdir -p "$work/outdir"
refused "--out $work/outdir: it is a directory" --tokenizer "$work/tokenizer.json" \
  --out "$work/outdir" "$work/part.txt"
cp "$work/part.txt" "$work/input.txt"
refused "would overwrite the input $work/input.txt" --tokenizer "$work/tokenizer.json" \
  --out "$work/input.txt" "$work/part.txt" "$work/input.txt"
cmp -s "$work/part.txt" "$work/input.txt" || fail "an input named as --out was changed"

# A single-line document of 2.5 million characters is encoded in parts cut where the
# pre-tokenizer cuts: the same tokens as encoding it whole.
"$python" - "$work" <<'PY' || exit 1
import sys
work = sys.argv[1]
text = open(f"{work}/part.txt", encoding="utf-8").read().replace("\n", " ")
long = (text * (2_500_000 // len(text) + 1))[:2_500_000]
open(f"{work}/long.txt", "w", encoding="utf-8").write(long)
PY
"$python" "$tool" --tokenizer "$work/tokenizer.json" --out "$work/long.bin" --no-delimiter \
  "$work/long.txt" >/dev/null || fail "zero-tokenize on a long document failed"
"$python" - "$work" <<'PY' || exit 1
import struct, sys
from tokenizers import Tokenizer
work = sys.argv[1]
data = open(f"{work}/long.bin", "rb").read()
count = struct.unpack("<256i", data[:1024])[2]
got = list(struct.unpack(f"<{count}I", data[1024:]))
tok = Tokenizer.from_file(f"{work}/tokenizer.json")
want = tok.encode(open(f"{work}/long.txt", encoding="utf-8").read(), add_special_tokens=False).ids
assert got == want, f"a long document's parts gave {len(got)} tokens, whole {len(want)}"
print(f"tokenize: a 2.5M-character document in parts: {len(got)} tokens, as whole")
PY

# zero-train reads the shard with a model of the tokenizer's vocabulary.
"$zero_train" --config "$config" --data "$work/one.bin" --vocab 400 --layers 1 --heads 2 \
  --channels 32 --positions 32 --steps 2 --no-progress \
  >"$work/train.txt" 2>&1 ||
  fail "zero-train on the shard: $(tail -5 "$work/train.txt")"
grep -q "llm.c uint32" "$work/train.txt" || fail "zero-train did not read an llm.c uint32 shard: $(<"$work/train.txt")"
echo "tokenize: zero-train trained on the shard"
