// The reference GPT-2-style decoder, driven through the public C API only (zero/zero.h): token
// and position embeddings, pre-LayerNorm blocks (causal multi-head attention, GELU MLP), a
// final LayerNorm and the output projection tied to the token embedding, with cross-entropy.
//
// Registration: module "embed" (wte, wpe), one module per block "h.<i>" (its 12 parameters,
// named as Hugging Face names GPT-2's), module "head" (ln_f and the tied wte). Biases and
// LayerNorm weights go in a "no_decay" group. Each forward and backward calls the module's
// hooks around its compute, so stage 3 gathers one block at a time.
//
// The layers compute in fp32; bf16 and fp16 compute copies are widened and their gradients
// rounded back through ComputeCopies (models/layers/compute_copies.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/gpt/config.h"
#include "models/gpt/params.h"
#include "models/layers/compute_copies.h"
#include "models/param_init.h"
#include "zero/zero.h"

namespace zero::gpt {

// The checkpointing options and the activations' cost are every model's (causal_lm.h).
using GptOptions = models::ActivationOptions;
using ActivationCost = models::ActivationCost;

class Gpt final : public models::CausalLm {
 public:
  // Registers the model's groups, modules and parameters with `engine` (before zero_init);
  // initial values as GPT-2 draws them (normal, std 0.02; residual projections scaled by
  // 1/sqrt(2 layers); LayerNorm weights 1, biases 0), from `seed`, independent of the world
  // size. `batch` sequences of `seq` positions per micro-batch (seq <= max_seq). Throws
  // std::runtime_error with zero_last_error() when a call fails.
  Gpt(zero_engine* engine, const GptConfig& config, int batch, int seq, std::uint64_t seed,
      const GptOptions& options = {});
  ~Gpt() override;
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  float forward(const std::int32_t* tokens, const std::int32_t* targets) override;
  void backward() override;
  float evaluate(const std::int32_t* tokens, const std::int32_t* targets) override;

  // Sets the weights from Hugging Face GPT-2 safetensors (a file, an index JSON or a
  // directory; names with or without the "transformer." prefix; the Conv1D weights c_attn,
  // c_proj and c_fc stored [in, out]; attention-mask buffers and lm_head.weight, the tied
  // embedding, ignored) through zero_load_pretrained. Collective, after zero_init. Throws
  // std::runtime_error with the engine's message when the files do not fit the model.
  void load_pretrained(const std::string& path) override;

  const GptConfig& config() const noexcept { return config_; }
  const GptOptions& options() const noexcept { return options_; }
  ActivationCost activation_cost() const override;
  double forward_flops() const override;
  std::vector<float> logits() const override { return logits_; }
  const std::vector<std::string>& names() const noexcept override { return names_; }
  const std::vector<std::size_t>& numels() const noexcept override { return numels_; }

 private:
  using Block = GptBlockIds;
  struct Activations {
    std::vector<float> ln1, ln1_mean, ln1_rstd, qkv, att, atty, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu;
    void allocate(std::size_t N, std::size_t C, std::size_t batch_heads_seq_seq);
    std::uint64_t bytes() const noexcept;  // as allocated (0 when not)
    static std::uint64_t bytes_for(std::size_t N, std::size_t C,
                                   std::size_t batch_heads_seq_seq) noexcept;
  };

  void block_forward(const Block& b, const float* x, Activations& a, float* out);
  void block_backward(const Block& b, const float* x, const Activations& a, float* dx);
  double block_flops() const;
  bool checkpointed(std::size_t block) const noexcept {
    return static_cast<int>(block) < options_.checkpoint_blocks;
  }
  float* param(int id);
  float* grad(int id);
  void check(zero_status status, const char* call) const;

  zero_engine* engine_;
  std::unique_ptr<models::ParamInit> init_;  // read during zero_init
  GptConfig config_;
  int batch_, seq_;
  int embed_module_ = 0, head_module_ = 0;
  int wte_ = 0, wpe_ = 0, lnf_w_ = 0, lnf_b_ = 0;
  std::vector<Block> blocks_;
  std::vector<std::string> names_;
  std::vector<std::size_t> numels_;  // by parameter id
  layers::ComputeCopies copies_;     // fp32 views of bf16 or fp16 compute copies

  // This micro-batch's inputs and activations, kept for the backward.
  std::vector<std::int32_t> tokens_, targets_;
  std::vector<float> encoded_;
  GptOptions options_;
  // Per block: its activations, or for a checkpointed block none (recompute_ holds them while
  // its backward runs); outs_[l], the block's output, is the saved input of block l + 1.
  std::vector<Activations> acts_;
  Activations recompute_;
  std::vector<std::vector<float>> outs_;
  // Backward scratch, kept across micro-batches.
  std::vector<float> d4_, d4b_, dqkv_, datt_, dres2_, dsmall_, dlosses_, dlogits_, dx_, dlnf_;
  std::vector<float> lnf_, lnf_mean_, lnf_rstd_, logits_, probs_, losses_;
  int counted_ = 0;  // positions with a target
};

}  // namespace zero::gpt
