// What unit tests of several folders share: a scratch directory on the build tree's disk, and
// the Error a call throws.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <unistd.h>

#include "base/error.h"

namespace zero::testing {

// A fresh directory under the build directory, removed when the test ends. Not /tmp: O_DIRECT
// fails on tmpfs, which /tmp often is.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::path(ZERO_BINARY_DIR) / "test-scratch" /
              (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The Error `f` throws; a test failure when it throws none.
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& error) {
    return error;
  }
  FAIL("no error");
  return Error(ErrorCategory::internal, "unreachable");
}

}  // namespace zero::testing
