// The reference GPT's CPU layers, forward and backward: token and position embedding,
// LayerNorm, matrix products (OpenBLAS), GELU (GPT-2's tanh form), causal multi-head attention,
// residual adds, and softmax with cross-entropy. Shapes follow the model's activations:
// B sequences of T positions, C channels, NH heads, V vocabulary entries, row-major.
//
// Each backward ADDS its parameter gradients (+=): tied weights and accumulation sum over their
// uses, as the engine's gradient buffers expect. Input gradients (dinp) are added too, so that a
// residual stream can collect the gradients of both its branches.
//
// Templates on the element type: float is the model's, double is what the finite-difference
// tests check the backward passes with. The loops run under OpenMP with a fixed split of the
// work, so results do not depend on timing; parameter gradients are reduced over the batch in a
// fixed order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero::gpt {

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
template <class T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C);
template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int Tn,
                      int C);

// Per row of C: out = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + 1e-5).
// mean and rstd (N each) are kept for the backward.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C);

// out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC] (bias may be null).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp += dout · weight; dweight += dout^T · inp; dbias += column sums of dout (when non-null).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

// GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::size_t n);

// qkv[B,T,3C] holds q, k, v (each C = NH heads of C/NH); out[B,T,C] the heads' outputs
// concatenated. att[B,NH,T,T] keeps the softmax of the causally masked, 1/sqrt(hs)-scaled scores
// for the backward (entries above the diagonal are zero).
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);
// dqkv += the gradient; datt (B*NH*T*T) is scratch.
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH);

// The same on rows of any stride, with grouped key/value heads and an optional window (the Llama
// family's attention uses it too): row r of q, k, v and out starts at r * ldq, r * ldkv and
// r * ld_out; query head h of hd channels reads key/value head h / (NH / NKV); window > 0 also
// masks keys more than window - 1 positions back. The products run through OpenBLAS per
// (sequence, head).
template <class T>
void attention_forward_rows(T* out, int ld_out, T* att, const T* q, int ldq, const T* k, const T* v,
                            int ldkv, int B, int Tn, int NH, int NKV, int hd, int window);
template <class T>
void attention_backward_rows(T* dq, T* dk, T* dv, T* datt, const T* dout, int ld_out, const T* q,
                             int ldq, const T* k, const T* v, int ldkv, const T* att, int B, int Tn,
                             int NH, int NKV, int hd);

// Per row of V logits: probs = softmax, losses[i] = -log probs[i, targets[i]]. A target < 0
// marks a position without a loss (its loss is 0).
template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets, int N,
                          int V);
// dlogits += (probs - onehot(target)) * dlosses[i].
template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                           const T* dlosses, int N, int V);

}  // namespace zero::gpt
