// Arenas: exact accounting per kind, reuse of released space, alignment, the out-of-memory
// message, nvme (offset-only) arenas, pinned memory that warns once when it cannot lock, and
// large host mappings on huge pages.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/log.h"
#include "device/arena.h"
#include "device/device.h"
#include "device/host_memory.h"

namespace zero {

TEST_CASE("arena counts live and peak bytes per kind exactly", "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::host, 1 << 20, "test");
  const Block a = arena.allocate(MemoryKind::param, 1001);
  const Block b = arena.allocate(MemoryKind::grad, 3);
  const Block c = arena.allocate(MemoryKind::param, 4096);
  REQUIRE(arena.usage(MemoryKind::param).live == 5097);
  REQUIRE(arena.usage(MemoryKind::grad).live == 3);
  REQUIRE(arena.usage(MemoryKind::master).live == 0);
  REQUIRE(arena.live_bytes() == 5100);
  arena.release(a);
  REQUIRE(arena.usage(MemoryKind::param).live == 4096);
  REQUIRE(arena.usage(MemoryKind::param).peak == 5097);
  REQUIRE(arena.live_bytes() == 4099);
  REQUIRE(arena.peak_bytes() == 5100);
  const Block d = arena.allocate(MemoryKind::moment, 10);
  REQUIRE(arena.peak_bytes() == 5100);  // 4109 live: below the old peak
  arena.release(b);
  arena.release(c);
  arena.release(d);
  REQUIRE(arena.live_bytes() == 0);
  REQUIRE(arena.live_blocks() == 0);
  REQUIRE(arena.largest_free_range() == (1u << 20));  // everything merged back
}

TEST_CASE("arena blocks are aligned, inside the reservation, and writable", "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::pinned, 64 * 1024, "pinned");
  std::vector<Block> blocks;
  for (std::size_t alignment : {1, 8, 256, 4096}) {
    for (std::size_t bytes : {1, 17, 300}) {
      const Block block = arena.allocate(MemoryKind::buffer, bytes, alignment);
      REQUIRE(block.offset % alignment == 0);
      REQUIRE(reinterpret_cast<std::uintptr_t>(block.ptr) % alignment == 0);
      REQUIRE(static_cast<char*>(block.ptr) == static_cast<char*>(arena.base()) + block.offset);
      REQUIRE(block.offset + bytes <= arena.capacity());
      std::memset(block.ptr, 0x5a, bytes);
      blocks.push_back(block);
    }
  }
  // No two live blocks overlap.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    for (std::size_t j = i + 1; j < blocks.size(); ++j) {
      const bool disjoint = blocks[i].offset + blocks[i].bytes <= blocks[j].offset ||
                            blocks[j].offset + blocks[j].bytes <= blocks[i].offset;
      REQUIRE(disjoint);
    }
  }
  for (const Block& block : blocks) arena.release(block);
  REQUIRE(arena.largest_free_range() == arena.capacity());
}

TEST_CASE("released space is reused, so a steady allocate/release cycle never runs out",
          "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::device, 10 * 1024, "cycle");
  for (int step = 0; step < 1000; ++step) {
    const Block a = arena.allocate(MemoryKind::param, 4000 + step % 7);
    const Block b = arena.allocate(MemoryKind::grad, 5000 - step % 5);
    arena.release(a);
    arena.release(b);
  }
  REQUIRE(arena.live_bytes() == 0);
  REQUIRE(arena.usage(MemoryKind::param).peak == 4006);
  REQUIRE(arena.usage(MemoryKind::grad).peak == 5000);
}

TEST_CASE("running out of an arena names the arena, tier, kind, size and what is in use",
          "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::pinned, 8192, "swap buffers");
  const Block a = arena.allocate(MemoryKind::master, 4000);
  const Block b = arena.allocate(MemoryKind::moment, 3000);
  try {
    arena.allocate(MemoryKind::grad, 2000);
    FAIL("allocation past capacity succeeded");
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::out_of_memory);
    const std::string message = error.what();
    REQUIRE_THAT(message, Catch::Contains("arena 'swap buffers' (pinned tier)") &&
                              Catch::Contains("2000 bytes) of grad") &&
                              Catch::Contains("capacity 8.00 KiB") &&
                              Catch::Contains("in use 6.84 KiB in 2 blocks") &&
                              Catch::Contains("master 3.91 KiB, moment 2.93 KiB"));
  }
  arena.release(a);
  arena.release(b);
}

TEST_CASE("releasing a block twice is a usage error", "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::host, 4096);
  const Block a = arena.allocate(MemoryKind::param, 100);
  arena.release(a);
  REQUIRE_THROWS_MATCHES(arena.release(a), Error, Catch::Predicate<Error>([](const Error& e) {
                           return e.category() == ErrorCategory::usage &&
                                  std::string(e.what()).find("not live") != std::string::npos;
                         }));
}

TEST_CASE("an nvme arena places blocks in file offsets without memory", "[device][arena]") {
  Arena arena(nullptr, Tier::nvme, std::size_t{1} << 40, "swap file");
  const Block a = arena.allocate(MemoryKind::master, std::size_t{3} << 30, 4096);
  const Block b = arena.allocate(MemoryKind::moment, std::size_t{6} << 30, 4096);
  REQUIRE(a.ptr == nullptr);
  REQUIRE(b.offset % 4096 == 0);
  REQUIRE(b.offset >= a.offset + a.bytes);
  REQUIRE(arena.usage(MemoryKind::moment).live == (std::size_t{6} << 30));
  REQUIRE(arena.base() == nullptr);
}

TEST_CASE("the breakdown lists each kind with exact bytes", "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::host, 1 << 16, "host");
  const Block a = arena.allocate(MemoryKind::grad, 1536);
  const std::string text = arena.breakdown();
  REQUIRE_THAT(text, Catch::Contains("host (host tier): capacity 64.00 KiB, live 1.50 KiB") &&
                         Catch::Contains("grad") && Catch::Contains("(1536 B)"));
  REQUIRE_THAT(text, !Catch::Contains("param"));
  arena.release(a);
}

TEST_CASE("zero-byte blocks and bad alignments", "[device][arena]") {
  auto device = create_cpu_device();
  Arena arena(device.get(), Tier::host, 4096);
  const Block empty = arena.allocate(MemoryKind::param, 0);
  REQUIRE(empty.empty());
  arena.release(empty);
  REQUIRE(arena.live_blocks() == 0);
  REQUIRE_THROWS_WITH(arena.allocate(MemoryKind::param, 8, 24),
                      Catch::Contains("not a power of two"));
  Arena none(device.get(), Tier::device, 0);
  REQUIRE_THROWS_AS(none.allocate(MemoryKind::param, 1), Error);
}

namespace {
int refuse_lock(const void*, std::size_t) {
  errno = EPERM;
  return -1;
}
}  // namespace

// The VmFlags line of the mapping holding `address` in /proc/self/smaps ("" when none does).
std::string vm_flags_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line + " ";
    }
  }
  return "";
}

TEST_CASE(
    "host mappings of 2 MiB or more start on a huge page and ask for transparent huge pages, "
    "and smaller ones do not",
    "[device]") {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = 3 * kHuge + 4096 + 5;
  void* big = host_memory::map(bytes, Tier::host);
  CHECK(reinterpret_cast<std::uintptr_t>(big) % kHuge == 0);
  std::memset(big, 7, bytes);  // every byte asked for is there, zeroed before
  CHECK(static_cast<unsigned char*>(big)[bytes - 1] == 7);
  void* small = host_memory::map(kHuge - 4096, Tier::host);
  std::memset(small, 1, kHuge - 4096);
  if (std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    CHECK_THAT(vm_flags_of(big), Catch::Contains(" hg "));  // MADV_HUGEPAGE
    CHECK_THAT(vm_flags_of(static_cast<char*>(big) + bytes - 1), Catch::Contains(" hg "));
    CHECK_FALSE(vm_flags_of(small).find(" hg ") != std::string::npos);
  } else {
    WARN("skipped the huge-page flag: this kernel has no transparent huge pages");
  }
  host_memory::unmap(big, bytes);
  host_memory::unmap(small, kHuge - 4096);
  CHECK(vm_flags_of(big).empty());  // unmapped whole, the trimmed ends with it
}

TEST_CASE("pinned memory that cannot be locked warns once and stays usable", "[device][pinned]") {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  log::logger().sinks().push_back(sink);
  host_memory::reset_lock_warning();

  bool locked = true;
  void* a = host_memory::map_pinned(1 << 16, &locked, refuse_lock);
  REQUIRE_FALSE(locked);
  std::memset(a, 1, 1 << 16);
  void* b = host_memory::map_pinned(1 << 16, &locked, refuse_lock);
  std::memset(b, 2, 1 << 16);
  log::logger().flush();
  log::logger().sinks().pop_back();

  const std::string text = captured.str();
  REQUIRE_THAT(text, Catch::Contains("could not lock 65536 bytes of pinned host memory") &&
                         Catch::Contains("ulimit -l"));
  REQUIRE(text.find("could not lock") == text.rfind("could not lock"));  // once
  host_memory::unmap_pinned(a, 1 << 16);
  host_memory::unmap_pinned(b, 1 << 16);
}

TEST_CASE("pinned memory is locked when the system allows it", "[device][pinned]") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN(
      "skipped: AddressSanitizer and ThreadSanitizer turn mlock into a no-op, so residency "
      "cannot be checked");
  return;
#endif
  bool locked = false;
  void* p = host_memory::map_pinned(1 << 16, &locked);
  unsigned char residency = 0;
  // Locked pages are resident; when the lock limit refused, the warning path above applies.
  if (locked) {
    REQUIRE(::mincore(p, 4096, &residency) == 0);
    REQUIRE((residency & 1) == 1);
  } else {
    WARN("mlock refused here (ulimit -l); only the fallback was exercised");
  }
  host_memory::unmap_pinned(p, 1 << 16);
}

}  // namespace zero
