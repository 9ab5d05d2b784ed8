// What zero-train tells people and scripts: a line every steps_per_print steps, a progress bar
// with ETA on a terminal, evaluation lines, metrics as JSON lines, and the end's summary. Only
// rank 0 reports; the others construct a silent Report.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zero::train {

struct StepRecord {
  std::int64_t step = 0;  // 1-based: optimizer steps done
  double loss = 0, lr = 0, loss_scale = 1, grad_norm = 0;
  bool skipped = false;
  double step_time_s = 0, tokens_per_s = 0;
  double mfu = -1;  // model FLOPs utilisation on GPUs (-1: not reported)
  // zero_quantized_error_check: ZeRO++'s relative error of the step (-1: not measured)
  double quant_error_weights = -1, quant_error_gradients = -1;
  double forward_s = 0, backward_s = 0, engine_step_s = 0;  // of this step, summed over micro-steps
  std::int64_t tokens = 0;                                  // trained so far
  double elapsed_s = 0;
  double eta_s = 0;  // to the last step, at this run's mean pace
};

class Report {
 public:
  // `active`: this rank reports (rank 0). `metrics_path`: JSON lines there (empty: none).
  Report(bool active, std::int64_t total_steps, std::int64_t steps_per_print, bool breakdown,
         bool progress, const std::string& metrics_path);
  ~Report();

  bool active() const noexcept { return active_; }
  // A line for people (the progress bar is cleared first and drawn again after).
  void say(const std::string& line);
  void step(const StepRecord& record);
  void eval(std::int64_t step, double loss, double elapsed_s);
  // Peak bytes [rank][tier][kind] (tiers and kinds as zero.h numbers them), a line per rank
  // and tier in use.
  static constexpr int kTiers = 4, kKinds = 5;
  void memory(const std::vector<double>& peaks, int world);
  // A JSON object as one metrics line (kind "summary", ...), when metrics are written.
  void metrics(const nlohmann::ordered_json& line);

 private:
  void draw_bar();
  void clear_bar();

  bool active_;
  std::int64_t total_steps_, steps_per_print_;
  bool breakdown_;
  bool bar_;  // a progress bar: active, asked for, and stdout is a terminal
  bool bar_drawn_ = false;
  std::FILE* metrics_ = nullptr;
  StepRecord last_;
  double last_eval_ = -1;
};

// "1.2 GiB", "512 B": bytes for people.
std::string human_bytes(double bytes);
// "1h02m", "3m05s", "12s".
std::string human_duration(double seconds);

}  // namespace zero::train
