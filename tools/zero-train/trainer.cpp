// zero-train's training run (see options.h): the engine from the config and the flags, the
// reference model on it (model_choice.h), the data cut into each rank's micro-batches, the loop
// with evaluation and checkpoints, and the summary. Uses only zero.h, the reference model and the
// data reader.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <unistd.h>

#include "models/data/token_stream.h"
#include "models/gpu_info.h"
#include "tools/zero-train/model_choice.h"
#include "tools/zero-train/options.h"
#include "tools/zero-train/report.h"
#include "zero/zero.h"

namespace zero::train {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A failing engine call: after zero_create, one rank's failure must end every rank (the others
// may wait in a collective), so it goes through zero_abort.
class EngineCalls {
 public:
  explicit EngineCalls(zero_engine* engine) : engine_(engine) {}
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

// The config file as JSON, for what only its text says: whether "auto" stands at a key, and
// whether it has an activation_checkpointing section.
json read_raw_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("--config {}: cannot read it", path));
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str(), nullptr, /*allow_exceptions=*/false, /*ignore_comments=*/true);
}

bool is_auto(const json& raw, const std::string& dotted) {
  const json* node = &raw;
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
std::vector<std::string> overrides(const TrainOptions& o, const json& raw) {
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

json config_value(zero_engine* engine, const EngineCalls& calls, const char* key) {
  unsigned long long needed = 0;
  calls.check(zero_config_value(engine, key, nullptr, 0, &needed), "zero_config_value");
  std::string text(needed, '\0');
  calls.check(zero_config_value(engine, key, text.data(), needed, nullptr), "zero_config_value");
  text.resize(needed - 1);
  return json::parse(text);
}

// What a checkpoint keeps of the data: enough to continue on the same sequences; and the
// model's Hugging Face config.json, which zero-ckpt export writes beside the weights.
std::string data_position(const TrainOptions& o, const ModelChoice& model,
                          const data::TokenStream& stream, std::int64_t step,
                          std::uint64_t sequences_per_step, int seq) {
  return json{{"trainer", "zero-train"},
              {"model", model.name()},
              {"hf_config", model.hf_config()},
              {"hf_generation_config", model.generation_config()},
              {"step", step},
              {"sequences_taken", static_cast<std::uint64_t>(step) * sequences_per_step},
              {"seq", seq},
              {"data", stream.origin()},
              {"data_tokens", stream.size()},
              {"seed", o.seed}}
      .dump();
}

// Peak bytes by tier and kind, every rank's, gathered on every rank through the mean (each rank
// fills its own slots, the others are 0, so world * mean is the value): [rank][tier][kind].
std::vector<double> gather_memory(zero_engine* engine, const EngineCalls& calls, int rank,
                                  int world) {
  constexpr int kTiers = Report::kTiers, kKinds = Report::kKinds;
  std::vector<double> peaks(static_cast<std::size_t>(world * kTiers * kKinds), 0.0);
  for (int t = 0; t < kTiers; ++t) {
    for (int k = 0; k < kKinds; ++k) {
      unsigned long long live = 0, peak = 0;
      calls.check(zero_memory_bytes(engine, static_cast<zero_tier>(t), static_cast<zero_kind>(k),
                                    &live, &peak),
                  "zero_memory_bytes");
      peaks[static_cast<std::size_t>((rank * kTiers + t) * kKinds + k)] = static_cast<double>(peak);
    }
  }
  calls.check(zero_mean_across_ranks(engine, peaks.data(), static_cast<int>(peaks.size())),
              "zero_mean_across_ranks");
  for (double& v : peaks) v *= world;
  return peaks;
}

}  // namespace

int run(const TrainOptions& o) {
  // Unparsable text comes back discarded; zero_create reads the file again and names the line.
  const json raw = read_raw_config(o.config);
  // Before the engine: the model's sizes and the data, so that their errors come first.
  const ModelChoice model = ModelChoice::from_options(o);
  const int seq = o.seq.value_or(std::min(model.max_seq(), 1024));
  if (seq > model.max_seq()) throw std::runtime_error(model.seq_advice(seq));
  if (seq < 1) throw std::runtime_error(fmt::format("--seq {} must be at least 1", seq));
  const data::TokenStream stream = data::TokenStream::open(
      o.data, o.data_format == "text" ? data::DataFormat::text : data::DataFormat::automatic);
  data::TokenStream train_stream, val_stream;
  stream.split(o.val_fraction, seq, train_stream, val_stream);

  const std::vector<std::string> sets = overrides(o, raw);
  std::vector<const char*> set_c;
  for (const std::string& s : sets) set_c.push_back(s.c_str());
  zero_create_options create{};
  create.overrides = set_c.data();
  create.override_count = static_cast<int>(set_c.size());
  // Automatic: a GPU when the build has CUDA and the machine one (the CUDA layers), else the CPU.
  create.device = o.device;
  create.optimizer_threads = omp_get_max_threads();
  create.seed = o.seed;
  zero_engine* engine = nullptr;
  if (zero_create_from_file(o.config.c_str(), &create, &engine) != ZERO_OK) {
    throw std::runtime_error(zero_last_error());
  }
  const EngineCalls calls(engine);
  int rank = 0, world = 1;
  calls.check(zero_rank(engine, &rank), "zero_rank");
  calls.check(zero_world_size(engine, &world), "zero_world_size");
  // The model's layers run where the engine put the parameters: the CUDA layers on a GPU.
  zero_memory_kind location = ZERO_MEMORY_HOST;
  int gpu = -1;
  calls.check(zero_data_location(engine, &location, &gpu), "zero_data_location");
  const bool on_gpu = location == ZERO_MEMORY_CUDA;
  models::GpuInfo gpu_info;
  if (on_gpu) {
    try {
      gpu_info = models::gpu_info(gpu);
    } catch (const std::exception& e) {
      calls.fail(e.what());
    }
  }
  // Found now, not at the first save after hours of training.
  if (!o.save.empty()) {
    if (const std::string problem = save_problem(o.save); !problem.empty()) {
      calls.fail(
          fmt::format("--save {}: {} (rank {}); checkpoints need a directory every rank "
                      "can write",
                      o.save, problem, rank));
    }
  }

  const int batch = config_value(engine, calls, "train_micro_batch_size_per_gpu").get<int>();
  const int accumulation = config_value(engine, calls, "gradient_accumulation_steps").get<int>();
  const std::int64_t print_every =
      config_value(engine, calls, "steps_per_print").get<std::int64_t>();
  const bool breakdown = config_value(engine, calls, "wall_clock_breakdown").get<bool>();
  const json ac = config_value(engine, calls, "activation_checkpointing");
  models::ActivationOptions activation_options;
  if (o.activation_checkpointing || (raw.is_object() && raw.contains("activation_checkpointing"))) {
    activation_options.checkpoint_blocks =
        ac.contains("number_checkpoints") ? ac["number_checkpoints"].get<int>() : model.layers();
    activation_options.cpu_checkpointing = ac.value("cpu_checkpointing", false);
  }

  Report report(rank == 0, o.steps, print_every, breakdown, o.progress, o.metrics);
  const std::uint64_t per_step = static_cast<std::uint64_t>(world) * accumulation * batch;
  const std::int64_t tokens_per_step = static_cast<std::int64_t>(per_step) * seq;

  std::unique_ptr<models::CausalLm> lm;
  std::unique_ptr<data::Batcher> train_batches, val_batches;
  try {
    lm = model.build(engine, batch, seq, o.seed, activation_options, on_gpu);
    train_batches = std::make_unique<data::Batcher>(train_stream, batch, seq, model.vocab());
    if (val_stream.size() > static_cast<std::size_t>(seq)) {
      val_batches = std::make_unique<data::Batcher>(val_stream, batch, seq, model.vocab());
    }
  } catch (const std::exception& e) {
    calls.fail(on_gpu ? fmt::format("{} (GPU {}, rank {}; --device 1 trains on the CPU)", e.what(),
                                    gpu, rank)
                      : std::string(e.what()));
  }
  if (const zero_status status = zero_init(engine); status != ZERO_OK) {
    // A reservation too large for the machine comes from the model's sizes as often as from
    // the config's buffers: name them too.
    calls.fail(fmt::format("zero_init: {}: {}{}", zero_status_string(status), zero_last_error(),
                           status == ZERO_ERROR_OUT_OF_MEMORY
                               ? fmt::format("; {}", model.largest_tensor())
                               : std::string()));
  }

  report.say(fmt::format("zero-train: {} ({:.2f}M parameters; {}) on {} rank(s), {}", model.name(),
                         static_cast<double>(model.parameters()) / 1e6, model.shape(), world,
                         on_gpu
                             ? fmt::format("GPU {} ({}), CUDA layers in bf16", gpu, gpu_info.name)
                             : std::string("CPU layers")));
  // MFU: PaLM's FLOPs per token against the GPU's dense bf16 peak, over every rank's GPU.
  const double flops_per_token = model.flops_per_token(seq);
  const double peak_flops = on_gpu ? gpu_info.bf16_peak_flops * world : 0.0;
  if (on_gpu) {
    report.say(
        peak_flops > 0
            ? fmt::format("MFU: {:.3g} GFLOP per token (PaLM: 6 N + 12 L H T) against "
                          "{:.0f} TFLOP/s bf16 per GPU",
                          flops_per_token / 1e9, gpu_info.bf16_peak_flops / 1e12)
            : fmt::format("MFU: not reported, the bf16 peak of {} is not known", gpu_info.name));
  }
  report.say(fmt::format(
      "data: {} ({}, {} tokens: {} training, {} validation); {} sequences of {} per micro-batch, "
      "{} accumulation step(s): {} tokens per step",
      stream.origin(), stream.format(), stream.size(), train_stream.size(), val_stream.size(),
      batch, seq, accumulation, tokens_per_step));
  if (const double control = stream.control_fraction(); control > 0.01) {
    report.say(fmt::format(
        "warning: {} was read as text (bytes as tokens), but {:.1f}% of its bytes are control "
        "characters: is it binary, or a token shard without llm.c's header (magic 20240520 or "
        "20240801)?",
        stream.origin(), 100 * control));
  }
  if (train_batches->sequences() < per_step) {
    report.say(fmt::format(
        "warning: {} gives {} distinct training sequence{} of {} tokens, fewer than one step "
        "takes ({}): every step trains on the same sequences again; give more data, a shorter "
        "--seq or a smaller batch",
        stream.origin(), train_batches->sequences(), train_batches->sequences() == 1 ? "" : "s",
        seq, per_step));
  }
  const models::ActivationCost cost = lm->activation_cost();
  if (activation_options.checkpoint_blocks > 0) {
    report.say(fmt::format(
        "activation checkpointing: {} of {} blocks{}; activations kept per micro-batch {} "
        "instead of {} (saves {}); the recomputed forward adds {:.1f}% to the step's FLOPs",
        std::min(activation_options.checkpoint_blocks, model.layers()), model.layers(),
        activation_options.cpu_checkpointing ? ", saved inputs in host memory" : "",
        human_bytes(static_cast<double>(cost.kept_bytes)),
        human_bytes(static_cast<double>(cost.uncheckpointed_bytes)),
        human_bytes(static_cast<double>(cost.uncheckpointed_bytes - cost.kept_bytes)),
        100.0 * cost.recompute_flops / cost.train_flops));
  } else {
    report.say(fmt::format("activations kept per micro-batch: {}",
                           human_bytes(static_cast<double>(cost.kept_bytes))));
  }

  try {
    if (!o.init.empty()) {
      lm->load_pretrained(o.init);
      report.say("weights from " + o.init);
    }
  } catch (const std::exception& e) {
    calls.fail(e.what());
  }
  std::int64_t start = 0;
  if (!o.resume.empty()) {
    calls.check(zero_load_checkpoint(engine, o.resume.c_str(), nullptr, 0), "zero_load_checkpoint");
    unsigned long long bytes = 0;
    calls.check(zero_checkpoint_user_data(engine, nullptr, 0, &bytes), "zero_checkpoint_user_data");
    std::string text(bytes, '\0');
    calls.check(zero_checkpoint_user_data(engine, text.data(), bytes, nullptr),
                "zero_checkpoint_user_data");
    const json position = json::parse(text, nullptr, false);
    if (!position.is_object() || !position.contains("step")) {
      calls.fail(
          fmt::format("--resume {}: the checkpoint holds no zero-train data position", o.resume));
    }
    start = position["step"].get<std::int64_t>();
    // The data position and the engine's state were saved together: they must agree.
    long long restored = 0;
    calls.check(zero_global_steps(engine, &restored), "zero_global_steps");
    if (restored != start) {
      calls.fail(fmt::format(
          "--resume {}: the data position says step {}, the engine's restored state step {}: "
          "the checkpoint's user data does not belong to its state (meta.json edited, or "
          "user data from another save); resume from another checkpoint",
          o.resume, start, restored));
    }
    if (position.value("data", "") != stream.origin() ||
        position.value("data_tokens", std::uint64_t{0}) != stream.size() ||
        position.value("seq", 0) != seq) {
      report.say(fmt::format(
          "warning: the checkpoint was trained on {} ({} tokens, sequences of {}); this run reads "
          "{} ({} tokens, {}): the data position carries over by step only",
          position.value("data", "?"), position.value("data_tokens", std::uint64_t{0}),
          position.value("seq", 0), stream.origin(), stream.size(), seq));
    }
    report.say(fmt::format("resumed from {} at step {} ({} sequences taken)", o.resume, start,
                           position.value("sequences_taken", std::uint64_t{0})));
  }
  if (start >= o.steps) {
    report.say(fmt::format("nothing to do: the run is at step {} of {}", start, o.steps));
  }

  const std::size_t n = static_cast<std::size_t>(batch) * seq;
  std::vector<std::int32_t> tokens(n), targets(n);
  // fp16 skips a step whose gradients are not finite and lowers the loss scale; fp32 and bf16
  // stop at a non-finite loss.
  zero_dtype compute = ZERO_FP32;
  calls.check(zero_compute_dtype(engine, &compute), "zero_compute_dtype");
  const bool fp16 = compute == ZERO_FP16;

  // Evaluation: eval_batches micro-batches of the validation part, split over the ranks, the
  // same ones every time.
  auto evaluate = [&]() -> double {
    if (!val_batches) return -1;
    double sum[2] = {0, 0};  // loss sum, batches
    for (int k = rank; k < o.eval_batches; k += world) {
      val_batches->fill(static_cast<std::uint64_t>(k) * batch, tokens.data(), targets.data());
      sum[0] += lm->evaluate(tokens.data(), targets.data());
      sum[1] += 1;
    }
    // Every rank must make the same number of passes: stage 3 gathers in the forward hooks.
    const int passes = (o.eval_batches + world - 1) / world;
    for (int k = static_cast<int>(sum[1]); k < passes; ++k) {
      val_batches->fill(0, tokens.data(), targets.data());
      lm->evaluate(tokens.data(), targets.data());
    }
    calls.check(zero_mean_across_ranks(engine, sum, 2), "zero_mean_across_ranks");
    return sum[1] > 0 ? sum[0] / sum[1] : -1;
  };
  auto save = [&](std::int64_t step) {
    const std::string position = data_position(o, model, stream, step, per_step, seq);
    const auto began = Clock::now();
    calls.check(
        zero_save_checkpoint(engine, o.save.c_str(), nullptr, position.data(), position.size()),
        "zero_save_checkpoint");
    report.say(
        fmt::format("saved {}/global_step{} in {:.2f} s", o.save, step, seconds_since(began)));
  };

  const auto began = Clock::now();
  std::int64_t tokens_trained = 0;
  double last_loss = 0, last_eval = -1, best_tokens_per_s = 0, tokens_per_s_sum = 0;
  std::int64_t timed_steps = 0;
  for (std::int64_t step = start; step < o.steps; ++step) {
    const auto step_began = Clock::now();
    StepRecord r;
    double loss = 0;
    zero_step_stats stats{};
    try {
      for (int m = 0; m < accumulation; ++m) {
        train_batches->fill(
            data::Batcher::first_sequence(step, m, accumulation, rank, world, batch), tokens.data(),
            targets.data());
        auto t = Clock::now();
        loss += lm->forward(tokens.data(), targets.data());
        r.forward_s += seconds_since(t);
        t = Clock::now();
        lm->backward();
        r.backward_s += seconds_since(t);
        t = Clock::now();
        calls.check(zero_step(engine, &stats), "zero_step");
        r.engine_step_s += seconds_since(t);
      }
    } catch (const std::exception& e) {
      calls.fail(fmt::format("step {}: {}", step + 1, e.what()));
    }
    loss /= accumulation;
    calls.check(zero_mean_across_ranks(engine, &loss, 1), "zero_mean_across_ranks");
    if (!std::isfinite(loss) && !fp16) {
      // Every rank has the same mean, so every rank stops here.
      if (rank == 0) {
        std::fprintf(stderr,
                     "zero-train: step %lld: the loss is %s; without fp16's loss scale there is "
                     "no step to skip, and the weights are no longer finite: the run stops "
                     "without saving. Lower the learning rate, check the data and the model's "
                     "config (a --init directory's config.json), or resume from an earlier "
                     "checkpoint\n",
                     static_cast<long long>(step + 1), std::isnan(loss) ? "NaN" : "infinite");
      }
      lm.reset();
      calls.check(zero_destroy(engine), "zero_destroy");
      return 1;
    }
    r.step = step + 1;
    r.loss = loss;
    r.lr = stats.lr;
    r.loss_scale = stats.loss_scale;
    r.grad_norm = stats.grad_norm;
    r.skipped = stats.skipped != 0;
    r.step_time_s = seconds_since(step_began);
    r.tokens_per_s = static_cast<double>(tokens_per_step) / r.step_time_s;
    r.mfu = peak_flops > 0 ? r.tokens_per_s * flops_per_token / peak_flops : -1;
    tokens_trained += tokens_per_step;
    r.tokens = tokens_trained;
    r.elapsed_s = seconds_since(began);
    r.eta_s = r.elapsed_s / static_cast<double>(step + 1 - start) *
              static_cast<double>(o.steps - step - 1);
    report.step(r);
    last_loss = loss;
    if (step > start) {  // the first step warms up (allocation, recorded gather order)
      tokens_per_s_sum += r.tokens_per_s;
      ++timed_steps;
      best_tokens_per_s = std::max(best_tokens_per_s, r.tokens_per_s);
    }
    const bool last = step + 1 == o.steps;
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      last_eval = evaluate();
      if (last_eval >= 0) report.eval(step + 1, last_eval, seconds_since(began));
    }
    if (!o.save.empty() && ((o.save_every > 0 && (step + 1) % o.save_every == 0) || last)) {
      save(step + 1);
    }
  }

  const double elapsed = seconds_since(began);
  const std::vector<double> memory = gather_memory(engine, calls, rank, world);
  // What this rank reserved per tier (every rank the same): what zero-mem predicts.
  json reserved = json::object();
  for (const auto& [tier, name] :
       {std::pair{ZERO_TIER_DEVICE, "device"}, std::pair{ZERO_TIER_PINNED, "pinned"},
        std::pair{ZERO_TIER_HOST, "host"}, std::pair{ZERO_TIER_NVME, "nvme"}}) {
    unsigned long long bytes = 0;
    calls.check(zero_memory_reserved(engine, tier, &bytes), "zero_memory_reserved");
    reserved[name] = bytes;
  }
  const double mean_tokens_per_s = timed_steps > 0 ? tokens_per_s_sum / timed_steps : 0;
  if (report.active()) {
    report.say(fmt::format(
        "done: {} steps in {} ({} tokens), {:.0f} tokens/s (mean after the first step){}, final "
        "loss {:.4f}{}",
        o.steps - start, human_duration(elapsed), tokens_trained, mean_tokens_per_s,
        peak_flops > 0
            ? fmt::format(", MFU {:.1f}%", 100 * mean_tokens_per_s * flops_per_token / peak_flops)
            : std::string(),
        last_loss, last_eval >= 0 ? fmt::format(", validation loss {:.4f}", last_eval) : ""));
    report.memory(memory, world);
    json summary{{"kind", "summary"},
                 {"steps", o.steps - start},
                 {"tokens", tokens_trained},
                 {"elapsed_s", elapsed},
                 {"tokens_per_s", mean_tokens_per_s},
                 {"mfu", peak_flops > 0 ? json(mean_tokens_per_s * flops_per_token / peak_flops)
                                        : json(nullptr)},
                 {"device", on_gpu ? gpu_info.name : std::string("cpu")},
                 {"best_tokens_per_s", best_tokens_per_s},
                 {"final_loss", last_loss},
                 {"eval_loss", last_eval},
                 {"world_size", world},
                 {"micro_batch", batch},
                 {"accumulation", accumulation},
                 {"seq", seq},
                 {"model", model.name()},
                 {"parameters", model.parameters()},
                 {"activation_checkpointing", activation_options.checkpoint_blocks},
                 {"activation_bytes", cost.kept_bytes},
                 {"memory_peak_bytes", memory},
                 {"memory_reserved_bytes", reserved}};
    report.metrics(summary);
  }
  lm.reset();
  calls.check(zero_destroy(engine), "zero_destroy");
  return 0;
}

}  // namespace zero::train
