// The NCCL backend: collectives on device buffers of one GPU per rank, issued on a
// communication stream that the communicator owns and orders after the caller's stream with
// events, so that nothing here synchronises the host with the GPU.
//
// Per collective: an event recorded on the caller's stream (the device's default stream when
// none is given) blocks the comm stream; the NCCL call is enqueued on the comm stream; a done
// event recorded after it is what the Work polls (test/wait) or makes another stream wait for
// (Work::block). Inside begin_group()/end_group() the NCCL calls are queued by ncclGroupStart
// and launched by ncclGroupEnd; their works share one done event recorded at end_group, and
// are not complete before it (test() says false, block() is a usage error).
//
// Non-blocking communicators. Every communicator zero creates (the world and its splits) is
// created with ncclConfig_t::blocking = 0, so that no NCCL call can hang the calling thread
// past the communicator's timeout: init, split, the lazy connection set-up of a first
// collective, group ends and finalize return ncclInProgress at once, and we poll
// ncclCommGetAsyncError until the communicator is ready, the timeout (CommOptions::timeout) is
// reached (then a timeout Error, the communicator aborted), or an error is reported. A wrapped
// communicator keeps the embedder's mode; the same polling is harmless on a blocking one.
//
// Failures. Every NCCL or CUDA failure becomes a zero::Error (comm for NCCL, device for CUDA,
// timeout for timeouts) naming the call, the collective, the communicator and what to do. A
// failure or timeout poisons the communicator (the rank is out of step with the others, which
// will time out); a communicator zero created is then also aborted (ncclCommAbort) so that its
// kernels stop and its resources are freed. An embedder's communicator (wrap_nccl) is never
// aborted or destroyed by zero except through Communicator::abort (comm/create.h).
//
// Closing. The destructor waits (at most the timeout) for the collectives still on the comm
// stream, then ncclCommFinalize (polled, at most the timeout) and ncclCommDestroy; when that
// cannot finish, ncclCommAbort. Works that outlive their communicator still complete (they
// hold the handle's shared state and their own event). Communicator::abort logs the reason,
// calls ncclCommAbort and ends this process with std::_Exit; the other ranks see their
// collectives on this communicator fail or time out.
//
// Threads: one communicator is meant to be used from one thread at a time (NCCL groups are
// per thread: begin_group and end_group must be called on the same thread). Works may be tested
// from another thread; the NCCL handle is guarded so that an abort never races a query.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include "base/error.h"
#include "base/log.h"
#include "comm/backends.h"
#include "comm/comm_base.h"
#include "device/device.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the NCCL backend needs NCCL 2.18 or later (ncclCommSplit, non-blocking communicators)"
#endif

namespace zero::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Device memory for the barrier's one-element all_reduce.
constexpr std::size_t kBarrierBytes = 16;
// Done events kept for reuse; more outstanding works just create more.
constexpr std::size_t kMaxPooledEvents = 64;
// A result no NCCL call returns: the communicator was already aborted or destroyed.
constexpr ncclResult_t kNotLive = ncclNumResults;

// now + timeout, without overflowing the clock for absurd timeouts.
Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  constexpr auto kLongest = std::chrono::hours(24 * 365 * 10);
  return Clock::now() + std::min<std::chrono::milliseconds>(timeout, kLongest);
}

// Polling back-off like Work::wait: spin briefly, then short sleeps.
void back_off(int round, Clock::time_point deadline) {
  if (round < 64) {
    std::this_thread::yield();
    return;
  }
  const auto now = Clock::now();
  if (now >= deadline) return;
  const auto pause = std::chrono::microseconds(round < 1024 ? 20 : 200);
  std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
}

double seconds(std::chrono::milliseconds timeout) {
  return timeout.count() / 1000.0;
}

std::string where_of(std::string_view name, int rank, int size) {
  // The same text as Health::where() (comm_base.cpp), for messages before the Health exists.
  return fmt::format("communicator {} (nccl, rank {} of {})", name, rank, size);
}

std::string_view result_text(ncclResult_t result) {
  if (result == kNotLive) return "the communicator was already aborted or destroyed";
  return ncclGetErrorString(result);
}

// What to do about an NCCL result, for the end of a message.
std::string_view advice(ncclResult_t result) {
  switch (result) {
    case ncclUnhandledCudaError:
      return "A CUDA call inside NCCL failed: check the GPU (nvidia-smi, dmesg for Xid errors) "
             "and rerun with NCCL_DEBUG=WARN for NCCL's own report.";
    case ncclSystemError:
      return "A system call or socket operation failed: check the network between the ranks "
             "(NCCL_SOCKET_IFNAME, firewalls) and shared memory (/dev/shm in containers), and "
             "rerun with NCCL_DEBUG=INFO.";
    case ncclInternalError:
      return "NCCL hit an internal error: rerun with NCCL_DEBUG=WARN and report it with that "
             "output.";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return "NCCL refused the call: rerun with NCCL_DEBUG=WARN to see why. Every rank must "
             "issue the same collectives with the same counts and dtypes, on device memory of "
             "this communicator's GPU.";
    case ncclRemoteError:
      return "Another rank exited or the network failed: look at the other ranks' logs for the "
             "first failure.";
    default:
      return "Rerun with NCCL_DEBUG=WARN to see NCCL's own report.";
  }
}

// "ncclAllReduce failed for all_reduce #3 (...) on communicator world (nccl, rank 0 of 2):
// <NCCL's text> (<NCCL's last error>). <advice>"
std::string nccl_message(ncclResult_t result, std::string_view call, std::string_view what,
                         std::string_view where, ncclComm_t comm) {
  std::string detail;
  if (result != kNotLive) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') detail = fmt::format(" ({})", last);
  }
  return fmt::format("{} failed for {} on {}: {}{}. {}", call, what, where, result_text(result),
                     detail, advice(result));
}

[[noreturn]] void throw_cuda(cudaError_t status, std::string_view call, std::string_view what,
                             std::string_view where) {
  static_cast<void>(cudaGetLastError());  // do not leave it for the next launch check
  throw make_error(ErrorCategory::device,
                   "{} failed for {} on {}: {}: {}. Check the GPU (nvidia-smi) and that "
                   "CommOptions::device is the GPU this rank should use.",
                   call, what, where, cudaGetErrorName(status), cudaGetErrorString(status));
}

void check_cuda(cudaError_t status, std::string_view call, std::string_view what,
                std::string_view where) {
  if (status != cudaSuccess) throw_cuda(status, call, what, where);
}

ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
  }
  throw make_error(ErrorCategory::internal, "NCCL backend: unknown dtype {}",
                   static_cast<int>(dtype));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;  // integers: the sum divided, truncated toward zero
    case ReduceOp::max:
      return ncclMax;
  }
  throw make_error(ErrorCategory::internal, "NCCL backend: unknown reduce op {}",
                   static_cast<int>(op));
}

// The configuration of every communicator zero creates: non-blocking (see the file comment).
ncclConfig_t make_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// Polls a communicator that is not shared yet (being created) while it reports
// ncclInProgress. Returns its final state, or ncclInProgress when `deadline` passed first.
ncclResult_t settle_new(ncclComm_t comm, ncclResult_t issued, Clock::time_point deadline) {
  ncclResult_t state = issued;
  for (int round = 0; state == ncclInProgress; ++round) {
    if (Clock::now() >= deadline) return ncclInProgress;
    back_off(round, deadline);
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) return query;
  }
  return state;
}

Device& require_cuda(Device* device, std::string_view call) {
  if (device == nullptr || device->type() != DeviceType::cuda) {
    throw make_error(
        ErrorCategory::comm,
        "{}: the NCCL backend needs a CUDA device, but CommOptions::device is {}. "
        "Pass the GPU's device, or choose the mpi or local backend for host "
        "buffers.",
        call, device == nullptr ? std::string("not set (host memory)") : device->description());
  }
  return *device;
}

// The GPU a CUDA stream of `device` belongs to.
int stream_ordinal(Stream& stream, std::string_view what) {
  int ordinal = 0;
  check_cuda(cudaStreamGetDevice(static_cast<cudaStream_t>(stream.native()), &ordinal),
             "cudaStreamGetDevice", what, "the NCCL communicator's stream");
  return ordinal;
}

// Logs an error from a path that must not throw (destructors, noexcept teardown).
template <typename... Args>
void log_quietly(spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  try {
    log::error(format, std::forward<Args>(args)...);
  } catch (...) {
  }
}

// The NCCL handle, shared by a communicator and its works (which may outlive it). Guards the
// handle so that an abort (from a timed-out wait, an async error or the owner) never races a
// query, and remembers whether the handle is still usable.
class CommState {
 public:
  CommState(ncclComm_t comm, bool owned, int ordinal)
      : comm_(comm), owned_(owned), ordinal_(ordinal) {}

  // Normally the communicator has finalized and destroyed the handle (or aborted it) by now;
  // this covers a communicator whose construction failed after the handle was made.
  ~CommState() {
    if (owned_ && status_ == Status::live) {
      static_cast<void>(cudaSetDevice(ordinal_));
      static_cast<void>(ncclCommAbort(comm_));
      static_cast<void>(cudaGetLastError());
    }
  }

  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  bool owned() const noexcept { return owned_; }
  int ordinal() const noexcept { return ordinal_; }

  // Runs `call(comm)` under the lock; kNotLive when the handle was aborted or destroyed.
  template <typename Function>
  ncclResult_t call(Function&& function) {
    std::lock_guard lock(mutex_);
    if (status_ != Status::live) return kNotLive;
    return function(comm_);
  }

  // The communicator's asynchronous state (ncclInProgress while a non-blocking operation is
  // under way); kNotLive when the handle is gone.
  ncclResult_t async_state() {
    return call([](ncclComm_t comm) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
      return query != ncclSuccess ? query : state;
    });
  }

  // NCCL's last error text while the handle is live ("" otherwise).
  std::string last_error() {
    std::lock_guard lock(mutex_);
    if (status_ != Status::live) return {};
    const char* text = ncclGetLastError(comm_);
    return text == nullptr ? std::string() : std::string(text);
  }

  // Polls while the communicator reports ncclInProgress; ncclInProgress when `deadline` passed.
  ncclResult_t settle(ncclResult_t issued, Clock::time_point deadline) {
    ncclResult_t state = issued;
    for (int round = 0; state == ncclInProgress; ++round) {
      if (Clock::now() >= deadline) return ncclInProgress;
      back_off(round, deadline);
      state = async_state();
    }
    return state;
  }

  // After a failure or timeout: aborts the handle when zero owns it (an embedder's handle is
  // left alone). Inside an open NCCL group the abort waits for close_group, so that
  // ncclGroupEnd never sees a freed communicator.
  void abort_owned() noexcept {
    if (owned_) abort("the communicator failed or timed out");
  }

  // Aborts the handle (or, inside an open group, at close_group).
  void abort(std::string_view why) noexcept {
    std::lock_guard lock(mutex_);
    if (status_ != Status::live) return;
    if (group_open_) {
      abort_pending_ = true;
      return;
    }
    abort_locked(why);
  }

  // Aborts now, group or not (the process is about to exit).
  void abort_now(std::string_view why) noexcept {
    std::lock_guard lock(mutex_);
    if (status_ == Status::live) abort_locked(why);
  }

  void open_group() {
    std::lock_guard lock(mutex_);
    group_open_ = true;
  }

  // After ncclGroupEnd: runs an abort that was requested while the group was open.
  void close_group() noexcept {
    std::lock_guard lock(mutex_);
    group_open_ = false;
    if (abort_pending_ && status_ == Status::live) abort_locked("deferred to the group's end");
    abort_pending_ = false;
  }

  bool live() {
    std::lock_guard lock(mutex_);
    return status_ == Status::live;
  }

  // ncclCommFinalize (bounded by `deadline`) then ncclCommDestroy of an owned handle; aborts
  // instead when finalizing fails or does not finish in time. Failures are logged, never
  // thrown. Returns false when something failed.
  bool finalize_and_destroy(Clock::time_point deadline, const std::string& where) noexcept {
    static_cast<void>(cudaSetDevice(ordinal_));
    ncclResult_t result = call([](ncclComm_t comm) { return ncclCommFinalize(comm); });
    if (result == kNotLive) return true;
    if (result == ncclSuccess) result = async_state();
    result = settle(result, deadline);
    if (result != ncclSuccess) {
      log_quietly("{}: {}; aborting the NCCL communicator instead", where,
                  result == ncclInProgress
                      ? std::string("ncclCommFinalize did not finish within the timeout (a rank "
                                    "may have died or diverged)")
                      : fmt::format("ncclCommFinalize failed: {}", result_text(result)));
      abort_now("finalize failed");
      return false;
    }
    result = call([](ncclComm_t comm) { return ncclCommDestroy(comm); });
    static_cast<void>(cudaGetLastError());
    {
      // Destroyed, or in a state no later call should touch.
      std::lock_guard lock(mutex_);
      status_ = Status::released;
    }
    if (result != ncclSuccess) {
      log_quietly("{}: ncclCommDestroy failed: {}", where, result_text(result));
      return false;
    }
    return true;
  }

  // The owner stops using an embedder's handle (or one already destroyed): later queries by
  // outstanding works see it gone.
  void release() noexcept {
    std::lock_guard lock(mutex_);
    if (status_ == Status::live) status_ = Status::released;
  }

 private:
  enum class Status { live, aborted, released };

  void abort_locked(std::string_view why) noexcept {
    static_cast<void>(cudaSetDevice(ordinal_));
    const ncclResult_t result = ncclCommAbort(comm_);
    static_cast<void>(cudaGetLastError());
    status_ = Status::aborted;
    if (result != ncclSuccess) {
      log_quietly("ncclCommAbort ({}) failed: {}", why, ncclGetErrorString(result));
    }
  }

  std::mutex mutex_;
  ncclComm_t comm_;
  bool owned_;
  int ordinal_;
  Status status_ = Status::live;
  bool group_open_ = false;
  bool abort_pending_ = false;
};

// Done events, reused once their works are gone.
class EventPool : public std::enable_shared_from_this<EventPool> {
 public:
  explicit EventPool(Device& device) : device_(device) {}

  std::shared_ptr<Event> acquire() {
    std::unique_ptr<Event> event;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        event = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!event) event = device_.create_event(false);
    // The deleter gives the event back while the pool lives (the communicator), else frees it.
    return std::shared_ptr<Event>(event.release(), Recycle{weak_from_this()});
  }

 private:
  struct Recycle {
    std::weak_ptr<EventPool> pool;
    void operator()(Event* raw) const noexcept {
      std::unique_ptr<Event> event(raw);
      if (auto owner = pool.lock()) owner->give_back(std::move(event));
    }
  };

  void give_back(std::unique_ptr<Event> event) noexcept {
    try {
      std::lock_guard lock(mutex_);
      if (free_.size() < kMaxPooledEvents) free_.push_back(std::move(event));
    } catch (...) {
      // The event is freed by its unique_ptr.
    }
  }

  Device& device_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Event>> free_;
};

// One issued collective.
class NcclWork final : public TrackedWork {
 public:
  NcclWork(OpInfo op, std::shared_ptr<Health> health, std::chrono::milliseconds timeout,
           std::shared_ptr<CommState> state)
      : TrackedWork(std::move(op), std::move(health), timeout), state_(std::move(state)) {}

  // The event after the collective on the comm stream (at once, or at end_group).
  void launched(std::shared_ptr<Event> done) { done_ = std::move(done); }

  bool poll() override {
    if (!done_) return false;  // issued inside a group that has not ended yet
    check_async();
    try {
      return done_->query();
    } catch (const Error& error) {
      fail(error.category(), fmt::format("{} on {}: waiting for it failed: {}", op().describe(),
                                         health().where(), error.what()));
    }
  }

  bool block(Stream& stream) override {
    if (!done_) {
      throw make_error(ErrorCategory::usage,
                       "{} on {} was issued inside a group: call end_group() before block()",
                       op().describe(), health().where());
    }
    try {
      done_->block(stream);
    } catch (const Error& error) {
      throw make_error(error.category(), "{} on {}: ordering a stream after it failed: {}",
                       op().describe(), health().where(), error.what());
    }
    return true;
  }

  std::string expire(std::chrono::milliseconds waited) override {
    std::string message = TrackedWork::expire(waited);  // builds the message and poisons
    if (state_->owned()) {
      state_->abort_owned();
      message += " The NCCL communicator is aborted (ncclCommAbort) so that its kernels stop.";
    }
    return message;
  }

 private:
  // Throws the comm Error when NCCL reports an asynchronous failure.
  void check_async() {
    const ncclResult_t state = state_->async_state();
    if (state == ncclSuccess || state == ncclInProgress || state == kNotLive) return;
    const std::string last = state_->last_error();
    fail(ErrorCategory::comm,
         fmt::format("{} on {} failed: NCCL reported an asynchronous error: {}{}. {}",
                     op().describe(), health().where(), ncclGetErrorString(state),
                     last.empty() ? std::string() : fmt::format(" ({})", last), advice(state)));
  }

  [[noreturn]] void fail(ErrorCategory category, std::string message) {
    health().poison(op().describe() + " failed");
    state_->abort_owned();
    throw Error(category, message);
  }

  std::shared_ptr<CommState> state_;
  std::shared_ptr<Event> done_;
};

class NcclCommunicator final : public CommunicatorBase {
 public:
  Device* device() const noexcept override { return &device_; }
  Stream* stream() const noexcept override { return stream_.get(); }

  NcclCommunicator(std::string name, std::shared_ptr<CommState> state, int rank, int size,
                   Device& device, std::unique_ptr<Stream> stream,
                   std::chrono::milliseconds timeout)
      : CommunicatorBase(std::move(name), "nccl", rank, size, timeout),
        state_(std::move(state)),
        device_(device),
        stream_(std::move(stream)),
        events_(std::make_shared<EventPool>(device)),
        ready_(device.create_event(false)) {
    barrier_ = device_.reserve(Tier::device, kBarrierBytes);
    try {
      activate("creating the communicator");
      check_cuda(cudaMemsetAsync(barrier_, 0, kBarrierBytes, comm_stream()), "cudaMemsetAsync",
                 "the barrier buffer", health()->where());
    } catch (...) {
      static_cast<void>(cudaStreamSynchronize(comm_stream()));
      device_.unreserve(Tier::device, barrier_, kBarrierBytes);
      throw;
    }
  }

  ~NcclCommunicator() override { teardown(); }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string_view backend() const noexcept override { return "nccl"; }

  Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                  Stream* stream) override {
    const OpInfo info = begin_all_reduce(data, count, dtype, op);
    if (count == 0) return complete(info);
    const ncclDataType_t type = nccl_dtype(dtype);
    const ncclRedOp_t reduce = nccl_op(op);
    return issue(info, stream, "ncclAllReduce", [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(data, data, count, type, reduce, comm, s);
    });
  }

  Work reduce_scatter(const void* input, void* output, std::size_t count, DType dtype, ReduceOp op,
                      Stream* stream) override {
    const OpInfo info = begin_reduce_scatter(input, output, count, dtype, op);
    if (count == 0) return complete(info);
    const ncclDataType_t type = nccl_dtype(dtype);
    const ncclRedOp_t reduce = nccl_op(op);
    return issue(info, stream, "ncclReduceScatter", [&](ncclComm_t comm, cudaStream_t s) {
      return ncclReduceScatter(input, output, count, type, reduce, comm, s);
    });
  }

  Work all_gather(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    const OpInfo info = begin_all_gather(input, output, count, dtype);
    if (count == 0) return complete(info);
    const ncclDataType_t type = nccl_dtype(dtype);
    return issue(info, stream, "ncclAllGather", [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllGather(input, output, count, type, comm, s);
    });
  }

  // A group of sends and receives, one pair per rank (NCCL has no all-to-all of its own).
  Work all_to_all(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    const OpInfo info = begin_all_to_all(input, output, count, dtype);
    if (count == 0) return complete(info);
    const ncclDataType_t type = nccl_dtype(dtype);
    const std::size_t block = count * dtype_size(dtype);
    const int ranks = size();
    return issue(info, stream, "ncclSend/ncclRecv", [&](ncclComm_t comm, cudaStream_t s) {
      // In non-blocking mode a call may answer ncclInProgress: queued, not failed.
      const auto queued = [](ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; };
      ncclResult_t result = ncclGroupStart();
      for (int r = 0; r < ranks && queued(result); ++r) {
        const std::size_t at = static_cast<std::size_t>(r) * block;
        result = ncclSend(static_cast<const char*>(input) + at, count, type, r, comm, s);
        if (queued(result)) {
          result = ncclRecv(static_cast<char*>(output) + at, count, type, r, comm, s);
        }
      }
      const ncclResult_t ended = ncclGroupEnd();
      return queued(result) ? ended : result;
    });
  }

  Work broadcast(void* data, std::size_t count, DType dtype, int root, Stream* stream) override {
    const OpInfo info = begin_broadcast(data, count, dtype, root);
    if (count == 0) return complete(info);
    const ncclDataType_t type = nccl_dtype(dtype);
    return issue(info, stream, "ncclBroadcast", [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(data, data, count, type, root, comm, s);
    });
  }

  // A one-element all_reduce on the communicator's own buffer: complete once every rank has
  // issued it (and the caller's stream had reached it).
  Work barrier(Stream* stream) override {
    const OpInfo info = begin_barrier();
    void* buffer = barrier_;
    return issue(info, stream, "ncclAllReduce (barrier)", [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, comm, s);
    });
  }

  void begin_group() override {
    enter_group();
    const ncclResult_t result = ncclGroupStart();
    if (result != ncclSuccess) {
      leave_group();
      throw Error(ErrorCategory::comm, nccl_message(result, "ncclGroupStart", "begin_group",
                                                    health()->where(), nullptr));
    }
    state_->open_group();
  }

  void end_group() override {
    leave_group();
    std::vector<std::shared_ptr<NcclWork>> works = std::move(group_works_);
    group_works_.clear();
    try {
      activate("end_group");
    } catch (...) {
      // Still close NCCL's group below: its nesting depth is per thread.
    }
    ncclResult_t result = ncclGroupEnd();
    // Non-blocking mode: the group may still be connecting ranks; its kernels are enqueued
    // once the communicator leaves ncclInProgress.
    if (result == ncclSuccess) result = state_->async_state();
    result = state_->settle(result, deadline_after(timeout()));
    state_->close_group();  // runs an abort requested while the group was open
    health()->check();      // the group's collectives failed earlier
    if (result == ncclInProgress) {
      throw fail(ErrorCategory::timeout,
                 fmt::format("ncclGroupEnd on {} did not finish within {:.3g} s (NCCL sets up "
                             "connections on a first collective): a rank may have died, hang or "
                             "diverged. The communicator is now unusable; end the job (abort).",
                             health()->where(), seconds(timeout())),
                 "ncclGroupEnd timed out");
    }
    if (result != ncclSuccess) {
      throw fail(
          ErrorCategory::comm,
          nccl_message(result, "ncclGroupEnd", describe_group(works), health()->where(), nullptr),
          "ncclGroupEnd failed");
    }
    if (works.empty()) return;
    std::shared_ptr<Event> done;
    try {
      done = events_->acquire();
      done->record(*stream_);
    } catch (const Error& error) {
      throw fail(error.category(),
                 fmt::format("{} on {}: recording their completion failed: {}",
                             describe_group(works), health()->where(), error.what()),
                 "recording a group's completion failed");
    }
    for (auto& work : works) work->launched(done);
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    health()->check();
    if (in_group()) {
      throw make_error(ErrorCategory::usage, "{}: split inside a group; call end_group() first",
                       health()->where());
    }
    const std::string what = fmt::format("split(color {}, key {})", color, key);
    const int nccl_color = color < 0 ? NCCL_SPLIT_NOCOLOR : color;
    activate(what);
    std::unique_ptr<Stream> child_stream;
    if (color >= 0) child_stream = device_.create_stream();
    // NCCL writes the new handle into *slot from its own thread when the split completes
    // (non-blocking mode); on a timeout the slot is leaked so that a late write stays harmless.
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    ncclConfig_t config = make_config();
    const auto deadline = deadline_after(timeout());
    ncclResult_t result = state_->call(
        [&](ncclComm_t comm) { return ncclCommSplit(comm, nccl_color, key, slot.get(), &config); });
    // ncclCommSplit may return ncclSuccess while a non-blocking split is still under way (it
    // does not report the group's state): the parent's state says when it is done.
    if (result == ncclSuccess) result = state_->async_state();
    result = state_->settle(result, deadline);
    if (result == ncclInProgress) {
      static_cast<void>(slot.release());
      throw fail(ErrorCategory::timeout,
                 fmt::format("{} of {} did not finish within {:.3g} s: every rank of it must "
                             "call split; look for a rank that died, hangs or diverged. The "
                             "communicator is now unusable; end the job (abort).",
                             what, health()->where(), seconds(timeout())),
                 what + " timed out");
    }
    if (result != ncclSuccess) {
      throw fail(ErrorCategory::comm,
                 nccl_message(result, "ncclCommSplit", what, health()->where(), nullptr),
                 what + " failed");
    }
    ncclComm_t child = *slot;
    if (color < 0) {
      if (child != nullptr) {  // not expected: NCCL gives no communicator to NOCOLOR
        static_cast<void>(ncclCommDestroy(child));
      }
      return nullptr;
    }
    if (child == nullptr) {
      throw fail(ErrorCategory::internal,
                 fmt::format("ncclCommSplit for {} on {} succeeded but returned no communicator",
                             what, health()->where()),
                 what + " failed");
    }
    auto child_state = std::make_shared<CommState>(child, /*owned=*/true, state_->ordinal());
    // The child was created non-blocking too: wait until it is ready.
    result = child_state->settle(child_state->async_state(), deadline);
    int child_rank = -1;
    int child_size = 0;
    if (result == ncclSuccess) {
      result =
          child_state->call([&](ncclComm_t comm) { return ncclCommUserRank(comm, &child_rank); });
    }
    if (result == ncclSuccess) {
      result = child_state->call([&](ncclComm_t comm) { return ncclCommCount(comm, &child_size); });
    }
    if (result != ncclSuccess) {
      // child_state's destructor aborts the child.
      if (result == ncclInProgress) {
        throw make_error(ErrorCategory::timeout,
                         "the communicator made by {} of {} did not become ready within {:.3g} "
                         "s: look for a rank that died, hangs or diverged.",
                         what, health()->where(), seconds(timeout()));
      }
      throw Error(ErrorCategory::comm, nccl_message(result, "ncclCommSplit (the new communicator)",
                                                    what, health()->where(), nullptr));
    }
    return std::make_unique<NcclCommunicator>(child_name(color), std::move(child_state), child_rank,
                                              child_size, device_, std::move(child_stream),
                                              timeout());
  }

  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept override {
    try {
      log::error(
          "{}: aborting the job with exit code {}: {}. ncclCommAbort, then this process "
          "exits; the other ranks' collectives on this communicator fail or time out.",
          health()->where(), exit_code, reason);
      log::logger().flush();
    } catch (...) {
    }
    state_->abort_now("Communicator::abort");
    std::_Exit(exit_code);
  }

 private:
  cudaStream_t comm_stream() const noexcept { return static_cast<cudaStream_t>(stream_->native()); }

  void activate(std::string_view what) const {
    check_cuda(cudaSetDevice(state_->ordinal()), "cudaSetDevice", what, health()->where());
  }

  // Poisons the communicator after a failure (the rank is now out of step), aborts it when
  // zero owns it, and returns the Error to throw.
  Error fail(ErrorCategory category, std::string message, const std::string& reason) {
    health()->poison(reason);
    state_->abort_owned();
    return Error(category, std::move(message));
  }

  std::string describe_group(const std::vector<std::shared_ptr<NcclWork>>& works) const {
    return fmt::format("the group of {} collective(s) ending at end_group", works.size());
  }

  // Orders the comm stream after the caller's stream, enqueues `launch` there, and returns
  // the Work (its done event recorded now, or at end_group inside a group).
  template <typename Launch>
  Work issue(const OpInfo& op, Stream* stream, const char* call, Launch&& launch) {
    Stream& caller = stream != nullptr ? *stream : device_.default_stream();
    try {
      ready_->record(caller);
      ready_->block(*stream_);
      activate(op.describe());
    } catch (const Error& error) {
      throw fail(error.category(),
                 fmt::format("{} on {}: ordering it after the caller's stream failed: {}",
                             op.describe(), health()->where(), error.what()),
                 op.describe() + " failed");
    }
    const cudaStream_t native = comm_stream();
    ncclResult_t result = state_->call([&](ncclComm_t comm) { return launch(comm, native); });
    // Non-blocking mode: a first collective may still be connecting; its kernels are enqueued
    // once the communicator is ready again.
    if (result == ncclInProgress) result = state_->settle(result, deadline_after(timeout()));
    if (result == ncclInProgress) {
      throw fail(ErrorCategory::timeout,
                 fmt::format("{} on {}: {} did not finish setting up within {:.3g} s (NCCL "
                             "connects ranks on a first collective): a rank may have died, hang "
                             "or diverged. The communicator is now unusable; end the job "
                             "(abort).",
                             op.describe(), health()->where(), call, seconds(timeout())),
                 op.describe() + " timed out");
    }
    if (result != ncclSuccess) {
      throw fail(ErrorCategory::comm,
                 nccl_message(result, call, op.describe(), health()->where(), nullptr),
                 op.describe() + " failed");
    }
    auto work = std::make_shared<NcclWork>(op, health(), timeout(), state_);
    if (in_group()) {
      group_works_.push_back(work);
      return Work(std::move(work));
    }
    try {
      std::shared_ptr<Event> done = events_->acquire();
      done->record(*stream_);
      work->launched(std::move(done));
    } catch (const Error& error) {
      throw fail(error.category(),
                 fmt::format("{} on {}: recording its completion failed: {}", op.describe(),
                             health()->where(), error.what()),
                 op.describe() + " failed");
    }
    return Work(std::move(work));
  }

  // Waits (bounded by the timeout) for everything on the comm stream; false when it did not
  // finish or failed.
  bool drain() noexcept {
    try {
      auto done = events_->acquire();
      done->record(*stream_);
      const auto deadline = deadline_after(timeout());
      for (int round = 0;; ++round) {
        const ncclResult_t state = state_->async_state();
        if (state != ncclSuccess && state != ncclInProgress && state != kNotLive) {
          log_quietly("{}: NCCL reported an error while closing: {}", health()->where(),
                      ncclGetErrorString(state));
          return false;
        }
        if (done->query()) return true;
        if (Clock::now() >= deadline) {
          log_quietly("{}: its collectives did not finish within {:.3g} s while closing",
                      health()->where(), seconds(timeout()));
          return false;
        }
        back_off(round, deadline);
      }
    } catch (const std::exception& error) {
      log_quietly("{}: waiting for its collectives while closing failed: {}", health()->where(),
                  error.what());
      return false;
    }
  }

  // The destructor's work: close an open group, let outstanding collectives finish, then
  // finalize and destroy an owned handle (abort when that cannot finish), and free the comm
  // stream and barrier buffer once nothing on the GPU uses them.
  void teardown() noexcept {
    const std::string where = health()->where();
    if (in_group()) {
      static_cast<void>(cudaSetDevice(state_->ordinal()));
      ncclResult_t result = ncclGroupEnd();
      if (result == ncclSuccess) result = state_->async_state();
      result = state_->settle(result, deadline_after(timeout()));
      state_->close_group();
      if (result != ncclSuccess) state_->abort_owned();
      group_works_.clear();
    }
    bool quiet = !state_->live();  // aborted: its kernels have stopped
    if (!quiet) quiet = drain();
    if (state_->owned()) {
      if (quiet) {
        // Aborts instead when finalizing fails or does not finish in time.
        static_cast<void>(state_->finalize_and_destroy(deadline_after(timeout()), where));
      } else {
        state_->abort_now("closing after its collectives did not finish");
      }
      quiet = true;  // destroyed, or aborted: nothing of it runs on the GPU any more
    }
    state_->release();
    if (!quiet) {
      // An embedder's communicator that is stuck: zero may not abort it, so the stream and the
      // barrier buffer that its kernels may still use are leaked rather than freed under them.
      log_quietly(
          "{}: the embedder's NCCL communicator still has unfinished collectives; "
          "leaking its stream and barrier buffer instead of waiting forever",
          where);
      static_cast<void>(stream_.release());
      return;
    }
    try {
      stream_->synchronize();
    } catch (const std::exception& error) {
      log_quietly("{}: synchronizing its stream while closing failed: {}", where, error.what());
    }
    device_.unreserve(Tier::device, barrier_, kBarrierBytes);
    barrier_ = nullptr;
  }

  std::shared_ptr<CommState> state_;
  Device& device_;
  std::unique_ptr<Stream> stream_;
  std::shared_ptr<EventPool> events_;
  std::unique_ptr<Event> ready_;  // reused: a stream wait captures the event when issued
  void* barrier_ = nullptr;
  std::vector<std::shared_ptr<NcclWork>> group_works_;
};

void check_launch(const LaunchInfo& launch) {
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size) {
    throw make_error(ErrorCategory::usage,
                     "NCCL communicator: rank {} is not a rank of a world of {} (launcher {})",
                     launch.rank, launch.world_size, launch.launcher);
  }
}

void check_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    throw make_error(ErrorCategory::usage,
                     "NCCL communicator: the timeout must be positive (comm_timeout_s)");
  }
}

}  // namespace

bool nccl_backend_built() noexcept {
  return true;
}

std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options,
                                                     const LaunchInfo& launch,
                                                     const ShareId& share_id) {
  Device& device = require_cuda(options.device, "make_nccl_communicator");
  check_launch(launch);
  check_timeout(options.timeout);
  const std::string where = where_of("world", launch.rank, launch.world_size);
  if (!share_id && launch.world_size > 1) {
    throw make_error(ErrorCategory::usage,
                     "make_nccl_communicator for {}: no way to share rank 0's NCCL id (share_id "
                     "is empty)",
                     where);
  }

  std::unique_ptr<Stream> stream = device.create_stream();
  const int ordinal = stream_ordinal(*stream, "initialisation");
  check_cuda(cudaSetDevice(ordinal), "cudaSetDevice", "initialisation", where);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (launch.rank == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) {
      throw Error(ErrorCategory::comm,
                  nccl_message(result, "ncclGetUniqueId", "initialisation", where, nullptr));
    }
  }
  if (share_id) share_id(&id, sizeof id);

  // Non-blocking: ncclCommInitRankConfig returns at once and the handle is polled until the
  // other ranks have joined, so that a rank that never comes makes this one fail within the
  // timeout instead of hanging.
  ncclConfig_t config = make_config();
  ncclComm_t comm = nullptr;
  const auto deadline = deadline_after(options.timeout);
  ncclResult_t result = ncclCommInitRankConfig(&comm, launch.world_size, id, launch.rank, &config);
  if (result == ncclInProgress && comm != nullptr) result = settle_new(comm, result, deadline);
  if (result != ncclSuccess) {
    std::string message =
        result == ncclInProgress
            ? fmt::format(
                  "NCCL initialisation of {} did not finish within {:.3g} s: every one "
                  "of the {} ranks must start and create the communicator with the same "
                  "id; look for a rank that failed to start or died, check that the "
                  "ranks can reach each other (NCCL_SOCKET_IFNAME) and rerun with "
                  "NCCL_DEBUG=INFO.",
                  where, seconds(options.timeout), launch.world_size)
            : nccl_message(result, "ncclCommInitRankConfig", "initialisation", where, comm);
    if (comm != nullptr) static_cast<void>(ncclCommAbort(comm));
    throw Error(result == ncclInProgress ? ErrorCategory::timeout : ErrorCategory::comm, message);
  }

  auto state = std::make_shared<CommState>(comm, /*owned=*/true, ordinal);
  return std::make_unique<NcclCommunicator>("world", std::move(state), launch.rank,
                                            launch.world_size, device, std::move(stream),
                                            options.timeout);
}

std::unique_ptr<Communicator> wrap_nccl(void* nccl_comm, const CommOptions& options) {
  if (nccl_comm == nullptr) {
    throw Error(ErrorCategory::usage, "wrap_nccl_communicator: the ncclComm_t is null");
  }
  Device& device = require_cuda(options.device, "wrap_nccl_communicator");
  check_timeout(options.timeout);
  auto comm = static_cast<ncclComm_t>(nccl_comm);
  const std::string_view what = "wrapping the embedder's communicator";
  int rank = -1;
  int size = 0;
  int cuda_device = -1;
  const auto check = [&](ncclResult_t result, std::string_view call) {
    if (result != ncclSuccess) {
      throw Error(ErrorCategory::comm,
                  nccl_message(result, call, what, "the embedder's NCCL communicator", comm));
    }
  };
  check(ncclCommUserRank(comm, &rank), "ncclCommUserRank");
  check(ncclCommCount(comm, &size), "ncclCommCount");
  check(ncclCommCuDevice(comm, &cuda_device), "ncclCommCuDevice");
  const std::string where = where_of("world", rank, size);
  std::unique_ptr<Stream> stream = device.create_stream();
  const int ordinal = stream_ordinal(*stream, what);
  if (cuda_device != ordinal) {
    throw make_error(ErrorCategory::usage,
                     "wrap_nccl_communicator: the NCCL communicator is on cuda:{} but "
                     "CommOptions::device is {}; pass the device of the communicator's GPU",
                     cuda_device, device.description());
  }
  auto state = std::make_shared<CommState>(comm, /*owned=*/false, ordinal);
  return std::make_unique<NcclCommunicator>("world", std::move(state), rank, size, device,
                                            std::move(stream), options.timeout);
}

}  // namespace zero::comm
