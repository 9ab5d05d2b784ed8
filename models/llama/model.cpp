// The Llama-family decoder through the C API (see model.h): registration, and the forward and
// backward of each module between its hooks, from the layers in kernels.h and the shared ones
// (models/layers/layers.h).
#include "models/llama/model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/layers/layers.h"
#include "models/llama/kernels.h"
#include "models/llama/params.h"
#include "models/tokens.h"

namespace zero::llama {

using layers::crossentropy_backward;
using layers::crossentropy_forward;
using layers::matmul_backward;
using layers::matmul_forward;
using layers::residual_forward;

void Llama::check(zero_status status, const char* call) const {
  models::check(status, call);
}

Llama::Llama(zero_engine* engine, const LlamaConfig& config, int batch, int seq, std::uint64_t seed,
             const models::ActivationOptions& options)
    : engine_(engine),
      init_(std::make_unique<models::ParamInit>(seed)),
      config_(config),
      batch_(batch),
      seq_(seq),
      options_(options) {
  config.validate();
  if (seq < 1 || seq > config.max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) +
                                " is outside the model's 1.." + std::to_string(config.max_seq));
  }
  zero_dtype dtype = ZERO_FP32;
  check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  copies_.set_dtype(dtype);
  models::Registrar registrar(engine, *init_);
  const LlamaIds ids = register_llama(registrar, config);
  embed_module_ = ids.embed_module;
  head_module_ = ids.head_module;
  wte_ = ids.wte, norm_ = ids.norm, lm_head_ = ids.lm_head;
  blocks_ = ids.blocks;
  names_ = registrar.names();
  numels_ = registrar.numels();
  for (std::size_t numel : registrar.numels()) copies_.add_param(numel);
  const long long C = config.channels, hd = config.head_size();
  const long long Q = config.heads * hd, KV = config.kv_heads * hd, F = config.intermediate;

  // The rotary tables for this sequence length.
  const std::vector<double> inv_freq = config.inv_freq();
  cos_.resize(static_cast<std::size_t>(seq) * inv_freq.size());
  sin_.resize(cos_.size());
  rope_tables(cos_.data(), sin_.data(), inv_freq.data(), seq, static_cast<int>(hd));

  if (options_.checkpoint_blocks < 0) options_.checkpoint_blocks = 0;
  const std::size_t N = static_cast<std::size_t>(batch) * seq;
  const std::size_t c = static_cast<std::size_t>(C), q = static_cast<std::size_t>(Q),
                    kv = static_cast<std::size_t>(KV), f = static_cast<std::size_t>(F);
  const std::size_t scores = static_cast<std::size_t>(batch) * config.heads * seq * seq;
  encoded_.resize(N * c);
  acts_.resize(static_cast<std::size_t>(config.layers));
  outs_.resize(static_cast<std::size_t>(config.layers));
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    if (!checkpointed(l)) acts_[l].allocate(N, c, q, kv, f, scores);
    outs_[l].resize(N * c);
  }
  if (options_.checkpoint_blocks > 0) recompute_.allocate(N, c, q, kv, f, scores);
  normed_.resize(N * c), norm_rstd_.resize(N);
  logits_.resize(N * static_cast<std::size_t>(config.vocab));
  probs_.resize(logits_.size());
  losses_.resize(N);
  dF_.resize(N * f), dgate_.resize(N * f), dup_.resize(N * f);
  dq_.resize(N * q), dk_.resize(N * kv), dv_.resize(N * kv), dy_.resize(N * q);
  datt_.resize(scores), dres_.resize(N * c), dsmall_.resize(N * c);
  dlosses_.resize(N), dlogits_.resize(logits_.size()), dx_.resize(N * c), dnorm_.resize(N * c);
}

Llama::~Llama() = default;

void Llama::Activations::allocate(std::size_t N, std::size_t C, std::size_t q, std::size_t kv,
                                  std::size_t F, std::size_t scores) {
  ln1.resize(N * C), rstd1.resize(N), this->q.resize(N * q), k.resize(N * kv), v.resize(N * kv);
  att.resize(scores), y.resize(N * q), res.resize(N * C), ln2.resize(N * C), rstd2.resize(N);
  gate.resize(N * F), up.resize(N * F), h.resize(N * F);
}

std::uint64_t Llama::Activations::bytes() const noexcept {
  std::size_t n = 0;
  for (const auto* b : {&ln1, &rstd1, &q, &k, &v, &att, &y, &res, &ln2, &rstd2, &gate, &up, &h}) {
    n += b->size();
  }
  return n * sizeof(float);
}

float* Llama::param(int id) {
  void* data = nullptr;
  check(zero_param_data(engine_, id, &data), "zero_param_data");
  return copies_.param(id, data);
}

float* Llama::grad(int id) {
  if (id < 0) return nullptr;
  void* data = nullptr;
  check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return copies_.grad(id, data);
}

float Llama::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  counted_ = models::count_targets(tokens, targets, N, V);
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  check(zero_pre_forward(engine_, embed_module_, nullptr), "zero_pre_forward");
  embedding_forward(encoded_.data(), tokens, param(wte_), N, C);
  check(zero_post_forward(engine_, embed_module_, nullptr), "zero_post_forward");

  const float* x = encoded_.data();
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    const Block& b = blocks_[l];
    check(zero_pre_forward(engine_, b.module, nullptr), "zero_pre_forward");
    block_forward(b, x, checkpointed(l) ? recompute_ : acts_[l], outs_[l].data());
    check(zero_post_forward(engine_, b.module, nullptr), "zero_post_forward");
    x = outs_[l].data();
  }

  check(zero_pre_forward(engine_, head_module_, nullptr), "zero_pre_forward");
  rmsnorm_forward(normed_.data(), norm_rstd_.data(), x, param(norm_), N, C, config_.norm_eps);
  matmul_forward(logits_.data(), normed_.data(), param(lm_head_),
                 static_cast<const float*>(nullptr), N, C, V);
  crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets, N, V);
  check(zero_post_forward(engine_, head_module_, nullptr), "zero_post_forward");

  double sum = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) sum += losses_[static_cast<std::size_t>(i)];
  }
  return counted_ == 0 ? 0.0f : static_cast<float>(sum / counted_);
}

void Llama::backward() {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  double factor = 1.0;
  check(zero_loss_factor(engine_, &factor), "zero_loss_factor");
  const float dloss = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
  std::fill(dlosses_.begin(), dlosses_.end(), dloss);
  std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
  std::fill(dx_.begin(), dx_.end(), 0.0f);
  std::fill(dnorm_.begin(), dnorm_.end(), 0.0f);
  float* dx = dx_.data();

  check(zero_pre_backward(engine_, head_module_, nullptr), "zero_pre_backward");
  crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), dlosses_.data(), N, V);
  matmul_backward(dnorm_.data(), grad(lm_head_), static_cast<float*>(nullptr), dlogits_.data(),
                  normed_.data(), param(lm_head_), N, C, V);
  const float* last = blocks_.empty() ? encoded_.data() : outs_.back().data();
  rmsnorm_backward(dx, grad(norm_), dnorm_.data(), last, param(norm_), norm_rstd_.data(), N, C);
  copies_.flush();
  check(zero_post_backward(engine_, head_module_, nullptr), "zero_post_backward");

  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const Block& b = blocks_[l];
    const float* x = l == 0 ? encoded_.data() : outs_[l - 1].data();
    check(zero_pre_backward(engine_, b.module, nullptr), "zero_pre_backward");
    if (checkpointed(l)) block_forward(b, x, recompute_, dsmall_.data());
    block_backward(b, x, checkpointed(l) ? recompute_ : acts_[l], dx);
    copies_.flush();
    check(zero_post_backward(engine_, b.module, nullptr), "zero_post_backward");
  }

  check(zero_pre_backward(engine_, embed_module_, nullptr), "zero_pre_backward");
  embedding_backward(grad(wte_), dx, tokens_.data(), N, C);
  copies_.flush();
  check(zero_post_backward(engine_, embed_module_, nullptr), "zero_post_backward");
}

// res = x + o(attention(rope(q(ln1(x))), rope(k(ln1(x))), v(ln1(x)))), then
// out = res + down(silu(gate(ln2(res))) * up(ln2(res))).
void Llama::block_forward(const Block& b, const float* x, Activations& a, float* out) {
  const int B = batch_, T = seq_, N = B * T, C = config_.channels, hd = config_.head_size();
  const int NH = config_.heads, NKV = config_.kv_heads, Q = NH * hd, KV = NKV * hd;
  const int F = config_.intermediate;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const auto bias = [&](int id) -> const float* { return id < 0 ? nullptr : param(id); };
  rmsnorm_forward(a.ln1.data(), a.rstd1.data(), x, param(b.ln1), N, C, config_.norm_eps);
  matmul_forward(a.q.data(), a.ln1.data(), param(b.q), bias(b.q_bias), N, C, Q);
  matmul_forward(a.k.data(), a.ln1.data(), param(b.k), bias(b.k_bias), N, C, KV);
  matmul_forward(a.v.data(), a.ln1.data(), param(b.v), bias(b.v_bias), N, C, KV);
  rope_forward(a.q.data(), cos_.data(), sin_.data(), B, T, NH, hd);
  rope_forward(a.k.data(), cos_.data(), sin_.data(), B, T, NKV, hd);
  gqa_attention_forward(a.y.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, T, NH, NKV,
                        hd, config_.sliding_window);
  matmul_forward(a.res.data(), a.y.data(), param(b.o), static_cast<const float*>(nullptr), N, Q, C);
  residual_forward(a.res.data(), a.res.data(), x, NC);
  rmsnorm_forward(a.ln2.data(), a.rstd2.data(), a.res.data(), param(b.ln2), N, C, config_.norm_eps);
  matmul_forward(a.gate.data(), a.ln2.data(), param(b.gate), static_cast<const float*>(nullptr), N,
                 C, F);
  matmul_forward(a.up.data(), a.ln2.data(), param(b.up), static_cast<const float*>(nullptr), N, C,
                 F);
  swiglu_forward(a.h.data(), a.gate.data(), a.up.data(), static_cast<std::size_t>(N) * F);
  matmul_forward(out, a.h.data(), param(b.down), static_cast<const float*>(nullptr), N, F, C);
  residual_forward(out, out, a.res.data(), NC);
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x.
void Llama::block_backward(const Block& b, const float* x, const Activations& a, float* dx) {
  const int B = batch_, T = seq_, N = B * T, C = config_.channels, hd = config_.head_size();
  const int NH = config_.heads, NKV = config_.kv_heads, Q = NH * hd, KV = NKV * hd;
  const int F = config_.intermediate;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  float* const no_bias = nullptr;
  // MLP branch.
  std::fill(dF_.begin(), dF_.end(), 0.0f);
  matmul_backward(dF_.data(), grad(b.down), no_bias, dx, a.h.data(), param(b.down), N, F, C);
  std::fill(dgate_.begin(), dgate_.end(), 0.0f);
  std::fill(dup_.begin(), dup_.end(), 0.0f);
  swiglu_backward(dgate_.data(), dup_.data(), dF_.data(), a.gate.data(), a.up.data(),
                  static_cast<std::size_t>(N) * F);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  matmul_backward(dsmall_.data(), grad(b.gate), no_bias, dgate_.data(), a.ln2.data(), param(b.gate),
                  N, C, F);
  matmul_backward(dsmall_.data(), grad(b.up), no_bias, dup_.data(), a.ln2.data(), param(b.up), N, C,
                  F);
  std::copy(dx, dx + NC, dres_.begin());  // the residual path
  rmsnorm_backward(dres_.data(), grad(b.ln2), dsmall_.data(), a.res.data(), param(b.ln2),
                   a.rstd2.data(), N, C);
  // Attention branch.
  std::fill(dy_.begin(), dy_.end(), 0.0f);
  matmul_backward(dy_.data(), grad(b.o), no_bias, dres_.data(), a.y.data(), param(b.o), N, Q, C);
  std::fill(dq_.begin(), dq_.end(), 0.0f);
  std::fill(dk_.begin(), dk_.end(), 0.0f);
  std::fill(dv_.begin(), dv_.end(), 0.0f);
  gqa_attention_backward(dq_.data(), dk_.data(), dv_.data(), datt_.data(), dy_.data(), a.q.data(),
                         a.k.data(), a.v.data(), a.att.data(), B, T, NH, NKV, hd);
  rope_backward(dq_.data(), cos_.data(), sin_.data(), B, T, NH, hd);
  rope_backward(dk_.data(), cos_.data(), sin_.data(), B, T, NKV, hd);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  matmul_backward(dsmall_.data(), grad(b.q), grad(b.q_bias), dq_.data(), a.ln1.data(), param(b.q),
                  N, C, Q);
  matmul_backward(dsmall_.data(), grad(b.k), grad(b.k_bias), dk_.data(), a.ln1.data(), param(b.k),
                  N, C, KV);
  matmul_backward(dsmall_.data(), grad(b.v), grad(b.v_bias), dv_.data(), a.ln1.data(), param(b.v),
                  N, C, KV);
  std::copy(dres_.begin(), dres_.end(), dx);  // the residual path
  rmsnorm_backward(dx, grad(b.ln1), dsmall_.data(), x, param(b.ln1), a.rstd1.data(), N, C);
}

double Llama::forward_flops() const {
  return llama::forward_flops(config_, batch_, seq_);
}

models::ActivationCost Llama::activation_cost() const {
  models::ActivationCost cost;
  const std::uint64_t N = static_cast<std::uint64_t>(batch_) * seq_;
  const std::uint64_t C = config_.channels, hd = config_.head_size();
  const std::uint64_t Q = config_.heads * hd, KV = config_.kv_heads * hd, F = config_.intermediate;
  const std::uint64_t scores = N * config_.heads * static_cast<std::uint64_t>(seq_);
  // As Activations::allocate, and the block's output.
  const std::uint64_t per_block =
      (3 * N * C + 2 * N * Q + 2 * N * KV + 3 * N * F + 2 * N + scores + N * C) * sizeof(float);
  const std::uint64_t common = (encoded_.size() + normed_.size() + norm_rstd_.size() +
                                logits_.size() + probs_.size() + losses_.size()) *
                               sizeof(float);
  cost.uncheckpointed_bytes = common + per_block * static_cast<std::uint64_t>(config_.layers);
  cost.kept_bytes = common + recompute_.bytes();
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    cost.kept_bytes += acts_[l].bytes() + outs_[l].size() * sizeof(float);
  }
  cost.recompute_flops = std::min(options_.checkpoint_blocks, config_.layers) *
                         llama::block_flops(config_, batch_, seq_);
  cost.train_flops = 3.0 * forward_flops();
  return cost;
}

void Llama::load_pretrained(const std::string& path) {
  load_llama_weights(engine_, config_, path);
}

float Llama::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  check(zero_set_train(engine_, 0), "zero_set_train");
  const float loss = forward(tokens, targets);
  check(zero_set_train(engine_, 1), "zero_set_train");
  return loss;
}

}  // namespace zero::llama
