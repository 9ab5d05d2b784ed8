// The multi-rank test program: run under zero-run (mpirun) with 2, 3 or 4 ranks. Each rank runs
// every case; the program fails when any rank fails.
#include <memory>

#include "base/log.h"
#include "catch_session.h"
#include "comm/create.h"
#include "multirank.h"

namespace zero::testing {
namespace {

std::vector<std::unique_ptr<Communicator>> owned;
std::vector<Variant> all;
Communicator* side = nullptr;

std::unique_ptr<Communicator> make(comm::Progress progress, bool staged) {
  comm::CommOptions options;
  options.backend = comm::Backend::mpi;
  options.timeout = std::chrono::seconds(120);
  options.progress = progress;
  options.stage_host_buffers = staged;
  // The staged variant also cuts all_reduce and broadcast into many small pieces with odd
  // tails, so that the piece arithmetic is exercised by every case.
  if (staged) options.mpi_piece_bytes = 1000;
  return comm::create_communicator(options);
}

}  // namespace

const std::vector<Variant>& variants() {
  return all;
}
Communicator& side_channel() {
  return *side;
}

}  // namespace zero::testing

int main(int argc, char** argv) {
  using namespace zero;
  using namespace zero::testing;
  int failed = 0;
  {
    owned.push_back(make(comm::Progress::poll, false));
    owned.push_back(make(comm::Progress::thread, false));
    owned.push_back(make(comm::Progress::poll, true));
    owned.push_back(make(comm::Progress::poll, false));
    all = {{"mpi poll", owned[0].get()},
           {"mpi thread", owned[1].get()},
           {"mpi staged, 1000-byte pieces", owned[2].get()}};
    side = owned[3].get();
    log::set_rank(side->rank());

    failed = run_catch(argc, argv);
    // Destroying communicators is collective: every rank does it here, in the same order.
    all.clear();
    owned.clear();
  }
  return failed == 0 ? 0 : 1;
}
