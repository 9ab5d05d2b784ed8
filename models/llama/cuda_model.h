// The Llama-family decoder on the GPU: the same model as Llama (model.h), registered the same
// way (names, modules, groups, initial values), its layers the CUDA ones (models/cuda/layers.h)
// in bf16 with fp32 accumulation, on a stream of its own that every hook is given. As the CUDA
// GPT (models/gpt/cuda_model.h): bf16 compute copies on the engine's GPU, activations in
// device memory, one synchronisation per micro-batch for the losses, the output's softmax fused
// with its backward, evaluation's logits left on the GPU for logits() to copy on request, the
// logits' rows padded to a multiple of 128 for the products (lm_head keeps its V rows).
#pragma once

#include <cstdint>
#include <memory>

#include "models/causal_lm.h"
#include "models/llama/config.h"
#include "zero/zero.h"

namespace zero::llama {

// A Llama-family model on the engine's GPU. Throws std::runtime_error when the engine's
// parameters are not on a GPU or not bf16, or when this build has no CUDA layers.
std::unique_ptr<models::CausalLm> make_cuda_llama(zero_engine* engine, const LlamaConfig& config,
                                                  int batch, int seq, std::uint64_t seed,
                                                  const models::ActivationOptions& options);

}  // namespace zero::llama
