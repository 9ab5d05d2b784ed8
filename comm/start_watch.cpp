// The start-up watch: arrival files, the waiting thread and its message (see start_watch.h).
#include "comm/start_watch.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::comm {
namespace {

std::string arrival_file(const std::string& dir, int rank) {
  return fmt::format("{}/rank{}", dir, rank);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// "1, 3, 5" (at most 16 named, then how many more).
std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > 16) text += fmt::format(" and {} more", ranks.size() - 16);
  return text;
}

}  // namespace

StartSettings start_settings(const Environment& environment) {
  StartSettings settings;
  if (auto text = environment("ZERO_START_TIMEOUT")) {
    char* end = nullptr;
    const double value = std::strtod(text->c_str(), &end);
    if (text->empty() || end == nullptr || *end != '\0' || !(value > 0)) {
      throw make_error(ErrorCategory::usage,
                       "ZERO_START_TIMEOUT is \"{}\": give the seconds the ranks may take to "
                       "start, a number above 0 (default 300)",
                       *text);
    }
    settings.timeout_seconds = value;
  }
  if (auto dir = environment("ZERO_START_DIR")) settings.dir = *dir;
  return settings;
}

std::string start_timeout_message(const LaunchInfo& launch, const StartSettings& settings,
                                  double seconds, const std::string& what) {
  std::string missing;
  if (!settings.dir.empty()) {
    std::vector<int> absent;
    for (int r = 0; r < launch.world_size; ++r) {
      if (::access(arrival_file(settings.dir, r).c_str(), F_OK) != 0) absent.push_back(r);
    }
    missing = absent.empty()
                  ? "every rank reached start-up, so one stalled inside it (stopped, or its "
                    "network unreachable)"
                  : fmt::format(
                        "rank{} {} of {} never reached start-up (stopped, crashed, or "
                        "slow to load)",
                        absent.size() == 1 ? "" : "s", rank_list(absent), launch.world_size);
  } else {
    missing =
        "without ZERO_START_DIR (zero-run sets it on one node) the missing ranks cannot be "
        "named";
  }
  return fmt::format(
      "[zero] rank {} of {} (host {}, pid {}): the job's ranks have not all started within {:g} "
      "s (ZERO_START_TIMEOUT; {} still waits): {}; ending this rank so that the launcher ends "
      "the job",
      launch.rank, launch.world_size, host_name(), ::getpid(), seconds, what, missing);
}

StartWatch::StartWatch(LaunchInfo launch, StartSettings settings, std::string what)
    : launch_(std::move(launch)), settings_(std::move(settings)), what_(std::move(what)) {
  if (!settings_.dir.empty()) {
    const int fd = ::open(arrival_file(settings_.dir, launch_.rank).c_str(),
                          O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);  // a directory we cannot write only costs the names
  }
  thread_ = std::thread([this] { watch(); });
}

StartWatch::~StartWatch() {
  done();
}

void StartWatch::done() {
  {
    std::lock_guard lock(mutex_);
    if (done_) return;
    done_ = true;
  }
  finished_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StartWatch::watch() {
  const auto timeout = std::chrono::duration<double>(settings_.timeout_seconds);
  std::unique_lock lock(mutex_);
  if (finished_.wait_for(lock, timeout, [this] { return done_; })) return;
  const std::string message =
      start_timeout_message(launch_, settings_, settings_.timeout_seconds, what_) + "\n";
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  // The waiting call cannot be interrupted, and the job cannot start: end the process, which
  // the launcher sees as a failed rank and ends the others on.
  std::_Exit(kStartTimeoutExit);
}

}  // namespace zero::comm
