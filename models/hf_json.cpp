// Typed reads of a Hugging Face config.json (hf_json.h).
#include "models/hf_json.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>

namespace zero::models::hf_json {
namespace {

using json = nlohmann::json;

std::string path(const std::string& within, const std::string& key) {
  return within.empty() ? key : within + "." + key;
}

}  // namespace

void refuse(const std::string& key, const std::string& what) {
  throw std::invalid_argument("config.json: \"" + key + "\" " + what);
}

std::optional<json> find(const json& object, const std::string& within, const std::string& key) {
  if (!object.is_object()) refuse(within, "must be a JSON object, not " + object.dump());
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  return *it;
}

int positive_int(const json& object, const std::string& within, const std::string& key,
                 std::optional<int> fallback) {
  const std::optional<json> v = find(object, within, key);
  if (!v) {
    if (fallback) return *fallback;
    refuse(path(within, key), "is missing");
  }
  if (!v->is_number_integer() || v->get<std::int64_t>() < 1 ||
      v->get<std::int64_t>() > (std::int64_t{1} << 30)) {
    refuse(path(within, key), "must be a positive integer (at most 2^30), not " + v->dump());
  }
  return v->get<int>();
}

double number(const json& object, const std::string& within, const std::string& key,
              double fallback) {
  const std::optional<json> v = find(object, within, key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>())) {
    refuse(path(within, key), "must be a finite number, not " + v->dump());
  }
  return v->get<double>();
}

double positive_number(const json& object, const std::string& within, const std::string& key,
                       double fallback) {
  const double value = number(object, within, key, fallback);
  if (!(value > 0)) {
    refuse(path(within, key), "must be a number greater than 0, not " + json(value).dump());
  }
  return value;
}

bool boolean(const json& object, const std::string& within, const std::string& key, bool fallback) {
  const std::optional<json> v = find(object, within, key);
  if (!v) return fallback;
  if (!v->is_boolean()) refuse(path(within, key), "must be true or false, not " + v->dump());
  return v->get<bool>();
}

std::string string(const json& object, const std::string& within, const std::string& key,
                   const std::string& fallback) {
  const std::optional<json> v = find(object, within, key);
  if (!v) return fallback;
  if (!v->is_string()) refuse(path(within, key), "must be a string, not " + v->dump());
  return v->get<std::string>();
}

std::optional<json> object(const json& object, const std::string& within, const std::string& key) {
  const std::optional<json> v = find(object, within, key);
  if (v && !v->is_object()) {
    refuse(path(within, key), "must be a JSON object (or null), not " + v->dump());
  }
  return v;
}

}  // namespace zero::models::hf_json
