#include "tools/zero-bench/bench_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/error.h"
#include "base/timer.h"
#include "comm/create.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"

namespace zero::bench {
namespace {

namespace fs = std::filesystem;

struct Shape {
  int layers, width, vocab, positions;
};

const std::map<std::string, Shape> kModels = {
    {"gpt2-124m", {12, 768, 50257, 1024}},
    {"gpt2-350m", {24, 1024, 50257, 1024}},
    {"gpt2-774m", {36, 1280, 50257, 1024}},
    {"gpt2-1.5b", {48, 1600, 50257, 1024}},
};

float initial_value(std::uint64_t i) {
  return 1e-3f * static_cast<float>(i % 977);
}

// Registers GPT-2's parameters under Hugging Face's names (the Conv1D weights as the model
// computes with them, [out, in]); one module per block. Returns the parameter count.
std::uint64_t register_gpt2(engine::Engine& e, const Shape& s) {
  const auto w = static_cast<std::int64_t>(s.width);
  std::uint64_t total = 0;
  const std::size_t decay = 0;
  const std::size_t no_decay = e.add_group("no_decay", 0.0, 1.0);
  auto initial = [](std::uint64_t offset, std::size_t count, float* out) {
    for (std::size_t i = 0; i < count; ++i) out[i] = initial_value(offset + i);
  };
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, std::size_t group,
                 std::vector<std::size_t> modules) {
    std::uint64_t n = 1;
    for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
    total += n;
    e.add_param(name, std::move(shape), true, group, std::move(modules), {nullptr, initial});
  };
  const std::size_t embed = e.add_module("embed");
  std::vector<std::size_t> blocks;
  for (int l = 0; l < s.layers; ++l) blocks.push_back(e.add_module(fmt::format("h.{}", l)));
  const std::size_t head = e.add_module("ln_f");
  add("wte.weight", {s.vocab, w}, decay, {embed, head});
  add("wpe.weight", {s.positions, w}, decay, {embed});
  for (int l = 0; l < s.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    const std::vector<std::size_t> m{blocks[static_cast<std::size_t>(l)]};
    add(h + "ln_1.weight", {w}, no_decay, m);
    add(h + "ln_1.bias", {w}, no_decay, m);
    add(h + "attn.c_attn.weight", {3 * w, w}, decay, m);
    add(h + "attn.c_attn.bias", {3 * w}, no_decay, m);
    add(h + "attn.c_proj.weight", {w, w}, decay, m);
    add(h + "attn.c_proj.bias", {w}, no_decay, m);
    add(h + "ln_2.weight", {w}, no_decay, m);
    add(h + "ln_2.bias", {w}, no_decay, m);
    add(h + "mlp.c_fc.weight", {4 * w, w}, decay, m);
    add(h + "mlp.c_fc.bias", {4 * w}, no_decay, m);
    add(h + "mlp.c_proj.weight", {w, 4 * w}, decay, m);
    add(h + "mlp.c_proj.bias", {w}, no_decay, m);
  }
  add("ln_f.weight", {w}, no_decay, {head});
  add("ln_f.bias", {w}, no_decay, {head});
  return total;
}

struct ChildRun {
  int status = -1;
  double seconds = 0;
  long peak_kib = 0;  // ru_maxrss of the child
};

ChildRun run_child(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const Timer timer;
  const pid_t pid = ::fork();
  if (pid < 0) throw make_error(ErrorCategory::internal, "fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::execv(args[0], args.data());
    std::fprintf(stderr, "zero-bench: cannot run %s: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ChildRun run;
  struct rusage usage {};
  int status = 0;
  while (::wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  run.seconds = timer.seconds();
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.peak_kib = usage.ru_maxrss;
  return run;
}

long self_peak_kib() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace

CLI::App* add_checkpoint_command(CLI::App& app, CheckpointBenchOptions& options) {
  CLI::App* command = app.add_subcommand(
      "checkpoint",
      "A GPT-2-shaped model's checkpoint on one rank (bf16 with fp32 masters and AdamW moments, "
      "stage 0): save and load GB/s, zero-ckpt inspect and export with their peak memory");
  command->add_option("path", options.path, "A directory on the disk to save to")->required();
  command->add_option("--model", options.model, "gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b")
      ->capture_default_str();
  command->add_option("--zero-ckpt", options.zero_ckpt,
                      "the zero-ckpt program (default: tools/zero-ckpt/zero-ckpt of this build)");
  command->add_flag("--keep", options.keep, "keep the checkpoint and the export");
  command->add_option("--json", options.json, "Append one JSON line of results to FILE");
  return command;
}

int run_checkpoint_bench(const CheckpointBenchOptions& options) {
  const auto model = kModels.find(options.model);
  if (model == kModels.end()) {
    throw make_error(ErrorCategory::usage,
                     "--model {}: use gpt2-124m, gpt2-350m, gpt2-774m or "
                     "gpt2-1.5b",
                     options.model);
  }
  std::string zero_ckpt = options.zero_ckpt;
  if (zero_ckpt.empty()) {
    zero_ckpt =
        (fs::read_symlink("/proc/self/exe").parent_path().parent_path() / "zero-ckpt" / "zero-ckpt")
            .string();
  }
  const fs::path dir = fs::path(options.path) / fmt::format("zero-bench-ckpt-{}", getpid());
  fs::create_directories(dir);

  config::ReadOptions read;
  auto device = create_device({});
  comm::CommOptions comm_options;
  comm_options.device = device.get();
  auto engine = std::make_unique<engine::Engine>(
      config::read_config_text(R"({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": true},
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
          "zero_optimization": {"stage": 0}})",
                               read),
      std::move(device), comm::create_communicator(comm_options));
  const std::uint64_t params = register_gpt2(*engine, model->second);
  Timer timer;
  engine->init();
  const double init_s = timer.seconds();

  timer = Timer();
  engine->save_checkpoint(dir.string(), {"bench", ""});
  const double save_s = timer.seconds();
  std::uint64_t bytes = 0;
  for (const auto& f : fs::directory_iterator(dir / "bench")) bytes += fs::file_size(f.path());
  timer = Timer();
  engine->load_checkpoint(dir.string());
  const double load_s = timer.seconds();
  // The first and last parameters read back as they were set (the fp32 masters).
  for (const std::size_t p : {std::size_t{0}, engine->registry().param_count() - 1}) {
    const std::vector<float> got = engine->read_param(p);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (got[i] != initial_value(i)) {
        throw make_error(ErrorCategory::internal, "after the load, {}[{}] = {}, saved {}",
                         engine->registry().param(p).name, i, got[i], initial_value(i));
      }
    }
  }
  const long engine_peak = self_peak_kib();
  engine.reset();

  const ChildRun inspect = run_child({zero_ckpt, "inspect", (dir / "bench").string()});
  const std::string out = (dir / "model.safetensors").string();
  const ChildRun exported =
      run_child({zero_ckpt, "export", (dir / "bench").string(), "--out", out});
  if (inspect.status != 0 || exported.status != 0) {
    throw make_error(ErrorCategory::internal, "zero-ckpt failed (inspect {}, export {})",
                     inspect.status, exported.status);
  }
  const std::uint64_t export_bytes = fs::file_size(out);
  if (!options.keep) fs::remove_all(dir);

  const double gb = static_cast<double>(bytes) / 1e9;
  std::cout << fmt::format(
      "zero-bench checkpoint: {} ({} parameters), bf16 with fp32 masters and AdamW moments, "
      "1 rank, stage 0\n",
      options.model, params);
  std::cout << fmt::format("  init                {:8.2f} s\n", init_s);
  std::cout << fmt::format("  save                {:8.2f} s  {} checkpoint, {:.2f} GB/s\n", save_s,
                           format_bytes(bytes), gb / save_s);
  std::cout << fmt::format(
      "  load                {:8.2f} s  {:.2f} GB/s (the model's own memory: peak {} resident)\n",
      load_s, gb / load_s, format_bytes(static_cast<std::uint64_t>(engine_peak) * 1024));
  std::cout << fmt::format(
      "  zero-ckpt inspect   {:8.2f} s  every checksum verified, peak {} resident\n",
      inspect.seconds, format_bytes(static_cast<std::uint64_t>(inspect.peak_kib) * 1024));
  std::cout << fmt::format(
      "  zero-ckpt export    {:8.2f} s  {} fp32 model file, peak {} resident\n", exported.seconds,
      format_bytes(export_bytes),
      format_bytes(static_cast<std::uint64_t>(exported.peak_kib) * 1024));
  if (!options.json.empty()) {
    std::ofstream json(options.json, std::ios::app);
    json << nlohmann::json{{"bench", "checkpoint"},
                           {"model", options.model},
                           {"params", params},
                           {"checkpoint_bytes", bytes},
                           {"save_s", save_s},
                           {"load_s", load_s},
                           {"inspect_s", inspect.seconds},
                           {"inspect_peak_kib", inspect.peak_kib},
                           {"export_s", exported.seconds},
                           {"export_peak_kib", exported.peak_kib},
                           {"export_bytes", export_bytes}}
                .dump()
         << "\n";
  }
  return 0;
}

}  // namespace zero::bench
