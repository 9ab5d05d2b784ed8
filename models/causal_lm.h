// What a trainer needs of a reference causal language model (the GPT, the Llama family): one
// micro-batch's forward and backward between the engine's module hooks, evaluation, pretrained
// weights, and what its activations cost. zero-train drives every model through this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zero::models {

// Activation checkpointing, as the config's activation_checkpointing section asks for it: the
// first `checkpoint_blocks` blocks keep only their input between forward and backward and
// compute their forward again in backward (at stage 3 inside the block's backward hooks, so the
// block is gathered again).
struct ActivationOptions {
  int checkpoint_blocks = 0;       // 0: none; layers or more: every block
  bool cpu_checkpointing = false;  // the saved inputs in host memory (the CPU path's only memory)
};

// What the activations cost for one micro-batch: the bytes held from forward to backward, with
// the options in use and without checkpointing, and the forward FLOPs recomputed in backward
// next to the forward and backward FLOPs of the micro-batch.
struct ActivationCost {
  std::uint64_t kept_bytes = 0;
  std::uint64_t uncheckpointed_bytes = 0;
  double recompute_flops = 0;
  double train_flops = 0;  // forward + backward (2x forward), without the recomputation
};

class CausalLm {
 public:
  virtual ~CausalLm() = default;
  // One micro-batch's forward: tokens and targets are batch * seq each (a target < 0 has no
  // loss). Returns the mean loss over the positions with targets: the CUDA models wait for it.
  // Throws std::logic_error while forward_queued losses are not taken.
  virtual float forward(const std::int32_t* tokens, const std::int32_t* targets) = 0;
  // The same forward with its mean loss queued instead of returned: the CUDA models copy the
  // losses to pinned memory behind the forward and do not wait, so a trainer can queue the
  // next work before it reads a loss. take_losses(count) returns the oldest `count` queued
  // losses in order, waiting only for their copies (std::logic_error for more than are
  // queued).
  virtual void forward_queued(const std::int32_t* tokens, const std::int32_t* targets) = 0;
  virtual std::vector<float> take_losses(std::size_t count) = 0;
  // Its backward: adds this micro-batch's gradients (of the loss times zero_loss_factor).
  virtual void backward() = 0;
  // Forward only, in the engine's evaluation mode; returns the mean loss (waits for it). Throws
  // std::logic_error while forward_queued losses are not taken.
  virtual float evaluate(const std::int32_t* tokens, const std::int32_t* targets) = 0;
  // Sets the weights from Hugging Face safetensors (a file, an index JSON or a directory)
  // through zero_load_pretrained, each rank reading its own ranges. Collective, after zero_init.
  virtual void load_pretrained(const std::string& path) = 0;
  // Makes the activations' buffers and backward's workspaces. After zero_init, so that the
  // engine's check that the run fits the machine comes first (the program declares these
  // bytes before it: zero_declare_memory); forward and evaluate call it when it has not been.
  virtual void allocate() = 0;
  // What allocate made; throws std::logic_error before it.
  virtual ActivationCost activation_cost() const = 0;
  // Forward FLOPs per micro-batch (matrix products and attention; 2 per multiply-add).
  virtual double forward_flops() const = 0;
  // The logits of the last evaluate(), [batch * seq, vocabulary], copied out on request: tests
  // read them, training never does. The CUDA models keep them on the GPU, copy them from there
  // (waiting for their stream) and throw std::logic_error once a forward() has run since (it
  // overwrites them with their gradient); the CPU models return the last forward's, evaluation
  // or not.
  virtual std::vector<float> logits() const = 0;
  // The parameters' names by id (registration order): Hugging Face's names.
  virtual const std::vector<std::string>& names() const noexcept = 0;
  // Their element counts, by id.
  virtual const std::vector<std::size_t>& numels() const noexcept = 0;
  // Waits for the work the last call queued: the CUDA models' stream (their forward waits for
  // its losses, their backward does not); nothing on the CPU. Training does not need it.
  virtual void wait() = 0;
  // Timings without waiting (zero-train's wall_clock_breakdown): mark(point) notes when the
  // work queued so far ends (the CUDA models: a timing event on their stream; the CPU models:
  // now, their work being done when they return); seconds_between(from, to) waits for point
  // `to` and returns the seconds from `from` to it. Any point number; a mark replaces the last
  // at its number. std::logic_error for a point never marked.
  virtual void mark(std::size_t point) = 0;
  virtual double seconds_between(std::size_t from, std::size_t to) = 0;
};

}  // namespace zero::models
