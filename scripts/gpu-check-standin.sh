#!/usr/bin/env bash
# scripts/gpu-check-standin.sh: what the dry run of scripts/gpu-check.sh (--dry-run) runs in
# place of every GPU program. gpu-check links it under each program's name (the bundle's bin/,
# and nvidia-smi, compute-sanitizer and the PyTorch python3 first on PATH); called by a name, it
# prints what that program prints on a GPU where everything passes, with made-up figures marked
# "dry run", writes the files the program writes (zero-train's --metrics, zero-bench's --json,
# zero-mem's plan) and exits at once: gpu-check spends each item's estimated time itself.
#
# GPU_CHECK_STANDIN_FAIL=ITEM makes the stand-in fail (exit 1, a line saying so) while gpu-check
# runs that item (GPU_CHECK_ITEM), for the test that a failure is reported with its reason.
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree from its imports

name=${0##*/}
item=${GPU_CHECK_ITEM:-}

# fail_here: true when this item is the one asked to fail
fail_here() { [[ -n $item && ${GPU_CHECK_STANDIN_FAIL:-} == "$item" ]]; }
# flag NAME ARGS...: the value of NAME in ARGS, given as "NAME VALUE" or "NAME=VALUE"
flag() {
  local want=$1
  shift
  while (($#)); do
    if [[ $1 == "$want" && $# -gt 1 ]]; then echo "$2"; return; fi
    if [[ $1 == "$want="* ]]; then echo "${1#*=}"; return; fi
    shift
  done
}
catch_failure() {  # a Catch2 failure, as the test programs print it
  local case=$1
  printf '%s\n' "-------------------------------------------------------------------------------" \
    "$case" "-------------------------------------------------------------------------------" \
    "tests/gpu/standin.cpp:1" \
    "..............................................................................." "" \
    "tests/gpu/standin.cpp:2: FAILED:" "  CHECK( dry_run_failure )" "" \
    "===============================================================================" \
    "test cases: 3 | 2 passed | 1 failed" "assertions: 9 | 8 passed | 1 failed"
  exit 1
}

case $name in
  nvidia-smi)
    query=$(flag --query-gpu "$@")
    if [[ -n $(flag -lms "$@") ]]; then  # bench/gpu.sh's sampler: a reading until it is killed
      while :; do echo 1234; sleep 0.1; done
    fi
    case $query in
      name) echo "NVIDIA H200 (dry run)" ;;
      memory.used) echo 0 ;;
      memory.total) echo 143771 ;;
      name,driver_version,memory.total,clocks.max.sm)
        echo "NVIDIA H200 (dry run), 580.159.04, 143771 MiB, 1980 MHz" ;;
      *) echo "NVIDIA H200 (dry run)" ;;
    esac
    ;;

  compute-sanitizer)
    while (($#)) && [[ $1 == -* ]]; do
      case $1 in --tool | --error-exitcode | --print-limit | --leak-check) shift ;; esac
      shift
    done
    echo "========= COMPUTE-SANITIZER"
    "$@"
    rc=$?
    echo "========= ERROR SUMMARY: 0 errors"
    exit "$rc"
    ;;

  zero-run)  # zero-run -n N [options] -- COMMAND...: the command, told its world size
    ranks=$(flag -n "$@")
    while (($#)) && [[ $1 != -- ]]; do shift; done
    shift
    GPU_CHECK_STANDIN_RANKS=${ranks:-1} exec "$@"
    ;;

  zero_mpi_probe)
    if fail_here; then echo "zero_mpi_probe: MPI_Init failed (dry run)" >&2; exit 1; fi
    n=${GPU_CHECK_STANDIN_RANKS:-1}
    for ((r = 0; r < n; ++r)); do
      echo "zero_mpi_probe: rank $r of $n: MPI 3.1, Open MPI v4.1.6 (dry run)," \
           "from /usr/lib/x86_64-linux-gnu/libmpi.so.40; allreduce ok"
    done
    ;;

  zero_gpu_tests | zero_gpu_model_tests)
    if fail_here; then catch_failure "cuda layers: layernorm forward and backward match the CPU layer"; fi
    if [[ $name == zero_gpu_model_tests ]]; then
      for family in gpt2 llama qwen2; do
        echo "tests/gpu/test_gpu_models.cpp:160: warning:"
        echo "  $family: losses 4.6021 (CPU) and 4.6063 (GPU); gradient norms 2.31 and 2.32;" \
             "logits within 0.04 of 7.9 (dry run)"
      done
      echo "==============================================================================="
      echo "All tests passed (4821 assertions in 1 test case)"
    elif [[ " $* " == *" cuda layers: * "* ]]; then
      echo "0.412 s: cuda layers: layernorm forward and backward match the CPU layer"
      echo "1.930 s: cuda layers: attention forward and backward match the CPU layer on strided" \
           "rows with grouped heads and windows"
      echo "==============================================================================="
      echo "All tests passed (1530 assertions in 22 test cases)"
    else
      echo "28.031 s: the CUDA optimizer matches the oracle over 10 steps in every format"
      echo "48.816 s: the CUDA optimizer gives the portable CPU kernel's bits in every format"
      echo "==============================================================================="
      echo "All tests passed (2209 assertions in 32 test cases)"
    fi
    ;;

  zero_c_train_gpu_test)
    if fail_here; then echo "the loss did not fall 100x (dry run)" >&2; exit 1; fi
    echo "loss 0.532113 -> 0.003410"
    ;;

  zero_engine_equivalence_gpu)
    n=${GPU_CHECK_STANDIN_RANKS:-1}
    if ((n == 1)); then
      echo "device CUDA (GPU 0), the engine under test on NCCL, the reference on MPI"
    else
      echo "device CUDA (GPU 0), MPI"
    fi
    if fail_here; then
      echo "FAIL stage 3, bf16, accumulation 3, clipping 0.05, overlap 1, offload cpu, params" \
           "none, $n ranks: step 2: loss 4.1 against 4.3 (dry run)"
      echo "1 case(s) failed"
      exit 1
    fi
    echo "0 case(s) failed"
    ;;

  zero_engine_overlap_gpu)
    for stage in 2 3; do
      echo "[info] step 10: time per step (ms), mean of the last 10: forward 1.200 | backward" \
           "2.400 (blocked on reductions 0.100) | stage-3 gathers: issue 0.050, blocked 0.020 |" \
           "step 0.800 (optimizer 0.300, parameter all-gather 0.000) (dry run)"
      echo "[info] step 10: concurrent with compute, per step, from the streams' events:" \
           "reductions 0.900 of 1.000 ms (90%) | stage-3 gathers 0.400 of 0.500 ms (80%) |" \
           "offload copies 0.000 of 0.000 ms (0%) | compute 3.600 ms (dry run)"
      echo "ok   stage $stage: 10 steps of 4 modules, gradient norm 1.25"
    done
    if fail_here; then echo "FAIL stage 3 step 4: the overlap was 0% (dry run)" >&2; exit 1; fi
    ;;

  zero-train)
    if fail_here; then echo "zero-train: CUDA error: an illegal memory access (dry run)" >&2; exit 1; fi
    exec python3 - "$@" <<'PY'
# zero-train's output and --metrics lines: the same losses on the CPU and the GPU but for a
# few parts in 10^4 on the GPU, falling as a small model's do on data/fortunes.txt.
import argparse, json, math, sys
sys.path.insert(0, "bench")
import torch_gpt  # the GPT sizes; it imports torch only to train
p = argparse.ArgumentParser()
for f in ["--device", "--config", "--model", "--data", "--micro-batch", "--seq", "--steps",
          "--seed", "--metrics", "--eval-batches", "--layers", "--heads", "--kv-heads",
          "--channels", "--intermediate", "--positions", "--vocab"]:
    p.add_argument(f)
p.add_argument("--set", action="append", default=[])
p.add_argument("--no-progress", action="store_true")
p.add_argument("--activation-checkpointing", action="store_true")
a = p.parse_args()
steps, gpu = int(a.steps or 10), a.device == "2"
batch, seq = int(a.micro_batch or 8), int(a.seq or 64)
step_time = 0.12 if gpu else 0.3
lines = []
for s in range(1, steps + 1):
    loss = 3.9 + 1.65 * math.exp(-(s - 1) / 6)
    if gpu:
        loss *= 1 + 3e-4 * math.sin(s)
    lines.append({"kind": "train", "step": s, "loss": loss, "lr": 1e-3, "loss_scale": 1.0,
                  "grad_norm": 2.0, "skipped": False, "tokens_per_s": batch * seq / step_time,
                  "step_time_s": step_time, "forward_s": step_time / 3,
                  "backward_s": step_time / 2, "engine_step_s": step_time / 6,
                  "tokens": s * batch * seq})
    print(f"step {s:2d}/{steps} | loss {loss:.4f} | dry run")
eval_loss = 3.85 * (1 + (2e-4 if gpu else 0))
parameters = 830000
if a.model in torch_gpt.SIZES:  # what bench/gpu.sh checks the summary against
    layers, _, channels, positions, vocab = torch_gpt.SIZES[a.model]
    parameters = torch_gpt.parameter_count(layers, channels, positions, vocab)
lines.append({"kind": "eval", "step": steps, "eval_loss": eval_loss})
device = [2.0 ** 30] * 5 + [0.0] * 15
lines.append({"kind": "summary", "steps": steps, "tokens": steps * batch * seq,
              "tokens_per_s": batch * seq / step_time, "mfu": 0.35 if gpu else None,
              "device": "NVIDIA H200 (dry run)" if gpu else "cpu", "final_loss": lines[-2]["loss"],
              "eval_loss": eval_loss, "model": a.model, "parameters": parameters,
              "memory_peak_bytes": device,
              "memory_reserved_bytes": {"device": 2 ** 31, "pinned": 0, "host": 0, "nvme": 0}})
if a.metrics:
    with open(a.metrics, "w") as f:
        f.writelines(json.dumps(l) + "\n" for l in lines)
print(f"done: {steps} steps in 1s ({steps * batch * seq} tokens), {batch * seq / step_time:.0f} "
      f"tokens/s (mean after the first step), final loss {lines[-3]['loss']:.4f} (dry run)")
PY
    ;;

  python3-torch)  # the machine's python3 with PyTorch: -c (env's versions) or a bench script
    if fail_here; then echo "torch_gpt.py: CUDA out of memory (dry run)" >&2; exit 1; fi
    if [[ ${1:-} == -c ]]; then
      echo "3.12.3 torch 2.11.0+cu130 (dry run) cuda 13.0"
      exit 0
    fi
    exec python3 - "$@" <<'PY'
import json, sys
sys.path.insert(0, "bench")
script, args = sys.argv[1], sys.argv[2:]
get = lambda name, default: args[args.index(name) + 1] if name in args else default
batch, seq = int(get("--micro-batch", 4)), int(get("--seq", 1024))
if script.endswith("torch_gpt.py"):
    import torch_gpt  # SIZES and the counts; it imports torch only to train
    model = get("--model", "gpt2-124m")
    layers, _, channels, positions, vocab = torch_gpt.SIZES[model]
    step = {"plain": 0.15, "fsdp2": 0.2, "fsdp2-offload": 1.5,
            "deepspeed": 0.3 if get("--deepspeed-config", "").endswith("stage3.json") else 2.0
            }[get("--mode", "plain")]
    print(json.dumps({"model": model, "mode": get("--mode", "plain"), "dry_run": True,
                      "params": torch_gpt.parameter_count(layers, channels, positions, vocab),
                      "tokens_per_s": batch * seq / step, "step_time_s": step, "mfu": 0.3,
                      "peak_mem_bytes": 30 * 2 ** 30, "losses": [11.0, 9.0, 7.5]}))
elif script.endswith("gpt_vs_torch.py"):
    steps = int(get("--steps", 20))
    print(f"# zero-train against PyTorch from the same weights (dry run), {steps} steps")
    for s in range(1, steps + 1):
        print(f"{s:>4} {11 - s * 0.2:>10.5f} {11 - s * 0.2:>10.5f} {0.0:>10.2e}")
    print(f"agree: every step within {get('--tol', '0.02')} (largest 0.00e+00); dry run")
elif script.endswith("make_tiny_models.py"):
    import os
    for name in ("gpt2", "llama"):
        os.makedirs(f"{args[0]}/{name}", exist_ok=True)
elif script.endswith("train_parity.py"):
    for stage in range(4):
        print(f"rank 0/1: {args[0]} stage {stage}: 8 steps ok (dry run)")
elif script.endswith("frontend.py"):
    framework, offload = get("--framework", "zero"), get("--offload", "none")
    step = (0.3 if offload == "cpu" else 0.06) * (0.9 if framework == "zero" else 1.0)
    tokens = int(get("--micro", 4)) * int(get("--seq", 256))
    print(json.dumps({"framework": framework, "stage": int(get("--stage", 0)),
                      "offload": offload, "ranks": 1, "device": get("--device", "cpu"),
                      "dtype": get("--dtype", "fp32"), "loss": 10.9, "dry_run": True,
                      "tokens_per_s": round(tokens / step), "seconds_per_step": step}))
else:  # torch_lm.py
    print(json.dumps({"impl": "pytorch-eager", "dry_run": True, "tokens_per_s": 40000.0,
                      "step_time_s": batch * seq / 40000.0}))
PY
    ;;

  zero-bench)
    if fail_here; then echo "zero-bench: failed (dry run)" >&2; exit 1; fi
    json=$(flag --json "$@")
    [[ -n $json ]] && echo "{\"bench\":\"$1\",\"dry_run\":true}" >>"$json"
    echo "zero-bench $1: dry run, no figures"
    ;;

  zero-mem)
    if fail_here; then echo "zero-mem: failed (dry run)" >&2; exit 1; fi
    cat <<'JSON'
{"model": {"params": 13015864320}, "recommended": 0, "rows": [{"keys": {"zero_optimization.sub_group_size": 100000000}, "arenas": [{"tier": "device", "capacity": 30000000000}, {"tier": "host", "capacity": 60000000000}, {"tier": "nvme", "capacity": 150000000000}], "scratch": {"device": 1000000000, "host": 1000000000}, "step_lower_bound": {"seconds": 40.0, "bound_by": "nvme reads (dry run)"}}]}
JSON
    ;;

  *)
    echo "gpu-check-standin: no stand-in for '$name'" >&2
    exit 127
    ;;
esac
