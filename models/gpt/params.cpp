// The reference GPT's registration and sizes (params.h).
#include "models/gpt/params.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "models/gpt/hf_layout.h"

namespace zero::gpt {

decoder::Shape decoder_shape(const GptConfig& config, int batch, int seq) {
  decoder::check_sequence(seq, config.max_seq);
  if (config.channels % config.heads != 0) {
    throw std::invalid_argument("channels " + std::to_string(config.channels) +
                                " do not split over " + std::to_string(config.heads) + " heads");
  }
  return {batch, seq, config.channels, config.heads, config.vocab};
}

double GptFamily::forward_flops() const {
  return gpt::forward_flops(config_, 4 * std::int64_t{config_.channels}, batch_, seq_);
}

double GptFamily::block_flops() const {
  return gpt::block_flops(config_, 4 * std::int64_t{config_.channels}, batch_, seq_);
}

GptIds register_gpt(models::Registrar& r, const GptConfig& config) {
  GptIds ids;
  const int no_decay = r.group("no_decay", 0.0, 1.0);
  ids.embed_module = r.module("embed");
  for (int l = 0; l < config.layers; ++l) {
    GptBlockIds b;
    b.module = r.module("h." + std::to_string(l));
    ids.blocks.push_back(b);
  }
  ids.head_module = r.module("head");
  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  const long long C = config.channels;
  ids.wte =
      r.param("wte.weight", {config.vocab, C}, 0, {ids.embed_module, ids.head_module}, 0.02, 0);
  ids.wpe = r.param("wpe.weight", {config.max_seq, C}, 0, {ids.embed_module}, 0.01, 0);
  for (int l = 0; l < config.layers; ++l) {
    GptBlockIds& b = ids.blocks[static_cast<std::size_t>(l)];
    const std::string h = "h." + std::to_string(l) + ".";
    const std::vector<int> m{b.module};
    b.ln1_w = r.param(h + "ln_1.weight", {C}, no_decay, m, 0, 1);
    b.ln1_b = r.param(h + "ln_1.bias", {C}, no_decay, m, 0, 0);
    b.qkv_w = r.param(h + "attn.c_attn.weight", {3 * C, C}, 0, m, 0.02, 0);
    b.qkv_b = r.param(h + "attn.c_attn.bias", {3 * C}, no_decay, m, 0, 0);
    b.proj_w = r.param(h + "attn.c_proj.weight", {C, C}, 0, m, residual_std, 0);
    b.proj_b = r.param(h + "attn.c_proj.bias", {C}, no_decay, m, 0, 0);
    b.ln2_w = r.param(h + "ln_2.weight", {C}, no_decay, m, 0, 1);
    b.ln2_b = r.param(h + "ln_2.bias", {C}, no_decay, m, 0, 0);
    b.fc_w = r.param(h + "mlp.c_fc.weight", {4 * C, C}, 0, m, 0.02, 0);
    b.fc_b = r.param(h + "mlp.c_fc.bias", {4 * C}, no_decay, m, 0, 0);
    b.fcproj_w = r.param(h + "mlp.c_proj.weight", {C, 4 * C}, 0, m, residual_std, 0);
    b.fcproj_b = r.param(h + "mlp.c_proj.bias", {C}, no_decay, m, 0, 0);
  }
  ids.lnf_w = r.param("ln_f.weight", {C}, no_decay, {ids.head_module}, 0, 1);
  ids.lnf_b = r.param("ln_f.bias", {C}, no_decay, {ids.head_module}, 0, 0);
  return ids;
}

void load_gpt2_weights(zero_engine* engine, const std::vector<std::string>& names, int layers,
                       const std::string& path) {
  // The Conv1D weights are stored [in, out], ours [out, in]; attention-mask buffers and the
  // tied lm_head.weight have no parameter.
  std::vector<std::string> transposed, ignore{"lm_head.weight"};
  for (const std::string& name : names) {
    if (is_hf_conv1d_weight(name)) transposed.push_back(name);
  }
  for (int l = 0; l < layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    for (const char* buffer : {"attn.bias", "attn.masked_bias"}) {
      ignore.push_back(h + buffer);
      ignore.push_back("transformer." + h + buffer);
    }
  }
  // GPT2Model's files name the tensors as we register them; GPT2LMHeadModel's prefix them with
  // "transformer.". The load refuses before changing anything, so the second try is safe.
  std::vector<std::string> prefixed;
  for (const std::string& name : names) {
    prefixed.push_back(name);
    prefixed.push_back("transformer." + name);
  }
  auto c_strings = [](const std::vector<std::string>& strings) {
    std::vector<const char*> out;
    for (const std::string& s : strings) out.push_back(s.c_str());
    return out;
  };
  const std::vector<const char*> transposed_c = c_strings(transposed);
  const std::vector<const char*> ignore_c = c_strings(ignore), prefixed_c = c_strings(prefixed);
  zero_pretrained_options options{};
  options.transposed = transposed_c.data();
  options.transposed_count = static_cast<int>(transposed_c.size());
  options.ignore = ignore_c.data();
  options.ignore_count = static_cast<int>(ignore_c.size());
  const zero_status plain = zero_load_pretrained(engine, path.c_str(), &options);
  if (plain == ZERO_OK) return;
  const std::string plain_error = zero_last_error();
  options.names = prefixed_c.data();
  options.name_pairs = static_cast<int>(names.size());
  const zero_status prefixed_status = zero_load_pretrained(engine, path.c_str(), &options);
  if (prefixed_status == ZERO_OK) return;
  // Neither naming fits: say what each found wrong, the file decides which is the real one.
  throw std::runtime_error(
      "loading GPT-2 weights from " + path + ": as GPT2Model names: " + zero_status_string(plain) +
      ": " + plain_error + "; as GPT2LMHeadModel names (\"transformer.\" before each): " +
      zero_status_string(prefixed_status) + ": " + zero_last_error());
}

}  // namespace zero::gpt
