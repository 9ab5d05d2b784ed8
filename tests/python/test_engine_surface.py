"""The engine where DeepSpeed scripts look (issue 54): an nn.Module over its module, the
precision and step queries, backward's scale_wrt_gas and its return, stepping only at the
boundary as Accelerate does (with or without set_gradient_accumulation_boundary), no_sync, and
the 16-bit consolidated weights the HF Trainer saves; on 2 ranks, a checkpoint whose ranks
name different folders goes whole into rank 0's.
"""

import contextlib

import pytest
import torch

import zero
from zero import ZeroError
from zero_checks import RANK, config


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 8)
        self.second = torch.nn.Linear(8, 1)
        self.greeting = "hello"

    def forward(self, x):
        return self.second(torch.tanh(self.first(x))).pow(2).mean()

    def describe(self):
        return f"{self.greeting} from {type(self).__name__}"


def engine_of(stage=0, **extra):
    engine, *_ = zero.initialize(model=Net(), config=config(stage, **extra))
    return engine


def batches(count, seed=3):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 6, generator=generator) for _ in range(count)]


def weights(engine):
    return [v.clone() for v in engine.consolidated_state_dict().values()]


def test_the_engine_is_a_module_over_its_module():
    engine = engine_of()
    model = engine.module
    assert isinstance(engine, torch.nn.Module)
    names = [name for name, _ in engine.named_parameters()]
    assert names == ["module." + name for name, _ in model.named_parameters()], names
    assert [id(p) for p in engine.parameters()] == [id(p) for p in model.parameters()]
    state = engine.state_dict()
    assert sorted(state) == sorted("module." + k for k in model.state_dict())
    assert torch.equal(state["module.first.weight"], model.first.weight.detach())
    assert engine.describe() == "hello from Net", "a method the engine lacks is the module's"
    assert engine.greeting == "hello"
    with pytest.raises(AttributeError, match="its module, a Net"):
        _ = engine.no_such_thing
    engine.eval()
    assert not engine.training and not model.training
    engine.train()
    assert engine.training and model.training
    engine.destroy()


def test_moving_or_casting_the_engine_is_refused_unless_it_changes_nothing():
    engine = engine_of()
    assert engine.to("cpu") is engine and engine.cpu() is engine
    assert engine.to(torch.float32) is engine and engine.float() is engine
    for what, action in [("half", engine.half), ("bfloat16", engine.bfloat16),
                         ("to(float64)", lambda: engine.to(torch.float64)),
                         ("double", engine.double)]:
        with pytest.raises(ZeroError, match="zero owns the parameters' memory and dtype"):
            action()
        assert engine.module.first.weight.dtype == torch.float32, f"{what} changed the dtype"
    engine.destroy()


def test_stage_3_state_dict_through_the_engine_is_the_modules_as_deepspeed_gives_it():
    """DeepSpeed's engine.state_dict() at stage 3: each sharded parameter an empty tensor."""
    engine = engine_of(3)
    state = engine.state_dict()
    assert set(state) == {f"module.{name}" for name, _ in engine.module.named_parameters()}
    assert all(value.numel() == 0 for value in state.values()), state
    engine.destroy()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_the_precision_queries_follow_the_config(precision):
    extra = {} if precision == "fp32" else {precision: {"enabled": True}}
    engine = engine_of(**extra)
    assert engine.fp16_enabled() == (precision == "fp16")
    assert engine.bfloat16_enabled() == (precision == "bf16")
    engine.destroy()


def test_was_step_applied_only_where_the_optimizer_ran():
    engine = engine_of(gradient_accumulation_steps=2)
    assert not engine.was_step_applied()
    applied = []
    for x in batches(4):
        engine.backward(engine(x))
        engine.step()
        applied.append(engine.was_step_applied())
    assert applied == [False, True, False, True]
    engine.destroy()


def test_backward_returns_the_loss_over_the_window_and_scale_wrt_gas_false_takes_a_share():
    plain = engine_of(gradient_accumulation_steps=2)
    shared = engine_of(gradient_accumulation_steps=2)
    for x in batches(4):
        loss = plain(x)
        returned = plain.backward(loss)
        assert torch.allclose(returned, loss / 2), "DeepSpeed returns the loss over the window"
        plain.step()
        loss = shared(x)
        returned = shared.backward(loss / 2, scale_wrt_gas=False)
        assert torch.equal(returned, loss / 2)
        shared.step()
    for a, b in zip(weights(plain), weights(shared)):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-7), (a - b).abs().max()
    plain.destroy()
    shared.destroy()


@pytest.mark.parametrize("stage", [0, 2, 3])
@pytest.mark.parametrize("say", [True, False], ids=["with-set-boundary", "without"])
def test_stepping_only_at_the_boundary_equals_stepping_every_micro_batch(stage, say):
    every = engine_of(stage, gradient_accumulation_steps=3)
    boundary_only = engine_of(stage, gradient_accumulation_steps=3)
    losses_every, losses_boundary = [], []
    for i, x in enumerate(batches(9)):
        loss = every(x)
        every.backward(loss)
        every.step()
        losses_every.append(float(loss.detach()))
        loss = boundary_only(x)  # Accelerate: forward, set the boundary, backward, step at it
        if say:
            boundary_only.set_gradient_accumulation_boundary(i % 3 == 2)
        boundary_only.backward(loss)
        if i % 3 == 2:
            boundary_only.step()
            assert boundary_only.was_step_applied()
        losses_boundary.append(float(loss.detach()))
    assert losses_every == losses_boundary
    assert boundary_only.global_steps == every.global_steps == 3
    for a, b in zip(weights(every), weights(boundary_only)):
        assert torch.equal(a, b), "the implicit micro-step is the same zero_step"
    every.destroy()
    boundary_only.destroy()


def test_deepspeeds_documented_pattern_sets_the_boundary_once_per_window():
    """set_gradient_accumulation_boundary(False) once before the window's first micro-batches,
    True before its last: the value at each backward counts."""
    engine = engine_of(gradient_accumulation_steps=3)
    xs = batches(3)
    engine.set_gradient_accumulation_boundary(False)
    for x in xs[:2]:
        engine.backward(engine(x))
    engine.set_gradient_accumulation_boundary(True)
    engine.backward(engine(xs[2]))
    engine.step()
    assert engine.was_step_applied() and engine.global_steps == 1
    engine.destroy()


def test_a_boundary_zeros_window_does_not_have_is_refused_before_any_step():
    engine = engine_of(gradient_accumulation_steps=3)
    before = [p.detach().clone() for p in engine.parameters()]  # stage 0: views of zero's
    engine.set_gradient_accumulation_boundary(True)
    engine.backward(engine(batches(1)[0]))
    with pytest.raises(ZeroError, match=r"micro-batch 1 of zero's window of 3.*"
                                        r"gradient_accumulation_steps.*nothing was stepped"):
        engine.step()
    assert all(torch.equal(a, b) for a, b in zip(before, engine.parameters()))
    engine.destroy()


def test_a_forward_after_the_windows_last_backward_without_its_step_is_refused():
    engine = engine_of(gradient_accumulation_steps=2)
    xs = batches(3)
    engine.backward(engine(xs[0]))  # inside the window: its step is implicit
    engine.backward(engine(xs[1]))  # the window's end: the optimizer's step must be called
    with pytest.raises(ZeroError, match="ends the accumulation window.*call engine.step"):
        engine(xs[2])
    engine.destroy()


def test_no_sync_is_the_same_sums_at_stages_0_and_1_and_refused_at_2_and_3():
    plain = engine_of(1, gradient_accumulation_steps=2)
    synced = engine_of(1, gradient_accumulation_steps=2)
    for i, x in enumerate(batches(4)):
        plain.backward(plain(x))
        plain.step()
        if i % 2 == 0:
            with synced.no_sync():
                synced.backward(synced(x))
                with pytest.raises(ZeroError, match="inside engine.no_sync"):
                    synced.step()
        else:
            synced.backward(synced(x))
        synced.step()
    for a, b in zip(weights(plain), weights(synced)):
        assert torch.equal(a, b)
    plain.destroy()
    synced.destroy()
    for stage in (2, 3):
        engine = engine_of(stage)
        with pytest.raises(ZeroError, match=f"no_sync.. at ZeRO stage {stage}"):
            with engine.no_sync():
                pass
        engine.destroy()


@pytest.mark.parametrize("gather", [True, False])
def test_the_16bit_weights_the_trainer_saves(gather):
    engine = engine_of(3, bf16={"enabled": True}, zero_optimization={
        "stage": 3, "stage3_gather_16bit_weights_on_model_save": gather})
    assert engine.zero_gather_16bit_weights_on_model_save() == gather
    engine.module.first.bias.requires_grad_(False)
    full = engine.consolidated_state_dict()
    half = engine._zero3_consolidated_16bit_state_dict()
    assert sorted(half) == sorted(full)
    for name, value in half.items():
        assert value.dtype == torch.bfloat16
        assert torch.equal(value, full[name].to(torch.bfloat16)), name
    trained_only = engine._zero3_consolidated_16bit_state_dict(exclude_frozen_parameters=True)
    assert "first.bias" not in trained_only and "first.weight" in trained_only
    engine.destroy()


@pytest.mark.ranks(2)
def test_ranks_that_name_different_checkpoint_folders_save_and_load_rank_0s(work):
    """HelloDeepSpeed's train_bert_ds.py names its checkpoint folder by the clock on each rank,
    so ranks that straddle a second pass different ones: the checkpoint is one, in rank 0's
    folder, and rank 1 is told so (DeepSpeed would write each rank's part under its own)."""
    engine = engine_of(2)
    for x in batches(2):
        engine.backward(engine(x))
        engine.step()
    expected = weights(engine)
    mine = work / "run"  # work is this rank's own folder: .../rank0 or .../rank1

    def told():  # rank 1 is warned, naming both folders
        return (pytest.warns(UserWarning, match="rank 1 passed.*every rank uses rank 0's")
                if RANK else contextlib.nullcontext())

    with told():
        engine.save_checkpoint(mine, client_state={"step": 2})
    if RANK == 0:  # (rank 0 moves `latest` last; rank 1 may be back before it)
        assert (mine / "latest").read_text().strip() == "global_step2"
    else:
        assert not mine.exists(), "rank 1 wrote into its own folder"
    engine.destroy()

    fresh = engine_of(2)
    with told():
        path, client_state = fresh.load_checkpoint(mine)
    # (rank 0's folder, which rank 1 cannot name: without --zero-work, each rank's pytest has
    # a temporary folder of its own)
    assert path.endswith("rank0/run/global_step2") and client_state == {"step": 2}, path
    assert all(torch.equal(a, b) for a, b in zip(weights(fresh), expected)), \
        "the weights loaded are not the ones saved"
    fresh.destroy()


def test_the_throughput_timer_counts_as_deepspeeds():
    """engine.tput_timer (DeepSpeed-Chat marks each epoch on it): micro-batches from forward to
    step, optimizer steps at the boundary, samples a second after its 2 warm-up steps."""
    engine = engine_of(0, gradient_accumulation_steps=2)
    timer = engine.tput_timer
    for x in batches(8):
        engine.backward(engine(x).pow(2).mean())
        engine.step()
    assert (timer.micro_step_count, timer.global_step_count) == (8, 4)
    assert timer.batch_size == engine.train_batch_size()
    assert timer.avg_samples_per_sec() > 0
    timer.update_epoch_count()
    assert (timer.epoch_count, timer.micro_step_count) == (1, 0)
    engine.destroy()
