// GPT-2's Hugging Face layout (see hf_layout.h).
#include "models/gpt/hf_layout.h"

#include <algorithm>
#include <cctype>

namespace zero::gpt {
namespace {

bool starts_with(std::string_view text, std::string_view head) {
  return text.substr(0, head.size()) == head;
}

// The rest of `name` after "h.<digits>.", or an empty view.
std::string_view block_member(std::string_view name) {
  if (starts_with(name, "transformer.")) name.remove_prefix(12);
  if (!starts_with(name, "h.")) return {};
  name.remove_prefix(2);
  std::size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return {};
  return name.substr(digits + 1);
}

}  // namespace

bool is_hf_conv1d_weight(std::string_view name) {
  const std::string_view member = block_member(name);
  return member == "attn.c_attn.weight" || member == "attn.c_proj.weight" ||
         member == "mlp.c_fc.weight" || member == "mlp.c_proj.weight";
}

bool is_gpt2_naming(const std::vector<std::string>& names) {
  const auto has = [&](std::string_view n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  const bool blocks = std::any_of(names.begin(), names.end(),
                                  [](const std::string& n) { return is_hf_conv1d_weight(n); });
  return has("wte.weight") && has("wpe.weight") && blocks;
}

}  // namespace zero::gpt
