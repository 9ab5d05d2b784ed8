"""Bad use of the front end gets a clear error, never a silent wrong step (one rank).

Each refusal builds a small model, makes one mistake, and requires a ZeroError whose message
names the mistake and what to do; three more tests check uses that look alike and must work.
"""

import pytest
import torch

import zero
from zero_checks import refused

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {"stage": 3},
}


class Tiny(torch.nn.Module):
    """Three blocks whose order the test can change."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
        self.order = [0, 1, 2]

    def forward(self, x):
        for i in self.order:
            x = torch.tanh(self.blocks[i](x))
        return x.pow(2).mean()


def engine_of(model=None, config=None, **kwargs):
    model = model or Tiny()
    if "config_params" not in kwargs:
        kwargs["config"] = config or dict(CONFIG)
    engine, *_ = zero.initialize(model=model, **kwargs)
    return engine


def one_step(engine):
    loss = engine(torch.ones(2, 8))
    engine.backward(loss)
    engine.step()


def replaced():
    engine = engine_of()
    one_step(engine)
    engine.module.blocks[1].weight = torch.nn.Parameter(torch.zeros(8, 8))
    one_step(engine)


def resized():
    engine = engine_of(config={**CONFIG, "zero_optimization": {"stage": 1}})
    one_step(engine)
    engine.module.blocks[0].bias.data = torch.zeros(5)
    one_step(engine)


def out_of_order():
    engine = engine_of()
    one_step(engine)
    engine.module.order = [0, 2, 1]
    one_step(engine)


def backward_twice():
    engine = engine_of()
    loss = engine(torch.ones(2, 8))
    engine.backward(loss, retain_graph=True)
    engine.backward(loss)


def plain_backward():
    engine = engine_of()
    engine(torch.ones(2, 8)).backward()


def no_such_optimizer():
    model = Tiny()
    config = {k: v for k, v in CONFIG.items() if k != "optimizer"}
    engine_of(model, config, optimizer=torch.optim.RMSprop(model.parameters()))


def both_optimizers():
    model = Tiny()
    engine_of(model, optimizer=torch.optim.AdamW(model.parameters()))


def scheduler_object():
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    engine_of(model, lr_scheduler=torch.optim.lr_scheduler.StepLR(optimizer, 1))


def both_schedulers():
    schedule = {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3}}
    engine_of(config_params={**CONFIG, "scheduler": schedule}, lr_scheduler=schedule)


def amp_key():
    engine_of(config={**CONFIG, "amp": {"enabled": True}})


def group_key():
    model = Tiny()
    engine_of(model, model_parameters=[{"params": list(model.parameters()), "betas": (0.9, 0.9)}])


def unknown_block():
    engine_of(block_classes=["NoSuchBlock"])


def step_mid_pass():
    engine = engine_of()
    engine(torch.ones(2, 8))
    engine.step()


# (what, the words its message must have, the mistake); each a test, named by the mistake.
CASES = [
    ("a parameter replaced after initialize", ["replaced", "blocks.1.weight"], replaced),
    ("a parameter resized after initialize", ["another shape", "blocks.0.bias"], resized),
    ("modules called out of the recorded order", ["out of the recorded order", "blocks"],
     out_of_order),
    ("backward twice", ["backward called twice", "engine.step()"], backward_twice),
    ("loss.backward() instead of engine.backward", ["engine.backward(loss)"], plain_backward),
    ("an optimizer zero does not have", ["no optimizer RMSprop"], no_such_optimizer),
    ("an optimizer in the config and as an argument", ["keep one"], both_optimizers),
    ("a torch scheduler without the optimizer it steps",
     ["StepLR", "pass that optimizer as optimizer=", "scheduler section"], scheduler_object),
    ("a scheduler in the config and as an argument", ["keep one", "lr_scheduler"],
     both_schedulers),
    ("a config key the front end cannot honour", ["'amp'"], amp_key),
    ("a parameter group key zero has no use for", ["betas"], group_key),
    ("block classes the model does not have", ["NoSuchBlock"], unknown_block),
    ("a step after a forward without backward", ["without engine.backward(loss)"],
     step_mid_pass),
]


@pytest.mark.parametrize("what, words, mistake", CASES,
                         ids=[mistake.__name__ for _, _, mistake in CASES])
def test_a_mistake_is_refused_naming_it(what, words, mistake):
    with refused(what, words):
        mistake()


def test_a_client_adamw_runs_as_the_configs():
    """Not a refusal: a torch.optim.AdamW becomes the config's optimizer, with its lr."""
    model = Tiny()
    config = {k: v for k, v in CONFIG.items() if k != "optimizer"}
    engine = engine_of(model, config, optimizer=torch.optim.AdamW(model.parameters(), lr=3e-3))
    one_step(engine)
    assert engine.get_lr() == [3e-3], f"the AdamW's lr 3e-3 became {engine.get_lr()}"
    assert engine.config_value("optimizer.type").lower() == "adamw", (
        f"a torch.optim.AdamW became optimizer {engine.config_value('optimizer.type')}")


def test_a_scheduler_dict_runs_and_destroy_restores_the_weights():
    """Not a refusal: a scheduler section given as lr_scheduler= (with config_params=) runs;
    destroy(restore_module=True) gives the module its trained weights back as plain tensors."""
    model = Tiny()
    schedule = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3,
                                               "warmup_num_steps": 4, "warmup_type": "linear"}}
    engine, _, _, scheduler = zero.initialize(model=model, config_params=dict(CONFIG),
                                              lr_scheduler=schedule)
    for _ in range(3):
        one_step(engine)
    # After the third step DeepSpeed's scheduler stands at iteration 2 of the linear warmup
    # (the fourth step's): 0 + (1e-3 - 0) * 2/4.
    assert scheduler.get_last_lr() == [0.0 + (1e-3 - 0.0) * (2 / 4)], (
        f"after 3 steps of the warmup the lr is {scheduler.get_last_lr()}")
    state = engine.consolidated_state_dict()
    engine.destroy(restore_module=True)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), state[name]), (
            f"destroy(restore_module=True) does not give {name} its trained values")
    loss = model(torch.ones(2, 8))
    assert torch.isfinite(loss), f"the restored module computes {loss}"


def test_stage3_parameters_keep_shape_and_dtype_outside_forward():
    """Not a refusal: at stage 3 a parameter's shape and dtype read outside forward are its own,
    and its values read there are NaN, not silently stale."""
    engine = engine_of()
    one_step(engine)
    weight = engine.module.blocks[0].weight
    assert weight.shape == (8, 8) and weight.dtype == torch.float32, (
        f"outside forward a (8, 8) float32 parameter is {tuple(weight.shape)} {weight.dtype}")
    assert torch.isnan(weight).all(), "outside forward a parameter's values are not NaN"
    full = engine.consolidated_state_dict()["blocks.0.weight"]
    assert full.shape == (8, 8) and torch.isfinite(full).all(), (
        f"consolidated_state_dict gives blocks.0.weight as {tuple(full.shape)}: {full}")
