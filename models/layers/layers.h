// The CPU layers both model families use, forward and backward: matrix products (OpenBLAS),
// residual adds, causal attention on rows of any stride with grouped key/value heads, and
// softmax with cross-entropy. Each family adds its own (models/gpt/kernels.h,
// models/llama/kernels.h): embeddings, norms, activations, its attention's layout.
//
// Conventions, which the families' layers share: row-major, B sequences of Tn positions
// (N = B * Tn rows); each backward ADDS (+=) its parameter gradients, so that tied weights and
// accumulation sum over their uses as the engine's gradient buffers expect, and its input
// gradients (dinp) too, so that a residual stream collects the gradients of both its branches.
// Templates on the element type: float is the models', double is what the finite-difference
// tests check the backward passes with. The loops run under OpenMP with a fixed split of the
// work, so results do not depend on timing; parameter gradients are reduced over the batch in a
// fixed order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero::layers {

// out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC] (bias may be null).
template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// dinp += dout · weight; dweight += dout^T · inp; dbias += column sums of dout (when non-null).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC);

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::size_t n);

// Causal attention on rows of any stride, with grouped key/value heads and an optional window:
// row r of q, k, v and out starts at r * ldq, r * ldkv and r * ld_out; query head h of hd
// channels reads key/value head h / (NH / NKV); window > 0 also masks keys more than window - 1
// positions back. out holds the heads' outputs side by side; att[B,NH,Tn,Tn] keeps the softmax
// of the masked, 1/sqrt(hd)-scaled scores for the backward (zero where masked). The products
// run through OpenBLAS per (sequence, head).
template <class T>
void attention_forward_rows(T* out, int ld_out, T* att, const T* q, int ldq, const T* k, const T* v,
                            int ldkv, int B, int Tn, int NH, int NKV, int hd, int window);
// dq, dk, dv += the gradients; datt (B*NH*Tn*Tn) is scratch.
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

}  // namespace zero::layers
