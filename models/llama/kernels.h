// The Llama-family decoder's own CPU layers, forward and backward: RMSNorm, rotary position
// embeddings (rotate-half form, as Hugging Face's LlamaRotaryEmbedding), the SwiGLU gate, and
// causal attention with grouped query heads (and an optional sliding window, Mistral's) on the
// shared attention. The layers it shares with the GPT (matrix products, residual adds, softmax
// with cross-entropy) are in models/layers/layers.h.
//
// Conventions as there: row-major, B sequences of Tn positions; every backward ADDS (+=) its
// input and parameter gradients; templates on float (the model's) and double (what the
// finite-difference tests check with); OpenMP loops with a fixed split, parameter gradients
// reduced in a fixed order, so results do not depend on timing.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero::llama {

// out[b,t,:] = wte[tokens[b,t],:]
template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, int N, int C);
// dwte[tokens[i],:] += dout[i,:], rows summed in position order.
template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tokens, int N, int C);

// Per row of C: out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps); rstd (N) is kept.
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps);
template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C);

// Rotary embeddings on x[N = B*Tn, heads, hd] (hd even) in place: for each head and i < hd/2,
// the pair (x[i], x[i + hd/2]) turns by the angle pos * inv_freq[i], pos = t (the row's position
// in its sequence). cos and sin are tables [Tn, hd/2] (rope_tables fills them).
template <class T>
void rope_forward(T* x, const T* cos, const T* sin, int B, int Tn, int heads, int hd);
// The inverse turn of the gradient in place: dx = R^T dout, dx holding dout on entry. Unlike the
// other backwards it replaces rather than adds (rope has no parameters and its input gradient is
// the output gradient turned back).
template <class T>
void rope_backward(T* dx, const T* cos, const T* sin, int B, int Tn, int heads, int hd);
// cos[t, i], sin[t, i] for t < Tn, i < hd/2, from the inverse frequencies inv_freq[hd/2]: the
// angle t * inv_freq[i] is formed in float32, as transformers forms it, its cos and sin in double.
template <class T>
void rope_tables(T* cos, T* sin, const double* inv_freq, int Tn, int hd);

// h = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, std::size_t n);
// dgate += dh * up * silu'(gate); dup += dh * silu(gate).
template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, std::size_t n);

// Causal attention with grouped query heads: q[N, NH*hd], k and v [N, NKV*hd] (N = B*Tn, NH a
// multiple of NKV; query head h reads key/value head h / (NH / NKV)). out[N, NH*hd] holds the
// heads' outputs concatenated; att[B, NH, Tn, Tn] keeps the softmax of the masked,
// 1/sqrt(hd)-scaled scores (zero where masked). window > 0 also masks keys more than
// window - 1 positions back (position t sees t - window + 1 .. t); 0: no window.
template <class T>
void gqa_attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int Tn,
                           int NH, int NKV, int hd, int window);
// dq, dk, dv += the gradients; datt (B*NH*Tn*Tn) is scratch.
template <class T>
void gqa_attention_backward(T* dq, T* dk, T* dv, T* datt, const T* dout, const T* q, const T* k,
                            const T* v, const T* att, int B, int Tn, int NH, int NKV, int hd);

}  // namespace zero::llama
