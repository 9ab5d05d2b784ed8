// The fit rules: what a run needs in each pool against what the machines have free (see
// fit_rules.h).
#include "engine/plan/fit_rules.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"

namespace zero::engine {
namespace {

using json = nlohmann::json;

// What to set to make an arena smaller, by arena.
std::string lower_keys(const MemoryPlan& plan, const ArenaPlan& arena,
                       const config::Config& config) {
  const auto& zero = config.zero;
  if (&arena == &plan.state) {
    // Name only what is not on yet.
    const bool optimizer_off = zero.offload_optimizer.device == config::OffloadDevice::none;
    if (zero.stage < 3) {
      return optimizer_off ? "a higher zero_optimization.stage, or offload_optimizer"
                           : "a higher zero_optimization.stage";
    }
    if (optimizer_off) return "offload_optimizer, or more ranks";
    return zero.offload_param.device == config::OffloadDevice::none ? "offload_param, or more ranks"
                                                                    : "more ranks";
  }
  if (&arena == &plan.grad) return "more ranks, or smaller modules";
  if (&arena == &plan.gather) {
    return "zero_optimization.stage3_max_live_parameters, "
           "stage3_param_persistence_threshold";
  }
  if (&arena == &plan.offload) {
    return zero.offload_optimizer.device == config::OffloadDevice::nvme
               ? "zero_optimization.sub_group_size, offload_optimizer.buffer_count, "
                 "offload_optimizer.max_in_cpu"
               : "offload_optimizer.device \"nvme\"";
  }
  if (&arena == &plan.param) {
    return zero.offload_param.device == config::OffloadDevice::nvme
               ? "offload_param.buffer_count, offload_param.buffer_size, offload_param.max_in_cpu"
               : "offload_param.device \"nvme\"";
  }
  if (&arena == &plan.nvme) return "offload_optimizer.nvme_path on a disk with more room";
  if (&arena == &plan.param_nvme) return "offload_param.nvme_path on a disk with more room";
  return "";
}

// One part of a rank's need in a pool: [name, bytes, what to lower].
json item(const std::string& name, std::uint64_t bytes, const std::string& lower) {
  return json::array({name, bytes, lower});
}

// A pool's need: its bytes and the parts they are made of.
struct Need {
  std::uint64_t bytes = 0;
  json items = json::array();
  void add(const std::string& name, std::uint64_t part, const std::string& lower = "") {
    if (part == 0) return;
    bytes += part;
    items.push_back(item(name, part, lower));
  }
  json to_json() const { return {{"bytes", bytes}, {"items", items}}; }
};

// The parts, largest first.
std::string describe_items(json items) {
  std::stable_sort(items.begin(), items.end(), [](const json& a, const json& b) {
    return a[1].get<std::uint64_t>() > b[1].get<std::uint64_t>();
  });
  std::string text;
  for (const json& part : items) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {}", part[0].get<std::string>(),
                        format_bytes(part[1].get<std::uint64_t>()));
    const std::string lower = part[2].get<std::string>();
    if (!lower.empty()) text += fmt::format(" (lower with {})", lower);
  }
  return text;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return fmt::format("rank {}", ranks[0]);
  return fmt::format("{} ranks ({})", ranks.size(), fmt::join(ranks, ", "));
}

}  // namespace

std::vector<Shortfall> fit_verdict(const std::vector<std::string>& notes,
                                   const std::vector<std::string>& needs) {
  struct Pool {
    Shortfall::Pool kind = Shortfall::Pool::host;
    std::string label;
    std::uint64_t free = 0;
    std::string source;
    std::uint64_t need = 0;
    std::vector<int> ranks;
    json first_items = json::array();  // the first rank's parts
    bool known = true;
  };
  std::map<std::string, Pool> pools;
  std::vector<std::string> order;  // pools by first appearance, for a stable message
  for (std::size_t r = 0; r < needs.size() && r < notes.size(); ++r) {
    const json note = json::parse(notes[r]);
    const json need = json::parse(needs[r]);
    const std::string machine = note.at("machine").get<std::string>();
    const std::string host_name = machine.substr(0, machine.find(" ("));  // without the boot id
    const auto add = [&](Shortfall::Pool kind, const std::string& key, const std::string& label,
                         const json& free_note, const std::string& source, const json& part) {
      if (part.at("bytes").get<std::uint64_t>() == 0) return;
      auto [it, fresh] = pools.try_emplace(key);
      Pool& pool = it->second;
      const bool known = !free_note.is_null();
      const std::uint64_t free = known ? free_note.get<std::uint64_t>() : 0;
      if (fresh) {
        order.push_back(key);
        pool.kind = kind;
        pool.label = label;
        pool.free = free;
        pool.source = source;
        pool.known = known;
      } else if (known && (!pool.known || free < pool.free)) {
        pool.free = free;
        pool.source = source;
        pool.known = true;
      }
      pool.need += part.at("bytes").get<std::uint64_t>();
      // A rank's parts may come in twice (both swap files on one file system).
      if (pool.ranks.empty() || pool.ranks.back() != static_cast<int>(r)) {
        pool.ranks.push_back(static_cast<int>(r));
      }
      if (pool.ranks.front() == static_cast<int>(r)) {
        for (const json& each : part.at("items")) pool.first_items.push_back(each);
      }
    };
    const json& host = note.at("host");
    add(Shortfall::Pool::host, "host " + machine, "host memory of " + host_name,
        host.is_null() ? json(nullptr) : host.at("free"),
        host.is_null() ? std::string() : host.at("source").get<std::string>(), need.at("host"));
    const json& gpu = note.at("gpu");
    if (!gpu.is_null()) {
      const std::string id = gpu.at("id").get<std::string>();
      add(Shortfall::Pool::gpu, "gpu " + machine + " " + id,
          "memory of GPU " + id + " on " + host_name, gpu.at("free"),
          gpu.at("source").get<std::string>(), need.at("gpu"));
    }
    for (const char* which : {"optimizer", "param"}) {
      const json& disk = note.at("disks").value(which, json(nullptr));
      if (disk.is_null()) continue;
      const std::string fs = disk.at("fs").get<std::string>();
      add(Shortfall::Pool::disk, "disk " + machine + " " + fs,
          fmt::format("disk space under {} ({}) on {}", disk.at("path").get<std::string>(), fs,
                      host_name),
          disk.at("free"), disk.at("source").get<std::string>(), need.at("disks").at(which));
    }
  }
  std::vector<Shortfall> shortfalls;
  for (const std::string& key : order) {
    const Pool& pool = pools.at(key);
    if (!pool.known || pool.need <= pool.free) continue;
    shortfalls.push_back(
        {pool.kind,
         fmt::format("{}: {} need {}, {} is free ({}). Rank {}'s: {}.", pool.label,
                     describe_ranks(pool.ranks), format_bytes(pool.need), format_bytes(pool.free),
                     pool.source, pool.ranks.front(), describe_items(pool.first_items))});
  }
  return shortfalls;
}

std::string fit_shortfalls(const std::vector<std::string>& notes,
                           const std::vector<std::string>& needs) {
  std::string text;
  for (const Shortfall& shortfall : fit_verdict(notes, needs)) text += "\n  - " + shortfall.text;
  return text;
}

std::string fit_note(const FreeNote& note) {
  json n;
  n["machine"] = note.machine;
  n["host"] = note.host ? json{{"free", *note.host}, {"source", note.host_source}} : json(nullptr);
  n["gpu"] =
      note.gpu ? json{{"id", note.gpu->id}, {"free", note.gpu->free}, {"source", note.gpu->source}}
               : json(nullptr);
  n["disks"] = json::object();
  const auto disk = [](const FreeNote::Disk& d) {
    return json{{"fs", d.filesystem}, {"free", d.free}, {"path", d.path}, {"source", d.source}};
  };
  if (note.optimizer_disk) n["disks"]["optimizer"] = disk(*note.optimizer_disk);
  if (note.param_disk) n["disks"]["param"] = disk(*note.param_disk);
  return n.dump();
}

std::string fit_need(const MemoryPlan& plan, const config::Config& config,
                     const std::vector<DeclaredMemory>& declared, bool own_gpu) {
  // Without a GPU the device tier is host memory too.
  const auto in_host = [&](Tier tier) {
    return tier == Tier::pinned || tier == Tier::host || (tier == Tier::device && !own_gpu);
  };
  Need host, gpu, disk_optimizer, disk_param;
  for (const ArenaPlan* arena : plan.arenas()) {
    if (!arena->made()) continue;
    if (arena == &plan.nvme) {
      disk_optimizer.add(arena->name, arena->capacity, lower_keys(plan, *arena, config));
    } else if (arena == &plan.param_nvme) {
      disk_param.add(arena->name, arena->capacity, lower_keys(plan, *arena, config));
    } else {
      (in_host(arena->tier) ? host : gpu)
          .add(arena->name, arena->capacity, lower_keys(plan, *arena, config));
    }
  }
  (in_host(Tier::device) ? host : gpu).add("scratch", plan.device_scratch_bytes);
  host.add("host scratch", plan.host_scratch_bytes);
  host.add("pinned scratch", plan.pinned_scratch_bytes);
  for (const DeclaredMemory& d : declared) {
    (in_host(d.tier) ? host : gpu).add(d.what + " (the program's)", d.bytes);
  }
  const json need = {
      {"host", host.to_json()},
      {"gpu", gpu.to_json()},
      {"disks", {{"optimizer", disk_optimizer.to_json()}, {"param", disk_param.to_json()}}}};
  return need.dump();
}

}  // namespace zero::engine
