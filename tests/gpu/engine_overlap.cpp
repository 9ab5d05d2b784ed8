// Overlap shown, not assumed: an engine on GPU 0 (an NCCL world of one) with
// wall_clock_breakdown trains a model of 8 modules whose compute is a kernel that keeps the
// caller's stream busy, at ZeRO stage 2 (reductions issued during backward) and stage 3
// (gathers prefetched during forward and backward). Rank 0 logs, every 4 steps, how much of the
// reductions and gathers ran while the caller's stream computed, from CUDA events; gpu-check
// keeps the lines. What the program checks is the engine's arithmetic: every step steps, and
// the gradient norm is that of the gradients the model wrote on its stream (a constant fill),
// so a hook that let the reduction read before the caller's writes fails here.
//
// Exits 77 (skipped) without a GPU, 1 on a failure.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "base/half.h"
#include "tests/gpu/spin_kernel.h"
#include "tests/multirank/model_memory.h"
#include "zero/zero.h"

namespace {

constexpr int kModules = 8;
constexpr long long kElements = 1 << 22;  // per module: 8 MiB of bf16
constexpr int kSteps = 8;
constexpr long long kForwardCycles = 1'000'000;   // about 0.5 ms at 2 GHz
constexpr long long kBackwardCycles = 2'000'000;  // about 1 ms
constexpr unsigned char kFill = 0x3c;             // every gradient element: bf16 0x3c3c

bool ok(zero_status status, const char* what) {
  if (status != ZERO_OK) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, zero_status_string(status),
                 zero_last_error());
    return false;
  }
  return true;
}

int run(int stage, void* stream) {
  char config[1024];
  std::snprintf(config, sizeof config, R"({
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
    "bf16": {"enabled": true}, "wall_clock_breakdown": true, "steps_per_print": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "zero_optimization": {"stage": %d, "overlap_comm": true, "reduce_bucket_size": 2000000,
      "allgather_bucket_size": 2000000, "stage3_prefetch_bucket_size": 8000000,
      "stage3_param_persistence_threshold": 0}})",
                stage);
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.device = ZERO_DEVICE_CUDA;
  void* nccl = zero_test::nccl_world_of_one(0);
  options.nccl_comm = nccl;
  zero_engine* engine = nullptr;
  if (!ok(zero_create(config, &options, &engine), "zero_create")) return 1;
  std::vector<int> modules(kModules);
  const long long shape[1] = {kElements};
  for (int m = 0; m < kModules; ++m) {
    const std::string name = "layer" + std::to_string(m);
    if (!ok(zero_add_module(engine, name.c_str(), &modules[m]), "zero_add_module")) return 1;
    zero_param_desc desc{};
    const std::string param = name + ".weight";
    desc.name = param.c_str();
    desc.shape = shape;
    desc.ndim = 1;
    desc.trainable = 1;
    desc.modules = &modules[m];
    desc.module_count = 1;
    int id = 0;
    if (!ok(zero_add_param(engine, &desc, &id), "zero_add_param")) return 1;
  }
  if (!ok(zero_init(engine), "zero_init")) return 1;
  const double fill = zero::bf16_to_float(0x3c3c);
  const double want_norm = std::fabs(fill) * std::sqrt(static_cast<double>(kModules * kElements));
  int failures = 0;
  for (int step = 0; step < kSteps; ++step) {
    for (int m = 0; m < kModules; ++m) {
      if (!ok(zero_pre_forward(engine, m, stream), "zero_pre_forward")) return 1;
      if (!zero_test::spin_on(stream, kForwardCycles)) return 1;
      if (!ok(zero_post_forward(engine, m, stream), "zero_post_forward")) return 1;
    }
    for (int m = kModules - 1; m >= 0; --m) {
      if (!ok(zero_pre_backward(engine, m, stream), "zero_pre_backward")) return 1;
      if (!zero_test::spin_on(stream, kBackwardCycles)) return 1;
      void* grad = nullptr;
      if (!ok(zero_grad_buffer(engine, m, &grad), "zero_grad_buffer")) return 1;
      if (cudaMemsetAsync(grad, kFill, kElements * 2, static_cast<cudaStream_t>(stream)) !=
          cudaSuccess) {
        std::fprintf(stderr, "cudaMemsetAsync failed\n");
        return 1;
      }
      if (!ok(zero_post_backward(engine, m, stream), "zero_post_backward")) return 1;
    }
    zero_step_stats stats{};
    if (!ok(zero_step(engine, &stats), "zero_step")) return 1;
    if (!stats.stepped || stats.skipped ||
        std::fabs(stats.grad_norm - want_norm) > 1e-3 * want_norm) {
      std::fprintf(stderr,
                   "FAIL stage %d step %d: stepped %d skipped %d gradient norm %.6g, the "
                   "model wrote %.6g\n",
                   stage, step, stats.stepped, stats.skipped, stats.grad_norm, want_norm);
      ++failures;
    }
  }
  if (!ok(zero_destroy(engine), "zero_destroy")) return 1;
  zero_test::free_nccl_world_of_one(nccl);
  std::printf("%s stage %d: %d steps of %d modules, gradient norm %.6g\n",
              failures == 0 ? "ok  " : "FAIL", stage, kSteps, kModules, want_norm);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  std::string why;
  if (zero_test::gpu_count(&why) == 0) {
    std::printf("SKIPPED: no GPU: %s\n", why.c_str());
    return 77;
  }
  if (!zero_test::nccl_built()) {
    std::printf("SKIPPED: built without NCCL, and the overlap is measured on NCCL's stream\n");
    return 77;
  }
  setenv("ZERO_LOG_LEVEL", "info", 0);  // the breakdown lines are info
  cudaSetDevice(0);
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
  int status = 0;
  for (int stage : {2, 3}) status |= run(stage, stream);
  cudaStreamDestroy(stream);
  return status;
}
