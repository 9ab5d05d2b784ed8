// zero-train's setup (training.h): the config's text, the model's sizes, the data and the
// engine; the model built on it and zero_init; what runs said; the start from pretrained
// weights or a checkpoint.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <omp.h>
#include <unistd.h>

#include "models/blas/openblas.h"
#include "tools/zero-train/training.h"

namespace zero::train {
namespace {

// Not `json`: a unity build puts model_choice.cpp's `json` (nlohmann::json) beside it.
using Json = Training::json;

// The config file as JSON, for what only its text says: whether "auto" stands at a key, and
// whether it has an activation_checkpointing section.
Json read_raw_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("--config {}: cannot read it", path));
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
}

bool is_auto(const Json& raw, const std::string& dotted) {
  const Json* node = &raw;
  std::size_t begin = 0;
  while (node->is_object()) {
    const std::size_t dot = dotted.find('.', begin);
    const std::string key = dotted.substr(begin, dot == std::string::npos ? dot : dot - begin);
    const auto it = node->find(key);
    if (it == node->end()) return false;
    node = &*it;
    if (dot == std::string::npos) return node->is_string() && node->get<std::string>() == "auto";
    begin = dot + 1;
  }
  return false;
}

// The flags that supply config values: --micro-batch and --lr always; --steps and --lr fill the
// scheduler's "auto" values; --set KEY=VALUE last, so it wins.
std::vector<std::string> overrides(const TrainOptions& o, const Json& raw) {
  std::vector<std::string> out;
  if (o.micro_batch)
    out.push_back(fmt::format("train_micro_batch_size_per_gpu={}", *o.micro_batch));
  if (o.lr) {
    out.push_back(fmt::format("optimizer.params.lr={}", *o.lr));
    if (is_auto(raw, "scheduler.params.warmup_max_lr")) {
      out.push_back(fmt::format("scheduler.params.warmup_max_lr={}", *o.lr));
    }
  }
  if (is_auto(raw, "scheduler.params.total_num_steps")) {
    out.push_back(fmt::format("scheduler.params.total_num_steps={}", o.steps));
  }
  out.insert(out.end(), o.sets.begin(), o.sets.end());
  return out;
}

// What keeps `dir` from taking checkpoints (empty when it can): made when missing, and every rank
// must be able to create files there (each writes its own), so the check runs on every rank.
std::string save_problem(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return fmt::format("cannot create it: {}", error.message());
  if (!std::filesystem::is_directory(dir)) return "it is not a directory";
  const std::string probe = fmt::format("{}/.zero-train-probe.{}", dir, ::getpid());
  std::ofstream out(probe);
  const bool written = static_cast<bool>(out << "x" << std::flush);
  out.close();
  std::filesystem::remove(probe, error);
  if (!written) return fmt::format("cannot write there: {}", std::strerror(errno));
  return {};
}

}  // namespace

Training::Training(const TrainOptions& o)
    // Unparsable text comes back discarded; zero_create reads the file again and names the line.
    : o_(o),
      raw_(read_raw_config(o.config)),
      // Before the engine: the model's sizes and the data, so that their errors come first.
      model_(ModelChoice::from_options(o)) {
  seq_ = o.seq.value_or(std::min(model_.max_seq(), 1024));
  if (seq_ > model_.max_seq()) throw std::runtime_error(model_.seq_advice(seq_));
  if (seq_ < 1) throw std::runtime_error(fmt::format("--seq {} must be at least 1", seq_));
  stream_ = data::TokenStream::open(
      o.data, o.data_format == "text" ? data::DataFormat::text : data::DataFormat::automatic);
  stream_.split(o.val_fraction, seq_, train_stream_, val_stream_);

  const std::vector<std::string> sets = overrides(o, raw_);
  std::vector<const char*> set_c;
  for (const std::string& s : sets) set_c.push_back(s.c_str());
  zero_create_options create = ZERO_CREATE_OPTIONS_INIT;
  create.overrides = set_c.data();
  create.override_count = static_cast<int>(set_c.size());
  // Automatic: a GPU when the build has CUDA and the machine one (the CUDA layers), else the CPU.
  create.device = o.device;
  create.optimizer_threads = omp_get_max_threads();
  create.seed = o.seed;
  if (zero_create_from_file(o.config.c_str(), &create, &engine_) != ZERO_OK) {
    throw std::runtime_error(zero_last_error());
  }
  calls_ = EngineCalls(engine_);
  calls_.check(zero_rank(engine_, &rank_), "zero_rank");
  calls_.check(zero_world_size(engine_, &world_), "zero_world_size");
  // The model's layers run where the engine put the parameters: the CUDA layers on a GPU.
  zero_memory_kind location = ZERO_MEMORY_HOST;
  calls_.check(zero_data_location(engine_, &location, &gpu_), "zero_data_location");
  on_gpu_ = location == ZERO_MEMORY_CUDA;
  if (on_gpu_) {
    try {
      gpu_info_ = models::gpu_info(gpu_);
    } catch (const std::exception& e) {
      calls_.fail(e.what());
    }
  }
  // Found now, not at the first save after hours of training.
  if (!o.save.empty()) {
    if (const std::string problem = save_problem(o.save); !problem.empty()) {
      calls_.fail(
          fmt::format("--save {}: {} (rank {}); checkpoints need a directory every rank "
                      "can write",
                      o.save, problem, rank_));
    }
  }

  batch_ = config_value("train_micro_batch_size_per_gpu").get<int>();
  accumulation_ = config_value("gradient_accumulation_steps").get<int>();
  const auto print_every = config_value("steps_per_print").get<std::int64_t>();
  const bool breakdown = config_value("wall_clock_breakdown").get<bool>();
  breakdown_ = breakdown;
  const json ac = config_value("activation_checkpointing");
  if (o.activation_checkpointing ||
      (raw_.is_object() && raw_.contains("activation_checkpointing"))) {
    activation_.checkpoint_blocks =
        ac.contains("number_checkpoints") ? ac["number_checkpoints"].get<int>() : model_.layers();
    activation_.cpu_checkpointing = ac.value("cpu_checkpointing", false);
  }
  report_ =
      std::make_unique<Report>(rank_ == 0, o.steps, print_every, breakdown, o.progress, o.metrics);
  per_step_ = static_cast<std::uint64_t>(world_) * accumulation_ * batch_;
  tokens_per_step_ = static_cast<std::int64_t>(per_step_) * seq_;
}

Training::~Training() {
  // A run that did not reach finish() (a thrown setup error): the engine goes with it.
  lm_.reset();
  if (engine_ != nullptr) static_cast<void>(zero_destroy(engine_));
}

Training::json Training::config_value(const char* key) const {
  unsigned long long needed = 0;
  calls_.check(zero_config_value(engine_, key, nullptr, 0, &needed), "zero_config_value");
  std::string text(needed, '\0');
  calls_.check(zero_config_value(engine_, key, text.data(), needed, nullptr), "zero_config_value");
  text.resize(needed - 1);
  return json::parse(text);
}

void Training::build() {
  zero_dtype compute = ZERO_FP32;
  calls_.check(zero_compute_dtype(engine_, &compute), "zero_compute_dtype");
  // What the model will allocate, for zero_init's check that the run fits the machine.
  model_bytes_ =
      model_.working_bytes(batch_, seq_, activation_, on_gpu_, compute == ZERO_FP32 ? 4 : 2);
  calls_.check(
      zero_declare_memory(engine_, on_gpu_ ? ZERO_TIER_DEVICE : ZERO_TIER_HOST, model_bytes_,
                          "the model's activations, workspaces and compute copies "
                          "(--micro-batch, --seq, --activation-checkpointing)"),
      "zero_declare_memory");
  try {
    lm_ = model_.build(engine_, batch_, seq_, o_.seed, activation_, on_gpu_);
    train_batches_ = std::make_unique<data::Batcher>(train_stream_, batch_, seq_, model_.vocab());
    if (val_stream_.size() > static_cast<std::size_t>(seq_)) {
      val_batches_ = std::make_unique<data::Batcher>(val_stream_, batch_, seq_, model_.vocab());
    }
  } catch (const std::exception& e) {
    calls_.fail(on_gpu_ ? fmt::format("{} (GPU {}, rank {}; --device 1 trains on the CPU)",
                                      e.what(), gpu_, rank_)
                        : std::string(e.what()));
  }
  if (const zero_status status = zero_init(engine_); status != ZERO_OK) {
    // A reservation too large for the machine comes from the model's sizes as often as from
    // the config's buffers: name them too.
    calls_.fail(fmt::format("zero_init: {}: {}{}", zero_status_string(status), zero_last_error(),
                            status == ZERO_ERROR_OUT_OF_MEMORY
                                ? fmt::format("; {}", model_.largest_tensor())
                                : std::string()));
  }
  // The activations and workspaces, now that the engine has checked that they fit beside it.
  try {
    lm_->allocate();
  } catch (const std::exception& e) {
    calls_.fail(fmt::format("the model's activations: {}", e.what()));
  }
  const std::size_t n = static_cast<std::size_t>(batch_) * seq_;
  tokens_.assign(n, 0);
  targets_.assign(n, 0);
  fp16_ = compute == ZERO_FP16;
  // MFU: PaLM's FLOPs per token against the GPU's dense bf16 peak, over every rank's GPU.
  flops_per_token_ = model_.flops_per_token(seq_);
  peak_flops_ = on_gpu_ ? gpu_info_.bf16_peak_flops * world_ : 0.0;
}

void Training::announce() {
  Report& report = *report_;
  report.say(fmt::format("zero-train: {} ({:.2f}M parameters; {}) on {} rank(s), {}", model_.name(),
                         static_cast<double>(model_.parameters()) / 1e6, model_.shape(), world_,
                         on_gpu_
                             ? fmt::format("GPU {} ({}), CUDA layers in bf16", gpu_, gpu_info_.name)
                             : std::string("CPU layers")));
  if (!on_gpu_) {
    const blas::Info& blas = blas::load();
    report.say(fmt::format("matrix products: {} on {}", blas.line(), blas.cpu));
    if (const auto warning = blas.warning()) report.say(fmt::format("warning: {}", *warning));
  }
  if (on_gpu_) {
    report.say(
        peak_flops_ > 0
            ? fmt::format("MFU: {:.3g} GFLOP per token (PaLM: 6 N + 12 L H T) against "
                          "{:.0f} TFLOP/s bf16 per GPU",
                          flops_per_token_ / 1e9, gpu_info_.bf16_peak_flops / 1e12)
            : fmt::format("MFU: not reported, the bf16 peak of {} is not known", gpu_info_.name));
  }
  report.say(fmt::format(
      "data: {} ({}, {} tokens: {} training, {} validation); {} sequences of {} per micro-batch, "
      "{} accumulation step(s): {} tokens per step",
      stream_.origin(), stream_.format(), stream_.size(), train_stream_.size(), val_stream_.size(),
      batch_, seq_, accumulation_, tokens_per_step_));
  if (const double control = stream_.control_fraction(); control > 0.01) {
    report.say(fmt::format(
        "warning: {} was read as text (bytes as tokens), but {:.1f}% of its bytes are control "
        "characters: is it binary, or a token shard without llm.c's header (magic 20240520 or "
        "20240801)?",
        stream_.origin(), 100 * control));
  }
  if (train_batches_->sequences() < per_step_) {
    report.say(fmt::format(
        "warning: {} gives {} distinct training sequence{} of {} tokens, fewer than one step "
        "takes ({}): every step trains on the same sequences again; give more data, a shorter "
        "--seq or a smaller batch",
        stream_.origin(), train_batches_->sequences(), train_batches_->sequences() == 1 ? "" : "s",
        seq_, per_step_));
  }
  const models::ActivationCost cost = lm_->activation_cost();
  if (activation_.checkpoint_blocks > 0) {
    report.say(fmt::format(
        "activation checkpointing: {} of {} blocks{}; activations kept per micro-batch {} "
        "instead of {} (saves {}); the recomputed forward adds {:.1f}% to the step's FLOPs",
        std::min(activation_.checkpoint_blocks, model_.layers()), model_.layers(),
        activation_.cpu_checkpointing ? ", saved inputs in host memory" : "",
        human_bytes(static_cast<double>(cost.kept_bytes)),
        human_bytes(static_cast<double>(cost.uncheckpointed_bytes)),
        human_bytes(static_cast<double>(cost.uncheckpointed_bytes - cost.kept_bytes)),
        100.0 * cost.recompute_flops / cost.train_flops));
  } else {
    report.say(fmt::format("activations kept per micro-batch: {}",
                           human_bytes(static_cast<double>(cost.kept_bytes))));
  }
  unsigned long long reserved = 0;
  for (const zero_tier tier : {ZERO_TIER_DEVICE, ZERO_TIER_PINNED, ZERO_TIER_HOST}) {
    unsigned long long bytes = 0;
    calls_.check(zero_memory_reserved(engine_, tier, &bytes), "zero_memory_reserved");
    reserved += bytes;
  }
  report.say(fmt::format(
      "memory: the engine reserved {} per rank and the model holds up to {} beside it "
      "(activations, workspaces, compute copies); zero_init checked both against what the "
      "machine had free",
      human_bytes(static_cast<double>(reserved)), human_bytes(static_cast<double>(model_bytes_))));
}

std::int64_t Training::start() {
  Report& report = *report_;
  try {
    if (!o_.init.empty()) {
      lm_->load_pretrained(o_.init);
      report.say("weights from " + o_.init);
    }
  } catch (const std::exception& e) {
    calls_.fail(e.what());
  }
  first_step_ = 0;
  if (!o_.resume.empty()) {
    calls_.check(zero_load_checkpoint(engine_, o_.resume.c_str(), nullptr, 0),
                 "zero_load_checkpoint");
    unsigned long long bytes = 0;
    calls_.check(zero_checkpoint_user_data(engine_, nullptr, 0, &bytes),
                 "zero_checkpoint_user_data");
    std::string text(bytes, '\0');
    calls_.check(zero_checkpoint_user_data(engine_, text.data(), bytes, nullptr),
                 "zero_checkpoint_user_data");
    const json position = json::parse(text, nullptr, false);
    if (!position.is_object() || !position.contains("step")) {
      calls_.fail(
          fmt::format("--resume {}: the checkpoint holds no zero-train data position", o_.resume));
    }
    first_step_ = position["step"].get<std::int64_t>();
    // The data position and the engine's state were saved together: they must agree.
    long long restored = 0;
    calls_.check(zero_global_steps(engine_, &restored), "zero_global_steps");
    if (restored != first_step_) {
      calls_.fail(fmt::format(
          "--resume {}: the data position says step {}, the engine's restored state step {}: "
          "the checkpoint's user data does not belong to its state (meta.json edited, or "
          "user data from another save); resume from another checkpoint",
          o_.resume, first_step_, restored));
    }
    if (position.value("data", "") != stream_.origin() ||
        position.value("data_tokens", std::uint64_t{0}) != stream_.size() ||
        position.value("seq", 0) != seq_) {
      report.say(fmt::format(
          "warning: the checkpoint was trained on {} ({} tokens, sequences of {}); this run reads "
          "{} ({} tokens, {}): the data position carries over by step only",
          position.value("data", "?"), position.value("data_tokens", std::uint64_t{0}),
          position.value("seq", 0), stream_.origin(), stream_.size(), seq_));
    }
    report.say(fmt::format("resumed from {} at step {} ({} sequences taken)", o_.resume,
                           first_step_, position.value("sequences_taken", std::uint64_t{0})));
  }
  if (first_step_ >= o_.steps) {
    report.say(fmt::format("nothing to do: the run is at step {} of {}", first_step_, o_.steps));
  }
  began_ = Clock::now();
  return first_step_;
}

}  // namespace zero::train
