#include "tools/zero-bench/bench_offload.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "base/error.h"
#include "base/timer.h"
#include "device/arena.h"
#include "device/device.h"
#include "engine/state/optimizer_swap.h"
#include "offload/aio.h"
#include "offload/swap.h"
#include "optim/optimizer.h"

namespace zero::bench {
namespace {

constexpr std::size_t kAlign = 4096;

std::size_t direct(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// What the engine gives the optimizer per sub-group beside the swapped state: bf16 gradients
// (the owned shard, in memory) and the bf16 copy-out of the updated parameters.
struct Resident {
  Device& device;
  std::size_t n;
  void* grad;
  void* param_out;
  Resident(Device& d, std::size_t elements) : device(d), n(elements) {
    grad = device.reserve(Tier::host, n * 2);
    param_out = device.reserve(Tier::host, n * 2);
    auto* g = static_cast<std::uint16_t*>(grad);
    for (std::size_t i = 0; i < n; ++i) g[i] = static_cast<std::uint16_t>(0x3c00 + (i % 64));
    std::memset(param_out, 0, n * 2);
  }
  ~Resident() {
    device.unreserve(Tier::host, grad, n * 2);
    device.unreserve(Tier::host, param_out, n * 2);
  }
};

}  // namespace

CLI::App* add_offload_command(CLI::App& app, OffloadBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "offload",
      "The NVMe-offloaded optimizer step against the same I/O alone and the Adam alone (target: "
      "step <= 1.15 x max(I/O, Adam))");
  command->add_option("path", options.path, "A directory on the disk to swap to")->required();
  command->add_option("--elements", options.elements, "Optimizer state elements (default 50e6)");
  command->add_option("--sub-group", options.sub_group, "sub_group_size (default 10e6)");
  command->add_option("--buffers", options.buffers, "buffer_count, at least 3 (default 4)");
  command->add_option("--threads", options.threads, "CPU optimizer threads (default 1)");
  command->add_option("--repeats", options.repeats, "Runs of each; the best counts (default 3)");
  command->add_option("--backend", options.backend, "automatic, uring or threads");
  command->add_option("--queue-depth", options.queue_depth, "aio.queue_depth (default 8)");
  command->add_option("--block-size", options.block_size, "aio.block_size (default 1 MiB)");
  command->add_option("--parallelism", options.parallelism, "aio.intra_op_parallelism (default 1)");
  command->add_option("--json", options.json, "Append one JSON line to FILE");
  return command;
}

int run_offload_bench(const OffloadBenchOptions& options) {
  if (options.elements < 1 || options.sub_group < 1 || options.repeats < 1 || options.threads < 1) {
    throw make_error(ErrorCategory::usage,
                     "--elements, --sub-group, --repeats and --threads must be positive");
  }
  const auto total = static_cast<std::size_t>(options.elements);
  const auto group = std::min(total, static_cast<std::size_t>(options.sub_group));
  std::vector<std::size_t> groups;
  for (std::size_t at = 0; at < total; at += group) groups.push_back(std::min(group, total - at));

  auto device = create_cpu_device();
  const std::size_t region = direct(group * 4) + 2 * direct(group * 4);
  Arena pinned(device.get(), Tier::pinned,
               static_cast<std::size_t>(options.buffers) * (region + kAlign), "swap buffers");
  std::size_t capacity = 0;
  for (std::size_t n : groups) capacity += direct(n * 4) + 2 * direct(n * 4);
  Arena nvme(nullptr, Tier::nvme, capacity, "optimizer swap file");

  offload::AioOptions aio_options;
  aio_options.block_size = static_cast<std::size_t>(options.block_size);
  aio_options.queue_depth = options.queue_depth;
  aio_options.intra_op_parallelism = options.parallelism;
  const auto backend = offload::parse_aio_backend(options.backend);
  if (!backend) {
    throw make_error(ErrorCategory::usage, "--backend '{}': use automatic, uring or threads",
                     options.backend);
  }
  aio_options.backend = *backend;
  auto io = offload::AsyncIO::create(aio_options);
  offload::SwapDirectory directory(options.path, fmt::format("bench-{}", getpid()), 0);
  engine::OptimizerSwapOptions swap_options;
  swap_options.group_elements = groups;
  swap_options.buffer_count = static_cast<std::size_t>(options.buffers);
  swap_options.pipeline_read = true;
  swap_options.pipeline_write = true;
  engine::OptimizerSwap swap(swap_options, *io, directory, pinned, nvme);

  // The first values: masters near 1, moments zero.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const engine::GroupView view = swap.fill(g);
    for (std::size_t i = 0; i < groups[g]; ++i)
      view.master[i] = 1.0f + 1e-6f * static_cast<float>(i);
    swap.commit(g);
  }
  swap.finish();

  optim::OptimizerSpec spec;
  spec.type = optim::OptimizerType::adamw;
  const optim::Formats formats{DType::bf16, DType::f32, DType::bf16};
  optim::CpuOptimizerOptions cpu;
  cpu.threads = options.threads;
  auto optimizer = optim::create_cpu_optimizer(spec, formats, cpu);
  Resident resident(*device, group);
  Stream& stream = device->default_stream();
  std::int64_t step = 0;
  auto adam = [&](const engine::GroupView& view, std::size_t n) {
    optim::Slice s;
    s.master = view.master;
    s.grad = resident.grad;
    s.state[0] = view.state[0];
    s.state[1] = view.state[1];
    s.param_out = resident.param_out;
    s.count = n;
    optim::StepHyper hyper;
    hyper.step = ++step;
    hyper.lr = 1e-4;
    optimizer->step({&s, 1}, hyper, stream);
  };

  double best_io = 1e30, best_adam = 1e30, best_step = 1e30;
  for (int r = 0; r < options.repeats; ++r) {
    Timer io_timer;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      swap.acquire(g);
      swap.release(g);
    }
    swap.finish();
    best_io = std::min(best_io, io_timer.seconds());

    // The Adam alone, on the state of one group held in a buffer (as large as any group, so
    // every pass streams from memory, not cache).
    const engine::GroupView held = swap.peek(0);
    Timer adam_timer;
    for (std::size_t g = 0; g < groups.size(); ++g) adam(held, groups[g]);
    best_adam = std::min(best_adam, adam_timer.seconds());
    swap.finish();

    Timer step_timer;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      adam(swap.acquire(g), groups[g]);
      swap.release(g);
    }
    swap.finish();
    best_step = std::min(best_step, step_timer.seconds());
  }

  const double bytes = static_cast<double>(capacity);
  const double ratio = best_step / std::max(best_io, best_adam);
  std::cout << fmt::format(
      "zero-bench offload: {} elements of AdamW state (fp32 master and moments, {}) in {} "
      "sub-groups of {}, {} buffers, {} backend, {} optimizer thread(s)\n",
      total, format_bytes(capacity), groups.size(), group, options.buffers,
      offload::aio_backend_name(io->backend()), options.threads);
  std::cout << fmt::format("  I/O alone   {:8.3f} s  (read and write {:.2f} GB/s each way)\n",
                           best_io, bytes / best_io / 1e9);
  std::cout << fmt::format("  Adam alone  {:8.3f} s  ({:.1f} M elements/s)\n", best_adam,
                           static_cast<double>(total) / best_adam / 1e6);
  std::cout << fmt::format("  step        {:8.3f} s  = {:.3f} x max(I/O, Adam)  (target <= 1.15)\n",
                           best_step, ratio);
  if (!options.json.empty()) {
    std::ofstream json(options.json, std::ios::app);
    json << nlohmann::json{{"bench", "offload"},
                           {"elements", total},
                           {"sub_group", group},
                           {"buffers", options.buffers},
                           {"backend", std::string(offload::aio_backend_name(io->backend()))},
                           {"threads", options.threads},
                           {"io_s", best_io},
                           {"adam_s", best_adam},
                           {"step_s", best_step},
                           {"ratio", ratio}}
                .dump()
         << "\n";
  }
  return 0;
}

}  // namespace zero::bench
