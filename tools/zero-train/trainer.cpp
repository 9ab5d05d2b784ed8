// zero-train's run (training.h): the steps a reader of the C API follows, then the loop's
// pieces: one optimizer step, evaluation, checkpoints, and the summary. Setup is in
// training_setup.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "models/blas/openblas.h"
#include "tools/zero-train/training.h"

namespace zero::train {

int run(const TrainOptions& o) {
  Training training(o);
  training.build();
  training.announce();
  for (std::int64_t step = training.start(); step < o.steps; ++step) {
    if (!training.train_step(step)) {
      training.finish();
      return 1;
    }
    if (!training.after_step(step)) {
      training.finish();
      return 1;
    }
  }
  if (!training.report_queued()) {
    training.finish();
    return 1;
  }
  training.summary();
  training.finish();
  return 0;
}

// The step's micro-batches queued: on a GPU the losses stay on the device and zero_step is
// given no stats, so the host never waits inside the step. The step before is reported once
// this step's first backward is queued behind it, when the device has its figures.
bool Training::train_step(std::int64_t step) {
  Queued q;
  q.step = step;
  q.began = Clock::now();
  try {
    for (int m = 0; m < accumulation_; ++m) {
      train_batches_->fill(
          data::Batcher::first_sequence(step, m, accumulation_, rank_, world_, batch_),
          tokens_.data(), targets_.data());
      // With wall_clock_breakdown the phases are timed where they run (on a GPU by events on
      // the model's stream, read with the step's report), so timing them waits for nothing.
      if (breakdown_) lm_->mark(phase_point(step, m, 0));
      auto t = Clock::now();
      lm_->forward_queued(tokens_.data(), targets_.data());
      if (breakdown_) lm_->mark(phase_point(step, m, 1));
      q.forward_s += seconds_since(t);
      t = Clock::now();
      lm_->backward();
      if (breakdown_) lm_->mark(phase_point(step, m, 2));
      q.backward_s += seconds_since(t);
      if (m == 0 && !report_queued(q.began)) return false;
      t = Clock::now();
      calls_.check(zero_step(engine_, nullptr), "zero_step");
      q.engine_step_s += seconds_since(t);
    }
  } catch (const std::exception& e) {
    calls_.fail(fmt::format("step {}: {}", step + 1, e.what()));
  }
  queued_ = q;
  return true;
}

// The queued step's losses and step statistics (waiting only for them), reported.
bool Training::report_queued(std::optional<Clock::time_point> next_began) {
  if (!queued_) return true;
  const Queued q = *queued_;
  queued_.reset();
  const std::int64_t step = q.step;
  StepRecord r;
  r.forward_s = q.forward_s;  // the host's time queuing them, without the breakdown
  r.backward_s = q.backward_s;
  r.engine_step_s = q.engine_step_s;
  if (breakdown_) {
    r.forward_s = r.backward_s = 0;
    for (int m = 0; m < accumulation_; ++m) {
      r.forward_s += lm_->seconds_between(phase_point(step, m, 0), phase_point(step, m, 1));
      r.backward_s += lm_->seconds_between(phase_point(step, m, 1), phase_point(step, m, 2));
    }
  }
  double loss = 0;
  zero_step_stats stats{};
  try {
    for (const float l : lm_->take_losses(static_cast<std::size_t>(accumulation_))) loss += l;
  } catch (const std::exception& e) {
    calls_.fail(fmt::format("step {}: {}", step + 1, e.what()));
  }
  calls_.check(zero_last_step_stats(engine_, &stats), "zero_last_step_stats");
  loss /= accumulation_;
  calls_.check(zero_mean_across_ranks(engine_, &loss, 1), "zero_mean_across_ranks");
  if (!std::isfinite(loss) && !fp16_) {
    // Every rank has the same mean, so every rank stops here.
    if (rank_ == 0) {
      std::fprintf(stderr,
                   "zero-train: step %lld: the loss is %s; without fp16's loss scale there is "
                   "no step to skip, and the weights are no longer finite: the run stops "
                   "without saving. Lower the learning rate, check the data and the model's "
                   "config (a --init directory's config.json), or resume from an earlier "
                   "checkpoint\n",
                   static_cast<long long>(step + 1), std::isnan(loss) ? "NaN" : "infinite");
    }
    return false;
  }
  r.step = step + 1;
  r.loss = loss;
  r.lr = stats.lr;
  r.loss_scale = stats.loss_scale;
  r.grad_norm = stats.grad_norm;
  calls_.check(zero_quantization_error(engine_, &r.quant_error_weights, &r.quant_error_gradients),
               "zero_quantization_error");
  r.skipped = stats.skipped != 0;
  // From its start to the next step's (in steady state the step's period, the host at most a
  // step ahead of the device), or where none follows, to its figures being in: a whole step.
  r.step_time_s =
      std::chrono::duration<double>(next_began.value_or(Clock::now()) - q.began).count();
  r.tokens_per_s = static_cast<double>(tokens_per_step_) / r.step_time_s;
  r.mfu = peak_flops_ > 0 ? r.tokens_per_s * flops_per_token_ / peak_flops_ : -1;
  tokens_trained_ += tokens_per_step_;
  r.tokens = tokens_trained_;
  r.elapsed_s = seconds_since(began_);
  r.eta_s = r.elapsed_s / static_cast<double>(step + 1 - first_step_) *
            static_cast<double>(o_.steps - step - 1);
  report_->step(r);
  last_loss_ = loss;
  if (step > first_step_) {  // the first step warms up (allocation, recorded gather order)
    tokens_per_s_sum_ += r.tokens_per_s;
    ++timed_steps_;
    best_tokens_per_s_ = std::max(best_tokens_per_s_, r.tokens_per_s);
  }
  return true;
}

bool Training::after_step(std::int64_t step) {
  const bool last = step + 1 == o_.steps;
  const bool eval_due = (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0) || last;
  const bool save_due =
      !o_.save.empty() && ((o_.save_every > 0 && (step + 1) % o_.save_every == 0) || last);
  // The step's line before the evaluation's and the checkpoint's.
  if ((eval_due || save_due) && !report_queued()) return false;
  if (eval_due) {
    last_eval_ = evaluate();
    if (last_eval_ >= 0) report_->eval(step + 1, last_eval_, seconds_since(began_));
  }
  if (save_due) save(step + 1);
  return true;
}

// eval_batches micro-batches of the validation part, split over the ranks, the same ones every
// time; -1 without a validation part.
double Training::evaluate() {
  if (!val_batches_) return -1;
  double sum[2] = {0, 0};  // loss sum, batches
  for (int k = rank_; k < o_.eval_batches; k += world_) {
    val_batches_->fill(static_cast<std::uint64_t>(k) * batch_, tokens_.data(), targets_.data());
    sum[0] += lm_->evaluate(tokens_.data(), targets_.data());
    sum[1] += 1;
  }
  // Every rank must make the same number of passes: stage 3 gathers in the forward hooks.
  const int passes = (o_.eval_batches + world_ - 1) / world_;
  for (int k = static_cast<int>(sum[1]); k < passes; ++k) {
    val_batches_->fill(0, tokens_.data(), targets_.data());
    lm_->evaluate(tokens_.data(), targets_.data());
  }
  calls_.check(zero_mean_across_ranks(engine_, sum, 2), "zero_mean_across_ranks");
  return sum[1] > 0 ? sum[0] / sum[1] : -1;
}

void Training::save(std::int64_t step) {
  const std::string position = data_position(step);
  const auto began = Clock::now();
  calls_.check(
      zero_save_checkpoint(engine_, o_.save.c_str(), nullptr, position.data(), position.size()),
      "zero_save_checkpoint");
  report_->say(
      fmt::format("saved {}/global_step{} in {:.2f} s", o_.save, step, seconds_since(began)));
}

// What a checkpoint keeps of the data: enough to continue on the same sequences; and the
// model's Hugging Face config.json and generation_config.json, which zero-ckpt export writes
// beside the weights.
std::string Training::data_position(std::int64_t step) const {
  return json{{"trainer", "zero-train"},
              {"model", model_.name()},
              {"hf_config", model_.hf_config()},
              {"hf_generation_config", model_.generation_config()},
              {"step", step},
              {"sequences_taken", static_cast<std::uint64_t>(step) * per_step_},
              {"seq", seq_},
              {"data", stream_.origin()},
              {"data_tokens", stream_.size()},
              {"seed", o_.seed}}
      .dump();
}

// Peak bytes by tier and kind, every rank's, gathered on every rank through the mean (each rank
// fills its own slots, the others are 0, so world * mean is the value): [rank][tier][kind].
std::vector<double> Training::gather_memory() const {
  constexpr int kTiers = Report::kTiers, kKinds = Report::kKinds;
  std::vector<double> peaks(static_cast<std::size_t>(world_ * kTiers * kKinds), 0.0);
  for (int t = 0; t < kTiers; ++t) {
    for (int k = 0; k < kKinds; ++k) {
      unsigned long long live = 0, peak = 0;
      calls_.check(zero_memory_bytes(engine_, static_cast<zero_tier>(t), static_cast<zero_kind>(k),
                                     &live, &peak),
                   "zero_memory_bytes");
      peaks[static_cast<std::size_t>((rank_ * kTiers + t) * kKinds + k)] =
          static_cast<double>(peak);
    }
  }
  calls_.check(zero_mean_across_ranks(engine_, peaks.data(), static_cast<int>(peaks.size())),
               "zero_mean_across_ranks");
  for (double& v : peaks) v *= world_;
  return peaks;
}

void Training::summary() {
  const double elapsed = seconds_since(began_);
  const std::vector<double> memory = gather_memory();
  // What this rank reserved per tier (every rank the same): what zero-mem predicts.
  json reserved = json::object();
  for (const auto& [tier, name] :
       {std::pair{ZERO_TIER_DEVICE, "device"}, std::pair{ZERO_TIER_PINNED, "pinned"},
        std::pair{ZERO_TIER_HOST, "host"}, std::pair{ZERO_TIER_NVME, "nvme"}}) {
    unsigned long long bytes = 0;
    calls_.check(zero_memory_reserved(engine_, tier, &bytes), "zero_memory_reserved");
    reserved[name] = bytes;
  }
  if (!report_->active()) return;
  const double mean_tokens_per_s = timed_steps_ > 0 ? tokens_per_s_sum_ / timed_steps_ : 0;
  const double mfu = peak_flops_ > 0 ? mean_tokens_per_s * flops_per_token_ / peak_flops_ : -1;
  report_->say(fmt::format(
      "done: {} steps in {} ({} tokens), {:.0f} tokens/s (mean after the first step){}, final "
      "loss {:.4f}{}",
      o_.steps - first_step_, human_duration(elapsed), tokens_trained_, mean_tokens_per_s,
      mfu >= 0 ? fmt::format(", MFU {:.1f}%", 100 * mfu) : std::string(), last_loss_,
      last_eval_ >= 0 ? fmt::format(", validation loss {:.4f}", last_eval_) : ""));
  report_->memory(memory, world_);
  json summary{{"kind", "summary"},
               {"steps", o_.steps - first_step_},
               {"tokens", tokens_trained_},
               {"elapsed_s", elapsed},
               {"tokens_per_s", mean_tokens_per_s},
               {"mfu", mfu >= 0 ? json(mfu) : json(nullptr)},
               {"device", on_gpu_ ? gpu_info_.name : std::string("cpu")},
               {"best_tokens_per_s", best_tokens_per_s_},
               {"final_loss", last_loss_},
               {"eval_loss", last_eval_},
               {"world_size", world_},
               {"micro_batch", batch_},
               {"accumulation", accumulation_},
               {"seq", seq_},
               {"model", model_.name()},
               {"parameters", model_.parameters()},
               {"activation_checkpointing", activation_.checkpoint_blocks},
               {"activation_bytes", lm_->activation_cost().kept_bytes},
               {"memory_peak_bytes", memory},
               {"memory_reserved_bytes", reserved}};
  if (!on_gpu_) {  // what ran the CPU layers' products, for the benchmarks' records
    const blas::Info& blas = blas::load();
    summary["cpu"] = blas.cpu;
    summary["blas"] = {
        {"library", blas.library},     {"config", blas.config},
        {"core", blas.core},           {"kernel_set", blas::kernel_set_name(blas.core_set)},
        {"chosen_by", blas.chosen_by}, {"threading", blas.threading}};
  }
  report_->metrics(summary);
}

void Training::finish() {
  lm_.reset();
  calls_.check(zero_destroy(engine_), "zero_destroy");
  engine_ = nullptr;
}

}  // namespace zero::train
