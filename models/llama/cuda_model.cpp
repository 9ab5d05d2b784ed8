// The Llama-family decoder on the GPU (cuda_model.h): the CPU model's structure, module by
// module between the same hooks, over the CUDA layers on the model's stream.
#include "models/llama/cuda_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/cuda/batch.h"
#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"
#include "models/llama/kernels.h"
#include "models/llama/params.h"
#include "models/param_init.h"
#include "models/registrar.h"
#include "models/tokens.h"

namespace zero::llama {
namespace {

namespace cl = zero::cuda_layers;
using cl::Bf16;
using cl::DeviceBuffer;

constexpr std::size_t kBf16 = sizeof(Bf16);

// One block's activations, kept from forward to backward (bf16, statistics fp32).
struct BlockActivations {
  DeviceBuffer ln1, rstd1, q, k, v, y, lse, res, ln2, rstd2, gate, up, h;
  void allocate(std::size_t N, std::size_t C, std::size_t Q, std::size_t KV, std::size_t F,
                std::size_t rows_of_heads, cl::Stream s) {
    ln1.resize(N * C * kBf16, s), rstd1.resize(N * 4, s), q.resize(N * Q * kBf16, s);
    k.resize(N * KV * kBf16, s), v.resize(N * KV * kBf16, s), y.resize(N * Q * kBf16, s);
    lse.resize(rows_of_heads * 4, s), res.resize(N * C * kBf16, s), ln2.resize(N * C * kBf16, s);
    rstd2.resize(N * 4, s), gate.resize(N * F * kBf16, s), up.resize(N * F * kBf16, s);
    h.resize(N * F * kBf16, s);
  }
  std::uint64_t bytes() const noexcept {
    std::uint64_t n = 0;
    for (const DeviceBuffer* b :
         {&ln1, &rstd1, &q, &k, &v, &y, &lse, &res, &ln2, &rstd2, &gate, &up, &h}) {
      n += b->bytes();
    }
    return n;
  }
};

class LlamaCuda final : public models::CausalLm {
 public:
  LlamaCuda(zero_engine* engine, const LlamaConfig& config, int batch, int seq, std::uint64_t seed,
            const models::ActivationOptions& options);

  float forward(const std::int32_t* tokens, const std::int32_t* targets) override;
  void backward() override;
  float evaluate(const std::int32_t* tokens, const std::int32_t* targets) override;
  void load_pretrained(const std::string& path) override {
    load_llama_weights(engine_, config_, path);
  }
  models::ActivationCost activation_cost() const override;
  double forward_flops() const override { return llama::forward_flops(config_, batch_, seq_); }
  std::vector<float> logits() const override;
  const std::vector<std::string>& names() const noexcept override { return names_; }
  const std::vector<std::size_t>& numels() const noexcept override { return numels_; }

 private:
  void block_forward(const LlamaBlockIds& b, const Bf16* x, BlockActivations& a, Bf16* out);
  void block_backward(const LlamaBlockIds& b, const Bf16* x, const BlockActivations& a, Bf16* dx);
  bool checkpointed(std::size_t block) const noexcept {
    return static_cast<int>(block) < options_.checkpoint_blocks;
  }
  const Bf16* param(int id) const;
  Bf16* grad(int id) const;  // null for id -1 (a bias the model lacks)
  void* stream() const noexcept { return stream_.get(); }
  void zero(const DeviceBuffer& buffer, std::size_t bytes) const {
    cl::zero_bytes(buffer.as<void>(), bytes, stream());
  }

  zero_engine* engine_;
  std::unique_ptr<models::ParamInit> init_;
  LlamaConfig config_;
  int batch_, seq_;
  models::ActivationOptions options_;
  LlamaIds ids_;
  std::vector<std::string> names_;
  std::vector<std::size_t> numels_;
  cl::CudaStream stream_;
  cl::Matmul matmul_;
  DeviceBuffer cos_, sin_;  // rotary tables fp32 [seq, head_size / 2]

  cl::DeviceBatch batch_data_;  // tokens, targets, token groups and losses on the GPU
  int counted_ = 0;
  DeviceBuffer encoded_;
  std::vector<BlockActivations> acts_;
  BlockActivations recompute_;
  std::vector<DeviceBuffer> outs_;
  DeviceBuffer normed_, norm_rstd_, logits_;
  // Backward scratch.
  DeviceBuffer dF_, dgate_, dup_, dq_, dk_, dv_, dy_, dres_, dsmall_, dx_, dnorm_, scratch_, delta_;
  bool logits_kept_ = false;  // logits_ holds the last evaluate()'s logits (not their gradient)
  bool evaluating_ = false;
};

LlamaCuda::LlamaCuda(zero_engine* engine, const LlamaConfig& config, int batch, int seq,
                     std::uint64_t seed, const models::ActivationOptions& options)
    : engine_(engine),
      init_(std::make_unique<models::ParamInit>(seed)),
      config_(config),
      batch_(batch),
      seq_(seq),
      options_(options),
      batch_data_(batch * seq, stream_.get()) {
  config.validate();
  if (seq < 1 || seq > config.max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) +
                                " is outside the model's 1.." + std::to_string(config.max_seq));
  }
  models::Registrar registrar(engine, *init_);
  ids_ = register_llama(registrar, config);
  names_ = registrar.names();
  numels_ = registrar.numels();

  void* const s = stream();  // every buffer is zeroed on it
  const int hd = config.head_size();
  const std::vector<double> inv_freq = config.inv_freq();
  std::vector<float> cos(static_cast<std::size_t>(seq) * inv_freq.size()), sin(cos.size());
  rope_tables(cos.data(), sin.data(), inv_freq.data(), seq, hd);  // the CPU layers' tables
  cos_.resize(cos.size() * 4, s), sin_.resize(sin.size() * 4, s);
  cl::copy_to_device(cos_.as<void>(), cos.data(), cos.size() * 4, s);
  cl::copy_to_device(sin_.as<void>(), sin.data(), sin.size() * 4, s);
  stream_.synchronize();

  if (options_.checkpoint_blocks < 0) options_.checkpoint_blocks = 0;
  const std::size_t N = static_cast<std::size_t>(batch) * seq, C = config.channels;
  const std::size_t Q = static_cast<std::size_t>(config.heads) * hd;
  const std::size_t KV = static_cast<std::size_t>(config.kv_heads) * hd;
  const std::size_t F = config.intermediate, V = config.vocab;
  const std::size_t rows_of_heads = N * static_cast<std::size_t>(config.heads);
  encoded_.resize(N * C * kBf16, s);
  acts_.resize(static_cast<std::size_t>(config.layers));
  outs_.resize(static_cast<std::size_t>(config.layers));
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    if (!checkpointed(l)) acts_[l].allocate(N, C, Q, KV, F, rows_of_heads, s);
    outs_[l].resize(N * C * kBf16, s);
  }
  if (options_.checkpoint_blocks > 0) recompute_.allocate(N, C, Q, KV, F, rows_of_heads, s);
  normed_.resize(N * C * kBf16, s), norm_rstd_.resize(N * 4, s);
  logits_.resize(N * static_cast<std::size_t>(cl::padded_vocab(config.vocab)) * kBf16, s);
  dF_.resize(N * F * kBf16, s), dgate_.resize(N * F * kBf16, s), dup_.resize(N * F * kBf16, s);
  dq_.resize(N * Q * kBf16, s), dk_.resize(N * KV * kBf16, s), dv_.resize(N * KV * kBf16, s);
  dy_.resize(N * Q * kBf16, s), dres_.resize(N * C * kBf16, s), dsmall_.resize(N * C * kBf16, s);
  dx_.resize(N * C * kBf16, s), dnorm_.resize(N * C * kBf16, s);
  delta_.resize(rows_of_heads * 4, s);
  const int widest = static_cast<int>(std::max({V, F, Q, C}));
  scratch_.resize(cl::reduction_scratch_floats(static_cast<int>(N), widest) * 4, s);
}

const Bf16* LlamaCuda::param(int id) const {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_param_data(engine_, id, &data), "zero_param_data");
  return static_cast<const Bf16*>(data);
}

Bf16* LlamaCuda::grad(int id) const {
  if (id < 0) return nullptr;
  void* data = nullptr;
  models::check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return static_cast<Bf16*>(data);
}

float LlamaCuda::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  const int Vp = cl::padded_vocab(V);  // the logits' row stride
  counted_ = models::count_targets(tokens, targets, N, V);
  logits_kept_ = false;  // until the cross-entropy has left them as they are
  batch_data_.upload(tokens, targets, stream());
  double factor = 1.0;
  models::check(zero_loss_factor(engine_, &factor), "zero_loss_factor");

  models::check(zero_pre_forward(engine_, ids_.embed_module, stream()), "zero_pre_forward");
  cl::check(cl::embedding_forward(encoded_.as<Bf16>(), batch_data_.tokens(), param(ids_.wte),
                                  nullptr, B, T, C, stream()),
            "embedding_forward");
  models::check(zero_post_forward(engine_, ids_.embed_module, stream()), "zero_post_forward");

  const Bf16* x = encoded_.as<Bf16>();
  for (std::size_t l = 0; l < ids_.blocks.size(); ++l) {
    const LlamaBlockIds& b = ids_.blocks[l];
    models::check(zero_pre_forward(engine_, b.module, stream()), "zero_pre_forward");
    block_forward(b, x, checkpointed(l) ? recompute_ : acts_[l], outs_[l].as<Bf16>());
    models::check(zero_post_forward(engine_, b.module, stream()), "zero_post_forward");
    x = outs_[l].as<Bf16>();
  }

  models::check(zero_pre_forward(engine_, ids_.head_module, stream()), "zero_pre_forward");
  cl::check(cl::rmsnorm_forward(normed_.as<Bf16>(), norm_rstd_.as<float>(), x, param(ids_.norm), N,
                                C, static_cast<float>(config_.norm_eps), stream()),
            "rmsnorm_forward");
  cl::check(matmul_.forward(logits_.as<Bf16>(), Vp, normed_.as<Bf16>(), param(ids_.lm_head),
                            nullptr, N, C, V, stream()),
            "matmul forward (logits)");
  if (evaluating_) {  // the losses alone: the logits stay for logits() to copy on request
    cl::check(cl::crossentropy_forward(logits_.as<Bf16>(), Vp, batch_data_.losses(),
                                       batch_data_.targets(), N, V, stream()),
              "crossentropy_forward");
  } else {  // the logits become their gradient, for backward
    const float dloss = counted_ == 0 ? 0.0f : static_cast<float>(factor / counted_);
    cl::check(cl::crossentropy_fused(logits_.as<Bf16>(), Vp, batch_data_.losses(),
                                     batch_data_.targets(), dloss, N, V, stream()),
              "crossentropy_fused");
  }
  models::check(zero_post_forward(engine_, ids_.head_module, stream()), "zero_post_forward");

  const float loss = batch_data_.mean_loss(targets, counted_, stream());  // waits for the stream
  logits_kept_ = evaluating_;
  return loss;
}

void LlamaCuda::backward() {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  const int Vp = cl::padded_vocab(V);  // the logits' row stride
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // The logits buffer holds dlogits (scaled by zero_loss_factor / positions) since a training
  // forward; evaluate() leaves the logits themselves.
  if (logits_kept_) throw std::logic_error("backward() after evaluate(): there is no gradient");
  models::check(zero_pre_backward(engine_, ids_.head_module, stream()), "zero_pre_backward");
  zero(dnorm_, NC * kBf16);
  cl::check(matmul_.backward(dnorm_.as<Bf16>(), grad(ids_.lm_head), nullptr, logits_.as<Bf16>(), Vp,
                             normed_.as<Bf16>(), param(ids_.lm_head), N, C, V, scratch_.as<float>(),
                             stream()),
            "matmul backward (logits)");
  const Bf16* last = ids_.blocks.empty() ? encoded_.as<Bf16>() : outs_.back().as<Bf16>();
  zero(dx_, NC * kBf16);
  cl::check(cl::rmsnorm_backward(dx_.as<Bf16>(), grad(ids_.norm), dnorm_.as<Bf16>(), last,
                                 param(ids_.norm), norm_rstd_.as<float>(), N, C,
                                 scratch_.as<float>(), stream()),
            "rmsnorm_backward");
  models::check(zero_post_backward(engine_, ids_.head_module, stream()), "zero_post_backward");

  for (std::size_t l = ids_.blocks.size(); l-- > 0;) {
    const LlamaBlockIds& b = ids_.blocks[l];
    const Bf16* x = l == 0 ? encoded_.as<Bf16>() : outs_[l - 1].as<Bf16>();
    models::check(zero_pre_backward(engine_, b.module, stream()), "zero_pre_backward");
    if (checkpointed(l)) block_forward(b, x, recompute_, dsmall_.as<Bf16>());
    block_backward(b, x, checkpointed(l) ? recompute_ : acts_[l], dx_.as<Bf16>());
    models::check(zero_post_backward(engine_, b.module, stream()), "zero_post_backward");
  }

  models::check(zero_pre_backward(engine_, ids_.embed_module, stream()), "zero_pre_backward");
  cl::check(
      cl::embedding_backward(grad(ids_.wte), nullptr, dx_.as<Bf16>(), batch_data_.group_positions(),
                             batch_data_.group_starts(), batch_data_.group_tokens(),
                             batch_data_.groups(), B, T, C, scratch_.as<float>(), stream()),
      "embedding_backward");
  models::check(zero_post_backward(engine_, ids_.embed_module, stream()), "zero_post_backward");
}

// res = x + o(attention(rope(q(ln1(x))), rope(k(ln1(x))), v(ln1(x)))), then
// out = res + down(silu(gate(ln2(res))) * up(ln2(res))), as Llama::block_forward.
void LlamaCuda::block_forward(const LlamaBlockIds& b, const Bf16* x, BlockActivations& a,
                              Bf16* out) {
  const int B = batch_, T = seq_, N = B * T, C = config_.channels, hd = config_.head_size();
  const int NH = config_.heads, NKV = config_.kv_heads, Q = NH * hd, KV = NKV * hd;
  const int F = config_.intermediate;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float eps = static_cast<float>(config_.norm_eps);
  void* s = stream();
  cl::check(
      cl::rmsnorm_forward(a.ln1.as<Bf16>(), a.rstd1.as<float>(), x, param(b.ln1), N, C, eps, s),
      "rmsnorm_forward");
  cl::check(
      matmul_.forward(a.q.as<Bf16>(), a.ln1.as<Bf16>(), param(b.q), param(b.q_bias), N, C, Q, s),
      "matmul forward (q)");
  cl::check(
      matmul_.forward(a.k.as<Bf16>(), a.ln1.as<Bf16>(), param(b.k), param(b.k_bias), N, C, KV, s),
      "matmul forward (k)");
  cl::check(
      matmul_.forward(a.v.as<Bf16>(), a.ln1.as<Bf16>(), param(b.v), param(b.v_bias), N, C, KV, s),
      "matmul forward (v)");
  cl::check(
      cl::rope_forward(a.q.as<Bf16>(), Q, cos_.as<float>(), sin_.as<float>(), B, T, NH, hd, s),
      "rope_forward (q)");
  cl::check(
      cl::rope_forward(a.k.as<Bf16>(), KV, cos_.as<float>(), sin_.as<float>(), B, T, NKV, hd, s),
      "rope_forward (k)");
  cl::check(
      cl::attention_forward(a.y.as<Bf16>(), Q, a.lse.as<float>(), a.q.as<Bf16>(), Q, a.k.as<Bf16>(),
                            a.v.as<Bf16>(), KV, B, T, NH, NKV, hd, config_.sliding_window, s),
      "attention_forward");
  cl::check(matmul_.forward(a.res.as<Bf16>(), a.y.as<Bf16>(), param(b.o), nullptr, N, Q, C, s),
            "matmul forward (o)");
  cl::check(cl::residual_forward(a.res.as<Bf16>(), a.res.as<Bf16>(), x, NC, s), "residual_forward");
  cl::check(cl::rmsnorm_forward(a.ln2.as<Bf16>(), a.rstd2.as<float>(), a.res.as<Bf16>(),
                                param(b.ln2), N, C, eps, s),
            "rmsnorm_forward");
  cl::check(
      matmul_.forward(a.gate.as<Bf16>(), a.ln2.as<Bf16>(), param(b.gate), nullptr, N, C, F, s),
      "matmul forward (gate)");
  cl::check(matmul_.forward(a.up.as<Bf16>(), a.ln2.as<Bf16>(), param(b.up), nullptr, N, C, F, s),
            "matmul forward (up)");
  cl::check(cl::swiglu_forward(a.h.as<Bf16>(), a.gate.as<Bf16>(), a.up.as<Bf16>(),
                               static_cast<std::size_t>(N) * F, s),
            "swiglu_forward");
  cl::check(matmul_.forward(out, a.h.as<Bf16>(), param(b.down), nullptr, N, F, C, s),
            "matmul forward (down)");
  cl::check(cl::residual_forward(out, out, a.res.as<Bf16>(), NC, s), "residual_forward");
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x.
void LlamaCuda::block_backward(const LlamaBlockIds& b, const Bf16* x, const BlockActivations& a,
                               Bf16* dx) {
  const int B = batch_, T = seq_, N = B * T, C = config_.channels, hd = config_.head_size();
  const int NH = config_.heads, NKV = config_.kv_heads, Q = NH * hd, KV = NKV * hd;
  const int F = config_.intermediate;
  const std::size_t n = static_cast<std::size_t>(N);
  const std::size_t NC = n * C;
  void* s = stream();
  float* scratch = scratch_.as<float>();
  // MLP branch.
  zero(dF_, n * F * kBf16);
  cl::check(matmul_.backward(dF_.as<Bf16>(), grad(b.down), nullptr, dx, a.h.as<Bf16>(),
                             param(b.down), N, F, C, scratch, s),
            "matmul backward (down)");
  zero(dgate_, n * F * kBf16);
  zero(dup_, n * F * kBf16);
  cl::check(cl::swiglu_backward(dgate_.as<Bf16>(), dup_.as<Bf16>(), dF_.as<Bf16>(),
                                a.gate.as<Bf16>(), a.up.as<Bf16>(), n * F, s),
            "swiglu_backward");
  zero(dsmall_, NC * kBf16);
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.gate), nullptr, dgate_.as<Bf16>(),
                             a.ln2.as<Bf16>(), param(b.gate), N, C, F, scratch, s),
            "matmul backward (gate)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.up), nullptr, dup_.as<Bf16>(),
                             a.ln2.as<Bf16>(), param(b.up), N, C, F, scratch, s),
            "matmul backward (up)");
  cl::copy_device(dres_.as<void>(), dx, NC * kBf16, s);  // the residual path
  cl::check(
      cl::rmsnorm_backward(dres_.as<Bf16>(), grad(b.ln2), dsmall_.as<Bf16>(), a.res.as<Bf16>(),
                           param(b.ln2), a.rstd2.as<float>(), N, C, scratch, s),
      "rmsnorm_backward");
  // Attention branch.
  zero(dy_, n * Q * kBf16);
  cl::check(matmul_.backward(dy_.as<Bf16>(), grad(b.o), nullptr, dres_.as<Bf16>(), a.y.as<Bf16>(),
                             param(b.o), N, Q, C, scratch, s),
            "matmul backward (o)");
  zero(dq_, n * Q * kBf16);
  zero(dk_, n * KV * kBf16);
  zero(dv_, n * KV * kBf16);
  cl::check(cl::attention_backward(dq_.as<Bf16>(), dk_.as<Bf16>(), dv_.as<Bf16>(), dy_.as<Bf16>(),
                                   Q, a.y.as<Bf16>(), a.lse.as<float>(), a.q.as<Bf16>(), Q,
                                   a.k.as<Bf16>(), a.v.as<Bf16>(), KV, B, T, NH, NKV, hd,
                                   config_.sliding_window, delta_.as<float>(), s),
            "attention_backward");
  cl::check(
      cl::rope_backward(dq_.as<Bf16>(), Q, cos_.as<float>(), sin_.as<float>(), B, T, NH, hd, s),
      "rope_backward (q)");
  cl::check(
      cl::rope_backward(dk_.as<Bf16>(), KV, cos_.as<float>(), sin_.as<float>(), B, T, NKV, hd, s),
      "rope_backward (k)");
  zero(dsmall_, NC * kBf16);
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.q), grad(b.q_bias), dq_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.q), N, C, Q, scratch, s),
            "matmul backward (q)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.k), grad(b.k_bias), dk_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.k), N, C, KV, scratch, s),
            "matmul backward (k)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.v), grad(b.v_bias), dv_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.v), N, C, KV, scratch, s),
            "matmul backward (v)");
  cl::copy_device(dx, dres_.as<void>(), NC * kBf16, s);  // the residual path
  cl::check(cl::rmsnorm_backward(dx, grad(b.ln1), dsmall_.as<Bf16>(), x, param(b.ln1),
                                 a.rstd1.as<float>(), N, C, scratch, s),
            "rmsnorm_backward");
}

float LlamaCuda::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  models::check(zero_set_train(engine_, 0), "zero_set_train");
  evaluating_ = true;
  const float loss = forward(tokens, targets);
  evaluating_ = false;
  models::check(zero_set_train(engine_, 1), "zero_set_train");
  return loss;
}

std::vector<float> LlamaCuda::logits() const {
  if (!logits_kept_) {
    throw std::logic_error(
        "the CUDA Llama has no logits to give: evaluate() keeps them until the next "
        "forward(), which overwrites them with their gradient");
  }
  return cl::download_rows(logits_.as<Bf16>(), static_cast<std::size_t>(batch_) * seq_,
                           static_cast<std::size_t>(config_.vocab),
                           static_cast<std::size_t>(cl::padded_vocab(config_.vocab)), stream());
}

models::ActivationCost LlamaCuda::activation_cost() const {
  models::ActivationCost cost;
  const std::uint64_t N = static_cast<std::uint64_t>(batch_) * seq_, C = config_.channels;
  const std::uint64_t hd = config_.head_size(), Q = config_.heads * hd, KV = config_.kv_heads * hd;
  const std::uint64_t F = config_.intermediate;
  // As BlockActivations::allocate, and the block's output.
  const std::uint64_t per_block = (3 * N * C + 2 * N * Q + 2 * N * KV + 3 * N * F + N * C) * kBf16 +
                                  (2 * N + N * config_.heads) * 4;
  const std::uint64_t common = encoded_.bytes() + normed_.bytes() + norm_rstd_.bytes() +
                               logits_.bytes() +
                               static_cast<std::uint64_t>(batch_) * seq_ * 4;  // and the losses
  cost.uncheckpointed_bytes = common + per_block * static_cast<std::uint64_t>(config_.layers);
  cost.kept_bytes = common + recompute_.bytes();
  for (std::size_t l = 0; l < acts_.size(); ++l)
    cost.kept_bytes += acts_[l].bytes() + outs_[l].bytes();
  cost.recompute_flops = std::min(options_.checkpoint_blocks, config_.layers) *
                         llama::block_flops(config_, batch_, seq_);
  cost.train_flops = 3.0 * forward_flops();
  return cost;
}

}  // namespace

std::unique_ptr<models::CausalLm> make_cuda_llama(zero_engine* engine, const LlamaConfig& config,
                                                  int batch, int seq, std::uint64_t seed,
                                                  const models::ActivationOptions& options) {
  zero_memory_kind kind = ZERO_MEMORY_HOST;
  int ordinal = -1;
  models::check(zero_data_location(engine, &kind, &ordinal), "zero_data_location");
  zero_dtype dtype = ZERO_FP32;
  models::check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  if (kind != ZERO_MEMORY_CUDA) {
    throw std::runtime_error("the CUDA Llama needs the engine's parameters on a GPU");
  }
  if (dtype != ZERO_BF16) {
    throw std::runtime_error(
        "the CUDA layers compute in bf16, and the engine's compute copies are not bf16: enable "
        "the config's bf16 section (\"bf16\": {\"enabled\": true})");
  }
  cuda_layers::set_device(ordinal);
  return std::make_unique<LlamaCuda>(engine, config, batch, seq, seed, options);
}

}  // namespace zero::llama
