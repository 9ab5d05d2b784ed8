// File-system steps that survive a crash at any point: files written under a temporary name,
// fsynced and renamed; directories fsynced after the renames in them; a finished tag directory
// put in place of an older one by exchanging the two. Each throws an io Error naming the path
// and strerror.
#pragma once

#include <string>
#include <string_view>

namespace zero::checkpoint {

// Writes `text` to `path` durably: `path`.tmp (made new: see create_temporary), fsync, rename
// over `path` (a link there is replaced, not followed), fsync of the parent.
void write_file_durably(const std::string& path, std::string_view text);

// Creates the temporary file `path` new and returns its descriptor (write-only): a leftover
// there (a file from a crash, or a planted link) is unlinked first, never followed, and the
// file is opened O_CREAT|O_EXCL|O_NOFOLLOW, so nothing that exists is ever written through. A
// directory there is an io Error.
int create_temporary(const std::string& path, unsigned mode = 0644);
// create_temporary, closing the descriptor: the empty file is then the caller's to open.
void claim_temporary(const std::string& path, unsigned mode = 0644);

// What is wrong with `tag` as the name of a tag directory inside DIR (empty, ".", "..", a
// leading '.', "latest", a '/', a NUL, over 200 characters); empty when it is fine.
std::string tag_problem(std::string_view tag);

// Removes what an interrupted save or prune leaves in a checkpoint directory: `.<tag>.saving/`
// and `.<tag>.deleting/` directories and `latest.tmp` (none of them a checkpoint); logs each.
// `keep`, when not empty, is a name left alone (the save in progress).
void remove_leftovers(const std::string& dir, const std::string& keep = "");

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
// or empty, saying to pass a tag, and when it names anything but a tag directory inside DIR
// (an absolute path, "../x", a hidden name, a link): `latest` is never followed out of DIR.
std::string read_latest(const std::string& dir);

}  // namespace zero::checkpoint
