// AsyncIO on both backends: data round trips, splitting over rings, the alignment contract,
// injected and real failures, retries, the end of a file, and the choice of backend.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "offload/aio.h"
#include "tests/offload/offload_test_util.h"

namespace zero::offload {
namespace {

using test::AlignedBuffer;
using test::options_for;
using test::ScratchDir;

// Reads `bytes` at `offset` through the page cache (no O_DIRECT), to check what is on disk.
std::vector<std::byte> read_plain(const std::string& path, std::uint64_t offset,
                                  std::size_t bytes) {
  std::vector<std::byte> data(bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, data.data(), bytes, static_cast<off_t>(offset)) ==
          static_cast<ssize_t>(bytes));
  ::close(fd);
  return data;
}

// An environment variable set for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

}  // namespace

TEST_CASE("aio backend names parse and print back", "[offload]") {
  for (AioBackend b : {AioBackend::automatic, AioBackend::uring, AioBackend::threads}) {
    CHECK(parse_aio_backend(aio_backend_name(b)) == b);
  }
  CHECK(parse_aio_backend("io_uring") == AioBackend::uring);
  CHECK_FALSE(parse_aio_backend("libaio").has_value());
  CHECK_FALSE(parse_aio_backend("").has_value());
}

TEST_CASE("AsyncIO::create refuses options out of range as usage errors", "[offload]") {
  const auto refused = [](AioOptions options, const char* key) {
    options.backend = AioBackend::threads;
    try {
      AsyncIO::create(options);
      FAIL("accepted " << key);
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains(key));
    }
  };
  AioOptions o;
  o.block_size = 0;
  refused(o, "aio.block_size");
  o.block_size = 6000;
  refused(o, "aio.block_size");
  o = {};
  o.queue_depth = 0;
  refused(o, "aio.queue_depth");
  o = {};
  o.intra_op_parallelism = 0;
  refused(o, "aio.intra_op_parallelism");
}

TEST_CASE("File opens for direct I/O with mode 0600 and reports its alignment", "[offload]") {
  ScratchDir dir("file");
  const std::string path = dir.file("f");
  File file(path, true);
  CHECK(file.path() == path);
  CHECK(file.fd() >= 0);
  const std::size_t a = file.alignment();
  CHECK(a >= 512);
  CHECK(a <= 4096);
  CHECK((a & (a - 1)) == 0);
  CHECK((::fcntl(file.fd(), F_GETFL) & O_DIRECT) != 0);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  file.preallocate(1 << 20);
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(st.st_size == (1 << 20));
  CHECK(st.st_blocks * 512 >= (1 << 20));

  try {
    File missing(dir.file("missing"), false);
    FAIL("opened a missing file");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(), Catch::Contains(dir.file("missing")) &&
                                 Catch::Contains("No such file or directory"));
  }
}

TEST_CASE("random data round trips through requests of odd sizes", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("odd-sizes");
  File file(dir.file("f"), true);
  const std::size_t a = file.alignment();
  AioOptions options = options_for(backend);
  options.block_size = 16384;  // requests of several pieces, and last pieces cut short
  options.queue_depth = 4;
  options.intra_op_parallelism = 2;
  auto io = AsyncIO::create(options);
  REQUIRE(io->backend() == backend);

  const std::size_t multiples[] = {1, 3, 5, 7, 33, 129, 1025};
  std::size_t total = 0;
  for (std::size_t k : multiples) total += k * a;
  AlignedBuffer out(total), in(total);
  out.fill_random(42);

  std::vector<Ticket> tickets;
  std::size_t at = 0;
  for (std::size_t k : multiples) {
    tickets.push_back(io->write(file, at, out.data() + at, k * a));
    at += k * a;
  }
  for (Ticket t : tickets) io->wait(t);
  tickets.clear();
  at = 0;
  for (std::size_t k : multiples) {
    tickets.push_back(io->read(file, at, in.data() + at, k * a));
    at += k * a;
  }
  for (auto it = tickets.rbegin(); it != tickets.rend(); ++it) io->wait(*it);  // any order
  CHECK(in.same_as(out));
  const auto on_disk = read_plain(file.path(), 0, total);
  CHECK(std::memcmp(on_disk.data(), out.data(), total) == 0);
}

TEST_CASE("many concurrent requests from several threads complete with their own data",
          "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("concurrent");
  File file(dir.file("f"), true);
  AioOptions options = options_for(backend);
  options.block_size = 8192;
  options.queue_depth = 8;
  options.intra_op_parallelism = 3;
  auto io = AsyncIO::create(options);

  constexpr int kThreads = 4;
  constexpr int kRequests = 48;
  constexpr std::size_t kRegion = 5 * 4096;  // per request; not a multiple of the block size
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer out(kRequests * kRegion), in(kRequests * kRegion);
      out.fill_random(static_cast<std::uint64_t>(t) + 1);
      const std::uint64_t base = static_cast<std::uint64_t>(t) * kRequests * kRegion;
      std::vector<Ticket> tickets;
      for (int r = 0; r < kRequests; ++r) {
        tickets.push_back(io->write(file, base + r * kRegion, out.data() + r * kRegion, kRegion));
      }
      for (Ticket ticket : tickets) io->wait(ticket);
      tickets.clear();
      for (int r = 0; r < kRequests; ++r) {
        tickets.push_back(io->read(file, base + r * kRegion, in.data() + r * kRegion, kRegion));
      }
      // Poll half of them with test() before waiting: test() never blocks and wait() then
      // returns at once.
      for (std::size_t i = 0; i < tickets.size(); i += 2) {
        while (!io->test(tickets[i])) std::this_thread::yield();
      }
      for (Ticket ticket : tickets) io->wait(ticket);
      if (!in.same_as(out)) ++mismatches;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(mismatches == 0);
}

TEST_CASE("a request is cut into block_size pieces spread over every ring", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("split");
  File file(dir.file("f"), true);
  std::mutex mutex;
  std::map<std::uint64_t, std::size_t> pieces;  // offset -> bytes
  std::set<std::thread::id> issuers;
  AioOptions options = options_for(backend);
  options.block_size = 4096;
  options.queue_depth = 2;
  options.intra_op_parallelism = 4;
  options.inject = [&](bool, const std::string&, std::uint64_t offset, std::size_t bytes) {
    std::lock_guard lock(mutex);
    pieces[offset] += bytes;
    issuers.insert(std::this_thread::get_id());
    return 0;
  };
  auto io = AsyncIO::create(options);
  constexpr std::size_t kPieces = 64;
  AlignedBuffer out(kPieces * 4096), in(kPieces * 4096);
  out.fill_random(7);
  io->wait(io->write(file, 0, out.data(), out.size()));
  CHECK(pieces.size() == kPieces);
  std::uint64_t expected = 0;
  for (const auto& [offset, bytes] : pieces) {
    CHECK(offset == expected);
    CHECK(bytes == 4096);
    expected += 4096;
  }
  // Each lane (ring, or group of threads) takes a quarter of the pieces; no lane's thread
  // serves another.
  CHECK(issuers.size() >= 4);
  if (backend == AioBackend::uring) CHECK(issuers.size() == 4);
  io->wait(io->read(file, 0, in.data(), in.size()));
  CHECK(in.same_as(out));
}

TEST_CASE("unaligned offsets, lengths and buffers are usage errors and issue nothing",
          "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("unaligned");
  File file(dir.file("f"), true);
  std::atomic<int> issued{0};
  AioOptions options = options_for(backend);
  options.inject = [&](bool, const std::string&, std::uint64_t, std::size_t) {
    ++issued;
    return 0;
  };
  auto io = AsyncIO::create(options);
  const std::size_t a = file.alignment();
  AlignedBuffer buffer(4 * a);
  const auto usage_error = [&](auto&& submit, const char* what) {
    try {
      submit();
      FAIL("accepted an unaligned " << what);
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains(what) && Catch::Contains("alignment") &&
                                   Catch::Contains(file.path()));
    }
  };
  usage_error([&] { io->write(file, a / 2, buffer.data(), a); }, "offset");
  usage_error([&] { io->read(file, 0, buffer.data(), a + a / 2); }, "length");
  usage_error([&] { io->read(file, 0, buffer.data() + a / 2, a); }, "buffer address");
  CHECK(issued == 0);
}

TEST_CASE("injected ENOSPC and EIO surface in wait with path, offset and strerror", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("inject");
  File file(dir.file("f"), true);
  constexpr std::size_t kBlock = 16384;
  std::atomic<bool> faulty{true};
  AioOptions options = options_for(backend);
  options.block_size = kBlock;
  options.intra_op_parallelism = 2;
  options.inject = [&](bool write, const std::string&, std::uint64_t offset, std::size_t) {
    if (!faulty) return 0;
    if (write && offset == 3 * kBlock) return ENOSPC;
    if (!write && offset == 5 * kBlock) return EIO;
    return 0;
  };
  auto io = AsyncIO::create(options);
  AlignedBuffer out(8 * kBlock), in(8 * kBlock);
  out.fill_random(3);

  const auto fails_with = [&](Ticket ticket, const std::string& text) {
    try {
      io->wait(ticket);
      FAIL("no error");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::io);
      CHECK_THAT(error.what(), Catch::Contains(file.path()) && Catch::Contains(text));
    }
  };
  fails_with(io->write(file, 0, out.data(), out.size()),
             fmt::format("cannot write {} bytes at offset {}", kBlock, 3 * kBlock));
  fails_with(io->write(file, 0, out.data(), out.size()), std::strerror(ENOSPC));
  faulty = false;
  io->wait(io->write(file, 0, out.data(), out.size()));  // the engine goes on after a failure
  faulty = true;
  fails_with(io->read(file, 0, in.data(), in.size()),
             fmt::format("cannot read {} bytes at offset {}", kBlock, 5 * kBlock));
  fails_with(io->read(file, 0, in.data(), in.size()), std::strerror(EIO));
  // A request that does not touch the faulty piece is unaffected.
  io->wait(io->read(file, 0, in.data(), 4 * kBlock));
  CHECK(in.same_as(out, 0, 4 * kBlock));
}

TEST_CASE("EINTR and EAGAIN answers are retried until the piece goes through", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("retry");
  File file(dir.file("f"), true);
  std::mutex mutex;
  std::map<std::uint64_t, int> attempts;
  AioOptions options = options_for(backend);
  options.block_size = 8192;
  options.inject = [&](bool, const std::string&, std::uint64_t offset, std::size_t) {
    std::lock_guard lock(mutex);
    const int n = attempts[offset]++;
    return n == 0 ? EINTR : n == 1 ? EAGAIN : n == 2 ? EINTR : 0;
  };
  auto io = AsyncIO::create(options);
  AlignedBuffer out(8 * 8192), in(8 * 8192);
  out.fill_random(11);
  io->wait(io->write(file, 0, out.data(), out.size()));
  CHECK(attempts.size() == 8);
  for (const auto& [offset, n] : attempts) CHECK(n == 4);
  attempts.clear();
  io->wait(io->read(file, 0, in.data(), in.size()));
  CHECK(in.same_as(out));
}

TEST_CASE("a read past the end of a file is an error saying how long the file is", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("eof");
  const std::size_t block = GENERATE(std::size_t{4096}, std::size_t{1} << 20);
  INFO("block_size " << block);
  AioOptions options = options_for(backend);
  options.block_size = block;
  auto io = AsyncIO::create(options);
  AlignedBuffer buffer(8 * 4096);
  const auto end_of_file = [&](const File& file, const std::string& length) {
    try {
      io->wait(io->read(file, 0, buffer.data(), buffer.size()));
      FAIL("read past the end without an error");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::io);
      CHECK_THAT(error.what(), Catch::Contains(file.path()) &&
                                   Catch::Contains("the file is only " + length + " bytes long"));
    }
  };
  {
    // Three whole blocks: the read is short at an aligned count, resumed, and meets the end.
    File file(dir.file("short"), true);
    io->wait(io->write(file, 0, buffer.data(), 3 * 4096));
    end_of_file(file, "12288");
  }
  {
    // A length direct I/O cannot end at: the count comes back unaligned.
    const std::string path = dir.file("odd");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(::write(fd, buffer.data(), 5000) == 5000);
    ::close(fd);
    File file(path, false);
    end_of_file(file, "5000");
  }
}

TEST_CASE("a short write is resumed and the failure after it reported", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("short-write");
  File file(dir.file("f"), true);
  AioOptions options = options_for(backend);
  auto io = AsyncIO::create(options);
  AlignedBuffer out(8 * 4096);
  out.fill_random(5);
  // The file size limit cuts the write short at 12 KiB; the resumed rest then fails with
  // EFBIG (and SIGXFSZ, ignored here).
  struct rlimit old {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit = old;
  limit.rlim_cur = 3 * 4096;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  std::string message;
  try {
    io->wait(io->write(file, 0, out.data(), out.size()));
  } catch (const Error& error) {
    message = error.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  CHECK_THAT(message, Catch::Contains(file.path()) && Catch::Contains("after 12288 bytes") &&
                          Catch::Contains(std::strerror(EFBIG)));
  const auto on_disk = read_plain(file.path(), 0, 3 * 4096);
  CHECK(std::memcmp(on_disk.data(), out.data(), 3 * 4096) == 0);
}

TEST_CASE("a ticket is waited for once", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("ticket");
  File file(dir.file("f"), true);
  auto io = AsyncIO::create(options_for(backend));
  AlignedBuffer buffer(4096);
  const Ticket ticket = io->write(file, 0, buffer.data(), 4096);
  io->wait(ticket);
  try {
    io->wait(ticket);
    FAIL("waited twice");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains("waited for once"));
  }
  CHECK_THROWS_AS(io->test(ticket + 1000), Error);
  // An empty request completes at once.
  const Ticket empty = io->read(file, 0, buffer.data(), 0);
  CHECK(io->test(empty));
  io->wait(empty);
}

TEST_CASE("registered buffers carry data both ways, and buffers outside them too", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("fixed");
  File file(dir.file("f"), true);
  AioOptions options = options_for(backend);
  options.block_size = 65536;
  options.intra_op_parallelism = 2;
  auto io = AsyncIO::create(options);
  AlignedBuffer fixed(1 << 20), plain(1 << 20), check(1 << 20);
  fixed.fill_random(13);
  const bool registered = io->register_buffers({{fixed.data(), fixed.size()}});
  if (backend == AioBackend::threads) {
    CHECK_FALSE(registered);
  } else if (!registered) {
    WARN(
        "io_uring refused to register 1 MiB (locked-memory limit): fixed reads and writes are "
        "not exercised");
  }
  io->wait(io->write(file, 0, fixed.data(), fixed.size()));  // fixed writes
  io->wait(io->read(file, 0, plain.data(), plain.size()));   // plain reads
  CHECK(plain.same_as(fixed));
  plain.fill_random(14);
  io->wait(io->write(file, 0, plain.data(), plain.size()));  // plain writes
  io->wait(io->read(file, 0, fixed.data(), fixed.size()));   // fixed reads
  CHECK(fixed.same_as(plain));
  // Replacing the set with nothing unregisters; I/O goes on.
  CHECK_FALSE(io->register_buffers({}));
  io->wait(io->read(file, 0, check.data(), check.size()));
  CHECK(check.same_as(plain));
}

TEST_CASE("destroying an AsyncIO finishes the requests it holds", "[offload]") {
  ZERO_FOR_EACH_AIO_BACKEND(backend);
  ScratchDir dir("drain");
  File file(dir.file("f"), true);
  AioOptions options = options_for(backend);
  options.block_size = 4096;
  options.queue_depth = 2;
  AlignedBuffer out(256 * 4096);
  out.fill_random(17);
  {
    auto io = AsyncIO::create(options);
    io->write(file, 0, out.data(), out.size());  // never waited for
  }
  const auto on_disk = read_plain(file.path(), 0, out.size());
  CHECK(std::memcmp(on_disk.data(), out.data(), out.size()) == 0);
}

TEST_CASE("ZERO_AIO_BACKEND picks the backend and a bad value is a usage error", "[offload]") {
  {
    ScopedEnv env("ZERO_AIO_BACKEND", "threads");
    CHECK(AsyncIO::create()->backend() == AioBackend::threads);
    // The options win over the environment.
    if (test::uring_available()) {
      CHECK(AsyncIO::create(options_for(AioBackend::uring))->backend() == AioBackend::uring);
    }
  }
  if (test::uring_available()) {
    ScopedEnv env("ZERO_AIO_BACKEND", "uring");
    CHECK(AsyncIO::create()->backend() == AioBackend::uring);
  }
  {
    ScopedEnv env("ZERO_AIO_BACKEND", "libaio");
    try {
      AsyncIO::create();
      FAIL("accepted ZERO_AIO_BACKEND=libaio");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::usage);
      CHECK_THAT(error.what(), Catch::Contains("ZERO_AIO_BACKEND=libaio"));
    }
  }
}

namespace {

// Makes io_uring_setup fail with EPERM in this process, as container seccomp profiles do.
bool forbid_io_uring() {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof filter / sizeof filter[0]),
                               filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program) == 0;
}

// In a child under that policy: 0 when automatic falls back to a working thread pool and an
// explicit io_uring request is an io Error saying why; another code names what went wrong.
int child_without_io_uring(const std::string& path) {
  if (!forbid_io_uring()) return 10;
  ::unsetenv("ZERO_AIO_BACKEND");
  try {
    auto io = AsyncIO::create();
    if (io->backend() != AioBackend::threads) return 11;
    File file(path, true);
    AlignedBuffer out(65536), in(65536);
    out.fill_random(19);
    io->wait(io->write(file, 0, out.data(), out.size()));
    io->wait(io->read(file, 0, in.data(), in.size()));
    if (!in.same_as(out)) return 12;
  } catch (...) {
    return 13;
  }
  try {
    AsyncIO::create(options_for(AioBackend::uring));
    return 14;
  } catch (const Error& error) {
    const std::string what = error.what();
    if (error.category() != ErrorCategory::io || what.find("seccomp") == std::string::npos ||
        what.find("ZERO_AIO_BACKEND=threads") == std::string::npos) {
      return 15;
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("automatic falls back to the thread pool when a seccomp policy forbids io_uring",
          "[offload]") {
  ScratchDir dir("seccomp");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) ::_exit(child_without_io_uring(dir.file("f")));
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  INFO(
      "10: no seccomp filter, 11: not the thread pool, 12: data differ, 13: thread pool "
      "failed, 14: io_uring set up anyway, 15: the io_uring error does not say why");
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace zero::offload
