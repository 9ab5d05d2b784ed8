#!/usr/bin/env python3
"""Makes the golden files the reference models are tested against: tiny seeded Hugging Face
models (a LlamaForCausalLM with grouped-query attention and Llama 3 rope scaling, a
Qwen2ForCausalLM with q/k/v biases and a tied head, a GPT2LMHeadModel), saved with
save_pretrained, and what transformers and torch compute with them in fp32:

  DIR/<model>/config.json, model.safetensors   the model as transformers saves it
  DIR/<model>/golden.safetensors               tokens [steps, B, T] and targets (int32, -1: no
      loss), loss0 (the first micro-batch's mean loss), grad.<name> (its gradient of every
      parameter, Hugging Face's names and layouts), lr [steps] and losses [steps] of ten AdamW
      steps (torch.optim.AdamW, weight decay 0.1 for matrices and none for norms and biases,
      gradient clipping at 1.0, DeepSpeed's WarmupDecayLR), final.<name> (the parameters after
      them), eval_tokens, eval_targets, eval_logits and eval_loss (the trained model's forward)

The C++ tests (tests/models/test_hf_parity.cpp) run the same through the engine and compare.
Needs torch, transformers and safetensors:

    python make_goldens.py [--out DIR]      write the goldens (default: beside this script)
    python make_goldens.py --check          make them again in a scratch directory and fail
                                            unless they match the committed ones
"""
import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, B, T = 10, 2, 12

# The engine's config for the same training (the C++ test reads it from golden.json).
ENGINE_CONFIG = {
    "train_micro_batch_size_per_gpu": B,
    "gradient_accumulation_steps": 1,
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 5e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR",
                  "params": {"warmup_min_lr": 1e-3, "warmup_max_lr": 5e-3, "warmup_num_steps": 4,
                             "total_num_steps": STEPS, "warmup_type": "linear"}},
    "gradient_clipping": 1.0,
}


def deepspeed_lr(t):
    """WarmupDecayLR (linear warmup) at scheduler iteration t; t = -1 before the first step."""
    p = ENGINE_CONFIG["scheduler"]["params"]
    lo, hi, w, total = p["warmup_min_lr"], p["warmup_max_lr"], max(2, p["warmup_num_steps"]), p["total_num_steps"]
    if t < 0:
        return lo
    gamma = t / w if t < w else max(0.0, (total - t) / max(1.0, total - w))
    return lo + (hi - lo) * gamma


def tiny_models():
    from transformers import GPT2Config, LlamaConfig, Qwen2Config
    llama = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=44, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                        rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False,
                        rope_theta=10000.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
    qwen2 = Qwen2Config(vocab_size=61, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=32,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1000000.0,
                        use_sliding_window=False)
    gpt2 = GPT2Config(vocab_size=61, n_embd=32, n_layer=2, n_head=4, n_positions=32,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return {"llama": llama, "qwen2": qwen2, "gpt2": gpt2}


def build(name, config):
    from transformers import AutoModelForCausalLM
    torch.manual_seed({"llama": 1, "qwen2": 2, "gpt2": 3}[name])
    config._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    # Norm weights away from 1 and biases away from 0, so their gradients and the model's
    # use of them are tested too.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.eval()  # no dropout (there is none at 0.0 either)
    return model


def ours(name, hf_name):
    """The name the engine registers a parameter under (GPT-2's without 'transformer.')."""
    return hf_name[len("transformer."):] if name == "gpt2" and hf_name.startswith("transformer.") else hf_name


def mean_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=-1, reduction="mean")


def make(name, config, out):
    model = build(name, config)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    # transformers keeps its version in the files; the comparison is of the numbers.
    V = config.vocab_size
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, V, (STEPS, B, T), generator=g)
    targets = torch.randint(0, V, (STEPS, B, T), generator=g)
    targets[:, 0, 3] = -1  # positions without a loss
    targets[:, 1, T - 1] = -1
    eval_tokens = torch.randint(0, V, (B, T), generator=g)
    eval_targets = torch.randint(0, V, (B, T), generator=g)

    params = [(n, p) for n, p in model.named_parameters()]
    decay = [p for n, p in params if p.dim() >= 2]
    no_decay = [p for n, p in params if p.dim() < 2]
    opt_params = ENGINE_CONFIG["optimizer"]["params"]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": opt_params["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=opt_params["lr"], betas=tuple(opt_params["betas"]),
                                  eps=opt_params["eps"])
    golden = {"tokens": tokens.int().numpy(), "targets": targets.int().numpy()}
    lrs, losses = [], []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=False)
        loss = mean_loss(model(tokens[step]).logits.float(), targets[step])
        loss.backward()
        if step == 0:
            golden["loss0"] = np.array([loss.item()], dtype=np.float64)
            for n, p in params:
                golden["grad." + ours(name, n)] = p.grad.detach().numpy().astype(np.float32).copy()
        torch.nn.utils.clip_grad_norm_(model.parameters(), ENGINE_CONFIG["gradient_clipping"])
        lr = deepspeed_lr(step - 1)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()
        lrs.append(lr)
        losses.append(loss.item())
    golden["lr"] = np.array(lrs, dtype=np.float64)
    golden["losses"] = np.array(losses, dtype=np.float64)
    for n, p in params:
        golden["final." + ours(name, n)] = p.detach().numpy().astype(np.float32).copy()
    with torch.no_grad():
        logits = model(eval_tokens).logits.float()
        golden["eval_tokens"] = eval_tokens.int().numpy()
        golden["eval_targets"] = eval_targets.int().numpy()
        golden["eval_logits"] = logits.numpy().reshape(B * T, V).astype(np.float32)
        golden["eval_loss"] = np.array([mean_loss(logits, eval_targets).item()], dtype=np.float64)
    save_file({k: np.ascontiguousarray(v) for k, v in golden.items()}, os.path.join(out, "golden.safetensors"))
    with open(os.path.join(out, "golden.json"), "w") as f:
        json.dump({"model": name, "steps": STEPS, "batch": B, "seq": T,
                   "engine_config": ENGINE_CONFIG}, f, indent=2)
        f.write("\n")


def compare(made, committed):
    """Differences between two golden directories' numbers (empty when they match)."""
    problems = []
    for file in ("model.safetensors", "golden.safetensors"):
        a, b = load_file(os.path.join(made, file)), load_file(os.path.join(committed, file))
        if set(a) != set(b):
            problems.append(f"{file}: tensors {sorted(set(a) ^ set(b))} differ")
            continue
        for k in a:
            if a[k].shape != b[k].shape or not np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6):
                problems.append(f"{file}: {k} differs (largest difference "
                                f"{np.max(np.abs(a[k].astype(np.float64) - b[k])) if a[k].shape == b[k].shape else 'shape'})")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=HERE, help="where to write (default: beside this script)")
    parser.add_argument("--check", action="store_true",
                        help="make them in a scratch directory and compare with the committed ones")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    models = tiny_models()
    if not args.check:
        for name, config in models.items():
            make(name, config, os.path.join(args.out, name))
            print(f"wrote {os.path.join(args.out, name)}")
        return 0
    failed = False
    with tempfile.TemporaryDirectory() as scratch:
        for name, config in models.items():
            make(name, config, os.path.join(scratch, name))
            problems = compare(os.path.join(scratch, name), os.path.join(HERE, name))
            for p in problems:
                print(f"FAIL {name}: {p}")
            failed |= bool(problems)
            if not problems:
                print(f"ok   {name}: transformers {__import__('transformers').__version__} and torch "
                      f"{torch.__version__} give the committed goldens")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
