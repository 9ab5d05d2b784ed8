// Swap directories and files: layout and permissions, preallocation and its refusal, removal
// and keeping, and checksums that catch a file changed or truncated behind their back.
#include <catch2/catch.hpp>

#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/error.h"
#include "offload/swap.h"
#include "tests/offload/offload_test_util.h"

namespace zero::offload {
namespace {

using test::AlignedBuffer;
using test::options_for;
using test::ScratchDir;
using zero::testing::error_of;

constexpr std::uint64_t kTiB = std::uint64_t{1} << 40;

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

bool exists(const std::string& path) {
  return std::filesystem::exists(path);
}

// Writes `bytes` bytes of `value` at `offset` through a descriptor of its own, behind the
// SwapFile's back.
void scribble(const std::string& path, std::uint64_t offset, std::size_t bytes, char value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const std::string data(bytes, value);
  REQUIRE(::pwrite(fd, data.data(), bytes, static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(bytes));
  REQUIRE(::fsync(fd) == 0);
  ::close(fd);
}

}  // namespace

TEST_CASE("a swap directory is nvme_path/zero/job/rank with 0700 directories and 0600 files",
          "[offload]") {
  ScratchDir scratch("layout");
  const std::string nvme = scratch.file("nvme");  // missing: created too
  SwapDirectory dir(nvme, "job42", 3);
  CHECK(dir.path() == nvme + "/zero/job42/rank3");
  CHECK(mode_of(nvme) == 0700);
  CHECK(mode_of(nvme + "/zero") == 0700);
  CHECK(mode_of(nvme + "/zero/job42") == 0700);
  CHECK(mode_of(dir.path()) == 0700);
  auto file = dir.create("moments", 3 << 20, test::kNvmePathKey);
  CHECK(file->path() == dir.path() + "/moments");
  CHECK(file->size() == (3u << 20));
  CHECK(mode_of(file->path()) == 0600);
  CHECK(mode_of(dir.path() + "/owner.json") == 0600);
  // Preallocated: the blocks are reserved, not just the size set.
  struct stat st {};
  REQUIRE(::stat(file->path().c_str(), &st) == 0);
  CHECK(st.st_size == (3 << 20));
  CHECK(st.st_blocks * 512 >= (3 << 20));
}

TEST_CASE("a swap directory removes its files on destruction, and the job directory once empty",
          "[offload]") {
  ScratchDir scratch("removal");
  std::string rank0_file, rank1_file;
  {
    auto rank0 = std::make_unique<SwapDirectory>(scratch.path(), "job", 0);
    SwapDirectory rank1(scratch.path(), "job", 1);
    rank0_file = rank0->create("a", 1 << 20, test::kNvmePathKey)->path();
    rank1_file = rank1.create("b", 1 << 20, test::kNvmePathKey)->path();
    rank0.reset();
    CHECK_FALSE(exists(rank0_file));
    CHECK_FALSE(exists(scratch.file("zero/job/rank0")));
    CHECK(exists(rank1_file));
    CHECK(exists(scratch.file("zero/job")));
  }
  CHECK_FALSE(exists(rank1_file));
  CHECK_FALSE(exists(scratch.file("zero/job")));
  CHECK(exists(scratch.file("zero")));  // shared by every job: left alone
}

TEST_CASE("keep() leaves the swap files for inspection", "[offload]") {
  ScratchDir scratch("keep");
  std::string path;
  {
    SwapDirectory dir(scratch.path(), "job", 0);
    path = dir.create("a", 1 << 20, test::kNvmePathKey)->path();
    dir.keep("a test asked for it");
  }
  CHECK(exists(path));
}

TEST_CASE("a swap directory destroyed by an exception removes its files: only keep() keeps",
          "[offload]") {
  // An init refused on one rank unwinds the others too: nothing in their files is worth
  // keeping. The engine calls keep() itself when a step leaves the state half updated.
  ScratchDir scratch("unwind");
  std::string path;
  try {
    SwapDirectory dir(scratch.path(), "job", 0);
    path = dir.create("a", 1 << 20, test::kNvmePathKey)->path();
    throw std::runtime_error("init refused on another rank");
  } catch (const std::runtime_error&) {
  }
  CHECK_FALSE(exists(path));
  CHECK_FALSE(exists(scratch.file("zero/job")));
}

TEST_CASE(
    "a swap file larger than the free space is refused before it exists, naming the "
    "setting",
    "[offload]") {
  ScratchDir scratch("no-room");
  SwapDirectory dir(scratch.path(), "job", 0);
  struct statvfs vfs {};
  REQUIRE(::statvfs(dir.path().c_str(), &vfs) == 0);
  const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const Error error = error_of([&] { dir.create("moments", free + kTiB, test::kNvmePathKey); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::StartsWith(test::kNvmePathKey) && Catch::Contains(dir.path()) &&
                               Catch::Contains("free") &&
                               Catch::Contains(std::to_string(free + kTiB) + " bytes"));
  CHECK_FALSE(exists(dir.path() + "/moments"));
}

TEST_CASE("a swap file that already exists is refused, and bad names are usage errors",
          "[offload]") {
  ScratchDir scratch("names");
  SwapDirectory dir(scratch.path(), "job", 0);
  auto file = dir.create("a", 4096, test::kNvmePathKey);
  const Error again = error_of([&] { dir.create("a", 4096, test::kNvmePathKey); });
  CHECK(again.category() == ErrorCategory::io);
  CHECK_THAT(again.what(), Catch::Contains(file->path()) && Catch::Contains("already exists"));
  for (const char* name : {"", "..", "x/y"}) {
    CHECK(error_of([&] { dir.create(name, 4096, test::kNvmePathKey); }).category() ==
          ErrorCategory::usage);
  }
  CHECK(error_of([&] { SwapDirectory(scratch.path(), "a/b", 0); }).category() ==
        ErrorCategory::usage);
  CHECK(error_of([&] { SwapDirectory(scratch.path(), "job", -1); }).category() ==
        ErrorCategory::usage);
}

TEST_CASE("regions round trip through a swap file", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir scratch("swap-roundtrip");
  SwapDirectory dir(scratch.path(), "job", 0);
  auto file = dir.create("state", 5 << 20, test::kNvmePathKey);
  AioOptions options = options_for(backend);
  options.block_size = 65536;
  options.intra_op_parallelism = 2;
  auto io = AsyncIO::create(options);
  AlignedBuffer out(5 << 20), in(5 << 20);
  out.fill_random(23);
  // Regions of different sizes, all in flight together.
  const std::pair<std::uint64_t, std::size_t> regions[] = {
      {0, 4096}, {4096, 1 << 20}, {(1 << 20) + 4096, 3 << 20}};
  std::vector<Ticket> tickets;
  for (auto [offset, bytes] : regions) {
    tickets.push_back(file->write(*io, offset, out.data() + offset, bytes));
  }
  for (Ticket t : tickets) file->wait(*io, t);
  tickets.clear();
  for (auto [offset, bytes] : regions) {
    tickets.push_back(file->read(*io, offset, in.data() + offset, bytes));
  }
  for (Ticket t : tickets) file->wait(*io, t);
  CHECK(in.same_as(out, 0, (1 << 20) + 4096 + (3 << 20)));
  // A ticket is the file's once.
  CHECK(error_of([&] { file->wait(*io, tickets[0]); }).category() == ErrorCategory::usage);
}

TEST_CASE("a region changed behind the swap file's back fails its checksum", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir scratch("corrupt");
  SwapDirectory dir(scratch.path(), "job", 0);
  auto file = dir.create("state", 1 << 20, test::kNvmePathKey);
  auto io = AsyncIO::create(options_for(backend));
  AlignedBuffer out(1 << 20), in(1 << 20);
  out.fill_random(29);
  file->wait(*io, file->write(*io, 0, out.data(), 65536));
  file->wait(*io, file->write(*io, 65536, out.data() + 65536, 65536));
  scribble(file->path(), 65536 + 1000, 1, 'x');  // one byte of the second region

  file->wait(*io, file->read(*io, 0, in.data(), 65536));  // the first is intact
  CHECK(in.same_as(out, 0, 65536));
  const Error error = error_of([&] { file->wait(*io, file->read(*io, 65536, in.data(), 65536)); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::Contains(file->path()) && Catch::Contains("offset 65536") &&
                               Catch::Contains("differ from what was written"));
}

TEST_CASE("a truncated swap file is never read as data", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir scratch("truncated");
  SwapDirectory dir(scratch.path(), "job", 0);
  auto file = dir.create("state", 1 << 20, test::kNvmePathKey);
  auto io = AsyncIO::create(options_for(backend));
  AlignedBuffer out(1 << 20), in(1 << 20);
  out.fill_random(31);
  file->wait(*io, file->write(*io, 0, out.data(), 1 << 20));

  REQUIRE(::truncate(file->path().c_str(), 1 << 19) == 0);
  const Error cut = error_of([&] { file->wait(*io, file->read(*io, 0, in.data(), 1 << 20)); });
  CHECK(cut.category() == ErrorCategory::io);
  CHECK_THAT(cut.what(), Catch::Contains(file->path()) &&
                             Catch::Contains("only " + std::to_string(1 << 19) + " bytes long"));

  // Grown back to its size, the lost half reads as zeros: the checksum catches it.
  REQUIRE(::truncate(file->path().c_str(), 1 << 20) == 0);
  const Error zeros = error_of([&] { file->wait(*io, file->read(*io, 0, in.data(), 1 << 20)); });
  CHECK(zeros.category() == ErrorCategory::io);
  CHECK_THAT(zeros.what(), Catch::Contains(file->path()) && Catch::Contains("offset 0") &&
                               Catch::Contains("differ from what was written"));
}

TEST_CASE("reading a region that was not written whole is a usage error", "[offload]") {
  ScratchDir scratch("unwritten");
  SwapDirectory dir(scratch.path(), "job", 0);
  auto file = dir.create("state", 1 << 20, test::kNvmePathKey);
  bool faulty = false;
  AioOptions options = options_for(AioBackend::threads);
  options.inject = [&](bool, const std::string&, std::uint64_t, std::size_t) {
    return faulty ? ENOSPC : 0;
  };
  auto io = AsyncIO::create(options);
  AlignedBuffer buffer(1 << 20);
  buffer.fill_random(37);

  const auto usage = [&](std::uint64_t offset, std::size_t bytes, const char* text) {
    const Error error = error_of([&] { file->read(*io, offset, buffer.data(), bytes); });
    CHECK(error.category() == ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains(file->path()) && Catch::Contains(text));
  };
  usage(0, 4096, "no completed write of exactly that region");  // never written
  file->wait(*io, file->write(*io, 0, buffer.data(), 65536));
  usage(0, 4096, "65536 bytes were written there");  // part of a region
  usage(4096, 4096, "no completed write");           // inside a region
  usage(1 << 20, 4096, "inside it");                 // outside the file
  CHECK(error_of([&] { file->write(*io, (1 << 20) - 4096, buffer.data(), 8192); }).category() ==
        ErrorCategory::usage);

  // A region whose write failed holds nothing to read.
  faulty = true;
  CHECK(error_of([&] {
          file->wait(*io, file->write(*io, 65536, buffer.data(), 4096));
        }).category() == ErrorCategory::io);
  faulty = false;
  usage(65536, 4096, "no completed write");

  // An overwrite of part of a region leaves that region unreadable; the new one reads back.
  file->wait(*io, file->write(*io, 4096, buffer.data() + 8192, 4096));
  usage(0, 65536, "no completed write");
  AlignedBuffer in(4096);
  file->wait(*io, file->read(*io, 4096, in.data(), 4096));
  CHECK(std::memcmp(in.data(), buffer.data() + 8192, 4096) == 0);
}

}  // namespace zero::offload
