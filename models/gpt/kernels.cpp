// The reference GPT's CPU layers (see kernels.h): plain loops under OpenMP, matrix products
// through OpenBLAS.
#include "models/gpt/kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zero::gpt {
namespace {

// Row-major C[M,N] (+)= alpha op(A) op(B), through the BLAS of the element type.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int lda, const T* Bm,
          int ldb, T beta, T* Cm, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, Bm, ldb, beta, Cm, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, A, lda, Bm, ldb, beta, Cm, ldc);
  }
}

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
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const T* mean, const T* rstd, int N, int C) {
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
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::copy_n(bias, OC, out + static_cast<std::size_t>(i) * OC);
  }
  gemm<T>(false, true, N, OC, C, inp, C, weight, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  gemm<T>(false, false, N, C, OC, dout, OC, weight, C, T(1), dinp, C);       // dinp += dout W
  gemm<T>(true, false, OC, C, N, dout, OC, inp, C, T(1), dweight, C);       // dW += dout^T x
  if (dbias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int o = 0; o < OC; ++o) {
      double sum = 0;
      for (int i = 0; i < N; ++i) sum += dout[static_cast<std::size_t>(i) * OC + o];
      dbias[o] += static_cast<T>(sum);
    }
  }
}

template <class T>
void gelu_forward(T* out, const T* inp, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = static_cast<T>(0.5 * x * (1.0 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x))));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double u = kGeluScale * (x + 0.044715 * x * x * x);
    const double th = std::tanh(u);
    const double sech2 = 1.0 - th * th;
    const double du = kGeluScale * (1.0 + 3.0 * 0.044715 * x * x);
    dinp[i] += static_cast<T>((0.5 * (1.0 + th) + 0.5 * x * sech2 * du) * dout[i]);
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < Tn; ++t) {
        const T* q = qkv + (static_cast<std::size_t>(b) * Tn + t) * 3 * C + h * hs;
        T* a = att + ((static_cast<std::size_t>(b) * NH + h) * Tn + t) * Tn;
        double max = -INFINITY;
        for (int u = 0; u <= t; ++u) {
          const T* k = qkv + (static_cast<std::size_t>(b) * Tn + u) * 3 * C + C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; ++i) dot += static_cast<double>(q[i]) * k[i];
          a[u] = static_cast<T>(dot * scale);
          max = std::max(max, static_cast<double>(a[u]));
        }
        double sum = 0;
        for (int u = 0; u <= t; ++u) {
          const double e = std::exp(a[u] - max);
          a[u] = static_cast<T>(e);
          sum += e;
        }
        for (int u = 0; u <= t; ++u) a[u] = static_cast<T>(a[u] / sum);
        for (int u = t + 1; u < Tn; ++u) a[u] = 0;
        T* o = out + (static_cast<std::size_t>(b) * Tn + t) * C + h * hs;
        for (int i = 0; i < hs; ++i) {
          double acc = 0;
          for (int u = 0; u <= t; ++u) {
            acc += static_cast<double>(a[u]) *
                   qkv[(static_cast<std::size_t>(b) * Tn + u) * 3 * C + 2 * C + h * hs + i];
          }
          o[i] = static_cast<T>(acc);
        }
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B,
                        int Tn, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  // One (b, h) per iteration: its dq, dk, dv touch only that head's columns, so iterations
  // never write the same element; within one, positions go in order (deterministic).
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int t = 0; t < Tn; ++t) {
        const T* a = att + ((static_cast<std::size_t>(b) * NH + h) * Tn + t) * Tn;
        T* da = datt + ((static_cast<std::size_t>(b) * NH + h) * Tn + t) * Tn;
        const T* g = dout + (static_cast<std::size_t>(b) * Tn + t) * C + h * hs;
        const std::size_t qrow = (static_cast<std::size_t>(b) * Tn + t) * 3 * C + h * hs;
        // out = att · v: datt = dout · v^T, dv += att^T · dout.
        for (int u = 0; u <= t; ++u) {
          const std::size_t vrow = (static_cast<std::size_t>(b) * Tn + u) * 3 * C + 2 * C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; ++i) {
            dot += static_cast<double>(g[i]) * qkv[vrow + i];
            dqkv[vrow + i] += static_cast<T>(static_cast<double>(a[u]) * g[i]);
          }
          da[u] = static_cast<T>(dot);
        }
        // Through the softmax: dscore_u = a_u (da_u - sum_w a_w da_w).
        double inner = 0;
        for (int u = 0; u <= t; ++u) inner += static_cast<double>(a[u]) * da[u];
        for (int u = 0; u <= t; ++u) {
          const double dscore = a[u] * (da[u] - inner) * scale;
          const std::size_t krow = (static_cast<std::size_t>(b) * Tn + u) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; ++i) {
            dqkv[qrow + i] += static_cast<T>(dscore * qkv[krow + i]);
            dqkv[krow + i] += static_cast<T>(dscore * qkv[qrow + i]);
          }
        }
      }
    }
  }
}

template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets,
                          int N, int V) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * V;
    T* p = probs + static_cast<std::size_t>(i) * V;
    double max = -INFINITY;
    for (int v = 0; v < V; ++v) max = std::max(max, static_cast<double>(z[v]));
    double sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(z[v] - max);
    for (int v = 0; v < V; ++v) p[v] = static_cast<T>(std::exp(z[v] - max) / sum);
    losses[i] = targets[i] < 0 ? T(0)
                               : static_cast<T>(-(z[targets[i]] - max - std::log(sum)));
  }
}

template <class T>
void crossentropy_backward(T* dlogits, const T* probs, const std::int32_t* targets,
                           const T* dlosses, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    if (targets[i] < 0) continue;
    const T* p = probs + static_cast<std::size_t>(i) * V;
    T* d = dlogits + static_cast<std::size_t>(i) * V;
    for (int v = 0; v < V; ++v) {
      d[v] += static_cast<T>((p[v] - (v == targets[i] ? 1.0 : 0.0)) * dlosses[i]);
    }
  }
}

#define ZERO_GPT_INSTANTIATE(T)                                                                  \
  template void encoder_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int);  \
  template void encoder_backward<T>(T*, T*, const T*, const std::int32_t*, int, int, int);        \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);         \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,         \
                                      const T*, int, int);                                        \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);               \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);      \
  template void gelu_forward<T>(T*, const T*, std::size_t);                                       \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);                            \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t);                         \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                       \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);  \
  template void crossentropy_forward<T>(T*, T*, const T*, const std::int32_t*, int, int);         \
  template void crossentropy_backward<T>(T*, const T*, const std::int32_t*, const T*, int, int);

ZERO_GPT_INSTANTIATE(float)
ZERO_GPT_INSTANTIATE(double)

}  // namespace zero::gpt
