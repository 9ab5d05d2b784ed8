// The timeout test, run with 3 ranks: the last rank stops calling collectives; the others must
// get a timeout error naming the collective within comm_timeout_s (here 2 s), find the
// communicator poisoned, and end the job through abort with exit code 3. With --return they
// return 4 from main instead: the process must then leave without MPI_Finalize (which would
// wait for the stuck rank) so that mpirun ends the job. The ctest script checks the messages
// and the exit codes. --sync DIR: before aborting, each waiting rank marks DIR and waits (up
// to a minute) for the others' marks, since abort ends every process at once, and a rank whose
// own timeout came a moment later would be ended before it reported.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/create.h"

namespace {

// Marks DIR for this rank and waits until ranks 0 .. waiting-1 have all marked it, or a minute.
void wait_for_the_reports(const std::filesystem::path& dir, int rank, int waiting) {
  const auto mark = [&](int r) { return dir / ("reported." + std::to_string(r)); };
  std::ofstream(mark(rank)) << "reported\n";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (;;) {
    int reported = 0;
    for (int r = 0; r < waiting; ++r) reported += std::filesystem::exists(mark(r)) ? 1 : 0;
    if (reported == waiting || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool return_instead = false;
  std::filesystem::path sync_dir;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--return") == 0) {
      return_instead = true;
    } else if (std::strcmp(argv[i], "--sync") == 0 && i + 1 < argc) {
      sync_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--return] [--sync DIR]\n", argv[0]);
      return 2;
    }
  }
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
  if (!sync_dir.empty()) wait_for_the_reports(sync_dir, world->rank(), last);
  world->abort(3, "the timeout test ends the job");
}
