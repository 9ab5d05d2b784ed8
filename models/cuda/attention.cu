// Causal attention with grouped key/value heads and an optional window (layers.h), in the
// manner of FlashAttention-2: scores are made a 64 x 64 tile at a time in shared memory and
// never stored beyond it; the forward keeps each row's log-sum-exp for the backward, which
// recomputes the probabilities from it.
//
// This first version multiplies with plain fp32 FMA loops on tiles held as fp32 in shared
// memory, not with tensor cores: simple and exact to fp32, not at the hardware's peak.
//
// Geometry, every kernel: 256 threads as 16 x 16, thread (ty, tx) = (tid / 16, tid % 16). A
// 64 x 64 score tile gives the thread rows ty + 16 r and columns tx + 16 j (r, j < 4), so a
// row's 64 scores lie in the 16 lanes of one half-warp (row reductions: xor shuffles 8..1);
// a 64 x D product tile gives it rows ty + 16 r and channels tx + 16 c (c < D / 16). D is hd
// rounded up to 32, 64, 96 or 128; the tiles hold zeros past hd and past T, so the products
// over D are the products over hd. Tiles are padded to D + 1 (and 65) floats a row: the
// threads of a warp read 16 different rows of a column in 16 different banks.
//
// Forward: one block per (query tile, head, sequence), the key tiles from the window's first to
// the diagonal in order, with the online softmax in fp32 (running max m and sum l per row).
// Backward, with no atomics and a fixed order everywhere (runs repeat bit for bit):
//   1. delta[b, h, t] = dout[t] . out[t] (one warp per row and head);
//   2. dk, dv: one block per (key tile, kv head, sequence), looping over the group's query
//      heads and their query tiles, dk and dv accumulated in registers and added to the bf16
//      gradients once;
//   3. dq: one block per (query tile, head, sequence), looping over the key tiles.
// P = exp(s * scale - lse); dP = dO V^T; dS = P (dP - delta); dV += P^T dO;
// dK += scale dS^T Q; dQ += scale dS K.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                // query and key rows per tile
constexpr int kSide = 16;                // threads per tile side
constexpr int kThreads = kSide * kSide;  // 256
constexpr int kPer = kTile / kSide;      // rows (and score columns) per thread
constexpr int kScoreStride = kTile + 1;  // a score tile's row in shared memory
constexpr int kMaxHeadDim = 128;
constexpr int kMaxGridYZ = 65535;

__device__ __forceinline__ float load(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ bf16 store(float x) {
  return __float2bfloat16_rn(x);
}

// Sum and max over the 16 lanes holding one score row (the same bits in each lane: the xor
// butterfly adds the same two floats on both sides).
__device__ __forceinline__ float row_sum(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float row_max(float v) {
  for (int offset = kSide / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Whether query position t sees key position u (both may lie past T in a partial tile).
__device__ __forceinline__ bool visible(int t, int u, int T, int window) {
  return t < T && u < T && u <= t && (window <= 0 || u > t - window);
}

// tile[r][i] (rows of D + 1 floats) = head[(first + r) * ld + i], zero past T and past hd.
// `head` points at the head's first channel in the sequence's first row.
template <int D>
__device__ void load_tile(float* tile, const bf16* head, int ld, int first, int T, int hd) {
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e / D, i = e % D;
    const int t = first + r;
    float x = 0.0f;
    if (t < T && i < hd) x = load(head[static_cast<std::size_t>(t) * ld + i]);
    tile[r * (D + 1) + i] = x;
  }
}

// Query tiles of the rows [q0, q0 + 64) read key tiles first_key_tile .. their diagonal.
__device__ __forceinline__ int first_key_tile(int q0, int window) {
  return window > 0 ? max(0, q0 - window + 1) / kTile : 0;
}

template <int D>
constexpr std::size_t forward_smem_bytes() {
  return (3 * kTile * (D + 1) + kTile * kScoreStride) * sizeof(float);
}
template <int D>
constexpr std::size_t backward_smem_bytes() {
  return (4 * kTile * (D + 1) + kTile * kScoreStride + 2 * kTile) * sizeof(float);
}

// ---- Forward ----

template <int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(bf16* __restrict__ out, int ld_out, float* __restrict__ lse,
                   const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
                   const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd,
                   int window, float scale) {
  constexpr int S = D + 1;
  constexpr int C = D / kSide;
  extern __shared__ float smem[];
  float* qs = smem;            // [kTile][S]
  float* ks = qs + kTile * S;  // [kTile][S]
  float* vs = ks + kTile * S;  // [kTile][S]
  float* ps = vs + kTile * S;  // [kTile][kScoreStride]: this tile's probabilities
  const int tiles = (T + kTile - 1) / kTile;
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // the longest rows first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / group;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const bf16* qh = q + seq * ldq + static_cast<std::size_t>(h) * hd;
  const bf16* kh = k + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  const bf16* vh = v + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  load_tile<D>(qs, qh, ldq, q0, T, hd);

  float m[kPer], l[kPer], o[kPer][C];
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < C; ++c) o[r][c] = 0.0f;
  }
  const int last_tile = (min(T, q0 + kTile) - 1) / kTile;
  for (int kt = first_key_tile(q0, window); kt <= last_tile; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of ks, vs and ps are done
    load_tile<D>(ks, kh, ldkv, k0, T, hd);
    load_tile<D>(vs, vh, ldkv, k0, T, hd);
    __syncthreads();
    float s[kPer][kPer] = {};
    for (int i = 0; i < D; ++i) {
      float a[kPer], w[kPer];
#pragma unroll
      for (int r = 0; r < kPer; ++r) a[r] = qs[(ty + kSide * r) * S + i];
#pragma unroll
      for (int j = 0; j < kPer; ++j) w[j] = ks[(tx + kSide * j) * S + i];
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) s[r][j] = fmaf(a[r], w[j], s[r][j]);
      }
    }
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int t = q0 + ty + kSide * r;
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int u = k0 + tx + kSide * j;
        s[r][j] = visible(t, u, T, window) ? s[r][j] * scale : -INFINITY;
        tile_max = fmaxf(tile_max, s[r][j]);
      }
      const float m_new = fmaxf(m[r], row_max(tile_max));
      // A row that has seen no key yet keeps m = -inf; exp(-inf - 0) = 0 keeps it empty.
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = expf(m[r] - base);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const float p = expf(s[r][j] - base);
        ps[(ty + kSide * r) * kScoreStride + tx + kSide * j] = p;
        sum += p;
      }
      l[r] = l[r] * correction + row_sum(sum);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < C; ++c) o[r][c] *= correction;
    }
    __syncthreads();
    for (int u = 0; u < kTile; ++u) {
      float p[kPer], w[C];
#pragma unroll
      for (int r = 0; r < kPer; ++r) p[r] = ps[(ty + kSide * r) * kScoreStride + u];
#pragma unroll
      for (int c = 0; c < C; ++c) w[c] = vs[u * S + tx + kSide * c];
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
#pragma unroll
        for (int c = 0; c < C; ++c) o[r][c] = fmaf(p[r], w[c], o[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int t = q0 + ty + kSide * r;
    if (t >= T) continue;
    const float inverse = 1.0f / l[r];
    bf16* row = out + (seq + t) * ld_out + static_cast<std::size_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int i = tx + kSide * c;
      if (i < hd) row[i] = store(o[r][c] * inverse);
    }
    if (tx == 0) lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = m[r] + logf(l[r]);
  }
}

// ---- Backward ----

constexpr int kDeltaThreads = 256;

// delta[b, h, t] = sum_i dout[row, h * hd + i] out[row, h * hd + i], one warp per (row, head).
__global__ void __launch_bounds__(kDeltaThreads)
    delta_kernel(float* __restrict__ delta, const bf16* __restrict__ dout,
                 const bf16* __restrict__ out, int ld_out, int T, int NH, int hd,
                 std::size_t rows) {
  const std::size_t warp =
      static_cast<std::size_t>(blockIdx.x) * (kDeltaThreads / 32) + threadIdx.x / 32;
  if (warp >= rows) return;  // the whole warp
  const int lane = threadIdx.x % 32;
  const int h = static_cast<int>(warp % NH);
  const std::size_t n = warp / NH;  // b * T + t
  const bf16* g = dout + n * ld_out + static_cast<std::size_t>(h) * hd;
  const bf16* o = out + n * ld_out + static_cast<std::size_t>(h) * hd;
  float sum = 0.0f;
  for (int i = lane; i < hd; i += 32) sum = fmaf(load(g[i]), load(o[i]), sum);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane != 0) return;
  const std::size_t b = n / T, t = n % T;
  delta[(b * NH + h) * T + t] = sum;
}

// dk, dv of key tile blockIdx.x of kv head blockIdx.y in sequence blockIdx.z.
template <int D>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                int ld_out, const float* __restrict__ lse, const float* __restrict__ delta,
                const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
                const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd, int window,
                float scale) {
  constexpr int S = D + 1;
  constexpr int C = D / kSide;
  extern __shared__ float smem[];
  float* ks = smem;                                     // [kTile][S]
  float* vs = ks + kTile * S;                           // [kTile][S]
  float* qs = vs + kTile * S;                           // [kTile][S]
  float* dos = qs + kTile * S;                          // [kTile][S]
  float* ts = dos + kTile * S;                          // [kTile][kScoreStride]: P^T, then dS^T
  float* lse_s = ts + kTile * kScoreStride;             // [kTile]
  float* delta_s = lse_s + kTile;                       // [kTile]
  const int k0 = static_cast<int>(blockIdx.x) * kTile;  // the earliest keys (most work) first
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const std::size_t kv_at = seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  load_tile<D>(ks, k + kv_at, ldkv, k0, T, hd);
  load_tile<D>(vs, v + kv_at, ldkv, k0, T, hd);
  // The queries that see these keys: from the diagonal to the window's end.
  const int k_last = min(T, k0 + kTile) - 1;
  const int t_last = window > 0 ? min(T - 1, k_last + window - 1) : T - 1;

  float dk_acc[kPer][C], dv_acc[kPer][C];  // key rows ty + 16 r, channels tx + 16 c
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) dk_acc[r][c] = dv_acc[r][c] = 0.0f;
  }
  for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
    const bf16* qh = q + seq * ldq + static_cast<std::size_t>(h) * hd;
    const bf16* doh = dout + seq * ld_out + static_cast<std::size_t>(h) * hd;
    const float* lse_h = lse + (static_cast<std::size_t>(b) * NH + h) * T;
    const float* delta_h = delta + (static_cast<std::size_t>(b) * NH + h) * T;
    for (int qt = k0 / kTile; qt <= t_last / kTile; ++qt) {
      const int q0 = qt * kTile;
      __syncthreads();  // the previous tile's readers of qs, dos, ts, lse_s and delta_s are done
      load_tile<D>(qs, qh, ldq, q0, T, hd);
      load_tile<D>(dos, doh, ld_out, q0, T, hd);
      if (threadIdx.x < kTile) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T ? lse_h[t] : 0.0f;
        delta_s[threadIdx.x] = t < T ? delta_h[t] : 0.0f;
      }
      __syncthreads();
      // Transposed tiles: key rows ty + 16 r, query columns tx + 16 j.
      float s[kPer][kPer] = {}, dp[kPer][kPer] = {};
      for (int i = 0; i < D; ++i) {
        float kr[kPer], vr[kPer], qc[kPer], gc[kPer];
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
          kr[r] = ks[(ty + kSide * r) * S + i];
          vr[r] = vs[(ty + kSide * r) * S + i];
        }
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          qc[j] = qs[(tx + kSide * j) * S + i];
          gc[j] = dos[(tx + kSide * j) * S + i];
        }
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
#pragma unroll
          for (int j = 0; j < kPer; ++j) {
            s[r][j] = fmaf(kr[r], qc[j], s[r][j]);
            dp[r][j] = fmaf(vr[r], gc[j], dp[r][j]);
          }
        }
      }
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
        const int u = k0 + ty + kSide * r;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const int tq = tx + kSide * j;
          const float p = visible(q0 + tq, u, T, window) ? expf(s[r][j] * scale - lse_s[tq]) : 0.0f;
          ts[(ty + kSide * r) * kScoreStride + tq] = p;
          s[r][j] = p * (dp[r][j] - delta_s[tq]);  // dS^T, kept for after dV
        }
      }
      __syncthreads();
      for (int t = 0; t < kTile; ++t) {  // dV += P^T dO
        float p[kPer], g[C];
#pragma unroll
        for (int r = 0; r < kPer; ++r) p[r] = ts[(ty + kSide * r) * kScoreStride + t];
#pragma unroll
        for (int c = 0; c < C; ++c) g[c] = dos[t * S + tx + kSide * c];
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
#pragma unroll
          for (int c = 0; c < C; ++c) dv_acc[r][c] = fmaf(p[r], g[c], dv_acc[r][c]);
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
#pragma unroll
        for (int j = 0; j < kPer; ++j)
          ts[(ty + kSide * r) * kScoreStride + tx + kSide * j] = s[r][j];
      }
      __syncthreads();
      for (int t = 0; t < kTile; ++t) {  // dK += dS^T Q (scaled at the end)
        float d[kPer], x[C];
#pragma unroll
        for (int r = 0; r < kPer; ++r) d[r] = ts[(ty + kSide * r) * kScoreStride + t];
#pragma unroll
        for (int c = 0; c < C; ++c) x[c] = qs[t * S + tx + kSide * c];
#pragma unroll
        for (int r = 0; r < kPer; ++r) {
#pragma unroll
          for (int c = 0; c < C; ++c) dk_acc[r][c] = fmaf(d[r], x[c], dk_acc[r][c]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int u = k0 + ty + kSide * r;
    if (u >= T) continue;
    bf16* dk_row = dk + (seq + u) * ldkv + static_cast<std::size_t>(kvh) * hd;
    bf16* dv_row = dv + (seq + u) * ldkv + static_cast<std::size_t>(kvh) * hd;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int i = tx + kSide * c;
      if (i >= hd) continue;
      dk_row[i] = store(load(dk_row[i]) + scale * dk_acc[r][c]);
      dv_row[i] = store(load(dv_row[i]) + dv_acc[r][c]);
    }
  }
}

// dq of query tile (from the last) blockIdx.x of head blockIdx.y in sequence blockIdx.z.
template <int D>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, int ld_out,
              const float* __restrict__ lse, const float* __restrict__ delta,
              const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
              const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd, int window,
              float scale) {
  constexpr int S = D + 1;
  constexpr int C = D / kSide;
  extern __shared__ float smem[];
  float* qs = smem;                           // [kTile][S]
  float* dos = qs + kTile * S;                // [kTile][S]
  float* ks = dos + kTile * S;                // [kTile][S]
  float* vs = ks + kTile * S;                 // [kTile][S]
  float* dss = vs + kTile * S;                // [kTile][kScoreStride]: dS
  float* lse_s = dss + kTile * kScoreStride;  // [kTile]
  float* delta_s = lse_s + kTile;             // [kTile]
  const int tiles = (T + kTile - 1) / kTile;
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / group;
  const int ty = threadIdx.x / kSide, tx = threadIdx.x % kSide;
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const bf16* qh = q + seq * ldq + static_cast<std::size_t>(h) * hd;
  const bf16* doh = dout + seq * ld_out + static_cast<std::size_t>(h) * hd;
  const bf16* kh = k + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  const bf16* vh = v + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  load_tile<D>(qs, qh, ldq, q0, T, hd);
  load_tile<D>(dos, doh, ld_out, q0, T, hd);
  if (threadIdx.x < kTile) {
    const int t = q0 + threadIdx.x;
    const std::size_t at = (static_cast<std::size_t>(b) * NH + h) * T + t;
    lse_s[threadIdx.x] = t < T ? lse[at] : 0.0f;
    delta_s[threadIdx.x] = t < T ? delta[at] : 0.0f;
  }

  float acc[kPer][C];  // query rows ty + 16 r, channels tx + 16 c
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
#pragma unroll
    for (int c = 0; c < C; ++c) acc[r][c] = 0.0f;
  }
  const int last_tile = (min(T, q0 + kTile) - 1) / kTile;
  for (int kt = first_key_tile(q0, window); kt <= last_tile; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of ks, vs and dss are done
    load_tile<D>(ks, kh, ldkv, k0, T, hd);
    load_tile<D>(vs, vh, ldkv, k0, T, hd);
    __syncthreads();
    float s[kPer][kPer] = {}, dp[kPer][kPer] = {};  // query rows ty + 16 r, keys tx + 16 j
    for (int i = 0; i < D; ++i) {
      float qr[kPer], gr[kPer], kc[kPer], vc[kPer];
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
        qr[r] = qs[(ty + kSide * r) * S + i];
        gr[r] = dos[(ty + kSide * r) * S + i];
      }
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        kc[j] = ks[(tx + kSide * j) * S + i];
        vc[j] = vs[(tx + kSide * j) * S + i];
      }
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          s[r][j] = fmaf(qr[r], kc[j], s[r][j]);
          dp[r][j] = fmaf(gr[r], vc[j], dp[r][j]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kPer; ++r) {
      const int tq = ty + kSide * r;
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int u = k0 + tx + kSide * j;
        const float p = visible(q0 + tq, u, T, window) ? expf(s[r][j] * scale - lse_s[tq]) : 0.0f;
        dss[tq * kScoreStride + tx + kSide * j] = p * (dp[r][j] - delta_s[tq]);
      }
    }
    __syncthreads();
    for (int u = 0; u < kTile; ++u) {  // dQ += dS K (scaled at the end)
      float d[kPer], x[C];
#pragma unroll
      for (int r = 0; r < kPer; ++r) d[r] = dss[(ty + kSide * r) * kScoreStride + u];
#pragma unroll
      for (int c = 0; c < C; ++c) x[c] = ks[u * S + tx + kSide * c];
#pragma unroll
      for (int r = 0; r < kPer; ++r) {
#pragma unroll
        for (int c = 0; c < C; ++c) acc[r][c] = fmaf(d[r], x[c], acc[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kPer; ++r) {
    const int t = q0 + ty + kSide * r;
    if (t >= T) continue;
    bf16* row = dq + (seq + t) * ldq + static_cast<std::size_t>(h) * hd;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int i = tx + kSide * c;
      if (i < hd) row[i] = store(load(row[i]) + scale * acc[r][c]);
    }
  }
}

// ---- Launchers ----

// The arguments both passes check: sizes, head grouping and row strides. 0 when valid,
// -1 when there is nothing to do, else cudaErrorInvalidValue.
int check_shape(int ld_out, int ldq, int ldkv, int B, int T, int NH, int NKV, int hd) {
  if (B < 0 || T < 0 || NH < 0) return cudaErrorInvalidValue;
  if (B == 0 || T == 0 || NH == 0) return -1;
  if (hd <= 0 || hd > kMaxHeadDim || NKV <= 0 || NH % NKV != 0) return cudaErrorInvalidValue;
  if (B > kMaxGridYZ || NH > kMaxGridYZ) return cudaErrorInvalidValue;
  if (ldq < NH * hd || ld_out < NH * hd || ldkv < NKV * hd) return cudaErrorInvalidValue;
  return 0;
}

// f(std::integral_constant<int, D>) for D = hd rounded up to 32, 64, 96 or 128.
template <class F>
int with_padded_dim(int hd, F&& f) {
  if (hd <= 32) return f(std::integral_constant<int, 32>{});
  if (hd <= 64) return f(std::integral_constant<int, 64>{});
  if (hd <= 96) return f(std::integral_constant<int, 96>{});
  return f(std::integral_constant<int, 128>{});
}

float softmax_scale(int hd) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
}

template <class Kernel>
cudaError_t allow_smem(Kernel kernel, std::size_t bytes) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(bytes));
}

template <int D>
int launch_forward(Bf16* out, int ld_out, float* lse, const Bf16* q, int ldq, const Bf16* k,
                   const Bf16* v, int ldkv, int B, int T, int NH, int NKV, int hd, int window,
                   cudaStream_t stream) {
  constexpr std::size_t bytes = forward_smem_bytes<D>();
  const cudaError_t allowed = allow_smem(forward_kernel<D>, bytes);
  if (allowed != cudaSuccess) return static_cast<int>(allowed);
  const dim3 grid((T + kTile - 1) / kTile, NH, B);
  forward_kernel<D><<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<bf16*>(out), ld_out, lse, reinterpret_cast<const bf16*>(q), ldq,
      reinterpret_cast<const bf16*>(k), reinterpret_cast<const bf16*>(v), ldkv, T, NH, NH / NKV, hd,
      window, softmax_scale(hd));
  return static_cast<int>(cudaGetLastError());
}

template <int D>
int launch_backward(Bf16* dq, Bf16* dk, Bf16* dv, const Bf16* dout, int ld_out, const float* lse,
                    const float* delta, const Bf16* q, int ldq, const Bf16* k, const Bf16* v,
                    int ldkv, int B, int T, int NH, int NKV, int hd, int window,
                    cudaStream_t stream) {
  constexpr std::size_t bytes = backward_smem_bytes<D>();
  cudaError_t st = allow_smem(dkdv_kernel<D>, bytes);
  if (st == cudaSuccess) st = allow_smem(dq_kernel<D>, bytes);
  if (st != cudaSuccess) return static_cast<int>(st);
  const int tiles = (T + kTile - 1) / kTile;
  const float scale = softmax_scale(hd);
  const bf16* g = reinterpret_cast<const bf16*>(dout);
  const bf16* qb = reinterpret_cast<const bf16*>(q);
  const bf16* kb = reinterpret_cast<const bf16*>(k);
  const bf16* vb = reinterpret_cast<const bf16*>(v);
  dkdv_kernel<D><<<dim3(tiles, NKV, B), kThreads, bytes, stream>>>(
      reinterpret_cast<bf16*>(dk), reinterpret_cast<bf16*>(dv), g, ld_out, lse, delta, qb, ldq, kb,
      vb, ldkv, T, NH, NH / NKV, hd, window, scale);
  st = cudaGetLastError();
  if (st != cudaSuccess) return static_cast<int>(st);
  dq_kernel<D><<<dim3(tiles, NH, B), kThreads, bytes, stream>>>(
      reinterpret_cast<bf16*>(dq), g, ld_out, lse, delta, qb, ldq, kb, vb, ldkv, T, NH, NH / NKV,
      hd, window, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int attention_forward(Bf16* out, int ld_out, float* lse, const Bf16* q, int ldq, const Bf16* k,
                      const Bf16* v, int ldkv, int B, int T, int NH, int NKV, int hd, int window,
                      Stream stream) {
  const int shape = check_shape(ld_out, ldq, ldkv, B, T, NH, NKV, hd);
  if (shape != 0) return shape < 0 ? 0 : shape;
  const auto s = static_cast<cudaStream_t>(stream);
  return with_padded_dim(hd, [&](auto dim) {
    return launch_forward<decltype(dim)::value>(out, ld_out, lse, q, ldq, k, v, ldkv, B, T, NH, NKV,
                                                hd, window, s);
  });
}

int attention_backward(Bf16* dq, Bf16* dk, Bf16* dv, const Bf16* dout, int ld_out, const Bf16* out,
                       const float* lse, const Bf16* q, int ldq, const Bf16* k, const Bf16* v,
                       int ldkv, int B, int T, int NH, int NKV, int hd, int window, float* delta,
                       Stream stream) {
  const int shape = check_shape(ld_out, ldq, ldkv, B, T, NH, NKV, hd);
  if (shape != 0) return shape < 0 ? 0 : shape;
  const auto s = static_cast<cudaStream_t>(stream);
  const std::size_t rows = static_cast<std::size_t>(B) * T * NH;
  const std::size_t warps_per_block = kDeltaThreads / 32;
  const auto blocks = static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block);
  delta_kernel<<<blocks, kDeltaThreads, 0, s>>>(delta, reinterpret_cast<const bf16*>(dout),
                                                reinterpret_cast<const bf16*>(out), ld_out, T, NH,
                                                hd, rows);
  const cudaError_t st = cudaGetLastError();
  if (st != cudaSuccess) return static_cast<int>(st);
  return with_padded_dim(hd, [&](auto dim) {
    return launch_backward<decltype(dim)::value>(dq, dk, dv, dout, ld_out, lse, delta, q, ldq, k, v,
                                                 ldkv, B, T, NH, NKV, hd, window, s);
  });
}

}  // namespace zero::cuda_layers
