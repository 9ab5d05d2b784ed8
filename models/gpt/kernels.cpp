// The reference GPT's own CPU layers (see kernels.h): plain loops under OpenMP; its attention
// is the shared one (models/layers/layers.h) on the packed q, k, v rows.
#include "models/gpt/kernels.h"

#include <algorithm>
#include <cmath>

#include "models/layers/layers.h"

namespace zero::gpt {
namespace {

constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)

}  // namespace

template <class T>
void encoder_forward(T* out, const std::int32_t* tokens, const T* wte, const T* wpe, int B, int Tn,
                     int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const T* e = wte + static_cast<std::size_t>(tokens[bt]) * C;
    const T* p = wpe + static_cast<std::size_t>(bt % Tn) * C;
    T* o = out + static_cast<std::size_t>(bt) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

template <class T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const std::int32_t* tokens, int B, int Tn,
                      int C) {
  // Rows of dwte may repeat across positions: summed serially, in order (deterministic);
  // channels in parallel.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    for (int bt = 0; bt < B * Tn; ++bt) {
      const T g = dout[static_cast<std::size_t>(bt) * C + c];
      dwte[static_cast<std::size_t>(tokens[bt]) * C + c] += g;
      dwpe[static_cast<std::size_t>(bt % Tn) * C + c] += g;
    }
  }
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<std::size_t>(i) * C;
    double m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    double v = 0;
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    T* o = out + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) o[c] = static_cast<T>((x[c] - m) * s) * weight[c] + bias[c];
    mean[i] = static_cast<T>(m);
    rstd[i] = static_cast<T>(s);
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int N, int C) {
  // Input gradients per row, in parallel.
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<std::size_t>(i) * C;
    const T* g = dout + static_cast<std::size_t>(i) * C;
    double mean_dn = 0, mean_dn_xhat = 0;  // means of dnorm and dnorm * xhat
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * rstd[i];
      const double dn = static_cast<double>(weight[c]) * g[c];
      mean_dn += dn;
      mean_dn_xhat += dn * xhat;
    }
    mean_dn /= C;
    mean_dn_xhat /= C;
    T* d = dinp + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[i]) * rstd[i];
      const double dn = static_cast<double>(weight[c]) * g[c];
      d[c] += static_cast<T>((dn - mean_dn - xhat * mean_dn_xhat) * rstd[i]);
    }
  }
  // Parameter gradients per channel, summing rows in order.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    double dw = 0, db = 0;
    for (int i = 0; i < N; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * C + c;
      const double xhat = (inp[at] - mean[i]) * rstd[i];
      dw += xhat * dout[at];
      db += dout[at];
    }
    dweight[c] += static_cast<T>(dw);
    dbias[c] += static_cast<T>(db);
  }
}

template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
  // In the element type: float's tanh is the float model's (the double instantiation checks it).
  const T scale = static_cast<T>(kGeluScale), cube = static_cast<T>(0.044715), half = T(0.5);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = half * x * (T(1) + std::tanh(scale * (x + cube * x * x * x)));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
  const T scale = static_cast<T>(kGeluScale), cube = static_cast<T>(0.044715), half = T(0.5);
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T th = std::tanh(scale * (x + cube * x * x * x));
    const T sech2 = T(1) - th * th;
    const T du = scale * (T(1) + T(3) * cube * x * x);
    dinp[i] += (half * (T(1) + th) + half * x * sech2 * du) * dout[i];
  }
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  layers::attention_forward_rows(out, C, att, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, B, Tn, NH,
                                 NH, C / NH, 0);
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH) {
  layers::attention_backward_rows(dqkv, dqkv + C, dqkv + 2 * C, datt, dout, C, qkv, 3 * C, qkv + C,
                                  qkv + 2 * C, 3 * C, att, B, Tn, NH, NH, C / NH);
}

#define ZERO_GPT_INSTANTIATE(T)                                                                 \
  template void encoder_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int); \
  template void encoder_backward<T>(T*, T*, const T*, const std::int32_t*, int, int, int);      \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);       \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,       \
                                      const T*, int, int);                                      \
  template void gelu_forward<T>(T*, const T*, std::size_t);                                     \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);                          \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                     \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);

ZERO_GPT_INSTANTIATE(float)
ZERO_GPT_INSTANTIATE(double)

}  // namespace zero::gpt
