// The timeout test, run with 3 ranks: the last rank stops calling collectives; the others must
// get a timeout error naming the collective within comm_timeout_s (here 2 s), find the
// communicator poisoned, and end the job through abort with exit code 3. With --return they
// return 4 from main instead: the process must then leave without MPI_Finalize (which would
// wait for the stuck rank) so that mpirun ends the job. The ctest script checks the messages
// and the exit codes.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/create.h"

int main(int argc, char** argv) {
  const bool return_instead = argc > 1 && std::strcmp(argv[1], "--return") == 0;
  using namespace zero;
  comm::CommOptions options;
  options.backend = comm::Backend::mpi;
  options.timeout = std::chrono::seconds(2);
  auto world = comm::create_communicator(options);
  const int last = world->size() - 1;

  std::vector<float> data(1000, 1.0f);
  world->all_reduce(data.data(), data.size(), DType::f32, ReduceOp::sum).wait();
  if (world->rank() == last) {
    // Stops taking part; mpirun ends this rank when another aborts.
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return 0;
  }
  try {
    world->all_reduce(data.data(), data.size(), DType::f32, ReduceOp::sum).wait();
    std::printf("rank %d: NO TIMEOUT\n", world->rank());
    return 1;
  } catch (const Error& error) {
    std::printf("rank %d: %s error: %s\n", world->rank(),
                std::string(category_name(error.category())).c_str(), error.what());
  }
  try {
    world->barrier();
    std::printf("rank %d: NOT POISONED\n", world->rank());
    return 1;
  } catch (const Error& error) {
    std::printf("rank %d: then: %s\n", world->rank(), error.what());
  }
  std::fflush(stdout);
  if (return_instead) return 4;
  world->abort(3, "the timeout test ends the job");
}
