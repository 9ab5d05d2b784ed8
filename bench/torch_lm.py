#!/usr/bin/env python3
# bench/torch_lm.py: PyTorch training of the model zero-train trains, for bench/cpu_vs_torch.sh
# (the CPU, fp32) and scripts/gpu-check.sh (a GPU, bf16 autocast, eager or torch.compile):
# transformers' LlamaForCausalLM or GPT2LMHeadModel of the same shape, AdamW over the same two
# groups (matrices with weight decay, norms and biases without), gradient clipping at 1.0,
# random tokens; one micro-batch per step.
#
#   python3 bench/torch_lm.py --family llama --layers 4 --heads 4 --kv-heads 2 --channels 128 \
#       --intermediate 352 --vocab 256 --positions 64 --micro-batch 8 --seq 64 --steps 10 --threads 2
#   python3 bench/torch_lm.py --family llama ... --device cuda --dtype bf16 [--compile]
#
# Timing: --warmup-steps steps first, untimed; then --steps steps (on a GPU each between two
# synchronisations). Prints one JSON line: tokens_per_s = micro-batch x seq / mean step time, the
# parameter count, the threads and the device.
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--family", choices=["llama", "gpt2"], required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--channels", type=int, required=True)
    p.add_argument("--intermediate", type=int, default=0)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--positions", type=int, required=True)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--seq", type=int, required=True)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup-steps", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                   help="bf16: autocast around the forward, fp32 parameters and AdamW")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    if a.family == "llama":
        config = LlamaConfig(vocab_size=a.vocab, hidden_size=a.channels, intermediate_size=a.intermediate,
                             num_hidden_layers=a.layers, num_attention_heads=a.heads,
                             num_key_value_heads=a.kv_heads or a.heads, max_position_embeddings=a.positions,
                             tie_word_embeddings=a.tied)
        model = LlamaForCausalLM(config)
    else:
        config = GPT2Config(vocab_size=a.vocab, n_embd=a.channels, n_layer=a.layers, n_head=a.heads,
                            n_positions=a.positions, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = GPT2LMHeadModel(config)
    model.float().train().to(a.device)
    params = list(model.named_parameters())
    optimizer = torch.optim.AdamW([{"params": [q for n, q in params if q.dim() >= 2], "weight_decay": 0.01},
                                   {"params": [q for n, q in params if q.dim() < 2], "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), foreach=a.device != "cpu")
    step_model = torch.compile(model) if a.compile else model
    cuda = a.device.startswith("cuda")

    def sync():
        if cuda:
            torch.cuda.synchronize()
    times = []
    for step in range(a.warmup_steps + a.steps):
        tokens = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1)).to(a.device)
        sync()
        began = time.perf_counter()
        with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=torch.bfloat16,
                            enabled=a.dtype == "bf16"):
            logits = step_model(tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, a.vocab),
                                                 tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        if step >= a.warmup_steps:
            times.append(time.perf_counter() - began)
    step_time = sum(times) / len(times)
    print(json.dumps({"impl": "pytorch-compile" if a.compile else "pytorch-eager",
                      "torch": torch.__version__, "family": a.family, "device": a.device,
                      "dtype": a.dtype,
                      "parameters": sum(q.numel() for q in model.parameters()), "threads": a.threads,
                      "micro_batch": a.micro_batch, "seq": a.seq, "step_time_s": step_time,
                      "tokens_per_s": a.micro_batch * a.seq / step_time, "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
