// Creating the job's communicator: the backend chosen at run time from the launcher, the
// device and what this build has.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "comm/launch.h"

namespace zero {

class Device;

namespace comm {

enum class Backend { automatic, local, mpi, nccl };

// How the MPI backend makes progress while the caller computes: a progress thread, or the
// caller's own test()/wait() calls. automatic: ZERO_MPI_PROGRESS (thread|poll), else the
// default docs/design.md justifies with figures.
enum class Progress { automatic, thread, poll };

struct CommOptions {
  // automatic: ZERO_COMM_BACKEND when set; else local for a world of one, nccl for a CUDA
  // device when NCCL is built, else mpi.
  Backend backend = Backend::automatic;
  std::chrono::milliseconds timeout = std::chrono::seconds(1800);  // comm_timeout_s
  // Where the buffers live: nullptr or the CPU device means host memory. MPI stages device
  // buffers through pinned memory; NCCL needs a CUDA device.
  Device* device = nullptr;
  Progress progress = Progress::automatic;
  // Tests: send host buffers through MPI's device-buffer path (pinned staging and copies), so
  // that machines without a GPU exercise it too.
  bool stage_host_buffers = false;
  // MPI: all_reduce and broadcast are issued as pieces of at most this many bytes, all in
  // flight at once. Open MPI's nonblocking collectives allocate a temporary per call, and above
  // glibc's mmap threshold (up to 32 MiB) that means fresh pages every call: pieces of 16 MiB
  // doubled large all_reduce bandwidth here. Pieces also lift MPI's int count limit.
  std::size_t mpi_piece_bytes = std::size_t{16} << 20;
  // The launch; detect_launch() when empty.
  std::optional<LaunchInfo> launch;
  // How long ranks wait for rank 0's rendezvous file (NCCL without MPI).
  std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(300);
};

std::optional<Backend> parse_backend(std::string_view text) noexcept;
std::string_view backend_name(Backend backend) noexcept;
std::optional<Progress> parse_progress(std::string_view text) noexcept;
std::string_view progress_name(Progress progress) noexcept;

// Which backends this build has ("local", "mpi", "nccl").
bool backend_built(Backend backend) noexcept;

// Collective over the job: every rank must call it. Throws a comm Error saying what is
// missing (a backend not built, no launcher for a world above one, a rendezvous timeout).
std::unique_ptr<Communicator> create_communicator(const CommOptions& options = {});

// An embedder's own communicators: `mpi_comm` points to an MPI_Comm, `nccl_comm` is an
// ncclComm_t. zero duplicates the MPI one and never frees or aborts the embedder's handle
// except through Communicator::abort.
std::unique_ptr<Communicator> wrap_mpi_communicator(const void* mpi_comm,
                                                    const CommOptions& options = {});
std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm,
                                                     const CommOptions& options = {});

}  // namespace comm
}  // namespace zero
