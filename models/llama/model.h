// The Llama-family decoder (Llama 2 and 3, Mistral, Qwen2) on the CPU, driven through the public
// C API only (zero/zero.h): token embedding, pre-RMSNorm blocks (causal attention with rotary
// embeddings and grouped key/value heads, SwiGLU MLP), a final RMSNorm and the output head,
// tied to the embedding or its own, with cross-entropy.
//
// Registration (params.h), under Hugging Face's names, so that its safetensors load and export
// as they are: module "embed" (model.embed_tokens.weight), one module per block "layers.<i>"
// (input_layernorm, self_attn.{q,k,v,o}_proj, Qwen2's q/k/v biases, post_attention_layernorm,
// mlp.{gate,up,down}_proj, each "model.layers.<i>." before), module "head" (model.norm.weight
// and lm_head.weight, or the tied embedding). RMSNorm weights and biases go in the "no_decay"
// group. The decoder driver (models/decoder/decoder.h) calls each module's hooks around its
// compute, so stage 3 gathers one block at a time.
//
// The layers compute in fp32 (models/llama/kernels.h and the shared models/layers/layers.h); bf16
// and fp16 compute copies go through ComputeCopies.
#pragma once

#include <cstdint>
#include <memory>

#include "models/causal_lm.h"
#include "models/llama/config.h"
#include "zero/zero.h"

namespace zero::llama {

// A Llama-family model on the CPU layers. Registers the model's groups, modules and parameters
// with `engine` (before zero_init); initial values as transformers draws them (normal, std 0.02;
// norm weights 1, biases 0), from `seed`, independent of the world size. `batch` sequences of
// `seq` positions per micro-batch (seq <= max_seq). Its load_pretrained reads Hugging Face's
// files as they are: every tensor under its name and layout; lm_head.weight ignored when tied,
// the rotary inv_freq buffers of older files too. Throws std::invalid_argument for sizes that
// do not fit and std::runtime_error with zero_last_error() when a call fails.
std::unique_ptr<models::CausalLm> make_llama(zero_engine* engine, const LlamaConfig& config,
                                             int batch, int seq, std::uint64_t seed,
                                             const models::ActivationOptions& options = {});

}  // namespace zero::llama
