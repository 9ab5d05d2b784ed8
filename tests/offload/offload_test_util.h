// What the offload tests share: the scratch directory (tests/scratch.h), aligned buffers with
// random contents, and which backends this machine can run.
#pragma once

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include <unistd.h>

#include "base/error.h"
#include "offload/aio.h"
#include "tests/scratch.h"

namespace zero::offload::test {

using zero::testing::ScratchDir;

// The config key the swap directory's errors name.
inline constexpr const char* kNvmePathKey = "zero_optimization.offload_optimizer.nvme_path";

// Memory aligned for direct I/O (4096 covers every alignment statx reports here).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(std::size_t bytes, std::size_t alignment = 4096) : bytes_(bytes) {
    if (::posix_memalign(&data_, alignment, bytes == 0 ? alignment : bytes) != 0) {
      throw std::bad_alloc();
    }
    std::memset(data_, 0, bytes == 0 ? alignment : bytes);
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(data_); }
  std::size_t size() const { return bytes_; }
  void fill_random(std::uint64_t seed) {
    std::mt19937_64 random(seed);
    auto* words = static_cast<std::uint64_t*>(data_);
    for (std::size_t i = 0; i < bytes_ / 8; ++i) words[i] = random();
  }
  bool same_as(const AlignedBuffer& other, std::size_t at = 0, std::size_t bytes = SIZE_MAX) const {
    if (bytes == SIZE_MAX) bytes = bytes_ - at;
    return std::memcmp(data() + at, other.data() + at, bytes) == 0;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};

// Whether an io_uring ring can be set up here (a seccomp policy or the kernel may forbid it).
inline bool uring_available() {
  static const bool available = [] {
    try {
      AioOptions options;
      options.backend = AioBackend::uring;
      AsyncIO::create(options);
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return available;
}

inline AioOptions options_for(AioBackend backend) {
  AioOptions options;
  options.backend = backend;
  return options;
}

}  // namespace zero::offload::test

// Runs the rest of the test case once per backend; io_uring is skipped, with a warning, where
// the machine cannot set up a ring.
#define ZERO_FOR_EACH_AIO_BACKEND(backend)                                                \
  const ::zero::offload::AioBackend backend =                                             \
      GENERATE(::zero::offload::AioBackend::uring, ::zero::offload::AioBackend::threads); \
  INFO("backend " << ::zero::offload::aio_backend_name(backend));                         \
  if (backend == ::zero::offload::AioBackend::uring &&                                    \
      !::zero::offload::test::uring_available()) {                                        \
    WARN("io_uring cannot be set up here: its half of this test is skipped");             \
    return;                                                                               \
  }
