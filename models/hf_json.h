// Typed reads of a Hugging Face config.json, shared by the model families' readers: each value
// is checked for its type and range, and every refusal is a std::invalid_argument that names
// the file and the key ("config.json: \"rope_parameters.rope_theta\" must be a positive
// number, not -5"), never a JSON library's message without either.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace zero::models::hf_json {

// Refuses `key` with `what` ("must be ...", "is ...").
[[noreturn]] void refuse(const std::string& key, const std::string& what);

// The value at `key` of `object` (whose own key, for messages, is `within`: "" at the top),
// or nullopt where it is missing or null.
std::optional<nlohmann::json> find(const nlohmann::json& object, const std::string& within,
                                   const std::string& key);

// A positive integer up to 2^30; `fallback` where missing (nullopt: required).
int positive_int(const nlohmann::json& object, const std::string& within, const std::string& key,
                 std::optional<int> fallback = std::nullopt);
// A finite number; `fallback` where missing.
double number(const nlohmann::json& object, const std::string& within, const std::string& key,
              double fallback);
// A finite number greater than 0; `fallback` where missing.
double positive_number(const nlohmann::json& object, const std::string& within,
                       const std::string& key, double fallback);
bool boolean(const nlohmann::json& object, const std::string& within, const std::string& key,
             bool fallback);
std::string string(const nlohmann::json& object, const std::string& within, const std::string& key,
                   const std::string& fallback);
// An object (nullopt where missing or null); anything else is refused.
std::optional<nlohmann::json> object(const nlohmann::json& object, const std::string& within,
                                     const std::string& key);

}  // namespace zero::models::hf_json
