// The MPI backend: MPI-3 nonblocking collectives on a duplicate of the job's (or the
// embedder's) communicator; the reduce-scatter is an all-to-all and a local sum. Device
// buffers go through pinned staging blocks. Progress comes
// from the progress thread or from the caller's test()/wait(), per CommOptions::progress.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "comm/backends.h"
#include "comm/comm_base.h"
#include "comm/mpi/arrival_board.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/mpi/staging.h"
#include "comm/reduce_kernels.h"
#include "device/device.h"

namespace zero::comm {
namespace mpi {
namespace {

// One issued collective: its requests, then what to do once they complete (divide for avg,
// move an in-place block, copy staged results back to the device).
class MpiWork final : public TrackedWork, public Progressable {
 public:
  MpiWork(OpInfo op, std::shared_ptr<Health> health, std::chrono::milliseconds timeout,
          std::shared_ptr<ArrivalBoard> board, bool threaded)
      : TrackedWork(std::move(op), std::move(health), timeout),
        board_(std::move(board)),
        threaded_(threaded) {}

  std::vector<MPI_Request>& requests() noexcept { return requests_; }
  void on_complete(std::function<void()> finish) { finish_ = std::move(finish); }

  bool poll() override {
    if (!threaded_) advance();
    switch (state_.load(std::memory_order_acquire)) {
      case kPending:
        abandon_if_departed();
        return false;
      case kDone:
        return true;
      default:
        throw Error(ErrorCategory::comm, failure_);
    }
  }

  // Tests the request and finishes the work; never throws (it may run on the progress thread).
  bool advance() noexcept override {
    if (state_.load(std::memory_order_acquire) != kPending) return true;
    try {
      int flag = 0;
      {
        std::lock_guard guard(Runtime::get().lock());
        check(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag,
                          MPI_STATUSES_IGNORE),
              "MPI_Testall", op().describe() + " on " + health().where());
      }
      if (!flag) return false;
      if (finish_) finish_();
      state_.store(kDone, std::memory_order_release);
    } catch (const std::exception& error) {
      failure_ =
          fmt::format("{} on {} failed: {}", op().describe(), health().where(), error.what());
      health().poison(op().describe() + " failed");
      Runtime::get().skip_finalize();
      state_.store(kFailed, std::memory_order_release);
    }
    return true;
  }

  std::string expire(std::chrono::milliseconds waited) override {
    Runtime::get().skip_finalize();
    return TrackedWork::expire(waited);
  }

  // A rank of this node that left before issuing this collective will never issue it: fail
  // now, naming it, rather than at the timeout.
  void abandon_if_departed() {
    const std::string gone = board_->departed_before(op().sequence);
    if (gone.empty()) return;
    int pending = kPending;
    if (!state_.compare_exchange_strong(pending, kFailed, std::memory_order_acq_rel)) return;
    failure_ = fmt::format(
        "{} on {} cannot complete: {} left the job before issuing it (its engine was destroyed: "
        "its program ended or failed). The ranks did not make the same calls: different numbers "
        "of steps, or a rank that stopped early; the job cannot go on",
        op().describe(), health().where(), gone);
    health().poison(op().describe() + ": a rank left the job");
    Runtime::get().skip_finalize();
    throw Error(ErrorCategory::comm, failure_);
  }

 protected:
  std::string missing_ranks() override { return board_->missing(op().sequence); }

 private:
  static constexpr int kPending = 0, kDone = 1, kFailed = 2;

  std::shared_ptr<ArrivalBoard> board_;
  bool threaded_;
  std::vector<MPI_Request> requests_;
  std::function<void()> finish_;
  std::atomic<int> state_{kPending};
  std::string failure_;
};

int int_count(std::size_t count, const OpInfo& op) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw make_error(ErrorCategory::usage,
                     "{}: MPI counts are ints; split collectives above {} elements", op.describe(),
                     INT_MAX);
  }
  return static_cast<int>(count);
}

Progress resolve_progress(const CommOptions& options) {
  Progress progress = options.progress;
  if (progress == Progress::automatic) {
    progress = Progress::poll;
    if (const char* text = std::getenv("ZERO_MPI_PROGRESS")) {
      const auto parsed = parse_progress(text);
      if (!parsed || *parsed == Progress::automatic) {
        throw make_error(ErrorCategory::usage, "ZERO_MPI_PROGRESS='{}': expected thread or poll",
                         text);
      }
      progress = *parsed;
    }
  }
  if (progress == Progress::thread && !Runtime::get().threads_allowed()) {
    log::warn(
        "MPI was initialised below MPI_THREAD_SERIALIZED; using poll progress instead of "
        "a progress thread");
    progress = Progress::poll;
  }
  return progress;
}

class MpiCommunicator final : public CommunicatorBase {
 public:
  // Takes ownership of `comm` (a duplicate made for zero).
  MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options, Progress progress)
      : CommunicatorBase(std::move(name), "mpi", rank_of(comm), size_of(comm), options.timeout),
        comm_(comm),
        options_(options),
        threaded_(progress == Progress::thread),
        staged_(options.stage_host_buffers ||
                (options.device != nullptr && !options.device->host_addressable(Tier::device))) {
    std::lock_guard guard(Runtime::get().lock());
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    board_ = std::make_shared<ArrivalBoard>(comm_);
    if (staged_) {
      if (options.device == nullptr) {
        own_device_ = create_cpu_device();
        options_.device = own_device_.get();
      }
      staging_ = std::make_shared<StagingPool>(*options_.device);
    }
  }

  ~MpiCommunicator() override {
    // A poisoned communicator's ranks may never reach the matching collective free.
    const bool usable = !poisoned();
    std::lock_guard guard(Runtime::get().lock());
    board_->release(usable);
    if (usable) MPI_Comm_free(&comm_);
  }

  Device* device() const noexcept override { return own_device_ ? nullptr : options_.device; }

  void depart() noexcept override { board_->depart(); }

  Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                  Stream* stream) override {
    const OpInfo info = begin_all_reduce(data, count, dtype, op);
    if (count == 0) return complete(info);
    const std::size_t bytes = count * dtype_size(dtype);
    void* buffer = data;
    StagingPool::Block stage;
    if (staged_) {
      stage = staging_->acquire(bytes);
      to_host(stage.data, data, bytes, stream);
      buffer = stage.data;
    } else {
      wait_for_caller(stream);
    }
    const std::size_t element = dtype_size(dtype);
    const MPI_Datatype type = datatype_of(dtype);
    const MPI_Op mpi_op = op_of(dtype, op);
    return issue(info,
                 pieces(count, element,
                        [=, this](std::size_t offset, int n, MPI_Request* request) {
                          return MPI_Iallreduce(MPI_IN_PLACE,
                                                static_cast<char*>(buffer) + offset * element, n,
                                                type, mpi_op, comm_, request);
                        }),
                 [=, this] {
                   if (op == ReduceOp::avg) divide_by(dtype, buffer, count, size());
                   if (staged_) from_host(data, stage.data, bytes, stage);
                 });
  }

  // An all-to-all of the blocks, then the sum of the received ones here: each rank receives
  // every rank's copy of its own block and adds them up in rank order, so it sends (n-1)/n of
  // the buffer, the least any algorithm sends, and no rank relays the others' data. Open MPI's
  // non-blocking reduce-scatter (libnbc) reduces everything to rank 0 and scatters it: about
  // 1.25x those bytes at 4 ranks and 1.5x at 2, all of it through rank 0.
  Work reduce_scatter(const void* input, void* output, std::size_t count, DType dtype, ReduceOp op,
                      Stream* stream) override {
    const OpInfo info = begin_reduce_scatter(input, output, count, dtype, op);
    if (count == 0) return complete(info);
    const int n = int_count(count, info);
    int_count(count * static_cast<std::size_t>(size()), info);
    const std::size_t block = count * dtype_size(dtype);
    const std::size_t total = block * static_cast<std::size_t>(size());
    const MPI_Datatype type = datatype_of(dtype);
    // Received blocks, then with staging the input and this rank's result.
    StagingPool& pool = staged_ ? *staging_ : host_pool();
    const StagingPool::Block stage = pool.acquire(total + (staged_ ? total + block : 0));
    char* received = static_cast<char*>(stage.data);
    const char* send = static_cast<const char*>(input);
    char* result = static_cast<char*>(output);
    if (staged_) {
      char* in = received + total;
      to_host(in, input, total, stream);
      send = in;
      result = in + total;
    } else {
      wait_for_caller(stream);
    }
    return issue(info, single([=, this](MPI_Request* request) {
                   return MPI_Ialltoall(send, n, type, received, n, type, comm_, request);
                 }),
                 [=, this, &pool] {
                   // In place the input is this rank's block: no longer read once sent.
                   std::memmove(result, received, block);
                   const ReduceOp add = op == ReduceOp::max ? ReduceOp::max : ReduceOp::sum;
                   for (int q = 1; q < size(); ++q) {
                     reduce_into(dtype, add, received + static_cast<std::size_t>(q) * block, result,
                                 count);
                   }
                   if (op == ReduceOp::avg) divide_by(dtype, result, count, size());
                   if (staged_) {
                     from_host(output, result, block, stage);
                   } else {
                     pool.release(stage);
                   }
                 });
  }

  Work all_gather(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    const OpInfo info = begin_all_gather(input, output, count, dtype);
    if (count == 0) return complete(info);
    const int n = int_count(count, info);
    int_count(count * static_cast<std::size_t>(size()), info);
    const std::size_t block = count * dtype_size(dtype);
    const std::size_t total = block * static_cast<std::size_t>(size());
    const MPI_Datatype type = datatype_of(dtype);
    if (staged_) {
      StagingPool::Block stage = staging_->acquire(block + total);
      to_host(stage.data, input, block, stream);
      char* in = static_cast<char*>(stage.data);
      char* out = in + block;
      return issue(info, single([=, this](MPI_Request* request) {
                     return MPI_Iallgather(in, n, type, out, n, type, comm_, request);
                   }),
                   [=, this] { from_host(output, out, total, stage); });
    }
    wait_for_caller(stream);
    const bool in_place =
        static_cast<const char*>(input) == static_cast<char*>(output) + rank() * block;
    return issue(
        info, single([=, this](MPI_Request* request) {
          return in_place ? MPI_Iallgather(MPI_IN_PLACE, 0, type, output, n, type, comm_, request)
                          : MPI_Iallgather(input, n, type, output, n, type, comm_, request);
        }),
        {});
  }

  Work all_to_all(const void* input, void* output, std::size_t count, DType dtype,
                  Stream* stream) override {
    const OpInfo info = begin_all_to_all(input, output, count, dtype);
    if (count == 0) return complete(info);
    const int n = int_count(count, info);
    int_count(count * static_cast<std::size_t>(size()), info);
    const std::size_t total = count * dtype_size(dtype) * static_cast<std::size_t>(size());
    const MPI_Datatype type = datatype_of(dtype);
    if (staged_) {
      StagingPool::Block stage = staging_->acquire(2 * total);
      char* in = static_cast<char*>(stage.data);
      char* out = in + total;
      to_host(in, input, total, stream);
      return issue(info, single([=, this](MPI_Request* request) {
                     return MPI_Ialltoall(in, n, type, out, n, type, comm_, request);
                   }),
                   [=, this] { from_host(output, out, total, stage); });
    }
    wait_for_caller(stream);
    return issue(info, single([=, this](MPI_Request* request) {
                   return MPI_Ialltoall(input, n, type, output, n, type, comm_, request);
                 }),
                 {});
  }

  Work broadcast(void* data, std::size_t count, DType dtype, int root, Stream* stream) override {
    const OpInfo info = begin_broadcast(data, count, dtype, root);
    if (count == 0) return complete(info);
    const std::size_t bytes = count * dtype_size(dtype);
    void* buffer = data;
    StagingPool::Block stage;
    if (staged_) {
      stage = staging_->acquire(bytes);
      if (rank() == root) {
        to_host(stage.data, data, bytes, stream);
      } else {
        wait_for_caller(stream);
      }
      buffer = stage.data;
    } else {
      wait_for_caller(stream);
    }
    const std::size_t element = dtype_size(dtype);
    const MPI_Datatype type = datatype_of(dtype);
    return issue(info,
                 pieces(count, element,
                        [=, this](std::size_t offset, int n, MPI_Request* request) {
                          return MPI_Ibcast(static_cast<char*>(buffer) + offset * element, n, type,
                                            root, comm_, request);
                        }),
                 [=, this] {
                   if (staged_) from_host(data, stage.data, bytes, stage);
                 });
  }

  Work barrier(Stream* stream) override {
    const OpInfo info = begin_barrier();
    // The barrier comes after the caller's queued device work.
    wait_for_caller(stream);
    return issue(info,
                 single([this](MPI_Request* request) { return MPI_Ibarrier(comm_, request); }), {});
  }

  void begin_group() override { enter_group(); }
  void end_group() override { leave_group(); }

  std::unique_ptr<Communicator> split(int color, int key) override {
    health()->check();
    MPI_Comm child = MPI_COMM_NULL;
    {
      std::lock_guard guard(Runtime::get().lock());
      check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &child), "MPI_Comm_split",
            health()->where());
    }
    if (child == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(child, child_name(color), options_,
                                             threaded_ ? Progress::thread : Progress::poll);
  }

  [[noreturn]] void abort(int exit_code, std::string_view reason) noexcept override {
    log::error("aborting the job ({}): {}", health()->where(), reason);
    // The progress thread holds the lock only for a test at a time.
    Runtime::get().lock().lock();
    MPI_Abort(comm_, exit_code);
    std::_Exit(exit_code);
  }

 private:
  static int rank_of(MPI_Comm comm) {
    int rank = 0;
    std::lock_guard guard(Runtime::get().lock());
    MPI_Comm_rank(comm, &rank);
    return rank;
  }
  static int size_of(MPI_Comm comm) {
    int size = 0;
    std::lock_guard guard(Runtime::get().lock());
    MPI_Comm_size(comm, &size);
    return size;
  }

  // Device -> pinned, after the work already queued on the caller's stream.
  void to_host(void* stage, const void* source, std::size_t bytes, Stream* stream) {
    Device& device = *options_.device;
    Stream& on = stream != nullptr ? *stream : device.default_stream();
    device.copy_async(stage, source, bytes, on);
    on.synchronize();
  }
  // Pinned -> device (from `source` inside `stage`), then the block goes back to the pool.
  void from_host(void* destination, const void* source, std::size_t bytes,
                 StagingPool::Block stage) {
    options_.device->copy(destination, source, bytes);
    staging_->release(stage);
  }
  // The caller's queued device work must be done before MPI reads its data or a staged result
  // overwrites it (on the synchronous CPU device there is none).
  void wait_for_caller(Stream* stream) {
    if (stream != nullptr) {
      stream->synchronize();
    } else if (options_.device != nullptr) {
      options_.device->default_stream().synchronize();
    }
  }

  // Host blocks for a host communicator's reduce-scatter (made at its first).
  StagingPool& host_pool() {
    std::lock_guard guard(host_pool_mutex_);
    if (!host_pool_) {
      pool_device_ = create_cpu_device();
      host_pool_ = std::make_shared<StagingPool>(*pool_device_);
    }
    return *host_pool_;
  }

  // `post` issues the collective's MPI calls, appending one request per call.
  using Post = std::function<int(std::vector<MPI_Request>&)>;
  Work issue(const OpInfo& info, const Post& post, std::function<void()> finish) {
    auto work = std::make_shared<MpiWork>(info, health(), timeout(), board_, threaded_);
    work->on_complete(std::move(finish));
    {
      std::lock_guard guard(Runtime::get().lock());
      board_->issued(info.sequence);
      const int rc = post(work->requests());
      if (rc != MPI_SUCCESS) {
        health()->poison(info.describe() + " could not be issued");
        Runtime::get().skip_finalize();
        check(rc, info.collective, info.describe() + " on " + health()->where());
      }
    }
    if (threaded_) Runtime::get().drive(work);
    return Work(work);
  }

  // One MPI call, one request.
  static Post single(std::function<int(MPI_Request*)> call) {
    return [call = std::move(call)](std::vector<MPI_Request>& requests) {
      requests.push_back(MPI_REQUEST_NULL);
      return call(&requests.back());
    };
  }

  // Calls `call(offset, n, request)` for consecutive pieces of `count` elements of `element`
  // bytes, each at most options_.mpi_piece_bytes (and INT_MAX elements).
  Post pieces(std::size_t count, std::size_t element,
              std::function<int(std::size_t, int, MPI_Request*)> call) const {
    const std::size_t piece = std::clamp<std::size_t>(options_.mpi_piece_bytes / element, 1,
                                                      static_cast<std::size_t>(INT_MAX));
    return [=, call = std::move(call)](std::vector<MPI_Request>& requests) {
      for (std::size_t offset = 0; offset < count; offset += piece) {
        requests.push_back(MPI_REQUEST_NULL);
        const int n = static_cast<int>(std::min(piece, count - offset));
        if (const int rc = call(offset, n, &requests.back()); rc != MPI_SUCCESS) return rc;
      }
      return MPI_SUCCESS;
    };
  }

  MPI_Comm comm_;
  CommOptions options_;
  bool threaded_;
  bool staged_;
  std::unique_ptr<Device> own_device_;
  std::shared_ptr<ArrivalBoard> board_;
  std::shared_ptr<StagingPool> staging_;
  std::mutex host_pool_mutex_;
  std::unique_ptr<Device> pool_device_;  // declared before the pool that uses it
  std::shared_ptr<StagingPool> host_pool_;
};

}  // namespace
}  // namespace mpi

bool mpi_backend_built() noexcept {
  return true;
}

std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options) {
  return wrap_mpi(nullptr, options);
}

std::unique_ptr<Communicator> wrap_mpi(const void* mpi_comm, const CommOptions& options) {
  mpi::Runtime& runtime = mpi::Runtime::get();
  const Progress progress = mpi::resolve_progress(options);
  MPI_Comm parent = mpi_comm != nullptr ? *static_cast<const MPI_Comm*>(mpi_comm) : MPI_COMM_WORLD;
  MPI_Comm mine = MPI_COMM_NULL;
  {
    std::lock_guard guard(runtime.lock());
    mpi::check(MPI_Comm_dup(parent, &mine), "MPI_Comm_dup",
               mpi_comm != nullptr ? "the embedder's communicator" : "MPI_COMM_WORLD");
  }
  return std::make_unique<mpi::MpiCommunicator>(mine, "world", options, progress);
}

}  // namespace zero::comm
