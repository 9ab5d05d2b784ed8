// Requests, pieces and tickets, shared by both backends (see request.h).
#include "offload/request.h"

#include <algorithm>
#include <cerrno>
#include <limits>

#include <sys/stat.h>

#include "base/error.h"

namespace zero::offload::detail {

void Request::fail(std::string message) {
  std::lock_guard lock(mutex_);
  if (error_.empty()) error_ = std::move(message);
  failed_.store(true, std::memory_order_relaxed);
}

void Request::finish_piece() {
  // Notified under the lock: once the waiter sees remaining_ == 0 it may destroy the request,
  // so nothing may touch it after the lock is released.
  std::lock_guard lock(mutex_);
  if (--remaining_ == 0) done_.notify_all();
}

bool Request::complete() {
  std::lock_guard lock(mutex_);
  return remaining_ == 0;
}

std::string Request::wait() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return remaining_ == 0; });
  return error_;
}

namespace {

// What to do about the errors a swap file can meet; empty when there is nothing to add.
const char* advice(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "the disk is full or the quota reached: swap files are preallocated, so something "
             "else took the room; free space there";
    case EIO:
      return "the device reported an I/O error: check the disk and the kernel log (dmesg)";
    case EINVAL:
      return "the file system refused direct I/O at this offset, length or buffer alignment";
    case EFBIG:
      return "the file would grow past the file size limit (ulimit -f) or the file system's";
    case EBADF:
      return "the file was closed while the request was in flight";
    default:
      return "";
  }
}

std::string failure_message(const Piece& piece, int err) {
  const Request& r = *piece.request;
  const std::string after = piece.done ? fmt::format(" (after {} bytes)", piece.done) : "";
  const char* what = advice(err);
  return fmt::format("cannot {} {} bytes at offset {} of {}{}: {} (errno {}){}{}",
                     r.write ? "write" : "read", piece.bytes, piece.offset, r.path, after,
                     errno_text(err), err, *what ? "; " : "", what);
}

std::string end_of_file_message(const Piece& piece) {
  const Request& r = *piece.request;
  struct stat st {};
  const std::string length = ::fstat(r.fd, &st) == 0
                                 ? fmt::format("the file is only {} bytes long", st.st_size)
                                 : std::string("the file ends there");
  return fmt::format(
      "cannot read {} bytes at offset {} of {}: {} (the read got {} of the bytes); it is shorter "
      "than what is read from it: truncated, or never written that far",
      piece.bytes, piece.offset, r.path, length, piece.done);
}

}  // namespace

Progress account(Piece& piece, long long result) {
  Request& request = *piece.request;
  if (result < 0) {
    const int err = static_cast<int>(-result);
    if ((err == EINTR || err == EAGAIN) && ++piece.retries <= kMaxRetries) return Progress::again;
    request.fail(failure_message(piece, err));
    return Progress::failed;
  }
  if (result == 0) {
    if (request.write) {
      request.fail(
          fmt::format("cannot write {} bytes at offset {} of {}: the write stopped after "
                      "{} bytes and makes no progress",
                      piece.bytes, piece.offset, request.path, piece.done));
    } else {
      request.fail(end_of_file_message(piece));
    }
    return Progress::failed;
  }
  piece.done += static_cast<std::size_t>(result);
  if (piece.done >= piece.bytes) return Progress::finished;
  // Direct I/O moves whole blocks, except a read that meets the end of the file: an unaligned
  // count means the rest is not there (and could not be asked for at an unaligned offset).
  if (piece.done % request.alignment != 0) {
    if (!request.write) {
      request.fail(end_of_file_message(piece));
    } else {
      request.fail(
          fmt::format("cannot write {} bytes at offset {} of {}: the write stopped "
                      "after {} bytes, which direct I/O cannot resume from",
                      piece.bytes, piece.offset, request.path, piece.done));
    }
    return Progress::failed;
  }
  return Progress::again;
}

AioBase::AioBase(const AioOptions& options, AioBackend backend, int lanes)
    : options_(options), backend_(backend), lanes_(lanes) {}

int AioBase::injected_error(const Piece& piece) const {
  if (!options_.inject) return 0;
  return options_.inject(piece.request->write, piece.request->path, piece.next_offset(),
                         piece.left());
}

Ticket AioBase::read(const File& file, std::uint64_t offset, void* buffer, std::size_t bytes) {
  return submit(false, file, offset, static_cast<std::byte*>(buffer), bytes);
}

Ticket AioBase::write(const File& file, std::uint64_t offset, const void* buffer,
                      std::size_t bytes) {
  // The buffer is only read from; the pieces carry one pointer type for both directions.
  return submit(true, file, offset, static_cast<std::byte*>(const_cast<void*>(buffer)), bytes);
}

Ticket AioBase::submit(bool write, const File& file, std::uint64_t offset, std::byte* buffer,
                       std::size_t bytes) {
  const char* verb = write ? "write" : "read";
  const std::size_t align = file.alignment();
  const auto misaligned = [&](const char* what, std::uint64_t value) {
    return make_error(ErrorCategory::usage,
                      "{} of {} bytes at offset {} of {}: the {} ({}) is not a multiple of the "
                      "file's direct-I/O alignment, {} bytes; align offsets and lengths to "
                      "File::alignment() and allocate buffers with posix_memalign",
                      verb, bytes, offset, file.path(), what, value, align);
  };
  if (offset % align != 0) throw misaligned("offset", offset);
  if (bytes % align != 0) throw misaligned("length", bytes);
  if (reinterpret_cast<std::uintptr_t>(buffer) % align != 0) {
    throw misaligned("buffer address", reinterpret_cast<std::uintptr_t>(buffer));
  }
  if (buffer == nullptr && bytes > 0) {
    throw make_error(ErrorCategory::usage, "{} of {} bytes at offset {} of {}: the buffer is null",
                     verb, bytes, offset, file.path());
  }
  if (offset > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) - bytes) {
    throw make_error(ErrorCategory::usage,
                     "{} of {} bytes at offset {} of {}: past the largest "
                     "file offset",
                     verb, bytes, offset, file.path());
  }

  // Pieces are block_size long, rounded down to the alignment (the last one may be shorter).
  const std::size_t piece_bytes = std::max(align, options_.block_size / align * align);
  const std::size_t count = (bytes + piece_bytes - 1) / piece_bytes;
  auto request = std::make_shared<Request>(write, file, count);
  const Ticket ticket = next_ticket_.fetch_add(1);
  {
    std::lock_guard lock(mutex_);
    requests_.emplace(ticket, request);
  }
  if (count == 0) return ticket;

  // Consecutive pieces go to consecutive lanes, so that one large request keeps every ring
  // busy; the first lane rotates, so that many small requests spread too.
  const int used = static_cast<int>(std::min<std::size_t>(count, static_cast<std::size_t>(lanes_)));
  std::vector<std::vector<Piece>> per_lane(static_cast<std::size_t>(used));
  for (std::size_t i = 0; i < count; ++i) {
    Piece piece;
    piece.request = request;
    piece.offset = offset + i * piece_bytes;
    piece.buffer = buffer + i * piece_bytes;
    piece.bytes = std::min(piece_bytes, bytes - i * piece_bytes);
    per_lane[i % static_cast<std::size_t>(used)].push_back(std::move(piece));
  }
  const unsigned first = next_lane_.fetch_add(1, std::memory_order_relaxed);
  for (int k = 0; k < used; ++k) {
    enqueue(static_cast<int>((first + static_cast<unsigned>(k)) % static_cast<unsigned>(lanes_)),
            std::move(per_lane[static_cast<std::size_t>(k)]));
  }
  return ticket;
}

std::shared_ptr<Request> AioBase::find(Ticket ticket, const char* what) {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find(ticket);
  if (it == requests_.end()) {
    throw make_error(ErrorCategory::usage,
                     "{}: ticket {} is unknown or was already waited for (a ticket is waited for "
                     "once)",
                     what, ticket);
  }
  return it->second;
}

void AioBase::wait(Ticket ticket) {
  std::shared_ptr<Request> request = find(ticket, "AsyncIO::wait");
  const std::string error = request->wait();
  {
    std::lock_guard lock(mutex_);
    requests_.erase(ticket);
  }
  if (!error.empty()) throw Error(ErrorCategory::io, error);
}

bool AioBase::test(Ticket ticket) {
  return find(ticket, "AsyncIO::test")->complete();
}

}  // namespace zero::offload::detail
