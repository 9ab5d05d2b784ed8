// The io_uring backend. Each lane is one ring owned by one thread: the thread takes pieces
// from the lane's queue while fewer than queue_depth are in flight, submits them, and reaps
// their completions, resubmitting the rest of short transfers and EINTR/EAGAIN answers.
// Submitters wake it through an eventfd whose read is always armed in the ring, so the thread
// sleeps in one place (io_uring_enter) for both completions and new work.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include <liburing.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"
#include "base/log.h"
#include "offload/request.h"

namespace zero::offload::detail {
namespace {

constexpr std::uint64_t kWakeTag = 0;  // user_data of the eventfd read; a piece's is slot + 1
// The kernel refuses fixed buffers over 1 GiB and more than 16384 of them.
constexpr std::size_t kMaxFixedBuffer = std::size_t{1} << 30;
constexpr std::size_t kMaxFixedBuffers = 16384;

std::string ring_failure(int err) {
  const char* why = "";
  switch (err) {
    case EPERM:
      why =
          " (io_uring is disabled by the kernel, sysctl kernel.io_uring_disabled, or forbidden "
          "by a seccomp policy, as container runtimes often do)";
      break;
    case ENOSYS:
      why = " (this kernel was built without io_uring)";
      break;
    case ENOMEM:
      why = " (the locked-memory limit leaves no room for the ring: raise ulimit -l)";
      break;
    default:
      break;
  }
  return fmt::format("io_uring is unavailable: cannot set up a ring: {}{}", errno_text(err), why);
}

std::string memlock_limit() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return format_bytes(limit.rlim_cur);
}

// A buffer registered with the ring, and its index there.
struct Fixed {
  const std::byte* begin;
  const std::byte* end;
  int index;
};

class UringLane {
 public:
  // Starts the lane's thread, which sets up the ring; throws an io Error saying why when it
  // cannot.
  UringLane(AioBase& owner, int depth);
  // Finishes every piece queued or in flight, then stops the thread and closes the ring.
  ~UringLane();
  UringLane(const UringLane&) = delete;
  UringLane& operator=(const UringLane&) = delete;

  void enqueue(std::vector<Piece> pieces);
  // Replaces the ring's fixed buffers with `buffers` (none: just unregisters), on the lane's
  // thread once nothing is in flight. Returns 0 or -errno.
  int register_buffers(const std::vector<iovec>& buffers);

 private:
  struct Control {
    const std::vector<iovec>* buffers;
    std::promise<int> result;
  };

  void main(std::promise<std::string>& started);
  std::string set_up();
  void loop();
  void run(Control& control);
  void issue(int slot);
  // Takes an attempt's result (bytes or -errno): the slot is issued again or released.
  void settle(int slot, long long result);
  void release(int slot);
  void arm_wakeup();
  void wake();
  io_uring_sqe* next_sqe();
  int fixed_index(const std::byte* buffer, std::size_t bytes) const;

  AioBase& owner_;
  const int depth_;
  int event_fd_ = -1;

  // Shared with submitters, under mutex_.
  std::mutex mutex_;
  std::deque<Piece> queue_;
  Control* control_ = nullptr;
  bool stopping_ = false;

  // The lane thread's own.
  io_uring ring_{};
  std::uint64_t wake_value_ = 0;  // the eventfd read's target
  std::vector<Piece> slots_;      // the pieces in flight or ready, by slot
  std::vector<int> free_slots_;
  std::vector<int> ready_;    // slots to issue (new pieces, retries, resumed rests)
  int in_flight_ = 0;         // pieces in the kernel (the eventfd read not counted)
  std::vector<Fixed> fixed_;  // sorted by begin
  bool warned_submit_ = false;

  std::thread thread_;
};

UringLane::UringLane(AioBase& owner, int depth) : owner_(owner), depth_(depth) {
  slots_.resize(static_cast<std::size_t>(depth));
  for (int s = depth - 1; s >= 0; --s) free_slots_.push_back(s);
  ready_.reserve(static_cast<std::size_t>(depth));
  event_fd_ = ::eventfd(0, EFD_CLOEXEC);  // blocking: io_uring then waits for it by polling
  if (event_fd_ < 0) {
    throw make_error(ErrorCategory::io, "cannot create the eventfd of an io_uring lane: {}",
                     errno_text(errno));
  }
  std::promise<std::string> started;
  std::future<std::string> result = started.get_future();
  try {
    thread_ = std::thread([this, &started] { main(started); });
  } catch (const std::system_error& error) {
    ::close(event_fd_);
    throw make_error(ErrorCategory::io, "cannot start an io_uring thread: {}", error.what());
  }
  const std::string failure = result.get();
  if (!failure.empty()) {
    thread_.join();
    ::close(event_fd_);
    throw Error(ErrorCategory::io, failure);
  }
}

UringLane::~UringLane() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  thread_.join();
  ::close(event_fd_);
}

void UringLane::enqueue(std::vector<Piece> pieces) {
  {
    std::lock_guard lock(mutex_);
    for (Piece& piece : pieces) queue_.push_back(std::move(piece));
  }
  wake();
}

int UringLane::register_buffers(const std::vector<iovec>& buffers) {
  Control control{&buffers, {}};
  std::future<int> result = control.result.get_future();
  {
    std::lock_guard lock(mutex_);
    control_ = &control;
  }
  wake();
  return result.get();
}

void UringLane::wake() {
  const std::uint64_t one = 1;
  // Cannot fail short of a counter overflow, which would take 2^64 wakes.
  [[maybe_unused]] const ssize_t n = ::write(event_fd_, &one, sizeof one);
}

void UringLane::main(std::promise<std::string>& started) {
  ::pthread_setname_np(::pthread_self(), "zero-uring");
  std::string failure = set_up();
  const bool ok = failure.empty();
  started.set_value(std::move(failure));  // the constructor returns: `started` is gone after this
  if (!ok) return;
  loop();
  ::io_uring_queue_exit(&ring_);  // also cancels the eventfd read
}

std::string UringLane::set_up() {
  // One entry more than the pieces in flight, for the eventfd read. Only this thread submits
  // and waits, so the ring can let completions wait for it (DEFER_TASKRUN, Linux 6.1) rather
  // than interrupt it (COOP_TASKRUN, 5.19 spares the interrupt); older kernels refuse the flags
  // they do not know with EINVAL, and the next set is tried.
  const auto entries = static_cast<unsigned>(depth_ + 1);
  int ret = -EINVAL;
  for (const unsigned flags :
       {IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_COOP_TASKRUN, 0u}) {
    io_uring_params params{};
    params.flags = flags;
    ret = ::io_uring_queue_init_params(entries, &ring_, &params);
    if (ret != -EINVAL) break;
  }
  if (ret < 0) return ring_failure(-ret);

  io_uring_probe* probe = ::io_uring_get_probe_ring(&ring_);
  const bool supported = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                         io_uring_opcode_supported(probe, IORING_OP_WRITE) &&
                         io_uring_opcode_supported(probe, IORING_OP_READ_FIXED) &&
                         io_uring_opcode_supported(probe, IORING_OP_WRITE_FIXED);
  if (probe != nullptr) ::io_uring_free_probe(probe);
  if (!supported) {
    ::io_uring_queue_exit(&ring_);
    return "io_uring is unavailable: this kernel's io_uring lacks IORING_OP_READ and "
           "IORING_OP_WRITE (Linux 5.6 or later has them)";
  }
  return {};
}

void UringLane::loop() {
  arm_wakeup();
  for (;;) {
    Control* control = nullptr;
    {
      std::lock_guard lock(mutex_);
      if (control_ != nullptr) {
        // Buffers change only with nothing in flight, so no request uses a stale index; new
        // pieces wait meanwhile.
        if (in_flight_ == 0 && ready_.empty()) std::swap(control, control_);
      } else {
        while (!queue_.empty() && !free_slots_.empty()) {
          const int slot = free_slots_.back();
          free_slots_.pop_back();
          slots_[static_cast<std::size_t>(slot)] = std::move(queue_.front());
          queue_.pop_front();
          ready_.push_back(slot);
        }
      }
      if (stopping_ && control_ == nullptr && control == nullptr && queue_.empty() &&
          ready_.empty() && in_flight_ == 0) {
        return;
      }
    }
    if (control != nullptr) {
      run(*control);
      continue;
    }
    // issue() may put a slot back (an injected EINTR): go on until nothing is left to issue.
    while (!ready_.empty()) {
      std::vector<int> batch;
      batch.swap(ready_);
      for (const int slot : batch) issue(slot);
    }

    const int ret = ::io_uring_submit_and_wait(&ring_, 1);
    if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
      // The entries stay in the submission queue and go with the next call; a pause keeps a
      // ring that keeps failing from spinning a core.
      if (!warned_submit_) log::warn("io_uring_enter failed ({}); retrying", errno_text(-ret));
      warned_submit_ = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }

    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const std::uint64_t tag = cqe->user_data;
      if (tag == kWakeTag) {
        arm_wakeup();
      } else {
        --in_flight_;
        settle(static_cast<int>(tag - 1), cqe->res);
      }
    }
    ::io_uring_cq_advance(&ring_, seen);
  }
}

void UringLane::run(Control& control) {
  // No fixed buffers yet answers ENXIO: nothing to undo.
  ::io_uring_unregister_buffers(&ring_);
  fixed_.clear();
  int ret = 0;
  const std::vector<iovec>& buffers = *control.buffers;
  if (!buffers.empty()) {
    ret =
        ::io_uring_register_buffers(&ring_, buffers.data(), static_cast<unsigned>(buffers.size()));
    if (ret == 0) {
      for (std::size_t i = 0; i < buffers.size(); ++i) {
        const auto* begin = static_cast<const std::byte*>(buffers[i].iov_base);
        fixed_.push_back({begin, begin + buffers[i].iov_len, static_cast<int>(i)});
      }
      std::sort(fixed_.begin(), fixed_.end(),
                [](const Fixed& a, const Fixed& b) { return a.begin < b.begin; });
    }
  }
  control.result.set_value(ret);
}

int UringLane::fixed_index(const std::byte* buffer, std::size_t bytes) const {
  if (fixed_.empty()) return -1;
  // The last buffer starting at or before `buffer`.
  auto it = std::upper_bound(fixed_.begin(), fixed_.end(), buffer,
                             [](const std::byte* p, const Fixed& f) { return p < f.begin; });
  if (it == fixed_.begin()) return -1;
  --it;
  return buffer + bytes <= it->end ? it->index : -1;
}

io_uring_sqe* UringLane::next_sqe() {
  io_uring_sqe* sqe = ::io_uring_get_sqe(&ring_);
  if (sqe == nullptr) {
    // Cannot happen with depth + 1 entries and at most depth + 1 requests prepared between
    // two submissions, but submitting frees the queue should the accounting ever be off.
    ::io_uring_submit(&ring_);
    sqe = ::io_uring_get_sqe(&ring_);
  }
  return sqe;
}

void UringLane::arm_wakeup() {
  io_uring_sqe* sqe = next_sqe();
  if (sqe == nullptr) return;  // see next_sqe(); the next completion re-arms
  ::io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof wake_value_, 0);
  ::io_uring_sqe_set_data64(sqe, kWakeTag);
}

void UringLane::issue(int slot) {
  Piece& piece = slots_[static_cast<std::size_t>(slot)];
  if (piece.request->failed()) {
    release(slot);  // not issued: the request has failed whatever this piece does
    return;
  }
  if (const int err = owner_.injected_error(piece)) {
    settle(slot, -static_cast<long long>(err));
    return;
  }
  io_uring_sqe* sqe = next_sqe();
  if (sqe == nullptr) {
    settle(slot, -EAGAIN);  // retried
    return;
  }
  const Request& request = *piece.request;
  std::byte* buffer = piece.next_buffer();
  const auto bytes = static_cast<unsigned>(piece.left());  // <= block_size <= 1 GiB
  const std::uint64_t offset = piece.next_offset();
  const int index = fixed_index(buffer, bytes);
  if (request.write) {
    if (index >= 0) {
      ::io_uring_prep_write_fixed(sqe, request.fd, buffer, bytes, offset, index);
    } else {
      ::io_uring_prep_write(sqe, request.fd, buffer, bytes, offset);
    }
  } else {
    if (index >= 0) {
      ::io_uring_prep_read_fixed(sqe, request.fd, buffer, bytes, offset, index);
    } else {
      ::io_uring_prep_read(sqe, request.fd, buffer, bytes, offset);
    }
  }
  ::io_uring_sqe_set_data64(sqe, static_cast<std::uint64_t>(slot) + 1);
  ++in_flight_;
}

void UringLane::settle(int slot, long long result) {
  if (account(slots_[static_cast<std::size_t>(slot)], result) == Progress::again) {
    ready_.push_back(slot);
  } else {
    release(slot);
  }
}

void UringLane::release(int slot) {
  Piece& piece = slots_[static_cast<std::size_t>(slot)];
  piece.request->finish_piece();
  piece = Piece{};
  free_slots_.push_back(slot);
}

class UringBackend final : public AioBase {
 public:
  explicit UringBackend(const AioOptions& options)
      : AioBase(options, AioBackend::uring, options.intra_op_parallelism) {
    for (int i = 0; i < options.intra_op_parallelism; ++i) {
      lanes_.push_back(std::make_unique<UringLane>(*this, options.queue_depth));
    }
  }

  ~UringBackend() override { lanes_.clear(); }  // drains before the tickets go

  bool register_buffers(const std::vector<std::pair<void*, std::size_t>>& buffers) override;

 protected:
  void enqueue(int lane, std::vector<Piece> pieces) override {
    lanes_[static_cast<std::size_t>(lane)]->enqueue(std::move(pieces));
  }

 private:
  int register_everywhere(const std::vector<iovec>& buffers) {
    int first_error = 0;
    for (auto& lane : lanes_) {
      const int ret = lane->register_buffers(buffers);
      if (ret < 0 && first_error == 0) first_error = ret;
    }
    return first_error;
  }

  std::vector<std::unique_ptr<UringLane>> lanes_;
};

bool UringBackend::register_buffers(const std::vector<std::pair<void*, std::size_t>>& buffers) {
  std::vector<iovec> chunks;
  std::uint64_t total = 0;
  for (const auto& [address, bytes] : buffers) {
    if (address == nullptr || bytes == 0) {
      throw make_error(ErrorCategory::usage,
                       "AsyncIO::register_buffers: a buffer is null or empty ({} bytes at {})",
                       bytes, address);
    }
    // Larger buffers go in 1 GiB parts; a piece that straddles two parts is issued unfixed.
    for (std::size_t at = 0; at < bytes; at += kMaxFixedBuffer) {
      chunks.push_back(
          {static_cast<std::byte*>(address) + at, std::min(kMaxFixedBuffer, bytes - at)});
    }
    total += bytes;
  }
  if (chunks.empty()) {
    register_everywhere({});
    return false;
  }
  if (chunks.size() > kMaxFixedBuffers) {
    register_everywhere({});
    log::warn(
        "io_uring takes at most {} fixed buffers, {} were given; reads and writes go on "
        "without fixed buffers",
        kMaxFixedBuffers, chunks.size());
    return false;
  }
  const int ret = register_everywhere(chunks);
  if (ret == 0) {
    log::debug("io_uring: {} registered as {} fixed buffers on {} rings", format_bytes(total),
               chunks.size(), lanes_.size());
    return true;
  }
  register_everywhere({});  // all rings alike: fixed everywhere or nowhere
  log::warn(
      "io_uring could not register {} of buffers as fixed buffers on {} ring(s) ({}); the "
      "locked-memory limit is {} and each ring counts them again: raise it (ulimit -l, or "
      "grant CAP_IPC_LOCK). Reads and writes go on without fixed buffers, at the cost of "
      "pinning pages per request (zero-bench aio --register no measures it)",
      format_bytes(total), lanes_.size(), errno_text(-ret), memlock_limit());
  return false;
}

}  // namespace

std::unique_ptr<AsyncIO> make_uring_backend(const AioOptions& options) {
  return std::make_unique<UringBackend>(options);
}

}  // namespace zero::offload::detail
