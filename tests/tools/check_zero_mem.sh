#!/usr/bin/env bash
# zero-mem end to end, one ctest test per case: check_zero_mem.sh ZERO_RUN ZERO_TRAIN ZERO_MEM
# SOURCE_DIR WORK CASE.
#   matches_zero_train  zero-mem --json's rows for the reference GPT and Llama on 2 ranks against what
#                       zero-train measured on 2 ranks with the same config: reserved bytes
#                       per tier, peak bytes per tier and kind, and the activations kept
#                       (exits 77, skipped, without mpirun)
#   hybrid_matches_zero_train  the same with hybrid sharding (mics_shard_size 2) and hpZ
#                       (zero_hpz_partition_size 2) on 4 ranks
#   layouts             with several nodes, each mode flat, hybrid and (stage 3) hpZ; each
#                       collective's link and bytes per rank as the ring formulas give them
#   deepspeed_estimate  DeepSpeed's formulas on round numbers
#   front_end           a Hugging Face config.json through the Python front end (--front-end)
#   errors              what zero-mem refuses, and how it says so
set -euo pipefail

zero_run=$1
train=$2
zmem=$3
source_dir=$4
work=$5
case_name=$6
rm -rf "$work"
mkdir -p "$work"
export ZERO_LOG_LEVEL=warn OMP_NUM_THREADS=1

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}

case $case_name in
matches_zero_train)
  command -v mpirun >/dev/null || [ -n "${ZERO_MPIRUN:-}" ] || { echo "SKIPPED: no mpirun"; exit 77; }
  for model in tiny llama-tiny; do
  for mode in "2 none" "3 optimizer cpu" "3 params cpu"; do
    stage=${mode%% *}
    offload=${mode#* }
    opt=none par=none
    [ "$offload" = "optimizer cpu" ] && opt=cpu
    [ "$offload" = "params cpu" ] && opt=cpu && par=cpu
    # Nothing fetched ahead or kept, so that the stage-3 gathers' peak is exact too.
    cat >"$work/config.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": $stage, "reduce_bucket_size": 1e5, "allgather_bucket_size": 2e5,
    "stage3_param_persistence_threshold": 1000, "stage3_prefetch_bucket_size": 0,
    "stage3_max_reuse_distance": 0,
    "offload_optimizer": {"device": "$opt", "pin_memory": true},
    "offload_param": {"device": "$par", "pin_memory": true}}
}
JSON
    "$zero_run" -n 2 -- "$train" --config "$work/config.json" --model $model --seq 32 --steps 2 \
      --data "$source_dir/data/fortunes.txt" --no-progress --metrics "$work/metrics.jsonl" \
      >"$work/train.out" 2>&1 || { cat "$work/train.out"; fail "zero-train failed ($model, $mode)"; }
    "$zmem" --model $model --seq 32 --gpus-per-node 2 --config "$work/config.json" \
      --stage "$stage" --json >"$work/mem.json" || fail "zero-mem failed ($model, $mode)"
    python3 - "$work/metrics.jsonl" "$work/mem.json" "$offload" "$model" <<'PY' || fail "$model, $mode: prediction differs"
import json, sys
summary = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
plan = json.load(open(sys.argv[2]))
row = [r for r in plan["rows"] if r["offload"] == sys.argv[3]][0]
tiers, kinds = ["device", "pinned", "host", "nvme"], ["param", "grad", "master", "moment", "buffer"]
bad = []
# Reserved: the arenas' capacities and the scratch of each tier (the device's; the verdict's pinned
# slot where the optimizer is not offloaded; CPU ranks have no host scratch).
for tier in tiers:
    want = sum(a["capacity"] for a in row["arenas"] if a["tier"] == tier)
    want += row["scratch"][tier] if tier in ("device", "pinned") else 0
    got = summary["memory_reserved_bytes"][tier]
    if got != want: bad.append(f"reserved {tier}: zero-train {got}, zero-mem {want}")
# Peaks by tier and kind on rank 0 (the first 20 values).
peaks = summary["memory_peak_bytes"]
for t, tier in enumerate(tiers):
    for k, kind in enumerate(kinds):
        want = sum(a["kinds"].get(kind, {}).get("peak", 0) for a in row["arenas"] if a["tier"] == tier)
        got = int(peaks[t * len(kinds) + k])
        if got != want: bad.append(f"peak {tier} {kind}: zero-train {got}, zero-mem {want}")
if summary["activation_bytes"] != plan["activations"]["kept"]:
    bad.append(f"activations kept: zero-train {summary['activation_bytes']}, zero-mem {plan['activations']['kept']}")
print("\n".join(bad) if bad else f"{sys.argv[4]}, {sys.argv[3]}: zero-mem's prediction is what zero-train measured")
sys.exit(1 if bad else 0)
PY
  done
  done
  ;;
fits_as_init)
  # A row fits exactly when the engine's check at init would pass on that node: at the row's
  # own figures it fits, a byte less of GPU or of host memory and it does not (with activation
  # checkpointing asked for, so that no row is planned again with it), and the line
  # that says so is init's (engine/plan/fit_rules.h).
  plan() {
    "$zmem" --model gpt2-124m --seq 64 --gpus-per-node 2 --stage 3 --activation-checkpointing \
      --json "$@" >"$work/mem.json" ||
      fail "zero-mem failed ($*)"
  }
  row() {
    python3 - "$work/mem.json" "$1" <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["offload"] == "optimizer cpu"]
r = rows[0]
print({"gpu": r["per_gpu"]["total"], "host": r["per_node"]["pinned"] + r["per_node"]["host"],
       "fits": r["fits"]["all"], "short": " | ".join(r["short"]),
       "super": r["keys"].get("zero_optimization.offload_optimizer.super_offload") is True}
      [sys.argv[2]])
PY
  }
  # super_offload unset: planned with it where the row with it fits, else without it.
  plan --device gpu
  [ "$(row super)" = True ] || fail "super_offload unset is not on where it fits"
  with_super=$(row host)
  plan --device gpu --cpu-mem "$with_super"
  [ "$(row super)" = True ] && [ "$(row fits)" = True ] ||
    fail "super_offload unset: the row with it does not fit at its own figures"
  plan --device gpu --cpu-mem $((with_super - 1))
  [ "$(row super)" = False ] && [ "$(row fits)" = True ] ||
    fail "super_offload unset: a byte too small for it, the row is not planned without it"
  # The rest with super_offload set off, the row's figures its own.
  plan() {
    "$zmem" --model gpt2-124m --seq 64 --gpus-per-node 2 --stage 3 --activation-checkpointing \
      --set zero_optimization.offload_optimizer.super_offload=false --json "$@" >"$work/mem.json" ||
      fail "zero-mem failed ($*)"
  }
  plan --device gpu
  gpu=$(row gpu)
  host=$(row host)
  plan --device gpu --gpu-mem "$gpu" --cpu-mem "$host"
  [ "$(row fits)" = True ] || fail "the row does not fit at its own figures: $(row short)"
  plan --device gpu --gpu-mem $((gpu - 1)) --cpu-mem "$host"
  [ "$(row fits)" = False ] || fail "the row fits a GPU a byte too small"
  [[ "$(row short)" == "memory of GPU 0 on a node: rank 0 need "*"is free (--gpu-mem)."* ]] ||
    fail "the GPU's shortfall is not init's: $(row short)"
  plan --device gpu --gpu-mem "$gpu" --cpu-mem $((host - 1))
  [ "$(row fits)" = False ] || fail "the row fits a host a byte too small"
  [[ "$(row short)" == "host memory of a node: 2 ranks (0, 1) need "*"is free (--cpu-mem)."* ]] ||
    fail "the host's shortfall is not init's: $(row short)"
  # The CPU device: the ranks' device memory and activations are host memory, one pool with the
  # offloaded state; no GPU is judged.
  plan --device cpu
  pool=$(( $(row gpu) * 2 + $(row host) ))
  plan --device cpu --cpu-mem "$pool"
  [ "$(row fits)" = True ] || fail "on the CPU device the row does not fit at its own figures: $(row short)"
  plan --device cpu --cpu-mem $((pool - 1))
  [ "$(row fits)" = False ] || fail "on the CPU device the row fits a host a byte too small"
  [[ "$(row short)" == "host memory of a node: 2 ranks (0, 1) need "*"is free (--cpu-mem)."* ]] ||
    fail "the CPU device's shortfall is not init's: $(row short)"
  ;;
hybrid_matches_zero_train)
  command -v mpirun >/dev/null || [ -n "${ZERO_MPIRUN:-}" ] || { echo "SKIPPED: no mpirun"; exit 77; }
  for variant in "mics none" "mics cpu" "hpz none"; do
    read -r layout offload <<<"$variant"
    keys='"mics_shard_size": 2' said="hybrid: 2 shard groups of 2 ranks" want="hybrid 2x2"
    if [ "$layout" = hpz ]; then
      keys='"zero_hpz_partition_size": 2' said="hpZ: secondary groups of 2 ranks" want="hpz 2"
    fi
    cat >"$work/config.json" <<JSON
{
  "train_micro_batch_size_per_gpu": 2,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {"stage": 3, $keys, "reduce_bucket_size": 1e5,
    "stage3_param_persistence_threshold": 1000, "stage3_prefetch_bucket_size": 0,
    "stage3_max_reuse_distance": 0, "offload_optimizer": {"device": "$offload"}}
}
JSON
    ZERO_LOG_LEVEL=info "$zero_run" -n 4 -- "$train" --config "$work/config.json" --model tiny \
      --seq 32 --steps 2 --data "$source_dir/data/fortunes.txt" --no-progress \
      --metrics "$work/metrics.jsonl" >"$work/train.out" 2>&1 ||
      { cat "$work/train.out"; fail "zero-train failed ($offload)"; }
    grep -q "$said" "$work/train.out" ||
      { cat "$work/train.out"; fail "zero-train did not say '$said'"; }
    "$zmem" --model tiny --seq 32 --gpus-per-node 4 --device cpu --config "$work/config.json" \
      --stage 3 --json >"$work/mem.json" || fail "zero-mem failed ($offload)"
    python3 - "$work/metrics.jsonl" "$work/mem.json" "$offload" "$want" <<'PY' || fail "$variant: prediction differs"
import json, sys
summary = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
plan = json.load(open(sys.argv[2]))
name = "none" if sys.argv[3] == "none" else "optimizer cpu"
row = [r for r in plan["rows"] if r["offload"] == name][0]
bad = [] if row["layout"] == sys.argv[4] else [f"layout {row['layout']}"]
for tier in ["device", "pinned", "host", "nvme"]:
    want = sum(a["capacity"] for a in row["arenas"] if a["tier"] == tier)
    want += row["scratch"][tier] if tier in ("device", "pinned") else 0
    got = summary["memory_reserved_bytes"][tier]
    if got != want: bad.append(f"reserved {tier}: zero-train {got}, zero-mem {want}")
print("\n".join(bad) if bad else f"{sys.argv[4]}, {name}: zero-mem's prediction is what zero-train reserved")
sys.exit(1 if bad else 0)
PY
  done
  ;;

layouts)
  "$zmem" --model llama-3.1-8b --nodes 2 --gpus-per-node 8 --device gpu --stage 1 --stage 3 \
    --json >"$work/mem.json" || fail "zero-mem failed"
  python3 - "$work/mem.json" <<'PY' || fail "the collectives' links or bytes are wrong"
import json, sys
plan = json.load(open(sys.argv[1]))
P = plan["model"]["params"]
N, S = 16, 8
R = N // S
bad = []
layouts = {(r["stage"], r["layout"]) for r in plan["rows"]}
for stage, layout in ((1, "flat"), (1, "hybrid 2x8"), (3, "flat"), (3, "hybrid 2x8"), (3, "hpz 8")):
    if (stage, layout) not in layouts: bad.append(f"no stage {stage} {layout} rows")
def close(a, b): return abs(a - b) <= 1e-6 * max(abs(b), 1)
for r in plan["rows"]:
    if "error" in r: continue
    comm = {c["what"]: c for c in r["comm"]}
    rs = comm["gradient reduce-scatter"]
    hybrid = r["layout"].startswith("hybrid")
    n = S if hybrid else N
    if rs["ranks"] != n or not close(rs["bytes_per_rank"], (n - 1) / n * P * 2):
        bad.append(f"{r['layout']} stage {r['stage']}: reduce-scatter {rs}")
    if (rs["link"] == "inter-node") == hybrid:
        bad.append(f"{r['layout']}: reduce-scatter on the {rs['link']} link")
    replicas = comm.get("gradient shards' all-reduce over the replicas")
    if r["layout"] == "hpz 8":
        first = comm.get("stage-3 gathers, the first after a step")
        later = comm.get("stage-3 gathers from hpZ's secondary partition")
        if r["stage"] != 3: bad.append(f"an hpZ row at stage {r['stage']}")
        if not first or first["ranks"] != N or first["link"] != "inter-node":
            bad.append(f"hpZ's first gathers {first}")
        if not later or later["ranks"] != S or later["link"] != "intra-node":
            bad.append(f"hpZ's later gathers {later}")
        if r["keys"].get("zero_optimization.zero_hpz_partition_size") != S:
            bad.append("an hpZ row's keys lack zero_hpz_partition_size")
    elif not hybrid:
        if replicas: bad.append("flat has a replicas' all-reduce")
        if r["step_lower_bound"]["intra_node_bytes"] != 0: bad.append("flat sends within a node")
    else:
        want = 2 * (R - 1) / R * (P / S) * 2
        if not replicas or replicas["link"] != "inter-node" or not close(replicas["bytes_per_rank"], want):
            bad.append(f"hybrid replicas' all-reduce {replicas}, want {want} across nodes")
        if not close(r["step_lower_bound"]["inter_node_bytes"], want):
            bad.append(f"hybrid across nodes {r['step_lower_bound']['inter_node_bytes']}, want {want}")
    if "hybrid" in r["layout"] and r["keys"].get("zero_optimization.hybrid_shard") is not True:
        bad.append("a hybrid row's keys lack hybrid_shard")
print("\n".join(bad) if bad else "each collective on its link, with a ring's bytes")
sys.exit(1 if bad else 0)
PY
  # One node: flat only, no layout column.
  "$zmem" --model tiny --gpus-per-node 4 --device gpu >"$work/out" || fail "zero-mem failed"
  if grep -q "hybrid\|hpz" "$work/out"; then cat "$work/out"; fail "a hybrid or hpZ row on one node"; fi
  ;;

quantized)
  # ZeRO++ qwZ and qgZ: an int8 and a 256th of an fp32 scale per element on the wire in place
  # of bf16, for the reduce-scatter and stage 3's gathers; the gather arena and the buckets
  # hold the packed chunks beside the values.
  run() {
    "$zmem" --model llama-3.1-8b --nodes 2 --gpus-per-node 8 --device gpu --stage 2 --stage 3 \
      --layout flat --json "$@"
  }
  run >"$work/exact.json" || fail "zero-mem failed"
  run --set zero_optimization.zero_quantized_weights=true \
    --set zero_optimization.zero_quantized_gradients=true >"$work/quant.json" ||
    fail "zero-mem failed with quantization"
  python3 - "$work/exact.json" "$work/quant.json" <<'PY' || fail "the quantized bytes are wrong"
import json, sys
exact, quant = (json.load(open(f)) for f in sys.argv[1:3])
ratio = (1 + 4 / 256) / 2
bad = []
def rows(plan): return {(r["stage"], r["offload"]): r for r in plan["rows"] if "error" not in r}
for key, q in rows(quant).items():
    e = rows(exact)[key]
    ec = {c["what"].split(" (")[0]: c for c in e["comm"]}
    qc = {c["what"].split(" (")[0]: c for c in q["comm"]}
    for what, c in qc.items():
        # Stage 1-2's all-gather of the updated parameters stays exact.
        packed = "qgZ" in c["what"] or "qwZ" in c["what"] or what.startswith("persistent")
        want = ec[what]["bytes_per_rank"] * (ratio if packed else 1)
        if abs(c["bytes_per_rank"] - want) > 1e-6 * want:
            bad.append(f"stage {key[0]} {key[1]}: {what}: {c['bytes_per_rank']}, want {want}")
    names = [c["what"] for c in q["comm"]]
    if not any("qgZ" in n for n in names): bad.append(f"{key}: no qgZ reduce-scatter in {names}")
    if key[0] == 3 and not any("qwZ" in n for n in names): bad.append(f"{key}: no qwZ gathers")
    if key[0] == 2 and any("qwZ" in n for n in names): bad.append(f"{key}: qwZ at stage 2")
    def arena(r, name):
        return sum(a["capacity"] for a in r["arenas"] if name in a["name"])
    if key[0] == 3 and not arena(q, "gathered") > arena(e, "gathered"):
        bad.append(f"{key}: the gather arena did not grow for the packed chunks")
print("\n".join(bad) if bad else "quantized collectives send (1 + 1/64) / 2 of bf16's bytes")
sys.exit(1 if bad else 0)
PY
  ;;

deepspeed_estimate)
  # P = 1e9, L = 1e8 on 8 GPUs: ZeRO-3 without offload is 4L + 18P/8 per GPU; ZeRO-2 with the
  # optimizer offloaded 2P per GPU and P * max(4 * 8, 16) * 1.5 per CPU.
  "$zmem" --params 1e9 --largest-layer 1e8 --gpus-per-node 8 --deepspeed-estimate --json \
    >"$work/mem.json"
  python3 - "$work/mem.json" <<'PY' || fail "DeepSpeed's formulas"
import json, sys
ds = json.load(open(sys.argv[1]))["deepspeed_estimate"]
def row(stage, param, opt, init):
    return [r for r in ds if r["stage"] == stage and r["offload_param"] == param
            and r["offload_optimizer"] == opt and r["zero_init"] == init][0]
checks = [
    (row(3, "none", "none", 1)["per_gpu"], 4 * 10**8 + 18 * 10**9 // 8),
    (row(3, "none", "none", 1)["per_cpu"], int(4 * 10**8 * 8 * 1.5)),
    (row(3, "cpu", "cpu", 1)["per_gpu"], 4 * 10**8),
    (row(3, "cpu", "cpu", 0)["per_cpu"], int(10**9 * 32 * 1.5)),
    (row(3, "none", "cpu", 1)["per_gpu"], 4 * 10**8 + 2 * 10**9 // 8),
    (row(2, "", "cpu", -1)["per_gpu"], 2 * 10**9),
    (row(2, "", "cpu", -1)["per_cpu"], int(10**9 * 32 * 1.5)),
    (row(2, "", "none", -1)["per_gpu"], 4 * 10**9 + 16 * 10**9 // 8),
]
bad = [(got, want) for got, want in checks if got != want]
print(bad or "DeepSpeed's rows as its formulas give them")
sys.exit(1 if bad else 0)
PY
  ;;
front_end)
  # A Hugging Face directory's config.json, through the Python front end: the same registry as
  # zero's own Llama of that shape; per rank the Python side (the process, and the larger of
  # the largest unit initialised without weights, 8 bytes a parameter, and a streamed save's
  # largest tensor, 6) in place of the CPU layers' copies (8 bytes a parameter of the largest
  # module); with weights in the directory, no unit is initialised.
  mkdir -p "$work/llama"
  cat >"$work/llama/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 1000,
 "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false}
JSON
  "$zmem" --model "$work/llama" --device cpu --ranks-per-node 2 --stage 3 --seq 32 --json \
    >"$work/plain.json" || fail "zero-mem on the directory failed"
  "$zmem" --model "$work/llama" --front-end --device cpu --ranks-per-node 2 --stage 3 --seq 32 \
    --json >"$work/config.json" || fail "zero-mem --front-end failed"
  "$zmem" --model "$work/llama" --front-end --device cpu --ranks-per-node 2 --stage 3 --seq 32 \
    >"$work/config.txt" || fail "zero-mem --front-end failed"
  : >"$work/llama/model.safetensors"
  "$zmem" --model "$work/llama" --front-end --device cpu --ranks-per-node 2 --stage 3 --seq 32 \
    --json >"$work/loaded.json" || fail "zero-mem --front-end on a directory of weights failed"
  grep -q "through the Python front end" "$work/config.txt" || fail "no front-end line"
  python3 - "$work" <<'PY' || fail "the front end's rows"
import json, sys
work = sys.argv[1]
plain, config, loaded = (json.load(open(f"{work}/{n}.json")) for n in ("plain", "config", "loaded"))
process = 768 << 20
largest_module = 64 + 1000 * 64      # the head: the final norm and lm_head
largest_param = 1000 * 64
bad = []
if plain["model"]["params"] != 2 * 64000 + 64 + 2 * (4096 + 2048 * 2 + 4096 + 3 * 176 * 64 + 128):
    bad.append(f"parameters {plain['model']['params']}")
if config.get("front_end") != process + 8 * largest_module:
    bad.append(f"without weights: {config.get('front_end')}")
if loaded.get("front_end") != process + 6 * largest_param:
    bad.append(f"with weights: {loaded.get('front_end')}")
for a, b in zip(plain["rows"], config["rows"]):
    want = a["per_gpu"]["activations"] - 8 * largest_module + config["front_end"]
    if b["per_gpu"]["activations"] != want or b["per_gpu"]["device_state"] != a["per_gpu"]["device_state"]:
        bad.append(f"{b['offload']}: {b['per_gpu']} against {a['per_gpu']}")
print(bad or "the front end's rows: zero's arenas, the Python side in place of the CPU layers' copies")
sys.exit(1 if bad else 0)
PY
  ;;
errors)
  expect() {  # expect "what it must say" zero-mem args...
    local want=$1
    shift
    local rc=0
    "$zmem" "$@" >"$work/out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || fail "zero-mem $* succeeded"
    grep -q -- "$want" "$work/out" || { cat "$work/out"; fail "zero-mem $* did not say '$want'"; }
  }
  expect "say what the model is" --gpus-per-node 8
  expect "add --largest-layer" --params 7e10
  expect "unknown unit" --model tiny --gpu-mem 80GiX
  expect "expected 5" --arch 80,8192,64
  expect "do not split over" --arch 2,10,3,50,16
  expect "does not match --model" --model gpt2-124m --params 7e10
  expect "use a GPT (tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b) or a Llama family model (llama-tiny, llama-3.2-1b" --model llama-3-8b
  expect "is more than the model's 64 positions" --model llama-tiny --seq 65
  expect "is more than the model" --model tiny --seq 65
  expect "give one of" --model tiny --arch 2,16,2,50,16
  mkdir -p "$work/no-config"
  expect "the directory has no config.json" --model "$work/no-config"
  echo '{"model_type": "bert"}' >"$work/no-config/config.json"
  expect 'model_type "bert": zero-mem plans gpt2, llama, mistral and qwen2' --model "$work/no-config"
  expect "do not apply (give the host memory with --cpu-mem)" --model tiny --device cpu --gpu-mem 8GiB
  expect "device: tpu not in" --model tiny --device tpu
  # A config the engine refuses whatever the stage is refused with the engine's message.
  expect "train_batch_size" --model tiny --gpus-per-node 2 --set train_batch_size=3
  # One the engine refuses only with the optimizer on NVMe: those rows say the engine's refusal,
  # read by the same code, and the others are planned.
  "$zmem" --model tiny --nvme 1TB --set zero_optimization.offload_optimizer.buffer_count=2 \
    >"$work/out" 2>&1 || { cat "$work/out"; fail "zero-mem with buffer_count 2 failed"; }
  refusal="optimizer nvme  refused: zero_optimization.offload_optimizer.buffer_count is 2"
  refused=$(grep -c "$refusal" "$work/out" || true)
  [ "$refused" -eq 3 ] || { cat "$work/out"; fail "not every optimizer-nvme row was refused"; }
  grep -q "optimizer cpu .* yes" "$work/out" || { cat "$work/out"; fail "cpu rows not planned"; }
  # super_offload: the rows with the optimizer on the CPU count its second copy (12 bytes per
  # parameter of Adam's fp32 state: 1.39 GiB of pinned memory more for GPT-2 124M); the others,
  # where the engine would refuse it, are planned without it. Unset, beside a GPU, the engine
  # turns it on where it fits, and so do the rows.
  pinned() {
    "$zmem" --model gpt2-124m --device gpu --gpus-per-node 1 --nvme 1TB \
      --set zero_optimization.offload_optimizer.pin_memory=true "$@" >"$work/out" 2>&1 ||
      { cat "$work/out"; fail "zero-mem $* failed"; }
    awk -v mode="$mode" '$2 " " $3 == mode && $1 == 3 {print $6; exit}' "$work/out"
  }
  mode="optimizer cpu"
  without=$(pinned --set zero_optimization.offload_optimizer.super_offload=false)
  unset_key=$(pinned)
  with=$(pinned --set zero_optimization.offload_optimizer.super_offload=true)
  grep -q "optimizer nvme .* yes" "$work/out" || { cat "$work/out"; fail "nvme rows refused"; }
  awk -v a="$without" -v b="$with" 'BEGIN {exit !(b - a > 1.35 && b - a < 1.45)}' ||
    fail "super_offload's pinned memory: $with GiB against $without GiB without it"
  [ "$unset_key" = "$with" ] ||
    fail "super_offload unset: $unset_key GiB pinned, not the $with GiB of the row with it on"
  # The step bound: an optimizer on the CPU steps after backward (compute plus its step, the
  # NVMe state's reads plus writes where it is on the disk) unless super_offload overlaps
  # them (the largest resource alone); a GPU optimizer is not counted after backward. With
  # super_offload the swap file holds each group's state twice (the speculated step writes the
  # second region) while the disk still reads and writes it once a step.
  for super in false true; do
    "$zmem" --model gpt2-124m --device gpu --gpus-per-node 1 --nvme 1TB --stage 3 --json \
      --set zero_optimization.offload_optimizer.super_offload=$super >"$work/bound.json" \
      2>"$work/out" || { cat "$work/out"; fail "zero-mem --json (super_offload $super) failed"; }
    cp "$work/bound.json" "$work/bound-$super.json"
    python3 - "$work/bound.json" "$super" "$work/bound-false.json" <<'PY' ||
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
speculate = sys.argv[2] == "true"
seen = set()
for row in rows:
    b, mode = row["step_lower_bound"], row["offload"]
    parts = max(b[k] for k in ("compute", "network", "pcie", "nvme", "cpu_optimizer"))
    on_cpu = mode != "none"  # every offload row puts the optimizer on the CPU or its NVMe
    overlapped = speculate and on_cpu
    if on_cpu and not overlapped:
        assert b["after_backward"] >= b["cpu_optimizer"] > 0, (mode, b)
        assert b["seconds"] == max(parts, b["compute"] + b["after_backward"]), (mode, b)
        assert b["bound_by"].startswith("compute, then "), (mode, b)
    else:
        assert b["after_backward"] == 0 and b["seconds"] == parts, (mode, b)
    seen.add(mode)
assert {"none", "optimizer cpu", "optimizer nvme"} <= seen, seen
row = next(r for r in rows if r["offload"] == "optimizer nvme")
nvme = row["step_lower_bound"]
if not speculate:
    assert nvme["after_backward"] > nvme["cpu_optimizer"], nvme  # the disk's reads and writes
    assert nvme["bound_by"] == "compute, then NVMe step", nvme
else:
    plain = next(r for r in json.load(open(sys.argv[3]))["rows"]
                 if r["offload"] == "optimizer nvme")
    def kinds(r):
        arena = next(a for a in r["arenas"] if a["tier"] == "nvme")
        return {k: v["held"] for k, v in arena["kinds"].items()}
    got, want = kinds(row), kinds(plain)
    assert got["master"] == 2 * want["master"] and got["moment"] == 2 * want["moment"], (got, want)
    assert got["grad"] == want["grad"], (got, want)
    assert nvme["nvme_bytes"] == plain["step_lower_bound"]["nvme_bytes"], (nvme, plain)
PY
      fail "the step bound with super_offload $super"
  done
  # Unset, super_offload is on in the recommended row where that row with it still fits (Llama
  # 3.1 8B on one GPU: the optimizer on the CPU), off where the host is too small for its second
  # copy; then, and where the config sets it false, no line suggests it.
  suggest() {
    "$zmem" --model llama-3.1-8b --device gpu --gpus-per-node 1 "$@" >"$work/out" 2>&1 ||
      { cat "$work/out"; fail "zero-mem $* failed"; }
  }
  for memory in 512GB 160GB; do
    suggest --cpu-mem $memory --json
    python3 - "$work/out" "$memory" <<'PY' || fail "super_offload unset with $memory of host memory"
import json, sys
plan = json.load(open(sys.argv[1]))
best = plan["rows"][plan["recommended"]]
on = best["keys"].get("zero_optimization.offload_optimizer.super_offload") is True
assert best["offload"] == "optimizer cpu", best["offload"]
assert on == (sys.argv[2] == "512GB"), (sys.argv[2], best["keys"])
if on:  # the optimizer stepped during backward: nothing after it
    assert best["step_lower_bound"]["after_backward"] == 0, best["step_lower_bound"]
else:
    assert best["step_lower_bound"]["after_backward"] > 0, best["step_lower_bound"]
assert plan["super_offload"] is None, plan["super_offload"]
PY
  done
  suggest --cpu-mem 160GB
  if grep -q "with offload_optimizer.super_offload" "$work/out"; then
    cat "$work/out"
    fail "super_offload suggested where its second copy does not fit 160 GB"
  fi
  suggest --cpu-mem 512GB --set zero_optimization.offload_optimizer.super_offload=false
  if grep -q "with offload_optimizer.super_offload" "$work/out"; then
    cat "$work/out"
    fail "super_offload suggested though the config sets it"
  fi
  suggest --cpu-mem 512GB --set zero_optimization.offload_optimizer.super_offload=false --json
  python3 - "$work/out" <<'PY' || fail "the JSON's super_offload suggestion"
import json, sys
plan = json.load(open(sys.argv[1]))
best = plan["rows"][plan["recommended"]]
assert best["keys"].get("zero_optimization.offload_optimizer.super_offload") is not True, best["keys"]
assert plan["super_offload"] is None, plan["super_offload"]
PY
  ;;
*)
  fail "unknown case"
  ;;
esac
