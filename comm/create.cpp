// The run-time choice of backend and the bootstrap of NCCL (through MPI, or a rendezvous file).
#include "comm/create.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "comm/backends.h"
#include "comm/rendezvous.h"
#include "device/device.h"

namespace zero::comm {

std::optional<Backend> parse_backend(std::string_view text) noexcept {
  if (text == "auto" || text == "automatic") return Backend::automatic;
  if (text == "local") return Backend::local;
  if (text == "mpi") return Backend::mpi;
  if (text == "nccl") return Backend::nccl;
  return std::nullopt;
}

std::string_view backend_name(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic:
      return "auto";
    case Backend::local:
      return "local";
    case Backend::mpi:
      return "mpi";
    case Backend::nccl:
      return "nccl";
  }
  return "?";
}

std::optional<Progress> parse_progress(std::string_view text) noexcept {
  if (text == "auto" || text == "automatic") return Progress::automatic;
  if (text == "thread") return Progress::thread;
  if (text == "poll") return Progress::poll;
  return std::nullopt;
}

std::string_view progress_name(Progress progress) noexcept {
  switch (progress) {
    case Progress::automatic:
      return "auto";
    case Progress::thread:
      return "thread";
    case Progress::poll:
      return "poll";
  }
  return "?";
}

namespace {

bool cuda_device(const CommOptions& options) {
  return options.device != nullptr && options.device->type() == DeviceType::cuda;
}

Backend choose(const CommOptions& options, const LaunchInfo& launch) {
  Backend backend = options.backend;
  if (backend == Backend::automatic) {
    if (const char* text = std::getenv("ZERO_COMM_BACKEND")) {
      const auto parsed = parse_backend(text);
      if (!parsed) {
        throw make_error(ErrorCategory::usage,
                         "ZERO_COMM_BACKEND='{}': expected auto, local, mpi or nccl", text);
      }
      backend = *parsed;
    }
  }
  if (backend == Backend::automatic) {
    if (launch.world_size == 1) return Backend::local;
    if (cuda_device(options) && backend_built(Backend::nccl)) return Backend::nccl;
    return Backend::mpi;
  }
  return backend;
}

void require_built(Backend backend) {
  if (backend_built(backend)) return;
  throw make_error(ErrorCategory::comm,
                   "the {} backend is not in this build of zero; rebuild with -DZERO_WITH_{}=ON "
                   "where its library is installed, or choose another (ZERO_COMM_BACKEND)",
                   backend_name(backend), backend == Backend::mpi ? "MPI" : "NCCL");
}

// Rank 0's NCCL id reaches the others through MPI when the launcher was MPI's, else through
// the rendezvous directory.
ShareId id_sharing(const CommOptions& options, const LaunchInfo& launch,
                   std::unique_ptr<Communicator>& bootstrap) {
  if (launch.world_size == 1) return [](void*, std::size_t) {};
  if (launch.mpi_launcher && backend_built(Backend::mpi)) {
    CommOptions host = options;
    host.device = nullptr;
    host.backend = Backend::mpi;
    bootstrap = make_mpi_communicator(host);
    return [&bootstrap](void* id, std::size_t bytes) {
      // Broadcast as int64 words: zero's dtypes have no bytes.
      std::vector<std::int64_t> words((bytes + 7) / 8);
      std::memcpy(words.data(), id, bytes);
      bootstrap->broadcast(words.data(), words.size(), DType::i64, 0).wait();
      std::memcpy(id, words.data(), bytes);
    };
  }
  if (launch.rendezvous_dir.empty()) {
    throw make_error(ErrorCategory::comm,
                     "NCCL needs rank 0's id on every rank: launch through mpirun/srun with MPI "
                     "built, or set ZERO_RENDEZVOUS_DIR to a fresh directory all ranks can see");
  }
  return [&options, launch](void* id, std::size_t bytes) {
    auto* data = static_cast<unsigned char*>(id);
    const std::string name = "nccl-unique-id";
    if (launch.rank == 0) {
      publish_rendezvous(launch.rendezvous_dir, name, {data, data + bytes});
    } else {
      const auto got =
          await_rendezvous(launch.rendezvous_dir, name, bytes, options.rendezvous_timeout);
      std::copy(got.begin(), got.end(), data);
    }
  };
}

}  // namespace

bool backend_built(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic:
    case Backend::local:
      return true;
    case Backend::mpi:
      return mpi_backend_built();
    case Backend::nccl:
      return nccl_backend_built();
  }
  return false;
}

std::unique_ptr<Communicator> create_communicator(const CommOptions& options) {
  const LaunchInfo launch = options.launch ? *options.launch : detect_launch();
  // Log lines say which rank wrote them from here on.
  log::set_rank(launch.rank);
  const Backend backend = choose(options, launch);
  require_built(backend);
  log::debug("communicator: {} backend, rank {} of {} (launcher {})", backend_name(backend),
             launch.rank, launch.world_size, launch.launcher);
  switch (backend) {
    case Backend::local:
      if (launch.world_size != 1) {
        throw make_error(ErrorCategory::comm,
                         "the local backend is a world of one, but the launcher ({}) started {} "
                         "ranks; use mpi or nccl",
                         launch.launcher, launch.world_size);
      }
      return make_local_communicator(options);
    case Backend::mpi: {
      auto comm = make_mpi_communicator(options);
      if (launch.launcher != "none" && comm->size() != launch.world_size) {
        throw make_error(ErrorCategory::comm,
                         "MPI sees {} ranks but the launcher ({}) says {}: was the program started "
                         "by a launcher of another MPI?",
                         comm->size(), launch.launcher, launch.world_size);
      }
      return comm;
    }
    case Backend::nccl: {
      std::unique_ptr<Communicator> bootstrap;
      const ShareId share = id_sharing(options, launch, bootstrap);
      return make_nccl_communicator(options, launch, share);
    }
    case Backend::automatic:
      break;
  }
  throw Error(ErrorCategory::internal, "no communicator backend chosen");
}

std::unique_ptr<Communicator> wrap_mpi_communicator(const void* mpi_comm,
                                                    const CommOptions& options) {
  require_built(Backend::mpi);
  if (mpi_comm == nullptr) {
    throw Error(ErrorCategory::usage, "wrap_mpi_communicator: the MPI_Comm pointer is null");
  }
  return wrap_mpi(mpi_comm, options);
}

std::unique_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, const CommOptions& options) {
  require_built(Backend::nccl);
  if (nccl_comm == nullptr) {
    throw Error(ErrorCategory::usage, "wrap_nccl_communicator: the ncclComm_t is null");
  }
  return wrap_nccl(nccl_comm, options);
}

}  // namespace zero::comm
