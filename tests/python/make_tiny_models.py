"""Writes the tiny, seeded Hugging Face models the front end's tests train: DIR/gpt2 and
DIR/llama, through save_pretrained (safetensors), as a user's checkpoint directory would be;
with a TEXT file also DIR/gpt2-text, a GPT-2 with a byte-level BPE tokenizer trained on it, for
examples/finetune_hf.py."""

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)


def text_model(out, text):
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train([text], trainers.BpeTrainer(
        vocab_size=512, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"], show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>")
    fast.save_pretrained(f"{out}/gpt2-text")
    torch.manual_seed(99)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=tokenizer.get_vocab_size(), n_positions=128,
                                       n_embd=64, n_layer=2, n_head=4, bos_token_id=0,
                                       eos_token_id=0))
    model.save_pretrained(f"{out}/gpt2-text")


def main(out, text=None):
    torch.manual_seed(1234)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=64, n_embd=48, n_layer=3,
                                      n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    gpt2.save_pretrained(f"{out}/gpt2")
    torch.manual_seed(4321)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=103, hidden_size=48, intermediate_size=80,
                                         num_hidden_layers=3, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=64,
                                         tie_word_embeddings=False, bos_token_id=0,
                                         eos_token_id=0, pad_token_id=0))
    llama.save_pretrained(f"{out}/llama")
    if text:
        text_model(out, text)


if __name__ == "__main__":
    main(*sys.argv[1:])
