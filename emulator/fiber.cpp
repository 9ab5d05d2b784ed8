// The switch between the emulator's fibers, with AddressSanitizer told of each (fiber.h).
#include "emulator/fiber.h"

#include <cstdlib>

#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>

// Defined by the AddressSanitizer runtime, and null without it.
#pragma weak __sanitizer_start_switch_fiber
#pragma weak __sanitizer_finish_switch_fiber
#pragma weak __asan_unpoison_memory_region

namespace emu {
namespace {

bool asan_present() {
  return __sanitizer_start_switch_fiber != nullptr;
}

// The fiber being switched to; a fresh one reads its entry from it.
FiberContext* entering = nullptr;

// The first code a fresh fiber runs.
void begin() {
  if (asan_present()) __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  entering->entry();
  std::abort();  // (an entry must not return: there is nothing to return to)
}

// The calling thread's stack, for AddressSanitizer to switch back to (looked up again when
// another thread launches: pthread_getattr_np reads /proc/self/maps for the main thread).
void own_stack(FiberContext& host) {
  static pthread_t known{};  // whose stack host.stack is, once it is set
  if (host.stack != nullptr && pthread_equal(known, pthread_self())) return;
  known = pthread_self();
  pthread_attr_t attributes;
  void* lowest = nullptr;
  std::size_t bytes = 0;
  if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
    pthread_attr_getstack(&attributes, &lowest, &bytes);
    pthread_attr_destroy(&attributes);
  }
  host.stack = static_cast<unsigned char*>(lowest);
  host.bytes = bytes;
}

}  // namespace

void fiber_start(FiberContext& fiber, unsigned char* stack, std::size_t bytes, void (*entry)()) {
  fiber.stack = stack;
  fiber.bytes = bytes;
  fiber.entry = entry;
  fiber.fake_stack = nullptr;
  // The frames it leaves behind are never returned from: their redzones stay poisoned.
  if (__asan_unpoison_memory_region != nullptr) __asan_unpoison_memory_region(stack, bytes);
  machine::start(fiber, begin);
}

void fiber_switch(FiberContext& from, FiberContext& to) {
  entering = &to;
  if (!asan_present()) {
    machine::switch_to(from, to);
    return;
  }
  if (from.entry == nullptr) own_stack(from);  // the host thread, switching to a fiber
  __sanitizer_start_switch_fiber(&from.fake_stack, to.stack, to.bytes);
  machine::switch_to(from, to);
  __sanitizer_finish_switch_fiber(from.fake_stack, nullptr, nullptr);
}

}  // namespace emu
