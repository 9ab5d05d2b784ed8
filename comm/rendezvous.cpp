// The rendezvous file: write-then-rename on rank 0, polling on the others.
#include "comm/rendezvous.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::comm {

namespace {

std::string path_of(const std::string& directory, const std::string& name) {
  return (std::filesystem::path(directory) / name).string();
}

}  // namespace

void publish_rendezvous(const std::string& directory, const std::string& name,
                        const std::vector<unsigned char>& bytes) {
  const std::string path = path_of(directory, name);
  if (std::filesystem::exists(path)) {
    throw make_error(ErrorCategory::io,
                     "rendezvous file {} already exists, left by an earlier job; give each job a "
                     "fresh ZERO_RENDEZVOUS_DIR",
                     path);
  }
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw make_error(ErrorCategory::io, "cannot create rendezvous file {}: {}", temporary,
                     std::strerror(errno));
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw make_error(ErrorCategory::io, "cannot write rendezvous file {} at offset {}: {}",
                       temporary, written, std::strerror(saved));
    }
    written += static_cast<std::size_t>(n);
  }
  // The data must be complete before the name appears.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temporary.c_str());
    throw make_error(ErrorCategory::io, "cannot flush rendezvous file {}: {}", temporary,
                     std::strerror(errno));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temporary.c_str());
    throw make_error(ErrorCategory::io, "cannot rename {} to {}: {}", temporary, path,
                     std::strerror(saved));
  }
}

std::vector<unsigned char> await_rendezvous(const std::string& directory, const std::string& name,
                                            std::size_t size, std::chrono::milliseconds timeout) {
  const std::string path = path_of(directory, name);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream file(path, std::ios::binary);
    if (file) {
      std::vector<unsigned char> bytes(size + 1);
      file.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size + 1));
      const auto got = static_cast<std::size_t>(file.gcount());
      if (got != size) {
        throw make_error(ErrorCategory::io,
                         "rendezvous file {} holds {} bytes where {} were expected; is another "
                         "job using the same ZERO_RENDEZVOUS_DIR?",
                         path, got, size);
      }
      bytes.resize(size);
      return bytes;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw make_error(ErrorCategory::timeout,
                       "rank 0 did not publish the rendezvous file {} within {:.3g} s; check that "
                       "rank 0 started and that every rank sees the same ZERO_RENDEZVOUS_DIR",
                       path, timeout.count() / 1000.0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace zero::comm
