// The directory where ranks mark their arrival at start-up (ZERO_START_DIR, read by
// comm/start_watch.h): made fresh for one job, removed with what the ranks wrote in it.
#pragma once

#include <string>

namespace zero::run {

// $TMPDIR, else /tmp.
std::string temp_dir();

class StartDir {
 public:
  // Makes `<parent>/zero-run-start.XXXXXX` (mkdtemp, 0700); an io Error naming it otherwise.
  explicit StartDir(const std::string& parent);
  ~StartDir();  // removes the ranks' marks and the directory
  StartDir(const StartDir&) = delete;
  StartDir& operator=(const StartDir&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace zero::run
