// Checkpoints round-trip in every placement of the state: stages 0-3 × {no offload, optimizer
// on the CPU (stepped after backward, and speculated in it: super_offload), optimizer on NVMe with
// max_in_cpu 0 and with part of it in memory (stepped after backward, and speculated), and at
// stage 3 parameters on the CPU and on NVMe} ×
// {fp32, bf16, fp16}: every precision of every pair on 2 ranks, and at the other world sizes the
// program runs with (1, 3 and 4; the multinode run leaves the matrix out, since at 2 x 2 it would
// repeat 4's choices) one precision per pair, chosen by the pair and the world size so that each
// precision meets each placement at some size: a third of the time there, where what differs is
// the shards' geometry, not the arithmetic. For each: the masters (frozen parameters: the values)
// read back from the saved files with the checkpoint reader equal the live state bit for bit, the
// moments in the files are the optimizer's (not zeros), and a load followed by two more steps
// gives what the two steps gave without it, bit for bit, which holds only when the moments came
// back exactly too.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/half.h"
#include "checkpoint/reader.h"
#include "engine_model.h"
#include "multirank.h"
#include "shared_dir.h"

namespace zero::testing {
namespace {

namespace fs = std::filesystem;

struct Placement {
  const char* name;
  int min_stage;  // the stages it applies from
  int max_stage;
  const char* zero_keys;  // inside zero_optimization; NVME is replaced by the swap directory
};

// Sub-groups of 700 elements make several step groups on every rank; 1500 elements in memory
// keep the first groups resident and swap the rest.
const Placement kPlacements[] = {
    {"no offload", 0, 3, ""},
    {"optimizer cpu", 1, 3, R"("offload_optimizer": {"device": "cpu"},)"},
    {"optimizer cpu, super_offload", 1, 3,
     R"("offload_optimizer": {"device": "cpu", "super_offload": true},)"},
    {"optimizer nvme, max_in_cpu 0", 1, 3,
     R"("offload_optimizer": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 0},)"},
    {"optimizer nvme, part in memory", 1, 3,
     R"("offload_optimizer": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 1500},)"},
    {"optimizer nvme, part in memory, super_offload", 1, 3,
     R"("offload_optimizer": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 1500,
        "super_offload": true},)"},
    {"params cpu", 3, 3, R"("offload_param": {"device": "cpu"},)"},
    {"params and optimizer cpu", 3, 3,
     R"("offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"},)"},
    {"params nvme, optimizer nvme", 3, 3,
     R"("offload_param": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 0,
        "buffer_size": 5000},
        "offload_optimizer": {"device": "nvme", "nvme_path": "NVME", "max_in_cpu": 0},)"},
};

const char* const kPrecisions[] = {"fp32", "bf16", "fp16"};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at)) {
    text.replace(at, from.size(), to);
    at += to.size();
  }
  return text;
}

std::string matrix_config(int stage, const Placement& placement, const std::string& precision,
                          const fs::path& nvme) {
  std::string half;
  if (precision == "bf16") half = R"("bf16": {"enabled": true},)";
  if (precision == "fp16") half = R"("fp16": {"enabled": true, "initial_scale_power": 8},)";
  return R"({"train_micro_batch_size_per_gpu": 1, )" + half + R"(
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
      "zero_optimization": {"stage": )" +
         std::to_string(stage) + ", " + replace_all(placement.zero_keys, "NVME", nvme.string()) +
         R"( "reduce_bucket_size": 1000, "allgather_bucket_size": 1000, "sub_group_size": 700,
        "stage3_param_persistence_threshold": 20},
      "steps_per_print": 1000})";
}

// One micro-step whose gradients are non-zero in every precision (the loss scale applied as a
// model would), different per parameter, rank and step.
void half_aware_step(engine::Engine& e, int step) {
  const Model model;
  const DType dtype = e.compute_dtype();
  for (std::size_t m : kModuleOrder) {
    e.pre_forward(m);
    e.post_forward(m);
  }
  const float scale = static_cast<float>(e.loss_scale());
  for (auto it = kModuleOrder.rbegin(); it != kModuleOrder.rend(); ++it) {
    e.pre_backward(*it);
    for (std::size_t p : model.modules[*it]) {
      if (p == kFrozen) continue;
      void* grad = e.grad_buffer(p);
      const void* data = e.param_data(p);
      for (std::int64_t i = 0; i < model.sizes[p]; ++i) {
        const float g =
            scale * (0.3f * 0.5f * std::sin(0.01f * static_cast<float>(i)) +
                     0.01f * static_cast<float>((i + step + e.rank() + static_cast<int>(p)) % 7));
        if (dtype == DType::f32) {
          static_cast<float*>(grad)[i] += g + 0.01f * static_cast<const float*>(data)[i];
        } else {
          auto* h = static_cast<std::uint16_t*>(grad);
          const bool bf = dtype == DType::bf16;
          const float old = bf ? bf16_to_float(h[i]) : fp16_to_float(h[i]);
          h[i] = bf ? float_to_bf16(old + g) : float_to_fp16(old + g);
        }
      }
    }
    e.post_backward(*it);
  }
  e.step();
}

void train_half_aware(engine::Engine& e, int from, int to) {
  for (int step = from; step < to; ++step) half_aware_step(e, step);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("engine checkpoint: masters and moments round-trip bit for bit in every placement",
          "[engine]") {
  SharedDir scratch("ckpt-matrix");
  const fs::path nvme = scratch.path / "swap";
  if (side_channel().rank() == 0) fs::create_directories(nvme);
  side_channel().barrier().wait();
  const int world = side_channel().size();
  const bool every_precision = world == 2;
  int cases = 0;
  int pairs = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const Placement& placement : kPlacements) {
      if (stage < placement.min_stage || stage > placement.max_stage) continue;
      const int pair = pairs++;
      for (int k = 0; k < 3; ++k) {
        if (!every_precision && k != (pair + world) % 3) continue;
        const std::string precision = kPrecisions[k];
        const std::string what =
            "stage " + std::to_string(stage) + ", " + placement.name + ", " + precision;
        INFO(what);
        const fs::path dir = scratch.path / ("ckpt-" + std::to_string(cases++));
        auto e = make_engine(matrix_config(stage, placement, precision, nvme));
        train_half_aware(*e, 0, 3);
        const auto live = param_values(*e);
        e->save_checkpoint(dir.string(), {"saved", ""});

        checkpoint::CheckpointReader reader((dir / "saved").string());
        const checkpoint::Manifest& manifest = reader.manifest();
        REQUIRE(manifest.state_names.size() == 2);
        for (std::size_t p = 0; p < e->registry().param_count(); ++p) {
          const engine::ParamSpec& spec = e->registry().param(p);
          const checkpoint::ParamEntry* entry = manifest.find(spec.name);
          REQUIRE(entry != nullptr);
          std::vector<float> saved(spec.numel);
          reader.read(spec.trainable ? checkpoint::kMaster : checkpoint::kParam, *entry, 0,
                      saved.size(), DType::f32, saved.data());
          INFO("parameter " << spec.name);
          CHECK(same_bits(saved, live[p]));
          if (!spec.trainable) continue;
          for (const std::string& moment : manifest.state_names) {
            std::vector<float> m(spec.numel);
            reader.read(moment, *entry, 0, m.size(), DType::f32, m.data());
            std::size_t nonzero = 0;
            for (float x : m) nonzero += x != 0.0f;
            INFO("moment " << moment);
            CHECK(nonzero * 10 >= m.size() * 9);
          }
        }

        train_half_aware(*e, 3, 5);
        const auto later = param_values(*e);
        e->load_checkpoint(dir.string());
        CHECK(param_values(*e) == live);
        train_half_aware(*e, 3, 5);
        const auto again = param_values(*e);
        for (std::size_t p = 0; p < later.size(); ++p) {
          INFO("parameter p" << p << " after the load and two steps");
          CHECK(same_bits(again[p], later[p]));
        }
      }
    }
  }
  CHECK(pairs == 22);  // placement-stage pairs
  CHECK(cases == (every_precision ? 66 : 22));
}

}  // namespace zero::testing
