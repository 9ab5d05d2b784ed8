// The rendezvous file: published atomically, awaited with a timeout, stale files refused.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <thread>

#include "base/error.h"
#include "comm/rendezvous.h"

namespace zero::comm {
namespace {

std::string fresh_directory(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("zero-rendezvous-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("a waiting rank receives the bytes rank 0 publishes later") {
  const std::string dir = fresh_directory("late");
  const std::vector<unsigned char> id = {1, 2, 3, 250, 0, 7};
  std::thread rank0([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    publish_rendezvous(dir, "id", id);
  });
  const auto got = await_rendezvous(dir, "id", id.size(), std::chrono::seconds(30));
  rank0.join();
  CHECK(got == id);
  // Nothing but the final file is left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a file left by an earlier job is refused by rank 0") {
  const std::string dir = fresh_directory("stale");
  publish_rendezvous(dir, "id", {1, 2});
  CHECK_THROWS_WITH(
      publish_rendezvous(dir, "id", {3, 4}),
      Catch::Contains("already exists") && Catch::Contains("fresh ZERO_RENDEZVOUS_DIR"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("waiting for a file that never comes is a timeout naming the path") {
  const std::string dir = fresh_directory("never");
  try {
    await_rendezvous(dir, "id", 4, std::chrono::milliseconds(100));
    FAIL("no timeout");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::timeout);
    CHECK_THAT(error.what(),
               Catch::Contains(dir + "/id") && Catch::Contains("rank 0 did not publish"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a rendezvous file of the wrong size is an error, not a truncated id") {
  const std::string dir = fresh_directory("size");
  publish_rendezvous(dir, "id", {1, 2, 3});
  CHECK_THROWS_WITH(await_rendezvous(dir, "id", 4, std::chrono::seconds(1)),
                    Catch::Contains("holds 3 bytes where 4 were expected"));
  std::filesystem::remove_all(dir);
}

}  // namespace zero::comm
