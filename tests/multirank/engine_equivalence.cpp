// The engine's main test (docs/design.md, "Equivalence"): a model written here trains 10
// optimizer steps through the C API at ZeRO stages 0-3 on this job's ranks, for fp32, bf16
// and fp16, accumulation 1 and 3, clipping off and on; each case is compared with stage 0 on
// one rank (an engine on MPI_COMM_SELF fed every rank's micro-batches), within a tolerance per
// precision, and the replicated compute copies (stages 0-2) must be bit-identical across ranks.
// The model is in c_api_model.h.
//
// Run it under mpirun (zero-run -n N); exits non-zero when a case fails, naming it.
// `--super-offload` runs the speculative step's cases instead (offload_optimizer.super_offload),
// fp16 overflow skips among them; `--hybrid` the hybrid sharding cases (mics_shard_size),
// `--hybrid-node` the same with hybrid_shard (a group per node: run it across nodes), and
// `--hpz` ZeRO++'s secondary partition (zero_hpz_partition_size), `--quantized` ZeRO++'s
// quantized weights and gradients (zero_quantized_weights, zero_quantized_gradients): those
// are approximate, so each case is compared with the same run without them within the error
// that int8 blocks allow, must differ from it, and with stage 0 on one rank within that too.
// `--device cuda` (the GPU program zero_engine_equivalence_gpu) runs every engine on GPU 0:
// the model copies to and from its buffers on its own stream, which the hooks are given; at
// one rank the engine under test runs on an NCCL world of one (the reference on MPI, staged
// through pinned memory), at more ranks every engine shares the GPU through MPI. Exits 77 when
// asked for a GPU and there is none.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <mpi.h>

#include "tests/multirank/c_api_model.h"

namespace {

using namespace zero_test;

constexpr int kSteps = 10;
// Quantized cases against exact runs: 10 AdamW steps at lr 0.01 move a weight by 0.1 at most;
// an update from a gradient that quantization changed differs by a fraction of that.
constexpr double kQuantizedAbs = 1e-2;
constexpr double kQuantizedRel = 1e-2;
int g_failures = 0;
bool g_nccl = false;  // the engine under test on an NCCL world of one

std::uint64_t checksum(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void run_case(const Case& c) {
  char name[320];
  char overflow[40] = "";
  if (c.overflow_step >= 0) {
    std::snprintf(overflow, sizeof overflow, ", overflow at step %d", c.overflow_step);
  }
  char hybrid[40] = "";
  if (c.shard_size > 0) {
    std::snprintf(hybrid, sizeof hybrid, " (%d shard groups of %d)", g_world / c.shard_size,
                  c.shard_size);
  }
  if (c.hybrid_node) std::snprintf(hybrid, sizeof hybrid, " (a shard group per node)");
  if (c.hpz > 0) std::snprintf(hybrid, sizeof hybrid, " (hpZ groups of %d)", c.hpz);
  const bool quantized = c.quantized_weights || c.quantized_gradients;
  char quant[60] = "";
  if (quantized) {
    std::snprintf(quant, sizeof quant, ", quantized%s%s", c.quantized_weights ? " weights" : "",
                  c.quantized_gradients ? " gradients" : "");
  }
  std::snprintf(name, sizeof name,
                "stage %d, %s, accumulation %d, clipping %g, overlap %d, offload %s%s%s, params "
                "%s%s, %d ranks%s%s",
                c.stage, c.precision, c.accumulation, c.clipping, c.overlap ? 1 : 0, c.offload,
                c.super_offload ? " (super_offload)" : "",
                c.accumulate_on_device ? " (accumulated on the device)" : "", c.param_offload,
                overflow, g_world, hybrid, quant);
  const bool offloaded = std::string(c.offload) != "none" || std::string(c.param_offload) != "none";
  std::vector<int> ids, ref_ids;
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm self = MPI_COMM_SELF;
  void* nccl = g_nccl ? nccl_world_of_one(0) : nullptr;
  void* plain_nccl =
      g_nccl && (offloaded || c.hpz > 0 || quantized) ? nccl_world_of_one(0) : nullptr;
  zero_engine* engine = build(c, &world, c.accumulation, &ids, nccl);
  Case reference_case = c;
  reference_case.stage = 0;
  reference_case.offload = "none";
  reference_case.param_offload = "none";
  reference_case.super_offload = false;
  reference_case.shard_size = 0;
  reference_case.hybrid_node = false;
  reference_case.hpz = 0;
  reference_case.quantized_weights = reference_case.quantized_gradients = false;
  zero_engine* reference = build(reference_case, &self, c.accumulation * g_world, &ref_ids);
  // Offloaded: the same case without offload, which must give the same bits on the CPU device
  // (the same kernels run); on a GPU the step runs on the CPU with offload and on the GPU
  // without, so there the two agree within the comparison's tolerance. So do they on the CPU
  // devices that stand in for a GPU (ZERO_CPU_DEVICE async, guarded, timed) when the run clips:
  // there, as beside a GPU, the offloaded norm is summed per reduced block on the device
  // (docs/offload.md), in another order than the one pass without offload, so the clip factor
  // may differ in its last bits.
  // With hpZ: the same case without it, which must give the same bits (its gathers copy).
  // Quantized: the same case exact, which it must approach but not equal.
  std::vector<int> plain_ids;
  Case plain_case = c;
  if (quantized) {
    plain_case.quantized_weights = plain_case.quantized_gradients = false;
  } else if (c.hpz > 0) {
    plain_case.hpz = 0;
  } else {
    plain_case.offload = "none";
    plain_case.param_offload = "none";
    plain_case.super_offload = false;
  }
  const bool with_plain = offloaded || c.hpz > 0 || quantized;
  const char* cpu_mode = std::getenv("ZERO_CPU_DEVICE");
  const bool stand_in = cpu_mode != nullptr && *cpu_mode != '\0' && std::string(cpu_mode) != "sync";
  const bool exact_offload =
      g_device == ZERO_DEVICE_CPU && !(stand_in && offloaded && c.clipping > 0.0);
  zero_engine* plain =
      with_plain ? build(plain_case, &world, c.accumulation, &plain_ids, plain_nccl) : nullptr;
  zero_dtype dtype = ZERO_FP32;
  CHECK_OK(zero_compute_dtype(engine, &dtype));

  // Adam is blind to a gradient's scale, so the norms (before clipping) are compared too:
  // within 1e-4 in fp32, and within the rounding of half-precision gradients otherwise.
  bool ok = true;
  // Quantized: int8 blocks move each weight or gradient by up to 1/254 of its block's largest
  // value; the norm differs by about 1% at most.
  const double norm_tol = quantized ? 3e-2 : std::string(c.precision) == "fp32" ? 1e-4 : 1e-2;
  for (int step = 0; step < kSteps; ++step) {
    zero_step_stats stats{}, ref_stats{};
    // The overflow goes into rank 0's first micro-batch of the step, in every engine.
    const bool overflows = step == c.overflow_step;
    for (int s = 0; s < c.accumulation; ++s) {
      const long long base = (static_cast<long long>(step) * c.accumulation + s) * g_world;
      const bool poison = overflows && s == 0;
      micro_batch(engine, step, base + g_rank, dtype, poison && g_rank == 0);
      CHECK_OK(zero_step(engine, &stats));
      if (quantized && stats.stepped) {
        // zero_quantized_error_check: each quantized kind's error measured, and small; the
        // other not measured. A skipped step's gradients hold a NaN block: not checked.
        double weights = 0, gradients = 0;
        CHECK_OK(zero_quantization_error(engine, &weights, &gradients));
        const auto measured = [](bool on, double error, bool skipped) {
          if (!on) return error == -1.0;
          return skipped ? error != -1.0 : error > 1e-4 && error < 2e-2;
        };
        if (!measured(c.quantized_weights, weights, false) ||
            !measured(c.quantized_gradients, gradients, stats.skipped != 0)) {
          if (ok && g_rank == 0) {
            std::fprintf(stderr,
                         "FAIL %s: step %d: measured quantization error %.3g (weights), %.3g "
                         "(gradients)\n",
                         name, step, weights, gradients);
          }
          ok = false;
        }
      }
      if (plain != nullptr) {
        zero_step_stats plain_stats{};
        micro_batch(plain, step, base + g_rank, dtype, poison && g_rank == 0);
        CHECK_OK(zero_step(plain, &plain_stats));
      }
      for (int r = 0; r < g_world; ++r) {
        micro_batch(reference, step, base + r, dtype, poison && r == 0);
        CHECK_OK(zero_step(reference, &ref_stats));
      }
    }
    if (!stats.stepped || stats.skipped != (overflows ? 1 : 0) ||
        ref_stats.skipped != stats.skipped ||
        (!overflows &&
         std::fabs(stats.grad_norm - ref_stats.grad_norm) > norm_tol * ref_stats.grad_norm)) {
      if (ok && g_rank == 0) {
        std::fprintf(stderr,
                     "FAIL %s: step %d: stepped %d skipped %d (stage 0 on one rank %d) gradient "
                     "norm %.8g, stage 0 on one rank gives %.8g\n",
                     name, step, stats.stepped, stats.skipped, ref_stats.skipped, stats.grad_norm,
                     ref_stats.grad_norm);
      }
      ok = false;
    }
  }

  double worst = 0;
  const double abs_tol = quantized                            ? kQuantizedAbs
                         : std::string(c.precision) == "fp32" ? 2e-5
                                                              : 1e-3;
  const double rel_tol = quantized                            ? kQuantizedRel
                         : std::string(c.precision) == "fp32" ? 1e-4
                                                              : 2e-3;
  bool any_difference = false;  // quantized: from the exact run
  const auto close = [&](float got, float want) {
    return std::fabs(static_cast<double>(got) - want) <= abs_tol + rel_tol * std::fabs(want) &&
           !std::isnan(got);
  };
  for (std::size_t k = 0; k < kParams.size(); ++k) {
    const std::size_t n = numel(kParams[k]);
    std::vector<float> got(n), want(n);
    CHECK_OK(zero_read_param(engine, ids[k], got.data(), n));
    CHECK_OK(zero_read_param(reference, ref_ids[k], want.data(), n));
    for (std::size_t i = 0; i < n; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
      if (!close(got[i], want[i])) {
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
      bool differs = false;
      for (std::size_t i = 0; i < n; ++i) {
        if (quantized) {
          differs |= !close(got[i], same[i]);
          any_difference |= got[i] != same[i];
          continue;
        }
        differs |= exact_offload ? std::memcmp(&same[i], &got[i], sizeof(float)) != 0
                                 : !close(got[i], same[i]);
      }
      if (differs) {
        if (ok && g_rank == 0) {
          std::fprintf(stderr, "FAIL %s: %s differs from the same run without %s\n", name,
                       kParams[k].name,
                       quantized   ? "quantization beyond its error"
                       : c.hpz > 0 ? "hpZ"
                                   : "offload");
        }
        ok = false;
      }
    }
    if (!kParams[k].trainable) {
      // Frozen: its first value, rounded once to the compute dtype (a relative 2^-8 at most).
      for (std::size_t i = 0; i < n; ++i) {
        const float first = initial_value(static_cast<int>(k), i);
        if (std::fabs(got[i] - first) > 4e-3 * std::fabs(first) + 1e-7) {
          if (ok && g_rank == 0)
            std::fprintf(stderr, "FAIL %s: the frozen parameter changed\n", name);
          ok = false;
        }
      }
    }
  }
  if (quantized && !any_difference) {
    if (ok && g_rank == 0) {
      std::fprintf(stderr, "FAIL %s: the same bits as the exact run: nothing was quantized\n",
                   name);
    }
    ok = false;
  }
  // The replicated compute copies are the same bits on every rank.
  if (c.stage <= 2) {
    std::uint64_t sum = 0;
    std::vector<unsigned char> copy;
    for (std::size_t k = 0; k < kParams.size(); ++k) {
      void* data = nullptr;
      CHECK_OK(zero_param_data(engine, ids[k], &data));
      const std::size_t bytes = numel(kParams[k]) * (dtype == ZERO_FP32 ? 4 : 2);
      copy.resize(bytes);
      g_memory->to_host(data, copy.data(), bytes);
      sum ^= checksum(copy.data(), bytes) + k;
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
  if (g_rank == 0)
    std::printf("%s %s (largest difference %.3g)\n", all_ok ? "ok  " : "FAIL", name, worst);
  if (!all_ok) ++g_failures;
  CHECK_OK(zero_destroy(reference));
  if (plain != nullptr) CHECK_OK(zero_destroy(plain));
  CHECK_OK(zero_destroy(engine));
  free_nccl_world_of_one(plain_nccl);
  free_nccl_world_of_one(nccl);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  std::unique_ptr<ModelMemory> gpu_memory;
  bool super_offload = false;
  bool hybrid = false;
  bool hybrid_node = false;
  bool hpz = false;
  bool quantized = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--super-offload") {
      super_offload = true;
    } else if (arg == "--hybrid") {
      hybrid = true;
    } else if (arg == "--hybrid-node") {
      hybrid = hybrid_node = true;
    } else if (arg == "--hpz") {
      hpz = true;
    } else if (arg == "--quantized") {
      quantized = true;
    } else if (arg == "--device" && i + 1 < argc && std::string(argv[i + 1]) == "cuda") {
      ++i;
      std::string why;
      if (gpu_count(&why) == 0) {
        if (g_rank == 0) std::printf("SKIPPED: no GPU: %s\n", why.c_str());
        MPI_Finalize();
        return 77;
      }
      gpu_memory = make_cuda_model_memory(0);
      g_memory = gpu_memory.get();
      g_device = ZERO_DEVICE_CUDA;
      g_nccl = g_world == 1 && nccl_built();
    } else {
      if (g_rank == 0) {
        std::fprintf(stderr,
                     "zero_engine_equivalence: unknown argument '%s'; the options are "
                     "--device cuda, --super-offload, --hybrid, --hybrid-node, --hpz and "
                     "--quantized\n",
                     arg.c_str());
      }
      MPI_Finalize();
      return 2;
    }
  }
  if (g_rank == 0) {
    std::printf("device %s, %s\n", g_device == ZERO_DEVICE_CPU ? "CPU" : "CUDA (GPU 0)",
                g_nccl ? "the engine under test on NCCL, the reference on MPI" : "MPI");
  }
  // --hybrid: hybrid sharding (mics_shard_size) over every group size that divides the world
  // into several groups of several ranks, at stages 1-3, in each precision, with each kind of
  // offload and the speculative step; each against stage 0 on one rank like the flat cases,
  // and the offloaded ones against the same hybrid run without offload, bit for bit.
  // --hybrid-node: the same cases once, with hybrid_shard (a node's ranks form each group).
  std::vector<int> group_sizes;  // 0: hybrid_shard's node
  for (int size = 2; hybrid && !hybrid_node && size < g_world; ++size) {
    if (g_world % size == 0) group_sizes.push_back(size);
  }
  if (hybrid_node) group_sizes.push_back(0);
  for (int size : group_sizes) {
    const auto hybrid_case = [&](Case c) {
      c.shard_size = size;
      c.hybrid_node = size == 0;
      return c;
    };
    for (int stage = 1; stage <= 3; ++stage) {
      for (const char* precision : {"fp32", "bf16", "fp16"}) {
        for (int accumulation : {1, 3}) {
          run_case(hybrid_case({stage, precision, accumulation, 0.05, accumulation == 3}));
        }
      }
      for (const char* offload : {"cpu", "nvme"}) {
        for (const char* precision : {"fp32", "bf16"}) {
          run_case(hybrid_case({stage, precision, 3, 0.05, true, offload}));
        }
      }
      run_case(hybrid_case({stage, "fp16", 3, 0.0, true, "cpu", "none", true, 2}));
      for (const char* params : {"cpu", "nvme"}) {
        for (const char* optimizer : {"none", "cpu", "nvme"}) {
          if (stage != 3) break;
          run_case(hybrid_case({stage, "bf16", 3, 0.05, true, optimizer, params}));
        }
      }
    }
  }
  // --hpz: ZeRO++'s secondary partition at stage 3 over every group size that divides the
  // world into several groups of several ranks, in each precision, accumulating 1 and 3
  // micro-steps (the later ones' forward gathers from the secondary partition too), with each
  // kind of offload and the speculative step; each against stage 0 on one rank, and bit for
  // bit against the same run without hpZ.
  for (int size = 2; hpz && size < g_world; ++size) {
    if (g_world % size != 0) continue;
    const auto hpz_case = [&](Case c) {
      c.hpz = size;
      return c;
    };
    for (const char* precision : {"fp32", "bf16", "fp16"}) {
      for (int accumulation : {1, 3}) {
        run_case(hpz_case({3, precision, accumulation, 0.05, accumulation == 3}));
      }
    }
    for (const char* offload : {"cpu", "nvme"}) {
      run_case(hpz_case({3, "bf16", 3, 0.05, true, offload}));
      run_case(hpz_case({3, "bf16", 3, 0.05, true, offload, offload}));
    }
    run_case(hpz_case({3, "fp16", 3, 0.0, true, "cpu", "none", true, 2}));
  }
  // --quantized: ZeRO++'s qwZ (stage 3) and qgZ (stages 1-3), each alone and together, in each
  // precision, accumulating 1 and 3 micro-steps, with optimizer and parameter offload and the
  // speculative step, with
  // hpZ and hybrid sharding where the world has groups, and fp16's overflow skip (a NaN block).
  if (quantized) {
    const auto q = [](Case c, bool weights, bool gradients) {
      c.quantized_weights = weights;
      c.quantized_gradients = gradients;
      return c;
    };
    for (const char* precision : {"fp32", "bf16", "fp16"}) {
      for (int accumulation : {1, 3}) {
        const Case base{3, precision, accumulation, 0.05, accumulation == 3};
        run_case(q(base, true, false));
        run_case(q(base, false, true));
        run_case(q(base, true, true));
      }
    }
    for (int stage = 1; stage <= 2; ++stage) {
      run_case(q({stage, "bf16", 3, 0.05, true}, false, true));
    }
    run_case(q({2, "bf16", 3, 0.05, true, "cpu"}, false, true));
    run_case(q({3, "bf16", 3, 0.05, true, "cpu", "cpu"}, true, true));
    run_case(q({3, "bf16", 3, 0.05, true, "nvme", "nvme"}, true, true));
    run_case(q({3, "bf16", 3, 0.05, true, "cpu", "none", true}, true, true));  // super_offload
    run_case(q({3, "fp16", 3, 0.0, true, "cpu", "none", false, 2}, true, true));
    if (g_world % 2 == 0 && g_world > 2) {
      Case hpz_case = q({3, "bf16", 3, 0.05, true}, true, true);
      hpz_case.hpz = 2;
      run_case(hpz_case);
      Case hybrid_case = q({3, "bf16", 3, 0.05, true}, true, true);
      hybrid_case.shard_size = 2;
      run_case(hybrid_case);
    }
    hybrid = true;  // none of the flat matrix below
  }
  if (hpz) hybrid = true;  // none of the flat matrix below
  // --super-offload: the speculative step (optimizer offload to the CPU, and with the state on
  // NVMe: 60 elements per rank in memory, the rest swapped, the speculated steps written to
  // each group's second region) at stages 1-3, in each precision, without clipping, with
  // clipping that never triggers and with clipping that always does (every step rolled back
  // until the policy stops speculating), accumulating 1 and 3 micro-steps; each must give the
  // bits of the same run without offload.
  for (int stage = 1; super_offload && !hybrid && stage <= 3; ++stage) {
    for (const char* offload : {"cpu", "nvme"}) {
      for (const char* precision : {"fp32", "bf16", "fp16"}) {
        for (double clipping : {0.0, 1e6, 0.05}) {
          for (int accumulation : {1, 3}) {
            run_case({stage, precision, accumulation, clipping, accumulation == 3, offload, "none",
                      true});
          }
        }
      }
      // An fp16 overflow at step 3: the speculated step rolled back and skipped (at stage 3 the
      // compute values placed during backward put back), the scale halved, the next steps as
      // without offload.
      for (double clipping : {0.0, 0.05}) {
        for (int accumulation : {1, 3}) {
          run_case(
              {stage, "fp16", accumulation, clipping, accumulation == 3, offload, "none", true, 3});
        }
      }
    }
  }
  // Stage 3 with the compute shards offloaded: in memory (placed during backward) and on NVMe
  // (placed after the verdict), beside each kind of optimizer offload.
  for (const char* params : {"cpu", "nvme"}) {
    for (const char* optimizer : {"cpu", "nvme"}) {
      for (const char* precision : {"fp32", "bf16", "fp16"}) {
        for (double clipping : {0.0, 0.05}) {
          if (!super_offload || hybrid) break;
          run_case({3, precision, 3, clipping, true, optimizer, params, true});
        }
      }
      if (super_offload && !hybrid)
        run_case({3, "fp16", 1, 0.0, false, optimizer, params, true, 3});
    }
  }
  for (int stage = 0; !super_offload && !hybrid && stage <= 3; ++stage) {
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
      // super_offload where nothing can undo a step (fp32 without clipping): beside a GPU
      // (ZERO_CPU_DEVICE=guarded) step() leaves the last groups to the optimizer's worker, and
      // the next forward's gathers wait for each shard's update.
      if (stage == 3) {
        for (const char* params : {"none", "cpu"}) {
          run_case({stage, "fp32", 1, 0.0, false, "cpu", params, true});
        }
        run_case({stage, "fp32", 3, 0.0, true, "cpu", "none", true});
      }
      // A window's offloaded gradients summed on the device (accumulate_on_device: beside a GPU,
      // so on the guarded device; on the CPU device it has no effect): bf16 with clipping, fp16
      // with an overflow at step 3 (the device's non-finite flag), and at stage 3 beside
      // super_offload's tail.
      if (stage >= 2) {
        Case summed{stage, "bf16", 3, 0.05, true, "cpu"};
        summed.accumulate_on_device = true;
        run_case(summed);
        Case overflowing{stage, "fp16", 3, 0.0, true, "cpu", "none", false, 3};
        overflowing.accumulate_on_device = true;
        run_case(overflowing);
      }
      if (stage == 3) {
        Case tail{stage, "fp32", 3, 0.0, true, "cpu", "none", true};
        tail.accumulate_on_device = true;
        run_case(tail);
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
  g_memory = &g_host_memory;
  gpu_memory.reset();
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}
