// The optimizer-offloaded step's schedule beside a GPU, on the timed CPU device (a GPU's
// copies and kernels, device/device.h): the reduced gradients come down through a ring of
// pinned slots while the host adds the blocks before them (a block's copy down begins before
// the add of the block before it ends), and backward never waits on the host (the hooks of a
// whole backward return while the device's backward is still running). Orders only, read from
// the device's trace; never a duration.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "device/trace.h"
#include "engine/engine.h"

namespace zero::engine {
namespace {

constexpr int kModules = 6;
constexpr std::int64_t kPerModule = 6 << 20;  // a bucket each: its add takes the host milliseconds

std::string offload_config() {
  return fmt::format(R"({{
    "train_micro_batch_size_per_gpu": 1, "bf16": {{"enabled": true}},
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-3}}}},
    "zero_optimization": {{"stage": 3, "reduce_bucket_size": {0}, "sub_group_size": {0},
      "allgather_bucket_size": {0}, "overlap_comm": true,
      "offload_optimizer": {{"device": "cpu", "pin_memory": true}}}}}})",
                     kPerModule);
}

}  // namespace

TEST_CASE(
    "offloaded gradients come down while the host adds the blocks before them, and "
    "backward does not wait on the host",
    "[engine][offload][timed]") {
  SimulatedLink link;      // an H100's
  link.move_data = false;  // the device's work takes a GPU's time, not this host's cores
  auto made = create_timed_cpu_device(link);
  Device& device = *made;
  Trace& trace = *device.trace();
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(offload_config(), {}), std::move(made),
                comm::make_local_communicator(comm_options), options);
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
    for (int m = 0; m < kModules; ++m) {
      engine.pre_forward(m, stream.get());
      compute(0.2, "forward");
      engine.post_forward(m, stream.get());
    }
    trace.record("host", "backward issued from", Trace::Clock::now(), Trace::Clock::now());
    for (int m = kModules - 1; m >= 0; --m) {
      engine.pre_backward(m, stream.get());
      // The blocks come faster than the host adds them, and the last module's backward is
      // long enough for the host to be done issuing long before it ends.
      compute(m == 0 ? 50.0 : 0.05, "backward");
      engine.post_backward(m, stream.get());
    }
    trace.record("host", "backward issued", Trace::Clock::now(), Trace::Clock::now());
    engine.step();
  }
  const std::vector<Trace::Span> spans = trace.take();

  // Backward's hooks all returned before the device's backward ended: no host wait inside it.
  double issued = -1, backward_end = -1;
  std::vector<const Trace::Span*> downs, adds;
  for (const Trace::Span& s : spans) {
    if (s.lane == "host" && s.name == "backward issued") issued = s.end_ms;
    if (s.lane == "compute" && s.name == "backward")
      backward_end = std::max(backward_end, s.end_ms);
    if (s.name == "d2h" && s.bytes >= static_cast<std::size_t>(kPerModule)) downs.push_back(&s);
    if (s.lane == "host adds" && s.name == "add") adds.push_back(&s);
  }
  REQUIRE(issued >= 0);
  REQUIRE(backward_end >= 0);
  CHECK(issued < backward_end);

  // Every block came down (one copy each) and was added; some block's copy began before the
  // add of the block before it ended (one thread adds: its spans are the blocks' in order).
  REQUIRE(downs.size() == kModules);
  REQUIRE(adds.size() == kModules);
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

}  // namespace zero::engine
