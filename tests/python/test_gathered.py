"""zero.zero.GatheredParameters, as DeepSpeed's deepspeed.zero.GatheredParameters behaves: full
values inside the block at every stage (at stage 3 in place of the placeholders, which come
back after it), a change made on modifier_rank written into zero on every rank (training goes
on from it as from safe_set_full_fp32_param, moments kept), a change without modifier_rank
dropped at stage 3 with the gathered copy, other tensors left alone.
"""

import pytest
import torch

import zero
from zero import ZeroError
from zero.utils import safe_set_full_fp32_param
from zero_checks import RANK, config, refused


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 1)

    def forward(self, tokens):
        return self.head(self.embed(tokens)).pow(2).mean()


def engine_of(stage):
    engine, *_ = zero.initialize(model=Net(), config=config(stage))
    return engine


def train(engine, steps, seed=3):
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        loss = engine(torch.randint(0, 11, (2, 5), generator=generator))
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("stage", [0, 1, 3])
def test_inside_the_block_the_values_are_whole(stage):
    engine = engine_of(stage)
    train(engine, 2)
    full = engine.consolidated_state_dict()
    weight = engine.module.embed.weight
    with zero.zero.GatheredParameters([weight, engine.module.head.bias]):
        assert tuple(weight.shape) == (11, 6)
        assert torch.equal(weight.detach().float(), full["embed.weight"])
        norm = float(weight.detach().norm())
    assert norm == pytest.approx(float(full["embed.weight"].norm()), rel=1e-6)
    if stage == 3:
        assert torch.isnan(weight).all(), "the placeholder is back after the block"
    train(engine, 1)  # and the engine goes on
    engine.destroy()


@pytest.mark.ranks(2)
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_a_change_on_the_modifier_rank_is_every_ranks(stage):
    changed = engine_of(stage)
    reference = engine_of(stage)
    train(changed, 2)
    train(reference, 2)
    # The reference sets the new row on every rank; `changed` only on rank 1, inside the block.
    row = torch.arange(6, dtype=torch.float32) / 10
    value = reference.consolidated_state_dict()["embed.weight"]
    value[4] = row
    safe_set_full_fp32_param(reference.module.embed.weight, value)
    with zero.zero.GatheredParameters(changed.module.embed.weight, modifier_rank=1):
        if RANK == 1:
            with torch.no_grad():
                changed.module.embed.weight[4] = row
    got = changed.consolidated_state_dict()["embed.weight"]
    assert torch.equal(got[4], row), "rank 1's change reached zero on every rank"
    assert torch.equal(got, reference.consolidated_state_dict()["embed.weight"])
    assert train(changed, 3) == train(reference, 3), "training goes on as from the set value"
    changed.destroy()
    reference.destroy()


def test_without_a_modifier_a_stage_3_change_goes_with_the_gathered_copy():
    engine = engine_of(3)
    before = engine.consolidated_state_dict()["embed.weight"]
    with zero.zero.GatheredParameters(engine.module.embed.weight):
        with torch.no_grad():
            engine.module.embed.weight.zero_()
    assert torch.equal(engine.consolidated_state_dict()["embed.weight"], before)
    train(engine, 1)  # the dropped change is not taken for one made in place
    engine.destroy()


def test_other_tensors_disabled_blocks_and_misuse():
    engine = engine_of(3)
    plain = torch.nn.Parameter(torch.ones(3))
    with zero.zero.GatheredParameters([plain], modifier_rank=0):
        plain.data.mul_(2)
    assert torch.equal(plain, torch.full((3,), 2.0)), "a tensor zero does not train is left be"
    with zero.zero.GatheredParameters(engine.module.embed.weight, enabled=False):
        assert torch.isnan(engine.module.embed.weight).all()
    with refused("a modifier rank the job does not have", ["modifier_rank=3", "ranks 0 to 0"]):
        zero.zero.GatheredParameters(engine.module.embed.weight, modifier_rank=3)
    loss = engine(torch.zeros(2, 5, dtype=torch.long))
    with refused("a block inside a micro-step", ["GatheredParameters", "middle of a micro-step"]):
        with zero.zero.GatheredParameters(engine.module.embed.weight):
            pass
    engine.backward(loss)
    engine.step()
    with pytest.raises(RuntimeError, match="inside"):
        with zero.zero.GatheredParameters(engine.module.embed.weight, modifier_rank=0):
            raise RuntimeError("inside")
    assert torch.isnan(engine.module.embed.weight).all(), "placeholders back after a raise"
    engine.destroy()
