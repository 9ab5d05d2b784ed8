// The world of one: reductions and broadcasts leave the data as it is, gathers and scatters
// copy the caller's block. Needs no MPI, so single-process runs have no launcher at all.
#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "comm/backends.h"
#include "comm/comm_base.h"
#include "device/device.h"

namespace zero::comm {
namespace {

// Complete once the copy queued on a device stream has run.
class CopyWork final : public TrackedWork {
 public:
  CopyWork(OpInfo op, std::shared_ptr<Health> health, std::chrono::milliseconds timeout,
           std::unique_ptr<Event> done)
      : TrackedWork(std::move(op), std::move(health), timeout), done_(std::move(done)) {}

  bool poll() override { return done_->query(); }
  bool block(Stream& stream) override {
    done_->block(stream);
    return true;
  }

 private:
  std::unique_ptr<Event> done_;
};

class LocalCommunicator final : public CommunicatorBase {
 public:
  LocalCommunicator(std::string name, const CommOptions& options)
      : CommunicatorBase(std::move(name), "local", 0, 1, options.timeout), options_(options) {}

  Device* device() const noexcept override { return options_.device; }

  Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                  Stream* stream) override {
    return after_caller(begin_all_reduce(data, count, dtype, op), stream);
  }

  Work reduce_scatter(const void* input, void* output, std::size_t count, DType dtype, ReduceOp op,
                      Stream* stream) override {
    return copy(begin_reduce_scatter(input, output, count, dtype, op), input, output, stream);
  }

  Work all_gather(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    return copy(begin_all_gather(input, output, count, dtype), input, output, stream);
  }

  Work all_to_all(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    return copy(begin_all_to_all(input, output, count, dtype), input, output, stream);
  }

  Work broadcast(void* data, std::size_t count, DType dtype, int root, Stream* stream) override {
    return after_caller(begin_broadcast(data, count, dtype, root), stream);
  }

  Work barrier(Stream* stream) override { return after_caller(begin_barrier(), stream); }

  void begin_group() override { enter_group(); }
  void end_group() override { leave_group(); }

  std::unique_ptr<Communicator> split(int color, int) override {
    health()->check();
    if (color < 0) return nullptr;
    return std::make_unique<LocalCommunicator>(child_name(color), options_);
  }

  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept override {
    log::error("aborting ({}): {}", health()->where(), reason);
    std::_Exit(exit_code);
  }

 private:
  Work copy(const OpInfo& op, const void* input, void* output, Stream* stream) {
    const std::size_t bytes = op.count * dtype_size(op.dtype);
    Device* device = options_.device;
    // In place, the data is final where the caller's queued work leaves it (a copy into the
    // input may still be on its way).
    if (bytes == 0 || input == output) return after_caller(op, stream);
    if (device == nullptr) {
      std::memcpy(output, input, bytes);
      return complete(op);
    }
    Stream& on = stream != nullptr ? *stream : device->default_stream();
    device->copy_async(output, input, bytes, on);
    return after_caller(op, &on);
  }

  // The data is final where the caller's queued work leaves it: the work is complete once
  // that has run, as a collective queued on the stream would be.
  Work after_caller(const OpInfo& op, Stream* stream) {
    Device* device = options_.device;
    if (device == nullptr) return complete(op);
    auto done = device->create_event();
    done->record(stream != nullptr ? *stream : device->default_stream());
    return Work(std::make_shared<CopyWork>(op, health(), timeout(), std::move(done)));
  }

  CommOptions options_;
};

}  // namespace

std::unique_ptr<Communicator> make_local_communicator(const CommOptions& options) {
  return std::make_unique<LocalCommunicator>("world", options);
}

}  // namespace zero::comm
