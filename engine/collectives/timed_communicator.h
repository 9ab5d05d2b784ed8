// TimedCommunicator: the engine's communicator with wall_clock_breakdown on a communicator that
// has its own stream (NCCL): every collective is bracketed by timing events on that stream for
// the OverlapTimeline (overlap_timeline.h); otherwise it forwards each call unchanged. Inside a
// group (the engine's buckets, launched together at end_group) the group is one span.
//
// Owns: the inner communicator. Calls: the inner communicator, the timeline. Streams: makes the
// communicator's stream wait for a collective's inputs before its begin event (the same point
// the communicator itself waits for). Internal to engine/.
#pragma once

#include <cstdlib>
#include <memory>

#include "comm/communicator.h"
#include "device/device.h"
#include "engine/collectives/overlap_timeline.h"

namespace zero::engine {

class TimedCommunicator final : public Communicator {
 public:
  // `inner` must have a stream(); `timeline` outlives this.
  TimedCommunicator(std::unique_ptr<Communicator> inner, Device& device, OverlapTimeline& timeline)
      : inner_(std::move(inner)), device_(device), timeline_(timeline) {}

  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  std::string_view backend() const noexcept override { return inner_->backend(); }
  const std::string& name() const noexcept override { return inner_->name(); }
  std::chrono::milliseconds timeout() const noexcept override { return inner_->timeout(); }
  Device* device() const noexcept override { return inner_->device(); }
  Stream* stream() const noexcept override { return inner_->stream(); }

  Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                  Stream* stream) override {
    begin(OverlapTimeline::Kind::reduction, stream);
    Work work = inner_->all_reduce(data, count, dtype, op, stream);
    end();
    return work;
  }
  Work reduce_scatter(const void* input, void* output, std::size_t count, DType dtype, ReduceOp op,
                      Stream* stream) override {
    begin(OverlapTimeline::Kind::reduction, stream);
    Work work = inner_->reduce_scatter(input, output, count, dtype, op, stream);
    end();
    return work;
  }
  Work all_gather(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    begin(OverlapTimeline::Kind::gather, stream);
    Work work = inner_->all_gather(input, output, count, dtype, stream);
    end();
    return work;
  }
  Work all_to_all(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    begin(OverlapTimeline::Kind::reduction, stream);
    Work work = inner_->all_to_all(input, output, count, dtype, stream);
    end();
    return work;
  }
  Work broadcast(void* data, std::size_t count, DType dtype, int root, Stream* stream) override {
    begin(OverlapTimeline::Kind::gather, stream);
    Work work = inner_->broadcast(data, count, dtype, root, stream);
    end();
    return work;
  }
  Work barrier(Stream* stream) override { return inner_->barrier(stream); }

  void begin_group() override {
    inner_->begin_group();
    in_group_ = true;
    group_started_ = false;
  }
  void end_group() override {
    in_group_ = false;
    inner_->end_group();
    if (group_started_) timeline_.comm_end(*inner_->stream());
    group_started_ = false;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_->split(color, key);
  }
  bool poisoned() const noexcept override { return inner_->poisoned(); }
  void depart() noexcept override { inner_->depart(); }
  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept override {
    inner_->abort(exit_code, reason);  // never returns; std::_Exit satisfies [[noreturn]]
    std::_Exit(exit_code);
  }

 private:
  void begin(OverlapTimeline::Kind kind, Stream* stream) {
    if (in_group_ && group_started_) return;
    timeline_.comm_begin(kind, stream != nullptr ? *stream : device_.default_stream(),
                         *inner_->stream());
    group_started_ = in_group_;
  }
  void end() {
    if (!in_group_) timeline_.comm_end(*inner_->stream());
  }

  std::unique_ptr<Communicator> inner_;
  Device& device_;
  OverlapTimeline& timeline_;
  bool in_group_ = false;
  bool group_started_ = false;
};

}  // namespace zero::engine
