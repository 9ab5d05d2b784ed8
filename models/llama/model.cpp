// The Llama-family decoder on the CPU (see model.h): its embedding, blocks and final RMSNorm as
// the decoder driver's operations (models/decoder/decoder.h), from the layers in kernels.h and
// the shared ones (models/layers/layers.h).
#include "models/llama/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/decoder/cpu_ops.h"
#include "models/decoder/decoder.h"
#include "models/layers/layers.h"
#include "models/llama/kernels.h"
#include "models/llama/params.h"

namespace zero::llama {
namespace {

// The Llama family's operations on the CPU layers (decoder.h's DecoderOps; the head's logits
// and loss, the micro-batch and the engine's buffers are CpuOps', the ids and FLOPs
// LlamaFamily's).
class LlamaCpu final : public decoder::CpuOps, public LlamaFamily {
 public:
  LlamaCpu(zero_engine* engine, models::Registrar& r, const Config& config, int batch, int seq)
      : CpuOps(engine, decoder_shape(config, batch, seq)),
        LlamaFamily(r, config, batch, seq),
        rotary_(rotary_tables(config, seq)) {
    add_params(r);
  }
  void allocate() {
    CpuOps::allocate();
    const std::size_t N = dims_.N, C = dims_.C, Q = dims_.Q, KV = dims_.KV, F = dims_.F;
    norm_rstd_.resize(N);
    dF_.resize(N * F), dgate_.resize(N * F), dup_.resize(N * F);
    dq_.resize(N * Q), dk_.resize(N * KV), dv_.resize(N * KV), dy_.resize(N * Q);
    datt_.resize(N * config_.heads * shape_.seq), dres_.resize(N * C), dsmall_.resize(N * C);
  }

  // One block's activations, kept from forward to backward.
  struct Activations {
    std::vector<float> ln1, rstd1, q, k, v, att, y, res, ln2, rstd2, gate, up, h;
    std::uint64_t bytes() const noexcept {
      return CpuOps::bytes(
          {&ln1, &rstd1, &q, &k, &v, &att, &y, &res, &ln2, &rstd2, &gate, &up, &h});
    }
  };
  Activations activations() const {
    const std::size_t N = dims_.N, C = dims_.C, Q = dims_.Q, KV = dims_.KV, F = dims_.F;
    Activations a;
    a.ln1.resize(N * C), a.rstd1.resize(N), a.q.resize(N * Q), a.k.resize(N * KV);
    a.v.resize(N * KV), a.att.resize(N * config_.heads * shape_.seq), a.y.resize(N * Q);
    a.res.resize(N * C), a.ln2.resize(N * C), a.rstd2.resize(N), a.gate.resize(N * F);
    a.up.resize(N * F), a.h.resize(N * F);
    return a;
  }
  std::uint64_t head_bytes() const noexcept {
    return logits_bytes() + norm_rstd_.size() * sizeof(float);
  }

  void embed_forward(Hidden& out) {
    embedding_forward(out.data(), tokens_.data(), param(ids_.wte),
                      static_cast<int>(shape_.positions()), config_.channels);
  }
  void block_forward(std::size_t l, const Hidden& x, Activations& a, Hidden& out) {
    forward_block(ids_.blocks[l], x.data(), a, out.data());
  }
  void head_forward(const Hidden& x) {
    rmsnorm_forward(normed_.data(), norm_rstd_.data(), x.data(), param(ids_.norm),
                    static_cast<int>(shape_.positions()), config_.channels, config_.norm_eps);
    logits_forward(ids_.lm_head);
  }

  void head_backward(const Hidden& x) {
    logits_backward(ids_.lm_head);
    rmsnorm_backward(dx_.data(), grad(ids_.norm), dnormed_.data(), x.data(), param(ids_.norm),
                     norm_rstd_.data(), static_cast<int>(shape_.positions()), config_.channels);
  }
  void block_backward(std::size_t l, const Hidden& x, const Activations& a) {
    backward_block(ids_.blocks[l], x.data(), a, dx_.data());
  }
  void embed_backward() {
    embedding_backward(grad(ids_.wte), dx_.data(), tokens_.data(),
                       static_cast<int>(shape_.positions()), config_.channels);
  }

 private:
  void forward_block(const LlamaBlockIds& b, const float* x, Activations& a, float* out);
  void backward_block(const LlamaBlockIds& b, const float* x, const Activations& a, float* dx);

  RotaryTables rotary_;
  std::vector<float> norm_rstd_;  // the final RMSNorm's statistics
  // Backward scratch, kept across micro-batches.
  std::vector<float> dF_, dgate_, dup_, dq_, dk_, dv_, dy_, datt_, dres_, dsmall_;
};

}  // namespace

std::unique_ptr<models::CausalLm> make_llama(zero_engine* engine, const LlamaConfig& config,
                                             int batch, int seq, std::uint64_t seed,
                                             const models::ActivationOptions& options) {
  return std::make_unique<decoder::Decoder<LlamaCpu>>(engine, config, batch, seq, seed, options);
}

// res = x + o(attention(rope(q(ln1(x))), rope(k(ln1(x))), v(ln1(x)))), then
// out = res + down(silu(gate(ln2(res))) * up(ln2(res))).
void LlamaCpu::forward_block(const LlamaBlockIds& b, const float* x, Activations& a, float* out) {
  const auto [B, T, N, C, hd, NH, NKV, Q, KV, F, NC] = dims_;
  rmsnorm_forward(a.ln1.data(), a.rstd1.data(), x, param(b.ln1), N, C, config_.norm_eps);
  layers::matmul_forward(a.q.data(), a.ln1.data(), param(b.q), param(b.q_bias), N, C, Q);
  layers::matmul_forward(a.k.data(), a.ln1.data(), param(b.k), param(b.k_bias), N, C, KV);
  layers::matmul_forward(a.v.data(), a.ln1.data(), param(b.v), param(b.v_bias), N, C, KV);
  rope_forward(a.q.data(), rotary_.cos.data(), rotary_.sin.data(), B, T, NH, hd);
  rope_forward(a.k.data(), rotary_.cos.data(), rotary_.sin.data(), B, T, NKV, hd);
  gqa_attention_forward(a.y.data(), a.att.data(), a.q.data(), a.k.data(), a.v.data(), B, T, NH, NKV,
                        hd, config_.sliding_window);
  layers::matmul_forward(a.res.data(), a.y.data(), param(b.o), static_cast<const float*>(nullptr),
                         N, Q, C);
  layers::residual_forward(a.res.data(), a.res.data(), x, NC);
  rmsnorm_forward(a.ln2.data(), a.rstd2.data(), a.res.data(), param(b.ln2), N, C, config_.norm_eps);
  layers::matmul_forward(a.gate.data(), a.ln2.data(), param(b.gate),
                         static_cast<const float*>(nullptr), N, C, F);
  layers::matmul_forward(a.up.data(), a.ln2.data(), param(b.up), static_cast<const float*>(nullptr),
                         N, C, F);
  swiglu_forward(a.h.data(), a.gate.data(), a.up.data(), static_cast<std::size_t>(N) * F);
  layers::matmul_forward(out, a.h.data(), param(b.down), static_cast<const float*>(nullptr), N, F,
                         C);
  layers::residual_forward(out, out, a.res.data(), NC);
}

// dx holds the gradient at the block's output and leaves with the gradient at its input x.
void LlamaCpu::backward_block(const LlamaBlockIds& b, const float* x, const Activations& a,
                              float* dx) {
  const auto [B, T, N, C, hd, NH, NKV, Q, KV, F, NC] = dims_;
  float* const no_bias = nullptr;
  // MLP branch.
  std::fill(dF_.begin(), dF_.end(), 0.0f);
  layers::matmul_backward(dF_.data(), grad(b.down), no_bias, dx, a.h.data(), param(b.down), N, F,
                          C);
  std::fill(dgate_.begin(), dgate_.end(), 0.0f);
  std::fill(dup_.begin(), dup_.end(), 0.0f);
  swiglu_backward(dgate_.data(), dup_.data(), dF_.data(), a.gate.data(), a.up.data(),
                  static_cast<std::size_t>(N) * F);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  layers::matmul_backward(dsmall_.data(), grad(b.gate), no_bias, dgate_.data(), a.ln2.data(),
                          param(b.gate), N, C, F);
  layers::matmul_backward(dsmall_.data(), grad(b.up), no_bias, dup_.data(), a.ln2.data(),
                          param(b.up), N, C, F);
  std::copy(dx, dx + NC, dres_.begin());  // the residual path
  rmsnorm_backward(dres_.data(), grad(b.ln2), dsmall_.data(), a.res.data(), param(b.ln2),
                   a.rstd2.data(), N, C);
  // Attention branch.
  std::fill(dy_.begin(), dy_.end(), 0.0f);
  layers::matmul_backward(dy_.data(), grad(b.o), no_bias, dres_.data(), a.y.data(), param(b.o), N,
                          Q, C);
  std::fill(dq_.begin(), dq_.end(), 0.0f);
  std::fill(dk_.begin(), dk_.end(), 0.0f);
  std::fill(dv_.begin(), dv_.end(), 0.0f);
  gqa_attention_backward(dq_.data(), dk_.data(), dv_.data(), datt_.data(), dy_.data(), a.q.data(),
                         a.k.data(), a.v.data(), a.att.data(), B, T, NH, NKV, hd);
  rope_backward(dq_.data(), rotary_.cos.data(), rotary_.sin.data(), B, T, NH, hd);
  rope_backward(dk_.data(), rotary_.cos.data(), rotary_.sin.data(), B, T, NKV, hd);
  std::fill(dsmall_.begin(), dsmall_.end(), 0.0f);
  layers::matmul_backward(dsmall_.data(), grad(b.q), grad(b.q_bias), dq_.data(), a.ln1.data(),
                          param(b.q), N, C, Q);
  layers::matmul_backward(dsmall_.data(), grad(b.k), grad(b.k_bias), dk_.data(), a.ln1.data(),
                          param(b.k), N, C, KV);
  layers::matmul_backward(dsmall_.data(), grad(b.v), grad(b.v_bias), dv_.data(), a.ln1.data(),
                          param(b.v), N, C, KV);
  std::copy(dres_.begin(), dres_.end(), dx);  // the residual path
  rmsnorm_backward(dx, grad(b.ln1), dsmall_.data(), x, param(b.ln1), a.rstd1.data(), N, C);
}

}  // namespace zero::llama
