// The decoder driver: a decoder-only language model's micro-batch (an embedding, its blocks, an
// output head with the loss) forward and backward, module by module between the engine's hooks,
// with activation checkpointing and the account of what the activations cost. It is written
// once, over the operations that one family supplies on one device (DecoderOps below): the GPT
// and the Llama family, each on the CPU layers (gpt/model.cpp, llama/model.cpp; their common
// part cpu_ops.h) and on the CUDA layers (gpt/cuda_model.cpp, llama/cuda_model.cpp; cuda_ops.h).
//
// The driver owns the order of the modules and their hooks, which blocks are checkpointed, and
// what is kept from forward to backward: the embedding's output, each block's output (the next
// block's input) and each block's activations. The operations own the arithmetic and everything
// else: the parameters' ids, the micro-batch, the head's buffers and backward's scratch, among
// them the gradient of the residual stream, which the head's backward starts, each block's
// backward carries down and the embedding's backward ends.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/decoder/shape.h"
#include "models/param_init.h"
#include "models/registrar.h"
#include "zero/zero.h"

namespace zero::decoder {

// What the Decoder needs of one family on one device. Ops is constructed as
// Ops(engine, registrar, config, batch, seq): it checks the sizes, registers the family's
// parameters through `registrar` and makes its own buffers. `Hidden` is one buffer of the
// residual stream (positions x channels); `Activations` what one block keeps from its forward
// for its backward, default-constructed empty. Each call below runs on the hooks' stream, in
// this order for a micro-batch: start_forward, embed_forward, block_forward per block,
// head_forward, queue_loss; then (training) start_backward, head_backward, per block from the
// last (after block_forward again where it is checkpointed) block_backward, embed_backward; and
// end_module at the end of each module's forward and backward, before its post hook.
template <class Ops>
concept DecoderOps = requires(Ops& ops, const Ops& cops, std::size_t block,
                              typename Ops::Hidden& out, const typename Ops::Hidden& x,
                              typename Ops::Activations& kept,
                              const typename Ops::Activations& ckept, const std::int32_t* tokens,
                              bool training, zero_engine* engine,
                              const std::vector<std::string>& names, const std::string& path) {
  typename Ops::Config;
  // The modules' ids for the hooks, and the hooks' stream (null on the CPU).
  { cops.ids().embed_module } -> std::convertible_to<int>;
  { cops.ids().head_module } -> std::convertible_to<int>;
  { cops.ids().blocks[block].module } -> std::convertible_to<int>;
  { cops.stream() } -> std::same_as<void*>;
  // Makes the operations' own buffers (the head's, backward's workspaces); then new buffers,
  // and their bytes (0 for empty Activations).
  ops.allocate();
  { ops.hidden() } -> std::same_as<typename Ops::Hidden>;
  { ops.activations() } -> std::same_as<typename Ops::Activations>;
  { Ops::bytes(x) } -> std::same_as<std::uint64_t>;
  { ckept.bytes() } -> std::same_as<std::uint64_t>;
  // What the head keeps from forward to backward (its norm's output and statistics, the
  // logits, the losses).
  { cops.head_bytes() } -> std::same_as<std::uint64_t>;
  // Forward: the micro-batch's tokens and targets (checked; a training forward or not); the
  // embedding into `out`; block `block` from its input `x` into `kept` and `out`; the head and
  // the losses from the last block's output `x`; their mean over the positions with a target
  // queued (on a GPU the host does not wait for it), and the oldest queued mean taken (waiting
  // for it alone).
  ops.start_forward(tokens, tokens, training);
  ops.embed_forward(out);
  ops.block_forward(block, x, kept, out);
  ops.head_forward(x);
  ops.queue_loss(tokens);
  { ops.take_loss() } -> std::same_as<float>;
  // Backward: the loss's gradient (times zero_loss_factor); the head's from the last block's
  // output `x`; block `block`'s from its input `x` and what it kept; the embedding's.
  ops.start_backward();
  ops.head_backward(x);
  ops.block_backward(block, x, ckept);
  ops.embed_backward();
  // The end of a module's forward or backward: its gradients into the engine's buffers, and what
  // the operations made for it alone (the CPU's fp32 copies) freed.
  ops.end_module();
  // Waits for what the calls above queued (CausalLm::wait); marks a point and times between
  // two marked ones (CausalLm::mark, seconds_between; the Decoder checks they were marked).
  ops.wait();
  ops.mark(block);
  { ops.seconds_between(block, block) } -> std::same_as<double>;
  // The last evaluation's logits (CausalLm::logits), the forward FLOPs of a micro-batch and of
  // one block, and the pretrained weights for the registered names (CausalLm::load_pretrained).
  { cops.logits() } -> std::same_as<std::vector<float>>;
  { cops.forward_flops() } -> std::same_as<double>;
  { cops.block_flops() } -> std::same_as<double>;
  cops.load_pretrained(engine, names, path);
};

template <DecoderOps Ops>
class Decoder final : public models::CausalLm {
 public:
  using Config = typename Ops::Config;
  using Hidden = typename Ops::Hidden;
  using Activations = typename Ops::Activations;

  // Registers the model with `engine` (before zero_init), initial values drawn from `seed`, for
  // `batch` sequences of `seq` positions with `options`' checkpointing; allocate (after
  // zero_init, or the first forward) makes the buffers.
  // Throws std::invalid_argument for sizes that do not fit the model and std::runtime_error
  // with zero_last_error() when a call fails.
  Decoder(zero_engine* engine, const Config& config, int batch, int seq, std::uint64_t seed,
          const models::ActivationOptions& options);
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  float forward(const std::int32_t* tokens, const std::int32_t* targets) override {
    require_no_queued_losses("forward");
    run_forward(tokens, targets, true);
    return ops_.take_loss();
  }
  void forward_queued(const std::int32_t* tokens, const std::int32_t* targets) override {
    run_forward(tokens, targets, true);
    ++queued_losses_;
  }
  std::vector<float> take_losses(std::size_t count) override;
  void backward() override;
  float evaluate(const std::int32_t* tokens, const std::int32_t* targets) override;
  void allocate() override;
  void load_pretrained(const std::string& path) override {
    ops_.load_pretrained(engine_, registrar_.names(), path);
  }
  models::ActivationCost activation_cost() const override;
  double forward_flops() const override { return ops_.forward_flops(); }
  std::vector<float> logits() const override { return ops_.logits(); }
  void wait() override { ops_.wait(); }
  void mark(std::size_t point) override {
    if (point >= marked_.size()) marked_.resize(point + 1, false);
    ops_.mark(point);
    marked_[point] = true;
  }
  double seconds_between(std::size_t from, std::size_t to) override {
    for (const std::size_t point : {from, to}) {
      if (point >= marked_.size() || !marked_[point]) {
        throw std::logic_error("seconds_between(" + std::to_string(from) + ", " +
                               std::to_string(to) + "): point " + std::to_string(point) +
                               " was never marked; mark(" + std::to_string(point) +
                               ") after the work it ends");
      }
    }
    return ops_.seconds_between(from, to);
  }
  const std::vector<std::string>& names() const noexcept override { return registrar_.names(); }
  const std::vector<std::size_t>& numels() const noexcept override { return registrar_.numels(); }

 private:
  void run_forward(const std::int32_t* tokens, const std::int32_t* targets, bool training);
  void require_no_queued_losses(const char* call) const {
    if (queued_losses_ != 0) {
      throw std::logic_error(std::string(call) + ": " + std::to_string(queued_losses_) +
                             " forward_queued losses not taken yet (take_losses first)");
    }
  }
  bool checkpointed(std::size_t block) const noexcept {
    return static_cast<int>(block) < options_.checkpoint_blocks;
  }
  // Where block `block` keeps its activations: its own, or for a checkpointed block the one set
  // that its recomputation in backward fills again.
  Activations& activations(std::size_t block) {
    return checkpointed(block) ? recompute_ : kept_[block];
  }
  const Hidden& input(std::size_t block) const {
    return block == 0 ? embedded_ : outputs_[block - 1];
  }
  template <class Compute>
  void forward_module(int module, Compute&& compute);
  template <class Compute>
  void backward_module(int module, Compute&& compute);

  zero_engine* engine_;
  std::unique_ptr<models::ParamInit> init_;  // read during zero_init
  models::Registrar registrar_;              // the parameters' names and sizes, by id
  Ops ops_;
  models::ActivationOptions options_;
  // Kept from forward to backward: the embedding's output; per block its output (the input of
  // the next) and its activations, or none for a checkpointed block.
  Hidden embedded_;
  std::vector<Hidden> outputs_;
  std::vector<Activations> kept_;
  Activations recompute_;          // allocated when any block is checkpointed
  bool allocated_ = false;         // allocate() has run
  std::size_t queued_losses_ = 0;  // forward_queued's, not taken
  std::vector<bool> marked_;       // by point: mark() has recorded it
};

template <DecoderOps Ops>
Decoder<Ops>::Decoder(zero_engine* engine, const Config& config, int batch, int seq,
                      std::uint64_t seed, const models::ActivationOptions& options)
    : engine_(engine),
      init_(std::make_unique<models::ParamInit>(seed)),
      registrar_(engine, *init_),
      ops_(engine, registrar_, config, batch, seq),
      options_(options) {
  if (options_.checkpoint_blocks < 0) options_.checkpoint_blocks = 0;
}

template <DecoderOps Ops>
void Decoder<Ops>::allocate() {
  if (allocated_) return;
  ops_.allocate();
  const std::size_t blocks = ops_.ids().blocks.size();
  embedded_ = ops_.hidden();
  for (std::size_t l = 0; l < blocks; ++l) {
    kept_.push_back(checkpointed(l) ? Activations{} : ops_.activations());
    outputs_.push_back(ops_.hidden());
  }
  if (options_.checkpoint_blocks > 0) recompute_ = ops_.activations();
  allocated_ = true;
}

template <DecoderOps Ops>
template <class Compute>
void Decoder<Ops>::forward_module(int module, Compute&& compute) {
  models::check(zero_pre_forward(engine_, module, ops_.stream()), "zero_pre_forward");
  compute();
  ops_.end_module();
  models::check(zero_post_forward(engine_, module, ops_.stream()), "zero_post_forward");
}

template <DecoderOps Ops>
template <class Compute>
void Decoder<Ops>::backward_module(int module, Compute&& compute) {
  models::check(zero_pre_backward(engine_, module, ops_.stream()), "zero_pre_backward");
  compute();
  ops_.end_module();
  models::check(zero_post_backward(engine_, module, ops_.stream()), "zero_post_backward");
}

template <DecoderOps Ops>
std::vector<float> Decoder<Ops>::take_losses(std::size_t count) {
  if (count > queued_losses_) {
    throw std::logic_error("take_losses(" + std::to_string(count) + "): only " +
                           std::to_string(queued_losses_) + " forward_queued losses are queued");
  }
  std::vector<float> losses;
  for (std::size_t i = 0; i < count; ++i) losses.push_back(ops_.take_loss());
  queued_losses_ -= count;
  return losses;
}

template <DecoderOps Ops>
void Decoder<Ops>::run_forward(const std::int32_t* tokens, const std::int32_t* targets,
                               bool training) {
  allocate();
  ops_.start_forward(tokens, targets, training);
  const auto& ids = ops_.ids();
  forward_module(ids.embed_module, [&] { ops_.embed_forward(embedded_); });
  for (std::size_t l = 0; l < outputs_.size(); ++l) {
    forward_module(ids.blocks[l].module,
                   [&] { ops_.block_forward(l, input(l), activations(l), outputs_[l]); });
  }
  const Hidden& last = outputs_.empty() ? embedded_ : outputs_.back();
  forward_module(ids.head_module, [&] { ops_.head_forward(last); });
  ops_.queue_loss(targets);
}

template <DecoderOps Ops>
void Decoder<Ops>::backward() {
  ops_.start_backward();
  const auto& ids = ops_.ids();
  const Hidden& last = outputs_.empty() ? embedded_ : outputs_.back();
  backward_module(ids.head_module, [&] { ops_.head_backward(last); });
  for (std::size_t l = outputs_.size(); l-- > 0;) {
    backward_module(ids.blocks[l].module, [&] {
      // The forward again from the saved input. Its output equals outputs_[l] bit for bit, and
      // nothing reads outputs_[l] any more: block l + 1's backward, its reader, has run.
      if (checkpointed(l)) ops_.block_forward(l, input(l), recompute_, outputs_[l]);
      ops_.block_backward(l, input(l), activations(l));
    });
  }
  backward_module(ids.embed_module, [&] { ops_.embed_backward(); });
}

template <DecoderOps Ops>
float Decoder<Ops>::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  require_no_queued_losses("evaluate");
  models::check(zero_set_train(engine_, 0), "zero_set_train");
  run_forward(tokens, targets, false);
  models::check(zero_set_train(engine_, 1), "zero_set_train");
  return ops_.take_loss();
}

template <DecoderOps Ops>
models::ActivationCost Decoder<Ops>::activation_cost() const {
  if (!allocated_) throw std::logic_error("activation_cost: the model has not allocated yet");
  const std::uint64_t blocks = outputs_.size();
  const std::uint64_t common = Ops::bytes(embedded_) + ops_.head_bytes();
  // A block's activations and its output: every block's when none is checkpointed, else
  // recompute_ has the size of each.
  const Activations& one = options_.checkpoint_blocks > 0 || blocks == 0 ? recompute_ : kept_[0];
  const std::uint64_t per_block = one.bytes() + Ops::bytes(embedded_);
  models::ActivationCost cost;
  cost.uncheckpointed_bytes = common + per_block * blocks;
  cost.kept_bytes = common + recompute_.bytes();
  for (std::size_t l = 0; l < blocks; ++l) {
    cost.kept_bytes += kept_[l].bytes() + Ops::bytes(outputs_[l]);
  }
  cost.recompute_flops =
      std::min(options_.checkpoint_blocks, static_cast<int>(blocks)) * ops_.block_flops();
  cost.train_flops = 3.0 * ops_.forward_flops();
  return cost;
}

}  // namespace zero::decoder
