// zero-mem's planning (planner.h): the engine's memory plan per stage and mode, the
// activations, the fit and the step's lower bound.
#include "tools/zero-mem/planner.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "base/block_quant.h"
#include "base/error.h"
#include "engine/plan/fit_rules.h"
#include "models/gpt/config.h"

namespace zero::mem {

namespace {

double gb(double gbps) {
  return gbps * 1e9;
}

config::ReadOptions read_options(const Request& request, const Mode& mode) {
  config::ReadOptions read;
  read.world_size = request.hardware.world();
  read.ranks_per_node = request.hardware.gpus_per_node;
  read.source = "zero-mem";
  read.overrides = request.overrides;
  for (auto it = mode.keys.begin(); it != mode.keys.end(); ++it) {
    read.overrides.push_back({it.key(), it.value()});
  }
  return read;
}

bool has_key(const config::json& config, const std::string& dotted) {
  const config::json* node = &config;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = dotted.find('.', start);
    const std::string part = dotted.substr(start, dot - start);
    if (!node->is_object() || !node->contains(part)) return false;
    node = &(*node)[part];
    if (dot == std::string::npos) return true;
    start = dot + 1;
  }
}

// The step's lower bound: each resource alone, at its rate, for what this row moves.
StepBound bound_step(const Request& request, const config::Config& config,
                     const engine::Layout& layout, const engine::MemoryPlan& plan,
                     bool checkpointing) {
  const Hardware& hw = request.hardware;
  const engine::StateModes& m = layout.modes;
  const engine::Registry& registry = request.model.registry;
  const double accum = static_cast<double>(config.batch.gradient_accumulation_steps);
  const double micro = static_cast<double>(config.batch.micro_batch_per_gpu);
  const double csize = dtype_size(m.compute), wire = dtype_size(m.wire);
  double P = 0, persistent = 0;
  for (std::size_t p = 0; p < registry.param_count(); ++p) {
    P += static_cast<double>(registry.param(p).numel);
    if (layout.params[p].persistent) persistent += static_cast<double>(registry.param(p).numel);
  }
  const double gathered = P - persistent;
  // Stage-3 gathers per micro-step, in passes over the gathered parameters: forward gathers
  // them all; what forward leaves gathered for backward is not gathered again. The fetcher
  // keeps a parameter whose next use is within stage3_max_reuse_distance elements of gathers
  // and while stage3_max_live_parameters allows: at the turn from forward to backward, the last
  // modules, about half the reuse distance of them (their forward and backward uses lie on
  // either side of the modules after them). Recomputation (activation checkpointing) gathers
  // what backward would and backward reuses it, unless the reuse distance is 0.
  // A parameter several modules use (a tied embedding, at both ends of the model) is gathered
  // again at each later use in forward unless the reuse distance spans the model between them.
  const auto reuse = static_cast<double>(config.zero.max_reuse_distance);
  const double kept =
      std::min({gathered, reuse / 2, static_cast<double>(config.zero.max_live_parameters)});
  const double regathered = checkpointing && config.zero.max_reuse_distance == 0 ? 2.0 : 1.0;
  double reused = 0;  // elements of later uses in forward
  for (std::size_t p = 0; p < registry.param_count(); ++p) {
    const std::size_t uses = registry.param(p).modules.size();
    if (!layout.params[p].persistent && uses > 1 && reuse < gathered) {
      reused += static_cast<double>(uses - 1) * static_cast<double>(registry.param(p).numel);
    }
  }
  const double passes = gathered > 0 ? 1 + (reused + regathered * (gathered - kept)) / gathered : 0;

  // Reads of the compute shards (from host memory or NVMe) per step: one per gather, or with
  // hpZ only the first gather of a step's (the later ones come from the secondary partition).
  const double shard_reads = m.hpz_ranks > 1 ? 1.0 : accum * passes;

  StepBound b;
  if (request.model.has_architecture()) {
    const ModelShape& s = request.model;
    const int batch = static_cast<int>(micro);
    const double fwd = s.forward_flops(batch, request.seq);
    const double recompute = checkpointing ? s.layers() * s.block_flops(batch, request.seq) : 0;
    b.flops = accum * (3.0 * fwd + recompute);
  } else {
    b.flops = accum * 6.0 * P * micro * request.seq;
  }
  double peak = hw.peak_tflops;
  if (peak <= 0) peak = hw.cpu_device ? kCpuTflops : m.compute == DType::f32 ? 495 : 989;
  b.compute = b.flops / (peak * 1e12);

  // The network: each rank's bytes sent in ring reduce-scatters, all-gathers, all-reduces,
  // each on the link its ranks need (a shard group is consecutive ranks; the replicas of a
  // hybrid layout are one per group, so they span nodes once the world does).
  const auto line = [&](std::string what, int ranks, bool across, double buffer, double times) {
    if (ranks <= 1 || buffer <= 0 || times <= 0) return;
    const double share = static_cast<double>(ranks - 1) / ranks;
    b.comm.push_back({std::move(what), ranks, across, times * share * buffer});
  };
  // ZeRO++ qwZ and qgZ move an int8 and a 256th of an fp32 scale per element (the padding of
  // each chunk to 4 bytes aside) in place of the compute and communication dtypes.
  const double packed = 1.0 + 4.0 / static_cast<double>(kQuantBlock);
  const double gather_size = m.quantized_weights ? packed : csize;
  const double reduce_size = m.quantized_gradients ? packed : wire;
  const int G = hw.gpus_per_node, S = m.stage == 0 ? hw.world() : m.shard_ranks;
  const bool group_across = S > G, world_across = hw.world() > G;
  // Reductions per step: at the boundary (stages 0-1) or at every micro-step (stages 2-3).
  const double reductions = m.stage <= 1 ? 1 : accum;
  if (m.stage == 0) {
    line("gradient all-reduce", S, group_across, 2 * P * wire, 1);
  } else {
    line(m.quantized_gradients ? "gradient reduce-scatter (qgZ: int8 all-to-all)"
                               : "gradient reduce-scatter",
         S, group_across, P * reduce_size, reductions);
    line("gradient shards' all-reduce over the replicas", m.replicas, world_across,
         2 * P / S * wire, reductions);
  }
  if (m.stage == 1 || m.stage == 2)
    line("updated parameters' all-gather", S, group_across, P * csize, 1);
  if (m.stage == 3 && m.hpz_ranks > 1) {
    // hpZ: a parameter's first gather after a step is over the shard group and leaves a
    // secondary shard; its later ones (backward, later micro-steps) are within the secondary
    // group of consecutive ranks.
    const int H = m.hpz_ranks;
    line(fmt::format("stage-3 gathers, the first after a step{}",
                     m.quantized_weights ? " (qwZ: int8)" : ""),
         S, group_across, gathered * gather_size, 1);
    line("stage-3 gathers from hpZ's secondary partition", H, H > G, gathered * csize,
         accum * passes - 1);
    line("persistent parameters' gather", S, group_across, persistent * gather_size, 1);
  } else if (m.stage == 3) {
    line(fmt::format("stage-3 gathers ({:.3g} pass{}{})", passes, passes == 1 ? "" : "es",
                     m.quantized_weights ? ", qwZ: int8" : ""),
         S, group_across, gathered * gather_size, accum * passes);
    line("persistent parameters' gather", S, group_across, persistent * gather_size, 1);
  }
  double intra = 0, inter = 0;
  for (const CommLine& c : b.comm) (c.across_nodes ? inter : intra) += c.bytes;
  b.intra_node_bytes = static_cast<std::uint64_t>(intra);
  b.inter_node_bytes = static_cast<std::uint64_t>(inter);
  b.network_bytes = b.intra_node_bytes + b.inter_node_bytes;
  b.network = std::max(intra / gb(hw.intra_node_gbps), inter / gb(hw.inter_node_gbps));

  // PCIe, each way: reduced gradient blocks down and updated values up with optimizer offload
  // (once a window where accumulate_on_device sums them on the GPU, in the accumulation dtype);
  // every gather's shard up with offload_param.
  // None on the CPU device, where offload copies within host memory.
  double down = 0, up = 0;
  const double shard = P / (m.stage == 0 ? 1 : m.shard_ranks);
  if (m.optimizer_offload && !hw.cpu_device) {
    if (engine::device_accumulation(config, layout, /*beside=*/true)) {
      down += shard * static_cast<double>(dtype_size(m.accum));
    } else {
      down += (m.stage == 1 ? 1 : accum) * shard * wire;
    }
    if (!m.param_offload) up += shard * csize;
  }
  if (m.param_offload && !hw.cpu_device)
    up += shard_reads * (gathered / m.shard_ranks) * csize + (persistent / m.shard_ranks) * csize;
  b.pcie_bytes = static_cast<std::uint64_t>(std::max(down, up));
  b.pcie = std::max(down, up) / gb(hw.pcie_gbps);

  // NVMe, per node: each swapped optimizer group read and written once a step, its gradient
  // written at each micro-step that reduces (stage 1 only at the boundary) and read back at the
  // next and at the step; swapped parameter shards read at every gather and written once a
  // step.
  const double g = hw.gpus_per_node;
  double read = 0, write = 0;
  double state_io = 0;  // the optimizer state's reads and writes (the step's own I/O), seconds
  if (plan.nvme.made()) {
    const double grads =
        static_cast<double>(plan.nvme.held[static_cast<std::size_t>(MemoryKind::grad)]);
    const double reductions = m.stage == 1 ? 1 : accum;
    // super_offload holds two regions of each group's state, and reads one and writes the other.
    const double state =
        (static_cast<double>(plan.nvme.held_total()) - grads) / (m.speculate ? 2.0 : 1.0);
    read += g * (state + reductions * grads);
    write += g * (state + reductions * grads);
    // One drive (or array) both reads and writes the step's groups: the two add up, as the
    // measured step does (docs/zero-mem.md, the CPU-device example).
    state_io = g * state / gb(hw.nvme_read_gbps) + g * state / gb(hw.nvme_write_gbps);
  }
  if (plan.param_nvme.made()) {
    read += g * shard_reads * static_cast<double>(plan.param_nvme.held_total());
    write += g * static_cast<double>(plan.param_nvme.held_total());
  }
  b.nvme_bytes = static_cast<std::uint64_t>(read + write);
  b.nvme = std::max(read / gb(hw.nvme_read_gbps), write / gb(hw.nvme_write_gbps));

  // The CPU optimizer (offloaded, or on the CPU device always): each node's ranks stream their
  // shards' masters, moments (read and written), gradients (read) and updated values (written)
  // through host memory.
  if (m.optimizer_offload || hw.cpu_device) {
    const double per_element =
        2 * 4.0 +
        2.0 * config.optimizer.state_buffers() * dtype_size(config.optimizer_state_dtype) +
        dtype_size(m.accum) + (m.mixed ? csize : 0);
    b.cpu_optimizer = g * shard * per_element / gb(hw.host_mem_gbps);
  }

  const std::pair<const char*, double> parts[] = {{"compute", b.compute},
                                                  {"network", b.network},
                                                  {"PCIe", b.pcie},
                                                  {"NVMe", b.nvme},
                                                  {"CPU optimizer", b.cpu_optimizer}};
  for (const auto& [name, seconds] : parts) {
    if (seconds > b.seconds) {
      b.seconds = seconds;
      b.bound_by = name;
    }
  }
  // The optimizer on the CPU (offloaded, or on the CPU device) starts when backward ends: its
  // step (the CPU Adam, or the NVMe state it streams, whichever is longer) follows compute
  // rather than hiding under it. super_offload steps it during backward instead, which the
  // largest-resource bound above already models.
  if (m.optimizer_offload || hw.cpu_device) {
    const bool io = state_io > b.cpu_optimizer;
    b.after_backward = m.speculate ? 0.0 : std::max(b.cpu_optimizer, state_io);
    if (b.compute + b.after_backward > b.seconds) {
      b.seconds = b.compute + b.after_backward;
      b.bound_by = io ? "compute, then NVMe step" : "compute, then CPU optimizer";
    }
  }
  return b;
}

}  // namespace

std::vector<Mode> modes_for(int stage, bool nvme) {
  using nlohmann::json;
  const std::string opt = "zero_optimization.offload_optimizer.device";
  const std::string par = "zero_optimization.offload_param.device";
  std::vector<Mode> modes;
  auto add = [&](const char* name, const char* optimizer, const char* params) {
    Mode m{stage, name, json::object()};
    m.keys["zero_optimization.stage"] = stage;
    m.keys[opt] = optimizer;
    if (stage == 3) m.keys[par] = params;
    modes.push_back(std::move(m));
  };
  add("none", "none", "none");
  if (stage == 0) return modes;
  add("optimizer cpu", "cpu", "none");
  if (nvme) {
    add("optimizer nvme", "nvme", "none");
    add("optimizer split", "nvme", "none");
  }
  if (stage == 3) {
    add("params cpu", "cpu", "cpu");
    if (nvme) add("params nvme", "nvme", "nvme");
  }
  return modes;
}

bool given(const Request& request, const std::string& dotted) {
  if (has_key(request.config, dotted)) return true;
  for (const config::Override& o : request.overrides) {
    if (o.path == dotted || o.path.rfind(dotted + ".", 0) == 0) return true;
  }
  return false;
}

config::Config mode_config(const Request& request, const Mode& mode) {
  Mode with = mode;
  // NVMe needs a path; the plan does not touch it.
  for (const char* section : {"offload_optimizer", "offload_param"}) {
    const std::string key = fmt::format("zero_optimization.{}.nvme_path", section);
    if (!given(request, key)) with.keys[key] = "/local_nvme";
  }
  // super_offload (its second copy of the state, staging and second NVMe regions counted) and
  // accumulate_on_device (its owned gradient shard on the GPU) apply to the rows with the
  // optimizer offloaded; the others run without them, as the engine would refuse them there.
  const auto device = with.keys.find("zero_optimization.offload_optimizer.device");
  if (device != with.keys.end() && *device == "none") {
    with.keys["zero_optimization.offload_optimizer.super_offload"] = false;
    with.keys["zero_optimization.offload_optimizer.accumulate_on_device"] = false;
  }

  return config::read_config(request.config, read_options(request, with));
}

// An activation's bytes: the compute dtype's on a GPU, fp32 in the CPU layers.
std::size_t activation_element(const Request& request, const config::Config& config) {
  return request.hardware.cpu_device ? models::kCpuActivationElement
                                     : dtype_size(config.compute_dtype());
}

// Whether the row fits one node, by the engine's own check at init (engine/plan/fit_rules.h): a
// rank per GPU, each with its activations and the GPU's overhead declared beside its state,
// against the node's figures as given. On the CPU device the device tier and the activations
// are in the host's pool, and there is no GPU.
void judge_fit(const Request& request, const config::Config& config, Row& row) {
  const Hardware& hw = request.hardware;
  std::vector<engine::DeclaredMemory> declared{{Tier::device, row.activations, "activations"}};
  if (!hw.cpu_device) {
    declared.push_back({Tier::device, hw.gpu_overhead, "the GPU's overhead (--gpu-overhead)"});
  }
  const std::string need = engine::fit_need(row.plan, config, declared, !hw.cpu_device);
  std::vector<std::string> notes, needs;
  for (int g = 0; g < hw.gpus_per_node; ++g) {
    engine::FreeNote note;
    note.machine = "a node";
    note.host = hw.cpu_mem;
    note.host_source = "--cpu-mem";
    if (!hw.cpu_device) {
      note.gpu = engine::FreeNote::Gpu{std::to_string(g), hw.gpu_mem, "--gpu-mem"};
    }
    note.optimizer_disk = note.param_disk =
        engine::FreeNote::Disk{"NVMe", hw.nvme, "its NVMe", "--nvme"};
    notes.push_back(engine::fit_note(note));
    needs.push_back(need);
  }
  const std::vector<engine::Shortfall> verdict = engine::fit_verdict(notes, needs);
  const auto fits = [&](engine::Shortfall::Pool pool) {
    return std::none_of(verdict.begin(), verdict.end(),
                        [&](const engine::Shortfall& s) { return s.pool == pool; });
  };
  row.fits_gpu = fits(engine::Shortfall::Pool::gpu);
  row.fits_host = fits(engine::Shortfall::Pool::host);
  row.fits_nvme = fits(engine::Shortfall::Pool::disk);
  for (const engine::Shortfall& shortfall : verdict) row.shortfalls.push_back(shortfall.text);
}

std::uint64_t front_end_bytes(const ModelShape& model, bool pretrained) {
  std::uint64_t largest_param = 0;
  for (std::size_t p = 0; p < model.registry.param_count(); ++p) {
    largest_param = std::max<std::uint64_t>(largest_param, model.registry.param(p).numel);
  }
  const std::uint64_t unit = pretrained ? 0 : 2 * 4 * model.largest_layer;
  const std::uint64_t save = (4 + 2) * largest_param;
  return kPythonProcessBytes + std::max(unit, save);
}

namespace {

constexpr const char* kSuperOffloadKey = "zero_optimization.offload_optimizer.super_offload";

// A row with its keys as they are.
Row plan_row_as_given(const Request& request, const Mode& mode, bool checkpointing) {
  Row row;
  row.mode = mode;
  row.checkpointing = checkpointing;
  const Hardware& hw = request.hardware;
  try {
    const config::Config config = mode_config(request, mode);
    const engine::Layout layout = engine::plan_layout(request.model.registry, config, hw.world());
    row.layout = layout.modes.hybrid()
                     ? fmt::format("hybrid {}x{}", layout.modes.replicas, layout.modes.shard_ranks)
                 : layout.modes.hpz_ranks > 1 ? fmt::format("hpz {}", layout.modes.hpz_ranks)
                                              : "flat";
    // Beside a GPU offloaded state has a host device of its own; the CPU device (sync) steps
    // it itself.
    row.plan = engine::plan_memory(request.model.registry, config, layout, !hw.cpu_device);
    row.device_state = row.plan.reserved(Tier::device);
    if (request.model.has_architecture()) {
      row.activations =
          request.model
              .activation_bytes(static_cast<int>(config.batch.micro_batch_per_gpu), request.seq,
                                checkpointing, activation_element(request, config))
              .total();
    }
    if (request.front_end) {
      // PyTorch runs the layers in the compute dtype; the Python side's own memory instead.
      if (hw.cpu_device) row.activations += front_end_bytes(request.model, request.pretrained);
    } else if (hw.cpu_device) {
      // The CPU layers' fp32 copies of the open module, as zero-train declares them.
      row.activations += models::cpu_compute_copy_bytes(request.model.largest_layer,
                                                        dtype_size(config.compute_dtype()));
    }
    row.device_total = row.device_state + row.activations + (hw.cpu_device ? 0 : hw.gpu_overhead);
    const std::uint64_t g = static_cast<std::uint64_t>(hw.gpus_per_node);
    row.pinned_node = g * row.plan.reserved(Tier::pinned);
    row.host_node = g * row.plan.reserved(Tier::host);
    if (request.front_end && !hw.cpu_device)
      row.host_node += g * front_end_bytes(request.model, request.pretrained);
    row.nvme_node = g * row.plan.reserved(Tier::nvme);
    judge_fit(request, config, row);
    row.step = bound_step(request, config, layout, row.plan, checkpointing);
  } catch (const std::exception& error) {
    row.error = error.what();
  }
  return row;
}

}  // namespace

Row plan_row(const Request& request, const Mode& mode, bool checkpointing) {
  // super_offload unset: beside a GPU the engine turns it on where the plan with it fits
  // (Engine init, resolve_super_offload), so the row is the one it would run.
  if (!request.hardware.cpu_device && !given(request, kSuperOffloadKey) &&
      mode.keys.find(kSuperOffloadKey) == mode.keys.end()) {
    bool candidate = false;
    try {
      candidate = engine::super_offload_auto_unused(mode_config(request, mode), true).empty();
    } catch (const std::exception&) {
      candidate = false;  // the row as given says what is wrong
    }
    if (candidate) {
      Mode with = mode;
      with.keys[kSuperOffloadKey] = true;
      Row on = plan_row_as_given(request, with, checkpointing);
      if (on.fits()) return on;
    }
  }
  return plan_row_as_given(request, mode, checkpointing);
}

Plan plan_all(const Request& request) {
  Plan plan;
  // The batch, precision and buffer sizes, from the config as the engine accepts it at any stage.
  const config::Config probe = mode_config(request, modes_for(0, false).front());
  plan.micro_batch = probe.batch.micro_batch_per_gpu;
  plan.accumulation = probe.batch.gradient_accumulation_steps;
  plan.precision = config::precision_name(probe.precision);
  plan.seq = request.seq;
  if (request.front_end) plan.front_end = front_end_bytes(request.model, request.pretrained);
  plan.pretrained = request.pretrained;
  if (request.model.has_architecture()) {
    const std::size_t e = activation_element(request, probe);
    if (request.hardware.cpu_device && !request.front_end) {
      plan.compute_copies = models::cpu_compute_copy_bytes(request.model.largest_layer,
                                                           dtype_size(probe.compute_dtype()));
    }
    const int batch = static_cast<int>(plan.micro_batch);
    plan.activations = request.model.activation_bytes(batch, request.seq, false, e);
    plan.checkpointed_activations = request.model.activation_bytes(batch, request.seq, true, e);
  }
  const bool nvme = request.hardware.nvme > 0;
  // A row that does not fit on the GPU (on the CPU device, in host memory) is shown with
  // activation checkpointing (GPT- and Llama-shaped models), which keeps a block's input
  // instead of its activations.
  auto plan_mode = [&](const Mode& mode) {
    Row row = plan_row(request, mode, request.checkpointing);
    const bool short_where_activations_are =
        request.hardware.cpu_device ? !row.fits_host : !row.fits_gpu;
    if (row.error.empty() && short_where_activations_are && !request.checkpointing &&
        request.model.has_architecture()) {
      row = plan_row(request, mode, true);
    }
    return row;
  };
  // Parameters on NVMe are read through buffers of offload_param.buffer_size elements: at
  // least the largest shard, over the layout's shard group.
  const auto largest_shard = [&](const Mode& mode) {
    const int ranks = mode.layout == "hybrid" ? request.hardware.gpus_per_node
                      : mode.layout == "flat" || probe.zero.shard_size == 0
                          ? request.hardware.world()
                          : probe.zero.shard_size;
    std::uint64_t largest = 0;
    for (const engine::ParamSpec& p : request.model.registry.params()) {
      largest = std::max<std::uint64_t>(largest, engine::shard_shape(p.numel, ranks).shard);
    }
    return largest;
  };
  std::vector<Mode> modes;
  for (int stage : request.stages) {
    for (const std::string& layout : request.layouts) {
      // Hybrid differs from flat only where there is something to partition and several nodes,
      // hpZ only at stage 3 and with several nodes.
      const bool one_node = request.hardware.world() <= request.hardware.gpus_per_node;
      if ((layout == "hybrid" && (stage == 0 || one_node)) ||
          (layout == "hpz" && (stage != 3 || one_node))) {
        continue;
      }
      for (Mode mode : modes_for(stage, nvme)) {
        // The layout's keys: a shard group per node, or the whole world; a key of the config's
        // that says otherwise is turned off.
        mode.layout = layout;
        const std::string mics = "zero_optimization.mics_shard_size";
        const std::string node = "zero_optimization.hybrid_shard";
        const std::string hpz = "zero_optimization.zero_hpz_partition_size";
        if (layout == "hybrid") mode.keys[node] = true;
        if (layout == "hpz") mode.keys[hpz] = request.hardware.gpus_per_node;
        if (layout != "config" && layout != "hybrid" && given(request, node)) {
          mode.keys[node] = false;
        }
        if (layout != "config" && given(request, mics)) mode.keys[mics] = -1;
        if (layout != "config" && layout != "hpz" && given(request, hpz)) mode.keys[hpz] = 1;
        modes.push_back(std::move(mode));
      }
    }
  }
  for (Mode mode : modes) {
    if (mode.name == "params nvme") {
      const std::uint64_t largest_shard_here = largest_shard(mode);
      const auto buffer_size = static_cast<std::uint64_t>(probe.zero.offload_param.buffer_size);
      if (largest_shard_here > buffer_size) {
        mode.keys["zero_optimization.offload_param.buffer_size"] = largest_shard_here;
      }
    }
    if (mode.name == "optimizer split") {
      // max_in_cpu: the optimizer state (and gradient) the host memory left over by the
      // all-NVMe plan holds, per rank; shown only when that is some but not all of it.
      Mode all_nvme = mode;
      all_nvme.keys["zero_optimization.offload_optimizer.max_in_cpu"] = 0;
      const Row base = plan_mode(all_nvme);
      if (!base.error.empty()) continue;
      // On the CPU device the ranks' device memory and activations are host memory too.
      const std::uint64_t used =
          base.pinned_node + base.host_node +
          (request.hardware.cpu_device
               ? base.device_total * static_cast<std::uint64_t>(request.hardware.gpus_per_node)
               : 0);
      if (used >= request.hardware.cpu_mem) continue;
      const config::Config config = mode_config(request, all_nvme);
      // A resident element holds its master, its moments and (gradient NVMe) its gradient.
      const engine::StateModes modes = engine::state_modes(config, request.hardware.world());
      const std::uint64_t per_element =
          4 +
          static_cast<std::uint64_t>(config.optimizer.state_buffers()) *
              dtype_size(config.optimizer_state_dtype) +
          (modes.grad_nvme ? dtype_size(modes.accum) : 0);
      const std::uint64_t elements = (request.hardware.cpu_mem - used) /
                                     static_cast<std::uint64_t>(request.hardware.gpus_per_node) /
                                     per_element;
      mode.keys["zero_optimization.offload_optimizer.max_in_cpu"] = elements;
      Row row = plan_mode(mode);
      if (!row.error.empty() || !row.plan.nvme.made() || row.plan.nvme.held_total() == 0 ||
          row.plan.nvme.held_total() == base.plan.nvme.held_total()) {
        continue;
      }
      plan.rows.push_back(std::move(row));
      continue;
    }
    plan.rows.push_back(plan_mode(mode));
  }
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    const Row& row = plan.rows[r];
    if (!row.fits()) continue;
    if (!plan.recommended || row.step.seconds < plan.rows[*plan.recommended].step.seconds) {
      plan.recommended = r;
    }
  }
  // super_offload is off where the engine leaves it off unset (on NVMe, or where its plan does
  // not fit); where the recommended row's optimizer waits for backward beside a GPU, say what
  // setting it would give. (On the CPU device the optimizer
  // would take the cores backward computes on, which the bound does not count.)
  const std::string super_key = kSuperOffloadKey;
  if (plan.recommended && !request.hardware.cpu_device && !given(request, super_key)) {
    const Row& best = plan.rows[*plan.recommended];
    if (best.step.after_backward > 0) {
      Mode mode = best.mode;
      mode.keys[super_key] = true;
      Row with = plan_row(request, mode, best.checkpointing);
      if (with.fits() && with.step.seconds < best.step.seconds)
        plan.super_offload = std::move(with);
    }
  }
  return plan;
}

}  // namespace zero::mem
