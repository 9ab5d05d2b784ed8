// The wait that ends when it should (base/timer.h).
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "base/timer.h"

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// A clock that moves on 1 us at each read, and a sleep that moves it to the time asked.
struct FakeClock {
  steady_clock::time_point time{};
  std::vector<steady_clock::time_point> slept;

  auto now() {
    return [this] {
      const steady_clock::time_point t = time;
      time += microseconds(1);
      return t;
    };
  }
  auto sleep_until() {
    return [this](steady_clock::time_point t) {
      slept.push_back(t);
      time = t;
    };
  }
};

}  // namespace

TEST_CASE("wait_until spins a wait shorter than kLongestSpin", "[base]") {
  // A sleep ends when the kernel wakes the thread, 25-35 us late on a virtual machine: each of
  // the timed device's 10 us kernels would end late by three times its length.
  FakeClock clock;
  const steady_clock::time_point start = clock.time;
  zero::wait_until(start + microseconds(10), clock.now(), clock.sleep_until());
  CHECK(clock.slept.empty());
  // Back at the first read at or past the end: not before it, and not a wake-up after it.
  CHECK(clock.time == start + microseconds(11));
}

TEST_CASE("wait_until returns at once from a time already past", "[base]") {
  FakeClock clock;
  clock.time += milliseconds(1);
  const steady_clock::time_point past = clock.time - microseconds(5);
  const steady_clock::time_point before = clock.time;
  zero::wait_until(past, clock.now(), clock.sleep_until());
  CHECK(clock.slept.empty());
  CHECK(clock.time - before <= microseconds(2));  // two reads: the threshold's and the loop's
}

TEST_CASE("wait_until sleeps a wait longer than kLongestSpin to its end", "[base]") {
  // Spinning the end of a long wait takes a core from the host's work beside it.
  FakeClock clock;
  const steady_clock::time_point end = clock.time + zero::kLongestSpin + microseconds(1);
  zero::wait_until(end, clock.now(), clock.sleep_until());
  REQUIRE(clock.slept.size() == 1);
  CHECK(clock.slept[0] == end);
  CHECK(clock.time == end);  // no read after the sleep
}
