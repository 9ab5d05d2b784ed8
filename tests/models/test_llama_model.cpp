// The Llama model's own accounts: what its activations keep, as zero-mem plans them from the
// sizes alone (llama::activation_bytes), against what the model allocates.
#include <catch2/catch.hpp>

#include <cstdint>

#include "models/llama/config.h"
#include "models/llama/model.h"
#include "zero/zero.h"

namespace {

#define REQUIRE_OK(call) REQUIRE((call) == ZERO_OK)

// llama-tiny with a head dimension that is not channels / heads and an untied head, so that
// every size in the formula differs from the others.
zero::llama::LlamaConfig shape() {
  zero::llama::LlamaConfig c = zero::llama::LlamaConfig::by_name("llama-tiny");
  c.layers = 3;
  c.head_dim = 48;
  c.intermediate = 200;
  c.vocab = 300;
  c.tied = false;
  c.validate();
  return c;
}

zero::models::ActivationCost cost_of(const zero::llama::LlamaConfig& config, int batch, int seq,
                                     int checkpoint_blocks) {
  const char* text = R"({"train_micro_batch_size_per_gpu": 2,
      "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}, "zero_optimization": {"stage": 0}})";
  zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
  options.device = ZERO_DEVICE_CPU;
  zero_engine* engine = nullptr;
  REQUIRE_OK(zero_create(text, &options, &engine));
  zero::models::ActivationCost cost;
  {
    const auto model =
        zero::llama::make_llama(engine, config, batch, seq, 3, {checkpoint_blocks, false});
    CHECK_THROWS_AS(model->activation_cost(), std::logic_error);  // nothing allocated yet
    model->allocate();
    cost = model->activation_cost();
  }
  REQUIRE_OK(zero_destroy(engine));
  return cost;
}

}  // namespace

TEST_CASE("llama model: the activations zero-mem plans from the sizes are what the model keeps",
          "[llama]") {
  const zero::llama::LlamaConfig config = shape();
  const int batch = 2, seq = 24;
  const auto none = cost_of(config, batch, seq, 0);
  const auto all = cost_of(config, batch, seq, config.layers);
  CHECK(zero::llama::activation_bytes(config, batch, seq, false, 4).kept == none.kept_bytes);
  CHECK(zero::llama::activation_bytes(config, batch, seq, true, 4).kept == all.kept_bytes);
  CHECK(none.kept_bytes > all.kept_bytes);
  CHECK(zero::llama::block_flops(config, batch, seq) * config.layers ==
        Approx(all.recompute_flops));
  CHECK(3 * zero::llama::forward_flops(config, batch, seq) == Approx(all.train_flops));
}
