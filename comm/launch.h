// Where this process sits in the job, read from the launcher's environment.
//
// Recognised, first match wins:
//   zero      ZERO_RANK, ZERO_WORLD_SIZE, ZERO_LOCAL_RANK, ZERO_LOCAL_SIZE (set by hand or by a
//             launcher of one's own, with ZERO_RENDEZVOUS_DIR for NCCL without MPI)
//   mpirun    OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (Open MPI)
//   srun      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (only inside a
//             job step: SLURM_STEP_ID set)
//   pmi       PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (MPICH's Hydra)
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (all of RANK and WORLD_SIZE set)
//   none      one rank
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace zero::comm {

struct LaunchInfo {
  std::string launcher = "none";  // "zero", "mpirun", "srun", "pmi", "torchrun" or "none"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // selects the GPU
  int local_size = 1;
  std::string rendezvous_dir;  // ZERO_RENDEZVOUS_DIR, empty when unset
  // True when MPI_Init can find the job's other ranks (mpirun, srun, pmi).
  bool mpi_launcher = false;
};

using Environment = std::function<std::optional<std::string>(std::string_view name)>;

// The process environment.
Environment process_environment();

// Throws a usage Error naming the variable when a value is not a number or out of range
// (rank >= world size, ...).
LaunchInfo detect_launch(const Environment& environment);
LaunchInfo detect_launch();

}  // namespace zero::comm
