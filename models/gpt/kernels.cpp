// The reference GPT's CPU layers (see kernels.h): plain loops under OpenMP, matrix products
// through OpenBLAS.
#include "models/gpt/kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <cblas.h>

namespace zero::gpt {
namespace {

// Row-major C[M,N] (+)= alpha op(A) op(B), through the BLAS of the element type.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* Bm, int ldb, T beta, T* Cm, int ldc) {
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  }
}

// The first key position query position t sees: window > 0 hides keys more than window - 1
// positions back.
int first_key(int t, int window) {
  return window > 0 ? std::max(0, t - window + 1) : 0;
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
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; ++i) std::copy_n(bias, OC, out + static_cast<std::size_t>(i) * OC);
  }
  gemm<T>(false, true, N, OC, C, T(1), inp, C, weight, C, bias != nullptr ? T(1) : T(0), out, OC);
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int C, int OC) {
  gemm<T>(false, false, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);  // dinp += dout W
  gemm<T>(true, false, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);   // dW += dout^T x
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
void residual_forward(T* out, const T* a, const T* b, std::size_t n) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// Attention runs per (sequence, head) as matrix products through OpenBLAS: the scores of every
// query against every key (the masked ones are computed and then zeroed: the products are far
// faster than the loops they replace even at twice the work), the softmax per row, and the
// weighted sum of the values. Inside the parallel loops OpenBLAS (its OpenMP build) runs on the
// calling thread.
template <class T>
void attention_forward_rows(T* out, int ld_out, T* att, const T* q, int ldq, const T* k, const T* v,
                            int ldkv, int B, int Tn, int NH, int NKV, int hd, int window) {
  const int group = NH / NKV;  // query heads per key/value head
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int kvh = h / group;
      const T* qh = q + static_cast<std::size_t>(b) * Tn * ldq + h * hd;
      const T* kh = k + static_cast<std::size_t>(b) * Tn * ldkv + kvh * hd;
      const T* vh = v + static_cast<std::size_t>(b) * Tn * ldkv + kvh * hd;
      T* s = att + (static_cast<std::size_t>(b) * NH + h) * Tn * Tn;
      gemm<T>(false, true, Tn, Tn, hd, scale, qh, ldq, kh, ldkv, T(0), s, Tn);  // q k^T / sqrt(hd)
      for (int t = 0; t < Tn; ++t) {
        T* a = s + static_cast<std::size_t>(t) * Tn;
        const int u0 = first_key(t, window);
        T max = a[u0];
        for (int u = u0 + 1; u <= t; ++u) max = std::max(max, a[u]);
        double sum = 0;
        for (int u = u0; u <= t; ++u) {
          a[u] = std::exp(a[u] - max);
          sum += a[u];
        }
        const T inverse = static_cast<T>(1.0 / sum);
        for (int u = u0; u <= t; ++u) a[u] *= inverse;
        std::fill(a, a + u0, T(0));          // outside the window
        std::fill(a + t + 1, a + Tn, T(0));  // in the future
      }
      T* oh = out + static_cast<std::size_t>(b) * Tn * ld_out + h * hd;
      gemm<T>(false, false, Tn, hd, Tn, T(1), s, Tn, vh, ldkv, T(0), oh, ld_out);  // att v
    }
  }
}

template <class T>
void attention_backward_rows(T* dq, T* dk, T* dv, T* datt, const T* dout, int ld_out, const T* q,
                             int ldq, const T* k, const T* v, int ldkv, const T* att, int B, int Tn,
                             int NH, int NKV, int hd) {
  const int group = NH / NKV;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  // One (b, kv head) per iteration, covering the group's query heads in order: dk and dv of a
  // kv head, and dq and datt of its query heads, are written by that iteration only
  // (deterministic). Masked entries have att == 0, so their score gradients are 0.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int kvh = 0; kvh < NKV; ++kvh) {
      const std::size_t kv_at = static_cast<std::size_t>(b) * Tn * ldkv + kvh * hd;
      for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
        const std::size_t q_at = static_cast<std::size_t>(b) * Tn * ldq + h * hd;
        const std::size_t o_at = static_cast<std::size_t>(b) * Tn * ld_out + h * hd;
        const T* a = att + (static_cast<std::size_t>(b) * NH + h) * Tn * Tn;
        T* da = datt + (static_cast<std::size_t>(b) * NH + h) * Tn * Tn;
        // out = att v: datt = dout v^T, dv += att^T dout.
        gemm<T>(false, true, Tn, Tn, hd, T(1), dout + o_at, ld_out, v + kv_at, ldkv, T(0), da, Tn);
        gemm<T>(true, false, Tn, hd, Tn, T(1), a, Tn, dout + o_at, ld_out, T(1), dv + kv_at, ldkv);
        // Through the softmax: dscore_u = att_u (datt_u - sum_w att_w datt_w), times the scale.
        for (int t = 0; t < Tn; ++t) {
          const T* ar = a + static_cast<std::size_t>(t) * Tn;
          T* dr = da + static_cast<std::size_t>(t) * Tn;
          double inner = 0;
          for (int u = 0; u <= t; ++u) inner += static_cast<double>(ar[u]) * dr[u];
          for (int u = 0; u <= t; ++u) dr[u] = static_cast<T>(ar[u] * (dr[u] - inner) * scale);
          std::fill(dr + t + 1, dr + Tn, T(0));
        }
        // scores = q k^T: dq += dscore k, dk += dscore^T q.
        gemm<T>(false, false, Tn, hd, Tn, T(1), da, Tn, k + kv_at, ldkv, T(1), dq + q_at, ldq);
        gemm<T>(true, false, Tn, hd, Tn, T(1), da, Tn, q + q_at, ldq, T(1), dk + kv_at, ldkv);
      }
    }
  }
}

template <class T>
void attention_forward(T* out, T* att, const T* qkv, int B, int Tn, int C, int NH) {
  attention_forward_rows(out, C, att, qkv, 3 * C, qkv + C, qkv + 2 * C, 3 * C, B, Tn, NH, NH,
                         C / NH, 0);
}

template <class T>
void attention_backward(T* dqkv, T* datt, const T* dout, const T* qkv, const T* att, int B, int Tn,
                        int C, int NH) {
  attention_backward_rows(dqkv, dqkv + C, dqkv + 2 * C, datt, dout, C, qkv, 3 * C, qkv + C,
                          qkv + 2 * C, 3 * C, att, B, Tn, NH, NH, C / NH);
}

template <class T>
void crossentropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets, int N,
                          int V) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; ++i) {
    const T* z = logits + static_cast<std::size_t>(i) * V;
    T* p = probs + static_cast<std::size_t>(i) * V;
    T max = z[0];
    for (int v = 1; v < V; ++v) max = std::max(max, z[v]);
    // One exponential per logit, in the element type; the sum in double.
    double sum = 0;
    for (int v = 0; v < V; ++v) {
      p[v] = std::exp(z[v] - max);
      sum += p[v];
    }
    const T inverse = static_cast<T>(1.0 / sum);
    for (int v = 0; v < V; ++v) p[v] *= inverse;
    losses[i] = targets[i] < 0
                    ? T(0)
                    : static_cast<T>(-(static_cast<double>(z[targets[i]]) - max - std::log(sum)));
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

#define ZERO_GPT_INSTANTIATE(T)                                                                    \
  template void encoder_forward<T>(T*, const std::int32_t*, const T*, const T*, int, int, int);    \
  template void encoder_backward<T>(T*, T*, const T*, const std::int32_t*, int, int, int);         \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);          \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,          \
                                      const T*, int, int);                                         \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);       \
  template void gelu_forward<T>(T*, const T*, std::size_t);                                        \
  template void gelu_backward<T>(T*, const T*, const T*, std::size_t);                             \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t);                          \
  template void attention_forward<T>(T*, T*, const T*, int, int, int, int);                        \
  template void attention_forward_rows<T>(T*, int, T*, const T*, int, const T*, const T*, int,     \
                                          int, int, int, int, int, int);                           \
  template void attention_backward_rows<T>(T*, T*, T*, T*, const T*, int, const T*, int, const T*, \
                                           const T*, int, const T*, int, int, int, int, int);      \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int);   \
  template void crossentropy_forward<T>(T*, T*, const T*, const std::int32_t*, int, int);          \
  template void crossentropy_backward<T>(T*, const T*, const std::int32_t*, const T*, int, int);

ZERO_GPT_INSTANTIATE(float)
ZERO_GPT_INSTANTIATE(double)

}  // namespace zero::gpt
