// The Llama family's registration and sizes (params.h).
#include "models/llama/params.h"

#include <set>
#include <stdexcept>
#include <string>

#include "models/hf_weights.h"
#include "models/llama/kernels.h"

namespace zero::llama {

decoder::Shape decoder_shape(const LlamaConfig& config, int batch, int seq) {
  config.validate();
  decoder::check_sequence(seq, config.max_seq);
  return {batch, seq, config.channels, config.heads, config.vocab};
}

LlamaDims LlamaDims::of(const LlamaConfig& config, int batch, int seq) {
  LlamaDims d;
  d.B = batch, d.T = seq, d.N = batch * seq, d.C = config.channels, d.hd = config.head_size();
  d.NH = config.heads, d.NKV = config.kv_heads, d.Q = d.NH * d.hd, d.KV = d.NKV * d.hd;
  d.F = config.intermediate;
  d.NC = static_cast<std::size_t>(d.N) * d.C;
  return d;
}

RotaryTables rotary_tables(const LlamaConfig& config, int seq) {
  const std::vector<double> inv_freq = config.inv_freq();
  RotaryTables tables;
  tables.cos.resize(static_cast<std::size_t>(seq) * inv_freq.size());
  tables.sin.resize(tables.cos.size());
  rope_tables(tables.cos.data(), tables.sin.data(), inv_freq.data(), seq, config.head_size());
  return tables;
}

LlamaIds register_llama(models::Registrar& r, const LlamaConfig& config) {
  LlamaIds ids;
  const int no_decay = r.group("no_decay", 0.0, 1.0);
  ids.embed_module = r.module("embed");
  for (int l = 0; l < config.layers; ++l) {
    LlamaBlockIds b;
    b.module = r.module("layers." + std::to_string(l));
    ids.blocks.push_back(b);
  }
  ids.head_module = r.module("head");
  const long long C = config.channels, hd = config.head_size();
  const long long Q = config.heads * hd, KV = config.kv_heads * hd, F = config.intermediate;
  constexpr double kStd = 0.02;  // transformers' initializer_range
  std::vector<int> embed_modules{ids.embed_module};
  if (config.tied) embed_modules.push_back(ids.head_module);
  ids.wte = r.param("model.embed_tokens.weight", {config.vocab, C}, 0, embed_modules, kStd, 0);
  for (int l = 0; l < config.layers; ++l) {
    LlamaBlockIds& b = ids.blocks[static_cast<std::size_t>(l)];
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const std::vector<int> m{b.module};
    b.ln1 = r.param(h + "input_layernorm.weight", {C}, no_decay, m, 0, 1);
    b.q = r.param(h + "self_attn.q_proj.weight", {Q, C}, 0, m, kStd, 0);
    if (config.qkv_bias) b.q_bias = r.param(h + "self_attn.q_proj.bias", {Q}, no_decay, m, 0, 0);
    b.k = r.param(h + "self_attn.k_proj.weight", {KV, C}, 0, m, kStd, 0);
    if (config.qkv_bias) b.k_bias = r.param(h + "self_attn.k_proj.bias", {KV}, no_decay, m, 0, 0);
    b.v = r.param(h + "self_attn.v_proj.weight", {KV, C}, 0, m, kStd, 0);
    if (config.qkv_bias) b.v_bias = r.param(h + "self_attn.v_proj.bias", {KV}, no_decay, m, 0, 0);
    b.o = r.param(h + "self_attn.o_proj.weight", {C, Q}, 0, m, kStd, 0);
    b.ln2 = r.param(h + "post_attention_layernorm.weight", {C}, no_decay, m, 0, 1);
    b.gate = r.param(h + "mlp.gate_proj.weight", {F, C}, 0, m, kStd, 0);
    b.up = r.param(h + "mlp.up_proj.weight", {F, C}, 0, m, kStd, 0);
    b.down = r.param(h + "mlp.down_proj.weight", {C, F}, 0, m, kStd, 0);
  }
  ids.norm = r.param("model.norm.weight", {C}, no_decay, {ids.head_module}, 0, 1);
  ids.lm_head = config.tied
                    ? ids.wte
                    : r.param("lm_head.weight", {config.vocab, C}, 0, {ids.head_module}, kStd, 0);
  return ids;
}

void load_llama_weights(zero_engine* engine, const LlamaConfig& config, const std::string& path) {
  // A tied checkpoint read with an untied config (tie_word_embeddings false, or left out, which
  // is false for this family) would be refused for its missing lm_head.weight in the engine's
  // terms; the directory's are clearer.
  if (!config.tied) {
    const std::set<std::string> names = models::pretrained_tensor_names(path);
    if (!names.contains("lm_head.weight") && names.contains("model.embed_tokens.weight")) {
      throw std::runtime_error(
          path +
          ": the weights hold no lm_head.weight, so the output head is tied to "
          "model.embed_tokens.weight, but the model was made untied (config.json's "
          "tie_word_embeddings is false, or absent, which means false): set "
          "\"tie_word_embeddings\": true in config.json");
    }
  }
  // Older files keep each layer's rotary inv_freq buffer; a tied model's files may hold
  // lm_head.weight beside the embedding.
  std::vector<std::string> ignore;
  for (int l = 0; l < config.layers; ++l) {
    ignore.push_back("model.layers." + std::to_string(l) + ".self_attn.rotary_emb.inv_freq");
  }
  if (config.tied) ignore.push_back("lm_head.weight");
  std::vector<const char*> ignore_c;
  for (const std::string& s : ignore) ignore_c.push_back(s.c_str());
  zero_pretrained_options options{};
  options.ignore = ignore_c.data();
  options.ignore_count = static_cast<int>(ignore_c.size());
  if (zero_load_pretrained(engine, path.c_str(), &options) != ZERO_OK) {
    throw std::runtime_error("loading " + config.family + " weights from " + path + ": " +
                             zero_last_error());
  }
}

}  // namespace zero::llama
