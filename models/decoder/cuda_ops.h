// What the families' operations on the CUDA layers (models/cuda/layers.h) have in common
// (decoder.h's DecoderOps): the model's own stream, which every hook is given; the engine's bf16
// buffers; the micro-batch on the GPU (one synchronisation per forward, for the losses); the
// residual stream's gradient; and the output head after its final norm: the logits, padded to
// rows of a multiple of 128 (cuda_layers::padded_vocab) for aligned products, and the
// cross-entropy. In a training forward the softmax is fused with its backward, so the logits
// buffer holds their gradient afterwards; evaluation computes the losses alone and leaves the
// logits on the GPU, where logits() copies them from on request until the next forward. A
// family's CUDA operations derive from CudaOps and add its embedding, blocks and final norm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "models/cuda/batch.h"
#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"
#include "models/decoder/decoder.h"
#include "zero/zero.h"

namespace zero::decoder {

// Checks that the engine's parameters are bf16 on a GPU and makes that GPU the calling thread's
// current device; else throws std::runtime_error saying what `model` ("the CUDA GPT") needs.
// (engine_gpu.cpp; the CPU emulation of CUDA links tests/emu/engine_gpu.cpp in its place.)
void use_engine_gpu(zero_engine* engine, const char* model);
// Whether the engine's hooks take the model's stream: true for an engine on a GPU (the
// emulation's CPU engine takes none, and the emulated kernels run on the default stream).
bool engine_takes_streams();
// Throws std::runtime_error, saying what to enable, unless the engine's compute copies are bf16.
void check_bf16_compute(zero_engine* engine);

// A CUDA model's factory: the decoder over `Ops` (a CudaOps named Ops::kModel) on the engine's
// GPU, once use_engine_gpu allows it.
template <class Ops>
std::unique_ptr<models::CausalLm> make_on_engine_gpu(zero_engine* engine,
                                                     const typename Ops::Config& config, int batch,
                                                     int seq, std::uint64_t seed,
                                                     const models::ActivationOptions& options) {
  use_engine_gpu(engine, Ops::kModel);
  return std::make_unique<Decoder<Ops>>(engine, config, batch, seq, seed, options);
}

class CudaOps {
 public:
  using Bf16 = cuda_layers::Bf16;
  using DeviceBuffer = cuda_layers::DeviceBuffer;
  using Hidden = DeviceBuffer;  // bf16, positions x channels
  static constexpr std::size_t kBf16 = sizeof(Bf16);

  static std::uint64_t bytes(const Hidden& buffer) noexcept { return buffer.bytes(); }
  // The bytes of several buffers (a block's activations).
  static std::uint64_t bytes(
      std::initializer_list<const cuda_layers::DeviceBuffer*> buffers) noexcept {
    std::uint64_t n = 0;
    for (const cuda_layers::DeviceBuffer* buffer : buffers) n += buffer->bytes();
    return n;
  }
  // The stream the layers run on and the hooks are given; null where the engine takes none
  // (engine_takes_streams).
  void* stream() const noexcept { return hook_streams_ ? stream_.get() : nullptr; }
  Hidden hidden() const;

  // Checks the tokens and targets (models::count_targets), queues their copies, and reads the
  // loss factor that a training forward's fused cross-entropy scales the gradient with.
  void start_forward(const std::int32_t* tokens, const std::int32_t* targets, bool training);
  // The losses' copy queued behind the forward (the host does not wait); the oldest queued
  // micro-batch's mean loss, waiting for its copy only.
  void queue_loss(const std::int32_t* targets);
  float take_loss() { return batch_.take_loss(); }
  // Throws std::logic_error after an evaluation, which leaves no gradient in the logits.
  void start_backward() const;
  void end_module() const noexcept {}
  void wait() const { stream_.synchronize(); }
  void mark(std::size_t point);
  double seconds_between(std::size_t from, std::size_t to) const;
  // Throws std::logic_error unless the last forward was an evaluation.
  std::vector<float> logits() const;

 protected:
  // `model` names it in errors ("the CUDA GPT"); `widest` is the widest row whose parameter
  // gradients are reduced (the reduction scratch's size).
  CudaOps(zero_engine* engine, const Shape& shape, const char* model, int widest);
  // Makes the head's buffers, the residual stream's gradient and the reduction scratch (a
  // family's allocate calls it).
  void allocate();
  // The engine's buffers of a parameter; null for id -1 (a parameter the model lacks).
  const Bf16* param(int id) const;
  Bf16* grad(int id) const;
  // How a product writes parameter `id`'s gradient: Into::write while it still holds its zeros
  // (zero_grad_is_zero: this backward is its first use since the zeroing), else added to.
  cuda_layers::Into grad_into(int id) const;
  void zero(const cuda_layers::DeviceBuffer& buffer, std::size_t bytes) const {
    cuda_layers::zero_bytes(buffer.as<void>(), bytes, stream());
  }
  // The token embedding (with positions from `wpe` unless it is -1) into `out`, and back from dx_.
  void embed(Hidden& out, int wte, int wpe) const;
  void embed_back(int wte, int wpe) const;
  // The head after its final norm, which leaves its output in normed_ (see the top). Backward
  // leaves the gradient at the final norm's output in dnormed_ (written, not added to); the
  // final norm's backward then writes dx_ (cuda_layers::Into::write).
  void logits_forward(int weight);
  void logits_backward(int weight);
  // What logits_forward keeps (normed_, logits_, the losses).
  std::uint64_t logits_bytes() const noexcept;

  zero_engine* engine_;
  Shape shape_;
  const char* model_;
  int widest_;  // the widest row whose parameter gradients are reduced
  cuda_layers::CudaStream stream_;
  bool hook_streams_ = engine_takes_streams();
  cuda_layers::Matmul matmul_;
  cuda_layers::DeviceBatch batch_;  // tokens, targets, token groups and losses on the GPU
  int counted_ = 0;                 // positions with a target
  float dloss_ = 0;                 // the gradient of each position's loss
  bool training_ = true;            // in a training forward, not an evaluation
  bool logits_kept_ = false;        // logits_ holds the last evaluation's logits, not a gradient
  std::vector<cuda_layers::CudaEvent> marks_;  // mark's timing events, by point
  cuda_layers::DeviceBuffer normed_, logits_;
  // Backward: the gradient at the final norm's output, dx_ the gradient of the residual stream,
  // the reduction scratch and attention's per-row delta.
  cuda_layers::DeviceBuffer dnormed_, dx_, scratch_, delta_;
};

}  // namespace zero::decoder
