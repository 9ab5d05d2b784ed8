// The reference GPT through the C API (see model.h): registration, and the forward and backward
// of each module between its hooks, from the layers in kernels.h and the shared ones
// (models/layers/layers.h).
#include "models/gpt/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/gpt/hf_layout.h"
#include "models/gpt/kernels.h"
#include "models/gpt/params.h"
#include "models/layers/layers.h"
#include "models/param_init.h"
#include "models/tokens.h"

namespace zero::gpt {

using layers::crossentropy_backward;
using layers::crossentropy_forward;
using layers::matmul_backward;
using layers::matmul_forward;
using layers::residual_forward;

void Gpt::check(zero_status status, const char* call) const {
  models::check(status, call);
}

Gpt::Gpt(zero_engine* engine, const GptConfig& config, int batch, int seq, std::uint64_t seed,
         const GptOptions& options)
    : engine_(engine),
      init_(std::make_unique<models::ParamInit>(seed)),
      config_(config),
      batch_(batch),
      seq_(seq),
      options_(options) {
  if (seq < 1 || seq > config.max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) +
                                " is outside the model's 1.." + std::to_string(config.max_seq));
  }
  if (config.channels % config.heads != 0) {
    throw std::invalid_argument("channels " + std::to_string(config.channels) +
                                " do not split over " + std::to_string(config.heads) + " heads");
  }
  // bf16 and fp16 compute copies are read and computed in fp32, their outputs and gradients
  // rounded to the compute dtype (compute_copies.h).
  zero_dtype dtype = ZERO_FP32;
  check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  copies_.set_dtype(dtype);
  models::Registrar registrar(engine, *init_);
  const GptIds ids = register_gpt(registrar, config);
  embed_module_ = ids.embed_module;
  head_module_ = ids.head_module;
  wte_ = ids.wte, wpe_ = ids.wpe, lnf_w_ = ids.lnf_w, lnf_b_ = ids.lnf_b;
  blocks_ = ids.blocks;
  names_ = registrar.names();
  numels_ = registrar.numels();
  for (std::size_t numel : registrar.numels()) copies_.add_param(numel);
  const long long C = config.channels;

  if (options_.checkpoint_blocks < 0) options_.checkpoint_blocks = 0;
  const std::size_t N = static_cast<std::size_t>(batch) * seq;
  const std::size_t c = static_cast<std::size_t>(C);
  const std::size_t scores = static_cast<std::size_t>(batch) * config.heads * seq * seq;
  encoded_.resize(N * c);
  acts_.resize(static_cast<std::size_t>(config.layers));
  outs_.resize(static_cast<std::size_t>(config.layers));
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    if (!checkpointed(l)) acts_[l].allocate(N, c, scores);
    outs_[l].resize(N * c);
  }
  if (options_.checkpoint_blocks > 0) recompute_.allocate(N, c, scores);
  lnf_.resize(N * c), lnf_mean_.resize(N), lnf_rstd_.resize(N);
  logits_.resize(N * static_cast<std::size_t>(config.vocab));
  probs_.resize(logits_.size());
  losses_.resize(N);
  d4_.resize(4 * N * c), d4b_.resize(4 * N * c), dqkv_.resize(3 * N * c), datt_.resize(scores);
  dres2_.resize(N * c), dsmall_.resize(N * c);
  dlosses_.resize(N), dlogits_.resize(logits_.size()), dx_.resize(N * c), dlnf_.resize(N * c);
}

void Gpt::Activations::allocate(std::size_t N, std::size_t C, std::size_t batch_heads_seq_seq) {
  ln1.resize(N * C), ln1_mean.resize(N), ln1_rstd.resize(N), qkv.resize(3 * N * C);
  att.resize(batch_heads_seq_seq), atty.resize(N * C), res2.resize(N * C), ln2.resize(N * C);
  ln2_mean.resize(N), ln2_rstd.resize(N), fch.resize(4 * N * C), fch_gelu.resize(4 * N * C);
}

std::uint64_t Gpt::Activations::bytes() const noexcept {
  std::size_t n = 0;
  for (const auto* v : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &atty, &res2, &ln2, &ln2_mean,
                        &ln2_rstd, &fch, &fch_gelu}) {
    n += v->size();
  }
  return n * sizeof(float);
}

std::uint64_t Gpt::Activations::bytes_for(std::size_t N, std::size_t C,
                                          std::size_t batch_heads_seq_seq) noexcept {
  // As allocate(): ln1, qkv, atty, res2, ln2 (7 NC), fch and fch_gelu (8 NC), four N-vectors.
  return (15 * N * C + 4 * N + batch_heads_seq_seq) * sizeof(float);
}

Gpt::~Gpt() = default;

float* Gpt::param(int id) {
  void* data = nullptr;
  check(zero_param_data(engine_, id, &data), "zero_param_data");
  return copies_.param(id, data);
}

float* Gpt::grad(int id) {
  void* data = nullptr;
  check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return copies_.grad(id, data);
}

float Gpt::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab;
  const int N = B * T;
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  counted_ = models::count_targets(tokens, targets, N, V);
  check(zero_pre_forward(engine_, embed_module_, nullptr), "zero_pre_forward");
  encoder_forward(encoded_.data(), tokens, param(wte_), param(wpe_), B, T, C);
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
  layernorm_forward(lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x, param(lnf_w_),
                    param(lnf_b_), N, C);
  matmul_forward(logits_.data(), lnf_.data(), param(wte_), static_cast<const float*>(nullptr), N, C,
                 V);
  crossentropy_forward(losses_.data(), probs_.data(), logits_.data(), targets, N, V);
  check(zero_post_forward(engine_, head_module_, nullptr), "zero_post_forward");

  double sum = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) sum += losses_[static_cast<std::size_t>(i)];
  }
  return counted_ == 0 ? 0.0f : static_cast<float>(sum / counted_);
}

void Gpt::backward() {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab;
  const int N = B * T;
  double factor = 1.0;
  check(zero_loss_factor(engine_, &factor), "zero_loss_factor");
  // d(mean loss * factor) / d(loss_i)
  const float dloss = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
  std::fill(dlosses_.begin(), dlosses_.end(), dloss);
  // The layers' backward adds (+=) into these.
  std::fill(dlogits_.begin(), dlogits_.end(), 0.0f);
  std::fill(dx_.begin(), dx_.end(), 0.0f);
  std::fill(dlnf_.begin(), dlnf_.end(), 0.0f);
  float* dx = dx_.data();

  check(zero_pre_backward(engine_, head_module_, nullptr), "zero_pre_backward");
  crossentropy_backward(dlogits_.data(), probs_.data(), targets_.data(), dlosses_.data(), N, V);
  matmul_backward(dlnf_.data(), grad(wte_), static_cast<float*>(nullptr), dlogits_.data(),
                  lnf_.data(), param(wte_), N, C, V);
  const float* last = blocks_.empty() ? encoded_.data() : outs_.back().data();
  layernorm_backward(dx, grad(lnf_w_), grad(lnf_b_), dlnf_.data(), last, param(lnf_w_),
                     lnf_mean_.data(), lnf_rstd_.data(), N, C);
  copies_.flush();
  check(zero_post_backward(engine_, head_module_, nullptr), "zero_post_backward");

  // dx: the gradient of the residual stream at a block's output, then at its input.
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const Block& b = blocks_[l];
    const float* x = l == 0 ? encoded_.data() : outs_[l - 1].data();
    check(zero_pre_backward(engine_, b.module, nullptr), "zero_pre_backward");
    if (checkpointed(l)) {
      // The forward again from the saved input; its output equals outs_[l] bit for bit.
      block_forward(b, x, recompute_, dsmall_.data());
    }
    block_backward(b, x, checkpointed(l) ? recompute_ : acts_[l], dx);
    copies_.flush();
    check(zero_post_backward(engine_, b.module, nullptr), "zero_post_backward");
  }

  check(zero_pre_backward(engine_, embed_module_, nullptr), "zero_pre_backward");
  encoder_backward(grad(wte_), grad(wpe_), dx, tokens_.data(), B, T, C);
  copies_.flush();
  check(zero_post_backward(engine_, embed_module_, nullptr), "zero_post_backward");
}

// out = x + attn(ln1(x)), then out += mlp(ln2(out)): the residual stream through one block.
void Gpt::block_forward(const Block& b, const float* x, Activations& a, float* out) {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, param(b.ln1_w),
                    param(b.ln1_b), N, C);
  matmul_forward(a.qkv.data(), a.ln1.data(), param(b.qkv_w), param(b.qkv_b), N, C, 3 * C);
  attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
  matmul_forward(a.res2.data(), a.atty.data(), param(b.proj_w), param(b.proj_b), N, C, C);
  residual_forward(a.res2.data(), a.res2.data(), x, NC);
  layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                    param(b.ln2_w), param(b.ln2_b), N, C);
  matmul_forward(a.fch.data(), a.ln2.data(), param(b.fc_w), param(b.fc_b), N, C, 4 * C);
  gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * NC);
  matmul_forward(out, a.fch_gelu.data(), param(b.fcproj_w), param(b.fcproj_b), N, 4 * C, C);
  residual_forward(out, out, a.res2.data(), NC);
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x; the
// parameters' gradients are added to their buffers.
void Gpt::block_backward(const Block& b, const float* x, const Activations& a, float* dx) {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // MLP branch: out = res2 + fcproj(gelu(fc(ln2(res2)))).
  std::fill(d4_.begin(), d4_.end(), 0.0f);
  matmul_backward(d4_.data(), grad(b.fcproj_w), grad(b.fcproj_b), dx, a.fch_gelu.data(),
                  param(b.fcproj_w), N, 4 * C, C);
  std::fill(d4b_.begin(), d4b_.end(), 0.0f);
  gelu_backward(d4b_.data(), a.fch.data(), d4_.data(), 4 * NC);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  matmul_backward(dsmall_.data(), grad(b.fc_w), grad(b.fc_b), d4b_.data(), a.ln2.data(),
                  param(b.fc_w), N, C, 4 * C);
  std::copy(dx, dx + NC, dres2_.begin());  // the residual path
  layernorm_backward(dres2_.data(), grad(b.ln2_w), grad(b.ln2_b), dsmall_.data(), a.res2.data(),
                     param(b.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  // Attention branch: res2 = x + proj(attention(qkv(ln1(x)))).
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  matmul_backward(dsmall_.data(), grad(b.proj_w), grad(b.proj_b), dres2_.data(), a.atty.data(),
                  param(b.proj_w), N, C, C);
  std::fill(dqkv_.begin(), dqkv_.end(), 0.0f);
  attention_backward(dqkv_.data(), datt_.data(), dsmall_.data(), a.qkv.data(), a.att.data(), B, T,
                     C, NH);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  matmul_backward(dsmall_.data(), grad(b.qkv_w), grad(b.qkv_b), dqkv_.data(), a.ln1.data(),
                  param(b.qkv_w), N, C, 3 * C);
  std::copy(dres2_.begin(), dres2_.end(), dx);  // the residual path
  layernorm_backward(dx, grad(b.ln1_w), grad(b.ln1_b), dsmall_.data(), x, param(b.ln1_w),
                     a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

// One block's forward: the four matrix products (3C + C + 4C + 4C outputs of C or 4C inputs:
// 24 N C^2) and causal attention (scores and weighted sum, 2 * 2 * B * T^2 * C, halved).
double Gpt::block_flops() const {
  const double N = static_cast<double>(batch_) * seq_, C = config_.channels;
  return 24.0 * N * C * C + 2.0 * N * seq_ * C;
}

double Gpt::forward_flops() const {
  const double N = static_cast<double>(batch_) * seq_;
  return config_.layers * block_flops() + 2.0 * N * config_.channels * config_.vocab;
}

ActivationCost Gpt::activation_cost() const {
  ActivationCost cost;
  const std::size_t N = static_cast<std::size_t>(batch_) * seq_;
  const std::size_t NC = N * config_.channels;
  const std::uint64_t per_block =  // a block's activations and its output
      Activations::bytes_for(N, config_.channels, N * config_.heads * seq_) + NC * sizeof(float);
  const std::uint64_t common =
      (encoded_.size() + lnf_.size() + lnf_mean_.size() + lnf_rstd_.size() + logits_.size() +
       probs_.size() + losses_.size()) *
      sizeof(float);
  cost.uncheckpointed_bytes = common + per_block * static_cast<std::uint64_t>(config_.layers);
  cost.kept_bytes = common + recompute_.bytes();
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    cost.kept_bytes += acts_[l].bytes() + outs_[l].size() * sizeof(float);
  }
  cost.recompute_flops = std::min(options_.checkpoint_blocks, config_.layers) * block_flops();
  cost.train_flops = 3.0 * forward_flops();
  return cost;
}

void Gpt::load_pretrained(const std::string& path) {
  load_gpt2_weights(engine_, names_, config_.layers, path);
}

float Gpt::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  check(zero_set_train(engine_, 0), "zero_set_train");
  const float loss = forward(tokens, targets);
  check(zero_set_train(engine_, 1), "zero_set_train");
  return loss;
}

}  // namespace zero::gpt
