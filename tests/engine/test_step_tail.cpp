// super_offload's tail (docs/offload.md, "The step's tail"): at stage 3 beside a GPU, step()
// returns with the groups the worker has not stepped yet, and the next forward's gather of
// each shard waits for its group's update; where a verdict can undo the speculated steps
// (clipping here) the worker steps them into the state's second copy, which a verdict that
// keeps them makes current under the tail, and one that drops them waits for the tail first. Here
// the worker is held (FaultHooks::speculated_step) until step() returns and slowed after, so that
// step() leaves every group to it, and a step() that waited for them times the hook out; on the
// guarded CPU device (a GPU's streams and events, device memory the engine may not touch from the
// host) a model whose gradients are a function of the weights its forward read must then train with
// exactly the bits of the same model without offload: a forward that read a shard before its update
// landed would change every step after it.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/backends.h"
#include "config/config.h"
#include "device/device.h"
#include "engine/engine.h"
#include "engine/fault_hooks.h"

namespace zero::engine {
namespace {

constexpr int kModules = 5;
// Per module a weight (the last module's twice as long) and a bias kept gathered between
// passes (persistent); step groups of kElements, so most parameters lie in two of them.
constexpr std::int64_t kElements = 999;
constexpr std::int64_t kBias = 7;
constexpr int kSteps = 4;

// `extra`: more top-level keys, each followed by a comma.
std::string tail_config(bool offload, int accumulation, const std::string& extra = "") {
  return fmt::format(
      R"({{ {4}
    "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": {2},
    "optimizer": {{"type": "AdamW", "params": {{"lr": 1e-2, "weight_decay": 0.01}}}},
    "zero_optimization": {{"stage": 3, "sub_group_size": {0}, "reduce_bucket_size": {0},
      "stage3_param_persistence_threshold": {3}{1}}}}})",
      kElements,
      offload ? R"(, "offload_optimizer": {"device": "cpu", "super_offload": true})" : "",
      accumulation, kBias, extra);
}

// Module m's parameters' sizes.
std::vector<std::int64_t> sizes_of(int m) {
  return {m == kModules - 1 ? 2 * kElements : kElements, kBias};
}

struct TailRun {
  std::vector<std::vector<float>> forward_reads;  // per micro-step and parameter: forward's reads
  std::vector<std::vector<float>> finals;         // per parameter: read_param after the last step
  std::vector<double> norms;  // per optimizer step: the gradient norm it reported
  int held = 0;               // speculated groups held until their step() returned
  std::size_t groups = 0;     // step groups (the highest the hook saw, plus one)
  bool timed_out = false;     // a step() waited for its groups (the hook gave up)
};

// kSteps optimizer steps of `accumulation` micro-steps each; the worker held up to `hold_ms`.
// `first_held`: the first boundary's step() waits until the worker holds a group (under load
// it may not have begun one when backward returns, and a step() that drops the speculated
// steps then finds no group running). `early`: the first `early` groups the worker takes in
// each boundary are not held, and each boundary's step() waits until it holds the next one:
// those groups are stepped before the verdict, the ones after it once it is given.
TailRun run(bool offload, int accumulation, const std::string& extra = "", int hold_ms = 2000,
            bool first_held = false, int early = 0) {
  auto made = create_cpu_device(offload ? CpuDeviceMode::guarded : CpuDeviceMode::sync);
  Device& device = *made;
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(tail_config(offload, accumulation, extra), {}),
                std::move(made), comm::make_local_communicator(comm_options), options);
  std::atomic<bool> returned{false};  // the boundary's step() returned
  std::atomic<int> held{0};
  std::atomic<std::size_t> groups{0};
  std::atomic<bool> timed_out{false};
  std::atomic<int> taken{0};  // this boundary's groups the worker has taken
  if (offload) {
    FaultHooks hooks;
    hooks.speculated_step = [&](std::size_t group) {
      for (std::size_t seen = groups.load(); seen < group + 1;) {
        groups.compare_exchange_weak(seen, group + 1);
      }
      if (taken.fetch_add(1) < early) return;
      held.fetch_add(1);
      // Once one hold timed out (a step() that waits for its groups) the rest are not held.
      for (int ms = 0; ms < hold_ms && !returned.load() && !timed_out.load(); ++ms) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (!returned.load()) timed_out = true;
      // The update lands well after the next forward has started.
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    };
    set_fault_hooks(engine, std::move(hooks));
  }
  std::vector<std::vector<std::size_t>> params(kModules);  // per module
  for (int m = 0; m < kModules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    const std::vector<std::int64_t> sizes = sizes_of(m);
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      params[m].push_back(engine.add_param(fmt::format("block{}.{}", m, k == 0 ? "weight" : "bias"),
                                           {sizes[k]}, true, 0, {module}));
    }
  }
  engine.init();
  auto stream = device.create_stream();
  TailRun out;
  for (int micro = 0; micro < kSteps * accumulation; ++micro) {
    std::vector<std::vector<std::vector<float>>> read(kModules);
    for (int m = 0; m < kModules; ++m) {
      engine.pre_forward(m, stream.get());
      stream->synchronize();
      for (std::size_t k = 0; k < params[m].size(); ++k) {
        std::vector<float> values(static_cast<std::size_t>(sizes_of(m)[k]));
        device.copy(values.data(), engine.param_data(params[m][k]), values.size() * sizeof(float));
        out.forward_reads.push_back(values);
        read[m].push_back(std::move(values));
      }
      engine.post_forward(m, stream.get());
    }
    returned = false;  // a boundary's groups are held from its first backward hook
    const bool boundary = (micro + 1) % accumulation == 0;
    if (boundary) taken = 0;
    const int held_before = held.load();
    for (int m = kModules - 1; m >= 0; --m) {
      engine.pre_backward(m, stream.get());
      stream->synchronize();
      for (std::size_t k = 0; k < params[m].size(); ++k) {
        // A gradient of what forward read: a stale read changes it.
        std::vector<float> grad(read[m][k].size());
        for (std::size_t i = 0; i < grad.size(); ++i) {
          grad[i] = 0.5f * read[m][k][i] +
                    0.01f * static_cast<float>((i + static_cast<std::size_t>(m + micro)) % 7) -
                    0.03f;
        }
        device.copy(engine.grad_buffer(params[m][k]), grad.data(), grad.size() * sizeof(float));
      }
      engine.post_backward(m, stream.get());
    }
    if ((first_held && micro == accumulation - 1) || (early > 0 && boundary)) {
      for (int ms = 0; ms < 10000 && held.load() == held_before; ++ms) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      REQUIRE(held.load() > held_before);
    }
    const StepStats stats = engine.step();
    returned = true;
    if (stats.stepped) out.norms.push_back(stats.grad_norm);
  }
  // The last step's groups too: read_param waits for them.
  for (const auto& module : params) {
    for (std::size_t p : module) out.finals.push_back(engine.read_param(p));
  }
  out.held = held.load();
  out.groups = groups.load();
  out.timed_out = timed_out.load();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A run with offload against the run without: the bits of every forward read and of the weights
// after the last step, and each step's norm (the same sums, perhaps in another order).
void check_same_run(const TailRun& plain, const TailRun& other) {
  REQUIRE(plain.forward_reads.size() == other.forward_reads.size());
  const std::size_t per_pass = 2 * kModules;  // a weight and a bias each
  for (std::size_t k = 0; k < plain.forward_reads.size(); ++k) {
    INFO("micro-step " << k / per_pass << ", module " << k % per_pass / 2 << "'s "
                       << (k % 2 == 0 ? "weight" : "bias (persistent)") << " in forward");
    CHECK(same_bits(plain.forward_reads[k], other.forward_reads[k]));
  }
  REQUIRE(other.norms.size() == kSteps);
  for (int k = 0; k < kSteps; ++k) {
    INFO("optimizer step " << k);
    CHECK(other.norms[k] == Approx(plain.norms[k]).epsilon(1e-6));
  }
  REQUIRE(plain.finals.size() == other.finals.size());
  for (std::size_t k = 0; k < plain.finals.size(); ++k) {
    INFO("parameter " << k << " after the last step");
    CHECK(same_bits(plain.finals[k], other.finals[k]));
  }
}

}  // namespace

TEST_CASE(
    "super_offload leaves a step's last groups to its worker, and the next forward reads each "
    "shard after its update: the bits of the run without offload",
    "[engine][offload]") {
  // At accumulation 1 the device takes the norm's sums as the blocks come down; at 2 the host
  // adds the second micro-step's, and the boundary takes the sums the worker has not. Without
  // clipping nothing can undo the steps and they write the state in place; with clipping that
  // never triggers the groups the worker takes before the verdict write its second copy, which
  // becomes theirs, and those it takes after step in place: with `early` 3 of them before it
  // each boundary, so that over the steps the groups' current values lie in both copies, each
  // step reads each group's own, and read_param gathers them.
  const int accumulation = GENERATE(1, 2);
  const bool clipping = GENERATE(false, true);
  const int early = GENERATE(0, 3);
  const std::string extra = clipping ? R"("gradient_clipping": 1000.0,)" : "";
  INFO("gradient accumulation " << accumulation << (clipping ? ", clipping" : "") << ", " << early
                                << " groups taken before the verdict unheld");
  const TailRun plain = run(/*offload=*/false, accumulation, extra);
  const TailRun tail = run(/*offload=*/true, accumulation, extra, 2000, false, early);
  // Every group of every step not taken early was held until its step() returned, and no
  // step() waited.
  CHECK(tail.groups > static_cast<std::size_t>(kModules));  // parameters across groups
  CHECK(tail.held == kSteps * (static_cast<int>(tail.groups) - early));
  CHECK_FALSE(tail.timed_out);
  // The norm the step reports, its sums taken by the device, the worker and the boundary (at
  // accumulation 2, those the worker had not taken when step() returned): the same sum in
  // another order than the run without offload's.
  check_same_run(plain, tail);
}

TEST_CASE(
    "a verdict that drops a step whose last groups the worker still has drops those not taken, "
    "waits for the one it runs, and the step taken again after has the bits of the run without "
    "offload",
    "[engine][offload]") {
  // Clipping that always triggers: each speculated step is dropped (until the speculation
  // stops itself after three rollbacks) while its groups are held, so the first verdict waits
  // for the running group's hold to give up (200 ms), the groups queued behind it are not
  // stepped, and the rest are not held.
  const std::string extra = R"("gradient_clipping": 0.01,)";
  const TailRun plain = run(/*offload=*/false, 1, extra);
  const TailRun dropped = run(/*offload=*/true, 1, extra, /*hold_ms=*/200, /*first_held=*/true);
  CHECK(dropped.timed_out);  // a step() waited for its running group: the verdict's
  // The first dropped step ran its one held group only: fewer groups ran than the three
  // speculated steps hold.
  CHECK(dropped.held < 3 * static_cast<int>(dropped.groups));
  check_same_run(plain, dropped);
}

TEST_CASE(
    "a verdict that drops a step after kept ones steps every group from the copy its values are "
    "in, masters and moments: the bits of the run without offload",
    "[engine][offload]") {
  // The norms of this run's four steps are about 1.55, 1.45, 1.66 and 2.02: clipping at 1.6
  // keeps the first two speculated steps, whose groups taken before the verdict (three unheld,
  // and the held one) were stepped into the other copy and those after in place, and drops the
  // last two, which step every group again after gathering the copies. A group whose masters or
  // moments were read from the wrong copy would change every step after.
  const std::string extra = R"("gradient_clipping": 1.6,)";
  const TailRun plain = run(/*offload=*/false, 1, extra);
  REQUIRE(plain.norms.size() == kSteps);
  REQUIRE(plain.norms[1] < 1.6);
  REQUIRE(plain.norms[2] > 1.6);
  const TailRun mixed = run(/*offload=*/true, 1, extra, /*hold_ms=*/200, false, /*early=*/3);
  CHECK(mixed.timed_out);  // the dropped steps' verdicts waited for their running groups
  check_same_run(plain, mixed);
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "a group of a step's tail that fails fails the next forward's hook, naming its parameter, "
    "and the engine",
    "[engine][offload]") {
  auto made = create_cpu_device(CpuDeviceMode::guarded);
  Device& device = *made;
  comm::CommOptions comm_options;
  comm_options.device = made.get();
  EngineOptions options;
  options.optimizer_threads = 1;
  Engine engine(config::read_config_text(tail_config(/*offload=*/true, 1), {}), std::move(made),
                comm::make_local_communicator(comm_options), options);
  std::atomic<bool> returned{false};
  std::atomic<bool> fail{false};
  FaultHooks hooks;
  hooks.speculated_step = [&](std::size_t) {
    for (int ms = 0; ms < 2000 && !returned.load(); ++ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (fail.load()) throw std::runtime_error("disk on fire");
  };
  set_fault_hooks(engine, std::move(hooks));
  for (int m = 0; m < kModules; ++m) {
    const std::size_t module = engine.add_module(fmt::format("block{}", m));
    engine.add_param(fmt::format("block{}.weight", m), {kElements}, true, 0, {module});
  }
  engine.init();
  auto stream = device.create_stream();
  // `failing`: this step's groups fail once it has returned (the forward before it waited for
  // the last step's).
  const auto micro_step = [&](bool failing) {
    for (int m = 0; m < kModules; ++m) {
      engine.pre_forward(m, stream.get());
      engine.post_forward(m, stream.get());
    }
    returned = false;
    fail = failing;
    for (int m = kModules - 1; m >= 0; --m) {
      engine.pre_backward(m, stream.get());
      engine.post_backward(m, stream.get());
    }
    engine.step();
    returned = true;
  };
  micro_step(false);
  micro_step(true);
  CHECK_THROWS_WITH(engine.pre_forward(0, stream.get()), Catch::Contains("disk on fire"));
  // Failed: the hooks and the step refuse, naming the first failure's parameter.
  CHECK_THROWS_WITH(engine.pre_forward(0, stream.get()),
                    Catch::Contains("after a failure") && Catch::Contains("block0.weight"));
}

}  // namespace zero::engine
