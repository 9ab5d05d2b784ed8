// Optimizer state on NVMe when the disk misbehaves: a disk that fills up after init fails the
// backward pass's gradient writes or the step with an io error naming the swap file (and the files
// stay for inspection), and a swap file changed or truncated behind the engine's back is caught by
// its checksum before the optimizer uses it. Every rank meets the same fault at the same point, so
// all of them fail in the same call.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "base/error.h"
#include "engine_model.h"
#include "multirank.h"

namespace zero::testing {
namespace {

namespace fs = std::filesystem;

// A directory of its own for one test's swap files, removed at the end.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name) {
    path = fs::current_path() / (name + "-" + std::to_string(getpid()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  // The rank's swap file: <path>/zero/<job>/rank<r>/optimizer.swap.
  fs::path swap_file(int rank) const {
    for (const auto& job : fs::directory_iterator(path / "zero")) {
      const fs::path file = job.path() / ("rank" + std::to_string(rank)) / "optimizer.swap";
      if (fs::exists(file)) return file;
    }
    return {};
  }
};

std::string nvme_config(const fs::path& dir, int buffers = 3,
                        const std::string& sub_group = "700") {
  return R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000, "sub_group_size": )" +
         sub_group + R"(, "allgather_bucket_size": 5e9,
        "offload_optimizer": {"device": "nvme", "nvme_path": ")" +
         dir.string() + R"(", "buffer_count": )" + std::to_string(buffers) + "}}}";
}

}  // namespace

TEST_CASE("engine swap: settings the pipeline cannot work with are refused at init", "[engine]") {
  ScratchDir dir("swap-settings");
  try {
    make_engine(nvme_config(dir.path, 2));
    FAIL("two swap buffers were accepted");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::config);
    CHECK_THAT(error.what(), Catch::Contains("buffer_count is 2"));
  }
  // The test model's groups are small whatever sub_group_size says, so the buffers are made
  // too many instead: 1e8 of them, over a terabyte, fit in no host's memory. The check that the
  // run fits the machine refuses them first (engine/plan/memory_fit.h); without it, the swap's own
  // check, against half the host's physical memory.
  try {
    make_engine(nvme_config(dir.path, 100000000, "1e12"));
    FAIL("buffers larger than the host's memory were accepted");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::out_of_memory);
    CHECK_THAT(error.what(), Catch::Contains("offloaded optimizer state"));
    CHECK_THAT(error.what(), Catch::Contains("zero_optimization.sub_group_size"));
  }
  ::setenv("ZERO_MEMORY_CHECK", "off", 1);
  try {
    make_engine(nvme_config(dir.path, 100000000, "1e12"));
    FAIL("buffers larger than the host's memory were accepted without the fit check");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::config);
    CHECK_THAT(error.what(), Catch::Contains("more than half of this host's"));
  }
  ::unsetenv("ZERO_MEMORY_CHECK");
}

TEST_CASE("engine swap: a parameter shard larger than offload_param.buffer_size is refused",
          "[engine]") {
  ScratchDir dir("swap-param-buffer");
  try {
    make_engine(R"({"train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
        "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": ")" +
                dir.path.string() + R"(", "buffer_size": 100}}})");
    FAIL("a parameter larger than the parameter buffers was accepted");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::config);
    // p0 (1201 elements) is the first whose shard exceeds 100 at up to 4 ranks.
    CHECK_THAT(error.what(), Catch::Contains("parameter 'p0'"));
    CHECK_THAT(error.what(), Catch::Contains("offload_param.buffer_size (100)"));
  }
}

TEST_CASE("engine swap: a disk that fills up fails the step, naming the file, and keeps it",
          "[engine]") {
  // sub_group_size 700: many groups, whose gradients are written out during the backward pass,
  // so that the end of the pass fails; 20000: one group, whose gradient stays in a buffer, so
  // that the step's own writes fail.
  for (const auto& [sub_group, failed] :
       {std::pair<std::string, std::string>{"700", "reducing the gradients failed"},
        {"20000", "a step failed"}}) {
    INFO("sub_group_size " << sub_group);
    ScratchDir dir("swap-full-" + sub_group);
    std::atomic<bool> full{false};
    engine::FaultHooks hooks;
    hooks.aio = [&](bool write, const std::string&, std::uint64_t, std::size_t) {
      return full && write ? ENOSPC : 0;
    };
    auto e = make_engine(nvme_config(dir.path, 3, sub_group), {},
                         [&](engine::Engine& engine) { engine::set_fault_hooks(engine, hooks); });
    micro_step(*e, kModuleOrder, 0);  // a good step first
    const fs::path file = dir.swap_file(e->rank());
    REQUIRE(!file.empty());
    full = true;
    try {
      micro_step(*e, kModuleOrder, 1);
      FAIL("a step whose swap writes fail went through");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::io);
      CHECK_THAT(error.what(), Catch::Contains(file.string()));
      CHECK_THAT(error.what(), Catch::Contains(std::strerror(ENOSPC)));
    }
    // The window's gradients or the optimizer state are lost: no further pass is taken.
    full = false;
    try {
      micro_step(*e, kModuleOrder, 2);
      FAIL("a pass after a failed one went through");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains("pre_forward after a failure (" + failed));
    }
    e.reset();
    CHECK(fs::exists(file));  // left for inspection
  }
}

TEST_CASE("engine swap: a swap file changed or truncated behind the engine is never used",
          "[engine]") {
  for (const bool truncate : {false, true}) {
    INFO((truncate ? "truncated" : "overwritten"));
    ScratchDir dir(truncate ? "swap-truncated" : "swap-altered");
    auto e = make_engine(nvme_config(dir.path));
    micro_step(*e, kModuleOrder, 0);
    const fs::path file = dir.swap_file(e->rank());
    REQUIRE(!file.empty());
    const int fd = ::open(file.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    if (truncate) {
      REQUIRE(::ftruncate(fd, 0) == 0);
    } else {
      const std::vector<char> junk(64, 'x');
      REQUIRE(::pwrite(fd, junk.data(), junk.size(), 100) == static_cast<ssize_t>(junk.size()));
    }
    ::close(fd);
    try {
      micro_step(*e, kModuleOrder, 1);
      FAIL("a step read a damaged swap file without noticing");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::io);
      CHECK_THAT(error.what(), Catch::Contains(file.string()));
    }
  }
}

}  // namespace zero::testing
