// ParamFetcher: stage-3 gathers, their plans, and reads of swapped shards (see
// param_fetcher.h).
#include "engine/fetching/param_fetcher.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "base/block_quant.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"

namespace zero::engine {
namespace {

constexpr int kMaxInvalidations = 3;  // then prefetching stops for that kind of pass, for good

const char* pass_name(bool train) {
  return train ? "training" : "evaluation";
}

}  // namespace

ParamFetcher::ParamFetcher(const EngineContext& context)
    : ctx_(context),
      active_(context.layout.modes.stage == 3),
      rank_(context.shards().rank()),
      modes_(context.layout.modes),
      params_(context.registry.param_count()),
      open_event_(context.registry.module_count(), kNone) {}

ParamFetcher::~ParamFetcher() {
  // Reads still in flight use the read buffers, gathers the arena.
  for (const PendingRead& read : reads_) {
    try {
      shards_->finish_read(read.ticket, read.buffer);
    } catch (const std::exception&) {
      // Nothing depends on it any more.
    }
  }
  const bool broken =
      ctx_.shards().poisoned() || (ctx_.secondary() != nullptr && ctx_.secondary()->poisoned());
  for (Gathered& g : params_) {
    if (!g.in_flight || broken) continue;
    try {
      g.gathering.wait();
    } catch (const std::exception& error) {
      log::warn("engine: an outstanding parameter gather failed at shutdown: {}", error.what());
    }
  }
}

void ParamFetcher::attach(std::unique_ptr<Arena> gather_arena, ShardStore& shards) {
  gather_arena_ = std::move(gather_arena);
  shards_ = &shards;
  read_busy_.assign(shards.read_buffers(), false);
  read_copied_.clear();
  for (std::size_t b = 0; b < shards.read_buffers(); ++b) {
    read_copied_.push_back(ctx_.device.create_event());
  }
  persistent_missing_ = 0;
  for (std::size_t p = 0; p < params_.size(); ++p) {
    persistent_missing_ +=
        ctx_.layout.params[p].persistent && params_[p].full == nullptr && gathered_elements(p) > 0;
  }
  secondary_valid_.assign(params_.size(), false);
  if (modes_.quantized_weights) dequantized_ = ctx_.device.create_event();
  const std::size_t secondary_bytes = ctx_.layout.secondary.total * dtype_size(modes_.compute);
  if (ctx_.secondary() != nullptr && secondary_bytes != 0) {
    secondary_block_ = gather_arena_->allocate(MemoryKind::param, secondary_bytes);
    secondary_ = static_cast<char*>(secondary_block_.ptr);
    secondary_rank_ = ctx_.secondary()->rank();
    // Defined bytes in the shards' padding, which the secondary gathers carry along.
    ctx_.device.fill(secondary_, modes_.compute, ctx_.layout.secondary.total, 0.0f,
                     ctx_.device.default_stream());
  }
}

std::size_t ParamFetcher::gathered_elements(std::size_t param) const {
  return ctx_.layout.params[param].gathered();
}

std::string ParamFetcher::describe(const TraceEvent& event) const {
  return fmt::format("{} of '{}'", event.backward ? "backward" : "forward",
                     ctx_.registry.module(event.module).name);
}

void ParamFetcher::enter(std::size_t module, bool backward, bool train, bool top, Stream& caller) {
  if (!active_) return;
  // Shards read from NVMe since the last hook are gathered now: a point every rank reaches
  // in the same order, so their all-gathers are issued in the same order everywhere.
  finish_reads(kNone);
  Trace& t = traces_[train ? 0 : 1];
  const TraceEvent event{module, backward};
  // An evaluation pass has no step to end it: it ends where the next one begins, at a top-level
  // forward of the module its order starts with.
  if (!train && top && !backward && !t.off) {
    const bool starts_again = t.have_plan ? t.pos > 0 && t.plan.event(0) == event
                                          : !t.recording.empty() && t.recording.front() == event;
    if (starts_again) end_pass(false);
  }

  std::size_t at = kNone;
  if (!t.off) {
    if (t.have_plan && t.pos < t.plan.size() && t.plan.event(t.pos) == event) {
      at = t.pos++;
    } else if (t.have_plan) {
      diverge(t, &event, train);
    } else {
      t.recording.push_back(event);
    }
  }
  open_event_[module] = at;

  // Persistent parameters are gathered together whenever one is missing (the first hook after
  // a step, a load or init released them, when the arena holds nothing else): side by side at
  // the arena's front, so the others come and go behind them and never find the free space cut
  // into pieces between persistent blocks. A point every rank reaches in the same order.
  if (persistent_missing_ > 0) gather_persistent();
  // Held first, so that making room for one of them never releases another.
  for (std::size_t p : ctx_.registry.module(module).params) params_[p].holds += 1;
  for (std::size_t p : ctx_.registry.module(module).params) {
    if (params_[p].full != nullptr && !params_[p].deferred) stats_.hits += 1;
    gather(p, /*own=*/true);
  }
  for (std::size_t p : ctx_.registry.module(module).params) order_before(p, caller);
  if (at == kNone || paced_) return;

  const auto ahead = t.plan.prefetch(
      at, static_cast<std::size_t>(ctx_.config.zero.prefetch_bucket_size),
      static_cast<std::size_t>(ctx_.config.zero.max_live_parameters), stats_.live_elements,
      [&](std::size_t p) { return params_[p].full != nullptr; });
  for (std::size_t p : ahead) {
    if (!gather(p, /*own=*/false)) break;
    stats_.prefetches += 1;
  }
}

void ParamFetcher::leave(std::size_t module, bool train) {
  if (!active_) return;
  const Trace& t = traces_[train ? 0 : 1];
  const std::size_t at = open_event_[module];
  const auto& module_params = ctx_.registry.module(module).params;
  for (std::size_t k = 0; k < module_params.size(); ++k) {
    const std::size_t p = module_params[k];
    Gathered& g = params_[p];
    g.holds -= 1;
    if (g.holds > 0 || ctx_.layout.params[p].persistent) continue;
    const bool keep =
        at != kNone && t.have_plan && at < t.plan.size() &&
        t.plan.reused_within(at, k,
                             static_cast<std::size_t>(ctx_.config.zero.max_reuse_distance)) &&
        stats_.live_elements <= static_cast<std::size_t>(ctx_.config.zero.max_live_parameters);
    if (!keep) release(p);
  }
}

// The pass left its plan at position t.pos (`event` is the hook that came instead, or null when
// the pass ended early): what ran so far plus that hook becomes the recording, finished by the
// rest of the pass.
void ParamFetcher::diverge(Trace& t, const TraceEvent* event, bool train_pass) {
  t.invalidations += 1;
  stats_.invalidations += 1;
  log::warn(
      "stage 3: the {} pass's module order changed at hook {}: the recorded order has {} "
      "there, this pass {}; prefetching stops for this pass, whose order is recorded for "
      "the next",
      pass_name(train_pass), t.pos,
      t.pos < t.plan.size() ? describe(t.plan.event(t.pos)) : "its end",
      event != nullptr ? "has the " + describe(*event) : std::string("ends"));
  const auto& done = t.plan.events();
  t.recording.assign(done.begin(), done.begin() + static_cast<std::ptrdiff_t>(t.pos));
  if (event != nullptr) t.recording.push_back(*event);
  t.have_plan = false;
  t.plan = {};
  t.pos = 0;
}

void ParamFetcher::end_pass(bool train_pass) {
  if (!active_) return;
  Trace& t = traces_[train_pass ? 0 : 1];
  if (!t.off) {
    if (t.have_plan && t.pos != t.plan.size()) diverge(t, nullptr, train_pass);
    if (!t.have_plan && !t.recording.empty()) {
      if (t.invalidations >= kMaxInvalidations) {
        log::warn(
            "stage 3: the {} pass's module order changed {} times; prefetching is off for "
            "{} passes from now on",
            pass_name(train_pass), t.invalidations, pass_name(train_pass));
        t.off = true;
      } else {
        std::vector<std::vector<std::size_t>> module_params;
        for (const ModuleSpec& m : ctx_.registry.modules()) module_params.push_back(m.params);
        std::vector<std::size_t> elements;
        std::vector<bool> persistent;
        for (std::size_t p = 0; p < params_.size(); ++p) {
          elements.push_back(gathered_elements(p));
          persistent.push_back(ctx_.layout.params[p].persistent);
        }
        t.plan = FetchPlan(std::move(t.recording), module_params, std::move(elements),
                           std::move(persistent));
        t.have_plan = true;
        t.unchecked = true;
        log::debug("stage 3: recorded the {} pass's order, {} hooks", pass_name(train_pass),
                   t.plan.size());
      }
      t.recording.clear();
    }
    t.pos = 0;
  }
  release_unheld(/*stale=*/false);
}

// A plan recorded differently would make the ranks issue different gathers.
void ParamFetcher::check_plans(Agreement& agreement) {
  if (!active_ || !(traces_[0].unchecked || traces_[1].unchecked)) return;
  std::uint64_t hashes[2];
  for (int k = 0; k < 2; ++k) {
    hashes[k] = traces_[k].have_plan ? traces_[k].plan.hash() : 0;
    traces_[k].unchecked = false;
  }
  if (agreement.same_everywhere(hashes)) return;
  // Which pass differs: each hash alone.
  for (int k = 0; k < 2; ++k) {
    if (!agreement.same_everywhere(std::span(&hashes[k], 1))) {
      throw make_error(ErrorCategory::usage,
                       "stage 3: the ranks recorded different {} module orders (rank {} has {} "
                       "hooks, hash {:016x}); every rank must call the hooks of the same modules "
                       "in the same order",
                       pass_name(k == 0), ctx_.comm.rank(), traces_[k].plan.size(), hashes[k]);
    }
  }
}

// Starts gathering a parameter unless it is there or on its way. A prefetch (`own` false) that
// does not fit the arena is not issued; the arena's state is the same on every rank, so neither
// is it elsewhere. Returns whether the parameter is there or on its way.
bool ParamFetcher::gather(std::size_t param, bool own, bool defer) {
  Gathered& g = params_[param];
  if (g.full != nullptr) {
    if (g.deferred && own) issue(param);
    return true;
  }
  const std::size_t bytes = gather_block_bytes(ctx_.layout, param);
  if (!fits(bytes)) {
    if (!own) return false;
    release_unheld(/*stale=*/false);  // what was kept or fetched ahead makes room
  }
  g.block = gather_arena_->allocate(MemoryKind::param, bytes);
  g.full = g.block.ptr;
  if (ctx_.layout.params[param].persistent && g.full != nullptr) persistent_missing_ -= 1;
  if (!ctx_.layout.params[param].persistent) stats_.live_elements += gathered_elements(param);
  stats_.peak_live_elements = std::max(stats_.peak_live_elements, stats_.live_elements);
  stats_.gathers += 1;
  g.deferred = defer;
  if (!defer) issue(param);
  return true;
}

void ParamFetcher::issue(std::size_t param) {
  Gathered& g = params_[param];
  const ParamPlacement& place = ctx_.layout.params[param];
  const std::size_t shard = place.shape.shard;
  // First, so that a wait that throws (a step's group failed, which fails the engine) leaves a
  // deferred parameter deferred. (An hpZ gather from a valid secondary partition reads no
  // shard, but none is valid while a step's groups land: the step invalidated them.)
  if (before_shard_read_ && shard != 0) before_shard_read_(param, ctx_.device.default_stream());
  g.deferred = false;
  if (shard == 0) return;
  if (secondary_ != nullptr && place.secondary_flat != kNone && secondary_valid_[param]) {
    // hpZ: from the secondary partition, within the secondary group (no shard read).
    Stream& stream = ctx_.device.default_stream();
    Timer timer;
    g.gathering =
        ctx_.secondary()->all_gather(secondary_ + place.secondary_flat * dtype_size(modes_.compute),
                                     g.full, place.secondary.shard, modes_.compute, &stream);
    issue_seconds_.add(timer.seconds());
    g.in_flight = true;
    gathers_in_flight_ += 1;
    stats_.secondary_gathers += 1;
    return;
  }
  g.fill_secondary = secondary_ != nullptr && place.secondary_flat != kNone;
  if (shards_->swapped(param)) {
    start_read(param);  // gathered when the read completes (finish_reads)
    return;
  }
  Stream& stream = ctx_.device.default_stream();
  Timer timer;
  const void* source = shards_->device_shard(param);
  if (source == nullptr) {
    // The shard is in host memory: into its place in the gathered buffer, then gathered in
    // place, both in the stream's order (the host never waits for the copy).
    char* place = static_cast<char*>(g.full) +
                  static_cast<std::size_t>(rank_) * shard * dtype_size(modes_.compute);
    shards_->place_shard(param, place, stream);
    source = place;
  }
  g.gathering = gather_shards(param, source);
  issue_seconds_.add(timer.seconds());
  g.in_flight = true;
  gathers_in_flight_ += 1;
}

Work ParamFetcher::gather_shards(std::size_t param, const void* source) {
  Gathered& g = params_[param];
  Stream& stream = ctx_.device.default_stream();
  const std::size_t shard = ctx_.layout.params[param].shape.shard;
  if (!modes_.quantized_weights) {
    return ctx_.shards().all_gather(source, g.full, shard, modes_.compute, &stream);
  }
  const std::size_t chunk = block_quant_bytes(shard);
  char* packed = static_cast<char*>(g.full) + quantized_gather_offset(ctx_.layout, param);
  char* mine = packed + static_cast<std::size_t>(rank_) * chunk;
  ctx_.device.quantize(source, modes_.compute, shard, 1, mine, stream);
  if (error_ != nullptr) {
    // This rank's part of every rank's gathered copy is its chunk's round trip.
    ctx_.device.dequantize(mine, shard, 1, error_->round_trip(), modes_.compute, stream);
    error_->add(QuantizationError::weights, source, error_->round_trip(), modes_.compute, shard,
                stream);
  }
  g.packed = true;
  return ctx_.shards().all_gather(mine, packed, chunk, DType::u8, &stream);
}

void ParamFetcher::dequantize(std::size_t param) {
  Gathered& g = params_[param];
  if (!g.packed || g.reading) return;
  g.packed = false;
  Stream& stream = ctx_.device.default_stream();
  if (g.in_flight) g.gathering.block(stream);
  const std::size_t shard = ctx_.layout.params[param].shape.shard;
  ctx_.device.dequantize(
      static_cast<const char*>(g.full) + quantized_gather_offset(ctx_.layout, param), shard,
      static_cast<std::size_t>(modes_.shard_ranks), g.full, modes_.compute, stream);
}

void ParamFetcher::gather_persistent() {
  for (std::size_t p = 0; p < params_.size(); ++p) {
    if (ctx_.layout.params[p].persistent && params_[p].full == nullptr &&
        gathered_elements(p) > 0) {
      // Paced, each is gathered at its own module's hook (set_paced).
      gather(p, /*own=*/true, /*defer=*/paced_);
    }
  }
}

bool ParamFetcher::fits(std::size_t bytes) const {
  return bytes == 0 || gather_arena_->largest_free_range() >= bytes + Arena::kDefaultAlignment;
}

void ParamFetcher::wait(std::size_t param) {
  Gathered& g = params_[param];
  if (g.reading) finish_reads(param);
  if (g.in_flight) {
    Timer timer;
    g.gathering.wait();
    wait_seconds_.add(timer.seconds());
    g.in_flight = false;
    gathers_in_flight_ -= 1;
    g.gathering = {};
  }
  dequantize(param);
  keep_secondary(param);
}

void ParamFetcher::keep_secondary(std::size_t param) {
  Gathered& g = params_[param];
  if (!g.fill_secondary || g.reading) return;
  g.fill_secondary = false;
  Stream& stream = ctx_.device.default_stream();
  if (g.in_flight) g.gathering.block(stream);  // the gathered copy is complete on the stream
  const ParamPlacement& place = ctx_.layout.params[param];
  const std::size_t csize = dtype_size(modes_.compute);
  const std::size_t count = place.secondary.valid(secondary_rank_);
  if (count != 0) {
    ctx_.device.copy_async(
        secondary_ + place.secondary_flat * csize,
        static_cast<const char*>(g.full) + place.secondary.begin(secondary_rank_) * csize,
        count * csize, stream);
  }
  secondary_valid_[param] = true;
}

// The caller's later work on `caller` comes after the parameter's gather, without the host
// waiting where the communicator orders streams itself (NCCL).
void ParamFetcher::order_before(std::size_t param, Stream& caller) {
  Gathered& g = params_[param];
  if (g.reading) finish_reads(param);
  if (g.packed) {
    // qwZ: the caller reads what the default stream dequantizes.
    Timer timer;
    dequantize(param);
    dequantized_->record(ctx_.device.default_stream());
    dequantized_->block(caller);
    wait_seconds_.add(timer.seconds());
  } else if (g.in_flight) {
    Timer timer;
    g.gathering.block(caller);
    wait_seconds_.add(timer.seconds());
  }
  keep_secondary(param);
}

// The memory goes back to the arena; later gathers into it are queued after the caller's reads
// (the post hook ordered the default stream after the caller's stream) and after this gather.
void ParamFetcher::release(std::size_t param) {
  Gathered& g = params_[param];
  if (g.full == nullptr) return;
  wait(param);
  gather_arena_->release(g.block);
  if (ctx_.layout.params[param].persistent) persistent_missing_ += 1;
  if (!ctx_.layout.params[param].persistent) stats_.live_elements -= gathered_elements(param);
  g.block = {};
  g.full = nullptr;
  g.deferred = false;
}

void ParamFetcher::release_unheld(bool stale) {
  if (!active_) return;
  // Gathers still in flight read the shards: they finish before anything (a step) writes them.
  finish_reads(kNone);
  for (std::size_t p = 0; p < params_.size() && gathers_in_flight_ > 0; ++p) wait(p);
  for (std::size_t p = 0; p < params_.size(); ++p) {
    const Gathered& g = params_[p];
    if (g.full == nullptr || g.holds > 0) continue;
    if (ctx_.layout.params[p].persistent && !stale) continue;
    release(p);
  }
  // The shards are changing: hpZ's secondary copies are of the old values.
  if (stale) {
    secondary_valid_.assign(params_.size(), false);
    for (Gathered& g : params_) g.fill_secondary = false;
  }
}

void ParamFetcher::poll() {
  if (gathers_in_flight_ == 0) return;
  for (Gathered& g : params_) {
    if (g.in_flight && g.gathering.test()) {
      g.in_flight = false;
      g.gathering = {};
      gathers_in_flight_ -= 1;
    }
  }
}

void ParamFetcher::copy_shard(std::size_t param, void* place) {
  finish_reads(kNone);
  shards_->copy_shard(param, place);
}

void ParamFetcher::start_read(std::size_t param) {
  auto free = std::find(read_busy_.begin(), read_busy_.end(), false);
  while (free == read_busy_.end()) {
    finish_reads(reads_.front().param);  // the oldest read makes room
    free = std::find(read_busy_.begin(), read_busy_.end(), false);
  }
  const auto buffer = static_cast<std::size_t>(free - read_busy_.begin());
  read_copied_[buffer]->synchronize();  // its last shard has left it for the gathered buffer
  read_busy_[buffer] = true;
  reads_.push_back({param, shards_->start_read(param, buffer), buffer});
  params_[param].reading = true;
}

void ParamFetcher::finish_reads(std::size_t param) {
  while (!reads_.empty()) {
    const PendingRead read = reads_.front();
    reads_.pop_front();
    Gathered& g = params_[read.param];
    Timer timer;
    const void* shard_data = shards_->finish_read(read.ticket, read.buffer);
    wait_seconds_.add(timer.seconds());
    const std::size_t shard = ctx_.layout.params[read.param].shape.shard;
    const std::size_t bytes = shard * dtype_size(modes_.compute);
    char* place = static_cast<char*>(g.full) + static_cast<std::size_t>(rank_) * bytes;
    Stream& stream = ctx_.device.default_stream();
    ctx_.device.copy_async(place, shard_data, bytes, stream);
    read_copied_[read.buffer]->record(stream);
    g.gathering = gather_shards(read.param, place);
    g.reading = false;
    g.in_flight = true;
    gathers_in_flight_ += 1;
    read_busy_[read.buffer] = false;
    if (read.param == param) return;
  }
}

FetchStats ParamFetcher::stats() const {
  FetchStats stats = stats_;
  stats.train_hooks = traces_[0].have_plan ? traces_[0].plan.size() : 0;
  stats.eval_hooks = traces_[1].have_plan ? traces_[1].plan.size() : 0;
  return stats;
}

}  // namespace zero::engine
