// fp16 dynamic loss scaling through the whole engine, step by step against DeepSpeed's rule: a
// tiny model trains a scripted run of ~25 optimizer steps through the C API in which chosen
// steps overflow, and every boundary is compared with the transcription of DeepSpeed's
// DynamicLossScaler (tests/engine/deepspeed_loss_scaler.h) fed the same overflow flags.
//
// An overflow is one fp16 inf or NaN written into one element of one gradient buffer on one
// rank only (a different rank from one overflow to the next, and in one micro-step only when
// accumulating), so the engine has to agree across ranks that the step overflowed. Per boundary:
//   - stats.skipped is the scripted flag, on every rank;
//   - stats.loss_scale is the scale the window's gradients carried (zero.h: "the scale this
//     window's gradients carried"), i.e. DeepSpeed's cur_scale *before* update_scale, and
//     zero_loss_scale / zero_loss_factor afterwards give cur_scale *after* it;
//   - the fp32 masters (zero_read_param) and the compute copies (at stage 3 read in an
//     evaluation pass) keep every bit on a skipped step, and the masters change in every element
//     on a good one;
//   - stats.lr follows WarmupLR (linear) at the count of good steps only: the scheduler does not
//     step on a skipped step (which reports the lr the schedule holds); stats.grad_norm is that of
//     this window's gradients alone, so nothing of a skipped window leaks into the next one;
//     zero_learning_rate gives the next step's lr (DeepSpeed's get_lr() between steps);
//   - global_steps counts skipped steps too (zero.h), micro_steps every zero_step call.
// Then a static scale (loss_scale 128) that never changes while overflows are still skipped,
// and runs that overflow down to min_loss_scale and once more there: zero_step must fail with
// ZERO_ERROR_CONFIG naming fp16.min_loss_scale on every rank, as DeepSpeed's run stops there.
//
// The loss does not matter here: each backward writes small fixed gradients times
// zero_loss_factor into the buffers, as a real backward of a scaled loss would.
//
// Run it under mpirun (zero-run -n N); exits non-zero when a case fails, naming it.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <mpi.h>

#include "base/half.h"
#include "engine/deepspeed_loss_scaler.h"
#include "tests/multirank/c_api_check.h"
#include "zero/zero.h"

namespace {

using zero_test::DeepSpeedDynamicLossScaler;

int g_rank = 0;
int g_world = 1;
int g_failures = 0;

// ---- The model: three modules with one parameter each ----

struct Param {
  const char* name;
  std::vector<long long> shape;
  int module;
};
// 7 and 33 are not divisible by 2 ranks; 100 is larger than a 64-element bucket; 7 is below the
// stage-3 persistence threshold.
const std::vector<Param> kParams = {
    {"embed.weight", {7}, 0},
    {"block.weight", {3, 11}, 1},
    {"head.weight", {100}, 2},
};
constexpr int kModules = 3;

std::size_t numel(const Param& p) {
  std::size_t n = 1;
  for (long long d : p.shape) n *= static_cast<std::size_t>(d);
  return n;
}

void initializer(void*, int param, unsigned long long offset, unsigned long long count,
                 float* out) {
  for (unsigned long long k = 0; k < count; ++k) {
    out[k] = 0.5f * static_cast<float>(std::sin(0.3 * static_cast<double>(offset + k) + param));
  }
}

// The unscaled gradient a rank's backward produces for element i of a parameter. The sign
// depends on the element only, so the average over ranks and micro-steps never cancels: Adam
// moves every element on every good step. Magnitudes 0.01..0.07 stay finite in fp16 at any
// scale these scripts reach.
double gradient(int param, std::size_t i, int step, int micro, int rank) {
  const double sign = (i + param) % 2 == 0 ? 1.0 : -1.0;
  return sign * 0.01 * static_cast<double>(1 + (i + 3 * param + step + micro + rank) % 7);
}

// ---- Scripts and where their overflows go ----

struct Injection {
  int rank;
  int micro;
  int param;
  std::size_t element;
  std::uint16_t bits;
};

// The o-th overflow of a script (at step `step`): the ranks take turns, the micro-step moves
// once every rank has had one, and the value cycles through +inf, NaN and -inf.
Injection injection_for(int step, int o, int accumulation) {
  static const std::uint16_t kBits[3] = {0x7c00, 0x7e00, 0xfc00};  // +inf, NaN, -inf
  Injection in;
  in.rank = o % g_world;
  in.micro = (o / g_world) % accumulation;
  in.param = (o + step) % static_cast<int>(kParams.size());
  in.element = static_cast<std::size_t>(step) * 13 % numel(kParams[in.param]);
  in.bits = kBits[o % 3];
  return in;
}

constexpr bool O = true;   // an overflowing step
constexpr bool G = false;  // a good step

// With window 3 and power 5 (32) this doubles at steps 3, 11 and 14, spends hysteresis on the
// lone overflows, halves on the runs of them, and meets an overflow right after a good step (5,
// 18, 20: where consecutive_hysteresis matters). It never reaches min_loss_scale 1 for
// hysteresis 1-3.
const std::vector<bool> kScript = {G, G, G, G, O, G, O, O, G, G, G, G, G,
                                   G, G, O, O, O, G, O, G, G, G, G, O};

// ---- One run ----

struct Setting {
  int stage = 0;
  int accumulation = 1;
  double static_scale = 0.0;  // fp16.loss_scale: 0 dynamic
  int initial_scale_power = 5;
  int window = 3;
  int hysteresis = 2;
  bool consecutive = false;
  double min_scale = 1.0;
  bool super_offload = false;  // optimizer offload to the CPU, speculating (stages 1-3)
};

std::string describe(const Setting& s) {
  char text[200];
  if (s.static_scale > 0) {
    std::snprintf(text, sizeof text, "static scale %g, stage %d, accumulation %d, %d rank(s)",
                  s.static_scale, s.stage, s.accumulation, g_world);
  } else {
    std::snprintf(text, sizeof text,
                  "power %d, window %d, hysteresis %d, consecutive %d, min %g, stage %d, "
                  "accumulation %d%s, %d rank(s)",
                  s.initial_scale_power, s.window, s.hysteresis, s.consecutive ? 1 : 0, s.min_scale,
                  s.stage, s.accumulation, s.super_offload ? ", super_offload" : "", g_world);
  }
  return text;
}

// WarmupLR, linear, over 30 steps: longer than any script, so every good step has its own lr.
constexpr double kWarmupMin = 0.001;
constexpr double kWarmupMax = 0.01;
constexpr int kWarmupSteps = 30;

std::string config_for(const Setting& s) {
  char text[2048];
  std::snprintf(
      text, sizeof text, R"({
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": %d,
    "fp16": {"enabled": true, "loss_scale": %g, "initial_scale_power": %d,
             "loss_scale_window": %d, "hysteresis": %d, "consecutive_hysteresis": %s,
             "min_loss_scale": %g},
    "optimizer": {"type": "Adam", "params": {"lr": 0.5, "weight_decay": 0}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": %g, "warmup_max_lr": %g,
                  "warmup_num_steps": %d, "warmup_type": "linear"}},
    "zero_optimization": {
      "stage": %d,
      "reduce_bucket_size": 64,
      "allgather_bucket_size": 64,
      "overlap_comm": %s,
      %s
      "stage3_param_persistence_threshold": 10
    }
  })",
      s.accumulation, s.static_scale, s.initial_scale_power, s.window, s.hysteresis,
      s.consecutive ? "true" : "false", s.min_scale, kWarmupMin, kWarmupMax, kWarmupSteps, s.stage,
      s.accumulation > 1 ? "true" : "false",
      s.super_offload ? R"("offload_optimizer": {"device": "cpu", "super_offload": true},)" : "");
  return text;
}

zero_engine* build(const Setting& s) {
  const std::string config = config_for(s);
  MPI_Comm world = MPI_COMM_WORLD;
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.mpi_comm = &world;
  options.device = ZERO_DEVICE_CPU;
  zero_engine* engine = nullptr;
  CHECK_OK(zero_create(config.c_str(), &options, &engine));
  const char* names[kModules] = {"embed", "block", "head"};
  for (int m = 0; m < kModules; ++m) CHECK_OK(zero_add_module(engine, names[m], nullptr));
  for (const Param& p : kParams) {
    zero_param_desc desc{};
    desc.name = p.name;
    desc.shape = p.shape.data();
    desc.ndim = static_cast<int>(p.shape.size());
    desc.trainable = 1;
    desc.modules = &p.module;
    desc.module_count = 1;
    desc.initializer = &initializer;
    CHECK_OK(zero_add_param(engine, &desc, nullptr));
  }
  CHECK_OK(zero_init(engine));
  return engine;
}

// One micro-batch: the forward hooks, then each module's backward adding its gradients times
// the loss factor, and the injected non-finite value when this rank and micro-step have it.
void micro_batch(zero_engine* engine, int step, int micro, const std::optional<Injection>& bad) {
  for (int m = 0; m < kModules; ++m) {
    CHECK_OK(zero_pre_forward(engine, m, nullptr));
    CHECK_OK(zero_post_forward(engine, m, nullptr));
  }
  double factor = 0;
  CHECK_OK(zero_loss_factor(engine, &factor));
  for (int m = kModules - 1; m >= 0; --m) {
    CHECK_OK(zero_pre_backward(engine, m, nullptr));
    for (int k = 0; k < static_cast<int>(kParams.size()); ++k) {
      if (kParams[k].module != m) continue;
      void* buffer = nullptr;
      CHECK_OK(zero_grad_buffer(engine, k, &buffer));
      auto* grad = static_cast<std::uint16_t*>(buffer);
      for (std::size_t i = 0; i < numel(kParams[k]); ++i) {
        const double g = gradient(k, i, step, micro, g_rank) * factor;
        grad[i] = zero::float_to_fp16(zero::fp16_to_float(grad[i]) + static_cast<float>(g));
      }
      if (bad && bad->rank == g_rank && bad->micro == micro && bad->param == k) {
        grad[bad->element] = bad->bits;
      }
    }
    CHECK_OK(zero_post_backward(engine, m, nullptr));
  }
}

// The global norm of the step's unscaled gradients: each element averaged over the ranks and
// the micro-steps (the loss factor carries 1/accumulation).
double expected_norm(int step, int accumulation) {
  double sum = 0;
  for (int k = 0; k < static_cast<int>(kParams.size()); ++k) {
    for (std::size_t i = 0; i < numel(kParams[k]); ++i) {
      double mean = 0;
      for (int r = 0; r < g_world; ++r) {
        for (int s = 0; s < accumulation; ++s) mean += gradient(k, i, step, s, r);
      }
      mean /= g_world * accumulation;
      sum += mean * mean;
    }
  }
  return std::sqrt(sum);
}

// WarmupLR (linear) for the optimizer step after `good` good steps: DeepSpeed's scheduler has
// stepped `good` times, so last_batch_iteration t = good - 1 (-1 before its first step).
double expected_lr(int good) {
  const int t = good - 1;
  if (t < 0) return kWarmupMin;
  const double w = kWarmupSteps;
  const double fraction = t < kWarmupSteps ? t / w : 1.0;
  return kWarmupMin + (kWarmupMax - kWarmupMin) * fraction;
}

// Every parameter's state as it can be observed: the fp32 masters (collective) and the raw bits
// of the fp16 compute copies: replicated at stages 0-2; at stage 3 gathered in an evaluation
// pass (super_offload places speculated values in the compute shards during backward, so a
// skip must put them back); not at stage 3 without `evaluate` (an engine that failed runs no
// pass).
struct Snapshot {
  std::vector<std::vector<float>> master;
  std::vector<std::vector<std::uint16_t>> compute;
};

Snapshot snapshot(zero_engine* engine, int stage, bool evaluate = true) {
  Snapshot snap;
  for (int k = 0; k < static_cast<int>(kParams.size()); ++k) {
    const std::size_t n = numel(kParams[k]);
    snap.master.emplace_back(n);
    CHECK_OK(zero_read_param(engine, k, snap.master.back().data(), n));
    if (stage <= 2) {
      void* data = nullptr;
      CHECK_OK(zero_param_data(engine, k, &data));
      const auto* bits = static_cast<const std::uint16_t*>(data);
      snap.compute.emplace_back(bits, bits + n);
    }
  }
  if (stage == 3 && evaluate) {
    snap.compute.resize(kParams.size());
    CHECK_OK(zero_set_train(engine, 0));
    for (int m = 0; m < kModules; ++m) {
      CHECK_OK(zero_pre_forward(engine, m, nullptr));
      for (int k = 0; k < static_cast<int>(kParams.size()); ++k) {
        if (kParams[k].module != m) continue;
        void* data = nullptr;
        CHECK_OK(zero_param_data(engine, k, &data));
        const auto* bits = static_cast<const std::uint16_t*>(data);
        snap.compute[static_cast<std::size_t>(k)].assign(bits, bits + numel(kParams[k]));
      }
      CHECK_OK(zero_post_forward(engine, m, nullptr));
    }
    CHECK_OK(zero_set_train(engine, 1));
  }
  return snap;
}

bool same_bits(const Snapshot& a, const Snapshot& b) {
  for (std::size_t k = 0; k < a.master.size(); ++k) {
    if (std::memcmp(a.master[k].data(), b.master[k].data(), a.master[k].size() * 4) != 0) {
      return false;
    }
  }
  return a.compute == b.compute;
}

bool every_master_changed(const Snapshot& before, const Snapshot& after) {
  for (std::size_t k = 0; k < before.master.size(); ++k) {
    for (std::size_t i = 0; i < before.master[k].size(); ++i) {
      if (before.master[k][i] == after.master[k][i]) return false;
    }
  }
  return true;
}

// Failure reporting: each rank prints its first few failures of a case, so a rank that
// disagrees with the others names itself.
struct Checker {
  std::string name;
  bool ok = true;
  int printed = 0;

  void fail(int step, const std::string& what) {
    ok = false;
    if (printed++ < 6) {
      std::fprintf(stderr, "FAIL %s: rank %d, step %d: %s\n", name.c_str(), g_rank, step,
                   what.c_str());
    }
  }
  void expect_equal(int step, const char* what, double got, double want) {
    if (got != want) fail(step, fmt(what, got, want));
  }
  void expect_near(int step, const char* what, double got, double want, double rel) {
    if (!(std::fabs(got - want) <= rel * std::fabs(want))) fail(step, fmt(what, got, want));
  }
  static std::string fmt(const char* what, double got, double want) {
    char text[200];
    std::snprintf(text, sizeof text, "%s is %.17g, expected %.17g", what, got, want);
    return text;
  }

  // Every rank's verdict, printed once by rank 0; counts a failed case.
  void finish() {
    int all_ok = ok ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("%s %s\n", all_ok ? "ok  " : "FAIL", name.c_str());
    if (!all_ok) ++g_failures;
  }
};

// What DeepSpeed's scaler says: the transcription for a dynamic scale, a constant otherwise.
// (A plain member, not std::optional: GCC 12 then warns of uninitialised reads under -Werror.)
struct Oracle {
  bool is_static;
  DeepSpeedDynamicLossScaler dynamic;

  explicit Oracle(const Setting& s)
      : is_static(s.static_scale > 0),
        dynamic(is_static ? s.static_scale : std::ldexp(1.0, s.initial_scale_power), s.window,
                s.min_scale, s.hysteresis, s.consecutive) {}
  double scale() const { return dynamic.cur_scale; }
  // False when DeepSpeed would stop the run here (an overflow at the minimum scale).
  bool update(bool overflow) {
    if (is_static) return true;
    try {
      dynamic.update_scale(overflow);
    } catch (const DeepSpeedDynamicLossScaler::MinimumReached&) {
      return false;
    }
    return true;
  }
};

void check_scale_now(Checker& c, zero_engine* engine, int step, const Setting& s, double want) {
  double scale = 0, factor = 0;
  CHECK_OK(zero_loss_scale(engine, &scale));
  CHECK_OK(zero_loss_factor(engine, &factor));
  c.expect_equal(step, "zero_loss_scale", scale, want);
  c.expect_equal(step, "zero_loss_factor", factor, want / s.accumulation);
}

// Runs one window (the micro-steps of optimizer step `step`) and returns the boundary's stats;
// checks that the micro-steps before the boundary neither step nor skip.
zero_step_stats run_window(Checker& c, zero_engine* engine, const Setting& s, int step,
                           const std::optional<Injection>& bad) {
  zero_step_stats stats{};
  for (int micro = 0; micro < s.accumulation; ++micro) {
    int boundary = -1;
    CHECK_OK(zero_is_accumulation_boundary(engine, &boundary));
    c.expect_equal(step, "zero_is_accumulation_boundary", boundary,
                   micro == s.accumulation - 1 ? 1 : 0);
    micro_batch(engine, step, micro, bad);
    CHECK_OK(zero_step(engine, &stats));
    if (micro < s.accumulation - 1) {
      c.expect_equal(step, "stats.stepped inside the window", stats.stepped, 0);
      c.expect_equal(step, "stats.skipped inside the window", stats.skipped, 0);
    }
    c.expect_equal(step, "stats.micro_steps", static_cast<double>(stats.micro_steps),
                   static_cast<double>(step * s.accumulation + micro + 1));
  }
  return stats;
}

// The scripted run: every boundary against the oracle, as the header comment lists.
void run_script(const Setting& s, const std::vector<bool>& script) {
  Checker c{describe(s)};
  zero_engine* engine = build(s);
  Oracle oracle(s);
  int good = 0;
  int overflows = 0;
  double first = 0;
  CHECK_OK(zero_learning_rate(engine, &first));
  c.expect_near(-1, "zero_learning_rate before the first step", first, expected_lr(0), 1e-12);
  for (int step = 0; step < static_cast<int>(script.size()); ++step) {
    const bool overflow = script[step];
    check_scale_now(c, engine, step, s, oracle.scale());
    std::optional<Injection> bad;
    if (overflow) bad = injection_for(step, overflows++, s.accumulation);
    const Snapshot before = snapshot(engine, s.stage);
    const zero_step_stats stats = run_window(c, engine, s, step, bad);

    const double carried = oracle.scale();
    if (!oracle.update(overflow)) {
      c.fail(step, "the script reaches DeepSpeed's minimum-scale error; fix the script");
      break;
    }
    c.expect_equal(step, "stats.stepped", stats.stepped, 1);
    c.expect_equal(step, "stats.skipped", stats.skipped, overflow ? 1 : 0);
    c.expect_equal(step, "stats.loss_scale (the scale the gradients carried)", stats.loss_scale,
                   carried);
    c.expect_equal(step, "stats.global_steps", static_cast<double>(stats.global_steps), step + 1);
    check_scale_now(c, engine, step, s, oracle.scale());

    const Snapshot after = snapshot(engine, s.stage);
    if (overflow) {
      // zero.h: a skipped step reports the lr the schedule still holds, and no norm.
      if (!same_bits(before, after)) c.fail(step, "a skipped step changed the parameters");
      c.expect_near(step, "stats.lr of a skipped step", stats.lr, expected_lr(good), 1e-12);
      c.expect_equal(step, "stats.grad_norm of a skipped step", stats.grad_norm, 0.0);
    } else {
      if (!every_master_changed(before, after)) {
        c.fail(step, "a good step left some parameter element unchanged");
      }
      c.expect_near(step, "stats.lr", stats.lr, expected_lr(good), 1e-12);
      c.expect_near(step, "stats.grad_norm", stats.grad_norm, expected_norm(step, s.accumulation),
                    1e-2);
      ++good;
    }
    double next = 0;
    CHECK_OK(zero_learning_rate(engine, &next));
    c.expect_near(step, "zero_learning_rate (the next step's)", next, expected_lr(good), 1e-12);
  }
  c.finish();
  CHECK_OK(zero_destroy(engine));
}

// Every step overflows: the scale falls (clamped to min_loss_scale, 3 here, which is not a
// power of two) until an overflow at the minimum, where DeepSpeed raises and zero_step must
// fail on every rank with a config error naming the key. Parameters never change.
void run_to_minimum(const Setting& s) {
  Checker c{"overflow at min_loss_scale fails, " + describe(s)};
  zero_engine* engine = build(s);
  Oracle oracle(s);
  const Snapshot first = snapshot(engine, s.stage, /*evaluate=*/false);
  bool failed = false;
  for (int step = 0; step < 20 && !failed; ++step) {
    check_scale_now(c, engine, step, s, oracle.scale());
    const Injection bad = injection_for(step, step, s.accumulation);
    zero_step_stats stats{};
    zero_status status = ZERO_OK;
    for (int micro = 0; micro < s.accumulation; ++micro) {
      micro_batch(engine, step, micro, bad);
      status = zero_step(engine, &stats);
      if (status != ZERO_OK) break;
    }
    const double carried = oracle.scale();
    failed = !oracle.update(true);
    if (failed) {
      c.expect_equal(step, "zero_step's status at the minimum scale", status, ZERO_ERROR_CONFIG);
      const std::string message = zero_last_error();
      if (message.find("fp16.min_loss_scale") == std::string::npos) {
        c.fail(step, "the error does not name fp16.min_loss_scale: " + message);
      }
      // DeepSpeed's scaler raises before changing anything; so does the engine's.
      check_scale_now(c, engine, step, s, carried);
      break;
    }
    if (status != ZERO_OK) {
      c.fail(step, std::string("zero_step failed before the minimum: ") + zero_last_error());
      break;
    }
    c.expect_equal(step, "stats.skipped", stats.skipped, 1);
    c.expect_equal(step, "stats.loss_scale", stats.loss_scale, carried);
    check_scale_now(c, engine, step, s, oracle.scale());
  }
  if (!failed) c.fail(-1, "the run never reached the minimum-scale error");
  // All ranks failed in the same zero_step, so they can still make the same collective calls.
  if (!same_bits(first, snapshot(engine, s.stage, /*evaluate=*/false))) {
    c.fail(-1, "the parameters changed");
  }
  c.finish();
  CHECK_OK(zero_destroy(engine));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world);
  const auto start = std::chrono::steady_clock::now();

  struct Rule {
    int hysteresis;
    bool consecutive;
  };
  const Rule rules[] = {{2, false}, {2, true}, {1, false}, {3, false}, {3, true}};
  for (int stage = 0; stage <= 3; ++stage) {
    for (int accumulation : {1, 2}) {
      for (const Rule& rule : rules) {
        Setting s;
        s.stage = stage;
        s.accumulation = accumulation;
        s.hysteresis = rule.hysteresis;
        s.consecutive = rule.consecutive;
        run_script(s, kScript);
      }
      // SuperOffload: each skipped step's speculated update rolled back; after 3 rollbacks in 8
      // steps speculation stops until a step goes through, then resumes.
      if (stage >= 1) {
        Setting speculating;
        speculating.stage = stage;
        speculating.accumulation = accumulation;
        speculating.super_offload = true;
        run_script(speculating, kScript);
      }
      Setting fixed;
      fixed.stage = stage;
      fixed.accumulation = accumulation;
      fixed.static_scale = 128;
      run_script(fixed, kScript);
      for (int hysteresis : {1, 2}) {
        Setting low;
        low.stage = stage;
        low.accumulation = accumulation;
        low.initial_scale_power = 4;
        low.hysteresis = hysteresis;
        low.min_scale = 3;
        run_to_minimum(low);
      }
    }
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (g_rank == 0) std::printf("%d case(s) failed (%.1f s)\n", g_failures, seconds);
  MPI_Finalize();
  return g_failures == 0 ? 0 : 1;
}
