// The CUDA optimizer (optim/cuda: multi-tensor fused Adam and AdamW) on a GPU: against the
// double-precision oracle of optim/reference.h over 10 steps, bit for bit against the portable
// CPU kernel (which does the same fp32 operations in the same order), write_param_out, and its
// refusals. Every case runs 101 slices in one step call: three launches' worth, sizes
// around the vector width, across chunk boundaries and a million, buffers starting 0, 2, 4
// and 6 bytes (fp32: 0, 4, 8 and 12) past a 256-byte boundary, some aligned alike (the
// kernel's packed path) and some not, some without a copy-out, and flat indices that cross
// 2^32 (a new stochastic-rounding key) inside a slice.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/cpu_isa.h"
#include "base/error.h"
#include "base/half.h"
#include "device/device.h"
#include "optim/cuda/fused_adam.h"
#include "optim/optimizer.h"
#include "optim/reference.h"

namespace zero::optim {
namespace {

constexpr int kSteps = 10;
constexpr std::size_t kChunk = cuda::kFusedAdamChunk;
constexpr std::size_t kBigCount = 1000003;

// ---- Deterministic inputs: a hash of (what, slice, element), no generator state ----

std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A double in [0, 1) from the key.
double unit(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  const std::uint64_t bits = mix(mix(mix(a) ^ b) ^ c);
  return static_cast<double>(bits >> 11) * 0x1p-53;
}

// A gradient: random sign, magnitude 2^e (1 + u) with e in [-16, 2], so bf16 and fp16 see
// both large values and (fp16) subnormals.
float random_grad(std::uint64_t step, std::uint64_t slice, std::uint64_t i) {
  const double u = unit(step, slice, i);
  const int exponent = static_cast<int>(u * 19.0) - 16;
  const double fraction = u * 19.0 - std::floor(u * 19.0);
  const double magnitude = std::ldexp(1.0 + fraction, exponent);
  return static_cast<float>(unit(step + 1000, slice, i) < 0.5 ? -magnitude : magnitude);
}

float decode(const unsigned char* p, DType dtype) {
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

void encode(unsigned char* p, DType dtype, float value) {
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

// ---- The slices and where their buffers lie ----

struct SliceShape {
  std::size_t count = 0;
  double weight_decay = 0.0;
  double lr_scale = 1.0;
  std::uint64_t first_index = 0;
  std::size_t master_skew = 0;  // elements past a 256-byte boundary
  std::size_t other_skew = 0;   // the same for grad, state and copy-out
  bool copy_out = true;         // when the case has a copy-out at all
};

constexpr std::size_t kRounds = 16;
constexpr std::size_t kSliceCount = kRounds * 6 + 5;  // the rounds, the million, 3 more, 1 empty
static_assert(kSliceCount > 2 * cuda::kFusedAdamMaxTensors, "the slices need three launches");

// kRounds rounds of the sizes around the vector width, a million elements in the second
// launch, sizes across chunk boundaries, and an empty slice (null pointers, skipped).
std::vector<SliceShape> make_shapes() {
  std::vector<std::size_t> counts;
  for (std::size_t round = 0; round < kRounds; ++round) {
    for (std::size_t count : {1, 7, 8, 15, 16, 17}) counts.push_back(count);
  }
  counts.insert(counts.begin() + 64, kBigCount);  // slice 65: packed, from element 3
  counts.insert(counts.begin() + 3, 0);
  for (std::size_t count : {kChunk - 1, kChunk + 1, 2 * kChunk + kChunk / 2 + 3}) {
    counts.push_back(count);
  }
  std::vector<SliceShape> shapes;
  std::uint64_t next_index = 1000;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    SliceShape s;
    s.count = counts[k];
    s.weight_decay = (k % 3 == 0) ? 0.0 : (k % 3 == 1) ? 0.01 : 0.1;
    s.lr_scale = ((k / 3) % 3 == 0) ? 1.0 : ((k / 3) % 3 == 1) ? 0.5 : 2.0;
    s.master_skew = k % 4;
    // Every other group of four is aligned like its master (packed), the rest is not.
    s.other_skew = (k / 4) % 2 == 0 ? k % 4 : (k % 4 + 1 + (k / 8) % 3) % 4;
    s.copy_out = k % 5 != 4;
    if (s.count == kBigCount) {
      s.first_index = (std::uint64_t{1} << 32) - 300001;  // crosses 2^32 in the middle
    } else if (k == 26) {
      // 7 elements, packed from element 2: 2^33 falls inside the pack of elements 2 to 5.
      s.first_index = (std::uint64_t{2} << 32) - 3;
    } else {
      s.first_index = next_index;
      next_index += s.count + 5;
    }
    shapes.push_back(s);
  }
  CHECK(shapes.size() == kSliceCount);
  return shapes;
}

const std::vector<SliceShape>& shapes() {
  static const std::vector<SliceShape> all = make_shapes();
  return all;
}

// The byte offsets of each slice's data in one buffer kind's image, and the image's size.
struct Layout {
  std::vector<std::size_t> offsets;
  std::size_t bytes = 0;
};

Layout make_layout(std::size_t element_size, bool master) {
  Layout layout;
  std::size_t position = 0;
  for (const SliceShape& s : shapes()) {
    position = (position + 255) / 256 * 256;
    const std::size_t offset = position + (master ? s.master_skew : s.other_skew) * element_size;
    layout.offsets.push_back(offset);
    position = offset + s.count * element_size + 48;  // a guard gap after each slice
  }
  layout.bytes = (position + 255) / 256 * 256;
  return layout;
}

constexpr unsigned char kGuard = 0xa7;

// One buffer kind (master, grad, m, v or copy-out) of every slice, in host memory: the
// slices' elements at their offsets, kGuard bytes around them. (DeviceCopy puts it on the GPU.)
struct Image {
  Image(DType dtype, bool master)
      : dtype(dtype), layout(make_layout(dtype_size(dtype), master)), host(layout.bytes, kGuard) {}
  std::size_t offset(std::size_t slice, std::size_t i) const {
    return layout.offsets[slice] + i * dtype_size(dtype);
  }
  float get(std::size_t slice, std::size_t i) const {
    return decode(host.data() + offset(slice, i), dtype);
  }
  void set(std::size_t slice, std::size_t i, float v) {
    encode(host.data() + offset(slice, i), dtype, v);
  }
  std::uint16_t bits16(std::size_t slice, std::size_t i) const {
    std::uint16_t bits;
    std::memcpy(&bits, host.data() + offset(slice, i), 2);
    return bits;
  }

  DType dtype;
  Layout layout;
  std::vector<unsigned char> host;
};

// ---- What every case starts from and the gradients of every step, drawn once ----
// Drawing them again for every case and step (about 30 ns an element, 72 cases of 10 steps
// over 1.1 million elements) took most of these tests' time.

// What an image is drawn as: a step's gradients (1 to kSteps), or an initial value. The
// initial values are those of a run resumed mid-training.
constexpr int kInitialMaster = -1;  // in [-1, 1)
constexpr int kInitialM = -2;       // in [-0.1, 0.1)
constexpr int kInitialV = -3;       // in [0, 0.01)

float draw(int what, std::size_t slice, std::size_t i) {
  switch (what) {
    case kInitialMaster:
      return static_cast<float>(2.0 * unit(1, slice, i) - 1.0);
    case kInitialM:
      return static_cast<float>(0.2 * unit(2, slice, i) - 0.1);
    case kInitialV:
      return static_cast<float>(0.01 * unit(3, slice, i));
    default:
      return random_grad(static_cast<std::uint64_t>(what), slice, i);
  }
}

// The image of `what` in `dtype` (each value rounded to it), drawn on first use.
const Image& drawn(int what, DType dtype) {
  static std::map<std::pair<int, DType>, Image> images;
  const auto key = std::make_pair(what, dtype);
  auto found = images.find(key);
  if (found == images.end()) {
    Image image(dtype, what == kInitialMaster);
    const std::vector<SliceShape>& all = shapes();
    for (std::size_t k = 0; k < all.size(); ++k) {
      for (std::size_t i = 0; i < all[k].count; ++i) image.set(k, i, draw(what, k, i));
    }
    found = images.emplace(key, std::move(image)).first;
  }
  return found->second;
}

// A device-tier reservation holding an image.
class DeviceCopy {
 public:
  DeviceCopy(Device& device, const Image& image)
      : device_(device), bytes_(image.host.size()), base_(device.reserve(Tier::device, bytes_)) {
    device_.copy(base_, image.host.data(), bytes_);
  }
  ~DeviceCopy() { device_.unreserve(Tier::device, base_, bytes_); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;

  void* data() const { return base_; }
  void upload(const Image& image) { device_.copy(base_, image.host.data(), bytes_); }
  void download(Image& image) const { device_.copy(image.host.data(), base_, bytes_); }

 private:
  Device& device_;
  std::size_t bytes_;
  void* base_;
};

// ---- One case: the algorithm and the formats ----

struct Case {
  OptimizerSpec spec;
  Formats formats;
  bool copy_out = false;

  std::string describe() const {
    return fmt::format("{}, bias correction {}, {} grads, {} state, copy-out {}",
                       optimizer_type_name(spec.type), spec.bias_correction ? "on" : "off",
                       dtype_name(formats.grad), dtype_name(formats.state),
                       copy_out ? dtype_name(formats.param_out) : "none");
  }
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (OptimizerType type : {OptimizerType::adamw, OptimizerType::adam}) {
    for (bool bias_correction : {true, false}) {
      for (DType grad : {DType::f32, DType::bf16, DType::f16}) {
        for (DType state : {DType::f32, DType::bf16}) {
          for (int out = 0; out < 3; ++out) {
            Case c;
            c.spec.type = type;
            c.spec.bias_correction = bias_correction;
            c.spec.eps = 1e-8;
            c.formats = Formats{grad, state, out == 2 ? DType::f16 : DType::bf16};
            c.copy_out = out != 0;
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

StepHyper hyper_for(int step) {
  StepHyper h;
  h.step = step;
  h.lr = 1e-3 * (1.0 + 0.1 * step);
  h.beta1 = 0.9 - 0.01 * step;  // as OneCycle would cycle it
  h.beta2 = 0.999;
  h.grad_scale = 0.3;  // unscaling and clipping; not exact in fp32
  h.seed = 0x5eed1234abcd0042ull;
  return h;
}

// The images of one case with their initial values, m and v rounded to the state dtype.
struct Images {
  explicit Images(const Case& c)
      : master(drawn(kInitialMaster, DType::f32)),
        grad(c.formats.grad, false),
        m(drawn(kInitialM, c.formats.state)),
        v(drawn(kInitialV, c.formats.state)),
        out(c.formats.param_out, false) {}
  // The gradients of `step`, in the grad dtype.
  void set_grads(int step) { grad.host = drawn(step, grad.dtype).host; }

  Image master, grad, m, v, out;
};

// Where an image's bytes live for the optimizer: its host vector or a device copy.
struct Bases {
  void* master;
  void* grad;
  void* m;
  void* v;
  void* out;
};

// The slices over images laid out at `bases`.
std::vector<Slice> make_slices(const Case& c, const Images& images, const Bases& bases) {
  const auto at = [](void* base, const Image& image, std::size_t k) -> void* {
    return static_cast<char*>(base) + image.layout.offsets[k];
  };
  std::vector<Slice> slices;
  for (std::size_t k = 0; k < shapes().size(); ++k) {
    const SliceShape& s = shapes()[k];
    Slice slice;
    slice.count = s.count;
    slice.weight_decay = s.weight_decay;
    slice.lr_scale = s.lr_scale;
    slice.first_index = s.first_index;
    if (s.count != 0) {  // the empty slice keeps its null pointers
      slice.master = static_cast<float*>(at(bases.master, images.master, k));
      slice.grad = at(bases.grad, images.grad, k);
      slice.state[0] = at(bases.m, images.m, k);
      slice.state[1] = at(bases.v, images.v, k);
      if (c.copy_out && s.copy_out) slice.param_out = at(bases.out, images.out, k);
    }
    slices.push_back(slice);
  }
  return slices;
}

// The images in device memory, and the slices over them.
struct OnDevice {
  OnDevice(Device& device, const Case& c, const Images& images)
      : master(device, images.master),
        grad(device, images.grad),
        m(device, images.m),
        v(device, images.v),
        out(device, images.out),
        slices(
            make_slices(c, images, {master.data(), grad.data(), m.data(), v.data(), out.data()})) {}
  // Brings back everything the optimizer may write.
  void download(Images& images) const {
    master.download(images.master);
    m.download(images.m);
    v.download(images.v);
    out.download(images.out);
  }

  DeviceCopy master, grad, m, v, out;
  std::vector<Slice> slices;
};

// Runs kSteps of the CUDA optimizer over every slice and leaves the results in `images`.
void run_gpu(Device& device, const Case& c, Images& images) {
  auto optimizer = create_cuda_optimizer(c.spec, c.formats);
  OnDevice on_device(device, c, images);
  for (int step = 1; step <= kSteps; ++step) {
    images.set_grads(step);
    on_device.grad.upload(images.grad);  // ordered after the previous step (default stream)
    optimizer->step(on_device.slices, hyper_for(step), device.default_stream());
  }
  device.synchronize();
  on_device.download(images);
}

// Runs kSteps of the portable (scalar) CPU kernel on the host images.
void run_cpu_scalar(const Case& c, Images& images) {
  auto device = create_cpu_device();
  auto optimizer = create_cpu_optimizer(c.spec, c.formats, {1, CpuIsa::scalar});
  const std::vector<Slice> slices =
      make_slices(c, images,
                  {images.master.host.data(), images.grad.host.data(), images.m.host.data(),
                   images.v.host.data(), images.out.host.data()});
  for (int step = 1; step <= kSteps; ++step) {
    images.set_grads(step);
    optimizer->step(slices, hyper_for(step), device->default_stream());
  }
}

// The elements checked against the oracle: all of every slice but the million, and of that
// one every 61st, the first and last 64, and 4 on either side of every 4096th (every chunk
// boundary).
std::vector<std::size_t> checked_elements(std::size_t count) {
  std::vector<std::size_t> elements;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t in_block = i % 4096;
    if (count != kBigCount || i % 61 == 0 || i < 64 || i + 64 >= count || in_block < 4 ||
        in_block >= 4092) {
      elements.push_back(i);
    }
  }
  return elements;
}

// |gpu - oracle| <= kAtol + kRtol |oracle| for the masters after 10 steps. The kernel computes
// in fp32: each operation is off by at most 2^-24 relative, and the constants (betas, lr,
// grad_scale, bias corrections) are rounded to fp32 once. The master (|p| <= ~1.05 here)
// takes two roundings a step (p decay - update), so 10 steps leave it within ~20 * 2^-24
// |p| ~ 1.2e-6 |p|; the update (at most ~10 lr, lr <= 4e-3 with lr_scale) is off by a few
// ulps of itself a step, more where m cancels, all well under 1e-7 a step. So 2e-6 + 2e-6 |p|
// with margin.
//
// With bf16 state the two sides round the same fp32 value with the same random bits, so the
// stored moments agree, except where the kernel's fp32 m or v and the oracle's differ by an
// ulp across the rounding threshold (about 2^-16 of elements a step): then they differ by a
// bf16 ulp (2^-8 relative), which moves that step's update by up to 2^-8 of ~10 lr_eff and,
// carried by the moments, every later step by as much: kSteps * 10 lr_eff * 2^-8. Only those
// few elements (at most 1 + 1/1000 of those checked) may exceed the fp32 bound, by at most
// that.
constexpr double kAtol = 2e-6, kRtol = 2e-6;

double bf16_state_excess(const SliceShape& s) {
  const double lr_max = hyper_for(kSteps).lr * s.lr_scale;
  return kSteps * 10.0 * lr_max / 256.0;
}

// The oracle's masters for the checked elements of slice k after kSteps.
std::vector<double> oracle(const Case& c, std::size_t k, const std::vector<std::size_t>& elements,
                           const Images& initial) {
  const SliceShape& s = shapes()[k];
  std::vector<const Image*> grads;  // as the kernel loads them: rounded to the grad dtype
  for (int step = 1; step <= kSteps; ++step) grads.push_back(&drawn(step, c.formats.grad));
  std::vector<double> result;
  result.reserve(elements.size());
  for (std::size_t i : elements) {
    ReferenceElement e;
    e.master = initial.master.get(k, i);
    e.state[0] = initial.m.get(k, i);
    e.state[1] = initial.v.get(k, i);
    for (int step = 1; step <= kSteps; ++step) {
      reference_update(c.spec, hyper_for(step), s.weight_decay, s.lr_scale,
                       grads[static_cast<std::size_t>(step - 1)]->get(k, i), c.formats.state,
                       s.first_index + i, e);
    }
    result.push_back(e.master);
  }
  return result;
}

// The number of bytes in which two images differ, optionally only outside every slice's
// elements (the guards and gaps, which the kernel must not write).
std::size_t differing_bytes(const Image& a, const Image& b, bool outside_slices_only) {
  std::size_t differing = 0;
  const auto count = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) differing += a.host[i] != b.host[i];
  };
  if (!outside_slices_only) {
    count(0, a.host.size());
    return differing;
  }
  std::size_t position = 0;  // the slices lie in order, apart
  for (std::size_t k = 0; k < shapes().size(); ++k) {
    count(position, a.offset(k, 0));
    position = a.offset(k, shapes()[k].count);
  }
  count(position, a.host.size());
  return differing;
}

TEST_CASE("the CUDA optimizer matches the oracle over 10 steps in every format", "[gpu][optim]") {
  auto device = create_cuda_device(0);
  for (const Case& c : all_cases()) {
    INFO(c.describe());
    const Images initial(c);
    Images images(c);
    run_gpu(*device, c, images);

    std::size_t failures = 0, rare = 0, checked = 0, worst_slice = 0, worst_element = 0;
    double worst_excess = -1.0, worst_gpu = 0.0, worst_oracle = 0.0;
    for (std::size_t k = 0; k < shapes().size(); ++k) {
      const std::vector<std::size_t> elements = checked_elements(shapes()[k].count);
      const std::vector<double> expected = oracle(c, k, elements, initial);
      const double excess_allowed =
          c.formats.state == DType::bf16 ? bf16_state_excess(shapes()[k]) : 0.0;
      for (std::size_t j = 0; j < elements.size(); ++j) {
        const double gpu = images.master.get(k, elements[j]);
        const double bound = kAtol + kRtol * std::abs(expected[j]);
        const double excess = std::abs(gpu - expected[j]) - bound;
        ++checked;
        if (!(excess <= worst_excess)) {  // NaN counts as the worst
          worst_excess = excess, worst_slice = k, worst_element = elements[j];
          worst_gpu = gpu, worst_oracle = expected[j];
        }
        if (excess <= 0.0) continue;
        if (excess <= excess_allowed) {
          ++rare;
        } else {
          ++failures;
        }
      }
    }
    INFO("worst: slice " << worst_slice << " element " << worst_element << ": gpu " << worst_gpu
                         << ", oracle " << worst_oracle << ", over the bound by " << worst_excess
                         << "; " << rare << " of " << checked
                         << " over the fp32 bound within the bf16-state allowance");
    CHECK(failures == 0);
    CHECK(rare <= 1 + checked / 1000);

    // The copy-out is the GPU's own master rounded to nearest even, bit for bit; slices
    // without one (and the case without any) leave the copy-out buffer alone.
    std::size_t copy_mismatches = 0;
    for (std::size_t k = 0; k < shapes().size() && c.copy_out; ++k) {
      if (!shapes()[k].copy_out) continue;
      for (std::size_t i = 0; i < shapes()[k].count; ++i) {
        const float p = images.master.get(k, i);
        const std::uint16_t expected =
            c.formats.param_out == DType::bf16 ? float_to_bf16(p) : float_to_fp16(p);
        copy_mismatches += images.out.bits16(k, i) != expected;
      }
    }
    CHECK(copy_mismatches == 0);
    std::size_t copy_writes = 0;
    for (std::size_t k = 0; k < shapes().size(); ++k) {
      if (c.copy_out && shapes()[k].copy_out) continue;
      for (std::size_t i = 0; i < shapes()[k].count; ++i) {
        copy_writes += images.out.bits16(k, i) != initial.out.bits16(k, i);
      }
    }
    CHECK(copy_writes == 0);

    // Nothing outside the slices is written.
    CHECK(differing_bytes(images.master, initial.master, true) == 0);
    CHECK(differing_bytes(images.m, initial.m, true) == 0);
    CHECK(differing_bytes(images.v, initial.v, true) == 0);
    CHECK(differing_bytes(images.out, initial.out, true) == 0);
  }
}

TEST_CASE("the CUDA optimizer gives the portable CPU kernel's bits in every format",
          "[gpu][optim]") {
  // Both do the same fp32 operations in the same order with the same constants, IEEE
  // division and square root, no FMA contraction, and the same stochastic rounding: masters,
  // moments and copy-outs agree byte for byte (guards included).
  auto device = create_cuda_device(0);
  for (const Case& c : all_cases()) {
    INFO(c.describe());
    Images gpu(c), cpu(c);
    run_gpu(*device, c, gpu);
    run_cpu_scalar(c, cpu);
    CHECK(differing_bytes(gpu.master, cpu.master, false) == 0);
    CHECK(differing_bytes(gpu.m, cpu.m, false) == 0);
    CHECK(differing_bytes(gpu.v, cpu.v, false) == 0);
    CHECK(differing_bytes(gpu.out, cpu.out, false) == 0);
  }
}

TEST_CASE(
    "the CUDA optimizer reads its verdict on the device as it runs: the host's gradient scale "
    "from the norm and the clip, bit for bit, and only the copy-out under a non-finite flag",
    "[gpu][optim]") {
  auto device = create_cuda_device(0);
  Stream& stream = device->default_stream();
  void* scalars = device->reserve(Tier::device, 4096);
  for (const Case& c : all_cases()) {
    INFO(c.describe());
    for (const double max_norm : {0.0, 2.0}) {
      INFO("max_norm " << max_norm);
      auto optimizer = create_cuda_optimizer(c.spec, c.formats);
      Images decided(c), deferred(c);
      OnDevice on_decided(*device, c, decided), on_deferred(*device, c, deferred);
      decided.set_grads(1);
      deferred.set_grads(1);
      on_decided.grad.upload(decided.grad);
      on_deferred.grad.upload(deferred.grad);
      const float verdict[2] = {1234.5f, 0.0f};  // a norm of 8.78 at loss scale 4: it clips
      device->copy(scalars, verdict, sizeof verdict);
      StepHyper host = hyper_for(1);
      host.grad_scale = step_grad_scale(unscaled_norm(verdict[0], 4.0), 4.0, max_norm);
      optimizer->step(on_decided.slices, host, stream);
      StepHyper read = hyper_for(1);
      read.grad_scale = 1234.0;  // replaced by the verdict's
      read.verdict = static_cast<const float*>(scalars);
      read.loss_scale = 4.0;
      read.max_norm = max_norm;
      optimizer->step(on_deferred.slices, read, stream);
      // A non-finite flag, written after the step above ran (copy waits for the stream): the
      // masters and moments stay and the copy-out is written from the masters, as
      // write_param_out writes it (both copy-outs cleared first).
      const float skip[2] = {1234.5f, 1.0f};
      device->copy(scalars, skip, sizeof skip);
      const std::vector<unsigned char> zeros(decided.out.host.size(), 0);
      device->copy(on_decided.out.data(), zeros.data(), zeros.size());
      device->copy(on_deferred.out.data(), zeros.data(), zeros.size());
      optimizer->write_param_out(on_decided.slices, stream);
      read.step = 2;
      deferred.set_grads(2);
      on_deferred.grad.upload(deferred.grad);
      optimizer->step(on_deferred.slices, read, stream);
      device->synchronize();
      on_decided.download(decided);
      on_deferred.download(deferred);
      CHECK(differing_bytes(decided.master, deferred.master, false) == 0);
      CHECK(differing_bytes(decided.m, deferred.m, false) == 0);
      CHECK(differing_bytes(decided.v, deferred.v, false) == 0);
      CHECK(differing_bytes(decided.out, deferred.out, false) == 0);
    }
  }
  device->unreserve(Tier::device, scalars, 4096);
}

TEST_CASE("write_param_out rounds the masters to nearest even and writes nothing else",
          "[gpu][optim]") {
  auto device = create_cuda_device(0);
  std::uint32_t signaling_nan_bits = 0xffa12345u;  // negative, signaling, with a payload
  float signaling_nan;
  std::memcpy(&signaling_nan, &signaling_nan_bits, 4);
  // Values the roundings treat specially: a subnormal (kept by bf16, flushed by fp16), fp16's
  // overflow threshold on both sides, ties to even, signed zero, infinity and NaN.
  const float specials[] = {1e-40f,
                            -0.0f,
                            65519.0f,
                            65520.0f,
                            70000.0f,
                            1.0f + 0x1p-8f,
                            1.0f + 3 * 0x1p-8f,
                            1.0f + 0x1p-11f,
                            -INFINITY,
                            signaling_nan,
                            NAN,
                            0x1p-25f};
  for (DType out : {DType::bf16, DType::f16}) {
    INFO(dtype_name(out));
    Case c;
    c.formats = Formats{DType::f32, DType::f32, out};
    c.copy_out = true;
    Images images(c);
    for (std::size_t k = 0; k < shapes().size(); ++k) {
      if (shapes()[k].count < std::size(specials)) continue;
      for (std::size_t i = 0; i < std::size(specials); ++i) images.master.set(k, i, specials[i]);
    }
    const Images initial = images;
    auto optimizer = create_cuda_optimizer(c.spec, c.formats);
    {
      OnDevice on_device(*device, c, images);
      optimizer->write_param_out(on_device.slices, device->default_stream());
      device->synchronize();
      on_device.download(images);
    }
    std::size_t wrong = 0, written_without_copy_out = 0;
    for (std::size_t k = 0; k < shapes().size(); ++k) {
      for (std::size_t i = 0; i < shapes()[k].count; ++i) {
        const float p = images.master.get(k, i);
        const std::uint16_t expected = out == DType::bf16 ? float_to_bf16(p) : float_to_fp16(p);
        if (shapes()[k].copy_out) {
          wrong += images.out.bits16(k, i) != expected;
        } else {
          written_without_copy_out += images.out.bits16(k, i) != initial.out.bits16(k, i);
        }
      }
    }
    CHECK(wrong == 0);
    CHECK(written_without_copy_out == 0);
    CHECK(differing_bytes(images.master, initial.master, false) == 0);
    CHECK(differing_bytes(images.m, initial.m, false) == 0);
    CHECK(differing_bytes(images.v, initial.v, false) == 0);
    CHECK(differing_bytes(images.out, initial.out, true) == 0);
  }
}

TEST_CASE("the CUDA optimizer refuses other algorithms with a config error naming them",
          "[gpu][optim]") {
  for (OptimizerType type : {OptimizerType::adagrad, OptimizerType::lion, OptimizerType::sgd}) {
    OptimizerSpec spec;
    spec.type = type;
    try {
      create_cuda_optimizer(spec, Formats{});
      FAIL("created a CUDA optimizer for " << optimizer_type_name(type));
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::config);
      CHECK_THAT(error.what(), Catch::Contains(std::string(optimizer_type_name(type))));
    }
  }
}

TEST_CASE("the CUDA optimizer refuses formats it cannot take with a config error", "[gpu][optim]") {
  const Formats refused[] = {{DType::i64, DType::f32, DType::bf16},
                             {DType::f32, DType::f16, DType::bf16},
                             {DType::f32, DType::f32, DType::f32}};
  for (const Formats& formats : refused) {
    try {
      create_cuda_optimizer(OptimizerSpec{}, formats);
      FAIL("created a CUDA optimizer for refused formats");
    } catch (const Error& error) {
      CHECK(error.category() == ErrorCategory::config);
    }
  }
}

TEST_CASE("the CUDA optimizer describes itself", "[gpu][optim]") {
  const auto optimizer =
      create_cuda_optimizer(OptimizerSpec{}, Formats{DType::bf16, DType::f32, DType::bf16});
  CHECK(optimizer->description() ==
        "AdamW on CUDA (multi-tensor): bf16 grads, fp32 state, bf16 copy-out");
  Formats fp32{DType::f32, DType::f32, DType::bf16};
  fp32.copy_out = false;
  CHECK(create_cuda_optimizer(OptimizerSpec{}, fp32)->description() ==
        "AdamW on CUDA (multi-tensor): fp32 grads, fp32 state, no copy-out");
}

TEST_CASE("a CUDA optimizer step names the slice that lacks a buffer", "[gpu][optim]") {
  auto device = create_cuda_device(0);
  auto optimizer = create_cuda_optimizer(OptimizerSpec{}, Formats{});
  float* memory = static_cast<float*>(device->reserve(Tier::device, 4096));
  std::vector<Slice> slices(3);
  for (Slice& s : slices) {
    s.master = memory;
    s.grad = memory + 16;
    s.state[0] = memory + 32;
    s.state[1] = memory + 48;
    s.count = 8;
  }
  slices[2].state[1] = nullptr;
  try {
    optimizer->step(slices, hyper_for(1), device->default_stream());
    FAIL("stepped a slice without its second moment");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains("slice 2"));
  }
  device->synchronize();
  device->unreserve(Tier::device, memory, 4096);
}

}  // namespace
}  // namespace zero::optim
