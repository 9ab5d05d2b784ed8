// The tensor-core product of the attention kernels: one warp's mma.sync.m16n8k16 with bf16
// operands and fp32 accumulation (sm_80 and later), the fragments it takes, and ldmatrix, which
// loads B fragments from a tile stored the other way round.
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
//
// ldmatrix.m8n8.x4.trans (sm_75 and later) reads four 8 x 8 matrices of 16-bit elements from
// shared memory, each row 16 contiguous bytes whose address one lane gives (lanes 8i .. 8i + 7:
// rows 0 .. 7 of matrix i), and hands them out transposed: register i of lane (g, t) holds
// matrix i's elements (row 2t, column g) in its low half and (2t + 1, g) in its high half.
// That is B's b0 (or b1) for B[k][n] = M[k][n]: a B fragment read from a tile whose rows run
// over k, as P V, dS K, P^T dO and dS^T Q need, where 32-bit reads would take columns.
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

// r[i] = this lane's part of matrix i (above); `row` is the shared address of the row this lane
// gives, 16-byte aligned. Every lane of the warp takes part.
__device__ __forceinline__ void load_matrices_x4_trans(std::uint32_t (&r)[4], const void* row) {
  const auto at = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(at));
}

}  // namespace zero::cuda_layers
