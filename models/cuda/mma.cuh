// The tensor-core product of the attention kernels: one warp's mma.sync.m16n8k16 with bf16
// operands and fp32 accumulation (sm_80 and later), and the fragments it takes.
//
// Per the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane / 4 and t = lane % 4:
//   A (16 x 16, row-major), four 32-bit registers of two bf16 each (the lower column in the low
//     half): a0 row g, columns 2t, 2t+1; a1 row g+8, the same columns; a2 row g, columns
//     2t+8, 2t+9; a3 row g+8, those columns.
//   B (16 x 8, k x n), two registers: b0 k = 2t, 2t+1 of column n = g; b1 k = 2t+8, 2t+9.
//   C and D (16 x 8, fp32), four floats: c0, c1 row g, columns 2t, 2t+1; c2, c3 row g+8.
// So a row-major tile gives A with 32-bit reads of rows, and a tile whose rows are B's columns
// (B[k][n] = tile[n][k]) gives B the same way; two C tiles side by side (columns 16 kk ..) are
// the A fragment of k-step kk once rounded to bf16.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

namespace zero::cuda_layers {

// d += a b over the warp: every lane of the warp takes part.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4],
                                               const std::uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace zero::cuda_layers
