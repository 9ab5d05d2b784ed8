"""zero.accelerator: DeepSpeed's deepspeed.accelerator.get_accelerator, for zero.

    from zero.accelerator import get_accelerator
    device = torch.device(get_accelerator().device_name(local_rank))
    get_accelerator().manual_seed_all(seed)

get_accelerator() returns one object for the process that answers a training script's device
questions (the device's name, the current device, seeds, streams, memory, the dtypes it
computes in, the torch.distributed backend) over torch: a CudaAccelerator where
torch.cuda.is_available(), a CpuAccelerator otherwise. DS_ACCELERATOR ("cuda" or "cpu"), as
DeepSpeed reads it, chooses one instead. zero's engine needs none of this: it takes its device
from where the model is.

Owns: the process's accelerator object, and on the CPU the peak resident memory seen since the
last reset.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Accelerator", "CudaAccelerator", "CpuAccelerator", "get_accelerator"]

# The launchers' count of ranks on this node: zero-run's mpirun, MPICH, srun, torchrun.
_LOCAL_SIZES = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE",
                "LOCAL_WORLD_SIZE", "LOCAL_SIZE")
# The launchers' rank on this node, as zero.comm.get_local_rank reads it.
_LOCAL_RANKS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")


def local_rank() -> int:
    """This process's rank on its node from the launcher's environment; 0 without one."""
    for key in _LOCAL_RANKS:
        if os.environ.get(key, "").strip().isdigit():
            return int(os.environ[key])
    return 0


class Accelerator:
    """What both accelerators answer alike. `_name` is the torch device type, as DeepSpeed's
    accelerators name it."""

    _name: str = ""
    _communication_backend_name: str = ""

    # ---- the device ----

    def device_name(self, device_index: int | None = None) -> str:
        """The torch device string: "cuda" or "cuda:i"; "cpu" on the CPU."""
        return self._name if device_index is None else f"{self._name}:{device_index}"

    def current_device_name(self) -> str:
        return self.device_name(self.current_device())

    def current_device(self) -> int:
        raise NotImplementedError

    def is_available(self) -> bool:
        raise NotImplementedError

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        """Whether the tensor lives on this accelerator's device type."""
        return tensor.device.type == self._name

    def communication_backend_name(self) -> str:
        """The torch.distributed backend for this device (zero.init_distributed's choice)."""
        return self._communication_backend_name

    def is_triton_supported(self) -> bool:
        """False: zero runs no Triton kernels."""
        return False

    # ---- random numbers ----

    def random(self) -> Any:
        """torch.random, as DeepSpeed's accelerators return it."""
        return torch.random

    # ---- dtypes ----

    def is_bf16_supported(self) -> bool:
        raise NotImplementedError

    def is_fp16_supported(self) -> bool:
        raise NotImplementedError

    def supported_dtypes(self) -> list[torch.dtype]:
        return ([torch.float32] + ([torch.float16] if self.is_fp16_supported() else [])
                + ([torch.bfloat16] if self.is_bf16_supported() else []))

    # The legacy typed-tensor constructors DeepSpeed's accelerators offer
    # (get_accelerator().FloatTensor([...])).
    def _tensor_type(self, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
        raise NotImplementedError

    @property
    def BFloat16Tensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802 (DeepSpeed's name)
        return self._tensor_type(torch.bfloat16)

    @property
    def ByteTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.uint8)

    @property
    def DoubleTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.float64)

    @property
    def FloatTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.float32)

    @property
    def HalfTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.float16)

    @property
    def IntTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.int32)

    @property
    def LongTensor(self) -> Callable[..., torch.Tensor]:  # noqa: N802
        return self._tensor_type(torch.int64)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"


class CudaAccelerator(Accelerator):
    """NVIDIA GPUs through torch.cuda; torch.distributed over NCCL."""

    _name = "cuda"
    _communication_backend_name = "nccl"

    # ---- the device ----

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device("cuda", device_index)

    def set_device(self, device_index: int) -> None:
        torch.cuda.set_device(device_index)

    def current_device(self) -> int:
        return torch.cuda.current_device()

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def synchronize(self, device_index: int | None = None) -> None:
        torch.cuda.synchronize(device_index)

    def is_available(self) -> bool:
        return torch.cuda.is_available()

    def is_synchronized_device(self) -> bool:
        """False: work is queued on streams, and the host does not wait for it."""
        return False

    # ---- random numbers ----

    def manual_seed(self, seed: int) -> None:
        torch.cuda.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.cuda.manual_seed_all(seed)

    def initial_seed(self) -> int:
        return torch.cuda.initial_seed()

    def get_rng_state(self, device_index: int | str = "cuda") -> torch.Tensor:
        return torch.cuda.get_rng_state(device_index)

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | str = "cuda") -> None:
        torch.cuda.set_rng_state(new_state, device_index)

    def default_generator(self, device_index: int) -> torch.Generator:
        return torch.cuda.default_generators[device_index]

    # ---- streams and events ----

    @property
    def Stream(self) -> type[torch.cuda.Stream]:  # noqa: N802 (DeepSpeed's name)
        return torch.cuda.Stream

    @property
    def Event(self) -> type[torch.cuda.Event]:  # noqa: N802
        return torch.cuda.Event

    def stream(self, stream: torch.cuda.Stream | None) -> Any:
        """A context that makes `stream` current (torch.cuda.stream)."""
        return torch.cuda.stream(stream)

    def current_stream(self, device_index: int | None = None) -> torch.cuda.Stream:
        return torch.cuda.current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> torch.cuda.Stream:
        return torch.cuda.default_stream(device_index)

    def range_push(self, msg: str) -> None:
        torch.cuda.nvtx.range_push(msg)

    def range_pop(self) -> None:
        torch.cuda.nvtx.range_pop()

    # ---- memory (torch's caching allocator) ----

    def empty_cache(self) -> None:
        torch.cuda.empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return torch.cuda.memory_allocated(device_index)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return torch.cuda.max_memory_allocated(device_index)

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        torch.cuda.reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return torch.cuda.memory_reserved(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return torch.cuda.max_memory_reserved(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        """The old name of memory_reserved."""
        return torch.cuda.memory_reserved(device_index)

    def max_memory_cached(self, device_index: int | None = None) -> int:
        return torch.cuda.max_memory_reserved(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        return torch.cuda.memory_stats(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        torch.cuda.reset_peak_memory_stats(device_index)

    def total_memory(self, device_index: int | None = None) -> int:
        index = self.current_device() if device_index is None else device_index
        return torch.cuda.get_device_properties(index).total_memory

    def available_memory(self, device_index: int | None = None) -> int:
        """The device's free memory, as the driver counts it (torch.cuda.mem_get_info)."""
        return torch.cuda.mem_get_info(device_index)[0]

    def pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        """A page-locked copy of a host tensor, for asynchronous copies to the GPU."""
        return tensor.pin_memory()

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return tensor.is_pinned()

    # ---- dtypes ----

    def is_bf16_supported(self) -> bool:
        return torch.cuda.is_bf16_supported()

    def is_fp16_supported(self) -> bool:
        """True from compute capability 7.0 (Volta), as DeepSpeed says."""
        return torch.cuda.get_device_capability()[0] >= 7

    def _tensor_type(self, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
        return functools.partial(torch.tensor, dtype=dtype, device="cuda")


class CpuAccelerator(Accelerator):
    """The CPU: each rank is one device. torch.distributed over gloo (zero's own collectives
    between CPU ranks are MPI; torch.distributed on the CPU is gloo). Memory is the process's
    resident memory through psutil when it is installed, and 0 without it."""

    _name = "cpu"
    _communication_backend_name = "gloo"

    def __init__(self) -> None:
        self._peak: int = 0  # the largest resident memory seen since the last reset

    # ---- the device ----

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device("cpu")

    def set_device(self, device_index: int) -> None:
        """Nothing to choose: every rank computes on its CPU."""

    def current_device(self) -> int:
        """The rank on this node (each rank is one CPU device, as DeepSpeed counts them)."""
        return local_rank()

    def current_device_name(self) -> str:
        return "cpu"

    def device_name(self, device_index: int | None = None) -> str:
        """"cpu", whatever the index."""
        return "cpu"

    def device_count(self) -> int:
        """The ranks on this node, from the launcher (zero-run's and mpirun's
        OMPI_COMM_WORLD_LOCAL_SIZE, srun's, torchrun's); 1 without a launcher."""
        for key in _LOCAL_SIZES:
            value = os.environ.get(key, "").strip()
            if value.isdigit() and int(value) > 0:
                return int(value)
        return 1

    def synchronize(self, device_index: int | None = None) -> None:
        """Nothing to wait for: the CPU's work is done when torch returns."""

    def is_available(self) -> bool:
        return True

    def is_synchronized_device(self) -> bool:
        return True

    # ---- random numbers ----

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def initial_seed(self) -> int:
        return torch.initial_seed()

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        torch.set_rng_state(new_state)

    def default_generator(self, device_index: int | None = None) -> torch.Generator:
        return torch.default_generator

    # ---- streams and events: none on the CPU, as DeepSpeed's CPU accelerator says ----

    @property
    def Stream(self) -> None:  # noqa: N802 (DeepSpeed's name)
        return None

    @property
    def Event(self) -> None:  # noqa: N802
        return None

    def stream(self, stream: Any) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def current_stream(self, device_index: int | None = None) -> None:
        return None

    def default_stream(self, device_index: int | None = None) -> None:
        return None

    def range_push(self, msg: str) -> None:
        """Nothing: no profiler ranges on the CPU."""

    def range_pop(self) -> None:
        """Nothing: no profiler ranges on the CPU."""

    # ---- memory: the process's resident memory (psutil), 0 without psutil ----

    def _resident(self) -> int:
        try:
            import psutil
        except ImportError:
            return 0
        resident = int(psutil.Process().memory_info().rss)
        self._peak = max(self._peak, resident)
        return resident

    def empty_cache(self) -> None:
        """Nothing: the CPU allocator keeps no cache to release."""

    def memory_allocated(self, device_index: int | None = None) -> int:
        return self._resident()

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        self._resident()
        return self._peak

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        self.reset_peak_memory_stats()

    def memory_reserved(self, device_index: int | None = None) -> int:
        return self._resident()

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return self.max_memory_allocated()

    memory_cached = memory_reserved
    max_memory_cached = max_memory_reserved

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        resident = self._resident()
        return {"allocated_bytes.all.current": resident, "allocated_bytes.all.peak": self._peak}

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        self._peak = 0
        self._resident()

    def total_memory(self, device_index: int | None = None) -> int:
        try:
            import psutil
        except ImportError:
            return 0
        return int(psutil.virtual_memory().total)

    def available_memory(self, device_index: int | None = None) -> int:
        try:
            import psutil
        except ImportError:
            return 0
        return int(psutil.virtual_memory().available)

    def pin_memory(self, tensor: torch.Tensor) -> torch.Tensor:
        """The tensor itself: without a GPU there is nothing to pin memory for."""
        return tensor

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return False

    # ---- dtypes: zero trains bf16 and fp16 (with loss scaling) on the CPU ----

    def is_bf16_supported(self) -> bool:
        return True

    def is_fp16_supported(self) -> bool:
        return True

    def _tensor_type(self, dtype: torch.dtype) -> Callable[..., torch.Tensor]:
        # torch's legacy constructors, as DeepSpeed's CPU accelerator returns them: FloatTensor(3)
        # is three elements, FloatTensor([3.0]) one.
        return {torch.bfloat16: torch.BFloat16Tensor, torch.uint8: torch.ByteTensor,
                torch.float64: torch.DoubleTensor, torch.float32: torch.FloatTensor,
                torch.float16: torch.HalfTensor, torch.int32: torch.IntTensor,
                torch.int64: torch.LongTensor}[dtype]


_accelerator: Accelerator | None = None


def get_accelerator() -> Accelerator:
    """The process's accelerator, made at the first call: CUDA where torch.cuda.is_available(),
    else the CPU; DS_ACCELERATOR="cuda" or "cpu" chooses instead (as in DeepSpeed)."""
    global _accelerator
    if _accelerator is None:
        chosen = os.environ.get("DS_ACCELERATOR", "").strip().lower()
        if chosen not in ("", "cuda", "cpu"):
            raise ZeroError(f"get_accelerator: DS_ACCELERATOR={chosen!r}; zero runs on \"cuda\" "
                            "and \"cpu\": set one of them, or unset it to choose by "
                            "torch.cuda.is_available()")
        if chosen == "cuda" and not torch.cuda.is_available():
            raise ZeroError("get_accelerator: DS_ACCELERATOR=cuda, and torch sees no CUDA GPU "
                            "(torch.cuda.is_available() is False); unset it to run on the CPU")
        if not chosen:
            chosen = "cuda" if torch.cuda.is_available() else "cpu"
        _accelerator = CudaAccelerator() if chosen == "cuda" else CpuAccelerator()
    return _accelerator
