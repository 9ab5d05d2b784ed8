// The NCCL communicator on one GPU with a world of one: every collective, groups, barriers,
// stream ordering through Work::block, zero-length calls and split. With one rank every
// reduction leaves the data as it was (avg divides by one), so the results are checked bit
// for bit. Multi-rank NCCL runs belong to the multi-rank tests.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/test_backend.h"
#include "base/error.h"
#include "base/half.h"
#include "comm/backends.h"
#include "comm/communicator.h"
#include "comm/create.h"
#include "comm/launch.h"
#include "device/device.h"

namespace zero {
namespace {

constexpr DType kAllTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i64};
constexpr ReduceOp kAllOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};

std::unique_ptr<Communicator> make_world_of_one(Device& device) {
  comm::CommOptions options;
  options.device = &device;
  options.timeout = std::chrono::seconds(120);
  comm::LaunchInfo launch;
  launch.rank = 0;
  launch.world_size = 1;
  return comm::make_nccl_communicator(options, launch, [](void*, std::size_t) {});
}

// Host bytes of `count` values of `dtype`, exactly representable in every dtype (small
// integers and halves, negative ones too), different per `seed`.
std::vector<unsigned char> host_values(std::size_t count, DType dtype, int seed) {
  std::vector<unsigned char> bytes(count * dtype_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    const int whole = static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 61) - 30;
    const float value = static_cast<float>(whole) + ((i % 2) != 0 ? 0.5f : 0.0f);
    unsigned char* out = bytes.data() + i * dtype_size(dtype);
    switch (dtype) {
      case DType::f32:
        std::memcpy(out, &value, sizeof value);
        break;
      case DType::bf16: {
        const std::uint16_t bits = float_to_bf16(value);
        std::memcpy(out, &bits, sizeof bits);
        break;
      }
      case DType::f16: {
        const std::uint16_t bits = float_to_fp16(value);
        std::memcpy(out, &bits, sizeof bits);
        break;
      }
      case DType::i64: {
        const std::int64_t integer = static_cast<std::int64_t>(whole) * 1000003;
        std::memcpy(out, &integer, sizeof integer);
        break;
      }
      case DType::u8:
        *out = static_cast<unsigned char>(whole + 30);
        break;
    }
  }
  return bytes;
}

std::vector<unsigned char> download(test::DeviceBuffer& buffer, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  if (bytes > 0) buffer.download(out.data(), bytes);
  return out;
}

}  // namespace

TEST_CASE("NCCL: a world of one has rank 0, size 1, its name and backend", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  CHECK(comm->rank() == 0);
  CHECK(comm->size() == 1);
  CHECK(comm->backend() == "nccl");
  CHECK(comm->name() == "world");
  CHECK(comm->timeout() == std::chrono::seconds(120));
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: the communicator needs a CUDA device", "[gpu][comm][nccl]") {
  auto cpu = create_cpu_device();
  comm::CommOptions options;
  options.device = cpu.get();
  comm::LaunchInfo launch;
  try {
    static_cast<void>(comm::make_nccl_communicator(options, launch, [](void*, std::size_t) {}));
    FAIL("a CPU device was accepted");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::comm);
    CHECK_THAT(error.what(), Catch::Contains("CUDA device"));
  }
  options.device = nullptr;
  CHECK_THROWS_AS(comm::make_nccl_communicator(options, launch, [](void*, std::size_t) {}), Error);
}

TEST_CASE("NCCL: all_reduce sum, avg and max of every dtype leave a world of one unchanged",
          "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  constexpr std::size_t kCount = 4099;
  for (DType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      INFO(dtype_name(dtype) << " " << reduce_op_name(op));
      const std::size_t bytes = kCount * dtype_size(dtype);
      const auto input = host_values(kCount, dtype, 1);
      test::DeviceBuffer buffer(*device, bytes);
      buffer.upload(input.data(), bytes);
      Work work = comm->all_reduce(buffer.data(), kCount, dtype, op);
      work.wait();
      CHECK(work.test());
      CHECK(download(buffer, bytes) == input);
    }
  }
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: reduce_scatter and all_gather copy a world of one's single block",
          "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  constexpr std::size_t kCount = 1000;
  for (DType dtype : kAllTypes) {
    INFO(dtype_name(dtype));
    const std::size_t bytes = kCount * dtype_size(dtype);
    const auto input = host_values(kCount, dtype, 2);
    const auto stale = host_values(kCount, dtype, 3);
    test::DeviceBuffer in(*device, bytes);
    test::DeviceBuffer out(*device, bytes);
    in.upload(input.data(), bytes);

    out.upload(stale.data(), bytes);
    comm->reduce_scatter(in.data(), out.data(), kCount, dtype, ReduceOp::sum).wait();
    CHECK(download(out, bytes) == input);
    // In place: output == input + rank * count.
    comm->reduce_scatter(in.data(), in.data(), kCount, dtype, ReduceOp::avg).wait();
    CHECK(download(in, bytes) == input);

    out.upload(stale.data(), bytes);
    comm->all_gather(in.data(), out.data(), kCount, dtype).wait();
    CHECK(download(out, bytes) == input);
    // In place: input == output + rank * count.
    comm->all_gather(out.data(), out.data(), kCount, dtype).wait();
    CHECK(download(out, bytes) == input);
  }
}

TEST_CASE("NCCL: all_to_all copies a world of one's single block, bytes too", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  constexpr std::size_t kCount = 4099;
  for (DType dtype : {DType::u8, DType::f32, DType::bf16}) {
    INFO(dtype_name(dtype));
    const std::size_t bytes = kCount * dtype_size(dtype);
    const auto input = host_values(kCount, dtype, 5);
    const auto stale = host_values(kCount, dtype, 6);
    test::DeviceBuffer in(*device, bytes);
    test::DeviceBuffer out(*device, bytes);
    in.upload(input.data(), bytes);
    out.upload(stale.data(), bytes);
    comm->all_to_all(in.data(), out.data(), kCount, dtype).wait();
    CHECK(download(out, bytes) == input);
  }
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: broadcast from rank 0 keeps the data; a root outside the world is refused",
          "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  constexpr std::size_t kCount = 333;
  for (DType dtype : kAllTypes) {
    INFO(dtype_name(dtype));
    const std::size_t bytes = kCount * dtype_size(dtype);
    const auto input = host_values(kCount, dtype, 4);
    test::DeviceBuffer buffer(*device, bytes);
    buffer.upload(input.data(), bytes);
    comm->broadcast(buffer.data(), kCount, dtype, 0).wait();
    CHECK(download(buffer, bytes) == input);
  }
  test::DeviceBuffer buffer(*device, 64);
  try {
    static_cast<void>(comm->broadcast(buffer.data(), 4, DType::f32, 1));
    FAIL("root 1 was accepted in a world of one");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::usage);
  }
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: barriers complete, on the default stream and on a given one",
          "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  auto stream = device->create_stream();
  for (int i = 0; i < 5; ++i) {
    comm->barrier().wait();
    Work work = comm->barrier(stream.get());
    work.wait();
    CHECK(work.test());
  }
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: a group of all_reduces completes after end_group", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  constexpr std::size_t kBuffers = 6;
  std::vector<std::unique_ptr<test::DeviceBuffer>> buffers;
  std::vector<std::vector<unsigned char>> inputs;
  std::vector<std::size_t> counts;
  std::vector<DType> dtypes;
  for (std::size_t i = 0; i < kBuffers; ++i) {
    const DType dtype = kAllTypes[i % 4];
    const std::size_t count = 100 + 517 * i;
    const std::size_t bytes = count * dtype_size(dtype);
    inputs.push_back(host_values(count, dtype, static_cast<int>(i)));
    buffers.push_back(std::make_unique<test::DeviceBuffer>(*device, bytes));
    buffers.back()->upload(inputs.back().data(), bytes);
    counts.push_back(count);
    dtypes.push_back(dtype);
  }

  std::vector<Work> works;
  comm->begin_group();
  for (std::size_t i = 0; i < kBuffers; ++i) {
    works.push_back(comm->all_reduce(buffers[i]->data(), counts[i], dtypes[i], kAllOps[i % 3]));
  }
  // Nothing is launched before end_group.
  CHECK_FALSE(works.front().test());
  // Groups do not nest.
  CHECK_THROWS_AS(comm->begin_group(), Error);
  comm->end_group();
  for (auto& work : works) work.wait();
  for (std::size_t i = 0; i < kBuffers; ++i) {
    INFO("buffer " << i);
    CHECK(download(*buffers[i], counts[i] * dtype_size(dtypes[i])) == inputs[i]);
  }
  // end_group without begin_group is a usage error.
  CHECK_THROWS_AS(comm->end_group(), Error);
  // An empty group is fine.
  comm->begin_group();
  comm->end_group();
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: Work::block orders a later copy on another stream without a host wait",
          "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  // Large enough that a copy not ordered after the fill and the collective would see stale data.
  constexpr std::size_t kCount = std::size_t{1} << 24;
  constexpr std::size_t kBytes = kCount * sizeof(float);
  test::DeviceBuffer data(*device, kBytes);
  test::DeviceBuffer copy(*device, kBytes);
  auto producer = device->create_stream();
  auto consumer = device->create_stream();
  for (int round = 1; round <= 3; ++round) {
    const float value = static_cast<float>(round);
    device->fill(copy.data(), DType::f32, kCount, -1.0f, *consumer);
    // The collective is ordered after the fill on the caller's stream...
    device->fill(data.data(), DType::f32, kCount, value, *producer);
    Work work = comm->all_reduce(data.data(), kCount, DType::f32, ReduceOp::max, producer.get());
    // ...and the copy on another stream after the collective.
    work.block(*consumer);
    device->copy_async(copy.data(), data.data(), kBytes, *consumer);
    consumer->synchronize();
    std::vector<float> host(kCount);
    copy.download(host.data(), kBytes);
    std::size_t wrong = 0;
    for (float v : host) wrong += v != value ? 1 : 0;
    CHECK(wrong == 0);
    work.wait();
  }
}

TEST_CASE("NCCL: zero-length collectives are complete at once", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  for (DType dtype : kAllTypes) {
    CHECK(comm->all_reduce(nullptr, 0, dtype, ReduceOp::sum).test());
    CHECK(comm->reduce_scatter(nullptr, nullptr, 0, dtype, ReduceOp::max).test());
    CHECK(comm->all_gather(nullptr, nullptr, 0, dtype).test());
    CHECK(comm->broadcast(nullptr, 0, dtype, 0).test());
  }
  comm->begin_group();
  Work work = comm->all_reduce(nullptr, 0, DType::f32, ReduceOp::avg);
  comm->end_group();
  CHECK(work.test());
  // A null buffer with elements is a usage error.
  CHECK_THROWS_AS(comm->all_reduce(nullptr, 4, DType::f32, ReduceOp::sum), Error);
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: split(0, 0) gives a communicator of one, split(-1, 0) none", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  auto comm = make_world_of_one(*device);
  auto child = comm->split(0, 0);
  REQUIRE(child != nullptr);
  CHECK(child->rank() == 0);
  CHECK(child->size() == 1);
  CHECK(child->backend() == "nccl");
  CHECK(child->name() == "world/split(0)");
  CHECK(child->timeout() == comm->timeout());

  constexpr std::size_t kCount = 257;
  const auto input = host_values(kCount, DType::bf16, 9);
  test::DeviceBuffer buffer(*device, kCount * 2);
  buffer.upload(input.data(), kCount * 2);
  child->all_reduce(buffer.data(), kCount, DType::bf16, ReduceOp::sum).wait();
  child->barrier().wait();
  CHECK(download(buffer, kCount * 2) == input);

  CHECK(comm->split(-1, 0) == nullptr);
  // The parent still works after its splits, and the child outlives nothing it needs.
  comm->all_reduce(buffer.data(), kCount, DType::bf16, ReduceOp::max).wait();
  child.reset();
  comm->barrier().wait();
  CHECK_FALSE(comm->poisoned());
}

TEST_CASE("NCCL: a Work outliving its communicator still completes", "[gpu][comm][nccl]") {
  auto device = create_cuda_device(0);
  constexpr std::size_t kCount = 1 << 20;
  test::DeviceBuffer buffer(*device, kCount * sizeof(float));
  Work work;
  {
    auto comm = make_world_of_one(*device);
    device->fill(buffer.data(), DType::f32, kCount, 2.0f, device->default_stream());
    work = comm->all_reduce(buffer.data(), kCount, DType::f32, ReduceOp::sum);
  }
  work.wait();
  std::vector<float> host(kCount);
  buffer.download(host.data(), kCount * sizeof(float));
  CHECK(host.front() == 2.0f);
  CHECK(host.back() == 2.0f);
}

}  // namespace zero
