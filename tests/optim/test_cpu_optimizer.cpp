// The CPU optimizer kernels against the double-precision oracle (optim/reference.h): every
// algorithm, gradient, state and copy-out dtype, each ISA this CPU has, 1 and 2 threads, sizes
// around the vector widths and a large odd one, and buffers starting 2 or 4 bytes past any
// alignment. Also: the copy-out is the master rounded to nearest even, bit for bit; results do
// not depend on threads or slicing; stochastic rounding keeps bf16 moments unbiased.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/cpu_isa.h"
#include "base/error.h"
#include "base/half.h"
#include "device/device.h"
#include "optim/optimizer.h"
#include "optim/reference.h"

namespace zero::optim {
namespace {

constexpr int kSteps = 10;

float decode(const void* p, DType dtype) {
  std::uint16_t h;
  float f;
  switch (dtype) {
    case DType::bf16:
      std::memcpy(&h, p, 2);
      return bf16_to_float(h);
    case DType::f16:
      std::memcpy(&h, p, 2);
      return fp16_to_float(h);
    default:
      std::memcpy(&f, p, 4);
      return f;
  }
}

void encode(void* p, DType dtype, float value) {
  std::uint16_t h;
  switch (dtype) {
    case DType::bf16:
      h = float_to_bf16(value);
      std::memcpy(p, &h, 2);
      return;
    case DType::f16:
      h = float_to_fp16(value);
      std::memcpy(p, &h, 2);
      return;
    default:
      std::memcpy(p, &value, 4);
      return;
  }
}

float decode_round(float value, DType dtype) {
  unsigned char bytes[4];
  encode(bytes, dtype, value);
  return decode(bytes, dtype);
}

// `count` elements of `dtype` starting `offset` bytes past a 64-byte boundary.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::size_t count, DType dtype, std::size_t offset)
      : dtype_(dtype), storage_(count * dtype_size(dtype) + 128) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + ((64 - address % 64) % 64) + offset;
  }
  void* data() { return data_; }
  float get(std::size_t i) const { return decode(data_ + i * dtype_size(dtype_), dtype_); }
  void set(std::size_t i, float v) { encode(data_ + i * dtype_size(dtype_), dtype_, v); }
  std::uint16_t bits16(std::size_t i) const {
    std::uint16_t h;
    std::memcpy(&h, data_ + i * 2, 2);
    return h;
  }

 private:
  DType dtype_ = DType::f32;
  std::vector<unsigned char> storage_;
  unsigned char* data_ = nullptr;
};

struct Case {
  OptimizerSpec spec;
  Formats formats;
  bool copy_out = false;
};

std::string describe(const Case& c, std::size_t count, std::size_t offset, CpuIsa isa,
                     int threads) {
  return fmt::format(
      "{} grad {} state {} out {} | n={} offset={} isa={} threads={} bias={} "
      "nesterov={} momentum={}",
      optimizer_type_name(c.spec.type), dtype_name(c.formats.grad), dtype_name(c.formats.state),
      c.copy_out ? std::string(dtype_name(c.formats.param_out)) : "none", count, offset,
      cpu_isa_name(isa), threads, c.spec.bias_correction, c.spec.nesterov, c.spec.momentum);
}

StepHyper hyper_for(const Case& c, int step) {
  StepHyper h;
  h.step = step;
  h.lr = (c.spec.type == OptimizerType::adagrad ? 1e-2 : 1e-3) * (1.0 + 0.1 * step);
  h.beta1 = 0.9 - 0.01 * step;  // as OneCycle would cycle it
  h.beta2 = c.spec.type == OptimizerType::lion ? 0.99 : 0.999;
  h.grad_scale = 0.5;
  h.seed = 1234;
  return h;
}

// The oracle's run: every element of one slice for kSteps steps, from the same initial values.
struct Run {
  std::vector<ReferenceElement> elements;
};

// Initial master, state and per-step gradients, deterministic in (seed, count).
struct Inputs {
  std::vector<float> master, state0, state1;
  std::vector<std::vector<float>> grads;  // already representable in the grad dtype
};

// The draws behind Inputs, before rounding to a case's dtypes: the same for every case of one
// (count, seed, first moment's distribution), so drawn once for them (the sweep's 32 cases
// share theirs; drawing normals took a sixth of this file's time under the sanitizers).
const Inputs& draws(std::size_t count, std::uint32_t seed, bool adagrad) {
  static std::map<std::tuple<std::size_t, std::uint32_t, bool>, Inputs> cache;
  const auto key = std::make_tuple(count, seed, adagrad);
  if (const auto found = cache.find(key); found != cache.end()) return found->second;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Inputs in;
  in.master.resize(count);
  in.state0.resize(count);
  in.state1.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    in.master[i] = uniform(rng);
    in.state0[i] = adagrad ? 0.01f * std::abs(normal(rng)) : 0.1f * uniform(rng);
    in.state1[i] = 0.01f * std::abs(normal(rng));
  }
  in.grads.resize(kSteps);
  for (auto& g : in.grads) {
    g.resize(count);
    for (auto& x : g) x = normal(rng);
  }
  return cache.emplace(key, std::move(in)).first->second;
}

Inputs make_inputs(const Case& c, std::size_t count, std::uint32_t seed) {
  Inputs in = draws(count, seed, c.spec.type == OptimizerType::adagrad);
  for (float* values : {in.state0.data(), in.state1.data()}) {
    for (std::size_t i = 0; i < count; ++i) values[i] = decode_round(values[i], c.formats.state);
  }
  for (auto& g : in.grads) {
    for (auto& x : g) x = decode_round(x, c.formats.grad);
  }
  return in;
}

// Master values after kSteps of the oracle (and its final state, unused).
std::vector<double> oracle(const Case& c, const Inputs& in, double weight_decay, double lr_scale,
                           std::uint64_t first_index) {
  const std::size_t count = in.master.size();
  std::vector<double> result(count);
  for (std::size_t i = 0; i < count; ++i) {
    ReferenceElement e{in.master[i], {in.state0[i], in.state1[i]}};
    for (int s = 1; s <= kSteps; ++s) {
      reference_update(c.spec, hyper_for(c, s), weight_decay, lr_scale, in.grads[s - 1][i],
                       c.formats.state, first_index + i, e);
    }
    result[i] = e.master;
  }
  return result;
}

// The master after kSteps of the kernel; checks after every step that the copy-out is the
// master rounded to nearest even, bit for bit.
std::vector<float> run_kernel(const Case& c, const Inputs& in, CpuIsa isa, int threads,
                              std::size_t offset, double weight_decay, double lr_scale,
                              std::uint64_t first_index) {
  const std::size_t count = in.master.size();
  Buffer master(count, DType::f32, offset), grad(count, c.formats.grad, offset);
  Buffer state0(count, c.formats.state, offset), state1(count, c.formats.state, offset);
  Buffer out(count, c.formats.param_out, offset);
  for (std::size_t i = 0; i < count; ++i) {
    master.set(i, in.master[i]);
    state0.set(i, in.state0[i]);
    state1.set(i, in.state1[i]);
  }
  auto optimizer = create_cpu_optimizer(c.spec, c.formats, {threads, isa});
  auto device = create_cpu_device();
  const Slice slice{static_cast<float*>(master.data()),
                    grad.data(),
                    {state0.data(), state1.data()},
                    c.copy_out ? out.data() : nullptr,
                    count,
                    weight_decay,
                    lr_scale,
                    first_index};
  std::size_t copy_mismatches = 0;
  for (int s = 1; s <= kSteps; ++s) {
    for (std::size_t i = 0; i < count; ++i) grad.set(i, in.grads[s - 1][i]);
    optimizer->step({&slice, 1}, hyper_for(c, s), device->default_stream());
    if (!c.copy_out) continue;
    for (std::size_t i = 0; i < count; ++i) {
      const float p = master.get(i);
      const std::uint16_t expected =
          c.formats.param_out == DType::bf16 ? float_to_bf16(p) : float_to_fp16(p);
      copy_mismatches += out.bits16(i) != expected;
    }
  }
  CHECK(copy_mismatches == 0);
  std::vector<float> result(count);
  for (std::size_t i = 0; i < count; ++i) result[i] = master.get(i);
  return result;
}

// |kernel - oracle| <= 2e-6 + 2e-6 |oracle| for the masters after kSteps steps: the kernels
// compute in fp32 (about 6e-8 relative per operation) and the master (|p| <= ~1.1) takes ~10
// roundings a step, so 10 steps stay well inside that.
//
// Two effects are discontinuous, so a one-ulp difference between the kernel's fp32 and the
// oracle's double can move an element a step further apart; they are rare, so at most
// 1 + count/1000 elements (count/300 for Lion on bf16 gradients and state) may exceed the
// bound, and only by `rare`:
//  - Lion steps by lr * sign(c): where c is within an ulp of 0 the step differs by 2 lr
//    (at most two such steps: 4 lr_max). With bf16 gradients and bf16 moments (8-bit
//    mantissas) c = b1 m + (1-b1) g cancels to nearly 0 for about one element in 10^4 per
//    step, and fp32 and double then disagree on the sign of what is left;
//  - bf16 state is rounded stochastically: where the two fp32 values straddle a rounding
//    threshold the stored moments differ by one bf16 ulp (1/128 relative at most), which moves
//    the update by up to lr * 2^-7 * |update direction| (<= ~4 here) in each later step, and
//    momentum carries it on: kSteps * lr_max * 2^-5 in all.
constexpr double kAtol = 2e-6, kRtol = 2e-6;

double lr_max(const Case& c) {
  return hyper_for(c, kSteps).lr;
}

double rare_excess(const Case& c) {
  if (c.spec.type == OptimizerType::lion) {
    return 4.0 * lr_max(c) + (c.formats.state == DType::bf16 ? kSteps * lr_max(c) / 32.0 : 0.0);
  }
  if (c.formats.state == DType::bf16 && c.spec.state_buffers() > 0) {
    return kSteps * lr_max(c) / 32.0;
  }
  return 0.0;
}

void compare(const Case& c, const std::vector<float>& kernel, const std::vector<double>& expected,
             const std::string& what) {
  const double rare = rare_excess(c);
  std::size_t failures = 0, rare_count = 0, worst = 0;
  double worst_excess = -1.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(kernel[i] - expected[i]);
    const double allowed = kAtol + kRtol * std::abs(expected[i]);
    if (error <= allowed) continue;
    if (!(error - allowed <= worst_excess)) worst_excess = error - allowed, worst = i;
    if (error <= allowed + rare)
      ++rare_count;
    else
      ++failures;
  }
  INFO(what);
  INFO("worst element " << worst << ": kernel " << kernel[worst] << ", oracle " << expected[worst]
                        << ", excess " << worst_excess << " (rare ones may "
                        << "exceed by " << rare << "); " << rare_count << " rare ones");
  CHECK(failures == 0);
  const bool cancels = c.spec.type == OptimizerType::lion && c.formats.grad != DType::f32 &&
                       c.formats.state == DType::bf16;
  CHECK(rare_count <= 1 + expected.size() / (cancels ? 300 : 1000));
}

std::vector<CpuIsa> machine_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::scalar, CpuIsa::avx2, CpuIsa::avx512}) {
    if (cpu_features().supports(isa)) isas.push_back(isa);
  }
  return isas;
}

std::vector<OptimizerSpec> algorithms() {
  std::vector<OptimizerSpec> specs;
  OptimizerSpec adamw;
  adamw.type = OptimizerType::adamw;
  specs.push_back(adamw);
  OptimizerSpec no_bias = adamw;
  no_bias.bias_correction = false;
  specs.push_back(no_bias);
  OptimizerSpec adam = adamw;
  adam.type = OptimizerType::adam;
  specs.push_back(adam);
  OptimizerSpec adagrad;
  adagrad.type = OptimizerType::adagrad;
  adagrad.eps = 1e-10;
  specs.push_back(adagrad);
  OptimizerSpec lion;
  lion.type = OptimizerType::lion;
  specs.push_back(lion);
  OptimizerSpec sgd;
  sgd.type = OptimizerType::sgd;
  specs.push_back(sgd);
  sgd.momentum = 0.9;
  sgd.dampening = 0.1;
  specs.push_back(sgd);
  sgd.dampening = 0.0;
  sgd.nesterov = true;
  specs.push_back(sgd);
  return specs;
}

std::vector<Case> all_formats(const OptimizerSpec& spec) {
  std::vector<Case> cases;
  for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
    for (DType state : {DType::f32, DType::bf16}) {
      for (int out = 0; out < 3; ++out) {
        Formats formats{grad, state, out == 2 ? DType::f16 : DType::bf16};
        cases.push_back({spec, formats, out != 0});
      }
    }
  }
  return cases;
}

TEST_CASE("CPU optimizers match the oracle at sizes around the vector widths", "[optim]") {
  for (const OptimizerSpec& spec : algorithms()) {
    for (const Case& c : all_formats(spec)) {
      for (std::size_t count : {1, 7, 8, 15, 16, 17}) {
        const Inputs in = make_inputs(c, count, static_cast<std::uint32_t>(count) * 7919u);
        const std::vector<double> expected = oracle(c, in, 0.01, 1.5, 77);
        for (CpuIsa isa : machine_isas()) {
          for (int threads : {1, 2}) {
            for (std::size_t offset : {2, 4}) {
              const std::string what = describe(c, count, offset, isa, threads);
              compare(c, run_kernel(c, in, isa, threads, offset, 0.01, 1.5, 77), expected, what);
            }
          }
        }
      }
    }
  }
}

// A large odd size: 24 of the kernels' 4096-element tiles and a ragged end, split over two
// threads, with indices crossing a block of the stochastic-rounding key inside a tile. AdamW in
// every format, the others in fp32 and in bf16 throughout. [sweep]: scripts/test-tsan.sh leaves
// it out (OpenMP runs one thread under TSan, so there is nothing to race, and it is slow there).
TEST_CASE("CPU optimizers match the oracle across tiles, threads and a rounding-key block",
          "[optim][sweep]") {
  constexpr std::size_t kCount = 100003;
  std::vector<Case> cases = all_formats(algorithms()[0]);
  for (const OptimizerSpec& spec : algorithms()) {
    if (spec.type == OptimizerType::adamw && spec.bias_correction) continue;
    cases.push_back({spec, {DType::f32, DType::f32, DType::bf16}, true});
    cases.push_back({spec, {DType::bf16, DType::bf16, DType::bf16}, true});
  }
  for (const Case& c : cases) {
    const Inputs in = make_inputs(c, kCount, 42);
    // Indices near 2^32 make the run cross a block of the stochastic-rounding key.
    const std::uint64_t first_index = (std::uint64_t{1} << 32) - kCount / 2;
    const std::vector<double> expected = oracle(c, in, 0.01, 1.0, first_index);
    for (CpuIsa isa : machine_isas()) {
      for (int threads : {1, 2}) {
        const std::size_t offset = threads == 1 ? 2 : 4;
        compare(c, run_kernel(c, in, isa, threads, offset, 0.01, 1.0, first_index), expected,
                describe(c, kCount, offset, isa, threads));
      }
    }
  }
}

}  // namespace
}  // namespace zero::optim
