// What both AsyncIO backends share: a request cut into pieces, the rule that turns one attempt
// at a piece into "finished", "go on" or "failed" (short transfers resumed, EINTR and EAGAIN
// retried, everything else an error naming path, offset, length and strerror), and the base
// class that validates requests, cuts them and keeps the tickets. Internal to offload/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "offload/aio.h"

namespace zero::offload::detail {

// One submitted read or write; its pieces share it. Complete once every piece has finished,
// successfully or not.
class Request {
 public:
  Request(bool write, const File& file, std::size_t pieces)
      : write(write),
        fd(file.fd()),
        path(file.path()),
        alignment(file.alignment()),
        remaining_(pieces) {}

  const bool write;
  const int fd;
  const std::string path;  // a copy: the message of a failure must not depend on the File
  const std::size_t alignment;

  // Set by the first piece that fails; the request's other pieces are then not issued, since
  // the request has failed whatever they do.
  bool failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  // Records the failure; the first one wins.
  void fail(std::string message);
  // One piece has finished (after fail() when it failed). The last one wakes the waiters.
  void finish_piece();

  bool complete();
  // Blocks until complete; returns the first failure's message, empty when none.
  std::string wait();

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::condition_variable done_;
  std::size_t remaining_;
  std::string error_;
};

// A part of a request of at most AioOptions::block_size bytes, issued as one read or write.
struct Piece {
  std::shared_ptr<Request> request;
  std::uint64_t offset = 0;  // in the file, of the piece's first byte
  std::byte* buffer = nullptr;
  std::size_t bytes = 0;
  std::size_t done = 0;       // bytes moved so far; a short transfer resumes from here
  std::uint32_t retries = 0;  // EINTR/EAGAIN answers so far

  std::uint64_t next_offset() const noexcept { return offset + done; }
  std::byte* next_buffer() const noexcept { return buffer + done; }
  std::size_t left() const noexcept { return bytes - done; }
};

enum class Progress { finished, again, failed };

// EINTR/EAGAIN answers a piece may get before it is failed: retrying forever would turn a
// device that never recovers into a hang.
inline constexpr std::uint32_t kMaxRetries = 10000;

// Takes the result of one attempt at `piece`: bytes moved (>= 0) or -errno. Returns finished
// when the piece is complete, again when it must be issued again (the rest of a short transfer,
// or a retry), failed after recording the failure on the request (which names the path, the
// piece's offset and length, and strerror or the end of the file).
Progress account(Piece& piece, long long result);

// The base of both backends: validates requests, cuts them into pieces, spreads the pieces
// over the lanes (rings, or groups of threads) and keeps the tickets.
class AioBase : public AsyncIO {
 public:
  AioBase(const AioOptions& options, AioBackend backend, int lanes);

  AioBackend backend() const noexcept override { return backend_; }
  const AioOptions& options() const noexcept override { return options_; }

  Ticket read(const File& file, std::uint64_t offset, void* buffer, std::size_t bytes) override;
  Ticket write(const File& file, std::uint64_t offset, const void* buffer,
               std::size_t bytes) override;
  void wait(Ticket ticket) override;
  bool test(Ticket ticket) override;

  // Asks the injector of the options about the next attempt at `piece`: 0, or the errno to
  // take as the attempt's result. Called by the lanes.
  int injected_error(const Piece& piece) const;

 protected:
  // Hands `pieces` to lane `lane` (0 <= lane < lanes); never blocks on I/O.
  virtual void enqueue(int lane, std::vector<Piece> pieces) = 0;

 private:
  Ticket submit(bool write, const File& file, std::uint64_t offset, std::byte* buffer,
                std::size_t bytes);
  std::shared_ptr<Request> find(Ticket ticket, const char* what);

  const AioOptions options_;
  const AioBackend backend_;
  const int lanes_;
  std::atomic<Ticket> next_ticket_{1};
  std::atomic<unsigned> next_lane_{0};
  std::mutex mutex_;
  std::unordered_map<Ticket, std::shared_ptr<Request>> requests_;
};

// The backends (uring_backend.cpp, thread_backend.cpp). The io_uring one throws an io Error
// saying why when no ring can be set up.
std::unique_ptr<AsyncIO> make_uring_backend(const AioOptions& options);
std::unique_ptr<AsyncIO> make_thread_backend(const AioOptions& options);

}  // namespace zero::offload::detail
