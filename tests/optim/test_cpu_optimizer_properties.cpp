// Properties of the CPU optimizer beyond matching the oracle: results are bit-identical for
// any thread count and any slicing of the flat buffer (the engine slices by parameter group,
// NVMe sub-group and rank); stochastic rounding keeps bf16 moments unbiased where rounding to
// nearest stalls; the ISA choice honours ZERO_CPU_ISA; bad arguments are refused with errors
// that say what is wrong.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu_isa.h"
#include "base/error.h"
#include "base/half.h"
#include "device/device.h"
#include "optim/cpu/kernels.h"
#include "optim/optimizer.h"
#include "optim/rounding.h"

namespace zero::optim {
namespace {

// fp32 master, bf16 grads, bf16 state and copy-out for n elements: everything the
// stochastic rounding and the slicing touch.
struct Buffers {
  explicit Buffers(std::size_t n, std::uint32_t seed) : master(n), grad(n), m(n), v(n), out(n) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) {
      master[i] = normal(rng);
      grad[i] = float_to_bf16(normal(rng));
    }
  }
  Slice slice(std::size_t begin, std::size_t count, std::uint64_t first_index) {
    return Slice{master.data() + begin,
                 grad.data() + begin,
                 {m.data() + begin, v.data() + begin},
                 out.data() + begin,
                 count,
                 0.01,
                 1.0,
                 first_index};
  }
  std::vector<float> master;
  std::vector<std::uint16_t> grad, m, v, out;
};

bool same_bits(const Buffers& a, const Buffers& b) {
  return std::memcmp(a.master.data(), b.master.data(), a.master.size() * 4) == 0 && a.m == b.m &&
         a.v == b.v && a.out == b.out;
}

StepHyper hyper(int step) {
  StepHyper h;
  h.step = step;
  h.lr = 1e-3;
  h.seed = 99;
  return h;
}

TEST_CASE("CPU optimizer results do not depend on threads or slicing", "[optim]") {
  constexpr std::size_t n = 300007;
  const Formats formats{DType::bf16, DType::bf16, DType::bf16};
  OptimizerSpec spec;  // AdamW
  auto device = create_cpu_device();
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_features().supports(isa)) continue;
    INFO("isa " << cpu_isa_name(isa));
    Buffers whole(n, 1), pieces(n, 1);
    auto one = create_cpu_optimizer(spec, formats, {1, isa});
    auto two = create_cpu_optimizer(spec, formats, {2, isa});
    const std::uint64_t base = 5'000'000'000;  // past 2^32: the key's high bits matter
    for (int step = 1; step <= 3; ++step) {
      const Slice all = whole.slice(0, n, base);
      one->step({&all, 1}, hyper(step), device->default_stream());
      // Three slices at odd boundaries, in the opposite order, on two threads.
      const Slice parts[] = {pieces.slice(200001, n - 200001, base + 200001),
                             pieces.slice(13, 200001 - 13, base + 13), pieces.slice(0, 13, base)};
      two->step(parts, hyper(step), device->default_stream());
    }
    CHECK(same_bits(whole, pieces));
  }
}

TEST_CASE(
    "a step with its verdict in memory reads it when it runs: a set flag writes only the copy-out "
    "from the masters, else the gradient scale is the one the host computes from the norm and "
    "the clip",
    "[optim]") {
  constexpr std::size_t n = 4099;
  const Formats formats{DType::bf16, DType::bf16, DType::bf16};
  auto device = create_cpu_device();
  for (OptimizerType type : {OptimizerType::adamw, OptimizerType::sgd, OptimizerType::lion}) {
    OptimizerSpec spec;
    spec.type = type;
    spec.momentum = 0.9;
    INFO(optimizer_type_name(type));
    CpuOptimizerOptions options;
    options.threads = 2;
    auto optimizer = create_cpu_optimizer(spec, formats, options);
    for (const double max_norm : {0.0, 1.5, 1e9}) {
      INFO("max_norm " << max_norm);
      Buffers host(n, 3), read(n, 3);
      float verdict[2] = {0.0f, 0.0f};
      for (std::uint16_t g : host.grad) {
        const float value = bf16_to_float(g) * 8.0f;  // the gradients carry a loss scale of 8
        verdict[0] += value * value;
      }
      StepHyper decided = hyper(1);
      decided.grad_scale = step_grad_scale(unscaled_norm(verdict[0], 8.0), 8.0, max_norm);
      const Slice a = host.slice(0, n, 0);
      optimizer->step({&a, 1}, decided, device->default_stream());
      StepHyper deferred = hyper(1);
      deferred.grad_scale = 1234.0;  // replaced by the verdict's
      deferred.verdict = verdict;
      deferred.loss_scale = 8.0;
      deferred.max_norm = max_norm;
      const Slice b = read.slice(0, n, 0);
      optimizer->step({&b, 1}, deferred, device->default_stream());
      CHECK(same_bits(host, read));
      if (max_norm == 1.5) CHECK(decided.grad_scale < 1.0 / 8.0);  // it clipped
      // A non-finite flag: masters and state stay, and the copy-out is written from the masters
      // (cleared first on both sides, so that only a write brings it back).
      std::fill(host.out.begin(), host.out.end(), 0);
      std::fill(read.out.begin(), read.out.end(), 0);
      optimizer->write_param_out({&a, 1}, device->default_stream());
      verdict[1] = 1.0f;
      deferred.step = 2;
      optimizer->step({&b, 1}, deferred, device->default_stream());
      CHECK(same_bits(host, read));
      CHECK(std::count(read.out.begin(), read.out.end(), 0) < static_cast<std::ptrdiff_t>(n / 2));
    }
  }
}

// A flat copy of the state for n elements (fp32 master, `state` moments), placed `shift`
// elements past a 64-byte boundary, with `pad` elements of 0xab either side.
struct StateCopy {
  StateCopy(std::size_t n, DType state, std::size_t shift, std::size_t master_shift)
      : size(dtype_size(state)),
        master_bytes(n * 4 + 256, 0xab),
        m_bytes(n * size + 256, 0xab),
        v_bytes(n * size + 256, 0xab) {
    master = reinterpret_cast<float*>(aligned(master_bytes) + master_shift * 4);
    m = aligned(m_bytes) + shift * size;
    v = aligned(v_bytes) + shift * size;
  }
  static unsigned char* aligned(std::vector<unsigned char>& bytes) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(bytes.data()) + 127) /
                                            64 * 64);
  }
  std::size_t size;
  std::vector<unsigned char> master_bytes, m_bytes, v_bytes;
  float* master;
  unsigned char* m;
  unsigned char* v;
};

TEST_CASE(
    "a step from another copy of the state gives a step in place's bits and leaves that "
    "copy as it was",
    "[optim]") {
  // Odd sizes across tiles (4096 elements) and threads; destinations at odd offsets from the
  // vectors' alignment (the streamed stores begin at the first aligned vector), and with the
  // moments' alignment unlike the master's (no stream stores at all); one slice from the
  // other copy, one in place.
  constexpr std::size_t n = 20011, split = 9001;
  auto device = create_cpu_device();
  std::vector<float> grad(n);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& g : grad) g = normal(rng);
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_features().supports(isa)) continue;
    for (DType state : {DType::bf16, DType::f32}) {
      const Formats formats{DType::f32, state, DType::bf16};
      for (OptimizerType type : {OptimizerType::adamw, OptimizerType::lion, OptimizerType::sgd,
                                 OptimizerType::adagrad}) {
        for (auto [shift, master_shift] :
             {std::pair<std::size_t, std::size_t>{0, 0}, {5, 5}, {16, 16}, {3, 4}}) {
          INFO(cpu_isa_name(isa) << " " << dtype_name(state) << " " << optimizer_key(type)
                                 << ", destination " << shift << " and " << master_shift
                                 << " elements past 64 bytes");
          OptimizerSpec spec;
          spec.type = type;
          spec.momentum = 0.9;
          auto optimizer = create_cpu_optimizer(spec, formats, {2, isa});
          const int states = spec.state_buffers();
          StateCopy plain(n, state, 0, 0), from(n, state, 0, 0),
              into(n, state, shift, master_shift);
          std::vector<std::uint16_t> plain_out(n), into_out(n);
          const auto slice = [&](StateCopy& c, std::vector<std::uint16_t>& out, std::size_t begin,
                                 std::size_t count) {
            Slice s;
            s.master = c.master + begin;
            s.grad = grad.data() + begin;
            s.state[0] = states >= 1 ? c.m + begin * c.size : nullptr;
            s.state[1] = states >= 2 ? c.v + begin * c.size : nullptr;
            s.param_out = out.data() + begin;
            s.count = count;
            s.weight_decay = 0.01;
            s.first_index = 17 + begin;
            return s;
          };
          // Step 1 in place from random masters and zero moments, so that the moments step 2
          // reads are not zeros.
          for (std::size_t i = 0; i < n; ++i) plain.master[i] = normal(rng);
          std::memset(plain.m, 0, n * plain.size);
          std::memset(plain.v, 0, n * plain.size);
          const Slice first = slice(plain, plain_out, 0, n);
          optimizer->step({&first, 1}, hyper(1), device->default_stream());
          std::memcpy(from.master, plain.master, n * 4);
          std::memcpy(from.m, plain.m, n * plain.size);
          std::memcpy(from.v, plain.v, n * plain.size);
          const StateCopy before = from;
          // The destination holds the first slice's state (stepped in place there) and garbage
          // where the second slice's step writes.
          std::memcpy(into.master, plain.master, split * 4);
          std::memcpy(into.m, plain.m, split * plain.size);
          std::memcpy(into.v, plain.v, split * plain.size);
          Slice parts[] = {slice(into, into_out, 0, split),
                           slice(into, into_out, split, n - split)};
          parts[1].master_from = from.master + split;
          parts[1].state_from[0] = states >= 1 ? from.m + split * from.size : nullptr;
          parts[1].state_from[1] = states >= 2 ? from.v + split * from.size : nullptr;
          const Slice all = slice(plain, plain_out, 0, n);
          optimizer->step({&all, 1}, hyper(2), device->default_stream());
          optimizer->step(parts, hyper(2), device->default_stream());
          CHECK(std::memcmp(into.master, plain.master, n * 4) == 0);
          CHECK(std::memcmp(into.m, plain.m, states >= 1 ? n * plain.size : 0) == 0);
          CHECK(std::memcmp(into.v, plain.v, states >= 2 ? n * plain.size : 0) == 0);
          CHECK(into_out == plain_out);
          // The copy read, and everything around it, as it was; nothing written past the
          // destination's elements.
          CHECK(from.master_bytes == before.master_bytes);
          CHECK(from.m_bytes == before.m_bytes);
          CHECK(from.v_bytes == before.v_bytes);
          const auto untouched_around = [n](const std::vector<unsigned char>& bytes,
                                            const void* first_byte, std::size_t size) {
            const auto* at = static_cast<const unsigned char*>(first_byte);
            std::size_t touched = 0;
            for (const unsigned char* p = bytes.data(); p < bytes.data() + bytes.size(); ++p) {
              if ((p < at || p >= at + n * size) && *p != 0xab) ++touched;
            }
            return touched;
          };
          CHECK(untouched_around(into.master_bytes, into.master, 4) == 0);
          CHECK(untouched_around(into.m_bytes, into.m, into.size) == 0);
          CHECK(untouched_around(into.v_bytes, into.v, into.size) == 0);
        }
      }
    }
  }
}

TEST_CASE("a step from another copy of only some of its buffers is refused", "[optim]") {
  constexpr std::size_t n = 64;
  auto device = create_cpu_device();
  auto optimizer = create_cpu_optimizer(OptimizerSpec{}, {DType::bf16, DType::bf16, DType::bf16},
                                        {1, selected_cpu_isa()});
  Buffers buffers(n, 3), other(n, 4);
  Slice s = buffers.slice(0, n, 0);
  s.master_from = other.master.data();
  s.state_from[0] = other.m.data();
  CHECK_THROWS_WITH(optimizer->step({&s, 1}, hyper(1), device->default_stream()),
                    Catch::Contains("slice 0 is stepped from another copy of its state but has "
                                    "no state[1] there"));
  CHECK(buffers.master == Buffers(n, 3).master);  // refused before anything is written
  // A state buffer given beside those the algorithm updates (Lion has one moment) needs its
  // other copy too: the kernels' partial vectors copy it.
  auto lion = create_cpu_optimizer(
      [] {
        OptimizerSpec spec;
        spec.type = OptimizerType::lion;
        return spec;
      }(),
      {DType::bf16, DType::bf16, DType::bf16}, {1, selected_cpu_isa()});
  s.state_from[1] = nullptr;
  CHECK_THROWS_WITH(lion->step({&s, 1}, hyper(1), device->default_stream()),
                    Catch::Contains("has no state[1] there"));
  s.state[1] = nullptr;
  lion->step({&s, 1}, hyper(1), device->default_stream());  // none given: none needed
}

TEST_CASE("stochastic rounding is unbiased and keeps bf16 moments moving", "[optim]") {
  SECTION("the mean of many roundings is the value") {
    const float x = 1.0f + 3.0f / 1024.0f;  // 3/8 of the way from one bf16 value to the next
    double sum = 0.0;
    constexpr int kSamples = 1 << 16;
    const std::uint32_t key = rounding_key(7, 1, 0);
    for (int i = 0; i < kSamples; ++i) {
      sum += bf16_to_float(float_to_bf16_stochastic(x, rounding_bits(key, i) & 0xffffu));
    }
    CHECK(sum / kSamples == Approx(x).epsilon(1e-4));
    CHECK(bf16_to_float(float_to_bf16(x)) == 1.0f);  // nearest rounding would always give 1
  }
  SECTION("Adam's second moment decays under zero gradients as in fp32") {
    // With beta2 = 0.999, each step shrinks v by 0.1%: under half a bf16 ulp, so rounding to
    // nearest would keep v where it is. Stochastic rounding follows 0.999^t on average.
    constexpr std::size_t n = 100000;
    std::vector<float> master(n, 0.0f), grad(n, 0.0f);
    std::vector<std::uint16_t> m(n, 0), v(n, float_to_bf16(1.0f));
    OptimizerSpec spec;
    auto optimizer = create_cpu_optimizer(spec, {DType::f32, DType::bf16, DType::bf16});
    auto device = create_cpu_device();
    const Slice slice{master.data(), grad.data(), {m.data(), v.data()}, nullptr, n, 0.0, 1.0, 0};
    constexpr int kSteps = 200;
    for (int step = 1; step <= kSteps; ++step) {
      optimizer->step({&slice, 1}, hyper(step), device->default_stream());
    }
    double mean = 0.0;
    for (std::uint16_t h : v) mean += bf16_to_float(h);
    mean /= n;
    CHECK(mean == Approx(std::pow(0.999, kSteps)).epsilon(2e-3));  // 0.8186, not 1
  }
}

TEST_CASE("write_param_out rounds the master to nearest even and touches nothing else", "[optim]") {
  constexpr std::size_t n = 20011;
  auto device = create_cpu_device();
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (!cpu_features().supports(isa)) continue;
    for (DType out : {DType::bf16, DType::f16}) {
      INFO(cpu_isa_name(isa) << " " << dtype_name(out));
      Buffers b(n, 3);
      b.master[5] = 1e-40f;    // a subnormal: nearest-even keeps it (bf16) or flushes it (fp16)
      b.master[6] = 70000.0f;  // past fp16's range: infinity
      const Buffers before = b;
      auto optimizer = create_cpu_optimizer({}, {DType::bf16, DType::bf16, out}, {2, isa});
      const Slice slices[] = {b.slice(0, 7, 0), b.slice(7, n - 7, 7)};
      optimizer->write_param_out(slices, device->default_stream());
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float p = b.master[i];
        wrong += b.out[i] != (out == DType::bf16 ? float_to_bf16(p) : float_to_fp16(p));
      }
      CHECK(wrong == 0);
      CHECK(b.master == before.master);
      CHECK(b.m == before.m);
      CHECK(b.v == before.v);
    }
  }
}

TEST_CASE("the CPU optimizer's description names a copy-out only when there is one", "[optim]") {
  Formats mixed{DType::bf16, DType::f32, DType::bf16};
  CHECK_THAT(create_cpu_optimizer({}, mixed)->description(),
             Catch::EndsWith("bf16 grads, fp32 state, bf16 copy-out"));
  Formats fp32{DType::f32, DType::f32, DType::bf16};
  fp32.copy_out = false;
  CHECK_THAT(create_cpu_optimizer({}, fp32)->description(),
             Catch::EndsWith("fp32 grads, fp32 state, no copy-out"));
}

TEST_CASE("the CPU ISA is the best the CPU has unless ZERO_CPU_ISA forces one", "[optim]") {
  const char* saved = std::getenv("ZERO_CPU_ISA");
  const std::string restore = saved ? saved : "";
  ::unsetenv("ZERO_CPU_ISA");
  CHECK(selected_cpu_isa() == best_cpu_isa());
  ::setenv("ZERO_CPU_ISA", "scalar", 1);
  CHECK(selected_cpu_isa() == CpuIsa::scalar);
  CHECK_THAT(create_cpu_optimizer({}, {})->description(), Catch::Contains("scalar"));
  ::setenv("ZERO_CPU_ISA", "sse9", 1);
  CHECK_THROWS_WITH(selected_cpu_isa(), Catch::Contains("ZERO_CPU_ISA=\"sse9\": expected scalar, "
                                                        "avx2 or avx512"));
  if (!cpu_features().supports(CpuIsa::avx512)) {
    ::setenv("ZERO_CPU_ISA", "avx512", 1);
    CHECK_THROWS_WITH(selected_cpu_isa(), Catch::Contains("cannot run the avx512 kernels"));
  }
  if (restore.empty())
    ::unsetenv("ZERO_CPU_ISA");
  else
    ::setenv("ZERO_CPU_ISA", restore.c_str(), 1);
  CHECK(parse_cpu_isa("avx2") == CpuIsa::avx2);
  CHECK_FALSE(parse_cpu_isa("AVX2").has_value());
}

TEST_CASE("the CPU optimizer refuses what it cannot step, saying why", "[optim]") {
  auto device = create_cpu_device();
  CHECK_THROWS_WITH(create_cpu_optimizer({}, {DType::i64, DType::f32, DType::bf16}),
                    Catch::Contains("gradients of dtype int64"));
  CHECK_THROWS_WITH(create_cpu_optimizer({}, {DType::f32, DType::f16, DType::bf16}),
                    Catch::Contains("state of dtype fp16 is not supported; use fp32 or bf16"));
  CHECK_THROWS_WITH(create_cpu_optimizer({}, {DType::f32, DType::f32, DType::f32}),
                    Catch::Contains("copy-out must be bf16 or fp16"));
  CHECK_THROWS_WITH(create_cpu_optimizer({}, {}, {0, std::nullopt}), Catch::Contains("0 threads"));

  auto adam = create_cpu_optimizer({}, {});
  std::vector<float> master(10), grad(10), m(10);
  const Slice no_v{master.data(), grad.data(), {m.data(), nullptr}, nullptr, 10, 0.0, 1.0, 0};
  CHECK_THROWS_WITH(adam->step({&no_v, 1}, hyper(1), device->default_stream()),
                    Catch::Contains("slice 0 (10 elements) has no state[1] buffer"));
  CHECK_THROWS_WITH(adam->step({}, hyper(0), device->default_stream()),
                    Catch::Contains("step number 0"));
  // SGD without momentum has no state, so it needs none.
  OptimizerSpec sgd;
  sgd.type = OptimizerType::sgd;
  const Slice bare{master.data(), grad.data(), {nullptr, nullptr}, nullptr, 10, 0.0, 1.0, 0};
  std::fill(grad.begin(), grad.end(), 1.0f);
  create_cpu_optimizer(sgd, {})->step({&bare, 1}, hyper(1), device->default_stream());
  CHECK(master[9] == Approx(-1e-3));
}

}  // namespace
}  // namespace zero::optim
