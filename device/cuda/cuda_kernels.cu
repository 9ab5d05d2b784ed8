// The CUDA device's kernels (see cuda_kernels.h). CUDA C++17: it cannot include base/half.h,
// so its rounding comes restated on raw bits from device/cuda/half.cuh.
//
// Every kernel is a grid-stride loop over "packs" of N elements (16 bytes of the widest
// format involved) for the aligned body of the buffer, plus a grid-stride loop over the
// scalar elements before and after it. Where the addresses do not allow packs (for a cast,
// source and destination misaligned differently) every element is scalar.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/block_quant.h"
#include "device/cuda/cuda_kernels.h"
#include "device/cuda/half.cuh"

namespace zero::cuda {
namespace {

using u16 = unsigned short;
using u32 = unsigned int;

constexpr unsigned kThreads = 256;
constexpr std::size_t kMaxBlocks = 4096;
static_assert(kSumSquaresPartials <= kMaxBlocks,
              "the sum of squares caps its grid at the partials");

// ---- Rounding: device/cuda/half.cuh, bit for bit as base/half.h ----

// x * factor in fp32 with the NaN bits the host CPU's multiplication gives (the reference
// runs there): a NaN operand comes back quieted with its sign and payload (x first), and a
// NaN made from non-NaN operands (inf * 0) is the host's default NaN. The GPU alone would
// return its canonical 0x7fffffff, which base/half.h's NaN rule would then make visible.
__device__ __forceinline__ float multiply(float x, float factor, u32 default_nan) {
  const float product = __fmul_rn(x, factor);
  const u32 product_bits = __float_as_uint(product);
  if ((product_bits & 0x7fffffffu) <= 0x7f800000u) return product;
  const u32 x_bits = __float_as_uint(x);
  if ((x_bits & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(x_bits | 0x00400000u);
  const u32 factor_bits = __float_as_uint(factor);
  if ((factor_bits & 0x7fffffffu) > 0x7f800000u) {
    return __uint_as_float(factor_bits | 0x00400000u);
  }
  return __uint_as_float(default_nan);
}

// ---- The formats ----

struct F32 {
  using Storage = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
  __device__ static bool nonfinite(float v) {
    return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
  }
};

struct F16 {
  using Storage = u16;
  __device__ static float load(u16 v) { return fp16_to_float(v); }
  __device__ static u16 store(float v) { return float_to_fp16(v); }
  __device__ static bool nonfinite(u16 v) { return (v & 0x7c00u) == 0x7c00u; }
};

struct BF16 {
  using Storage = u16;
  __device__ static float load(u16 v) { return bf16_to_float(v); }
  __device__ static u16 store(float v) { return float_to_bf16(v); }
  __device__ static bool nonfinite(u16 v) { return (v & 0x7f80u) == 0x7f80u; }
};

// N elements moved as one aligned access.
template <class S, int N>
struct alignas(sizeof(S) * N) Pack {
  S v[N];
};

// ---- The split of a buffer into scalar head, aligned packs and scalar tail ----

struct Split {
  std::size_t count = 0;
  std::size_t pack_size = 1;  // N
  std::size_t head = 0;       // scalar elements [0, head) come before the packs
  std::size_t packs = 0;      // packs of N elements from element `head`
  // The scalar elements: the head and the tail after the packs.
  __host__ __device__ std::size_t scalars() const { return count - packs * pack_size; }
  __host__ __device__ std::size_t body_end() const { return head + packs * pack_size; }
  // The element index of the s-th scalar element.
  __device__ std::size_t scalar_index(std::size_t s) const {
    return s < head ? s : body_end() + (s - head);
  }
};

// Elements before `address` reaches a multiple of `pack_bytes`, capped at count.
std::size_t elements_to_alignment(const void* address, std::size_t element_bytes,
                                  std::size_t pack_bytes, std::size_t count) {
  const std::uintptr_t misalignment = reinterpret_cast<std::uintptr_t>(address) % pack_bytes;
  const std::size_t head = misalignment == 0 ? 0 : (pack_bytes - misalignment) / element_bytes;
  return head < count ? head : count;
}

bool aligned_to(const void* address, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(address) % bytes == 0;
}

template <class S, int N>
Split split_one(const void* data, std::size_t count) {
  Split split;
  split.count = count;
  split.pack_size = N;
  split.head = elements_to_alignment(data, sizeof(S), sizeof(S) * N, count);
  split.packs = (count - split.head) / N;
  return split;
}

// For a cast: packs only where the destination is aligned at the source's first pack.
template <class S, class D, int N>
Split split_two(const void* src, const void* dst, std::size_t count) {
  Split split = split_one<S, N>(src, count);
  const char* dst_at_body = static_cast<const char*>(dst) + split.head * sizeof(D);
  if (!aligned_to(dst_at_body, sizeof(D) * N)) {
    split.head = count;
    split.packs = 0;
  }
  return split;
}

unsigned grid_for(const Split& split, std::size_t max_blocks) {
  const std::size_t units = split.packs + split.scalars();
  std::size_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks == 0) blocks = 1;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ std::size_t thread_count() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// ---- Kernels ----

template <class Src, class Dst, int N>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const typename Src::Storage* __restrict__ src,
                typename Dst::Storage* __restrict__ dst, Split split) {
  using SPack = Pack<typename Src::Storage, N>;
  using DPack = Pack<typename Dst::Storage, N>;
  const std::size_t first = thread_index();
  const std::size_t stride = thread_count();
  const std::size_t scalars = split.scalars();
  for (std::size_t s = first; s < scalars; s += stride) {
    const std::size_t i = split.scalar_index(s);
    dst[i] = Dst::store(Src::load(src[i]));
  }
  const SPack* in = reinterpret_cast<const SPack*>(src + split.head);
  DPack* out = reinterpret_cast<DPack*>(dst + split.head);
  for (std::size_t p = first; p < split.packs; p += stride) {
    const SPack x = in[p];
    DPack y;
#pragma unroll
    for (int j = 0; j < N; ++j) y.v[j] = Dst::store(Src::load(x.v[j]));
    out[p] = y;
  }
}

template <class Fmt, int N>
__global__ void __launch_bounds__(kThreads)
    scale_kernel(typename Fmt::Storage* __restrict__ data, Split split, float factor,
                 u32 default_nan) {
  using P = Pack<typename Fmt::Storage, N>;
  const std::size_t first = thread_index();
  const std::size_t stride = thread_count();
  const std::size_t scalars = split.scalars();
  for (std::size_t s = first; s < scalars; s += stride) {
    const std::size_t i = split.scalar_index(s);
    data[i] = Fmt::store(multiply(Fmt::load(data[i]), factor, default_nan));
  }
  P* packs = reinterpret_cast<P*>(data + split.head);
  for (std::size_t p = first; p < split.packs; p += stride) {
    P x = packs[p];
#pragma unroll
    for (int j = 0; j < N; ++j)
      x.v[j] = Fmt::store(multiply(Fmt::load(x.v[j]), factor, default_nan));
    packs[p] = x;
  }
}

template <class Src, class Dst>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(const typename Src::Storage* __restrict__ src,
                      typename Dst::Storage* __restrict__ dst, std::size_t count, float factor) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < count; i += stride) {
    dst[i] = Dst::store(__fadd_rn(Dst::load(dst[i]), __fmul_rn(Src::load(src[i]), factor)));
  }
}

template <class Fmt, int N>
__global__ void __launch_bounds__(kThreads)
    fill_kernel(typename Fmt::Storage* __restrict__ data, Split split, float value) {
  using S = typename Fmt::Storage;
  using P = Pack<S, N>;
  const S bits = Fmt::store(value);
  const std::size_t first = thread_index();
  const std::size_t stride = thread_count();
  const std::size_t scalars = split.scalars();
  for (std::size_t s = first; s < scalars; s += stride) data[split.scalar_index(s)] = bits;
  P x;
#pragma unroll
  for (int j = 0; j < N; ++j) x.v[j] = bits;
  P* packs = reinterpret_cast<P*>(data + split.head);
  for (std::size_t p = first; p < split.packs; p += stride) packs[p] = x;
}

// Sums `value` over the block in a fixed tree order; the total is valid in thread 0.
__device__ double block_sum(double value) {
  __shared__ double shared[kThreads];
  shared[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (unsigned offset = kThreads / 2; offset > 0; offset >>= 1) {
    if (threadIdx.x < offset) shared[threadIdx.x] += shared[threadIdx.x + offset];
    __syncthreads();
  }
  return shared[0];
}

template <class Fmt, int N>
__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(const typename Fmt::Storage* __restrict__ data, Split split,
                       double* __restrict__ partials) {
  using P = Pack<typename Fmt::Storage, N>;
  const std::size_t first = thread_index();
  const std::size_t stride = thread_count();
  const std::size_t scalars = split.scalars();
  double sum = 0.0;
  for (std::size_t s = first; s < scalars; s += stride) {
    const double x = Fmt::load(data[split.scalar_index(s)]);
    sum += x * x;
  }
  const P* packs = reinterpret_cast<const P*>(data + split.head);
  for (std::size_t p = first; p < split.packs; p += stride) {
    const P x = packs[p];
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const double v = Fmt::load(x.v[j]);
      sum += v * v;
    }
  }
  const double total = block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads)
    sum_partials_kernel(const double* __restrict__ partials, unsigned blocks,
                        float* __restrict__ accumulator) {
  double sum = 0.0;
  for (unsigned b = threadIdx.x; b < blocks; b += kThreads) sum += partials[b];
  const double total = block_sum(sum);
  if (threadIdx.x == 0) {
    *accumulator = __double2float_rn(static_cast<double>(*accumulator) + total);
  }
}

template <class Fmt, int N>
__global__ void __launch_bounds__(kThreads)
    check_finite_kernel(const typename Fmt::Storage* __restrict__ data, Split split,
                        float* __restrict__ flag) {
  using P = Pack<typename Fmt::Storage, N>;
  const std::size_t first = thread_index();
  const std::size_t stride = thread_count();
  const std::size_t scalars = split.scalars();
  bool found = false;
  for (std::size_t s = first; s < scalars; s += stride) {
    found |= Fmt::nonfinite(data[split.scalar_index(s)]);
  }
  const P* packs = reinterpret_cast<const P*>(data + split.head);
  for (std::size_t p = first; p < split.packs; p += stride) {
    const P x = packs[p];
#pragma unroll
    for (int j = 0; j < N; ++j) found |= Fmt::nonfinite(x.v[j]);
  }
  if (__syncthreads_or(found ? 1 : 0) != 0 && threadIdx.x == 0) *flag = 1.0f;
}

// ---- Dispatch ----

// Elements per 16-byte pack of a format.
template <class Fmt>
constexpr int kPack = static_cast<int>(16 / sizeof(typename Fmt::Storage));

// The NaN the host CPU makes from non-NaN operands (x86: 0xffc00000), computed at run time so
// that the compiler cannot fold it.
u32 compute_host_default_nan() {
  volatile float infinity = INFINITY;
  volatile float zero = 0.0f;
  const float nan = infinity * zero;
  u32 bits;
  std::memcpy(&bits, &nan, sizeof bits);
  return bits;
}

u32 host_default_nan() {
  static const u32 bits = compute_host_default_nan();
  return bits;
}

template <class Src, class Dst>
void cast_as(const void* src, void* dst, std::size_t count, cudaStream_t stream) {
  constexpr int N = (kPack<Src> < kPack<Dst>) ? kPack<Src> : kPack<Dst>;
  using SS = typename Src::Storage;
  using DS = typename Dst::Storage;
  const Split split = split_two<SS, DS, N>(src, dst, count);
  cast_kernel<Src, Dst, N><<<grid_for(split, kMaxBlocks), kThreads, 0, stream>>>(
      static_cast<const SS*>(src), static_cast<DS*>(dst), split);
}

template <class Src>
cudaError_t cast_from(const void* src, void* dst, Format dst_format, std::size_t count,
                      cudaStream_t stream) {
  switch (dst_format) {
    case Format::f32:
      cast_as<Src, F32>(src, dst, count, stream);
      return cudaGetLastError();
    case Format::f16:
      cast_as<Src, F16>(src, dst, count, stream);
      return cudaGetLastError();
    case Format::bf16:
      cast_as<Src, BF16>(src, dst, count, stream);
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

// ---- Block int8 quantization ----

static_assert(kQuantBlock == kThreads, "one thread per value of a quantization block");

// A packed chunk's layout (base/block_quant.h), computed on the host.
struct QuantShape {
  std::size_t blocks;       // scales, at the chunk's start
  std::size_t chunk_bytes;  // from one chunk to the next
};

QuantShape quant_shape(std::size_t count) {
  return {block_quant_blocks(count), block_quant_bytes(count)};
}

template <class Fmt>
__global__ void __launch_bounds__(kThreads)
    quantize_kernel(const typename Fmt::Storage* __restrict__ src, std::size_t count,
                    std::size_t parts, QuantShape shape, unsigned char* __restrict__ packed) {
  __shared__ float warp_max[kThreads / 32];
  const std::size_t blocks = shape.blocks;
  const std::size_t chunk_bytes = shape.chunk_bytes;
  for (std::size_t job = blockIdx.x; job < parts * blocks; job += gridDim.x) {
    const std::size_t k = job / blocks;
    const std::size_t b = job % blocks;
    const std::size_t i = b * kQuantBlock + threadIdx.x;
    const bool in = i < count;
    const float x = in ? Fmt::load(src[k * count + i]) : 0.0f;
    const bool bad = in && (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u;
    float a = fabsf(x);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, offset));
    }
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = a;
    const int any_bad = __syncthreads_or(bad ? 1 : 0);  // also publishes warp_max
    float amax = warp_max[0];
#pragma unroll
    for (unsigned w = 1; w < kThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
    const float scale = any_bad ? __uint_as_float(0x7fc00000u) : __fdiv_rn(amax, 127.0f);
    unsigned char* chunk = packed + k * chunk_bytes;
    if (threadIdx.x == 0) reinterpret_cast<float*>(chunk)[b] = scale;
    signed char* values = reinterpret_cast<signed char*>(chunk + 4 * blocks);
    if (in) {
      float q = 0.0f;
      if (!any_bad && scale != 0.0f) q = fminf(fmaxf(rintf(__fdiv_rn(x, scale)), -127.0f), 127.0f);
      values[i] = static_cast<signed char>(static_cast<int>(q));
    }
    // The padding to 4 bytes after the last value.
    const std::size_t padded = (count + 3) / 4 * 4;
    if (b == blocks - 1 && count + threadIdx.x < padded) values[count + threadIdx.x] = 0;
    __syncthreads();  // warp_max is read before the next job writes it
  }
}

__device__ __forceinline__ float dequantized(const unsigned char* __restrict__ chunk,
                                             QuantShape shape, std::size_t i) {
  const float scale = reinterpret_cast<const float*>(chunk)[i / kQuantBlock];
  const signed char q = reinterpret_cast<const signed char*>(chunk + 4 * shape.blocks)[i];
  return __fmul_rn(static_cast<float>(q), scale);
}

template <class Fmt>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const unsigned char* __restrict__ packed, std::size_t count,
                      std::size_t parts, QuantShape shape,
                      typename Fmt::Storage* __restrict__ dst) {
  for (std::size_t e = thread_index(); e < count * parts; e += thread_count()) {
    const std::size_t k = e / count;
    dst[e] = Fmt::store(dequantized(packed + k * shape.chunk_bytes, shape, e - k * count));
  }
}

template <class Fmt>
__global__ void __launch_bounds__(kThreads)
    dequantize_sum_kernel(const unsigned char* __restrict__ packed, std::size_t count,
                          std::size_t parts, QuantShape shape,
                          typename Fmt::Storage* __restrict__ dst) {
  for (std::size_t i = thread_index(); i < count; i += thread_count()) {
    float sum = 0.0f;
    for (std::size_t k = 0; k < parts; ++k) {
      sum = __fadd_rn(sum, dequantized(packed + k * shape.chunk_bytes, shape, i));
    }
    dst[i] = Fmt::store(sum);
  }
}

// Calls `launch.template operator()<Fmt>()` for the format; returns the launch status.
template <class Launch>
cudaError_t dispatch(Format format, Launch launch) {
  switch (format) {
    case Format::f32:
      launch(F32{});
      return cudaGetLastError();
    case Format::f16:
      launch(F16{});
      return cudaGetLastError();
    case Format::bf16:
      launch(BF16{});
      return cudaGetLastError();
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_cast(const void* src, Format src_format, void* dst, Format dst_format,
                        std::size_t count, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  if (src_format == dst_format) return cudaErrorInvalidValue;  // the caller copies instead
  switch (src_format) {
    case Format::f32:
      return cast_from<F32>(src, dst, dst_format, count, stream);
    case Format::f16:
      return cast_from<F16>(src, dst, dst_format, count, stream);
    case Format::bf16:
      return cast_from<BF16>(src, dst, dst_format, count, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_scale(void* data, Format format, std::size_t count, float factor,
                         cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  const u32 default_nan = host_default_nan();
  return dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    constexpr int N = kPack<Fmt>;
    const Split split = split_one<typename Fmt::Storage, N>(data, count);
    scale_kernel<Fmt, N><<<grid_for(split, kMaxBlocks), kThreads, 0, stream>>>(
        static_cast<typename Fmt::Storage*>(data), split, factor, default_nan);
  });
}

cudaError_t launch_accumulate(const void* src, Format src_format, void* dst, Format dst_format,
                              std::size_t count, float factor, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  std::size_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  const unsigned grid = static_cast<unsigned>(blocks);
  return dispatch(src_format, [&](auto src_fmt) {
    using Src = decltype(src_fmt);
    dispatch(dst_format, [&](auto dst_fmt) {
      using Dst = decltype(dst_fmt);
      accumulate_kernel<Src, Dst>
          <<<grid, kThreads, 0, stream>>>(static_cast<const typename Src::Storage*>(src),
                                          static_cast<typename Dst::Storage*>(dst), count, factor);
    });
  });
}

cudaError_t launch_fill(void* data, Format format, std::size_t count, float value,
                        cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  return dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    constexpr int N = kPack<Fmt>;
    const Split split = split_one<typename Fmt::Storage, N>(data, count);
    fill_kernel<Fmt, N><<<grid_for(split, kMaxBlocks), kThreads, 0, stream>>>(
        static_cast<typename Fmt::Storage*>(data), split, value);
  });
}

cudaError_t launch_sum_squares(const void* data, Format format, std::size_t count, double* partials,
                               float* accumulator, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  unsigned blocks = 0;
  const cudaError_t status = dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    constexpr int N = kPack<Fmt>;
    const Split split = split_one<typename Fmt::Storage, N>(data, count);
    blocks = grid_for(split, kSumSquaresPartials);
    sum_squares_kernel<Fmt, N><<<blocks, kThreads, 0, stream>>>(
        static_cast<const typename Fmt::Storage*>(data), split, partials);
  });
  if (status != cudaSuccess) return status;
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(partials, blocks, accumulator);
  return cudaGetLastError();
}

cudaError_t launch_quantize(const void* src, Format format, std::size_t count, std::size_t parts,
                            void* packed, cudaStream_t stream) noexcept {
  const std::size_t jobs = block_quant_blocks(count) * parts;
  if (jobs == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(jobs < kMaxBlocks ? jobs : kMaxBlocks);
  return dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    quantize_kernel<Fmt><<<grid, kThreads, 0, stream>>>(
        static_cast<const typename Fmt::Storage*>(src), count, parts, quant_shape(count),
        static_cast<unsigned char*>(packed));
  });
}

cudaError_t launch_dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst,
                              Format format, bool sum, cudaStream_t stream) noexcept {
  const std::size_t elements = sum ? count : count * parts;
  if (elements == 0) return cudaSuccess;
  std::size_t blocks = (elements + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  const unsigned grid = static_cast<unsigned>(blocks);
  return dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    const auto* in = static_cast<const unsigned char*>(packed);
    auto* out = static_cast<typename Fmt::Storage*>(dst);
    if (sum) {
      dequantize_sum_kernel<Fmt>
          <<<grid, kThreads, 0, stream>>>(in, count, parts, quant_shape(count), out);
    } else {
      dequantize_kernel<Fmt>
          <<<grid, kThreads, 0, stream>>>(in, count, parts, quant_shape(count), out);
    }
  });
}

cudaError_t launch_check_finite(const void* data, Format format, std::size_t count, float* flag,
                                cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  return dispatch(format, [&](auto fmt) {
    using Fmt = decltype(fmt);
    constexpr int N = kPack<Fmt>;
    const Split split = split_one<typename Fmt::Storage, N>(data, count);
    check_finite_kernel<Fmt, N><<<grid_for(split, kMaxBlocks), kThreads, 0, stream>>>(
        static_cast<const typename Fmt::Storage*>(data), split, flag);
  });
}

}  // namespace zero::cuda
