// The fibers' switch on x86-64 (fiber.h): the registers the System V ABI keeps across a call
// (rbp, rbx, r12-r15, MXCSR's and the x87 control word) pushed on the running fiber's stack,
// its stack pointer saved, the other's loaded and its registers popped. No system call.
#include <cstdint>
#include <cstring>

#include "emulator/fiber.h"

// emu_fiber_switch(void** save, void* load): saves the caller's registers and stack pointer
// through `save`, and returns into the fiber whose stack pointer is `load`.
extern "C" void emu_fiber_switch(void** save, void* load);
asm(R"(
        .pushsection .text
        .p2align 4
        .globl  emu_fiber_switch
        .hidden emu_fiber_switch
        .type   emu_fiber_switch, @function
emu_fiber_switch:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        subq    $8, %rsp
        stmxcsr (%rsp)
        fnstcw  4(%rsp)
        movq    %rsp, (%rdi)
        movq    %rsi, %rsp
        ldmxcsr (%rsp)
        fldcw   4(%rsp)
        addq    $8, %rsp
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   emu_fiber_switch, .-emu_fiber_switch
        .popsection
)");

namespace emu::machine {

// A fresh fiber's stack, as emu_fiber_switch leaves one it will return from: from the top, a
// null return address for begin() (which never returns), begin() as the switch's return address,
// six zeroed registers and the caller's MXCSR and x87 control word. begin() starts with the
// stack pointer 8 past a multiple of 16, as after a call.
void start(FiberContext& fiber, void (*begin)()) {
  auto top = reinterpret_cast<std::uintptr_t>(fiber.stack + fiber.bytes) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  *--slot = 0;                                        // begin()'s return address: none
  *--slot = reinterpret_cast<std::uintptr_t>(begin);  // the switch returns here
  for (int i = 0; i < 6; ++i) *--slot = 0;            // rbp, rbx, r12-r15
  std::uint32_t mxcsr = 0;
  std::uint16_t control = 0;
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(control));
  *--slot = 0;
  std::memcpy(slot, &mxcsr, sizeof mxcsr);
  std::memcpy(reinterpret_cast<unsigned char*>(slot) + 4, &control, sizeof control);
  fiber.saved = slot;
}

void switch_to(FiberContext& from, FiberContext& to) {
  emu_fiber_switch(&from.saved, to.saved);
}

}  // namespace emu::machine
