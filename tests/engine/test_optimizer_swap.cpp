// The OptimizerSwap's second regions (engine/state/optimizer_swap.h), super_offload's step on NVMe
// to come: a speculated step reads each group's state as it stands and writes the other region;
// dropping the speculation leaves every group as it was, keeping it makes the written regions
// current without a copy, and the normal step, peek and a later speculation then see the kept
// state. Odd group sizes, an empty group, fewer buffers than groups, an order unlike the
// groups' own.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "device/arena.h"
#include "device/device.h"
#include "engine/state/optimizer_swap.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

const std::vector<std::size_t> kSwapElements{1000, 37, 0, 2049, 513, 7, 1500};

struct SwapRig {
  zero::testing::ScratchDir scratch;
  std::unique_ptr<Device> cpu = create_cpu_device();
  std::unique_ptr<offload::AsyncIO> io = offload::AsyncIO::create({});
  std::unique_ptr<offload::SwapDirectory> dir;
  Arena pinned{cpu.get(), Tier::pinned, std::size_t{4} << 20, "pinned"};
  Arena nvme{nullptr, Tier::nvme, std::size_t{4} << 20, "nvme"};
  std::unique_ptr<OptimizerSwap> swap;

  SwapRig(const std::string& name, bool pipeline) : scratch(name) {
    dir = std::make_unique<offload::SwapDirectory>(scratch.path(), "job", 0);
    OptimizerSwapOptions options;
    options.group_elements = kSwapElements;
    options.buffer_count = 3;
    options.pipeline_read = pipeline;
    options.pipeline_write = pipeline;
    options.second_regions = true;
    swap = std::make_unique<OptimizerSwap>(options, *io, *dir, pinned, nvme);
  }
};

// The value of element i of group g's master (k = 0) or moment k - 1, at `version`.
float swap_value(std::size_t g, std::size_t i, int k, int version) {
  return static_cast<float>(version * 100000 + static_cast<int>(g) * 5000 + static_cast<int>(i)) +
         0.25f * static_cast<float>(k);
}

void write_version(const GroupView& v, std::size_t g, int version) {
  for (std::size_t i = 0; i < kSwapElements[g]; ++i) {
    v.master[i] = swap_value(g, i, 0, version);
    for (int k = 0; k < 2; ++k)
      static_cast<float*>(v.state[k])[i] = swap_value(g, i, k + 1, version);
  }
}

// How many elements of group g's view differ from `version`.
std::size_t wrong_in(const GroupView& v, std::size_t g, int version) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kSwapElements[g]; ++i) {
    wrong += v.master[i] != swap_value(g, i, 0, version);
    for (int k = 0; k < 2; ++k) {
      wrong += static_cast<const float*>(v.state[k])[i] != swap_value(g, i, k + 1, version);
    }
  }
  return wrong;
}

std::size_t wrong_everywhere(OptimizerSwap& swap, int version) {
  std::size_t wrong = 0;
  for (std::size_t g = 0; g < kSwapElements.size(); ++g)
    wrong += wrong_in(swap.peek(g), g, version);
  return wrong;
}

// One speculation over every group in `order`, taken in `taken` (the order given unless set):
// each must read `from`, and is written as `to`.
std::size_t speculate(OptimizerSwap& swap, const std::vector<std::size_t>& order, int from, int to,
                      bool keep, const std::vector<std::size_t>& taken = {}) {
  std::size_t wrong = 0;
  swap.begin_speculation(order);
  for (std::size_t g : taken.empty() ? order : taken) {
    const GroupView v = swap.acquire_speculated(g);
    wrong += wrong_in(v, g, from);
    write_version(v, g, to);
    swap.release_speculated(g);
  }
  swap.end_speculation(keep);
  return wrong;
}

}  // namespace

TEST_CASE("optimizer swap: a speculation reads the current state and is kept or dropped whole",
          "[engine]") {
  for (bool pipeline : {false, true}) {
    INFO("pipelined reads and writes: " << pipeline);
    SwapRig rig("optimizer-swap-speculation", pipeline);
    OptimizerSwap& swap = *rig.swap;
    for (std::size_t g = 0; g < kSwapElements.size(); ++g) {
      write_version(swap.fill(g), g, 1);
      swap.commit(g);
    }
    swap.finish();
    const std::vector<std::size_t> order{6, 4, 5, 1, 3, 0, 2};

    // Dropped: every group as it was.
    CHECK(speculate(swap, order, 1, 2, /*keep=*/false) == 0);
    CHECK(wrong_everywhere(swap, 1) == 0);
    // Kept: the speculated state is current, without a step of its own.
    CHECK(speculate(swap, order, 1, 3, /*keep=*/true) == 0);
    CHECK(wrong_everywhere(swap, 3) == 0);
    // The normal step reads the kept state and writes it in place.
    for (std::size_t g = 0; g < kSwapElements.size(); ++g) {
      const GroupView v = swap.acquire(g);
      CHECK(wrong_in(v, g, 3) == 0);
      write_version(v, g, 4);
      swap.release(g);
    }
    swap.finish();
    CHECK(wrong_everywhere(swap, 4) == 0);
    // A later speculation reads that, and writes the region the first kept one left behind;
    // dropped, then kept with part of the order only.
    CHECK(speculate(swap, {2, 0, 5}, 4, 5, /*keep=*/false) == 0);
    CHECK(wrong_everywhere(swap, 4) == 0);
    CHECK(speculate(swap, {5, 0}, 4, 6, /*keep=*/true) == 0);
    for (std::size_t g = 0; g < kSwapElements.size(); ++g) {
      CHECK(wrong_in(swap.peek(g), g, g == 5 || g == 0 ? 6 : 4) == 0);
    }
    // Taken out of the order given (a bucket that did not report): the reads gone ahead along
    // the order are not mistaken for the groups taken.
    for (std::size_t g = 0; g < kSwapElements.size(); ++g) {
      write_version(swap.acquire(g), g, 7);
      swap.release(g);
    }
    swap.finish();
    CHECK(speculate(swap, order, 7, 8, /*keep=*/false, {3, 6, 0, 2, 4, 1}) == 0);
    CHECK(speculate(swap, order, 7, 9, /*keep=*/true, {1, 0, 6, 3}) == 0);
    for (std::size_t g = 0; g < kSwapElements.size(); ++g) {
      CHECK(wrong_in(swap.peek(g), g, g == 1 || g == 0 || g == 6 || g == 3 ? 9 : 7) == 0);
    }
  }
}

TEST_CASE("optimizer swap: speculation needs its second regions and the order it was given",
          "[engine]") {
  zero::testing::ScratchDir scratch("optimizer-swap-refusals");
  auto cpu = create_cpu_device();
  auto io = offload::AsyncIO::create({});
  offload::SwapDirectory dir(scratch.path(), "job", 0);
  Arena pinned{cpu.get(), Tier::pinned, std::size_t{4} << 20, "pinned"};
  Arena nvme{nullptr, Tier::nvme, std::size_t{4} << 20, "nvme"};
  OptimizerSwapOptions options;
  options.group_elements = kSwapElements;
  OptimizerSwap single(options, *io, dir, pinned, nvme);
  CHECK_THROWS_WITH(single.begin_speculation({0}), Catch::Contains("without second regions"));

  SwapRig rig("optimizer-swap-order", true);
  CHECK_THROWS_WITH(rig.swap->begin_speculation({1, 1}), Catch::Contains("given twice"));
  rig.swap->begin_speculation({3, 1});
  CHECK_THROWS_WITH(rig.swap->acquire_speculated(2), Catch::Contains("outside the speculation"));
  rig.swap->end_speculation(false);
  CHECK_THROWS_WITH(rig.swap->release_speculated(3), Catch::Contains("outside the speculation"));
}

}  // namespace zero::engine
