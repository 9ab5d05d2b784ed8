// The model zero-mem plans for, as the engine would see it registered: its groups, modules and
// parameters (an engine Registry), and for GPT- and Llama-shaped models the architecture the
// activations and FLOPs follow.
//
//   --model NAME       a reference model's sizes: the GPT's (models/gpt: tiny, gpt2-124m, ...)
//                      or the Llama family's (models/llama: llama-tiny, llama-3.2-1b,
//                      llama-3.1-8b, ...), registered exactly as the model registers them;
//                      or a Hugging Face directory or config.json (GPT-2, or model_type llama,
//                      mistral, qwen2), registered as the Python front end registers it
//   --arch L,C,H,V,S   a GPT of L layers, C channels, H heads, V vocabulary entries and S
//                      positions, registered the same way; with --params the MLP's hidden width
//                      is chosen so the count comes to that many parameters (4C without)
//   --params P --largest-layer N
//                      no architecture: P parameters in modules of N (one weight each, the
//                      last module the remainder), DeepSpeed's estimator's two numbers
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/plan/registry.h"
#include "models/activation_bytes.h"
#include "models/gpt/config.h"
#include "models/llama/config.h"

namespace zero::mem {

// The reference GPT's sizes with the MLP's hidden width free (4 * channels in GPT-2).
struct GptShape {
  gpt::GptConfig config;
  std::int64_t mlp = 0;
};

struct ModelShape {
  engine::Registry registry;
  std::optional<GptShape> gpt;              // a GPT's architecture, or
  std::optional<llama::LlamaConfig> llama;  // a Llama family model's (at most one of the two)
  std::uint64_t params = 0;                 // all parameters, the tied embedding once
  std::uint64_t largest_layer = 0;          // the most parameters one module uses
  std::string description;  // "gpt2-1.5b: 48 layers, 1600 channels, ..." for the report

  // What the architecture says, where there is one (a GPT or a Llama): its layers, positions,
  // forward FLOPs of a micro-batch and of one block, and the activations the model keeps.
  bool has_architecture() const noexcept { return gpt.has_value() || llama.has_value(); }
  int layers() const;     // 0 without an architecture
  int positions() const;  // 0 without an architecture
  double forward_flops(int batch, int seq) const;
  double block_flops(int batch, int seq) const;
  models::ActivationBytes activation_bytes(int batch, int seq, bool checkpointing,
                                           std::size_t element_bytes) const;
};

struct ModelArgs {
  std::string model;          // --model (a GPT or a Llama family name)
  std::string arch;           // --arch "L,C,H,V,S"
  double params = 0;          // --params (0: not given)
  double largest_layer = 0;   // --largest-layer (0: not given)
  double weight_decay = 0.0;  // the optimizer's, for group 0 (as the engine registers it)
};

// Throws std::invalid_argument saying which argument is wrong and what is expected.
ModelShape build_model(const ModelArgs& args);

// Whether --model names a directory that holds safetensors weights (model.safetensors or its
// index), which the front end loads rather than initialising the model.
bool holds_weights(const std::string& model);

// Registers a GPT exactly as models/gpt does: groups default and no_decay, modules embed,
// h.<i> and head, and each block's twelve parameters with Hugging Face's names.
ModelShape gpt_model(const GptShape& shape, double weight_decay);

// Registers a Llama-family model exactly as models/llama does (llama/params.cpp): groups
// default and no_decay, modules embed, layers.<i> and head, transformers' names.
ModelShape llama_model(const llama::LlamaConfig& config, double weight_decay);

}  // namespace zero::mem
