// The families' common operations on the CPU layers (cpu_ops.h).
#include "models/decoder/cpu_ops.h"

#include <algorithm>
#include <stdexcept>

#include "models/layers/layers.h"
#include "models/tokens.h"

namespace zero::decoder {

CpuOps::CpuOps(zero_engine* engine, const Shape& shape) : engine_(engine), shape_(shape) {
  // bf16 and fp16 compute copies are read and computed in fp32, their outputs and gradients
  // rounded to the compute dtype (compute_copies.h).
  zero_dtype dtype = ZERO_FP32;
  models::check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  copies_.set_dtype(dtype);
}

void CpuOps::allocate() {
  const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(shape_.channels);
  normed_.resize(N * C);
  logits_.resize(N * static_cast<std::size_t>(shape_.vocab));
  probs_.resize(logits_.size());
  losses_.resize(N);
  dlosses_.resize(N), dlogits_.resize(logits_.size()), dnormed_.resize(N * C), dx_.resize(N * C);
}

void CpuOps::add_params(const models::Registrar& registrar) {
  for (std::size_t numel : registrar.numels()) copies_.add_param(numel);
}

float* CpuOps::param(int id) {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_param_data(engine_, id, &data), "zero_param_data");
  return copies_.param(id, data);
}

float* CpuOps::grad(int id) {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return copies_.grad(id, data);
}

void CpuOps::start_forward(const std::int32_t* tokens, const std::int32_t* targets, bool) {
  const int N = static_cast<int>(shape_.positions());
  counted_ = models::count_targets(tokens, targets, N, shape_.vocab);
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
}

void CpuOps::queue_loss(const std::int32_t* targets) {
  double sum = 0;
  for (std::size_t i = 0; i < shape_.positions(); ++i) {
    if (targets[i] >= 0) sum += losses_[i];
  }
  queued_losses_.push_back(counted_ == 0 ? 0.0f : static_cast<float>(sum / counted_));
}

void CpuOps::mark(std::size_t point) {
  if (point >= marks_.size()) marks_.resize(point + 1);
  marks_[point] = std::chrono::steady_clock::now();
}

double CpuOps::seconds_between(std::size_t from, std::size_t to) const {
  return std::chrono::duration<double>(marks_.at(to) - marks_.at(from)).count();
}

float CpuOps::take_loss() {
  if (queued_losses_.empty()) {
    throw std::logic_error("take_loss: no micro-batch's loss is queued (forward_queued first)");
  }
  const float loss = queued_losses_.front();
  queued_losses_.pop_front();
  return loss;
}

void CpuOps::start_backward() {
  double factor = 1.0;
  models::check(zero_loss_factor(engine_, &factor), "zero_loss_factor");
  // d(mean loss * factor) / d(loss_i)
  const float dloss = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
  std::fill(dlosses_.begin(), dlosses_.end(), dloss);
  // The layers' backward adds (+=) into these.
  std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
  std::fill(dx_.begin(), dx_.end(), 0.0f);
  std::fill(dnormed_.begin(), dnormed_.end(), 0.0f);
}

void CpuOps::logits_forward(int weight) {
  const int N = static_cast<int>(shape_.positions()), C = shape_.channels, V = shape_.vocab;
  layers::matmul_forward(logits_.data(), normed_.data(), param(weight),
                         static_cast<const float*>(nullptr), N, C, V);
  layers::crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets_.data(), N,
                               V);
}

void CpuOps::logits_backward(int weight) {
  const int N = static_cast<int>(shape_.positions()), C = shape_.channels, V = shape_.vocab;
  layers::crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), dlosses_.data(), N,
                                V);
  layers::matmul_backward(dnormed_.data(), grad(weight), static_cast<float*>(nullptr),
                          dlogits_.data(), normed_.data(), param(weight), N, C, V);
}

std::uint64_t CpuOps::logits_bytes() const noexcept {
  return (normed_.size() + logits_.size() + probs_.size() + losses_.size()) * sizeof(float);
}

}  // namespace zero::decoder
