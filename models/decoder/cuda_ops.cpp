// The families' common operations on the CUDA layers (cuda_ops.h).
#include "models/decoder/cuda_ops.h"

#include <stdexcept>
#include <string>

#include "models/registrar.h"
#include "models/tokens.h"

namespace zero::decoder {

namespace cl = zero::cuda_layers;

void check_bf16_compute(zero_engine* engine) {
  zero_dtype dtype = ZERO_FP32;
  models::check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  if (dtype != ZERO_BF16) {
    throw std::runtime_error(
        "the CUDA layers compute in bf16, and the engine's compute copies are not bf16: enable "
        "the config's bf16 section (\"bf16\": {\"enabled\": true})");
  }
}

CudaOps::CudaOps(zero_engine* engine, const Shape& shape, const char* model, int widest)
    : engine_(engine),
      shape_(shape),
      model_(model),
      widest_(widest),
      batch_(static_cast<int>(shape.positions()), stream_.get()) {}

void CudaOps::allocate() {
  void* const s = stream();  // every buffer is zeroed on it
  const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(shape_.channels);
  const std::size_t rows_of_heads = N * static_cast<std::size_t>(shape_.heads);
  normed_.resize(N * C * kBf16, s);
  logits_.resize(N * static_cast<std::size_t>(cl::padded_vocab(shape_.vocab)) * kBf16, s);
  dnormed_.resize(N * C * kBf16, s), dx_.resize(N * C * kBf16, s);
  delta_.resize(rows_of_heads * 4, s);
  scratch_.resize(cl::reduction_scratch_floats(static_cast<int>(N), widest_) * 4, s);
}

CudaOps::Hidden CudaOps::hidden() const {
  return Hidden(shape_.positions() * static_cast<std::size_t>(shape_.channels) * kBf16, stream());
}

const cl::Bf16* CudaOps::param(int id) const {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_param_data(engine_, id, &data), "zero_param_data");
  return static_cast<const Bf16*>(data);
}

cl::Bf16* CudaOps::grad(int id) const {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return static_cast<Bf16*>(data);
}

cl::Into CudaOps::grad_into(int id) const {
  if (id < 0) return cl::Into::add;  // no such parameter (grad() gives null)
  int zero = 0;
  models::check(zero_grad_is_zero(engine_, id, &zero), "zero_grad_is_zero");
  return zero != 0 ? cl::Into::write : cl::Into::add;
}

void CudaOps::start_forward(const std::int32_t* tokens, const std::int32_t* targets,
                            bool training) {
  counted_ =
      models::count_targets(tokens, targets, static_cast<int>(shape_.positions()), shape_.vocab);
  training_ = training;
  logits_kept_ = false;  // until the cross-entropy has left them as they are
  batch_.upload(tokens, targets, stream());
  double factor = 1.0;
  models::check(zero_loss_factor(engine_, &factor), "zero_loss_factor");
  dloss_ = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
}

void CudaOps::queue_loss(const std::int32_t* targets) {
  batch_.queue_loss(targets, counted_, stream());
  logits_kept_ = !training_;
}

void CudaOps::mark(std::size_t point) {
  while (marks_.size() <= point) marks_.emplace_back(/*timing=*/true);
  marks_[point].record(stream());
}

double CudaOps::seconds_between(std::size_t from, std::size_t to) const {
  return marks_.at(to).elapsed_ms_since(marks_.at(from)) / 1e3;
}

void CudaOps::start_backward() const {
  // The logits buffer holds dlogits (scaled by zero_loss_factor / positions) since a training
  // forward; evaluate() leaves the logits themselves.
  if (logits_kept_) throw std::logic_error("backward() after evaluate(): there is no gradient");
}

std::vector<float> CudaOps::logits() const {
  if (!logits_kept_) {
    throw std::logic_error(std::string(model_) +
                           " has no logits to give: evaluate() keeps them until the next "
                           "forward(), which overwrites them with their gradient");
  }
  return cl::download_rows(logits_.as<Bf16>(), shape_.positions(),
                           static_cast<std::size_t>(shape_.vocab),
                           static_cast<std::size_t>(cl::padded_vocab(shape_.vocab)), stream());
}

void CudaOps::embed(Hidden& out, int wte, int wpe) const {
  cl::check(cl::embedding_forward(out.as<Bf16>(), batch_.tokens(), param(wte), param(wpe),
                                  shape_.batch, shape_.seq, shape_.channels, stream()),
            "embedding_forward");
}

void CudaOps::embed_back(int wte, int wpe) const {
  cl::check(cl::embedding_backward(grad(wte), grad(wpe), dx_.as<Bf16>(), batch_.group_positions(),
                                   batch_.group_starts(), batch_.group_tokens(), batch_.groups(),
                                   shape_.batch, shape_.seq, shape_.channels, scratch_.as<float>(),
                                   stream()),
            "embedding_backward");
}

void CudaOps::logits_forward(int weight) {
  const int N = static_cast<int>(shape_.positions()), C = shape_.channels, V = shape_.vocab;
  const int Vp = cl::padded_vocab(V);  // the logits' row stride
  cl::check(matmul_.forward(logits_.as<Bf16>(), Vp, normed_.as<Bf16>(), param(weight), nullptr, N,
                            C, V, stream()),
            "matmul forward (logits)");
  if (!training_) {  // the losses alone: the logits stay for logits() to copy on request
    cl::check(cl::crossentropy_forward(logits_.as<Bf16>(), Vp, batch_.losses(), batch_.targets(), N,
                                       V, stream()),
              "crossentropy_forward");
  } else {  // the logits become their gradient, for backward
    cl::check(cl::crossentropy_fused(logits_.as<Bf16>(), Vp, batch_.losses(), batch_.targets(),
                                     dloss_, N, V, stream()),
              "crossentropy_fused");
  }
}

void CudaOps::logits_backward(int weight) {
  const int N = static_cast<int>(shape_.positions()), C = shape_.channels, V = shape_.vocab;
  cl::check(matmul_.backward(dnormed_.as<Bf16>(), grad(weight), nullptr, logits_.as<Bf16>(),
                             cl::padded_vocab(V), normed_.as<Bf16>(), param(weight), N, C, V,
                             scratch_.as<float>(), stream(), cl::Into::write, grad_into(weight)),
            "matmul backward (logits)");
}

std::uint64_t CudaOps::logits_bytes() const noexcept {
  return normed_.bytes() + logits_.bytes() + shape_.positions() * 4;  // and the losses
}

}  // namespace zero::decoder
