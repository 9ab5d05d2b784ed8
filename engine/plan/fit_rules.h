// The rules by which a run fits the machines (MemoryFit's check at init, memory_fit.h), as pure
// functions over JSON texts: what one rank's machine has free (its note), what one rank needs in
// each pool (host memory per machine, one GPU's memory, one file system) from the memory plan and
// the declared memory, and the verdict over every rank's note and need. Shared with zero-mem,
// which applies them to the machine it is asked about, so that its answer is init's. No
// communicator, no probing: the caller gathers the notes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "device/device.h"
#include "engine/plan/memory_plan.h"

namespace zero::engine {

// Memory a program holds beside the engine (MemoryFit::declare).
struct DeclaredMemory {
  Tier tier;
  std::uint64_t bytes;
  std::string what;
};

// What one rank's machine has free, as note_free gathers it (JSON text). A figure left out is
// not known, and its pool is not judged.
struct FreeNote {
  std::string machine;  // ranks with the same name share its host memory and disks
  std::optional<std::uint64_t> host;
  std::string host_source;  // where the host figure comes from
  struct Gpu {
    std::string id;  // ranks with the same id share the GPU
    std::uint64_t free = 0;
    std::string source;
  };
  std::optional<Gpu> gpu;
  struct Disk {
    std::string filesystem;  // swap files on one file system share it
    std::uint64_t free = 0;
    std::string path;
    std::string source;
  };
  std::optional<Disk> optimizer_disk, param_disk;  // under each nvme_path in use
};
std::string fit_note(const FreeNote& note);

// One rank's need in each pool (JSON text): the plan's arenas by tier (the device tier in the
// host's pool unless `own_gpu`), its scratch, and the declared memory, each part with the keys
// that shrink it.
std::string fit_need(const MemoryPlan& plan, const config::Config& config,
                     const std::vector<DeclaredMemory>& declared, bool own_gpu);

// A pool whose ranks need more than its least free figure, and the line that says so.
struct Shortfall {
  enum class Pool { host, gpu, disk } pool;
  std::string text;
};
// From every rank's note and need, in rank order.
std::vector<Shortfall> fit_verdict(const std::vector<std::string>& notes,
                                   const std::vector<std::string>& needs);
// The same as one text, a line per short pool; empty when everything fits.
std::string fit_shortfalls(const std::vector<std::string>& notes,
                           const std::vector<std::string>& needs);

}  // namespace zero::engine
