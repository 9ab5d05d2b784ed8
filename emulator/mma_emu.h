// CPU emulation of CUDA (emulator/, docs/emulator.md): the warp-wide tensor-core instruction
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32  d, a, b, c   (d = c in place)
// and the fragment load
//   ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16  {r0, r1, r2, r3}, [row]
// that models/cuda/mma.cuh wraps in inline PTX; rewrite.py includes this header in its place,
// and it defines the same zero::cuda_layers::mma_bf16_16816 and load_matrices_x4_trans.
//
// Each warp computes D (16 x 8, fp32) = A (16 x 16, bf16) B (16 x 8, bf16) + C, its operands
// spread over the 32 lanes' registers as NVIDIA's PTX ISA lays them out (section "Matrix
// Fragments for mma.m16n8k16 with floating point type"), with groupID = lane >> 2 and
// threadID_in_group = lane % 4; elements listed "low to high", two bf16 to a 32-bit register:
//   A: a0..a7 in 4 registers; row = groupID for ai with i < 2 or 4 <= i < 6, else groupID + 8;
//      col = threadID_in_group * 2 + (i & 1), plus 8 for i >= 4.
//   B: b0..b3 in 2 registers; row = threadID_in_group * 2 + (i & 1), plus 8 for i >= 2;
//      col = groupID.
//   C, D: c0..c3, one float each; row = groupID for i < 2, else groupID + 8;
//      col = threadID_in_group * 2 + (i & 1).
// The formulas are the ISA's, written here independently of mma.cuh's own reading of them, so a
// kernel that packs its fragments wrongly gets a wrong product.
//
// Arithmetic: each element of D starts from C and adds its 16 products in k order in fp32 (a
// product of two bf16 is exact in fp32). Tensor cores may add in another order and align
// addends by truncation: the GPU agrees to fp32 rounding, not bit for bit.
//
// ldmatrix, from the ISA's section "Warp-level matrix load instruction: ldmatrix": the four
// matrices are 8 x 8 of 16-bit elements; the thread of lane 8i + j gives the address of row j of
// matrix i (16 contiguous bytes, 16-byte aligned, in shared memory: here the block's dynamic
// shared memory). Without .trans, each matrix's row r, elements 2c and 2c + 1, goes to lane
// 4r + c (the same layout as the C fragment's rows g); .trans loads the matrix column-major,
// so lane 4r + c gets the elements (2c, r) and (2c + 1, r): register i takes matrix i's pair,
// the lower row in the low half.
//
// Like every warp collective here (block.h), all 32 lanes must execute each, the same number of
// times; a lane that does not is reported, as the instructions' .aligned form requires.
#pragma once

#include <cstdint>
#include <cstring>
#include <source_location>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace emu {

// A lane's words: in[0..3] the A registers, in[4..5] the B registers, in[6..9] C's floats;
// out[0..3] D's floats.
inline float bf16_half(std::uint32_t reg, unsigned half) {
  return __bfloat162float(__ushort_as_bfloat16(static_cast<unsigned short>(reg >> (16 * half))));
}

inline void complete_mma_m16n8k16(WarpWords& warp) {
  float A[16][16], B[16][8], C[16][8];
  for (unsigned lane = 0; lane < 32; ++lane) {
    const LaneWords& w = warp.lane[lane];
    const unsigned group = lane >> 2, in_group = lane % 4;
    for (unsigned i = 0; i < 8; ++i) {
      const unsigned row = (i < 2 || (4 <= i && i < 6)) ? group : group + 8;
      const unsigned col = in_group * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = bf16_half(w.in[i / 2], i % 2);
    }
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = in_group * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      B[row][group] = bf16_half(w.in[4 + i / 2], i % 2);
    }
    for (unsigned i = 0; i < 4; ++i) {
      std::memcpy(&C[i < 2 ? group : group + 8][in_group * 2 + (i & 1)], &w.in[6 + i],
                  sizeof(float));
    }
  }
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned group = lane >> 2, in_group = lane % 4;
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = i < 2 ? group : group + 8, col = in_group * 2 + (i & 1);
      float sum = C[row][col];
      for (unsigned k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
      std::memcpy(&warp.lane[lane].out[i], &sum, sizeof(float));
    }
  }
}

// The calling lane's part of one warp's mma.
inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                              const std::uint32_t (&b)[2], std::source_location where) {
  LaneWords& mine = warp_words().lane[lane_id()];
  std::memcpy(&mine.in[0], a, sizeof a);
  std::memcpy(&mine.in[4], b, sizeof b);
  std::memcpy(&mine.in[6], d, sizeof d);
  sync_warp("mma.sync.m16n8k16", 0xffffffffu, complete_mma_m16n8k16, where);
  std::memcpy(d, mine.out, sizeof d);
}

// A lane's words: in[0..1] the address of the row it gives; out[0..3] its registers.
inline void complete_ldmatrix_x4_trans(WarpWords& warp) {
  const auto row_of = [&](unsigned lane) {
    std::uint64_t address = warp.lane[lane].in[0] | std::uint64_t{warp.lane[lane].in[1]} << 32;
    return reinterpret_cast<const unsigned short*>(static_cast<std::uintptr_t>(address));
  };
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned r = lane / 4, c = lane % 4;  // column r of the matrices, rows 2c and 2c + 1
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned short low = row_of(8 * i + 2 * c)[r], high = row_of(8 * i + 2 * c + 1)[r];
      warp.lane[lane].out[i] = low | static_cast<std::uint32_t>(high) << 16;
    }
  }
}

// The calling lane's part of one warp's ldmatrix .x4 .trans.
inline void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row, std::source_location where) {
  if (reinterpret_cast<std::uintptr_t>(row) % 16 != 0 || !in_dynamic_shared(row, 16)) {
    fail("ldmatrix from a row not 16-byte aligned in dynamic shared memory", where);
  }
  LaneWords& mine = warp_words().lane[lane_id()];
  const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(row));
  mine.in[0] = static_cast<std::uint32_t>(address);
  mine.in[1] = static_cast<std::uint32_t>(address >> 32);
  sync_warp("ldmatrix.sync.m8n8.x4.trans", 0xffffffffu, complete_ldmatrix_x4_trans, where);
  std::memcpy(r, mine.out, sizeof r);
}

}  // namespace emu

namespace zero::cuda_layers {

// mma.cuh's function: d += a b over the warp; every lane of the warp takes part.
inline void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                           std::source_location where = std::source_location::current()) {
  emu::mma_m16n8k16_bf16(d, a, b, where);
}

// mma.cuh's function: r[i] = this lane's part of matrix i, transposed; `row` the row it gives.
inline void load_matrices_x4_trans(std::uint32_t (&r)[4], const void* row,
                                   std::source_location where = std::source_location::current()) {
  emu::ldmatrix_x4_trans(r, row, where);
}

}  // namespace zero::cuda_layers
