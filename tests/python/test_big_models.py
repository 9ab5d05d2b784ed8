"""Big models from PyTorch: a model built without its weights (on the meta device, or under
zero.zero.Init, transformers' from_pretrained inside it too) is given to zero.initialize, which
allocates only zero's partitions and reads their values from a sharded Hugging Face directory
(pretrained=, each rank only what it keeps) or from the model's own initialisation, a unit at
a time.

On 2 ranks a tiny Llama (untied head) and a tiny GPT-2 (tied head), saved as a directory of 14
to 17 safetensors shards, train bit for bit as the same models built with their weights, at
stages 0-3 and with the parameters and optimizer on the CPU and on NVMe. On 1 rank: the own
initialisation gives what the model's initialisation gives, and every way in which the inputs
can be wrong is refused, naming what.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import zero
from zero_checks import config, refused

if importlib.util.find_spec("transformers") is None:
    pytest.skip("transformers cannot be imported (the tests' venv has it)", allow_module_level=True)

from transformers import (AutoConfig, AutoModelForCausalLM, GPT2Config,  # noqa: E402
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, LlamaModel)

SHARD = "20KB"  # 14 to 17 files for these models


def llama_config(**extra: Any) -> LlamaConfig:
    shape = {"vocab_size": 103, "hidden_size": 48, "intermediate_size": 80,
             "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
             "max_position_embeddings": 64, "tie_word_embeddings": False} | extra
    return LlamaConfig(bos_token_id=0, eos_token_id=0, pad_token_id=0, **shape)


def gpt2_config() -> GPT2Config:
    return GPT2Config(vocab_size=101, n_positions=64, n_embd=48, n_layer=3, n_head=4,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                      eos_token_id=0)


def save(model: torch.nn.Module, folder: Path) -> Path:
    model.save_pretrained(folder, max_shard_size=SHARD)
    return folder


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each rank's own copy of the two seeded models, sharded."""
    root = tmp_path_factory.mktemp("big-models")
    torch.manual_seed(4321)
    llama = save(LlamaForCausalLM(llama_config()), root / "llama")
    torch.manual_seed(1234)
    gpt2 = save(GPT2LMHeadModel(gpt2_config()), root / "gpt2")
    assert len(list(llama.glob("*.safetensors"))) > 10, "the directory is sharded"
    return {"llama": llama, "gpt2": gpt2}


def train(engine: Any, vocab: int, steps: int = 3) -> list[float]:
    generator = torch.Generator().manual_seed(5)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, vocab, (2, 12), generator=generator)
        out = engine(input_ids=ids, labels=ids)
        engine.backward(out.loss)
        engine.step()
        losses.append(out.loss.item())
    return losses


def outcome(model: torch.nn.Module, cfg: dict[str, Any], **kwargs: Any
            ) -> tuple[list[float], dict[str, torch.Tensor]]:
    engine, *_ = zero.initialize(model=model, config=cfg, **kwargs)
    losses = train(engine, model.config.vocab_size)
    state = engine.consolidated_state_dict()
    engine.destroy()
    return losses, state


def offload(device: str, work: Path) -> dict[str, Any]:
    place: dict[str, Any] = {"device": device}
    if device == "nvme":
        place["nvme_path"] = str(work / "nvme")
    return config(3, zero_optimization={"stage": 3, "offload_param": dict(place),
                                        "offload_optimizer": dict(place)})


CASES = ["stage0", "stage1", "stage2", "stage3", "offload-cpu", "offload-nvme"]


def case_config(case: str, work: Path) -> dict[str, Any]:
    if case.startswith("offload-"):
        return offload(case.split("-")[1], work)
    return config(int(case[-1]))


@pytest.mark.ranks(2)
@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("case", CASES)
def test_built_without_weights_trains_as_built_with_them(directories, work, family, case):
    folder = directories[family]
    cfg = case_config(case, work)
    with_weights = outcome(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), cfg)
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    assert meta.lm_head.weight.is_meta
    without = outcome(meta, cfg, pretrained=folder)
    assert without[0] == with_weights[0], f"{family} {case}: the losses differ"
    assert without[1].keys() == with_weights[1].keys()
    for name, value in with_weights[1].items():
        assert torch.equal(without[1][name], value), f"{family} {case}: {name} differs"
    if case == "stage3":  # the DeepSpeed spelling: from_pretrained inside zero.zero.Init
        with zero.zero.Init():
            model = AutoModelForCausalLM.from_pretrained(folder)
        assert all(p.is_meta for p in model.parameters())
        assert model.dtype == torch.float32, "dtype='auto': the directory's"
        inside = outcome(model, cfg)
        assert inside[0] == with_weights[0]


def test_init_puts_parameters_on_meta_and_leaves_buffers(directories):
    with zero.zero.Init():
        model = LlamaForCausalLM(llama_config())
        with zero.zero.Init(dtype=torch.bfloat16):  # nested: the outer one's exit ends it
            linear = torch.nn.Linear(3, 4)
        after_inner = torch.nn.Linear(3, 4)
    outside = torch.nn.Linear(3, 4)
    assert all(p.is_meta for p in model.parameters())
    assert not model.model.rotary_emb.inv_freq.is_meta, "buffers are made where they are"
    assert linear.weight.is_meta and linear.weight.dtype == torch.bfloat16
    assert after_inner.weight.is_meta and not outside.weight.is_meta
    with zero.zero.Init(enabled=False):
        assert not torch.nn.Linear(3, 4).weight.is_meta
    with refused("from_pretrained inside Init of a name that is no local directory",
                 ["inside zero.zero.Init", "no-such/model", "local directory"]):
        with zero.zero.Init():
            LlamaForCausalLM.from_pretrained("no-such/model")
    assert not torch.nn.Linear(3, 4).weight.is_meta, "an Init that raised ended its patching"


def test_a_gathered_meta_parameter_becomes_real_where_the_model_holds_it():
    """transformers' own ZeRO-3 route builds under deepspeed.zero.Init and then loads and
    initialises each module inside GatheredParameters(modifier_rank=0): what it writes there
    stays, in every module that holds the parameter (a tied head too)."""
    with zero.zero.Init():
        model = LlamaForCausalLM(llama_config(tie_word_embeddings=True))
    model.tie_weights()
    embed = model.model.embed_tokens.weight
    assert embed.is_meta and model.lm_head.weight is embed
    with zero.zero.GatheredParameters([embed], modifier_rank=0):
        gathered = model.model.embed_tokens.weight
        assert not gathered.is_meta and torch.equal(gathered, torch.zeros_like(gathered))
        with torch.no_grad():
            gathered.fill_(0.5)
    assert model.lm_head.weight is model.model.embed_tokens.weight, "still tied"
    assert torch.all(model.lm_head.weight == 0.5), "the value written inside the block stays"
    assert model.model.layers[0].mlp.up_proj.weight.is_meta, "only what was gathered"


def spread(values: torch.Tensor) -> float:
    return float(values.float().std())


def test_own_initialisation_gives_the_models_own(work):
    """Without pretrained=, each unit is initialised as the model initialises it: the same
    distributions as a model built with its weights (the draws differ: the order does)."""
    for family, make in (("llama", lambda: LlamaForCausalLM(llama_config())),
                         ("gpt2", lambda: GPT2LMHeadModel(gpt2_config()))):
        torch.manual_seed(0)
        built = make()
        with torch.device("meta"):
            meta = make()
        engine, *_ = zero.initialize(model=meta, config=config(3))
        mine = engine.consolidated_state_dict()
        reference = built.state_dict()
        assert mine.keys() == reference.keys()
        for name, value in reference.items():
            got = mine[name]
            if "inv_freq" in name:  # a buffer on the meta device: rebuilt as the model builds it
                assert torch.equal(got, value), name
            elif value.numel() > 1000:
                assert math.isclose(spread(got), spread(value), rel_tol=0.15), (
                    f"{family} {name}: std {spread(got)} against {spread(value)}")
            elif torch.all(value == value.flatten()[0]):  # norms' ones, biases' zeros
                assert torch.equal(got, value), f"{family} {name}"
        if family == "gpt2":  # GPT-2 scales its residual projections by 1/sqrt(2 n_layer)
            scaled = spread(mine["transformer.h.0.attn.c_proj.weight"])
            assert math.isclose(scaled, 0.02 / math.sqrt(6), rel_tol=0.15), scaled
        engine.destroy()


class Scaled(torch.nn.Module):
    """A parameter no initialisation sets (no reset_parameters), and a buffer likewise."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.register_buffer("offset", torch.zeros(4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.scale + self.offset).sum()


class WithScale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Scaled()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_what_cannot_be_loaded_is_refused_naming_it(directories, tmp_path):
    llama = directories["llama"]

    def meta_llama() -> LlamaForCausalLM:
        with torch.device("meta"):
            return LlamaForCausalLM(llama_config())

    model = meta_llama()
    with refused("a directory that does not exist", ["pretrained=", "no such file"]):
        zero.initialize(model=model, config=config(3), pretrained=tmp_path / "absent")
    assert all(p.is_meta for p in model.parameters()), (
        "a refused model is given back as it came, not with placeholders for values")
    with refused("a directory without safetensors files",
                 ["neither model.safetensors.index.json nor model.safetensors"]):
        zero.initialize(model=meta_llama(), config=config(3), pretrained=tmp_path)
    with refused("a tensor of another shape, named",
                 ["pretrained=", "model.layers.0.mlp.gate_proj.weight", "shape"]):
        zero.initialize(model=_narrower_llama(), config=config(3), pretrained=llama)
    with refused("a file tensor no parameter takes, named",
                 ["pretrained=", "tensor 'model.layers.2.", "not taken by any parameter",
                  "the directory's config"]):
        zero.initialize(model=_two_layer_llama(), config=config(3), pretrained=llama)
    with refused("a meta parameter nothing initialises, named",
                 ["inner.scale", "nothing initialises it", "pretrained="]):
        with zero.zero.Init():  # its buffer real
            model = WithScale()
        zero.initialize(model=model, config=config(3))
    with refused("a meta buffer nothing initialises, named",
                 ["buffer inner.offset", "zero.zero.Init()"]):
        with torch.device("meta"):
            model = WithScale()
        model.inner.scale = torch.nn.Parameter(torch.ones(4))
        zero.initialize(model=model, config=config(3))


def _narrower_llama() -> LlamaForCausalLM:
    with torch.device("meta"):
        return LlamaForCausalLM(llama_config(intermediate_size=96))


def _two_layer_llama() -> LlamaForCausalLM:
    with torch.device("meta"):
        return LlamaForCausalLM(llama_config(num_hidden_layers=2))


def test_what_the_directory_lacks_is_initialised_and_named(tmp_path):
    """A base model's directory (no head, names without "model.") into a model with a head:
    the body loads through the base model's prefix, the head is initialised, and named."""
    torch.manual_seed(7)
    base = LlamaModel(llama_config())
    save(base, tmp_path / "base")
    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config())
    with pytest.warns(UserWarning, match=r"1 parameters are not in .* lm_head\.weight"):
        engine, *_ = zero.initialize(model=model, config=config(3), pretrained=tmp_path / "base")
    state = engine.consolidated_state_dict()
    for name, value in base.state_dict().items():
        assert torch.equal(state[f"model.{name}"], value), name
    assert math.isclose(spread(state["lm_head.weight"]), 0.02, rel_tol=0.15)
    engine.destroy()
