// zero-mem's planning: for each ZeRO stage and each way of offloading, what the engine would
// reserve (memory_plan.h, the engine's own arithmetic, for rank 0 of the world asked about),
// what the activations of a GPT-shaped model add, whether it fits the hardware, and a lower
// bound on the step time from the FLOPs and the bytes each choice moves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "engine/plan/memory_plan.h"
#include "tools/zero-mem/model_shape.h"

namespace zero::mem {

struct Hardware {
  // The CPU device (--device cpu): ranks on CPUs, whose device memory is host memory, so the
  // device tier, the activations and the host tiers are one pool per node (--cpu-mem), with
  // no GPU, PCIe or GPU overhead; gpus_per_node counts ranks.
  bool cpu_device = false;
  int gpus_per_node = 8;
  int nodes = 1;
  std::uint64_t gpu_mem = 80ull << 30;
  std::uint64_t cpu_mem = 1ull << 40;       // per node
  std::uint64_t nvme = 0;                   // per node; 0: no NVMe
  std::uint64_t gpu_overhead = 2ull << 30;  // CUDA context, cuBLAS and NCCL buffers, fragments
  // Rates. Defaults: H100 SXM, PCIe Gen5 x16, one typical NVMe drive, NVLink 4 and 400 Gb/s
  // per GPU between nodes, a two-socket host's memory.
  double peak_tflops = 0;     // 0: 989 for bf16/fp16, 495 (TF32) for fp32; CPU: kCpuTflops
  double pcie_gbps = 55;      // GB/s each way per GPU
  double nvme_read_gbps = 7;  // GB/s per node
  double nvme_write_gbps = 5;
  double intra_node_gbps = 450;  // GB/s per GPU, each way
  double inter_node_gbps = 50;
  double host_mem_gbps = 200;  // GB/s per node, for the CPU optimizer

  int world() const noexcept { return gpus_per_node * nodes; }
  // What a rank's device is called in the report: "GPU", or "rank" on the CPU device.
  const char* unit() const noexcept { return cpu_device ? "rank" : "GPU"; }
};

// The CPU device's default rate per rank (TFLOP/s): what the CPU layers reached on two AVX-512
// cores training llama-3.2-3b (bench/results/scale.txt: 1.6 TFLOP in 130 s of forward and
// backward); give --peak-tflops for a larger machine.
inline constexpr double kCpuTflops = 0.0125;

// One way of placing the state: a stage and the offload keys it sets, in a layout.
struct Mode {
  int stage = 0;
  std::string name;     // "none", "optimizer cpu", "optimizer nvme", "optimizer split",
                        // "params cpu", "params nvme"
  nlohmann::json keys;  // the config keys this mode sets, dotted path -> value
  // "flat", or "hybrid": a shard group per node (zero_optimization.hybrid_shard); "config":
  // as the config says (mics_shard_size or hybrid_shard given there)
  std::string layout = "config";
};

// One collective of the step, for each rank: what it moves, over how many ranks, whether
// those ranks span nodes (then it runs at the inter-node rate), and the bytes each rank sends
// per optimizer step as a ring algorithm sends them: (n-1)/n of the buffer for a
// reduce-scatter or an all-gather over n ranks, twice that for an all-reduce.
struct CommLine {
  std::string what;
  int ranks = 1;
  bool across_nodes = false;
  double bytes = 0;
};

// The lower bound on one optimizer step (seconds, per GPU), each resource alone at its rate.
struct StepBound {
  double flops = 0;  // per GPU per step, with recomputation
  double compute = 0, pcie = 0, nvme = 0, network = 0, cpu_optimizer = 0;
  // The optimizer's step after backward, which follows compute: the CPU optimizer or its NVMe
  // state's I/O, whichever is longer, without super_offload (0 with it, or on a GPU optimizer).
  double after_backward = 0;
  double seconds = 0;    // the largest of them (perfect overlap), or compute + after_backward
  std::string bound_by;  // which one
  std::uint64_t pcie_bytes = 0, nvme_bytes = 0, network_bytes = 0;  // per GPU / node / GPU
  // The network per rank: each collective, and the bytes within a node and across nodes
  // (network_bytes is their sum; the two links run at once, so `network` is the slower).
  std::vector<CommLine> comm;
  std::uint64_t intra_node_bytes = 0, inter_node_bytes = 0;
};

struct Row {
  Mode mode;
  std::string layout;          // as the engine lays it out: "flat", or "hybrid RxS" (R groups of S)
  bool checkpointing = false;  // activation checkpointing of every block
  std::string error;           // the engine would refuse this config (then nothing else is set)
  engine::MemoryPlan plan;
  std::uint64_t device_state = 0;  // per GPU (rank): the engine's device arenas and scratch
  std::uint64_t activations = 0;   // per GPU (rank), for a GPT-shaped model
  std::uint64_t device_total = 0;  // state + activations + overhead (none on the CPU device)
  std::uint64_t pinned_node = 0, host_node = 0, nvme_node = 0;  // per node
  // By the engine's check at init (engine/plan/fit_rules.h) on one node of the hardware asked
  // about; each pool that is short, as that check would say it.
  bool fits_gpu = false, fits_host = false, fits_nvme = false;
  std::vector<std::string> shortfalls;
  StepBound step;
  bool fits() const noexcept { return error.empty() && fits_gpu && fits_host && fits_nvme; }
};

struct Request {
  ModelShape model;
  Hardware hardware;
  config::json config;                      // the user's config (or the default)
  std::vector<config::Override> overrides;  // --set, applied over it before each mode's keys
  int seq = 0;                              // tokens per sequence (GPT: the positions unless given)
  bool checkpointing = false;               // the config or the flag asks for it on every row
  std::vector<int> stages{0, 1, 2, 3};
  // The layouts to plan each mode in: "config" (the config's own), or "flat" and/or "hybrid"
  // (zero-mem --layout).
  std::vector<std::string> layouts{"config"};
  // The model is trained through the Python front end (zero.initialize), not zero-train: no
  // CPU layers' fp32 copies, and the Python side's own memory (front_end_bytes) per rank.
  bool front_end = false;
  // Through the front end, whether the model's values come from a directory of weights
  // (--model DIR with safetensors) rather than its own initialisation a unit at a time.
  bool pretrained = false;
};

struct Plan {
  std::vector<Row> rows;
  std::optional<std::size_t> recommended;  // the fastest row that fits
  // The recommended row with offload_optimizer.super_offload, where the config leaves it unset,
  // the row's optimizer steps after backward, and with it the row still fits and its step
  // bound is lower (its second copy of the state, or NVMe regions, counted).
  std::optional<Row> super_offload;
  std::int64_t micro_batch = 1;
  std::int64_t accumulation = 1;
  int seq = 0;
  std::string precision;  // fp32, bf16, fp16
  // GPT-shaped models: per GPU per micro-batch, without and with checkpointing every block.
  std::optional<models::ActivationBytes> activations, checkpointed_activations;
  // The CPU device: the CPU layers' fp32 copies of the largest module, in each row's
  // activations (0 on a GPU, or with fp32 compute, or through the front end).
  std::uint64_t compute_copies = 0;
  // Through the front end: what the Python side holds per rank beyond zero's arenas (in each
  // row's rank column on the CPU device, in its host memory beside a GPU).
  std::uint64_t front_end = 0;
  bool pretrained = false;  // the request's
};

// The Python process measured with torch, transformers and zero imported (0.71 GiB on the
// development machine, 2026-12-06), rounded up.
inline constexpr std::uint64_t kPythonProcessBytes = 768ull << 20;

// What a rank of the Python front end holds beyond zero's arenas and the activations: the
// process itself, and the larger of a model built without its weights and initialised a unit
// at a time (unless `pretrained`: the unit's values and their broadcast copy, fp32) and a
// streamed save (one parameter read in fp32 and its copy in bf16). A parameter's placeholder is
// one element, and its view is zero's own memory.
std::uint64_t front_end_bytes(const ModelShape& model, bool pretrained);

// The stages' modes: "none" at every stage; from stage 1 the optimizer on the CPU, on NVMe,
// and split between memory and NVMe (max_in_cpu filling the host memory left); at stage 3 the
// parameters too, on the CPU and on NVMe (with the optimizer beside them).
std::vector<Mode> modes_for(int stage, bool nvme);

// Whether the request's config or its overrides give `dotted` (a key or a section).
bool given(const Request& request, const std::string& dotted);

// The request's config with the mode's keys, read as the engine would for the world. Throws
// the config's Error when the engine would refuse it.
config::Config mode_config(const Request& request, const Mode& mode);

// One row: the engine's plan for rank 0, the activations, the fit and the step bound.
Row plan_row(const Request& request, const Mode& mode, bool checkpointing);

// Every stage and mode of the request; a row that does not fit on the GPU is planned again
// with activation checkpointing (GPT-shaped models) and shown so.
Plan plan_all(const Request& request);

}  // namespace zero::mem
