// The CPU layers both model families use (layers.h): plain loops under OpenMP, matrix
// products through OpenBLAS (models/blas/openblas.h).
#include "models/layers/layers.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "models/blas/openblas.h"

namespace zero::layers {
namespace {

// Row-major C[M,N] (+)= alpha op(A) op(B), through the BLAS of the element type.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
          const T* Bm, int ldb, T beta, T* Cm, int ldc) {
  const blas::Trans ta = trans_a ? blas::Trans::yes : blas::Trans::no;
  const blas::Trans tb = trans_b ? blas::Trans::yes : blas::Trans::no;
  if constexpr (std::is_same_v<T, float>) {
    blas::sgemm(blas::Order::row_major, ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  } else {
    blas::dgemm(blas::Order::row_major, ta, tb, M, N, K, alpha, A, lda, Bm, ldb, beta, Cm, ldc);
  }
}

// The first key position query position t sees: window > 0 hides keys more than window - 1
// positions back.
int first_key(int t, int window) {
  return window > 0 ? std::max(0, t - window + 1) : 0;
}

}  // namespace

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

#define ZERO_LAYERS_INSTANTIATE(T)                                                                 \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);       \
  template void residual_forward<T>(T*, const T*, const T*, std::size_t);                          \
  template void attention_forward_rows<T>(T*, int, T*, const T*, int, const T*, const T*, int,     \
                                          int, int, int, int, int, int);                           \
  template void attention_backward_rows<T>(T*, T*, T*, T*, const T*, int, const T*, int, const T*, \
                                           const T*, int, const T*, int, int, int, int, int);      \
  template void crossentropy_forward<T>(T*, T*, const T*, const std::int32_t*, int, int);          \
  template void crossentropy_backward<T>(T*, const T*, const std::int32_t*, const T*, int, int);

ZERO_LAYERS_INSTANTIATE(float)
ZERO_LAYERS_INSTANTIATE(double)

}  // namespace zero::layers
