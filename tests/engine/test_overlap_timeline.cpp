// The overlap of communication with compute (engine/collectives/overlap_timeline.h): the interval
// arithmetic against a plain count on a fine grid for random intervals, and the timeline's
// pairing of events (nested hooks merge, a group is one span, nothing records after stop) on
// the CPU device, whose events carry the host clock.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "device/device.h"
#include "engine/collectives/overlap_timeline.h"
#include "tests/stream_hold.h"

namespace zero::engine {
namespace {

using Spans = std::vector<std::pair<double, double>>;

// The reference: how many of the grid's unit cells [k, k + 1) lie in a span of each set.
double covered(const Spans& a, const Spans* b, int cells) {
  const auto in = [](const Spans& spans, int k) {
    for (const auto& s : spans) {
      if (s.first <= k && k + 1 <= s.second) return true;
    }
    return false;
  };
  int count = 0;
  for (int k = 0; k < cells; ++k) count += in(a, k) && (b == nullptr || in(*b, k));
  return count;
}

// Random spans with integer ends in [0, cells], some empty or reversed.
Spans random_spans(std::mt19937& rng, int count, int cells) {
  std::uniform_int_distribution<int> point(0, cells);
  Spans spans;
  for (int i = 0; i < count; ++i) spans.emplace_back(point(rng), point(rng));
  return spans;
}

// Advances the steady clock past the previous reading, so consecutive events differ.
void tick() {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() == start) {
  }
}

}  // namespace

TEST_CASE("overlap_length and union_length match a count on a grid", "[engine][overlap]") {
  std::mt19937 rng(17);
  const int cells = 97;
  for (int round = 0; round < 300; ++round) {
    const Spans a = random_spans(rng, 1 + round % 7, cells);
    const Spans b = random_spans(rng, 1 + round % 5, cells);
    REQUIRE(union_length(a) == covered(a, nullptr, cells));
    REQUIRE(overlap_length(a, b) == covered(a, &b, cells));
    REQUIRE(overlap_length(b, a) == overlap_length(a, b));
  }
  CHECK(union_length({}) == 0);
  CHECK(overlap_length({{0, 5}}, {}) == 0);
  CHECK(overlap_length({{3, 1}}, {{0, 5}}) == 0);  // reversed: nothing
}

TEST_CASE("the overlap timeline pairs hooks and collectives from the streams' events",
          "[engine][overlap]") {
  DeviceOptions options;
  options.preference = DevicePreference::cpu;
  options.cpu_mode = CpuDeviceMode::sync;
  auto device = create_device(options);
  auto caller = device->wrap_stream(nullptr);
  auto comm = device->create_stream();
  OverlapTimeline timeline(*device);

  SECTION(
      "a reduction inside the compute overlaps it, a copy across its end in part, a "
      "gather after it not at all") {
    timeline.start(*caller);
    timeline.compute_begin(*caller);
    tick();
    timeline.compute_begin(*caller);  // a nested module: one span
    tick();
    timeline.comm_begin(OverlapTimeline::Kind::reduction, *caller, *comm);
    tick();
    timeline.comm_end(*comm);
    tick();
    timeline.comm_begin(OverlapTimeline::Kind::copy, *comm, *comm);  // ends after the compute
    tick();
    timeline.compute_end(*caller);
    tick();
    timeline.compute_end(*caller);
    tick();
    timeline.comm_end(*comm);
    tick();
    timeline.comm_begin(OverlapTimeline::Kind::gather, *caller, *comm);
    tick();
    timeline.comm_end(*comm);
    timeline.stop();
    timeline.comm_begin(OverlapTimeline::Kind::reduction, *caller, *comm);  // not recorded
    timeline.comm_end(*comm);
    timeline.collect();
    const OverlapTimeline::Totals t = timeline.take();
    CHECK(t.compute_ms > 0);
    CHECK(t.reduction_ms > 0);
    CHECK(t.reduction_overlap_ms == t.reduction_ms);  // wholly inside the compute
    CHECK(t.reduction_ms < t.compute_ms);
    CHECK(t.gather_ms > 0);
    CHECK(t.gather_overlap_ms == 0);  // after it
    CHECK(t.copy_overlap_ms > 0);     // partly inside it
    CHECK(t.copy_overlap_ms < t.copy_ms);
    const OverlapTimeline::Totals again = timeline.take();
    CHECK(again.compute_ms == 0);  // take() empties the totals
  }
  SECTION("nothing is recorded before the micro-step starts") {
    timeline.compute_begin(*caller);
    timeline.comm_begin(OverlapTimeline::Kind::reduction, *caller, *comm);
    timeline.comm_end(*comm);
    timeline.compute_end(*caller);
    timeline.collect();
    const OverlapTimeline::Totals t = timeline.take();
    CHECK(t.compute_ms == 0);
    CHECK(t.reduction_ms == 0);
  }
}

TEST_CASE("the overlap timeline's collect waits only for the micro-step before, take for the last",
          "[engine][overlap]") {
  DeviceOptions options;
  options.preference = DevicePreference::cpu;
  options.cpu_mode = CpuDeviceMode::async;  // streams on their own threads, as a GPU's
  auto device = create_device(options);
  auto caller = device->create_stream();
  auto comm = device->create_stream();
  OverlapTimeline timeline(*device);
  std::unique_ptr<zero::testing::StreamHold> hold;
  const auto micro_step = [&](bool held) {
    timeline.start(*caller);
    timeline.compute_begin(*caller);
    if (held) {  // the caller's compute runs until the host lets it go (or 10 s pass)
      hold = std::make_unique<zero::testing::StreamHold>(*device, *caller);
    } else {
      device->launch_host_task(*caller, [] { tick(); });
    }
    timeline.compute_end(*caller);
    timeline.stop();
    timeline.collect();
  };
  micro_step(false);
  micro_step(true);  // returns with its compute still running: the host did not wait for it
  hold->release();
  CHECK_FALSE(hold->gave_up());  // collect did not wait for the held micro-step
  const OverlapTimeline::Totals both = timeline.take();  // waits for the held one
  CHECK(both.compute_ms > 0);
  micro_step(false);  // the pool of the micro-step before is reused
  CHECK(timeline.take().compute_ms > 0);
  device->synchronize();
}

}  // namespace zero::engine
