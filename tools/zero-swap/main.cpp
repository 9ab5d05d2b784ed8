// zero-swap: the NVMe swap directories on a disk, and the removal of those whose job ended
// without removing them (SIGKILL, a crash, a lost node). A running job's are never touched.
//
//   zero-swap list  [NVME_PATH...] [--config ds_config.json] [--json]
//   zero-swap clean [NVME_PATH...] [--config ds_config.json] [--dry-run] [--other-hosts]
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"
#include "offload/swap_jobs.h"

namespace {

using zero::offload::SwapJob;
using zero::offload::SwapJobState;

// The nvme_path values of a DeepSpeed config (offload_optimizer's and offload_param's).
std::vector<std::string> paths_of_config(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(fmt::format("--config {}: cannot read it", file));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, false, true);
  if (!j.is_object()) throw std::runtime_error(fmt::format("--config {}: not a JSON object", file));
  std::vector<std::string> paths;
  const auto zero = j.find("zero_optimization");
  if (zero == j.end() || !zero->is_object()) return paths;
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    const auto s = zero->find(section);
    if (s == zero->end() || !s->is_object()) continue;
    const auto path = s->find("nvme_path");
    if (path != s->end() && path->is_string() && !path->get<std::string>().empty()) {
      const std::string p = path->get<std::string>();
      if (std::find(paths.begin(), paths.end(), p) == paths.end()) paths.push_back(p);
    }
  }
  if (paths.empty()) {
    throw std::runtime_error(
        fmt::format("--config {}: no zero_optimization.offload_optimizer "
                    "or offload_param nvme_path in it",
                    file));
  }
  return paths;
}

std::vector<std::string> all_paths(std::vector<std::string> paths, const std::string& config) {
  if (!config.empty()) {
    for (const std::string& p : paths_of_config(config)) paths.push_back(p);
  }
  if (paths.empty()) {
    throw std::invalid_argument("name the nvme_path to look in (NVME_PATH or --config)");
  }
  return paths;
}

int list(const std::vector<std::string>& paths, bool as_json) {
  const std::int64_t now = std::time(nullptr);
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& path : paths) {
    const std::vector<SwapJob> jobs = zero::offload::find_swap_jobs(path);
    if (!as_json) {
      std::printf("%s/zero: %zu job director%s\n", path.c_str(), jobs.size(),
                  jobs.size() == 1 ? "y" : "ies");
    }
    for (const SwapJob& job : jobs) {
      if (as_json) {
        out.push_back({{"path", job.path},
                       {"bytes", job.bytes},
                       {"age_s", now - job.created_unix},
                       {"stale", job.stale(now)},
                       {"state", job.state_text()},
                       {"ranks", job.owners.size()}});
        continue;
      }
      std::printf("  %-12s %10s %10s  %s%s\n", job.id.c_str(),
                  zero::format_bytes(job.bytes).c_str(),
                  zero::offload::format_age(now - job.created_unix).c_str(),
                  job.state_text().c_str(), job.stale(now) ? "  [stale]" : "");
    }
  }
  if (as_json) std::cout << out.dump(1) << "\n";
  return 0;
}

int clean(const std::vector<std::string>& paths, bool dry_run, bool other_hosts) {
  const std::int64_t now = std::time(nullptr);
  std::uint64_t freed = 0;
  int removed = 0, partly = 0, failed = 0;
  for (const std::string& path : paths) {
    for (const SwapJob& job : zero::offload::find_swap_jobs(path)) {
      const bool elsewhere = job.state == SwapJobState::elsewhere;
      if (!job.stale(now) && !(elsewhere && other_hosts)) {
        std::printf("kept    %s: %s%s\n", job.path.c_str(), job.state_text().c_str(),
                    elsewhere ? " (--other-hosts removes it when you know it ended)" : "");
        continue;
      }
      if (dry_run) {
        std::printf("would remove %s (%s): %s\n", job.path.c_str(),
                    zero::format_bytes(job.bytes).c_str(), job.state_text().c_str());
        continue;
      }
      try {
        const zero::offload::SwapRemoval removal = zero::offload::remove_swap_job(job);
        freed += removal.bytes;
        if (removal.whole()) {
          std::printf("removed %s (%s): %s\n", job.path.c_str(),
                      zero::format_bytes(removal.bytes).c_str(), job.state_text().c_str());
          ++removed;
          continue;
        }
        std::string left;
        for (const std::string& l : removal.left) left += (left.empty() ? "" : ", ") + l;
        std::printf("partly removed %s: %d file%s (%s); kept it and its owner record\n",
                    job.path.c_str(), removal.files, removal.files == 1 ? "" : "s",
                    zero::format_bytes(removal.bytes).c_str());
        std::fprintf(stderr,
                     "zero-swap: %s: left what zero did not make (not a regular file, or a "
                     "link): %s; look at it and remove it by hand\n",
                     job.path.c_str(), left.c_str());
        ++partly;
        ++failed;
      } catch (const std::exception& error) {
        std::fprintf(stderr, "zero-swap: %s\n", error.what());
        ++failed;
      }
    }
  }
  if (!dry_run) {
    std::printf("%d job director%s removed%s, %s freed\n", removed, removed == 1 ? "y" : "ies",
                partly > 0 ? fmt::format(", {} partly", partly).c_str() : "",
                zero::format_bytes(freed).c_str());
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-swap: the NVMe swap directories zero makes under each nvme_path\n"
      "(NVME_PATH/zero/<job>/rank<r>/, with an owner record of host, pid and start time).\n"
      "A job removes its own when it ends, however it ends, save SIGKILL, a crash or a lost\n"
      "node; those are stale, and the next run names them. A running job's are never touched."};
  app.require_subcommand(1);
  std::vector<std::string> paths;
  std::string config;

  auto* list_command = app.add_subcommand(
      "list",
      "List the job directories under each NVME_PATH: size on disk, age, and whether "
      "the job runs (on this host), has ended (stale), or ran on another host.");
  bool as_json = false;
  list_command->add_option("NVME_PATH", paths, "an nvme_path of a config");
  list_command->add_option("--config,--deepspeed_config", config,
                           "take the nvme_paths of this DeepSpeed config");
  list_command->add_flag("--json", as_json, "a JSON array, an object per job directory");

  auto* clean_command = app.add_subcommand(
      "clean",
      "Remove the stale job directories under each NVME_PATH: those whose processes "
      "on this host have ended, and those without an owner record over a minute old. "
      "Exits 1 when one could not be removed whole (what zero did not make is left).");
  bool dry_run = false, other_hosts = false;
  clean_command->add_option("NVME_PATH", paths, "an nvme_path of a config");
  clean_command->add_option("--config,--deepspeed_config", config,
                            "take the nvme_paths of this DeepSpeed config");
  clean_command->add_flag("-n,--dry-run", dry_run, "say what would be removed, remove nothing");
  clean_command->add_flag("--other-hosts", other_hosts,
                          "also remove directories made on other hosts (a shared disk), whose "
                          "processes cannot be checked from here: only when you know they ended");

  CLI11_PARSE(app, argc, argv);
  try {
    const std::vector<std::string> where = all_paths(paths, config);
    if (*list_command) return list(where, as_json);
    return clean(where, dry_run, other_hosts);
  } catch (const std::invalid_argument& error) {
    std::fprintf(stderr, "zero-swap: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero-swap: %s\n", error.what());
    return 1;
  }
}
