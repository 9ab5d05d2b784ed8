// The swap directories of every job on one nvme_path: who made each (its owner record, written
// by SwapDirectory), whether that process still runs, how much disk it holds and since when, so
// that directories left by a job that died (SIGKILL, a crash, a lost node) are named to the
// next run and removed by `zero-swap clean`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::offload {

// The owner record of one rank directory: `<rank dir>/owner.json`.
struct SwapOwner {
  int rank = -1;
  std::string host;
  long pid = 0;
  unsigned long long start_ticks = 0;  // the process's start time (/proc/<pid>/stat, field 22)
  std::int64_t created_unix = 0;
};

enum class SwapJobState {
  running,    // a process of it runs on this host
  gone,       // every owner ran on this host and has ended: stale
  elsewhere,  // its owners ran on other hosts (a shared disk): cannot tell from here
  unowned,    // no owner record (left by an older zero, or made by hand): stale once a minute old
};

struct SwapJob {
  std::string path;  // <nvme_path>/zero/<id>
  std::string id;
  std::uint64_t bytes = 0;        // disk its files take (allocated blocks)
  std::int64_t created_unix = 0;  // the oldest owner record, else the directory's change time
  std::vector<SwapOwner> owners;
  SwapJobState state = SwapJobState::unowned;
  long running_pid = 0;  // running: one of its live processes

  bool stale(std::int64_t now_unix) const;
  // "running (pid 1234)", "gone (pid 1234 on this host has ended)", ...
  std::string state_text() const;
};

// This process's owner record, written into `rank_dir` (created exclusively: never through a
// link). Throws an io Error naming the file when it cannot.
void write_owner_record(int rank_dir_fd, const std::string& rank_dir, int rank);

// The jobs under `<nvme_path>/zero/`, oldest first; none when the directory is missing.
// Symbolic links there are skipped, never followed.
std::vector<SwapJob> find_swap_jobs(const std::string& nvme_path);

// One line naming the stale jobs of `jobs` (path, size, age, why stale) and the command that
// removes them; empty when none is stale.
std::string describe_stale_jobs(const std::vector<SwapJob>& jobs, const std::string& nvme_path);

// What remove_swap_job removed and left.
struct SwapRemoval {
  std::uint64_t bytes = 0;        // disk freed (the removed files' allocated blocks)
  int files = 0;                  // regular files removed, owner records included
  std::vector<std::string> left;  // what zero did not make, left in place (empty: all gone)
  bool whole() const noexcept { return left.empty(); }
};

// Removes a job's rank directories, their files and the job directory, and says what it
// removed. Refuses (a usage Error) a job that is running. Entries it did not expect (not a
// regular file, a link, a directory inside a rank directory) are left and listed; a rank
// directory that keeps one also keeps its owner record, so that it stays identifiable (zero-swap
// list names it) until it goes.
SwapRemoval remove_swap_job(const SwapJob& job);

// "12 s", "5 min", "3.2 h", "4.0 days"
std::string format_age(std::int64_t seconds);

}  // namespace zero::offload
