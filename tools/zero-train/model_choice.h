// Which reference model zero-train trains, from --model, a Hugging Face directory's
// config.json (--init DIR when --model is not given) and the custom size flags: the GPT-2 family
// (models/gpt) or the Llama family (models/llama: Llama, Mistral, Qwen2).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "models/causal_lm.h"
#include "models/gpt/config.h"
#include "models/llama/config.h"
#include "tools/zero-train/options.h"
#include "zero/zero.h"

namespace zero::train {

class ModelChoice {
 public:
  // Throws std::invalid_argument (an unknown name, a config.json that does not fit, a custom
  // flag the family lacks) with what to do.
  static ModelChoice from_options(const TrainOptions& options);

  const std::string& name() const noexcept { return name_; }
  int max_seq() const noexcept;
  int vocab() const noexcept;
  int layers() const noexcept;
  std::int64_t parameters() const;
  // "12 layers, 12 heads, 768 channels, 1024 positions, vocabulary 50257" and the like.
  std::string shape() const;
  // The Hugging Face config.json of this model (zero-ckpt export writes it beside the weights):
  // with --init DIR, DIR's config.json with the keys the model sets written over it, so that
  // what the model does not change (token ids, names, the keys of other tools) carries through.
  nlohmann::json hf_config() const;
  // --init DIR's generation_config.json, or null when it has none.
  const nlohmann::json& generation_config() const noexcept { return generation_config_; }
  // What to do about a --seq longer than the model's positions.
  std::string seq_advice(int seq) const;
  // The model's largest tensor, its shape and the sizes that make it, in the terms the model
  // came from (config.json's keys with --init DIR, else the flags): for a reservation refused.
  std::string largest_tensor() const;
  // Registers the model with `engine` (before zero_init): its CUDA layers when `cuda` (the
  // engine's parameters live on a GPU), else its CPU layers.
  std::unique_ptr<models::CausalLm> build(zero_engine* engine, int batch, int seq,
                                          std::uint64_t seed,
                                          const models::ActivationOptions& options,
                                          bool cuda) const;
  // What the built model holds beside the engine for micro-batches of `batch` x `seq`: its
  // activations and backward's workspaces (bf16 in the CUDA layers, fp32 in the CPU ones; with
  // some but not all blocks checkpointed, as if none were) and, in the CPU layers with a 2-byte
  // compute dtype, the fp32 copies of the open module's parameters and gradients: 8 bytes per
  // parameter of the largest module. zero-train declares it before build (zero_declare_memory),
  // so that zero_init's fit check counts it.
  std::uint64_t working_bytes(int batch, int seq, const models::ActivationOptions& options,
                              bool cuda, std::size_t compute_bytes) const;
  // PaLM's FLOPs per trained token at sequence length `seq` (models/gpu_info.h).
  double flops_per_token(int seq) const;

 private:
  std::string name_;
  std::string init_;                  // --init, when given
  nlohmann::json init_config_;        // --init DIR's config.json, or null
  nlohmann::json generation_config_;  // --init DIR's generation_config.json, or null
  std::optional<gpt::GptConfig> gpt_;
  std::optional<llama::LlamaConfig> llama_;
};

}  // namespace zero::train
