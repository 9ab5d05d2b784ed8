// The ranks' reports to zero-run: the protocol, the book of what each rank said, and the TCP
// server (see rank_reports.h).
#include "tools/zero-run/rank_reports.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "tools/zero-run/host_probe.h"

namespace zero::run {

std::string rank_ranges(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::string text;
  for (std::size_t i = 0; i < sorted.size();) {
    std::size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    text += text.empty() ? "" : ", ";
    text += j == i ? std::to_string(sorted[i]) : fmt::format("{}-{}", sorted[i], sorted[j]);
    i = j + 1;
  }
  return text;
}

ReportLine parse_report(const std::string& line) {
  std::istringstream words(line);
  std::string kind;
  ReportLine r;
  if (!(words >> kind >> r.rank) || r.rank < 0) return {};
  if (kind == "start" && (words >> r.host >> r.pid)) {
    r.start = r.valid = true;
  } else if (kind == "exit" && (words >> r.code >> r.signal)) {
    int ended = 0;
    words >> ended;
    r.ended = ended != 0;
    r.valid = true;
  }
  return r;
}

RankBook::RankBook(int ranks, std::vector<std::string> hosts, std::string hostfile)
    : ranks_(static_cast<std::size_t>(std::max(ranks, 0))),
      hosts_(std::move(hosts)),
      hostfile_(std::move(hostfile)) {}

std::string RankBook::who(int rank) const {
  const Rank& r = ranks_[static_cast<std::size_t>(rank)];
  if (r.host.empty()) return fmt::format("rank {}", rank);
  return fmt::format("rank {} on {} (pid {})", rank, r.host, r.pid);
}

std::string RankBook::record(const ReportLine& line) {
  if (!line.valid || line.rank >= static_cast<int>(ranks_.size())) return {};
  Rank& r = ranks_[static_cast<std::size_t>(line.rank)];
  if (line.start) {
    r.started = true;
    r.host = line.host;
    r.pid = line.pid;
    return {};
  }
  r.started = true;  // it ran, even where it could not report its start
  r.ended = true;
  if (line.ended) torn_down_ = true;
  if (line.ended || (line.code == 0 && line.signal == 0)) return {};
  const std::string how = line.signal != 0 ? fmt::format("was killed by signal {} ({})",
                                                         line.signal, strsignal(line.signal))
                                           : fmt::format("exited with status {}", line.code);
  const bool first = !failed_;
  failed_ = true;
  return fmt::format("zero-run: {} {}{}", who(line.rank), how,
                     first ? "; mpirun ends the other ranks" : "");
}

std::string RankBook::lost(int rank) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return {};
  Rank& r = ranks_[static_cast<std::size_t>(rank)];
  if (r.ended || failed_ || torn_down_) return {};
  r.ended = true;
  failed_ = true;
  return fmt::format(
      "zero-run: {} stopped reporting before it ended: its supervisor or its node went down; "
      "mpirun ends the other ranks",
      who(rank));
}

bool RankBook::all_started() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.started; });
}

std::vector<std::string> RankBook::silent_hosts() const {
  std::vector<std::string> silent;
  for (const std::string& host : hosts_) {
    const bool any = std::any_of(ranks_.begin(), ranks_.end(),
                                 [&](const Rank& r) { return r.started && r.host == host; });
    if (!any) silent.push_back(host);
  }
  return silent;
}

std::string RankBook::start_timeout_message(double seconds, double grace, const std::string& agent,
                                            const std::vector<std::string>& unanswered) const {
  std::vector<int> missing;
  std::map<std::string, std::vector<int>> started_on;
  for (std::size_t q = 0; q < ranks_.size(); ++q) {
    if (ranks_[q].started) {
      started_on[ranks_[q].host].push_back(static_cast<int>(q));
    } else {
      missing.push_back(static_cast<int>(q));
    }
  }
  std::string text = fmt::format(
      "zero-run: {} of {} ranks did not start within {:g} s (--start-timeout, and {:g} s more "
      "for the ranks' own bound to act first): rank{} {}",
      missing.size(), ranks_.size(), seconds, grace, missing.size() == 1 ? "" : "s",
      rank_ranges(missing));
  const std::vector<std::string> silent = silent_hosts();
  if (!silent.empty()) {
    text +=
        fmt::format("; no rank started on {} (hostfile {})", fmt::join(silent, ", "), hostfile_);
  }
  if (!unanswered.empty()) {
    text += fmt::format(
        "; {} did not answer `{} HOST true`: down, unreachable, or its remote start hangs; "
        "mpirun starts no rank until its daemon runs on every node",
        fmt::join(unanswered, ", "), agent);
  } else if (!silent.empty()) {
    text += fmt::format(
        "; {} answered `{} HOST true`: see mpirun's messages for why its "
        "daemons did not start there",
        silent.size() == 1 ? "it" : "they all", agent);
  }
  for (const auto& [host, ranks] : started_on) {
    text += fmt::format("; rank{} {} started on {}", ranks.size() == 1 ? "" : "s",
                        rank_ranges(ranks), host);
  }
  return text + ". Ending the job (exit status 124)";
}

RankReports::RankReports(int ranks, std::vector<std::string> hosts, std::string hostfile,
                         std::string agent)
    : agent_(std::move(agent)), book_(ranks, std::move(hosts), std::move(hostfile)) {
  listener_ = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = listener_ >= 0;
  if (v6) {
    const int off = 0;  // IPv4 too, as mapped addresses
    setsockopt(listener_, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    if (bind(listener_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
      close(listener_);
      v6 = false;
    }
  }
  if (!v6) {
    listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (listener_ < 0 || bind(listener_, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
      throw make_error(ErrorCategory::io, "cannot open a TCP port for the ranks' reports: {}",
                       std::strerror(errno));
    }
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  if (listen(listener_, 128) != 0 ||
      getsockname(listener_, reinterpret_cast<sockaddr*>(&bound), &length) != 0 ||
      pipe2(wake_, O_CLOEXEC) != 0) {
    throw make_error(ErrorCategory::io, "cannot listen for the ranks' reports: {}",
                     std::strerror(errno));
  }
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  std::string host;
  if (const char* given = std::getenv("ZERO_RUN_REPORT_HOST"); given != nullptr && *given) {
    host = given;
  } else {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) std::strcpy(name, "localhost");
    host = name;
  }
  address_ = fmt::format("{}:{}", host, port);
}

RankReports::~RankReports() {
  stop();
  if (listener_ >= 0) close(listener_);
  for (int fd : wake_) {
    if (fd >= 0) close(fd);
  }
}

void RankReports::start(double start_timeout, double grace, std::function<void()> end_job,
                        std::function<void()> kill_job) {
  end_job_ = std::move(end_job);
  kill_job_ = std::move(kill_job);
  thread_ = std::thread([this, start_timeout, grace] { serve(start_timeout, grace); });
}

void RankReports::stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  (void)!write(wake_[1], &byte, 1);
  thread_.join();
}

void RankReports::serve(double start_timeout, double grace) {
  using Clock = std::chrono::steady_clock;
  const auto begun = Clock::now();
  const auto deadline = begun + std::chrono::duration<double>(start_timeout + grace);
  Clock::time_point ended_at{};
  constexpr auto kGrace = std::chrono::seconds(15);  // after end_job, before kill_job
  constexpr double kProbeSeconds = 10;               // for the silent hosts to answer
  struct Client {
    int fd;
    std::string buffer;
    int rank = -1;
  };
  std::vector<Client> clients;
  // Once stop() wakes the thread, what the supervisors have already sent is read to the end
  // (a rank's failure reported just before mpirun ended the job), then it returns.
  bool stopping = false;
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const Client& c : clients) fds.push_back({c.fd, POLLIN, 0});
    int wait_ms = -1;
    const auto now = Clock::now();
    if (stopping) {
      wait_ms = 0;
    } else if (!timed_out_ && !book_.all_started()) {
      wait_ms = static_cast<int>(
          std::max<long long>(
              0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) +
          1);
    } else if (timed_out_ && ended_at + kGrace > now) {
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(ended_at + kGrace - now).count() +
          1);
    }
    if (poll(fds.data(), fds.size(), wait_ms) < 0 && errno != EINTR) break;
    bool readable = false;
    for (std::size_t i = 2; i < fds.size(); ++i) readable |= fds[i].revents != 0;
    if (stopping && !readable) break;
    stopping |= fds[0].revents != 0;
    if (fds[1].revents & POLLIN) {
      const int fd = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) clients.push_back({fd, {}, -1});
    }
    for (std::size_t i = 0; i < clients.size();) {
      Client& c = clients[i];
      const short revents = fds.size() > i + 2 ? fds[i + 2].revents : 0;
      bool closed = false;
      if (revents != 0) {
        char data[512];
        const ssize_t got = read(c.fd, data, sizeof data);
        if (got <= 0) {
          closed = true;
        } else {
          c.buffer.append(data, static_cast<std::size_t>(got));
        }
      }
      for (std::size_t newline; (newline = c.buffer.find('\n')) != std::string::npos;) {
        const ReportLine line = parse_report(c.buffer.substr(0, newline));
        c.buffer.erase(0, newline + 1);
        if (line.valid) c.rank = line.rank;
        const std::string message = book_.record(line);
        if (!message.empty()) std::cerr << message << "\n" << std::flush;
      }
      if (closed) {
        const std::string message = book_.lost(c.rank);
        if (!message.empty()) std::cerr << message << "\n" << std::flush;
        close(c.fd);
        clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
        // fds no longer lines up with clients past this one: handle them next round.
        break;
      }
      ++i;
    }
    const auto after = Clock::now();
    if (stopping) continue;
    if (!timed_out_ && after >= deadline && !book_.all_started()) {
      timed_out_ = true;
      ended_at = after;
      const std::vector<std::string> unanswered =
          unanswered_hosts(agent_, book_.silent_hosts(), kProbeSeconds);
      std::cerr << book_.start_timeout_message(start_timeout + grace, grace, agent_, unanswered)
                << "\n"
                << std::flush;
      if (end_job_) end_job_();
    } else if (timed_out_ && ended_at != Clock::time_point{} && after >= ended_at + kGrace) {
      if (kill_job_) kill_job_();
      ended_at = Clock::time_point{};  // once
    }
  }
  for (const Client& c : clients) close(c.fd);
}

}  // namespace zero::run
