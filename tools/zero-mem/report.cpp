// zero-mem's table and JSON (report.h).
#include "tools/zero-mem/report.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/bytes.h"
#include "tools/zero-mem/deepspeed_estimate.h"

namespace zero::mem {
namespace {

using nlohmann::json;

// Sizes in the table: GiB with two decimals, compact enough for eight columns.
std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / 1073741824.0);
}

std::string seconds(double s) {
  if (s >= 1) return fmt::format("{:.2f} s", s);
  return fmt::format("{:.1f} ms", s * 1e3);
}

std::string fit_text(const Row& row) {
  if (!row.error.empty()) return "refused";
  if (row.fits()) return row.checkpointing ? "yes (AC)" : "yes";
  std::string why;
  if (!row.fits_gpu) why += "GPU";
  if (!row.fits_host) why += why.empty() ? "host" : "+host";
  if (!row.fits_nvme) why += why.empty() ? "NVMe" : "+NVMe";
  return "no: " + why;
}

json arena_json(const engine::ArenaPlan& arena) {
  json kinds = json::object();
  for (std::size_t k = 0; k < kAllMemoryKinds.size(); ++k) {
    if (arena.peak[k] == 0 && arena.held[k] == 0) continue;
    kinds[memory_kind_name(kAllMemoryKinds[k])] = {{"held", arena.held[k]},
                                                   {"peak", arena.peak[k]}};
  }
  return {
      {"name", arena.name},         {"tier", tier_name(arena.tier)},  {"capacity", arena.capacity},
      {"peak", arena.peak_total()}, {"peak_exact", arena.peak_exact}, {"kinds", kinds}};
}

}  // namespace

// A row's collectives, one line each, and the totals per link.
std::string comm_text(const Row& row, const std::string& indent) {
  std::string t;
  for (const CommLine& c : row.step.comm) {
    t += fmt::format("{}{:>12}  {:<11} {:>5} ranks  {}\n", indent,
                     format_bytes(static_cast<std::uint64_t>(c.bytes)),
                     c.across_nodes ? "inter-node" : "intra-node", c.ranks, c.what);
  }
  if (!row.step.comm.empty()) {
    t += fmt::format("{}{:>12}  within a node, {} across nodes\n", indent,
                     format_bytes(row.step.intra_node_bytes),
                     format_bytes(row.step.inter_node_bytes));
  }
  return t;
}

json row_keys(const Row& row, const Request& request) {
  json keys = row.mode.keys;
  // zero-train checkpoints when the config has the section; number_checkpoints says how many
  // blocks.
  if (row.checkpointing && request.model.has_architecture()) {
    keys["activation_checkpointing.number_checkpoints"] = request.model.layers();
  }
  return keys;
}

json report_json(const Request& request, const Plan& plan, const ReportOptions& options) {
  const Hardware& hw = request.hardware;
  json out;
  out["model"] = {{"description", request.model.description},
                  {"params", request.model.params},
                  {"largest_layer", request.model.largest_layer}};
  if (request.model.gpt) {
    const GptShape& s = *request.model.gpt;
    out["model"]["gpt"] = {{"layers", s.config.layers},     {"channels", s.config.channels},
                           {"heads", s.config.heads},       {"vocab", s.config.vocab},
                           {"positions", s.config.max_seq}, {"mlp", s.mlp}};
  }
  if (request.model.llama) {
    const llama::LlamaConfig& c = *request.model.llama;
    out["model"]["llama"] = {{"family", c.family},
                             {"layers", c.layers},
                             {"channels", c.channels},
                             {"heads", c.heads},
                             {"kv_heads", c.kv_heads},
                             {"head_dim", c.head_size()},
                             {"intermediate", c.intermediate},
                             {"vocab", c.vocab},
                             {"positions", c.max_seq},
                             {"tied", c.tied}};
  }
  out["hardware"] = {{"device", hw.cpu_device ? "cpu" : "gpu"},
                     {"gpus_per_node", hw.gpus_per_node},
                     {"nodes", hw.nodes},
                     {"gpu_mem", hw.gpu_mem},
                     {"cpu_mem", hw.cpu_mem},
                     {"nvme", hw.nvme},
                     {"gpu_overhead", hw.gpu_overhead},
                     {"peak_tflops", hw.peak_tflops},
                     {"pcie_gbps", hw.pcie_gbps},
                     {"nvme_read_gbps", hw.nvme_read_gbps},
                     {"nvme_write_gbps", hw.nvme_write_gbps},
                     {"intra_node_gbps", hw.intra_node_gbps},
                     {"inter_node_gbps", hw.inter_node_gbps},
                     {"host_mem_gbps", hw.host_mem_gbps}};
  out["batch"] = {
      {"micro_batch", plan.micro_batch},
      {"accumulation", plan.accumulation},
      {"seq", plan.seq},
      {"precision", plan.precision},
      {"tokens_per_step", plan.micro_batch * plan.accumulation * plan.seq * hw.world()}};
  if (plan.front_end > 0) out["front_end"] = plan.front_end;
  if (plan.activations) {
    out["activations"] = {{"kept", plan.activations->kept},
                          {"workspace", plan.activations->workspace},
                          {"checkpointed_kept", plan.checkpointed_activations->kept},
                          {"checkpointed_workspace", plan.checkpointed_activations->workspace}};
  }
  json rows = json::array();
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    const Row& row = plan.rows[r];
    json j = {{"stage", row.mode.stage},
              {"offload", row.mode.name},
              {"layout", row.layout},
              {"activation_checkpointing", row.checkpointing},
              {"keys", row_keys(row, request)}};
    if (!row.error.empty()) {
      j["error"] = row.error;
      rows.push_back(j);
      continue;
    }
    j["per_gpu"] = {{"device_state", row.device_state},
                    {"activations", row.activations},
                    {"overhead", hw.cpu_device ? 0 : hw.gpu_overhead},
                    {"total", row.device_total}};
    j["per_node"] = {{"pinned", row.pinned_node}, {"host", row.host_node}, {"nvme", row.nvme_node}};
    j["fits"] = {{"gpu", row.fits_gpu},
                 {"host", row.fits_host},
                 {"nvme", row.fits_nvme},
                 {"all", row.fits()}};
    j["short"] = row.shortfalls;
    j["step_lower_bound"] = {{"seconds", row.step.seconds},
                             {"bound_by", row.step.bound_by},
                             {"flops", row.step.flops},
                             {"compute", row.step.compute},
                             {"network", row.step.network},
                             {"pcie", row.step.pcie},
                             {"nvme", row.step.nvme},
                             {"cpu_optimizer", row.step.cpu_optimizer},
                             {"after_backward", row.step.after_backward},
                             {"network_bytes", row.step.network_bytes},
                             {"intra_node_bytes", row.step.intra_node_bytes},
                             {"inter_node_bytes", row.step.inter_node_bytes},
                             {"pcie_bytes", row.step.pcie_bytes},
                             {"nvme_bytes", row.step.nvme_bytes}};
    json comm = json::array();
    for (const CommLine& c : row.step.comm) {
      comm.push_back({{"what", c.what},
                      {"ranks", c.ranks},
                      {"link", c.across_nodes ? "inter-node" : "intra-node"},
                      {"bytes_per_rank", c.bytes}});
    }
    j["comm"] = comm;
    json arenas = json::array();
    for (const engine::ArenaPlan* arena : row.plan.arenas()) {
      if (arena->made()) arenas.push_back(arena_json(*arena));
    }
    j["arenas"] = arenas;
    j["scratch"] = {{"device", row.plan.device_scratch_bytes},
                    {"host", row.plan.host_scratch_bytes},
                    {"pinned", row.plan.pinned_scratch_bytes}};
    rows.push_back(j);
  }
  out["rows"] = rows;
  out["recommended"] = plan.recommended ? json(*plan.recommended) : json(nullptr);
  // The recommended row with super_offload, where it would fit and lower the step bound.
  out["super_offload"] = nullptr;
  if (plan.super_offload) {
    const Row& with = *plan.super_offload;
    out["super_offload"] = {
        {"keys", row_keys(with, request)},
        {"per_node",
         {{"pinned", with.pinned_node}, {"host", with.host_node}, {"nvme", with.nvme_node}}},
        {"step_lower_bound", {{"seconds", with.step.seconds}, {"bound_by", with.step.bound_by}}}};
  }
  if (options.deepspeed) {
    json ds = json::array();
    for (const DeepSpeedRow& d : deepspeed_estimate(
             request.model.params, request.model.largest_layer, hw.gpus_per_node, hw.nodes)) {
      ds.push_back({{"stage", d.stage},
                    {"offload_param", d.offload_param},
                    {"offload_optimizer", d.offload_optimizer},
                    {"zero_init", d.zero_init},
                    {"per_gpu", d.per_gpu},
                    {"per_cpu", d.per_cpu}});
    }
    out["deepspeed_estimate"] = ds;
  }
  return out;
}

std::string report_text(const Request& request, const Plan& plan, const ReportOptions& options) {
  const Hardware& hw = request.hardware;
  std::string t;
  t += fmt::format("model: {} ({:.3f}B parameters, largest layer {:.1f}M)\n",
                   request.model.description, static_cast<double>(request.model.params) / 1e9,
                   static_cast<double>(request.model.largest_layer) / 1e6);
  const std::string nvme =
      hw.nvme ? fmt::format(", {} NVMe", format_bytes(hw.nvme)) : std::string(", no NVMe");
  if (hw.cpu_device) {
    t += fmt::format(
        "hardware: {} node(s) x {} rank(s) on the CPU device, {} host memory (the device's "
        "too){} per node\n",
        hw.nodes, hw.gpus_per_node, format_bytes(hw.cpu_mem), nvme);
  } else {
    t +=
        fmt::format("hardware: {} node(s) x {} GPU(s) of {}, {} host memory{} per node\n", hw.nodes,
                    hw.gpus_per_node, format_bytes(hw.gpu_mem), format_bytes(hw.cpu_mem), nvme);
  }
  t +=
      fmt::format("batch: {} x {} tokens per {}, {} accumulation step(s), {}; {} tokens per step\n",
                  plan.micro_batch, plan.seq, hw.unit(), plan.accumulation, plan.precision,
                  plan.micro_batch * plan.accumulation * plan.seq * hw.world());
  if (plan.activations) {
    t += fmt::format(
        "activations per {}: {} kept + {} backward workspace; with activation "
        "checkpointing {} + {}\n",
        hw.unit(), format_bytes(plan.activations->kept), format_bytes(plan.activations->workspace),
        format_bytes(plan.checkpointed_activations->kept),
        format_bytes(plan.checkpointed_activations->workspace));
  } else {
    t += "activations: not counted (no architecture: give --arch or --model)\n";
  }
  if (plan.front_end > 0) {
    t += fmt::format(
        "through the Python front end: PyTorch's activations counted as zero's layers' (the "
        "same tensors), and per {} {} of the Python side (the process with torch and "
        "transformers, and the larger of {}a streamed save's tensor), in the {}\n",
        hw.unit(), format_bytes(plan.front_end),
        plan.pretrained ? "" : "a unit initialised without weights and ",
        hw.cpu_device ? "rank column" : "host column");
  }
  if (hw.cpu_device && plan.front_end > 0) {
    t += "rank column: the engine's device arenas + activations + the Python side, all in "
         "host memory; a row fits when the ranks' columns, pinned and host together fit "
         "--cpu-mem\n\n";
  } else if (hw.cpu_device) {
    t += fmt::format(
        "rank column: the engine's device arenas + activations + the CPU layers' fp32 copies of "
        "the largest module ({}), all in host memory; a row fits when the ranks' columns, pinned "
        "and host together fit --cpu-mem\n\n",
        format_bytes(plan.compute_copies));
  } else {
    t += fmt::format(
        "GPU column: the engine's arenas + activations + {} overhead (--gpu-overhead)\n\n",
        format_bytes(hw.gpu_overhead));
  }
  // The layout column, where a row is not flat.
  const bool layouts = std::any_of(plan.rows.begin(), plan.rows.end(), [](const Row& row) {
    return !row.layout.empty() && row.layout != "flat";
  });
  const auto offload = [&](const Row& row) {
    return layouts ? fmt::format("{:<15} {:<11}", row.mode.name, row.layout)
                   : fmt::format("{:<15}", row.mode.name);
  };
  t += fmt::format("{:<5} {} {:>9} {:>9} {:>10} {:>10} {:>10}  {:<12} {:>10}  {}\n", "stage",
                   layouts ? fmt::format("{:<15} {:<11}", "offload", "layout")
                           : fmt::format("{:<15}", "offload"),
                   hw.cpu_device ? "rank GiB" : "GPU GiB", "act GiB", "pinned/nd", "host/nd",
                   "NVMe/nd", "fits", "step >=", "bound by");
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    const Row& row = plan.rows[r];
    const std::string mark = plan.recommended && *plan.recommended == r ? " <- recommended" : "";
    if (!row.error.empty()) {
      t += fmt::format("{:<5} {} refused: {}\n", row.mode.stage, offload(row), row.error);
      continue;
    }
    t += fmt::format("{:<5} {} {:>9} {:>9} {:>10} {:>10} {:>10}  {:<12} {:>10}  {}{}\n",
                     row.mode.stage, offload(row), gib(row.device_total), gib(row.activations),
                     gib(row.pinned_node), gib(row.host_node), gib(row.nvme_node), fit_text(row),
                     seconds(row.step.seconds), row.step.bound_by, mark);
    if (options.details) {
      t += comm_text(row, "        ");
      for (const std::string& shortfall : row.shortfalls) {
        t += fmt::format("        short: {}\n", shortfall);
      }
      for (const engine::ArenaPlan* arena : row.plan.arenas()) {
        if (!arena->made()) continue;
        t += fmt::format("        {:<7} {:>12} reserved, {:>12} peak{}  {}\n",
                         tier_name(arena->tier), format_bytes(arena->capacity),
                         format_bytes(arena->peak_total()), arena->peak_exact ? "" : " (at most)",
                         arena->name);
      }
    }
  }
  t += "\n";
  if (plan.recommended) {
    const Row& row = plan.rows[*plan.recommended];
    t += fmt::format(
        "recommended: stage {}, {}{}: {} per {}, step >= {} (bound by {})\n", row.mode.stage,
        row.mode.name, row.checkpointing ? ", activation checkpointing" : "",
        format_bytes(row.device_total), hw.unit(), seconds(row.step.seconds), row.step.bound_by);
    t += "  config keys:";
    const json keys = row_keys(row, request);
    for (auto it = keys.begin(); it != keys.end(); ++it) {
      t += fmt::format(" --set {}={}", it.key(), it.value().dump());
    }
    if (row.checkpointing)
      t += "\n  and checkpoint every block's activations (zero-train: --activation-checkpointing)";
    t += "\n";
    if (plan.super_offload) {
      const Row& with = *plan.super_offload;
      const std::string nvme =
          with.nvme_node == row.nvme_node
              ? std::string()
              : fmt::format(", {} of NVMe against {}", format_bytes(with.nvme_node),
                            format_bytes(row.nvme_node));
      t += fmt::format(
          "  with offload_optimizer.super_offload (the optimizer stepped during backward, exact; "
          "off here unless set): step >= {} (bound by {}), {} pinned per node against {}{}: --set "
          "zero_optimization.offload_optimizer.super_offload=true\n",
          seconds(with.step.seconds), with.step.bound_by, format_bytes(with.pinned_node),
          format_bytes(row.pinned_node), nvme);
    }
    if (!row.step.comm.empty()) {
      t += fmt::format("  network per {} per step ({}):\n", hw.unit(), row.layout);
      t += comm_text(row, "    ");
    }
  } else {
    t +=
        "nothing fits: more GPUs or nodes, more host memory, NVMe (--nvme), a smaller micro-batch, "
        "or activation checkpointing\n";
  }
  if (options.deepspeed) {
    t += fmt::format(
        "\nDeepSpeed's estimate (model states only, {} parameters, largest layer {}):\n",
        request.model.params, request.model.largest_layer);
    t += fmt::format("  {:>10} {:>10}  options\n", "per CPU", "per GPU");
    for (const DeepSpeedRow& d : deepspeed_estimate(
             request.model.params, request.model.largest_layer, hw.gpus_per_node, hw.nodes)) {
      std::string what =
          d.stage == 2
              ? fmt::format("stage 2, offload_optimizer={}", d.offload_optimizer)
              : fmt::format("stage 3, offload_param={}, offload_optimizer={}, zero_init={}",
                            d.offload_param, d.offload_optimizer, d.zero_init);
      t += fmt::format("  {:>10} {:>10}  {}\n", format_bytes(d.per_cpu), format_bytes(d.per_gpu),
                       what);
    }
  }
  t += "\nstep >= is a lower bound: each of compute, network, PCIe, NVMe and the CPU optimizer "
       "alone at its rate (see --help for the rates), perfectly overlapped, except that an "
       "optimizer on the CPU steps after backward (compute, then its step) unless "
       "offload_optimizer.super_offload overlaps them.\n";
  return t;
}

}  // namespace zero::mem
