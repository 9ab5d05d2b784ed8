// The memory model, to the byte: what each rank holds by kind after init and after a step is
// docs/engine.md's table (docs/design.md's, per dtype) plus the documented buffers, for stages 0-3
// in fp32, bf16, bf16 with fp32 gradient accumulation and bf16 with bf16 optimizer states, at
// whatever N the job has (ctest runs it at 1, 2, 3 and 4 ranks). The expected bytes are computed
// here from the table's formulas and the model's sizes, not from the engine's layout.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "base/error.h"
#include "device/memory_probe.h"
#include "engine_model.h"
#include "multirank.h"

namespace zero::testing {
namespace {

using engine::Engine;

constexpr std::size_t kReduceBucket = 1000;     // elements; p5 (4097) always overflows it
constexpr std::size_t kAllgatherBucket = 1500;  // elements; so does p5 at every N <= 4

struct Case {
  int stage;
  std::string precision;   // fp32 | bf16
  std::size_t grad_bytes;  // data_types.grad_accum_dtype: 0 = the compute dtype
  bool overlap;
  bool bf16_states = false;    // bf16.bf16_optimizer_states
  bool offload = false;        // offload_optimizer.device cpu
  bool pinned = true;          // and its pin_memory
  bool nvme = false;           // offload_optimizer.device nvme (with offload true)
  bool param_offload = false;  // offload_param.device cpu (stage 3), pinned
  bool param_nvme = false;     // offload_param.device nvme (with param_offload), max_in_cpu 0
};

constexpr std::size_t kSwapBuffers = 3;  // offload_optimizer.buffer_count

constexpr std::size_t kSubGroup = 700;  // sub_group_size; p5's shard exceeds it at N <= 4

std::string config_text(const Case& c) {
  std::string text =
      R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
      "zero_optimization": {"stage": )" +
      std::to_string(c.stage) + R"(, "reduce_bucket_size": )" + std::to_string(kReduceBucket) +
      R"(, "allgather_bucket_size": )" + std::to_string(kAllgatherBucket) +
      R"(, "overlap_comm": )" + (c.overlap ? "true" : "false") +
      R"(, "stage3_param_persistence_threshold": 10,
                          "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0,
                          "sub_group_size": )" +
      std::to_string(kSubGroup) + R"(, "offload_optimizer": {"device": ")" +
      (c.nvme      ? "nvme"
       : c.offload ? "cpu"
                   : "none") +
      R"(", "pin_memory": )" + (c.pinned ? "true" : "false") +
      R"(, "nvme_path": ".", "buffer_count": )" + std::to_string(kSwapBuffers) +
      R"(}, "offload_param": {"device": ")" +
      (c.param_nvme      ? "nvme"
       : c.param_offload ? "cpu"
                         : "none") +
      R"(", "pin_memory": true, "nvme_path": ".", "max_in_cpu": 0, "buffer_count": )" +
      std::to_string(kSwapBuffers) + "}}";
  if (c.precision == "bf16") {
    text += std::string(R"(, "bf16": {"enabled": true, "bf16_optimizer_states": )") +
            (c.bf16_states ? "true" : "false") + "}";
  }
  if (c.grad_bytes == 4) text += R"(, "data_types": {"grad_accum_dtype": "fp32"})";
  return text + "}";
}

using Where = std::pair<Tier, MemoryKind>;

struct Bytes {
  std::map<Where, std::size_t> live, peak;
};

Bytes measured(const Engine& e) {
  Bytes b;
  for (const auto& u : e.memory_usage()) {
    b.live[{u.tier, u.kind}] += u.live;
    b.peak[{u.tier, u.kind}] += u.peak;
  }
  return b;
}

// The table: Ψ trainable elements, N ranks, c compute bytes, g gradient-accumulation bytes.
Bytes expected(const Case& c, int world) {
  const Model model;
  const std::size_t cb = c.precision == "fp32" ? 4 : 2;
  const std::size_t gb = c.grad_bytes != 0 ? c.grad_bytes : cb;
  const bool mixed = c.precision != "fp32";
  const std::size_t n = c.stage == 0 ? 1 : static_cast<std::size_t>(world);
  auto shard = [&](std::int64_t numel) { return (static_cast<std::size_t>(numel) + n - 1) / n; };
  std::size_t all = 0, trainable = 0, trainable_shards = 0, frozen_shards = 0;
  for (std::size_t p = 0; p < model.sizes.size(); ++p) {
    all += static_cast<std::size_t>(model.sizes[p]);
    if (p == kFrozen) {
      frozen_shards += shard(model.sizes[p]);
    } else {
      trainable += static_cast<std::size_t>(model.sizes[p]);
      trainable_shards += shard(model.sizes[p]);
    }
  }
  Bytes b;
  auto& live = b.live;
  // Where the owned state is: the device, or offloaded to pinned or pageable host memory.
  const Tier owned = !c.offload ? Tier::device : c.pinned ? Tier::pinned : Tier::host;
  // Compute parameters: replicated at stages 0-2, the compute shards at stage 3 (fp32
  // trainable ones are their masters, unless those are offloaded).
  // With offload_param they are in pinned memory, trainable ones included in fp32.
  // On NVMe (max_in_cpu 0) all of them are in the parameter swap file.
  live[{c.param_nvme      ? Tier::nvme
        : c.param_offload ? Tier::pinned
                          : Tier::device,
        MemoryKind::param}] =
      c.stage <= 2
          ? cb * all
          : cb * (frozen_shards + (mixed || c.offload || c.param_offload ? trainable_shards : 0));
  // fp32 masters (stage 0 fp32 updates the parameters themselves) and Adam's two moments; with
  // NVMe in the swap file (the nvme tier), the gradient shard beside them.
  const Tier state = c.nvme ? Tier::nvme : owned;
  // Gradients: full ones at stages 0-1; the owned shard at stages 1-3, and at stage 0 when it
  // accumulates in another dtype.
  if (c.stage <= 1) live[{Tier::device, MemoryKind::grad}] = cb * trainable;
  if (c.stage >= 1 || gb != cb) live[{state, MemoryKind::grad}] += gb * trainable_shards;
  if (c.stage >= 1 || mixed) live[{state, MemoryKind::master}] = 4 * trainable_shards;
  live[{state, MemoryKind::moment}] = (c.bf16_states ? 4 : 8) * trainable_shards;
  // Buffers: one or two reduction buckets of reduce_bucket_size elements rounded down to a
  // multiple of N (p5 fills one) in the gradient dtype, and at stages 1-2 the all-gather
  // bucket of allgather_bucket_size elements, rounded the same way, in the compute dtype.
  // A step group per rank: an all-gather bucket's block at stages 1-2 (capped at
  // sub_group_size with NVMe), sub_group_size elements at stage 3 with offload.
  std::size_t group = c.stage == 3 ? kSubGroup : kAllgatherBucket / n;
  if (c.nvme) group = std::min(group, kSubGroup);
  // None at stage 0 on one rank with the gradients reduced in their own dtype: that reduction
  // is the identity and does not run (memory_plan.h's identity_reduction).
  const bool identity = c.stage == 0 && world == 1 && gb == cb;
  std::size_t buffer = identity ? 0 : (c.overlap ? 2 : 1) * (kReduceBucket / n * n) * cb;
  if (c.stage == 1 || c.stage == 2) buffer += group * n * cb;
  live[{Tier::device, MemoryKind::buffer}] = buffer;
  // Offload: pinned staging for this rank's block of a reduction bucket, coming down, and for
  // a step group's updated compute values going up (an all-gather bucket's block at stages
  // 1-2, sub_group_size elements at stage 3).
  // NVMe adds buffer_count buffers of the largest group's region (its masters and moments,
  // each rounded up to 4096 bytes for direct I/O) and as many of its gradient.
  // Parameters on NVMe: three bounce buffers and buffer_count read buffers of the largest shard
  // (rounded up to 4096 bytes) and, without optimizer offload, the staging of a step group's
  // updated values.
  if (c.param_nvme) {
    std::size_t largest = 0;
    for (std::int64_t size : model.sizes) largest = std::max(largest, shard(size));
    const std::size_t bounce = (largest * cb + 4095) / 4096 * 4096;
    live[{Tier::pinned, MemoryKind::buffer}] +=
        (3 + kSwapBuffers) * bounce + (c.offload ? 0 : kSubGroup * cb);
  }
  if (c.offload) {
    live[{owned, MemoryKind::buffer}] += (kReduceBucket / n) * cb + group * cb;
    if (c.nvme) {
      auto direct = [](std::size_t bytes) { return (bytes + 4095) / 4096 * 4096; };
      const std::size_t region = direct(group * 4) + 2 * direct(group * (c.bf16_states ? 2 : 4));
      live[{owned, MemoryKind::buffer}] += kSwapBuffers * (region + direct(group * gb));
    }
  }
  for (auto& [kind, bytes] : live) {
    if (bytes == 0) continue;
    b.peak[kind] = bytes;
  }
  // The peaks of what lives only for a while. Stage 3 (nothing fetched ahead or kept): the
  // persistent p7 (9 elements, gathered in m0, the first module) plus the largest module's
  // other parameters, padded to N shards.
  if (c.stage == 3) {
    const std::size_t w = static_cast<std::size_t>(world);
    auto padded = [&](std::int64_t numel) {
      return (static_cast<std::size_t>(numel) + w - 1) / w * w;
    };
    std::size_t largest = 0;
    for (const auto& m : model.modules) {
      std::size_t elements = 0;
      for (std::size_t p : m) {
        if (p != 7) elements += padded(model.sizes[p]);
      }
      largest = std::max(largest, elements);
    }
    b.peak[{Tier::device, MemoryKind::param}] += cb * (padded(model.sizes[7]) + largest);
  }
  return b;
}

void check_kinds(const std::map<Where, std::size_t>& got, const std::map<Where, std::size_t>& want,
                 const char* what) {
  for (Tier tier : kAllTiers) {
    for (MemoryKind kind : kAllMemoryKinds) {
      const Where where{tier, kind};
      const std::size_t g = got.count(where) ? got.at(where) : 0;
      const std::size_t w = want.count(where) ? want.at(where) : 0;
      INFO(what << " bytes of " << tier_name(tier) << " " << memory_kind_name(kind));
      CHECK(g == w);
    }
  }
}

}  // namespace

TEST_CASE("engine memory: bytes by kind are the table's plus the documented buffers", "[engine]") {
  const int world = variants().front().comm->size();
  const Model model;
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    cases.push_back({stage, "fp32", 0, false});
    cases.push_back({stage, "bf16", 0, true});
    cases.push_back({stage, "bf16", 4, false});
    cases.push_back({stage, "bf16", 0, false, true});
    if (stage >= 1) {
      cases.push_back({stage, "fp32", 0, false, false, true});
      cases.push_back({stage, "bf16", 4, true, false, true});
      cases.push_back({stage, "bf16", 0, false, false, true, false});
      cases.push_back({stage, "fp32", 0, false, false, true, true, true});
      cases.push_back({stage, "bf16", 0, true, true, true, true, true});
    }
    if (stage == 3) {
      cases.push_back({stage, "fp32", 0, false, false, false, true, false, true});
      cases.push_back({stage, "bf16", 0, false, false, true, true, false, true});
      cases.push_back({stage, "fp32", 0, false, false, false, true, false, true, true});
      cases.push_back({stage, "bf16", 0, false, false, true, true, true, true, true});
    }
  }
  for (const Case& c : cases) {
    INFO("stage " << c.stage << ", " << c.precision << ", grad accum bytes " << c.grad_bytes
                  << ", overlap " << c.overlap << ", bf16 states " << c.bf16_states << ", offload "
                  << c.offload << ", pinned " << c.pinned << ", nvme " << c.nvme
                  << ", param offload " << c.param_offload << ", param nvme " << c.param_nvme
                  << ", " << world << " ranks");
    auto e = make_engine(config_text(c));
    const Bytes want = expected(c, world);
    check_kinds(measured(*e).live, want.live, "after init, live");
    micro_step(*e, {0, 1, 2, 3, 4, 5}, 0);
    micro_step(*e, {0, 1, 2, 3, 4, 5}, 1);
    const Bytes after = measured(*e);
    check_kinds(after.live, want.live, "after two steps, live");
    // Stages 2-3 hold full gradients only while they live: their peak is above the shard's.
    auto peak = after.peak;
    if (c.stage >= 2) {
      const Where grads{Tier::device, MemoryKind::grad};
      CHECK(peak[grads] > (want.peak.count(grads) ? want.peak.at(grads) : 0));
      if (want.peak.count(grads)) {
        peak[grads] = want.peak.at(grads);
      } else {
        peak.erase(grads);
      }
    }
    check_kinds(peak, want.peak, "after two steps, peak");
  }
}

// The fit check (engine/plan/memory_fit.h) over the ranks of each machine: their needs add up,
// every rank refuses together, and rank 0's ZERO_MEMORY_CHECK holds on all of them. On several
// nodes (ctest -L multinode) each node's ranks add up their own (Open MPI's local size and rank).
TEST_CASE("engine memory: the fit check adds up the machine's ranks and refuses on all of them",
          "[engine]") {
  const std::string config =
      R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "AdamW"},
                                 "zero_optimization": {"stage": 1}})";
  const int rank = side_channel().rank();
  const int world = side_channel().size();
  const auto from_env = [](const char* name, int otherwise) {
    const char* value = std::getenv(name);
    return value != nullptr ? std::atoi(value) : otherwise;
  };
  const int local = from_env("OMPI_COMM_WORLD_LOCAL_SIZE", world);
  const int first = rank - from_env("OMPI_COMM_WORLD_LOCAL_RANK", rank);  // this node's first
  const auto free = memory_probe::host_available();
  REQUIRE(free);
  // Each rank declares a little over its share of the free memory: too much together.
  const std::uint64_t share = free->bytes / static_cast<std::uint64_t>(local) + (1ull << 30);
  const auto declare = [&](engine::Engine& e) {
    e.declare_memory(Tier::host, share, "rank " + std::to_string(rank) + "'s activations");
  };
  const auto outcome = [&]() -> std::string {
    try {
      make_engine(config, {}, declare);
      return "ok";
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::out_of_memory);
      return error.what();
    }
  };
  ::unsetenv("ZERO_MEMORY_CHECK");
  std::string what = outcome();
  CHECK_THAT(what, Catch::Contains("the run does not fit this machine"));
  if (local > 1) {
    CHECK_THAT(what, Catch::Contains(fmt::format("{} ranks ({}, {}", local, first, first + 1)));
  }
  CHECK_THAT(what, Catch::Contains(fmt::format("rank {}'s activations (the program's)", first)));
  // Another rank turning the check off changes nothing: rank 0's setting holds.
  if (rank != 0) ::setenv("ZERO_MEMORY_CHECK", "off", 1);
  what = outcome();
  CHECK_THAT(what, Catch::Contains("the run does not fit this machine"));
  // Rank 0's warn lets every rank go on (nothing declared is allocated).
  if (rank == 0) ::setenv("ZERO_MEMORY_CHECK", "warn", 1);
  CHECK(outcome() == "ok");
  ::unsetenv("ZERO_MEMORY_CHECK");
}

}  // namespace zero::testing
