// The reference GPT through the engine (C API, stage 0, one rank, fp32) against finite
// differences of a forward composed here in double from the same layers: the loss agrees, and
// the gradients the engine applied (read back through SGD with lr 1: before - after) agree
// with the numerical ones for sampled elements of every parameter, tied embedding included.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "models/gpt/kernels.h"
#include "models/gpt/model.h"
#include "models/layers/layers.h"
#include "tests/scratch.h"
#include "zero/zero.h"

namespace zero::gpt {
namespace {

using layers::crossentropy_forward;
using layers::matmul_forward;
using layers::residual_forward;
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
  Vec ln(x.size()), mean(N), rstd(N), qkv(3 * x.size()),
      att(static_cast<std::size_t>(B) * NH * T * T), y(x.size()), h(4 * x.size()), g(4 * x.size()),
      branch(x.size());
  for (int l = 0; l < kSmall.layers; ++l) {
    const Vec* w = &p[2 + 12 * static_cast<std::size_t>(l)];
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w[0].data(), w[1].data(), N,
                      C);
    matmul_forward(qkv.data(), ln.data(), w[2].data(), w[3].data(), N, C, 3 * C);
    attention_forward(y.data(), att.data(), qkv.data(), B, T, C, NH);
    matmul_forward(branch.data(), y.data(), w[4].data(), w[5].data(), N, C, C);
    residual_forward(x.data(), x.data(), branch.data(), x.size());
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), w[6].data(), w[7].data(), N,
                      C);
    matmul_forward(h.data(), ln.data(), w[8].data(), w[9].data(), N, C, 4 * C);
    gelu_forward(g.data(), h.data(), g.size());
    matmul_forward(branch.data(), g.data(), w[10].data(), w[11].data(), N, 4 * C, C);
    residual_forward(x.data(), x.data(), branch.data(), x.size());
  }
  const std::size_t last = p.size() - 2;
  layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), p[last].data(),
                    p[last + 1].data(), N, C);
  Vec logits(static_cast<std::size_t>(N) * V), probs(logits.size()), losses(N);
  matmul_forward(logits.data(), ln.data(), p[0].data(), static_cast<const double*>(nullptr), N, C,
                 V);
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

// The parameters' sizes and shapes in registration order.
std::vector<std::vector<long long>> shapes(const GptConfig& g) {
  const long long C = g.channels;
  std::vector<std::vector<long long>> out{{g.vocab, C}, {g.max_seq, C}};
  for (int l = 0; l < g.layers; ++l) {
    for (std::vector<long long> shape : std::vector<std::vector<long long>>{{C},
                                                                            {C},
                                                                            {3 * C, C},
                                                                            {3 * C},
                                                                            {C, C},
                                                                            {C},
                                                                            {C},
                                                                            {C},
                                                                            {4 * C, C},
                                                                            {4 * C},
                                                                            {C, 4 * C},
                                                                            {C}}) {
      out.push_back(shape);
    }
  }
  out.push_back({C});
  out.push_back({C});
  return out;
}

std::size_t numel(const std::vector<long long>& shape) {
  std::size_t n = 1;
  for (long long d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::vector<std::vector<float>> read_all(zero_engine* engine, const GptConfig& g) {
  std::vector<std::vector<float>> out;
  for (const auto& shape : shapes(g)) {
    out.emplace_back(numel(shape));
    const int id = static_cast<int>(out.size() - 1);
    REQUIRE(zero_read_param(engine, id, out.back().data(), out.back().size()) == ZERO_OK);
  }
  return out;
}

// `steps` AdamW steps of the small model at `stage` with the options; the parameters after.
std::vector<std::vector<float>> train_steps(int stage, const models::ActivationOptions& gpt_options,
                                            int steps, models::ActivationCost* cost = nullptr) {
  const std::string config =
      R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
          "zero_optimization": {"stage": )" +
      std::to_string(stage) + "}}";
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.device = ZERO_DEVICE_CPU;
  zero_engine* engine = nullptr;
  REQUIRE_OK(zero_create(config.c_str(), &options, &engine));
  std::vector<std::vector<float>> out;
  {
    const auto model = make_gpt(engine, kSmall, kB, kT, 11, gpt_options);
    REQUIRE_OK(zero_init(engine));
    std::mt19937 rng(5);
    std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
    for (int step = 0; step < steps; ++step) {
      for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
      for (auto& t : targets) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
      model->forward(tokens.data(), targets.data());
      model->backward();
      REQUIRE_OK(zero_step(engine, nullptr));
    }
    out = read_all(engine, kSmall);
    if (cost != nullptr) *cost = model->activation_cost();
  }
  REQUIRE_OK(zero_destroy(engine));
  return out;
}

}  // namespace

TEST_CASE("gpt model: activation checkpointing recomputes the same gradients and keeps less",
          "[gpt]") {
  for (int stage : {0, 3}) {
    INFO("stage " << stage);
    models::ActivationCost none_cost, one_cost, all_cost;
    const auto none = train_steps(stage, {}, 3, &none_cost);
    const auto one = train_steps(stage, {1, false}, 3, &one_cost);
    const auto all = train_steps(stage, {kSmall.layers, true}, 3, &all_cost);
    // The recomputed forward is the same arithmetic, so the results are identical.
    CHECK(none != train_steps(stage, {}, 0));
    CHECK(one == none);
    CHECK(all == none);
    // A block's activations: ln1, qkv, attention output, res2, ln2 (1 + 3 + 1 + 1 + 1 NC), the
    // MLP's two 4 NC, the two LayerNorms' mean and rstd (4 N), and the B * heads * T * T scores.
    const std::uint64_t N = kB * kT, NC = N * kSmall.channels;
    const std::uint64_t block = 4 * (15 * NC + 4 * N + N * kSmall.heads * kT);
    CHECK(none_cost.kept_bytes == none_cost.uncheckpointed_bytes);
    CHECK(none_cost.recompute_flops == 0);
    // One checkpointed block saves nothing: the recomputation needs one block's room.
    CHECK(one_cost.kept_bytes == none_cost.kept_bytes);
    CHECK(none_cost.kept_bytes - all_cost.kept_bytes == (kSmall.layers - 1) * block);
    CHECK(all_cost.uncheckpointed_bytes == none_cost.uncheckpointed_bytes);
    CHECK(all_cost.recompute_flops == Approx(kSmall.layers * one_cost.recompute_flops));
    CHECK(all_cost.recompute_flops < all_cost.train_flops / 3);
    // The formula zero-mem plans with (models/gpt/config.h) is what the model keeps.
    const std::int64_t mlp = 4 * kSmall.channels;
    CHECK(zero::gpt::activation_bytes(kSmall, mlp, kB, kT, false, 4).kept == none_cost.kept_bytes);
    CHECK(zero::gpt::activation_bytes(kSmall, mlp, kB, kT, true, 4).kept == all_cost.kept_bytes);
    CHECK(zero::gpt::block_flops(kSmall, mlp, kB, kT) == Approx(one_cost.recompute_flops));
    CHECK(3 * zero::gpt::forward_flops(kSmall, mlp, kB, kT) == Approx(all_cost.train_flops));
  }
}

TEST_CASE("gpt model: the engine's loss and gradients match finite differences of the model",
          "[gpt]") {
  const char* config = R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "SGD", "params": {"lr": 1.0, "momentum": 0.0, "weight_decay": 0.0}},
      "zero_optimization": {"stage": 0}})";
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.device = ZERO_DEVICE_CPU;
  zero_engine* engine = nullptr;
  REQUIRE_OK(zero_create(config, &options, &engine));
  const auto model = make_gpt(engine, kSmall, kB, kT, 7);
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

  const float loss = model->forward(tokens.data(), targets.data());
  CHECK(loss == Approx(reference_loss(before, tokens, targets)).epsilon(1e-5));
  CHECK(loss == Approx(std::log(static_cast<double>(kSmall.vocab))).epsilon(0.05));  // near uniform
  model->backward();
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
  CHECK(model->evaluate(tokens.data(), targets.data()) ==
        Approx(reference_loss(after, tokens, targets)).epsilon(1e-5));
  REQUIRE_OK(zero_destroy(engine));
}

}  // namespace zero::gpt

namespace zero::gpt {
namespace {

// Writes the parameters `p` (our layout, registration order) as Hugging Face's GPT-2 stores
// them: Conv1D weights transposed to [in, out], `prefix` before every name, the attention-mask
// buffers and lm_head.weight (the tied embedding) besides; `drop` leaves one tensor out.
void write_hf(const std::string& path, const std::vector<std::vector<float>>& p,
              const std::vector<std::string>& names, const std::string& prefix,
              const std::string& drop = "") {
  const auto shape = shapes(kSmall);
  std::vector<checkpoint::TensorDecl> decls;
  std::vector<std::vector<float>> data;
  for (std::size_t id = 0; id < p.size(); ++id) {
    if (names[id] == drop) continue;
    const bool conv1d = shape[id].size() == 2 && names[id].rfind("h.", 0) == 0;
    std::vector<std::int64_t> dims(shape[id].begin(), shape[id].end());
    std::vector<float> values = p[id];
    if (conv1d) {
      const std::size_t rows = static_cast<std::size_t>(dims[0]),
                        cols = static_cast<std::size_t>(dims[1]);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t c = 0; c < cols; ++c) values[c * rows + r] = p[id][r * cols + c];
      }
      std::swap(dims[0], dims[1]);
    }
    decls.push_back({prefix + names[id], "F32", dims});
    data.push_back(std::move(values));
  }
  for (int l = 0; l < kSmall.layers; ++l) {
    const std::int64_t T = kSmall.max_seq;
    decls.push_back({prefix + "h." + std::to_string(l) + ".attn.bias", "F32", {1, 1, T, T}});
    data.emplace_back(static_cast<std::size_t>(T * T), 1.0f);
  }
  decls.push_back({"lm_head.weight", "F32", {kSmall.vocab, kSmall.channels}});
  data.push_back(p[0]);
  checkpoint::SafetensorsWriter writer(path, decls, {{"format", "pt"}});
  for (const auto& values : data) writer.write(values.data(), values.size() * sizeof(float));
  writer.finish();
}

std::vector<std::string> hf_names() {
  std::vector<std::string> names{"wte.weight", "wpe.weight"};
  for (int l = 0; l < kSmall.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* n :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      names.push_back(h + n);
    }
  }
  names.push_back("ln_f.weight");
  names.push_back("ln_f.bias");
  return names;
}

}  // namespace

TEST_CASE(
    "gpt model: Hugging Face GPT-2 weights load, Conv1D transposed, and give the reference loss",
    "[gpt]") {
  testing::ScratchDir dir("gpt-hf");
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  std::vector<std::vector<float>> p;
  for (const auto& shape : shapes(kSmall)) {
    p.emplace_back(numel(shape));
    for (float& v : p.back()) v = normal(rng);
  }
  for (std::size_t id : {2u, 8u}) {  // LayerNorm weights near 1, so the network is not flat
    for (float& v : p[id]) v += 1.0f;
  }
  const std::vector<std::string> names = hf_names();
  const std::string lm_head = dir.path() + "/gpt2-lmhead.safetensors";
  const std::string plain = dir.path() + "/gpt2.safetensors";
  const std::string missing = dir.path() + "/gpt2-missing.safetensors";
  write_hf(lm_head, p, names, "transformer.");
  write_hf(plain, p, names, "");
  write_hf(missing, p, names, "", "h.1.mlp.c_fc.bias");

  std::vector<std::int32_t> tokens(kB * kT), targets(kB * kT);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng() % kSmall.vocab);
  std::vector<Vec> reference(p.size());
  for (std::size_t id = 0; id < p.size(); ++id) reference[id].assign(p[id].begin(), p[id].end());
  const double expected = reference_loss(reference, tokens, targets);

  for (const std::string& path : {lm_head, plain}) {
    INFO(path);
    for (int stage : {0, 3}) {
      const std::string config = R"({"train_micro_batch_size_per_gpu": 2,
          "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
          "zero_optimization": {"stage": )" +
                                 std::to_string(stage) + "}}";
      zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
      options.device = ZERO_DEVICE_CPU;
      zero_engine* engine = nullptr;
      REQUIRE_OK(zero_create(config.c_str(), &options, &engine));
      {
        const auto model = make_gpt(engine, kSmall, kB, kT, 99);
        REQUIRE_OK(zero_init(engine));
        model->load_pretrained(path);
        CHECK(read_all(engine, kSmall) == p);
        CHECK(model->evaluate(tokens.data(), targets.data()) == Approx(expected).epsilon(1e-5));
        if (path == plain) {
          try {
            model->load_pretrained(missing);
            FAIL("a file without h.1.mlp.c_fc.bias loaded");
          } catch (const std::runtime_error& e) {
            CHECK_THAT(e.what(), Catch::Contains("h.1.mlp.c_fc.bias"));
          }
          CHECK(read_all(engine, kSmall) == p);  // refused before anything changed
        }
      }
      REQUIRE_OK(zero_destroy(engine));
    }
  }
}

}  // namespace zero::gpt

namespace zero::gpt {

// A reduction bucket larger than the model issues only after the last backward, so every
// gradient is live at once at stages 2 and 3. The engine once sized its gradient arena by the
// modules' overlap alone, and this model (3.2 MiB of gradients) ran out of room in its first
// backward.
TEST_CASE("gpt model: a bucket larger than the model keeps every gradient live, and they fit",
          "[gpt]") {
  const GptConfig tiny = GptConfig::by_name("tiny");
  for (int stage : {2, 3}) {
    INFO("stage " << stage);
    const std::string config = R"({"train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
        "zero_optimization": {"stage": )" +
                               std::to_string(stage) +
                               R"(, "reduce_bucket_size": 1e8, "overlap_comm": true}})";
    zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
    options.device = ZERO_DEVICE_CPU;
    zero_engine* engine = nullptr;
    REQUIRE_OK(zero_create(config.c_str(), &options, &engine));
    {
      const auto model = make_gpt(engine, tiny, 1, 8, 3);
      REQUIRE_OK(zero_init(engine));
      std::vector<std::int32_t> tokens(8, 65), targets(8, 66);
      for (int step = 0; step < 2; ++step) {
        model->forward(tokens.data(), targets.data());
        REQUIRE_NOTHROW(model->backward());
        REQUIRE_OK(zero_step(engine, nullptr));
      }
      unsigned long long live = 0, peak = 0;
      REQUIRE_OK(zero_memory_bytes(engine, ZERO_TIER_DEVICE, ZERO_KIND_GRAD, &live, &peak));
      CHECK(peak >= static_cast<unsigned long long>(tiny.parameters()) * 4);  // all at once
    }
    REQUIRE_OK(zero_destroy(engine));
  }
}

}  // namespace zero::gpt
