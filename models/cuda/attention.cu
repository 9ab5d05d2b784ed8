// Causal attention with grouped key/value heads and an optional window (layers.h), in the
// manner of FlashAttention-2, on tensor cores: scores are made a 64 x 64 tile at a time in
// registers and never stored; the forward keeps each row's log-sum-exp for the backward, which
// recomputes the probabilities from it.
//
// Geometry: the forward and dq kernels run 128 threads as 4 warps, a block's 64-row tile giving
// warp w the rows 16 w .. 16 w + 15; the dk/dv kernel runs 8 warps, two on each 16 keys (at its
// definition). Every product is the warp's mma.sync m16n8k16 (mma.cuh): bf16 operands from
// shared memory or from the scores' own registers, fp32 accumulators. A lane holds rows g and
// g + 8 (g = lane / 4) of each 8-column accumulator tile, so a row's scores lie in the 4 lanes
// of a quad (row reductions: xor shuffles 1 and 2). D is hd rounded up to 32, 64, 96 or 128; the
// tiles hold zeros past hd and past T, so the products over D are the products over hd.
//
// Shared tiles are bf16, row-major with rows padded by 8 elements (16 bytes), so that the 32-bit
// fragment reads of a warp's 8 groups x 4 lanes, and the 16-byte rows of an ldmatrix, fall in
// 32 different banks. A product whose k runs over positions (P V, dS K, P^T dO, dS^T Q) takes its
// B operand across the tile's rows: the forward kernel loads such a tile transposed ("_t": D
// rows of 64 positions); the backward kernels read their row-major tiles with ldmatrix .trans,
// and so copy them from global memory as they lie, asynchronously (async_copy.cuh), each tile
// while the one before computes.
//
// Forward: one block per (query tile, head, sequence), the key tiles from the window's first to
// the diagonal in order, with the online softmax in fp32 and base 2 (running max m and sum l per
// row); the probabilities are rounded to bf16 for P V, as FlashAttention does.
// Backward, with no atomics and a fixed order everywhere (runs repeat bit for bit):
//   1. delta[b, h, t] = dout[t] . out[t] (one warp per row and head);
//   2. dk, dv: one block per (key tile, kv head, sequence), looping over the group's query
//      heads and their query tiles (each tile copied while the one before computes), dk and dv
//      accumulated in registers, each warp a half of the channels, and added to the bf16
//      gradients once;
//   3. dq: one block per (query tile, head, sequence), looping over the key tiles (each copied
//      while the one before computes).
// P = exp(s * scale - lse); dP = dO V^T; dS = P (dP - delta); dV += P^T dO;
// dK += scale dS^T Q; dQ += scale dS K; P and dS are rounded to bf16 as operands.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/async_copy.cuh"
#include "models/cuda/layers.h"
#include "models/cuda/mma.cuh"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;
using u32 = std::uint32_t;

constexpr int kTile = 64;                      // query and key rows per tile
constexpr int kWarps = kTile / 16;             // 16 rows of a tile each
constexpr int kThreads = 32 * kWarps;          // 128
constexpr int kDkdvWarps = 2 * kWarps;         // the dk/dv kernel's: two warps on each 16 keys
constexpr int kDkdvThreads = 32 * kDkdvWarps;  // 256
constexpr int kRowT = kTile + 8;  // a transposed tile's row: 64 positions and the padding
constexpr int kMaxHeadDim = 128;
constexpr int kMaxGridYZ = 65535;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// A row-major tile's row: D channels and the padding.
template <int D>
constexpr int kRow = D + 8;

__device__ __forceinline__ float load(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ bf16 store(float x) {
  return __float2bfloat16_rn(x);
}

// Max and sum over the 4 lanes of a quad, which hold one row (the same bits in each lane).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Whether query position t sees key position u (both may lie past T in a partial tile).
__device__ __forceinline__ bool visible(int t, int u, int T, int window) {
  return t < T && u < T && u <= t && (window <= 0 || u > t - window);
}

// Query tiles of the rows [q0, q0 + 64) read key tiles first_key_tile .. their diagonal.
__device__ __forceinline__ int first_key_tile(int q0, int window) {
  return window > 0 ? max(0, q0 - window + 1) / kTile : 0;
}

// ---- Fragments (mma.cuh) ----

// A lane's place in the fragments: group g = lane / 4, t = lane % 4.
struct Lane {
  int g, t;
};
__device__ __forceinline__ Lane lane_of() {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  return {lane / 4, lane % 4};
}

// Two bf16 at an even offset of a shared tile, as one register.
__device__ __forceinline__ u32 pair_at(const bf16* p) {
  return *reinterpret_cast<const u32*>(p);
}

// A (16 x 16) = tile rows r0 .., columns k0 .. (rows of ld elements).
__device__ __forceinline__ void load_a(u32 (&a)[4], const bf16* tile, int ld, int r0, int k0,
                                       Lane l) {
  const bf16* p = tile + (r0 + l.g) * ld + k0 + 2 * l.t;
  a[0] = pair_at(p);
  a[1] = pair_at(p + 8 * ld);
  a[2] = pair_at(p + 8);
  a[3] = pair_at(p + 8 * ld + 8);
}

// B (16 x 8) with B[k][n] = tile[n0 + n][k0 + k].
__device__ __forceinline__ void load_b(u32 (&b)[2], const bf16* tile, int ld, int n0, int k0,
                                       Lane l) {
  const bf16* p = tile + (n0 + l.g) * ld + k0 + 2 * l.t;
  b[0] = pair_at(p);
  b[1] = pair_at(p + 8);
}

__device__ __forceinline__ u32 pack(float lo, float hi) {
  return static_cast<u32>(__bfloat16_as_ushort(store(lo))) |
         (static_cast<u32>(__bfloat16_as_ushort(store(hi))) << 16);
}

// The A fragment of k-step kk from the accumulator tiles 2 kk (c0) and 2 kk + 1 (c1).
__device__ __forceinline__ void a_from_c(u32 (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack(c0[0], c0[1]);
  a[1] = pack(c0[2], c0[3]);
  a[2] = pack(c1[0], c1[1]);
  a[3] = pack(c1[2], c1[3]);
}

// s[j] (j < J) = rows r0 .. r0 + 15 of `x` times rows n0 .. n0 + 8 J - 1 of `y`, transposed, over
// D channels: the scores of 16 rows against 8 J rows of a tile (J = 8: all 64).
template <int D, int J = 8>
__device__ __forceinline__ void scores(float (&s)[J][4], const bf16* x, const bf16* y, int r0,
                                       int n0, Lane l) {
  constexpr int R = kRow<D>;
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = 0.0f;
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    u32 a[4];
    load_a(a, x, R, r0, 16 * kk, l);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      u32 b[2];
      load_b(b, y, R, n0 + 8 * j, 16 * kk, l);
      mma_bf16_16816(s[j], a, b);
    }
  }
}

// acc[n] (n < D / 8) += p (16 rows x 64 positions, as accumulator tiles) times the transposed
// tile y_t (D rows of 64 positions): a 16 x D product over a tile's positions.
template <int D>
__device__ __forceinline__ void accumulate(float (&acc)[D / 8][4], const float (&p)[8][4],
                                           const bf16* y_t, Lane l) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    u32 a[4];
    a_from_c(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      u32 b[2];
      load_b(b, y_t, kRowT, 8 * n, 16 * kk, l);
      mma_bf16_16816(acc[n], a, b);
    }
  }
}

// acc[n] (n < W / 8) += a, the A fragment of k-step kk (16 rows x positions 16 kk .. 16 kk + 15),
// times those positions' channels c0 .. c0 + W - 1 of the row-major tile y (64 positions of D
// channels), whose B fragments ldmatrix reads across y's rows (mma.cuh).
template <int D, int W>
__device__ __forceinline__ void mma_across_rows(float (&acc)[W / 8][4], const u32 (&a)[4],
                                                const bf16* y, int kk, int c0, Lane l) {
  static_assert(W % 16 == 0, "ldmatrix .x4 reads B for two 8-column tiles at once");
  // Lane 8 i + j gives row j of matrix i: position 16 kk + 8 (i % 2) + j, channels from
  // 8 (i / 2), so that r[0], r[1] are b0, b1 of 8 channels and r[2], r[3] those of the next 8.
  const int lane = 4 * l.g + l.t;
  const bf16* row = y + (16 * kk + lane % 8 + 8 * (lane / 8 % 2)) * kRow<D> + c0 + 8 * (lane / 16);
#pragma unroll
  for (int m = 0; m < W / 16; ++m) {
    u32 r[4];
    load_matrices_x4_trans(r, row + 16 * m);
    const u32 b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
    mma_bf16_16816(acc[2 * m], a, b0);
    mma_bf16_16816(acc[2 * m + 1], a, b1);
  }
}

// acc[n] (n < W / 8) += rows r0 .. r0 + 15 of x_t (64 positions each, rows of kRowT) times
// channels c0 .. c0 + W - 1 of the row-major tile y: a 16 x W product over a tile's positions.
template <int D, int W>
__device__ __forceinline__ void accumulate_rows(float (&acc)[W / 8][4], const bf16* x_t, int r0,
                                                const bf16* y, int c0, Lane l) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    u32 a[4];
    load_a(a, x_t, kRowT, r0, 16 * kk, l);
    mma_across_rows<D, W>(acc, a, y, kk, c0, l);
  }
}

// acc[n] (n < D / 8) += p (16 rows x 64 positions, as accumulator tiles) times the row-major
// tile y: the same product with its A from registers.
template <int D>
__device__ __forceinline__ void accumulate_rows(float (&acc)[D / 8][4], const float (&p)[8][4],
                                                const bf16* y, Lane l) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    u32 a[4];
    a_from_c(a, p[2 * kk], p[2 * kk + 1]);
    mma_across_rows<D, D>(acc, a, y, kk, 0, l);
  }
}

// ---- Tiles ----

// tile[r][i] = head[(first + r) * ld + i] for r < 64, i < D: zero past T and past hd. `head`
// points at the head's first channel in the sequence's first row. `wide`: rows and heads are
// 16-byte aligned and hd a multiple of 8, so eight channels move at a time.
template <int D, int Threads = kThreads>
__device__ void load_rows(bf16* tile, const bf16* head, int ld, int first, int T, int hd,
                          bool wide) {
  constexpr int R = kRow<D>;
  if (wide) {
    constexpr int kChunks = D / 8;
    for (int e = threadIdx.x; e < kTile * kChunks; e += Threads) {
      const int r = e / kChunks, i = (e % kChunks) * 8;
      const int t = first + r;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (t < T && i < hd) {
        x = *reinterpret_cast<const uint4*>(head + static_cast<std::size_t>(t) * ld + i);
      }
      *reinterpret_cast<uint4*>(tile + r * R + i) = x;
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * D; e += Threads) {
    const int r = e / D, i = e % D;
    const int t = first + r;
    bf16 x = __ushort_as_bfloat16(0);
    if (t < T && i < hd) x = head[static_cast<std::size_t>(t) * ld + i];
    tile[r * R + i] = x;
  }
}

// tile_t[i][r] = head[(first + r) * ld + i]: the same tile transposed (rows of kRowT).
template <int D>
__device__ void load_cols(bf16* tile_t, const bf16* head, int ld, int first, int T, int hd,
                          bool wide) {
  if (wide) {
    constexpr int kChunks = D / 8;
    for (int e = threadIdx.x; e < kTile * kChunks; e += kThreads) {
      const int r = e % kTile, i = (e / kTile) * 8;  // neighbouring lanes: neighbouring positions
      const int t = first + r;
      uint4 x = make_uint4(0, 0, 0, 0);
      if (t < T && i < hd) {
        x = *reinterpret_cast<const uint4*>(head + static_cast<std::size_t>(t) * ld + i);
      }
      const u32 words[4] = {x.x, x.y, x.z, x.w};  // channels i + 2 w (low half), i + 2 w + 1
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const auto bits = static_cast<unsigned short>(words[c / 2] >> (16 * (c % 2)));
        tile_t[(i + c) * kRowT + r] = __ushort_as_bfloat16(bits);
      }
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e % kTile, i = e / kTile;
    const int t = first + r;
    bf16 x = __ushort_as_bfloat16(0);
    if (t < T && i < hd) x = head[static_cast<std::size_t>(t) * ld + i];
    tile_t[i * kRowT + r] = x;
  }
}

// load_rows, but `wide` tiles move by asynchronous 16-byte copies (async_copy.cuh) that this
// thread must commit and wait for; the others are stored at once. Either way the tile is whole
// for every thread after the wait and a __syncthreads.
template <int D, int Threads>
__device__ void load_rows_async(bf16* tile, const bf16* head, int ld, int first, int T, int hd,
                                bool wide) {
  if (!wide) {
    load_rows<D, Threads>(tile, head, ld, first, T, hd, false);
    return;
  }
  constexpr int kChunks = D / 8;
  for (int e = threadIdx.x; e < kTile * kChunks; e += Threads) {
    const int r = e / kChunks, i = (e % kChunks) * 8;
    const int t = first + r;
    const bool inside = t < T && i < hd;  // else zeros, and `head` is not read
    copy_async<16>(tile + r * kRow<D> + i,
                   inside ? head + static_cast<std::size_t>(t) * ld + i : head, inside);
  }
}

// values[r] = row[first + r] for r < 64, zero past T: asynchronous 4-byte copies, as above.
template <int Threads>
__device__ void load_values_async(float* values, const float* row, int first, int T) {
  for (int r = threadIdx.x; r < kTile; r += Threads) {
    const bool inside = first + r < T;
    copy_async<4>(values + r, inside ? row + first + r : row, inside);
  }
}

template <int D>
constexpr std::size_t forward_smem_bytes() {
  return (2 * kTile * kRow<D> + D * kRowT) * sizeof(bf16);
}
template <int D>
constexpr std::size_t dkdv_smem_bytes() {
  return (6 * kTile * kRow<D> + 2 * kTile * kRowT) * sizeof(bf16) + 4 * kTile * sizeof(float);
}
template <int D>
constexpr std::size_t dq_smem_bytes() {
  return 6 * kTile * kRow<D> * sizeof(bf16);
}

// ---- Forward ----

template <int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(bf16* __restrict__ out, int ld_out, float* __restrict__ lse,
                   const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
                   const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd,
                   int window, float scale_log2, bool wide) {
  constexpr int R = kRow<D>;
  constexpr int N = D / 8;  // the output's accumulator tiles
  extern __shared__ float smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);  // [kTile][R]
  bf16* ks = qs + kTile * R;                 // [kTile][R]
  bf16* vs_t = ks + kTile * R;               // [D][kRowT]
  const int tiles = (T + kTile - 1) / kTile;
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;  // the longest rows first
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / group;
  const int r0 = static_cast<int>(threadIdx.x) / 32 * 16;  // the warp's rows of the tile
  const Lane l = lane_of();
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const bf16* qh = q + seq * ldq + static_cast<std::size_t>(h) * hd;
  const bf16* kh = k + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  const bf16* vh = v + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  load_rows<D>(qs, qh, ldq, q0, T, hd, wide);

  // The lane's rows g and g + 8 (index r), in base 2: running max m and partial sum l.
  const int t_of[2] = {q0 + r0 + l.g, q0 + r0 + l.g + 8};
  float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
  float o[N][4];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  }
  const int last_tile = (min(T, q0 + kTile) - 1) / kTile;
  for (int kt = first_key_tile(q0, window); kt <= last_tile; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's readers of ks and vs_t are done
    load_rows<D>(ks, kh, ldkv, k0, T, hd, wide);
    load_cols<D>(vs_t, vh, ldkv, k0, T, hd, wide);
    __syncthreads();
    float s[8][4];
    scores<D>(s, qs, ks, r0, 0, l);
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int u = k0 + 8 * j + 2 * l.t + e % 2;
        s[j][e] = visible(t_of[e / 2], u, T, window) ? s[j][e] * scale_log2 : -INFINITY;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
      }
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(tile_max[r]));
      // A row that has seen no key yet keeps m = -inf; exp2(-inf - 0) = 0 keeps it empty.
      base[r] = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = exp2f(m[r] - base[r]);
      lsum[r] *= correction;
      m[r] = m_new;
#pragma unroll
      for (int n = 0; n < N; ++n) {
        o[n][2 * r] *= correction;
        o[n][2 * r + 1] *= correction;
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - base[e / 2]);
        lsum[e / 2] += s[j][e];
      }
    }
    accumulate<D>(o, s, vs_t, l);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(lsum[r]);
    const int t = t_of[r];
    if (t >= T) continue;
    const float inverse = 1.0f / sum;
    bf16* row = out + (seq + t) * ld_out + static_cast<std::size_t>(h) * hd;
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 8 * n + 2 * l.t + e;
        if (i < hd) row[i] = store(o[n][2 * r + e] * inverse);
      }
    }
    if (l.t == 0) {
      lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = (m[r] + log2f(sum)) * kLn2;
    }
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

// dk, dv of key tile blockIdx.x of kv head blockIdx.y in sequence blockIdx.z: one step per query
// tile that sees these keys, for each query head of the group in turn. 8 warps; warp w has the
// keys r0 = 16 (w % 4) .. r0 + 15 and the half c = w / 4. In each step it makes the transposed
// scores of its keys against queries 32 c .. 32 c + 31 (keys x queries: P^T, then dS^T), puts them
// in shared memory as bf16, and after a barrier adds to dV and dK of its keys, over channels
// c D / 2 .. c D / 2 + D / 2 - 1, their products with dO and Q over all 64 queries: each lane
// holds D / 2 accumulators of each, not D. The next step's query tile, dO tile, lse and delta
// are copied (cp.async) into the other of two buffers while a step computes.
//
// Shared memory: ks, vs [64][D + 8]; qs, dos [2][64][D + 8]; ps_t, dss_t [64][72] (bf16);
// lse_s, delta_s [2][64] (fp32).
template <int D>
__global__ void __launch_bounds__(kDkdvThreads)
    dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                int ld_out, const float* __restrict__ lse, const float* __restrict__ delta,
                const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
                const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd, int window,
                float scale, bool wide) {
  constexpr int R = kRow<D>;
  constexpr int W = D / 2;  // the channels of dK and dV a warp accumulates
  constexpr int N = W / 8;
  extern __shared__ float smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);                              // [kTile][R]
  bf16* vs = ks + kTile * R;                                             // [kTile][R]
  bf16* qs_buffers = vs + kTile * R;                                     // [2][kTile][R]
  bf16* dos_buffers = qs_buffers + 2 * kTile * R;                        // [2][kTile][R]
  bf16* ps_t = dos_buffers + 2 * kTile * R;                              // [kTile][kRowT]
  bf16* dss_t = ps_t + kTile * kRowT;                                    // [kTile][kRowT]
  float* lse_buffers = reinterpret_cast<float*>(dss_t + kTile * kRowT);  // [2][kTile]
  float* delta_buffers = lse_buffers + 2 * kTile;                        // [2][kTile]
  const int k0 = static_cast<int>(blockIdx.x) * kTile;  // the earliest keys (most work) first
  const int kvh = blockIdx.y, b = blockIdx.z;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int r0 = warp % kWarps * 16;  // the warp's keys
  const int c = warp / kWarps;        // its half: of the queries in scores, of D in dK and dV
  const Lane l = lane_of();
  const float scale_log2 = scale * kLog2e;
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const std::size_t kv_at = seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  // The query tiles that see these keys: from the diagonal to the window's end.
  const int k_last = min(T, k0 + kTile) - 1;
  const int t_last = window > 0 ? min(T - 1, k_last + window - 1) : T - 1;
  const int first_tile = k0 / kTile, tiles_per_head = t_last / kTile - first_tile + 1;
  const int steps = group * tiles_per_head;
  const int u_of[2] = {k0 + r0 + l.g, k0 + r0 + l.g + 8};  // the lane's keys

  // Step s: query head kvh * group + s / tiles_per_head, its query tile from the diagonal's.
  const auto head_of = [&](int s) { return kvh * group + s / tiles_per_head; };
  const auto q0_of = [&](int s) { return (first_tile + s % tiles_per_head) * kTile; };
  // Copies step s's tiles into buffer s % 2 and commits them (with whatever came before).
  const auto load_step = [&](int s) {
    const int h = head_of(s), q0 = q0_of(s), buffer = s % 2;
    const std::size_t rows = (static_cast<std::size_t>(b) * NH + h) * T;
    load_rows_async<D, kDkdvThreads>(qs_buffers + buffer * kTile * R,
                                     q + seq * ldq + static_cast<std::size_t>(h) * hd, ldq, q0, T,
                                     hd, wide);
    load_rows_async<D, kDkdvThreads>(dos_buffers + buffer * kTile * R,
                                     dout + seq * ld_out + static_cast<std::size_t>(h) * hd, ld_out,
                                     q0, T, hd, wide);
    load_values_async<kDkdvThreads>(lse_buffers + buffer * kTile, lse + rows, q0, T);
    load_values_async<kDkdvThreads>(delta_buffers + buffer * kTile, delta + rows, q0, T);
    commit_copies();
  };
  load_rows_async<D, kDkdvThreads>(ks, k + kv_at, ldkv, k0, T, hd, wide);
  load_rows_async<D, kDkdvThreads>(vs, v + kv_at, ldkv, k0, T, hd, wide);
  load_step(0);

  float dk_acc[N][4], dv_acc[N][4];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;
  }
  for (int s = 0; s < steps; ++s) {
    wait_copies<0>();
    // Step s's tiles are whole, and every warp is done with step s - 1: its buffer, ps_t, dss_t.
    __syncthreads();
    if (s + 1 < steps) load_step(s + 1);
    const int q0 = q0_of(s), buffer = s % 2;
    const bf16* qs = qs_buffers + buffer * kTile * R;
    const bf16* dos = dos_buffers + buffer * kTile * R;
    const float* lse_s = lse_buffers + buffer * kTile;
    const float* delta_s = delta_buffers + buffer * kTile;
    float p[4][4], ds[4][4];  // keys x the half's queries: P^T, then dP^T, then dS^T
    scores<D, 4>(p, ks, qs, r0, 32 * c, l);
    scores<D, 4>(ds, vs, dos, r0, 32 * c, l);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tq = 32 * c + 8 * j + 2 * l.t + e % 2;
        const float pe = visible(q0 + tq, u_of[e / 2], T, window)
                             ? exp2f(p[j][e] * scale_log2 - lse_s[tq] * kLog2e)
                             : 0.0f;
        p[j][e] = pe;
        ds[j][e] = pe * (ds[j][e] - delta_s[tq]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int at = (r0 + l.g + 8 * r) * kRowT + 32 * c + 8 * j + 2 * l.t;
        *reinterpret_cast<u32*>(ps_t + at) = pack(p[j][2 * r], p[j][2 * r + 1]);
        *reinterpret_cast<u32*>(dss_t + at) = pack(ds[j][2 * r], ds[j][2 * r + 1]);
      }
    }
    __syncthreads();  // both halves of the warp's keys' P^T and dS^T are in place
    accumulate_rows<D, W>(dv_acc, ps_t, r0, dos, c * W, l);  // dV += P^T dO
    accumulate_rows<D, W>(dk_acc, dss_t, r0, qs, c * W, l);  // dK += dS^T Q (scaled at the end)
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int u = u_of[r];
    if (u >= T) continue;
    bf16* dk_row = dk + (seq + u) * ldkv + static_cast<std::size_t>(kvh) * hd;
    bf16* dv_row = dv + (seq + u) * ldkv + static_cast<std::size_t>(kvh) * hd;
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = c * W + 8 * n + 2 * l.t + e;
        if (i >= hd) continue;
        dk_row[i] = store(load(dk_row[i]) + scale * dk_acc[n][2 * r + e]);
        dv_row[i] = store(load(dv_row[i]) + dv_acc[n][2 * r + e]);
      }
    }
  }
}

// dq of query tile (from the last) blockIdx.x of head blockIdx.y in sequence blockIdx.z, over
// the key tiles it sees in order; each key tile and its values are copied (cp.async) into the
// other of two buffers while the tile before computes, and dS K reads K's rows by ldmatrix.
//
// Shared memory: qs, dos [64][D + 8]; ks, vs [2][64][D + 8].
template <int D>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, int ld_out,
              const float* __restrict__ lse, const float* __restrict__ delta,
              const bf16* __restrict__ q, int ldq, const bf16* __restrict__ k,
              const bf16* __restrict__ v, int ldkv, int T, int NH, int group, int hd, int window,
              float scale, bool wide) {
  constexpr int R = kRow<D>;
  constexpr int N = D / 8;
  extern __shared__ float smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);       // [kTile][R]
  bf16* dos = qs + kTile * R;                     // [kTile][R]
  bf16* ks_buffers = dos + kTile * R;             // [2][kTile][R]
  bf16* vs_buffers = ks_buffers + 2 * kTile * R;  // [2][kTile][R]
  const int tiles = (T + kTile - 1) / kTile;
  const int q0 = (tiles - 1 - static_cast<int>(blockIdx.x)) * kTile;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / group;
  const int r0 = static_cast<int>(threadIdx.x) / 32 * 16;
  const Lane l = lane_of();
  const float scale_log2 = scale * kLog2e;
  const std::size_t seq = static_cast<std::size_t>(b) * T;
  const bf16* qh = q + seq * ldq + static_cast<std::size_t>(h) * hd;
  const bf16* doh = dout + seq * ld_out + static_cast<std::size_t>(h) * hd;
  const bf16* kh = k + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  const bf16* vh = v + seq * ldkv + static_cast<std::size_t>(kvh) * hd;
  const int first_tile = first_key_tile(q0, window);
  const int last_tile = (min(T, q0 + kTile) - 1) / kTile;
  // Copies key tile kt and its values into buffer (kt - first_tile) % 2 and commits them (with
  // whatever came before).
  const auto load_keys = [&](int kt) {
    const int buffer = (kt - first_tile) % 2;
    load_rows_async<D, kThreads>(ks_buffers + buffer * kTile * R, kh, ldkv, kt * kTile, T, hd,
                                 wide);
    load_rows_async<D, kThreads>(vs_buffers + buffer * kTile * R, vh, ldkv, kt * kTile, T, hd,
                                 wide);
    commit_copies();
  };
  load_rows_async<D, kThreads>(qs, qh, ldq, q0, T, hd, wide);
  load_rows_async<D, kThreads>(dos, doh, ld_out, q0, T, hd, wide);
  load_keys(first_tile);
  const int t_of[2] = {q0 + r0 + l.g, q0 + r0 + l.g + 8};  // the lane's queries
  float lse_of[2], delta_of[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const std::size_t at = (static_cast<std::size_t>(b) * NH + h) * T + t_of[r];
    lse_of[r] = t_of[r] < T ? lse[at] * kLog2e : 0.0f;
    delta_of[r] = t_of[r] < T ? delta[at] : 0.0f;
  }

  float acc[N][4];
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
  }
  for (int kt = first_tile; kt <= last_tile; ++kt) {
    wait_copies<0>();
    // Key tile kt is whole, and every warp is done with the tile before, whose buffer refills.
    __syncthreads();
    if (kt < last_tile) load_keys(kt + 1);
    const int k0 = kt * kTile, buffer = (kt - first_tile) % 2;
    const bf16* ks = ks_buffers + buffer * kTile * R;
    const bf16* vs = vs_buffers + buffer * kTile * R;
    float s[8][4], ds[8][4];  // queries x keys: the scores, then dP, then dS
    scores<D>(s, qs, ks, r0, 0, l);
    scores<D>(ds, dos, vs, r0, 0, l);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int u = k0 + 8 * j + 2 * l.t + e % 2;
        const int r = e / 2;
        const float pe =
            visible(t_of[r], u, T, window) ? exp2f(s[j][e] * scale_log2 - lse_of[r]) : 0.0f;
        ds[j][e] = pe * (ds[j][e] - delta_of[r]);
      }
    }
    accumulate_rows<D>(acc, ds, ks, l);  // dQ += dS K (scaled at the end)
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int t = t_of[r];
    if (t >= T) continue;
    bf16* row = dq + (seq + t) * ldq + static_cast<std::size_t>(h) * hd;
#pragma unroll
    for (int n = 0; n < N; ++n) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = 8 * n + 2 * l.t + e;
        if (i < hd) row[i] = store(load(row[i]) + scale * acc[n][2 * r + e]);
      }
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

// Whether every tile row the kernels read can move 16 bytes at a time: the heads' bases
// 16-byte aligned, and every row stride and hd a multiple of 8 elements.
bool rows_are_wide(std::initializer_list<const Bf16*> bases, std::initializer_list<int> strides,
                   int hd) {
  if (hd % 8 != 0) return false;
  for (const Bf16* base : bases) {
    if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0) return false;
  }
  for (int ld : strides) {
    if (ld % 8 != 0) return false;
  }
  return true;
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
  const bool wide = rows_are_wide({q, k, v}, {ldq, ldkv}, hd);
  const dim3 grid((T + kTile - 1) / kTile, NH, B);
  forward_kernel<D><<<grid, kThreads, bytes, stream>>>(
      reinterpret_cast<bf16*>(out), ld_out, lse, reinterpret_cast<const bf16*>(q), ldq,
      reinterpret_cast<const bf16*>(k), reinterpret_cast<const bf16*>(v), ldkv, T, NH, NH / NKV, hd,
      window, softmax_scale(hd) * kLog2e, wide);
  return static_cast<int>(cudaGetLastError());
}

template <int D>
int launch_backward(Bf16* dq, Bf16* dk, Bf16* dv, const Bf16* dout, int ld_out, const float* lse,
                    const float* delta, const Bf16* q, int ldq, const Bf16* k, const Bf16* v,
                    int ldkv, int B, int T, int NH, int NKV, int hd, int window,
                    cudaStream_t stream) {
  constexpr std::size_t dkdv_bytes = dkdv_smem_bytes<D>();
  constexpr std::size_t dq_bytes = dq_smem_bytes<D>();
  cudaError_t st = allow_smem(dkdv_kernel<D>, dkdv_bytes);
  if (st == cudaSuccess) st = allow_smem(dq_kernel<D>, dq_bytes);
  if (st != cudaSuccess) return static_cast<int>(st);
  const int tiles = (T + kTile - 1) / kTile;
  const float scale = softmax_scale(hd);
  const bool wide = rows_are_wide({q, k, v, dout}, {ldq, ldkv, ld_out}, hd);
  const bf16* g = reinterpret_cast<const bf16*>(dout);
  const bf16* qb = reinterpret_cast<const bf16*>(q);
  const bf16* kb = reinterpret_cast<const bf16*>(k);
  const bf16* vb = reinterpret_cast<const bf16*>(v);
  dkdv_kernel<D><<<dim3(tiles, NKV, B), kDkdvThreads, dkdv_bytes, stream>>>(
      reinterpret_cast<bf16*>(dk), reinterpret_cast<bf16*>(dv), g, ld_out, lse, delta, qb, ldq, kb,
      vb, ldkv, T, NH, NH / NKV, hd, window, scale, wide);
  st = cudaGetLastError();
  if (st != cudaSuccess) return static_cast<int>(st);
  dq_kernel<D><<<dim3(tiles, NH, B), kThreads, dq_bytes, stream>>>(
      reinterpret_cast<bf16*>(dq), g, ld_out, lse, delta, qb, ldq, kb, vb, ldkv, T, NH, NH / NKV,
      hd, window, scale, wide);
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
