// CPU emulation of CUDA (emulator/, docs/emulator.md): the scheduler of block.h. One launch at a
// time, from one host thread at a time (nothing here is locked): `run` holds it. Each thread of a
// block is a fiber on a stack of its own (kept between launches, with a guard page below it); a
// fiber runs until it waits (block barrier, warp collective) or returns, then hands the host thread
// straight to the next ready fiber: threads released by a __syncthreads queue in arrival order,
// lanes released by a warp collective go first (their warp runs ahead). The last thread to return
// gives the host thread back to run_grid, which starts the next block on the same fibers: each
// loops over "run the kernel, return" (fiber_main), so a block costs no new contexts.
#include "emulator/block.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emulator/fiber.h"

namespace emu {
namespace {

constexpr std::size_t kStackBytes = std::size_t{128} << 10;  // per thread; kernels need little
constexpr unsigned kFullMask = 0xffffffffu;

enum class State { ready, at_barrier, at_collective, returned };

// A cp.async the thread issued that has not landed: the bytes it reads are taken when it lands.
struct PendingCopy {
  unsigned char* to;
  const unsigned char* from;
  unsigned bytes, read_bytes;
  unsigned group;  // the thread's groups committed before it: it belongs to the next one
};

struct Fiber {
  FiberContext context;
  uint3 index;  // threadIdx
  unsigned rank;
  State state;
  const char* what;  // what it waits in, for a deadlock report
  std::source_location site;
  std::vector<PendingCopy> copies;  // in issue order
  unsigned committed;               // groups of copies committed
};

struct Warp {
  WarpWords words;
  unsigned lanes;     // 32, fewer in the last warp of a block that is not whole warps
  unsigned arrived;   // lanes waiting in the current collective
  unsigned returned;  // lanes that returned from the kernel
  const char* what;   // the current collective and where its first lane called it
  std::source_location site;
  unsigned waiting[32];
};

struct Run {
  const Kernel* kernel = nullptr;
  unsigned threads = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<uint4> shared;  // dynamic shared memory, 16-byte aligned
  // __syncthreads: threads waiting and the call they wait at.
  unsigned arrived = 0;
  std::source_location barrier_site;
  std::vector<unsigned> at_barrier;
  unsigned returned = 0;
  // Ready fibers, a ring: each fiber is in it at most once.
  std::vector<unsigned> ready;
  std::size_t head = 0, count = 0;
  Fiber* current = nullptr;  // null outside a kernel
  FiberContext host;
};

Run run;
std::vector<unsigned char*> stacks;  // the lowest usable byte of each; a guard page below
std::size_t page_bytes = 0;

unsigned char* stack_for(unsigned rank) {
  while (stacks.size() <= rank) {
    page_bytes = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    void* base = mmap(nullptr, kStackBytes + page_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED || mprotect(base, page_bytes, PROT_NONE) != 0) {
      fail("no memory for the stacks of a block's threads", {});
    }
    stacks.push_back(static_cast<unsigned char*>(base) + page_bytes);
  }
  return stacks[rank];
}

bool same_site(const std::source_location& a, const std::source_location& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         std::strcmp(a.file_name(), b.file_name()) == 0;
}

std::string site_text(const std::source_location& s) {
  return std::string(s.file_name()) + ":" + std::to_string(s.line());
}

void push_ready(unsigned rank) {
  run.fibers[rank].state = State::ready;
  run.ready[(run.head + run.count) % run.threads] = rank;
  ++run.count;
}

// Next to run, before every other ready fiber.
void push_ready_first(unsigned rank) {
  run.fibers[rank].state = State::ready;
  run.head = (run.head + run.threads - 1) % run.threads;
  run.ready[run.head] = rank;
  ++run.count;
}

// Hands the host thread from the current fiber to `next`; returns when someone hands it back.
void switch_to(Fiber& next) {
  Fiber& me = *run.current;
  run.current = &next;
  threadIdx = next.index;
  fiber_switch(me.context, next.context);
}

[[noreturn]] void report_deadlock() {
  std::map<std::string, unsigned> waits;  // "what at file:line" -> threads
  for (unsigned r = 0; r < run.threads; ++r) {
    const Fiber& f = run.fibers[r];
    if (f.state == State::at_barrier || f.state == State::at_collective) {
      ++waits[std::string(f.what) + " at " + site_text(f.site)];
    }
  }
  std::string text = "deadlock: every thread of the block that has not returned waits:";
  for (const auto& [wait, threads] : waits) {
    text += "\n    " + std::to_string(threads) + " thread(s) in " + wait;
  }
  fail(text.c_str(), {});
}

Fiber& pop_ready() {
  const unsigned rank = run.ready[run.head];
  run.head = (run.head + 1) % run.threads;
  --run.count;
  return run.fibers[rank];
}

// The current fiber waits: the next ready one runs.
void switch_away() {
  if (run.count == 0) report_deadlock();
  switch_to(pop_ready());
}

Fiber& current(const char* what, std::source_location where) {
  if (run.current == nullptr) {
    fail((std::string(what) + " outside a kernel").c_str(), where);
  }
  return *run.current;
}

// The current thread has returned from the kernel.
void thread_returns() {
  Fiber& me = *run.current;
  Warp& warp = run.warps[me.rank / 32];
  if (run.arrived > 0) {
    fail(("returned while " + std::to_string(run.arrived) + " thread(s) of the block wait at " +
          "__syncthreads (" + site_text(run.barrier_site) + "): every thread must reach it")
             .c_str(),
         {});
  }
  if (warp.arrived > 0) {
    fail(("returned while " + std::to_string(warp.arrived) + " lane(s) of its warp wait in " +
          warp.what + " (" + site_text(warp.site) + ") with a full mask")
             .c_str(),
         {});
  }
  if (!me.copies.empty()) {
    fail((std::to_string(me.copies.size()) + " cp.async copies of the thread not waited for " +
          "when it returned (cp.async.wait_group)")
             .c_str(),
         {});
  }
  me.state = State::returned;
  ++run.returned;
  ++warp.returned;
  if (run.returned == run.threads) {  // the block is done: back to run_grid
    run.current = nullptr;
    fiber_switch(me.context, run.host);
    return;
  }
  switch_away();
}

void fiber_main() {
  for (;;) {
    run.kernel->body(run.kernel->closure);
    thread_returns();  // returns when the next block starts
  }
}

// A fresh fiber for thread `rank` that starts in fiber_main.
void make_fiber(unsigned rank, dim3 block) {
  Fiber& f = run.fibers[rank];
  f.rank = rank;
  f.index = {rank % block.x, rank / block.x % block.y, rank / (block.x * block.y)};
  fiber_start(f.context, stack_for(rank), kStackBytes, fiber_main);
}

// ---- Faults: name the kernel, block and thread, then let the previous handler have it ----

struct sigaction previous_segv, previous_bus;
stack_t own_alt_stack;
std::vector<unsigned char> alt_stack_memory;

void on_fault(int signal, siginfo_t* info, void*) {
  char text[512];
  const Fiber* f = run.current;
  int n = 0;
  if (f != nullptr) {
    const unsigned char* lowest = stacks[f->rank];
    const auto* address = static_cast<const unsigned char*>(info->si_addr);
    const bool overflow = address < lowest && address + page_bytes >= lowest;
    n = std::snprintf(text, sizeof text,
                      "emulated CUDA: %s at %p in kernel %s launched at %s:%u, block (%u,%u,%u), "
                      "thread (%u,%u,%u)%s\n",
                      signal == SIGSEGV ? "SIGSEGV" : "SIGBUS", info->si_addr, run.kernel->name,
                      run.kernel->where.file_name(), run.kernel->where.line(), blockIdx.x,
                      blockIdx.y, blockIdx.z, f->index.x, f->index.y, f->index.z,
                      overflow ? ": the thread's stack overflowed"
                               : ": outside every device allocation (past its end?)");
  }
  if (n > 0) {
    const ssize_t written = write(STDERR_FILENO, text, static_cast<std::size_t>(n));
    (void)written;
  }
  // Faulting again with the previous handler in place hands it the fault.
  sigaction(signal, signal == SIGSEGV ? &previous_segv : &previous_bus, nullptr);
}

// While a grid runs: our handler for faults, on an alternate stack if the thread has none (a
// fiber's overflowed stack cannot run it).
class FaultReport {
 public:
  FaultReport() {
    stack_t current_alt{};
    sigaltstack(nullptr, &current_alt);
    if (current_alt.ss_flags & SS_DISABLE) {
      alt_stack_memory.resize(std::size_t{64} << 10);
      own_alt_stack.ss_sp = alt_stack_memory.data();
      own_alt_stack.ss_size = alt_stack_memory.size();
      own_alt_stack.ss_flags = 0;
      own_alt_stack_set_ = sigaltstack(&own_alt_stack, nullptr) == 0;
    }
    struct sigaction action {};
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &previous_segv);
    sigaction(SIGBUS, &action, &previous_bus);
  }
  ~FaultReport() {
    sigaction(SIGSEGV, &previous_segv, nullptr);
    sigaction(SIGBUS, &previous_bus, nullptr);
    if (own_alt_stack_set_) {
      stack_t off{};
      off.ss_flags = SS_DISABLE;
      sigaltstack(&off, nullptr);
    }
  }
  FaultReport(const FaultReport&) = delete;
  FaultReport& operator=(const FaultReport&) = delete;

 private:
  bool own_alt_stack_set_ = false;
};

}  // namespace

void fail(const char* message, std::source_location where) {
  std::fprintf(stderr, "emulated CUDA: %s\n", message);
  if (run.current != nullptr) {
    const Fiber& f = *run.current;
    std::fprintf(stderr, "  in kernel %s launched at %s:%u, block (%u,%u,%u), thread (%u,%u,%u)\n",
                 run.kernel->name, run.kernel->where.file_name(), run.kernel->where.line(),
                 blockIdx.x, blockIdx.y, blockIdx.z, f.index.x, f.index.y, f.index.z);
  }
  if (where.line() != 0) std::fprintf(stderr, "  at %s:%u\n", where.file_name(), where.line());
  std::fflush(stderr);
  std::abort();
}

void run_grid(const Kernel& kernel, dim3 grid, dim3 block, std::size_t shared_bytes) {
  if (run.current != nullptr) fail("a kernel launched from a kernel", kernel.where);
  const unsigned threads = block.x * block.y * block.z;
  run.kernel = &kernel;
  run.threads = threads;
  run.fibers.resize(threads);
  run.warps.resize((threads + 31) / 32);
  run.ready.resize(threads);
  run.at_barrier.reserve(threads);
  run.shared.resize((shared_bytes + 15) / 16);
  for (unsigned w = 0; w < run.warps.size(); ++w) {
    run.warps[w].lanes = std::min(32u, threads - 32 * w);
  }
  for (unsigned r = 0; r < threads; ++r) make_fiber(r, block);
  blockDim = block;
  gridDim = grid;
  const FaultReport fault_report;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        if (!run.shared.empty()) {  // (memset of an empty vector's null data is undefined)
          std::memset(run.shared.data(), 0xff, run.shared.size() * sizeof(uint4));
        }
        run.arrived = 0;
        run.at_barrier.clear();
        run.returned = 0;
        for (Fiber& f : run.fibers) f.committed = 0;  // (copies: none left, thread_returns checked)
        for (Warp& w : run.warps) w.arrived = w.returned = 0;
        run.head = run.count = 0;
        for (unsigned r = 0; r < threads; ++r) push_ready(r);
        Fiber& first = pop_ready();
        run.current = &first;
        threadIdx = first.index;
        fiber_switch(run.host, first.context);  // back when the block's last thread returns
      }
    }
  }
  run.current = nullptr;
  run.kernel = nullptr;
}

unsigned char* dynamic_shared() {
  return reinterpret_cast<unsigned char*>(run.shared.data());
}

void sync_block(std::source_location where) {
  Fiber& me = current("__syncthreads", where);
  if (run.returned > 0) {
    fail(("__syncthreads after " + std::to_string(run.returned) +
          " thread(s) of the block returned: every thread must reach it")
             .c_str(),
         where);
  }
  if (run.arrived == 0) {
    run.barrier_site = where;
  } else if (!same_site(run.barrier_site, where)) {
    fail(("threads of the block wait at different __syncthreads: " + site_text(run.barrier_site) +
          " and " + site_text(where))
             .c_str(),
         where);
  }
  if (++run.arrived == run.threads) {  // the last: release the others and go on
    for (unsigned rank : run.at_barrier) push_ready(rank);
    run.at_barrier.clear();
    run.arrived = 0;
    return;
  }
  me.state = State::at_barrier;
  me.what = "__syncthreads";
  me.site = where;
  run.at_barrier.push_back(me.rank);
  switch_away();
}

bool in_dynamic_shared(const void* p, std::size_t bytes) {
  const auto* first = static_cast<const unsigned char*>(p);
  const unsigned char* begin = dynamic_shared();
  const std::size_t size = run.shared.size() * sizeof(uint4);
  return first >= begin && first <= begin + size && bytes <= size - (first - begin);
}

void copy_async(void* to, const void* from, unsigned bytes, unsigned read_bytes,
                std::source_location where) {
  Fiber& me = current("cp.async", where);
  if (!in_dynamic_shared(to, bytes)) {
    fail("cp.async to an address outside the block's dynamic shared memory", where);
  }
  auto* destination = static_cast<unsigned char*>(to);
  std::memset(destination, 0xff, bytes);  // undefined until it lands: NaN as floats and bf16
  me.copies.push_back(
      {destination, static_cast<const unsigned char*>(from), bytes, read_bytes, me.committed});
}

void commit_copies(std::source_location where) {
  ++current("cp.async.commit_group", where).committed;
}

void wait_copies(unsigned pending, std::source_location where) {
  Fiber& me = current("cp.async.wait_group", where);
  if (me.committed <= pending) return;
  const unsigned done = me.committed - pending;  // groups 0 .. done - 1 land
  std::size_t kept = 0;
  for (const PendingCopy& c : me.copies) {
    if (c.group < done) {
      if (c.read_bytes > 0) std::memcpy(c.to, c.from, c.read_bytes);
      std::memset(c.to + c.read_bytes, 0, c.bytes - c.read_bytes);
    } else {
      me.copies[kept++] = c;
    }
  }
  me.copies.resize(kept);
}

unsigned lane_id() {
  return current("a warp intrinsic", {}).rank % 32;
}

WarpWords& warp_words() {
  return run.warps[current("a warp intrinsic", {}).rank / 32].words;
}

void sync_warp(const char* what, unsigned mask, void (*complete)(WarpWords&),
               std::source_location where) {
  Fiber& me = current(what, where);
  Warp& warp = run.warps[me.rank / 32];
  if (mask != kFullMask) {
    char text[160];
    std::snprintf(text, sizeof text, "%s with mask %#x: the emulator runs full-warp masks only",
                  what, mask);
    fail(text, where);
  }
  if (warp.lanes != 32) {
    fail((std::string(what) + " in a warp of " + std::to_string(warp.lanes) +
          " threads: a full mask names lanes that do not exist")
             .c_str(),
         where);
  }
  if (warp.returned > 0) {
    fail((std::string(what) + " with a full mask after " + std::to_string(warp.returned) +
          " lane(s) of the warp returned")
             .c_str(),
         where);
  }
  if (warp.arrived == 0) {
    warp.what = what;
    warp.site = where;
  } else if (std::strcmp(warp.what, what) != 0) {
    fail(("lanes of a warp in different collectives: " + std::string(warp.what) + " (" +
          site_text(warp.site) + ") and " + what + " (" + site_text(where) + ")")
             .c_str(),
         where);
  }
  if (++warp.arrived == 32) {  // the last lane: complete it for all, release the others
    complete(warp.words);
    // The warp goes on before the other warps' threads run: a warp that runs ahead of the
    // rest is what exposes a missing __syncthreads before shared memory is written again.
    for (unsigned i = 31; i-- > 0;) push_ready_first(warp.waiting[i]);
    warp.arrived = 0;
    return;
  }
  me.state = State::at_collective;
  me.what = what;
  me.site = where;
  warp.waiting[warp.arrived - 1] = me.rank;
  switch_away();
}

}  // namespace emu
