// What the families' operations on the CPU layers have in common (decoder.h's DecoderOps): the
// engine's buffers seen in fp32 through ComputeCopies, whatever the compute dtype; the
// micro-batch on the host; the residual stream's gradient; and the output head after its
// final norm: the logits, their softmax and the losses, and back. A family's CPU operations
// derive from CpuOps and add its embedding, blocks and final norm.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <vector>

#include "models/decoder/decoder.h"
#include "models/layers/compute_copies.h"
#include "models/registrar.h"
#include "zero/zero.h"

namespace zero::decoder {

class CpuOps {
 public:
  using Hidden = std::vector<float>;  // fp32, positions x channels

  static std::uint64_t bytes(const Hidden& buffer) noexcept {
    return buffer.size() * sizeof(float);
  }
  // The bytes of several buffers (a block's activations).
  static std::uint64_t bytes(std::initializer_list<const std::vector<float>*> buffers) noexcept {
    std::uint64_t n = 0;
    for (const std::vector<float>* buffer : buffers) n += bytes(*buffer);
    return n;
  }
  void* stream() const noexcept { return nullptr; }
  Hidden hidden() const { return Hidden(shape_.positions() * shape_.channels); }

  // Checks the tokens and targets (models::count_targets) and keeps them for backward.
  void start_forward(const std::int32_t* tokens, const std::int32_t* targets, bool training);
  // The mean loss over the positions with a target, computed now and taken in order.
  void queue_loss(const std::int32_t* targets);
  float take_loss();
  // The losses' gradient (zero_loss_factor over the positions with a target); the gradients
  // the layers add into zeroed.
  void start_backward();
  // The module's gradients into the engine's buffers; its fp32 copies freed.
  void end_module() { copies_.end_module(); }
  void wait() const noexcept {}  // the CPU layers have finished when they return
  void mark(std::size_t point);
  double seconds_between(std::size_t from, std::size_t to) const;
  std::vector<float> logits() const { return logits_; }  // the last forward's

 protected:
  // Reads the engine's compute dtype.
  CpuOps(zero_engine* engine, const Shape& shape);
  // Makes the head's buffers and the residual stream's gradient (a family's allocate calls it).
  void allocate();
  // Gives ComputeCopies the registered parameters' sizes.
  void add_params(const models::Registrar& registrar);
  // A parameter's values and its gradient buffer, fp32; null for id -1 (a parameter that this
  // model lacks, such as a bias).
  float* param(int id);
  float* grad(int id);
  // The head after its final norm, which leaves its output in normed_: logits = normed_ times
  // weight^T, their softmax and the losses of the positions' targets. Backward leaves the
  // gradient at the final norm's output in dnormed_.
  void logits_forward(int weight);
  void logits_backward(int weight);
  // What logits_forward keeps (normed_, logits_, probs_, losses_).
  std::uint64_t logits_bytes() const noexcept;

  zero_engine* engine_;
  Shape shape_;
  layers::ComputeCopies copies_;
  std::vector<std::int32_t> tokens_, targets_;                // this micro-batch's
  std::vector<std::chrono::steady_clock::time_point> marks_;  // mark's, by point
  std::deque<float> queued_losses_;                           // queue_loss's, not taken yet
  int counted_ = 0;                                           // positions with a target
  std::vector<float> normed_, logits_, probs_, losses_;
  // Backward: the gradients of the losses, the logits and the final norm's output, and dx_, the
  // gradient of the residual stream.
  std::vector<float> dlosses_, dlogits_, dnormed_, dx_;
};

}  // namespace zero::decoder
