// StartDir: a fresh directory per job for the ranks' arrival marks (see start_dir.h).
#include "tools/zero-run/start_dir.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include "base/error.h"

namespace zero::run {

std::string temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

StartDir::StartDir(const std::string& parent) {
  std::vector<char> pattern(parent.begin(), parent.end());
  const std::string tail = "/zero-run-start.XXXXXX";
  pattern.insert(pattern.end(), tail.begin(), tail.end());
  pattern.push_back('\0');
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw make_error(ErrorCategory::io,
                     "cannot make the ranks' start-up directory in {}: {} (--start-dir names "
                     "another)",
                     parent, errno_text(errno));
  }
  path_ = pattern.data();
}

StartDir::~StartDir() {
  if (DIR* d = ::opendir(path_.c_str())) {
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (name.rfind("rank", 0) == 0) names.push_back(name);  // only the ranks' marks
    }
    ::closedir(d);
    for (const std::string& name : names) ::unlink((path_ + "/" + name).c_str());
  }
  ::rmdir(path_.c_str());
}

}  // namespace zero::run
