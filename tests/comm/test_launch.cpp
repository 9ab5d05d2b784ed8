// Reading the launcher's environment: each launcher's names, precedence, defaults and errors.
#include <catch2/catch.hpp>

#include <map>

#include "base/error.h"
#include "comm/launch.h"
#include "tests/comm/fake_environment.h"

namespace zero::comm {

using testing::fake_environment;

TEST_CASE("no launcher means one rank") {
  const LaunchInfo info = detect_launch(fake_environment({}));
  CHECK(info.launcher == "none");
  CHECK(info.rank == 0);
  CHECK(info.world_size == 1);
  CHECK(info.local_rank == 0);
  CHECK_FALSE(info.mpi_launcher);
}

TEST_CASE("mpirun's OMPI_COMM_WORLD variables give rank, size and local rank") {
  const LaunchInfo info = detect_launch(fake_environment({{"OMPI_COMM_WORLD_RANK", "5"},
                                                          {"OMPI_COMM_WORLD_SIZE", "8"},
                                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  CHECK(info.launcher == "mpirun");
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 4);
  CHECK(info.mpi_launcher);
}

TEST_CASE("srun's variables count only inside a job step, and uneven tasks per node parse") {
  const std::map<std::string, std::string> job = {{"SLURM_PROCID", "3"},
                                                  {"SLURM_NTASKS", "4"},
                                                  {"SLURM_LOCALID", "1"},
                                                  {"SLURM_NTASKS_PER_NODE", "2(x2)"}};
  // sbatch's batch script has SLURM_PROCID too but is one process: no step, no launch.
  CHECK(detect_launch(fake_environment(job)).launcher == "none");
  const LaunchInfo info = detect_launch(fake_environment({{"SLURM_PROCID", "3"},
                                                          {"SLURM_NTASKS", "4"},
                                                          {"SLURM_LOCALID", "1"},
                                                          {"SLURM_NTASKS_PER_NODE", "2(x2)"},
                                                          {"SLURM_STEP_ID", "0"}}));
  CHECK(info.launcher == "srun");
  CHECK(info.rank == 3);
  CHECK(info.world_size == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 2);
}

TEST_CASE("PMI and torchrun variables are read, and ZERO_ variables win over all") {
  LaunchInfo info = detect_launch(fake_environment({{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}}));
  CHECK(info.launcher == "pmi");
  CHECK(info.rank == 2);
  CHECK(info.local_rank == 2);  // no local rank given: one node assumed

  info = detect_launch(fake_environment({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}}));
  CHECK(info.launcher == "torchrun");
  CHECK_FALSE(info.mpi_launcher);

  info = detect_launch(fake_environment({{"ZERO_RANK", "0"},
                                         {"ZERO_WORLD_SIZE", "2"},
                                         {"ZERO_RENDEZVOUS_DIR", "/tmp/r"},
                                         {"OMPI_COMM_WORLD_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "2"}}));
  CHECK(info.launcher == "zero");
  CHECK(info.rank == 0);
  CHECK(info.rendezvous_dir == "/tmp/r");
}

TEST_CASE("malformed launcher variables are usage errors naming the variable") {
  CHECK_THROWS_WITH(detect_launch(fake_environment(
                        {{"OMPI_COMM_WORLD_RANK", "x1"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                    Catch::Contains("OMPI_COMM_WORLD_RANK='x1'"));
  CHECK_THROWS_WITH(detect_launch(fake_environment({{"ZERO_RANK", "2"}, {"ZERO_WORLD_SIZE", "2"}})),
                    Catch::Contains("rank 2 (ZERO_RANK) of 2 ranks"));
  CHECK_THROWS_WITH(detect_launch(fake_environment({{"ZERO_RANK", "0"}, {"ZERO_WORLD_SIZE", "0"}})),
                    Catch::Contains("ZERO_WORLD_SIZE='0'"));
}

}  // namespace zero::comm
