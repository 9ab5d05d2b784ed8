// The multi-tensor fused Adam/AdamW kernel and the copy-out kernel (see fused_adam.h). CUDA
// C++17: it cannot include base/half.h or optim/rounding.h, so it takes the rounding of
// base/half.h from device/cuda/half.cuh and restates the random bits of optim/rounding.h.
//
// One launch takes up to kMaxTensors (48) tensors in a by-value argument, a Batch of 3920
// bytes (under the 4 KB kernel-parameter limit), and at most kMaxBlocksPerLaunch blocks; more
// tensors, or a tensor past the block limit (split at a chunk boundary), go to further
// launches. Each block updates one chunk (kChunk elements) of one tensor: tensor k owns the
// blocks from its first_block up to the next tensor's, and block b finds its tensor by binary
// search over first_block. Inside a chunk the 256 threads stride over packs of 4 elements
// (16-byte fp32, 8-byte bf16/fp16 accesses) where every buffer of the tensor is aligned at the
// same element, and over single elements elsewhere.
#include <cstdint>

#include "device/cuda/half.cuh"
#include "optim/cuda/fused_adam.h"

namespace zero::optim::cuda {
namespace {

using u16 = unsigned short;
using u32 = unsigned int;
using u64 = unsigned long long;

constexpr unsigned kThreads = 256;
constexpr std::size_t kMaxTensors = kFusedAdamMaxTensors;
constexpr u64 kChunk = kFusedAdamChunk;
constexpr int kPack = 4;         // elements per vector access
constexpr u32 kNoPacks = kPack;  // TensorArg::pack_head when only scalar accesses fit
constexpr u64 kMaxBlocksPerLaunch = u64{1} << 20;
static_assert(kChunk % (kPack * kThreads) == 0, "a chunk is whole packs for every thread");

// ---- The kernel's argument ----

struct StepArgs {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float eps;
  float grad_scale;
  float inverse_sqrt_bias_correction2;
  u64 seed;
  u64 step;
  const float* verdict;  // may be null
  double loss_scale;
  double max_norm;
};

// One tensor, or the part of one that a launch takes.
struct TensorArg {
  float* master;
  const void* grad;
  void* exp_avg;
  void* exp_avg_sq;
  void* param_out;  // may be null
  u64 count;
  u64 first_index;
  float step_size;
  float decay;
  float l2;
  u32 first_block;  // this tensor's first block in the launch
  u32 pack_head;    // the first element of the packed body (0..3), or kNoPacks
};

struct Batch {
  StepArgs step;
  u32 tensors;
  TensorArg tensor[kMaxTensors];
};
static_assert(sizeof(TensorArg) == 80, "the tensor description is packed as planned");
static_assert(sizeof(Batch) == 3920, "the kernel argument is laid out as planned");
static_assert(sizeof(Batch) <= 4096, "the kernel argument stays under the 4 KB parameter limit");

// ---- Rounding, bit for bit as base/half.h and optim/rounding.h ----

// bf16/fp16 conversions: the device's own (device/cuda/half.cuh).
using ::zero::cuda::bf16_to_float;
using ::zero::cuda::float_to_bf16;
using ::zero::cuda::float_to_fp16;
using ::zero::cuda::fp16_to_float;

// optim/rounding.h's rounding_key: the key of one step for indices with these high 32 bits.
__device__ __forceinline__ u32 rounding_key(u64 seed, u64 step, u32 index_high) {
  u64 x = seed ^ (step * 0x9e3779b97f4a7c15ull) ^
          ((static_cast<u64>(index_high) << 32 | index_high) * 0xbf58476d1ce4e5b9ull);
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return static_cast<u32>(x ^ (x >> 32));
}

// optim/rounding.h's rounding_bits: murmur3's finaliser over index_low * golden ratio ^ key.
__device__ __forceinline__ u32 rounding_bits(u32 key, u32 index_low) {
  u32 x = (index_low * 0x9e3779b1u) ^ key;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

// optim/rounding.h's float_to_bf16_stochastic.
__device__ __forceinline__ u16 float_to_bf16_stochastic(float f, u32 random16) {
  const u32 bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<u16>((bits >> 16) | 0x40u);
  return static_cast<u16>((bits + (random16 & 0xffffu)) >> 16);
}

// ---- The formats ----

struct F32 {
  using Storage = float;
  static constexpr bool kStochastic = false;
  __device__ static float load(float v) { return v; }
  __device__ static float store_state(float v, u32) { return v; }
};

struct F16 {
  using Storage = u16;
  __device__ static float load(u16 v) { return fp16_to_float(v); }
  __device__ static u16 store(float v) { return float_to_fp16(v); }
};

struct BF16 {
  using Storage = u16;
  static constexpr bool kStochastic = true;
  __device__ static float load(u16 v) { return bf16_to_float(v); }
  __device__ static u16 store(float v) { return float_to_bf16(v); }
  __device__ static u16 store_state(float v, u32 random16) {
    return float_to_bf16_stochastic(v, random16);
  }
};

// kPack elements moved as one aligned access.
template <class S>
struct alignas(sizeof(S) * kPack) Pack {
  S v[kPack];
};

// ---- The update ----

// One element, in the order of fused_adam.h, each operation rounded on its own.
__device__ __forceinline__ void adam_element(const StepArgs& s, float step_size, float decay,
                                             float l2, float grad, float& p, float& m, float& v) {
  const float g = __fadd_rn(__fmul_rn(l2, p), __fmul_rn(grad, s.grad_scale));
  m = __fadd_rn(__fmul_rn(s.beta1, m), __fmul_rn(s.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(s.beta2, v), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
  const float denominator =
      __fadd_rn(__fmul_rn(__fsqrt_rn(v), s.inverse_sqrt_bias_correction2), s.eps);
  p = __fsub_rn(__fmul_rn(p, decay), __fdiv_rn(__fmul_rn(step_size, m), denominator));
}

// The elements of one tensor that one thread updates; caches the rounding key of the current
// 2^32-element stretch of the flat index.
template <class Grad, class State, class Out>
class Updater {
 public:
  using G = typename Grad::Storage;
  using S = typename State::Storage;
  using O = typename Out::Storage;

  __device__ Updater(const StepArgs& step, const TensorArg& t)
      : step_(step),
        master_(t.master),
        grad_(static_cast<const G*>(t.grad)),
        m_(static_cast<S*>(t.exp_avg)),
        v_(static_cast<S*>(t.exp_avg_sq)),
        out_(static_cast<O*>(t.param_out)),
        first_index_(t.first_index),
        step_size_(t.step_size),
        decay_(t.decay),
        l2_(t.l2) {}

  __device__ void element(u64 e) {
    float p = master_[e];
    float m = State::load(m_[e]);
    float v = State::load(v_[e]);
    adam_element(step_, step_size_, decay_, l2_, Grad::load(grad_[e]), p, m, v);
    const u32 random = random_bits(e);
    master_[e] = p;
    m_[e] = State::store_state(m, random & 0xffffu);
    v_[e] = State::store_state(v, random >> 16);
    if (out_ != nullptr) out_[e] = Out::store(p);
  }

  // Elements [e, e + kPack), aligned for every buffer.
  __device__ void pack(u64 e) {
    Pack<float> p = *reinterpret_cast<const Pack<float>*>(master_ + e);
    const Pack<G> g = *reinterpret_cast<const Pack<G>*>(grad_ + e);
    Pack<S> m = *reinterpret_cast<const Pack<S>*>(m_ + e);
    Pack<S> v = *reinterpret_cast<const Pack<S>*>(v_ + e);
    Pack<O> out;
#pragma unroll
    for (int j = 0; j < kPack; ++j) {
      float mj = State::load(m.v[j]);
      float vj = State::load(v.v[j]);
      adam_element(step_, step_size_, decay_, l2_, Grad::load(g.v[j]), p.v[j], mj, vj);
      const u32 random = random_bits(e + j);
      m.v[j] = State::store_state(mj, random & 0xffffu);
      v.v[j] = State::store_state(vj, random >> 16);
      if (out_ != nullptr) out.v[j] = Out::store(p.v[j]);
    }
    *reinterpret_cast<Pack<float>*>(master_ + e) = p;
    *reinterpret_cast<Pack<S>*>(m_ + e) = m;
    *reinterpret_cast<Pack<S>*>(v_ + e) = v;
    if (out_ != nullptr) *reinterpret_cast<Pack<O>*>(out_ + e) = out;
  }

 private:
  // The 32 random bits of element e (bf16 state only): low 16 for m, high 16 for v.
  __device__ u32 random_bits(u64 e) {
    if constexpr (!State::kStochastic) {
      return 0;
    } else {
      const u64 index = first_index_ + e;
      const u32 high = static_cast<u32>(index >> 32);
      if (!have_key_ || high != key_high_) {
        key_ = rounding_key(step_.seed, step_.step, high);
        key_high_ = high;
        have_key_ = true;
      }
      return rounding_bits(key_, static_cast<u32>(index));
    }
  }

  const StepArgs& step_;
  float* master_;
  const G* grad_;
  S* m_;
  S* v_;
  O* out_;
  u64 first_index_;
  float step_size_;
  float decay_;
  float l2_;
  bool have_key_ = false;
  u32 key_high_ = 0;
  u32 key_ = 0;
};

// The tensor that owns `block`: the last one whose first_block is at most `block`.
__device__ __forceinline__ u32 tensor_of_block(const Batch& batch, u32 block) {
  u32 low = 0, high = batch.tensors - 1;
  while (low < high) {
    const u32 middle = (low + high + 1) / 2;
    if (batch.tensor[middle].first_block <= block) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  return low;
}

// Calls worker.element(e) or worker.pack(e) for every element of the block's chunk of its
// tensor, this thread's share: whole packs from the first element at or after the chunk's
// start where every buffer is aligned, single elements before and after them.
template <class Worker>
__device__ __forceinline__ void for_chunk(const TensorArg& t, u32 block, Worker& worker) {
  const u64 begin = static_cast<u64>(block - t.first_block) * kChunk;
  const u64 end = begin + kChunk < t.count ? begin + kChunk : t.count;
  u64 body_begin = end, body_end = end;
  if (t.pack_head != kNoPacks) {
    const u64 first = begin + (t.pack_head + kPack - begin % kPack) % kPack;
    if (first < end) {
      body_begin = first;
      body_end = first + (end - first) / kPack * kPack;
    }
  }
  const u64 head = body_begin - begin;
  const u64 scalars = head + (end - body_end);
  for (u64 s = threadIdx.x; s < scalars; s += kThreads) {
    worker.element(s < head ? begin + s : body_end + (s - head));
  }
  for (u64 e = body_begin + kPack * threadIdx.x; e < body_end; e += kPack * kThreads) {
    worker.pack(e);
  }
}

// param_out = round(master), nothing else.
template <class Out>
class CopyOut {
 public:
  using O = typename Out::Storage;

  __device__ explicit CopyOut(const TensorArg& t)
      : master_(t.master), out_(static_cast<O*>(t.param_out)) {}

  __device__ void element(u64 e) { out_[e] = Out::store(master_[e]); }

  __device__ void pack(u64 e) {
    const Pack<float> p = *reinterpret_cast<const Pack<float>*>(master_ + e);
    Pack<O> out;
#pragma unroll
    for (int j = 0; j < kPack; ++j) out.v[j] = Out::store(p.v[j]);
    *reinterpret_cast<Pack<O>*>(out_ + e) = out;
  }

 private:
  const float* master_;
  O* out_;
};

// optim/spec.cpp's step_grad_scale(unscaled_norm(sum, loss_scale), loss_scale, max_norm), the
// same double operations in the same order (IEEE division and square root, as the host's).
__device__ __forceinline__ float verdict_grad_scale(float sum, double loss_scale, double max_norm) {
  const double norm = sqrt(static_cast<double>(sum)) / loss_scale;
  double grad_scale = 1.0 / loss_scale;
  if (max_norm > 0.0) {
    const double clip = (norm + 1e-6) / max_norm;
    if (clip > 1.0) grad_scale /= clip;
  }
  return static_cast<float>(grad_scale);
}

template <class Grad, class State, class Out>
__global__ void __launch_bounds__(kThreads) fused_adam_kernel(const __grid_constant__ Batch batch) {
  const u32 block = blockIdx.x;
  const TensorArg& t = batch.tensor[tensor_of_block(batch, block)];
  StepArgs step = batch.step;
  if (step.verdict != nullptr) {
    if (step.verdict[1] != 0.0f) {
      // A non-finite gradient skips the step: the state stays, and the copy-out is written from
      // it (where it is staging, such as stages 1-2's all-gather block, it must hold the values).
      if (t.param_out != nullptr) {
        CopyOut<Out> copy(t);
        for_chunk(t, block, copy);
      }
      return;
    }
    step.grad_scale = verdict_grad_scale(step.verdict[0], step.loss_scale, step.max_norm);
  }
  Updater<Grad, State, Out> updater(step, t);
  for_chunk(t, block, updater);
}

template <class Out>
__global__ void __launch_bounds__(kThreads) param_out_kernel(const __grid_constant__ Batch batch) {
  const u32 block = blockIdx.x;
  const TensorArg& t = batch.tensor[tensor_of_block(batch, block)];
  CopyOut<Out> copy(t);
  for_chunk(t, block, copy);
}

// ---- Batching and dispatch (host) ----

using Kernel = void (*)(Batch);

template <class Grad, class State>
Kernel kernel_for(Format out) {
  switch (out) {
    case Format::bf16:
      return fused_adam_kernel<Grad, State, BF16>;
    case Format::f16:
      return fused_adam_kernel<Grad, State, F16>;
    case Format::f32:
      break;
  }
  return nullptr;
}

template <class Grad>
Kernel kernel_for(Format state, Format out) {
  switch (state) {
    case Format::f32:
      return kernel_for<Grad, F32>(out);
    case Format::bf16:
      return kernel_for<Grad, BF16>(out);
    case Format::f16:
      break;
  }
  return nullptr;
}

// The kernel for the formats, or nullptr where it takes none.
Kernel kernel_for(const FusedAdamFormats& formats) {
  switch (formats.grad) {
    case Format::f32:
      return kernel_for<F32>(formats.state, formats.param_out);
    case Format::f16:
      return kernel_for<F16>(formats.state, formats.param_out);
    case Format::bf16:
      return kernel_for<BF16>(formats.state, formats.param_out);
  }
  return nullptr;
}

std::size_t format_size(Format format) {
  return format == Format::f32 ? 4 : 2;
}

bool aligned(const void* address, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(address) % bytes == 0;
}

const void* advance(const void* data, std::size_t bytes) {
  return data == nullptr ? nullptr : static_cast<const char*>(data) + bytes;
}

void* advance(void* data, std::size_t bytes) {
  return data == nullptr ? nullptr : static_cast<char*>(data) + bytes;
}

// The first element from which every buffer is aligned to whole packs, or kNoPacks.
u32 pack_head(const TensorArg& t, const FusedAdamFormats& formats) {
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(t.master) % (4 * kPack);
  const std::size_t head = misalignment == 0 ? 0 : (4 * kPack - misalignment) / 4;
  const std::size_t grad = format_size(formats.grad);
  const std::size_t state = format_size(formats.state);
  const std::size_t out = format_size(formats.param_out);
  const bool all = aligned(advance(t.grad, head * grad), grad * kPack) &&
                   aligned(advance(t.exp_avg, head * state), state * kPack) &&
                   aligned(advance(t.exp_avg_sq, head * state), state * kPack) &&
                   aligned(advance(t.param_out, head * out), out * kPack);
  return all ? static_cast<u32>(head) : kNoPacks;
}

// Whether the fused kernel can take the tensor.
bool valid_for_step(const FusedAdamTensor& t, const FusedAdamFormats& formats) {
  if (t.count == 0) return true;
  const std::size_t state = format_size(formats.state);
  return t.master != nullptr && t.grad != nullptr && t.exp_avg != nullptr &&
         t.exp_avg_sq != nullptr && aligned(t.master, 4) &&
         aligned(t.grad, format_size(formats.grad)) && aligned(t.exp_avg, state) &&
         aligned(t.exp_avg_sq, state) && aligned(t.param_out, format_size(formats.param_out));
}

// Whether the copy-out kernel can take the tensor.
bool valid_for_param_out(const FusedAdamTensor& t, Format param_out) {
  if (t.count == 0) return true;
  return t.master != nullptr && t.param_out != nullptr && aligned(t.master, 4) &&
         aligned(t.param_out, format_size(param_out));
}

// Fills launches of at most kMaxTensors tensors and kMaxBlocksPerLaunch blocks; a tensor that
// does not fit is split at a chunk boundary and continues in the next launch.
class Launcher {
 public:
  Launcher(Kernel kernel, const FusedAdamFormats& formats, const StepArgs& step,
           cudaStream_t stream)
      : kernel_(kernel), formats_(formats), stream_(stream) {
    batch_.step = step;
    batch_.tensors = 0;
  }

  cudaError_t add(const FusedAdamTensor& t) {
    const std::size_t grad = format_size(formats_.grad);
    const std::size_t state = format_size(formats_.state);
    const std::size_t out = format_size(formats_.param_out);
    std::size_t done = 0;
    while (done < t.count) {
      if (batch_.tensors == kMaxTensors || blocks_ == kMaxBlocksPerLaunch) {
        const cudaError_t status = flush();
        if (status != cudaSuccess) return status;
      }
      const u64 remaining = t.count - done;
      const u64 chunks = (remaining + kChunk - 1) / kChunk;
      const u64 room = kMaxBlocksPerLaunch - blocks_;
      const u64 take_chunks = chunks < room ? chunks : room;
      const u64 take = remaining < take_chunks * kChunk ? remaining : take_chunks * kChunk;
      TensorArg& a = batch_.tensor[batch_.tensors++];
      a.master = t.master + done;
      a.grad = advance(t.grad, done * grad);
      a.exp_avg = advance(t.exp_avg, done * state);
      a.exp_avg_sq = advance(t.exp_avg_sq, done * state);
      a.param_out = advance(t.param_out, done * out);
      a.count = take;
      a.first_index = t.first_index + done;
      a.step_size = t.step_size;
      a.decay = t.decay;
      a.l2 = t.l2;
      a.first_block = static_cast<u32>(blocks_);
      a.pack_head = pack_head(a, formats_);
      blocks_ += take_chunks;
      done += take;
    }
    return cudaSuccess;
  }

  // Launches what has been added and not launched yet.
  cudaError_t flush() {
    if (batch_.tensors == 0) return cudaSuccess;
    kernel_<<<static_cast<unsigned>(blocks_), kThreads, 0, stream_>>>(batch_);
    batch_.tensors = 0;
    blocks_ = 0;
    return cudaGetLastError();
  }

 private:
  Kernel kernel_;
  FusedAdamFormats formats_;
  cudaStream_t stream_;
  Batch batch_{};
  u64 blocks_ = 0;
};

}  // namespace

cudaError_t launch_fused_adam(const FusedAdamFormats& formats, const FusedAdamStep& step,
                              const FusedAdamTensor* tensors, std::size_t count,
                              cudaStream_t stream) noexcept {
  const Kernel kernel = kernel_for(formats);
  if (kernel == nullptr) return cudaErrorInvalidValue;
  for (std::size_t i = 0; i < count; ++i) {
    if (!valid_for_step(tensors[i], formats)) return cudaErrorInvalidValue;
  }
  const StepArgs args{step.beta1,
                      step.one_minus_beta1,
                      step.beta2,
                      step.one_minus_beta2,
                      step.eps,
                      step.grad_scale,
                      step.inverse_sqrt_bias_correction2,
                      step.seed,
                      step.step,
                      step.verdict,
                      step.loss_scale,
                      step.max_norm};
  Launcher launcher(kernel, formats, args, stream);
  for (std::size_t i = 0; i < count; ++i) {
    const cudaError_t status = launcher.add(tensors[i]);
    if (status != cudaSuccess) return status;
  }
  return launcher.flush();
}

cudaError_t launch_param_out(Format param_out, const FusedAdamTensor* tensors, std::size_t count,
                             cudaStream_t stream) noexcept {
  Kernel kernel = nullptr;
  switch (param_out) {
    case Format::bf16:
      kernel = param_out_kernel<BF16>;
      break;
    case Format::f16:
      kernel = param_out_kernel<F16>;
      break;
    case Format::f32:
      return cudaErrorInvalidValue;
  }
  if (kernel == nullptr) return cudaErrorInvalidValue;
  for (std::size_t i = 0; i < count; ++i) {
    if (!valid_for_param_out(tensors[i], param_out)) return cudaErrorInvalidValue;
  }
  // Only master and param_out are read; the other formats only size pointers that are null.
  FusedAdamFormats formats;
  formats.param_out = param_out;
  Launcher launcher(kernel, formats, StepArgs{}, stream);
  for (std::size_t i = 0; i < count; ++i) {
    FusedAdamTensor copy;
    copy.master = tensors[i].master;
    copy.param_out = tensors[i].param_out;
    copy.count = tensors[i].count;
    const cudaError_t status = launcher.add(copy);
    if (status != cudaSuccess) return status;
  }
  return launcher.flush();
}

}  // namespace zero::optim::cuda
