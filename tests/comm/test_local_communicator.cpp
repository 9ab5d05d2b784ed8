// The world-of-one backend, the shared argument checks, bounded waits and poisoning.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "base/error.h"
#include "comm/comm_base.h"
#include "comm/create.h"

namespace zero::comm {
namespace {

std::unique_ptr<Communicator> local() {
  CommOptions options;
  options.backend = Backend::local;
  options.launch = LaunchInfo{};
  return create_communicator(options);
}

// A collective that never completes, to exercise bounded waits.
class StuckWork final : public TrackedWork {
 public:
  using TrackedWork::TrackedWork;
  bool poll() override { return false; }

 protected:
  std::string missing_ranks() override {
    return "ranks that have not issued it: 2 (last issued #4)";
  }
};

}  // namespace

TEST_CASE("a world of one: reductions keep the data, gathers and scatters copy the block") {
  auto comm = local();
  CHECK(comm->backend() == "local");
  CHECK(comm->size() == 1);
  CHECK(comm->rank() == 0);
  CHECK(comm->name() == "world");

  std::vector<float> data = {1.0f, -2.5f, 3.0f};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    comm->all_reduce(data.data(), data.size(), DType::f32, op).wait();
  }
  CHECK(data == std::vector<float>{1.0f, -2.5f, 3.0f});

  std::vector<std::int64_t> in = {4, 5, 6}, out(3);
  comm->reduce_scatter(in.data(), out.data(), 3, DType::i64, ReduceOp::sum).wait();
  CHECK(out == in);
  std::vector<std::int64_t> gathered(3);
  Work gather = comm->all_gather(in.data(), gathered.data(), 3, DType::i64);
  CHECK(gather.test());
  CHECK(gathered == in);
  comm->broadcast(data.data(), data.size(), DType::f32, 0).wait();
  comm->barrier().wait();
}

TEST_CASE("split of a world of one: a color gives a new world of one, a negative one nothing") {
  auto comm = local();
  auto child = comm->split(3, 0);
  REQUIRE(child != nullptr);
  CHECK(child->size() == 1);
  CHECK(child->name() == "world/split(3)");
  CHECK(comm->split(-1, 0) == nullptr);
}

TEST_CASE("bad arguments are usage errors naming the call") {
  auto comm = local();
  float x[4] = {};
  CHECK_THROWS_WITH(comm->all_reduce(nullptr, 4, DType::f32, ReduceOp::sum),
                    Catch::Contains("all_reduce: data is null with 4 elements"));
  CHECK_THROWS_WITH(comm->broadcast(x, 4, DType::f32, 1),
                    Catch::Contains("broadcast: root 1 is not a rank"));
  // Output overlapping the input other than as this rank's block.
  CHECK_THROWS_WITH(comm->reduce_scatter(x, x + 1, 2, DType::f32, ReduceOp::sum),
                    Catch::Contains("in-place form"));
  CHECK_THROWS_WITH(comm->all_gather(x + 1, x, 2, DType::f32), Catch::Contains("in-place form"));
  // The in-place forms are fine, as are null buffers of no elements.
  comm->reduce_scatter(x, x, 4, DType::f32, ReduceOp::sum).wait();
  comm->all_gather(x, x, 4, DType::f32).wait();
  comm->all_reduce(nullptr, 0, DType::f32, ReduceOp::sum).wait();
  comm->begin_group();
  CHECK_THROWS_WITH(comm->begin_group(), Catch::Contains("groups do not nest"));
  comm->end_group();
  CHECK_THROWS_WITH(comm->end_group(), Catch::Contains("end_group without begin_group"));
}

TEST_CASE("a wait past its timeout names the collective and poisons the communicator") {
  auto health = std::make_shared<Health>("communicator world (mpi, rank 0 of 3)");
  OpInfo op{"all_reduce", 5, 1000, DType::bf16, ReduceOp::sum, -1};
  Work work(std::make_shared<StuckWork>(op, health, std::chrono::milliseconds(50)));
  CHECK_FALSE(work.test());
  try {
    work.wait();
    FAIL("no timeout");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::timeout);
    CHECK_THAT(error.what(),
               Catch::Contains("all_reduce #5 (1000 bf16 elements, 1.95 KiB, sum) on communicator "
                               "world (mpi, rank 0 of 3) timed out after") &&
                   Catch::Contains("ranks that have not issued it: 2 (last issued #4)") &&
                   Catch::Contains("comm_timeout_s"));
  }
  CHECK(health->poisoned());
  // Another work on the same communicator now fails at once, saying why.
  Work other(std::make_shared<StuckWork>(OpInfo{"barrier", 6, 0, DType::f32, std::nullopt, -1},
                                         health, std::chrono::hours(1)));
  CHECK_THROWS_WITH(other.wait(), Catch::Contains("unusable after an earlier failure") &&
                                      Catch::Contains("all_reduce #5 (1000 bf16 elements"));
}

TEST_CASE("backend and progress names parse, and a world above one refuses the local backend") {
  CHECK(parse_backend("mpi") == Backend::mpi);
  CHECK(parse_backend("auto") == Backend::automatic);
  CHECK_FALSE(parse_backend("gloo").has_value());
  CHECK(parse_progress("thread") == Progress::thread);
  CHECK_FALSE(parse_progress("spin").has_value());
  CHECK(backend_built(Backend::local));

  CommOptions options;
  options.backend = Backend::local;
  options.launch = LaunchInfo{"mpirun", 0, 2, 0, 2, "", true};
  CHECK_THROWS_WITH(create_communicator(options), Catch::Contains("started 2 ranks"));
  options.backend = Backend::automatic;
  options.launch = LaunchInfo{};
  CHECK(create_communicator(options)->backend() == "local");
}

}  // namespace zero::comm
