// Tests of optim/schedule.h: each DeepSpeed learning-rate schedule against values worked out by
// hand (the arithmetic is in the comments), including t = -1, the iteration a fresh run's first
// optimizer step uses.
#include <catch2/catch.hpp>

#include "optim/schedule.h"

namespace {

using zero::optim::schedule_at;
using zero::optim::schedule_iteration;
using zero::optim::schedule_type_name;
using zero::optim::ScheduleSpec;
using zero::optim::ScheduleType;
using zero::optim::WarmupType;

// Tight relative tolerance; an expected 0 must come out exactly 0.
Approx near(double expected) {
  return Approx(expected).epsilon(1e-12);
}

double lr_at(const ScheduleSpec& spec, std::int64_t t, double base_lr = 0.5) {
  return schedule_at(spec, t, base_lr).lr;
}

ScheduleSpec warmup_spec(ScheduleType type, WarmupType warmup) {
  ScheduleSpec s;
  s.type = type;
  s.warmup_min_lr = 0.01;
  s.warmup_max_lr = 0.11;  // max - min = 0.1
  s.warmup_num_steps = 10;
  s.warmup_type = warmup;
  return s;
}

ScheduleSpec cosine_spec(WarmupType warmup) {
  ScheduleSpec s;
  s.type = ScheduleType::warmup_cosine_lr;
  s.warmup_num_steps = 10;
  s.total_num_steps = 22;  // T - W = 12
  s.warmup_min_ratio = 0.2;
  s.cos_min_ratio = 0.1;
  s.warmup_type = warmup;
  return s;
}

// S1 = 4, S2 = 6: N = 10, rho = 0.4. lr in [0.1, 1.1], momentum in [0.8, 0.9].
ScheduleSpec one_cycle_spec() {
  ScheduleSpec s;
  s.type = ScheduleType::one_cycle;
  s.cycle_first_step_size = 4;
  s.cycle_second_step_size = 6;
  s.cycle_min_lr = 0.1;
  s.cycle_max_lr = 1.1;
  s.cycle_min_mom = 0.8;
  s.cycle_max_mom = 0.9;
  return s;
}

ScheduleSpec range_test_spec(bool staircase) {
  ScheduleSpec s;
  s.type = ScheduleType::lr_range_test;
  s.lr_range_test_min_lr = 0.01;
  s.lr_range_test_step_size = 4;
  s.lr_range_test_step_rate = 0.5;
  s.lr_range_test_staircase = staircase;
  return s;
}

}  // namespace

TEST_CASE("schedule_type_name gives DeepSpeed's scheduler names", "[optim]") {
  CHECK(schedule_type_name(ScheduleType::none) == "none");
  CHECK(schedule_type_name(ScheduleType::warmup_lr) == "WarmupLR");
  CHECK(schedule_type_name(ScheduleType::warmup_decay_lr) == "WarmupDecayLR");
  CHECK(schedule_type_name(ScheduleType::warmup_cosine_lr) == "WarmupCosineLR");
  CHECK(schedule_type_name(ScheduleType::one_cycle) == "OneCycle");
  CHECK(schedule_type_name(ScheduleType::lr_range_test) == "LRRangeTest");
}

TEST_CASE("no schedule keeps the optimizer's lr and sets no betas", "[optim]") {
  ScheduleSpec s;  // type none
  for (std::int64_t t : {-1, 0, 7, 100000}) {
    const auto v = schedule_at(s, t, 0.3);
    CHECK(v.lr == 0.3);
    CHECK_FALSE(v.beta1.has_value());
    CHECK_FALSE(v.beta2.has_value());
  }
}

TEST_CASE("schedule_iteration maps the k-th optimizer step to last_batch_iteration + k - 1",
          "[optim]") {
  ScheduleSpec fresh;                         // last_batch_iteration = -1
  CHECK(schedule_iteration(fresh, 1) == -1);  // first step: before any scheduler step
  CHECK(schedule_iteration(fresh, 2) == 0);
  CHECK(schedule_iteration(fresh, 11) == 9);
  ScheduleSpec resumed;
  resumed.last_batch_iteration = 99;  // 100 scheduler steps done
  CHECK(schedule_iteration(resumed, 1) == 99);
  CHECK(schedule_iteration(resumed, 5) == 103);
}

TEST_CASE("WarmupLR log warmup", "[optim]") {
  const auto s = warmup_spec(ScheduleType::warmup_lr, WarmupType::log);
  CHECK(lr_at(s, -1) == near(0.01));  // construction writes warmup_min_lr
  CHECK(lr_at(s, 0) == near(0.01));   // t=0: ln(1)/ln(10) = 0 -> min
  // t=4: ln(5)/ln(10) = log10(5) = 0.698970004336018805 -> 0.01 + 0.1 * 0.698970004336...
  CHECK(lr_at(s, 4) == near(0.0798970004336018805));
  CHECK(lr_at(s, 9) == near(0.11));     // t=9: ln(10)/ln(10) = 1 -> max
  CHECK(lr_at(s, 10) == near(0.11));    // t=W: warmup over -> max
  CHECK(lr_at(s, 5000) == near(0.11));  // stays at max
}

TEST_CASE("WarmupLR linear warmup", "[optim]") {
  const auto s = warmup_spec(ScheduleType::warmup_lr, WarmupType::linear);
  CHECK(lr_at(s, -1) == near(0.01));
  CHECK(lr_at(s, 0) == near(0.01));   // 0/10
  CHECK(lr_at(s, 4) == near(0.05));   // 4/10 -> 0.01 + 0.04
  CHECK(lr_at(s, 9) == near(0.10));   // 9/10 -> 0.01 + 0.09
  CHECK(lr_at(s, 10) == near(0.11));  // t=W -> max
}

TEST_CASE("WarmupLR ignores base_lr", "[optim]") {
  const auto s = warmup_spec(ScheduleType::warmup_lr, WarmupType::linear);
  CHECK(lr_at(s, 4, 123.0) == near(0.05));  // 4/10 -> 0.01 + 0.04
  CHECK(lr_at(s, -1, 123.0) == near(0.01));
  CHECK_FALSE(schedule_at(s, 4, 123.0).beta1.has_value());
}

TEST_CASE("WarmupLR uses at least 2 warmup steps", "[optim]") {
  auto s = warmup_spec(ScheduleType::warmup_lr, WarmupType::log);
  s.warmup_num_steps = 1;            // W = max(2, 1) = 2
  CHECK(lr_at(s, 0) == near(0.01));  // ln(1)/ln(2) = 0
  CHECK(lr_at(s, 1) == near(0.11));  // ln(2)/ln(2) = 1
  s.warmup_type = WarmupType::linear;
  CHECK(lr_at(s, 1) == near(0.06));  // 1/2 -> 0.01 + 0.05
  CHECK(lr_at(s, 2) == near(0.11));  // t=W -> max
}

TEST_CASE("WarmupDecayLR warms up then decays linearly to min", "[optim]") {
  auto s = warmup_spec(ScheduleType::warmup_decay_lr, WarmupType::linear);
  s.total_num_steps = 30;              // T - W = 20
  CHECK(lr_at(s, -1) == near(0.01));   // construction writes warmup_min_lr
  CHECK(lr_at(s, 0) == near(0.01));    // 0/10
  CHECK(lr_at(s, 5) == near(0.06));    // 5/10 -> 0.01 + 0.05
  CHECK(lr_at(s, 9) == near(0.10));    // 9/10 -> 0.01 + 0.09
  CHECK(lr_at(s, 10) == near(0.11));   // (30-10)/20 = 1
  CHECK(lr_at(s, 20) == near(0.06));   // (30-20)/20 = 0.5
  CHECK(lr_at(s, 29) == near(0.015));  // (30-29)/20 = 0.05 -> 0.01 + 0.005
  CHECK(lr_at(s, 30) == near(0.01));   // 0/20
  CHECK(lr_at(s, 45) == near(0.01));   // max(0, -15/20) = 0
}

TEST_CASE("WarmupDecayLR log warmup", "[optim]") {
  auto s = warmup_spec(ScheduleType::warmup_decay_lr, WarmupType::log);
  s.total_num_steps = 30;
  CHECK(lr_at(s, 0) == near(0.01));                   // ln(1) = 0
  CHECK(lr_at(s, 4) == near(0.0798970004336018805));  // 0.01 + 0.1 * log10(5)
  CHECK(lr_at(s, 9) == near(0.11));                   // ln(10)/ln(10) = 1
}

TEST_CASE("WarmupDecayLR with total_num_steps not past warmup stays at min after warmup",
          "[optim]") {
  auto s = warmup_spec(ScheduleType::warmup_decay_lr, WarmupType::linear);
  s.total_num_steps = 5;              // T < W: gamma = max(0, (5 - t)/max(1, -5))
  CHECK(lr_at(s, 9) == near(0.10));   // still warming up: 9/10
  CHECK(lr_at(s, 10) == near(0.01));  // (5-10)/1 < 0 -> 0
  s.total_num_steps = 10;             // T = W: (10-10)/max(1, 0) = 0
  CHECK(lr_at(s, 10) == near(0.01));
}

TEST_CASE("WarmupCosineLR is lr 0 before the first step", "[optim]") {
  const auto s = cosine_spec(WarmupType::linear);
  CHECK(lr_at(s, -1, 2.0) == 0.0);  // construction writes 0 into the optimizer
}

TEST_CASE("WarmupCosineLR linear warmup scales base_lr", "[optim]") {
  const auto s = cosine_spec(WarmupType::linear);
  // ratio = 0.2 + 0.8 * t/10, lr = 2 * ratio
  CHECK(lr_at(s, 0, 2.0) == near(0.4));   // 0.2
  CHECK(lr_at(s, 5, 2.0) == near(1.2));   // 0.2 + 0.8*0.5 = 0.6
  CHECK(lr_at(s, 9, 2.0) == near(1.84));  // 0.2 + 0.8*0.9 = 0.92
  CHECK(lr_at(s, 5, 1.0) == near(0.6));   // same ratio, other base_lr
}

TEST_CASE("WarmupCosineLR log warmup", "[optim]") {
  const auto s = cosine_spec(WarmupType::log);
  CHECK(lr_at(s, 0, 2.0) == near(0.4));  // ln(1) = 0 -> ratio 0.2
  // t=3: ln(4)/ln(10) = log10(4) = 0.602059991327962390
  //      ratio = 0.2 + 0.8 * 0.60205999132796239 = 0.681647993062369912 -> lr * 2
  CHECK(lr_at(s, 3, 2.0) == near(1.363295986124739824));
  CHECK(lr_at(s, 9, 2.0) == near(2.0));  // ln(10)/ln(10) = 1 -> ratio 1
}

TEST_CASE("WarmupCosineLR cosine decay", "[optim]") {
  const auto s = cosine_spec(WarmupType::linear);
  // p = (t - 10 + 1) / 12, ratio = 0.1 + 0.9 * (1 + cos(pi p)) / 2, lr = 2 * ratio
  // t=10: p = 1/12, cos(15 deg) = (sqrt(6) + sqrt(2))/4 = 0.965925826289068287
  //       (1 + 0.965925826289068287)/2 = 0.982962913144534143 -> ratio 0.984666621830080729
  CHECK(lr_at(s, 10, 2.0) == near(1.969333243660161458));
  CHECK(lr_at(s, 13, 2.0) == near(1.55));  // p = 4/12, cos 60 = 0.5: 0.1 + 0.9*0.75 = 0.775
  CHECK(lr_at(s, 15, 2.0) == near(1.1));   // p = 6/12, cos 90 = 0: 0.1 + 0.9*0.5 = 0.55
  CHECK(lr_at(s, 17, 2.0) == near(0.65));  // p = 8/12, cos 120 = -0.5: 0.1 + 0.9*0.25 = 0.325
  CHECK(lr_at(s, 21, 2.0) == near(0.2));   // p = 12/12, cos 180 = -1: ratio = 0.1
}

TEST_CASE("WarmupCosineLR stays at cos_min_ratio past total_num_steps", "[optim]") {
  const auto s = cosine_spec(WarmupType::linear);
  CHECK(lr_at(s, 22, 2.0) == near(0.2));  // p = 13/12 clamped to 1 -> ratio 0.1
  CHECK(lr_at(s, 40, 2.0) == near(0.2));  // p = 31/12 -> 1 (unclamped would rise again)
  CHECK(lr_at(s, 10000, 2.0) == near(0.2));
}

TEST_CASE("WarmupCosineLR clamps a negative ratio to 0", "[optim]") {
  auto s = cosine_spec(WarmupType::linear);
  s.cos_min_ratio = -0.5;
  CHECK(lr_at(s, 21, 2.0) == 0.0);        // p = 1: -0.5 + 1.5 * 0 < 0 -> 0
  CHECK(lr_at(s, 15, 2.0) == near(0.5));  // p = 0.5: -0.5 + 1.5 * 0.5 = 0.25 -> lr 0.5
}

TEST_CASE("WarmupCosineLR uses at least 2 warmup steps", "[optim]") {
  auto s = cosine_spec(WarmupType::linear);
  s.warmup_num_steps = 1;                // W = 2, T - W = 20
  CHECK(lr_at(s, 1, 2.0) == near(1.2));  // 1/2: 0.2 + 0.8*0.5 = 0.6
  // t=11: p = (11 - 2 + 1)/20 = 0.5 -> ratio 0.1 + 0.9*0.5 = 0.55
  CHECK(lr_at(s, 11, 2.0) == near(1.1));
}

TEST_CASE("OneCycle first step uses cycle_min_lr and betas cycle_min_mom 0.99", "[optim]") {
  const auto v = schedule_at(one_cycle_spec(), -1, 0.5);
  CHECK(v.lr == near(0.1));
  // Construction writes (cycle_min_mom, 0.99), though the cycle's value at t=-1 is max_mom.
  REQUIRE(v.beta1.has_value());
  REQUIRE(v.beta2.has_value());
  CHECK(*v.beta1 == near(0.8));
  CHECK(*v.beta2 == 0.99);
}

TEST_CASE("OneCycle first half of the cycle", "[optim]") {
  const auto s = one_cycle_spec();
  // f = x / 0.4 with x = (t+1)/10; lr = 0.1 + 1.0 f; beta1 = 0.9 - 0.1 f
  auto v = schedule_at(s, 0, 0.5);  // x = 0.1, f = 0.25
  CHECK(v.lr == near(0.35));
  CHECK(*v.beta1 == near(0.875));
  CHECK(*v.beta2 == 0.99);
  v = schedule_at(s, 1, 0.5);  // x = 0.2, f = 0.5
  CHECK(v.lr == near(0.6));
  CHECK(*v.beta1 == near(0.85));
  v = schedule_at(s, 3, 0.5);  // x = 0.4 = rho, f = 1: the peak
  CHECK(v.lr == near(1.1));
  CHECK(*v.beta1 == near(0.8));
  CHECK(*v.beta2 == 0.99);
}

TEST_CASE("OneCycle second half of the cycle", "[optim]") {
  const auto s = one_cycle_spec();
  // f = (x - 1) / (0.4 - 1)
  auto v = schedule_at(s, 5, 0.5);  // x = 0.6, f = -0.4/-0.6 = 2/3
  CHECK(v.lr == near(0.1 + 2.0 / 3.0));
  CHECK(*v.beta1 == near(0.9 - 0.1 * 2.0 / 3.0));
  v = schedule_at(s, 8, 0.5);  // x = 0.9, f = -0.1/-0.6 = 1/6
  CHECK(v.lr == near(0.1 + 1.0 / 6.0));
  CHECK(*v.beta1 == near(0.9 - 0.1 / 6.0));
  v = schedule_at(s, 9, 0.5);  // (t+1)/N = 1: cycle 2, x = 0, f = 0
  CHECK(v.lr == near(0.1));
  CHECK(*v.beta1 == near(0.9));
  CHECK(*v.beta2 == 0.99);
}

TEST_CASE("OneCycle without decay holds min lr and max momentum after the cycle", "[optim]") {
  auto s = one_cycle_spec();  // decay_step_size 0
  s.decay_lr_rate = 0.5;      // ignored: decay_step_size is 0
  s.decay_mom_rate = 0.1;
  for (std::int64_t t : {10, 11, 500}) {
    const auto v = schedule_at(s, t, 0.5);
    CHECK(v.lr == near(0.1));
    CHECK(*v.beta1 == near(0.9));
    CHECK(*v.beta2 == 0.99);
  }
  s.decay_step_size = 2;  // rates 0: no decay either
  s.decay_lr_rate = 0.0;
  s.decay_mom_rate = 0.0;
  const auto v = schedule_at(s, 13, 0.5);
  CHECK(v.lr == near(0.1));
  CHECK(*v.beta1 == near(0.9));
}

TEST_CASE("OneCycle decays lr after the cycle", "[optim]") {
  auto s = one_cycle_spec();
  s.decay_step_size = 2;
  s.decay_lr_rate = 0.5;
  // d = t - 10 + 1, lr = 0.1 / (1 + 0.5 d/2); momentum not decayed: 0.9
  auto v = schedule_at(s, 10, 0.5);  // d = 1: 0.1 / 1.25
  CHECK(v.lr == near(0.08));
  CHECK(*v.beta1 == near(0.9));
  v = schedule_at(s, 13, 0.5);  // d = 4: 0.1 / 2
  CHECK(v.lr == near(0.05));
  CHECK(*v.beta1 == near(0.9));
  CHECK(*v.beta2 == 0.99);
}

TEST_CASE("OneCycle decays momentum after the cycle", "[optim]") {
  auto s = one_cycle_spec();
  s.decay_step_size = 2;
  s.decay_mom_rate = 0.1;
  // d = t - 10 + 1, beta1 = 0.9 (1 + 0.1 d/2); lr not decayed: 0.1
  auto v = schedule_at(s, 10, 0.5);  // d = 1: 0.9 * 1.05
  CHECK(v.lr == near(0.1));
  CHECK(*v.beta1 == near(0.945));
  v = schedule_at(s, 13, 0.5);  // d = 4: 0.9 * 1.2
  CHECK(*v.beta1 == near(1.08));
  CHECK(*v.beta2 == 0.99);
  s.decay_lr_rate = 0.5;  // both: d = 4 -> lr 0.1 / 2
  v = schedule_at(s, 13, 0.5);
  CHECK(v.lr == near(0.05));
  CHECK(*v.beta1 == near(1.08));
}

TEST_CASE("OneCycle without cycle_momentum sets no betas", "[optim]") {
  auto s = one_cycle_spec();
  s.cycle_momentum = false;
  for (std::int64_t t : {-1, 0, 5, 10, 50}) {
    const auto v = schedule_at(s, t, 0.5);
    CHECK_FALSE(v.beta1.has_value());
    CHECK_FALSE(v.beta2.has_value());
  }
  CHECK(lr_at(s, -1) == near(0.1));
  CHECK(lr_at(s, 1) == near(0.6));  // lr cycles as before: f = 0.5
}

TEST_CASE("OneCycle ignores base_lr", "[optim]") {
  CHECK(lr_at(one_cycle_spec(), 1, 42.0) == near(0.6));  // f = 0.5
}

TEST_CASE("LRRangeTest continuous", "[optim]") {
  const auto s = range_test_spec(false);
  // lr = 0.01 (1 + 0.5 (t+1)/4)
  CHECK(lr_at(s, -1) == near(0.01));    // interval 0: construction writes min_lr
  CHECK(lr_at(s, 0) == near(0.01125));  // 1/4 -> 1.125
  CHECK(lr_at(s, 2) == near(0.01375));  // 0.5 * 3/4 -> 1.375
  CHECK(lr_at(s, 5) == near(0.0175));   // 6/4 -> 1.75
  CHECK(lr_at(s, 7) == near(0.02));     // 8/4 -> 2
}

TEST_CASE("LRRangeTest staircase", "[optim]") {
  const auto s = range_test_spec(true);
  // lr = 0.01 (1 + 0.5 floor((t+1)/4))
  CHECK(lr_at(s, -1) == near(0.01));      // floor(0) = 0
  CHECK(lr_at(s, 0) == near(0.01));       // floor(0.25) = 0
  CHECK(lr_at(s, 2) == near(0.01));       // floor(0.75) = 0
  CHECK(lr_at(s, 3) == near(0.015));      // floor(1) = 1
  CHECK(lr_at(s, 5) == near(0.015));      // floor(1.5) = 1
  CHECK(lr_at(s, 7) == near(0.02));       // floor(2) = 2
  CHECK(lr_at(s, 7, 9.0) == near(0.02));  // base_lr ignored
}
