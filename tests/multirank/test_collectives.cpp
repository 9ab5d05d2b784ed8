// Every collective and dtype against a reference computed locally from what each rank
// contributed. Inputs are small integers (exact in every dtype, so sums are exact and the
// reference is exact too) or, where marked, random fp32 data with a tolerance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "base/half.h"
#include "comm/communicator.h"
#include "multirank.h"

namespace zero::testing {
namespace {

constexpr DType kDtypes[] = {DType::f32, DType::f16, DType::bf16, DType::i64};
constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};

// A buffer of `count` elements of `dtype`.
struct Buffer {
  DType dtype;
  std::vector<unsigned char> bytes;

  Buffer(DType d, std::size_t count) : dtype(d), bytes(count * dtype_size(d)) {}
  std::size_t count() const { return bytes.size() / dtype_size(dtype); }
  void* data() { return bytes.data(); }

  void set(std::size_t i, double value) {
    unsigned char* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f32: {
        const float v = static_cast<float>(value);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::f16: {
        const auto v = float_to_fp16(static_cast<float>(value));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::bf16: {
        const auto v = float_to_bf16(static_cast<float>(value));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::i64: {
        const auto v = static_cast<std::int64_t>(value);
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::u8:
        *p = static_cast<unsigned char>(value);
        break;
    }
  }
  double get(std::size_t i) const {
    const unsigned char* p = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DType::f16: {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        return fp16_to_float(v);
      }
      case DType::bf16: {
        std::uint16_t v;
        std::memcpy(&v, p, 2);
        return bf16_to_float(v);
      }
      case DType::i64: {
        std::int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
      case DType::u8:
        return *p;
    }
    return 0;
  }
  std::int64_t get_int(std::size_t i) const {
    std::int64_t v;
    std::memcpy(&v, bytes.data() + i * 8, 8);
    return v;
  }
};

// What rank r contributes at element i: small integers, exact in bf16 even when summed over
// four ranks; int64 values beyond 2^53 so that a detour through double would show.
double contribution(DType dtype, int rank, std::size_t i) {
  if (dtype == DType::i64) return 0;  // set_contribution handles int64 exactly
  return static_cast<double>(static_cast<int>((rank * 7 + i * 3) % 17) - 8);
}
std::int64_t int_contribution(int rank, std::size_t i) {
  return (std::int64_t{1} << 55) / 16 * (rank + 1) -
         static_cast<std::int64_t>(i * 31 % 97) * (rank + 1);
}
void set_contribution(Buffer& buffer, int rank, std::size_t offset, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (buffer.dtype == DType::i64) {
      const std::int64_t v = int_contribution(rank, i);
      std::memcpy(buffer.bytes.data() + (offset + i) * 8, &v, 8);
    } else {
      buffer.set(offset + i, contribution(buffer.dtype, rank, i));
    }
  }
}

// The reduction over ranks of element i, rounded to the dtype the way the backends do.
double expected_float(DType dtype, ReduceOp op, int size, std::size_t i) {
  double sum = 0, max = -1e30;
  for (int r = 0; r < size; ++r) {
    const double v = contribution(dtype, r, i);
    sum += v;
    max = std::max(max, v);
  }
  if (op == ReduceOp::max) return max;
  if (op == ReduceOp::sum) return sum;
  const float avg = static_cast<float>(sum) / static_cast<float>(size);
  if (dtype == DType::f16) return fp16_to_float(float_to_fp16(avg));
  if (dtype == DType::bf16) return bf16_to_float(float_to_bf16(avg));
  return avg;
}
std::int64_t expected_int(ReduceOp op, int size, std::size_t i) {
  std::int64_t sum = 0, max = INT64_MIN;
  for (int r = 0; r < size; ++r) {
    sum += int_contribution(r, i);
    max = std::max(max, int_contribution(r, i));
  }
  if (op == ReduceOp::max) return max;
  if (op == ReduceOp::sum) return sum;
  return sum / size;
}

bool matches(const Buffer& got, std::size_t at, ReduceOp op, int size, std::size_t i) {
  if (got.dtype == DType::i64) return got.get_int(at) == expected_int(op, size, i);
  return got.get(at) == expected_float(got.dtype, op, size, i);
}

std::string label(const Variant& variant, DType dtype, std::size_t count) {
  return variant.name + " " + std::string(dtype_name(dtype)) + " count " + std::to_string(count);
}

}  // namespace

TEST_CASE("all_reduce sum, avg and max in every dtype match the local reference") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    for (DType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099},
                                  std::size_t{65537}}) {
          INFO(label(v, dtype, count) << " " << reduce_op_name(op));
          Buffer buffer(dtype, count);
          set_contribution(buffer, comm.rank(), 0, count);
          comm.all_reduce(buffer.data(), count, dtype, op).wait();
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < count; ++i) wrong += !matches(buffer, i, op, comm.size(), i);
          CHECK(wrong == 0);
        }
      }
    }
  }
}

TEST_CASE("all_reduce of random fp32 data leaves identical bits on every rank") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    const std::size_t count = 100'003;
    std::mt19937 rng(1234 + comm.rank());
    std::normal_distribution<float> normal;
    std::vector<std::vector<float>> inputs(comm.size(), std::vector<float>(count));
    // Every rank draws every rank's input, so each can compute the reference.
    for (int r = 0; r < comm.size(); ++r) {
      std::mt19937 other(1234 + r);
      for (float& x : inputs[r]) x = normal(other);
    }
    std::vector<float> data = inputs[comm.rank()];
    comm.all_reduce(data.data(), count, DType::f32, ReduceOp::sum).wait();
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double reference = 0;
      for (int r = 0; r < comm.size(); ++r) reference += inputs[r][i];
      worst = std::max(worst, std::abs(reference - data[i]) / (1.0 + std::abs(reference)));
    }
    CHECK(worst < 1e-5);
    // Gather everyone's result and compare bit for bit.
    std::vector<float> all(count * comm.size());
    comm.all_gather(data.data(), all.data(), count, DType::f32).wait();
    for (int r = 0; r < comm.size(); ++r) {
      CHECK(std::memcmp(all.data() + r * count, data.data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("reduce_scatter gives each rank the reduction of its block, also in place") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    const int n = comm.size();
    for (DType dtype : kDtypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{1001}}) {
          for (bool in_place : {false, true}) {
            INFO(label(v, dtype, count)
                 << " " << reduce_op_name(op) << (in_place ? " in place" : ""));
            // Block b of every rank's input holds element indices b * count + i.
            Buffer input(dtype, count * n);
            set_contribution(input, comm.rank(), 0, count * n);
            Buffer output(dtype, count);
            void* out = in_place ? input.bytes.data() + comm.rank() * count * dtype_size(dtype)
                                 : output.data();
            comm.reduce_scatter(input.data(), out, count, dtype, op).wait();
            if (in_place && count > 0) std::memcpy(output.data(), out, count * dtype_size(dtype));
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < count; ++i) {
              wrong += !matches(output, i, op, n, comm.rank() * count + i);
            }
            CHECK(wrong == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("all_gather concatenates every rank's block in rank order, also in place") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    const int n = comm.size();
    for (DType dtype : kDtypes) {
      for (std::size_t count :
           {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001}}) {
        for (bool in_place : {false, true}) {
          INFO(label(v, dtype, count) << (in_place ? " in place" : ""));
          Buffer output(dtype, count * n);
          Buffer input(dtype, count);
          void* in = input.data();
          if (in_place) in = output.bytes.data() + comm.rank() * count * dtype_size(dtype);
          Buffer mine(dtype, count);
          set_contribution(mine, comm.rank(), 0, count);
          if (count > 0) std::memcpy(in, mine.data(), mine.bytes.size());
          comm.all_gather(in, output.data(), count, dtype).wait();
          std::size_t wrong = 0;
          for (int r = 0; r < n; ++r) {
            Buffer theirs(dtype, count);
            set_contribution(theirs, r, 0, count);
            wrong += count > 0 && std::memcmp(output.bytes.data() + r * theirs.bytes.size(),
                                              theirs.data(), theirs.bytes.size()) != 0;
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}

TEST_CASE("all_to_all sends block r of every rank to rank r, in rank order, bytes too") {
  // Byte b of the block rank `from` sends to rank `to`.
  const auto byte = [](int from, int to, std::size_t b) {
    return static_cast<unsigned char>((from * 53 + to * 29 + static_cast<int>(b * 7)) % 251);
  };
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    const int n = comm.size();
    for (DType dtype : {DType::u8, DType::f32, DType::bf16}) {
      for (std::size_t count :
           {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{4099}}) {
        INFO(label(v, dtype, count));
        const std::size_t block = count * dtype_size(dtype);
        std::vector<unsigned char> input(block * n), output(block * n, 0);
        for (int to = 0; to < n; ++to) {
          for (std::size_t b = 0; b < block; ++b) input[to * block + b] = byte(comm.rank(), to, b);
        }
        comm.all_to_all(input.data(), output.data(), count, dtype).wait();
        std::size_t wrong = 0;
        for (int from = 0; from < n; ++from) {
          for (std::size_t b = 0; b < block; ++b) {
            wrong += output[from * block + b] != byte(from, comm.rank(), b);
          }
        }
        CHECK(wrong == 0);
      }
    }
    // Bytes are moved, never reduced; and all_to_all is never in place.
    std::vector<unsigned char> bytes(16 * n);
    CHECK_THROWS_WITH(comm.all_reduce(bytes.data(), 16, DType::u8, ReduceOp::sum),
                      Catch::Contains("uint8 cannot be reduced"));
    CHECK_THROWS_WITH(comm.all_to_all(bytes.data(), bytes.data(), 16, DType::u8),
                      Catch::Contains("never in place"));
  }
}

TEST_CASE("broadcast copies the root's buffer to every rank, from every root") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    for (DType dtype : kDtypes) {
      for (int root = 0; root < comm.size(); ++root) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{777}}) {
          INFO(label(v, dtype, count) << " root " << root);
          Buffer buffer(dtype, count);
          set_contribution(buffer, comm.rank(), 0, count);
          comm.broadcast(buffer.data(), count, dtype, root).wait();
          Buffer expected(dtype, count);
          set_contribution(expected, root, 0, count);
          CHECK(buffer.bytes == expected.bytes);
        }
      }
    }
  }
}

TEST_CASE("barrier completes only after every rank has issued it") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    Communicator& side = side_channel();
    std::int64_t flag = 0;
    if (comm.rank() == 0) {
      // Issue the barrier only once all the others have seen theirs incomplete.
      side.all_reduce(&flag, 1, DType::i64, ReduceOp::sum).wait();
      comm.barrier().wait();
    } else {
      Work barrier = comm.barrier();
      bool completed_early = false;
      for (int i = 0; i < 100; ++i) completed_early |= barrier.test();
      CHECK_FALSE(completed_early);
      side.all_reduce(&flag, 1, DType::i64, ReduceOp::sum).wait();
      barrier.wait();
    }
  }
}

TEST_CASE("many small collectives in flight at once complete with the right results") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    constexpr int kCalls = 64;
    std::vector<Buffer> buffers;
    std::vector<Work> works;
    buffers.reserve(kCalls);
    for (int c = 0; c < kCalls; ++c) {
      const DType dtype = kDtypes[c % 4];
      const std::size_t count = 1 + c * 13 % 50;
      buffers.emplace_back(dtype, count);
      set_contribution(buffers.back(), comm.rank(), 0, count);
      works.push_back(comm.all_reduce(buffers.back().data(), count, dtype, ReduceOp::sum));
    }
    // Wait in reverse order: completion must not depend on the order of waiting.
    for (int c = kCalls - 1; c >= 0; --c) works[c].wait();
    std::size_t wrong = 0;
    for (const Buffer& b : buffers) {
      for (std::size_t i = 0; i < b.count(); ++i)
        wrong += !matches(b, i, ReduceOp::sum, comm.size(), i);
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("two large outstanding collectives overlap and both complete correctly") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    const int n = comm.size();
    const std::size_t count = 1 << 18;
    Buffer reduced(DType::bf16, count);
    set_contribution(reduced, comm.rank(), 0, count);
    Buffer input(DType::f32, count * n), output(DType::f32, count);
    set_contribution(input, comm.rank(), 0, count * n);
    Work first = comm.all_reduce(reduced.data(), count, DType::bf16, ReduceOp::sum);
    Work second =
        comm.reduce_scatter(input.data(), output.data(), count, DType::f32, ReduceOp::max);
    second.wait();
    first.wait();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      wrong += !matches(reduced, i, ReduceOp::sum, n, i);
      wrong += !matches(output, i, ReduceOp::max, n, comm.rank() * count + i);
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("a group of collectives completes like the calls one by one") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    std::vector<Buffer> buffers;
    std::vector<Work> works;
    buffers.reserve(4);
    comm.begin_group();
    for (int c = 0; c < 4; ++c) {
      buffers.emplace_back(DType::f32, 100 + c);
      set_contribution(buffers.back(), comm.rank(), 0, 100 + c);
      works.push_back(comm.all_reduce(buffers.back().data(), 100 + c, DType::f32, ReduceOp::sum));
    }
    comm.end_group();
    for (Work& w : works) w.wait();
    std::size_t wrong = 0;
    for (const Buffer& b : buffers) {
      for (std::size_t i = 0; i < b.count(); ++i)
        wrong += !matches(b, i, ReduceOp::sum, comm.size(), i);
    }
    CHECK(wrong == 0);
    CHECK_THROWS_WITH(comm.end_group(), Catch::Contains("end_group without begin_group"));
  }
}

TEST_CASE("split forms sub-communicators by color, ordered by key") {
  for (const Variant& v : variants()) {
    Communicator& comm = *v.comm;
    INFO(v.name);
    const int n = comm.size();
    // Rank 0 stays out; the others split by parity, ordered by descending rank.
    const int color = comm.rank() == 0 ? -1 : comm.rank() % 2;
    auto sub = comm.split(color, -comm.rank());
    if (comm.rank() == 0) {
      CHECK(sub == nullptr);
      continue;
    }
    REQUIRE(sub != nullptr);
    std::vector<int> members;
    for (int r = n - 1; r >= 1; --r) {
      if (r % 2 == color) members.push_back(r);
    }
    CHECK(sub->size() == static_cast<int>(members.size()));
    CHECK(sub->rank() == static_cast<int>(std::find(members.begin(), members.end(), comm.rank()) -
                                          members.begin()));
    CHECK(sub->name() == comm.name() + "/split(" + std::to_string(color) + ")");
    std::int64_t value = comm.rank();
    sub->all_reduce(&value, 1, DType::i64, ReduceOp::sum).wait();
    std::int64_t expected = 0;
    for (int r : members) expected += r;
    CHECK(value == expected);
    std::vector<std::int64_t> gathered(members.size());
    std::int64_t mine = comm.rank();
    sub->all_gather(&mine, gathered.data(), 1, DType::i64).wait();
    CHECK(gathered == std::vector<std::int64_t>(members.begin(), members.end()));
  }
}

}  // namespace zero::testing
