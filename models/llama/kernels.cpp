// The Llama-family decoder's own CPU layers (see kernels.h): plain loops under OpenMP, sums in
// double, parameter gradients reduced over rows in order; grouped attention is the shared attention
// on rows of their own strides (models/layers/layers.h).
#include "models/llama/kernels.h"

#include <algorithm>
#include <cmath>

#include "models/layers/layers.h"

namespace zero::llama {
namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

template <class T>
void embedding_forward(T* out, const std::int32_t* tokens, const T* wte, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    std::copy_n(wte + static_cast<std::size_t>(tokens[i]) * C, C,
                out + static_cast<std::size_t>(i) * C);
  }
}

template <class T>
void embedding_backward(T* dwte, const T* dout, const std::int32_t* tokens, int N, int C) {
  // Rows of dwte may repeat across positions: summed serially, in order (deterministic);
  // channels in parallel.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    for (int i = 0; i < N; ++i) {
      dwte[static_cast<std::size_t>(tokens[i]) * C + c] +=
          dout[static_cast<std::size_t>(i) * C + c];
    }
  }
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int N, int C, double eps) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<std::size_t>(i) * C;
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += static_cast<double>(x[c]) * x[c];
    ms /= C;
    const double s = 1.0 / std::sqrt(ms + eps);
    T* o = out + static_cast<std::size_t>(i) * C;
    // As Hugging Face's LlamaRMSNorm: the normalised x is rounded to T, then scaled.
    for (int c = 0; c < C; ++c) o[c] = weight[c] * static_cast<T>(x[c] * s);
    rstd[i] = static_cast<T>(s);
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int N, int C) {
  // Input gradients per row, in parallel: with dn = weight * dout,
  // dx = rstd * dn - x * rstd^3 * mean(dn * x).
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* x = inp + static_cast<std::size_t>(i) * C;
    const T* g = dout + static_cast<std::size_t>(i) * C;
    const double s = rstd[i];
    double mean_dn_x = 0;
    for (int c = 0; c < C; ++c) mean_dn_x += static_cast<double>(weight[c]) * g[c] * x[c];
    mean_dn_x /= C;
    T* d = dinp + static_cast<std::size_t>(i) * C;
    for (int c = 0; c < C; ++c) {
      const double dn = static_cast<double>(weight[c]) * g[c];
      d[c] += static_cast<T>(s * dn - x[c] * s * s * s * mean_dn_x);
    }
  }
  // The weight's gradient per channel, summing rows in order.
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; ++c) {
    double dw = 0;
    for (int i = 0; i < N; ++i) {
      const std::size_t at = static_cast<std::size_t>(i) * C + c;
      dw += static_cast<double>(inp[at]) * rstd[i] * dout[at];
    }
    dweight[c] += static_cast<T>(dw);
  }
}

template <class T>
void rope_forward(T* x, const T* cos, const T* sin, int B, int Tn, int heads, int hd) {
  const int half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const T* c = cos + static_cast<std::size_t>(bt % Tn) * half;
    const T* s = sin + static_cast<std::size_t>(bt % Tn) * half;
    for (int h = 0; h < heads; ++h) {
      T* v = x + (static_cast<std::size_t>(bt) * heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const double lo = v[i], hi = v[i + half];
        v[i] = static_cast<T>(lo * c[i] - hi * s[i]);
        v[i + half] = static_cast<T>(hi * c[i] + lo * s[i]);
      }
    }
  }
}

template <class T>
void rope_backward(T* dx, const T* cos, const T* sin, int B, int Tn, int heads, int hd) {
  const int half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * Tn; ++bt) {
    const T* c = cos + static_cast<std::size_t>(bt % Tn) * half;
    const T* s = sin + static_cast<std::size_t>(bt % Tn) * half;
    for (int h = 0; h < heads; ++h) {
      T* d = dx + (static_cast<std::size_t>(bt) * heads + h) * hd;
      for (int i = 0; i < half; ++i) {
        const double lo = d[i], hi = d[i + half];
        d[i] = static_cast<T>(lo * c[i] + hi * s[i]);
        d[i + half] = static_cast<T>(hi * c[i] - lo * s[i]);
      }
    }
  }
}

template <class T>
void rope_tables(T* cos, T* sin, const double* inv_freq, int Tn, int hd) {
  const int half = hd / 2;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < Tn; ++t) {
    for (int i = 0; i < half; ++i) {
      // As transformers forms the angle: position times frequency rounded to float32 (its
      // rotary tables are float32 products), so long positions turn by the same angle.
      const double angle = static_cast<float>(t) * static_cast<float>(inv_freq[i]);
      cos[static_cast<std::size_t>(t) * half + i] = static_cast<T>(std::cos(angle));
      sin[static_cast<std::size_t>(t) * half + i] = static_cast<T>(std::sin(angle));
    }
  }
}

template <class T>
void swiglu_forward(T* h, const T* gate, const T* up, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const double x = gate[i];
    h[i] = static_cast<T>(x * sigmoid(x) * up[i]);
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dh, const T* gate, const T* up, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const double x = gate[i];
    const double s = sigmoid(x);
    const double dsilu = s * (1.0 + x * (1.0 - s));  // d/dx of x * sigmoid(x)
    dgate[i] += static_cast<T>(static_cast<double>(dh[i]) * up[i] * dsilu);
    dup[i] += static_cast<T>(static_cast<double>(dh[i]) * x * s);
  }
}

template <class T>
void gqa_attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int Tn,
                           int NH, int NKV, int hd, int window) {
  layers::attention_forward_rows(out, NH * hd, att, q, NH * hd, k, v, NKV * hd, B, Tn, NH, NKV, hd,
                                 window);
}

template <class T>
void gqa_attention_backward(T* dq, T* dk, T* dv, T* datt, const T* dout, const T* q, const T* k,
                            const T* v, const T* att, int B, int Tn, int NH, int NKV, int hd) {
  layers::attention_backward_rows(dq, dk, dv, datt, dout, NH * hd, q, NH * hd, k, v, NKV * hd, att,
                                  B, Tn, NH, NKV, hd);
}

#define ZERO_LLAMA_INSTANTIATE(T)                                                                  \
  template void embedding_forward<T>(T*, const std::int32_t*, const T*, int, int);                 \
  template void embedding_backward<T>(T*, const T*, const std::int32_t*, int, int);                \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int, double);                  \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);     \
  template void rope_forward<T>(T*, const T*, const T*, int, int, int, int);                       \
  template void rope_backward<T>(T*, const T*, const T*, int, int, int, int);                      \
  template void rope_tables<T>(T*, T*, const double*, int, int);                                   \
  template void swiglu_forward<T>(T*, const T*, const T*, std::size_t);                            \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, std::size_t);             \
  template void gqa_attention_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, \
                                         int, int);                                                \
  template void gqa_attention_backward<T>(T*, T*, T*, T*, const T*, const T*, const T*, const T*,  \
                                          const T*, int, int, int, int, int);

ZERO_LLAMA_INSTANTIATE(float)
ZERO_LLAMA_INSTANTIATE(double)

}  // namespace zero::llama
