// The process-wide registry of swap directories and what removes them at an abnormal end. The
// signal handler touches only this file's fixed arrays and async-signal-safe calls (unlink,
// rmdir, write, sigaction, raise); registration takes a mutex and publishes a slot through its
// atomic state.
#include "offload/swap_cleanup.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <signal.h>
#include <unistd.h>

#include "base/log.h"

namespace zero::offload {
namespace {

constexpr int kSlots = 16;
constexpr int kFiles = 6;
constexpr std::size_t kPathBytes = 4096;
constexpr std::size_t kNameBytes = 256;

enum SlotState : int { kFree = 0, kLive = 1, kKept = 2, kClaimed = 3 };

struct Slot {
  std::atomic<int> state{kFree};
  int rank = 0;
  char rank_dir[kPathBytes] = {};
  char job_dir[kPathBytes] = {};
  std::atomic<int> files{0};
  char names[kFiles][kNameBytes] = {};
};

Slot slots[kSlots];
std::mutex registry_mutex;
int registered = 0;

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};
constexpr int kSignalCount = sizeof(kSignals) / sizeof(kSignals[0]);
bool installed[kSignalCount] = {};
bool atexit_hooked = false;
std::atomic<bool> swept{false};

// ---- async-signal-safe output ----

void put(const char* text) {
  std::size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

void put_int(int value) {
  char digits[16];
  int n = 0;
  unsigned v = value < 0 ? 0u - static_cast<unsigned>(value) : static_cast<unsigned>(value);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && n < 15);
  char out[18];
  int k = 0;
  if (value < 0) out[k++] = '-';
  while (n > 0) out[k++] = digits[--n];
  out[k] = '\0';
  put(out);
}

bool copy_text(char* to, std::size_t capacity, std::string_view from) {
  if (from.size() >= capacity) return false;
  std::memcpy(to, from.data(), from.size());
  to[from.size()] = '\0';
  return true;
}

// Removes (or, kept, names) every registered directory; `why` says what ends the process.
void sweep(const char* why) {
  char path[kPathBytes + kNameBytes + 2];
  for (Slot& slot : slots) {
    const int state = slot.state.load(std::memory_order_acquire);
    if (state != kLive && state != kKept) continue;
    put("[zero] rank ");
    put_int(slot.rank);
    put(": ");
    put(why);
    if (state == kKept) {
      put(": swap files left for inspection in ");
      put(slot.rank_dir);
      put("; remove them when done (zero-swap clean)\n");
      continue;
    }
    const int files = slot.files.load(std::memory_order_acquire);
    for (int f = 0; f < files; ++f) {
      const std::size_t dir_len = std::strlen(slot.rank_dir);
      std::memcpy(path, slot.rank_dir, dir_len);
      path[dir_len] = '/';
      std::strcpy(path + dir_len + 1, slot.names[f]);
      ::unlink(path);
    }
    ::rmdir(slot.rank_dir);
    ::rmdir(slot.job_dir);  // fails, harmlessly, while other ranks' directories are in it
    put(": removed swap directory ");
    put(slot.rank_dir);
    put("\n");
    slot.state.store(kFree, std::memory_order_release);
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    default:
      return "a signal";
  }
}

void on_signal(int sig) {
  if (!swept.exchange(true)) sweep(signal_name(sig));
  // The default action, which ends the process once this handler returns (sig is blocked
  // until then).
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(sig, &action, nullptr);
  ::raise(sig);
}

void at_exit() {
  if (!swept.exchange(true)) sweep("the process exits without destroying its engine");
}

// Under registry_mutex.
void install_handlers() {
  if (!atexit_hooked) {
    std::atexit(at_exit);
    atexit_hooked = true;
  }
  swept.store(false);
  for (int i = 0; i < kSignalCount; ++i) {
    if (installed[i]) continue;
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) != 0) continue;
    // A handler or SIG_IGN of the process's own stays: it decides how the process ends.
    if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    for (int s : kSignals) sigaddset(&action.sa_mask, s);
    action.sa_flags = SA_RESTART;
    installed[i] = ::sigaction(kSignals[i], &action, nullptr) == 0;
  }
}

// Under registry_mutex: the default back where ours still stands.
void uninstall_handlers() {
  for (int i = 0; i < kSignalCount; ++i) {
    if (!installed[i]) continue;
    struct sigaction current {};
    if (::sigaction(kSignals[i], nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) == 0 &&
        current.sa_handler == on_signal) {
      struct sigaction action {};
      action.sa_handler = SIG_DFL;
      sigemptyset(&action.sa_mask);
      ::sigaction(kSignals[i], &action, nullptr);
    }
    installed[i] = false;
  }
}

}  // namespace

SwapCleanup::SwapCleanup(const std::string& rank_dir, const std::string& job_dir, int rank) {
  std::lock_guard lock(registry_mutex);
  for (int s = 0; s < kSlots; ++s) {
    int expected = kFree;
    if (!slots[s].state.compare_exchange_strong(expected, kClaimed)) continue;
    Slot& slot = slots[s];
    slot.rank = rank;
    slot.files.store(0);
    if (!copy_text(slot.rank_dir, kPathBytes, rank_dir) ||
        !copy_text(slot.job_dir, kPathBytes, job_dir)) {
      slot.state.store(kFree);
      log::warn("swap directory {}: its path is too long to be removed at an abnormal end",
                rank_dir);
      return;
    }
    slot_ = s;
    ++registered;
    install_handlers();
    slot.state.store(kLive, std::memory_order_release);
    return;
  }
  log::warn(
      "swap directory {}: more than {} swap directories in one process; this one is not "
      "removed at an abnormal end",
      rank_dir, kSlots);
}

SwapCleanup::~SwapCleanup() {
  if (slot_ < 0) return;
  std::lock_guard lock(registry_mutex);
  slots[slot_].state.store(kFree, std::memory_order_release);
  if (--registered == 0) uninstall_handlers();
}

void SwapCleanup::add_file(std::string_view name) {
  if (slot_ < 0) return;
  std::lock_guard lock(registry_mutex);
  Slot& slot = slots[slot_];
  const int n = slot.files.load();
  if (n >= kFiles || !copy_text(slot.names[n], kNameBytes, name)) {
    log::warn("swap file {}/{} is not removed at an abnormal end (too many or too long)",
              slot.rank_dir, name);
    return;
  }
  slot.files.store(n + 1, std::memory_order_release);
}

void SwapCleanup::keep() {
  if (slot_ < 0) return;
  int expected = kLive;
  slots[slot_].state.compare_exchange_strong(expected, kKept);
}

void remove_swap_directories_now(std::string_view why) noexcept {
  std::lock_guard lock(registry_mutex);
  char text[512];
  copy_text(text, sizeof(text), why.substr(0, sizeof(text) - 1));
  sweep(text);
}

}  // namespace zero::offload
