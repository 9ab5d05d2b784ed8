// zero-train's lines, progress bar and metrics (see report.h).
#include "tools/zero-train/report.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>
#include <unistd.h>

namespace zero::train {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string human_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(seconds, 0.0)));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

namespace {

// Under mpirun a rank's stdout is a pseudo-terminal whatever the launcher's output is; zero-run
// says what it really is in ZERO_STDOUT_TTY.
bool stdout_is_terminal() {
  if (isatty(STDOUT_FILENO) != 1) return false;
  if (const char* said = std::getenv("ZERO_STDOUT_TTY")) return std::strcmp(said, "1") == 0;
  return std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMI_SIZE") == nullptr;
}

}  // namespace

Report::Report(bool active, std::int64_t total_steps, std::int64_t steps_per_print, bool breakdown,
               bool progress, const std::string& metrics_path)
    : active_(active),
      total_steps_(total_steps),
      steps_per_print_(std::max<std::int64_t>(steps_per_print, 1)),
      breakdown_(breakdown),
      bar_(active && progress && stdout_is_terminal()) {
  if (active_ && !metrics_path.empty()) {
    metrics_ = std::fopen(metrics_path.c_str(), "w");
    if (metrics_ == nullptr) {
      throw std::runtime_error(
          fmt::format("--metrics {}: cannot create it: {}", metrics_path, std::strerror(errno)));
    }
  }
}

Report::~Report() {
  clear_bar();
  if (metrics_ != nullptr) std::fclose(metrics_);
}

void Report::say(const std::string& line) {
  if (!active_) return;
  clear_bar();
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  draw_bar();
}

void Report::step(const StepRecord& r) {
  if (!active_) return;
  last_ = r;
  if (metrics_ != nullptr) {
    nlohmann::ordered_json line{{"kind", "train"},
                                {"step", r.step},
                                {"loss", r.loss},
                                {"lr", r.lr},
                                {"loss_scale", r.loss_scale},
                                {"grad_norm", r.grad_norm},
                                {"skipped", r.skipped},
                                {"tokens_per_s", r.tokens_per_s},
                                {"step_time_s", r.step_time_s},
                                {"forward_s", r.forward_s},
                                {"backward_s", r.backward_s},
                                {"engine_step_s", r.engine_step_s},
                                {"tokens", r.tokens},
                                {"elapsed_s", r.elapsed_s}};
    if (r.mfu >= 0) line["mfu"] = r.mfu;
    if (r.quant_error_weights >= 0) line["quantization_error_weights"] = r.quant_error_weights;
    if (r.quant_error_gradients >= 0) {
      line["quantization_error_gradients"] = r.quant_error_gradients;
    }
    metrics(line);
  }
  if (r.step == total_steps_) {  // the bar's last state stays on its own line
    draw_bar();
    if (bar_drawn_) std::fputc('\n', stdout);
    bar_drawn_ = false;
    bar_ = false;
  }
  if (r.step % steps_per_print_ == 0 || r.step == total_steps_) {
    std::string line = fmt::format(
        "step {:>{}}/{} | loss {:.4f} | lr {:.3e} | loss scale {:g} | grad norm {:.3f}{} | "
        "{:.0f} tokens/s{} | {:.1f} ms",
        r.step, std::to_string(total_steps_).size(), total_steps_, r.loss, r.lr, r.loss_scale,
        r.grad_norm, r.skipped ? " (skipped)" : "", r.tokens_per_s,
        r.mfu >= 0 ? fmt::format(" | MFU {:.1f}%", 100 * r.mfu) : std::string(),
        1e3 * r.step_time_s);
    if (r.quant_error_weights >= 0) {
      line += fmt::format(" | qwZ error {:.3f}%", 100 * r.quant_error_weights);
    }
    if (r.quant_error_gradients >= 0) {
      line += fmt::format(" | qgZ error {:.3f}%", 100 * r.quant_error_gradients);
    }
    if (breakdown_) {
      line += fmt::format(" (forward {:.1f} | backward {:.1f} | engine step {:.1f})",
                          1e3 * r.forward_s, 1e3 * r.backward_s, 1e3 * r.engine_step_s);
    }
    say(line);
  } else {
    draw_bar();
  }
}

void Report::eval(std::int64_t step, double loss, double elapsed_s) {
  if (!active_) return;
  last_eval_ = loss;
  say(fmt::format("step {:>{}}/{} | validation loss {:.4f}", step,
                  std::to_string(total_steps_).size(), total_steps_, loss));
  metrics({{"kind", "eval"}, {"step", step}, {"eval_loss", loss}, {"elapsed_s", elapsed_s}});
}

void Report::memory(const std::vector<double>& peaks, int world) {
  if (!active_) return;
  const char* tiers[kTiers] = {"device", "pinned", "host", "nvme"};
  const char* kinds[kKinds] = {"parameters", "gradients", "fp32 masters", "optimizer moments",
                               "buffers"};
  say("memory, peak by tier and kind:");
  for (int r = 0; r < world; ++r) {
    for (int t = 0; t < kTiers; ++t) {
      std::string line;
      double total = 0;
      for (int k = 0; k < kKinds; ++k) {
        const double bytes = peaks[static_cast<std::size_t>((r * kTiers + t) * kKinds + k)];
        if (bytes <= 0) continue;
        total += bytes;
        line += fmt::format("{}{} {}", line.empty() ? "" : ", ", kinds[k], human_bytes(bytes));
      }
      if (total > 0)
        say(fmt::format("  rank {} {:<6} {:>10}: {}", r, tiers[t], human_bytes(total), line));
    }
  }
}

void Report::metrics(const nlohmann::ordered_json& line) {
  if (metrics_ == nullptr) return;
  const std::string text = line.dump() + "\n";
  std::fputs(text.c_str(), metrics_);
  std::fflush(metrics_);
}

void Report::draw_bar() {
  if (!bar_ || last_.step == 0) return;
  constexpr int kWidth = 30;
  const double done = static_cast<double>(last_.step) / static_cast<double>(total_steps_);
  const int filled = static_cast<int>(done * kWidth);
  const std::string validation = last_eval_ >= 0 ? fmt::format(" | val {:.4f}", last_eval_) : "";
  const std::string line =
      fmt::format("\r[{}{}] {}/{} loss {:.4f}{} | ETA {}\033[K",
                  std::string(static_cast<std::size_t>(filled), '#'),
                  std::string(static_cast<std::size_t>(kWidth - filled), '.'), last_.step,
                  total_steps_, last_.loss, validation, human_duration(last_.eta_s));
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Report::clear_bar() {
  if (!bar_drawn_) return;
  std::fputs("\r\033[K", stdout);
  bar_drawn_ = false;
}

}  // namespace zero::train
