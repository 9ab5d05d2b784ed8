// CPU emulation of CUDA (emulator/, docs/emulator.md): switching the host thread between the fibers
// that run a block's threads (block.cpp). Only the scheduler switches, on one host thread at a
// time.
//
// fiber.cpp tells AddressSanitizer about each switch (its fiber annotations, present only in an
// ASan build) and clears a reused stack's poisoning; the switch itself is the machine's:
// fiber_x86_64.cpp saves the registers the x86-64 System V ABI keeps across a call, about
// twenty instructions; fiber_ucontext.cpp, for other CPUs, uses swapcontext, which also makes a
// system call for the signal mask on every switch (about ten times slower on x86-64, where the
// emulated layer tests spent most of their time in it). CMake builds one of the two.
#pragma once

#include <cstddef>

namespace emu {

// A fiber, or the host thread (entry null; its stack is its own, looked up only for ASan),
// while another runs.
struct FiberContext {
  void* saved = nullptr;           // what the machine's switch left to resume it by
  unsigned char* stack = nullptr;  // lowest usable byte
  std::size_t bytes = 0;
  void (*entry)() = nullptr;   // where a fresh fiber starts; it must never return
  void* fake_stack = nullptr;  // AddressSanitizer's, across a switch
};

// Makes `fiber` start at `entry` on its stack (stack, bytes) when it is next switched to,
// forgetting whatever it ran there before.
void fiber_start(FiberContext& fiber, unsigned char* stack, std::size_t bytes, void (*entry)());

// Suspends `from` (the caller) and runs `to`; returns when something switches back to `from`.
void fiber_switch(FiberContext& from, FiberContext& to);

namespace machine {
// Per CPU (fiber_x86_64.cpp, fiber_ucontext.cpp): prepare `fiber` to call begin() on its stack,
// and the switch itself.
void start(FiberContext& fiber, void (*begin)());
void switch_to(FiberContext& from, FiberContext& to);
}  // namespace machine

}  // namespace emu
