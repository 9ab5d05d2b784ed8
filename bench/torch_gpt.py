#!/usr/bin/env python3
# bench/torch_gpt.py: PyTorch training zero-train's GPT (models/gpt/), for the GPU comparison.
#
#   python3 bench/torch_gpt.py --model gpt2-124m --mode plain --device cuda --dtype bf16 \
#       --micro-batch 8 --seq 1024 --steps 10 --warmup-steps 3 --json
#   python3 bench/torch_gpt.py --model gpt2-1.5b --mode fsdp2-offload ...      (one GPU, no torchrun)
#   torchrun --nproc_per_node 8 bench/torch_gpt.py --model gpt2-1.5b --mode fsdp2 ...
#   python3 bench/torch_gpt.py --model gpt2-350m --seq 1024 --describe   (sizes, FLOPs, peak; no run)
#   python3 bench/torch_gpt.py --model tiny --mode plain --device cpu --steps 3 --json  (smoke test)
#
# The model is the one models/gpt/model.cpp defines, written here in plain PyTorch: token and
# position embeddings, pre-LayerNorm blocks (causal multi-head attention through
# scaled_dot_product_attention(is_causal=True), GELU with the tanh approximation, LayerNorm eps
# 1e-5, biases everywhere), a final LayerNorm, the output projection tied to the token embedding,
# cross-entropy computed in fp32. Parameters carry zero-train's (Hugging Face GPT-2's) names and
# shapes (h.3.attn.c_attn.weight is [3C, C]); the count is checked against GptConfig::parameters()
# (printed; it must equal what zero-train reports). Initial values as GPT-2 / ours draw them:
# normal std 0.02, wpe 0.01, the residual projections 0.02 / sqrt(2 layers), LayerNorm 1 and 0,
# biases 0 (the same distributions, not the same numbers: ours come from a counter hash).
# AdamW over two groups as zero-train registers them: weights and embeddings with --weight-decay,
# biases and LayerNorm parameters without; gradient clipping at --clip (0: off).
#
# Modes:
#   plain          one process, the model on the device; bf16 through torch.autocast
#   fsdp2          torch.distributed.fsdp.fully_shard on every block and on the root; bf16 through
#                  MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); the world from
#                  torchrun, or this one process with an env:// rendezvous on 127.0.0.1
#   fsdp2-offload  as fsdp2 with CPUOffloadPolicy(pin_memory=True): sharded parameters, gradients
#                  and the optimizer (so AdamW itself) on the CPU
#   deepspeed      deepspeed.initialize with --deepspeed-config FILE, the config zero-train runs
#                  (its micro-batch set to --micro-batch, bf16 to --dtype): ZeRO's stage, offload,
#                  clipping and AdamW as DeepSpeed does them (FusedAdam, or DeepSpeedCPUAdam with
#                  offload_optimizer, each built by its JIT on first use); the same weight-decay
#                  groups; the world from a launcher, or this one process on 127.0.0.1
# (On the CPU device the process group is gloo; a torch whose FSDP2 refuses the CPU or gloo makes
# this script stop with that error and exit 2, not run something else.)
#
# Data: random tokens, uniform over the vocabulary, fixed --seed; or --data FILE: an llm.c token
# shard (magic 20240520 uint16 / 20240801 uint32) or any file as bytes, split and batched as
# zero-train does it (the last 5% held out; step s, rank r takes sequences (s * world + r) * B
# onwards of T + 1 tokens at k * T), so at one rank both trainers see the same sequences.
#
# Timing: --warmup-steps steps first (allocation, autotuning, --compile), untimed; then --steps
# steps, each between two device synchronisations. step_time_s is their mean and tokens_per_s =
# tokens per step / step_time_s (tokens per step: micro-batch x seq x world size).
#
# FLOPs (PaLM's accounting, appendix B): per trained token 6 N + 12 L C T, where N is the
# parameter count without the position embedding (a lookup; the tied token embedding counts once,
# as the output projection's matrix product), L layers, C channels, T the sequence length (the
# attention scores and their weighted sum, forward and backward, not halved for the causal
# mask). MFU = tokens_per_s x that / (world size x peak), the peak being the GPU's dense bf16
# rate whatever --dtype is: H100 SXM 989, H100 PCIe 756, H100 NVL 835, H200 989, A100 312 TFLOP/s
# (--peak-tflops overrides; unknown GPUs and the CPU report mfu null).
#
# Weights: --save-init DIR writes the initial weights as a Hugging Face GPT-2 directory (in --dtype)
# and stops;
# --init DIR starts from one (zero-train --init DIR too), so that the two trainers start from the
# same numbers (bench/gpt_vs_torch.py compares their losses step by step).
#
# Output: a line per phase and the result; with --json instead one JSON line (rank 0): model,
# params, mode, dtype, batch, seq, tokens_per_step, step_time_s, tokens_per_s, mfu,
# peak_mem_bytes (torch.cuda.max_memory_allocated; null on the CPU), device, every step's loss
# (losses, the warm-up's first), and the settings.
# Exit status: 0; 1 for a bad argument or a failed run; 2 when the mode cannot run here.
import argparse
import json
import math
import os
import platform
import resource
import sys
import time

# GptConfig::by_name: layers, heads, channels, positions, vocabulary.
SIZES = {
    "tiny": (4, 4, 128, 64, 256),
    "gpt2-124m": (12, 12, 768, 1024, 50257),
    "gpt2-350m": (24, 16, 1024, 1024, 50257),
    "gpt2-774m": (36, 20, 1280, 1024, 50257),
    "gpt2-1.5b": (48, 25, 1600, 1024, 50257),
}

# Dense bf16 tensor-core peaks, TFLOP/s, by a piece of torch.cuda.get_device_name(), first match.
PEAK_BF16_TFLOPS = [
    ("H200", 989.0),  # also GH200
    ("H100 PCIE", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM ("NVIDIA H100 80GB HBM3")
    ("A100", 312.0),
]


def parameter_count(layers, channels, positions, vocab):
    """GptConfig::parameters(): the tied embedding counted once."""
    c = channels
    block = 12 * c * c + 13 * c  # ln_1, c_attn, attn.c_proj, ln_2, c_fc, mlp.c_proj
    return vocab * c + positions * c + layers * block + 2 * c


def flops_per_token(layers, channels, positions, vocab, seq):
    """6 N + 12 L C T, N without the position embedding (see the top of the file)."""
    n = parameter_count(layers, channels, positions, vocab) - positions * channels
    return 6.0 * n + 12.0 * layers * channels * seq


def peak_tflops_for(name):
    upper = name.upper()
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in upper:
            return tflops
    return None


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # exit status 1, not argparse's 2 (2 means: the mode cannot run)
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def parse_args(argv):
    p = ArgumentParser(
        description="Train zero-train's GPT-2 in PyTorch (plain, FSDP2, FSDP2 with CPU offload) "
        "and report tokens/s, MFU and peak memory. See the comments at the top of the file.")
    p.add_argument("--model", default="tiny", choices=sorted(SIZES),
                   help="named size (GptConfig::by_name); --layers ... --vocab override parts")
    for flag in ("layers", "heads", "channels", "positions", "vocab"):
        p.add_argument("--" + flag, type=int, help="custom: " + flag)
    p.add_argument("--mode", default="plain",
                   choices=["plain", "fsdp2", "fsdp2-offload", "deepspeed"])
    p.add_argument("--deepspeed-config", metavar="FILE",
                   help="--mode deepspeed: the DeepSpeed config (zero-train's own file; its "
                   "micro-batch becomes --micro-batch)")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--device", default=None, choices=["cuda", "cpu"],
                   help="default: cuda when there is one")
    p.add_argument("--micro-batch", type=int, default=4, help="sequences per rank per step")
    p.add_argument("--seq", type=int, help="positions per sequence (default: the model's)")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=3, help="untimed steps before them")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.95))
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="gradient clipping norm (0: none)")
    p.add_argument("--adam-impl", default="auto", choices=["auto", "fused", "foreach", "loop"],
                   help="torch.optim.AdamW's implementation (auto: fused, else foreach when the "
                   "first step refuses fused)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the model (plain) or every block (FSDP2)")
    p.add_argument("--data", help="token shard or any file as bytes (default: random tokens)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--peak-tflops", type=float, help="the device's peak for MFU (TFLOP/s)")
    p.add_argument("--init", metavar="DIR",
                   help="start from a Hugging Face GPT-2 directory's weights (config.json's "
                   "shape must be the model's; zero-train --init DIR starts from the same)")
    p.add_argument("--save-init", metavar="DIR",
                   help="write the initial weights as a Hugging Face GPT-2 directory "
                   "(config.json, model.safetensors) and train nothing")
    p.add_argument("--json", action="store_true", help="one JSON line as the only output")
    p.add_argument("--describe", action="store_true",
                   help="print the sizes, parameters, FLOPs per token and the device's peak as "
                   "JSON, and train nothing (bench/gpu.sh uses it for zero-train's MFU)")
    a = p.parse_args(argv)
    layers, heads, channels, positions, vocab = SIZES[a.model]
    a.layers = a.layers if a.layers is not None else layers
    a.heads = a.heads if a.heads is not None else heads
    a.channels = a.channels if a.channels is not None else channels
    a.positions = a.positions if a.positions is not None else positions
    a.vocab = a.vocab if a.vocab is not None else vocab
    a.seq = a.seq if a.seq is not None else a.positions
    problems = []
    if min(a.layers, a.heads, a.channels, a.positions, a.vocab) < 1:
        problems.append("--layers, --heads, --channels, --positions and --vocab must be at least 1")
    elif a.channels % a.heads:
        problems.append(f"channels {a.channels} do not split over {a.heads} heads")
    if not 1 <= a.seq <= a.positions:
        problems.append(f"--seq {a.seq} is outside the model's 1..{a.positions} positions")
    if (a.mode == "deepspeed") != (a.deepspeed_config is not None):
        problems.append("--mode deepspeed and --deepspeed-config go together")
    if a.micro_batch < 1 or a.steps < 1 or a.warmup_steps < 0:
        problems.append("--micro-batch and --steps must be at least 1, --warmup-steps at least 0")
    if problems:
        p.error("; ".join(problems))
    return a


class Unsupported(Exception):
    """The mode cannot run with this torch on this device (exit status 2)."""


def main(argv):
    a = parse_args(argv)
    out = (lambda *_: None) if a.json else (lambda *s: print(*s, flush=True))
    expected = parameter_count(a.layers, a.channels, a.positions, a.vocab)
    fpt = flops_per_token(a.layers, a.channels, a.positions, a.vocab, a.seq)

    if a.describe:
        device_name, peak = None, a.peak_tflops
        try:
            import torch
            if torch.cuda.is_available() and a.device != "cpu":
                device_name = torch.cuda.get_device_name(0)
                peak = peak if peak is not None else peak_tflops_for(device_name)
        except ImportError:
            pass
        print(json.dumps({"model": a.model, "layers": a.layers, "heads": a.heads,
                          "channels": a.channels, "positions": a.positions, "vocab": a.vocab,
                          "params": expected, "seq": a.seq, "flops_per_token": fpt,
                          "device": device_name, "peak_tflops": peak}))
        return 0

    try:
        import torch
    except ImportError:
        print("torch_gpt.py: PyTorch is not installed for " + sys.executable, file=sys.stderr)
        return 1
    import torch.nn as nn
    import torch.nn.functional as F

    class Attention(nn.Module):
        def __init__(self, channels, heads):
            super().__init__()
            self.heads = heads
            self.c_attn = nn.Linear(channels, 3 * channels)  # rows: q, k, v; head h at h * C/H
            self.c_proj = nn.Linear(channels, channels)

        def forward(self, x):
            b, t, c = x.shape
            qkv = self.c_attn(x).view(b, t, 3, self.heads, c // self.heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [b, heads, t, head size]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Mlp(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.c_fc = nn.Linear(channels, 4 * channels)
            self.c_proj = nn.Linear(4 * channels, channels)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self, channels, heads):
            super().__init__()
            self.ln_1 = nn.LayerNorm(channels, eps=1e-5)
            self.attn = Attention(channels, heads)
            self.ln_2 = nn.LayerNorm(channels, eps=1e-5)
            self.mlp = Mlp(channels)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class Gpt(nn.Module):
        def __init__(self, layers, heads, channels, positions, vocab):
            super().__init__()
            self.wte = nn.Embedding(vocab, channels)
            self.wpe = nn.Embedding(positions, channels)
            self.h = nn.ModuleList(Block(channels, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(channels, eps=1e-5)

        def forward(self, tokens, targets):
            t = tokens.shape[1]
            x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the head, tied to wte
            return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

        @torch.no_grad()
        def initialize(self, layers, generator):
            residual = 0.02 / math.sqrt(2.0 * layers)
            for name, p in self.named_parameters():
                if name.endswith("c_proj.weight"):  # attn.c_proj and mlp.c_proj
                    p.normal_(0.0, residual, generator=generator)
                elif name == "wpe.weight":
                    p.normal_(0.0, 0.01, generator=generator)
                elif p.dim() == 2:  # wte, c_attn, c_fc
                    p.normal_(0.0, 0.02, generator=generator)
                elif "ln_" in name and name.endswith(".weight"):
                    p.fill_(1.0)
                else:  # biases
                    p.zero_()

    # --- device and process group ---------------------------------------------------------------
    device_type = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        print("torch_gpt.py: --device cuda but torch sees no GPU "
              f"(torch {torch.__version__}, CUDA {torch.version.cuda})", file=sys.stderr)
        return 1
    distributed = a.mode != "plain"
    rank, world, local_rank = 0, 1, 0
    if a.mode == "deepspeed":
        try:
            import deepspeed
        except ImportError:
            raise Unsupported(f"{sys.executable} has no deepspeed (pip install deepspeed)")
        if "RANK" not in os.environ:  # not under a launcher: one process
            os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if rank != 0:
            out = lambda *_: None  # noqa: E731
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        deepspeed.init_distributed(dist_backend="nccl" if device_type == "cuda" else "gloo")
    elif distributed:
        import torch.distributed as dist
        try:
            from torch.distributed.fsdp import (CPUOffloadPolicy, MixedPrecisionPolicy,
                                                fully_shard)
        except ImportError:
            try:  # torch 2.4 and 2.5
                from torch.distributed._composable.fsdp import (CPUOffloadPolicy,
                                                                MixedPrecisionPolicy, fully_shard)
            except ImportError:
                raise Unsupported(f"torch {torch.__version__} has no FSDP2 (fully_shard): "
                                  "torch 2.4 or later is needed")
        from torch.distributed.device_mesh import init_device_mesh
        if "RANK" not in os.environ:  # not under torchrun: one process
            os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if rank != 0:
            out = lambda *_: None  # noqa: E731
        if device_type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", init_method="env://")
    device = torch.device(device_type, local_rank) if device_type == "cuda" else torch.device("cpu")
    if device_type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                device_name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
        except (OSError, StopIteration):
            pass
    peak = a.peak_tflops
    if peak is None and device_type == "cuda":
        peak = peak_tflops_for(device_name)

    # --- the model --------------------------------------------------------------------------------
    torch.manual_seed(a.seed)
    generator = torch.Generator().manual_seed(a.seed)
    model = Gpt(a.layers, a.heads, a.channels, a.positions, a.vocab)
    model.initialize(a.layers, generator)
    params = sum(p.numel() for p in model.parameters())  # unique tensors: wte once
    if params != expected:
        print(f"torch_gpt.py: the model has {params} parameters, GptConfig::parameters() says "
              f"{expected}: the architectures differ", file=sys.stderr)
        return 1
    if a.save_init:
        save_hf(model, a, a.save_init)
        out(f"torch_gpt.py: wrote the initial weights to {a.save_init}")
        return 0
    if a.init:
        problem = load_hf(model, a, a.init, torch)
        if problem:
            print(f"torch_gpt.py: --init {a.init}: {problem}", file=sys.stderr)
            return 1
    out(f"torch_gpt.py: {a.model} ({params / 1e6:.2f}M parameters, as zero-train counts them: "
        f"{a.layers} layers, {a.heads} heads, {a.channels} channels, {a.positions} positions, "
        f"vocabulary {a.vocab}); {a.mode}, {a.dtype}, {world} rank(s) on {device_name}; "
        f"torch {torch.__version__}")
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]

    bf16 = a.dtype == "bf16"
    engine = None
    if a.mode == "deepspeed":
        with open(a.deepspeed_config) as f:
            ds_config = json.load(f)
        ds_config.update({"train_micro_batch_size_per_gpu": a.micro_batch,
                          "gradient_accumulation_steps": 1,
                          "train_batch_size": a.micro_batch * world})
        ds_config.setdefault("bf16", {})["enabled"] = bf16
        groups = [{"params": decay, "weight_decay": a.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        try:
            engine, _, _, _ = deepspeed.initialize(model=model.to(device), model_parameters=groups,
                                                   config=ds_config)
        except Exception as e:  # noqa: BLE001: a JIT build that fails says so here
            raise Unsupported(f"deepspeed.initialize: {type(e).__name__}: {e}")
        model = engine
        autocast = torch.autocast(device_type, enabled=False)
    elif a.mode == "plain":
        model.to(device)
        if a.compile:
            model = torch.compile(model)
        autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16)
    else:
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None,
                                  reduce_dtype=torch.float32 if bf16 else None)
        kwargs = {"mesh": init_device_mesh(device_type, (world,)), "mp_policy": mp}
        if a.mode == "fsdp2-offload":
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=device_type == "cuda")
        try:
            for block in model.h:
                fully_shard(block, **kwargs)
            fully_shard(model, **kwargs)
        except Exception as e:  # noqa: BLE001: whatever this torch says, as it says it
            raise Unsupported(f"fully_shard ({a.mode}) on {device_type}: {type(e).__name__}: {e}")
        if a.compile:
            for block in model.h:
                block.compile()
        autocast = torch.autocast(device_type, enabled=False)
        # fully_shard replaced the parameters by sharded DTensors: the groups take the new ones.
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]

    def make_optimizer(impl):
        kwargs = {"fused": True} if impl == "fused" else {"foreach": impl == "foreach"}
        groups = [{"params": decay, "weight_decay": a.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=a.lr, betas=tuple(a.betas), eps=a.eps, **kwargs)

    adam_impl = "fused" if a.adam_impl == "auto" else a.adam_impl
    optimizer = make_optimizer(adam_impl) if engine is None else None
    if engine is not None:
        adam_impl = f"deepspeed: {type(engine.optimizer).__name__}"

    # --- data -------------------------------------------------------------------------------------
    total_steps = a.warmup_steps + a.steps
    b, t = a.micro_batch, a.seq
    if a.data:
        stream = read_tokens(a.data, torch)
        held = int(len(stream) * 0.05)
        if held < t + 1 and len(stream) >= 2 * (t + 1):
            held = t + 1
        stream = stream[:len(stream) - held]
        if len(stream) < t + 1:
            print(f"torch_gpt.py: {a.data} holds {len(stream)} training tokens, fewer than one "
                  f"sequence of {t} and its next token", file=sys.stderr)
            return 1
        if int(stream.max()) >= a.vocab:
            print(f"torch_gpt.py: {a.data} has token {int(stream.max())}, outside the vocabulary "
                  f"of {a.vocab}", file=sys.stderr)
            return 1
        sequences = (len(stream) - 1) // t
        windows = torch.arange(t + 1)
        batches = []
        for step in range(total_steps):
            first = (step * world + rank) * b
            starts = ((first + torch.arange(b)) % sequences) * t
            batches.append(stream[starts[:, None] + windows[None, :]])
        data = torch.stack(batches)
        data_name = a.data
    else:
        g = torch.Generator().manual_seed(a.seed * 1000003 + rank)
        data = torch.randint(0, a.vocab, (total_steps, b, t + 1), generator=g)
        data_name = "random"
    data = data.to(device)

    # --- the loop ---------------------------------------------------------------------------------
    def synchronize():
        if device_type == "cuda":
            torch.cuda.synchronize(device)

    def train_step(step):
        tokens, targets = data[step, :, :-1], data[step, :, 1:]
        if engine is not None:  # DeepSpeed: bf16, clipping and the optimizer from its config
            loss = engine(tokens, targets)
            engine.backward(loss)
            engine.step()
            return loss.detach()
        with autocast:
            loss = model(tokens, targets)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    if device_type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for step in range(total_steps):
        synchronize()
        began = time.perf_counter()
        try:
            loss = train_step(step)
        except Exception as e:  # noqa: BLE001
            if step != 0 or a.adam_impl != "auto" or adam_impl != "fused" or engine is not None:
                raise
            # Perhaps this torch has no fused AdamW for these tensors (DTensor, CPU): foreach
            # instead, once; a failure that is not the optimizer's comes back from the retry.
            out(f"fused AdamW refused ({type(e).__name__}: {str(e).splitlines()[0]}); using foreach")
            adam_impl = "foreach"
            optimizer.zero_grad(set_to_none=True)
            optimizer = make_optimizer(adam_impl)
            loss = train_step(step)
        synchronize()
        elapsed = time.perf_counter() - began
        losses.append(float(loss))
        if step >= a.warmup_steps:
            times.append(elapsed)
        out(f"step {step + 1:>{len(str(total_steps))}}/{total_steps}"
            f"{' (warm-up)' if step < a.warmup_steps else ''} | loss {losses[-1]:.4f} | "
            f"{b * t * world / elapsed:.0f} tokens/s | {1e3 * elapsed:.1f} ms")

    step_time = sum(times) / len(times)
    tokens_per_step = b * t * world
    tokens_per_s = tokens_per_step / step_time
    achieved_tflops = tokens_per_s * fpt / world / 1e12  # per device
    mfu = achieved_tflops / peak if peak else None
    peak_mem = torch.cuda.max_memory_allocated(device) if device_type == "cuda" else None
    peak_reserved = torch.cuda.max_memory_reserved(device) if device_type == "cuda" else None
    result = {
        "model": a.model, "params": params, "mode": a.mode, "dtype": a.dtype,
        "batch": b, "seq": t, "world_size": world, "tokens_per_step": tokens_per_step,
        "step_time_s": step_time, "tokens_per_s": tokens_per_s,
        "flops_per_token": fpt, "tflops_per_device": achieved_tflops, "peak_tflops": peak,
        "mfu": mfu, "peak_mem_bytes": peak_mem, "peak_reserved_bytes": peak_reserved,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device": device_name, "device_type": device_type, "steps": a.steps,
        "warmup_steps": a.warmup_steps, "first_loss": losses[0], "final_loss": losses[-1],
        "losses": losses, "init": a.init,
        "layers": a.layers, "heads": a.heads, "channels": a.channels, "positions": a.positions,
        "vocab": a.vocab, "lr": a.lr, "clip": a.clip, "adam_impl": adam_impl,
        "compile": a.compile, "data": data_name, "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if rank == 0:
        if a.json:
            print(json.dumps(result), flush=True)
        else:
            out(f"done: {a.steps} timed steps after {a.warmup_steps} warm-up: "
                f"{tokens_per_s:.0f} tokens/s, {1e3 * step_time:.1f} ms per step of "
                f"{tokens_per_step} tokens, {achieved_tflops:.1f} TFLOP/s per device"
                + (f", MFU {100 * mfu:.1f}% of {peak:g}" if mfu is not None else "")
                + (f", peak memory {peak_mem / 2**30:.2f} GiB allocated "
                   f"({peak_reserved / 2**30:.2f} GiB reserved)" if peak_mem is not None else ""))
    if distributed:
        torch.distributed.destroy_process_group()
    return 0


# Hugging Face GPT-2's Conv1D layers store their weights [in, out]; ours are [out, in].
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_config(a):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": a.vocab,
            "n_positions": a.positions, "n_embd": a.channels, "n_layer": a.layers,
            "n_head": a.heads, "n_inner": None, "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
            "attn_pdrop": 0.0, "tie_word_embeddings": True,
            "torch_dtype": "bfloat16" if a.dtype == "bf16" else "float32"}


def save_hf(model, a, path):
    """The model's weights as a Hugging Face GPT-2 directory (names as GPT2Model's, Conv1D
    weights transposed, the head tied to wte and not stored), in --dtype."""
    import torch
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    tensors = {}
    for name, p in model.named_parameters():
        value = p.detach()
        value = value.t() if name.endswith(CONV1D) else value
        tensors[name] = value.contiguous().to(torch.bfloat16 if a.dtype == "bf16" else torch.float32)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config(a), f, indent=2)


def load_hf(model, a, path, torch):
    """Sets the model's weights from a Hugging Face GPT-2 directory; returns what is wrong, or
    None. Names with or without GPT2LMHeadModel's "transformer." prefix; the tied lm_head and the
    attention-mask buffers are skipped; every parameter must be there, in its shape."""
    from safetensors import safe_open
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    want = {"n_layer": a.layers, "n_head": a.heads, "n_embd": a.channels,
            "n_positions": a.positions, "vocab_size": a.vocab}
    for key, value in want.items():
        if config.get(key) != value:
            return f"config.json's {key} is {config.get(key)}, the model's {value}"
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    stored = {}
    for file in files:
        with safe_open(os.path.join(path, file), framework="pt") as f:
            for key in f.keys():
                name = key.removeprefix("transformer.")
                if name == "lm_head.weight" or name.endswith((".attn.bias", ".attn.masked_bias")):
                    continue
                stored[name] = f.get_tensor(key)
    params = dict(model.named_parameters())
    for name in params.keys() - stored.keys():
        return f"no tensor for {name}"
    for name in stored.keys() - params.keys():
        return f"{name} is not a parameter of the model"
    with torch.no_grad():
        for name, p in params.items():
            value = stored[name].t() if name.endswith(CONV1D) else stored[name]
            if tuple(value.shape) != tuple(p.shape):
                return f"{name} is {tuple(value.shape)} there, {tuple(p.shape)} in the model"
            p.copy_(value.to(p.dtype))
    return None


def read_tokens(path, torch):
    """An llm.c token shard (header of 256 int32), else the file's bytes: int64 tokens."""
    with open(path, "rb") as f:
        raw = f.read()
    header = torch.frombuffer(bytearray(raw[:1024]), dtype=torch.int32) if len(raw) >= 1024 else None
    if header is not None and int(header[0]) in (20240520, 20240801) and int(header[1]) == 1:
        count = int(header[2])
        dtype = torch.uint16 if int(header[0]) == 20240520 else torch.int32
        width = 2 if dtype == torch.uint16 else 4
        body = torch.frombuffer(bytearray(raw[1024:1024 + count * width]), dtype=dtype)
        return body.to(torch.int64)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Unsupported as e:
        print(f"torch_gpt.py: cannot run here: {e}", file=sys.stderr)
        sys.exit(2)
