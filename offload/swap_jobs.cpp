// Owner records of swap directories, and the scan of an nvme_path for the jobs there.
#include "offload/swap_jobs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>
#include <tuple>

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"

namespace zero::offload {
namespace {

constexpr std::int64_t kUnownedGraceSeconds = 60;  // a rank directory's owner comes right after it
constexpr const char* kOwnerName = "owner.json";

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// Field 22 of /proc/<pid>/stat (the start time in clock ticks since boot), or 0 when the process
// does not exist. The second field is the command in parentheses and may hold spaces.
unsigned long long start_ticks_of(long pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!in || !std::getline(in, text)) return 0;
  const std::size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  // Fields 3.. follow the parenthesis: the 22nd field is the 20th of these.
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

bool alive(const SwapOwner& owner) {
  const unsigned long long ticks = start_ticks_of(owner.pid);
  // A pid reused by another process has another start time.
  return ticks != 0 && (owner.start_ticks == 0 || ticks == owner.start_ticks);
}

std::int64_t now_unix() {
  return static_cast<std::int64_t>(std::time(nullptr));
}

bool is_link_or_missing(const std::string& path, struct stat* st) {
  return ::lstat(path.c_str(), st) != 0 || S_ISLNK(st->st_mode);
}

std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<SwapOwner> read_owner(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(4096, '\0');
  const ssize_t got = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (got <= 0) return std::nullopt;
  text.resize(static_cast<std::size_t>(got));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  SwapOwner owner;
  owner.rank = j.value("rank", -1);
  owner.host = j.value("host", std::string());
  owner.pid = j.value("pid", 0L);
  owner.start_ticks = j.value("start_ticks", 0ULL);
  owner.created_unix = j.value("created_unix", std::int64_t{0});
  if (owner.pid <= 0 || owner.host.empty()) return std::nullopt;
  return owner;
}

}  // namespace

void write_owner_record(int rank_dir_fd, const std::string& rank_dir, int rank) {
  const long pid = ::getpid();
  const nlohmann::json j{{"rank", rank},
                         {"host", host_name()},
                         {"pid", pid},
                         {"start_ticks", start_ticks_of(pid)},
                         {"created_unix", now_unix()}};
  const std::string text = j.dump() + "\n";
  const int fd =
      ::openat(rank_dir_fd, kOwnerName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw make_error(ErrorCategory::io, "cannot create the swap owner record {}/{}: {}", rank_dir,
                     kOwnerName, errno_text(errno));
  }
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  ::close(fd);
  if (!written) {
    throw make_error(ErrorCategory::io, "cannot write the swap owner record {}/{}: {}", rank_dir,
                     kOwnerName, errno_text(err));
  }
}

bool SwapJob::stale(std::int64_t now) const {
  if (state == SwapJobState::gone) return true;
  return state == SwapJobState::unowned && now - created_unix >= kUnownedGraceSeconds;
}

std::string SwapJob::state_text() const {
  switch (state) {
    case SwapJobState::running:
      return fmt::format("running (pid {})", running_pid);
    case SwapJobState::gone: {
      std::string pids;
      for (const SwapOwner& o : owners) pids += (pids.empty() ? "" : ", ") + std::to_string(o.pid);
      return fmt::format("gone (pid {} on this host ended)", pids);
    }
    case SwapJobState::elsewhere: {
      std::string hosts;
      for (const SwapOwner& o : owners) {
        if (hosts.find(o.host) == std::string::npos) hosts += (hosts.empty() ? "" : ", ") + o.host;
      }
      return fmt::format("made on {}: cannot tell from here whether it runs", hosts);
    }
    case SwapJobState::unowned:
      break;
  }
  return "no owner record (left by an older zero, or made by hand)";
}

std::vector<SwapJob> find_swap_jobs(const std::string& nvme_path) {
  std::vector<SwapJob> jobs;
  const std::string root = nvme_path + "/zero";
  struct stat st {};
  if (is_link_or_missing(root, &st) || !S_ISDIR(st.st_mode)) return jobs;
  const std::string here = host_name();
  for (const std::string& id : entries_of(root)) {
    SwapJob job;
    job.id = id;
    job.path = root + "/" + id;
    if (is_link_or_missing(job.path, &st) || !S_ISDIR(st.st_mode)) continue;
    job.created_unix = static_cast<std::int64_t>(st.st_ctime);
    bool any_here = false, any_elsewhere = false;
    for (const std::string& rank : entries_of(job.path)) {
      const std::string rank_dir = job.path + "/" + rank;
      if (is_link_or_missing(rank_dir, &st) || !S_ISDIR(st.st_mode)) continue;
      for (const std::string& name : entries_of(rank_dir)) {
        struct stat file {};
        if (::lstat((rank_dir + "/" + name).c_str(), &file) == 0 && S_ISREG(file.st_mode)) {
          job.bytes += static_cast<std::uint64_t>(file.st_blocks) * 512;
        }
      }
      if (auto owner = read_owner(rank_dir + "/" + kOwnerName)) {
        if (owner->host == here) {
          any_here = true;
          if (job.running_pid == 0 && alive(*owner)) job.running_pid = owner->pid;
        } else {
          any_elsewhere = true;
        }
        job.owners.push_back(*owner);
      }
    }
    for (const SwapOwner& o : job.owners) {
      if (o.created_unix > 0) job.created_unix = std::min(job.created_unix, o.created_unix);
    }
    if (job.running_pid != 0) {
      job.state = SwapJobState::running;
    } else if (any_elsewhere) {
      job.state = SwapJobState::elsewhere;
    } else if (any_here) {
      job.state = SwapJobState::gone;
    } else {
      job.state = SwapJobState::unowned;
    }
    jobs.push_back(std::move(job));
  }
  std::sort(jobs.begin(), jobs.end(), [](const SwapJob& a, const SwapJob& b) {
    return std::tie(a.created_unix, a.id) < std::tie(b.created_unix, b.id);
  });
  return jobs;
}

std::string format_age(std::int64_t seconds) {
  seconds = std::max<std::int64_t>(seconds, 0);
  if (seconds < 120) return fmt::format("{} s", seconds);
  if (seconds < 7200) return fmt::format("{} min", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{:.1f} h", static_cast<double>(seconds) / 3600);
  return fmt::format("{:.1f} days", static_cast<double>(seconds) / 86400);
}

std::string describe_stale_jobs(const std::vector<SwapJob>& jobs, const std::string& nvme_path) {
  const std::int64_t now = now_unix();
  std::uint64_t total = 0;
  std::string list;
  std::size_t count = 0;
  for (const SwapJob& job : jobs) {
    if (!job.stale(now)) continue;
    total += job.bytes;
    ++count;
    list +=
        fmt::format("{}{} ({}, {} old, {})", list.empty() ? "" : "; ", job.path,
                    format_bytes(job.bytes), format_age(now - job.created_unix), job.state_text());
  }
  if (count == 0) return {};
  return fmt::format(
      "{} stale swap director{} (left by jobs that ended without removing them) "
      "hold{} {}: {}; remove them with `zero-swap clean {}`",
      count, count == 1 ? "y" : "ies", count == 1 ? "s" : "", format_bytes(total), list, nvme_path);
}

SwapRemoval remove_swap_job(const SwapJob& job) {
  if (job.state == SwapJobState::running) {
    throw make_error(ErrorCategory::usage,
                     "swap directory {} belongs to a running job (pid {}): "
                     "left alone",
                     job.path, job.running_pid);
  }
  SwapRemoval removal;
  struct stat st {};
  const auto remove_file = [&](const std::string& file) {
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    const std::uint64_t bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
    if (::unlink(file.c_str()) != 0) return false;
    removal.bytes += bytes;
    removal.files += 1;
    return true;
  };
  for (const std::string& rank : entries_of(job.path)) {
    const std::string rank_dir = job.path + "/" + rank;
    if (is_link_or_missing(rank_dir, &st) || !S_ISDIR(st.st_mode)) {
      removal.left.push_back(rank_dir);
      continue;
    }
    std::size_t kept = 0;
    for (const std::string& name : entries_of(rank_dir)) {
      if (name == kOwnerName) continue;  // last: the directory stays identifiable until it goes
      if (!remove_file(rank_dir + "/" + name)) {
        removal.left.push_back(rank_dir + "/" + name);
        ++kept;
      }
    }
    if (kept != 0) continue;
    remove_file(rank_dir + "/" + kOwnerName);
    if (::rmdir(rank_dir.c_str()) != 0) {
      removal.left.push_back(fmt::format("{} ({})", rank_dir, errno_text(errno)));
    }
  }
  if (removal.left.empty() && ::rmdir(job.path.c_str()) != 0) {
    removal.left.push_back(fmt::format("{} ({})", job.path, errno_text(errno)));
  }
  return removal;
}

}  // namespace zero::offload
