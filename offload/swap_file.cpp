// SwapFile: whole-region writes and reads with an XXH3-64 checksum per region kept in memory,
// so that data that changed on disk since it was written is an error, never trained on.
#include <xxhash.h>

#include "base/error.h"
#include "offload/swap.h"

namespace zero::offload {
namespace {

std::uint64_t checksum(const void* data, std::size_t bytes) {
  return XXH3_64bits(data, bytes);
}

}  // namespace

SwapFile::SwapFile(std::string path, std::uint64_t bytes)
    : file_(std::move(path), /*create=*/true), size_(bytes) {
  file_.preallocate(bytes);
}

namespace {

void check_region(const char* verb, const std::string& path, std::uint64_t size,
                  std::uint64_t offset, std::size_t bytes) {
  if (bytes == 0 || offset > size || bytes > size - offset) {
    throw make_error(ErrorCategory::usage,
                     "swap file {}: cannot {} {} bytes at offset {}: the file holds {} bytes (a "
                     "region must be non-empty and inside it)",
                     path, verb, bytes, offset, size);
  }
}

}  // namespace

Ticket SwapFile::write(AsyncIO& io, std::uint64_t offset, const void* buffer, std::size_t bytes) {
  check_region("write", path(), size_, offset, bytes);
  const std::uint64_t hash = checksum(buffer, bytes);
  const Ticket ticket = io.write(file_, offset, buffer, bytes);
  std::lock_guard lock(mutex_);
  // The regions this write overlaps no longer hold what their checksums say; its own region
  // counts as written once the write has completed (wait()).
  auto it = written_.lower_bound(offset);
  if (it != written_.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.first > offset) it = before;
  }
  while (it != written_.end() && it->first < offset + bytes) it = written_.erase(it);
  pending_[ticket] = Pending{false, offset, bytes, nullptr, hash};
  return ticket;
}

Ticket SwapFile::read(AsyncIO& io, std::uint64_t offset, void* buffer, std::size_t bytes) {
  check_region("read", path(), size_, offset, bytes);
  std::uint64_t expected;
  {
    std::lock_guard lock(mutex_);
    const auto it = written_.find(offset);
    if (it == written_.end() || it->second.first != bytes) {
      throw make_error(ErrorCategory::usage,
                       "swap file {}: cannot read {} bytes at offset {}: no completed write of "
                       "exactly that region{} (regions are read back whole, as written, after "
                       "their write was waited for)",
                       path(), bytes, offset,
                       it == written_.end()
                           ? std::string()
                           : fmt::format("; {} bytes were written there", it->second.first));
    }
    expected = it->second.second;
  }
  const Ticket ticket = io.read(file_, offset, buffer, bytes);
  std::lock_guard lock(mutex_);
  pending_[ticket] = Pending{true, offset, bytes, buffer, expected};
  return ticket;
}

void SwapFile::wait(AsyncIO& io, Ticket ticket) {
  Pending request;
  {
    std::lock_guard lock(mutex_);
    const auto it = pending_.find(ticket);
    if (it == pending_.end()) {
      throw make_error(ErrorCategory::usage,
                       "swap file {}: ticket {} is not a pending request of this file (waited for "
                       "already, or submitted elsewhere)",
                       path(), ticket);
    }
    request = it->second;
    pending_.erase(it);
  }
  io.wait(ticket);  // an io Error here names the file, offset and length already
  if (!request.read) {
    std::lock_guard lock(mutex_);
    written_[request.offset] = {request.bytes, request.hash};
    return;
  }
  const std::uint64_t found = checksum(request.buffer, request.bytes);
  if (found != request.hash) {
    throw make_error(ErrorCategory::io,
                     "swap file {}: the {} bytes read at offset {} differ from what was written "
                     "there (XXH3 {:016x}, written {:016x}): the file was changed or truncated "
                     "behind zero's back, or the disk returned bad data. The data is not used; "
                     "check the disk (dmesg) and that no other process writes to this directory",
                     path(), request.bytes, request.offset, found, request.hash);
  }
}

}  // namespace zero::offload
