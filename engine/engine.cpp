// The Engine's registration, init (layout, the parts, allocation), module hooks and accessors;
// the parts (ModelState, Stepper, GradReducer, ParamFetcher) and the other concerns
// (initial_values.cpp, pretrained.cpp, ...) are listed in engine_impl.h.
#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <unistd.h>
#include <xxhash.h>

#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/collectives/shard_groups.h"
#include "engine/collectives/timed_communicator.h"
#include "engine/engine_impl.h"
#include "engine/fault_hooks.h"
#include "offload/swap_cleanup.h"

namespace zero::engine {

Engine::Impl::Impl(config::Config config_in, std::unique_ptr<Device> device_in,
                   std::unique_ptr<Communicator> comm_in, EngineOptions options_in)
    : config(std::move(config_in)),
      options(options_in),
      device(std::move(device_in)),
      comm(std::move(comm_in)),
      registry(config.optimizer.weight_decay),
      pass(registry) {
  if (!device) throw make_error(ErrorCategory::usage, "Engine: no device given");
  if (!comm) throw make_error(ErrorCategory::usage, "Engine: no communicator given");
  if (comm->device() != device.get() && !device->host_addressable(Tier::device)) {
    throw make_error(ErrorCategory::usage,
                     "Engine: the communicator was made for {}, the engine runs on {}, whose "
                     "memory the host cannot address; make the communicator with "
                     "CommOptions::device set to the engine's device",
                     comm->device() ? comm->device()->description() : "host memory",
                     device->description());
  }
  if (config.wall_clock_breakdown) {
    timeline = std::make_unique<OverlapTimeline>(*device);
    if (comm->stream() != nullptr) {
      comm = std::make_unique<TimedCommunicator>(std::move(comm), *device, *timeline);
    }
  }
  order = std::make_unique<CallerOrder>(*device);
  agreement = Agreement(*comm, *device);
  rank = comm->rank();
  world = comm->size();
  if (config.world_size != world) {
    throw make_error(ErrorCategory::config,
                     "the config was resolved for a world of {} ranks but the communicator has {}; "
                     "read it with ReadOptions::world_size = {}",
                     config.world_size, world, world);
  }
  layout.modes = state_modes(config, world);
  layout.world = world;
  shard_rank = rank;
  if (layout.modes.hybrid()) {
    if (config.zero.hybrid_shard) check_groups_are_nodes(agreement, layout.modes.shard_ranks);
    ShardGroups groups = split_shard_groups(*comm, layout.modes.shard_ranks);
    shard_comm = std::move(groups.shards);
    replica_comm = std::move(groups.replicas);
    shard_rank = shard_comm->rank();
  }
  if (layout.modes.hpz_ranks > 1) {
    secondary_comm = comm->split(rank / layout.modes.hpz_ranks, rank);
  }
  if (config.precision == config::Precision::fp16) {
    initial_scaler = LossScaler::from_config(config.fp16);
  }
}

Engine::Impl::~Impl() {
  // This rank issues no collective from here on: a rank still waiting for one fails at once
  // (Communicator::depart), instead of both waiting for each other at the teardown below.
  for (Communicator* c : {comm.get(), shard_comm.get(), replica_comm.get(), secondary_comm.get()}) {
    if (c != nullptr) c->depart();
  }
  // The speculation's worker steps on the state and the device's streams: it ends first.
  if (stepper) stepper->stop_speculation();
  // The device's work, once, before anything it uses goes: never through the callers' streams,
  // which their owners may have destroyed already (zero.h, "Streams"). Not when the
  // communicator is broken: its collectives may never complete.
  if (!comm->poisoned()) {
    try {
      device->synchronize();
    } catch (const std::exception& error) {
      log::warn("engine: waiting for the device's work at shutdown failed: {}", error.what());
    }
  }
  // Outstanding collectives hold our buffers: finish them before the memory goes, unless the
  // communicator is already broken (then nothing more can complete).
  reducer.reset();
  // Reads, gathers and writes of parameter shards still in flight use the file and buffers
  // about to go.
  fetcher.reset();
  model_state.reset();
  if (scalars != nullptr) device->unreserve(Tier::device, scalars, kScratchBytes);
}

void Engine::Impl::fail(std::string what) {
  failed = true;
  failure = std::move(what);
  if (model_state)
    model_state->keep_swap_files(fmt::format("the engine stopped after a failure: {}", failure));
}

void Engine::Impl::drain_steps() {
  if (!stepper || !stepper->speculation_tail_pending()) return;
  if (fetcher) fetcher->set_paced(false);
  try {
    stepper->drain_speculation();
  } catch (...) {
    if (!failed) {  // the first failure's words stay (a gather's names the parameter)
      fail(
          "a step's last groups failed after step() returned, so the optimizer state may be "
          "half updated");
    }
    throw;
  }
}

void Engine::Impl::settle_verdict() {
  if (!stepper) return;
  const std::optional<StepVerdict::Outcome> outcome = stepper->settle_verdict();
  if (outcome && last_stats.verdict_pending &&
      last_stats.global_steps == outcome->step.global_step) {
    last_stats.skipped = outcome->skipped;
    last_stats.grad_norm = outcome->grad_norm;
    last_stats.verdict_pending = false;
  }
}

void Engine::Impl::require_initialized(const char* call) const {
  if (!initialized) {
    throw make_error(ErrorCategory::usage, "{}: the engine is not initialised yet; call init first",
                     call);
  }
}

void Engine::Impl::require_running(const char* call) const {
  require_initialized(call);
  if (failed) {
    throw make_error(ErrorCategory::usage,
                     "{} after a failure ({}): destroy the engine and start "
                     "again from a checkpoint",
                     call, failure);
  }
}

void Engine::Impl::require_quiet(const char* call) const {
  require_running(call);
  pass.require_none_open(call, "call it between passes");
  pass.require_not_backward(call, ": call step() first");
  const auto steps = config.batch.gradient_accumulation_steps;
  if (micro_steps % steps != 0) {
    throw make_error(ErrorCategory::usage,
                     "{} inside an accumulation window ({} of {} micro-steps done): the "
                     "accumulated gradients are not part of a checkpoint; call it after the step "
                     "that ends the window",
                     call, micro_steps % steps, steps);
  }
}

std::size_t Engine::Impl::require_module(std::size_t module, const char* call) const {
  if (module >= registry.module_count()) {
    throw make_error(ErrorCategory::usage, "{}: module {} does not exist ({} modules registered)",
                     call, module, registry.module_count());
  }
  return module;
}

std::size_t Engine::Impl::require_param(std::size_t param, const char* call) const {
  if (param >= registry.param_count()) {
    throw make_error(ErrorCategory::usage,
                     "{}: parameter {} does not exist ({} parameters registered)", call, param,
                     registry.param_count());
  }
  return param;
}

Stream& Engine::Impl::stream_of(Stream* stream) {
  return order->caller(stream);
}

void Engine::Impl::poll_outstanding() {
  if (reducer) reducer->poll();
  if (fetcher) fetcher->poll();
}

// Every rank must register the same groups, modules and parameters with the same kind of
// initial value: the layout, the buckets and the gathers are computed from them.
void Engine::Impl::check_same_registration() {
  // Whether a parameter has an initializer changes the collectives init issues; whether it
  // has values matters on rank 0 only.
  std::vector<std::uint8_t> has_initializer;
  for (const auto& value : initial) has_initializer.push_back(value.initializer ? 1 : 0);
  const std::uint64_t mine_summary[2] = {
      registry.hash() ^ XXH3_64bits(has_initializer.data(), has_initializer.size()),
      static_cast<std::uint64_t>(registry.entry_count())};
  if (agreement.same_everywhere(mine_summary)) return;

  // Name the first entry that differs from rank 0's.
  std::uint64_t root_count = registry.entry_count();
  agreement.broadcast(std::span(&root_count, 1), 0);
  const auto mine = registry.entry_hashes();
  std::vector<std::uint64_t> root(root_count);
  if (rank == 0) root = mine;
  agreement.broadcast(root, 0);
  std::size_t k = 0;
  while (k < mine.size() && k < root.size() && mine[k] == root[k]) ++k;
  const bool differs = k < mine.size() || k < root.size();
  // Every rank names the same first rank that differs, with its entry and rank 0's.
  const std::vector<std::string> verdicts = agreement.all_gather_text(
      differs ? fmt::format("{}\n{}\n{}", k, mine.size(),
                            k < mine.size() ? registry.describe_entry(k)
                                            : std::string("nothing (the list ends here)"))
              : std::string());
  std::size_t first = 0;
  while (first < verdicts.size() && verdicts[first].empty()) ++first;
  if (first == verdicts.size()) {
    throw make_error(ErrorCategory::usage,
                     "init: every rank registered the same groups, modules and parameters, but "
                     "not every rank gave an initializer to the same parameters; every rank "
                     "must give initializers to the same ones");
  }
  const std::string& verdict = verdicts[first];
  const std::size_t newline = verdict.find('\n');
  const std::size_t second = verdict.find('\n', newline + 1);
  const std::size_t entry = std::stoull(verdict.substr(0, newline));
  const std::string count = verdict.substr(newline + 1, second - newline - 1);
  const std::vector<std::string> at_root = agreement.all_gather_text(
      rank == 0 ? (entry < registry.entry_count() ? registry.describe_entry(entry)
                                                  : std::string("nothing (the list ends there)"))
                : std::string());
  throw make_error(ErrorCategory::usage,
                   "init: rank {} registered differently from rank 0: entry {} of the "
                   "registration (groups, then modules, then parameters) is {} on rank {} and {} "
                   "on rank 0 ({} entries on rank {}, {} on rank 0). Every rank must register "
                   "the same groups, modules and parameters in the same order: the same model",
                   first, entry, verdict.substr(second + 1), first, at_root[0], count, first,
                   root_count);
}

// Every rank must train with the same config where it decides the collectives and the step:
// a rank at another stage or precision issues other collectives, which MPI reports as an error
// in a status, or which hang.
void Engine::Impl::check_same_config() {
  static constexpr const char* kKeys[] = {"zero_optimization.stage",
                                          "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps",
                                          "bf16.enabled",
                                          "fp16.enabled",
                                          "gradient_clipping",
                                          "communication_data_type",
                                          "zero_optimization.reduce_bucket_size",
                                          "zero_optimization.allgather_bucket_size",
                                          "zero_optimization.reduce_scatter",
                                          "zero_optimization.offload_optimizer.device",
                                          "zero_optimization.offload_param.device",
                                          "zero_optimization.sub_group_size",
                                          "zero_optimization.stage3_prefetch_bucket_size",
                                          "zero_optimization.stage3_param_persistence_threshold",
                                          "zero_optimization.stage3_max_reuse_distance",
                                          "zero_optimization.mics_shard_size",
                                          "zero_optimization.zero_hpz_partition_size",
                                          "zero_optimization.zero_quantized_weights",
                                          "zero_optimization.zero_quantized_gradients",
                                          "optimizer.type",
                                          "scheduler.type"};
  std::string mine;
  for (const char* key : kKeys) {
    const auto value = config::resolved_value(config, key);
    mine += fmt::format("{}={}\n", key, value ? value->dump() : std::string("(none)"));
  }
  const std::uint64_t summary = XXH3_64bits(mine.data(), mine.size());
  if (agreement.same_everywhere(std::span(&summary, 1))) return;
  const std::vector<std::string> all = agreement.all_gather_text(mine);
  for (std::size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::size_t at = 0;
    while (at < all[r].size() && at < all[0].size() && all[r][at] == all[0][at]) ++at;
    const auto line = [&](const std::string& text) {
      const std::size_t begin = text.rfind('\n', at == 0 ? 0 : at - 1);
      const std::size_t from = begin == std::string::npos || at == 0 ? 0 : begin + 1;
      return text.substr(from, text.find('\n', from) - from);
    };
    throw make_error(ErrorCategory::config,
                     "init: the ranks' configs differ: {} on rank 0, {} on rank {}; every rank "
                     "must use the same config (the same file, the same overrides)",
                     line(all[0]), line(all[r]), r);
  }
}

// ---- init ----

// super_offload unset: on beside a GPU where the plan with it (its second copy of the state,
// its staging) fits the machine by the fit check's rules, decided alike on every rank.
void Engine::Impl::resolve_super_offload() {
  config::OffloadOptimizerConfig& offload = config.zero.offload_optimizer;
  if (!offload.super_offload_auto) return;
  offload.super_offload_auto = false;  // decided once
  std::string why = super_offload_auto_unused(config, device->type() == DeviceType::cuda);
  if (why.empty()) {
    config::Config with = config;
    with.zero.offload_optimizer.super_offload = true;
    const Layout trial = plan_layout(registry, with, world);
    const MemoryPlan plan = plan_memory(registry, with, trial, device->offload_beside());
    const std::string sizes =
        fmt::format("{} pinned, {} host a rank", format_bytes(plan.reserved(Tier::pinned)),
                    format_bytes(plan.reserved(Tier::host)));
    if (fit.fits(plan, with, agreement)) {
      offload.super_offload = true;
      why = fmt::format("beside a GPU, and its plan fits ({})", sizes);
    } else {
      why = fmt::format(
          "its plan ({}, with the second copy of the optimizer state a clip or a skip rolls "
          "back to) does not fit this machine",
          sizes);
    }
  }
  // zero_config_value and the config's report give the decision.
  config::settle_auto(config, "zero_optimization.offload_optimizer.super_offload",
                      offload.super_offload, fmt::format("auto: {}", why));
  if (rank == 0) {
    log::info("engine: offload_optimizer.super_offload (unset: auto) is {}: {}{}",
              offload.super_offload ? "on" : "off", why,
              offload.super_offload ? "; the optimizer steps during backward (set it false to "
                                      "step after backward)"
                                    : "");
  }
}

void Engine::Impl::lay_out() {
  resolve_super_offload();
  layout = plan_layout(registry, config, world);
  // sub_group_size unset: zero_config_value and the config's report give the size taken.
  if (config.zero.sub_group_size_auto) {
    config::settle_auto(config, "zero_optimization.sub_group_size",
                        step_group_size(config, layout.modes),
                        bucket_sized_step_groups(config, layout.modes)
                            ? "auto: reduce_bucket_size over the ranks, super_offload's groups"
                            : "auto: 1e9");
  }
  memory_plan = plan_memory(registry, config, layout, device->offload_beside());
  if (const std::string why = device_accumulation_unused(config, layout, device->offload_beside());
      !why.empty()) {
    log::info("engine: offload_optimizer.accumulate_on_device has no effect here: {}", why);
  }
  model_state = std::make_unique<ModelState>(context(), memory_plan, faults);
  reducer = std::make_unique<GradReducer>(context());
  reducer->set_timeline(timeline.get());
  fetcher = std::make_unique<ParamFetcher>(context());
  stepper =
      std::make_unique<Stepper>(context(), *model_state, *reducer, *fetcher, scalars, options.seed);
  checkpoints = std::make_unique<CheckpointState>(
      context(), CheckpointState::Parts{*model_state, *stepper, *fetcher, agreement}, faults);
}

std::string Engine::Impl::agree_job_id() {
  // Engines made in one process within a second (an embedder's, the tests') differ by a count
  // above the process id.
  static std::atomic<std::uint64_t> made{0};
  const std::uint64_t sequence = made.fetch_add(1) & 0x3ff;
  std::uint64_t id = rank == 0 ? (sequence << 54) ^ (static_cast<std::uint64_t>(getpid()) << 32) ^
                                     static_cast<std::uint64_t>(std::time(nullptr))
                               : 0;
  agreement.broadcast(std::span(&id, 1), 0);
  return fmt::format("{:x}", id);
}

// The state's memory (the ModelState carves every arena in the plan's order and hands the
// reducer and the fetcher theirs), then the optimizer for the formats it holds.
void Engine::Impl::allocate() {
  const std::string job =
      modes().optimizer_nvme || modes().param_nvme ? agree_job_id() : std::string();
  ModelState::PartsMemory parts = model_state->allocate(job);
  parts.reduce_target.host_threads = std::max(options.optimizer_threads, 1);
  reducer->attach(std::move(parts.full_grads), std::move(parts.bucket_buffers),
                  std::move(parts.grad_arena), parts.reduce_target);
  if (parts.gather_arena) fetcher->attach(std::move(parts.gather_arena), *model_state);
  if (config.zero.quantized_error_check) attach_quantization_error();

  stepper->create_optimizer(options.optimizer_threads);
  if (modes().speculate) {
    reducer->set_bucket_added([s = stepper.get()](std::size_t bucket) { s->bucket_added(bucket); });
    if (faults.speculated_step) stepper->set_before_speculated_step(faults.speculated_step);
    // The step's tail: a gather waits for the updates of the shard it reads.
    if (fetcher)
      fetcher->set_before_shard_read([this](std::size_t param, Stream& stream) {
        try {
          stepper->await_param(param, stream);
        } catch (...) {
          if (!failed) {
            fail(
                fmt::format("a step's group holding '{}' failed after step() returned, so the "
                            "optimizer state may be half updated",
                            registry.param(param).name));
          }
          throw;
        }
      });
  }
}

// zero_quantized_error_check: the round trip of the largest shard a gather quantizes, and an
// exact reduce-scatter's block of the largest bucket per bucket buffer.
void Engine::Impl::attach_quantization_error() {
  std::size_t shard = 0, block = 0;
  if (modes().quantized_weights) {
    for (const ParamPlacement& place : layout.params) shard = std::max(shard, place.shape.shard);
  }
  if (modes().quantized_gradients) {
    for (const Bucket& bucket : layout.buckets) block = std::max(block, bucket.block);
  }
  const std::size_t buffers = block != 0 ? memory_plan.bucket_count : 0;
  quantization_error = std::make_unique<QuantizationError>(
      *device, shard * dtype_size(modes().compute), buffers, block * dtype_size(modes().wire));
  if (shard != 0) fetcher->set_error(quantization_error.get());
  if (buffers != 0)
    reducer->set_error(quantization_error.get(), quantization_error->exact_buffers());
}

// ---- Engine ----
// Every call that may touch the model state holds a DeviceMemoryGuard: on the guarded CPU
// device, engine code that reads or writes device memory from the host faults there, as it
// would on a GPU, instead of passing on the CPU alone.

void set_fault_hooks(Engine& engine, FaultHooks hooks) {
  if (engine.impl_->initialized) {
    throw make_error(ErrorCategory::usage, "set_fault_hooks after init: set them before init");
  }
  engine.impl_->faults = std::move(hooks);
}

Engine::Engine(config::Config config, std::unique_ptr<Device> device,
               std::unique_ptr<Communicator> comm, EngineOptions options)
    : impl_(
          std::make_unique<Impl>(std::move(config), std::move(device), std::move(comm), options)) {
  impl_->scalars = static_cast<float*>(impl_->device->reserve(Tier::device, kScratchBytes));
  impl_->agreement.use_scratch(reinterpret_cast<char*>(impl_->scalars) + kAgreementScratch,
                               kScratchBytes - kAgreementScratch);
  impl_->fit.note_free(impl_->agreement, *impl_->device, impl_->config, impl_->modes());
}

Engine::~Engine() = default;

const config::Config& Engine::config() const noexcept {
  return impl_->config;
}
int Engine::rank() const noexcept {
  return impl_->rank;
}
int Engine::world_size() const noexcept {
  return impl_->world;
}
DType Engine::compute_dtype() const noexcept {
  return impl_->modes().compute;
}
const Registry& Engine::registry() const noexcept {
  return impl_->registry;
}
Device& Engine::device() noexcept {
  return *impl_->device;
}
const Device& Engine::device() const noexcept {
  return *impl_->device;
}
Communicator& Engine::communicator() noexcept {
  return *impl_->comm;
}
bool Engine::initialized() const noexcept {
  return impl_->initialized;
}
bool Engine::training() const noexcept {
  return impl_->train;
}

std::size_t Engine::add_group(std::string name, double weight_decay, double lr_scale) {
  return impl_->registry.add_group(std::move(name), weight_decay, lr_scale);
}

std::size_t Engine::add_module(std::string name) {
  const std::size_t index = impl_->registry.add_module(std::move(name));
  impl_->pass.add_module();
  return index;
}

std::size_t Engine::add_param(std::string name, std::vector<std::int64_t> shape, bool trainable,
                              std::size_t group, std::vector<std::size_t> modules,
                              InitialValue initial) {
  const std::size_t index = impl_->registry.add_param(std::move(name), std::move(shape), trainable,
                                                      group, std::move(modules));
  impl_->initial.push_back(std::move(initial));
  return index;
}

void Engine::declare_memory(Tier tier, std::uint64_t bytes, std::string what) {
  if (impl_->initialized) {
    throw make_error(ErrorCategory::usage,
                     "declare_memory: the engine is initialised; declare memory before init");
  }
  impl_->fit.declare(tier, bytes, std::move(what));
}

void Engine::init() {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  if (e.initialized)
    throw make_error(ErrorCategory::usage, "init: the engine is already initialised");
  e.registry.freeze();
  e.check_same_config();
  e.check_same_registration();
  e.lay_out();
  e.fit.check(e.memory_plan, e.config, e.agreement);
  e.allocate();
  e.fill_initial_values();
  e.initialized = true;
  log::info(
      "engine: ZeRO stage {} on {} rank{}{}, {} parameters of {} elements ({} trainable), {} "
      "compute, {} reduction buckets{}; {}",
      e.modes().stage, e.world, e.world == 1 ? "" : "s",
      e.modes().hybrid() ? fmt::format(" (hybrid: {} shard groups of {} ranks)", e.modes().replicas,
                                       e.modes().shard_ranks)
      : e.modes().hpz_ranks > 1
          ? fmt::format(" (hpZ: secondary groups of {} ranks)", e.modes().hpz_ranks)
          : std::string(),
      e.registry.param_count(), e.registry.total_numel(), e.registry.trainable_numel(),
      dtype_name(e.modes().compute), e.reducer->bucket_count(),
      e.modes().quantized_weights || e.modes().quantized_gradients
          ? fmt::format(" (ZeRO++ int8: {}{}{})", e.modes().quantized_weights ? "gathers" : "",
                        e.modes().quantized_weights && e.modes().quantized_gradients ? ", " : "",
                        e.modes().quantized_gradients ? "reduce-scatter" : "")
          : std::string(),
      e.stepper->optimizer().description());
}

void Engine::pre_forward(std::size_t module, Stream* stream) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_running("pre_forward");
  e.require_module(module, "pre_forward");
  Stream& caller = e.stream_of(stream);
  const bool top = !e.pass.any_open();
  if (e.pass.enter_forward(module)) {
    e.phase_timer.restart();
    if (e.timeline) e.timeline->start(caller);
  }
  e.order->after(caller);
  e.fetcher->enter(module, /*backward=*/false, e.train, top, caller);
  e.poll_outstanding();
  e.order->before(caller);
  if (e.timeline) e.timeline->compute_begin(caller);
}

void Engine::post_forward(std::size_t module, Stream* stream) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_running("post_forward");
  e.require_module(module, "post_forward");
  e.pass.leave_forward(module);
  if (e.timeline) e.timeline->compute_end(e.stream_of(stream));
  e.order->after(e.stream_of(stream));  // what is released is reused after the caller's reads
  e.fetcher->leave(module, e.train);
  e.poll_outstanding();
}

void Engine::pre_backward(std::size_t module, Stream* stream) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_running("pre_backward");
  e.require_module(module, "pre_backward");
  if (!e.train) {
    throw make_error(ErrorCategory::usage,
                     "pre_backward of module '{}' in eval mode: call set_train(true) before a "
                     "training pass",
                     e.registry.module(module).name);
  }
  Stream& caller = e.stream_of(stream);
  const bool top = !e.pass.any_open();
  e.drain_steps();  // backward writes the gradients the step's tail reads
  PassTracker::Phase was = PassTracker::Phase::idle;
  if (e.pass.enter_backward(module, &was)) {
    if (was == PassTracker::Phase::idle && e.timeline) e.timeline->start(caller);
    if (was == PassTracker::Phase::forward) e.timers.forward += e.phase_timer.seconds();
    e.phase_timer.restart();
    e.reducer->begin_backward(e.micro_steps);
    // super_offload: the boundary's groups are stepped as their gradients become final.
    if (is_accumulation_boundary()) e.stepper->arm_speculation();
  }
  e.order->after(caller);
  e.fetcher->enter(module, /*backward=*/true, e.train, top, caller);
  for (std::size_t p : e.registry.module(module).params) {
    if (e.registry.param(p).trainable) e.reducer->hand_out(p);
  }
  e.poll_outstanding();
  e.order->before(caller);  // the gradient buffers are zeroed before the caller adds into them
  if (e.timeline) e.timeline->compute_begin(caller);
}

void Engine::post_backward(std::size_t module, Stream* stream) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_running("post_backward");
  e.require_module(module, "post_backward");
  e.pass.leave_backward(module);
  if (e.timeline) e.timeline->compute_end(e.stream_of(stream));
  e.order->after(e.stream_of(stream));  // the reductions read what the caller wrote
  e.fetcher->leave(module, e.train);
  for (std::size_t p : e.registry.module(module).params) {
    if (e.registry.param(p).trainable) e.reducer->backward_done(p, e.registry.module(module).name);
  }
  e.reducer->issue_ready();
  e.poll_outstanding();
}

Stream* Engine::caller_stream(void* native) {
  return impl_->order->wrap(native);
}

void* Engine::param_data(std::size_t param) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_initialized("param_data");
  e.require_param(param, "param_data");
  void* data = e.modes().stage == 3 ? e.fetcher->data(param) : e.model_state->full(param);
  if (data == nullptr) {
    throw make_error(ErrorCategory::usage,
                     "param_data of '{}': at ZeRO stage 3 a parameter's data exists only between "
                     "the pre and post hooks of a module that uses it",
                     e.registry.param(param).name);
  }
  return data;
}

void* Engine::Impl::require_handed_grad(std::size_t param, const char* call) const {
  require_initialized(call);
  require_param(param, call);
  const ParamSpec& spec = registry.param(param);
  if (!spec.trainable) {
    throw make_error(ErrorCategory::usage, "{} of '{}': the parameter is frozen", call, spec.name);
  }
  void* grad = reducer->grad(param);
  if (pass.phase() != PassTracker::Phase::backward || grad == nullptr ||
      !reducer->handed_out(param)) {
    throw make_error(ErrorCategory::usage,
                     "{} of '{}': a gradient buffer exists only between pre_backward and "
                     "post_backward of a module that uses the parameter",
                     call, spec.name);
  }
  return grad;
}

void* Engine::grad_buffer(std::size_t param) {
  const DeviceMemoryGuard guarded(*impl_->device);
  return impl_->require_handed_grad(param, "grad_buffer");
}

bool Engine::grad_is_zero(std::size_t param) {
  impl_->require_handed_grad(param, "grad_is_zero");
  return impl_->reducer->is_zero(param);
}

double Engine::loss_scale() const {
  return impl_->stepper ? impl_->stepper->scaler().scale() : impl_->initial_scaler.scale();
}

double Engine::loss_factor() const {
  return loss_scale() / static_cast<double>(impl_->config.batch.gradient_accumulation_steps);
}

void Engine::set_train(bool train) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.pass.require_not_backward("set_train", ": call step() first");
  e.pass.require_none_open("set_train", "finish the pass first");
  // An evaluation after a step: its passes prefetch again once the step's tail is in.
  if (e.initialized && train != e.train) e.drain_steps();
  if (e.initialized && !e.train && train) e.fetcher->end_pass(/*train_pass=*/false);
  e.train = train;
}

bool Engine::is_accumulation_boundary() const noexcept {
  const auto steps = impl_->config.batch.gradient_accumulation_steps;
  return (impl_->micro_steps + 1) % steps == 0;
}

std::int64_t Engine::global_steps() const noexcept {
  return impl_->stepper ? impl_->stepper->global_steps() : 0;
}

std::array<double, 2> Engine::last_quantization_error() const noexcept {
  return impl_->last_quantization_error;
}

double Engine::next_learning_rate() const {
  impl_->settle_verdict();  // a skipped step holds the schedule
  const std::int64_t taken = impl_->stepper ? impl_->stepper->optimizer_steps() : 0;
  return impl_->stepper ? impl_->stepper->schedule_value(taken + 1).lr
                        : scheduled(impl_->config, taken + 1).lr;
}

void Engine::set_learning_rate(double lr) {
  impl_->require_initialized("set_learning_rate");
  if (!std::isfinite(lr) || lr < 0) {
    throw make_error(ErrorCategory::usage,
                     "set_learning_rate: {} is not a learning rate (a finite value >= 0)", lr);
  }
  if (impl_->config.scheduler.type != optim::ScheduleType::none) {
    throw make_error(ErrorCategory::usage,
                     "set_learning_rate: the config has a scheduler section ({}), which sets "
                     "every step's learning rate; drop it to run the schedule yourself",
                     optim::schedule_type_name(impl_->config.scheduler.type));
  }
  impl_->stepper->set_learning_rate(lr);
}

StepStats Engine::last_step_stats() {
  const DeviceMemoryGuard guarded(*impl_->device);
  impl_->settle_verdict();
  return impl_->last_stats;
}

StepStats Engine::step(bool verdict_now) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_initialized("step");
  if (e.failed) {
    throw make_error(ErrorCategory::usage,
                     "step after a failure ({}): the engine takes no more steps; destroy it and "
                     "resume from a checkpoint",
                     e.failure);
  }
  e.pass.require_none_open("step", "call step() after the whole backward pass");
  if (!e.train) {
    throw make_error(ErrorCategory::usage, "step in eval mode: call set_train(true) first");
  }
  e.drain_steps();  // a micro-step without backward reduces zeros into the gradients
  e.order->after(e.order->latest());  // the step reads what the caller's backward wrote
  const bool boundary = is_accumulation_boundary();
  const PassTracker::Phase phase = e.pass.phase();
  if (phase == PassTracker::Phase::forward) e.timers.forward += e.phase_timer.seconds();
  if (phase == PassTracker::Phase::backward) e.timers.backward += e.phase_timer.seconds();
  e.fetcher->end_pass(/*train_pass=*/true);
  e.fetcher->check_plans(e.agreement);
  e.timers.gather_issue += e.fetcher->take_issue_seconds();
  e.timers.gather_wait += e.fetcher->take_wait_seconds();
  if (e.modes().stage >= 2 || boundary) {
    // This micro-step reduces gradients. One without a backward pass reduces zeros, so that
    // every rank issues the same collectives.
    if (phase != PassTracker::Phase::backward) e.reducer->begin_backward(e.micro_steps);
    try {
      e.reducer->flush();
    } catch (...) {
      // A reduction, or with gradient NVMe a write of the gradients, failed: this window's
      // gradients are incomplete.
      e.fail("reducing the gradients failed, so this window's gradients are incomplete");
      throw;
    }
    e.timers.reduce_wait += e.reducer->take_wait_seconds();
  }
  if (e.timeline) e.timeline->stop();  // the step's own collectives are the step's
  e.pass.end_micro_step();
  StepStats stats;
  if (boundary) {
    Timer timer;
    try {
      e.settle_verdict();  // the last boundary's, into last_stats before they are replaced
      stats = e.stepper->step();
    } catch (...) {
      e.fail("a step failed, so the optimizer state may be half updated");
      throw;
    }
    // super_offload may leave its last groups to the worker: until they are done, the next
    // forward gathers each shard at its module's hook, once its update has landed.
    if (e.stepper->speculation_tail_pending()) e.fetcher->set_paced(true);
    e.timers.step += timer.seconds();
    if (e.quantization_error) {
      const auto relative = e.quantization_error->take(e.agreement);
      stats.quantization_error_weights = relative[QuantizationError::weights];
      stats.quantization_error_gradients = relative[QuantizationError::gradients];
      e.last_quantization_error = relative;
    }
  }
  if (e.timeline) e.timeline->collect();
  e.micro_steps += 1;
  e.timers.micro_steps += 1;
  stats.micro_steps = e.micro_steps;
  stats.global_steps = e.stepper->global_steps();
  e.timers.optimizer += e.stepper->take_optimizer_seconds();
  e.timers.speculation += e.stepper->take_speculation_seconds();
  e.timers.allgather += e.stepper->take_allgather_seconds();
  if (boundary && stats.global_steps % e.config.steps_per_print == 0) e.print_breakdowns();
  e.last_stats = stats;
  if (verdict_now && stats.verdict_pending) e.settle_verdict();
  return e.last_stats;
}

void Engine::save_checkpoint(const std::string& dir, const SaveOptions& options) {
  const DeviceMemoryGuard guarded(*impl_->device);
  impl_->require_quiet("save_checkpoint");
  impl_->drain_steps();
  impl_->settle_verdict();  // the counters and the scaler it saves
  impl_->checkpoints->save(dir, options, impl_->micro_steps);
}

LoadResult Engine::load_checkpoint(const std::string& dir, const LoadOptions& options) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_quiet("load_checkpoint");
  e.drain_steps();
  e.settle_verdict();  // nothing pending to apply to the counters it loads
  LoadResult result =
      e.checkpoints->load(dir, options, [&](std::string what) { e.fail(std::move(what)); });
  // Saved at a boundary, so the next micro-step opens a window; counted in this run's
  // accumulation steps (the global batch may be split differently over this world).
  if (!options.module_only) {
    e.micro_steps = result.global_steps * e.config.batch.gradient_accumulation_steps;
  }
  return result;
}

void Engine::load_pretrained(const std::string& path, const PretrainedOptions& options) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_quiet("load_pretrained");
  e.drain_steps();
  e.checkpoints->load_pretrained(
      path, options, [&](std::size_t p) { return read_param(p); },
      [&](std::string what) { e.fail(std::move(what)); });
}

void Engine::mean_across_ranks(double* values, std::size_t count) {
  const DeviceMemoryGuard guarded(*impl_->device);
  impl_->require_initialized("mean_across_ranks");
  impl_->agreement.mean(values, count);
}

void Engine::broadcast(void* data, std::size_t bytes, int root) {
  const DeviceMemoryGuard guarded(*impl_->device);
  impl_->require_initialized("broadcast");
  if (root < 0 || root >= impl_->world) {
    throw make_error(ErrorCategory::usage, "broadcast: root {} is not a rank of this job (0-{})",
                     root, impl_->world - 1);
  }
  impl_->agreement.broadcast_bytes(data, bytes, root);
}

void Engine::abort(int exit_code, std::string_view reason) noexcept {
  // The process ends without destructors: the swap directories go now (or, after a failure,
  // are named as kept), and the other ranks' go when mpirun's SIGTERM reaches them.
  offload::remove_swap_directories_now(fmt::format("aborting the job ({})", reason));
  impl_->comm->abort(exit_code, reason);
  std::_Exit(exit_code);  // not reached: Communicator::abort does not return
}

// DeepSpeed's wall_clock_breakdown and memory_breakdown: every steps_per_print steps, on rank 0,
// the time per optimizer step by phase and the memory by tier and kind.
void Engine::Impl::print_breakdowns() {
  if (config.wall_clock_breakdown && rank == 0) {
    const double steps = static_cast<double>(timers.micro_steps) /
                         static_cast<double>(config.batch.gradient_accumulation_steps);
    const auto ms = [&](double seconds) { return 1e3 * seconds / std::max(steps, 1.0); };
    log::info(
        "step {}: time per step (ms), mean of the last {}: forward {:.3f} | backward {:.3f} "
        "(blocked on reductions {:.3f}) | stage-3 gathers: issue {:.3f}, blocked {:.3f} | "
        "step {:.3f} (optimizer {:.3f}, parameter all-gather {:.3f})",
        stepper->global_steps(), steps, ms(timers.forward), ms(timers.backward),
        ms(timers.reduce_wait), ms(timers.gather_issue), ms(timers.gather_wait), ms(timers.step),
        ms(timers.optimizer), ms(timers.allgather));
    if (const Speculator* speculator = stepper->speculator(); speculator != nullptr) {
      const Speculator::Counts c = speculator->counts();
      log::info(
          "step {}: super_offload: optimizer stepped in backward {:.3f} ms per step | in the "
          "run: {} steps speculated, {} rolled back (clipping or a skip), {} stepped after "
          "backward while speculation was off | {}",
          stepper->global_steps(), ms(timers.speculation), c.speculated, c.rolled_back, c.held_off,
          c.on ? "speculating" : "off until a step needs no rollback");
    }
    if (timeline) {
      // From the streams' own timing events: the part of each kind of work that ran while the
      // caller's stream was computing (between a pre hook and its post hook).
      const OverlapTimeline::Totals t = timeline->take();
      const double per = std::max(steps, 1.0);
      const auto part = [&](double overlap, double total) {
        return fmt::format("{:.3f} of {:.3f} ms ({:.0f}%)", overlap / per, total / per,
                           total > 0 ? 100 * overlap / total : 0.0);
      };
      const std::string collectives =
          comm->stream() != nullptr
              ? fmt::format("reductions {} | stage-3 gathers {}",
                            part(t.reduction_overlap_ms, t.reduction_ms),
                            part(t.gather_overlap_ms, t.gather_ms))
              : fmt::format("reductions and gathers not measured ({} runs collectives {})",
                            comm->backend(),
                            comm->backend() == "mpi" ? "on a host thread" : "in the call");
      log::info(
          "step {}: concurrent with compute, per step, from the streams' events: {} | "
          "offload copies {} | compute {:.3f} ms",
          stepper->global_steps(), collectives, part(t.copy_overlap_ms, t.copy_ms),
          t.compute_ms / per);
    }
  }
  timers = {};
  if (timeline) timeline->take();  // the other ranks' totals, and rank 0's after its line
  if (config.memory_breakdown && rank == 0) {
    log::info("step {}: {}", stepper->global_steps(), memory_text());
  }
}

std::vector<float> Engine::read_param(std::size_t param) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_initialized("read_param");
  e.require_param(param, "read_param");
  e.pass.require_not_backward("read_param", "");
  e.drain_steps();
  const ParamSpec& spec = e.registry.param(param);
  const ParamPlacement& state = e.layout.params[param];
  std::vector<float> out(spec.numel);
  if (spec.numel == 0) return out;
  e.model_state->unify();  // every group's masters where master() reads them
  Stream& stream = e.device->default_stream();
  const ShardShape shape = shard_shape(spec.numel, e.modes().shard_ranks);
  const std::size_t bytes = shape.padded() * sizeof(float);
  float* gathered = static_cast<float*>(e.device->reserve(Tier::device, bytes));
  void* half = nullptr;
  const std::size_t half_bytes = shape.padded() * dtype_size(e.modes().compute);
  try {
    if (spec.trainable && e.modes().optimizer_offload) {
      // The shard into this rank's place first: it is in host memory or in the swap, and the
      // communicator works in device memory.
      float* mine = gathered + static_cast<std::size_t>(e.shard_rank) * shape.shard;
      e.model_state->copy_master(state.flat, shape.shard, mine);
      e.shards().all_gather(mine, gathered, shape.shard, DType::f32, &stream).wait();
    } else if (spec.trainable && e.model_state->master() != nullptr && e.modes().stage >= 1) {
      e.shards()
          .all_gather(e.model_state->master() + state.flat, gathered, shape.shard, DType::f32,
                      &stream)
          .wait();
    } else if (spec.trainable && e.model_state->master() != nullptr) {
      e.device->copy(gathered, e.model_state->master() + state.flat, spec.numel * sizeof(float));
    } else if (e.modes().stage <= 2) {
      e.device->cast(e.model_state->full(param), e.modes().compute, gathered, DType::f32,
                     spec.numel, stream);
    } else {
      half = e.device->reserve(Tier::device, half_bytes);
      const void* source = e.model_state->shard_source(param);
      if (e.modes().param_offload) {
        // The shard is in host memory or on NVMe: into its place first, then gathered in place.
        char* place = static_cast<char*>(half) + static_cast<std::size_t>(e.shard_rank) *
                                                     shape.shard * dtype_size(e.modes().compute);
        e.fetcher->copy_shard(param, place);
        source = place;
      }
      e.shards().all_gather(source, half, shape.shard, e.modes().compute, &stream).wait();
      e.device->cast(half, e.modes().compute, gathered, DType::f32, spec.numel, stream);
    }
    stream.synchronize();
    e.device->copy(out.data(), gathered, spec.numel * sizeof(float));
  } catch (...) {
    e.device->unreserve(Tier::device, gathered, bytes);
    if (half != nullptr) e.device->unreserve(Tier::device, half, half_bytes);
    throw;
  }
  e.device->unreserve(Tier::device, gathered, bytes);
  if (half != nullptr) e.device->unreserve(Tier::device, half, half_bytes);
  return out;
}

void Engine::write_param(std::size_t param, const float* values, std::size_t count) {
  const DeviceMemoryGuard guarded(*impl_->device);
  Impl& e = *impl_;
  e.require_running("write_param");
  e.require_param(param, "write_param");
  e.pass.require_none_open("write_param", "call it between passes");
  e.drain_steps();
  // After a backward and before its step the masters are still the last step's, except with
  // super_offload, whose speculation steps them during the boundary's backward.
  if (e.modes().speculate) {
    e.pass.require_not_backward("write_param",
                                ": with super_offload the optimizer steps during backward; call "
                                "it after step()");
  }
  const ParamSpec& spec = e.registry.param(param);
  if (count != spec.numel) {
    throw make_error(ErrorCategory::usage,
                     "write_param: parameter '{}' has {} elements (shape {}), and {} were given",
                     spec.name, spec.numel, shape_text(spec.shape), count);
  }
  if (values == nullptr) {
    throw make_error(ErrorCategory::usage, "write_param: no values for parameter '{}'", spec.name);
  }
  try {
    e.model_state->write_param(param, values);
  } catch (const Error& error) {
    e.fail(fmt::format("write_param of '{}' failed part way: {}", spec.name, error.what()));
    throw;
  }
  // Stage 3: a gathered copy kept between passes (persistent parameters, hpZ's secondary
  // shards) holds the old value.
  if (e.fetcher) e.fetcher->release_unheld(/*stale=*/true);
}

FetchStats Engine::fetch_stats() const {
  return impl_->fetcher ? impl_->fetcher->stats() : FetchStats{};
}

std::vector<MemoryUsage> Engine::memory_usage() const {
  return impl_->usage();
}

std::array<const Arena*, 7> Engine::Impl::arenas() const {
  const std::array<const Arena*, 5> owned =
      model_state ? model_state->arenas() : std::array<const Arena*, 5>{};
  return {owned[0],
          reducer ? reducer->grad_arena() : nullptr,
          fetcher ? fetcher->gather_arena() : nullptr,
          owned[1],
          owned[2],
          owned[3],
          owned[4]};
}

std::vector<MemoryUsage> Engine::Impl::usage() const {
  std::vector<MemoryUsage> usage;
  for (Tier tier : kAllTiers) {
    for (MemoryKind kind : kAllMemoryKinds) {
      MemoryUsage u{tier, kind, 0, 0};
      for (const Arena* arena : arenas()) {
        if (arena == nullptr || arena->tier() != tier) continue;
        const KindUsage k = arena->usage(kind);
        u.live += k.live;
        u.peak += k.peak;
      }
      if (u.live != 0 || u.peak != 0) usage.push_back(u);
    }
  }
  return usage;
}

std::vector<ArenaUsage> Engine::arena_usage() const {
  std::vector<ArenaUsage> out;
  for (const Arena* arena : impl_->arenas()) {
    if (arena == nullptr) continue;
    ArenaUsage a{arena->name(), arena->tier(), arena->capacity(), {}, {}};
    for (std::size_t k = 0; k < kAllMemoryKinds.size(); ++k) {
      const KindUsage usage = arena->usage(kAllMemoryKinds[k]);
      a.live[k] = usage.live;
      a.peak[k] = usage.peak;
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::size_t Engine::reserved_bytes(Tier tier) const {
  std::size_t bytes = 0;
  for (const Arena* arena : impl_->arenas()) {
    if (arena != nullptr && arena->tier() == tier) bytes += arena->capacity();
  }
  if (tier == Tier::device && impl_->scalars != nullptr) bytes += kScratchBytes;
  if (tier == Tier::host && impl_->model_state) bytes += impl_->model_state->host_scratch_bytes();
  if (tier == Tier::pinned && impl_->stepper) bytes += impl_->stepper->pinned_scratch_bytes();
  return bytes;
}

std::string Engine::memory_report() const {
  return impl_->memory_text();
}

std::string Engine::Impl::memory_text() const {
  std::string text = fmt::format("rank {} model state by tier and kind (live / peak):", rank);
  for (const MemoryUsage& u : usage()) {
    text += fmt::format("\n  {:<7} {:<7} {:>12} / {:>12}", tier_name(u.tier),
                        memory_kind_name(u.kind), format_bytes(u.live), format_bytes(u.peak));
  }
  text += "\nreserved:";
  for (const Arena* arena : arenas()) {
    if (arena == nullptr) continue;
    text += fmt::format("\n  {:<7} {:>12}  {}", tier_name(arena->tier()),
                        format_bytes(arena->capacity()), arena->name());
  }
  return text;
}

}  // namespace zero::engine
