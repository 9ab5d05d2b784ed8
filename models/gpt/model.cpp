// The reference GPT on the CPU (see model.h): its embedding, blocks and final LayerNorm as the
// decoder driver's operations (models/decoder/decoder.h), from the layers in kernels.h and the
// shared ones (models/layers/layers.h).
#include "models/gpt/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/decoder/cpu_ops.h"
#include "models/decoder/decoder.h"
#include "models/gpt/kernels.h"
#include "models/gpt/params.h"
#include "models/layers/layers.h"

namespace zero::gpt {
namespace {

// The GPT's operations on the CPU layers (decoder.h's DecoderOps; the head's logits and loss,
// the micro-batch and the engine's buffers are CpuOps', the ids and FLOPs GptFamily's).
class GptCpu final : public decoder::CpuOps, public GptFamily {
 public:
  GptCpu(zero_engine* engine, models::Registrar& r, const Config& config, int batch, int seq)
      : CpuOps(engine, decoder_shape(config, batch, seq)), GptFamily(r, config, batch, seq) {
    add_params(r);
  }
  void allocate() {
    CpuOps::allocate();
    const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(config_.channels);
    lnf_mean_.resize(N), lnf_rstd_.resize(N);
    d4_.resize(4 * N * C), d4b_.resize(4 * N * C), dqkv_.resize(3 * N * C);
    datt_.resize(N * config_.heads * shape_.seq), dres2_.resize(N * C), dsmall_.resize(N * C);
  }

  // One block's activations, kept from forward to backward.
  struct Activations {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu;
    std::uint64_t bytes() const noexcept {
      return CpuOps::bytes({&ln1, &ln1_mean, &ln1_rstd, &qkv, &att, &atty, &res2, &ln2, &ln2_mean,
                            &ln2_rstd, &fch, &fch_gelu});
    }
  };
  Activations activations() const {
    const std::size_t N = shape_.positions(), C = static_cast<std::size_t>(config_.channels);
    Activations a;
    a.ln1.resize(N * C), a.ln1_mean.resize(N), a.ln1_rstd.resize(N), a.qkv.resize(3 * N * C);
    a.att.resize(N * config_.heads * shape_.seq), a.atty.resize(N * C), a.res2.resize(N * C);
    a.ln2.resize(N * C), a.ln2_mean.resize(N), a.ln2_rstd.resize(N), a.fch.resize(4 * N * C);
    a.fch_gelu.resize(4 * N * C);
    return a;
  }
  std::uint64_t head_bytes() const noexcept {
    return logits_bytes() + (lnf_mean_.size() + lnf_rstd_.size()) * sizeof(float);
  }

  void embed_forward(Hidden& out) {
    encoder_forward(out.data(), tokens_.data(), param(ids_.wte), param(ids_.wpe), shape_.batch,
                    shape_.seq, config_.channels);
  }
  void block_forward(std::size_t l, const Hidden& x, Activations& a, Hidden& out) {
    forward_block(ids_.blocks[l], x.data(), a, out.data());
  }
  void head_forward(const Hidden& x) {
    layernorm_forward(normed_.data(), lnf_mean_.data(), lnf_rstd_.data(), x.data(),
                      param(ids_.lnf_w), param(ids_.lnf_b), static_cast<int>(shape_.positions()),
                      config_.channels);
    logits_forward(ids_.wte);
  }

  void head_backward(const Hidden& x) {
    logits_backward(ids_.wte);
    layernorm_backward(dx_.data(), grad(ids_.lnf_w), grad(ids_.lnf_b), dnormed_.data(), x.data(),
                       param(ids_.lnf_w), lnf_mean_.data(), lnf_rstd_.data(),
                       static_cast<int>(shape_.positions()), config_.channels);
  }
  void block_backward(std::size_t l, const Hidden& x, const Activations& a) {
    backward_block(ids_.blocks[l], x.data(), a, dx_.data());
  }
  void embed_backward() {
    encoder_backward(grad(ids_.wte), grad(ids_.wpe), dx_.data(), tokens_.data(), shape_.batch,
                     shape_.seq, config_.channels);
  }

 private:
  void forward_block(const GptBlockIds& b, const float* x, Activations& a, float* out);
  void backward_block(const GptBlockIds& b, const float* x, const Activations& a, float* dx);

  std::vector<float> lnf_mean_, lnf_rstd_;  // the final LayerNorm's statistics
  // Backward scratch, kept across micro-batches.
  std::vector<float> d4_, d4b_, dqkv_, datt_, dres2_, dsmall_;
};

}  // namespace

std::unique_ptr<models::CausalLm> make_gpt(zero_engine* engine, const GptConfig& config, int batch,
                                           int seq, std::uint64_t seed,
                                           const models::ActivationOptions& options) {
  return std::make_unique<decoder::Decoder<GptCpu>>(engine, config, batch, seq, seed, options);
}

// out = x + attn(ln1(x)), then out += mlp(ln2(out)): the residual stream through one block.
void GptCpu::forward_block(const GptBlockIds& b, const float* x, Activations& a, float* out) {
  const int B = shape_.batch, T = shape_.seq, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, param(b.ln1_w),
                    param(b.ln1_b), N, C);
  layers::matmul_forward(a.qkv.data(), a.ln1.data(), param(b.qkv_w), param(b.qkv_b), N, C, 3 * C);
  attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
  layers::matmul_forward(a.res2.data(), a.atty.data(), param(b.proj_w), param(b.proj_b), N, C, C);
  layers::residual_forward(a.res2.data(), a.res2.data(), x, NC);
  layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(),
                    param(b.ln2_w), param(b.ln2_b), N, C);
  layers::matmul_forward(a.fch.data(), a.ln2.data(), param(b.fc_w), param(b.fc_b), N, C, 4 * C);
  gelu_forward(a.fch_gelu.data(), a.fch.data(), 4 * NC);
  layers::matmul_forward(out, a.fch_gelu.data(), param(b.fcproj_w), param(b.fcproj_b), N, 4 * C, C);
  layers::residual_forward(out, out, a.res2.data(), NC);
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x; the
// parameters' gradients are added to their buffers.
void GptCpu::backward_block(const GptBlockIds& b, const float* x, const Activations& a, float* dx) {
  const int B = shape_.batch, T = shape_.seq, C = config_.channels, NH = config_.heads, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  // MLP branch: out = res2 + fcproj(gelu(fc(ln2(res2)))).
  std::fill(d4_.begin(), d4_.end(), 0.0f);
  layers::matmul_backward(d4_.data(), grad(b.fcproj_w), grad(b.fcproj_b), dx, a.fch_gelu.data(),
                          param(b.fcproj_w), N, 4 * C, C);
  std::fill(d4b_.begin(), d4b_.end(), 0.0f);
  gelu_backward(d4b_.data(), a.fch.data(), d4_.data(), 4 * NC);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  layers::matmul_backward(dsmall_.data(), grad(b.fc_w), grad(b.fc_b), d4b_.data(), a.ln2.data(),
                          param(b.fc_w), N, C, 4 * C);
  std::copy(dx, dx + NC, dres2_.begin());  // the residual path
  layernorm_backward(dres2_.data(), grad(b.ln2_w), grad(b.ln2_b), dsmall_.data(), a.res2.data(),
                     param(b.ln2_w), a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
  // Attention branch: res2 = x + proj(attention(qkv(ln1(x)))).
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  layers::matmul_backward(dsmall_.data(), grad(b.proj_w), grad(b.proj_b), dres2_.data(),
                          a.atty.data(), param(b.proj_w), N, C, C);
  std::fill(dqkv_.begin(), dqkv_.end(), 0.0f);
  attention_backward(dqkv_.data(), datt_.data(), dsmall_.data(), a.qkv.data(), a.att.data(), B, T,
                     C, NH);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  layers::matmul_backward(dsmall_.data(), grad(b.qkv_w), grad(b.qkv_b), dqkv_.data(), a.ln1.data(),
                          param(b.qkv_w), N, C, 3 * C);
  std::copy(dres2_.begin(), dres2_.end(), dx);  // the residual path
  layernorm_backward(dx, grad(b.ln1_w), grad(b.ln1_b), dsmall_.data(), x, param(b.ln1_w),
                     a.ln1_mean.data(), a.ln1_rstd.data(), N, C);
}

}  // namespace zero::gpt
