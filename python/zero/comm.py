"""zero.comm: DeepSpeed's deepspeed.comm calls a training script makes, over torch.distributed.

    import zero.comm as dist
    dist.init_distributed()                  # zero.init_distributed, the same function
    dist.all_reduce(loss, op=dist.ReduceOp.SUM)
    if dist.get_rank() == 0: ...

zero's engine keeps its own communicator (MPI between CPU ranks, NCCL between GPUs) and needs
none of this; these are for the script's own communication, on the torch.distributed group that
init_distributed sets up from the launcher. Until it is set up, a job of one rank still works:
the rank and size queries answer 0 and 1, and each collective is what it is over one rank (the
tensor unchanged, or copied to the output). In a job of several ranks they are refused until
init_distributed is called.

Owns nothing: the state is torch.distributed's.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as _dist
from torch.distributed import ReduceOp

from ._library import ZeroError
from .accelerator import local_rank
from .distributed import init_distributed, launcher_ranks

__all__ = ["ReduceOp", "init_distributed", "is_initialized", "is_available", "get_rank",
           "get_world_size", "get_local_rank", "get_global_rank", "barrier", "all_reduce",
           "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor",
           "reduce"]


class _Done:
    """What an async_op=True collective returns when it ran at once (one rank, no group): a
    torch.distributed Work that is complete."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


def is_available() -> bool:
    """Whether torch was built with torch.distributed."""
    return _dist.is_available()


def is_initialized() -> bool:
    """Whether torch.distributed's default group is set up (by init_distributed or by the
    script itself)."""
    return _dist.is_available() and _dist.is_initialized()


def _single(what: str) -> bool:
    """True when torch.distributed is not set up and the job is one rank (the call is answered
    here); False when torch.distributed is set up (torch answers). A job of several ranks
    without it is refused."""
    if is_initialized():
        return False
    _, world_size, _ = launcher_ranks()
    if world_size == 1:
        return True
    raise ZeroError(f"zero.comm.{what}: torch.distributed is not initialized, and the launcher "
                    f"started {world_size} ranks; call zero.init_distributed() (or "
                    "zero.comm.init_distributed()) on every rank first")


def get_rank(group: Any = None) -> int:
    """This process's rank in `group` (the default group: the job); 0 in a job of one rank."""
    return 0 if _single("get_rank") else _dist.get_rank(group)


def get_world_size(group: Any = None) -> int:
    """The number of ranks in `group` (the default group: the job); 1 in a job of one rank."""
    return 1 if _single("get_world_size") else _dist.get_world_size(group)


def get_local_rank() -> int:
    """This process's rank on its node, from the launcher (LOCAL_RANK,
    OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID); 0 without one."""
    return local_rank()


def get_global_rank(group: Any = None, group_rank: int = 0) -> int:
    """The job rank of `group`'s rank `group_rank`."""
    if _single("get_global_rank"):
        if group_rank != 0:
            raise ZeroError(f"zero.comm.get_global_rank: rank {group_rank} in a job of one rank")
        return 0
    return _dist.get_global_rank(group if group is not None else _dist.group.WORLD, group_rank)


def _one_rank(what: str, rank: int, name: str) -> None:
    if rank != 0:
        raise ZeroError(f"zero.comm.{what}: {name}={rank} in a job of one rank (rank 0)")


def barrier(group: Any = None, async_op: bool = False,
            device_ids: list[int] | None = None) -> Any:
    if _single("barrier"):
        return _Done() if async_op else None
    return _dist.barrier(group=group, async_op=async_op, device_ids=device_ids)


def all_reduce(tensor: torch.Tensor, op: ReduceOp.RedOpType = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Any:
    """Reduces `tensor` in place over the ranks."""
    if _single("all_reduce"):
        return _Done() if async_op else None
    return _dist.all_reduce(tensor, op=op, group=group, async_op=async_op)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False) -> Any:
    """`src`'s tensor into every rank's `tensor`."""
    if _single("broadcast"):
        _one_rank("broadcast", src, "src")
        return _Done() if async_op else None
    return _dist.broadcast(tensor, src, group=group, async_op=async_op)


def reduce(tensor: torch.Tensor, dst: int, op: ReduceOp.RedOpType = ReduceOp.SUM,
           group: Any = None, async_op: bool = False) -> Any:
    """Reduces `tensor` over the ranks into `dst`'s."""
    if _single("reduce"):
        _one_rank("reduce", dst, "dst")
        return _Done() if async_op else None
    return _dist.reduce(tensor, dst, op=op, group=group, async_op=async_op)


def all_gather(tensor_list: list[torch.Tensor], tensor: torch.Tensor, group: Any = None,
               async_op: bool = False) -> Any:
    """Every rank's `tensor` into `tensor_list` (one tensor a rank)."""
    if _single("all_gather"):
        if len(tensor_list) != 1:
            raise ZeroError(f"zero.comm.all_gather: tensor_list holds {len(tensor_list)} "
                            "tensors in a job of one rank; pass one")
        tensor_list[0].copy_(tensor)
        return _Done() if async_op else None
    return _dist.all_gather(tensor_list, tensor, group=group, async_op=async_op)


def all_gather_into_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor, group: Any = None,
                           async_op: bool = False) -> Any:
    """Every rank's `tensor`, in rank order, into `output_tensor` (world size times as
    large)."""
    if _single("all_gather_into_tensor"):
        _same_size("all_gather_into_tensor", output_tensor, tensor)
        output_tensor.copy_(tensor.reshape(output_tensor.shape))
        return _Done() if async_op else None
    return _dist.all_gather_into_tensor(output_tensor, tensor, group=group, async_op=async_op)


def reduce_scatter_tensor(output_tensor: torch.Tensor, tensor: torch.Tensor,
                          op: ReduceOp.RedOpType = ReduceOp.SUM, group: Any = None,
                          async_op: bool = False) -> Any:
    """`tensor` reduced over the ranks, each rank keeping its part (its rank's slice of the
    first dimension) in `output_tensor`."""
    if _single("reduce_scatter_tensor"):
        _same_size("reduce_scatter_tensor", output_tensor, tensor)
        output_tensor.copy_(tensor.reshape(output_tensor.shape))
        return _Done() if async_op else None
    return _dist.reduce_scatter_tensor(output_tensor, tensor, op=op, group=group,
                                       async_op=async_op)


def _same_size(what: str, output: torch.Tensor, tensor: torch.Tensor) -> None:
    if output.numel() != tensor.numel():
        raise ZeroError(f"zero.comm.{what}: the output has {output.numel()} elements and the "
                        f"input {tensor.numel()}; in a job of one rank they are the same size")
