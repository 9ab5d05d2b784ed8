// The GradSwap alone (engine/gradients/grad_swap.h): gradients added at random owned offsets,
// across groups and over several micro-steps, through fewer buffers than groups, read back at the
// step exactly as the same adds give in memory; the statistics are those of the bytes; a
// released or zeroed group is zero; a failed write is kept and thrown at the end of the adds,
// before the step, never lost; a group held for super_offload's speculated step stays in its
// buffer while another thread's adds go on.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/arena.h"
#include "device/device.h"
#include "device/host_kernels.h"
#include "engine/gradients/grad_swap.h"
#include "engine/state/optimizer_swap.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

// Odd sizes, one empty group, a first group that does not start at 0 (a resident prefix).
const std::vector<std::size_t> kElements{1000, 37, 0, 2049, 513, 7, 1500};
constexpr std::size_t kFirst = 123;

// An OptimizerSwap with gradient regions, the GradSwap over it, and the memory behind them.
struct Rig {
  zero::testing::ScratchDir scratch;
  std::unique_ptr<Device> cpu = create_cpu_device();
  std::unique_ptr<offload::AsyncIO> io;
  std::unique_ptr<offload::SwapDirectory> dir;
  Arena pinned{cpu.get(), Tier::pinned, std::size_t{4} << 20, "pinned"};
  Arena nvme{nullptr, Tier::nvme, std::size_t{4} << 20, "nvme"};
  std::unique_ptr<OptimizerSwap> swap;
  std::unique_ptr<GradSwap> grads;
  std::vector<std::size_t> lo;

  Rig(const std::string& name, DType dtype, offload::FaultInjector inject = {}) : scratch(name) {
    offload::AioOptions aio;
    aio.inject = std::move(inject);
    io = offload::AsyncIO::create(aio);
    dir = std::make_unique<offload::SwapDirectory>(scratch.path(), "job", 0);
    OptimizerSwapOptions options;
    options.group_elements = kElements;
    options.buffer_count = 3;
    options.grad_dtype = dtype;
    swap = std::make_unique<OptimizerSwap>(options, *io, *dir, pinned, nvme);
    std::size_t at = kFirst;
    for (std::size_t n : kElements) {
      lo.push_back(at);
      at += n;
    }
    grads = std::make_unique<GradSwap>(*swap, *io, pinned, dtype, 3, lo, kElements);
  }
  std::size_t end() const { return lo.back() + kElements.back(); }
};

// A disk that fails every write with ENOSPC (the rig writes nothing before its first add).
offload::FaultInjector full_disk() {
  return
      [](bool write, const std::string&, std::uint64_t, std::size_t) { return write ? ENOSPC : 0; };
}

// `count` floats from a normal distribution.
std::vector<float> normal(std::mt19937_64& random, std::size_t count) {
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::vector<float> out(count);
  for (float& x : out) x = value(random);
  return out;
}

}  // namespace

TEST_CASE("grad swap: adds in any order come back at the step as the same adds in memory",
          "[engine]") {
  for (const DType dtype : {DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    Rig rig("grad-swap", dtype);
    const std::size_t size = dtype_size(dtype);
    const std::size_t total = rig.end() - kFirst;
    std::vector<char> want(total * size, 0);
    std::mt19937_64 random(7);
    // Two windows: each three micro-steps of adds at random offsets and lengths (some spanning
    // groups), so groups are written out, read back and added into again.
    for (int window = 0; window < 2; ++window) {
      for (int micro = 0; micro < 3; ++micro) {
        for (int k = 0; k < 40; ++k) {
          const std::size_t at = random() % total;
          const std::size_t count = std::min<std::size_t>(1 + random() % 1800, total - at);
          const std::vector<float> src = normal(random, count);
          rig.grads->add(kFirst + at, src.data(), DType::f32, count, 0.25f);
          host::accumulate(src.data(), DType::f32, want.data() + at * size, dtype, count, 0.25f);
        }
      }
      REQUIRE_NOTHROW(rig.grads->rethrow());
      // The statistics: each group's sum of squares of its bytes, added in group order.
      double sum = 0.0;
      for (std::size_t g = 0; g < kElements.size(); ++g) {
        sum += host::sum_squares(want.data() + (rig.lo[g] - kFirst) * size, dtype, kElements[g]);
      }
      CHECK(rig.grads->sum_squares() == sum);
      CHECK_FALSE(rig.grads->any_nonfinite());
      // The step: every group, in order, holds what the same adds give in memory.
      for (std::size_t g = 0; g < kElements.size(); ++g) {
        INFO("group " << g);
        const void* got = rig.grads->acquire(g);
        if (kElements[g] == 0) {
          CHECK(got == nullptr);
        } else {
          CHECK(std::memcmp(got, want.data() + (rig.lo[g] - kFirst) * size, kElements[g] * size) ==
                0);
        }
        rig.grads->release(g);
      }
      // Stepped: zero, in the statistics and when acquired again.
      CHECK(rig.grads->sum_squares() == 0.0);
      const auto* first = static_cast<const unsigned char*>(rig.grads->acquire(0));
      CHECK(
          std::all_of(first, first + kElements[0] * size, [](unsigned char b) { return b == 0; }));
      rig.grads->release(0);
      std::fill(want.begin(), want.end(), 0);
    }
  }
}

TEST_CASE("grad swap: a held group stays in its buffer while other groups' adds go on",
          "[engine]") {
  Rig rig("grad-swap-hold", DType::f32);
  std::mt19937_64 random(11);
  const std::size_t total = rig.end() - kFirst;
  std::vector<float> want(total, 0.0f);
  const auto add = [&](std::size_t g, std::mt19937_64& from) {
    const std::vector<float> src = normal(from, kElements[g]);
    rig.grads->add(rig.lo[g], src.data(), DType::f32, kElements[g], 1.0f);
    host::accumulate(src.data(), DType::f32, want.data() + (rig.lo[g] - kFirst), DType::f32,
                     kElements[g], 1.0f);
  };
  add(3, random);
  add(4, random);
  // Group 4 is final. Another thread adds into every other group, three times over, while this
  // one holds group 4 (its statistics taken meanwhile): through the two buffers left, groups go
  // out and come back, and the held buffer is never taken.
  std::vector<float> want4(
      want.begin() + static_cast<std::ptrdiff_t>(rig.lo[4] - kFirst),
      want.begin() + static_cast<std::ptrdiff_t>(rig.lo[4] - kFirst + kElements[4]));
  std::thread adder([&] {
    std::mt19937_64 mine(13);
    for (int round = 0; round < 3; ++round) {
      for (std::size_t g : {0, 1, 3, 5, 6}) add(g, mine);
    }
  });
  const auto* held = static_cast<const float*>(rig.grads->hold(4));
  CHECK(std::memcmp(held, want4.data(), kElements[4] * sizeof(float)) == 0);
  adder.join();
  CHECK(std::memcmp(held, want4.data(), kElements[4] * sizeof(float)) == 0);
  // Let go, it is written out like any group; the step reads every group back as added, and
  // the statistics (group 4's taken at the hold) are those of the bytes.
  rig.grads->unhold(4);
  for (std::size_t g : {0, 1, 3, 5, 6}) add(g, random);
  double sum = 0.0;
  for (std::size_t g = 0; g < kElements.size(); ++g) {
    sum += host::sum_squares(want.data() + (rig.lo[g] - kFirst), DType::f32, kElements[g]);
  }
  CHECK(rig.grads->sum_squares() == sum);
  for (std::size_t g = 0; g < kElements.size(); ++g) {
    INFO("group " << g);
    const void* got = rig.grads->acquire(g);
    if (kElements[g] != 0) {
      CHECK(std::memcmp(got, want.data() + (rig.lo[g] - kFirst), kElements[g] * sizeof(float)) ==
            0);
    }
    rig.grads->release(g);
  }
}

TEST_CASE("grad swap: a NaN is found whether its group is in a buffer or written out", "[engine]") {
  Rig rig("grad-swap-nan", DType::f32);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  rig.grads->add(rig.lo[4] + 5, &nan, DType::f32, 1, 1.0f);
  CHECK(rig.grads->any_nonfinite());
  // Every other group comes in: group 4 is written out, its statistics kept.
  std::mt19937_64 random(3);
  for (std::size_t g : {0, 1, 3, 5, 6}) {
    const std::vector<float> src = normal(random, kElements[g]);
    rig.grads->add(rig.lo[g], src.data(), DType::f32, kElements[g], 1.0f);
  }
  CHECK(rig.grads->any_nonfinite());
  CHECK(std::isnan(rig.grads->sum_squares()));
  rig.grads->zero();
  CHECK_FALSE(rig.grads->any_nonfinite());
  CHECK(rig.grads->sum_squares() == 0.0);
}

TEST_CASE("grad swap: a failed write is kept, later adds are dropped, and it is thrown after",
          "[engine]") {
  Rig rig("grad-swap-full", DType::f32, full_disk());
  std::mt19937_64 random(5);
  // More groups than buffers: some are written out, and those writes fail.
  for (std::size_t g = 0; g < kElements.size(); ++g) {
    const std::vector<float> src = normal(random, kElements[g]);
    rig.grads->add(rig.lo[g], src.data(), DType::f32, kElements[g], 1.0f);
  }
  const Error error = zero::testing::error_of([&] { rig.grads->rethrow(); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::Contains(rig.swap->path()));
  CHECK_THAT(error.what(), Catch::Contains(std::strerror(ENOSPC)));
  // Still failed for whatever comes next: the step refuses too.
  CHECK_THROWS(rig.grads->sum_squares());
  CHECK_THROWS(rig.grads->acquire(0));
}

TEST_CASE("grad swap: a write behind the last add that fails is thrown at the end of the adds",
          "[engine]") {
  Rig rig("grad-swap-last", DType::f32, full_disk());
  std::mt19937_64 random(9);
  // Three groups fill the three buffers: the last add starts writing the first group out, and
  // nothing after it waits for that write.
  for (std::size_t g : {0, 1, 3}) {
    const std::vector<float> src = normal(random, kElements[g]);
    rig.grads->add(rig.lo[g], src.data(), DType::f32, kElements[g], 1.0f);
  }
  const Error error = zero::testing::error_of([&] { rig.grads->finish_adds(); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::Contains(std::strerror(ENOSPC)));
  CHECK_THROWS(rig.grads->sum_squares());  // and the step that would follow refuses
}

}  // namespace zero::engine
