// DeepSpeed's own estimates of model-state memory, the formulas of
// estimate_zero2_model_states_mem_needs and estimate_zero3_model_states_mem_needs (P
// parameters, L in the largest layer, G GPUs per node, K nodes, a buffer factor of 1.5 on the
// CPU side), for zero-mem --deepspeed-estimate to print beside our own figures.
//
//   ZeRO-2, optimizer offloaded:  per GPU 2P;              per CPU P·max(4GK, 16)·1.5
//   ZeRO-2, none:                 per GPU 4P + 16P/(GK);   per CPU 4PG·1.5
//   ZeRO-3, params and optimizer offloaded:
//                                 per GPU 4L;  per CPU 18P/K·1.5 (zero_init) or P·max(4G, 18/K)·1.5
//   ZeRO-3, optimizer offloaded:  per GPU 4L + 2P/(GK);
//                                 per CPU 16P/K·1.5 (zero_init) or P·max(4G, 16/K)·1.5
//   ZeRO-3, none:                 per GPU 4L + 18P/(GK);  per CPU 4LG·1.5 (zero_init) or 4PG·1.5
//
// "per CPU" is per node. These count model states only: no activations, buffers or context.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::mem {

struct DeepSpeedRow {
  int stage = 0;
  std::string offload_param;      // "cpu" or "none" (stage 3)
  std::string offload_optimizer;  // "cpu" or "none"
  int zero_init = -1;             // stage 3: 1 or 0; -1 at stage 2
  std::uint64_t per_gpu = 0;
  std::uint64_t per_cpu = 0;
};

// The rows DeepSpeed's _all_live estimators print, stage 2 then stage 3, in its order.
std::vector<DeepSpeedRow> deepspeed_estimate(std::uint64_t params, std::uint64_t largest_layer,
                                             int gpus_per_node, int nodes,
                                             double buffer_factor = 1.5);

}  // namespace zero::mem
