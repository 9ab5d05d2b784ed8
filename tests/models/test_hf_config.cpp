// The model families' config.json readers (models/hf_json.h, gpt/hf_config.h, llama/config.h):
// every value of a wrong type or range is refused naming config.json and the key; rotary
// settings are read from transformers 5's rope_parameters and the older top-level keys alike,
// and refused when the two disagree.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "models/gpt/hf_config.h"
#include "models/llama/config.h"

namespace zero {
namespace {

using json = nlohmann::json;

json llama_config() {
  return json::parse(R"({"model_type": "llama", "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64,
      "intermediate_size": 128, "max_position_embeddings": 128, "vocab_size": 300})");
}

json gpt_config() {
  return json::parse(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64,
      "n_positions": 128, "vocab_size": 300})");
}

// The message of the refusal from_hf gives `config`.
std::string llama_refusal(const json& config) {
  try {
    llama::LlamaConfig::from_hf(config);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string gpt_refusal(const json& config) {
  try {
    gpt::from_hf(config);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("hf config: a rotary base that is not a positive finite number is refused by key",
          "[models]") {
  json c = llama_config();
  c["rope_theta"] = -5;
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_theta\" must be a number "
                                                 "greater than 0, not -5"));
  c["rope_theta"] = 0;
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_theta\""));
  c = llama_config();
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 0.0}};
  CHECK_THAT(llama_refusal(c),
             Catch::StartsWith("config.json: \"rope_parameters.rope_theta\" must be a number "
                               "greater than 0"));
  c = llama_config();
  c["rope_theta"] = "10000";
  CHECK_THAT(llama_refusal(c), Catch::Contains("\"rope_theta\" must be a finite number, not "
                                               "\"10000\""));
}

TEST_CASE("hf config: rope_parameters and the older rope_theta and rope_scaling are both read",
          "[models]") {
  json c = llama_config();
  c["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 5e5}};
  llama::LlamaConfig read = llama::LlamaConfig::from_hf(c);
  CHECK(read.rope_theta == 5e5);
  CHECK(read.rope_scaling.type == "linear");
  CHECK(read.rope_scaling.factor == 2.0);
  // The same said twice is fine.
  c["rope_theta"] = 5e5;
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK(llama::LlamaConfig::from_hf(c).rope_scaling.type == "linear");
  // An older rope_scaling beside rope_parameters is not ignored.
  c = llama_config();
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_scaling\" asks for "
                                                 "\"yarn\" rotary scaling"));
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_scaling\" (\"linear\") "
                                                 "disagrees with \"rope_parameters\""));
  c = llama_config();
  c["rope_theta"] = 10000.0;
  c["rope_parameters"] = {{"rope_theta", 500000.0}};
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_parameters.rope_theta\" "
                                                 "is 500000.0 but \"rope_theta\" is 10000.0"));
  // A wrong type is refused, not read as the default.
  c = llama_config();
  c["rope_parameters"] = {1, 2};
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_parameters\" must be a "
                                                 "JSON object (or null), not [1,2]"));
  c = llama_config();
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 4.0},
                       {"high_freq_factor", 1.0}};
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"rope_scaling.high_freq_factor\" "
                                                 "must be greater than low_freq_factor"));
}

TEST_CASE("hf config: every type error names config.json and the key", "[models]") {
  json c = llama_config();
  c["model_type"] = 5;
  CHECK(llama_refusal(c) == "config.json: \"model_type\" must be a string, not 5");
  c = llama_config();
  c["hidden_act"] = json::array();
  CHECK(llama_refusal(c) == "config.json: \"hidden_act\" must be a string, not []");
  c = llama_config();
  c["tie_word_embeddings"] = "yes";
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"tie_word_embeddings\" must be "
                                                 "true or false"));
  c = llama_config();
  c["sliding_window"] = -1;
  c["model_type"] = "mistral";
  CHECK_THAT(llama_refusal(c), Catch::StartsWith("config.json: \"sliding_window\" must be a "
                                                 "positive integer"));
  c = gpt_config();
  c["model_type"] = 5;
  CHECK(gpt_refusal(c) == "config.json: \"model_type\" must be a string, not 5");
  c = gpt_config();
  c["n_layer"] = "12";
  CHECK_THAT(gpt_refusal(c), Catch::StartsWith("config.json: \"n_layer\" must be a positive "
                                               "integer"));
  c = gpt_config();
  c["activation_function"] = 1;
  CHECK(gpt_refusal(c) == "config.json: \"activation_function\" must be a string, not 1");
  c = gpt_config();
  c["layer_norm_epsilon"] = "1e-5";
  CHECK_THAT(gpt_refusal(c), Catch::StartsWith("config.json: \"layer_norm_epsilon\" must be a "
                                               "finite number"));
  CHECK(gpt_refusal(gpt_config()) == "(accepted)");
  CHECK(llama_refusal(llama_config()) == "(accepted)");
}

}  // namespace zero
