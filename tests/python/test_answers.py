"""The front end's weak answers, each made a clear one: what a hostile test of zero.initialize
found answered vaguely or not at all, each case a check that failed before.

    check_answers.py CASE [WORK_DIR]      (tests/python/run.sh runs it, on 2 ranks where needed)

Cases (one rank unless said):
  config-text      a config file with comments loads as zero-config reads it; one with a key
                   given twice is refused, naming it (json.loads kept the last silently)
  micro-batch      train_micro_batch_size_per_gpu "auto" with nothing to supply it is refused
                   with advice for a Python caller, not zero-train's flags
  stuck            an exception in the model's own code between modules leaves the engine going;
                   after one raised inside a module's forward, the next call says the engine
                   cannot go on and why; after destroy, every call says so
  twice            zero.initialize on a module an engine already trains is refused
  precision        a bf16 model under an fp32 config is refused, naming both ways out
  skipped-block    a block skipped on some steps trains at stages 0-2 (said once: it got no
                   gradient) and is refused at stage 3 with what to do
  clip             the script's own clip_grad_norm_(model.parameters()) after engine.backward
                   is refused, pointing to gradient_clipping (it returned 0.0 and clipped
                   nothing); printing .grad, `is not None` and model.zero_grad() still work, and
                   training with accumulation goes on
  inplace          a parameter changed in place after initialize (p.data.clamp_, nn.init under
                   no_grad, between steps and between backward and step) trains as PyTorch's
                   AdamW does at stages 0-2 (stages 1-2 undid it at the next step); at stage 3
                   refused, naming safe_set_full_fp32_param, which sets a value at every stage
  rank-config      (2 ranks) ranks at different stages are refused at init, naming the key
  rank-model       (2 ranks) ranks with different models are refused at init, naming the rank
                   that differs and both entries
  port             (2 ranks) torch.distributed's rendezvous port is the same on every rank and
                   not DeepSpeed's fixed 29500; zero.init_distributed connects on it
Prints "ok ..." per check and exits 0, or "FAIL ..." and exits 1.
"""

import os
import sys
import warnings

import torch
import zero
from check_common import RANK, check, config, main, refused

def step(engine, x):
    loss = engine(x)
    engine.backward(loss)
    engine.step()
    return float(loss.detach())


class Failing(torch.nn.Linear):
    """A Linear that raises in its forward while `fail` is set."""

    fail = False

    def forward(self, x):
        if self.fail:
            raise RuntimeError("a bad batch")
        return super().forward(x)


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(4, 4)
        self.b = Failing(4, 4)
        self.c = torch.nn.Linear(4, 1)
        self.skip_b = False
        self.fail_after = False

    def forward(self, x):
        x = torch.tanh(self.a(x))
        if not self.skip_b:
            x = torch.tanh(self.b(x))
        if self.fail_after:
            raise RuntimeError("a check of the activations")
        return self.c(x).pow(2).mean()


def case_config_text(work):
    commented = work / "commented.json"
    commented.write_text('{\n  // the micro-batch\n  "train_micro_batch_size_per_gpu": 2, /* AdamW */\n'
                         '  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},\n'
                         '  "zero_optimization": {"stage": 1}\n}\n')
    engine, *_ = zero.initialize(model=Small(), config=str(commented))
    check("a config with // and /* */ comments loads", engine.zero_optimization_stage() == 1)
    engine.destroy()

    class PathLike:  # an os.PathLike that is not a pathlib.Path
        def __fspath__(self):
            return str(commented)

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Small()

        def forward(self, x):
            return self.inner(x)

    # block_classes as a generator of classes: read once, all of it (Small is then one unit).
    engine, *_ = zero.initialize(model=Outer(), config=PathLike(),
                                 block_classes=(c for c in [Small]))
    check("a config given as any os.PathLike loads", engine.zero_optimization_stage() == 1)
    units = [unit.name for unit in engine._hooks.units]
    check("block_classes given as a generator of classes keeps them", units == ["inner"],
          str(units))
    refused("mean_across_ranks with nothing to average says what to pass", ["no values"],
            lambda: engine.mean_across_ranks())
    engine.destroy()
    refused("after destroy, checkpoint_user_data says the engine was destroyed", ["destroyed"],
            lambda: engine.checkpoint_user_data())
    model = Small()
    groups = [{"params": list(model.a.parameters()), "lr": 1e-3},
              {"params": list(model.b.parameters()) + list(model.c.parameters())}]
    refused("a group's lr with the config's lr at 0 is refused, not dropped",
            ["parameter group 0", "optimizer.params.lr"],
            lambda: zero.initialize(model=model, model_parameters=groups,
                                    config=config(optimizer={"type": "AdamW",
                                                             "params": {"lr": 0.0}})))
    twice = work / "twice.json"
    twice.write_text('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1, '
                     '"stage": 3}, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}}')
    refused("a key given twice is refused, naming it", ["duplicate key", "zero_optimization.stage",
                                                        str(twice)],
            lambda: zero.initialize(model=Small(), config=str(twice)))


def case_micro_batch(work):
    cfg = config()
    cfg["train_micro_batch_size_per_gpu"] = "auto"
    refused("micro-batch \"auto\" with nothing to supply it: advice for Python",
            ["train_micro_batch_size_per_gpu", "DataLoader", "batch_size"],
            lambda: zero.initialize(model=Small(), config=cfg), absent=["--micro-batch"])


def case_stuck(work):
    model = Small()
    engine, *_ = zero.initialize(model=model, config=config(2))
    step(engine, torch.ones(2, 4))
    model.fail_after = True
    try:
        engine(torch.ones(2, 4))
    except RuntimeError:
        pass
    model.fail_after = False
    losses = [step(engine, torch.ones(2, 4)) for _ in range(2)]
    check("an exception in the model's own code, between modules, leaves the engine going",
          losses[1] < losses[0], str(losses))
    model.b.fail = True
    try:
        engine(torch.ones(2, 4))
    except RuntimeError:
        pass
    model.b.fail = False
    refused("after an exception inside a module's forward, the engine says it cannot go on",
            ["cannot go on", "RuntimeError", "a bad batch", "destroy", "checkpoint"],
            lambda: step(engine, torch.ones(2, 4)))
    engine.destroy()
    refused("after destroy, a call says the engine was destroyed", ["destroyed"],
            lambda: engine.get_lr())


def case_twice(work):
    model = Small()
    engine, *_ = zero.initialize(model=model, config=config(3))
    refused("zero.initialize on a module an engine trains is refused",
            ["already", "destroy", "restore_module"],
            lambda: zero.initialize(model=model, config=config(3)))
    refused("and on a submodule of it", ["its submodule", "already"],
            lambda: zero.initialize(model=torch.nn.Sequential(model.a), config=config(0)))
    engine.destroy(restore_module=True)
    again, *_ = zero.initialize(model=model, config=config(3))
    losses = [step(again, torch.ones(2, 4)) for _ in range(3)]
    check("after destroy(restore_module=True) the module can be trained again",
          all(v == v for v in losses) and losses[2] < losses[0], str(losses))
    again.destroy()

    # A failure after the engine exists (here the dataloader's, on data that is no dataset): the
    # engine goes with it, the module keeps its weights and takes a new engine, and nothing is
    # left for the exit's teardown to destroy again.
    model = Small()
    before = [p.detach().clone() for p in model.parameters()]
    try:
        zero.initialize(model=model, config=config(3), training_data=object())
        check("zero.initialize with data that is no dataset fails", False, "no error")
    except TypeError as error:
        check("zero.initialize with data that is no dataset fails", True, str(error))
    check("after it the module keeps its weights",
          all(torch.equal(a, b) for a, b in zip(before, model.parameters())))
    third, *_ = zero.initialize(model=model, config=config(3))
    losses = [step(third, torch.ones(2, 4)) for _ in range(2)]
    check("and takes a new engine", losses[1] < losses[0], str(losses))
    third.destroy()
    check("no engine is left for the exit", not zero._lifetime._live,
          str(zero._lifetime._live))


def case_precision(work):
    refused("a bf16 model under an fp32 config is refused, naming both ways out",
            ["bfloat16", "fp32", "bf16", "model.float()"],
            lambda: zero.initialize(model=Small().to(torch.bfloat16), config=config()))


def case_skipped_block(work):
    for stage in (0, 1, 2):
        model = Small()
        engine, *_ = zero.initialize(model=model, config=config(stage))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            losses = []
            for s in range(4):
                model.skip_b = s % 2 == 1
                losses.append(step(engine, torch.full((2, 4), 0.5 + s)))
        said = [str(w.message) for w in caught if "got no gradient" in str(w.message)]
        check(f"stage {stage}: a block skipped on some steps trains, said once",
              all(v == v for v in losses) and len(said) == 1 and "2 trainable" in said[0]
              and "b.bias" in said[0] and "DeepSpeed" in said[0],
              f"{len(said)} warnings: {said[:1]}")
        engine.destroy()
    model = Small()
    engine, *_ = zero.initialize(model=model, config=config(3))
    step(engine, torch.ones(2, 4))
    model.skip_b = True
    refused("stage 3: a skipped block is refused, saying what to do",
            ["stage 3", "block_classes", "stage 0-2"], lambda: step(engine, torch.ones(2, 4)))


def case_clip(work):
    for stage in (0, 1, 2, 3):
        model = Small()
        engine, *_ = zero.initialize(model=model, config=config(
            stage, gradient_accumulation_steps=2, gradient_clipping=1.0))
        loss = engine(torch.ones(2, 4))
        engine.backward(loss)
        params = list(model.parameters())
        refused(f"stage {stage}: clip_grad_norm_ after engine.backward is refused",
                ["a.weight.grad", "gradient_clipping", "get_global_grad_norm"],
                lambda: torch.nn.utils.clip_grad_norm_(params, 1.0))
        refused(f"stage {stage}: so is a hand-written gradient norm", ["gradient_clipping"],
                lambda: sum(float(p.grad.norm()) for p in params))
        check(f"stage {stage}: .grad prints, is not None and zero_grad(set_to_none=False) works",
              "held by zero" in repr(params[0].grad)
              and all(p.grad is not None and p.grad.shape == p.shape for p in params)
              and model.zero_grad(set_to_none=False) is None)
        engine.step()
        losses = [step(engine, torch.ones(2, 4)) for _ in range(6)]
        check(f"stage {stage}: training with accumulation goes on",
              losses[-1] < losses[0] and engine.get_global_grad_norm() > 0, str(losses))
        model.zero_grad()
        check(f"stage {stage}: model.zero_grad() leaves .grad None",
              all(p.grad is None for p in params))
        engine.destroy()


def _edited_run(make_step, edit_at=(2, 4)):
    """Six steps of make_step(i), with the parameters changed in place before steps edit_at[0]
    (a clamp through .data, a zeros_ under no_grad) and, after backward, at step edit_at[1]."""
    losses = []
    for i in range(6):
        if i == edit_at[0]:
            MODEL.a.weight.data.clamp_(-0.05, 0.05)
            with torch.no_grad():
                torch.nn.init.zeros_(MODEL.b.bias)
        losses.append(make_step(i))
    return losses


MODEL = None


def case_inplace(work):
    global MODEL
    x = torch.linspace(-1, 1, 8).reshape(2, 4)

    def torch_run():
        global MODEL
        MODEL = Small()
        optimizer = torch.optim.AdamW(MODEL.parameters(), lr=1e-2, weight_decay=0.01, eps=1e-8)

        def one(i):
            optimizer.zero_grad()
            loss = MODEL(x + i)
            loss.backward()
            if i == 4:
                MODEL.c.weight.data.mul_(0.5)
            optimizer.step()
            return float(loss.detach())
        return _edited_run(one)

    want = torch_run()
    for stage, extra in ((0, {}), (1, {}), (2, {}), (2, {"bf16": {"enabled": True}})):
        MODEL = Small()
        if extra:
            MODEL = MODEL.to(torch.bfloat16)
        cfg = config(stage, **extra)
        cfg["optimizer"]["params"].update(weight_decay=0.01, eps=1e-8)
        engine, *_ = zero.initialize(model=MODEL, config=cfg)

        def one(i):
            loss = engine(x.to(MODEL.a.weight.dtype) + i)
            engine.backward(loss)
            if i == 4:
                MODEL.c.weight.data.mul_(0.5)
            engine.step()
            return float(loss.detach())
        got = _edited_run(one)
        tolerance = 3e-2 if extra else 1e-5
        check(f"stage {stage}{' bf16' if extra else ''}: in-place changes train as PyTorch's",
              all(abs(a - b) <= tolerance * max(1.0, abs(b)) for a, b in zip(got, want)),
              f"zero {got} torch {want}")
        import copy
        copied = copy.deepcopy(MODEL)
        check(f"stage {stage}: a deepcopy has plain nn.Parameters of the values",
              type(copied.a.weight) is torch.nn.Parameter
              and torch.equal(copied.a.weight, MODEL.a.weight.detach()))
        engine.destroy()
        check(f"stage {stage}: after destroy the parameters are plain nn.Parameter again",
              type(MODEL.a.weight) is torch.nn.Parameter)

    from zero.utils import safe_get_full_fp32_param, safe_set_full_fp32_param
    MODEL = Small()
    engine, *_ = zero.initialize(model=MODEL, config=config(3))
    step(engine, x)
    value = torch.full((4, 4), 0.25)
    safe_set_full_fp32_param(MODEL.a.weight, value)
    check("stage 3: safe_set_full_fp32_param sets the value, safe_get reads it back",
          torch.equal(safe_get_full_fp32_param(MODEL.a.weight), value))
    step(engine, x)
    moved = safe_get_full_fp32_param(MODEL.a.weight)
    check("stage 3: the next step starts from it", 0 < float((moved - value).abs().max()) < 0.02,
          str(moved))

    class RenormLinear(torch.nn.Linear):
        """Rescales its weight in place inside its forward (as nn.Embedding's max_norm does)."""

        def forward(self, x):
            with torch.no_grad():
                self.weight.mul_(0.5)
            return super().forward(x).pow(2).mean()
    renorm = torch.nn.Sequential(RenormLinear(4, 1))
    engine3, *_ = zero.initialize(model=renorm, config=config(3))
    refused("stage 3: a change in place inside forward is refused, naming the way that works",
            ["0.weight", "changed in place", "safe_set_full_fp32_param", "stage 0-2"],
            lambda: [step(engine3, x), step(engine3, x)])
    refused("safe_set_full_fp32_param of a tensor zero does not train is refused",
            ["not a parameter of a module a live zero engine trains"],
            lambda: safe_set_full_fp32_param(torch.nn.Parameter(torch.ones(2)), torch.ones(2)))


def case_rank_config(work):
    refused(f"rank {RANK}: ranks at different stages are refused at init, naming the key",
            ["configs differ", "zero_optimization.stage=3 on rank 0", "stage=2 on rank 1"],
            lambda: zero.initialize(model=Small(), config=config(3 if RANK == 0 else 2)))


def case_rank_model(work):
    model = Small()
    if RANK == 1:
        model.b = torch.nn.Linear(4, 4, bias=False)
    refused(f"rank {RANK}: ranks with different models are refused at init, naming rank 1",
            ["rank 1 registered differently from rank 0", "b.bias", "on rank 0"],
            lambda: zero.initialize(model=model, config=config(2)))


def case_port(work):
    port = os.environ.get("MASTER_PORT")
    check(f"rank {RANK}: zero-run gives a MASTER_PORT, not 29500", port not in (None, "29500"),
          str(port))
    from zero.distributed import job_port
    check(f"rank {RANK}: without one, the port derives from the job's id",
          job_port() is not None and 20000 <= job_port() < 60000, str(job_port()))
    zero.init_distributed(dist_backend="gloo")
    import torch.distributed as dist
    value = torch.tensor([int(port or 0)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    check(f"rank {RANK}: init_distributed connects every rank on it",
          int(value) == int(port or 0))
    dist.destroy_process_group()



if __name__ == "__main__":
    sys.exit(main(globals()))
