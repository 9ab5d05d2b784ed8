// Tests of engine/fetching/fetch_plan.h: next uses, reuse distances and the prefetch walk on small
// traces worked out by hand, and the next-use table against a brute-force search on random traces.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "base/error.h"
#include "engine/fetching/fetch_plan.h"

namespace {

using zero::engine::FetchPlan;
using zero::engine::TraceEvent;

// Three modules: m0 uses p0 (10) and p3 (1, persistent, tied with m2); m1 uses p1 (100);
// m2 uses p2 (1000) and p3. Forward m0 m1 m2, backward m2 m1 m0.
struct Small {
  std::vector<std::vector<std::size_t>> modules{{0, 3}, {1}, {2, 3}};
  std::vector<std::size_t> elements{10, 100, 1000, 1};
  std::vector<bool> persistent{false, false, false, true};
  std::vector<TraceEvent> events{{0, false}, {1, false}, {2, false},
                                 {2, true},  {1, true},  {0, true}};
  FetchPlan plan{events, modules, elements, persistent};
};

}  // namespace

TEST_CASE("fetch plan: next uses and reuse distances on a forward and backward", "[fetch_plan]") {
  Small s;
  REQUIRE(s.plan.size() == 6);
  // p0 at event 0 is next used at event 5 (backward of m0).
  CHECK(s.plan.next_use(0, 0) == 5);
  // p3 at event 0 is next used by m2 at event 2, then at 3, then by m0 at 5.
  CHECK(s.plan.next_use(0, 1) == 2);
  CHECK(s.plan.next_use(2, 1) == 3);
  CHECK(s.plan.next_use(3, 1) == 5);
  CHECK(s.plan.next_use(5, 0) == FetchPlan::kNever);
  CHECK(s.plan.next_use(5, 1) == FetchPlan::kNever);
  // Between event 2 (forward m2) and event 3 (backward m2) nothing is gathered.
  CHECK(s.plan.distance(2, 3) == 0);
  // Between event 0 and 5: m1 (100) + m2 (1001) + m2 (1001) + m1 (100).
  CHECK(s.plan.distance(0, 5) == 2202);
  CHECK(s.plan.reused_within(0, 0, 2202));
  CHECK_FALSE(s.plan.reused_within(0, 0, 2201));
  CHECK(s.plan.reused_within(2, 0, 0));  // p2 kept from forward into backward at any distance
  CHECK_FALSE(s.plan.reused_within(5, 0, 1'000'000));  // no later use in the pass
  CHECK_THROWS_AS(s.plan.distance(3, 3), zero::Error);
}

TEST_CASE("fetch plan: the prefetch walk honours the window, the live limit and what is there",
          "[fetch_plan]") {
  Small s;
  auto none = [](std::size_t) { return false; };
  // A window of 0 turns prefetching off.
  CHECK(s.plan.prefetch(0, 0, 1'000'000, 0, none).empty());
  // From event 0: next is m1 (p1, 100), then m2 (p2 1000, p3 1). A window of 1 takes p1 only
  // (it is walked while fewer than 1 element has been).
  CHECK(s.plan.prefetch(0, 1, 1'000'000, 0, none) == std::vector<std::size_t>{1});
  // A window of 101 reaches m2's first parameter too.
  CHECK(s.plan.prefetch(0, 101, 1'000'000, 0, none) == std::vector<std::size_t>{1, 2});
  CHECK(s.plan.prefetch(0, 1101, 1'000'000, 0, none) == std::vector<std::size_t>{1, 2, 3});
  // The live limit stops the walk at the first that does not fit; persistent ones cost nothing.
  CHECK(s.plan.prefetch(0, 1'000'000, 1099, 0, none) == std::vector<std::size_t>{1});
  CHECK(s.plan.prefetch(0, 1'000'000, 1100, 0, none) == std::vector<std::size_t>{1, 2, 3});
  CHECK(s.plan.prefetch(0, 1'000'000, 1100, 1, none) == std::vector<std::size_t>{1});
  // Gathered parameters are skipped but their elements still fill the window.
  auto p1_there = [](std::size_t p) { return p == 1; };
  CHECK(s.plan.prefetch(0, 100, 1'000'000, 0, p1_there).empty());
  CHECK(s.plan.prefetch(0, 101, 1'000'000, 0, p1_there) == std::vector<std::size_t>{2});
  // Each parameter once: from event 2 the walk sees m2 (backward), m1, m0; p3 is not repeated.
  CHECK(s.plan.prefetch(2, 1'000'000, 1'000'000, 0, none) == std::vector<std::size_t>{2, 3, 1, 0});
  CHECK(s.plan.prefetch(5, 1'000'000, 1'000'000, 0, none).empty());
}

TEST_CASE("fetch plan: the hash follows the events and the phase", "[fetch_plan]") {
  Small s;
  auto events = s.events;
  FetchPlan same(events, s.modules, s.elements, s.persistent);
  CHECK(same.hash() == s.plan.hash());
  events[4].backward = false;
  FetchPlan phase(events, s.modules, s.elements, s.persistent);
  CHECK(phase.hash() != s.plan.hash());
  events = s.events;
  std::swap(events[0], events[1]);
  FetchPlan order(events, s.modules, s.elements, s.persistent);
  CHECK(order.hash() != s.plan.hash());
}

TEST_CASE("fetch plan: bad events and parameters are usage errors", "[fetch_plan]") {
  Small s;
  CHECK_THROWS_AS(FetchPlan({{7, false}}, s.modules, s.elements, s.persistent), zero::Error);
  CHECK_THROWS_AS(FetchPlan({}, {{9}}, s.elements, s.persistent), zero::Error);
  CHECK_THROWS_AS(FetchPlan({}, s.modules, s.elements, {true}), zero::Error);
}

TEST_CASE("fetch plan: next uses and distances match a brute-force search on random traces",
          "[fetch_plan]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    const std::size_t param_count = 1 + rng() % 9;
    const std::size_t module_count = 1 + rng() % 6;
    std::vector<std::vector<std::size_t>> modules(module_count);
    for (auto& m : modules) {
      for (std::size_t p = 0; p < param_count; ++p) {
        if (rng() % 3 == 0) m.push_back(p);
      }
    }
    std::vector<std::size_t> elements(param_count);
    for (auto& e : elements) e = rng() % 50;
    std::vector<TraceEvent> events(rng() % 20);
    for (auto& e : events) e = {rng() % module_count, rng() % 2 == 0};
    FetchPlan plan(events, modules, elements, std::vector<bool>(param_count, false));
    for (std::size_t i = 0; i < events.size(); ++i) {
      const auto& params = modules[events[i].module];
      for (std::size_t k = 0; k < params.size(); ++k) {
        std::size_t want = FetchPlan::kNever;
        std::size_t between = 0;
        for (std::size_t j = i + 1; j < events.size() && want == FetchPlan::kNever; ++j) {
          const auto& later = modules[events[j].module];
          if (std::find(later.begin(), later.end(), params[k]) != later.end()) {
            want = j;
          } else {
            for (std::size_t p : later) between += elements[p];
          }
        }
        REQUIRE(plan.next_use(i, k) == want);
        if (want != FetchPlan::kNever) REQUIRE(plan.distance(i, want) == between);
      }
    }
  }
}
