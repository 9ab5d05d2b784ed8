// The model the C-API multi-rank programs train (engine_equivalence, engine_checkpoint): four
// modules and six parameters registered through zero.h, with a tied parameter (used by the
// first and last module), a frozen one, one used only in some steps (its module is skipped on
// every rank then), one smaller than 4 ranks, ones not divisible by the world size, and one
// larger than a bucket (buckets of 64 elements). Its loss per module m and parameter p is
// a_m / 2 * mean_i (p_i - t_i)^2 with targets t that depend on the micro-batch (so each rank's
// gradients differ), so the gradient is a_m (p_i - t_i) / numel. It reaches the engine's
// buffers through a ModelMemory (model_memory.h): directly on the CPU, by copies on the hooks'
// stream on a GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <mpi.h>

#include "base/half.h"
#include "tests/multirank/c_api_check.h"
#include "tests/multirank/model_memory.h"
#include "zero/zero.h"

namespace zero_test {

// This process's MPI rank and the world size, set by main() (CHECK_OK names the rank).
inline int g_rank = 0;
inline int g_world = 1;
// zero_create_options.device of every engine built here (ZERO_DEVICE_CPU or _CUDA), and how
// the model reaches that device's buffers; main() sets both for a GPU run.
inline int g_device = ZERO_DEVICE_CPU;
inline HostModelMemory g_host_memory;
inline ModelMemory* g_memory = &g_host_memory;

struct Param {
  const char* name;
  std::vector<long long> shape;
  bool trainable;
  int group;  // 0 default, 1 no-decay
  std::vector<int> modules;
  bool from_rank0;  // initial values from rank 0, else an initializer
};

// Modules in forward order: 0 embed, 1 block, 2 sometimes, 3 head.
inline const std::vector<Param> kParams = {
    {"embed.weight", {7, 5}, true, 0, {0, 3}, true},  // tied with the head
    {"block.weight", {300}, true, 0, {1}, false},     // larger than a bucket
    {"block.bias", {3}, true, 1, {1}, false},         // smaller than 4 ranks
    {"block.frozen", {11}, false, 0, {1}, true},      // frozen
    {"sometimes.weight", {13}, true, 0, {2}, false},  // used only in some steps
    {"head.weight", {17}, true, 0, {3}, false},
};
inline constexpr double kModuleWeight[4] = {1.0, 0.7, 1.3, 0.5};
inline constexpr int kModules = 4;

inline bool module_runs(int module, int step) {
  return module != 2 || step % 3 == 1;
}

inline std::size_t numel(const Param& p) {
  std::size_t n = 1;
  for (long long d : p.shape) n *= static_cast<std::size_t>(d);
  return n;
}

inline float initial_value(int param, std::uint64_t i) {
  return 0.5f * static_cast<float>(std::sin(0.3 * static_cast<double>(i) + param));
}

inline void initializer(void*, int param, unsigned long long offset, unsigned long long count,
                        float* out) {
  for (unsigned long long k = 0; k < count; ++k) out[k] = initial_value(param, offset + k);
}

// Targets stay well away from the parameters (which start within 0.5 of zero and move at
// most lr = 0.01 a step), so no gradient sum sits near zero: there, half-precision accumulation
// noise flips the sign Adam follows, and the comparison would measure that noise instead of
// the engine.
inline float target(int param, std::size_t i, long long batch) {
  return static_cast<float>(1.5 + 0.3 * std::sin(0.37 * batch + 0.11 * i + 1.7 * param) +
                            0.2 * std::sin(0.13 * i + 0.7 * param));
}

inline float load(const void* data, zero_dtype dtype, std::size_t i) {
  switch (dtype) {
    case ZERO_FP32:
      return static_cast<const float*>(data)[i];
    case ZERO_BF16:
      return zero::bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case ZERO_FP16:
      return zero::fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0;
}

inline void store(void* data, zero_dtype dtype, std::size_t i, float v) {
  switch (dtype) {
    case ZERO_FP32:
      static_cast<float*>(data)[i] = v;
      return;
    case ZERO_BF16:
      static_cast<std::uint16_t*>(data)[i] = zero::float_to_bf16(v);
      return;
    case ZERO_FP16:
      static_cast<std::uint16_t*>(data)[i] = zero::float_to_fp16(v);
      return;
  }
}

struct Case {
  int stage;
  const char* precision;  // fp32, bf16, fp16
  int accumulation;
  double clipping;
  bool overlap;
  const char* offload = "none";        // offload_optimizer.device
  const char* param_offload = "none";  // offload_param.device (stage 3)
  bool super_offload = false;          // offload_optimizer.super_offload
  // fp16: at this step one element of the first micro-batch's gradient is infinite, so the
  // step is skipped (-1: none).
  int overflow_step = -1;
  // zero_optimization.mics_shard_size: hybrid sharding over groups of this many ranks (0: none).
  int shard_size = 0;
  bool hybrid_node = false;        // zero_optimization.hybrid_shard: a node's ranks form each group
  int hpz = 0;                     // zero_optimization.zero_hpz_partition_size (0: none)
  bool quantized_weights = false;  // zero_optimization.zero_quantized_weights (ZeRO++ qwZ)
  bool quantized_gradients = false;  // zero_optimization.zero_quantized_gradients (qgZ)
  // offload_optimizer.accumulate_on_device (with an offload; beside a GPU or on a stand-in
  // CPU device, stages 2-3, accumulating: a window's gradients summed on the device)
  bool accumulate_on_device = false;
};

// Where NVMe cases put their swap files: ZERO_TEST_NVME_DIR, else the working directory (ctest
// runs in the build tree, on a disk that takes O_DIRECT; tmpfs does not).
inline const char* swap_dir() {
  const char* dir = std::getenv("ZERO_TEST_NVME_DIR");
  return dir != nullptr && *dir != '\0' ? dir : ".";
}

inline std::string config_for(const Case& c, int accumulation) {
  std::string precision;
  if (std::string(c.precision) == "bf16") precision = R"("bf16": {"enabled": true},)";
  if (std::string(c.precision) == "bf16-states") {
    precision = R"("bf16": {"enabled": true, "bf16_optimizer_states": true},)";
  }
  if (std::string(c.precision) == "fp16") {
    precision = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
  }
  // offload_optimizer's own switches, after max_in_cpu.
  std::string offload_keys;
  if (c.super_offload && c.stage != 0) offload_keys += R"(, "super_offload": true)";
  if (c.accumulate_on_device && c.stage != 0 && std::string(c.offload) != "none") {
    offload_keys += R"(, "accumulate_on_device": true)";
  }
  char text[2048];
  std::snprintf(
      text, sizeof text, R"({
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": %d,
    %s
    "gradient_clipping": %g,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
    "zero_optimization": {
      "stage": %d,
      "reduce_bucket_size": 64,
      "allgather_bucket_size": 64,
      "overlap_comm": %s,
      "stage3_param_persistence_threshold": 10,
      "stage3_prefetch_bucket_size": 64,
      "sub_group_size": 50,
      "mics_shard_size": %d,
      "hybrid_shard": %s,
      "zero_hpz_partition_size": %d,
      "zero_quantized_weights": %s,
      "zero_quantized_gradients": %s,
      "zero_quantized_error_check": %s,
      "offload_optimizer": {"device": "%s", "pin_memory": true, "nvme_path": "%s",
                            "buffer_count": 3, "pipeline_read": true, "pipeline_write": %s,
                            "max_in_cpu": 60%s},
      "offload_param": {"device": "%s", "pin_memory": true, "nvme_path": "%s",
                        "max_in_cpu": 30, "buffer_size": 1000}
    }
  })",
      accumulation, precision.c_str(), c.clipping, c.stage, c.overlap ? "true" : "false",
      c.shard_size > 0 ? c.shard_size : -1, c.hybrid_node ? "true" : "false", c.hpz > 0 ? c.hpz : 1,
      c.quantized_weights ? "true" : "false", c.quantized_gradients ? "true" : "false",
      c.quantized_weights || c.quantized_gradients ? "true" : "false",
      c.stage == 0 ? "none" : c.offload, swap_dir(), c.accumulation == 3 ? "true" : "false",
      offload_keys.c_str(), c.stage == 3 ? c.param_offload : "none", swap_dir());
  return text;
}

// An engine for case c on `comm`, or on the NCCL communicator `nccl` when given.
inline zero_engine* build(const Case& c, MPI_Comm* comm, int accumulation, std::vector<int>* ids,
                          void* nccl = nullptr) {
  const std::string config = config_for(c, accumulation);
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.mpi_comm = nccl != nullptr ? nullptr : comm;
  options.nccl_comm = nccl;
  options.device = g_device;
  zero_engine* engine = nullptr;
  CHECK_OK(zero_create(config.c_str(), &options, &engine));
  int group = -1;
  CHECK_OK(zero_add_group(engine, "no_decay", 0.0, 1.0, &group));
  const char* names[kModules] = {"embed", "block", "sometimes", "head"};
  for (int m = 0; m < kModules; ++m) CHECK_OK(zero_add_module(engine, names[m], nullptr));
  std::vector<std::vector<float>> initial(kParams.size());
  ids->clear();
  for (std::size_t k = 0; k < kParams.size(); ++k) {
    const Param& p = kParams[k];
    zero_param_desc desc{};
    desc.name = p.name;
    desc.shape = p.shape.data();
    desc.ndim = static_cast<int>(p.shape.size());
    desc.trainable = p.trainable ? 1 : 0;
    desc.group = p.group == 1 ? group : 0;
    desc.modules = p.modules.data();
    desc.module_count = static_cast<int>(p.modules.size());
    if (p.from_rank0) {
      int rank = 0;
      CHECK_OK(zero_rank(engine, &rank));
      if (rank == 0) {
        initial[k].resize(numel(p));
        for (std::size_t i = 0; i < numel(p); ++i)
          initial[k][i] = initial_value(static_cast<int>(k), i);
        desc.initial = initial[k].data();
      }
    } else {
      desc.initializer = &initializer;
    }
    int id = -1;
    CHECK_OK(zero_add_param(engine, &desc, &id));
    ids->push_back(id);
  }
  CHECK_OK(zero_init(engine));
  return engine;
}

// One micro-batch: forward hooks, then backward hooks adding this batch's gradients, every hook
// on g_memory's stream.
// `overflow`: the first gradient element written is made infinite (an fp16 overflow).
inline void micro_batch(zero_engine* engine, int step, long long batch, zero_dtype dtype,
                        bool overflow = false) {
  void* stream = g_memory->stream();
  for (int m = 0; m < kModules; ++m) {
    if (!module_runs(m, step)) continue;
    CHECK_OK(zero_pre_forward(engine, m, stream));
    CHECK_OK(zero_post_forward(engine, m, stream));
  }
  double factor = 0;
  CHECK_OK(zero_loss_factor(engine, &factor));
  const std::size_t width = dtype == ZERO_FP32 ? 4 : 2;
  std::vector<unsigned char> value, grad;
  for (int m = kModules - 1; m >= 0; --m) {
    if (!module_runs(m, step)) continue;
    CHECK_OK(zero_pre_backward(engine, m, stream));
    for (std::size_t k = 0; k < kParams.size(); ++k) {
      const Param& p = kParams[k];
      bool uses = false;
      for (int u : p.modules) uses |= u == m;
      if (!uses || !p.trainable) continue;
      void* value_buffer = nullptr;
      void* grad_buffer = nullptr;
      CHECK_OK(zero_param_data(engine, static_cast<int>(k), &value_buffer));
      CHECK_OK(zero_grad_buffer(engine, static_cast<int>(k), &grad_buffer));
      const std::size_t n = numel(p);
      value.resize(n * width);
      grad.resize(n * width);
      g_memory->to_host(value_buffer, value.data(), n * width);
      g_memory->to_host(grad_buffer, grad.data(), n * width);
      for (std::size_t i = 0; i < n; ++i) {
        const double g =
            kModuleWeight[m] *
            (load(value.data(), dtype, i) - target(static_cast<int>(k) * 4 + m, i, batch)) /
            static_cast<double>(n);
        store(grad.data(), dtype, i, load(grad.data(), dtype, i) + static_cast<float>(g * factor));
      }
      if (overflow) {
        store(grad.data(), dtype, 0, std::numeric_limits<float>::infinity());
        overflow = false;
      }
      g_memory->from_host(grad_buffer, grad.data(), n * width);
    }
    CHECK_OK(zero_post_backward(engine, m, stream));
  }
}

}  // namespace zero_test
