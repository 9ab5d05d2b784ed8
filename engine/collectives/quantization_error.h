// ZeRO++'s error, measured (zero_optimization.zero_quantized_error_check): per optimizer step,
// how far the quantized collectives' results are from the exact ones, as the relative L2 error
// over every rank, sqrt(sum |quantized - exact|^2 / sum |exact|^2), for the stage-3 gathers
// (qwZ: each rank's shard against its own round trip, which is its part of every rank's
// gathered copy) and the gradients' reduce-scatter (qgZ: each reduced block against an exact
// reduce-scatter of the same bucket, issued beside it).
//
// Owns: the sums on the device (in device memory, added to in each kind's stream order: the
// gathers' default stream, the reductions' epilogue), a scratch buffer per kind for the
// differences in fp32, and the weights' round-trip buffer. Outside the memory plan: it is a
// diagnostic, and costs an exact reduce-scatter per bucket and a round trip per gather.
// Internal to engine/.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "base/dtype.h"
#include "device/device.h"
#include "engine/collectives/agreement.h"

namespace zero::engine {

class QuantizationError {
 public:
  enum Kind { weights = 0, gradients = 1 };

  // `round_trip_bytes`: the largest shard a gather quantizes, in the compute dtype (0: no
  // gathers measured); `exact_buffers` of `exact_bytes`: the exact reduce-scatters' outputs.
  QuantizationError(Device& device, std::size_t round_trip_bytes, std::size_t exact_buffers,
                    std::size_t exact_bytes);
  ~QuantizationError();
  QuantizationError(const QuantizationError&) = delete;
  QuantizationError& operator=(const QuantizationError&) = delete;

  // Adds |exact|^2 and |approx - exact|^2 over count values of `dtype` (device memory) in
  // `stream`'s order; a kind is always added to from the same stream.
  void add(Kind kind, const void* exact, const void* approx, DType dtype, std::size_t count,
           Stream& stream);
  // Where a gather's round trip (its own shard, dequantized) goes.
  void* round_trip() const noexcept { return round_trip_; }
  // Where an exact reduce-scatter's block goes, one per bucket buffer.
  std::vector<void*> exact_buffers() const { return exact_; }
  // Collective, after the streams that add are synchronized: each kind's relative error since
  // the last call over every rank, or -1 where nothing was measured; the sums start again.
  std::array<double, 2> take(Agreement& agreement);

 private:
  static constexpr std::size_t kScratch = std::size_t{1} << 18;  // fp32 differences per piece

  Device& device_;
  std::size_t bytes_ = 0;
  char* base_ = nullptr;
  float* sums_ = nullptr;  // per kind: the exact values' squares, the differences' squares
  float* scratch_[2] = {nullptr, nullptr};
  void* round_trip_ = nullptr;
  std::vector<void*> exact_;
};

}  // namespace zero::engine
