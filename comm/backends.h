// The backends' entry points, for create.cpp. Each backend is its own library target; a build
// without MPI or NCCL links a stub whose functions throw a comm Error saying so.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "comm/create.h"

namespace zero::comm {

// True in the real backend targets, false in their stubs.
bool mpi_backend_built() noexcept;
bool nccl_backend_built() noexcept;

std::unique_ptr<Communicator> make_local_communicator(const CommOptions& options);

// MPI: initialises MPI when the process has not (and finalizes it at exit); the world is
// MPI_COMM_WORLD duplicated.
std::unique_ptr<Communicator> make_mpi_communicator(const CommOptions& options);
std::unique_ptr<Communicator> wrap_mpi(const void* mpi_comm, const CommOptions& options);

// NCCL: `share_id` makes rank 0's unique id (the bytes at `id`, `bytes` long) known to every
// rank: it is called on every rank, rank 0's bytes being the ones to keep.
using ShareId = std::function<void(void* id, std::size_t bytes)>;
std::unique_ptr<Communicator> make_nccl_communicator(const CommOptions& options,
                                                     const LaunchInfo& launch,
                                                     const ShareId& share_id);
std::unique_ptr<Communicator> wrap_nccl(void* nccl_comm, const CommOptions& options);

}  // namespace zero::comm
