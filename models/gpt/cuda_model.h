// The reference GPT on the GPU: the same model as Gpt (model.h), registered the same way (the
// same names, modules, groups and initial values, so checkpoints move between the two), its
// layers the CUDA ones (models/cuda/layers.h) in bf16 with fp32 accumulation, run on a stream of
// its own that every hook is given. The engine's compute copies must be bf16 on a GPU (the
// config's bf16 section); zero_data_location says where.
//
// Activations live in device memory; activation checkpointing works as the CPU model's. Each
// forward copies the tokens to the GPU and the losses back (one synchronisation per
// micro-batch); the output's softmax is fused with its backward, so the logits buffer holds their
// gradient after a training forward. Evaluation computes the losses alone and leaves the logits
// on the GPU, where logits() copies them from on request (until the next forward). The logits'
// rows are padded to a multiple of 128 (cuda_layers::padded_vocab) so that their products get
// aligned rows; the token table keeps its V rows, and the padding is never read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "models/gpt/config.h"
#include "zero/zero.h"

namespace zero::gpt {

// A GPT on the engine's GPU. Throws std::runtime_error when the engine's parameters are not on
// a GPU or not bf16, or when this build has no CUDA layers.
std::unique_ptr<models::CausalLm> make_cuda_gpt(zero_engine* engine, const GptConfig& config,
                                                int batch, int seq, std::uint64_t seed,
                                                const models::ActivationOptions& options);

}  // namespace zero::gpt
