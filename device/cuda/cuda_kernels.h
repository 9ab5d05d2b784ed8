// Launchers of the CUDA device's kernels: plain C++ (no C++20), included by cuda_device.cpp
// (g++) and cuda_kernels.cu (nvcc). Every launcher is asynchronous on `stream`, does nothing
// for count 0, and returns cudaGetLastError() after its launches so that the caller can name
// the failure. Pointers must be aligned to their element size (2 bytes for fp16 and bf16,
// 4 for fp32); wider vector accesses are used only where the addresses allow them.
//
// Rounding matches base/half.h bit for bit (round to nearest even, NaN kept quiet with its
// sign and top payload, fp16 overflow to infinity, fp16 subnormals exact).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace zero::cuda {

// The floating formats the kernels take (the caller maps DType onto these).
enum class Format : int { f32 = 0, f16 = 1, bf16 = 2 };

// The number of doubles of the scratch array launch_sum_squares needs: one per block of its
// first pass.
inline constexpr std::size_t kSumSquaresPartials = 1024;

// dst[i] = convert(src[i]); src_format != dst_format, and the buffers do not overlap.
cudaError_t launch_cast(const void* src, Format src_format, void* dst, Format dst_format,
                        std::size_t count, cudaStream_t stream) noexcept;

// data[i] = round(float(data[i]) * factor), one fp32 multiplication (no contraction). A NaN
// product carries the NaN operand's bits (quieted) or, for inf * 0, the host's default NaN,
// as the host CPU's multiplication does.
cudaError_t launch_scale(void* data, Format format, std::size_t count, float factor,
                         cudaStream_t stream) noexcept;

// dst[i] = round(float(dst[i]) + float(src[i]) * factor): __fmul_rn then __fadd_rn, so finite
// results equal the host's bit for bit (a NaN comes out as the GPU's canonical NaN). One
// element per thread step: the engine calls it on gradient blocks, far from the hot path of a
// step's bandwidth.
cudaError_t launch_accumulate(const void* src, Format src_format, void* dst, Format dst_format,
                              std::size_t count, float factor, cudaStream_t stream) noexcept;

// data[i] = round(value).
cudaError_t launch_fill(void* data, Format format, std::size_t count, float value,
                        cudaStream_t stream) noexcept;

// *accumulator = float(double(*accumulator) + sum of double(float(data[i]))^2). Deterministic
// for a given count and address alignment: per-thread double partials, a fixed-order tree per
// block into `partials` (kSumSquaresPartials doubles of device memory, used only by work on
// `stream`), then one block summing the partials in a fixed order.
cudaError_t launch_sum_squares(const void* data, Format format, std::size_t count, double* partials,
                               float* accumulator, cudaStream_t stream) noexcept;

// *flag = 1.0f when any element has all exponent bits set (NaN or infinity); otherwise the
// flag is not written.
cudaError_t launch_check_finite(const void* data, Format format, std::size_t count, float* flag,
                                cudaStream_t stream) noexcept;

// Block int8 quantization (base/block_quant.h), bit for bit as device/reference.h (NaN
// payloads aside): `parts` chunks of `count` values, source chunk k at element k * count,
// packed chunk k at byte k * block_quant_bytes(count); packed is 4-byte aligned. One thread
// block of kQuantBlock threads per quantization block: the largest magnitude by warp shuffles,
// the scale by __fdiv_rn, each value by __fdiv_rn and rintf.
cudaError_t launch_quantize(const void* src, Format format, std::size_t count, std::size_t parts,
                            void* packed, cudaStream_t stream) noexcept;
// sum false: destination chunk k = packed chunk k dequantized (__fmul_rn). sum true: dst[i] =
// the fp32 sum in chunk order of each chunk's value i dequantized (__fmul_rn, __fadd_rn).
cudaError_t launch_dequantize(const void* packed, std::size_t count, std::size_t parts, void* dst,
                              Format format, bool sum, cudaStream_t stream) noexcept;

}  // namespace zero::cuda
