// The reference models' CUDA layers, forward and backward, for the GPT and the Llama family:
// the same layers as the CPU ones (models/layers/layers.h, models/gpt/kernels.h,
// models/llama/kernels.h), on the GPU in bf16 with fp32 accumulation. Plain C++ (no CUDA
// types): built by the C++ compiler into the models and by nvcc into the kernels, so the CPU
// build sees the same declarations.
//
// Conventions, as the CPU layers': row-major, B sequences of T positions (N = B * T rows);
// activations, parameters and gradients bf16 (Bf16, raw bits); norm statistics and rotary
// tables fp32; every backward ADDS (+=) into its input and parameter gradients, so tied weights
// and residual streams sum their uses (unless told to write its input gradient: Into). Every
// launcher is asynchronous on `stream` (a cudaStream_t), launches nothing for empty sizes, and
// returns the cudaError_t of its launches as an int (0: none), so the caller names the failure.
// Parameter gradients are reduced in a fixed order (per-block partials in `scratch`, then one
// fixed-order pass): runs repeat bit for bit; nothing uses float atomics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zero::cuda_layers {

using Bf16 = std::uint16_t;  // bfloat16 bits
using Stream = void*;        // cudaStream_t

// How a backward treats its input gradient: added to (+=, the convention above) or written
// (=, exactly what adding to zeros gives, for a buffer that holds nothing yet: it needs no
// zeroing first, and a product writes it in one pass with beta 0, without the staging). The
// norms' backward may also write it as another buffer (the residual stream's gradient) plus
// theirs, so the residual's copy goes into the norm's pass. Parameter gradients are always
// added to.
enum class Into { add, write };

// Floats of device scratch a parameter-gradient reduction over N rows and C channels needs
// (layernorm_backward, rmsnorm_backward, bias gradients).
std::size_t reduction_scratch_floats(int N, int C);

// ---- Embeddings ----

// out[i, :] = wte[tokens[i], :] (+ wpe[i % T, :] when wpe is not null); tokens on the device.
int embedding_forward(Bf16* out, const std::int32_t* tokens, const Bf16* wte, const Bf16* wpe,
                      int B, int T, int C, Stream stream);

// The positions of each distinct token, for a deterministic embedding backward: built on the
// host from the host's copy of the tokens, then copied to the device by the caller.
struct TokenGroups {
  std::vector<std::int32_t> positions;  // every position, grouped by token, in position order
  std::vector<std::int32_t> starts;     // group g is positions[starts[g] .. starts[g + 1])
  std::vector<std::int32_t> tokens;     // group g's token
};
TokenGroups group_positions(const std::int32_t* tokens, int N);

// dwte[token, :] += sum of dout over the token's positions (in position order; one block per
// group, no atomics); dwpe[t, :] += sum over the batch (when dwpe is not null). positions,
// starts and tokens are TokenGroups' arrays on the device, `groups` of them.
int embedding_backward(Bf16* dwte, Bf16* dwpe, const Bf16* dout, const std::int32_t* positions,
                       const std::int32_t* starts, const std::int32_t* tokens, int groups, int B,
                       int T, int C, float* scratch, Stream stream);

// ---- Norms ----

// out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + 1e-5); mean, rstd fp32 [N].
int layernorm_forward(Bf16* out, float* mean, float* rstd, const Bf16* inp, const Bf16* weight,
                      const Bf16* bias, int N, int C, Stream stream);
// res = a + b (bf16, as residual_forward; res may be a or b), then out = layernorm(res): the
// same bits as the two launches, in one.
int residual_layernorm_forward(Bf16* res, Bf16* out, float* mean, float* rstd, const Bf16* a,
                               const Bf16* b, const Bf16* weight, const Bf16* bias, int N, int C,
                               Stream stream);
// `into` write with `dresidual`: dinp = dresidual + the gradient (dresidual may be dinp).
int layernorm_backward(Bf16* dinp, Bf16* dweight, Bf16* dbias, const Bf16* dout, const Bf16* inp,
                       const Bf16* weight, const float* mean, const float* rstd, int N, int C,
                       float* scratch, Stream stream, Into into = Into::add,
                       const Bf16* dresidual = nullptr);

// out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); rstd fp32 [N].
int rmsnorm_forward(Bf16* out, float* rstd, const Bf16* inp, const Bf16* weight, int N, int C,
                    float eps, Stream stream);
// res = a + b, then out = rmsnorm(res), as residual_layernorm_forward.
int residual_rmsnorm_forward(Bf16* res, Bf16* out, float* rstd, const Bf16* a, const Bf16* b,
                             const Bf16* weight, int N, int C, float eps, Stream stream);
int rmsnorm_backward(Bf16* dinp, Bf16* dweight, const Bf16* dout, const Bf16* inp,
                     const Bf16* weight, const float* rstd, int N, int C, float* scratch,
                     Stream stream, Into into = Into::add, const Bf16* dresidual = nullptr);

// ---- Pointwise ----

// GPT-2's GELU (tanh form).
int gelu_forward(Bf16* out, const Bf16* inp, std::size_t n, Stream stream);
int gelu_backward(Bf16* dinp, const Bf16* inp, const Bf16* dout, std::size_t n, Stream stream,
                  Into into = Into::add);
// h = silu(gate) * up.
int swiglu_forward(Bf16* h, const Bf16* gate, const Bf16* up, std::size_t n, Stream stream);
int swiglu_backward(Bf16* dgate, Bf16* dup, const Bf16* dh, const Bf16* gate, const Bf16* up,
                    std::size_t n, Stream stream, Into into = Into::add);
// out = a + b (out may be a or b).
int residual_forward(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n, Stream stream);
// Rotary embeddings in place on rows of `ld` elements, `heads` heads of hd from each row's start
// (the rotate-half pairing); cos and sin fp32 [T, hd / 2]. Backward turns the gradient back in
// place (it replaces, as the CPU layer does).
int rope_forward(Bf16* x, int ld, const float* cos, const float* sin, int B, int T, int heads,
                 int hd, Stream stream);
int rope_backward(Bf16* dx, int ld, const float* cos, const float* sin, int B, int T, int heads,
                  int hd, Stream stream);

// ---- Matrix products (cuBLASLt) ----

// out[N, OC] = inp[N, C] weight[OC, C]^T + bias; backward: dinp += dout weight, dweight +=
// dout^T inp, dbias += column sums of dout (each = with Into::write). bf16 operands, fp32
// accumulation and compute. Owns the cuBLASLt handle, its workspace, a 32 MiB staging buffer (the
// backward sums each gradient out of place, a block of columns at a time) and the descriptors and
// algorithm chosen per shape, cached (a shape's first call asks cuBLASLt's heuristic once).
// cuBLASLt's epilogues do the pointwise work beside the product where they can (matmul.cpp):
// the bias, GELU (forward_gelu, and backward's gelu_pre), and a written bias gradient beside a
// written weight gradient.
class Matmul {
 public:
  Matmul();
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  int forward(Bf16* out, const Bf16* inp, const Bf16* weight, const Bf16* bias, int N, int C,
              int OC, Stream stream) {
    return forward(out, OC, inp, weight, bias, N, C, OC, stream);
  }
  // gelu_pre: the layer's input was gelu(gelu_pre) (forward_gelu's pre), and dinp is the
  // gradient at gelu_pre, (dout weight) * gelu'(gelu_pre); it must be written (dinp_into write,
  // else cudaErrorInvalidValue).
  int backward(Bf16* dinp, Bf16* dweight, Bf16* dbias, const Bf16* dout, const Bf16* inp,
               const Bf16* weight, int N, int C, int OC, float* scratch, Stream stream,
               Into dinp_into = Into::add, Into dweight_into = Into::add,
               Into dbias_into = Into::add, const Bf16* gelu_pre = nullptr) {
    return backward(dinp, dweight, dbias, dout, OC, inp, weight, N, C, OC, scratch, stream,
                    dinp_into, dweight_into, dbias_into, gelu_pre);
  }
  // out = gelu(inp weight^T + bias) (GPT-2's GELU, tanh form), keeping pre = inp weight^T + bias
  // for the backward (both [N, OC]). In cuBLASLt's epilogue GELU is taken of the fp32 sum before
  // its rounding; where the epilogue is not available (OC not a multiple of 8), of the rounded
  // pre (gelu_forward). bias may be null.
  int forward_gelu(Bf16* out, Bf16* pre, const Bf16* inp, const Bf16* weight, const Bf16* bias,
                   int N, int C, int OC, Stream stream);
  // The same with out's (forward) or dout's (backward) rows `ld` elements apart, ld >= OC (the
  // CUDA models' logits, their vocabulary padded so that cuBLASLt gets aligned rows): the
  // columns OC..ld of each row are neither read nor written. ld < OC is refused
  // (cudaErrorInvalidValue).
  int forward(Bf16* out, int ld_out, const Bf16* inp, const Bf16* weight, const Bf16* bias, int N,
              int C, int OC, Stream stream);
  int backward(Bf16* dinp, Bf16* dweight, Bf16* dbias, const Bf16* dout, int ld_dout,
               const Bf16* inp, const Bf16* weight, int N, int C, int OC, float* scratch,
               Stream stream, Into dinp_into = Into::add, Into dweight_into = Into::add,
               Into dbias_into = Into::add, const Bf16* gelu_pre = nullptr);

 private:
  struct State;
  State* state_;
};

// ---- Attention ----

// Causal attention with grouped key/value heads on rows of any stride, as
// layers::attention_forward_rows: query head h of hd channels reads key/value head
// h / (NH / NKV); window > 0 also masks keys more than window - 1 positions back; hd at most
// 128. Flash attention on tensor cores (bf16 mma.sync, sm_80 and later): scores are computed a
// tile at a time and never stored; `lse` (fp32 [B, NH, T]) keeps each row's log-sum-exp for the
// backward.
int attention_forward(Bf16* out, int ld_out, float* lse, const Bf16* q, int ldq, const Bf16* k,
                      const Bf16* v, int ldkv, int B, int T, int NH, int NKV, int hd, int window,
                      Stream stream);
// dq, dk, dv += the gradients (recomputing the scores tile by tile from q, k and lse); `delta`
// is fp32 scratch [B, NH, T].
int attention_backward(Bf16* dq, Bf16* dk, Bf16* dv, const Bf16* dout, int ld_out, const Bf16* out,
                       const float* lse, const Bf16* q, int ldq, const Bf16* k, const Bf16* v,
                       int ldkv, int B, int T, int NH, int NKV, int hd, int window, float* delta,
                       Stream stream);

// ---- Output ----

// The row stride the CUDA models give their logits: the vocabulary rounded up to a multiple of
// 128 (256 bytes of bf16), as llm.c's padded_vocab_size. The logits' rows are the leading
// dimension of the three products they take part in (logits = x W^T, dx = dlogits W, dW =
// dlogits^T x), and an odd vocabulary (GPT-2's 50257) leaves cuBLASLt only kernels for 2-byte
// aligned rows. The padding stays inside the models: the token table / lm_head keeps V rows
// (checkpoints, exports and imports never see it), and no product or kernel reads or writes the
// columns V..padded_vocab(V), so they never reach the loss or the gradients.
constexpr int padded_vocab(int V) {
  return (V + 127) / 128 * 128;
}

// Softmax and cross-entropy of each row of V logits, rows `ld` elements apart (ld >= V; the
// CUDA models pad the vocabulary, and the columns V..ld are neither read nor written), fused
// with their backward: losses[i] = -log softmax(logits[i])[targets[i]] (0 where targets[i] < 0),
// and logits[i] is overwritten with dlogits = (softmax - onehot) * dloss (0 for a row without a
// target). fp32 within a row. ld < V is refused (cudaErrorInvalidValue).
int crossentropy_fused(Bf16* logits, int ld, float* losses, const std::int32_t* targets,
                       float dloss, int N, int V, Stream stream);
// The same losses, bit for bit, without the backward, for evaluation: the logits stay as they
// are.
int crossentropy_forward(const Bf16* logits, int ld, float* losses, const std::int32_t* targets,
                         int N, int V, Stream stream);

}  // namespace zero::cuda_layers
