// The Llama family's registration, sizes and FLOPs, shared by its CPU model (model.h) and its
// CUDA model (cuda_model.h): group "no_decay", modules "embed", "layers.<i>" and "head", and the
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

// The sizes a block's code names: B sequences of T positions (N rows), C channels, NH query and
// NKV key/value heads of hd channels (Q and KV wide), the MLP's F, and N * C.
struct LlamaDims {
  int B, T, N, C, hd, NH, NKV, Q, KV, F;
  std::size_t NC;
  static LlamaDims of(const LlamaConfig& config, int batch, int seq);
};

// What the family's operations on the CPU (model.cpp) and on the GPU (cuda_model.cpp) share, a
// base of each beside its device's (decoder.h's DecoderOps): the config, the parameters' ids,
// registered when it is made, the forward FLOPs and the pretrained weights.
class LlamaFamily {
 public:
  using Config = LlamaConfig;
  const LlamaIds& ids() const noexcept { return ids_; }
  // Of a micro-batch, and of one block (what recomputing a checkpointed block costs).
  double forward_flops() const { return llama::forward_flops(config_, dims_.B, dims_.T); }
  double block_flops() const { return llama::block_flops(config_, dims_.B, dims_.T); }
  void load_pretrained(zero_engine* engine, const std::vector<std::string>&,
                       const std::string& path) const {
    load_llama_weights(engine, config_, path);
  }

 protected:
  // Registers the model (register_llama), for micro-batches of `batch` sequences of `seq`.
  LlamaFamily(models::Registrar& registrar, const LlamaConfig& config, int batch, int seq)
      : config_(config),
        ids_(register_llama(registrar, config)),
        dims_(LlamaDims::of(config, batch, seq)) {}

  LlamaConfig config_;
  LlamaIds ids_;
  const LlamaDims dims_;  // what the blocks' code names
};

}  // namespace zero::llama
