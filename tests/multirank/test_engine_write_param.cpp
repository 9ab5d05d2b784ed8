// Engine::write_param (zero_write_param; DeepSpeed's safe_set_full_fp32_param): a parameter's
// value set between passes wherever this rank keeps it (compute copy, stage-3 shard, a
// persistent parameter's gathered copy, host memory, NVMe) and in its fp32 master, with the
// optimizer's moments kept: writing every parameter its own value changes nothing later, and a
// new value is what the next forward and read_param see. Not collective: each rank writes the
// part it keeps, from the same value.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/half.h"
#include "engine_model.h"
#include "multirank.h"

namespace zero::testing {
namespace {

namespace fs = std::filesystem;

struct WriteCase {
  int stage;
  bool bf16 = false;
  const char* offload = "none";  // offload_optimizer.device
  const char* params = "none";   // offload_param.device (stage 3)
};

std::string describe_write(const WriteCase& c) {
  return "stage " + std::to_string(c.stage) + (c.bf16 ? " bf16" : " fp32") +
         ", optimizer offload " + c.offload + ", param offload " + c.params;
}

std::string write_config(const WriteCase& c, const std::string& swap_dir) {
  std::string text =
      R"({"train_micro_batch_size_per_gpu": 1,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}},
      "zero_optimization": {"stage": )" +
      std::to_string(c.stage) +
      R"(, "reduce_bucket_size": 1000, "stage3_param_persistence_threshold": 10,
          "sub_group_size": 700,
          "offload_optimizer": {"device": ")" +
      c.offload + R"(", "nvme_path": ")" + swap_dir + R"(", "buffer_count": 3},
          "offload_param": {"device": ")" +
      c.params + R"(", "nvme_path": ")" + swap_dir + R"(", "max_in_cpu": 0, "buffer_count": 3}})";
  if (c.bf16) text += R"(, "bf16": {"enabled": true})";
  return text + "}";
}

// What the forward sees of parameter `p` (its compute copy, gathered at stage 3), as fp32.
std::vector<float> seen_in_forward(engine::Engine& e, std::size_t p) {
  const Model model;
  std::vector<float> out;
  e.set_train(false);  // an evaluation pass: no backward owed
  for (std::size_t m : kModuleOrder) {
    e.pre_forward(m);
    for (std::size_t q : model.modules[m]) {
      if (q != p || !out.empty()) continue;
      const auto n = static_cast<std::size_t>(model.sizes[p]);
      out.resize(n);
      if (e.compute_dtype() == DType::f32) {
        const auto* data = static_cast<const float*>(e.param_data(p));
        out.assign(data, data + n);
      } else {
        const auto* data = static_cast<const std::uint16_t*>(e.param_data(p));
        for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(data[i]);
      }
    }
    e.post_forward(m);
  }
  e.set_train(true);
  return out;
}

const WriteCase kWriteCases[] = {
    {0},
    {1},
    {2},
    {3},
    {0, true},
    {2, true},
    {3, true},
    {2, false, "cpu"},
    {3, true, "nvme", "nvme"},
    {3, false, "cpu", "cpu"},
};

}  // namespace

TEST_CASE("engine write_param: writing every parameter its own value changes nothing after",
          "[engine]") {
  for (const WriteCase& c : kWriteCases) {
    INFO(describe_write(c));
    const fs::path dir = fs::current_path() / ("write-param-" + std::to_string(getpid()));
    fs::create_directories(dir);
    const std::string text = write_config(c, dir.string());
    std::vector<std::vector<float>> straight, rewritten;
    {
      auto e = make_engine(text);
      for (int s = 0; s < 6; ++s) micro_step(*e, kModuleOrder, s);
      straight = param_values(*e);
    }
    {
      auto e = make_engine(text);
      for (int s = 0; s < 3; ++s) micro_step(*e, kModuleOrder, s);
      for (std::size_t p = 0; p < e->registry().param_count(); ++p) {
        const std::vector<float> value = e->read_param(p);
        e->write_param(p, value.data(), value.size());
      }
      for (int s = 3; s < 6; ++s) micro_step(*e, kModuleOrder, s);
      rewritten = param_values(*e);
    }
    // The moments were kept: a write that zeroed them would move every parameter differently.
    CHECK(rewritten == straight);
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
}

TEST_CASE("engine write_param: a new value is what forward, read_param and the step start from",
          "[engine]") {
  const Model model;
  for (const WriteCase& c : kWriteCases) {
    INFO(describe_write(c));
    const fs::path dir = fs::current_path() / ("write-param-" + std::to_string(getpid()));
    fs::create_directories(dir);
    auto e = make_engine(write_config(c, dir.string()));
    for (int s = 0; s < 2; ++s) micro_step(*e, kModuleOrder, s);
    // p5 (split over groups and shards), p7 (persistent at stage 3), p8 (frozen); values exact
    // in bf16.
    for (const std::size_t p : {std::size_t{5}, std::size_t{7}, kFrozen}) {
      INFO("p" << p);
      const auto n = static_cast<std::size_t>(model.sizes[p]);
      std::vector<float> want(n);
      for (std::size_t i = 0; i < n; ++i) {
        want[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.125f;
      }
      e->write_param(p, want.data(), want.size());
      CHECK(e->read_param(p) == want);
      CHECK(seen_in_forward(*e, p) == want);
    }
    const std::vector<float> before = e->read_param(5);
    micro_step(*e, kModuleOrder, 2);
    const std::vector<float> after = e->read_param(5);
    // One AdamW step (lr 0.01) from the written value: near it, and moved.
    REQUIRE(after.size() == before.size());
    float largest = 0;
    for (std::size_t i = 0; i < after.size(); ++i) {
      largest = std::max(largest, std::abs(after[i] - before[i]));
    }
    CHECK(largest > 0.0f);
    CHECK(largest < 0.05f);
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
}

TEST_CASE("engine write_param: refused inside a pass and with the wrong count, naming it",
          "[engine]") {
  auto e = make_engine(write_config({3}, "."));
  const std::vector<float> value(17, 1.0f);
  CHECK_THROWS_WITH(e->write_param(2, value.data(), 16),
                    Catch::Contains("'p2' has 17 elements") && Catch::Contains("16 were given"));
  e->set_train(false);
  e->pre_forward(0);
  CHECK_THROWS_WITH(e->write_param(2, value.data(), value.size()),
                    Catch::Contains("write_param") && Catch::Contains("between passes"));
  e->post_forward(0);
  for (std::size_t m = 1; m < kModuleOrder.size(); ++m) {
    e->pre_forward(m);
    e->post_forward(m);
  }
  e->set_train(true);
  e->write_param(2, value.data(), value.size());
  CHECK(e->read_param(2) == value);
}

TEST_CASE("engine write_param: after a backward and before its step, the step starts from it",
          "[engine]") {
  for (const int stage : {0, 1, 2, 3}) {
    INFO("stage " << stage);
    auto e = make_engine(write_config({stage}, "."));
    micro_step(*e, kModuleOrder, 0);
    micro_step(*e, kModuleOrder, 1, true, false);
    const std::vector<float> value(4097, 0.75f);
    e->write_param(5, value.data(), value.size());
    e->step();
    float largest = 0;
    for (const float v : e->read_param(5)) largest = std::max(largest, std::abs(v - 0.75f));
    CHECK(largest > 0.0f);  // stepped: one AdamW step (lr 0.01) from 0.75
    CHECK(largest < 0.02f);
  }
}

}  // namespace zero::testing
