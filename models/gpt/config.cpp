// The reference GPT's sizes (config.h).
#include "models/gpt/config.h"

#include <stdexcept>

namespace zero::gpt {

GptConfig GptConfig::by_name(const std::string& name) {
  if (name == "tiny") return {4, 4, 128, 64, 256};
  if (name == "gpt2-124m") return {12, 12, 768, 1024, 50257};
  if (name == "gpt2-350m") return {24, 16, 1024, 1024, 50257};
  if (name == "gpt2-774m") return {36, 20, 1280, 1024, 50257};
  if (name == "gpt2-1.5b") return {48, 25, 1600, 1024, 50257};
  throw std::invalid_argument("unknown model '" + name +
                              "': use tiny, gpt2-124m, gpt2-350m, gpt2-774m or gpt2-1.5b");
}

std::int64_t GptConfig::parameters() const {
  return gpt::parameters(*this, 4 * std::int64_t{channels});
}

std::int64_t parameters(const GptConfig& c, std::int64_t mlp) {
  const std::int64_t C = c.channels, F = mlp;
  // ln_1, c_attn, attn.c_proj, ln_2, c_fc, mlp.c_proj: weights and biases.
  const std::int64_t block = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C;
  return static_cast<std::int64_t>(c.vocab) * C + static_cast<std::int64_t>(c.max_seq) * C +
         c.layers * block + 2 * C;
}

ActivationBytes activation_bytes(const GptConfig& c, std::int64_t mlp, int batch, int seq,
                                 bool checkpointing, std::size_t element_bytes) {
  const std::uint64_t N = static_cast<std::uint64_t>(batch) * static_cast<std::uint64_t>(seq);
  const std::uint64_t C = static_cast<std::uint64_t>(c.channels);
  const std::uint64_t F = static_cast<std::uint64_t>(mlp);
  const std::uint64_t V = static_cast<std::uint64_t>(c.vocab);
  const std::uint64_t L = static_cast<std::uint64_t>(c.layers);
  const std::uint64_t scores = N * static_cast<std::uint64_t>(c.heads) *
                               static_cast<std::uint64_t>(seq);  // batch * heads * seq * seq
  // A block's: ln_1's output, mean and rstd, q k v, the attention's probabilities and output,
  // the residual, ln_2's output, mean and rstd, the MLP's two hidden activations.
  const std::uint64_t block = 7 * N * C + 2 * N * F + 4 * N + scores;
  // Beside the blocks: the embedding's output, ln_f's output, mean and rstd, logits,
  // probabilities and losses.
  const std::uint64_t common = 2 * N * C + 3 * N + 2 * N * V;
  ActivationBytes a;
  // Every block keeps its output (the next one's input); a checkpointed block nothing else,
  // and one block's worth is where the recomputation puts its activations.
  a.kept = (common + L * N * C + (checkpointing ? block : L * block)) * element_bytes;
  // Backward's buffers: the MLP's two hidden gradients, q k v's, the scores', four of C, the
  // losses' and the logits'.
  a.workspace = (2 * N * F + 3 * N * C + scores + 4 * N * C + N + N * V) * element_bytes;
  return a;
}

double block_flops(const GptConfig& c, std::int64_t mlp, int batch, int seq) {
  const double N = static_cast<double>(batch) * seq, C = c.channels;
  return 2.0 * N * (4.0 * C * C + 2.0 * C * static_cast<double>(mlp)) + 2.0 * N * seq * C;
}

double forward_flops(const GptConfig& c, std::int64_t mlp, int batch, int seq) {
  const double N = static_cast<double>(batch) * seq;
  return c.layers * block_flops(c, mlp, batch, seq) + 2.0 * N * c.channels * c.vocab;
}

}  // namespace zero::gpt
