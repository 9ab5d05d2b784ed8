// GPT-2's Hugging Face config.json (hf_config.h).
#include "models/gpt/hf_config.h"

#include <cmath>
#include <stdexcept>

namespace zero::gpt {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& key, const std::string& what) {
  throw std::invalid_argument("config.json: \"" + key + "\" " + what);
}

int get_int(const json& c, const char* key, int fallback) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback > 0) return fallback;
    bad(key, "is missing");
  }
  if (!it->is_number_integer() || it->get<long long>() < 1 || it->get<long long>() > (1ll << 30)) {
    bad(key, "must be a positive integer, not " + it->dump());
  }
  return it->get<int>();
}

}  // namespace

GptConfig from_hf(const json& c) {
  if (!c.is_object()) throw std::invalid_argument("config.json: not a JSON object");
  if (const std::string type = c.value("model_type", std::string()); type != "gpt2") {
    bad("model_type", "is \"" + type + "\", not gpt2");
  }
  GptConfig g;
  g.layers = get_int(c, "n_layer", 0);
  g.heads = get_int(c, "n_head", 0);
  g.channels = get_int(c, "n_embd", 0);
  g.max_seq = get_int(c, "n_positions", 0);
  g.vocab = get_int(c, "vocab_size", 0);
  if (const auto inner = c.find("n_inner");
      inner != c.end() && !inner->is_null() && *inner != json(4 * g.channels)) {
    bad("n_inner", "is " + inner->dump() + ": the reference GPT's MLP is 4 * n_embd wide");
  }
  if (const std::string act = c.value("activation_function", std::string("gelu_new"));
      act != "gelu_new" && act != "gelu_pytorch_tanh") {
    bad("activation_function",
        "is \"" + act + "\": the reference GPT uses GELU's tanh form (gelu_new)");
  }
  if (c.contains("tie_word_embeddings") && c["tie_word_embeddings"] == false) {
    bad("tie_word_embeddings", "is false: the reference GPT's head is the token embedding");
  }
  if (const auto eps = c.find("layer_norm_epsilon");
      eps != c.end() && eps->is_number() && std::fabs(eps->get<double>() - 1e-5) > 1e-12) {
    bad("layer_norm_epsilon", "is " + eps->dump() + ": the reference GPT's LayerNorm uses 1e-5");
  }
  if (g.channels % g.heads != 0) bad("n_embd", "does not split over n_head heads");
  return g;
}

json to_hf(const GptConfig& g, const std::string& torch_dtype) {
  return json{{"architectures", json::array({"GPT2LMHeadModel"})},
              {"model_type", "gpt2"},
              {"n_layer", g.layers},
              {"n_head", g.heads},
              {"n_embd", g.channels},
              {"n_positions", g.max_seq},
              {"n_ctx", g.max_seq},
              {"n_inner", nullptr},
              {"vocab_size", g.vocab},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"tie_word_embeddings", true},
              {"torch_dtype", torch_dtype}};
}

}  // namespace zero::gpt
