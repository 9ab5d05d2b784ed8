// The buckets' reductions across ranks (see bucket_reduction.h).
#include "engine/gradients/bucket_reduction.h"

#include "base/block_quant.h"
#include "base/error.h"
#include "engine/plan/memory_plan.h"

namespace zero::engine {
namespace {

// Hybrid sharding: the group's sum of this rank's block summed over the ranks that hold the same
// shard in the other groups, ordered on the epilogue. No replicas: nothing to do.
void sum_over_replicas(const EngineContext& ctx, const Bucket& bucket, char* buffer,
                       Stream& epilogue) {
  Communicator* replicas = ctx.replicas();
  if (replicas == nullptr) return;
  const StateModes& modes = ctx.layout.modes;
  char* block = buffer + static_cast<std::size_t>(ctx.shards().rank()) * bucket.block *
                             dtype_size(modes.wire);
  replicas->all_reduce(block, bucket.block, modes.wire, ReduceOp::sum, &epilogue).block(epilogue);
}

class AllReduce final : public BucketReduction {
 public:
  explicit AllReduce(const EngineContext& context) : ctx_(context) {}
  Reduction issue(const Bucket& bucket, std::size_t, char* buffer, Stream& stream) override {
    const StateModes& modes = ctx_.layout.modes;
    const std::size_t total = bucket.block * static_cast<std::size_t>(modes.shard_ranks);
    return {ctx_.comm.all_reduce(buffer, total, modes.wire, ReduceOp::sum, &stream), {}};
  }
  void complete(const Bucket&, std::size_t, Reduction&, char*, Stream&) override {}

 private:
  const EngineContext ctx_;
};

class ReduceScatter final : public BucketReduction {
 public:
  explicit ReduceScatter(const EngineContext& context) : ctx_(context) {}
  Reduction issue(const Bucket& bucket, std::size_t, char* buffer, Stream& stream) override {
    const StateModes& modes = ctx_.layout.modes;
    char* own = buffer + static_cast<std::size_t>(ctx_.shards().rank()) * bucket.block *
                             dtype_size(modes.wire);
    return {
        ctx_.shards().reduce_scatter(buffer, own, bucket.block, modes.wire, ReduceOp::sum, &stream),
        {}};
  }
  void complete(const Bucket& bucket, std::size_t, Reduction&, char* buffer,
                Stream& epilogue) override {
    sum_over_replicas(ctx_, bucket, buffer, epilogue);
  }

 private:
  const EngineContext ctx_;
};

class Quantized final : public BucketReduction {
 public:
  explicit Quantized(const EngineContext& context) : ctx_(context) {}
  Reduction issue(const Bucket& bucket, std::size_t slot, char* buffer, Stream& stream) override {
    const StateModes& modes = ctx_.layout.modes;
    const auto ranks = static_cast<std::size_t>(modes.shard_ranks);
    const std::size_t chunk = block_quant_bytes(bucket.block);
    char* send = buffer + quantized_bucket_offset(modes, bucket.block);
    Reduction reduction;
    if (error_ != nullptr) {
      reduction.exact = ctx_.shards().reduce_scatter(buffer, exact_[slot], bucket.block, modes.wire,
                                                     ReduceOp::sum, &stream);
    }
    ctx_.device.quantize(buffer, modes.wire, bucket.block, ranks, send, stream);
    reduction.work =
        ctx_.shards().all_to_all(send, send + ranks * chunk, chunk, DType::u8, &stream);
    return reduction;
  }
  void complete(const Bucket& bucket, std::size_t slot, Reduction& reduction, char* buffer,
                Stream& epilogue) override {
    const StateModes& modes = ctx_.layout.modes;
    const auto ranks = static_cast<std::size_t>(modes.shard_ranks);
    char* block = buffer + static_cast<std::size_t>(ctx_.shards().rank()) * bucket.block *
                               dtype_size(modes.wire);
    const char* received = buffer + quantized_bucket_offset(modes, bucket.block) +
                           ranks * block_quant_bytes(bucket.block);
    ctx_.device.dequantize_sum(received, bucket.block, ranks, block, modes.wire, epilogue);
    if (error_ != nullptr) {
      reduction.exact.block(epilogue);
      error_->add(QuantizationError::gradients, exact_[slot], block, modes.wire, bucket.block,
                  epilogue);
    }
    sum_over_replicas(ctx_, bucket, buffer, epilogue);
  }
  void measure(QuantizationError* error, std::vector<void*> exact) override {
    error_ = error;
    exact_ = std::move(exact);
  }

 private:
  const EngineContext ctx_;
  QuantizationError* error_ = nullptr;
  std::vector<void*> exact_;  // per bucket buffer, with error_
};

}  // namespace

void BucketReduction::measure(QuantizationError*, std::vector<void*>) {
  throw make_error(ErrorCategory::internal,
                   "the quantization error is measured only on quantized reductions");
}

std::unique_ptr<BucketReduction> make_bucket_reduction(const EngineContext& context) {
  const StateModes& modes = context.layout.modes;
  if (modes.shard_ranks == 1 || !context.config.zero.reduce_scatter) {
    return std::make_unique<AllReduce>(context);
  }
  if (modes.quantized_gradients) return std::make_unique<Quantized>(context);
  return std::make_unique<ReduceScatter>(context);
}

}  // namespace zero::engine
