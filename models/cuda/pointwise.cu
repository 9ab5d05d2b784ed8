// The CUDA pointwise layers (layers.h): GELU (GPT-2's tanh form), SwiGLU, residual adds and
// rotary embeddings, forward and backward, bf16 in and out with the arithmetic in fp32, as the
// CPU layers (models/gpt/kernels.cpp, models/llama/kernels.cpp).
//
// Every kernel is a grid-stride loop, one element (rope: one rotated pair) per step, each
// element read and written by the same thread: in place is safe (residual's out may be a or b),
// and the results do not depend on the launch shape.
#include <cstddef>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "models/cuda/layers.h"

namespace zero::cuda_layers {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
constexpr std::size_t kMaxBlocks = 8192;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float load(const bf16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}

__device__ __forceinline__ std::size_t thread_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ std::size_t thread_count() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

__global__ void __launch_bounds__(kThreads)
    gelu_forward_kernel(bf16* out, const bf16* inp, std::size_t n) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < n; i += stride) {
    const float x = load(inp, i);
    const float th = tanhf(kGeluScale * (x + kGeluCube * x * x * x));
    out[i] = __float2bfloat16_rn(0.5f * x * (1.0f + th));
  }
}

__global__ void __launch_bounds__(kThreads)
    gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n, bool add) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < n; i += stride) {
    const float x = load(inp, i);
    const float th = tanhf(kGeluScale * (x + kGeluCube * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    const float grad = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * load(dout, i);
    dinp[i] = __float2bfloat16_rn((add ? load(dinp, i) : 0.0f) + grad);
  }
}

__global__ void __launch_bounds__(kThreads)
    swiglu_forward_kernel(bf16* h, const bf16* gate, const bf16* up, std::size_t n) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < n; i += stride) {
    const float x = load(gate, i);
    h[i] = __float2bfloat16_rn(x * sigmoid(x) * load(up, i));
  }
}

// dgate += dh * up * silu'(gate), silu'(x) = s (1 + x (1 - s)) with s = sigmoid(x);
// dup += dh * silu(gate).
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dh, const bf16* gate, const bf16* up,
                           std::size_t n, bool add) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < n; i += stride) {
    const float x = load(gate, i);
    const float u = load(up, i);
    const float g = load(dh, i);
    const float s = sigmoid(x);
    const float dsilu = s * (1.0f + x * (1.0f - s));
    const float grad_gate = g * u * dsilu;
    const float grad_up = g * x * s;
    dgate[i] = __float2bfloat16_rn((add ? load(dgate, i) : 0.0f) + grad_gate);
    dup[i] = __float2bfloat16_rn((add ? load(dup, i) : 0.0f) + grad_up);
  }
}

__global__ void __launch_bounds__(kThreads)
    residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  const std::size_t stride = thread_count();
  for (std::size_t i = thread_index(); i < n; i += stride) {
    out[i] = __float2bfloat16_rn(load(a, i) + load(b, i));
  }
}

// One step per pair (row, head, i < hd / 2): (lo, hi) = (x[i], x[i + hd / 2]) of the head turns
// by the angle of (t = row % T, i): forward (lo c - hi s, hi c + lo s), backward (the transpose)
// (lo c + hi s, hi c - lo s).
template <bool kBackward>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(bf16* x, int ld, const float* cos, const float* sin, int T, int heads, int hd,
                std::size_t pairs) {
  const int half = hd / 2;
  const std::size_t stride = thread_count();
  for (std::size_t p = thread_index(); p < pairs; p += stride) {
    const std::size_t i = p % static_cast<std::size_t>(half);
    const std::size_t head_row = p / static_cast<std::size_t>(half);
    const std::size_t h = head_row % static_cast<std::size_t>(heads);
    const std::size_t row = head_row / static_cast<std::size_t>(heads);
    const std::size_t t = row % static_cast<std::size_t>(T);
    bf16* v = x + row * static_cast<std::size_t>(ld) + h * static_cast<std::size_t>(hd);
    const float c = cos[t * half + i];
    const float s = sin[t * half + i];
    const float lo = load(v, i);
    const float hi = load(v, i + half);
    if constexpr (kBackward) {
      v[i] = __float2bfloat16_rn(lo * c + hi * s);
      v[i + half] = __float2bfloat16_rn(hi * c - lo * s);
    } else {
      v[i] = __float2bfloat16_rn(lo * c - hi * s);
      v[i + half] = __float2bfloat16_rn(hi * c + lo * s);
    }
  }
}

const bf16* as_bf16(const Bf16* p) {
  return reinterpret_cast<const bf16*>(p);
}
bf16* as_bf16(Bf16* p) {
  return reinterpret_cast<bf16*>(p);
}

unsigned grid_for(std::size_t units) {
  std::size_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

template <bool kBackward>
int rope(Bf16* x, int ld, const float* cos, const float* sin, int B, int T, int heads, int hd,
         Stream stream) {
  if (B <= 0 || T <= 0 || heads <= 0 || hd < 2) return 0;
  const std::size_t pairs = static_cast<std::size_t>(B) * static_cast<std::size_t>(T) *
                            static_cast<std::size_t>(heads) * static_cast<std::size_t>(hd / 2);
  rope_kernel<kBackward><<<grid_for(pairs), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(x), ld, cos, sin, T, heads, hd, pairs);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int gelu_forward(Bf16* out, const Bf16* inp, std::size_t n, Stream stream) {
  if (n == 0) return 0;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(out), as_bf16(inp), n);
  return static_cast<int>(cudaGetLastError());
}

int gelu_backward(Bf16* dinp, const Bf16* inp, const Bf16* dout, std::size_t n, Stream stream,
                  Into into) {
  if (n == 0) return 0;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(dinp), as_bf16(inp), as_bf16(dout), n, into == Into::add);
  return static_cast<int>(cudaGetLastError());
}

int swiglu_forward(Bf16* h, const Bf16* gate, const Bf16* up, std::size_t n, Stream stream) {
  if (n == 0) return 0;
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(h), as_bf16(gate), as_bf16(up), n);
  return static_cast<int>(cudaGetLastError());
}

int swiglu_backward(Bf16* dgate, Bf16* dup, const Bf16* dh, const Bf16* gate, const Bf16* up,
                    std::size_t n, Stream stream, Into into) {
  if (n == 0) return 0;
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(dgate), as_bf16(dup), as_bf16(dh), as_bf16(gate), as_bf16(up), n, into == Into::add);
  return static_cast<int>(cudaGetLastError());
}

int residual_forward(Bf16* out, const Bf16* a, const Bf16* b, std::size_t n, Stream stream) {
  if (n == 0) return 0;
  residual_forward_kernel<<<grid_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      as_bf16(out), as_bf16(a), as_bf16(b), n);
  return static_cast<int>(cudaGetLastError());
}

int rope_forward(Bf16* x, int ld, const float* cos, const float* sin, int B, int T, int heads,
                 int hd, Stream stream) {
  return rope<false>(x, ld, cos, sin, B, T, heads, hd, stream);
}

int rope_backward(Bf16* dx, int ld, const float* cos, const float* sin, int B, int T, int heads,
                  int hd, Stream stream) {
  return rope<true>(dx, ld, cos, sin, B, T, heads, hd, stream);
}

}  // namespace zero::cuda_layers
