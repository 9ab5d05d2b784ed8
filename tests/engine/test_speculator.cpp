// SuperOffload's speculation: the Speculator alone (engine/stepping/speculator.h) against its
// contract (a group is final after the last bucket holding part of it; each armed group stepped
// once, after that bucket; finish() waits, steps what no bucket reported and rethrows a failure;
// the policy's turning off and on), then the Stepper with it on owned gradients written into the
// ModelState: a speculated step that stands, one rolled back by clipping and one by an fp16
// skip give what the step without speculation gives.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/half.h"
#include "tests/engine/engine_parts.h"

namespace zero::engine {
namespace {

using testing::ArithmeticValues;
using testing::EngineParts;
using testing::master_of;

// Stage `stage`, optimizer offload to the CPU with speculation; small buckets and step groups so
// that a group spans buckets and a bucket spans groups.
std::string speculating(int stage, const std::string& extra = "",
                        const std::string& optimizer = "SGD") {
  return R"({"train_micro_batch_size_per_gpu": 1, )" + extra + R"( "optimizer": {"type": ")" +
         optimizer + R"(", "params": {"lr": 0.5}},
             "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "sub_group_size": 40, "reduce_bucket_size": 30,
               "allgather_bucket_size": 40,
               "offload_optimizer": {"device": "cpu", "super_offload": true}}})";
}

bool bucket_overlaps(const Bucket& a, const Bucket& b) {
  for (const BucketPiece& x : a.pieces) {
    for (const BucketPiece& y : b.pieces) {
      if (x.param == y.param && x.begin < y.end && y.begin < x.end) return true;
    }
  }
  return false;
}

// Records each stepped group with the number of buckets added before it.
struct GroupRecorder {
  std::mutex mutex;
  std::size_t added = 0;
  std::vector<std::pair<std::size_t, std::size_t>> stepped;  // (group, buckets added then)
  void step(std::size_t group) {
    std::lock_guard lock(mutex);
    stepped.emplace_back(group, added);
  }
};

}  // namespace

TEST_CASE("speculator: a group is final after the last bucket holding part of it", "[engine]") {
  for (int stage : {1, 2, 3}) {
    INFO("stage " << stage);
    EngineParts parts(speculating(stage));
    const Layout& layout = parts.layout;
    REQUIRE(layout.step_groups.size() >= 3);
    REQUIRE(layout.buckets.size() >= 3);
    Speculator speculator(layout);
    for (std::size_t g = 0; g < layout.step_groups.size(); ++g) {
      INFO("group " << g);
      const std::size_t last = speculator.last_bucket(g);
      REQUIRE(last != kNone);
      CHECK(bucket_overlaps(layout.buckets[last], layout.step_groups[g]));
      for (std::size_t b = last + 1; b < layout.buckets.size(); ++b) {
        CHECK_FALSE(bucket_overlaps(layout.buckets[b], layout.step_groups[g]));
      }
    }
  }
}

TEST_CASE("super_offload without a sub_group_size steps groups of reduce_bucket_size elements",
          "[engine]") {
  // A group is final once its last bucket is reduced: the default sub_group_size of 1e9 would
  // make a model one or two groups, most of them final only at backward's end.
  const auto config = [](const std::string& super_offload, const std::string& sub_group) {
    return R"({"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD",
               "params": {"lr": 0.5}}, "zero_optimization": {"stage": 3, )" +
           sub_group + R"( "reduce_bucket_size": 30, "offload_optimizer": {"device": "cpu",
               "super_offload": )" +
           super_offload + "}}}";
  };
  const auto sizes = [](const Layout& layout) {
    std::vector<std::size_t> out;
    for (const Bucket& group : layout.step_groups) out.push_back(group.block);
    return out;
  };
  EngineParts unset(config("true", ""));
  CHECK(unset.config.zero.sub_group_size_auto);
  REQUIRE(unset.layout.step_groups.size() > 2);
  // The groups a sub_group_size of the bucket's 30 elements makes.
  EngineParts thirty(config("true", R"("sub_group_size": 30,)"));
  CHECK(sizes(unset.layout) == sizes(thirty.layout));
  CHECK(bucket_sized_step_groups(unset.config, unset.layout.modes));
  CHECK(step_group_size(unset.config, unset.layout.modes) == 30);
  // "auto" reads as unset; a sub_group_size given is kept; without super_offload, 1e9.
  EngineParts automatic(config("true", R"("sub_group_size": "auto",)"));
  CHECK(sizes(automatic.layout) == sizes(unset.layout));
  EngineParts given(config("true", R"("sub_group_size": 40,)"));
  CHECK_FALSE(given.config.zero.sub_group_size_auto);
  const std::vector<std::size_t> forty = sizes(given.layout);
  CHECK(forty != sizes(unset.layout));
  CHECK(*std::max_element(forty.begin(), forty.end()) == 40);
  EngineParts after_backward(config("false", ""));
  CHECK_FALSE(bucket_sized_step_groups(after_backward.config, after_backward.layout.modes));
  CHECK(after_backward.layout.step_groups.size() == 1);
}

TEST_CASE("speculator: each armed group is stepped once, after its last bucket", "[engine]") {
  EngineParts parts(speculating(3));
  const Layout& layout = parts.layout;
  Speculator speculator(layout);
  GroupRecorder recorder;
  REQUIRE(speculator.arm([&](std::size_t g) { recorder.step(g); }));
  CHECK(speculator.armed());
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    {
      std::lock_guard lock(recorder.mutex);
      recorder.added = b + 1;
    }
    speculator.bucket_added(b);
  }
  speculator.finish();
  CHECK_FALSE(speculator.armed());
  std::vector<std::size_t> groups;
  for (const auto& [group, added] : recorder.stepped) {
    INFO("group " << group);
    CHECK(added >= speculator.last_bucket(group) + 1);
    groups.push_back(group);
  }
  // Every bucket reported in plan order: the worker took them in the order the NVMe swap is
  // told to read ahead along.
  CHECK(groups == speculator.order());
  std::sort(groups.begin(), groups.end());
  std::vector<std::size_t> every(layout.step_groups.size());
  for (std::size_t g = 0; g < every.size(); ++g) every[g] = g;
  CHECK(groups == every);
  // Disarmed: a late report steps nothing.
  speculator.bucket_added(0);
  speculator.finish();
  CHECK(recorder.stepped.size() == every.size());
}

TEST_CASE("speculator: finish steps what no bucket reported, and rethrows a failed step",
          "[engine]") {
  EngineParts parts(speculating(2));
  const std::size_t groups = parts.layout.step_groups.size();
  Speculator speculator(parts.layout);
  GroupRecorder recorder;
  REQUIRE(speculator.arm([&](std::size_t g) { recorder.step(g); }));
  speculator.finish();
  CHECK(recorder.stepped.size() == groups);

  // The first group fails: finish() throws it; the groups after it are not stepped.
  recorder.stepped.clear();
  REQUIRE(speculator.arm([&](std::size_t g) {
    if (g == 0) throw std::runtime_error("disk on fire");
    recorder.step(g);
  }));
  CHECK_THROWS_WITH(speculator.finish(), "disk on fire");
  CHECK(recorder.stepped.empty());
  // Armed again afterwards, it steps every group.
  REQUIRE(speculator.arm([&](std::size_t g) { recorder.step(g); }));
  speculator.finish();
  CHECK(recorder.stepped.size() == groups);
  // Stopped: no more arming.
  speculator.stop();
  CHECK_FALSE(speculator.arm([&](std::size_t g) { recorder.step(g); }));
}

TEST_CASE(
    "speculator: a hand-over leaves the rest to the worker in ascending order, await takes a "
    "queued group next, and a failure is thrown by the wait that meets it",
    "[engine]") {
  EngineParts parts(speculating(3));
  const std::size_t groups = parts.layout.step_groups.size();
  REQUIRE(groups >= 4);
  Speculator speculator(parts.layout);
  GroupRecorder recorder;
  // The worker is held in the first group it takes until the test lets it go.
  std::mutex gate_mutex;
  std::condition_variable gate;
  bool open = false;
  const auto held_step = [&](std::size_t g) {
    {
      std::unique_lock lock(gate_mutex);
      gate.wait(lock, [&] { return open; });
    }
    recorder.step(g);
  };
  const auto let_go = [&] {
    {
      std::lock_guard lock(gate_mutex);
      open = true;
    }
    gate.notify_all();
  };

  // Nothing reported before the hand-over: every group is queued in ascending order, the first
  // one perhaps taken (and held) already; awaiting the last takes it next.
  REQUIRE(speculator.arm(held_step, /*newest_first=*/true));
  speculator.hand_over();
  CHECK_FALSE(speculator.armed());
  std::thread waiter([&] { speculator.await(groups - 1); });
  // Time for the waiter to move it to the queue's front before the worker is let go (the one
  // ordering here that rests on the scheduler; generous).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  let_go();
  waiter.join();
  speculator.drain();
  REQUIRE(recorder.stepped.size() == groups);
  std::vector<std::size_t> order;
  for (const auto& stepped : recorder.stepped) order.push_back(stepped.first);
  // The awaited group first (moved before the worker took one) or second (after the one it
  // held, group 0); the others ascending.
  const auto awaited = std::find(order.begin(), order.end(), groups - 1);
  CHECK(awaited - order.begin() <= 1);
  order.erase(awaited);
  CHECK(std::is_sorted(order.begin(), order.end()));
  // Drained: waits return at once, and a boundary arms again.
  speculator.await(0);
  speculator.drain();

  // A group that fails after the hand-over: the wait for it throws the failure, the drain that
  // follows says it was reported.
  recorder.stepped.clear();
  REQUIRE(speculator.arm(
      [&](std::size_t g) {
        if (g == 1) throw std::runtime_error("disk on fire");
        recorder.step(g);
      },
      /*newest_first=*/true));
  speculator.hand_over();
  CHECK_THROWS_WITH(speculator.await(1), "disk on fire");
  CHECK_THROWS_WITH(speculator.drain(), Catch::Contains("reported before"));
  // A failure before the hand-over is the hand-over's, as it is finish()'s.
  REQUIRE(speculator.arm([&](std::size_t) { throw std::runtime_error("disk on fire"); }));
  speculator.bucket_added(parts.layout.buckets.size() - 1);
  for (int ms = 0; ms < 10000 && !speculator.failed(); ++ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(speculator.failed());
  CHECK_THROWS_WITH(speculator.hand_over(), "disk on fire");
}

TEST_CASE("speculator: rollbacks in 3 of the last 8 steps stop it until a step needs none",
          "[engine]") {
  EngineParts parts(speculating(1));
  Speculator speculator(parts.layout);
  const auto nothing = [](std::size_t) {};
  // Rollbacks spread out: 3 in 9, never 3 in 8, keep it on.
  for (bool rollback : {true, false, false, false, false, false, false, false, true}) {
    speculator.record(true, rollback);
  }
  speculator.record(true, true);
  CHECK(speculator.counts().on);
  // A third within the last 8: off.
  speculator.record(true, true);
  Speculator::Counts counts = speculator.counts();
  CHECK_FALSE(counts.on);
  CHECK(counts.speculated == 11);
  CHECK(counts.rolled_back == 4);
  CHECK_FALSE(speculator.arm(nothing));
  // Off while steps still clip; on again at the first that does not.
  speculator.record(false, true);
  speculator.record(false, true);
  CHECK_FALSE(speculator.counts().on);
  speculator.record(false, false);
  counts = speculator.counts();
  CHECK(counts.on);
  CHECK(counts.held_off == 3);
  CHECK(speculator.arm(nothing));
  speculator.finish();
  // The history starts again: one more rollback does not turn it off.
  speculator.record(true, true);
  CHECK(speculator.counts().on);
}

namespace {

// The owned gradient shard set to g(p, i) = (p + 1) * 0.01 * (i % 7 - 3) times `scale` (the
// loss scale), in the accumulation dtype; `poison` replaces one element of p1.
void set_speculation_grads(EngineParts& parts, double scale = 1.0, float poison = 0.0f) {
  for (std::size_t p : parts.layout.trainable) {
    const std::size_t n = parts.layout.params[p].shape.valid(0);
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>(scale * (p + 1) * 0.01 * (static_cast<int>(i % 7) - 3));
    }
    if (poison != 0.0f && p == 1) g[5] = poison;
    testing::write_owned_grad(parts, p, g);
  }
}

// Every trainable parameter's masters and moments, and the steps' stats, after `steps` steps of
// AdamW on set_speculation_grads' gradients (times 1 + step), speculated or not.
// What the next forward reads of parameter p: its compute copy (stages 1-2) or shard (3).
std::vector<unsigned char> compute_of(EngineParts& parts, std::size_t p) {
  const std::size_t csize = dtype_size(parts.layout.modes.compute);
  const bool shard = parts.layout.modes.stage == 3;
  const std::size_t bytes =
      (shard ? parts.layout.params[p].shape.shard : parts.registry.param(p).numel) * csize;
  std::vector<unsigned char> out(bytes);
  void* on_device = parts.device->reserve(Tier::device, bytes);
  if (shard) {
    parts.state->copy_shard(p, on_device);
  } else {
    parts.device->copy(on_device, parts.state->full(p), bytes);
  }
  parts.device->copy(out.data(), on_device, bytes);
  parts.device->unreserve(Tier::device, on_device, bytes);
  return out;
}

struct SpeculationRun {
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<unsigned char>> computes;
  std::vector<StepStats> stats;
  Speculator::Counts counts;
};

SpeculationRun run_steps(const std::string& config, int steps, bool speculate,
                         int poison_step = -1) {
  EngineParts parts(config);
  ArithmeticValues values;
  parts.state->assign(values);
  SpeculationRun out;
  for (int s = 0; s < steps; ++s) {
    if (speculate) parts.stepper->arm_speculation();
    const double scale = parts.stepper->scaler().scale();
    set_speculation_grads(parts, scale * (1 + s),
                          s == poison_step ? std::numeric_limits<float>::infinity() : 0.0f);
    if (speculate) {
      for (std::size_t b = 0; b < parts.layout.buckets.size(); ++b) {
        parts.stepper->bucket_added(b);
      }
    }
    out.stats.push_back(parts.stepper->step());
  }
  // Stage 3 without a second copy may leave the last groups to the worker past step().
  parts.stepper->drain_speculation();
  for (std::size_t p : parts.layout.trainable) {
    out.masters.push_back(master_of(parts, p));
    out.computes.push_back(compute_of(parts, p));
  }
  if (parts.stepper->speculator() != nullptr) out.counts = parts.stepper->speculator()->counts();
  return out;
}

}  // namespace

TEST_CASE("stepper: speculated steps equal the plain step bit for bit, rolled back when needed",
          "[engine]") {
  struct Variant {
    const char* what;
    std::string extra;
    int poison_step;
    std::int64_t rolled_back;  // of 4 speculated steps
  };
  const std::vector<Variant> variants = {
      {"no clipping", "", -1, 0},
      {"clipping that never triggers", R"("gradient_clipping": 1000.0,)", -1, 0},
      {"clipping that always triggers", R"("gradient_clipping": 0.01,)", -1, 3},
      {"an fp16 overflow skip",
       R"("fp16": {"enabled": true, "initial_scale_power": 4, "hysteresis": 1},)", 1, 1},
  };
  for (int stage : {1, 2, 3}) {
    for (const Variant& v : variants) {
      INFO("stage " << stage << ", " << v.what);
      const std::string config = speculating(stage, v.extra, "AdamW");
      const SpeculationRun plain = run_steps(config, 4, /*speculate=*/false, v.poison_step);
      const SpeculationRun speculated = run_steps(config, 4, /*speculate=*/true, v.poison_step);
      REQUIRE(plain.masters.size() == speculated.masters.size());
      for (std::size_t k = 0; k < plain.masters.size(); ++k) {
        INFO("trainable parameter " << k);
        CHECK(std::memcmp(plain.masters[k].data(), speculated.masters[k].data(),
                          plain.masters[k].size() * 4) == 0);
        CHECK(plain.computes[k] == speculated.computes[k]);
      }
      for (std::size_t s = 0; s < plain.stats.size(); ++s) {
        CHECK(plain.stats[s].skipped == speculated.stats[s].skipped);
        CHECK(plain.stats[s].grad_norm == speculated.stats[s].grad_norm);
      }
      // Clipping every time: off after 3 rollbacks, the fourth step after backward.
      CHECK(speculated.counts.rolled_back == v.rolled_back);
      CHECK(speculated.counts.speculated == (v.rolled_back == 3 ? 3 : 4));
      CHECK(speculated.counts.on == (v.rolled_back != 3));
    }
  }
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "stepper: super_offload keeps a second copy of the state only where the verdict can undo a "
    "step, and without one the learning rate may not change while the boundary's groups are "
    "stepped",
    "[engine]") {
  struct Variant {
    const char* what;
    std::string extra;
    bool second_copy;
  };
  const std::vector<Variant> variants = {
      {"fp32, no clipping", "", false},
      {"fp32, clipping", R"("gradient_clipping": 1.0,)", true},
      {"bf16 (its overflow check on by default)", R"("bf16": {"enabled": true},)", true},
      {"bf16 without the overflow check",
       R"("bf16": {"enabled": true, "check_grad_overflow": false},)", false},
  };
  for (const Variant& v : variants) {
    INFO(v.what);
    EngineParts parts(speculating(3, v.extra, "AdamW"));
    const bool has_copy =
        std::any_of(parts.plan.blocks.begin(), parts.plan.blocks.end(),
                    [](const PlannedBlock& b) { return b.role == BlockRole::speculation_state; });
    CHECK(has_copy == v.second_copy);
    CHECK(parts.layout.modes.speculation_rollback == v.second_copy);

    // Armed: a new learning rate is refused where nothing could redo the steps taken with the
    // old one, taken where a rollback can; the same one is always taken.
    ArithmeticValues values;
    parts.state->assign(values);
    parts.stepper->arm_speculation();
    set_speculation_grads(parts);
    parts.stepper->set_learning_rate(0.5);  // the config's
    if (v.second_copy) {
      parts.stepper->set_learning_rate(0.25);
    } else {
      try {
        parts.stepper->set_learning_rate(0.25);
        FAIL("a new learning rate was taken while steps without a second copy were armed");
      } catch (const Error& error) {
        CHECK(error.category() == ErrorCategory::usage);
        CHECK_THAT(error.what(), Catch::Contains("before the boundary micro-batch's backward"));
      }
    }
    for (std::size_t b = 0; b < parts.layout.buckets.size(); ++b) parts.stepper->bucket_added(b);
    const StepStats stats = parts.stepper->step();
    CHECK(stats.lr == (v.second_copy ? 0.25 : 0.5));
    // After the step it is taken, for the next.
    parts.stepper->set_learning_rate(0.25);
  }
}

}  // namespace zero::engine
