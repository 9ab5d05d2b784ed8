// Swap directories that must not leak or be followed: owner records and the scan that names
// stale job directories (size, age, whether their process lives), their removal, links planted
// below nvme_path, and removal at the abnormal ends a process controls (SIGTERM, SIGINT,
// SIGHUP, exit() without destroying) in a child process, with a kept directory named instead.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "offload/swap.h"
#include "offload/swap_cleanup.h"
#include "offload/swap_jobs.h"
#include "tests/offload/offload_test_util.h"

extern char** environ;

namespace zero::offload {
namespace {

namespace fs = std::filesystem;
using test::ScratchDir;
using zero::testing::error_of;

// Whether anything is at `path`, a dangling symbolic link too (lstat, not fs::exists).
bool exists_no_follow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string host() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// A process id that no process has any more.
long dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

// A job directory as a dead job leaves it: a rank directory with an owner record and a file.
std::string plant_job(const std::string& nvme, const std::string& id, long pid,
                      const std::string& on_host, std::size_t bytes) {
  const std::string rank = nvme + "/zero/" + id + "/rank0";
  fs::create_directories(rank);
  std::ofstream(rank + "/owner.json")
      << "{\"rank\": 0, \"host\": \"" << on_host << "\", \"pid\": " << pid
      << ", \"start_ticks\": 0, \"created_unix\": 1000}\n";
  std::ofstream(rank + "/optimizer.swap") << std::string(bytes, 'x');
  return nvme + "/zero/" + id;
}

const SwapJob* find(const std::vector<SwapJob>& jobs, const std::string& id) {
  for (const SwapJob& job : jobs) {
    if (job.id == id) return &job;
  }
  return nullptr;
}

// Runs `body` in a child with stderr in `log`, as a plain program would start (the test
// runner's own handlers of the signals back to the default); returns its wait status.
template <class F>
int in_child(const std::string& log, F&& body) {
  const pid_t child = ::fork();
  if (child == 0) {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) ::signal(sig, SIG_DFL);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDERR_FILENO);
    body();
    ::_exit(99);  // body ends the process itself
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("a swap directory's owner record names its host and live process", "[offload]") {
  ScratchDir scratch("owner");
  SwapDirectory dir(scratch.path(), "job", 2);
  const std::string record = read_text(dir.path() + "/owner.json");
  CHECK_THAT(record, Catch::Contains("\"pid\":" + std::to_string(::getpid())) &&
                         Catch::Contains("\"rank\":2") && Catch::Contains(host()));
  const auto jobs = find_swap_jobs(scratch.path());
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state == SwapJobState::running);
  CHECK(jobs[0].running_pid == ::getpid());
  CHECK_FALSE(jobs[0].stale(1L << 40));
  CHECK_THAT(jobs[0].state_text(), Catch::Contains("running"));
  CHECK_THAT(error_of([&] { remove_swap_job(jobs[0]); }).what(),
             Catch::Contains("running job") && Catch::Contains(dir.path().substr(0, 10)));
  CHECK(exists_no_follow(dir.path()));
}

TEST_CASE("the scan names stale swap directories with size, age and why, and removes them",
          "[offload]") {
  ScratchDir scratch("stale");
  const std::string gone = plant_job(scratch.path(), "gone", dead_pid(), host(), 3 << 20);
  plant_job(scratch.path(), "elsewhere", 1, "another-host.example", 4096);
  fs::create_directories(scratch.path() + "/zero/unowned/rank0");
  const auto jobs = find_swap_jobs(scratch.path());
  REQUIRE(jobs.size() == 3);
  const SwapJob* dead = find(jobs, "gone");
  REQUIRE(dead != nullptr);
  CHECK(dead->state == SwapJobState::gone);
  CHECK(dead->bytes >= (3u << 20));
  CHECK(dead->stale(2000));
  CHECK(find(jobs, "elsewhere")->state == SwapJobState::elsewhere);
  CHECK_FALSE(find(jobs, "elsewhere")->stale(1L << 40));  // another host's: cannot tell
  CHECK(find(jobs, "unowned")->state == SwapJobState::unowned);

  const std::string text = describe_stale_jobs(jobs, scratch.path());
  CHECK_THAT(text, Catch::Contains(gone) && Catch::Contains("3.00 MiB") &&
                       Catch::Contains("ended") && Catch::Contains("days old") &&
                       Catch::Contains("zero-swap clean " + scratch.path()));
  CHECK_THAT(text, !Catch::Contains("elsewhere"));

  const SwapRemoval removal = remove_swap_job(*dead);
  CHECK(removal.whole());
  CHECK(removal.files == 2);  // the swap file and the owner record
  CHECK(removal.bytes >= (3u << 20));
  CHECK_FALSE(exists_no_follow(gone));
  CHECK(exists_no_follow(scratch.path() + "/zero/elsewhere/rank0/optimizer.swap"));
}

TEST_CASE("a stale directory holding links is removed but for them, and stays identifiable",
          "[offload]") {
  ScratchDir scratch("links-left");
  const std::string gone = plant_job(scratch.path(), "gone", dead_pid(), host(), 1 << 20);
  const std::string outside = scratch.path() + "/precious";
  std::ofstream(outside) << "not zero's";
  fs::create_symlink(outside, gone + "/rank0/planted");
  const auto jobs = find_swap_jobs(scratch.path());
  REQUIRE(jobs.size() == 1);
  const SwapRemoval removal = remove_swap_job(jobs[0]);
  CHECK_FALSE(removal.whole());
  REQUIRE(removal.left.size() == 1);
  CHECK(removal.left[0] == gone + "/rank0/planted");
  // The swap file went and was counted; the link, what it points to and the owner record stay.
  CHECK(removal.files == 1);
  CHECK(removal.bytes >= (1u << 20));
  CHECK_FALSE(exists_no_follow(gone + "/rank0/optimizer.swap"));
  CHECK(exists_no_follow(gone + "/rank0/planted"));
  CHECK(read_text(outside) == "not zero's");
  CHECK(exists_no_follow(gone + "/rank0/owner.json"));
  const auto again = find_swap_jobs(scratch.path());
  REQUIRE(again.size() == 1);
  CHECK(again[0].state == SwapJobState::gone);
}

TEST_CASE("the next run is told about stale directories when a swap file does not fit",
          "[offload]") {
  ScratchDir scratch("stale-full");
  const std::string gone = plant_job(scratch.path(), "dead", dead_pid(), host(), 1 << 20);
  SwapDirectory dir(scratch.path(), "job", 0);
  const Error error =
      error_of([&] { dir.create("moments", std::uint64_t{1} << 60, test::kNvmePathKey); });
  CHECK(error.category() == ErrorCategory::io);
  CHECK_THAT(error.what(), Catch::Contains("free") && Catch::Contains(gone) &&
                               Catch::Contains("zero-swap clean"));
}

TEST_CASE("links planted below nvme_path are refused, never followed", "[offload]") {
  ScratchDir scratch("links");
  const std::string target = scratch.file("target");
  fs::create_directories(target);

  SECTION("zero/ is a link") {
    const std::string nvme = scratch.file("nvme");
    fs::create_directories(nvme);
    fs::create_directory_symlink(target, nvme + "/zero");
    const Error error = error_of([&] { SwapDirectory(nvme, "job", 0); });
    CHECK(error.category() == ErrorCategory::io);
    CHECK_THAT(error.what(), Catch::Contains(nvme + "/zero") && Catch::Contains("symbolic link"));
  }
  SECTION("the job directory is a link") {
    fs::create_directories(scratch.file("nvme/zero"));
    fs::create_directory_symlink(target, scratch.file("nvme/zero/job"));
    const Error error = error_of([&] { SwapDirectory(scratch.file("nvme"), "job", 0); });
    CHECK_THAT(error.what(), Catch::Contains("nvme/zero/job") && Catch::Contains("symbolic link"));
  }
  SECTION("the rank directory exists already") {
    fs::create_directories(scratch.file("nvme/zero/job/rank0"));
    const Error error = error_of([&] { SwapDirectory(scratch.file("nvme"), "job", 0); });
    CHECK_THAT(error.what(), Catch::Contains("rank0") && Catch::Contains("earlier run"));
  }
  SECTION("a swap file's name is a link") {
    SwapDirectory dir(scratch.file("nvme"), "job", 0);
    fs::create_symlink(target + "/victim", dir.path() + "/moments");
    const Error error = error_of([&] { dir.create("moments", 4096, test::kNvmePathKey); });
    CHECK_THAT(error.what(), Catch::Contains("symbolic link"));
    CHECK_FALSE(exists_no_follow(target + "/victim"));
    ::unlink((dir.path() + "/moments").c_str());
  }
  // Nothing was made where the links point.
  CHECK(fs::is_empty(target));
}

TEST_CASE("swap directories are removed when SIGTERM, SIGINT or SIGHUP ends the process",
          "[offload]") {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    ScratchDir scratch("signal");
    const std::string log = scratch.file("stderr");
    const int status = in_child(log, [&] {
      auto* dir = new SwapDirectory(scratch.file("nvme"), "job", 0);
      dir->create("optimizer.swap", 1 << 20, test::kNvmePathKey).release();
      ::raise(sig);
    });
    INFO("signal " << sig);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
    CHECK_FALSE(exists_no_follow(scratch.file("nvme/zero/job")));
    CHECK_THAT(read_text(log), Catch::Contains("removed swap directory"));
  }
}

// The child of the next case, in a process of its own (started afresh, not forked: exit() runs
// the atexit hooks and static destructors, which a fork of this multithreaded runner could
// hang in): a swap directory in ZERO_TEST_SWAP_EXIT_DIR, then exit(3) without destroying it.
TEST_CASE("swap exit child: leaves by exit() with a swap directory", "[.swap-exit-child]") {
  const char* nvme = std::getenv("ZERO_TEST_SWAP_EXIT_DIR");
  REQUIRE(nvme != nullptr);
  // Held from statics, as a program that never destroys its engine holds it: reachable, so not
  // a leak to LeakSanitizer.
  static std::unique_ptr<SwapDirectory> dir;
  static std::unique_ptr<SwapFile> file;
  dir = std::make_unique<SwapDirectory>(nvme, "job", 0);
  file = dir->create("optimizer.swap", 1 << 20, test::kNvmePathKey);
  std::exit(3);
}

TEST_CASE("exit() without destroying the swap directory removes it", "[offload]") {
  ScratchDir scratch("exit");
  const std::string log = scratch.file("stderr");
  const std::string nvme = scratch.file("nvme");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "[.swap-exit-child]";
  char* argv[] = {self.data(), filter.data(), nullptr};
  std::vector<std::string> env_text;
  for (char** e = environ; *e != nullptr; ++e) env_text.emplace_back(*e);
  env_text.push_back("ZERO_TEST_SWAP_EXIT_DIR=" + nvme);
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, self.c_str(), &actions, nullptr, argv, env.data()) == 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK_FALSE(exists_no_follow(nvme + "/zero/job"));
  CHECK_THAT(read_text(log), Catch::Contains("exits without destroying"));
}

TEST_CASE("a kept swap directory survives SIGTERM and is named as left for inspection",
          "[offload]") {
  ScratchDir scratch("kept");
  const std::string log = scratch.file("stderr");
  const int status = in_child(log, [&] {
    auto* dir = new SwapDirectory(scratch.file("nvme"), "job", 0);
    dir->create("optimizer.swap", 1 << 20, test::kNvmePathKey).release();
    dir->keep("a step failed");
    ::raise(SIGTERM);
  });
  CHECK(WIFSIGNALED(status));
  CHECK(exists_no_follow(scratch.file("nvme/zero/job/rank0/optimizer.swap")));
  CHECK_THAT(read_text(log), Catch::Contains("left for inspection") &&
                                 Catch::Contains(scratch.file("nvme/zero/job/rank0")));
}

TEST_CASE("a signal the process handles itself is left to it", "[offload]") {
  ScratchDir scratch("handled");
  const std::string log = scratch.file("stderr");
  const int status = in_child(log, [&] {
    ::signal(SIGTERM, SIG_IGN);
    {
      SwapDirectory dir(scratch.file("nvme"), "job", 0);
      ::raise(SIGTERM);  // ignored: the process goes on and destroys the directory itself
      if (!exists_no_follow(dir.path())) ::_exit(4);
    }
    ::_exit(exists_no_follow(scratch.file("nvme/zero/job")) ? 5 : 0);
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("remove_swap_directories_now removes what is registered, as zero_abort does",
          "[offload]") {
  ScratchDir scratch("now");
  const std::string log = scratch.file("stderr");
  const int status = in_child(log, [&] {
    auto* dir = new SwapDirectory(scratch.file("nvme"), "job", 0);
    dir->create("optimizer.swap", 1 << 20, test::kNvmePathKey).release();
    remove_swap_directories_now("aborting the job (test)");
    ::_exit(exists_no_follow(dir->path()) ? 1 : 0);
  });
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_THAT(read_text(log), Catch::Contains("aborting the job (test)"));
}

}  // namespace zero::offload
