// zero-mem's model: a registry built as the engine would receive it (model_shape.h).
#include "tools/zero-mem/model_shape.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "models/gpt/config.h"
#include "models/gpt/hf_config.h"
#include "models/llama/config.h"

namespace zero::mem {
namespace {

// --model given as a Hugging Face directory or its config.json: the file's path, or "" when
// `model` names neither (a reference model's name).
std::filesystem::path hf_config_path(const std::string& model) {
  const std::filesystem::path path(model);
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    if (!std::filesystem::is_regular_file(path / "config.json", error)) {
      throw std::invalid_argument(fmt::format(
          "--model {}: the directory has no config.json; give a Hugging Face model directory "
          "or a reference model's name",
          model));
    }
    return path / "config.json";
  }
  if (path.extension() == ".json") {
    if (!std::filesystem::is_regular_file(path, error)) {
      throw std::invalid_argument(fmt::format("--model {}: no such file", model));
    }
    return path;
  }
  return {};
}

// A Hugging Face model's shape from its config.json: GPT-2 (model_type gpt2), or the Llama
// family's (llama, mistral, qwen2), registered as the front end registers it.
ModelShape hf_model(const std::filesystem::path& file, double weight_decay) {
  nlohmann::json config;
  try {
    std::ifstream in(file);
    config = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& error) {
    throw std::invalid_argument(
        fmt::format("--model: {} is not JSON: {}", file.string(), error.what()));
  }
  const std::string type = config.value("model_type", "");
  if (type != "gpt2" && type != "llama" && type != "mistral" && type != "qwen2") {
    throw std::invalid_argument(fmt::format(
        "--model {}: model_type \"{}\": zero-mem plans gpt2, llama, mistral and qwen2 models; "
        "give another's size with --params and --largest-layer",
        file.string(), type));
  }
  try {
    if (type == "gpt2") {
      const gpt::GptConfig c = gpt::from_hf(config);
      ModelShape model = gpt_model(GptShape{c, 4 * std::int64_t{c.channels}}, weight_decay);
      model.description = fmt::format("{} (GPT: {})", file.string(), model.description);
      return model;
    }
    ModelShape model = llama_model(llama::LlamaConfig::from_hf(config), weight_decay);
    model.description = fmt::format("{} ({})", file.string(), model.description);
    return model;
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(fmt::format("--model {}: {}", file.string(), error.what()));
  }
}

std::vector<std::int64_t> parse_arch(const std::string& text) {
  std::vector<std::int64_t> values;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) {
      throw std::invalid_argument(
          fmt::format("--arch '{}': '{}' is not a positive whole number; expected "
                      "layers,channels,heads,vocab,positions (e.g. 80,8192,64,32000,4096)",
                      text, item));
    }
    values.push_back(v);
  }
  if (values.size() != 5) {
    throw std::invalid_argument(
        fmt::format("--arch '{}' has {} numbers; expected 5: layers,channels,heads,vocab,positions",
                    text, values.size()));
  }
  return values;
}

// The most parameters one module uses.
std::uint64_t largest_module(const engine::Registry& r) {
  std::uint64_t largest = 0;
  for (const engine::ModuleSpec& module : r.modules()) {
    std::uint64_t n = 0;
    for (std::size_t p : module.params) n += r.param(p).numel;
    largest = std::max(largest, n);
  }
  return largest;
}

// A --params beside --model must be the named model's count (within 1%).
void check_params(const ModelArgs& args, const ModelShape& model) {
  const auto count = static_cast<double>(model.params);
  if (args.params > 0 && std::fabs(args.params - count) > 0.01 * count) {
    throw std::invalid_argument(
        fmt::format("--params {} does not match --model {} ({} parameters); leave --params out",
                    args.params, args.model, model.params));
  }
}

}  // namespace

int ModelShape::layers() const {
  return gpt ? gpt->config.layers : llama ? llama->layers : 0;
}

int ModelShape::positions() const {
  return gpt ? gpt->config.max_seq : llama ? llama->max_seq : 0;
}

double ModelShape::forward_flops(int batch, int seq) const {
  if (gpt) return gpt::forward_flops(gpt->config, gpt->mlp, batch, seq);
  if (llama) return llama::forward_flops(*llama, batch, seq);
  return 0;
}

double ModelShape::block_flops(int batch, int seq) const {
  if (gpt) return gpt::block_flops(gpt->config, gpt->mlp, batch, seq);
  if (llama) return llama::block_flops(*llama, batch, seq);
  return 0;
}

models::ActivationBytes ModelShape::activation_bytes(int batch, int seq, bool checkpointing,
                                                     std::size_t element_bytes) const {
  if (gpt) {
    return gpt::activation_bytes(gpt->config, gpt->mlp, batch, seq, checkpointing, element_bytes);
  }
  if (llama) return llama::activation_bytes(*llama, batch, seq, checkpointing, element_bytes);
  return {};
}

ModelShape gpt_model(const GptShape& s, double weight_decay) {
  const gpt::GptConfig& c = s.config;
  ModelShape model{engine::Registry(weight_decay),
                   s,
                   std::nullopt,
                   static_cast<std::uint64_t>(gpt::parameters(c, s.mlp)),
                   0,
                   {}};
  engine::Registry& r = model.registry;
  const std::size_t no_decay = r.add_group("no_decay", 0.0, 1.0);
  const std::size_t embed = r.add_module("embed");
  std::vector<std::size_t> blocks;
  for (int l = 0; l < c.layers; ++l) blocks.push_back(r.add_module(fmt::format("h.{}", l)));
  const std::size_t head = r.add_module("head");
  const std::int64_t C = c.channels, F = s.mlp;
  r.add_param("wte.weight", {c.vocab, C}, true, 0, {embed, head});
  r.add_param("wpe.weight", {c.max_seq, C}, true, 0, {embed});
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = fmt::format("h.{}.", l);
    const std::vector<std::size_t> m{blocks[static_cast<std::size_t>(l)]};
    r.add_param(h + "ln_1.weight", {C}, true, no_decay, m);
    r.add_param(h + "ln_1.bias", {C}, true, no_decay, m);
    r.add_param(h + "attn.c_attn.weight", {3 * C, C}, true, 0, m);
    r.add_param(h + "attn.c_attn.bias", {3 * C}, true, no_decay, m);
    r.add_param(h + "attn.c_proj.weight", {C, C}, true, 0, m);
    r.add_param(h + "attn.c_proj.bias", {C}, true, no_decay, m);
    r.add_param(h + "ln_2.weight", {C}, true, no_decay, m);
    r.add_param(h + "ln_2.bias", {C}, true, no_decay, m);
    r.add_param(h + "mlp.c_fc.weight", {F, C}, true, 0, m);
    r.add_param(h + "mlp.c_fc.bias", {F}, true, no_decay, m);
    r.add_param(h + "mlp.c_proj.weight", {C, F}, true, 0, m);
    r.add_param(h + "mlp.c_proj.bias", {C}, true, no_decay, m);
  }
  r.add_param("ln_f.weight", {C}, true, no_decay, {head});
  r.add_param("ln_f.bias", {C}, true, no_decay, {head});
  model.largest_layer = largest_module(r);
  model.description =
      fmt::format("GPT: {} layers, {} channels, {} heads, MLP {}, vocabulary {}, {} positions",
                  c.layers, c.channels, c.heads, s.mlp, c.vocab, c.max_seq);
  return model;
}

ModelShape llama_model(const llama::LlamaConfig& c, double weight_decay) {
  ModelShape model{engine::Registry(weight_decay),
                   std::nullopt,
                   c,
                   static_cast<std::uint64_t>(c.parameters()),
                   0,
                   {}};
  engine::Registry& r = model.registry;
  const std::size_t no_decay = r.add_group("no_decay", 0.0, 1.0);
  const std::size_t embed = r.add_module("embed");
  std::vector<std::size_t> blocks;
  for (int l = 0; l < c.layers; ++l) blocks.push_back(r.add_module(fmt::format("layers.{}", l)));
  const std::size_t head = r.add_module("head");
  const std::int64_t C = c.channels, hd = c.head_size();
  const std::int64_t Q = c.heads * hd, KV = c.kv_heads * hd, F = c.intermediate;
  std::vector<std::size_t> embed_modules{embed};
  if (c.tied) embed_modules.push_back(head);
  r.add_param("model.embed_tokens.weight", {c.vocab, C}, true, 0, embed_modules);
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = fmt::format("model.layers.{}.", l);
    const std::vector<std::size_t> m{blocks[static_cast<std::size_t>(l)]};
    r.add_param(h + "input_layernorm.weight", {C}, true, no_decay, m);
    r.add_param(h + "self_attn.q_proj.weight", {Q, C}, true, 0, m);
    if (c.qkv_bias) r.add_param(h + "self_attn.q_proj.bias", {Q}, true, no_decay, m);
    r.add_param(h + "self_attn.k_proj.weight", {KV, C}, true, 0, m);
    if (c.qkv_bias) r.add_param(h + "self_attn.k_proj.bias", {KV}, true, no_decay, m);
    r.add_param(h + "self_attn.v_proj.weight", {KV, C}, true, 0, m);
    if (c.qkv_bias) r.add_param(h + "self_attn.v_proj.bias", {KV}, true, no_decay, m);
    r.add_param(h + "self_attn.o_proj.weight", {C, Q}, true, 0, m);
    r.add_param(h + "post_attention_layernorm.weight", {C}, true, no_decay, m);
    r.add_param(h + "mlp.gate_proj.weight", {F, C}, true, 0, m);
    r.add_param(h + "mlp.up_proj.weight", {F, C}, true, 0, m);
    r.add_param(h + "mlp.down_proj.weight", {C, F}, true, 0, m);
  }
  r.add_param("model.norm.weight", {C}, true, no_decay, {head});
  if (!c.tied) r.add_param("lm_head.weight", {c.vocab, C}, true, 0, {head});
  model.largest_layer = largest_module(r);
  model.description = fmt::format(
      "{}: {} layers, {} channels, {} heads over {} key/value heads of {}, MLP {}, vocabulary "
      "{}, {} positions{}",
      c.family, c.layers, c.channels, c.heads, c.kv_heads, hd, F, c.vocab, c.max_seq,
      c.tied ? ", tied head" : "");
  return model;
}

bool holds_weights(const std::string& model) {
  const std::filesystem::path dir(model);
  std::error_code error;
  return std::filesystem::is_regular_file(dir / "model.safetensors", error) ||
         std::filesystem::is_regular_file(dir / "model.safetensors.index.json", error);
}

ModelShape build_model(const ModelArgs& args) {
  const int given = !args.model.empty() + !args.arch.empty() + (args.largest_layer > 0);
  if (given > 1) {
    throw std::invalid_argument("give one of --model, --arch and --largest-layer");
  }
  if (!args.model.empty()) {
    if (const std::filesystem::path file = hf_config_path(args.model); !file.empty()) {
      ModelShape model = hf_model(file, args.weight_decay);
      check_params(args, model);
      return model;
    }
  }
  if (!args.model.empty() && llama::LlamaConfig::is_name(args.model)) {
    ModelShape model = llama_model(llama::LlamaConfig::by_name(args.model), args.weight_decay);
    check_params(args, model);
    model.description = args.model + " (" + model.description + ")";
    return model;
  }
  if (!args.model.empty()) {
    gpt::GptConfig c;
    try {
      c = gpt::GptConfig::by_name(args.model);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(fmt::format(
          "--model: unknown model '{}': use a GPT (tiny, gpt2-124m, gpt2-350m, gpt2-774m, "
          "gpt2-1.5b) or a Llama family model ({})",
          args.model, fmt::join(llama::LlamaConfig::names(), ", ")));
    }
    const GptShape s{c, 4 * std::int64_t{c.channels}};
    ModelShape model = gpt_model(s, args.weight_decay);
    check_params(args, model);
    model.description = args.model + ": " + model.description;
    return model;
  }
  if (!args.arch.empty()) {
    const auto v = parse_arch(args.arch);
    GptShape s{{static_cast<int>(v[0]), static_cast<int>(v[2]), static_cast<int>(v[1]),
                static_cast<int>(v[4]), static_cast<int>(v[3])},
               4 * v[1]};
    if (s.config.channels % s.config.heads != 0) {
      throw std::invalid_argument(fmt::format("--arch: {} channels do not split over {} heads",
                                              s.config.channels, s.config.heads));
    }
    if (args.params > 0) {
      // The MLP's width that brings the count to --params (GPT-2's 4C, or e.g. a SwiGLU MLP's
      // three matrices folded into two of the same total).
      // The count is linear in the width: what the rest holds, and what each unit adds.
      const auto fixed = static_cast<double>(gpt::parameters(s.config, 0));
      const auto per_width = static_cast<double>(gpt::parameters(s.config, 1)) - fixed;
      s.mlp = std::llround((args.params - fixed) / per_width);
      if (s.mlp < 1) {
        throw std::invalid_argument(fmt::format(
            "--params {} is fewer than --arch {} has without its MLP ({:.4g}); raise --params or "
            "leave it out",
            args.params, args.arch, fixed));
      }
    }
    return gpt_model(s, args.weight_decay);
  }
  if (args.params <= 0) {
    throw std::invalid_argument(
        "say what the model is: --model NAME, --arch layers,channels,heads,vocab,positions, or "
        "--params P with --largest-layer N");
  }
  if (args.largest_layer <= 0) {
    throw std::invalid_argument(
        "--params alone does not say how the model splits into layers: add --largest-layer N "
        "(the most parameters one layer holds), or give --arch or --model");
  }
  const auto total = static_cast<std::uint64_t>(std::llround(args.params));
  const auto layer = static_cast<std::uint64_t>(std::llround(args.largest_layer));
  if (layer > total) {
    throw std::invalid_argument(
        fmt::format("--largest-layer {} is more than --params {}", layer, total));
  }
  ModelShape model{
      engine::Registry(args.weight_decay), std::nullopt, std::nullopt, total, layer, {}};
  const std::uint64_t full = total / layer, rest = total % layer;
  for (std::uint64_t l = 0; l < full + (rest != 0); ++l) {
    const std::size_t m = model.registry.add_module(fmt::format("layer.{}", l));
    const std::uint64_t n = l < full ? layer : rest;
    model.registry.add_param(fmt::format("layer.{}.weight", l), {static_cast<std::int64_t>(n)},
                             true, 0, {m});
  }
  model.description =
      fmt::format("{} parameters in {} layers of at most {}", total, full + (rest != 0), layer);
  return model;
}

}  // namespace zero::mem
