"""The modules a DeepSpeed script imports beside deepspeed.initialize, on zero (one rank):
zero.accelerator, zero.comm, zero.ops, zero.checkpointing, zero.moe, zero.pipe and zero.utils'
logger, each against torch's answers or DeepSpeed's own (DeepSpeed 0.19.8 runs in a subprocess
on the CPU, `deepspeed_answers`, so that importing it changes nothing here).

  accelerator    one object; its answers are torch's; the CPU one's are DeepSpeed's CPU
                 accelerator's (but fp16, which zero trains on the CPU); memory from psutil or 0
  comm           without torch.distributed one rank answers 0/1 and each collective is the
                 identity; several ranks are refused; over a gloo group the results equal
                 torch.distributed's; init_distributed is zero.init_distributed
  ops            FusedAdam, DeepSpeedCPUAdam (both w-modes, with parameter groups), FusedLion and
                 DeepSpeedCPUAdagrad through zero.initialize train step for step as the torch
                 optimizer (or config) they stand for; bias_correction=False as DeepSpeed's own
                 DeepSpeedCPUAdam; amsgrad, fp32_optimizer_states=False, FusedLamb and step()
                 refused
  checkpointing  checkpoint's gradients equal DeepSpeed's and the unchanged model's (dropout
                 included), through zero.initialize at stage 3 too; configure refuses by name
  moe, pipe      the optimizer groups as DeepSpeed returns them for a dense model; an MoE layer,
                 mpu and a PipelineModule refused
  logging        log_dist on the ranks asked, in DeepSpeed's format
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import zero
from zero import ZeroError
from zero.accelerator import CpuAccelerator, CudaAccelerator, get_accelerator
from zero.ops import (DeepSpeedCPUAdagrad, DeepSpeedCPUAdam, DeepSpeedCPULion, FusedAdam,
                      FusedLamb, FusedLion)

STEPS = 5
HYPER = {"lr": 1e-2, "betas": (0.8, 0.95), "eps": 1e-7, "weight_decay": 0.1}


# ---- a small model, its data, and training it three ways ----

class Small(torch.nn.Module):
    """Two layers and a squared error: the loss is the forward's output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (self.second(torch.tanh(self.first(x))) - y).pow(2).mean()


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator))
            for _ in range(STEPS)]


def grouped(model: torch.nn.Module) -> list[dict[str, Any]]:
    """Weights with decay, biases without and at twice the learning rate."""
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return [{"params": weights, "weight_decay": 0.1},
            {"params": biases, "weight_decay": 0.0, "lr": 2 * HYPER["lr"]}]


def zero_losses(make_optimizer: Callable[[torch.nn.Module], Any] | None, stage: int = 0,
                **extra: Any) -> list[float]:
    """The losses of STEPS steps of Small through zero.initialize, with the optimizer
    make_optimizer builds on the model's parameters (or the config's, from `extra`)."""
    model = Small()
    config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": stage},
              **extra}
    optimizer = make_optimizer(model) if make_optimizer else None
    engine, *_ = zero.initialize(model=model, optimizer=optimizer, config=config)
    losses = []
    for x, y in batches():
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
    engine.destroy()
    return losses


def torch_losses(make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer]
                 ) -> list[float]:
    """The same steps in plain PyTorch, with an optimizer that steps itself."""
    model = Small()
    optimizer = make_optimizer(model)
    losses = []
    for x, y in batches():
        optimizer.zero_grad()
        loss = model(x, y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def close(got: list[float], want: list[float], rtol: float = 1e-5) -> bool:
    return len(got) == len(want) and all(abs(a - b) <= rtol * abs(b) + 1e-7
                                         for a, b in zip(got, want))


# ---- DeepSpeed's answers, from a subprocess ----

class Checkpointed(torch.nn.Module):
    """A block run through `checkpoint` (a checkpoint function, or None: called plainly), with
    dropout, so that the recomputation must draw the forward's mask."""

    def __init__(self, checkpoint: Callable[..., Any] | None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.Linear(8, 1)
        self.checkpoint = checkpoint

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.tanh(self.inner(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.checkpoint(self.block, x) if self.checkpoint else self.block(x)
        return self.head(h).pow(2).mean()


def checkpoint_gradients(checkpoint: Callable[..., Any] | None) -> dict[str, list[float]]:
    model = Checkpointed(checkpoint)
    torch.manual_seed(5)
    # an input that requires grad, as DeepSpeed's (reentrant) checkpoint needs to reach the
    # block's parameters
    model(torch.ones(3, 8, requires_grad=True)).backward()
    return {name: p.grad.flatten().tolist() for name, p in model.named_parameters()}


def accelerator_answers(accelerator: Any) -> dict[str, Any]:
    """What an accelerator answers to the questions scripts ask, for zero's and DeepSpeed's."""
    return {
        "device_name()": accelerator.device_name(),
        "device_name(0)": accelerator.device_name(0),
        "current_device_name()": accelerator.current_device_name(),
        "communication_backend_name()": accelerator.communication_backend_name(),
        "is_bf16_supported()": accelerator.is_bf16_supported(),
        "is_triton_supported()": accelerator.is_triton_supported(),
        "is_available()": accelerator.is_available(),
        "Stream": repr(accelerator.Stream), "Event": repr(accelerator.Event),
        "FloatTensor(3)": list(accelerator.FloatTensor(3).shape),
        "LongTensor([7])": accelerator.LongTensor([7]).tolist(),
        "random() is torch.random": accelerator.random() is torch.random,
        "on_accelerator(cpu tensor)": accelerator.on_accelerator(torch.ones(1)),
    }


def _cpu_adam_built() -> bool:
    """Whether DeepSpeed's CPU Adam op can be had without compiling it: already built by an
    earlier run (torch's extensions folder), or ZERO_TEST_DEEPSPEED_OPS=1 asks for the build
    (about 80 s of CPU on a 2-core machine, which CI's fresh machine cannot spare)."""
    if os.environ.get("ZERO_TEST_DEEPSPEED_OPS") == "1":
        return True
    try:
        from torch.utils.cpp_extension import _get_build_directory
        return (Path(_get_build_directory("cpu_adam", verbose=False)) / "cpu_adam.so").exists()
    except Exception:  # noqa: BLE001: a private torch function: absent means not known built
        return False


def _deepspeed_side() -> dict[str, Any]:
    """Run in the subprocess: DeepSpeed's answers to what the tests compare."""
    import deepspeed
    from deepspeed.accelerator import get_accelerator as deepspeed_accelerator
    from deepspeed.moe.utils import split_params_into_different_moe_groups_for_optimizer
    from deepspeed.ops.adam import DeepSpeedCPUAdam as RealCPUAdam
    from deepspeed.utils import logger as deepspeed_logger

    accelerator = deepspeed_accelerator()
    answers: dict[str, Any] = {
        "accelerator": {"class": type(accelerator).__name__, **accelerator_answers(accelerator)},
        "logger_format": deepspeed_logger.handlers[0].formatter._fmt,
    }
    if _cpu_adam_built():
        for bias_correction in (True, False):
            answers[f"cpu_adam bias_correction={bias_correction}"] = torch_losses(
                lambda m, bc=bias_correction: RealCPUAdam(m.parameters(), bias_correction=bc,
                                                          **HYPER))
    answers["checkpoint"] = checkpoint_gradients(deepspeed.checkpointing.checkpoint)
    model = Small()
    groups = split_params_into_different_moe_groups_for_optimizer(
        {"params": list(model.parameters()), "name": "parameters"})
    answers["moe_groups"] = [sorted(g) for g in groups]
    return answers


@pytest.fixture(scope="module")
def deepspeed_answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """DeepSpeed's answers (_deepspeed_side), computed in a subprocess with DS_ACCELERATOR=cpu;
    the tests that need them are skipped where DeepSpeed is not installed."""
    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("DeepSpeed is not installed in this Python (the tests' venv has 0.19.8)")
    out = tmp_path_factory.mktemp("deepspeed") / "answers.json"
    here = Path(__file__).resolve().parent
    code = (f"import json, sys; sys.path.insert(0, {str(here)!r}); "
            "import test_deepspeed_modules as t; "
            f"open({str(out)!r}, 'w').write(json.dumps(t._deepspeed_side()))")
    environment = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    for key in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "RANK", "WORLD_SIZE"):
        environment.pop(key, None)  # DeepSpeed alone, not a rank of this job
    run = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, \
        f"DeepSpeed's side failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return json.loads(out.read_text())


# ---- zero.accelerator ----

def test_accelerator_is_one_object_chosen_as_torch_sees_the_device() -> None:
    accelerator = get_accelerator()
    assert accelerator is get_accelerator(), "get_accelerator() made a second object"
    assert zero.get_accelerator is get_accelerator, "zero.get_accelerator is another function"
    cuda = torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR") != "cpu"
    kind = CudaAccelerator if cuda else CpuAccelerator
    assert isinstance(accelerator, kind), f"{accelerator} where torch says {kind.__name__}"
    device = torch.device(accelerator.current_device_name())
    assert device.type == accelerator.device_name(), f"{device} is not {accelerator.device_name()}"
    assert accelerator.communication_backend_name() == ("nccl" if cuda else "gloo"), \
        "the backend is not the one zero.init_distributed chooses"
    assert accelerator.on_accelerator(torch.ones(1, device=device)), "a tensor on its device"


def test_accelerator_seeds_as_torch_does() -> None:
    accelerator = get_accelerator()
    accelerator.manual_seed_all(1234)
    device = accelerator.device_name()
    ours = torch.rand(5, device=device)
    if device == "cuda":
        torch.cuda.manual_seed_all(1234)
    else:
        torch.manual_seed(1234)
    assert torch.equal(ours, torch.rand(5, device=device)), "manual_seed_all differs from torch's"
    assert accelerator.initial_seed() == 1234, "initial_seed is not the seed set"
    assert accelerator.random() is torch.random, "random() is not torch.random"


def test_cpu_accelerator_answers_as_deepspeeds_does(deepspeed_answers: dict[str, Any]) -> None:
    accelerator = CpuAccelerator()
    # "class": that DeepSpeed's side answered with its CPU one
    ours = {"class": "CPU_Accelerator", **accelerator_answers(accelerator)}
    theirs = deepspeed_answers["accelerator"]
    differ = {k: (ours[k], theirs[k]) for k in theirs if ours.get(k) != theirs[k]}
    assert not differ, f"zero's CPU accelerator (first) differs from DeepSpeed's: {differ}"
    # DeepSpeed's says fp16 only with oneDNN's fp16; zero trains fp16 on any CPU.
    assert accelerator.is_fp16_supported(), "zero trains fp16 on the CPU"
    with accelerator.stream(accelerator.current_stream()):
        pass  # a context that does nothing
    tensor = torch.ones(3)
    assert accelerator.pin_memory(tensor) is tensor, "pin_memory on the CPU is the tensor"


def test_cpu_accelerator_counts_ranks_from_the_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator = CpuAccelerator()
    for key in ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                "LOCAL_WORLD_SIZE", "LOCAL_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                "MPI_LOCALRANKID", "SLURM_LOCALID"):
        monkeypatch.delenv(key, raising=False)
    assert (accelerator.device_count(), accelerator.current_device()) == (1, 0), "no launcher"
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    assert accelerator.device_count() == 4, "the ranks on the node, as mpirun says"
    assert accelerator.current_device() == 3, "the rank on the node, as mpirun says"
    assert zero.comm.get_local_rank() == 3, "zero.comm's local rank is the accelerator's"


def test_cpu_accelerator_memory_is_psutils_or_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    accelerator = CpuAccelerator()
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        resident = psutil.Process().memory_info().rss
        ours = accelerator.memory_allocated()
        assert abs(ours - resident) < 64 << 20, f"{ours} bytes, psutil says {resident}"
        assert accelerator.max_memory_allocated() >= ours, "the peak is below the current"
        assert accelerator.total_memory() == psutil.virtual_memory().total, "total memory"
    monkeypatch.setitem(sys.modules, "psutil", None)  # as if it were not installed
    assert (accelerator.memory_allocated(), accelerator.total_memory(),
            accelerator.available_memory()) == (0, 0, 0), "without psutil the memory is 0"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_accelerator_answers_as_torch_cuda() -> None:
    accelerator = CudaAccelerator()
    assert accelerator.device_name(0) == "cuda:0"
    assert accelerator.device_count() == torch.cuda.device_count(), "device_count"
    accelerator.set_device(0)
    assert accelerator.current_device() == torch.cuda.current_device() == 0, "set_device"
    assert accelerator.current_device_name() == "cuda:0", "current_device_name"
    assert accelerator.is_bf16_supported() == torch.cuda.is_bf16_supported(), "bf16"
    assert accelerator.Stream is torch.cuda.Stream and accelerator.Event is torch.cuda.Event
    assert accelerator.current_stream() == torch.cuda.current_stream(), "current_stream"
    before = accelerator.memory_allocated()
    block = torch.empty(1 << 20, device="cuda")
    assert accelerator.memory_allocated() == torch.cuda.memory_allocated() >= before + (4 << 20)
    assert accelerator.on_accelerator(block) and not accelerator.on_accelerator(torch.ones(1))
    assert accelerator.pin_memory(torch.ones(4)).is_pinned(), "pin_memory pins"
    assert accelerator.FloatTensor([1.0]).device.type == "cuda", "FloatTensor on the GPU"
    accelerator.synchronize()


def test_ds_accelerator_chooses_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zero.accelerator, "_accelerator", None)
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    assert isinstance(get_accelerator(), CpuAccelerator), "DS_ACCELERATOR=cpu"
    monkeypatch.setattr(zero.accelerator, "_accelerator", None)
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")
    with pytest.raises(ZeroError, match="DS_ACCELERATOR='xpu'.*\"cuda\" and \"cpu\""):
        get_accelerator()
    if not torch.cuda.is_available():
        monkeypatch.setenv("DS_ACCELERATOR", "cuda")
        with pytest.raises(ZeroError, match="DS_ACCELERATOR=cuda.*no CUDA GPU"):
            get_accelerator()


# ---- zero.comm ----

def test_comm_answers_one_rank_without_torch_distributed() -> None:
    assert not zero.comm.is_initialized(), "a test left torch.distributed set up"
    comm = zero.comm
    assert (comm.get_rank(), comm.get_world_size(), comm.get_global_rank()) == (0, 1, 0)
    tensor = torch.tensor([1.0, -2.0, 3.0])
    comm.all_reduce(tensor, op=comm.ReduceOp.SUM)
    comm.broadcast(tensor, src=0)
    comm.reduce(tensor, dst=0, op=comm.ReduceOp.MAX)
    assert tensor.tolist() == [1.0, -2.0, 3.0], "a collective over one rank changed the tensor"
    gathered = [torch.zeros(3)]
    comm.all_gather(gathered, tensor)
    into = torch.zeros(1, 3)
    comm.all_gather_into_tensor(into, tensor)
    scattered = torch.zeros(3)
    work = comm.reduce_scatter_tensor(scattered, tensor, async_op=True)
    assert work.wait() and work.is_completed(), "async_op's work is complete"
    for name, got in (("all_gather", gathered[0]), ("all_gather_into_tensor", into[0]),
                      ("reduce_scatter_tensor", scattered)):
        assert torch.equal(got, tensor), f"{name} over one rank is not the input: {got}"
    assert comm.barrier() is None
    with pytest.raises(ZeroError, match="broadcast: src=1 in a job of one rank"):
        comm.broadcast(tensor, src=1)
    with pytest.raises(ZeroError, match="all_gather: tensor_list holds 2 tensors"):
        comm.all_gather([torch.zeros(3), torch.zeros(3)], tensor)


def test_comm_refuses_several_ranks_without_torch_distributed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for call in (lambda: zero.comm.all_reduce(torch.ones(2)), zero.comm.get_rank,
                 zero.comm.barrier):
        with pytest.raises(ZeroError, match=r"not initialized, and the launcher started 2 "
                                            r"ranks; call zero.init_distributed\(\)"):
            call()


@pytest.fixture
def gloo_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch.distributed set up by zero.comm.init_distributed: one rank over gloo, meeting in
    a file; the variables it sets are put back, and the group destroyed, afterwards."""
    import torch.distributed as dist
    for key in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.setenv(key, os.environ.get(key, "0"))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    zero.comm.init_distributed(dist_backend="gloo", init_method=f"file://{tmp_path}/store",
                               rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_comm_init_distributed_is_zeros() -> None:
    assert zero.comm.init_distributed is zero.init_distributed, "two implementations"


def test_comm_over_gloo_equals_torch_distributed(gloo_group: None) -> None:
    import torch.distributed as dist
    comm = zero.comm
    assert comm.is_initialized() and dist.get_backend() == "gloo"
    assert (comm.get_rank(), comm.get_world_size()) == (dist.get_rank(), dist.get_world_size())
    assert comm.get_global_rank(None, 0) == dist.get_global_rank(dist.group.WORLD, 0)
    source = torch.tensor([[1.5, -2.0], [3.0, 0.25]])
    for op in (comm.ReduceOp.SUM, comm.ReduceOp.MAX, comm.ReduceOp.AVG):
        ours, theirs = source.clone(), source.clone()
        comm.all_reduce(ours, op=op)
        dist.all_reduce(theirs, op=op)
        assert torch.equal(ours, theirs), f"all_reduce {op}: {ours} and torch's {theirs}"
    cases = {
        "broadcast": (lambda t: comm.broadcast(t, 0), lambda t: dist.broadcast(t, 0)),
        "reduce": (lambda t: comm.reduce(t, 0), lambda t: dist.reduce(t, 0)),
    }
    for name, (ours_call, theirs_call) in cases.items():
        ours, theirs = source.clone(), source.clone()
        ours_call(ours)
        theirs_call(theirs)
        assert torch.equal(ours, theirs), f"{name}: {ours} and torch's {theirs}"
    ours_list, theirs_list = [torch.zeros(2, 2)], [torch.zeros(2, 2)]
    comm.all_gather(ours_list, source)
    dist.all_gather(theirs_list, source)
    assert torch.equal(ours_list[0], theirs_list[0]), "all_gather"
    ours_flat, theirs_flat = torch.zeros(2, 2), torch.zeros(2, 2)
    comm.all_gather_into_tensor(ours_flat, source)
    dist.all_gather_into_tensor(theirs_flat, source)
    assert torch.equal(ours_flat, theirs_flat), "all_gather_into_tensor"
    ours_part, theirs_part = torch.zeros(2, 2), torch.zeros(2, 2)
    comm.reduce_scatter_tensor(ours_part, source)
    dist.reduce_scatter_tensor(theirs_part, source)
    assert torch.equal(ours_part, theirs_part), "reduce_scatter_tensor"
    work = comm.all_reduce(source.clone(), async_op=True)
    work.wait()
    comm.barrier()


# ---- zero.ops: the optimizers zero.initialize translates ----

ADAM_PAIRS = [
    (lambda m: FusedAdam(m.parameters(), **HYPER),
     lambda m: torch.optim.AdamW(m.parameters(), **HYPER)),
    (lambda m: FusedAdam(m.parameters(), adam_w_mode=False, **HYPER),
     lambda m: torch.optim.Adam(m.parameters(), **HYPER)),
    (lambda m: DeepSpeedCPUAdam(m.parameters(), **HYPER),
     lambda m: torch.optim.AdamW(m.parameters(), **HYPER)),
    (lambda m: DeepSpeedCPUAdam(m.parameters(), adamw_mode=False, **HYPER),
     lambda m: torch.optim.Adam(m.parameters(), **HYPER)),
    (lambda m: FusedAdam(grouped(m), lr=HYPER["lr"], betas=HYPER["betas"], eps=HYPER["eps"]),
     lambda m: torch.optim.AdamW(grouped(m), lr=HYPER["lr"], betas=HYPER["betas"],
                                 eps=HYPER["eps"])),
]
ADAM_IDS = ["FusedAdam", "FusedAdam-L2", "DeepSpeedCPUAdam", "DeepSpeedCPUAdam-L2",
            "FusedAdam-groups"]


@pytest.mark.parametrize("stage", [0, 2])
@pytest.mark.parametrize("ours, torchs", ADAM_PAIRS, ids=ADAM_IDS)
def test_deepspeed_adam_trains_as_the_torch_adam_it_stands_for(
        ours: Callable[[torch.nn.Module], Any], torchs: Callable[[torch.nn.Module], Any],
        stage: int) -> None:
    described = zero_losses(ours, stage)
    translated = zero_losses(torchs, stage)
    assert described == translated, \
        f"stage {stage}: {described} through zero.ops, {translated} through torch.optim"
    plain = torch_losses(torchs)
    assert close(described, plain), f"stage {stage}: {described}, plain PyTorch {plain}"


def test_adam_w_mode_is_read_not_assumed() -> None:
    decoupled = zero_losses(lambda m: FusedAdam(m.parameters(), **HYPER))
    l2 = zero_losses(lambda m: FusedAdam(m.parameters(), adam_w_mode=False, **HYPER))
    assert decoupled != l2, "AdamW and Adam with L2 decay trained alike: the mode is lost"
    torch_decoupled = zero_losses(
        lambda m: torch.optim.Adam(m.parameters(), decoupled_weight_decay=True, **HYPER))
    assert torch_decoupled == decoupled, \
        "torch.optim.Adam(decoupled_weight_decay=True) is AdamW, and trained otherwise"


@pytest.mark.parametrize("bias_correction", [True, False])
def test_deepspeed_cpu_adam_trains_as_deepspeeds(deepspeed_answers: dict[str, Any],
                                                 bias_correction: bool) -> None:
    ours = zero_losses(lambda m: DeepSpeedCPUAdam(m.parameters(), bias_correction=bias_correction,
                                                  **HYPER))
    theirs = deepspeed_answers.get(f"cpu_adam bias_correction={bias_correction}")
    if theirs is None:
        pytest.skip("DeepSpeedCPUAdam's op is not built here (its first use compiles it, about "
                    "80 s of CPU); ZERO_TEST_DEEPSPEED_OPS=1 builds it for this comparison")
    assert close(ours, theirs), \
        f"bias_correction={bias_correction}: zero {ours}, DeepSpeed's DeepSpeedCPUAdam {theirs}"


def test_lion_and_adagrad_train_as_their_config_sections() -> None:
    lion = {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1}
    want = zero_losses(None, optimizer={"type": "Lion", "params": lion})
    for make in (FusedLion, DeepSpeedCPULion):
        got = zero_losses(lambda m: make(m.parameters(), lr=1e-3, betas=(0.9, 0.99),
                                         weight_decay=0.1))
        assert got == want, f"{make.__name__}: {got}, the config's Lion {want}"
    adagrad = zero_losses(lambda m: DeepSpeedCPUAdagrad(m.parameters(), lr=0.05,
                                                        weight_decay=0.01))
    plain = torch_losses(lambda m: torch.optim.Adagrad(m.parameters(), lr=0.05, eps=1e-10,
                                                       weight_decay=0.01))
    assert close(adagrad, plain), f"DeepSpeedCPUAdagrad {adagrad}, torch's Adagrad {plain}"


def test_described_optimizers_refuse_what_zero_does_not_run() -> None:
    params = list(Small().parameters())
    with pytest.raises(ZeroError, match=r"FusedAdam\(amsgrad=True\): zero has no AMSGrad"):
        FusedAdam(params, amsgrad=True)
    with pytest.raises(ZeroError, match=r"DeepSpeedCPUAdam\(amsgrad=True\)"):
        DeepSpeedCPUAdam(params, amsgrad=True)
    with pytest.raises(ZeroError, match="FusedLamb: zero has no LAMB optimizer; it runs Adam"):
        FusedLamb(params)
    optimizer = FusedAdam(params)
    with pytest.raises(ZeroError, match=r"FusedAdam.step\(\): .*fused AdamW, inside "
                                        r"engine.step\(\)"):
        optimizer.step()
    with pytest.raises(ZeroError, match=r"fp32_optimizer_states=False\).*bf16_optimizer_states"):
        zero_losses(lambda m: DeepSpeedCPUAdam(m.parameters(), fp32_optimizer_states=False))
    with pytest.raises(ZeroError, match="group 1 sets betas"):
        zero_losses(lambda m: FusedAdam([{"params": [m.first.weight]},
                                         {"params": [m.second.weight], "betas": (0.5, 0.5)}]))
    with pytest.raises(ZeroError, match="lr_decay"):
        zero_losses(lambda m: torch.optim.Adagrad(m.parameters(), lr_decay=0.1))


def test_deepspeed_chat_optimizer_groups_translate() -> None:
    """DeepSpeed-Chat's FusedAdam over get_optimizer_grouped_parameters' groups: one with
    decay, one at LoRA's learning rate, one without decay."""
    def chat(m: torch.nn.Module) -> Any:
        groups = [{"params": [m.first.weight], "weight_decay": 0.1},
                  {"params": [m.second.weight], "weight_decay": 0.1, "lr": 5e-3},
                  {"params": [m.first.bias, m.second.bias], "weight_decay": 0.0}]
        return groups

    ours = zero_losses(lambda m: FusedAdam(chat(m), lr=1e-2, betas=(0.9, 0.95)))
    plain = torch_losses(lambda m: torch.optim.AdamW(chat(m), lr=1e-2, betas=(0.9, 0.95)))
    assert close(ours, plain), f"zero {ours}, plain PyTorch's AdamW {plain}"


# ---- zero.checkpointing ----

@pytest.fixture
def fresh_checkpointing(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure()'s settings as before any call, and put back after the test."""
    monkeypatch.setattr(zero.checkpointing, "_settings", zero.checkpointing._Settings())


def test_checkpoint_gradients_equal_deepspeeds_and_the_plain_models(
        deepspeed_answers: dict[str, Any], fresh_checkpointing: None) -> None:
    ours = checkpoint_gradients(zero.checkpointing.checkpoint)
    plain = checkpoint_gradients(None)
    assert ours == plain, "checkpointing changed the gradients (the dropout mask?)"
    assert ours == deepspeed_answers["checkpoint"], \
        f"zero's {ours}, DeepSpeed's checkpoint {deepspeed_answers['checkpoint']}"


@pytest.mark.parametrize("stage", [0, 3])
def test_checkpoint_trains_through_zero_initialize(stage: int, fresh_checkpointing: None) -> None:
    config = {"train_micro_batch_size_per_gpu": 3, "zero_optimization": {"stage": stage},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}}}
    losses = {}
    for name, checkpoint in (("checkpointed", zero.checkpointing.checkpoint), ("plain", None)):
        engine, *_ = zero.initialize(model=Checkpointed(checkpoint), config=config)
        torch.manual_seed(7)
        losses[name] = []
        for _ in range(3):
            loss = engine(torch.ones(3, 8))
            engine.backward(loss)
            engine.step()
            losses[name].append(float(loss.detach()))
        engine.destroy()
    assert losses["checkpointed"] == losses["plain"], f"stage {stage}: {losses}"


def test_checkpointing_configure_refuses_by_name(fresh_checkpointing: None,
                                                 tmp_path: Path) -> None:
    checkpointing = zero.checkpointing
    assert not checkpointing.is_configured()
    with pytest.raises(ZeroError, match=r"checkpoint_in_cpu=True moves the saved inputs"):
        checkpointing.configure(None, checkpoint_in_cpu=True)
    with pytest.raises(ZeroError, match=r"contiguous_checkpointing=True copies"):
        checkpointing.configure(None, contiguous_checkpointing=True, num_checkpoints=4)
    path = tmp_path / "ds_config.json"
    path.write_text('{"activation_checkpointing": {"cpu_checkpointing": true}} // a comment')
    with pytest.raises(ZeroError, match="activation_checkpointing.cpu_checkpointing"):
        checkpointing.configure(None, deepspeed_config=str(path))
    with pytest.raises(ZeroError, match=r"mpu_ \(model parallelism\)"):
        checkpointing.configure(object())
    assert not checkpointing.is_configured(), "a refused configure counted"
    checkpointing.configure(None, deepspeed_config={"activation_checkpointing": {
        "partition_activations": True, "number_checkpoints": 2, "profile": True}})
    assert checkpointing.is_configured()
    assert (checkpointing._settings.profile, checkpointing._settings.num_checkpoints) == (True, 2)
    ours = checkpoint_gradients(checkpointing.checkpoint)  # profile's wrapper around it
    assert ours == checkpoint_gradients(None), "profiled checkpointing changed the gradients"


# ---- zero.moe, zero.pipe and the refusals at zero.initialize ----

def test_moe_groups_are_deepspeeds_for_a_dense_model(deepspeed_answers: dict[str, Any]) -> None:
    from zero.moe.utils import (has_moe_layers, is_moe_param,
                                split_params_into_different_moe_groups_for_optimizer)
    model = Small()
    group = {"params": (p for p in model.parameters()), "name": "parameters"}
    groups = split_params_into_different_moe_groups_for_optimizer(group)
    assert groups == [group] and groups[0] is group, "the caller's group, in a list"
    assert group["params"] == list(model.parameters()), "its params, as a list"
    assert [sorted(g) for g in groups] == deepspeed_answers["moe_groups"], "DeepSpeed's keys"
    assert not any(is_moe_param(p) for p in model.parameters())
    assert has_moe_layers(model) == (False, 0)
    expert = torch.nn.Parameter(torch.ones(2))
    expert.allreduce = False  # DeepSpeed's mark on an expert's parameter
    with pytest.raises(ZeroError, match="group 0 holds an expert"):
        split_params_into_different_moe_groups_for_optimizer([{"params": [expert]}])
    engine, *_ = zero.initialize(model=model, model_parameters=groups, config={
        "train_micro_batch_size_per_gpu": 4})
    engine.destroy()


def test_moe_mpu_and_pipelines_are_refused() -> None:
    deepspeed_moe = types.new_class("MoE", (torch.nn.Module,))
    deepspeed_moe.__module__ = "deepspeed.moe.layer"  # DeepSpeed's class, by its name
    model = Small()
    model.experts = deepspeed_moe()
    model.experts.num_experts = 4
    config = {"train_micro_batch_size_per_gpu": 4}
    with pytest.raises(ZeroError, match=r"holds DeepSpeed's MoE layer \(4 experts\)"):
        zero.initialize(model=model, config=config)
    with pytest.raises(ZeroError, match="zero.moe.layer.MoE: zero has no mixture of experts"):
        zero.moe.layer.MoE(hidden_size=8, expert=torch.nn.Linear(8, 8), num_experts=2)
    with pytest.raises(ZeroError, match=r"mpu \(model parallelism\).*pass mpu=None"):
        zero.initialize(model=Small(), config=config, mpu=object())
    for name in ("PipelineModule", "LayerSpec", "TiedLayerSpec"):
        with pytest.raises(ZeroError, match=f"zero.pipe.{name}: zero has no pipeline"):
            getattr(zero.pipe, name)(torch.nn.Linear)


# ---- zero.utils' logger ----

def test_log_dist_logs_on_the_ranks_asked_in_deepspeeds_format(
        deepspeed_answers: dict[str, Any]) -> None:
    logger = zero.utils.logger
    assert logger is zero.logger and logger.name == "zero"
    formats = [h.formatter._fmt for h in logger.handlers  # (pytest adds its own beside ours)
               if getattr(h, "_zero_handler", False) and h.formatter]
    assert formats == [deepspeed_answers["logger_format"]], f"{formats} is not DeepSpeed's"
    records: list[logging.LogRecord] = []
    catch = logging.Handler()
    catch.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(catch)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        zero.utils.log_dist("to rank 0")
        zero.utils.log_dist("to rank 1 only", ranks=[1])
        zero.utils.log_dist("to every rank", ranks=[-1], level=logging.WARNING)
    finally:
        logger.removeHandler(catch)
        logger.setLevel(level)
    said = [(r.levelno, r.getMessage()) for r in records]
    assert said == [(logging.INFO, "[Rank 0] to rank 0"),
                    (logging.WARNING, "[Rank 0] to every rank")], said
    assert records[0].filename == Path(__file__).name, "the caller's line, not log_dist's"


def test_the_modules_are_attributes_of_zero() -> None:
    for name in ("accelerator", "comm", "ops", "checkpointing", "moe", "pipe"):
        module = getattr(zero, name)
        assert isinstance(module, types.ModuleType) and module.__name__ == f"zero.{name}"
    from zero.moe.utils import split_params_into_different_moe_groups_for_optimizer  # noqa: F401
    from zero.ops.adam import DeepSpeedCPUAdam as Adam, FusedAdam as Fused  # noqa: F401
    assert zero.comm.ReduceOp is torch.distributed.ReduceOp, "torch's ReduceOp"
