// The Llama family's registration and sizes, shared by its CPU model (model.h) and its CUDA model
// (cuda_model.h): group "no_decay", modules "embed", "layers.<i>" and "head", and the
// parameters under transformers' names, initialised as transformers draws them.
#pragma once

#include <string>
#include <vector>

#include "models/decoder/shape.h"
#include "models/llama/config.h"
#include "models/registrar.h"

namespace zero::llama {

struct LlamaBlockIds {
  int module = 0;
  int ln1 = -1, q = -1, k = -1, v = -1, q_bias = -1, k_bias = -1, v_bias = -1, o = -1, ln2 = -1,
      gate = -1, up = -1, down = -1;  // biases -1 unless Qwen2's
};

struct LlamaIds {
  int embed_module = 0, head_module = 0;
  int wte = -1, norm = -1, lm_head = -1;  // lm_head == wte when tied
  std::vector<LlamaBlockIds> blocks;
};

// The decoder's sizes for `batch` sequences of `seq` positions. Throws std::invalid_argument
// when the config does not hold together (LlamaConfig::validate) or seq is not 1..max_seq.
decoder::Shape decoder_shape(const LlamaConfig& config, int batch, int seq);

// Registers the model (normal std 0.02, norms 1, biases 0; norms and biases in "no_decay").
LlamaIds register_llama(models::Registrar& registrar, const LlamaConfig& config);

// The rotary tables for sequences of `seq` positions: cos and sin [seq, head_size / 2], as
// rope_tables (kernels.h) makes them from the config's inverse frequencies.
struct RotaryTables {
  std::vector<float> cos, sin;
};
RotaryTables rotary_tables(const LlamaConfig& config, int seq);

// Hugging Face's files as they are (a file, an index JSON or a directory): every tensor under
// its name and layout; lm_head.weight ignored when tied, old rotary inv_freq buffers too.
// Collective, after zero_init. Throws std::runtime_error with the engine's message.
void load_llama_weights(zero_engine* engine, const LlamaConfig& config, const std::string& path);

}  // namespace zero::llama
