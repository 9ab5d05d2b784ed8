// PassTracker alone (engine/hooks/pass_tracker.h): the phases a micro-step goes through as its
// hooks are called, nested and repeated hooks (a module used twice, activation checkpointing's
// forward inside backward is the engine's concern, not the tracker's), and each refused order
// with the module's name and the advice.
#include <catch2/catch.hpp>

#include <string>

#include "base/error.h"
#include "engine/hooks/pass_tracker.h"
#include "engine/plan/registry.h"
#include "tests/scratch.h"

namespace zero::engine {
namespace {

using Phase = PassTracker::Phase;

struct TwoModules {
  TwoModules() : tracker(registry) {
    registry.add_module("embed");
    tracker.add_module();
    registry.add_module("block");
    tracker.add_module();
  }
  Registry registry;
  PassTracker tracker;
};

std::string usage_error_of(const std::function<void()>& call) {
  const Error error = zero::testing::error_of(call);
  CHECK(error.category() == ErrorCategory::usage);
  return error.what();
}

}  // namespace

TEST_CASE("pass tracker: a micro-step goes idle, forward, backward, idle", "[engine][hooks]") {
  TwoModules m;
  PassTracker& t = m.tracker;
  CHECK(t.phase() == Phase::idle);
  CHECK_FALSE(t.any_open());
  CHECK(t.enter_forward(0));        // starts the forward pass
  CHECK_FALSE(t.enter_forward(1));  // nested: the pass goes on
  CHECK(t.any_open());
  t.leave_forward(1);
  t.leave_forward(0);
  CHECK_FALSE(t.any_open());
  CHECK(t.enter_forward(1) == false);  // a module called again in the same pass
  t.leave_forward(1);
  CHECK(t.phase() == Phase::forward);
  Phase was = Phase::idle;
  CHECK(t.enter_backward(1, &was));  // starts backward
  CHECK(was == Phase::forward);
  t.leave_backward(1);
  CHECK_FALSE(t.enter_backward(0, &was));  // backward goes on
  CHECK(was == Phase::backward);
  t.leave_backward(0);
  CHECK(t.phase() == Phase::backward);
  t.end_micro_step();
  CHECK(t.phase() == Phase::idle);
  // A backward without a forward (the pass's recompute is the caller's) starts from idle.
  CHECK(t.enter_backward(0, &was));
  CHECK(was == Phase::idle);
  t.leave_backward(0);
}

TEST_CASE("pass tracker: each hook out of order is refused, naming the module", "[engine][hooks]") {
  SECTION("pre_forward in the middle of backward") {
    TwoModules m;
    Phase was;
    m.tracker.enter_backward(1, &was);
    const std::string what = usage_error_of([&] { m.tracker.enter_forward(0); });
    CHECK_THAT(what, Catch::Contains("pre_forward of module 'embed'") &&
                         Catch::Contains("in the middle of a backward pass"));
  }
  SECTION("post_forward without its pre_forward") {
    TwoModules m;
    m.tracker.enter_forward(0);
    const std::string what = usage_error_of([&] { m.tracker.leave_forward(1); });
    CHECK_THAT(what, Catch::Contains("post_forward of module 'block' without its pre_forward"));
    CHECK(m.tracker.any_open());  // nothing changed: embed is still open
  }
  SECTION("pre_backward while a forward hook is open") {
    TwoModules m;
    m.tracker.enter_forward(1);
    Phase was;
    const std::string what = usage_error_of([&] { m.tracker.enter_backward(0, &was); });
    CHECK_THAT(what, Catch::Contains("pre_backward of module 'embed' while a forward hook"));
    CHECK(m.tracker.phase() == Phase::forward);
  }
  SECTION("post_backward without its pre_backward") {
    TwoModules m;
    Phase was;
    m.tracker.enter_backward(0, &was);
    const std::string what = usage_error_of([&] { m.tracker.leave_backward(1); });
    CHECK_THAT(what, Catch::Contains("post_backward of module 'block' without its pre_backward"));
  }
  SECTION("a post hook once too often") {
    TwoModules m;
    m.tracker.enter_forward(0);
    m.tracker.leave_forward(0);
    CHECK_THAT(usage_error_of([&] { m.tracker.leave_forward(0); }),
               Catch::Contains("post_forward of module 'embed'"));
  }
}

TEST_CASE("pass tracker: calls that need no open hook, or no backward, say what to do",
          "[engine][hooks]") {
  TwoModules m;
  CHECK_NOTHROW(m.tracker.require_none_open("step", "call it after backward"));
  CHECK_NOTHROW(m.tracker.require_not_backward("read_param", ""));
  m.tracker.enter_forward(1);
  CHECK_THAT(usage_error_of([&] { m.tracker.require_none_open("step", "end the pass first"); }),
             Catch::Contains("step while module 'block' has a pre hook without its post hook: "
                             "end the pass first"));
  m.tracker.leave_forward(1);
  CHECK_NOTHROW(m.tracker.require_none_open("step", ""));
  Phase was;
  m.tracker.enter_backward(0, &was);
  m.tracker.leave_backward(0);
  CHECK_THAT(usage_error_of([&] { m.tracker.require_not_backward("save", ": step first"); }),
             Catch::Equals("save in the middle of a backward pass: step first"));
}

}  // namespace zero::engine
