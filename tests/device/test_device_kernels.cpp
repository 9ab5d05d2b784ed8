// The device kernels against the scalar references of device/reference.h, on random data of
// odd sizes with unaligned starts, NaN and infinity. Compiled into the unit tests (CPU device)
// and into the [gpu] program (CUDA device): the same cases check every backend.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/test_backend.h"
#include "base/block_quant.h"
#include "base/error.h"
#include "base/half.h"
#include "device/reference.h"

namespace zero {
namespace {

constexpr std::size_t kSizes[] = {0, 1, 7, 8, 15, 16, 17, 255, 1000, 4097, 100003};
constexpr DType kFloatTypes[] = {DType::f32, DType::f16, DType::bf16};

// Random floats over many binades, including values that overflow fp16 and fp16 subnormals.
std::vector<float> random_floats(std::size_t count, std::uint32_t seed, bool specials = false) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::vector<float> values(count);
  for (auto& v : values) v = std::ldexp(mantissa(rng), exponent(rng));
  if (specials && count > 3) {
    values[count / 3] = std::numeric_limits<float>::infinity();
    values[count / 2] = -std::numeric_limits<float>::quiet_NaN();
    values[count - 1] = -std::numeric_limits<float>::infinity();
  }
  return values;
}

// Host bytes of `values` converted (reference rounding) to `dtype`.
std::vector<unsigned char> encode(const std::vector<float>& values, DType dtype) {
  std::vector<unsigned char> bytes(values.size() * dtype_size(dtype) + 8);
  reference::cast(values.data(), DType::f32, bytes.data(), dtype, values.size());
  return bytes;
}

// Whether element i of two host arrays of `dtype` agree: the same bits, or both NaN. A NaN
// that arithmetic creates (inf - inf) has a sign and payload the hardware chooses: x86 gives
// 0xffc00000, CUDA 0x7fffffff, so only its NaN-ness can be compared across backends.
bool same_element(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                  std::size_t i, DType dtype) {
  const std::size_t size = dtype_size(dtype);
  if (std::memcmp(&a[i * size], &b[i * size], size) == 0) return true;
  float x = 0, y = 0;
  reference::cast(&a[i * size], dtype, &x, DType::f32, 1);
  reference::cast(&b[i * size], dtype, &y, DType::f32, 1);
  return std::isnan(x) && std::isnan(y);
}

// A device buffer whose data starts `skew` elements past an aligned address, so the kernels
// see unaligned heads and tails.
struct Skewed {
  Skewed(Device& device, std::size_t count, DType dtype, std::size_t skew)
      : buffer(device, (count + skew + 8) * dtype_size(dtype)),
        dtype(dtype),
        count(count),
        ptr(static_cast<char*>(buffer.data()) + skew * dtype_size(dtype)) {}
  void upload(const void* host) { upload_bytes(host, count * dtype_size(dtype)); }
  void upload_bytes(const void* host, std::size_t bytes) {
    if (bytes) buffer.device.copy(ptr, host, bytes);
  }
  std::vector<unsigned char> download() {
    std::vector<unsigned char> out(count * dtype_size(dtype) + 8);
    if (count) buffer.device.copy(out.data(), ptr, count * dtype_size(dtype));
    return out;
  }
  test::DeviceBuffer buffer;
  DType dtype;
  std::size_t count;
  void* ptr;
};

float read_scalar(Device& device, test::DeviceBuffer& scalar) {
  float value = 0;
  device.synchronize();
  scalar.download(&value, sizeof(float));
  return value;
}

}  // namespace

TEST_CASE("cast between fp32, fp16 and bf16 matches the reference bit for bit",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (std::size_t count : kSizes) {
        for (std::size_t skew : {0, 1, 3}) {
          CAPTURE(dtype_name(from), dtype_name(to), count, skew);
          const auto values = random_floats(count, static_cast<std::uint32_t>(count + skew), true);
          const auto input = encode(values, from);
          std::vector<unsigned char> expected(count * dtype_size(to) + 8);
          reference::cast(input.data(), from, expected.data(), to, count);

          Skewed src(*device, count, from, skew);
          Skewed dst(*device, count, to, (skew + 1) % 4);
          src.upload(input.data());
          device->cast(src.ptr, from, dst.ptr, to, count, device->default_stream());
          device->synchronize();
          const auto got = dst.download();
          REQUIRE(std::memcmp(got.data(), expected.data(), count * dtype_size(to)) == 0);
        }
      }
    }
  }
}

TEST_CASE("scale multiplies in fp32 and rounds like the reference",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : kSizes) {
      CAPTURE(dtype_name(dtype), count);
      const auto values = random_floats(count, 7 + static_cast<std::uint32_t>(count), true);
      auto expected = encode(values, dtype);
      reference::scale(expected.data(), dtype, count, 0.37f);

      Skewed data(*device, count, dtype, count % 3);
      data.upload(encode(values, dtype).data());
      device->scale(data.ptr, dtype, count, 0.37f, device->default_stream());
      device->synchronize();
      const auto got = data.download();
      REQUIRE(std::memcmp(got.data(), expected.data(), count * dtype_size(dtype)) == 0);
    }
  }
}

TEST_CASE(
    "accumulate adds a scaled block with one rounding, like the reference bit for bit "
    "(NaN: as NaN)",
    ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (std::size_t count : kSizes) {
        CAPTURE(dtype_name(from), dtype_name(to), count);
        const auto addend =
            encode(random_floats(count, 11 + static_cast<std::uint32_t>(count), false), from);
        const auto initial =
            encode(random_floats(count, 13 + static_cast<std::uint32_t>(count), false), to);
        auto expected = initial;
        reference::accumulate(addend.data(), from, expected.data(), to, count, 0.3f);

        Skewed src(*device, count, from, count % 3);
        Skewed dst(*device, count, to, (count + 1) % 3);
        src.upload(addend.data());
        dst.upload(initial.data());
        device->accumulate(src.ptr, from, dst.ptr, to, count, 0.3f, device->default_stream());
        device->synchronize();
        const auto got = dst.download();
        // The first element that differs (inputs that overflow fp16 make inf - inf: NaN of the
        // hardware's choosing), as bits, to tell a rounding case from a wrong kernel.
        const std::size_t size = dtype_size(to);
        std::size_t first = count;
        for (std::size_t i = 0; i < count && first == count; ++i) {
          if (!same_element(got, expected, i, to)) first = i;
        }
        if (first < count) {
          auto hex = [](const std::vector<unsigned char>& bytes, std::size_t i, std::size_t n) {
            std::string text;
            for (std::size_t b = n; b-- > 0;) text += fmt::format("{:02x}", bytes[i * n + b]);
            return text;
          };
          FAIL("element " << first << ": src " << hex(addend, first, dtype_size(from)) << " dst "
                          << hex(initial, first, size) << " -> got " << hex(got, first, size)
                          << ", reference " << hex(expected, first, size));
        }
        // The sum really changed the destination (a kernel that did nothing would fail); a
        // single element may legitimately round back to itself in a half format.
        if (count > 4)
          REQUIRE(std::memcmp(got.data(), initial.data(), count * dtype_size(to)) != 0);
      }
    }
  }
}

TEST_CASE("accumulate_onto_zero gives accumulate's bits over zeros and never reads dst",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (std::size_t count : kSizes) {
        CAPTURE(dtype_name(from), dtype_name(to), count);
        auto values = random_floats(count, 17 + static_cast<std::uint32_t>(count), true);
        if (count > 4) values[1] = -0.0f;  // 0 + -0 is +0: a store of the product would keep -0
        const auto addend = encode(values, from);
        const std::vector<unsigned char> zeros(count * dtype_size(to) + 8, 0);
        auto expected = zeros;
        reference::accumulate(addend.data(), from, expected.data(), to, count, 0.3f);
        // What dst held before: NaNs, which any read would carry into the result.
        const auto garbage =
            encode(std::vector<float>(count, std::numeric_limits<float>::quiet_NaN()), to);

        Skewed src(*device, count, from, count % 3);
        Skewed dst(*device, count, to, (count + 2) % 3);
        src.upload(addend.data());
        dst.upload(garbage.data());
        device->accumulate_onto_zero(src.ptr, from, dst.ptr, to, count, 0.3f,
                                     device->default_stream());
        device->synchronize();
        const auto got = dst.download();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += !same_element(got, expected, i, to);
        CHECK(wrong == 0);
        if (count > 4) {
          // +0, not -0: the bits accumulate() leaves after a fill with zeros.
          CHECK(std::memcmp(&got[dtype_size(to)], &zeros[0], dtype_size(to)) == 0);
        }
      }
    }
  }
}

TEST_CASE("accumulate rounds the product before the sum (no fused multiply-add)",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  // -1 + (1 + 2^-23)(1 - 2^-23): the exact product 1 - 2^-46 rounds to 1 in fp32, so the sum
  // is exactly 0; an fma would keep the product's tail and give -2^-46.
  auto device = test::make_test_device();
  const float a = 1.0f + 0x1p-23f;
  const float factor = 1.0f - 0x1p-23f;
  test::DeviceBuffer src(*device, sizeof(float));
  test::DeviceBuffer dst(*device, sizeof(float));
  const float minus_one = -1.0f;
  src.upload(&a, sizeof(float));
  dst.upload(&minus_one, sizeof(float));
  device->accumulate(src.data(), DType::f32, dst.data(), DType::f32, 1, factor,
                     device->default_stream());
  device->synchronize();
  float got = 1.0f;
  dst.download(&got, sizeof(float));
  REQUIRE(got == 0.0f);  // an fma would give -2^-46
}

TEST_CASE("fill writes the rounded value to every element and nothing past the end",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : kSizes) {
      CAPTURE(dtype_name(dtype), count);
      Skewed data(*device, count + 1, dtype, 1);
      const std::vector<unsigned char> sentinel((count + 1) * dtype_size(dtype), 0xab);
      data.upload(sentinel.data());
      device->fill(data.ptr, dtype, count, 1.0f / 3.0f, device->default_stream());
      device->synchronize();
      const auto got = data.download();
      std::vector<unsigned char> expected((count + 1) * dtype_size(dtype), 0xab);
      reference::fill(expected.data(), dtype, count, 1.0f / 3.0f);
      REQUIRE(std::memcmp(got.data(), expected.data(), (count + 1) * dtype_size(dtype)) == 0);
    }
  }
}

TEST_CASE("sum of squares accumulates into the scalar within summation-order rounding",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  test::DeviceBuffer scalar(*device, sizeof(float));
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : kSizes) {
      CAPTURE(dtype_name(dtype), count);
      std::vector<float> values = random_floats(count, 11 + static_cast<std::uint32_t>(count));
      for (auto& v : values) v = std::fmod(v, 100.0f);  // keep squares finite in every dtype
      const auto input = encode(values, dtype);
      const double expected = reference::sum_squares(input.data(), dtype, count) + 2.5;

      Skewed data(*device, count, dtype, 3);
      data.upload(input.data());
      const float start = 2.5f;
      scalar.upload(&start, sizeof(float));
      device->sum_squares(data.ptr, dtype, count, static_cast<float*>(scalar.data()),
                          device->default_stream());
      const double got = read_scalar(*device, scalar);
      REQUIRE(got == Approx(expected).epsilon(1e-6).margin(1e-30));
    }
  }
}

TEST_CASE("check_finite flags NaN and infinity anywhere, including the last element",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  test::DeviceBuffer flag(*device, sizeof(float));
  const float specials[] = {
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::signaling_NaN()};
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : {1, 7, 17, 1000, 100003}) {
      for (std::size_t position : {std::size_t{0}, count / 2, count - 1}) {
        for (float special : specials) {
          CAPTURE(dtype_name(dtype), count, position, special);
          std::vector<float> values = random_floats(count, static_cast<std::uint32_t>(count));
          for (auto& v : values) v = std::fmod(v, 1000.0f);
          auto clean = encode(values, dtype);
          Skewed data(*device, count, dtype, 1);
          const float zero = 0.0f;

          data.upload(clean.data());
          flag.upload(&zero, sizeof(float));
          device->check_finite(data.ptr, dtype, count, static_cast<float*>(flag.data()),
                               device->default_stream());
          REQUIRE(read_scalar(*device, flag) == 0.0f);
          REQUIRE(reference::all_finite(clean.data(), dtype, count));

          values[position] = special;
          auto dirty = encode(values, dtype);
          data.upload(dirty.data());
          device->check_finite(data.ptr, dtype, count, static_cast<float*>(flag.data()),
                               device->default_stream());
          REQUIRE(read_scalar(*device, flag) == 1.0f);
          REQUIRE_FALSE(reference::all_finite(dirty.data(), dtype, count));
        }
      }
    }
  }
}

TEST_CASE("check_finite catches fp32 values that overflow only after a cast to fp16",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  test::DeviceBuffer flag(*device, sizeof(float));
  std::vector<float> values(33, 1.0f);
  values[20] = 70000.0f;  // finite in fp32 and bf16, infinite in fp16
  auto half = encode(values, DType::f16);
  Skewed data(*device, values.size(), DType::f16, 0);
  data.upload(half.data());
  const float zero = 0.0f;
  flag.upload(&zero, sizeof(float));
  device->check_finite(data.ptr, DType::f16, values.size(), static_cast<float*>(flag.data()),
                       device->default_stream());
  REQUIRE(read_scalar(*device, flag) == 1.0f);
}

TEST_CASE("asynchronous copies on two streams ordered by an event arrive intact",
          ZERO_TEST_BACKEND_TAG "[device][streams]") {
  auto device = test::make_test_device();
  const std::size_t count = 1 << 20;
  const auto values = random_floats(count, 5);
  void* pinned = device->reserve(Tier::pinned, count * sizeof(float));
  void* host = device->reserve(Tier::host, count * sizeof(float));
  test::DeviceBuffer a(*device, count * sizeof(float));
  test::DeviceBuffer b(*device, count * sizeof(float));
  auto upload_stream = device->create_stream();
  auto compute_stream = device->create_stream();
  auto uploaded = device->create_event();

  std::memcpy(pinned, values.data(), count * sizeof(float));
  device->copy_async(a.data(), pinned, count * sizeof(float), *upload_stream);
  uploaded->record(*upload_stream);
  uploaded->block(*compute_stream);  // the compute stream waits for the upload
  device->scale(a.data(), DType::f32, count, 2.0f, *compute_stream);
  device->copy_async(b.data(), a.data(), count * sizeof(float), *compute_stream);
  device->copy_async(host, b.data(), count * sizeof(float), *compute_stream);
  compute_stream->synchronize();
  REQUIRE(uploaded->query());

  const float* result = static_cast<const float*>(host);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < count; ++i) mismatches += result[i] != values[i] * 2.0f;
  REQUIRE(mismatches == 0);
  device->unreserve(Tier::pinned, pinned, count * sizeof(float));
  device->unreserve(Tier::host, host, count * sizeof(float));
}

TEST_CASE("timing events measure a non-negative interval",
          ZERO_TEST_BACKEND_TAG "[device][streams]") {
  auto device = test::make_test_device();
  auto start = device->create_event(true);
  auto stop = device->create_event(true);
  test::DeviceBuffer data(*device, 1 << 22);
  start->record(device->default_stream());
  device->fill(data.data(), DType::f32, (1 << 22) / 4, 1.0f, device->default_stream());
  stop->record(device->default_stream());
  stop->synchronize();
  REQUIRE(stop->elapsed_ms_since(*start) >= 0.0f);
}

TEST_CASE(
    "reserving an impossible amount of device memory is an out-of-memory error naming the tier",
    ZERO_TEST_BACKEND_TAG "[device][memory]") {
  auto device = test::make_test_device();
  const std::size_t huge = std::size_t{1} << 60;
  try {
    void* p = device->reserve(Tier::device, huge);
    device->unreserve(Tier::device, p, huge);
    FAIL("reserving 1 EiB succeeded");
  } catch (const Error& error) {
    REQUIRE(error.category() == ErrorCategory::out_of_memory);
    REQUIRE_THAT(error.what(), Catch::Contains("device") && Catch::Contains("1152921504606846976"));
  }
}

TEST_CASE("quantize packs blocks of int8 and scales like the reference bit for bit",
          ZERO_TEST_BACKEND_TAG "[device][kernels][quant]") {
  auto device = test::make_test_device();
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : kSizes) {
      for (std::size_t parts : {1, 3}) {
        CAPTURE(dtype_name(dtype), count, parts);
        const auto values = random_floats(count * parts, 11 + static_cast<std::uint32_t>(count),
                                          /*specials=*/count > 200);
        const auto input = encode(values, dtype);
        const std::size_t bytes = block_quant_bytes(count) * parts;
        std::vector<unsigned char> expected(bytes + 8, 0xab);
        reference::quantize(input.data(), dtype, count, parts, expected.data());

        Skewed src(*device, count * parts, dtype, count % 3);
        src.upload(input.data());
        test::DeviceBuffer packed(*device, bytes + 8);
        std::vector<unsigned char> poison(bytes + 8, 0xcd);
        packed.upload(poison.data(), poison.size());
        device->quantize(src.ptr, dtype, count, parts, packed.data(), device->default_stream());
        device->synchronize();
        std::vector<unsigned char> got(bytes + 8);
        packed.download(got.data(), got.size());
        // The scales: the same bits, or both NaN (a block with a non-finite value).
        for (std::size_t k = 0; k < parts; ++k) {
          const std::size_t at = k * block_quant_bytes(count);
          for (std::size_t b = 0; b < block_quant_blocks(count); ++b) {
            float want = 0, have = 0;
            std::memcpy(&want, &expected[at + 4 * b], 4);
            std::memcpy(&have, &got[at + 4 * b], 4);
            CAPTURE(k, b, want, have);
            REQUIRE((std::memcmp(&want, &have, 4) == 0 || (std::isnan(want) && std::isnan(have))));
          }
          const std::size_t values_at = at + 4 * block_quant_blocks(count);
          REQUIRE(std::memcmp(&got[values_at], &expected[values_at],
                              block_quant_bytes(count) - 4 * block_quant_blocks(count)) == 0);
        }
        // Nothing past the chunks is written.
        REQUIRE(std::memcmp(&got[bytes], &poison[bytes], 8) == 0);
      }
    }
  }
}

TEST_CASE("dequantize and dequantize_sum give the reference's values (NaN: as NaN)",
          ZERO_TEST_BACKEND_TAG "[device][kernels][quant]") {
  auto device = test::make_test_device();
  for (DType dtype : kFloatTypes) {
    for (std::size_t count : kSizes) {
      for (std::size_t parts : {1, 2, 5}) {
        CAPTURE(dtype_name(dtype), count, parts);
        const auto values =
            random_floats(count * parts, 23 + static_cast<std::uint32_t>(count), count > 200);
        const auto input = encode(values, DType::f32);
        const std::size_t bytes = block_quant_bytes(count) * parts;
        std::vector<unsigned char> packed_host(bytes + 8);
        reference::quantize(input.data(), DType::f32, count, parts, packed_host.data());
        test::DeviceBuffer packed(*device, bytes + 8);
        packed.upload(packed_host.data(), bytes + 8);

        std::vector<unsigned char> expected(count * parts * dtype_size(dtype) + 8);
        reference::dequantize(packed_host.data(), count, parts, expected.data(), dtype);
        Skewed all(*device, count * parts, dtype, (count + 1) % 3);
        device->dequantize(packed.data(), count, parts, all.ptr, dtype, device->default_stream());
        device->synchronize();
        const auto got = all.download();
        // The first element that differs, named: one assertion, not one per element (a CAPTURE
        // and a REQUIRE for each of 3.5 million elements were 90% of this file's time under
        // ASan).
        std::size_t first = count * parts;
        for (std::size_t i = 0; i < count * parts && first == count * parts; ++i) {
          if (!same_element(got, expected, i, dtype)) first = i;
        }
        CAPTURE(first);
        REQUIRE(first == count * parts);

        std::vector<unsigned char> sum_expected(count * dtype_size(dtype) + 8);
        reference::dequantize_sum(packed_host.data(), count, parts, sum_expected.data(), dtype);
        Skewed sum(*device, count, dtype, count % 3);
        device->dequantize_sum(packed.data(), count, parts, sum.ptr, dtype,
                               device->default_stream());
        device->synchronize();
        const auto sum_got = sum.download();
        std::size_t first_sum = count;
        for (std::size_t i = 0; i < count && first_sum == count; ++i) {
          if (!same_element(sum_got, sum_expected, i, dtype)) first_sum = i;
        }
        CAPTURE(first_sum);
        REQUIRE(first_sum == count);
      }
    }
  }
}

TEST_CASE("a quantized round trip is within a block's largest value / 254, a bad block NaN",
          ZERO_TEST_BACKEND_TAG "[device][kernels][quant]") {
  auto device = test::make_test_device();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const std::size_t count = 3 * kQuantBlock + 41;
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  values[5] = 0.9f;  // an outlier: its block's step is coarse, the others' are not
  for (std::size_t i = kQuantBlock; i < 2 * kQuantBlock; ++i) values[i] = 0.0f;  // all zeros
  test::DeviceBuffer src(*device, count * 4);
  src.upload(values.data(), count * 4);
  test::DeviceBuffer packed(*device, block_quant_bytes(count));
  test::DeviceBuffer out(*device, count * 4);
  device->quantize(src.data(), DType::f32, count, 1, packed.data(), device->default_stream());
  device->dequantize(packed.data(), count, 1, out.data(), DType::f32, device->default_stream());
  device->synchronize();
  std::vector<float> back(count);
  out.download(back.data(), count * 4);
  double error = 0, norm = 0;
  for (std::size_t b = 0; b < block_quant_blocks(count); ++b) {
    float amax = 0;
    const std::size_t end = std::min(count, (b + 1) * kQuantBlock);
    for (std::size_t i = b * kQuantBlock; i < end; ++i) amax = std::max(amax, std::fabs(values[i]));
    for (std::size_t i = b * kQuantBlock; i < end; ++i) {
      CAPTURE(b, i, values[i], back[i]);
      REQUIRE(std::fabs(back[i] - values[i]) <= amax / 254.0f * 1.0001f);
      if (b != 0) {
        error += (back[i] - values[i]) * (back[i] - values[i]);
        norm += values[i] * values[i];
      }
    }
  }
  REQUIRE(back[kQuantBlock + 3] == 0.0f);  // the zero block stays exactly zero
  REQUIRE(back[5] == 0.9f);                // a block's largest value comes back exactly
  // Normal values without outliers: about 1% relative error in norm.
  REQUIRE(std::sqrt(error / norm) < 0.02);
  REQUIRE(std::sqrt(error / norm) > 0.001);

  // An infinity makes its block NaN after the round trip, and only its block.
  values[kQuantBlock * 2 + 7] = std::numeric_limits<float>::infinity();
  src.upload(values.data(), count * 4);
  device->quantize(src.data(), DType::f32, count, 1, packed.data(), device->default_stream());
  device->dequantize(packed.data(), count, 1, out.data(), DType::f32, device->default_stream());
  device->synchronize();
  out.download(back.data(), count * 4);
  REQUIRE(std::isnan(back[2 * kQuantBlock]));
  REQUIRE(std::isnan(back[3 * kQuantBlock - 1]));
  REQUIRE(std::isfinite(back[3 * kQuantBlock]));
  REQUIRE(std::isfinite(back[2 * kQuantBlock - 1]));
}

TEST_CASE("kernels refuse int64 buffers with a usage error",
          ZERO_TEST_BACKEND_TAG "[device][kernels]") {
  auto device = test::make_test_device();
  test::DeviceBuffer data(*device, 64);
  REQUIRE_THROWS_WITH(device->scale(data.data(), DType::i64, 4, 2.0f, device->default_stream()),
                      Catch::Contains("int64"));
}

}  // namespace zero
