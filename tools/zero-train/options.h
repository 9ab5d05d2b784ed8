// zero-train's settings, as its command line gives them (main.cpp) and the trainer uses them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero::train {

struct TrainOptions {
  std::string config;  // the DeepSpeed-style JSON config
  std::string model;   // empty: --init's config.json, else tiny
  // Custom sizes over the named model's (kv_heads and intermediate: the Llama family's).
  std::optional<int> layers, heads, kv_heads, channels, intermediate, positions, vocab;
  std::string data;
  std::string data_format = "auto";  // auto or text (models/data/token_stream.h's DataFormat)
  std::optional<int> seq;  // positions per sequence; the model's (at most 1024) by default
  std::int64_t steps = 0;
  std::optional<int> micro_batch;
  std::optional<double> lr;
  std::vector<std::string> sets;  // KEY=VALUE config overrides
  double val_fraction = 0.05;
  std::int64_t eval_every = 0;  // 0: only at the end
  int eval_batches = 8;
  std::string save;
  std::int64_t save_every = 0;  // 0: only at the end
  std::string resume;
  std::string init;
  std::uint64_t seed = 1234;
  std::string metrics;
  bool activation_checkpointing = false;
  bool progress = true;
  int device = 0;  // 0 automatic (a GPU when there is one), 1 cpu, 2 cuda
};

// Runs the training the options describe; returns the process's exit status. Errors before
// the engine exists are thrown (std::exception) and reported by main(); after, a failure on one
// rank ends the whole job through zero_abort.
int run(const TrainOptions& options);

}  // namespace zero::train
