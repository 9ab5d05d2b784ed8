// The reference GPT's own CPU layers, forward and backward: token and position embedding,
// LayerNorm, GELU (GPT-2's tanh form) and causal multi-head attention on packed q, k, v rows.
// Its matrix products, residual adds and softmax with cross-entropy are the layers both
// families share (models/layers/layers.h), whose conventions these follow: row-major, B
// sequences of T positions, C channels, NH heads; every backward ADDS (+=) its input and
// parameter gradients; templates on float (the model's) and double (what the finite-difference
// tests check with); OpenMP loops with a fixed split, parameter gradients reduced in a fixed
// order, so results do not depend on timing.
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

// GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n);
template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n);

// qkv[B,T,3C] holds q, k, v (each C = NH heads of C/NH); out[B,T,C] the heads' outputs
// concatenated. att[B,NH,T,T] keeps the softmax of the causally masked, 1/sqrt(hs)-scaled scores
// for the backward (entries above the diagonal are zero).
template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH);
// dqkv += the gradient; datt (B*NH*T*T) is scratch.
template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH);

}  // namespace zero::gpt
