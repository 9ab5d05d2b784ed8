"""The front end under misuse: what a hostile test of zero.initialize found, each case a check
that fails on the code before its fix.

    check_faults.py CASE [WORK_DIR]      (tests/python/run.sh runs it, on 2 ranks where needed)

Cases:
  client-state       a checkpoint's client_state round-trips as plain data and tensors; an
                     object is refused at save; a crafted checkpoint whose client_state would
                     run code is refused at load, and the code does not run
  buffers            BatchNorm's running statistics and num_batches_tracked come back from a
                     checkpoint (evaluation equal), and a checkpoint of another model's buffers
                     is refused naming the buffer
  broadcast          (2 ranks) buffers drawn differently on each rank are rank 0's after
                     zero.initialize
  stage3-copies      at stage 3 module.state_dict() and copy.deepcopy(module) are refused with
                     what to use; at stage 0 both give the real values, and the copy carries no
                     zero hooks
  external           at stage 3 a tied head written F.linear(h, self.embed.weight) in the
                     model's forward is refused at the first forward naming the parameter and
                     register_external_parameter; registered, it trains as at stage 0
  loss-term          at stage 3 an L2 penalty on a weight, computed outside forward, is refused
                     naming the parameter
and the rank programs of tests/python/check_faults_job.sh, which runs them on 2 ranks and checks
that the job ends within seconds, failed, with the cause:
  raises             rank 1 raises at its second step while rank 0 trains on
  exits              rank 1 calls sys.exit(0) after one step while rank 0 trains on
  uneven             rank 0 trains 3 steps, rank 1 5, both ending normally
Prints "ok ..." per check and exits 0, or "FAIL ..." and exits 1.
"""

import copy
import os
import sys

import torch
import zero
from check_common import RANK, check, config, main, refused

class Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(6, 6)
        self.bn = torch.nn.BatchNorm1d(6)
        self.out = torch.nn.Linear(6, 1)

    def forward(self, x):
        return self.out(torch.relu(self.bn(self.lin(x)))).pow(2).mean()


def train(engine, steps, seed=1):
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x = torch.randn(2, 6, generator=generator)
        loss = engine(x)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    return losses


def case_client_state(work):
    engine, *_ = zero.initialize(model=Norms(), config=config(2))
    train(engine, 1)
    state = {"step": 3, "name": "run", "lr": [1e-3, 2e-3], "nested": {"t": torch.arange(5.0),
                                                                      "flag": True, "none": None}}
    engine.save_checkpoint(work / "ok", client_state=state)
    _, loaded = engine.load_checkpoint(work / "ok")
    check("client_state round-trips as plain data and tensors",
          loaded["step"] == 3 and loaded["lr"] == [1e-3, 2e-3] and loaded["nested"]["flag"]
          and loaded["nested"]["none"] is None and torch.equal(loaded["nested"]["t"],
                                                               torch.arange(5.0)), str(loaded))

    class Sampler:
        pass

    refused("save_checkpoint refuses an object in client_state, naming where",
            ["client_state['sampler']", "Sampler", "plain data", "state_dict"],
            lambda: engine.save_checkpoint(work / "object", client_state={"sampler": Sampler()}))

    # A checkpoint made by someone else: its user data a pickle whose loading runs a command.
    marker = work / "code-ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import ctypes
    import pickle
    from zero import _library
    blob = pickle.dumps({"step": 1, "payload": Evil()})
    buffer = ctypes.create_string_buffer(blob, len(blob))
    _library.call("zero_save_checkpoint", engine._handle, str(work / "evil").encode(), None,
                  buffer, len(blob))
    refused("load_checkpoint refuses a client_state that would run code",
            ["client_state", "run code", "posix.system"],
            lambda: engine.load_checkpoint(work / "evil"))
    check("and the code did not run", not marker.exists())
    engine.destroy()


def case_buffers(work):
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
    check("BatchNorm's running mean, variance and batch count come back from a checkpoint",
          torch.equal(bn.running_mean, saved["mean"]) and torch.equal(bn.running_var, saved["var"])
          and int(bn.num_batches_tracked) == int(saved["count"]) == 3,
          f"count {int(bn.num_batches_tracked)}")
    fresh.eval()
    with torch.no_grad():
        after = float(fresh(probe))
    check("and the evaluation after loading equals the one before saving", after == before,
          f"{after} vs {before}")
    fresh.destroy()

    class Other(Norms):
        def __init__(self):
            super().__init__()
            self.register_buffer("extra", torch.zeros(3))

    other, *_ = zero.initialize(model=Other(), config=config(3))
    refused("a checkpoint without one of the module's buffers is refused, naming it",
            ["extra", "load_module_strict=False"], lambda: other.load_checkpoint(work / "ckpt"))
    other.destroy()


def case_broadcast(work):
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
    check(f"rank {rank}: every buffer is rank 0's after zero.initialize",
          torch.equal(m.noise, torch.full((3,), 1.0))
          and torch.equal(m.mask, torch.tensor([True, True, False])) and int(m.step) == 0,
          f"{m.noise.tolist()} {m.mask.tolist()} {int(m.step)}")
    engine.destroy()


def case_stage3_copies(work):
    engine, *_ = zero.initialize(model=Norms(), config=config(3))
    train(engine, 1)
    refused("stage 3: module.state_dict() is refused, naming consolidated_state_dict",
            ["stage 3", "consolidated_state_dict"], lambda: engine.module.state_dict())
    refused("stage 3: state_dict() of a submodule too", ["consolidated_state_dict"],
            lambda: engine.module.lin.state_dict())
    refused("stage 3: copy.deepcopy(module) is refused, naming how to copy",
            ["deepcopy", "load_state_dict", "consolidated_state_dict"],
            lambda: copy.deepcopy(engine.module))
    full = engine.consolidated_state_dict()
    check("stage 3: consolidated_state_dict still gives finite values",
          all(torch.isfinite(t.float()).all() for t in full.values()))
    engine.destroy()

    engine, *_ = zero.initialize(model=Norms(), config=config(0))
    train(engine, 2)
    own = engine.module.state_dict()
    full = engine.consolidated_state_dict()
    check("stage 0: module.state_dict() gives the real values",
          all(torch.equal(own[k].float(), full[k].float()) for k in full))
    teacher = copy.deepcopy(engine.module)
    hooks = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in teacher.modules())
    check("stage 0: a deepcopy carries no zero hooks", hooks == 0, f"{hooks} hooks")
    probe = torch.randn(2, 6)
    teacher.eval()
    engine.eval()
    with torch.no_grad():
        check("stage 0: and computes what the engine computes",
              float(teacher(probe)) == float(engine(probe)))
    engine.train()
    losses = train(engine, 2, seed=5)
    check("stage 0: the engine trains on after the copy", all(map(lambda v: v == v, losses)))
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
        losses.append(float(loss))
    engine.destroy()
    return losses


def case_external(work):
    engine, *_ = zero.initialize(model=Tied(), config=config(3))
    ids = torch.randint(0, 11, (2, 5))
    refused("stage 3: a tied head outside the embedding's module is refused at the first "
            "forward", ["embed.weight", "register_external_parameter", "outside the forward"],
            lambda: engine(ids))
    engine.destroy()
    reference = tied_losses(0, False)
    registered = tied_losses(3, True)
    check("registered with register_external_parameter, stage 3 trains as stage 0",
          all(abs(a - b) <= 1e-6 * max(1.0, abs(a)) for a, b in zip(reference, registered)),
          f"{registered} vs {reference}")


def case_loss_term(work):
    engine, *_ = zero.initialize(model=Norms(), config=config(3))
    x = torch.randn(2, 6)

    def step():
        loss = engine(x) + 1e-3 * engine.module.lin.weight.pow(2).sum()
        engine.backward(loss)

    refused("stage 3: an L2 penalty on a weight outside forward is refused, naming it",
            ["lin.weight", "outside every module", "loss term"], step)
    engine.destroy()


def job(steps_of, action=None):
    """A rank program: `steps_of[rank]` steps at stage 2, `action(rank, step)` before each."""
    rank = RANK
    engine, *_ = zero.initialize(model=Norms(), config=config(2))
    generator = torch.Generator().manual_seed(rank)
    for step in range(steps_of[rank]):
        if action is not None:
            action(rank, step)
        loss = engine(torch.randn(2, 6, generator=generator))
        engine.backward(loss)
        engine.step()
    print(f"rank {rank}: {steps_of[rank]} steps done", flush=True)


def case_raises(work):
    def action(rank, step):
        if rank == 1 and step == 1:
            raise ValueError("boom on rank 1")
    job([20, 20], action)


def case_exits(work):
    def action(rank, step):
        if rank == 1 and step == 1:
            sys.exit(0)
    job([20, 20], action)


def case_uneven(work):
    job([3, 5])



if __name__ == "__main__":
    sys.exit(main(globals(), per_rank=lambda case: case == "broadcast"))
