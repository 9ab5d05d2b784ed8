"""zero.init_distributed: torch.distributed for the script's own use, from the launcher.

zero's engine makes its own communicator (MPI on CPU ranks, NCCL on GPUs) from the launcher's
environment; this sets up torch.distributed beside it, as deepspeed.init_distributed does, for
code that calls torch.distributed itself (a barrier, a broadcast of a seed).
"""

from __future__ import annotations

import os
import zlib
from datetime import timedelta
from typing import Any, TYPE_CHECKING

import torch

from ._library import ZeroError

if TYPE_CHECKING:
    import argparse

# The launchers' variables: rank, world size, rank on the node.
_LAUNCHERS = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),                                      # torchrun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),  # Open MPI
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),                               # MPICH, Hydra
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),                         # srun
)


def launcher_ranks() -> tuple[int, int, int]:
    """(rank, world size, local rank) from the launcher's environment; (0, 1, 0) without."""
    for rank, size, local in _LAUNCHERS:
        if rank in os.environ and size in os.environ:
            return (int(os.environ[rank]), int(os.environ[size]),
                    int(os.environ.get(local, 0)))
    return 0, 1, 0


# The launchers' names for this job, the same on every rank and different for two jobs.
_JOB_IDS = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "PMI_JOBID")


def job_port() -> int | None:
    """A port for the job's rendezvous that every rank derives alike and another job on the
    machine most likely does not: 20000-59999 from the launcher's job id; None without one."""
    ids = [os.environ[k] for k in _JOB_IDS if os.environ.get(k)]
    if not ids:
        return None
    step = os.environ.get("SLURM_STEP_ID", "")
    return 20000 + zlib.crc32("/".join(ids + [step]).encode()) % 40000


def init_distributed(dist_backend: str | None = None, auto_mpi_discovery: bool = True,
                     distributed_port: int | None = None, verbose: bool = True,
                     timeout: timedelta = timedelta(minutes=30), init_method: str | None = None,
                     dist_init_required: bool | None = None, config: Any = None,
                     rank: int = -1, world_size: int = -1) -> None:
    """Initialises torch.distributed's default group from the launcher (zero-run, mpirun,
    srun or torchrun). MASTER_ADDR defaults to 127.0.0.1 (one node); set it to the first node's
    address across nodes. MASTER_PORT: the launcher's when it sets one (zero-run and torchrun
    do), else distributed_port, else a port derived from the launcher's job id (so that two
    jobs on one machine do not meet on DeepSpeed's fixed 29500), else 29500. Does nothing when
    torch.distributed is already initialised."""
    import torch.distributed as dist
    if dist.is_initialized():
        return
    found_rank, found_size, local = launcher_ranks()
    rank = found_rank if rank < 0 else rank
    world_size = found_size if world_size < 0 else world_size
    if not 0 <= rank < world_size:
        raise ZeroError(f"zero.init_distributed: rank {rank} is not in a world of {world_size}")
    if dist_backend is None:
        dist_backend = "nccl" if torch.cuda.is_available() else "gloo"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        port = distributed_port if distributed_port is not None else job_port()
        os.environ["MASTER_PORT"] = str(port if port is not None else 29500)
    os.environ.setdefault("LOCAL_RANK", str(local))
    if dist_backend == "nccl":
        torch.cuda.set_device(local)
    dist.init_process_group(backend=dist_backend, init_method=init_method or "env://",
                            rank=rank, world_size=world_size, timeout=timeout)


def add_config_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """deepspeed.add_config_arguments: --deepspeed (a flag, accepted) and --deepspeed_config
    (the config path zero.initialize reads from args); --zero_config is zero's alias."""
    group = parser.add_argument_group("zero", "zero (DeepSpeed-compatible) configuration")
    group.add_argument("--deepspeed", default=False, action="store_true",
                       help="accepted for DeepSpeed scripts; zero is always on")
    group.add_argument("--deepspeed_config", "--zero_config", default=None, type=str,
                       help="the DeepSpeed JSON config")
    return parser
