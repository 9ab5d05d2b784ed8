// How Hugging Face stores GPT-2's tensors where our layout differs: the Conv1D weights of
// attention and MLP (c_attn, c_proj, c_fc) are [in, out], ours [out, in] like every Linear.
// Names are ours, which are GPT2Model's (GPT2LMHeadModel's carry a "transformer." prefix).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zero::gpt {

// "h.<n>.attn.c_attn.weight", "h.<n>.attn.c_proj.weight", "h.<n>.mlp.c_fc.weight",
// "h.<n>.mlp.c_proj.weight", with or without "transformer." before.
bool is_hf_conv1d_weight(std::string_view name);

// True when `names` are a GPT-2's as we register them (wte.weight, wpe.weight and h.<n>.*).
bool is_gpt2_naming(const std::vector<std::string>& names);

}  // namespace zero::gpt
