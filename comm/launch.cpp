// Reading the launcher's environment.
#include "comm/launch.h"

#include <charconv>
#include <cstdlib>
#include <vector>

#include "base/error.h"

namespace zero::comm {

Environment process_environment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

namespace {

// The names one launcher uses; local ones may be missing (then derived or defaulted).
struct Scheme {
  const char* launcher;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  bool mpi;
  const char* requires_also = nullptr;  // a variable that must be set for the scheme to apply
};

// Order matters: an explicit ZERO_RANK beats the launcher's variables, and the torchrun names
// are generic enough that they are read last.
const std::vector<Scheme>& schemes() {
  static const std::vector<Scheme> all = {
      {"zero", "ZERO_RANK", "ZERO_WORLD_SIZE", "ZERO_LOCAL_RANK", "ZERO_LOCAL_SIZE", false},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
       "OMPI_COMM_WORLD_LOCAL_SIZE", true},
      {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", true,
       "SLURM_STEP_ID"},
      {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", true},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", false},
  };
  return all;
}

int read_int(const char* name, const std::string& text, int minimum) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [pointer, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || pointer != end || value < minimum) {
    throw make_error(ErrorCategory::usage,
                     "the launcher variable {}='{}' is not an integer >= {}; unset it or fix the "
                     "launch",
                     name, text, minimum);
  }
  return value;
}

}  // namespace

LaunchInfo detect_launch(const Environment& environment) {
  LaunchInfo info;
  if (auto dir = environment("ZERO_RENDEZVOUS_DIR")) info.rendezvous_dir = *dir;
  for (const Scheme& scheme : schemes()) {
    const auto rank = environment(scheme.rank);
    const auto size = environment(scheme.size);
    if (!rank || !size) continue;
    if (scheme.requires_also != nullptr && !environment(scheme.requires_also)) continue;
    info.launcher = scheme.launcher;
    info.mpi_launcher = scheme.mpi;
    info.rank = read_int(scheme.rank, *rank, 0);
    info.world_size = read_int(scheme.size, *size, 1);
    if (info.rank >= info.world_size) {
      throw make_error(ErrorCategory::usage, "the launcher says rank {} ({}) of {} ranks ({})",
                       info.rank, scheme.rank, info.world_size, scheme.size);
    }
    // Without a local rank, assume one node: the local rank is the rank.
    info.local_rank = info.rank;
    info.local_size = info.world_size;
    if (auto local = environment(scheme.local_rank)) {
      info.local_rank = read_int(scheme.local_rank, *local, 0);
    }
    if (auto local = environment(scheme.local_size)) {
      // Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)" on uneven nodes: the leading count.
      std::string text = *local;
      text = text.substr(0, text.find('('));
      info.local_size = read_int(scheme.local_size, text, 1);
    }
    return info;
  }
  return info;
}

LaunchInfo detect_launch() {
  return detect_launch(process_environment());
}

}  // namespace zero::comm
