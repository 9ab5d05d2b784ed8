"""A torch LR scheduler given to zero.initialize, as DeepSpeed-Chat passes transformers'
get_scheduler: zero steps it after each optimizer step that was not skipped, as DeepSpeed does,
and trains at the learning rates it sets, as torch.optim.AdamW under the same scheduler does;
its state comes back from a checkpoint. What zero cannot follow is refused by name. One rank.
"""

import math

import pytest
import torch

import zero
from zero import ZeroError, _library
from zero_checks import config, refused

WARMUP, TOTAL = 3, 10


def warmup_then_cosine(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    return 0.5 * (1 + math.cos(math.pi * (step - WARMUP) / (TOTAL - WARMUP)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(6, 8)
        self.second = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x))).pow(2).mean()


def batches(count):
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(2, 6, generator=generator) for _ in range(count)]


def optimizer_of(model, two_groups=False):
    if two_groups:
        groups = [{"params": model.first.parameters(), "lr": 1e-2},
                  {"params": model.second.parameters(), "lr": 5e-3}]
        return torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.01)
    return torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)


def torch_run(steps, accumulation=1, two_groups=False):
    """Plain PyTorch: AdamW and the scheduler stepped once per accumulation window."""
    model = Net()
    optimizer = optimizer_of(model, two_groups)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine)
    losses, lrs = [], []
    for i, x in enumerate(batches(steps * accumulation)):
        loss = model(x)
        (loss / accumulation).backward()
        losses.append(float(loss.detach()))
        if (i + 1) % accumulation == 0:
            lrs.append(scheduler.get_last_lr()[0])
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()
    return losses, lrs


def zero_engine(accumulation=1, two_groups=False, as_callable=False, **extra):
    model = Net()
    optimizer = optimizer_of(model, two_groups)
    if as_callable:
        scheduler = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warmup_then_cosine)  # noqa: E731
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine)
    cfg = config(0, gradient_accumulation_steps=accumulation, **extra)
    del cfg["optimizer"]
    engine, _, _, scheduler_out = zero.initialize(model=model, optimizer=optimizer,
                                                  lr_scheduler=scheduler, config=cfg)
    return engine, scheduler_out


def zero_run(engine, xs):
    losses, lrs = [], []
    for x in xs:
        if engine.is_gradient_accumulation_boundary():
            lrs.append(engine.get_lr()[0])
        loss = engine(x)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    return losses, lrs


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("as_callable", [False, True], ids=["object", "callable"])
def test_zero_trains_at_the_schedulers_rates_as_torch_does(accumulation, as_callable):
    want_losses, want_lrs = torch_run(8, accumulation)
    engine, scheduler = zero_engine(accumulation, as_callable=as_callable)
    losses, lrs = zero_run(engine, batches(8 * accumulation))
    assert lrs == pytest.approx(want_lrs, rel=1e-12), "the learning rate of each step"
    assert losses == pytest.approx(want_losses, rel=1e-5, abs=1e-7)
    assert scheduler.last_epoch == 8, "stepped once per optimizer step"
    engine.destroy()


def test_groups_keep_their_scale_of_the_schedule():
    want_losses, _ = torch_run(6, two_groups=True)
    engine, _ = zero_engine(two_groups=True)
    losses, _ = zero_run(engine, batches(6))
    assert losses == pytest.approx(want_losses, rel=1e-5, abs=1e-7)
    engine.destroy()


def test_a_group_on_a_schedule_of_its_own_is_refused():
    model = Net()
    optimizer = optimizer_of(model, two_groups=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [warmup_then_cosine, lambda step: 1.0])
    cfg = config(0)
    del cfg["optimizer"]
    with refused("a group scheduled apart from group 0",
                 ["parameter group 1", "fixed scale of group 0", "same schedule"]):
        zero.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=cfg)
    # A schedule that parts the groups later is refused at that step, before it is taken.
    model = Net()
    optimizer = optimizer_of(model, two_groups=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda step: 1.0, lambda step: 1.0 if step < 2 else 0.5])
    engine, *_ = zero.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                 config=cfg)
    with refused("a group scheduled apart from group 0 at the second step",
                 ["parameter group 1", "fixed scale of group 0"]):
        for x in batches(3):
            engine.backward(engine(x))
            engine.step()
    assert engine.global_steps == 2
    engine.destroy()


def test_the_schedulers_state_comes_back_from_a_checkpoint(work):
    straight, _ = zero_engine()
    xs = batches(8)
    want, _ = zero_run(straight, xs)
    straight.destroy()
    first, _ = zero_engine()
    zero_run(first, xs[:4])
    first.save_checkpoint(work, tag="four")
    first.destroy()
    resumed, scheduler = zero_engine()
    resumed.load_checkpoint(work, tag="four")
    assert scheduler.last_epoch == 4
    losses, _ = zero_run(resumed, xs[4:])
    assert losses == want[4:], "the resumed schedule, and with it the steps, are the same"
    resumed.destroy()


def test_what_zero_cannot_follow_is_refused():
    model = Net()
    optimizer = optimizer_of(model)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine)
    with refused("a scheduler without its optimizer", ["pass that optimizer as optimizer="]):
        zero.initialize(model=model, lr_scheduler=scheduler, config=config(0))
    other = torch.optim.AdamW(Net().parameters(), lr=1e-2)
    cfg = config(0)
    del cfg["optimizer"]
    with refused("a scheduler of another optimizer", ["steps another optimizer"]):
        zero.initialize(model=model, optimizer=other, lr_scheduler=scheduler, config=cfg)
    with refused("a scheduler and a config scheduler section", ["keep one"]):
        zero.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                        config=dict(cfg, scheduler={"type": "WarmupLR"}))
    with refused("something that is no scheduler", ["not a torch LR scheduler"]):
        zero.initialize(model=model, optimizer=optimizer, lr_scheduler=object(), config=cfg)


def test_the_c_call_refuses_a_bad_rate_and_a_config_schedule():
    engine, *_ = zero.initialize(model=Net(), config=config(0))
    with refused("a negative learning rate", ["-1 is not a learning rate"]):
        _library.call("zero_set_learning_rate", engine._handle, -1.0)
    _library.call("zero_set_learning_rate", engine._handle, 0.125)
    assert engine.get_lr() == [0.125]
    engine.destroy()
    scheduled = config(0, scheduler={"type": "WarmupLR", "params": {"warmup_num_steps": 5}})
    engine, *_ = zero.initialize(model=Net(), config=scheduled)
    with refused("a rate beside the config's schedule", ["scheduler section (WarmupLR)"]):
        _library.call("zero_set_learning_rate", engine._handle, 0.125)
    engine.destroy()
