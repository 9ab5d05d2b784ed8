// A rendezvous through a directory every rank can read (one node, or a shared file system):
// rank 0 publishes a small blob (NCCL's unique id) as a file, the others wait for it.
//
// The directory must be fresh for each job: a file left by an earlier job is refused rather
// than read, since ranks reading a stale id would hang in NCCL's init instead of failing.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace zero::comm {

// Writes `bytes` to `directory`/`name` atomically (a temporary file renamed into place).
// Throws an io Error when the file already exists or cannot be written.
void publish_rendezvous(const std::string& directory, const std::string& name,
                        const std::vector<unsigned char>& bytes);

// Waits until `directory`/`name` exists and holds `size` bytes, then returns them. Throws a
// timeout Error naming the path after `timeout`.
std::vector<unsigned char> await_rendezvous(const std::string& directory, const std::string& name,
                                            std::size_t size, std::chrono::milliseconds timeout);

}  // namespace zero::comm
