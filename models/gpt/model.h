// The reference GPT-2-style decoder on the CPU, driven through the public C API only
// (zero/zero.h): token and position embeddings, pre-LayerNorm blocks (causal multi-head
// attention, GELU MLP), a final LayerNorm and the output projection tied to the token embedding,
// with cross-entropy.
//
// Registration (params.h): module "embed" (wte, wpe), one module per block "h.<i>" (its 12
// parameters, named as Hugging Face names GPT-2's), module "head" (ln_f and the tied wte).
// Biases and LayerNorm weights go in a "no_decay" group. The decoder driver
// (models/decoder/decoder.h) calls each module's hooks around its compute, so stage 3 gathers
// one block at a time.
//
// The layers (kernels.h, models/layers/layers.h) compute in fp32; bf16 and fp16 compute copies
// are widened and their gradients rounded back through ComputeCopies
// (models/layers/compute_copies.h).
#pragma once

#include <cstdint>
#include <memory>

#include "models/causal_lm.h"
#include "models/gpt/config.h"
#include "zero/zero.h"

namespace zero::gpt {

// A GPT on the CPU layers. Registers the model's groups, modules and parameters with `engine`
// (before zero_init); initial values as GPT-2 draws them (normal, std 0.02; residual projections
// scaled by 1/sqrt(2 layers); LayerNorm weights 1, biases 0), from `seed`, independent of the
// world size. `batch` sequences of `seq` positions per micro-batch (seq <= max_seq). Its
// load_pretrained reads Hugging Face GPT-2 safetensors (load_gpt2_weights, params.h). Throws
// std::invalid_argument for sizes that do not fit and std::runtime_error with zero_last_error()
// when a call fails.
std::unique_ptr<models::CausalLm> make_gpt(zero_engine* engine, const GptConfig& config, int batch,
                                           int seq, std::uint64_t seed,
                                           const models::ActivationOptions& options = {});

}  // namespace zero::gpt
