// GPT-2's Hugging Face config.json: the sizes read from one (n_layer, n_head, n_embd,
// n_positions, vocab_size) and written into one that transformers loads as GPT2LMHeadModel.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "models/gpt/config.h"

namespace zero::gpt {

// Throws std::invalid_argument naming the key that is missing or asks for what the reference
// GPT lacks (an MLP width other than 4 * n_embd, another activation, untied embeddings).
GptConfig from_hf(const nlohmann::json& config);
nlohmann::json to_hf(const GptConfig& config, const std::string& torch_dtype = "float32");

}  // namespace zero::gpt
