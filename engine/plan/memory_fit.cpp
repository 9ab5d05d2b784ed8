// MemoryFit: the run against what the machine has free (see memory_fit.h).
#include "engine/plan/memory_fit.h"

#include <cstdlib>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"
#include "base/log.h"
#include "device/memory_probe.h"
#include "offload/disk_space.h"

namespace zero::engine {
namespace {

using json = nlohmann::json;

// ZERO_MEMORY_CHECK: "off", "warn", or refuse (unset, or anything else).
enum class CheckMode { refuse, warn, off };

CheckMode check_mode() {
  const char* value = std::getenv("ZERO_MEMORY_CHECK");
  if (value == nullptr) return CheckMode::refuse;
  const std::string text(value);
  if (text == "off" || text == "0") return CheckMode::off;
  if (text == "warn") return CheckMode::warn;
  return CheckMode::refuse;
}

std::optional<FreeNote::Disk> disk_note(const std::string& path) {
  const auto space = offload::disk_space(path);
  if (!space) return std::nullopt;
  return FreeNote::Disk{space->filesystem, space->free, space->probed, "statvfs"};
}

}  // namespace

void MemoryFit::note_free(Agreement& agreement, const Device& device, const config::Config& config,
                          const StateModes& modes) {
  FreeNote note;
  note.machine = memory_probe::machine_id();
  if (const auto host = memory_probe::host_available()) {
    note.host = host->bytes;
    note.host_source = host->source;
  }
  const auto own = device.own_memory();
  own_gpu_memory_ = own.has_value();
  if (own) note.gpu = FreeNote::Gpu{own->id, own->free, "cudaMemGetInfo"};
  if (modes.optimizer_nvme) {
    note.optimizer_disk = disk_note(config.zero.offload_optimizer.nvme_path);
  }
  if (modes.param_nvme) note.param_disk = disk_note(config.zero.offload_param.nvme_path);
  notes_ = agreement.all_gather_text(fit_note(note));
}

void MemoryFit::declare(Tier tier, std::uint64_t bytes, std::string what) {
  if (tier == Tier::nvme) {
    throw make_error(ErrorCategory::usage,
                     "declare_memory: {} declared in the nvme tier; declare memory (device, "
                     "pinned or host), not file space",
                     what);
  }
  declared_.push_back(DeclaredMemory{tier, bytes, std::move(what)});
}

bool MemoryFit::fits(const MemoryPlan& plan, const config::Config& config,
                     Agreement& agreement) const {
  const std::vector<std::string> needs =
      agreement.all_gather_text(fit_need(plan, config, declared_, own_gpu_memory_));
  return fit_shortfalls(notes_, needs).empty();
}

void MemoryFit::check(const MemoryPlan& plan, const config::Config& config,
                      Agreement& agreement) const {
  json need = json::parse(fit_need(plan, config, declared_, own_gpu_memory_));
  need["mode"] = static_cast<int>(check_mode());
  // Page-locked memory over the lock limit stays pageable (host_memory.h); say so before.
  const std::uint64_t pinned = plan.reserved(Tier::pinned);
  if (const auto limit = memory_probe::memlock_limit();
      !own_gpu_memory_ && limit && pinned > *limit && ::geteuid() != 0 && agreement.rank() == 0) {
    log::warn(
        "init: the plan pins {} of host memory but `ulimit -l` allows {}: what is over stays "
        "pageable (copies to it run slower). Raise `ulimit -l` or grant CAP_IPC_LOCK, or set "
        "pin_memory false.",
        format_bytes(pinned), format_bytes(*limit));
  }
  const std::vector<std::string> needs = agreement.all_gather_text(need.dump());
  // Rank 0's ZERO_MEMORY_CHECK holds for every rank, so that all go on or all stop.
  const auto mode = static_cast<CheckMode>(json::parse(needs.front()).at("mode").get<int>());
  if (mode == CheckMode::off) return;
  const std::string shortfalls = fit_shortfalls(notes_, needs);
  if (shortfalls.empty()) return;
  if (mode == CheckMode::warn) {
    if (agreement.rank() == 0) {
      log::warn("init: the run may not fit this machine (ZERO_MEMORY_CHECK=warn: going on):{}",
                shortfalls);
    }
    return;
  }
  throw make_error(ErrorCategory::out_of_memory,
                   "init: the run does not fit this machine; nothing was reserved. Short:{}\n"
                   "Lower what the list names, or set ZERO_MEMORY_CHECK=warn to run anyway.",
                   shortfalls);
}

}  // namespace zero::engine
