// The bounded start-up: ZERO_START_TIMEOUT and ZERO_START_DIR, the message that names the ranks
// that never arrived, arrival files, and a watch that ends before its timeout doing nothing.
// (The timeout ending a real job is tests/tools/check_zero_run.sh's start_timeout case.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include "base/error.h"
#include "comm/start_watch.h"
#include "tests/comm/fake_environment.h"
#include "tests/scratch.h"

namespace zero::comm {
namespace {

using testing::fake_environment;

LaunchInfo job(int rank, int world) {
  LaunchInfo launch;
  launch.launcher = "mpirun";
  launch.rank = rank;
  launch.world_size = world;
  return launch;
}

}  // namespace

TEST_CASE("start-up settings: 300 s by default, ZERO_START_TIMEOUT and ZERO_START_DIR") {
  CHECK(start_settings(fake_environment({})).timeout_seconds == 300);
  CHECK(start_settings(fake_environment({})).dir.empty());
  const StartSettings set =
      start_settings(fake_environment({{"ZERO_START_TIMEOUT", "2.5"}, {"ZERO_START_DIR", "/x"}}));
  CHECK(set.timeout_seconds == 2.5);
  CHECK(set.dir == "/x");
  for (const char* bad : {"", "0", "-3", "ten", "5s"}) {
    INFO(bad);
    try {
      start_settings(fake_environment({{"ZERO_START_TIMEOUT", bad}}));
      FAIL("accepted");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains("ZERO_START_TIMEOUT") && Catch::Contains("above 0"));
    }
  }
}

TEST_CASE("the start-up message names the ranks without an arrival file") {
  testing::ScratchDir dir("start");
  StartSettings settings;
  settings.dir = dir.path();
  settings.timeout_seconds = 1e9;  // the watch never fires here
  {
    // A watch writes its rank's arrival file and, done in time, does nothing more.
    StartWatch watch(job(0, 4), settings, "MPI_Init_thread");
    watch.done();
  }
  CHECK(std::filesystem::exists(dir.file("rank0")));
  std::ofstream(dir.file("rank2")).put('\n');
  const std::string text = start_timeout_message(job(0, 4), settings, 30, "MPI_Init_thread");
  CHECK_THAT(text, Catch::Contains("rank 0 of 4") && Catch::Contains("within 30 s") &&
                       Catch::Contains("MPI_Init_thread still waits") &&
                       Catch::Contains("ranks 1, 3 of 4 never reached start-up") &&
                       Catch::Contains("pid " + std::to_string(::getpid())));
  std::ofstream(dir.file("rank1")).put('\n');
  std::ofstream(dir.file("rank3")).put('\n');
  CHECK_THAT(start_timeout_message(job(0, 4), settings, 30, "MPI_Init_thread"),
             Catch::Contains("every rank reached start-up"));
  settings.dir.clear();
  CHECK_THAT(start_timeout_message(job(1, 2), settings, 30, "MPI_Init_thread"),
             Catch::Contains("cannot be named"));
}

}  // namespace zero::comm
