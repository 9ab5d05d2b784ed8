// The stage-3 fetcher on several ranks: prefetching along the recorded order, keeping for reuse
// and the live limit change which gathers are issued and when, never the numbers (the trained
// parameters are bit-identical whatever the settings); evaluation passes keep their own order;
// a changed order is recorded again; ranks that record different orders are told so.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "comm/create.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine_model.h"
#include "multirank.h"

namespace zero::testing {
namespace {

using engine::Engine;
using engine::FetchStats;

std::unique_ptr<Engine> stage3_engine(const std::string& zero_keys, int gas = 2) {
  return make_engine(
      R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": )" +
      std::to_string(gas) +
      R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.01}},
          "zero_optimization": {"stage": 3, "reduce_bucket_size": 3000,
                                "stage3_param_persistence_threshold": 10)" +
      zero_keys + "}}");
}

const std::vector<std::size_t> kAll{0, 1, 2, 3, 4, 5};
const std::vector<std::size_t> kShort{0, 1, 3, 4, 5};  // m2 skipped

struct Run {
  std::vector<std::vector<float>> params;
  FetchStats stats;
};

// Four optimizer steps of two micro-steps, with an evaluation pass over `eval_order` after each
// step, and the training order changed to kShort from micro-step `change_at` on.
Run train(const std::string& zero_keys, const std::vector<std::size_t>& eval_order,
          int change_at = 1000) {
  auto e = stage3_engine(zero_keys);
  for (int micro = 0; micro < 8; ++micro) {
    micro_step(*e, micro >= change_at ? kShort : kAll, micro);
    if (micro % 2 == 1 && !eval_order.empty()) {
      e->set_train(false);
      micro_step(*e, eval_order, micro, false);
      micro_step(*e, eval_order, micro, false);
      e->set_train(true);
    }
  }
  Run run;
  for (std::size_t p = 0; p < Model{}.sizes.size(); ++p) run.params.push_back(e->read_param(p));
  run.stats = e->fetch_stats();
  return run;
}

void check_same_params(const Run& a, const Run& b) {
  REQUIRE(a.params.size() == b.params.size());
  for (std::size_t p = 0; p < a.params.size(); ++p) {
    INFO("parameter p" << p);
    CHECK(std::memcmp(a.params[p].data(), b.params[p].data(), a.params[p].size() * 4) == 0);
  }
}

std::size_t padded(std::int64_t numel, int world) {
  const std::size_t n = static_cast<std::size_t>(numel);
  const std::size_t w = static_cast<std::size_t>(world);
  return (n + w - 1) / w * w;
}

}  // namespace

TEST_CASE("engine fetch: prefetch and reuse change the gathers, not the numbers", "[engine]") {
  const std::vector<std::size_t> eval{0, 1, 2, 3, 4, 5};
  // Nothing ahead, nothing kept (distance 0 still keeps a module's parameters from its last
  // forward into its first backward: nothing is gathered in between).
  const Run plain =
      train(R"(, "stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0)", eval);
  // DeepSpeed's defaults: everything ahead, everything kept.
  const Run eager = train("", eval);
  // A small window and live limit.
  const std::size_t max_live = 8000;
  const Run tight =
      train(R"(, "stage3_prefetch_bucket_size": 3000, "stage3_max_live_parameters": )" +
                std::to_string(max_live) + R"(, "stage3_max_reuse_distance": 7000)",
            eval);
  check_same_params(plain, eager);
  check_same_params(plain, tight);

  CHECK(plain.stats.prefetches == 0);
  CHECK(eager.stats.prefetches > 0);
  CHECK(tight.stats.prefetches > 0);
  // Kept and fetched-ahead parameters are found by their hooks, so fewer gathers are issued.
  CHECK(eager.stats.gathers < plain.stats.gathers);
  CHECK(tight.stats.gathers < plain.stats.gathers);
  CHECK(eager.stats.hits > plain.stats.hits);
  // The orders: 12 hooks per training micro-step, 6 per evaluation pass; nothing invalidated.
  for (const Run* run : {&plain, &eager, &tight}) {
    CHECK(run->stats.train_hooks == 12);
    CHECK(run->stats.eval_hooks == 6);
    CHECK(run->stats.invalidations == 0);
    CHECK(run->stats.live_elements == 0);  // after the last step nothing but persistent remains
  }
  // The live limit bounds what is kept or fetched ahead; a module's own gather comes on top.
  const int world = variants().front().comm->size();
  Model model;
  std::size_t largest_module = 0;
  for (const auto& m : model.modules) {
    std::size_t elements = 0;
    for (std::size_t p : m) elements += padded(model.sizes[p], world);
    largest_module = std::max(largest_module, elements);
  }
  CHECK(tight.stats.peak_live_elements <= max_live + largest_module);
  CHECK(tight.stats.peak_live_elements < eager.stats.peak_live_elements);
}

TEST_CASE("engine fetch: evaluation passes keep their own order", "[engine]") {
  // Evaluation skips m2 and m4: a different order, which must not disturb training's.
  const Run run = train("", {0, 1, 3, 5});
  CHECK(run.stats.train_hooks == 12);
  CHECK(run.stats.eval_hooks == 4);
  CHECK(run.stats.invalidations == 0);
  check_same_params(run, train(R"(, "stage3_prefetch_bucket_size": 0)", {0, 1, 3, 5}));
}

TEST_CASE("engine fetch: a changed order is given up once and recorded again", "[engine]") {
  const Run changed = train("", {}, 3);
  CHECK(changed.stats.invalidations == 1);
  CHECK(changed.stats.train_hooks == 10);
  check_same_params(changed, train(R"(, "stage3_prefetch_bucket_size": 0)", {}, 3));
}

TEST_CASE("engine fetch: ranks that record different orders are told at the step", "[engine]") {
  // m2 (17 elements) and m4 (999) differ in size, so swapping them would mismatch the
  // collectives; swap two modules of one parameter each and equal size instead: a new model.
  auto device = create_device({});
  comm::CommOptions comm_options;
  comm_options.backend = comm::Backend::mpi;
  comm_options.timeout = std::chrono::seconds(120);
  comm_options.device = device.get();
  auto comm = comm::create_communicator(comm_options);
  if (comm->size() < 2) return;
  const int rank = comm->rank();
  config::ReadOptions read;
  read.world_size = comm->size();
  Engine e(config::read_config_text(
               R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD",
                   "params": {"lr": 0.1}}, "zero_optimization": {"stage": 3,
                   "stage3_param_persistence_threshold": 0}})",
               read),
           std::move(device), std::move(comm));
  const std::size_t a = e.add_module("a"), b = e.add_module("b");
  e.add_param("pa", {100}, true, 0, {a});
  e.add_param("pb", {100}, true, 0, {b});
  e.init();
  const std::vector<std::size_t> order =
      rank == 1 ? std::vector<std::size_t>{b, a} : std::vector<std::size_t>{a, b};
  for (std::size_t m : order) {
    e.pre_forward(m);
    e.post_forward(m);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    e.pre_backward(*it);
    e.post_backward(*it);
  }
  try {
    e.step();
    FAIL("step did not notice the ranks' different orders");
  } catch (const Error& error) {
    CHECK(error.category() == ErrorCategory::usage);
    CHECK_THAT(error.what(), Catch::Contains("different training module orders"));
  }
}

}  // namespace zero::testing
