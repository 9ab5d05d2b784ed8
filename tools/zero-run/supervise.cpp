// A rank's supervisor (see supervise.h).
#include "tools/zero-run/supervise.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string_view>

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tools/zero-run/child.h"

namespace zero::run {

namespace {

// The rank, from the launcher's environment (Open MPI's; others for completeness).
int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      return std::atoi(value);
    }
  }
  return -1;
}

// A connected socket to HOST:PORT within `seconds`, or -1 with `why` set.
int connect_to(const std::string& address, double seconds, std::string* why) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    *why = "not HOST:PORT";
    return -1;
  }
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); error != 0) {
    *why = fmt::format("cannot resolve {}: {}", host, gai_strerror(error));
    return -1;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *why = std::strerror(errno);
      close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int error = 0;
    socklen_t length = sizeof error;
    if (poll(&p, 1, static_cast<int>(std::max<long long>(left.count(), 0))) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      *why = error != 0 ? std::strerror(error) : "timed out";
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

// Ends this process by `signal`, as the rank ended, so the launcher sees what it would have
// seen without the supervisor: a rank killed by a signal, not one that exited non-zero (Open
// MPI ends the others at once for that, where a signal during its own teardown is expected).
// No core file of the supervisor's own. Returns only for a signal that does not end a process.
void die_by(int signal) {
  const rlimit none{0, 0};
  setrlimit(RLIMIT_CORE, &none);
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(signal);
}

void send_line(int fd, const std::string& line) {
  if (fd < 0) return;
  const std::string text = line + "\n";
  for (std::size_t sent = 0; sent < text.size();) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0 && errno == EINTR) continue;
    if (n <= 0) return;  // zero-run is gone: the rank's end still counts
    sent += static_cast<std::size_t>(n);
  }
}

}  // namespace

int supervise(const std::vector<std::string>& command) {
  const int rank = rank_from_environment();
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown");
  int fd = -1;
  const char* address = std::getenv("ZERO_RUN_REPORT");
  if (address != nullptr && *address != '\0') {
    std::string why;
    fd = connect_to(address, 10.0, &why);
    if (fd < 0) {
      std::cerr << fmt::format(
          "zero-run: rank {} on {} cannot reach zero-run at {} ({}); it runs unreported (set "
          "ZERO_RUN_REPORT_HOST to an address of zero-run's host the nodes can reach)\n",
          rank, host, address, why);
    }
  }
  // --as-deepspeed: what DeepSpeed's launcher gives each rank, from Open MPI's own variables.
  Environment environment;
  std::vector<std::string> argv = command;
  if (const char* as_deepspeed = std::getenv("ZERO_AS_DEEPSPEED"); as_deepspeed != nullptr) {
    const auto from = [](const char* name, const char* otherwise) {
      const char* value = std::getenv(name);
      return std::string(value != nullptr && *value != '\0' ? value : otherwise);
    };
    const std::string local_rank = from("OMPI_COMM_WORLD_LOCAL_RANK", "0");
    environment = {{"RANK", std::to_string(std::max(rank, 0))},
                   {"LOCAL_RANK", local_rank},
                   {"WORLD_SIZE", from("OMPI_COMM_WORLD_SIZE", "1")}};
    if (std::string_view(as_deepspeed) == "1") argv.push_back("--local_rank=" + local_rank);
  }
  ChildOptions options;
  options.die_with_parent = true;
  options.started = [&](pid_t pid) {
    send_line(fd, fmt::format("start {} {} {}", rank, host, pid));
  };
  int signal = 0;
  options.ended_by_signal = &signal;
  const int code = run_child(argv, environment, options);
  send_line(fd, fmt::format("exit {} {} {} {}", rank, code, signal, child_signalled() ? 1 : 0));
  if (fd >= 0) close(fd);
  if (signal != 0) die_by(signal);
  return code;
}

}  // namespace zero::run
