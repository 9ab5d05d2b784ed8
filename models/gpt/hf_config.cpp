// GPT-2's Hugging Face config.json (hf_config.h).
#include "models/gpt/hf_config.h"

#include <cmath>
#include <stdexcept>

#include "models/hf_json.h"

namespace zero::gpt {
namespace {

using json = nlohmann::json;

namespace hf = models::hf_json;

}  // namespace

GptConfig from_hf(const json& c) {
  if (!c.is_object()) throw std::invalid_argument("config.json: not a JSON object");
  if (const std::string type = hf::string(c, "", "model_type", ""); type != "gpt2") {
    hf::refuse("model_type", "is \"" + type + "\", not gpt2");
  }
  GptConfig g;
  g.layers = hf::positive_int(c, "", "n_layer");
  g.heads = hf::positive_int(c, "", "n_head");
  g.channels = hf::positive_int(c, "", "n_embd");
  g.max_seq = hf::positive_int(c, "", "n_positions");
  g.vocab = hf::positive_int(c, "", "vocab_size");
  if (const auto inner = hf::find(c, "", "n_inner"); inner && *inner != json(4 * g.channels)) {
    hf::refuse("n_inner", "is " + inner->dump() + ": the reference GPT's MLP is 4 * n_embd wide");
  }
  if (const std::string act = hf::string(c, "", "activation_function", "gelu_new");
      act != "gelu_new" && act != "gelu_pytorch_tanh") {
    hf::refuse("activation_function",
               "is \"" + act + "\": the reference GPT uses GELU's tanh form (gelu_new)");
  }
  if (!hf::boolean(c, "", "tie_word_embeddings", true)) {
    hf::refuse("tie_word_embeddings", "is false: the reference GPT's head is the token embedding");
  }
  if (const double eps = hf::positive_number(c, "", "layer_norm_epsilon", 1e-5);
      std::fabs(eps - 1e-5) > 1e-12) {
    hf::refuse("layer_norm_epsilon",
               "is " + json(eps).dump() + ": the reference GPT's LayerNorm uses 1e-5");
  }
  if (g.channels % g.heads != 0) hf::refuse("n_embd", "does not split over n_head heads");
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
