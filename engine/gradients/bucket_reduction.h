// How a filled bucket is reduced across ranks, chosen once at init from the layout (the
// GradReducer calls it; docs/design.md, "Buckets"):
//   all-reduce      over the world, every rank keeping its own block of the whole sum (stage 0,
//                   a shard group of one, or zero_optimization.reduce_scatter false);
//   reduce-scatter  in place over the shard group, each rank's block receiving the group's sum;
//   quantized       ZeRO++ qgZ: the bucket's blocks quantized (base/block_quant.h) into packed
//                   chunks behind the bucket buffer, an all-to-all of the chunks over the shard
//                   group, and on the epilogue the received chunks dequantized and summed in
//                   fp32 in rank order into this rank's block; with zero_quantized_error_check
//                   an exact reduce-scatter beside it, measured against.
// With hybrid sharding the last two sum the block over the replicas after the group's sum, on
// the epilogue stream.
//
// Owns: nothing but the choice (and, quantized, where the exact blocks go). Calls: the shard
// group's and the replicas' communicators, the device's quantization kernels. Streams: issue()
// on the stream the bucket was filled on; complete() on the epilogue stream, after the
// reduction is blocked onto it. Internal to engine/.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "comm/work.h"
#include "device/device.h"
#include "engine/collectives/quantization_error.h"
#include "engine/engine_context.h"
#include "engine/plan/partition.h"

namespace zero::engine {

// A bucket's reduction in flight.
struct Reduction {
  Work work;
  Work exact;  // quantized with the error check: the exact reduce-scatter beside it
};

class BucketReduction {
 public:
  virtual ~BucketReduction() = default;
  // Starts reducing `buffer` (bucket buffer `slot`: the bucket's blocks rank-major, in the wire
  // dtype, filled on `stream`).
  virtual Reduction issue(const Bucket& bucket, std::size_t slot, char* buffer, Stream& stream) = 0;
  // On `epilogue`, once `reduction.work` is blocked onto it: what remains until this rank's
  // block of `buffer` holds the reduced sum.
  virtual void complete(const Bucket& bucket, std::size_t slot, Reduction& reduction, char* buffer,
                        Stream& epilogue) = 0;
  // zero_quantized_error_check: each reduced block measured against an exact reduce-scatter
  // into `exact` (a block of the largest bucket per bucket buffer). Quantized only.
  virtual void measure(QuantizationError* error, std::vector<void*> exact);
};

// The one the layout calls for; `rank` is this rank's in the shard group.
std::unique_ptr<BucketReduction> make_bucket_reduction(const EngineContext& context);

}  // namespace zero::engine
