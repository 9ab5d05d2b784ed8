// TimedCommunicator alone (engine/collectives/timed_communicator.h), over a one-rank
// communicator that has a stream of its own (as NCCL does) and whose collectives take a little
// time, on the CPU device whose events carry the host clock: every call reaches the inner
// communicator with its arguments and returns its result; each collective is a span of its kind
// (reductions: all-reduce, reduce-scatter, all-to-all; gathers: all-gather, broadcast) on the
// timeline while it records, none otherwise; a group is one span from its first collective to
// its end; a barrier and a split are not timed.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/backends.h"
#include "device/device.h"
#include "engine/collectives/overlap_timeline.h"
#include "engine/collectives/timed_communicator.h"

namespace zero::engine {
namespace {

using namespace std::chrono_literals;

// The local communicator with a stream of its own; each collective lasts at least 1 ms and is
// counted.
class StreamedLocal final : public Communicator {
 public:
  StreamedLocal(std::unique_ptr<Communicator> inner, std::unique_ptr<Stream> stream)
      : inner_(std::move(inner)), stream_(std::move(stream)) {}
  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  std::string_view backend() const noexcept override { return "streamed-local"; }
  const std::string& name() const noexcept override { return inner_->name(); }
  std::chrono::milliseconds timeout() const noexcept override { return inner_->timeout(); }
  Device* device() const noexcept override { return inner_->device(); }
  Stream* stream() const noexcept override { return stream_.get(); }
  Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op, Stream* s) override {
    return took(inner_->all_reduce(data, count, dtype, op, s));
  }
  Work reduce_scatter(const void* in, void* out, std::size_t count, DType dtype, ReduceOp op,
                      Stream* s) override {
    return took(inner_->reduce_scatter(in, out, count, dtype, op, s));
  }
  Work all_gather(const void* in, void* out, std::size_t count, DType dtype, Stream* s) override {
    return took(inner_->all_gather(in, out, count, dtype, s));
  }
  Work all_to_all(const void* in, void* out, std::size_t count, DType dtype, Stream* s) override {
    return took(inner_->all_to_all(in, out, count, dtype, s));
  }
  Work broadcast(void* data, std::size_t count, DType dtype, int root, Stream* s) override {
    return took(inner_->broadcast(data, count, dtype, root, s));
  }
  Work barrier(Stream* s) override { return took(inner_->barrier(s)); }
  void begin_group() override {
    ++groups;
    inner_->begin_group();
  }
  void end_group() override { inner_->end_group(); }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ++splits;
    return inner_->split(color, key);
  }
  bool poisoned() const noexcept override { return inner_->poisoned(); }
  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept override {
    inner_->abort(exit_code, reason);
    std::_Exit(exit_code);
  }

  int calls = 0, groups = 0, splits = 0;

 private:
  Work took(Work work) {
    ++calls;
    std::this_thread::sleep_for(1ms);
    return work;
  }
  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<Stream> stream_;
};

struct Timed {
  Timed() {
    DeviceOptions options;
    options.preference = DevicePreference::cpu;
    options.cpu_mode = CpuDeviceMode::sync;
    device = create_device(options);
    caller = device->wrap_stream(nullptr);
    comm::CommOptions comm_options;
    comm_options.device = device.get();
    comm_options.timeout = std::chrono::seconds(30);
    auto streamed = std::make_unique<StreamedLocal>(comm::make_local_communicator(comm_options),
                                                    device->create_stream());
    inner = streamed.get();
    timeline = std::make_unique<OverlapTimeline>(*device);
    timed = std::make_unique<TimedCommunicator>(std::move(streamed), *device, *timeline);
  }
  // The totals of what `body` issued while the timeline recorded, inside one compute span.
  OverlapTimeline::Totals record(const std::function<void()>& body) {
    timeline->start(*caller);
    timeline->compute_begin(*caller);
    body();
    timeline->compute_end(*caller);
    timeline->stop();
    timeline->collect();
    return timeline->take();
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<Stream> caller;
  StreamedLocal* inner = nullptr;
  std::unique_ptr<OverlapTimeline> timeline;
  std::unique_ptr<TimedCommunicator> timed;
  // Through the interface, whose declarations give the streams' defaults.
  Communicator& comm() { return *timed; }
};

}  // namespace

TEST_CASE("timed communicator: every call reaches the inner one and returns its result",
          "[engine][overlap]") {
  Timed t;
  CHECK(t.comm().rank() == 0);
  CHECK(t.comm().size() == 1);
  CHECK(t.comm().backend() == "streamed-local");
  CHECK(t.comm().stream() == t.inner->stream());
  CHECK(t.comm().device() == t.device.get());
  std::vector<float> data = {1.5f, -2.0f, 3.25f};
  std::vector<float> out(3, 0.0f);
  t.comm().all_reduce(data.data(), 3, DType::f32, ReduceOp::sum).wait();
  CHECK(data == std::vector<float>{1.5f, -2.0f, 3.25f});  // one rank: the sum is itself
  t.comm().all_gather(data.data(), out.data(), 3, DType::f32).wait();
  CHECK(out == data);
  std::fill(out.begin(), out.end(), 0.0f);
  t.comm().reduce_scatter(data.data(), out.data(), 3, DType::f32, ReduceOp::sum).wait();
  CHECK(out == data);
  std::fill(out.begin(), out.end(), 0.0f);
  t.comm().all_to_all(data.data(), out.data(), 3, DType::f32).wait();
  CHECK(out == data);
  t.comm().broadcast(data.data(), 3, DType::f32, 0).wait();
  t.comm().barrier().wait();
  CHECK(t.inner->calls == 6);
  auto sub = t.comm().split(0, 0);
  CHECK(t.inner->splits == 1);
  REQUIRE(sub != nullptr);
  CHECK(sub->size() == 1);
  CHECK_FALSE(t.comm().poisoned());
}

TEST_CASE("timed communicator: each collective is a span of its kind while recording",
          "[engine][overlap]") {
  Timed t;
  float x = 1.0f, y = 0.0f;
  const OverlapTimeline::Totals reductions = t.record([&] {
    t.comm().all_reduce(&x, 1, DType::f32, ReduceOp::sum);
    t.comm().reduce_scatter(&x, &y, 1, DType::f32, ReduceOp::sum);
    t.comm().all_to_all(&x, &y, 1, DType::f32);
  });
  CHECK(reductions.reduction_ms >= 3.0);  // three collectives of at least 1 ms each
  CHECK(reductions.gather_ms == 0);
  CHECK(reductions.reduction_overlap_ms == reductions.reduction_ms);  // inside the compute
  const OverlapTimeline::Totals gathers = t.record([&] {
    t.comm().all_gather(&x, &y, 1, DType::f32);
    t.comm().broadcast(&x, 1, DType::f32, 0);
  });
  CHECK(gathers.gather_ms >= 2.0);
  CHECK(gathers.reduction_ms == 0);
  const OverlapTimeline::Totals barrier = t.record([&] { t.comm().barrier(); });
  CHECK(barrier.reduction_ms == 0);
  CHECK(barrier.gather_ms == 0);
  // Not recording: forwarded, not timed.
  t.comm().all_reduce(&x, 1, DType::f32, ReduceOp::sum);
  t.timeline->collect();
  CHECK(t.timeline->take().reduction_ms == 0);
}

TEST_CASE("timed communicator: a group is one span, from its first collective to its end",
          "[engine][overlap]") {
  Timed t;
  float x = 1.0f;
  // Two collectives, each inside a compute span of its own, with a pause outside compute
  // between them. Ungrouped, each collective is its own span, wholly inside its compute: the
  // overlap is all of it (equal by the events' order, not by any duration). Grouped, one span
  // runs from the first collective to the group's end (it launches together there, as NCCL's
  // does), across the pause outside compute: the overlap is less than it.
  const auto two_collectives = [&](bool group) {
    t.timeline->start(*t.caller);
    if (group) t.comm().begin_group();
    t.timeline->compute_begin(*t.caller);
    t.comm().all_reduce(&x, 1, DType::f32, ReduceOp::sum);
    t.timeline->compute_end(*t.caller);
    std::this_thread::sleep_for(5ms);  // outside compute
    t.timeline->compute_begin(*t.caller);
    t.comm().all_reduce(&x, 1, DType::f32, ReduceOp::sum);
    if (group) t.comm().end_group();
    t.timeline->compute_end(*t.caller);
    t.timeline->stop();
    t.timeline->collect();
    return t.timeline->take();
  };
  const OverlapTimeline::Totals apart = two_collectives(false);
  CHECK(apart.reduction_ms > 0);
  CHECK(apart.reduction_overlap_ms == apart.reduction_ms);
  const OverlapTimeline::Totals grouped = two_collectives(true);
  CHECK(t.inner->groups == 1);
  CHECK(grouped.reduction_ms > 0);
  CHECK(grouped.reduction_overlap_ms < grouped.reduction_ms);
}

}  // namespace zero::engine
