"""The rank programs of check_faults_job.sh, which runs one on 2 ranks and requires the job to end
within seconds, failed, naming the cause. They fail by design, so they are programs, not tests.

    fault_job.py CASE      (under zero-run -n 2, through tests/python/run.sh)

  raises     rank 1 raises at its second step while rank 0 trains on
  exits      rank 1 calls sys.exit(0) after one step while rank 0 trains on
  uneven     rank 0 trains 3 steps, rank 1 5, both ending normally
"""

import sys

import torch

import zero
from zero_checks import RANK, Norms, config


def job(steps_of, action=None):
    """`steps_of[rank]` steps at stage 2, `action(rank, step)` before each."""
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


def raises():
    def action(rank, step):
        if rank == 1 and step == 1:
            raise ValueError("boom on rank 1")
    job([20, 20], action)


def exits():
    def action(rank, step):
        if rank == 1 and step == 1:
            sys.exit(0)
    job([20, 20], action)


def uneven():
    job([3, 5])


CASES = {"raises": raises, "exits": exits, "uneven": uneven}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.exit(f"usage: fault_job.py {'|'.join(CASES)}")
    CASES[sys.argv[1]]()
