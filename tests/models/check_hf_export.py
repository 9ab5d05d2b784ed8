"""Checks a zero-ckpt export directory against the Hugging Face directory it started from.

    python check_hf_export.py ORIGINAL EXPORTED
        EXPORTED/model.safetensors holds ORIGINAL/model.safetensors's tensors (GPT-2's names
        with or without "transformer."), equal bit for bit, and EXPORTED/config.json has
        ORIGINAL/config.json's model_type and sizes (needs safetensors and numpy)
    python check_hf_export.py --transformers ORIGINAL EXPORTED
        transformers loads both with AutoModelForCausalLM and gives the same logits (needs
        torch and transformers)
"""
import json
import os
import sys

SHAPE_KEYS = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
              "rms_norm_eps", "tie_word_embeddings", "n_embd", "n_layer", "n_head", "n_positions"]


CARRIED_KEYS = ["bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
                "attention_dropout", "use_cache"]


def fail(message):
    sys.exit(f"FAIL {message}")


def plain(name):
    return name[len("transformer."):] if name.startswith("transformer.") else name


def check_files(original, exported):
    import numpy as np
    from safetensors.numpy import load_file
    theirs = {plain(k): v for k, v in load_file(os.path.join(original, "model.safetensors")).items()
              if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")}
    ours = {plain(k): v for k, v in load_file(os.path.join(exported, "model.safetensors")).items()}
    if set(theirs) != set(ours):
        fail(f"{exported}: tensors differ: only in the original {sorted(set(theirs) - set(ours))}, "
             f"only in the export {sorted(set(ours) - set(theirs))}")
    for name, value in theirs.items():
        if value.shape != ours[name].shape or not np.array_equal(value.view(np.uint32), ours[name].view(np.uint32)):
            fail(f"{exported}: {name} differs from the original")
    with open(os.path.join(original, "config.json")) as f:
        a = json.load(f)
    with open(os.path.join(exported, "config.json")) as f:
        b = json.load(f)
    for key in SHAPE_KEYS:
        if key in a and a.get(key) != b.get(key):
            fail(f"{exported}/config.json: {key} is {b.get(key)!r}, the original's {a.get(key)!r}")
    # What the model does not change carries through; the dtype is under the key transformers
    # 4.56 and later read.
    for key in CARRIED_KEYS:
        if key in a and a.get(key) != b.get(key):
            fail(f"{exported}/config.json: {key} is {b.get(key)!r}, the original's {a.get(key)!r}")
    if "dtype" not in b or "torch_dtype" in b:
        fail(f"{exported}/config.json: the dtype should be under \"dtype\" alone: {sorted(b)}")
    generation = [os.path.join(d, "generation_config.json") for d in (original, exported)]
    if os.path.exists(generation[0]) != os.path.exists(generation[1]):
        fail(f"{exported}: generation_config.json is {'missing' if os.path.exists(generation[0]) else 'there'}, "
             f"{'there' if os.path.exists(generation[0]) else 'missing'} in the original")
    if os.path.exists(generation[0]):
        with open(generation[0]) as f, open(generation[1]) as g:
            if json.load(f) != json.load(g):
                fail(f"{exported}/generation_config.json differs from the original's")
    print(f"ok   {exported}: {len(ours)} tensors equal to the original's bit for bit, config.json's shape "
          f"and token ids the same")


def check_transformers(original, exported):
    import torch
    from transformers import AutoModelForCausalLM
    tokens = torch.arange(12).reshape(1, 12) % 61
    logits = []
    for path in (original, exported):
        model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").float().eval()
        with torch.no_grad():
            logits.append(model(tokens).logits)
    if not torch.equal(logits[0], logits[1]):
        fail(f"{exported}: transformers' logits differ from the original's by "
             f"{(logits[0] - logits[1]).abs().max().item()}")
    print(f"ok   {exported}: transformers loads it ({type(model).__name__}) with the original's logits")


if __name__ == "__main__":
    if sys.argv[1] == "--transformers":
        check_transformers(sys.argv[2], sys.argv[3])
    else:
        check_files(sys.argv[1], sys.argv[2])
