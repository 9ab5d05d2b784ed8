// Asynchronous file I/O for swapping model state to NVMe: io_uring rings over files opened
// O_DIRECT, or, where io_uring is unavailable (an old kernel, a seccomp policy, a container
// that forbids it), a pread/pwrite thread pool with the same interface and a warning.
//
// A request (read or write of `bytes` at `offset`) is cut into pieces of at most
// AioOptions::block_size bytes, spread over intra_op_parallelism rings (each with its own
// thread), with up to queue_depth pieces in flight per ring. Short reads and writes are
// resumed, EINTR and EAGAIN retried; any other failure makes wait() throw an io Error naming
// the path, the offset and length of the piece, and strerror. Offsets, lengths and buffer
// addresses must be multiples of the file's direct-I/O alignment (File::alignment()): a
// request that is not is a usage Error before anything is issued.
//
// The thread pool serves each lane with min(queue_depth, 64) threads, so that the same
// settings keep about as many pieces in flight. The File and the buffer of a request must
// outlive it: until wait(), or the AsyncIO's destruction, which finishes every request it
// holds first.
//
// Thread-safe: several threads may submit and wait on one AsyncIO.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zero::offload {

enum class AioBackend { automatic, uring, threads };

std::optional<AioBackend> parse_aio_backend(std::string_view text) noexcept;
std::string_view aio_backend_name(AioBackend backend) noexcept;

// Test hook: called before each piece is issued; a non-zero return is taken as that errno for
// the piece (as if the kernel had returned it), so tests can inject ENOSPC or EIO.
using FaultInjector = std::function<int(bool write, const std::string& path, std::uint64_t offset,
                                        std::size_t bytes)>;

struct AioOptions {
  std::size_t block_size = std::size_t{1} << 20;  // aio.block_size
  int queue_depth = 8;                            // aio.queue_depth
  int intra_op_parallelism = 1;                   // aio.intra_op_parallelism
  // automatic: ZERO_AIO_BACKEND (uring|threads) when set, else io_uring when a ring can be
  // set up, else the thread pool with a warning saying why.
  AioBackend backend = AioBackend::automatic;
  FaultInjector inject;
};

// A file opened for direct I/O. Closed when destroyed.
class File {
 public:
  // Opens `path` with O_DIRECT for reading and writing; `create` makes a new file (mode 0600)
  // and refuses one that exists. Never follows a link at `path` itself. Throws an io Error
  // naming the path and strerror.
  File(std::string path, bool create);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_; }
  // The direct-I/O alignment of offsets, lengths and buffer addresses: statx's
  // STATX_DIOALIGN where the kernel reports it, else 4096.
  std::size_t alignment() const noexcept { return alignment_; }
  // Reserves `bytes` on disk (fallocate, mode 0) so that later writes cannot run out of
  // room. Throws an io Error with the path, the bytes asked and the free space when it fails.
  void preallocate(std::uint64_t bytes);

 private:
  std::string path_;
  int fd_ = -1;
  std::size_t alignment_ = 4096;
};

// Identifies one submitted request until it has been waited for.
using Ticket = std::uint64_t;

class AsyncIO {
 public:
  // Throws a usage Error for options out of range (block_size not a multiple of 4096 from
  // 4096 to 1 GiB, queue_depth not 1 to 1024, intra_op_parallelism not 1 to 256), an io Error
  // when the backend asked for cannot be set up.
  static std::unique_ptr<AsyncIO> create(const AioOptions& options = {});
  virtual ~AsyncIO() = default;

  virtual AioBackend backend() const noexcept = 0;
  virtual const AioOptions& options() const noexcept = 0;

  // io_uring: registers these buffers as fixed buffers, when the locked-memory limit allows;
  // returns whether it did (the thread pool returns false). Buffers registered are used
  // without per-request page pinning. Call before submitting; replaces any earlier set.
  virtual bool register_buffers(const std::vector<std::pair<void*, std::size_t>>& buffers) = 0;

  virtual Ticket read(const File& file, std::uint64_t offset, void* buffer, std::size_t bytes) = 0;
  virtual Ticket write(const File& file, std::uint64_t offset, const void* buffer,
                       std::size_t bytes) = 0;
  // Blocks until the request is complete; throws its io Error. A ticket is waited for once.
  virtual void wait(Ticket ticket) = 0;
  // True once complete (then wait() returns at once); never blocks.
  virtual bool test(Ticket ticket) = 0;
};

}  // namespace zero::offload
