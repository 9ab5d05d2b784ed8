// zero-mem: what fits where, before launching. For each ZeRO stage and way of offloading, the
// per-GPU, per-node host and per-node NVMe bytes the engine would reserve (its own sizing code,
// so exact for our engine), the activations of GPT-shaped models, whether it fits, a lower
// bound on the step time, and the fastest that fits with the config keys to set.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "base/bytes.h"
#include "base/error.h"
#include "config/json_text.h"
#include "device/device.h"
#include "tools/cli_checks.h"
#include "tools/zero-mem/planner.h"
#include "tools/zero-mem/report.h"

namespace {

using nlohmann::json;

const char* kDefaultConfig = R"({
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}}
})";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zero-mem: per ZeRO stage and offload mode, the memory our engine reserves per GPU, per "
      "node (pinned and pageable host memory) and on NVMe, from the engine's own sizing code; "
      "the activations of GPT- and Llama-shaped models with and without activation "
      "checkpointing; which fit (by the check zero_init makes before reserving anything, on one "
      "node: a rank per GPU sharing --cpu-mem and --nvme); a lower bound on the step time; and "
      "the fastest that fits, with its config keys.\n\n"
      "Modes: none; from stage 1 'optimizer cpu', 'optimizer nvme' (max_in_cpu from the "
      "config), 'optimizer split' (NVMe with max_in_cpu filling the host memory left); at stage "
      "3 'params cpu' (offload_param and offload_optimizer cpu) and 'params nvme' (both nvme). "
      "NVMe modes need --nvme. A row that fits the GPU only with activation checkpointing says "
      "'yes (AC)'.\n\n"
      "Device: GPUs, or the CPU device (--device cpu; by default when this machine has no GPU "
      "and no GPU option is given): ranks on CPUs, whose device memory, activations and host "
      "memory are one pool per node (--cpu-mem), with no PCIe and no GPU overhead; "
      "--gpus-per-node (or --ranks-per-node) then counts ranks.\n\n"
      "Step lower bound: the largest of compute (the model's FLOPs at --peak-tflops), the "
      "network (each collective's ring bytes on its link: --intra-node-gbps within a node, "
      "--inter-node-gbps for collectives whose ranks span nodes; the slower link bounds), PCIe "
      "(--pcie-gbps each way per GPU), NVMe (--nvme-read-gbps/--nvme-write-gbps "
      "per node) and the CPU optimizer (host memory traffic at --host-mem-gbps per node); with "
      "the optimizer on the CPU and without offload_optimizer.super_offload, at least compute "
      "plus the optimizer's step (the CPU optimizer or its NVMe state's I/O), which waits for "
      "backward. super_offload left unset is planned as the engine decides it: on beside a GPU, "
      "for the optimizer state in host memory, where the row with it fits.\n\n"
      "Layouts (--layout): flat partitions over every rank; hybrid (zero_optimization."
      "hybrid_shard) within each node's ranks, replicated across nodes, its gradient shards "
      "all-reduced across them; hpz (stage 3, zero_hpz_partition_size = the ranks of a node) "
      "flat with a secondary copy of the parameters partitioned within each node, from which "
      "they are gathered after their first gather of a step. With several nodes all three are "
      "planned unless the config chooses (mics_shard_size, hybrid_shard or "
      "zero_hpz_partition_size). Each row's collectives, the ranks each spans, whether "
      "they cross nodes and the bytes each rank sends per step are printed for the recommended "
      "row, for every row with --details, and in --json (comm). ZeRO++'s quantized "
      "communication from the config (zero_quantized_weights, zero_quantized_gradients) applies "
      "to every row: those collectives send an int8 and a 256th of an fp32 scale per element, "
      "and the gather arena and bucket buffers hold the packed chunks.",
      "zero-mem"};
  zero::mem::ModelArgs model_args;
  zero::mem::Hardware hw;
  std::string config_path, gpu_mem = "80GiB", cpu_mem = "1TiB", nvme, overhead = "2GiB";
  std::string device = "auto";
  std::vector<std::string> sets;
  int seq = 0;
  std::vector<int> stages;
  std::string layout = "auto";
  bool as_json = false, checkpointing = false;
  zero::mem::ReportOptions report;
  app.add_option("--params", model_args.params, "total parameters (e.g. 70e9)")
      ->check(zero::tools::between(1, 1e15));
  app.add_option("--largest-layer", model_args.largest_layer,
                 "parameters of the largest layer, with --params and no architecture")
      ->check(zero::tools::between(1, 1e15));
  app.add_option("--model", model_args.model,
                 fmt::format("a reference model: a GPT (tiny, gpt2-124m, gpt2-350m, gpt2-774m, "
                             "gpt2-1.5b) or a Llama family model ({}); or a Hugging Face "
                             "model directory or its config.json (model_type gpt2, llama, "
                             "mistral or qwen2), as the Python front end registers it",
                             fmt::join(zero::llama::LlamaConfig::names(), ", ")));
  app.add_option("--arch", model_args.arch,
                 "a GPT: layers,channels,heads,vocab,positions; with --params the MLP width "
                 "is chosen to match the count");
  app.add_option("--seq", seq,
                 "tokens per sequence (default: the model's positions, at most 1024, as "
                 "zero-train)")
      ->check(zero::tools::between(1, 1 << 24));
  app.add_option("--device", device,
                 "gpu, cpu, or auto: cpu when this machine has no GPU and none of --gpu-mem, "
                 "--gpu-overhead, --pcie-gbps is given, else gpu")
      ->check(CLI::IsMember({"auto", "gpu", "cpu"}))
      ->capture_default_str();
  app.add_option("--gpus-per-node,--ranks-per-node", hw.gpus_per_node,
                 "GPUs per node (on the CPU device: ranks per node)")
      ->check(zero::tools::between(1, 1024))
      ->capture_default_str();
  app.add_option("--nodes", hw.nodes, "nodes")
      ->check(zero::tools::between(1, 1 << 20))
      ->capture_default_str();
  auto* gpu_mem_option =
      app.add_option("--gpu-mem", gpu_mem, "memory per GPU")->capture_default_str();
  app.add_option("--cpu-mem", cpu_mem, "host memory per node")->capture_default_str();
  app.add_option("--nvme", nvme, "NVMe space per node (none: no NVMe modes)");
  auto* overhead_option =
      app.add_option("--gpu-overhead", overhead,
                     "per GPU beyond the engine and activations: CUDA context, cuBLAS and NCCL "
                     "buffers, fragmentation")
          ->capture_default_str();
  app.add_option("--config,--deepspeed_config", config_path,
                 "a DeepSpeed config (default: micro-batch 1, bf16, AdamW); its stage and "
                 "offload keys are replaced row by row");
  app.add_option("--set", sets, "KEY=VALUE: a config value, as zero-train --set");
  app.add_option("--stage", stages, "only these stages (repeatable)");
  app.add_option("--layout", layout,
                 "flat, hybrid (a shard group per node), hpz (a secondary partition per node), "
                 "all, or auto: all with several nodes unless the config chooses, else the "
                 "config's")
      ->check(CLI::IsMember({"auto", "flat", "hybrid", "hpz", "all"}))
      ->capture_default_str();
  bool front_end = false;
  app.add_flag("--front-end", front_end,
               "the model trains through the Python front end (zero.initialize): per rank the "
               "Python side's memory (the process, a unit initialised without weights, a "
               "streamed save's tensor) instead of the CPU layers' fp32 copies");
  app.add_flag("--activation-checkpointing", checkpointing,
               "checkpoint every block on every row (also when the config has an "
               "activation_checkpointing section)");
  app.add_option("--peak-tflops", hw.peak_tflops,
                 fmt::format("the GPU's dense rate (default: H100 SXM, 989 bf16/fp16, 495 TF32 "
                             "for fp32); on the CPU device a rank's ({} by default)",
                             zero::mem::kCpuTflops))
      ->check(zero::tools::above(0));
  auto* pcie_option =
      app.add_option("--pcie-gbps", hw.pcie_gbps, "GB/s each way per GPU (PCIe Gen5 x16)")
          ->check(zero::tools::above(0))
          ->capture_default_str();
  app.add_option("--nvme-read-gbps", hw.nvme_read_gbps, "GB/s per node")
      ->check(zero::tools::above(0))
      ->capture_default_str();
  app.add_option("--nvme-write-gbps", hw.nvme_write_gbps, "GB/s per node")
      ->check(zero::tools::above(0))
      ->capture_default_str();
  app.add_option("--intra-node-gbps", hw.intra_node_gbps, "GB/s per GPU each way (NVLink 4)")
      ->check(zero::tools::above(0))
      ->capture_default_str();
  app.add_option("--inter-node-gbps", hw.inter_node_gbps, "GB/s per GPU between nodes (400 Gb/s)")
      ->check(zero::tools::above(0))
      ->capture_default_str();
  app.add_option("--host-mem-gbps", hw.host_mem_gbps, "host memory GB/s per node")
      ->check(zero::tools::above(0))
      ->capture_default_str();
  app.add_flag("--deepspeed-estimate", report.deepspeed,
               "also print DeepSpeed's estimate_zero2/zero3_model_states_mem_needs rows");
  app.add_flag("--details", report.details,
               "every arena of every row, and what is short where a row does not fit (as "
               "zero_init would say it)");
  app.add_flag("--json", as_json, "JSON for scripts instead of the table");
  CLI11_PARSE(app, argc, argv);

  try {
    zero::mem::Request request;
    hw.gpu_mem = zero::parse_bytes(gpu_mem, "--gpu-mem");
    hw.cpu_mem = zero::parse_bytes(cpu_mem, "--cpu-mem");
    hw.nvme = nvme.empty() ? 0 : zero::parse_bytes(nvme, "--nvme");
    hw.gpu_overhead = zero::parse_bytes(overhead, "--gpu-overhead");
    const bool gpu_asked =
        gpu_mem_option->count() + overhead_option->count() + pcie_option->count() > 0;
    if (device == "cpu" && gpu_asked) {
      throw std::invalid_argument(
          "--device cpu plans ranks on CPUs: --gpu-mem, --gpu-overhead and --pcie-gbps do not "
          "apply (give the host memory with --cpu-mem)");
    }
    hw.cpu_device =
        device == "cpu" || (device == "auto" && !gpu_asked && zero::probe_cuda().device_count == 0);
    if (static_cast<long long>(hw.gpus_per_node) * hw.nodes > (1 << 24)) {
      throw std::invalid_argument(fmt::format(
          "--gpus-per-node {} x --nodes {} is more than 16,777,216 GPUs: zero plans up to that",
          hw.gpus_per_node, hw.nodes));
    }
    request.hardware = hw;
    request.config = config_path.empty() ? zero::config::parse_json_text(
                                               kDefaultConfig, "zero-mem's default config")
                                         : zero::config::read_json_file(config_path);
    for (const std::string& assignment : sets) {
      request.overrides.push_back(zero::config::parse_override(assignment));
    }
    // The registry's default group carries the optimizer's weight decay, as the engine's does.
    model_args.weight_decay =
        zero::mem::mode_config(request, zero::mem::modes_for(0, false).front())
            .optimizer.weight_decay;
    request.model = zero::mem::build_model(model_args);
    const int positions = request.model.positions();
    request.seq = seq > 0 ? seq : positions > 0 ? std::min(positions, 1024) : 2048;
    if (positions > 0 && request.seq > positions) {
      throw std::invalid_argument(
          fmt::format("--seq {} is more than the model's {} positions", request.seq, positions));
    }
    request.checkpointing = checkpointing || zero::mem::given(request, "activation_checkpointing");
    request.front_end = front_end;
    // A directory with weights: the front end loads them (pretrained=), no unit initialised.
    request.pretrained = front_end && zero::mem::holds_weights(model_args.model);
    if (!stages.empty()) request.stages = stages;
    const bool config_chooses =
        zero::mem::given(request, "zero_optimization.mics_shard_size") ||
        zero::mem::given(request, "zero_optimization.hybrid_shard") ||
        zero::mem::given(request, "zero_optimization.zero_hpz_partition_size");
    if (layout == "all" || (layout == "auto" && hw.nodes > 1 && !config_chooses)) {
      request.layouts = {"flat", "hybrid", "hpz"};
    } else if (layout != "auto") {
      request.layouts = {layout};
    }
    for (int s : request.stages) {
      if (s < 0 || s > 3) throw std::invalid_argument(fmt::format("--stage {}: 0 to 3", s));
    }
    const zero::mem::Plan plan = zero::mem::plan_all(request);
    if (as_json) {
      std::cout << zero::mem::report_json(request, plan, report).dump(2) << "\n";
    } else {
      std::cout << zero::mem::report_text(request, plan, report);
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "zero-mem: %s\n", error.what());
    return 2;
  }
}
