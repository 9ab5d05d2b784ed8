"""The front end's hooks against the C API's contract, on a fake engine that holds zero to the
letter (one process, no libzero).

zero.h says a stage-3 parameter's memory is valid only between the pre and post hook of a
module that uses it, and a gradient buffer only between pre_backward and post_backward. The
real engine happens to gather a parameter back at the same address, so the training tests
cannot see a front end that keeps using memory after its hook closed. This fake gathers into
fresh memory at every pre hook, fills what a post hook released with NaN, and checks that
every gradient arrives before its post_backward: a stale view (autograd's saved `weight.t()`
of an earlier gather, a .grad kept past its hook) shows as NaN or a missing gradient.
"""

import ctypes

import pytest
import torch

import zero._hooks as hooks_module
from zero._hooks import Param, UnitHooks
from zero._units import choose_units


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)

    def forward(self, x):
        return torch.tanh(self.linear(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Linear(5, 6)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(6, 2)

    def forward(self, x, checkpointed=False):
        x = self.embed(x)
        for block in self.blocks:
            if checkpointed:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x).pow(2).mean()


class FakeZero:
    """Stage 3 by the letter: fresh memory per gather, NaN after release."""

    def __init__(self, values, units):
        self.values = values                    # the full value of each parameter
        self.users = [[] for _ in values]
        for unit in units:
            for i in unit.params:
                self.users[i].append(unit.index)
        self.live = {}                          # param -> (tensor, open units using it)
        self.grads = {}                         # param -> gradient buffer while open
        self.reduced = {}                       # param -> the gradient it reduced
        self.keep = []                          # every buffer ever handed out stays allocated
        self.open_backward = set()
        self.uses_left = {}
        self.units = units

    def __call__(self, name, handle, *args):
        getattr(self, name[len("zero_"):])(*args)

    def _gather(self, unit):
        for i in self.units[unit].params:
            tensor, count = self.live.get(i, (None, 0))
            if tensor is None:
                tensor = self.values[i].clone()
                self.keep.append(tensor)
            self.live[i] = (tensor, count + 1)

    def _release(self, unit):
        for i in self.units[unit].params:
            tensor, count = self.live[i]
            if count == 1:
                tensor.fill_(float("nan"))
                del self.live[i]
            else:
                self.live[i] = (tensor, count - 1)

    def pre_forward(self, unit, stream):
        self._gather(unit)

    def post_forward(self, unit, stream):
        self._release(unit)

    def pre_backward(self, unit, stream):
        self._gather(unit)
        self.open_backward.add(unit)
        for i in self.units[unit].params:
            if i not in self.grads:
                self.grads[i] = torch.zeros_like(self.values[i])
                self.keep.append(self.grads[i])
                self.uses_left[i] = len(self.users[i])

    def post_backward(self, unit, stream):
        self.open_backward.discard(unit)
        for i in self.units[unit].params:
            self.uses_left[i] -= 1
            if self.uses_left[i] == 0:
                self.reduced[i] = self.grads[i].clone()
                self.grads[i].fill_(float("nan"))
                del self.grads[i]
        self._release(unit)

    def param_data(self, index, out):
        out._obj.value = self.live[index][0].data_ptr()

    def grad_buffer(self, index, out):
        out._obj.value = self.grads[index].data_ptr()

    def set_train(self, mode):
        pass


@pytest.mark.parametrize("checkpointed", [False, True],
                         ids=["plain", "activation-checkpointing"])
def test_stage3_on_fresh_memory_per_gather_gives_pytorchs_gradients(checkpointed, monkeypatch):
    model = Model()
    reference = Model()
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    reference(x).backward()
    units = choose_units(model, [Block])
    params = [Param(i, name, p, True) for i, (name, p) in enumerate(model.named_parameters())]
    for unit in units:
        for i in unit.params:
            params[i].units.append(unit.index)
    fake = FakeZero([p.param.detach().clone() for p in params], units)
    # The hooks call the fake, for this test only: the other modules' tests call libzero.
    monkeypatch.setattr(hooks_module, "call", fake)
    hooks = UnitHooks(ctypes.c_void_p(1), model, units, params, 3, torch.device("cpu"),
                      torch.float32)
    with hooks.saved_tensors():
        loss = model(x, checkpointed)
    hooks.run_backward(loss, False)
    failures = []
    for i, (name, p) in enumerate(reference.named_parameters()):
        got = fake.reduced.get(i)
        if got is None:
            failures.append(f"{name}: no gradient reduced")
        elif not torch.allclose(got, p.grad, rtol=1e-6, atol=1e-7):
            failures.append(f"{name}: gradient differs by {(got - p.grad).abs().max().item()}")
    assert not failures, (
        f"{len(fake.reduced)} gradients reduced, wrong or missing:" + "".join(
            f"\n  {f}" for f in failures))
