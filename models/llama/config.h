// The Llama family's sizes (Llama 2 and 3, Mistral, Qwen2): layers, heads and key/value heads,
// channels, the MLP's width, positions, vocabulary, rotary settings, norm epsilon, biases and
// the tied head; by name, from a Hugging Face config.json, and back into one. Plain data (and
// JSON), so that tools can use the shapes without the model or the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/activation_bytes.h"

namespace zero::llama {

// How the rotary frequencies are rescaled for long contexts (Hugging Face's rope_scaling /
// rope_parameters): none, "linear" (every frequency / factor) or "llama3" (Llama 3.1's: long
// wavelengths / factor, short ones kept, a smooth blend between).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position = 8192;
};

struct LlamaConfig {
  std::string family = "llama";  // Hugging Face's model_type: llama, mistral or qwen2
  int layers = 4;
  int heads = 4;
  int kv_heads = 2;
  int channels = 128;
  int head_dim = 0;  // 0: channels / heads
  int intermediate = 352;
  int max_seq = 64;
  int vocab = 256;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double norm_eps = 1e-5;
  bool qkv_bias = false;   // Qwen2's q, k and v projections have biases
  bool tied = false;       // the output head is the token embedding
  int sliding_window = 0;  // Mistral's attention window; 0: none

  // llama-tiny (for tests and the demo: 4 layers, 4 heads over 2 key/value heads, 128
  // channels, MLP 352, 64 positions, 256 bytes), llama-3.2-1b, llama-3.2-3b, llama-3.1-8b,
  // llama-2-13b, llama-3.1-70b, mistral-7b (v0.1), qwen2.5-0.5b, qwen2.5-7b. Throws
  // std::invalid_argument for another name.
  static LlamaConfig by_name(const std::string& name);
  static bool is_name(const std::string& name);
  static const std::vector<std::string>& names();

  // From a Hugging Face config.json (model_type llama, mistral or qwen2; rope_theta and
  // rope_scaling at the top, or transformers 5's rope_parameters). Throws std::invalid_argument
  // naming the key that is missing, of the wrong type, or asks for what this model lacks.
  static LlamaConfig from_hf(const nlohmann::json& config);
  // A config.json transformers loads (architectures, model_type, the sizes, rope_theta and
  // rope_scaling, torch_dtype).
  nlohmann::json to_hf(const std::string& torch_dtype = "float32") const;

  int head_size() const noexcept { return head_dim > 0 ? head_dim : channels / heads; }
  std::int64_t parameters() const;  // with a tied embedding counted once
  // The rotary inverse frequencies, head_size() / 2 of them, scaled as rope_scaling says.
  std::vector<double> inv_freq() const;
  // Throws std::invalid_argument when the sizes do not fit together (heads over key/value
  // heads, an odd head size, non-positive sizes).
  void validate() const;
};

// The activations of one micro-batch of `batch` sequences of `seq` tokens as the CPU model
// keeps them (its activation_cost(), models/decoder/decoder.h, reports the same kept bytes from
// its allocations), in elements of `element_bytes`, without checkpointing or with every block
// checkpointed.
models::ActivationBytes activation_bytes(const LlamaConfig& config, int batch, int seq,
                                         bool checkpointing, std::size_t element_bytes);

// Forward FLOPs of one micro-batch of `batch` sequences of `seq` positions.
double forward_flops(const LlamaConfig& config, int batch, int seq);
double block_flops(const LlamaConfig& config, int batch, int seq);

}  // namespace zero::llama
