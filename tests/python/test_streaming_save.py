"""The trained weights written by streaming, a tensor at a time from zero's partitions:
engine.save_pretrained, save_16bit_model and _zero3_consolidated_16bit_state_dict write the
bytes the whole-model route writes (the consolidated state dict given to the module's own
save_pretrained, or torch.save'd), on 2 ranks at stages 1 and 3, for a tied GPT-2 and an untied
Llama, in one file and in shards; and the streaming safetensors writer lays its files out as
the safetensors library does.
"""

from __future__ import annotations

import filecmp
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
import torch

import zero
from zero._safetensors import StreamWriter
from zero_checks import RANK, config, refused

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec(
        "safetensors") is None:
    pytest.skip("transformers or safetensors cannot be imported (the tests' venv has them)",
                allow_module_level=True)

from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402


def test_the_writer_lays_files_out_as_safetensors_does(tmp_path):
    generator = torch.Generator().manual_seed(0)
    tensors = {
        "zeta": torch.randn(3, 5, generator=generator),
        "alpha": torch.randn(7, generator=generator).to(torch.bfloat16),
        "mid.ids": torch.randint(0, 100, (4, 3), generator=generator),
        "half": torch.randn(2, 3, 1, generator=generator).to(torch.float16),
        "double": torch.randn(1, generator=generator).double(),
        "flag": torch.tensor(True),
        "empty": torch.empty(0, 4),
        "bytes": torch.arange(5, dtype=torch.uint8),
        "i32": torch.arange(3, dtype=torch.int32),
        "i16": torch.arange(3, dtype=torch.int16),
        "i8": torch.arange(-2, 1, dtype=torch.int8),
    }
    for metadata in (None, {"format": "pt"}):
        save_file(tensors, tmp_path / "library.safetensors", metadata=metadata)
        writer = StreamWriter(tmp_path / "streamed.safetensors",
                              [(n, t.dtype, tuple(t.shape)) for n, t in tensors.items()],
                              metadata)
        for name in reversed(list(tensors)):  # any order
            writer.write(name, tensors[name])
        writer.close()
        assert filecmp.cmp(tmp_path / "library.safetensors", tmp_path / "streamed.safetensors",
                           shallow=False), f"metadata {metadata}: the bytes differ"
    writer = StreamWriter(tmp_path / "short.safetensors", [("a", torch.float32, (2,)),
                                                           ("b", torch.float32, (3,))])
    with refused("a tensor of another dtype than declared", ["a was declared", "float16"]):
        writer.write("a", torch.zeros(2, dtype=torch.float16))
    writer.write("a", torch.zeros(2))
    with refused("a file closed before every tensor was written", ["closed before", "'b'"]):
        writer.close()


def gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(1234)
    return GPT2LMHeadModel(GPT2Config(vocab_size=101, n_positions=64, n_embd=48, n_layer=2,
                                      n_head=4, bos_token_id=0, eos_token_id=0))


def llama() -> LlamaForCausalLM:
    torch.manual_seed(4321)
    return LlamaForCausalLM(LlamaConfig(vocab_size=103, hidden_size=48, intermediate_size=80,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, tie_word_embeddings=False,
                                        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def trained(make: Any, stage: int, **extra: Any) -> Any:
    cfg = config(stage, bf16={"enabled": True}, **extra)
    engine, *_ = zero.initialize(model=make(), config=cfg)
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(RANK))
    out = engine(input_ids=ids, labels=ids)
    engine.backward(out.loss)
    engine.step()
    return engine


def same_folders(a: Path, b: Path) -> None:
    names = sorted(os.listdir(a))
    assert names == sorted(os.listdir(b)), (a, names, sorted(os.listdir(b)))
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), f"{name} differs"


@pytest.mark.ranks(2)
@pytest.mark.parametrize("make", [gpt2, llama], ids=["gpt2", "llama"])
@pytest.mark.parametrize("stage", [1, 3])
def test_streamed_saves_write_the_whole_routes_bytes(work, monkeypatch, make, stage):
    engine = trained(make, stage)
    whole = engine.consolidated_state_dict()  # the whole route: every value at once
    half = engine.consolidated_state_dict(torch.bfloat16)
    # The streamed route reads zero's partitions a tensor at a time: never the whole model.
    monkeypatch.setattr(type(engine), "consolidated_state_dict", None)
    for tag, extra in (("one", {}), ("sharded", {"max_shard_size": "30KB"})):
        engine.save_pretrained(work / f"streamed-{tag}", **extra)
        engine.save_pretrained(work / f"streamed-{tag}-bf16", dtype=torch.bfloat16, **extra)
        if RANK == 0:
            with engine._hooks.copies.allow_state_dict():
                # (transformers empties the dict it is given)
                engine.module.save_pretrained(work / f"whole-{tag}", state_dict=dict(whole),
                                              **extra)
                engine.module.save_pretrained(work / f"whole-{tag}-bf16", state_dict=dict(half),
                                              **extra)
            same_folders(work / f"streamed-{tag}", work / f"whole-{tag}")
            same_folders(work / f"streamed-{tag}-bf16", work / f"whole-{tag}-bf16")
    if RANK == 0:
        assert len(list((work / "streamed-sharded").glob("*.safetensors"))) > 3
    engine.save_16bit_model(work / "bin")
    engine.save_16bit_model(work / "st", "model.safetensors")
    gathered = engine._zero3_consolidated_16bit_state_dict()
    if RANK == 0:
        (work / "whole-bin").mkdir()
        torch.save(half, work / "whole-bin" / "pytorch_model.bin")
        same_folders(work / "bin", work / "whole-bin")
        stored = load_file(work / "st" / "model.safetensors")
        assert set(half) - set(stored) <= {"lm_head.weight"}, "a tied name once"
        for name, value in stored.items():
            assert torch.equal(value, half[name]), name
        assert gathered.keys() == half.keys()
        for name, value in gathered.items():
            assert torch.equal(value, half[name]), name
    elif stage == 3:
        assert gathered is None, "DeepSpeed's: the other ranks get None at stage 3"
    else:
        assert gathered.keys() == half.keys()
    engine.destroy()
