#!/usr/bin/env python3
"""Writes a Llama-shaped Hugging Face directory with made-up weights, since nothing is
downloaded here: config.json for the published shape of MODEL and bf16 safetensors shards of
at most 2 GB with their index, as save_pretrained writes them. Each tensor is drawn on its own
(seeded by its name) and written before the next is made, so the host holds one tensor: the
model never exists whole. Weights are N(0, 0.02), norms ones.

    bench/make_llama_weights.py DIR [--model llama-3.2-3b]

Used by bench/frontend_scale.sh. Needs torch, transformers and the zero package (its
streaming safetensors writer) on the path.
"""

import argparse
import json
import math
import zlib
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from zero._safetensors import StreamWriter

# The published shapes (config.json of each model on the Hugging Face hub).
SHAPES = {
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, head_dim=64),
    "llama-3.2-3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                         num_attention_heads=24, num_key_value_heads=8, head_dim=128),
}
SHARD_BYTES = 2 * 10**9


def config_for(name: str) -> LlamaConfig:
    return LlamaConfig(vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                       rope_theta=500000.0, tie_word_embeddings=True, bos_token_id=128000,
                       eos_token_id=128001, dtype="bfloat16",
                       rope_scaling={"rope_type": "llama3", "factor": 32.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192},
                       **SHAPES[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--model", default="llama-3.2-3b", choices=sorted(SHAPES))
    args = parser.parse_args()
    config = config_for(args.model)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    # the tied head once, as save_pretrained writes it
    names = [(n, tuple(p.shape)) for n, p in model.named_parameters()]
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in names:
        nbytes = 2 * math.prod(shape)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += nbytes
    args.dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(args.dir)
    weight_map = {}
    total = 0
    for number, shard in enumerate(shards, 1):
        file = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        writer = StreamWriter(args.dir / file, [(n, torch.bfloat16, s) for n, s in shard],
                              {"format": "pt"})
        for name, shape in shard:
            if name.endswith("norm.weight"):
                value = torch.ones(shape, dtype=torch.bfloat16)
            else:
                generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
                value = (torch.randn(shape, generator=generator) * 0.02).to(torch.bfloat16)
            writer.write(name, value)
            weight_map[name] = file
            total += 2 * math.prod(shape)
            del value
        writer.close()
    index = {"metadata": {"total_size": total, "total_parameters": total // 2},
             "weight_map": weight_map}
    (args.dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    print(f"{args.dir}: {args.model}, {total // 2 / 1e9:.3f}B parameters in {len(shards)} "
          f"shards, {total / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
