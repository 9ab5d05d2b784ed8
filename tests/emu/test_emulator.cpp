// The CPU emulation of CUDA checked on its own: the mma against mma.cuh's reading of the PTX
// fragments, ldmatrix and cp.async against the ISA's description, the shuffles, what a missing
// __syncthreads looks like, the launches and copies it refuses as a GPU would. The
// "[.][emulator aborts]" cases break CUDA's rules on purpose and must end the process with the
// emulator's report; ctest runs each alone (tests/emu/CMakeLists).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "base/half.h"
#include "emulator_kernels.h"

namespace {

template <class T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, host.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> host_copy(const T* device, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

std::uint32_t pack(float lo, float hi) {
  return static_cast<std::uint32_t>(zero::float_to_bf16(lo)) |
         static_cast<std::uint32_t>(zero::float_to_bf16(hi)) << 16;
}

}  // namespace

TEST_CASE("cuda: the emulator's mma.m16n8k16 takes its fragments as mma.cuh lays them out",
          "[emulator]") {
  // Two blocks of two warps, two accumulating calls each; multiples of 1/4 in [-2, 2], so every
  // sum is exact in fp32 and the product must match bit for bit.
  constexpr int kBlocks = 2, kThreads = 64, kCalls = 2;
  constexpr int kTotal = kBlocks * kThreads, kWarps = kTotal / 32;
  const auto value = [](int seed, int i, int j) {
    return static_cast<float>((seed * 131 + i * 17 + j * 7) % 17 - 8) / 4.0f;
  };
  std::vector<std::uint32_t> a(kCalls * kTotal * 4), b(kCalls * kTotal * 2);
  std::vector<float> d(kTotal * 4);
  std::vector<double> want(kWarps * 16 * 8);  // D[warp][row][col]
  for (int w = 0; w < kWarps; ++w) {
    for (int r = 0; r < 16; ++r) {
      for (int c = 0; c < 8; ++c) want[(w * 16 + r) * 8 + c] = value(w + 100, r, c);  // C
    }
    for (int call = 0; call < kCalls; ++call) {
      const int seed = w * kCalls + call;
      const auto A = [&](int r, int k) { return value(seed, r, k); };
      const auto B = [&](int k, int n) { return value(seed + 50, k, n); };
      for (int r = 0; r < 16; ++r) {
        for (int n = 0; n < 8; ++n) {
          for (int k = 0; k < 16; ++k) want[(w * 16 + r) * 8 + n] += A(r, k) * B(k, n);
        }
      }
      for (int lane = 0; lane < 32; ++lane) {  // mma.cuh's layout: g = lane / 4, t = lane % 4
        const int g = lane / 4, t = lane % 4;
        const std::size_t at = static_cast<std::size_t>(call) * kTotal + w * 32 + lane;
        a[at * 4 + 0] = pack(A(g, 2 * t), A(g, 2 * t + 1));
        a[at * 4 + 1] = pack(A(g + 8, 2 * t), A(g + 8, 2 * t + 1));
        a[at * 4 + 2] = pack(A(g, 2 * t + 8), A(g, 2 * t + 9));
        a[at * 4 + 3] = pack(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9));
        b[at * 2 + 0] = pack(B(2 * t, g), B(2 * t + 1, g));
        b[at * 2 + 1] = pack(B(2 * t + 8, g), B(2 * t + 9, g));
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      float* c = &d[(w * 32 + lane) * 4];
      c[0] = value(w + 100, g, 2 * t);
      c[1] = value(w + 100, g, 2 * t + 1);
      c[2] = value(w + 100, g + 8, 2 * t);
      c[3] = value(w + 100, g + 8, 2 * t + 1);
    }
  }
  std::uint32_t* d_a = device_copy(a);
  std::uint32_t* d_b = device_copy(b);
  float* d_d = device_copy(d);
  REQUIRE(emu_check::mma(d_a, d_b, d_d, kCalls, kBlocks, kThreads) == cudaSuccess);
  const std::vector<float> got = host_copy(d_d, d.size());
  std::size_t wrong = 0;
  for (int w = 0; w < kWarps; ++w) {
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, t = lane % 4;
      const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
      for (int i = 0; i < 4; ++i) {
        wrong += got[(w * 32 + lane) * 4 + i] != want[(w * 16 + rows[i]) * 8 + cols[i]];
      }
    }
  }
  CHECK(wrong == 0);
  cudaFree(d_a);
  cudaFree(d_b);
  cudaFree(d_d);
}

TEST_CASE("cuda: the emulator's ldmatrix .x4 .trans gives lane (g, t) column g of rows 2t, 2t + 1",
          "[emulator]") {
  // 32 distinct rows of 8 distinct values, lane l giving row (5 l + 3) % 32: matrix i is the
  // rows of lanes 8i .. 8i + 7, so any lane the emulator mistook for another shows.
  constexpr int kRows = 32;
  std::vector<std::uint16_t> rows(kRows * 8);
  for (int e = 0; e < kRows * 8; ++e) rows[e] = static_cast<std::uint16_t>(0x100 + e);
  std::vector<int> row_of(32);
  for (int lane = 0; lane < 32; ++lane) row_of[lane] = (5 * lane + 3) % kRows;
  std::uint16_t* d_rows = device_copy(rows);
  int* d_row_of = device_copy(row_of);
  std::uint32_t* d_out = device_copy(std::vector<std::uint32_t>(32 * 4));
  REQUIRE(emu_check::ldmatrix_x4_trans(d_rows, kRows, d_row_of, d_out) == cudaSuccess);
  const std::vector<std::uint32_t> out = host_copy(d_out, 32 * 4);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 4; ++i) {
      // Matrix i's element (row j, column c) = rows[row_of[8 i + j]][c].
      const auto element = [&](int j, int c) { return rows[row_of[8 * i + j] * 8 + c]; };
      const std::uint32_t want = element(2 * t, g) | std::uint32_t{element(2 * t + 1, g)} << 16;
      INFO("lane " << lane << ", register " << i);
      CHECK(out[lane * 4 + i] == want);
    }
  }
  cudaFree(d_rows);
  cudaFree(d_row_of);
  cudaFree(d_out);
}

TEST_CASE("cuda: the emulator's cp.async lands at its group's wait, and is NaN until then",
          "[emulator]") {
  constexpr int kThreads = 64;
  constexpr std::uint32_t kPoison = 0xffffffffu;
  std::vector<std::uint32_t> from(2 * kThreads * 4);
  for (std::size_t e = 0; e < from.size(); ++e) from[e] = static_cast<std::uint32_t>(1000 + e);
  std::uint32_t* d_from = device_copy(from);
  std::uint32_t* d_out = device_copy(std::vector<std::uint32_t>(kThreads * 6));
  REQUIRE(emu_check::async_copies(d_from, d_out, kThreads) == cudaSuccess);
  const std::vector<std::uint32_t> out = host_copy(d_out, kThreads * 6);
  // Word w of thread u's copy into region (0 or 1), once landed: zeros where u % 3 == 0.
  const auto copied = [&](int region, int u, int w) {
    return u % 3 == 0 ? 0u : from[4 * (region * kThreads + u) + w];
  };
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t);
    const int next = (t + 1) % kThreads;
    const std::uint32_t* got = &out[6 * t];
    CHECK(got[0] == kPoison);             // before any wait
    CHECK(got[1] == copied(0, t, 3));     // group 0 waited for
    CHECK(got[2] == kPoison);             // group 1 still in flight
    CHECK(got[3] == copied(0, next, 0));  // the neighbour waited for group 0 before the barrier
    // After its own last wait, the thread reads its neighbour's second copy, which has landed
    // only if the neighbour ran first: past the barrier the last thread to reach it goes on at
    // once, the others follow in rank order.
    CHECK(got[4] == (next == kThreads - 1 ? copied(1, next, 0) : kPoison));
    CHECK(got[5] == copied(1, next, 1));  // every thread waited before the barrier
  }
  cudaFree(d_from);
  cudaFree(d_out);
}

TEST_CASE("cuda: the emulator's shuffles take their source lane's value, their own past the warp",
          "[emulator]") {
  constexpr int kThreads = 64;
  std::vector<float> in(kThreads);
  for (int t = 0; t < kThreads; ++t) in[t] = static_cast<float>(t);
  float* d_in = device_copy(in);
  float* d_xor = device_copy(std::vector<float>(kThreads));
  float* d_down = device_copy(std::vector<float>(kThreads));
  for (const int step : {1, 16, 32}) {
    INFO("lane mask and delta " << step);
    REQUIRE(emu_check::shuffles(d_in, d_xor, d_down, step, static_cast<unsigned>(step), kThreads) ==
            cudaSuccess);
    const std::vector<float> xored = host_copy(d_xor, kThreads), down = host_copy(d_down, kThreads);
    for (int t = 0; t < kThreads; ++t) {
      const int lane = t % 32, warp0 = t - lane;
      const int xor_source = (lane ^ step) < 32 ? warp0 + (lane ^ step) : t;
      const int down_source = lane + step < 32 ? t + step : t;
      CHECK(xored[t] == static_cast<float>(xor_source));
      CHECK(down[t] == static_cast<float>(down_source));
    }
  }
  cudaFree(d_in);
  cudaFree(d_xor);
  cudaFree(d_down);
}

TEST_CASE("cuda: the emulator shows a missing __syncthreads as reads of poisoned shared memory",
          "[emulator]") {
  // Threads run in rank order between barriers, and each block's dynamic shared memory starts
  // as 0xff bytes (NaN): without the barrier a thread reads its right neighbour's cell before
  // the neighbour wrote it, in the second block as in the first.
  constexpr int kBlocks = 2, kThreads = 96;
  float* d_out = device_copy(std::vector<float>(kBlocks * kThreads));
  REQUIRE(emu_check::neighbours(d_out, true, kBlocks, kThreads) == cudaSuccess);
  std::vector<float> out = host_copy(d_out, kBlocks * kThreads);
  for (int blk = 0; blk < kBlocks; ++blk) {
    for (int t = 0; t < kThreads; ++t) {
      CHECK(out[blk * kThreads + t] == static_cast<float>(1 + (t + 1) % kThreads + 1000 * blk));
    }
  }
  REQUIRE(emu_check::neighbours(d_out, false, kBlocks, kThreads) == cudaSuccess);
  out = host_copy(d_out, kBlocks * kThreads);
  for (int blk = 0; blk < kBlocks; ++blk) {
    for (int t = 0; t + 1 < kThreads; ++t) CHECK(std::isnan(out[blk * kThreads + t]));
    CHECK(out[blk * kThreads + kThreads - 1] == static_cast<float>(1 + 1000 * blk));
  }
  cudaFree(d_out);
}

TEST_CASE("cuda: the emulator refuses the launches an sm_80 GPU refuses, with its errors",
          "[emulator]") {
  int* flag = device_copy(std::vector<int>{0});
  const auto ran = [&] {
    const int value = host_copy(flag, 1)[0];
    REQUIRE(cudaMemcpy(flag, std::vector<int>{0}.data(), sizeof(int), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    return value == 1;
  };
  CHECK(emu_check::touch(flag, 1, 1024, 0, -1, nullptr) == cudaSuccess);
  CHECK(ran());
  CHECK(emu_check::touch(flag, 1, 1025, 0, -1, nullptr) == cudaErrorInvalidConfiguration);
  CHECK(emu_check::touch(flag, 1, dim3(1, 1, 65), 0, -1, nullptr) == cudaErrorInvalidConfiguration);
  CHECK(emu_check::touch(flag, dim3(1, 65536), 32, 0, -1, nullptr) ==
        cudaErrorInvalidConfiguration);
  CHECK(emu_check::touch(flag, 0, 32, 0, -1, nullptr) == cudaErrorInvalidConfiguration);
  CHECK_FALSE(ran());
  CHECK(cudaGetLastError() == cudaSuccess);  // reading the error cleared it

  // Dynamic shared memory: 48 KiB without asking, up to 163 KiB once the attribute allows it.
  CHECK(emu_check::touch(flag, 1, 32, 48 << 10, -1, nullptr) == cudaSuccess);
  CHECK(ran());
  CHECK(emu_check::touch(flag, 1, 32, (48 << 10) + 4, -1, nullptr) == cudaErrorInvalidValue);
  CHECK_FALSE(ran());
  CHECK(emu_check::touch(flag, 1, 32, 100 << 10, 100 << 10, nullptr) == cudaSuccess);
  CHECK(ran());
  CHECK(emu_check::touch(flag, 1, 32, (100 << 10) + 4, -1, nullptr) == cudaErrorInvalidValue);
  CHECK(emu_check::touch(flag, 1, 32, 0, (163 << 10) + 4, nullptr) == cudaErrorInvalidValue);
  CHECK_FALSE(ran());

  // A stream that was destroyed.
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  CHECK(emu_check::touch(flag, 1, 32, 0, -1, stream) == cudaSuccess);
  CHECK(ran());
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(emu_check::touch(flag, 1, 32, 0, -1, stream) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamSynchronize(stream) == cudaErrorInvalidResourceHandle);
  CHECK_FALSE(ran());
  cudaFree(flag);
}

TEST_CASE("cuda: the emulator's memory is never zeroed, and copies stay where their kind says",
          "[emulator]") {
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 100) == cudaSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(device) % 256 == 0);
  std::vector<unsigned char> host(200, 0);
  REQUIRE(cudaMemcpy(host.data(), device, 100, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(std::count(host.begin(), host.begin() + 100, 0xff) == 100);
  CHECK(cudaMemcpy(host.data(), device, 101, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host.data(), device, 100, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidMemcpyDirection);
  CHECK(cudaMemcpy(device, host.data(), 100, cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidMemcpyDirection);
  CHECK(cudaMemcpy(device, host.data(), 100, cudaMemcpyDefault) == cudaSuccess);
  CHECK(cudaFree(host.data()) == cudaErrorInvalidDevicePointer);
  CHECK(cudaFree(nullptr) == cudaSuccess);
  CHECK(cudaFree(device) == cudaSuccess);
}

// ---- Broken kernels: each must abort with the emulator's report (see CMakeLists.txt) ----

TEST_CASE("cuda: the emulator aborts on __syncthreads in both branches of an if",
          "[.][emulator aborts]") {
  emu_check::barrier_in_both_branches();
}

TEST_CASE("cuda: the emulator aborts on __syncthreads after some threads returned",
          "[.][emulator aborts]") {
  emu_check::barrier_after_return();
}

TEST_CASE("cuda: the emulator aborts on a full-mask shuffle after lanes returned",
          "[.][emulator aborts]") {
  emu_check::shuffle_after_lanes_return();
}

TEST_CASE("cuda: the emulator aborts on a deadlock of a shuffle against __syncthreads",
          "[.][emulator aborts]") {
  emu_check::shuffle_against_barrier();
}

TEST_CASE("cuda: the emulator aborts on a read past a device allocation", "[.][emulator aborts]") {
  float* p = device_copy(std::vector<float>(64, 1.0f));
  emu_check::read_past_the_end(p, 64);
}

TEST_CASE("cuda: the emulator aborts on cp.async copies not waited for", "[.][emulator aborts]") {
  const std::uint32_t* from = device_copy(std::vector<std::uint32_t>(32, 7u));
  emu_check::copy_without_wait(from);
}

TEST_CASE("cuda: the emulator aborts on a host pointer passed to a kernel",
          "[.][emulator aborts]") {
  int host_flag = 0;
  emu_check::touch(&host_flag, 1, 32, 0, -1, nullptr);
}
