// memory_probe: MemAvailable and the cgroup limits (v2 and v1, nested, less the inactive page
// cache), from files laid out under a stand-in root; the machine id.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "device/memory_probe.h"
#include "scratch.h"

namespace zero {
namespace {

using zero::testing::ScratchDir;

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

// A root with /proc/meminfo saying `available_kib` available.
void meminfo(const std::filesystem::path& root, std::uint64_t available_kib) {
  write(root / "proc/meminfo",
        "MemTotal:       32768000 kB\nMemFree:         1000000 kB\nMemAvailable:   " +
            std::to_string(available_kib) + " kB\nBuffers:          1000 kB\n");
}

TEST_CASE("host_available is MemAvailable where no cgroup limits the process", "[memory_probe]") {
  ScratchDir dir("probe");
  const std::filesystem::path root = dir.path();
  meminfo(root, 20 * 1024 * 1024);  // 20 GiB
  write(root / "proc/self/cgroup", "0::/\n");
  write(root / "sys/fs/cgroup/memory.max", "max\n");  // the root has no limit
  write(root / "sys/fs/cgroup/memory.current", "123456\n");
  const auto available = memory_probe::host_available(root.string());
  REQUIRE(available);
  CHECK(available->bytes == 20 * kGiB);
  CHECK(available->source == "MemAvailable in /proc/meminfo");
}

TEST_CASE("host_available takes the tightest cgroup v2 level, less its inactive page cache",
          "[memory_probe]") {
  ScratchDir dir("probe");
  const std::filesystem::path root = dir.path();
  meminfo(root, 20 * 1024 * 1024);
  write(root / "proc/self/cgroup", "0::/job/step\n");
  const std::filesystem::path cg = root / "sys/fs/cgroup";
  // /job: 12 GiB, 7 GiB in use of which 2 GiB inactive cache: 7 GiB left.
  write(cg / "job/memory.max", std::to_string(12 * kGiB) + "\n");
  write(cg / "job/memory.current", std::to_string(7 * kGiB) + "\n");
  write(cg / "job/memory.stat",
        "anon 100\nfile 300\ninactive_file " + std::to_string(2 * kGiB) + "\nactive_file 5\n");
  // /job/step: 16 GiB, 4 GiB in use, no stat file: 12 GiB left (the parent is tighter).
  write(cg / "job/step/memory.max", std::to_string(16 * kGiB) + "\n");
  write(cg / "job/step/memory.current", std::to_string(4 * kGiB) + "\n");
  const auto available = memory_probe::host_available(root.string());
  REQUIRE(available);
  CHECK(available->bytes == 7 * kGiB);
  CHECK(available->source == "cgroup /job: its limit 12.00 GiB less 5.00 GiB in use");

  // Where the parent allows more than MemAvailable, MemAvailable stands.
  meminfo(root, 3 * 1024 * 1024);
  CHECK(memory_probe::host_available(root.string())->bytes == 3 * kGiB);
}

TEST_CASE("host_available reads the cgroup v1 memory controller, and its root in a namespace",
          "[memory_probe]") {
  ScratchDir dir("probe");
  const std::filesystem::path root = dir.path();
  meminfo(root, 20 * 1024 * 1024);
  write(root / "proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/batch/42\n0::/\n");
  const std::filesystem::path cg = root / "sys/fs/cgroup/memory";
  write(cg / "memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  write(cg / "memory.usage_in_bytes", "100\n");
  write(cg / "batch/42/memory.limit_in_bytes", std::to_string(8 * kGiB) + "\n");
  write(cg / "batch/42/memory.usage_in_bytes", std::to_string(6 * kGiB) + "\n");
  write(cg / "batch/42/memory.stat",
        "inactive_file 7\ntotal_inactive_file " + std::to_string(kGiB) + "\n");
  auto available = memory_probe::host_available(root.string());
  REQUIRE(available);
  CHECK(available->bytes == 3 * kGiB);
  CHECK(available->source == "cgroup /batch/42: its limit 8.00 GiB less 5.00 GiB in use");

  // In a cgroup namespace the process's cgroup is the mount's root: its files are read there.
  std::filesystem::remove_all(cg / "batch");
  write(cg / "memory.limit_in_bytes", std::to_string(4 * kGiB) + "\n");
  write(cg / "memory.usage_in_bytes", std::to_string(3 * kGiB) + "\n");
  available = memory_probe::host_available(root.string());
  REQUIRE(available);
  CHECK(available->bytes == kGiB);
  CHECK(available->source == "cgroup /: its limit 4.00 GiB less 3.00 GiB in use");

  // Usage above the limit leaves nothing, not a wrapped-around figure.
  write(cg / "memory.usage_in_bytes", std::to_string(5 * kGiB) + "\n");
  CHECK(memory_probe::host_available(root.string())->bytes == 0);
}

TEST_CASE("host_available is unknown without MemAvailable, and this machine has a figure",
          "[memory_probe]") {
  ScratchDir dir("probe");
  write(std::filesystem::path(dir.path()) / "proc/meminfo", "MemTotal: 1000 kB\nMemFree: 10 kB\n");
  CHECK_FALSE(memory_probe::host_available(dir.path()));

  const auto here = memory_probe::host_available();
  REQUIRE(here);
  CHECK(here->bytes > 0);
}

TEST_CASE("machine_id names the host and its boot", "[memory_probe]") {
  ScratchDir dir("probe");
  write(std::filesystem::path(dir.path()) / "proc/sys/kernel/random/boot_id", "0e1d-boot\n");
  const std::string id = memory_probe::machine_id(dir.path());
  CHECK_THAT(id, Catch::EndsWith(" (0e1d-boot)"));
  CHECK(memory_probe::machine_id() == memory_probe::machine_id());
  CHECK(memory_probe::machine_id() != id);
}

}  // namespace
}  // namespace zero
