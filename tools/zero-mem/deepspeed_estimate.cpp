// DeepSpeed's estimator formulas (deepspeed_estimate.h).
#include "tools/zero-mem/deepspeed_estimate.h"

#include <algorithm>

namespace zero::mem {

std::vector<DeepSpeedRow> deepspeed_estimate(std::uint64_t params, std::uint64_t largest_layer,
                                             int gpus_per_node, int nodes, double buffer_factor) {
  const double P = static_cast<double>(params), L = static_cast<double>(largest_layer);
  const double G = gpus_per_node, K = nodes, total = G * K;
  auto bytes = [](double v) { return static_cast<std::uint64_t>(v); };
  std::vector<DeepSpeedRow> rows;
  // ZeRO-2.
  rows.push_back(
      {2, "", "cpu", -1, bytes(2 * P), bytes(P * std::max(4 * total, 16.0) * buffer_factor)});
  rows.push_back({2, "", "none", -1, bytes(4 * P + static_cast<double>(bytes(16 * P / total))),
                  bytes(P * 4 * G * buffer_factor)});
  // ZeRO-3: the largest layer's parameters and gradients (2 bytes each) are on the GPU.
  const double layer = 4 * L;
  for (int init : {1, 0}) {
    rows.push_back(
        {3, "cpu", "cpu", init, bytes(layer),
         bytes(init ? P * 18 / K * buffer_factor : P * std::max(4 * G, 18 / K) * buffer_factor)});
  }
  for (int init : {1, 0}) {
    rows.push_back(
        {3, "none", "cpu", init, bytes(layer + static_cast<double>(bytes(2 * P / total))),
         bytes(init ? P * 16 / K * buffer_factor : P * std::max(4 * G, 16 / K) * buffer_factor)});
  }
  for (int init : {1, 0}) {
    rows.push_back({3, "none", "none", init,
                    bytes(layer + static_cast<double>(bytes(18 * P / total))),
                    bytes(init ? L * 4 * G * buffer_factor : P * 4 * G * buffer_factor)});
  }
  return rows;
}

}  // namespace zero::mem
