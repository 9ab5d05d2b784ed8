// File-system steps that survive a crash at any point: files written under a temporary name,
// fsynced and renamed; directories fsynced after the renames in them; a finished tag directory
// put in place of an older one by exchanging the two. Each throws an io Error naming the path
// and strerror.
#pragma once

#include <string>
#include <string_view>

namespace zero::checkpoint {

// Writes `text` to `path` durably: `path`.tmp, fsync, rename over `path`, fsync of the parent.
void write_file_durably(const std::string& path, std::string_view text);

// fsync of a directory: makes the creations, renames and removals in it durable.
void sync_directory(const std::string& dir);

// Moves the directory `from` to `to` atomically: `to` is either its old self or `from`'s
// content, never a mix. An existing `to` is exchanged with `from` (renameat2 RENAME_EXCHANGE)
// and the old content, now at `from`, removed. Syncs the parent.
void replace_directory(const std::string& from, const std::string& to);

// Creates `dir` and its parents (mode 0755) when missing.
void make_directories(const std::string& dir);

// Removes `path` and everything under it; missing is fine.
void remove_tree(const std::string& path);

// The tag named by DIR/latest (its first line, trimmed). Throws an io Error when it is missing
// or empty, saying to pass a tag.
std::string read_latest(const std::string& dir);

}  // namespace zero::checkpoint
