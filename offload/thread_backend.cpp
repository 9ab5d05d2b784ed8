// The thread-pool backend, for where io_uring is unavailable: each lane is a queue served by
// queue_depth threads (at most kMaxWorkersPerLane) doing blocking pread/pwrite on the O_DIRECT
// file, so that the same settings keep about as many pieces in flight as the rings do.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

#include <pthread.h>
#include <unistd.h>

#include "base/error.h"
#include "offload/request.h"

namespace zero::offload::detail {
namespace {

constexpr int kMaxWorkersPerLane = 64;

class ThreadLane {
 public:
  ThreadLane(AioBase& owner, int workers) : owner_(owner) {
    try {
      for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
    } catch (const std::system_error& error) {
      stop();
      throw make_error(ErrorCategory::io, "cannot start the I/O thread pool's threads: {}",
                       error.what());
    }
  }
  // Finishes every queued piece, then joins the threads.
  ~ThreadLane() { stop(); }
  ThreadLane(const ThreadLane&) = delete;
  ThreadLane& operator=(const ThreadLane&) = delete;

  void enqueue(std::vector<Piece> pieces) {
    {
      std::lock_guard lock(mutex_);
      for (Piece& piece : pieces) queue_.push_back(std::move(piece));
    }
    if (pieces.size() == 1) {
      work_.notify_one();
    } else {
      work_.notify_all();
    }
  }

 private:
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    work_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
  }

  void work() {
    ::pthread_setname_np(::pthread_self(), "zero-aio");
    for (;;) {
      Piece piece;
      {
        std::unique_lock lock(mutex_);
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to do
        piece = std::move(queue_.front());
        queue_.pop_front();
      }
      run(piece);
      piece.request->finish_piece();
    }
  }

  // Moves the whole piece, resuming short transfers and retrying EINTR/EAGAIN.
  void run(Piece& piece) {
    const Request& request = *piece.request;
    for (;;) {
      if (request.failed()) return;  // not issued: the request has failed whatever it does
      long long result;
      if (const int err = owner_.injected_error(piece)) {
        result = -static_cast<long long>(err);
      } else {
        const ssize_t n = request.write ? ::pwrite(request.fd, piece.next_buffer(), piece.left(),
                                                   static_cast<off_t>(piece.next_offset()))
                                        : ::pread(request.fd, piece.next_buffer(), piece.left(),
                                                  static_cast<off_t>(piece.next_offset()));
        result = n < 0 ? -static_cast<long long>(errno) : n;
      }
      if (account(piece, result) != Progress::again) return;
      if (result == -EAGAIN) {
        // The device is busy: back off a little, more on each retry, up to a millisecond.
        std::this_thread::sleep_for(
            std::chrono::microseconds(std::min<std::uint32_t>(piece.retries * 10, 1000)));
      }
    }
  }

  AioBase& owner_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Piece> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

class ThreadBackend final : public AioBase {
 public:
  explicit ThreadBackend(const AioOptions& options)
      : AioBase(options, AioBackend::threads, options.intra_op_parallelism) {
    const int workers = std::min(options.queue_depth, kMaxWorkersPerLane);
    for (int i = 0; i < options.intra_op_parallelism; ++i) {
      lanes_.push_back(std::make_unique<ThreadLane>(*this, workers));
    }
  }

  ~ThreadBackend() override { lanes_.clear(); }  // drains before the tickets go

  // Blocking pread/pwrite has nothing to register.
  bool register_buffers(const std::vector<std::pair<void*, std::size_t>>&) override {
    return false;
  }

 protected:
  void enqueue(int lane, std::vector<Piece> pieces) override {
    lanes_[static_cast<std::size_t>(lane)]->enqueue(std::move(pieces));
  }

 private:
  std::vector<std::unique_ptr<ThreadLane>> lanes_;
};

}  // namespace

std::unique_ptr<AsyncIO> make_thread_backend(const AioOptions& options) {
  return std::make_unique<ThreadBackend>(options);
}

}  // namespace zero::offload::detail
