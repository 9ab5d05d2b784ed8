// The reference GPT's registration (params.h).
#include "models/gpt/params.h"

#include <cmath>
#include <string>

namespace zero::gpt {

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

}  // namespace zero::gpt
