// The Llama-family decoder on the GPU (cuda_model.h): the CPU model's embedding, blocks and
// final RMSNorm as the decoder driver's operations (models/decoder/decoder.h), over the CUDA
// layers on the model's stream.
#include "models/llama/cuda_model.h"

#include <algorithm>
#include <string>
#include <vector>

#include "models/cuda/layers.h"
#include "models/cuda/runtime.h"
#include "models/decoder/cuda_ops.h"
#include "models/llama/params.h"

namespace zero::llama {
namespace {

namespace cl = zero::cuda_layers;

// A new device buffer holding `host`, copied on `stream`.
cl::DeviceBuffer to_device(const std::vector<float>& host, cl::Stream stream) {
  cl::DeviceBuffer buffer(host.size() * 4, stream);
  cl::copy_to_device(buffer.as<void>(), host.data(), host.size() * 4, stream);
  return buffer;
}

// The Llama family's operations on the CUDA layers (decoder.h's DecoderOps; the head's logits
// and loss, the micro-batch, the stream and the engine's buffers are CudaOps', the ids and FLOPs
// LlamaFamily's).
class LlamaCuda final : public decoder::CudaOps, public LlamaFamily {
 public:
  LlamaCuda(zero_engine* engine, models::Registrar& r, const Config& config, int batch, int seq)
      : CudaOps(engine, decoder_shape(config, batch, seq), kModel, widest(config)),
        LlamaFamily(r, config, batch, seq) {
    void* const s = stream();  // every buffer is zeroed on it
    // The CPU model's rotary tables, on the GPU.
    const RotaryTables rotary = rotary_tables(config, seq);
    cos_ = to_device(rotary.cos, s), sin_ = to_device(rotary.sin, s);
    stream_.synchronize();
  }
  void allocate() {
    CudaOps::allocate();
    void* const s = stream();  // every buffer is zeroed on it
    const std::size_t N = dims_.N, C = dims_.C, Q = dims_.Q, KV = dims_.KV, F = dims_.F;
    norm_rstd_.resize(N * 4, s);
    dF_.resize(N * F * kBf16, s), dgate_.resize(N * F * kBf16, s), dup_.resize(N * F * kBf16, s);
    dq_.resize(N * Q * kBf16, s), dk_.resize(N * KV * kBf16, s), dv_.resize(N * KV * kBf16, s);
    dy_.resize(N * Q * kBf16, s), dres_.resize(N * C * kBf16, s), dsmall_.resize(N * C * kBf16, s);
  }

  static constexpr const char* kModel = "the CUDA Llama";  // as errors name it

  // One block's activations, kept from forward to backward (bf16, statistics fp32).
  struct Activations {
    DeviceBuffer ln1, rstd1, q, k, v, y, lse, res, ln2, rstd2, gate, up, h;
    std::uint64_t bytes() const noexcept {
      return CudaOps::bytes(
          {&ln1, &rstd1, &q, &k, &v, &y, &lse, &res, &ln2, &rstd2, &gate, &up, &h});
    }
  };
  Activations activations() const {
    void* const s = stream();
    const std::size_t N = dims_.N, C = dims_.C, Q = dims_.Q, KV = dims_.KV, F = dims_.F;
    Activations a;
    a.ln1.resize(N * C * kBf16, s), a.rstd1.resize(N * 4, s), a.q.resize(N * Q * kBf16, s);
    a.k.resize(N * KV * kBf16, s), a.v.resize(N * KV * kBf16, s), a.y.resize(N * Q * kBf16, s);
    a.lse.resize(N * dims_.NH * 4, s);
    a.res.resize(N * C * kBf16, s), a.ln2.resize(N * C * kBf16, s), a.rstd2.resize(N * 4, s);
    a.gate.resize(N * F * kBf16, s), a.up.resize(N * F * kBf16, s), a.h.resize(N * F * kBf16, s);
    return a;
  }
  std::uint64_t head_bytes() const noexcept { return logits_bytes() + norm_rstd_.bytes(); }

  void embed_forward(Hidden& out) const { embed(out, ids_.wte, -1); }
  void block_forward(std::size_t l, const Hidden& x, Activations& a, Hidden& out) {
    forward_block(ids_.blocks[l], x.as<Bf16>(), a, out.as<Bf16>());
  }
  void head_forward(const Hidden& x) {
    cl::check(cl::rmsnorm_forward(normed_.as<Bf16>(), norm_rstd_.as<float>(), x.as<Bf16>(),
                                  param(ids_.norm), static_cast<int>(shape_.positions()),
                                  config_.channels, static_cast<float>(config_.norm_eps), stream()),
              "rmsnorm_forward");
    logits_forward(ids_.lm_head);
  }

  void head_backward(const Hidden& x) {
    logits_backward(ids_.lm_head);
    cl::check(cl::rmsnorm_backward(dx_.as<Bf16>(), grad(ids_.norm), dnormed_.as<Bf16>(),
                                   x.as<Bf16>(), param(ids_.norm), norm_rstd_.as<float>(),
                                   static_cast<int>(shape_.positions()), config_.channels,
                                   scratch_.as<float>(), stream(), cl::Into::write),
              "rmsnorm_backward");
  }
  void block_backward(std::size_t l, const Hidden& x, const Activations& a) {
    backward_block(ids_.blocks[l], x.as<Bf16>(), a, dx_.as<Bf16>());
  }
  void embed_backward() const { embed_back(ids_.wte, -1); }

 private:
  void forward_block(const LlamaBlockIds& b, const Bf16* x, Activations& a, Bf16* out);
  void backward_block(const LlamaBlockIds& b, const Bf16* x, const Activations& a, Bf16* dx);

  DeviceBuffer cos_, sin_;  // rotary tables fp32 [seq, head_size / 2]
  DeviceBuffer norm_rstd_;  // the final RMSNorm's statistics
  // Backward scratch.
  DeviceBuffer dF_, dgate_, dup_, dq_, dk_, dv_, dy_, dres_, dsmall_;

  // The widest row whose parameter gradients are reduced (the reduction scratch's size).
  static int widest(const LlamaConfig& config);
};

}  // namespace

std::unique_ptr<models::CausalLm> make_cuda_llama(zero_engine* engine, const LlamaConfig& config,
                                                  int batch, int seq, std::uint64_t seed,
                                                  const models::ActivationOptions& options) {
  return decoder::make_on_engine_gpu<LlamaCuda>(engine, config, batch, seq, seed, options);
}

// The logits', the MLP's, q's or the channels.
int LlamaCuda::widest(const LlamaConfig& c) {
  return std::max({c.vocab, c.intermediate, c.heads * c.head_size(), c.channels});
}

// res = x + o(attention(rope(q(ln1(x))), rope(k(ln1(x))), v(ln1(x)))), then
// out = res + down(silu(gate(ln2(res))) * up(ln2(res))), as the CPU model's block (model.cpp).
void LlamaCuda::forward_block(const LlamaBlockIds& b, const Bf16* x, Activations& a, Bf16* out) {
  const auto [B, T, N, C, hd, NH, NKV, Q, KV, F, NC] = dims_;
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
  // res += x, and ln2 of it, in one pass.
  cl::check(cl::residual_rmsnorm_forward(a.res.as<Bf16>(), a.ln2.as<Bf16>(), a.rstd2.as<float>(),
                                         a.res.as<Bf16>(), x, param(b.ln2), N, C, eps, s),
            "residual_rmsnorm_forward");
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
void LlamaCuda::backward_block(const LlamaBlockIds& b, const Bf16* x, const Activations& a,
                               Bf16* dx) {
  const auto [B, T, N, C, hd, NH, NKV, Q, KV, F, NC] = dims_;
  const std::size_t n = static_cast<std::size_t>(N);
  void* s = stream();
  float* scratch = scratch_.as<float>();
  // MLP branch. The scratch gradients are written (cl::Into::write), not zeroed and added to.
  cl::check(
      matmul_.backward(dF_.as<Bf16>(), grad(b.down), nullptr, dx, a.h.as<Bf16>(), param(b.down), N,
                       F, C, scratch, s, cl::Into::write, grad_into(b.down)),
      "matmul backward (down)");
  cl::check(cl::swiglu_backward(dgate_.as<Bf16>(), dup_.as<Bf16>(), dF_.as<Bf16>(),
                                a.gate.as<Bf16>(), a.up.as<Bf16>(), n * F, s, cl::Into::write),
            "swiglu_backward");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.gate), nullptr, dgate_.as<Bf16>(),
                             a.ln2.as<Bf16>(), param(b.gate), N, C, F, scratch, s, cl::Into::write,
                             grad_into(b.gate)),
            "matmul backward (gate)");
  cl::check(
      matmul_.backward(dsmall_.as<Bf16>(), grad(b.up), nullptr, dup_.as<Bf16>(), a.ln2.as<Bf16>(),
                       param(b.up), N, C, F, scratch, s, cl::Into::add, grad_into(b.up)),
      "matmul backward (up)");
  // dres = dx (the residual path) + ln2's gradient, in the norm's pass.
  cl::check(cl::rmsnorm_backward(dres_.as<Bf16>(), grad(b.ln2), dsmall_.as<Bf16>(),
                                 a.res.as<Bf16>(), param(b.ln2), a.rstd2.as<float>(), N, C, scratch,
                                 s, cl::Into::write, dx),
            "rmsnorm_backward");
  // Attention branch.
  cl::check(matmul_.backward(dy_.as<Bf16>(), grad(b.o), nullptr, dres_.as<Bf16>(), a.y.as<Bf16>(),
                             param(b.o), N, Q, C, scratch, s, cl::Into::write, grad_into(b.o)),
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
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.q), grad(b.q_bias), dq_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.q), N, C, Q, scratch, s, cl::Into::write,
                             grad_into(b.q), grad_into(b.q_bias)),
            "matmul backward (q)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.k), grad(b.k_bias), dk_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.k), N, C, KV, scratch, s, cl::Into::add,
                             grad_into(b.k), grad_into(b.k_bias)),
            "matmul backward (k)");
  cl::check(matmul_.backward(dsmall_.as<Bf16>(), grad(b.v), grad(b.v_bias), dv_.as<Bf16>(),
                             a.ln1.as<Bf16>(), param(b.v), N, C, KV, scratch, s, cl::Into::add,
                             grad_into(b.v), grad_into(b.v_bias)),
            "matmul backward (v)");
  // dx = dres (the residual path) + ln1's gradient.
  cl::check(cl::rmsnorm_backward(dx, grad(b.ln1), dsmall_.as<Bf16>(), x, param(b.ln1),
                                 a.rstd1.as<float>(), N, C, scratch, s, cl::Into::write,
                                 dres_.as<Bf16>()),
            "rmsnorm_backward");
}

}  // namespace zero::llama
