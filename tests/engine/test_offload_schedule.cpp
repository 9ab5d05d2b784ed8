// The optimizer-offloaded step's schedule beside a GPU, on the timed CPU device (a GPU's
// copies and kernels, device/device.h). Where a reduced block lands on zeros (every micro-step
// at gradient accumulation 1) it is cast on the device and copied straight into the owned shard:
// no host add and no host norm. Where it is added to what came before (the later micro-steps of
// an accumulation window), the blocks come down through a ring of pinned slots while the host
// adds the blocks before them (a block's copy down begins before the add of the block before it
// ends). With accumulate_on_device the window's blocks are summed on the device instead and only
// its last micro-step copies them down, straight into the shard. Either way backward never
// waits on the host (the hooks of a whole backward return
// while the device's backward is still running). Orders only, read from the device's trace;
// never a duration.
#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "device/trace.h"
#include "engine/engine.h"
#include "engine/plan/memory_plan.h"
#include "engine/plan/partition.h"
#include "engine/plan/registry.h"

namespace zero::engine {
namespace {

constexpr int kModules = 6;
constexpr std::int64_t kPerModule = 6 << 20;  // a bucket each: its add takes the host milliseconds

std::string offload_config(int accumulation, bool on_device) {
  return fmt::format(R"({{
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {1},
    "bf16": {{"enabled": true}},
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
    "zero_optimization": {{"stage": 3, "reduce_bucket_size": {0}, "sub_group_size": {0},
      "allgather_bucket_size": {0}, "overlap_comm": true,
      "offload_optimizer": {{"device": "cpu", "pin_memory": true,
                             "accumulate_on_device": {2}}}}}}})",
                     kPerModule, accumulation, on_device);
}

// What the trace of one whole step shows (its last micro-step's backward for the hooks).
struct StepTrace {
  std::vector<Trace::Span> spans;
  double issued = -1;        // the last backward's hooks all returned
  double backward_end = -1;  // the device's last backward ended
  std::vector<const Trace::Span*> downs, adds, norms;
};

// Two steps of `accumulation` micro-steps of a stand-in model, the second traced; `on_device`:
// offload_optimizer.accumulate_on_device.
StepTrace traced_step(int accumulation, bool on_device = false) {
  SimulatedLink link;      // an H100's
  link.move_data = false;  // the device's work takes a GPU's time, not this host's cores
  auto made = create_timed_cpu_device(link);
  Device& device = *made;
  Trace& trace = *device.trace();
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(offload_config(accumulation, on_device), {}),
                std::move(made), comm::make_local_communicator(comm_options), options);
  for (int m = 0; m < kModules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    engine.add_param(fmt::format("block{}.weight", m), {kPerModule}, true, 0, {module});
  }
  engine.init();
  auto stream = device.create_stream();
  // A stand-in for the model's kernels: `ms` on the stream, traced as compute.
  const auto compute = [&](double ms, const char* name) {
    device.launch_host_task(*stream, [&trace, ms, name] {
      const auto begin = Trace::Clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
      trace.record("compute", name, begin, Trace::Clock::now());
    });
  };
  for (int step = 0; step < 2; ++step) {
    trace.enable(step == 1);
    for (int micro = 0; micro < accumulation; ++micro) {
      for (int m = 0; m < kModules; ++m) {
        engine.pre_forward(m, stream.get());
        compute(0.2, "forward");
        engine.post_forward(m, stream.get());
      }
      for (int m = kModules - 1; m >= 0; --m) {
        engine.pre_backward(m, stream.get());
        // The blocks come faster than the host adds them, and the last module's backward is
        // long enough for the host to be done issuing long before it ends, even with ctest's
        // other jobs (ranks oversubscribing the cores) taking the host's threads for a while.
        compute(m == 0 ? 150.0 : 0.05, "backward");
        engine.post_backward(m, stream.get());
      }
      trace.record("host", "backward issued", Trace::Clock::now(), Trace::Clock::now());
      engine.step();  // steps at the window's end
    }
  }
  StepTrace out;
  out.spans = trace.take();
  for (const Trace::Span& s : out.spans) {
    if (s.lane == "host" && s.name == "backward issued") out.issued = s.end_ms;
    if (s.lane == "compute" && s.name == "backward")
      out.backward_end = std::max(out.backward_end, s.end_ms);
    if (s.name == "d2h" && s.bytes >= static_cast<std::size_t>(kPerModule)) out.downs.push_back(&s);
    if (s.lane == "host adds" && s.name == "add") out.adds.push_back(&s);
    if (s.lane == "host" && s.name == "norm") out.norms.push_back(&s);
  }
  return out;
}

// Backward's hooks all returned before the device's backward ended: no host wait inside it.
void check_backward_did_not_wait(const StepTrace& t) {
  REQUIRE(t.issued >= 0);
  REQUIRE(t.backward_end >= 0);
  CHECK(t.issued < t.backward_end);
}

}  // namespace

TEST_CASE(
    "at gradient accumulation 1 offloaded gradients go from the device straight into the "
    "owned shard, with no host add or host norm, and backward does not wait on the host",
    "[engine][offload][timed]") {
  const StepTrace t = traced_step(1);
  check_backward_did_not_wait(t);
  CHECK(t.downs.size() == kModules);  // one copy each: the pieces of a block are contiguous
  CHECK(t.adds.empty());
  CHECK(t.norms.empty());
}

TEST_CASE(
    "at one rank the offloaded step's verdict reads the host's scalars where they are: no "
    "scalar goes up the link behind the parameters",
    "[engine][offload][timed]") {
  const StepTrace t = traced_step(1);
  // The non-finite flag and the buckets' sums of squares come down (a float each, per bucket);
  // what the host adds of them is the verdict, read where it was written.
  int small_downs = 0;
  for (const Trace::Span& s : t.spans) {
    INFO(s.lane << " " << s.name << " " << s.bytes << " bytes at " << s.begin_ms << " ms");
    if (s.name == "h2d") CHECK(s.bytes > sizeof(float) * kModules);
    if (s.name == "d2h" && s.bytes <= sizeof(float) * kModules) ++small_downs;
  }
  CHECK(small_downs == 2);
}

TEST_CASE(
    "offloaded gradients added to a window's earlier ones come down while the host adds the "
    "blocks before them, and backward does not wait on the host",
    "[engine][offload][timed]") {
  const StepTrace t = traced_step(2);
  check_backward_did_not_wait(t);

  // Every block came down once a micro-step; the second micro-step's were added (one thread
  // adds: its spans are the blocks' in order), and some block's copy began before the add of
  // the block before it ended. The first micro-step's went straight into the shard.
  REQUIRE(t.downs.size() == 2 * kModules);
  REQUIRE(t.adds.size() == kModules);
  const std::vector<const Trace::Span*> downs(t.downs.begin() + kModules, t.downs.end());
  const std::vector<const Trace::Span*>& adds = t.adds;
  const std::vector<Trace::Span>& spans = t.spans;
  int overlapped = 0;
  for (std::size_t k = 1; k < downs.size(); ++k) {
    if (downs[k]->begin_ms < adds[k - 1]->end_ms) ++overlapped;
  }
  if (overlapped == 0) {
    for (const Trace::Span& s : spans) {
      UNSCOPED_INFO(s.lane << " " << s.name << " " << s.begin_ms << " " << s.end_ms);
    }
  }
  CHECK(overlapped > 0);
}

TEST_CASE(
    "with accumulate_on_device a window's earlier gradients are summed on the device and its "
    "last micro-step's sums go straight into the owned shard: no host add or host norm, and "
    "backward does not wait on the host",
    "[engine][offload][timed]") {
  const StepTrace t = traced_step(3, /*on_device=*/true);
  check_backward_did_not_wait(t);
  // One copy down per block, all in the window's last micro-step: the first two moved nothing.
  CHECK(t.downs.size() == kModules);
  CHECK(t.adds.empty());
  CHECK(t.norms.empty());
  // The copies come after the last micro-step's backward began (the earlier micro-steps' are
  // over by then).
  double last_backward_begin = -1;
  int backwards = 0;
  for (const Trace::Span& s : t.spans) {
    if (s.lane == "compute" && s.name == "backward" && ++backwards == 2 * kModules + 1) {
      last_backward_begin = s.begin_ms;
    }
  }
  REQUIRE(last_backward_begin >= 0);
  for (const Trace::Span* down : t.downs) CHECK(down->begin_ms > last_backward_begin);
}

TEST_CASE(
    "accumulate_on_device plans an owned gradient shard on the device only where a window's "
    "gradients come down from a GPU, and says why not elsewhere",
    "[engine][offload]") {
  Registry registry;
  for (int m = 0; m < 3; ++m) {
    const std::size_t module = registry.add_module(fmt::format("block{}", m));
    registry.add_param(fmt::format("block{}.weight", m), {1000 + m}, true, 0, {module});
  }
  const auto planned = [&](int stage, int accumulation, bool beside, const char* offload) {
    const config::Config config =
        config::read_config_text(fmt::format(R"({{
          "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {}, "bf16": {{"enabled": true}},
          "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
          "zero_optimization": {{"stage": {}, "offload_optimizer": {{"device": "{}",
            "nvme_path": ".", "pin_memory": true, "accumulate_on_device": true}}}}}})",
                                             accumulation, stage, offload),
                                 {});
    const Layout layout = plan_layout(registry, config, 2);
    const MemoryPlan plan = plan_memory(registry, config, layout, beside);
    std::size_t bytes = 0;
    for (const PlannedBlock& b : plan.blocks) {
      if (b.role == BlockRole::device_grad) bytes += b.bytes;
    }
    return std::tuple{bytes, layout.owned.total * dtype_size(layout.modes.accum),
                      device_accumulation_unused(config, layout, beside)};
  };
  for (int stage : {2, 3}) {
    INFO("stage " << stage);
    const auto [bytes, owned, why] = planned(stage, 4, /*beside=*/true, "cpu");
    CHECK(bytes == owned);  // the owned shard, in the accumulation dtype, on the device
    CHECK(bytes > 0);
    CHECK(why.empty());
  }
  CHECK(std::get<0>(planned(3, 4, /*beside=*/false, "cpu")) == 0);
  CHECK(std::get<2>(planned(3, 4, /*beside=*/false, "cpu")) ==
        "the engine runs on the CPU device, whose memory is the host's");
  CHECK(std::get<0>(planned(1, 4, true, "cpu")) == 0);
  CHECK(std::get<2>(planned(1, 4, true, "cpu")).starts_with("stages 0-1 reduce once a window"));
  CHECK(std::get<0>(planned(3, 1, true, "cpu")) == 0);
  CHECK(std::get<2>(planned(3, 1, true, "cpu")) == "gradient_accumulation_steps is 1");
}

}  // namespace zero::engine
