// ComputeCopies: the CPU layers' view of the engine's compute copies when they are bf16 or fp16
// (zero_compute_dtype): the layers read and compute in fp32, so a parameter is widened into an
// fp32 copy when the layers ask for it, and a gradient is accumulated in an fp32 buffer and
// added into the engine's half buffer, rounded to nearest even once, when its module's backward
// ends (flush, before zero_post_backward). In fp32 both are the engine's buffers themselves.
// The copies live only while their module runs: end_module (at the end of each module's forward
// and backward) flushes and frees them all, so the model holds 8 bytes per parameter of the
// open module, not of the whole model, beside what the engine holds.
//
// Owns: the fp32 copies and gradient buffers, and which gradients wait for a flush. Calls:
// nothing of the engine; the model passes it the engine's pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zero/zero.h"

namespace zero::layers {

class ComputeCopies {
 public:
  ComputeCopies() = default;
  void set_dtype(zero_dtype dtype) noexcept { dtype_ = dtype; }
  zero_dtype dtype() const noexcept { return dtype_; }
  // The parameter count and each one's elements, in id order.
  void add_param(std::size_t numel) { numel_.push_back(numel); }

  // fp32 values of parameter `id` from the engine's buffer `data`.
  float* param(int id, void* data);
  // The fp32 gradient buffer the layers add into for parameter `id`, whose engine buffer is
  // `data` (zeroed the first time within a module's backward).
  float* grad(int id, void* data);
  // Adds every pending fp32 gradient into its engine buffer, rounded once, and frees its buffer.
  void flush();
  // The end of a module's forward or backward: flush, then free every parameter's copy.
  void end_module();
  // The bytes of the fp32 copies and gradient buffers held now.
  std::uint64_t held_bytes() const noexcept;

  // The conversions, exposed for tests: round to nearest, ties to even; NaN stays NaN.
  static float load(const void* data, zero_dtype dtype, std::size_t i) noexcept;
  static void store(void* data, zero_dtype dtype, std::size_t i, float value) noexcept;

 private:
  struct Pending {
    int id;
    void* data;
  };
  zero_dtype dtype_ = ZERO_FP32;
  std::vector<std::size_t> numel_;
  std::vector<std::vector<float>> params_, grads_;  // by id, sized when first used
  std::vector<Pending> pending_;
};

}  // namespace zero::layers
