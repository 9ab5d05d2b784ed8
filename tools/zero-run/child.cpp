// Starts the child with posix_spawn (or fork and exec, to die with this process), forwards
// signals to it, waits (see child.h).
//
// The child stays in zero-run's process group, so it stays in the terminal's foreground (a
// direct command can read the terminal) and a terminal's Ctrl-C or hang-up reaches it
// directly; those kernel-sent signals are therefore not forwarded, or the child would get
// each one twice. Signals another process sends to zero-run alone (kill PID, a batch
// system's TERM) are forwarded. A signal zero-run inherited as ignored (nohup, a shell's
// background job) stays ignored, for the child too.
#include "tools/zero-run/child.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace zero::run {

namespace {

// SIGCONT too: a launcher ending a stopped rank continues it before its SIGTERM.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT};

static_assert(std::atomic<pid_t>::is_always_lock_free, "read from a signal handler");
std::atomic<pid_t> child_pid{0};
std::atomic<bool> forwarded_any{false};

void forward(int signal, siginfo_t* info, void*) {
  if (info != nullptr && info->si_code == SI_KERNEL) return;  // the terminal's: child has it
  const int saved_errno = errno;
  const pid_t pid = child_pid.load();
  if (pid > 0) kill(pid, signal);
  if (signal != SIGCONT) forwarded_any.store(true);
  errno = saved_errno;
}

// fork and exec, for a child that must die with this process (posix_spawn cannot set
// PR_SET_PDEATHSIG). An exec failure comes back through a close-on-exec pipe as its errno.
int fork_exec(pid_t* pid, char* const* argv, char* const* envp, const sigset_t& mask) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return errno;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return error;
  }
  if (child == 0) {
    close(pipe_fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(kCannotRun);  // the parent is already gone
    sigprocmask(SIG_SETMASK, &mask, nullptr);
    execvpe(argv[0], argv, envp);
    const int error = errno;
    (void)!write(pipe_fds[1], &error, sizeof error);
    _exit(kCannotRun);
  }
  close(pipe_fds[1]);
  int error = 0;
  ssize_t got = 0;
  do {
    got = read(pipe_fds[0], &error, sizeof error);
  } while (got < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (got == sizeof error) {
    waitpid(child, nullptr, 0);
    return error;
  }
  *pid = child;
  return 0;
}

// This process's environment with `additions` set (replacing a variable of the same name).
std::vector<std::string> environment_with(const Environment& additions) {
  std::vector<std::string> result;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view variable(*entry);
    const std::string_view name = variable.substr(0, variable.find('='));
    const bool replaced = std::any_of(additions.begin(), additions.end(),
                                      [&](const auto& addition) { return addition.first == name; });
    if (!replaced) result.emplace_back(variable);
  }
  for (const auto& [name, value] : additions) result.push_back(name + "=" + value);
  return result;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& text : strings) result.push_back(text.data());
  result.push_back(nullptr);
  return result;
}

}  // namespace

void signal_child(int signal) {
  const pid_t pid = child_pid.load();
  if (pid > 0) kill(pid, signal);
}

bool child_signalled() {
  return forwarded_any.load();
}

int run_child(const std::vector<std::string>& argv, const Environment& environment,
              const ChildOptions& options) {
  std::vector<std::string> arguments = argv;
  std::vector<std::string> variables = environment_with(environment);
  std::vector<char*> argv_pointers = pointers(arguments);
  std::vector<char*> env_pointers = pointers(variables);

  // Block the forwarded signals until the child's pid is known, so none is lost in between.
  sigset_t forwarded, original;
  sigemptyset(&forwarded);
  for (int signal : kForwarded) sigaddset(&forwarded, signal);
  sigprocmask(SIG_BLOCK, &forwarded, &original);
  for (int signal : kForwarded) {
    struct sigaction previous {};
    sigaction(signal, nullptr, &previous);
    if (previous.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_sigaction = forward;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);
  }

  // exec resets handled signals to their default; the child gets zero-run's original mask.
  pid_t pid = 0;
  int error = 0;
  if (options.die_with_parent) {
    error = fork_exec(&pid, argv_pointers.data(), env_pointers.data(), original);
  } else {
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setsigmask(&attributes, &original);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK);
    error = posix_spawnp(&pid, argv_pointers[0], nullptr, &attributes, argv_pointers.data(),
                         env_pointers.data());
    posix_spawnattr_destroy(&attributes);
  }
  if (error != 0) {
    sigprocmask(SIG_SETMASK, &original, nullptr);
    std::cerr << fmt::format("zero-run: cannot run '{}': {}\n", argv[0], std::strerror(error));
    return kCannotRun;
  }
  child_pid.store(pid);
  sigprocmask(SIG_SETMASK, &original, nullptr);
  if (options.started) options.started(pid);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::cerr << fmt::format("zero-run: waiting for '{}' failed: {}\n", argv[0],
                               std::strerror(errno));
      return 1;
    }
  }
  child_pid.store(0);
  if (options.ended_by_signal != nullptr) {
    *options.ended_by_signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace zero::run
