// The reference GPT's registration, sizes and FLOPs, shared by its CPU model (model.h) and its
// CUDA model (cuda_model.h): groups "default" and "no_decay", modules "embed", "h.<i>" and "head",
// and the parameters under Hugging Face GPT-2's names, initialised as GPT-2 draws them.
#pragma once

#include <string>
#include <vector>

#include "models/decoder/shape.h"
#include "models/gpt/config.h"
#include "models/registrar.h"

namespace zero::gpt {

struct GptBlockIds {
  int module = 0;
  int ln1_w = -1, ln1_b = -1, qkv_w = -1, qkv_b = -1, proj_w = -1, proj_b = -1, ln2_w = -1,
      ln2_b = -1, fc_w = -1, fc_b = -1, fcproj_w = -1, fcproj_b = -1;
};

struct GptIds {
  int embed_module = 0, head_module = 0;
  int wte = -1, wpe = -1, lnf_w = -1, lnf_b = -1;  // wte is also the head's (tied)
  std::vector<GptBlockIds> blocks;
};

// The decoder's sizes for `batch` sequences of `seq` positions. Throws std::invalid_argument
// unless 1 <= seq <= max_seq and the heads split the channels evenly.
decoder::Shape decoder_shape(const GptConfig& config, int batch, int seq);

// Registers the model (normal std 0.02; wpe 0.01; residual projections 0.02 / sqrt(2 layers);
// LayerNorm weights 1, biases 0; biases and LayerNorm weights in "no_decay").
GptIds register_gpt(models::Registrar& registrar, const GptConfig& config);

// Sets the weights from Hugging Face GPT-2 safetensors (a file, an index JSON or a directory;
// names with or without the "transformer." prefix; the Conv1D weights c_attn, c_proj and c_fc
// stored [in, out]; attention-mask buffers and lm_head.weight, the tied embedding, ignored)
// through zero_load_pretrained. `names` are the registered ones, by id. Collective, after
// zero_init. Throws std::runtime_error with the engine's message when the files do not fit.
void load_gpt2_weights(zero_engine* engine, const std::vector<std::string>& names, int layers,
                       const std::string& path);

// What the GPT's operations on the CPU (model.cpp) and on the GPU (cuda_model.cpp) share, a base
// of each beside its device's (decoder.h's DecoderOps): the config, the parameters' ids,
// registered when it is made, the forward FLOPs and the pretrained weights.
class GptFamily {
 public:
  using Config = GptConfig;
  const GptIds& ids() const noexcept { return ids_; }
  // Of a micro-batch, and of one block (what recomputing a checkpointed block costs).
  double forward_flops() const;
  double block_flops() const;
  void load_pretrained(zero_engine* engine, const std::vector<std::string>& names,
                       const std::string& path) const {
    load_gpt2_weights(engine, names, config_.layers, path);
  }

 protected:
  // Registers the model (register_gpt), for micro-batches of `batch` sequences of `seq`.
  GptFamily(models::Registrar& registrar, const GptConfig& config, int batch, int seq)
      : config_(config), ids_(register_gpt(registrar, config)), batch_(batch), seq_(seq) {}

  GptConfig config_;
  GptIds ids_;

 private:
  int batch_, seq_;
};

}  // namespace zero::gpt
