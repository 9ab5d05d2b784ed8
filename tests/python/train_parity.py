"""A Hugging Face model trained through zero.initialize against plain PyTorch, step by step.

Run on every rank (zero-run -n N -- python train_parity.py MODEL_DIR ...). For each config in
turn (--stages, each with and without CPU optimizer offload unless --offload says), zero
trains the model from MODEL_DIR on this rank's micro-batches while a plain PyTorch copy (AdamW,
clip_grad_norm_, the same WarmupLR written out here, the same data) trains on every rank's
micro-batches at once. After every optimizer step: each micro-batch's loss within 1e-6
relative, the gradient norm within 1e-5 relative, the learning rate exact.

--save DIR --save-after K: saves a checkpoint after optimizer step K and writes the losses of
the steps after it to DIR/losses.rank<R>.json. --resume DIR: loads DIR's checkpoint (saved at another
world size) and checks that the following steps give those same losses.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import zero
from transformers import AutoModelForCausalLM

MICRO = 2
SEQ = 24
GLOBAL_MICROS = 4  # micro-batches per optimizer step across all ranks
LR_MIN, LR_MAX, WARMUP = 1e-4, 2e-3, 3


def expected_lr(step):
    """The learning rate of optimizer step `step` (from 1) under DeepSpeed's linear WarmupLR:
    its construction writes warmup_min_lr; step k then runs at iteration k - 2."""
    if step == 1:
        return LR_MIN
    t = step - 2
    gamma = t / WARMUP if t < WARMUP else 1.0
    return LR_MIN + (LR_MAX - LR_MIN) * gamma


def batch(vocab, step, micro):
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randint(1, vocab, (MICRO, SEQ), generator=g)


def ds_config(stage, offload, gas, dtype):
    config = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": 0.5,
        "optimizer": {"type": "AdamW", "params": {"lr": LR_MAX, "betas": [0.9, 0.95],
                                                   "eps": 1e-8, "weight_decay": 0.1}},
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": LR_MIN,
                                                      "warmup_max_lr": LR_MAX,
                                                      "warmup_num_steps": WARMUP,
                                                      "warmup_type": "linear"}},
        # Every parameter gathered and released around its hooks (none kept resident for
        # being small), so that stage 3's gathers come back at other addresses.
        "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
    }
    if offload:
        config["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if dtype == "bf16":
        config["bf16"] = {"enabled": True}
    if dtype == "fp16":
        config["fp16"] = {"enabled": True, "initial_scale_power": 8}
    return config


def groups(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def run(args, stage, offload):
    what = f"{args.model_dir} stage {stage}{' cpu offload' if offload else ''}"
    device = torch.device(args.device)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).to(device)
    reference = AutoModelForCausalLM.from_pretrained(args.model_dir,
                                                     dtype=torch.float32).to(device)
    vocab = model.config.vocab_size
    if args.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    engine, optimizer, _, scheduler = zero.initialize(
        model=model, model_parameters=groups(model),
        config=ds_config(stage, offload, GLOBAL_MICROS // world(), args.dtype))
    gas = engine.gradient_accumulation_steps()
    rank, size = engine.global_rank, engine.world_size
    assert engine.zero_optimization_stage() == stage
    torch_opt = torch.optim.AdamW(groups(reference), lr=LR_MAX, betas=(0.9, 0.95), eps=1e-8)
    first = 1
    if args.resume:
        path, client = engine.load_checkpoint(args.resume)
        first = client["step"] + 1
        assert engine.global_steps == client["step"], (engine.global_steps, client)
        expected = {}
        for name in Path(args.resume).glob("losses.rank*.json"):
            expected.update(json.loads(name.read_text()))
    failures = []
    # DeepSpeed's get_lr() is the next optimizer step's: the schedule's first value before any
    # step, the resumed schedule's after a load.
    if engine.get_lr()[0] != expected_lr(first):
        failures.append(f"before step {first}: lr {engine.get_lr()[0]!r}, expected "
                        f"{expected_lr(first)!r}")
    saved = {}
    for step in range(first, first + args.steps):
        # plain PyTorch on every rank's micro-batches
        ref_losses = []
        for j in range(GLOBAL_MICROS):
            ids = batch(vocab, step, j).to(device)
            loss = reference(ids, labels=ids).loss
            (loss / GLOBAL_MICROS).backward()
            ref_losses.append(loss.item())
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.5).item()
        for group in torch_opt.param_groups:
            group["lr"] = expected_lr(step)
        if not args.resume:
            torch_opt.step()
        torch_opt.zero_grad()
        # zero on this rank's
        for m in range(gas):
            j = rank * gas + m
            assert engine.is_gradient_accumulation_boundary() == (m == gas - 1)
            ids = batch(vocab, step, j).to(device)
            loss = engine(ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            value = loss.item()
            saved[f"{step}/{j}"] = value
            want = expected[f"{step}/{j}"] if args.resume else ref_losses[j]
            if not close(value, want, args.loss_tol):
                failures.append(f"step {step} micro {j}: loss {value!r}, expected {want!r}")
        lr = engine.get_lr()[0]
        norm = engine.get_global_grad_norm()
        if lr != expected_lr(step + 1):  # the scheduler has stepped: the next step's
            failures.append(f"after step {step}: lr {lr!r}, expected {expected_lr(step + 1)!r}")
        if optimizer.param_groups[0]["lr"] != lr or scheduler.get_last_lr()[0] != lr:
            failures.append(f"step {step}: the optimizer's and scheduler's lr differ from {lr}")
        if not args.resume and not close(norm, ref_norm, args.norm_tol):
            failures.append(f"step {step}: grad norm {norm!r}, PyTorch {ref_norm!r}")
        if args.save and step == args.save_after:
            engine.save_checkpoint(args.save, client_state={"step": step})
            saved = {}
    if args.save:
        Path(f"{args.save}/losses.rank{rank}.json").write_text(json.dumps(saved))
    # An evaluation pass (engine.eval(), no grad) gives PyTorch's loss on the trained weights.
    if not args.resume:
        engine.eval()
        reference.eval()
        ids = batch(vocab, 0, 99).to(device)
        with torch.no_grad():
            value = engine(ids, labels=ids).loss.item()
            want = reference(ids, labels=ids).loss.item()
        if not close(value, want, args.loss_tol * 10):
            failures.append(f"evaluation loss {value!r}, PyTorch {want!r}")
        engine.train()
    state = engine.consolidated_state_dict()
    if not args.resume:
        for name, p in reference.named_parameters():
            if not torch.allclose(state[name], p.detach().cpu(), rtol=args.weight_tol,
                                  atol=args.weight_atol):
                diff = (state[name] - p.detach().cpu()).abs().max().item()
                failures.append(f"final {name} differs from PyTorch's by {diff}")
                break
    engine.destroy()
    status = "FAILED" if failures else "ok"
    print(f"rank {rank}/{size}: {what}: {args.steps} steps {status}", flush=True)
    for failure in failures[:10]:
        print(f"  rank {rank}: {what}: {failure}", flush=True)
    return not failures


def world():
    return zero.distributed.launcher_ranks()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--stages", default="0,1,2,3")
    parser.add_argument("--offload", choices=["both", "none", "cpu"], default="both")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--save")
    parser.add_argument("--save-after", type=int, default=2)
    parser.add_argument("--resume")
    parser.add_argument("--loss-tol", type=float, default=1e-6)
    parser.add_argument("--norm-tol", type=float, default=1e-5)
    parser.add_argument("--weight-tol", type=float, default=1e-4)
    parser.add_argument("--weight-atol", type=float, default=1e-6)
    parser.add_argument("--init-distributed", action="store_true",
                        help="also set up torch.distributed through zero.init_distributed and "
                        "check an all_reduce over it")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda: the [gpu] run, with "
                        "torch's current stream passed to zero's hooks")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("skipped: no CUDA GPU (torch.cuda.is_available() is false)")
        sys.exit(77)
    torch.set_num_threads(1)
    if args.init_distributed:
        import torch.distributed as dist
        zero.init_distributed(dist_backend="gloo", distributed_port=29617)
        total = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(total)
        size = dist.get_world_size()
        assert size == world() and total.item() == size * (size + 1) / 2, (size, total)
    ok = True
    for stage in [int(s) for s in args.stages.split(",")]:
        for offload in {"both": [False, True], "none": [False], "cpu": [True]}[args.offload]:
            if offload and stage == 0:
                continue
            ok = run(args, stage, offload) and ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
