// The Llama-family decoder (Llama 2 and 3, Mistral, Qwen2), driven through the public C API
// only (zero/zero.h): token embedding, pre-RMSNorm blocks (causal attention with rotary
// embeddings and grouped key/value heads, SwiGLU MLP), a final RMSNorm and the output head,
// tied to the embedding or its own, with cross-entropy.
//
// Registration, under Hugging Face's names, so that its safetensors load and export as they
// are: module "embed" (model.embed_tokens.weight), one module per block "layers.<i>"
// (input_layernorm, self_attn.{q,k,v,o}_proj, Qwen2's q/k/v biases, post_attention_layernorm,
// mlp.{gate,up,down}_proj, each "model.layers.<i>." before), module "head" (model.norm.weight
// and lm_head.weight, or the tied embedding). RMSNorm weights and biases go in the "no_decay"
// group. Each forward and backward calls the module's hooks around its compute, so stage 3
// gathers one block at a time.
//
// The layers compute in fp32 (models/llama/kernels.h and the shared models/layers/layers.h); bf16
// and fp16 compute copies go through ComputeCopies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/layers/compute_copies.h"
#include "models/llama/config.h"
#include "models/llama/params.h"
#include "models/param_init.h"
#include "zero/zero.h"

namespace zero::llama {

class Llama final : public models::CausalLm {
 public:
  // Registers the model's groups, modules and parameters with `engine` (before zero_init);
  // initial values as transformers draws them (normal, std 0.02; norm weights 1, biases 0),
  // from `seed`, independent of the world size. `batch` sequences of `seq` positions per
  // micro-batch (seq <= max_seq). Throws std::invalid_argument for sizes that do not fit and
  // std::runtime_error with zero_last_error() when a call fails.
  Llama(zero_engine* engine, const LlamaConfig& config, int batch, int seq, std::uint64_t seed,
        const models::ActivationOptions& options = {});
  ~Llama() override;
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  float forward(const std::int32_t* tokens, const std::int32_t* targets) override;
  void backward() override;
  float evaluate(const std::int32_t* tokens, const std::int32_t* targets) override;
  // Hugging Face's files as they are: every tensor under its name and layout; lm_head.weight
  // ignored when tied, the rotary inv_freq buffers of older files too.
  void load_pretrained(const std::string& path) override;
  models::ActivationCost activation_cost() const override;
  double forward_flops() const override;

  const LlamaConfig& config() const noexcept { return config_; }
  std::vector<float> logits() const override { return logits_; }
  const std::vector<std::string>& names() const noexcept override { return names_; }
  const std::vector<std::size_t>& numels() const noexcept override { return numels_; }

 private:
  using Block = LlamaBlockIds;
  // One block's activations, kept from forward to backward.
  struct Activations {
    std::vector<float> ln1, rstd1, q, k, v, att, y, res, ln2, rstd2, gate, up, h;
    void allocate(std::size_t N, std::size_t C, std::size_t q, std::size_t kv, std::size_t F,
                  std::size_t scores);
    std::uint64_t bytes() const noexcept;
  };

  void block_forward(const Block& b, const float* x, Activations& a, float* out);
  void block_backward(const Block& b, const float* x, const Activations& a, float* dx);
  bool checkpointed(std::size_t block) const noexcept {
    return static_cast<int>(block) < options_.checkpoint_blocks;
  }
  float* param(int id);
  float* grad(int id);
  void check(zero_status status, const char* call) const;

  zero_engine* engine_;
  std::unique_ptr<models::ParamInit> init_;
  LlamaConfig config_;
  int batch_, seq_;
  models::ActivationOptions options_;
  int embed_module_ = 0, head_module_ = 0;
  int wte_ = -1, norm_ = -1, lm_head_ = -1;  // lm_head_ == wte_ when tied
  std::vector<Block> blocks_;
  std::vector<std::string> names_;
  std::vector<std::size_t> numels_;
  layers::ComputeCopies copies_;
  std::vector<float> cos_, sin_;  // rotary tables [seq, head_size / 2]

  std::vector<std::int32_t> tokens_, targets_;
  std::vector<float> encoded_;
  std::vector<Activations> acts_;
  Activations recompute_;
  std::vector<std::vector<float>> outs_;
  // Backward scratch, kept across micro-batches.
  std::vector<float> dF_, dgate_, dup_, dq_, dk_, dv_, dy_, datt_, dres_, dsmall_, dlosses_,
      dlogits_, dx_, dnorm_;
  std::vector<float> normed_, norm_rstd_, logits_, probs_, losses_;
  int counted_ = 0;
};

}  // namespace zero::llama
