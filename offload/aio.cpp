// AsyncIO::create: the options' ranges, and the choice of backend (the options, then
// ZERO_AIO_BACKEND, then io_uring when a ring can be set up, else the thread pool).
#include "offload/aio.h"

#include <atomic>
#include <cstdlib>

#include "base/error.h"
#include "base/log.h"
#include "offload/request.h"

namespace zero::offload {
namespace {

// The largest piece: io_uring takes 32-bit lengths and Linux moves at most 2 GiB - 4 KiB per
// call; a larger block would only be cut again.
constexpr std::size_t kMaxBlockSize = std::size_t{1} << 30;
// Rings this deep are far past what a device can use, and the thread pool runs this many
// threads per lane.
constexpr int kMaxQueueDepth = 1024;
constexpr int kMaxParallelism = 256;

void check_options(const AioOptions& options) {
  if (options.block_size == 0 || options.block_size % 4096 != 0 ||
      options.block_size > kMaxBlockSize) {
    throw make_error(ErrorCategory::usage,
                     "aio.block_size {}: give a multiple of 4096 from 4096 to {} bytes",
                     options.block_size, kMaxBlockSize);
  }
  if (options.queue_depth < 1 || options.queue_depth > kMaxQueueDepth) {
    throw make_error(ErrorCategory::usage, "aio.queue_depth {}: give 1 to {}", options.queue_depth,
                     kMaxQueueDepth);
  }
  if (options.intra_op_parallelism < 1 || options.intra_op_parallelism > kMaxParallelism) {
    throw make_error(ErrorCategory::usage, "aio.intra_op_parallelism {}: give 1 to {}",
                     options.intra_op_parallelism, kMaxParallelism);
  }
}

// The backend asked for: the options' when not automatic, else ZERO_AIO_BACKEND's when set.
AioBackend wanted_backend(const AioOptions& options) {
  if (options.backend != AioBackend::automatic) return options.backend;
  const char* env = std::getenv("ZERO_AIO_BACKEND");
  if (env == nullptr || *env == '\0') return AioBackend::automatic;
  const auto parsed = parse_aio_backend(env);
  if (!parsed) {
    throw make_error(ErrorCategory::usage, "ZERO_AIO_BACKEND={}: use uring, threads or auto", env);
  }
  return *parsed;
}

}  // namespace

std::optional<AioBackend> parse_aio_backend(std::string_view text) noexcept {
  if (text == "auto" || text == "automatic") return AioBackend::automatic;
  if (text == "uring" || text == "io_uring") return AioBackend::uring;
  if (text == "threads") return AioBackend::threads;
  return std::nullopt;
}

std::string_view aio_backend_name(AioBackend backend) noexcept {
  switch (backend) {
    case AioBackend::automatic:
      return "auto";
    case AioBackend::uring:
      return "uring";
    case AioBackend::threads:
      return "threads";
  }
  return "unknown";
}

std::unique_ptr<AsyncIO> AsyncIO::create(const AioOptions& options) {
  check_options(options);
  switch (wanted_backend(options)) {
    case AioBackend::uring:
      try {
        return detail::make_uring_backend(options);
      } catch (const Error& error) {
        if (error.category() != ErrorCategory::io) throw;
        throw make_error(ErrorCategory::io,
                         "{}; the pread/pwrite thread pool works without it "
                         "(ZERO_AIO_BACKEND=threads)",
                         error.what());
      }
    case AioBackend::threads:
      return detail::make_thread_backend(options);
    case AioBackend::automatic:
      break;
  }
  try {
    return detail::make_uring_backend(options);
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::io) throw;
    // Once per process: every rank and every AsyncIO would otherwise repeat it.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log::warn(
          "{}; using the pread/pwrite thread pool instead, which costs CPU time and some "
          "throughput (ZERO_AIO_BACKEND=threads chooses it without this warning)",
          error.what());
    }
    return detail::make_thread_backend(options);
  }
}

}  // namespace zero::offload
