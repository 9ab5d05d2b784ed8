// One zero-train run, in the steps a reader of the C API follows (trainer.cpp's run): setup
// (the config, the model's sizes, the data, the engine: training_setup.cpp), the model built on
// the engine and zero_init, what runs said, the start (pretrained weights, a checkpoint to
// resume), the loop of optimizer steps with evaluation and checkpoints when due, and the
// summary (trainer.cpp). Uses only zero.h, the reference models and the data reader.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/causal_lm.h"
#include "models/data/token_stream.h"
#include "models/gpu_info.h"
#include "tools/zero-train/model_choice.h"
#include "tools/zero-train/options.h"
#include "tools/zero-train/report.h"
#include "zero/zero.h"

namespace zero::train {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A failing engine call: after zero_create, one rank's failure must end every rank (the others
// may wait in a collective), so it goes through zero_abort.
class EngineCalls {
 public:
  explicit EngineCalls(zero_engine* engine = nullptr) : engine_(engine) {}
  void check(zero_status status, const char* call) const {
    if (status != ZERO_OK)
      fail(fmt::format("{}: {}: {}", call, zero_status_string(status), zero_last_error()));
  }
  [[noreturn]] void fail(const std::string& message) const {
    std::fprintf(stderr, "zero-train: %s\n", message.c_str());
    std::fflush(stderr);
    zero_abort(engine_, 1, message.c_str());
    std::_Exit(1);  // zero_abort returns only without a communicator
  }

 private:
  zero_engine* engine_;
};

class Training {
 public:
  using json = nlohmann::ordered_json;

  // Setup: the config's text, the model's sizes and the data (their errors first, thrown),
  // then the engine (failures after it end every rank) and the config values the run uses.
  explicit Training(const TrainOptions& options);
  ~Training();
  Training(const Training&) = delete;
  Training& operator=(const Training&) = delete;

  // The model on the engine (its CUDA layers on a GPU), the batches, zero_init.
  void build();
  // What runs: the model, MFU's terms, the data, the activations' cost; warnings.
  void announce();
  // --init's weights and --resume's state: the first step to take.
  std::int64_t start();
  // One optimizer step (its micro-steps) queued, without the host waiting for its losses or its
  // step's verdict; the step before it reported once its first backward is queued. False when
  // a reported loss is not finite in fp32 or bf16: said, nothing saved, and the run ends.
  bool train_step(std::int64_t step);
  // After a step: the validation loss and a checkpoint, when due (the step reported first).
  // False as train_step.
  bool after_step(std::int64_t step);
  // The queued step's report, waiting for its losses and its step's verdict; true when none is
  // queued. `next_began`: when the step after it began (its time ends there), else now. False
  // as train_step.
  bool report_queued(std::optional<Clock::time_point> next_began = std::nullopt);
  // The summary (rank 0) and the engine's end.
  void summary();
  // The model, then the engine: zero_destroy.
  void finish();

 private:
  json config_value(const char* key) const;
  double evaluate();
  void save(std::int64_t step);
  std::string data_position(std::int64_t step) const;
  std::vector<double> gather_memory() const;

  const TrainOptions& o_;
  json raw_;  // the config file's text as JSON, for what only it says
  ModelChoice model_;
  int seq_ = 0;
  data::TokenStream stream_, train_stream_, val_stream_;
  zero_engine* engine_ = nullptr;
  EngineCalls calls_;
  int rank_ = 0, world_ = 1;
  bool on_gpu_ = false;
  bool breakdown_ = false;  // wall_clock_breakdown: the step's phases timed apart
  int gpu_ = -1;
  models::GpuInfo gpu_info_;
  int batch_ = 1, accumulation_ = 1;
  models::ActivationOptions activation_;
  std::uint64_t model_bytes_ = 0;  // what the model holds beside the engine (declared at init)
  std::unique_ptr<Report> report_;
  std::uint64_t per_step_ = 0;  // sequences per optimizer step, all ranks
  std::int64_t tokens_per_step_ = 0;
  std::unique_ptr<models::CausalLm> lm_;
  std::unique_ptr<data::Batcher> train_batches_, val_batches_;
  std::vector<std::int32_t> tokens_, targets_;
  bool fp16_ = false;  // fp16 skips a non-finite step; fp32 and bf16 stop
  double flops_per_token_ = 0, peak_flops_ = 0;
  // The step queued and not reported yet, with its host-side timings.
  struct Queued {
    std::int64_t step = 0;
    Clock::time_point began;
    double forward_s = 0, backward_s = 0, engine_step_s = 0;
  };
  std::optional<Queued> queued_;
  // The model's timing point of micro-step `m`'s phase boundary `k` (0 before its forward, 1
  // after, 2 after its backward): two steps' worth in turn, the one reported and the one
  // queued after it.
  std::size_t phase_point(std::int64_t step, int m, int k) const {
    return static_cast<std::size_t>((step % 2) * 3 * accumulation_ + 3 * m + k);
  }
  // The loop's account.
  std::int64_t first_step_ = 0, tokens_trained_ = 0, timed_steps_ = 0;
  Clock::time_point began_;
  double last_loss_ = 0, last_eval_ = -1, best_tokens_per_s_ = 0, tokens_per_s_sum_ = 0;
};

}  // namespace zero::train
