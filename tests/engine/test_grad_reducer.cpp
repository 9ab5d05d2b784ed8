// The GradReducer alone (engine/gradients/grad_reducer.h), at stage 2 on one rank of the local
// communicator and the asynchronous CPU device: a gradient exists from its module's
// pre_backward until its bucket is issued, a parameter used by two modules is reduced after its
// last use only (both uses added), a module whose backward did not run is reduced as zeros, and
// the owned shard sums the micro-steps of a window, and after zero_owned (a step) the next
// reduction writes the shard onto zeros instead of adding.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/engine/engine_parts.h"

namespace zero::engine {
namespace {

using testing::EngineParts;

const char* kConfig = R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
    "optimizer": {"type": "AdamW"},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 64, "overlap_comm": true}})";

// Adds `value` to every element of the parameter's gradient (host-addressable on the async
// device, once the device's queued zeroing has run).
void add(EngineParts& parts, std::size_t p, float value) {
  parts.device->default_stream().synchronize();
  auto* grad = static_cast<float*>(parts.reducer->grad(p));
  REQUIRE(grad != nullptr);
  for (std::size_t i = 0; i < parts.registry.param(p).numel; ++i) grad[i] += value;
}

// The owned gradient shard's elements of parameter p.
std::vector<float> owned(EngineParts& parts, std::size_t p) {
  parts.device->synchronize();
  const auto* flat = static_cast<const float*>(parts.state->grad_flat());
  const std::size_t at = parts.layout.params[p].flat;
  return {flat + at, flat + at + parts.registry.param(p).numel};
}

// Module b's backward (it runs first), then a's unless `skip_a`: b adds 1 to p1 and 10 to p2,
// a adds 2 to p0 and 20 to p2.
void backward(EngineParts& parts, std::int64_t micro, bool skip_a) {
  GradReducer& r = *parts.reducer;
  r.begin_backward(micro);
  r.hand_out(1);
  r.hand_out(2);
  add(parts, 1, 1.0f);
  add(parts, 2, 10.0f);
  r.backward_done(1, "b");
  r.backward_done(2, "b");
  r.issue_ready();
  // p2's last use (module a) has not come: it is not reduced, and keeps b's part.
  CHECK(r.grad(2) != nullptr);
  if (!skip_a) {
    r.hand_out(0);
    r.hand_out(2);
    add(parts, 0, 2.0f);
    add(parts, 2, 20.0f);
    r.backward_done(0, "a");
    r.backward_done(2, "a");
    r.issue_ready();
  }
  r.flush();
}

}  // namespace

TEST_CASE("grad reducer: gradients live until reduced, each use added, the window summed",
          "[engine]") {
  EngineParts parts(kConfig);
  REQUIRE(parts.layout.buckets.size() > 1);  // reduce_bucket_size 64 splits the 153 elements
  backward(parts, 0, /*skip_a=*/false);
  // Reduced and released: no gradient buffer outlives its bucket at stage 2.
  for (std::size_t p : {0, 1, 2}) CHECK(parts.reducer->grad(p) == nullptr);
  CHECK(owned(parts, 0) == std::vector<float>(37, 2.0f));
  CHECK(owned(parts, 1) == std::vector<float>(101, 1.0f));
  CHECK(owned(parts, 2) == std::vector<float>(15, 30.0f));
  // The second micro-step of the window adds into the owned shard; module a does not run, so
  // p0 is reduced as zeros and p2 holds b's part alone.
  backward(parts, 1, /*skip_a=*/true);
  CHECK(owned(parts, 0) == std::vector<float>(37, 2.0f));
  CHECK(owned(parts, 1) == std::vector<float>(101, 2.0f));
  CHECK(owned(parts, 2) == std::vector<float>(15, 40.0f));
}

TEST_CASE("grad reducer: after zero_owned the next reduction writes the shard, the one after adds",
          "[engine]") {
  EngineParts parts(kConfig);
  backward(parts, 0, /*skip_a=*/false);
  backward(parts, 1, /*skip_a=*/false);
  CHECK(owned(parts, 1) == std::vector<float>(101, 2.0f));
  // A step's zeroing writes nothing now: the old sums stay until the next reduction.
  parts.reducer->zero_owned();
  CHECK(owned(parts, 1) == std::vector<float>(101, 2.0f));
  backward(parts, 2, /*skip_a=*/true);  // written onto zeros, not added to the 2s
  CHECK(owned(parts, 0) == std::vector<float>(37, 0.0f));
  CHECK(owned(parts, 1) == std::vector<float>(101, 1.0f));
  CHECK(owned(parts, 2) == std::vector<float>(15, 10.0f));
  backward(parts, 3, /*skip_a=*/false);  // the window's second micro-step adds again
  CHECK(owned(parts, 0) == std::vector<float>(37, 2.0f));
  CHECK(owned(parts, 1) == std::vector<float>(101, 2.0f));
  CHECK(owned(parts, 2) == std::vector<float>(15, 40.0f));
  // Settling is a no-op after a reduction, and writes the zeros when none came.
  const std::size_t total = parts.layout.owned.total;
  parts.reducer->settle_owned(total, parts.device->default_stream());
  CHECK(owned(parts, 1) == std::vector<float>(101, 2.0f));
  parts.reducer->zero_owned();
  parts.reducer->settle_owned(total, parts.device->default_stream());
  for (std::size_t p : {0, 1, 2}) {
    CHECK(owned(parts, p) == std::vector<float>(parts.registry.param(p).numel, 0.0f));
  }
}

TEST_CASE("grad reducer: a frozen parameter has no gradient, a handed-out one starts at zero",
          "[engine]") {
  EngineParts parts(kConfig);
  parts.reducer->begin_backward(0);
  CHECK(parts.reducer->grad(3) == nullptr);   // frozen
  CHECK_FALSE(parts.reducer->handed_out(0));  // before its module's pre_backward
  parts.reducer->hand_out(0);
  CHECK(parts.reducer->handed_out(0));
  // Zeroed when handed out, on the device's stream.
  parts.device->default_stream().synchronize();
  const auto* grad = static_cast<const float*>(parts.reducer->grad(0));
  REQUIRE(grad != nullptr);
  CHECK(std::vector<float>(grad, grad + 37) == std::vector<float>(37, 0.0f));
  parts.reducer->flush();
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "grad reducer: at stage 0 on one rank nothing is reduced and no bucket is held, unless a "
    "factor or another wire dtype makes the reduction more than the identity",
    "[engine]") {
  struct Case {
    const char* what;
    const char* extra;
    bool identity;
  };
  const Case cases[] = {
      {"fp32", "", true},
      {"bf16", R"("bf16": {"enabled": true},)", true},
      {"gradient_predivide_factor 2", R"("gradient_predivide_factor": 2.0,)", false},
      {"prescale_gradients", R"("prescale_gradients": true,)", false},
      {"bf16 compute, fp32 wire",
       R"("bf16": {"enabled": true}, "communication_data_type": "fp32",)", false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string config = std::string(R"({"train_micro_batch_size_per_gpu": 1, )") + c.extra +
                               R"( "optimizer": {"type": "AdamW"},
        "zero_optimization": {"stage": 0, "reduce_bucket_size": 64}})";
    EngineParts parts(config);
    CHECK(identity_reduction(parts.config, parts.layout) == c.identity);
    CHECK((parts.plan.bucket_count == 0) == c.identity);
    if (!c.identity || c.extra[0] != '\0') continue;
    // fp32: backward's sums stay where they were written, p2 with both of its uses.
    GradReducer& r = *parts.reducer;
    backward(parts, 0, /*skip_a=*/false);  // accumulation 1: the boundary
    parts.device->synchronize();
    for (const auto& [p, want] : {std::pair<std::size_t, float>{0, 2.0f}, {1, 1.0f}, {2, 30.0f}}) {
      INFO("p" << p);
      const auto* grad = static_cast<const float*>(r.grad(p));
      REQUIRE(grad != nullptr);
      for (std::size_t i = 0; i < parts.registry.param(p).numel; ++i) REQUIRE(grad[i] == want);
    }
  }
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "grad reducer: at stages 0-1 the replicated gradients are one region, which one fill "
    "zeroes, gaps included",
    "[engine]") {
  for (int stage : {0, 1}) {
    INFO("stage " << stage);
    const std::string config = R"({"train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": )" +
                               std::to_string(stage) + R"(, "reduce_bucket_size": 64}})";
    EngineParts parts(config);
    GradReducer& r = *parts.reducer;
    const GradReducer::Region region = r.replicated_region();
    REQUIRE(region.data != nullptr);
    // From the first trainable gradient (p0) to the end of the last (p2), every one inside.
    const char* begin = static_cast<const char*>(region.data);
    const char* end = begin + region.count * sizeof(float);
    CHECK(region.data == r.grad(0));
    std::size_t inside = 0;
    for (std::size_t p : parts.layout.trainable) {
      const auto* g = static_cast<const char*>(r.grad(p));
      CHECK(g >= begin);
      CHECK(g + parts.registry.param(p).numel * sizeof(float) <= end);
      inside += parts.registry.param(p).numel;
    }
    CHECK(region.count >= inside);
    CHECK(region.count * sizeof(float) < inside * sizeof(float) + 3 * Arena::kDefaultAlignment);
    // Garbage over the whole region, then zero_full: all zeros.
    parts.device->synchronize();
    std::vector<float> junk(region.count, 7.0f);
    parts.device->copy(region.data, junk.data(), junk.size() * sizeof(float));
    r.zero_full(parts.device->default_stream());
    parts.device->synchronize();
    std::vector<float> back(region.count, 1.0f);
    parts.device->copy(back.data(), region.data, back.size() * sizeof(float));
    CHECK(std::all_of(back.begin(), back.end(), [](float v) { return v == 0.0f; }));
  }
}

}  // namespace zero::engine

namespace zero::engine {

TEST_CASE(
    "grad reducer: a gradient is zero until a module using it ends its backward, and again "
    "after the zeroing (each micro-step at stage 2, each window at stage 0)",
    "[engine]") {
  // Stage 2 (kConfig, accumulation 2): handed out zeroed in every micro-step.
  {
    EngineParts parts(kConfig);
    GradReducer& r = *parts.reducer;
    for (std::int64_t micro = 0; micro < 2; ++micro) {
      INFO("stage 2, micro-step " << micro);
      r.begin_backward(micro);
      r.hand_out(1);
      r.hand_out(2);
      CHECK(r.is_zero(1));
      CHECK(r.is_zero(2));
      r.backward_done(1, "b");
      r.backward_done(2, "b");
      CHECK_FALSE(r.is_zero(1));
      r.hand_out(2);  // module a's use of the tied p2 comes after b's: it must add
      CHECK_FALSE(r.is_zero(2));
      r.hand_out(0);
      CHECK(r.is_zero(0));
      r.backward_done(0, "a");
      r.backward_done(2, "a");
      r.issue_ready();
      r.flush();
    }
  }
  // Stage 0, accumulation 2: the window keeps the sum, so only its first micro-step's first
  // use sees zeros; zero_full (after a step) gives them back.
  EngineParts parts(R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2,
      "optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 0}})");
  GradReducer& r = *parts.reducer;
  for (std::int64_t micro = 0; micro < 2; ++micro) {
    INFO("stage 0, micro-step " << micro);
    r.begin_backward(micro);
    r.hand_out(1);
    CHECK(r.is_zero(1) == (micro == 0));
    r.backward_done(1, "b");
    r.backward_done(2, "b");
    r.backward_done(0, "a");
    r.backward_done(2, "a");
    r.issue_ready();
    r.flush();
  }
  r.zero_full(parts.device->default_stream());
  CHECK(r.is_zero(1));
}

}  // namespace zero::engine
