// The Llama family's sizes (config.h).
#include "models/llama/config.h"

#include <cmath>
#include <optional>
#include <stdexcept>

#include "models/hf_json.h"

namespace zero::llama {
namespace {

using json = nlohmann::json;

LlamaConfig make(const char* family, int layers, int heads, int kv_heads, int channels,
                 int intermediate, int max_seq, int vocab, double theta, double eps, bool tied) {
  LlamaConfig c;
  c.family = family;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.channels = channels;
  c.intermediate = intermediate;
  c.max_seq = max_seq;
  c.vocab = vocab;
  c.rope_theta = theta;
  c.norm_eps = eps;
  c.tied = tied;
  return c;
}

RopeScaling llama3_scaling(double factor) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = factor;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position = 8192;
  return s;
}

namespace hf = models::hf_json;

// One of rope_parameters (transformers 5) and rope_scaling (earlier files): its kind, under
// "rope_type" or the older "type", and its numbers.
RopeScaling scaling_of(const json& s, const std::string& key) {
  RopeScaling r;
  const std::string kind = hf::string(s, key, "rope_type", "");
  const std::string old_kind = hf::string(s, key, "type", "");
  if (!kind.empty() && !old_kind.empty() && kind != old_kind) {
    hf::refuse(key,
               "says \"rope_type\": \"" + kind + "\" and \"type\": \"" + old_kind + "\"; keep one");
  }
  r.type = !kind.empty() ? kind : !old_kind.empty() ? old_kind : "default";
  if (r.type != "default" && r.type != "linear" && r.type != "llama3") {
    hf::refuse(key, "asks for \"" + r.type +
                        "\" rotary scaling: supported are default, linear and llama3");
  }
  if (r.type == "default") return r;
  r.factor = hf::positive_number(s, key, "factor", 1.0);
  if (r.type == "llama3") {
    r.low_freq_factor = hf::positive_number(s, key, "low_freq_factor", 1.0);
    r.high_freq_factor = hf::positive_number(s, key, "high_freq_factor", 4.0);
    if (r.high_freq_factor <= r.low_freq_factor) {
      hf::refuse(key + ".high_freq_factor",
                 "must be greater than low_freq_factor (" + json(r.low_freq_factor).dump() + ")");
    }
    r.original_max_position = hf::positive_int(s, key, "original_max_position_embeddings", 8192);
  }
  return r;
}

bool same(const RopeScaling& a, const RopeScaling& b) {
  return a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position == b.original_max_position;
}

// The rotary settings: theta and scaling in transformers 5's rope_parameters, or rope_theta and
// rope_scaling at the top as earlier files have them. Both are read; where both say something
// they must agree, or the file is refused naming both (transformers would pick one of them).
void read_rope(const json& c, LlamaConfig& out) {
  const std::optional<json> parameters = hf::object(c, "", "rope_parameters");
  const std::optional<json> scaling = hf::object(c, "", "rope_scaling");
  const bool top_theta = hf::find(c, "", "rope_theta").has_value();
  out.rope_theta = hf::positive_number(c, "", "rope_theta", 10000.0);
  if (parameters && hf::find(*parameters, "rope_parameters", "rope_theta")) {
    const double theta = hf::positive_number(*parameters, "rope_parameters", "rope_theta", 0);
    if (top_theta && theta != out.rope_theta) {
      hf::refuse("rope_parameters.rope_theta",
                 "is " + json(theta).dump() + " but \"rope_theta\" is " +
                     json(out.rope_theta).dump() + "; keep one, or make them equal");
    }
    out.rope_theta = theta;
  }
  const RopeScaling from_parameters =
      parameters ? scaling_of(*parameters, "rope_parameters") : RopeScaling{};
  const RopeScaling from_scaling = scaling ? scaling_of(*scaling, "rope_scaling") : RopeScaling{};
  if (parameters && scaling && !same(from_parameters, from_scaling)) {
    hf::refuse("rope_scaling",
               "(\"" + from_scaling.type + "\") disagrees with \"rope_parameters\" (\"" +
                   from_parameters.type + "\"); keep one of them, or make them say the same");
  }
  out.rope_scaling = parameters ? from_parameters : from_scaling;
}

}  // namespace

const std::vector<std::string>& LlamaConfig::names() {
  static const std::vector<std::string> all{"llama-tiny",   "llama-3.2-1b", "llama-3.2-3b",
                                            "llama-3.1-8b", "llama-2-13b",  "llama-3.1-70b",
                                            "mistral-7b",   "qwen2.5-0.5b", "qwen2.5-7b"};
  return all;
}

bool LlamaConfig::is_name(const std::string& name) {
  for (const std::string& n : names()) {
    if (n == name) return true;
  }
  return false;
}

LlamaConfig LlamaConfig::by_name(const std::string& name) {
  if (name == "llama-tiny") return make("llama", 4, 4, 2, 128, 352, 64, 256, 10000.0, 1e-5, false);
  if (name == "llama-3.2-1b" || name == "llama-3.2-3b") {
    LlamaConfig c =
        name == "llama-3.2-1b"
            ? make("llama", 16, 32, 8, 2048, 8192, 131072, 128256, 500000.0, 1e-5, true)
            : make("llama", 28, 24, 8, 3072, 8192, 131072, 128256, 500000.0, 1e-5, true);
    c.rope_scaling = llama3_scaling(32.0);
    return c;
  }
  if (name == "llama-3.1-8b" || name == "llama-3.1-70b") {
    LlamaConfig c =
        name == "llama-3.1-8b"
            ? make("llama", 32, 32, 8, 4096, 14336, 131072, 128256, 500000.0, 1e-5, false)
            : make("llama", 80, 64, 8, 8192, 28672, 131072, 128256, 500000.0, 1e-5, false);
    c.rope_scaling = llama3_scaling(8.0);
    return c;
  }
  if (name == "llama-2-13b")
    return make("llama", 40, 40, 40, 5120, 13824, 4096, 32000, 10000.0, 1e-5, false);
  if (name == "mistral-7b") {
    LlamaConfig c = make("mistral", 32, 32, 8, 4096, 14336, 32768, 32000, 10000.0, 1e-5, false);
    c.sliding_window = 4096;
    return c;
  }
  if (name == "qwen2.5-0.5b" || name == "qwen2.5-7b") {
    LlamaConfig c =
        name == "qwen2.5-0.5b"
            ? make("qwen2", 24, 14, 2, 896, 4864, 32768, 151936, 1000000.0, 1e-6, true)
            : make("qwen2", 28, 28, 4, 3584, 18944, 131072, 152064, 1000000.0, 1e-6, false);
    c.qkv_bias = true;
    return c;
  }
  std::string list;
  for (const std::string& n : names()) list += (list.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown Llama-family model '" + name + "': use " + list);
}

LlamaConfig LlamaConfig::from_hf(const json& c) {
  if (!c.is_object()) throw std::invalid_argument("config.json: not a JSON object");
  LlamaConfig out;
  const std::string type = hf::string(c, "", "model_type", "");
  if (type != "llama" && type != "mistral" && type != "qwen2") {
    hf::refuse("model_type",
               "is \"" + type + "\": the Llama-family model reads llama, mistral and qwen2");
  }
  out.family = type;
  out.layers = hf::positive_int(c, "", "num_hidden_layers");
  out.heads = hf::positive_int(c, "", "num_attention_heads");
  out.kv_heads = hf::positive_int(c, "", "num_key_value_heads", out.heads);
  out.channels = hf::positive_int(c, "", "hidden_size");
  out.intermediate = hf::positive_int(c, "", "intermediate_size");
  out.max_seq = hf::positive_int(c, "", "max_position_embeddings");
  out.vocab = hf::positive_int(c, "", "vocab_size");
  out.head_dim = hf::positive_int(c, "", "head_dim", 0);
  out.norm_eps = hf::positive_number(c, "", "rms_norm_eps", 1e-6);
  out.tied = hf::boolean(c, "", "tie_word_embeddings", false);
  if (const std::string act = hf::string(c, "", "hidden_act", "silu"); act != "silu") {
    hf::refuse("hidden_act", "is \"" + act + "\": the Llama-family model's MLP is SwiGLU (silu)");
  }
  if (type == "qwen2") {
    out.qkv_bias = true;
    if (hf::boolean(c, "", "use_sliding_window", false)) {
      hf::refuse("use_sliding_window",
                 "is true: Qwen2's per-layer sliding window is not supported");
    }
  } else {
    if (hf::boolean(c, "", "attention_bias", false)) {
      hf::refuse("attention_bias", "is true: only Qwen2's q, k and v biases are supported");
    }
    if (hf::boolean(c, "", "mlp_bias", false)) {
      hf::refuse("mlp_bias", "is true: MLP biases are not supported");
    }
  }
  if (type == "mistral") out.sliding_window = hf::positive_int(c, "", "sliding_window", 0);
  read_rope(c, out);
  out.validate();
  return out;
}

json LlamaConfig::to_hf(const std::string& torch_dtype) const {
  static const char* const kArchitecture[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                              "Qwen2ForCausalLM"};
  const int which = family == "mistral" ? 1 : family == "qwen2" ? 2 : 0;
  json c = json::object();
  c["architectures"] = json::array({kArchitecture[which]});
  c["model_type"] = family;
  c["hidden_size"] = channels;
  c["intermediate_size"] = intermediate;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  c["head_dim"] = head_size();
  c["max_position_embeddings"] = max_seq;
  c["vocab_size"] = vocab;
  c["hidden_act"] = "silu";
  c["rms_norm_eps"] = norm_eps;
  c["rope_theta"] = rope_theta;
  if (rope_scaling.type == "default") {
    c["rope_scaling"] = nullptr;
  } else {
    json s = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
    if (rope_scaling.type == "llama3") {
      s["low_freq_factor"] = rope_scaling.low_freq_factor;
      s["high_freq_factor"] = rope_scaling.high_freq_factor;
      s["original_max_position_embeddings"] = rope_scaling.original_max_position;
    }
    c["rope_scaling"] = s;
  }
  c["tie_word_embeddings"] = tied;
  if (family == "llama") {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  if (family == "mistral")
    c["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  if (family == "qwen2") c["use_sliding_window"] = false;
  c["torch_dtype"] = torch_dtype;
  return c;
}

void LlamaConfig::validate() const {
  auto positive = [](int v, const char* what) {
    if (v < 1)
      throw std::invalid_argument(std::string(what) + " must be at least 1, not " +
                                  std::to_string(v));
  };
  positive(layers, "layers");
  positive(heads, "heads");
  positive(kv_heads, "key/value heads");
  positive(channels, "channels");
  positive(intermediate, "the MLP's width");
  positive(max_seq, "positions");
  positive(vocab, "the vocabulary");
  if (heads % kv_heads != 0) {
    throw std::invalid_argument(std::to_string(heads) + " attention heads do not split over " +
                                std::to_string(kv_heads) + " key/value heads");
  }
  if (head_dim == 0 && channels % heads != 0) {
    throw std::invalid_argument("channels " + std::to_string(channels) + " do not split over " +
                                std::to_string(heads) + " heads");
  }
  if (head_size() % 2 != 0) {
    throw std::invalid_argument("the head size " + std::to_string(head_size()) +
                                " is odd: rotary embeddings turn pairs of channels");
  }
  if (!(rope_theta > 0) || !std::isfinite(rope_theta)) {
    throw std::invalid_argument(
        "the rotary base (rope theta) must be a finite number greater "
        "than 0, not " +
        nlohmann::json(rope_theta).dump());
  }
  if (rope_scaling.type != "default" && rope_scaling.factor <= 0) {
    throw std::invalid_argument("the rotary scaling factor must be positive");
  }
}

std::int64_t LlamaConfig::parameters() const {
  const std::int64_t C = channels, F = intermediate, hd = head_size();
  const std::int64_t q = heads * hd, kv = kv_heads * hd;
  const std::int64_t attention = C * q + 2 * C * kv + q * C + (qkv_bias ? q + 2 * kv : 0);
  const std::int64_t block = 2 * C + attention + 3 * C * F;
  const std::int64_t embedding = static_cast<std::int64_t>(vocab) * C;
  return embedding * (tied ? 1 : 2) + layers * block + C;
}

std::vector<double> LlamaConfig::inv_freq() const {
  const int hd = head_size();
  std::vector<double> f(static_cast<std::size_t>(hd / 2));
  for (int i = 0; i < hd / 2; ++i) {
    // As transformers computes it: theta^(2i / hd) in float32 (the exponent is rounded first).
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
    f[static_cast<std::size_t>(i)] =
        static_cast<double>(1.0f / std::pow(static_cast<float>(rope_theta), exponent));
  }
  const RopeScaling& s = rope_scaling;
  if (s.type == "linear") {
    for (double& v : f) v /= s.factor;
  } else if (s.type == "llama3") {
    const double low_wavelen = s.original_max_position / s.low_freq_factor;
    const double high_wavelen = s.original_max_position / s.high_freq_factor;
    for (double& v : f) {
      const double wavelen = 2 * M_PI / v;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        v /= s.factor;
        continue;
      }
      const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      v = (1 - smooth) * v / s.factor + smooth * v;
    }
  }
  return f;
}

models::ActivationBytes activation_bytes(const LlamaConfig& c, int batch, int seq,
                                         bool checkpointing, std::size_t element_bytes) {
  const std::uint64_t N = static_cast<std::uint64_t>(batch) * static_cast<std::uint64_t>(seq);
  const std::uint64_t C = static_cast<std::uint64_t>(c.channels);
  const std::uint64_t hd = static_cast<std::uint64_t>(c.head_size());
  const std::uint64_t Q = static_cast<std::uint64_t>(c.heads) * hd;
  const std::uint64_t KV = static_cast<std::uint64_t>(c.kv_heads) * hd;
  const std::uint64_t F = static_cast<std::uint64_t>(c.intermediate);
  const std::uint64_t V = static_cast<std::uint64_t>(c.vocab);
  const std::uint64_t L = static_cast<std::uint64_t>(c.layers);
  const std::uint64_t scores = N * static_cast<std::uint64_t>(c.heads) *
                               static_cast<std::uint64_t>(seq);  // batch * heads * seq * seq
  // A block's: the first norm's output and rstd, q k v, the attention's probabilities and
  // output, the residual, the second norm's output and rstd, the gate, up and their product.
  const std::uint64_t block = 3 * N * C + 2 * N + 2 * N * Q + 2 * N * KV + 3 * N * F + scores;
  // Beside the blocks: the embedding's output, the final norm's output and rstd, logits,
  // probabilities and losses.
  const std::uint64_t common = 2 * N * C + 2 * N + 2 * N * V;
  models::ActivationBytes a;
  // Every block keeps its output; a checkpointed block nothing else, and one block's worth is
  // where the recomputation puts its activations.
  a.kept = (common + L * N * C + (checkpointing ? block : L * block)) * element_bytes;
  // Backward's buffers: the MLP's three hidden gradients, q's and the attention output's, k's
  // and v's, the scores', four of C, the losses' and the logits'.
  a.workspace =
      (3 * N * F + 2 * N * Q + 2 * N * KV + scores + 4 * N * C + N + N * V) * element_bytes;
  return a;
}

double block_flops(const LlamaConfig& c, int batch, int seq) {
  const double N = static_cast<double>(batch) * seq, C = c.channels, hd = c.head_size();
  const double q = c.heads * hd, kv = c.kv_heads * hd;
  // q, k, v and o projections, the gate, up and down projections; causal attention's scores and
  // weighted sum (halved by the mask).
  return 2.0 * N * (C * q + 2 * C * kv + q * C + 3 * C * c.intermediate) + 2.0 * N * seq * q;
}

double forward_flops(const LlamaConfig& c, int batch, int seq) {
  const double N = static_cast<double>(batch) * seq;
  return c.layers * block_flops(c, batch, seq) + 2.0 * N * c.channels * c.vocab;
}

}  // namespace zero::llama
