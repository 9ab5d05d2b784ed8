// Swap space for model state: one directory per rank under the configured nvme_path,
// `<nvme_path>/zero/<job id>/rank<r>/`, holding files created 0600 and preallocated at init,
// so that a disk without room is refused before training with the space needed and the
// setting that controls it. Every region written is checksummed (xxHash, XXH3-64) and the
// checksum kept in memory; reading a region back verifies it, so a swap file truncated or
// altered behind the engine's back is never trained on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "offload/aio.h"
#include "offload/swap_cleanup.h"

namespace zero::offload {

class SwapFile;

class SwapDirectory {
 public:
  // Creates `<nvme_path>/zero/<job_id>/rank<rank>/` (nvme_path and zero/ when missing, 0700)
  // and its owner record (host, pid, start time: swap_jobs.h), and registers it for removal at
  // an abnormal end (swap_cleanup.h). Nothing below nvme_path is followed through a link: zero/
  // and the job directory must be real directories (zero/ writable by others only with the
  // sticky bit, the job directory ours), and the rank directory must be new. Throws an io
  // Error naming the path when it cannot. Rank 0 warns about stale directories of jobs that
  // ended without removing theirs.
  SwapDirectory(std::string nvme_path, std::string job_id, int rank);
  // Removes the files this directory created and the rank directory (and the job directory
  // when it is left empty), unless keep() was called.
  ~SwapDirectory();
  SwapDirectory(const SwapDirectory&) = delete;
  SwapDirectory& operator=(const SwapDirectory&) = delete;

  const std::string& path() const noexcept { return path_; }
  // Leaves the files for inspection (a failure: the state in them may be half updated): logs
  // a warning with the path and `why`, and an abnormal end names them instead of removing them.
  void keep(std::string_view why);

  // A new file `name` in this directory, preallocated to `bytes`. `setting` names the config
  // key that decides its size, for the message when the disk lacks room ("offload_optimizer
  // .nvme_path has 10.0 GiB free; the optimizer state needs 24.0 GiB: ...", with the stale
  // swap directories there and their sizes); that check comes before fallocate, which would
  // fill the disk before giving up. A file or link of that name already there is an io Error,
  // never overwritten or followed.
  std::unique_ptr<SwapFile> create(std::string_view name, std::uint64_t bytes,
                                   std::string_view setting);

 private:
  std::string nvme_path_;
  std::string path_;
  std::string job_path_;
  bool keep_ = false;
  std::vector<std::string> files_;
  std::unique_ptr<SwapCleanup> cleanup_;
};

// A preallocated swap file. Regions are written and read whole: a read must name exactly the
// offset and length of an earlier write (a usage Error otherwise), and its data is checked
// against that write's checksum when the read is waited for.
class SwapFile {
 public:
  SwapFile(std::string path, std::uint64_t bytes);
  const std::string& path() const noexcept { return file_.path(); }
  std::uint64_t size() const noexcept { return size_; }
  std::size_t alignment() const noexcept { return file_.alignment(); }
  const File& file() const noexcept { return file_; }

  // The checksum is taken from `buffer` when the write is submitted: the buffer must not
  // change until wait().
  Ticket write(AsyncIO& io, std::uint64_t offset, const void* buffer, std::size_t bytes);
  Ticket read(AsyncIO& io, std::uint64_t offset, void* buffer, std::size_t bytes);
  // Waits for a request of this file; for a read, verifies the checksum and throws an io Error
  // naming the file, offset and length when the data differs from what was written.
  void wait(AsyncIO& io, Ticket ticket);

 private:
  File file_;
  std::uint64_t size_ = 0;
  std::mutex mutex_;
  std::map<std::uint64_t, std::pair<std::size_t, std::uint64_t>>
      written_;  // offset -> (bytes, hash)
  struct Pending {
    bool read;
    std::uint64_t offset;
    std::size_t bytes;
    void* buffer;
    std::uint64_t hash;  // a write's checksum, or what a read must find
  };
  std::map<Ticket, Pending> pending_;
};

}  // namespace zero::offload
