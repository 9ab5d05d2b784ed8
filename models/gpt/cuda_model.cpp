// The reference GPT on the GPU (cuda_model.h): the CPU model's embedding, blocks and final
// LayerNorm as the decoder driver's operations (models/decoder/decoder.h), over the CUDA layers
// on the model's stream.
#include "models/gpt/cuda_model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"
#include "models/decoder/cuda_ops.h"
#include "models/gpt/params.h"

namespace zero::gpt {
namespace {

namespace cl = zero::cuda_layers;

// The GPT's operations on the CUDA layers (decoder.h's DecoderOps; the head's logits and loss,
// the micro-batch, the stream and the engine's buffers are CudaOps', the ids and FLOPs
// GptFamily's).
class GptCuda final : public decoder::CudaOps, public GptFamily {
 public:
  GptCuda(zero_engine* engine, models::Registrar& r, const Config& config, int batch, int seq)
      : CudaOps(engine, decoder_shape(config, batch, seq), kModel,
                std::max(config.vocab, 4 * config.channels)),
        GptFamily(r, config, batch, seq) {}
  void allocate() {
    CudaOps::allocate();
    void* const s = stream();  // every buffer is zeroed on it
    const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(config_.channels);
    lnf_mean_.resize(N * 4, s), lnf_rstd_.resize(N * 4, s);
    d4_.resize(4 * N * C * kBf16, s);
    dqkv_.resize(3 * N * C * kBf16, s), dres2_.resize(N * C * kBf16, s);
    dsmall_.resize(N * C * kBf16, s);
  }

  static constexpr const char* kModel = "the CUDA GPT";  // as errors name it

  // One block's activations, kept from forward to backward (bf16, statistics fp32).
  struct Activations {
    DeviceBuffer ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu;
    std::uint64_t bytes() const noexcept {
      return CudaOps::bytes({&ln1, &ln1_mean, &ln1_rstd, &qkv, &atty, &lse, &res2, &ln2, &ln2_mean,
                             &ln2_rstd, &fch, &fch_gelu});
    }
  };
  Activations activations() const {
    void* const s = stream();
    const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(config_.channels);
    const std::size_t rows_of_heads = N * static_cast<std::size_t>(config_.heads);
    Activations a;
    a.ln1.resize(N * C * kBf16, s), a.ln1_mean.resize(N * 4, s), a.ln1_rstd.resize(N * 4, s);
    a.qkv.resize(3 * N * C * kBf16, s), a.atty.resize(N * C * kBf16, s);
    a.lse.resize(rows_of_heads * 4, s), a.res2.resize(N * C * kBf16, s);
    a.ln2.resize(N * C * kBf16, s), a.ln2_mean.resize(N * 4, s), a.ln2_rstd.resize(N * 4, s);
    a.fch.resize(4 * N * C * kBf16, s), a.fch_gelu.resize(4 * N * C * kBf16, s);
    return a;
  }
  std::uint64_t head_bytes() const noexcept {
    return logits_bytes() + lnf_mean_.bytes() + lnf_rstd_.bytes();
  }

  void embed_forward(Hidden& out) const { embed(out, ids_.wte, ids_.wpe); }
  void block_forward(std::size_t l, const Hidden& x, Activations& a, Hidden& out) {
    forward_block(ids_.blocks[l], x.as<Bf16>(), a, out.as<Bf16>());
  }
  void head_forward(const Hidden& x) {
    cl::check(
        cl::layernorm_forward(normed_.as<Bf16>(), lnf_mean_.as<float>(), lnf_rstd_.as<float>(),
                              x.as<Bf16>(), param(ids_.lnf_w), param(ids_.lnf_b),
                              static_cast<int>(shape_.positions()), config_.channels, stream()),
        "layernorm_forward");
    logits_forward(ids_.wte);
  }

  void head_backward(const Hidden& x) {
    logits_backward(ids_.wte);
    cl::check(cl::layernorm_backward(dx_.as<Bf16>(), grad(ids_.lnf_w), grad(ids_.lnf_b),
                                     dnormed_.as<Bf16>(), x.as<Bf16>(), param(ids_.lnf_w),
                                     lnf_mean_.as<float>(), lnf_rstd_.as<float>(),
                                     static_cast<int>(shape_.positions()), config_.channels,
                                     scratch_.as<float>(), stream(), cl::Into::write),
              "layernorm_backward");
  }
  void block_backward(std::size_t l, const Hidden& x, const Activations& a) {
    backward_block(ids_.blocks[l], x.as<Bf16>(), a, dx_.as<Bf16>());
  }
  void embed_backward() const { embed_back(ids_.wte, ids_.wpe); }

 private:
  void forward_block(const GptBlockIds& b, const Bf16* x, Activations& a, Bf16* out);
  void backward_block(const GptBlockIds& b, const Bf16* x, const Activations& a, Bf16* dx);

  DeviceBuffer lnf_mean_, lnf_rstd_;  // the final LayerNorm's statistics
  // Backward scratch.
  DeviceBuffer d4_, dqkv_, dres2_, dsmall_;
};

}  // namespace

std::unique_ptr<models::CausalLm> make_cuda_gpt(zero_engine* engine, const GptConfig& config,
                                                int batch, int seq, std::uint64_t seed,
                                                const models::ActivationOptions& options) {
  return decoder::make_on_engine_gpu<GptCuda>(engine, config, batch, seq, seed, options);
}

// out = x + attn(ln1(x)), then out += mlp(ln2(out)), as the CPU model's block (model.cpp).
void GptCuda::forward_block(const GptBlockIds& b, const Bf16* x, Activations& a, Bf16* out) {
  const int B = shape_.batch, T = shape_.seq, C = config_.channels, NH = config_.heads, N = B * T;
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
  // res2 += x, and ln2 of it, in one pass.
  cl::check(cl::residual_layernorm_forward(
                a.res2.as<Bf16>(), a.ln2.as<Bf16>(), a.ln2_mean.as<float>(), a.ln2_rstd.as<float>(),
                a.res2.as<Bf16>(), x, param(b.ln2_w), param(b.ln2_b), N, C, s),
            "residual_layernorm_forward");
  // fch_gelu = gelu(fch), fch = the product plus its bias (kept for the backward).
  cl::check(matmul_.forward_gelu(a.fch_gelu.as<Bf16>(), a.fch.as<Bf16>(), a.ln2.as<Bf16>(),
                                 param(b.fc_w), param(b.fc_b), N, C, 4 * C, s),
            "matmul forward (mlp, GELU)");
  cl::check(matmul_.forward(out, a.fch_gelu.as<Bf16>(), param(b.fcproj_w), param(b.fcproj_b), N,
                            4 * C, C, s),
            "matmul forward (mlp projection)");
  cl::check(cl::residual_forward(out, out, a.res2.as<Bf16>(), NC, s), "residual_forward");
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x.
void GptCuda::backward_block(const GptBlockIds& b, const Bf16* x, const Activations& a, Bf16* dx) {
  const int B = shape_.batch, T = shape_.seq, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  void* s = stream();
  float* scratch = scratch_.as<float>();
  // MLP branch. The scratch gradients are written (cl::Into::write), not zeroed and added to;
  // the projection's input gradient goes through GELU in its product, to the gradient at fch.
  cl::check(matmul_.backward(d4_.as<Bf16>(), grad(b.fcproj_w), grad(b.fcproj_b), dx,
                             a.fch_gelu.as<Bf16>(), param(b.fcproj_w), N, 4 * C, C, scratch, s,
                             cl::Into::write, grad_into(b.fcproj_w), grad_into(b.fcproj_b),
                             a.fch.as<Bf16>()),
            "matmul backward (mlp projection, GELU)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.fc_w), grad(b.fc_b), d4_.as<Bf16>(),
                             a.ln2.as<Bf16>(), param(b.fc_w), N, C, 4 * C, scratch, s,
                             cl::Into::write, grad_into(b.fc_w), grad_into(b.fc_b)),
            "matmul backward (mlp)");
  // dres2 = dx (the residual path) + ln2's gradient, in the norm's pass.
  cl::check(
      cl::layernorm_backward(dres2_.as<Bf16>(), grad(b.ln2_w), grad(b.ln2_b), dsmall_.as<Bf16>(),
                             a.res2.as<Bf16>(), param(b.ln2_w), a.ln2_mean.as<float>(),
                             a.ln2_rstd.as<float>(), N, C, scratch, s, cl::Into::write, dx),
      "layernorm_backward");
  // Attention branch.
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.proj_w), grad(b.proj_b), dres2_.as<Bf16>(),
                             a.atty.as<Bf16>(), param(b.proj_w), N, C, C, scratch, s,
                             cl::Into::write, grad_into(b.proj_w), grad_into(b.proj_b)),
            "matmul backward (attention projection)");
  zero(dqkv_, 3 * NC * kBf16);
  Bf16* dqkv = dqkv_.as<Bf16>();
  const Bf16* qkv = a.qkv.as<Bf16>();
  cl::check(
      cl::attention_backward(dqkv, dqkv + C, dqkv + 2 * C, dsmall_.as<Bf16>(), C, a.atty.as<Bf16>(),
                             a.lse.as<float>(), qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, B, T, NH,
                             NH, C / NH, 0, delta_.as<float>(), s),
      "attention_backward");
  // dsmall, read by the attention's backward, takes the gradient at ln1's output.
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.qkv_w), grad(b.qkv_b), dqkv,
                             a.ln1.as<Bf16>(), param(b.qkv_w), N, C, 3 * C, scratch, s,
                             cl::Into::write, grad_into(b.qkv_w), grad_into(b.qkv_b)),
            "matmul backward (qkv)");
  // dx = dres2 (the residual path) + ln1's gradient.
  cl::check(cl::layernorm_backward(dx, grad(b.ln1_w), grad(b.ln1_b), dsmall_.as<Bf16>(), x,
                                   param(b.ln1_w), a.ln1_mean.as<float>(), a.ln1_rstd.as<float>(),
                                   N, C, scratch, s, cl::Into::write, dres2_.as<Bf16>()),
            "layernorm_backward");
}

}  // namespace zero::gpt
