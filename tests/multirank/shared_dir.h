// A directory every rank of a multi-rank test names alike (rank 0's pid in its name), made by
// rank 0 on construction and removed by it at the end, with barriers so that no rank uses it
// before it exists or after it is gone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <unistd.h>

#include "multirank.h"

namespace zero::testing {

struct SharedDir {
  std::filesystem::path path;
  explicit SharedDir(const std::string& name) {
    std::int64_t pid = getpid();
    side_channel().broadcast(&pid, 1, DType::i64, 0).wait();
    path = std::filesystem::current_path() / (name + "-" + std::to_string(pid));
    side_channel().barrier().wait();
    if (side_channel().rank() == 0) std::filesystem::create_directories(path);
    side_channel().barrier().wait();
  }
  ~SharedDir() {
    side_channel().barrier().wait();
    std::error_code ignored;
    if (side_channel().rank() == 0) std::filesystem::remove_all(path, ignored);
  }
  SharedDir(const SharedDir&) = delete;
  SharedDir& operator=(const SharedDir&) = delete;
};

}  // namespace zero::testing
