// The fibers' switch on CPUs without one of their own here (fiber.h): ucontext's swapcontext.
// A fiber's context sits at the top of its own stack; the host thread's is a static (one host
// thread runs the fibers at a time).
#include <cstdint>

#include <ucontext.h>

#include "emulator/fiber.h"

namespace emu::machine {

void start(FiberContext& fiber, void (*begin)()) {
  const auto top = reinterpret_cast<std::uintptr_t>(fiber.stack + fiber.bytes);
  auto* context = reinterpret_cast<ucontext_t*>((top - sizeof(ucontext_t)) & ~std::uintptr_t{63});
  getcontext(context);
  context->uc_stack.ss_sp = fiber.stack;
  context->uc_stack.ss_size =
      static_cast<std::size_t>(reinterpret_cast<unsigned char*>(context) - fiber.stack);
  context->uc_link = nullptr;
  makecontext(context, begin, 0);
  fiber.saved = context;
}

void switch_to(FiberContext& from, FiberContext& to) {
  static ucontext_t host;
  if (from.saved == nullptr) from.saved = &host;
  swapcontext(static_cast<ucontext_t*>(from.saved), static_cast<ucontext_t*>(to.saved));
}

}  // namespace emu::machine
