// Durable file-system steps for checkpoints (see durable.h).
#include "checkpoint/durable.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"

namespace zero::checkpoint {
namespace {

std::string parent_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void write_all(int fd, const std::string& path, std::string_view text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw make_error(ErrorCategory::io, "cannot write {} at offset {}: {}", path, done,
                       errno_text(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

int create_temporary(const std::string& path, unsigned mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      throw make_error(ErrorCategory::io,
                       "cannot create the temporary file {}: a directory is in the way; remove it",
                       path);
    }
    // A file left by a crash, or a link someone planted: the name goes, what it points to stays.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      throw make_error(ErrorCategory::io, "cannot remove the leftover {}: {}", path,
                       errno_text(errno));
    }
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                static_cast<mode_t>(mode));
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    throw make_error(ErrorCategory::io, "cannot create {}: {}{}", path, errno_text(err),
                     err == EEXIST ? " (something made it again at once: another process writes "
                                     "in this directory)"
                                   : "");
  }
  return fd;
}

void claim_temporary(const std::string& path, unsigned mode) {
  ::close(create_temporary(path, mode));
}

std::string tag_problem(std::string_view tag) {
  if (tag.empty()) return "it is empty";
  if (tag == "." || tag == "..") return "it names a directory, not a tag";
  if (tag.front() == '.') return "it starts with '.' (hidden names are zero's own temporaries)";
  if (tag == "latest") return "\"latest\" is the pointer file itself";
  if (tag.find('/') != std::string_view::npos)
    return "it holds a '/' (a tag is one name inside DIR)";
  if (tag.find('\0') != std::string_view::npos) return "it holds a NUL";
  if (tag.size() > 200) return "it is over 200 characters";
  return {};
}

void remove_leftovers(const std::string& dir, const std::string& keep) {
  std::error_code error;
  std::vector<std::string> leftovers;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const auto ends_with = [&](std::string_view tail) {
      return name.size() > tail.size() &&
             name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool hidden_work =
        name.front() == '.' && (ends_with(".saving") || ends_with(".deleting"));
    if (name != keep && (hidden_work || name == "latest.tmp")) leftovers.push_back(name);
  }
  for (const std::string& name : leftovers) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    remove_tree(path);
    log::info("checkpoint: removed {}, left by a save or prune that did not finish", path);
  }
}

void write_file_durably(const std::string& path, std::string_view text) {
  const std::string temporary = path + ".tmp";
  const int fd = create_temporary(temporary);
  try {
    write_all(fd, temporary, text);
    if (::fsync(fd) != 0) {
      throw make_error(ErrorCategory::io, "cannot fsync {}: {}", temporary, errno_text(errno));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw make_error(ErrorCategory::io, "cannot rename {} to {}: {}", temporary, path,
                     errno_text(err));
  }
  sync_directory(parent_of(path));
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw make_error(ErrorCategory::io, "cannot open directory {} to sync it: {}", dir,
                     errno_text(errno));
  }
  const int ret = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); their renames are as durable as they get.
  if (ret != 0 && err != EINVAL) {
    throw make_error(ErrorCategory::io, "cannot fsync directory {}: {}", dir, errno_text(err));
  }
}

void replace_directory(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    sync_directory(parent_of(to));
    return;
  }
  if (errno != EEXIST) {
    // EINVAL: a file system without RENAME_NOREPLACE; a plain rename does for a new name.
    if (errno == EINVAL && !std::filesystem::exists(to) &&
        ::rename(from.c_str(), to.c_str()) == 0) {
      sync_directory(parent_of(to));
      return;
    }
    throw make_error(ErrorCategory::io, "cannot move {} to {}: {}", from, to, errno_text(errno));
  }
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
    throw make_error(ErrorCategory::io,
                     "cannot put {} in place of the existing {} (renameat2 RENAME_EXCHANGE): {}; "
                     "save under a new tag, or remove the old one first",
                     from, to, errno_text(errno));
  }
  sync_directory(parent_of(to));
  remove_tree(from);  // the old content
}

void make_directories(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw make_error(ErrorCategory::io, "cannot create directory {}: {}", dir, error.message());
  }
}

void remove_tree(const std::string& path) {
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) throw make_error(ErrorCategory::io, "cannot remove {}: {}", path, error.message());
}

std::string read_latest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "latest").string();
  std::ifstream in(path);
  std::string tag;
  if (in) std::getline(in, tag);
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  if (tag.empty()) {
    throw make_error(ErrorCategory::io,
                     "{}: {}; is {} a checkpoint directory? Name the tag to load explicitly", path,
                     in ? "empty" : "missing", dir);
  }
  if (const std::string problem = tag_problem(tag); !problem.empty()) {
    throw make_error(ErrorCategory::io,
                     "{} names \"{}\", which is not a tag directory inside {}: {}; zero never "
                     "follows latest out of its directory. Name the tag to load explicitly",
                     path, tag, dir, problem);
  }
  const std::string tag_dir = (std::filesystem::path(dir) / tag).string();
  struct stat st {};
  if (::lstat(tag_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
    throw make_error(ErrorCategory::io,
                     "{} names \"{}\", but {} is {}, not a tag directory; name the tag to load "
                     "explicitly",
                     path, tag, tag_dir, S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
  }
  return tag;
}

}  // namespace zero::checkpoint
