"""The front end under misuse: what a hostile test of zero.initialize found, each test one that
fails on the code before its fix. One rank unless marked.

  client_state     a checkpoint's client_state round-trips as plain data and tensors; an object
                   is refused at save; a crafted checkpoint whose client_state would run code is
                   refused at load, and the code does not run
  buffers          BatchNorm's running statistics and num_batches_tracked come back from a
                   checkpoint (evaluation equal), and a checkpoint of another model's buffers is
                   refused naming the buffer
  broadcast        (2 ranks) buffers drawn differently on each rank are rank 0's after
                   zero.initialize
  stage3_copies    at stage 3 module.state_dict() and copy.deepcopy(module) are refused with what
                   to use; at stage 0 both give the real values, and the copy carries no zero
                   hooks
  external         at stage 3 a tied head written F.linear(h, self.embed.weight) in the model's
                   forward is refused at the first forward naming the parameter and
                   register_external_parameter; registered, it trains as at stage 0
  loss_term        at stage 3 an L2 penalty on a weight, computed outside forward, is refused
                   naming the parameter

A rank's failure ending the job is fault_job.py's, run by check_faults_job.sh: those programs
fail by design, so they are no tests here.
"""

import copy
import ctypes
import os
import pickle

import pytest
import torch

import zero
from zero import _library
from zero_checks import RANK, Norms, config, refused


def train(engine, steps, seed=1):
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(2, 6, generator=generator)
        loss = engine(x)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    return losses


def test_client_state(work):
    engine, *_ = zero.initialize(model=Norms(), config=config(2))
    train(engine, 1)
    state = {"step": 3, "name": "run", "lr": [1e-3, 2e-3], "nested": {"t": torch.arange(5.0),
                                                                      "flag": True, "none": None}}
    engine.save_checkpoint(work / "ok", client_state=state)
    _, loaded = engine.load_checkpoint(work / "ok")
    assert (loaded["step"] == 3 and loaded["lr"] == [1e-3, 2e-3] and loaded["nested"]["flag"]
            and loaded["nested"]["none"] is None
            and torch.equal(loaded["nested"]["t"], torch.arange(5.0))), (
        f"client_state does not round-trip as plain data and tensors: {loaded}")

    class Sampler:
        pass

    with refused("save_checkpoint refuses an object in client_state, naming where",
                 ["client_state['sampler']", "Sampler", "plain data", "state_dict"]):
        engine.save_checkpoint(work / "object", client_state={"sampler": Sampler()})

    # A checkpoint made by someone else: its user data a pickle whose loading runs a command.
    marker = work / "code-ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    blob = pickle.dumps({"step": 1, "payload": Evil()})
    buffer = ctypes.create_string_buffer(blob, len(blob))
    _library.call("zero_save_checkpoint", engine._handle, str(work / "evil").encode(), None,
                  buffer, len(blob))
    with refused("load_checkpoint refuses a client_state that would run code",
                 ["client_state", "run code", "posix.system"]):
        engine.load_checkpoint(work / "evil")
    assert not marker.exists(), "loading the refused client_state ran its code"
    engine.destroy()


def test_buffers(work):
    engine, *_ = zero.initialize(model=Norms(), config=config(3))
    train(engine, 3)
    bn = engine.module.bn
    saved = {"mean": bn.running_mean.clone(), "var": bn.running_var.clone(),
             "count": bn.num_batches_tracked.clone()}
    engine.eval()
    probe = torch.randn(4, 6, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        before = float(engine(probe))
    engine.train()
    engine.save_checkpoint(work / "ckpt")
    engine.destroy()

    fresh, *_ = zero.initialize(model=Norms(), config=config(3))
    fresh.load_checkpoint(work / "ckpt")
    bn = fresh.module.bn
    assert (torch.equal(bn.running_mean, saved["mean"])
            and torch.equal(bn.running_var, saved["var"])
            and int(bn.num_batches_tracked) == int(saved["count"]) == 3), (
        "BatchNorm's running mean, variance and batch count do not come back from a checkpoint: "
        f"count {int(bn.num_batches_tracked)}")
    fresh.eval()
    with torch.no_grad():
        after = float(fresh(probe))
    assert after == before, (
        f"the evaluation after loading differs from the one before saving: {after} vs {before}")
    fresh.destroy()

    class Other(Norms):
        def __init__(self):
            super().__init__()
            self.register_buffer("extra", torch.zeros(3))

    other, *_ = zero.initialize(model=Other(), config=config(3))
    with refused("a checkpoint without one of the module's buffers is refused, naming it",
                 ["extra", "load_module_strict=False"]):
        other.load_checkpoint(work / "ckpt")
    other.destroy()


@pytest.mark.ranks(2)
def test_broadcast():
    rank = RANK

    class Drawn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("noise", torch.full((3,), float(rank + 1)))
            self.register_buffer("mask", torch.tensor([rank == 0, True, rank == 1]))
            self.register_buffer("step", torch.tensor(rank * 7, dtype=torch.int64))

        def forward(self, x):
            return (self.lin(x) * self.noise.sum()).pow(2).mean()

    engine, *_ = zero.initialize(model=Drawn(), config=config(2))
    m = engine.module
    assert (torch.equal(m.noise, torch.full((3,), 1.0))
            and torch.equal(m.mask, torch.tensor([True, True, False])) and int(m.step) == 0), (
        f"rank {rank}: the buffers are not rank 0's after zero.initialize: "
        f"{m.noise.tolist()} {m.mask.tolist()} {int(m.step)}")
    engine.destroy()


def test_stage3_copies():
    engine, *_ = zero.initialize(model=Norms(), config=config(3))
    train(engine, 1)
    # module.state_dict() answers as DeepSpeed's: a sharded parameter is an empty tensor,
    # which load_state_dict refuses by its size instead of loading NaN; buffers are whole.
    own = engine.module.state_dict()
    params = dict(engine.module.named_parameters())
    assert all(own[name].numel() == 0 and own[name].dtype == p.dtype
               for name, p in params.items()), (
        "stage 3: module.state_dict() gives its placeholders' values, not empty tensors: "
        f"{ {name: tuple(own[name].shape) for name in params} }")
    assert own["bn.running_var"].shape == (6,) and torch.isfinite(own["bn.running_var"]).all()
    with pytest.raises(RuntimeError, match="size mismatch"):
        Norms().load_state_dict(own)
    assert engine.module.lin.state_dict()["weight"].numel() == 0, "a submodule's alike"
    # DeepSpeed's marks, which scripts read to find what to gather; whole values inside
    # GatheredParameters, and in state_dict() there
    weight = engine.module.lin.weight
    assert (weight.ds_id, weight.ds_shape, weight.ds_numel) == (
        list(params).index("lin.weight"), torch.Size([6, 6]), 36), (weight.ds_id, weight.ds_shape)
    assert weight.ds_status == zero.zero.ZeroParamStatus.NOT_AVAILABLE
    with zero.zero.GatheredParameters([weight]):
        assert weight.ds_status == zero.zero.ZeroParamStatus.AVAILABLE
        inside = engine.module.lin.state_dict()["weight"]
        assert inside.shape == (6, 6) and torch.isfinite(inside).all()
    assert weight.ds_status == zero.zero.ZeroParamStatus.NOT_AVAILABLE
    with refused("stage 3: copy.deepcopy(module) is refused, naming how to copy",
                 ["deepcopy", "load_state_dict", "consolidated_state_dict"]):
        copy.deepcopy(engine.module)
    full = engine.consolidated_state_dict()
    assert all(torch.isfinite(t.float()).all() for t in full.values()), (
        "stage 3: consolidated_state_dict gives values that are not finite")
    engine.destroy()
    assert not any(hasattr(p, "ds_id") or hasattr(p, "ds_status")
                   for p in engine.module.parameters()), "destroy() leaves DeepSpeed's marks"

    engine, *_ = zero.initialize(model=Norms(), config=config(0))
    train(engine, 2)
    own = engine.module.state_dict()
    full = engine.consolidated_state_dict()
    assert all(torch.equal(own[k].float(), full[k].float()) for k in full), (
        "stage 0: module.state_dict() does not give the real values")
    teacher = copy.deepcopy(engine.module)
    hooks = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in teacher.modules())
    assert hooks == 0, f"stage 0: a deepcopy carries {hooks} zero hooks"
    probe = torch.randn(2, 6)
    teacher.eval()
    engine.eval()
    with torch.no_grad():
        copied, trained = float(teacher(probe)), float(engine(probe))
    assert copied == trained, f"stage 0: the copy computes {copied}, the engine {trained}"
    engine.train()
    losses = train(engine, 2, seed=5)
    assert all(v == v for v in losses), f"stage 0: after the copy the engine trains to {losses}"
    engine.destroy()


class Tied(torch.nn.Module):
    """A GPT-like pattern: the head tied to the embedding, written in the model's forward."""

    def __init__(self, register=False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(11, 8)
        self.block = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        if register:
            zero.register_external_parameter(self, self.embed.weight)

    def forward(self, ids):
        h = self.norm(torch.tanh(self.block(self.embed(ids))))
        logits = torch.nn.functional.linear(h, self.embed.weight)
        return torch.nn.functional.cross_entropy(logits.view(-1, 11), ids.view(-1))


def tied_losses(stage, register):
    engine, *_ = zero.initialize(model=Tied(register), config=config(stage))
    generator = torch.Generator().manual_seed(3)
    losses = []
    for _ in range(3):
        ids = torch.randint(0, 11, (2, 5), generator=generator)
        loss = engine(ids)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    engine.destroy()
    return losses


def test_external():
    engine, *_ = zero.initialize(model=Tied(), config=config(3))
    ids = torch.randint(0, 11, (2, 5))
    with refused("stage 3: a tied head outside the embedding's module is refused at the first "
                 "forward", ["embed.weight", "register_external_parameter", "outside the forward"]):
        engine(ids)
    engine.destroy()
    reference = tied_losses(0, False)
    registered = tied_losses(3, True)
    assert all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(reference, registered)), (
        "registered with register_external_parameter, stage 3 does not train as stage 0: "
        f"{registered} vs {reference}")


def test_loss_term():
    engine, *_ = zero.initialize(model=Norms(), config=config(3))
    x = torch.randn(2, 6)
    with refused("stage 3: an L2 penalty on a weight outside forward is refused, naming it",
                 ["lin.weight", "outside every module", "loss term"]):
        loss = engine(x) + 1e-3 * engine.module.lin.weight.pow(2).sum()
        engine.backward(loss)
    engine.destroy()
