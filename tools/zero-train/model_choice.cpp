// zero-train's model (model_choice.h).
#include "tools/zero-train/model_choice.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "models/gpt/cuda_model.h"
#include "models/gpt/hf_config.h"
#include "models/gpt/model.h"
#include "models/gpu_info.h"
#include "models/hf_json.h"
#include "models/llama/cuda_model.h"
#include "models/llama/model.h"

namespace zero::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// --init DIR's `name` (config.json, generation_config.json), when --init is a directory that
// has one; refused when it is not a regular file (a FIFO would wait forever) or not an object.
std::optional<json> init_file(const std::string& init, const char* name) {
  if (init.empty() || !fs::is_directory(init)) return std::nullopt;
  const fs::path path = fs::path(init) / name;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) return std::nullopt;
  if (!fs::is_regular_file(status)) {
    throw std::invalid_argument(
        fmt::format("--init {}: {} is not a regular file", init, path.string()));
  }
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
  m.init_ = o.init;
  const std::optional<json> init_config = init_file(o.init, "config.json");
  if (init_config) m.init_config_ = *init_config;
  if (const auto generation = init_file(o.init, "generation_config.json")) {
    m.generation_config_ = *generation;
  }
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
  } else if (const std::optional<json>& c = init_config) {
    try {
      const std::string type = models::hf_json::string(*c, "", "model_type", "");
      m.name_ = fmt::format("{} ({})", fs::path(o.init).filename().string(), type);
      if (type == "gpt2") {
        m.gpt_ = gpt::from_hf(*c);
      } else {
        m.llama_ = llama::LlamaConfig::from_hf(*c);
      }
    } catch (const std::invalid_argument& e) {
      // e names config.json and the key; the directory is --init's.
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
  const json own = gpt_ ? gpt::to_hf(*gpt_) : llama_->to_hf();
  if (!init_config_.is_object()) return own;
  json merged = init_config_;
  // The dtype is the export's to say; a transformers 5 file keeps rope settings in
  // rope_parameters, which the model's rope_theta and rope_scaling replace.
  for (const char* key : {"torch_dtype", "dtype", "rope_parameters"}) merged.erase(key);
  merged.update(own);
  return merged;
}

std::string ModelChoice::seq_advice(int seq) const {
  const int positions = max_seq();
  if (gpt_ && !init_.empty()) {
    return fmt::format(
        "--seq {} is longer than the {} positions of the pretrained GPT-2 in {}: its position "
        "table (wpe.weight, n_positions rows) comes with its weights and cannot grow; use --seq "
        "{} or less",
        seq, positions, init_, positions);
  }
  return fmt::format(
      "--seq {} is longer than the model's {} positions ({}): use --seq {} or less, or more "
      "positions with --positions{}",
      seq, positions, name_, positions,
      init_config_.is_object() ? " (max_position_embeddings in the directory's config.json)" : "");
}

std::string ModelChoice::largest_tensor() const {
  // Each candidate: its name, rows, columns, and the keys (config.json's, or the flags) that
  // size them.
  struct Tensor {
    const char* name;
    std::int64_t rows, cols;
    const char* row_key;
    const char* row_flag;
    const char* col_key;
    const char* col_flag;
  };
  std::vector<Tensor> tensors;
  if (gpt_) {
    const gpt::GptConfig& c = *gpt_;
    tensors = {
        {"wte.weight", c.vocab, c.channels, "vocab_size", "--vocab", "n_embd", "--channels"},
        {"wpe.weight", c.max_seq, c.channels, "n_positions", "--positions", "n_embd", "--channels"},
        {"h.<n>.mlp.c_fc.weight", c.channels, 4ll * c.channels, "n_embd", "--channels", "n_embd",
         "--channels"}};
  } else {
    const llama::LlamaConfig& c = *llama_;
    tensors = {{"model.embed_tokens.weight", c.vocab, c.channels, "vocab_size", "--vocab",
                "hidden_size", "--channels"},
               {"model.layers.<n>.mlp.up_proj.weight", c.intermediate, c.channels,
                "intermediate_size", "--intermediate", "hidden_size", "--channels"}};
  }
  const Tensor* largest = &tensors.front();
  for (const Tensor& t : tensors) {
    if (t.rows * t.cols > largest->rows * largest->cols) largest = &t;
  }
  const bool from_file = init_config_.is_object();
  return fmt::format(
      "the model has {} parameters; its largest tensor is {} [{} x {}], sized by "
      "{} and {}{}",
      parameters(), largest->name, largest->rows, largest->cols,
      from_file ? largest->row_key : largest->row_flag,
      from_file ? largest->col_key : largest->col_flag,
      from_file ? fmt::format(" in {}/config.json", init_) : std::string());
}

std::unique_ptr<models::CausalLm> ModelChoice::build(zero_engine* engine, int batch, int seq,
                                                     std::uint64_t seed,
                                                     const models::ActivationOptions& options,
                                                     bool cuda) const {
  if (cuda) {
    if (gpt_) return gpt::make_cuda_gpt(engine, *gpt_, batch, seq, seed, options);
    return llama::make_cuda_llama(engine, *llama_, batch, seq, seed, options);
  }
  if (gpt_) return gpt::make_gpt(engine, *gpt_, batch, seq, seed, options);
  return llama::make_llama(engine, *llama_, batch, seq, seed, options);
}

std::uint64_t ModelChoice::working_bytes(int batch, int seq,
                                         const models::ActivationOptions& options, bool cuda,
                                         std::size_t compute_bytes) const {
  const bool checkpointing = options.checkpoint_blocks >= layers();
  const std::size_t element = cuda ? 2 : models::kCpuActivationElement;
  const models::ActivationBytes activations =
      gpt_ ? gpt::activation_bytes(*gpt_, 4 * static_cast<std::int64_t>(gpt_->channels), batch, seq,
                                   checkpointing, element)
           : llama::activation_bytes(*llama_, batch, seq, checkpointing, element);
  if (cuda || compute_bytes >= 4) return activations.total();
  // The largest module: the token table (with GPT-2's positions) or the output head, or a block.
  const std::int64_t channels = gpt_ ? gpt_->channels : llama_->channels;
  const std::int64_t table =
      (static_cast<std::int64_t>(vocab()) + (gpt_ ? gpt_->max_seq : 0)) * channels;
  const std::int64_t blocks =
      std::max<std::int64_t>(0, parameters() - table - (llama_ && !llama_->tied ? table : 0));
  const std::int64_t largest = std::max(table, blocks / std::max(1, layers()));
  return activations.total() +
         models::cpu_compute_copy_bytes(static_cast<std::uint64_t>(largest), compute_bytes);
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
