#!/usr/bin/env bash
# zero-train end to end, one ctest test per case: check_zero_train.sh ZERO_RUN ZERO_TRAIN
# SOURCE_DIR WORK CASE. The trains_* cases run real ranks through zero-run (Open MPI) on the
# shipped corpus and exit 77 (skipped) without mpirun; the errors case runs one rank directly.
set -euo pipefail

zero_run=$1
train=$2
source_dir=$3
work=$4
case_name=$5
rm -rf "$work"
mkdir -p "$work"
export ZERO_LOG_LEVEL=warn OMP_NUM_THREADS=1
corpus=$source_dir/data/fortunes.txt

fail() {
  echo "FAIL ($case_name): $*" >&2
  exit 1
}
have_mpirun() { command -v mpirun >/dev/null || [ -n "${ZERO_MPIRUN:-}" ]; }

# A small fp32 stage-3 config with the optimizer offloaded to the CPU, as the demo's.
cat >"$work/config.json" <<'JSON'
{
  "train_micro_batch_size_per_gpu": 4,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": "auto", "warmup_num_steps": 5}},
  "gradient_clipping": 1.0,
  "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                        "reduce_bucket_size": 1e5, "stage3_param_persistence_threshold": 1000},
  "steps_per_print": 10
}
JSON

# Runs zero-train on N ranks (on $DATA, else the corpus; sequences of $SEQ, else 32); sets out,
# err and rc.
run() {
  local ranks=$1
  shift
  rc=0
  "$zero_run" -n "$ranks" -- "$train" --config "$work/config.json" --data "${DATA:-$corpus}" --seq "${SEQ:-32}" \
    --no-progress "$@" >"$work/out" 2>"$work/err" || rc=$?
  out=$(<"$work/out")
  err=$(<"$work/err")
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1; stdout: $out; stderr: $err"; }
expect_out() { [[ "$out" == *"$1"* ]] || fail "stdout lacks '$1': $out"; }
expect_err() { [[ "$err" == *"$1"* ]] || fail "stderr lacks '$1': $err"; }
# gone PGREP_ARGS...: whether no process matches within 10 s. mpirun can exit while the
# processes it killed are still being ended (a rank's SIGTERM delivered, its exit not yet
# reaped), so "left behind" means still there seconds after the job ended.
gone() {
  local i
  for ((i = 0; i < 100; ++i)); do
    pgrep "$@" >/dev/null || return 0
    sleep 0.1
  done
  return 1
}
# The loss of step N in a metrics file, exactly as written.
loss_at() {
  grep "\"kind\":\"train\",\"step\":$2," "$1" | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

case $case_name in
  trains_and_resumes_exactly)
    have_mpirun || exit 77
    # 40 steps straight, and 25 steps + a save + a new job resuming to 40: the same losses.
    run 2 --steps 40 --metrics "$work/straight.jsonl" --eval-every 20
    expect_rc 0
    expect_out "step 40/40 | loss"
    expect_out "validation loss"
    expect_out "rank 1 host"
    first=$(loss_at "$work/straight.jsonl" 1)
    last=$(loss_at "$work/straight.jsonl" 40)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 5.0 && b < a - 1.5) }' ||
      fail "the loss did not fall from above 5 by 1.5: step 1 $first, step 40 $last"
    run 2 --steps 40 --save-every 25 --save "$work/ckpt" --metrics "$work/first.jsonl"
    expect_rc 0
    expect_out "saved $work/ckpt/global_step25"
    [ -f "$work/ckpt/global_step25/meta.json" ] || fail "no checkpoint at step 25"
    # meta.json keeps the caller's user data in hex.
    position=$(printf '%s' '"sequences_taken":200' | od -An -tx1 | tr -d ' \n')
    grep -q "$position" "$work/ckpt/global_step25/meta.json" ||
      fail "the checkpoint lacks the data position (200 sequences = 25 steps x 2 ranks x 4)"
    run 2 --steps 40 --resume "$work/ckpt/global_step25" --metrics "$work/resumed.jsonl"
    expect_rc 0
    expect_out "resumed from $work/ckpt/global_step25 at step 25"
    for step in 26 33 40; do
      a=$(loss_at "$work/straight.jsonl" $step)
      b=$(loss_at "$work/resumed.jsonl" $step)
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $step: loss $a straight, $b resumed"
    done
    ;;
  trains_with_activation_checkpointing)
    have_mpirun || exit 77
    # The recomputed forward gives the same losses as keeping the activations.
    run 2 --steps 6 --metrics "$work/plain.jsonl"
    expect_rc 0
    run 2 --steps 6 --activation-checkpointing --metrics "$work/ac.jsonl"
    expect_rc 0
    expect_out "activation checkpointing: 4 of 4 blocks"
    for step in 1 6; do
      a=$(loss_at "$work/plain.jsonl" $step)
      b=$(loss_at "$work/ac.jsonl" $step)
      [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $step: loss $a plain, $b with checkpointing"
    done
    ;;
  a_stalled_rank_ends_the_start)
    have_mpirun || exit 77
    # Rank 1 stalls before it starts zero-train (a sleep: a stopped process, SIGSTOP, is ended
    # the same way, but how long mpirun takes to reap it varies): the others wait in
    # MPI_Init_thread, and the start-up timeout ends the job naming rank 1.
    printf '#!/bin/sh\nif [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec sleep 300; fi\nexec "$@"\n' \
      >"$work/stall.sh"
    chmod +x "$work/stall.sh"
    rc=0
    timeout -s KILL 60 "$zero_run" -n 3 --start-timeout 2 -- "$work/stall.sh" "$train" \
      --config "$work/config.json" --data "$corpus" --seq 32 --steps 2 --no-progress \
      >"$work/out" 2>"$work/err" || rc=$?
    out=$(<"$work/out")
    err=$(<"$work/err")
    expect_rc 124
    all="$out $err"
    # The first waiting rank to give up ends the job: mpirun may end the other before it prints.
    [[ $all == *"rank "[02]" of 3"*"not all started within 2 s"* ]] ||
      fail "no waiting rank reported the timeout: $all"
    [[ $all == *"rank 1 of 3 never reached start-up"* ]] || fail "rank 1 not named: $all"
    gone -f -- "--config $work/config.json" ||
      fail "a rank still runs 10 s after the job: $(pgrep -af -- "--config $work/config.json")"
    gone -x -f "sleep 300" || fail "the stalled rank still runs 10 s after the job"
    ;;

  trains_in_bf16_and_fp16)
    # The CPU layers take bf16 and fp16 compute copies (read and computed in fp32, gradients
    # rounded to the compute dtype): 30 steps at stage 2 train about as far as fp32, and fp16's
    # dynamic loss scale shows in the output.
    for precision in fp32 bf16 fp16; do
      sets=()
      [ "$precision" = fp32 ] || sets=(--set "$precision.enabled=true")
      run 1 --steps 30 --set zero_optimization.stage=2 --metrics "$work/$precision.jsonl" \
        "${sets[@]}"
      expect_rc 0
      expect_out "step 30/30 | loss"
    done
    expect_out "loss scale 65536"  # fp16's dynamic scale (initial_scale_power 16), the last run
    for precision in bf16 fp16; do
      a=$(loss_at "$work/fp32.jsonl" 30)
      b=$(loss_at "$work/$precision.jsonl" 30)
      first=$(loss_at "$work/$precision.jsonl" 1)
      awk -v a="$a" -v b="$b" -v f="$first" 'BEGIN { d = a - b; if (d < 0) d = -d;
          exit !(d < 0.15 && b < f - 1.0) }' ||
        fail "$precision: step 30's loss $b (from $first) is not within 0.15 of fp32's $a"
    done
    ;;

  stage3_keeps_persistent_parameters_together)
    # An embedding just above the persistence threshold, every other parameter below it: the
    # small ones used to fill the hole the embedding left after the first module, and its
    # second use (the tied head) found no room in a gather arena sized for it (out of memory
    # at step 1). Persistent parameters are now gathered together at a pass's start.
    for ranks in 1 2; do
      [ "$ranks" -eq 1 ] || have_mpirun || break
      run "$ranks" --vocab 400 --layers 1 --heads 2 --channels 32 --positions 32 --steps 2 \
        --set zero_optimization.stage3_param_persistence_threshold=10000
      expect_rc 0
      expect_out "step 2/2"
    done
    ;;

  logs_name_their_rank_and_what_they_count)
    have_mpirun || exit 77
    ZERO_LOG_LEVEL=info run 2 --steps 1
    expect_rc 0
    # The device line comes before the communicator exists: still tagged with its own rank.
    for rank in 0 1; do
      n=$(grep -c "\[zero rank $rank\] \[info\] .*using the CPU device" "$work/err" || true)
      [ "$n" -eq 1 ] || fail "rank $rank's device line appears $n times as rank $rank: $err"
    done
    expect_err "parameters of 834304 elements (834304 trainable), fp32 compute"
    expect_err "fp32 grads, fp32 state, no copy-out"
    ;;

  export_initialises_the_same_model)
    # zero-ckpt export writes Hugging Face's GPT-2 layout, which --init reads: a run started
    # from the export, at lr 0, evaluates to the saved model's validation loss, bit for bit.
    run 1 --steps 3 --save "$work/ckpt" --eval-every 3 --metrics "$work/saved.jsonl"
    expect_rc 0
    "$ZERO_CKPT" export "$work/ckpt" --out "$work/model.safetensors" >"$work/export.out" ||
      fail "zero-ckpt export: $(<"$work/export.out")"
    grep -q "Hugging Face GPT-2" "$work/export.out" || fail "not exported in GPT-2's layout: $(<"$work/export.out")"
    run 1 --steps 1 --lr 0 --init "$work/model.safetensors" --eval-every 1 \
      --metrics "$work/init.jsonl"
    expect_rc 0
    saved=$(grep '"kind":"eval"' "$work/saved.jsonl" | tail -1 | sed 's/.*"eval_loss":\([^,}]*\).*/\1/')
    again=$(grep '"kind":"eval"' "$work/init.jsonl" | tail -1 | sed 's/.*"eval_loss":\([^,}]*\).*/\1/')
    [ -n "$saved" ] && [ "$saved" = "$again" ] ||
      fail "validation loss of the saved model $saved, of the export loaded by --init $again"
    # --layout saved keeps zero's own layout, which --init refuses by shape.
    "$ZERO_CKPT" export "$work/ckpt" --out "$work/zero.safetensors" --layout saved >/dev/null
    run 1 --steps 1 --init "$work/zero.safetensors"
    [ "$rc" -ne 0 ] || fail "zero's own layout was taken as GPT-2's"
    expect_err "shape"
    ;;

  an_edited_checkpoint_is_refused)
    # One rank, run directly. meta.json's own values are checksummed: an edit of its counters
    # is refused at --resume. Re-hashed after the edit (XXH3-64 of the compact JSON, through
    # libxxhash), the data position's step then disagrees with the engine's restored step.
    run 1 --steps 3 --save "$work/ckpt"
    expect_rc 0
    meta=$work/ckpt/global_step3/meta.json
    cp "$meta" "$work/meta.saved"
    python3 - "$meta" <<'PY'
import json, sys
path = sys.argv[1]
m = json.load(open(path))
m["counters"]["global_steps"] = 4
json.dump(m, open(path, "w"), indent=1)
PY
    run 1 --steps 5 --resume "$work/ckpt"
    [ "$rc" -ne 0 ] || fail "an edited meta.json was accepted"
    expect_err "meta.json was changed after the save"
    python3 - "$meta" <<'PY'
import ctypes, ctypes.util, json, sys
path = sys.argv[1]
xxhash = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
xxhash.XXH3_64bits.restype = ctypes.c_uint64
xxhash.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
m = json.load(open(path))
m.pop("meta_xxh3")
text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
m["meta_xxh3"] = "%016x" % xxhash.XXH3_64bits(text, len(text))
json.dump(m, open(path, "w"), indent=1)
PY
    run 1 --steps 5 --resume "$work/ckpt"
    [ "$rc" -ne 0 ] || fail "a data position of step 3 was taken for a state of step 4"
    expect_err "the data position says step 3, the engine's restored state step 4"
    cp "$work/meta.saved" "$meta"
    run 1 --steps 5 --resume "$work/ckpt"
    expect_rc 0
    ;;

  errors)
    # One rank, run directly: each mistake fails with a message that names it.
    DATA=$work/missing.txt run 1 --steps 2
    [ "$rc" -ne 0 ] || fail "a missing data file was accepted"
    expect_err "$work/missing.txt"
    SEQ=65 run 1 --steps 2
    [ "$rc" -ne 0 ] || fail "a sequence longer than the model's was accepted"
    expect_err "--seq 65 is longer than the model's 64 positions"
    run 1 --steps 2 --set train_batch_size=6 --set gradient_accumulation_steps=4
    [ "$rc" -ne 0 ] || fail "a batch that does not divide was accepted"
    expect_err "train_batch_size"
    run 1 --steps 2 --model gpt2-7b
    [ "$rc" -ne 0 ] || fail "an unknown model was accepted"
    expect_err "unknown model 'gpt2-7b'"
    run 1 --steps 2 --kv-heads 2
    [ "$rc" -ne 0 ] || fail "--kv-heads on a GPT was accepted"
    expect_err "--kv-heads and --intermediate size a Llama-family model"
    run 1 --steps 2 --model llama-tiny --heads 8 --kv-heads 3
    [ "$rc" -ne 0 ] || fail "8 heads over 3 key/value heads were accepted"
    expect_err "8 attention heads do not split over 3 key/value heads"
    run 1 --steps 2 --model llama-tiny --heads 5
    [ "$rc" -ne 0 ] || fail "5 heads over llama-tiny's 2 key/value heads were accepted"
    expect_err "--heads 5 does not split over llama-tiny's 2 key/value heads: give --kv-heads too"
    # A Hugging Face directory whose config.json the models cannot take names the key.
    mkdir -p "$work/hf"
    echo '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
           "intermediate_size": 96, "max_position_embeddings": 64, "vocab_size": 256,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}' >"$work/hf/config.json"
    run 1 --steps 2 --init "$work/hf"
    [ "$rc" -ne 0 ] || fail "yarn rope scaling was accepted"
    expect_err "--init $work/hf: config.json: \"rope_scaling\" asks for \"yarn\" rotary scaling"
    echo '{"model_type": "falcon"}' >"$work/hf/config.json"
    run 1 --steps 2 --init "$work/hf"
    [ "$rc" -ne 0 ] || fail "a falcon directory was accepted"
    expect_err "\"model_type\" is \"falcon\""
    echo '{"model_type": 5}' >"$work/hf/config.json"
    run 1 --steps 2 --init "$work/hf"
    [ "$rc" -ne 0 ] || fail "a numeric model_type was accepted"
    expect_err "--init $work/hf: config.json: \"model_type\" must be a string, not 5"
    echo '{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64,
           "intermediate_size": 96, "max_position_embeddings": 64, "vocab_size": 256,
           "rope_parameters": {"rope_type": "default", "rope_theta": -5}}' >"$work/hf/config.json"
    run 1 --steps 2 --init "$work/hf"
    [ "$rc" -ne 0 ] || fail "a negative rope theta was accepted"
    expect_err "config.json: \"rope_parameters.rope_theta\" must be a number greater than 0, not -5"
    # A tied checkpoint read with tie_word_embeddings false is told in config.json's terms.
    cp -r "$source_dir/tests/models/goldens/qwen2" "$work/tied"
    sed -i 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$work/tied/config.json"
    SEQ=8 run 1 --steps 1 --init "$work/tied" --vocab 256
    [ "$rc" -ne 0 ] || fail "a tied checkpoint loaded untied"
    expect_err "the weights hold no lm_head.weight"
    expect_err "set \"tie_word_embeddings\": true in config.json"
    # A model too large for memory names the config.json keys that size it.
    mkdir -p "$work/huge"
    echo '{"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 768,
           "n_positions": 1000000000, "vocab_size": 256}' >"$work/huge/config.json"
    SEQ=16 run 1 --steps 1 --init "$work/huge"
    [ "$rc" -ne 0 ] || fail "a model of a billion positions was accepted"
    expect_err "out of memory"
    expect_err "its largest tensor is wpe.weight [1000000000 x 768], sized by n_positions and n_embd in $work/huge/config.json"
    # Activations too large for the machine are refused at zero_init, before the model or the
    # engine allocates anything, with the flags that size them (tiny at 100000 x 32: about
    # 130 GB of fp32 activations).
    run 1 --steps 1 --micro-batch 100000
    [ "$rc" -ne 0 ] || fail "activations larger than the machine were accepted"
    expect_err "the run does not fit this machine; nothing was reserved"
    expect_err "the model's activations, workspaces and compute copies (--micro-batch, --seq, --activation-checkpointing) (the program's)"
    # A --seq past a pretrained GPT-2's positions gets advice that works there.
    SEQ=65 run 1 --steps 1 --init "$source_dir/tests/models/goldens/gpt2"
    [ "$rc" -ne 0 ] || fail "--seq past a pretrained GPT-2's positions was accepted"
    expect_err "cannot grow; use --seq 32 or less"
    # A loss that turns non-finite in fp32 stops the run naming the step, and nothing is saved.
    run 1 --steps 6 --lr 1e38 --save "$work/nan-ckpt"
    expect_rc 1
    expect_err "the loss is NaN"
    expect_err "the run stops without saving"
    [[ "$out" != *"done:"* ]] || fail "a NaN run finished as done: $out"
    [ ! -d "$work/nan-ckpt/global_step6" ] || fail "a NaN run saved a checkpoint"
    # A --save directory no rank can write is found at the start, not at the first save.
    touch "$work/a-file"
    run 1 --steps 2 --save "$work/a-file/ckpt"
    [ "$rc" -ne 0 ] || fail "a --save under a file was accepted"
    expect_err "--save $work/a-file/ckpt: cannot create it"
    run 1 --steps 0
    [ "$rc" -ne 0 ] || fail "--steps 0 was accepted"
    expect_err "--steps: must be at least 1 (got 0)"
    run 1 --steps 2 --resume "$work/no-checkpoint"
    [ "$rc" -ne 0 ] || fail "a missing checkpoint was accepted"
    expect_err "no-checkpoint"
    ;;
  *)
    fail "unknown case"
    ;;
esac
echo "ok ($case_name)"
