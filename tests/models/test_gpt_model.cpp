// The reference GPT through the engine (C API, stage 0, one rank, fp32) against finite
// differences of a forward composed here in double from the same layers: the loss agrees, and
// the gradients the engine applied (read back through SGD with lr 1: before - after) agree
// with the numerical ones for sampled elements of every parameter, tied embedding included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "models/gpt/kernels.h"
#include "models/gpt/model.h"
#include "zero/zero.h"

namespace zero::gpt {
namespace {

using Vec = std::vector<double>;

const GptConfig kSmall{2, 2, 16, 8, 11};  // layers, heads, channels, positions, vocabulary
constexpr int kB = 2, kT = 5;

// The model's mean loss in double, parameters in registration order (wte, wpe, 12 per block,
// ln_f weight and bias).
double reference_loss(const std::vector<Vec>& p, const std::vector<std::int32_t>& tokens,
                      const std::vector<std::int32_t>& targets) {
  const int B = kB, T = kT, C = kSmall.channels, NH = kSmall.heads, V = kSmall.vocab, N = B * T;
  Vec x(static_cast<std::size_t>(N) * C);
  encoder_forward(x.data(), tokens.data(), p[0].data(), p[1].data(), B, T, C);
  Vec ln(x.size()), mean(N), rstd(N), qkv(3 * x.size()), att(static_cast<std::size_t>(B) * NH * T * T),
      y(x.size()), h(4 * x.size()), g(4 * x.size()), branch(x.size());
  for (int l = 0; l < kSmall.layers; ++l) {
    const Vec* w = &p[2 + 12 * static_cast<std::size_t>(l)];
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w[0].data(), w[1].data(), N, C);
    matmul_forward(qkv.data(), ln.data(), w[2].data(), w[3].data(), N, C, 3 * C);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH);
    matmul_forward(branch.data(), y.data(), w[4].data(), w[5].data(), N, C, C);
    residual_forward(x.data(), x.data(), branch.data(), x.size());
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w[6].data(), w[7].data(), N, C);
    matmul_forward(h.data(), ln.data(), w[8].data(), w[9].data(), N, C, 4 * C);
    gelu_forward(g.data(), h.data(), g.size());
    matmul_forward(branch.data(), g.data(), w[10].data(), w[11].data(), N, 4 * C, C);
    residual_forward(x.data(), x.data(), branch.data(), x.size());
  }
  const std::size_t last = p.size() - 2;
  layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), p[last].data(),
                    p[last + 1].data(), N, C);
  Vec logits(static_cast<std::size_t>(N) * V), probs(logits.size()), losses(N);
  matmul_forward(logits.data(), ln.data(), p[0].data(), static_cast<const double*>(nullptr), N, C, V);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  double sum = 0;
  int counted = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[static_cast<std::size_t>(i)] < 0) continue;
    sum += losses[static_cast<std::size_t>(i)];
    ++counted;
  }
  return sum / counted;
}

#define REQUIRE_OK(call) REQUIRE((call) == ZERO_OK)

}  // namespace

TEST_CASE("gpt model: the engine's loss and gradients match finite differences of the model",
          "[gpt]") {
  const char* config = R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "SGD", "params": {"lr": 1.0, "momentum": 0.0, "weight_decay": 0.0}},
      "zero_optimization": {"stage": 0}})";
  zero_create_options options{};
  options.device = 1;
  zero_engine* engine = nullptr;
  REQUIRE_OK(zero_create(config, &options, &engine));
  Gpt model(engine, kSmall, kB, kT, 7);
  REQUIRE_OK(zero_init(engine));

  // The parameters' sizes, in registration order.
  const long long C = kSmall.channels;
  std::vector<std::size_t> sizes{static_cast<std::size_t>(kSmall.vocab * C),
                                 static_cast<std::size_t>(kSmall.max_seq * C)};
  for (int l = 0; l < kSmall.layers; ++l) {
    for (long long n : {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}) {
      sizes.push_back(static_cast<std::size_t>(n));
    }
  }
  sizes.push_back(static_cast<std::size_t>(C));
  sizes.push_back(static_cast<std::size_t>(C));
  auto read = [&] {
    std::vector<Vec> p;
    for (std::size_t id = 0; id < sizes.size(); ++id) {
      std::vector<float> v(sizes[id]);
      REQUIRE(zero_read_param(engine, static_cast<int>(id), v.data(), v.size()) == ZERO_OK);
      p.emplace_back(v.begin(), v.end());
    }
    return p;
  };
  std::vector<Vec> before = read();
  CHECK(before[2 * 1 + 0][0] == 1.0);  // h.0.ln_1.weight starts at 1

  std::mt19937 rng(3);
  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
  targets[3] = -1;  // a position without a loss

  const float loss = model.forward(tokens.data(), targets.data());
  CHECK(loss == Approx(reference_loss(before, tokens, targets)).epsilon(1e-5));
  CHECK(loss == Approx(std::log(static_cast<double>(kSmall.vocab))).epsilon(0.05));  // near uniform
  model.backward();
  zero_step_stats stats{};
  REQUIRE_OK(zero_step(engine, &stats));
  REQUIRE(stats.stepped == 1);
  const std::vector<Vec> after = read();

  // SGD with lr 1: the gradient is before - after. Check sampled elements of every parameter.
  double worst = 0;
  for (std::size_t id = 0; id < sizes.size(); ++id) {
    for (int k = 0; k < 4; ++k) {
      const std::size_t i = rng() % sizes[id];
      const double applied = before[id][i] - after[id][i];
      std::vector<Vec> p = before;
      const double h = 1e-5;
      p[id][i] = before[id][i] + h;
      const double up = reference_loss(p, tokens, targets);
      p[id][i] = before[id][i] - h;
      const double down = reference_loss(p, tokens, targets);
      const double numeric = (up - down) / (2 * h);
      const double error = std::fabs(applied - numeric) / (std::fabs(numeric) + 1e-4);
      worst = std::max(worst, error);
      if (error > 2e-2) {
        FAIL_CHECK("parameter " << id << "[" << i << "]: engine gradient " << applied
                                << ", finite differences " << numeric);
      }
    }
  }
  INFO("largest relative error " << worst);
  CHECK(worst < 2e-2);
  // Evaluation (forward hooks only) computes the loss of the updated parameters.
  CHECK(model.evaluate(tokens.data(), targets.data()) ==
        Approx(reference_loss(after, tokens, targets)).epsilon(1e-5));
  REQUIRE_OK(zero_destroy(engine));
}

}  // namespace zero::gpt
