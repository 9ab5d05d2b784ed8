// The reference GPT on the GPU (cuda_model.h): the CPU model's structure, module by module
// between the same hooks, over the CUDA layers on the model's stream.
#include "models/gpt/cuda_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "models/cuda/batch.h"
#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"
#include "models/gpt/params.h"
#include "models/param_init.h"
#include "models/registrar.h"
#include "models/tokens.h"

namespace zero::gpt {
namespace {

namespace cl = zero::cuda_layers;
using cl::Bf16;
using cl::DeviceBuffer;

constexpr std::size_t kBf16 = sizeof(Bf16);

// One block's activations, kept from forward to backward (bf16, statistics fp32).
struct BlockActivations {
  DeviceBuffer ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch,
      fch_gelu;
  void allocate(std::size_t N, std::size_t C, std::size_t rows_of_heads, cl::Stream s) {
    ln1.resize(N * C * kBf16, s), ln1_mean.resize(N * 4, s), ln1_rstd.resize(N * 4, s);
    qkv.resize(3 * N * C * kBf16, s), atty.resize(N * C * kBf16, s);
    lse.resize(rows_of_heads * 4, s), res2.resize(N * C * kBf16, s);
    ln2.resize(N * C * kBf16, s), ln2_mean.resize(N * 4, s), ln2_rstd.resize(N * 4, s);
    fch.resize(4 * N * C * kBf16, s), fch_gelu.resize(4 * N * C * kBf16, s);
  }
  std::uint64_t bytes() const noexcept {
    std::uint64_t n = 0;
    for (const DeviceBuffer* b : {&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &lse, &res2, &ln2,
                                  &ln2_mean, &ln2_rstd, &fch, &fch_gelu}) {
      n += b->bytes();
    }
    return n;
  }
};

class GptCuda final : public models::CausalLm {
 public:
  GptCuda(zero_engine* engine, const GptConfig& config, int batch, int seq, std::uint64_t seed,
          const models::ActivationOptions& options);

  float forward(const std::int32_t* tokens, const std::int32_t* targets) override;
  void backward() override;
  float evaluate(const std::int32_t* tokens, const std::int32_t* targets) override;
  void load_pretrained(const std::string& path) override;
  models::ActivationCost activation_cost() const override;
  double forward_flops() const override {
    return gpt::forward_flops(config_, 4 * std::int64_t{config_.channels}, batch_, seq_);
  }
  std::vector<float> logits() const override;
  const std::vector<std::string>& names() const noexcept override { return names_; }
  const std::vector<std::size_t>& numels() const noexcept override { return numels_; }

 private:
  void block_forward(const GptBlockIds& b, const Bf16* x, BlockActivations& a, Bf16* out);
  void block_backward(const GptBlockIds& b, const Bf16* x, const BlockActivations& a, Bf16* dx);
  bool checkpointed(std::size_t block) const noexcept {
    return static_cast<int>(block) < options_.checkpoint_blocks;
  }
  const Bf16* param(int id) const;
  Bf16* grad(int id) const;
  void* stream() const noexcept { return stream_.get(); }
  void zero(const DeviceBuffer& buffer, std::size_t bytes) const {
    cl::zero_bytes(buffer.as<void>(), bytes, stream());
  }

  zero_engine* engine_;
  std::unique_ptr<models::ParamInit> init_;
  GptConfig config_;
  int batch_, seq_;
  models::ActivationOptions options_;
  GptIds ids_;
  std::vector<std::string> names_;
  std::vector<std::size_t> numels_;
  cl::CudaStream stream_;
  cl::Matmul matmul_;

  // Inputs of this micro-batch.
  cl::DeviceBatch batch_data_;  // tokens, targets, token groups and losses on the GPU
  int counted_ = 0;
  DeviceBuffer encoded_;
  std::vector<BlockActivations> acts_;
  BlockActivations recompute_;
  std::vector<DeviceBuffer> outs_;
  DeviceBuffer lnf_, lnf_mean_, lnf_rstd_, logits_;
  // Backward scratch.
  DeviceBuffer d4_, d4b_, dqkv_, dres2_, dsmall_, dx_, dlnf_, scratch_, delta_;
  bool logits_kept_ = false;  // logits_ holds the last evaluate()'s logits (not their gradient)
  bool evaluating_ = false;   // in evaluate(): the losses alone, the logits kept
};

GptCuda::GptCuda(zero_engine* engine, const GptConfig& config, int batch, int seq,
                 std::uint64_t seed, const models::ActivationOptions& options)
    : engine_(engine),
      init_(std::make_unique<models::ParamInit>(seed)),
      config_(config),
      batch_(batch),
      seq_(seq),
      options_(options),
      batch_data_(batch * seq, stream_.get()) {
  if (seq < 1 || seq > config.max_seq) {
    throw std::invalid_argument("sequence length " + std::to_string(seq) +
                                " is outside the model's 1.." + std::to_string(config.max_seq));
  }
  if (config.channels % config.heads != 0) {
    throw std::invalid_argument("channels " + std::to_string(config.channels) +
                                " do not split over " + std::to_string(config.heads) + " heads");
  }
  models::Registrar registrar(engine, *init_);
  ids_ = register_gpt(registrar, config);
  names_ = registrar.names();
  numels_ = registrar.numels();

  if (options_.checkpoint_blocks < 0) options_.checkpoint_blocks = 0;
  void* const s = stream();  // every buffer is zeroed on it
  const std::size_t N = static_cast<std::size_t>(batch) * seq, C = config.channels;
  const std::size_t V = config.vocab;
  const std::size_t rows_of_heads = N * static_cast<std::size_t>(config.heads);
  encoded_.resize(N * C * kBf16, s);
  acts_.resize(static_cast<std::size_t>(config.layers));
  outs_.resize(static_cast<std::size_t>(config.layers));
  for (std::size_t l = 0; l < acts_.size(); ++l) {
    if (!checkpointed(l)) acts_[l].allocate(N, C, rows_of_heads, s);
    outs_[l].resize(N * C * kBf16, s);
  }
  if (options_.checkpoint_blocks > 0) recompute_.allocate(N, C, rows_of_heads, s);
  lnf_.resize(N * C * kBf16, s), lnf_mean_.resize(N * 4, s), lnf_rstd_.resize(N * 4, s);
  logits_.resize(N * static_cast<std::size_t>(cl::padded_vocab(config.vocab)) * kBf16, s);
  d4_.resize(4 * N * C * kBf16, s), d4b_.resize(4 * N * C * kBf16, s);
  dqkv_.resize(3 * N * C * kBf16, s);
  dres2_.resize(N * C * kBf16, s), dsmall_.resize(N * C * kBf16, s), dx_.resize(N * C * kBf16, s);
  dlnf_.resize(N * C * kBf16, s), delta_.resize(rows_of_heads * 4, s);
  const int widest = static_cast<int>(std::max<std::size_t>(V, 4 * C));
  scratch_.resize(cl::reduction_scratch_floats(static_cast<int>(N), widest) * 4, s);
}

const Bf16* GptCuda::param(int id) const {
  void* data = nullptr;
  models::check(zero_param_data(engine_, id, &data), "zero_param_data");
  return static_cast<const Bf16*>(data);
}

Bf16* GptCuda::grad(int id) const {
  void* data = nullptr;
  models::check(zero_grad_buffer(engine_, id, &data), "zero_grad_buffer");
  return static_cast<Bf16*>(data);
}

float GptCuda::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  const int Vp = cl::padded_vocab(V);  // the logits' row stride
  counted_ = models::count_targets(tokens, targets, N, V);
  logits_kept_ = false;  // until the cross-entropy has left them as they are
  batch_data_.upload(tokens, targets, stream());
  double factor = 1.0;
  models::check(zero_loss_factor(engine_, &factor), "zero_loss_factor");

  models::check(zero_pre_forward(engine_, ids_.embed_module, stream()), "zero_pre_forward");
  cl::check(cl::embedding_forward(encoded_.as<Bf16>(), batch_data_.tokens(), param(ids_.wte),
                                  param(ids_.wpe), B, T, C, stream()),
            "embedding_forward");
  models::check(zero_post_forward(engine_, ids_.embed_module, stream()), "zero_post_forward");

  const Bf16* x = encoded_.as<Bf16>();
  for (std::size_t l = 0; l < ids_.blocks.size(); ++l) {
    const GptBlockIds& b = ids_.blocks[l];
    models::check(zero_pre_forward(engine_, b.module, stream()), "zero_pre_forward");
    block_forward(b, x, checkpointed(l) ? recompute_ : acts_[l], outs_[l].as<Bf16>());
    models::check(zero_post_forward(engine_, b.module, stream()), "zero_post_forward");
    x = outs_[l].as<Bf16>();
  }

  models::check(zero_pre_forward(engine_, ids_.head_module, stream()), "zero_pre_forward");
  cl::check(cl::layernorm_forward(lnf_.as<Bf16>(), lnf_mean_.as<float>(), lnf_rstd_.as<float>(), x,
                                  param(ids_.lnf_w), param(ids_.lnf_b), N, C, stream()),
            "layernorm_forward");
  cl::check(matmul_.forward(logits_.as<Bf16>(), Vp, lnf_.as<Bf16>(), param(ids_.wte), nullptr, N, C,
                            V, stream()),
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

void GptCuda::backward() {
  const int B = batch_, T = seq_, C = config_.channels, V = config_.vocab, N = B * T;
  const int Vp = cl::padded_vocab(V);  // the logits' row stride
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // The logits buffer holds dlogits (scaled by zero_loss_factor / positions) since a training
  // forward; evaluate() leaves the logits themselves.
  if (logits_kept_) throw std::logic_error("backward() after evaluate(): there is no gradient");
  models::check(zero_pre_backward(engine_, ids_.head_module, stream()), "zero_pre_backward");
  zero(dlnf_, NC * kBf16);
  cl::check(
      matmul_.backward(dlnf_.as<Bf16>(), grad(ids_.wte), nullptr, logits_.as<Bf16>(), Vp,
                       lnf_.as<Bf16>(), param(ids_.wte), N, C, V, scratch_.as<float>(), stream()),
      "matmul backward (logits)");
  const Bf16* last = ids_.blocks.empty() ? encoded_.as<Bf16>() : outs_.back().as<Bf16>();
  zero(dx_, NC * kBf16);
  cl::check(cl::layernorm_backward(dx_.as<Bf16>(), grad(ids_.lnf_w), grad(ids_.lnf_b),
                                   dlnf_.as<Bf16>(), last, param(ids_.lnf_w), lnf_mean_.as<float>(),
                                   lnf_rstd_.as<float>(), N, C, scratch_.as<float>(), stream()),
            "layernorm_backward");
  models::check(zero_post_backward(engine_, ids_.head_module, stream()), "zero_post_backward");

  for (std::size_t l = ids_.blocks.size(); l-- > 0;) {
    const GptBlockIds& b = ids_.blocks[l];
    const Bf16* x = l == 0 ? encoded_.as<Bf16>() : outs_[l - 1].as<Bf16>();
    models::check(zero_pre_backward(engine_, b.module, stream()), "zero_pre_backward");
    if (checkpointed(l)) block_forward(b, x, recompute_, dsmall_.as<Bf16>());
    block_backward(b, x, checkpointed(l) ? recompute_ : acts_[l], dx_.as<Bf16>());
    models::check(zero_post_backward(engine_, b.module, stream()), "zero_post_backward");
  }

  models::check(zero_pre_backward(engine_, ids_.embed_module, stream()), "zero_pre_backward");
  cl::check(cl::embedding_backward(grad(ids_.wte), grad(ids_.wpe), dx_.as<Bf16>(),
                                   batch_data_.group_positions(), batch_data_.group_starts(),
                                   batch_data_.group_tokens(), batch_data_.groups(), B, T, C,
                                   scratch_.as<float>(), stream()),
            "embedding_backward");
  models::check(zero_post_backward(engine_, ids_.embed_module, stream()), "zero_post_backward");
}

// out = x + attn(ln1(x)), then out += mlp(ln2(out)), as Gpt::block_forward.
void GptCuda::block_forward(const GptBlockIds& b, const Bf16* x, BlockActivations& a, Bf16* out) {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  void* s = stream();
  Bf16* qkv = a.qkv.as<Bf16>();
  cl::check(cl::layernorm_forward(a.ln1.as<Bf16>(), a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(),
                                  x, param(b.ln1_w), param(b.ln1_b), N, C, s),
            "layernorm_forward");
  cl::check(matmul_.forward(qkv, a.ln1.as<Bf16>(), param(b.qkv_w), param(b.qkv_b), N, C, 3 * C, s),
            "matmul forward (qkv)");
  cl::check(cl::attention_forward(a.atty.as<Bf16>(), C, a.lse.as<float>(), qkv, 3 * C, qkv + C,
                                  qkv + 2 * C, 3 * C, B, T, NH, NH, C / NH, 0, s),
            "attention_forward");
  cl::check(matmul_.forward(a.res2.as<Bf16>(), a.atty.as<Bf16>(), param(b.proj_w), param(b.proj_b),
                            N, C, C, s),
            "matmul forward (attention projection)");
  cl::check(cl::residual_forward(a.res2.as<Bf16>(), a.res2.as<Bf16>(), x, NC, s),
            "residual_forward");
  cl::check(cl::layernorm_forward(a.ln2.as<Bf16>(), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(),
                                  a.res2.as<Bf16>(), param(b.ln2_w), param(b.ln2_b), N, C, s),
            "layernorm_forward");
  cl::check(matmul_.forward(a.fch.as<Bf16>(), a.ln2.as<Bf16>(), param(b.fc_w), param(b.fc_b), N, C,
                            4 * C, s),
            "matmul forward (mlp)");
  cl::check(cl::gelu_forward(a.fch_gelu.as<Bf16>(), a.fch.as<Bf16>(), 4 * NC, s), "gelu_forward");
  cl::check(matmul_.forward(out, a.fch_gelu.as<Bf16>(), param(b.fcproj_w), param(b.fcproj_b), N,
                            4 * C, C, s),
            "matmul forward (mlp projection)");
  cl::check(cl::residual_forward(out, out, a.res2.as<Bf16>(), NC, s), "residual_forward");
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x.
void GptCuda::block_backward(const GptBlockIds& b, const Bf16* x, const BlockActivations& a,
                             Bf16* dx) {
  const int B = batch_, T = seq_, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  void* s = stream();
  float* scratch = scratch_.as<float>();
  // MLP branch.
  zero(d4_, 4 * NC * kBf16);
  cl::check(matmul_.backward(d4_.as<Bf16>(), grad(b.fcproj_w), grad(b.fcproj_b), dx,
                             a.fch_gelu.as<Bf16>(), param(b.fcproj_w), N, 4 * C, C, scratch, s),
            "matmul backward (mlp projection)");
  zero(d4b_, 4 * NC * kBf16);
  cl::check(cl::gelu_backward(d4b_.as<Bf16>(), a.fch.as<Bf16>(), d4_.as<Bf16>(), 4 * NC, s),
            "gelu_backward");
  zero(dsmall_, NC * kBf16);
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.fc_w), grad(b.fc_b), d4b_.as<Bf16>(),
                             a.ln2.as<Bf16>(), param(b.fc_w), N, C, 4 * C, scratch, s),
            "matmul backward (mlp)");
  cl::copy_device(dres2_.as<void>(), dx, NC * kBf16, s);  // the residual path
  cl::check(
      cl::layernorm_backward(dres2_.as<Bf16>(), grad(b.ln2_w), grad(b.ln2_b), dsmall_.as<Bf16>(),
                             a.res2.as<Bf16>(), param(b.ln2_w), a.ln2_mean.as<float>(),
                             a.ln2_rstd.as<float>(), N, C, scratch, s),
      "layernorm_backward");
  // Attention branch.
  zero(dsmall_, NC * kBf16);
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.proj_w), grad(b.proj_b), dres2_.as<Bf16>(),
                             a.atty.as<Bf16>(), param(b.proj_w), N, C, C, scratch, s),
            "matmul backward (attention projection)");
  zero(dqkv_, 3 * NC * kBf16);
  Bf16* dqkv = dqkv_.as<Bf16>();
  const Bf16* qkv = a.qkv.as<Bf16>();
  cl::check(
      cl::attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dsmall_.as<Bf16>(), C, a.atty.as<Bf16>(),
                             a.lse.as<float>(), qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, B, T, NH,
                             NH, C / NH, 0, delta_.as<float>(), s),
      "attention_backward");
  zero(d4_, NC * kBf16);  // the first N x C of d4 takes the gradient at ln1's output
  cl::check(matmul_.backward(d4_.as<Bf16>(), grad(b.qkv_w), grad(b.qkv_b), dqkv, a.ln1.as<Bf16>(),
                             param(b.qkv_w), N, C, 3 * C, scratch, s),
            "matmul backward (qkv)");
  cl::copy_device(dx, dres2_.as<void>(), NC * kBf16, s);  // the residual path
  cl::check(
      cl::layernorm_backward(dx, grad(b.ln1_w), grad(b.ln1_b), d4_.as<Bf16>(), x, param(b.ln1_w),
                             a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(), N, C, scratch, s),
      "layernorm_backward");
}

float GptCuda::evaluate(const std::int32_t* tokens, const std::int32_t* targets) {
  models::check(zero_set_train(engine_, 0), "zero_set_train");
  evaluating_ = true;
  const float loss = forward(tokens, targets);
  evaluating_ = false;
  models::check(zero_set_train(engine_, 1), "zero_set_train");
  return loss;
}

std::vector<float> GptCuda::logits() const {
  if (!logits_kept_) {
    throw std::logic_error(
        "the CUDA GPT has no logits to give: evaluate() keeps them until the next "
        "forward(), which overwrites them with their gradient");
  }
  return cl::download_rows(logits_.as<Bf16>(), static_cast<std::size_t>(batch_) * seq_,
                           static_cast<std::size_t>(config_.vocab),
                           static_cast<std::size_t>(cl::padded_vocab(config_.vocab)), stream());
}

void GptCuda::load_pretrained(const std::string& path) {
  load_gpt2_weights(engine_, names_, config_.layers, path);
}

models::ActivationCost GptCuda::activation_cost() const {
  models::ActivationCost cost;
  const std::size_t N = static_cast<std::size_t>(batch_) * seq_, C = config_.channels;
  // As BlockActivations::allocate: 15 N x C bf16 (ln1, qkv, atty, res2, ln2, fch, fch_gelu),
  // four fp32 statistics per row, the log-sum-exp per row and head; and the block's output.
  const std::uint64_t per_block =
      15 * N * C * kBf16 + 4 * N * 4 + N * config_.heads * 4 + N * C * kBf16;
  const std::uint64_t common = encoded_.bytes() + lnf_.bytes() + lnf_mean_.bytes() +
                               lnf_rstd_.bytes() + logits_.bytes() +
                               static_cast<std::uint64_t>(batch_) * seq_ * 4;  // and the losses
  cost.uncheckpointed_bytes = common + per_block * static_cast<std::uint64_t>(config_.layers);
  cost.kept_bytes = common + recompute_.bytes();
  for (std::size_t l = 0; l < acts_.size(); ++l)
    cost.kept_bytes += acts_[l].bytes() + outs_[l].bytes();
  cost.recompute_flops =
      std::min(options_.checkpoint_blocks, config_.layers) *
      gpt::block_flops(config_, 4 * std::int64_t{config_.channels}, batch_, seq_);
  cost.train_flops = 3.0 * forward_flops();
  return cost;
}

}  // namespace

std::unique_ptr<models::CausalLm> make_cuda_gpt(zero_engine* engine, const GptConfig& config,
                                                int batch, int seq, std::uint64_t seed,
                                                const models::ActivationOptions& options) {
  zero_memory_kind kind = ZERO_MEMORY_HOST;
  int ordinal = -1;
  models::check(zero_data_location(engine, &kind, &ordinal), "zero_data_location");
  zero_dtype dtype = ZERO_FP32;
  models::check(zero_compute_dtype(engine, &dtype), "zero_compute_dtype");
  if (kind != ZERO_MEMORY_CUDA) {
    throw std::runtime_error("the CUDA GPT needs the engine's parameters on a GPU");
  }
  if (dtype != ZERO_BF16) {
    throw std::runtime_error(
        "the CUDA layers compute in bf16, and the engine's compute copies are not bf16: enable "
        "the config's bf16 section (\"bf16\": {\"enabled\": true})");
  }
  cuda_layers::set_device(ordinal);
  return std::make_unique<GptCuda>(engine, config, batch, seq, seed, options);
}

}  // namespace zero::gpt
