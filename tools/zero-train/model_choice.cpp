// zero-train's model (model_choice.h).
#include "tools/zero-train/model_choice.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "models/gpt/cuda_model.h"
#include "models/gpt/hf_config.h"
#include "models/gpt/model.h"
#include "models/gpu_info.h"
#include "models/llama/cuda_model.h"
#include "models/llama/model.h"

namespace zero::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// --init's config.json, when --init is a directory that has one.
std::optional<json> init_config(const std::string& init) {
  if (init.empty() || !fs::is_directory(init)) return std::nullopt;
  const fs::path path = fs::path(init) / "config.json";
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  json c = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (c.is_discarded() || !c.is_object()) {
    throw std::invalid_argument(
        fmt::format("--init {}: {} is not a JSON object", init, path.string()));
  }
  return c;
}

}  // namespace

ModelChoice ModelChoice::from_options(const TrainOptions& o) {
  ModelChoice m;
  if (!o.model.empty()) {
    m.name_ = o.model;
    if (llama::LlamaConfig::is_name(o.model)) {
      m.llama_ = llama::LlamaConfig::by_name(o.model);
    } else {
      try {
        m.gpt_ = gpt::GptConfig::by_name(o.model);
      } catch (const std::invalid_argument&) {
        std::string names;
        for (const std::string& n : llama::LlamaConfig::names()) names += ", " + n;
        throw std::invalid_argument(
            fmt::format("--model: unknown model '{}'; use tiny, gpt2-124m, gpt2-350m, gpt2-774m, "
                        "gpt2-1.5b{}, or "
                        "leave it out and give --init a Hugging Face directory with a config.json",
                        o.model, names));
      }
    }
  } else if (const std::optional<json> c = init_config(o.init)) {
    const std::string type = c->value("model_type", std::string());
    m.name_ = fmt::format("{} ({})", fs::path(o.init).filename().string(), type);
    try {
      if (type == "gpt2") {
        m.gpt_ = gpt::from_hf(*c);
      } else {
        m.llama_ = llama::LlamaConfig::from_hf(*c);
      }
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(fmt::format("--init {}: {}", o.init, e.what()));
    }
  } else {
    m.name_ = "tiny";
    m.gpt_ = gpt::GptConfig::by_name("tiny");
  }
  if (m.gpt_) {
    if (o.kv_heads || o.intermediate) {
      throw std::invalid_argument(fmt::format(
          "--kv-heads and --intermediate size a Llama-family model; {} is a GPT (MLP 4 x "
          "channels, a key and value per head)",
          m.name_));
    }
    gpt::GptConfig& c = *m.gpt_;
    if (o.layers) c.layers = *o.layers;
    if (o.heads) c.heads = *o.heads;
    if (o.channels) c.channels = *o.channels;
    if (o.positions) c.max_seq = *o.positions;
    if (o.vocab) c.vocab = *o.vocab;
  } else {
    llama::LlamaConfig& c = *m.llama_;
    if (o.layers) c.layers = *o.layers;
    if (o.heads) c.heads = *o.heads;
    if (o.kv_heads) c.kv_heads = *o.kv_heads;
    if (o.heads && !o.kv_heads && c.heads % c.kv_heads != 0) {
      throw std::invalid_argument(fmt::format(
          "--heads {} does not split over {}'s {} key/value heads: give --kv-heads too (a "
          "divisor of {}; {} for a key and value per head)",
          c.heads, m.name_, c.kv_heads, c.heads, c.heads));
    }
    if (o.channels) c.channels = *o.channels;
    if (o.intermediate) c.intermediate = *o.intermediate;
    if (o.positions) c.max_seq = *o.positions;
    if (o.vocab) c.vocab = *o.vocab;
    if (o.channels || o.heads) c.head_dim = 0;  // channels / heads again
    c.validate();
  }
  return m;
}

int ModelChoice::max_seq() const noexcept {
  return gpt_ ? gpt_->max_seq : llama_->max_seq;
}
int ModelChoice::vocab() const noexcept {
  return gpt_ ? gpt_->vocab : llama_->vocab;
}
int ModelChoice::layers() const noexcept {
  return gpt_ ? gpt_->layers : llama_->layers;
}

std::int64_t ModelChoice::parameters() const {
  return gpt_ ? gpt_->parameters() : llama_->parameters();
}

std::string ModelChoice::shape() const {
  if (gpt_) {
    return fmt::format("GPT-2: {} layers, {} heads, {} channels, {} positions, vocabulary {}",
                       gpt_->layers, gpt_->heads, gpt_->channels, gpt_->max_seq, gpt_->vocab);
  }
  const llama::LlamaConfig& c = *llama_;
  std::string extras;
  if (c.qkv_bias) extras += ", q/k/v biases";
  if (c.tied) extras += ", tied head";
  if (c.sliding_window > 0) extras += fmt::format(", window {}", c.sliding_window);
  if (c.rope_scaling.type != "default") {
    extras += fmt::format(", {} rope scaling x{}", c.rope_scaling.type, c.rope_scaling.factor);
  }
  return fmt::format(
      "{}: {} layers, {} heads over {} key/value heads, {} channels, MLP {}, {} positions, "
      "vocabulary {}, rope theta {}{}",
      c.family, c.layers, c.heads, c.kv_heads, c.channels, c.intermediate, c.max_seq, c.vocab,
      c.rope_theta, extras);
}

json ModelChoice::hf_config() const {
  return gpt_ ? gpt::to_hf(*gpt_) : llama_->to_hf();
}

std::unique_ptr<models::CausalLm> ModelChoice::build(zero_engine* engine, int batch, int seq,
                                                     std::uint64_t seed,
                                                     const models::ActivationOptions& options,
                                                     bool cuda) const {
  if (cuda) {
    if (gpt_) return gpt::make_cuda_gpt(engine, *gpt_, batch, seq, seed, options);
    return llama::make_cuda_llama(engine, *llama_, batch, seq, seed, options);
  }
  if (gpt_) return std::make_unique<gpt::Gpt>(engine, *gpt_, batch, seq, seed, options);
  return std::make_unique<llama::Llama>(engine, *llama_, batch, seq, seed, options);
}

double ModelChoice::flops_per_token(int seq) const {
  if (gpt_) {
    // GPT-2's position table is a lookup; the tied token table multiplies (the output head).
    const std::int64_t lookup = static_cast<std::int64_t>(gpt_->max_seq) * gpt_->channels;
    return models::palm_flops_per_token(gpt_->parameters() - lookup, gpt_->layers, gpt_->channels,
                                        seq);
  }
  const llama::LlamaConfig& c = *llama_;
  // An untied token table is a lookup only; tied, it is the output head too (counted once).
  const std::int64_t lookup = c.tied ? 0 : static_cast<std::int64_t>(c.vocab) * c.channels;
  return models::palm_flops_per_token(c.parameters() - lookup, c.layers, c.heads * c.head_size(),
                                      seq);
}

}  // namespace zero::train
