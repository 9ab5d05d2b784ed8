// The engine's main test (docs/design.md, "Equivalence"): a model written here trains 10
// optimizer steps through the C API at ZeRO stages 0-3 on this job's ranks, for fp32, bf16
// and fp16, accumulation 1 and 3, clipping off and on; each case is compared with stage 0 on
// one rank (an engine on MPI_COMM_SELF fed every rank's micro-batches), within a tolerance per
// precision, and the replicated compute copies (stages 0-2) must be bit-identical across ranks.
//
// The model has a tied parameter (used by the first and last module), a frozen one, one used
// only in some steps (its module is skipped on every rank then), one smaller than 4 ranks,
// ones not divisible by the world size, and one larger than a bucket (buckets of 64 elements).
// Its loss per module m and parameter p is a_m / 2 * mean_i (p_i - t_i)^2 with targets t that
// depend on the micro-batch (so each rank's gradients differ), so the gradient is
// a_m (p_i - t_i) / numel.
//
// Run it under mpirun (zero-run -n N); exits non-zero when a case fails, naming it.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/half.h"
#include "tests/multirank/c_api_check.h"
#include "zero/zero.h"

namespace {

int g_rank = 0;
int g_world = 1;
int g_failures = 0;

struct Param {
  const char* name;
  std::vector<long long> shape;
  bool trainable;
  int group;  // 0 default, 1 no-decay
  std::vector<int> modules;
  bool from_rank0;  // initial values from rank 0, else an initializer
};

// Modules in forward order: 0 embed, 1 block, 2 sometimes, 3 head.
const std::vector<Param> kParams = {
    {"embed.weight", {7, 5}, true, 0, {0, 3}, true},    // tied with the head
    {"block.weight", {300}, true, 0, {1}, false},       // larger than a bucket
    {"block.bias", {3}, true, 1, {1}, false},           // smaller than 4 ranks
    {"block.frozen", {11}, false, 0, {1}, true},        // frozen
    {"sometimes.weight", {13}, true, 0, {2}, false},    // used only in some steps
    {"head.weight", {17}, true, 0, {3}, false},
};
const double kModuleWeight[4] = {1.0, 0.7, 1.3, 0.5};
constexpr int kModules = 4;
constexpr int kSteps = 10;

bool module_runs(int module, int step) { return module != 2 || step % 3 == 1; }

std::size_t numel(const Param& p) {
  std::size_t n = 1;
  for (long long d : p.shape) n *= static_cast<std::size_t>(d);
  return n;
}

float initial_value(int param, std::uint64_t i) {
  return 0.5f * static_cast<float>(std::sin(0.3 * static_cast<double>(i) + param));
}

void initializer(void*, int param, unsigned long long offset, unsigned long long count, float* out) {
  for (unsigned long long k = 0; k < count; ++k) out[k] = initial_value(param, offset + k);
}

// Targets stay well away from the parameters (which start within 0.5 of zero and move at
// most lr = 0.01 a step), so no gradient sum sits near zero: there, half-precision accumulation
// noise flips the sign Adam follows, and the comparison would measure that noise instead of
// the engine.
float target(int param, std::size_t i, long long batch) {
  return static_cast<float>(1.5 + 0.3 * std::sin(0.37 * batch + 0.11 * i + 1.7 * param) +
                            0.2 * std::sin(0.13 * i + 0.7 * param));
}

float load(const void* data, zero_dtype dtype, std::size_t i) {
  switch (dtype) {
    case ZERO_FP32: return static_cast<const float*>(data)[i];
    case ZERO_BF16: return zero::bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case ZERO_FP16: return zero::fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
  }
  return 0;
}

void store(void* data, zero_dtype dtype, std::size_t i, float v) {
  switch (dtype) {
    case ZERO_FP32: static_cast<float*>(data)[i] = v; return;
    case ZERO_BF16: static_cast<std::uint16_t*>(data)[i] = zero::float_to_bf16(v); return;
    case ZERO_FP16: static_cast<std::uint16_t*>(data)[i] = zero::float_to_fp16(v); return;
  }
}

struct Case {
  int stage;
  const char* precision;  // fp32, bf16, fp16
  int accumulation;
  double clipping;
  bool overlap;
  const char* offload = "none";  // offload_optimizer.device
  const char* param_offload = "none";  // offload_param.device (stage 3)
};

// Where NVMe cases put their swap files: ZERO_TEST_NVME_DIR, else the working directory (ctest
// runs in the build tree, on a disk that takes O_DIRECT; tmpfs does not).
const char* swap_dir() {
  const char* dir = std::getenv("ZERO_TEST_NVME_DIR");
  return dir != nullptr && *dir != '\0' ? dir : ".";
}

std::string config_for(const Case& c, int accumulation) {
  std::string precision;
  if (std::string(c.precision) == "bf16") precision = R"("bf16": {"enabled": true},)";
  if (std::string(c.precision) == "bf16-states") {
    precision = R"("bf16": {"enabled": true, "bf16_optimizer_states": true},)";
  }
  if (std::string(c.precision) == "fp16") {
    precision = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
  }
  char text[2048];
  std::snprintf(text, sizeof text, R"({
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
      "offload_optimizer": {"device": "%s", "pin_memory": true, "nvme_path": "%s",
                            "buffer_count": 3, "pipeline_read": true, "pipeline_write": %s,
                            "max_in_cpu": 60},
      "offload_param": {"device": "%s", "pin_memory": true, "nvme_path": "%s",
                        "max_in_cpu": 30, "buffer_size": 1000}
    }
  })",
                accumulation, precision.c_str(), c.clipping, c.stage, c.overlap ? "true" : "false",
                c.stage == 0 ? "none" : c.offload, swap_dir(), c.accumulation == 3 ? "true" : "false",
                c.stage == 3 ? c.param_offload : "none", swap_dir());
  return text;
}

zero_engine* build(const Case& c, MPI_Comm* comm, int accumulation, std::vector<int>* ids) {
  const std::string config = config_for(c, accumulation);
  zero_create_options options{};
  options.mpi_comm = comm;
  options.device = 1;
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
        for (std::size_t i = 0; i < numel(p); ++i) initial[k][i] = initial_value(static_cast<int>(k), i);
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

// One micro-batch: forward hooks, then backward hooks adding this batch's gradients.
void micro_batch(zero_engine* engine, int step, long long batch, zero_dtype dtype) {
  for (int m = 0; m < kModules; ++m) {
    if (!module_runs(m, step)) continue;
    CHECK_OK(zero_pre_forward(engine, m, nullptr));
    CHECK_OK(zero_post_forward(engine, m, nullptr));
  }
  double factor = 0;
  CHECK_OK(zero_loss_factor(engine, &factor));
  for (int m = kModules - 1; m >= 0; --m) {
    if (!module_runs(m, step)) continue;
    CHECK_OK(zero_pre_backward(engine, m, nullptr));
    for (std::size_t k = 0; k < kParams.size(); ++k) {
      const Param& p = kParams[k];
      bool uses = false;
      for (int u : p.modules) uses |= u == m;
      if (!uses || !p.trainable) continue;
      void* value = nullptr;
      void* grad = nullptr;
      CHECK_OK(zero_param_data(engine, static_cast<int>(k), &value));
      CHECK_OK(zero_grad_buffer(engine, static_cast<int>(k), &grad));
      const std::size_t n = numel(p);
      for (std::size_t i = 0; i < n; ++i) {
        const double g = kModuleWeight[m] *
                         (load(value, dtype, i) - target(static_cast<int>(k) * 4 + m, i, batch)) /
                         static_cast<double>(n);
        store(grad, dtype, i, load(grad, dtype, i) + static_cast<float>(g * factor));
      }
    }
    CHECK_OK(zero_post_backward(engine, m, nullptr));
  }
}

std::uint64_t checksum(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void run_case(const Case& c) {
  char name[160];
  std::snprintf(name, sizeof name,
                "stage %d, %s, accumulation %d, clipping %g, overlap %d, offload %s, params %s, "
                "%d ranks",
                c.stage, c.precision, c.accumulation, c.clipping, c.overlap ? 1 : 0, c.offload,
                c.param_offload, g_world);
  const bool offloaded =
      std::string(c.offload) != "none" || std::string(c.param_offload) != "none";
  std::vector<int> ids, ref_ids;
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm self = MPI_COMM_SELF;
  zero_engine* engine = build(c, &world, c.accumulation, &ids);
  Case reference_case = c;
  reference_case.stage = 0;
  reference_case.offload = "none";
  reference_case.param_offload = "none";
  zero_engine* reference = build(reference_case, &self, c.accumulation * g_world, &ref_ids);
  // Offloaded: the same case without offload, which must give the same bits (on the CPU
  // device the same kernels run).
  std::vector<int> plain_ids;
  Case plain_case = c;
  plain_case.offload = "none";
  plain_case.param_offload = "none";
  zero_engine* plain = offloaded ? build(plain_case, &world, c.accumulation, &plain_ids) : nullptr;
  zero_dtype dtype = ZERO_FP32;
  CHECK_OK(zero_compute_dtype(engine, &dtype));

  // Adam is blind to a gradient's scale, so the norms (before clipping) are compared too:
  // within 1e-4 in fp32, and within the rounding of half-precision gradients otherwise.
  bool ok = true;
  const double norm_tol = std::string(c.precision) == "fp32" ? 1e-4 : 1e-2;
  for (int step = 0; step < kSteps; ++step) {
    zero_step_stats stats{}, ref_stats{};
    for (int s = 0; s < c.accumulation; ++s) {
      const long long base = (static_cast<long long>(step) * c.accumulation + s) * g_world;
      micro_batch(engine, step, base + g_rank, dtype);
      CHECK_OK(zero_step(engine, &stats));
      if (plain != nullptr) {
        zero_step_stats plain_stats{};
        micro_batch(plain, step, base + g_rank, dtype);
        CHECK_OK(zero_step(plain, &plain_stats));
      }
      for (int r = 0; r < g_world; ++r) {
        micro_batch(reference, step, base + r, dtype);
        CHECK_OK(zero_step(reference, &ref_stats));
      }
    }
    if (!stats.stepped || stats.skipped ||
        std::fabs(stats.grad_norm - ref_stats.grad_norm) > norm_tol * ref_stats.grad_norm) {
      if (ok && g_rank == 0) {
        std::fprintf(stderr, "FAIL %s: step %d: stepped %d skipped %d gradient norm %.8g, stage 0 "
                     "on one rank gives %.8g\n", name, step, stats.stepped, stats.skipped,
                     stats.grad_norm, ref_stats.grad_norm);
      }
      ok = false;
    }
  }

  double worst = 0;
  const double abs_tol = std::string(c.precision) == "fp32" ? 2e-5 : 1e-3;
  const double rel_tol = std::string(c.precision) == "fp32" ? 1e-4 : 2e-3;
  for (std::size_t k = 0; k < kParams.size(); ++k) {
    const std::size_t n = numel(kParams[k]);
    std::vector<float> got(n), want(n);
    CHECK_OK(zero_read_param(engine, ids[k], got.data(), n));
    CHECK_OK(zero_read_param(reference, ref_ids[k], want.data(), n));
    for (std::size_t i = 0; i < n; ++i) {
      const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
      worst = std::max(worst, diff);
      if (diff > abs_tol + rel_tol * std::fabs(want[i]) || std::isnan(got[i])) {
        if (ok && g_rank == 0) {
          std::fprintf(stderr, "FAIL %s: %s[%zu] = %.8g, stage 0 on one rank gives %.8g\n", name,
                       kParams[k].name, i, got[i], want[i]);
        }
        ok = false;
      }
    }
    if (plain != nullptr) {
      std::vector<float> same(n);
      CHECK_OK(zero_read_param(plain, plain_ids[k], same.data(), n));
      if (std::memcmp(same.data(), got.data(), n * sizeof(float)) != 0) {
        if (ok && g_rank == 0) {
          std::fprintf(stderr, "FAIL %s: %s differs from the same run without offload\n", name,
                       kParams[k].name);
        }
        ok = false;
      }
    }
    if (!kParams[k].trainable) {
      // Frozen: its first value, rounded once to the compute dtype (a relative 2^-8 at most).
      for (std::size_t i = 0; i < n; ++i) {
        const float first = initial_value(static_cast<int>(k), i);
        if (std::fabs(got[i] - first) > 4e-3 * std::fabs(first) + 1e-7) {
          if (ok && g_rank == 0) std::fprintf(stderr, "FAIL %s: the frozen parameter changed\n", name);
          ok = false;
        }
      }
    }
  }
  // The replicated compute copies are the same bits on every rank.
  if (c.stage <= 2) {
    std::uint64_t sum = 0;
    for (std::size_t k = 0; k < kParams.size(); ++k) {
      void* data = nullptr;
      CHECK_OK(zero_param_data(engine, ids[k], &data));
      const std::size_t bytes = numel(kParams[k]) * (dtype == ZERO_FP32 ? 4 : 2);
      sum ^= checksum(data, bytes) + k;
    }
    std::uint64_t lo = sum, hi = sum;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (lo != hi) {
      if (g_rank == 0) std::fprintf(stderr, "FAIL %s: compute copies differ across ranks\n", name);
      ok = false;
    }
  }
  int all_ok = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%s %s (largest difference %.3g)\n", all_ok ? "ok  " : "FAIL", name, worst);
  if (!all_ok) ++g_failures;
  CHECK_OK(zero_destroy(reference));
  if (plain != nullptr) CHECK_OK(zero_destroy(plain));
  CHECK_OK(zero_destroy(engine));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  for (int stage = 0; stage <= 3; ++stage) {
    for (const char* precision : {"fp32", "bf16", "fp16"}) {
      for (int accumulation : {1, 3}) {
        for (double clipping : {0.0, 0.05}) {
          run_case({stage, precision, accumulation, clipping, accumulation == 3});
        }
      }
    }
    // bf16 optimizer states: stochastic rounding is keyed by the element's place in the model,
    // so it rounds alike at every stage and world size.
    run_case({stage, "bf16-states", 1, 0.0, false});
    // Optimizer offload to the CPU (stages 1-3; sub_group_size 50 splits the stage-3 step).
    if (stage >= 1) {
      for (const char* precision : {"fp32", "bf16", "fp16"}) {
        run_case({stage, precision, 3, 0.05, true, "cpu"});
      }
      // Optimizer state on NVMe: 60 elements per rank stay in memory, the rest is swapped
      // through 3 buffers (pipelined reads, and writes when accumulating).
      for (const char* precision : {"fp32", "bf16"}) {
        for (int accumulation : {1, 3}) {
          run_case({stage, precision, accumulation, 0.05, accumulation == 3, "nvme"});
        }
      }
      // Parameter offload to the CPU, with each kind of optimizer offload.
      if (stage == 3) {
        for (const char* params : {"cpu", "nvme"}) {
          for (const char* optimizer : {"none", "cpu", "nvme"}) {
            for (const char* precision : {"fp32", "bf16"}) {
              run_case({stage, precision, 3, 0.05, true, optimizer, params});
            }
          }
        }
      }
    }
  }
  if (g_rank == 0) std::printf("%d case(s) failed\n", g_failures);
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}
