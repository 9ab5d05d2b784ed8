// GuardedMemory (guarded_memory.h) and the fault handler that explains a guarded window's
// SIGSEGV. The handler reads a fixed table of windows with atomics only (async-signal-safe).
#include "device/cpu/guarded_memory.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::cpu {
namespace {

// The windows the fault handler knows: begin and end addresses, 0 when free.
constexpr std::size_t kTableSize = 256;
std::array<std::atomic<std::uintptr_t>, kTableSize> window_begin{};
std::array<std::atomic<std::uintptr_t>, kTableSize> window_end{};
struct sigaction previous_action {};
std::once_flag handler_installed;

void write_text(const char* text) {
  ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

void write_hex(std::uintptr_t value) {
  char digits[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; ++i) {
    const unsigned nibble = static_cast<unsigned>(value >> (60 - 4 * i)) & 0xfu;
    digits[2 + i] = static_cast<char>(nibble < 10 ? '0' + nibble : 'a' + nibble - 10);
  }
  digits[18] = '\0';
  write_text(digits);
}

void on_fault(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (std::size_t i = 0; i < kTableSize; ++i) {
    const std::uintptr_t begin = window_begin[i].load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= window_end[i].load()) continue;
    write_text("zero: host code touched device memory at ");
    write_hex(address);
    write_text(" (");
    write_hex(address - begin);
    write_text(" bytes into a device reservation at ");
    write_hex(begin);
    write_text(
        ") while the engine ran. The guarded CPU device (ZERO_CPU_DEVICE=guarded) "
        "faults where a GPU would: reach device memory through Device::copy or work "
        "on a stream. The host stack:\n");
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    break;
  }
  // The default action (or the handler that was there) takes the fault from here.
  if (previous_action.sa_flags & SA_SIGINFO && previous_action.sa_sigaction != nullptr) {
    previous_action.sa_sigaction(signal, info, context);
    return;
  }
  if (previous_action.sa_handler != SIG_DFL && previous_action.sa_handler != SIG_IGN &&
      previous_action.sa_handler != nullptr) {
    previous_action.sa_handler(signal);
    return;
  }
  ::signal(signal, SIG_DFL);  // returning re-runs the access, which now ends the process
}

void install_handler() {
  std::call_once(handler_installed, [] {
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_action);
  });
}

void publish(std::uintptr_t begin, std::uintptr_t end) {
  for (std::size_t i = 0; i < kTableSize; ++i) {
    std::uintptr_t free_slot = 0;
    if (window_begin[i].compare_exchange_strong(free_slot, begin)) {
      window_end[i].store(end, std::memory_order_release);
      return;
    }
  }  // a full table only loses the message, not the fault
}

void withdraw(std::uintptr_t begin) {
  for (std::size_t i = 0; i < kTableSize; ++i) {
    std::uintptr_t expected = begin;
    if (window_begin[i].compare_exchange_strong(expected, 0)) return;
  }
}

}  // namespace

GuardedMemory::~GuardedMemory() {
  for (const Region& region : regions_) {
    withdraw(reinterpret_cast<std::uintptr_t>(region.window));
    munmap(region.window, region.bytes);
    munmap(region.backing, region.bytes);
  }
}

void* GuardedMemory::reserve(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  install_handler();
  const int fd = memfd_create("zero-guarded-device", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    if (fd >= 0) close(fd);
    throw make_error(ErrorCategory::out_of_memory,
                     "the guarded CPU device could not make {} bytes of device memory: {}", bytes,
                     std::strerror(error));
  }
  void* window = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* backing = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);  // the mappings keep the memory
  if (window == MAP_FAILED || backing == MAP_FAILED) {
    if (window != MAP_FAILED) munmap(window, bytes);
    if (backing != MAP_FAILED) munmap(backing, bytes);
    throw make_error(ErrorCategory::out_of_memory,
                     "the guarded CPU device could not map {} bytes of device memory: {}", bytes,
                     std::strerror(error));
  }
  Region region{static_cast<char*>(window), static_cast<char*>(backing), bytes};
  std::lock_guard lock(mutex_);
  if (depth_ > 0) protect(region, true);
  regions_.push_back(region);
  publish(reinterpret_cast<std::uintptr_t>(window),
          reinterpret_cast<std::uintptr_t>(window) + bytes);
  return window;
}

void GuardedMemory::unreserve(void* window, std::size_t bytes) noexcept {
  if (window == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = std::find_if(regions_.begin(), regions_.end(),
                         [&](const Region& r) { return r.window == window; });
  if (it == regions_.end()) return;
  withdraw(reinterpret_cast<std::uintptr_t>(window));
  munmap(it->window, bytes);
  munmap(it->backing, bytes);
  regions_.erase(it);
}

void* GuardedMemory::translate(const void* pointer) const noexcept {
  const char* p = static_cast<const char*>(pointer);
  std::lock_guard lock(mutex_);
  for (const Region& r : regions_) {
    if (p >= r.window && p < r.window + r.bytes) return r.backing + (p - r.window);
  }
  return const_cast<char*>(p);
}

void GuardedMemory::guard(bool guarded) noexcept {
  std::lock_guard lock(mutex_);
  const int before = depth_;
  depth_ = std::max(0, depth_ + (guarded ? 1 : -1));
  if ((before == 0) == (depth_ == 0)) return;  // no change between guarded and open
  for (const Region& r : regions_) protect(r, depth_ > 0);
}

void GuardedMemory::protect(const Region& region, bool guarded) const noexcept {
  mprotect(region.window, region.bytes, guarded ? PROT_NONE : PROT_READ | PROT_WRITE);
}

}  // namespace zero::cpu
