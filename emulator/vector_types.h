// CPU emulation of CUDA (emulator/, docs/emulator.md): the vector types of CUDA's vector_types.h
// that the layers use: dim3 (launch shapes, blockDim, gridDim), uint3 (threadIdx, blockIdx) and
// uint4 with make_uint4 (16-byte moves). Layout and alignment as CUDA's (uint4 is 16-byte aligned),
// so reinterpret_casts between them and other data behave as on the GPU.
#pragma once

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
