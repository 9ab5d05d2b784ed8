// The stage-3 fetcher. A module's parameters are all-gathered from every rank's shard for its
// hooks and released after. The first pass of each kind (training micro-step, evaluation
// forward) records the module order; later passes replay it: at each pre hook the parameters
// of the modules ahead are gathered asynchronously (up to stage3_prefetch_bucket_size elements
// ahead and stage3_max_live_parameters live), and at each post hook a parameter the plan uses
// again within stage3_max_reuse_distance elements is kept. Every decision is a function of the
// plan and the hooks so far, never of timing, so every rank issues the same gathers in the
// same order. Small (persistent) parameters stay gathered until a step changes them.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/timer.h"
#include "engine/engine_impl.h"

namespace zero::engine {
namespace {

constexpr int kMaxInvalidations = 3;  // then prefetching stops for that kind of pass, for good

const char* pass_name(bool train) { return train ? "training" : "evaluation"; }

}  // namespace

bool Engine::Impl::any_hook_open() const {
  return std::any_of(module_open.begin(), module_open.end(), [](int n) { return n != 0; });
}

std::size_t Engine::Impl::gathered_elements(std::size_t param) const {
  return shard_shape(registry.param(param).numel, world).padded();
}

std::string Engine::Impl::describe_event(const TraceEvent& event) const {
  return fmt::format("{} of '{}'", event.backward ? "backward" : "forward",
                     registry.module(event.module).name);
}

// A pre hook at stage 3: where the pass is in its plan, the module's own gathers, and the
// prefetch the plan allows from here.
void Engine::Impl::enter(std::size_t module, bool backward) {
  if (stage != 3) return;
  const bool top = !any_hook_open();
  // Shards read from NVMe since the last hook are gathered now: a point every rank reaches
  // in the same order, so their all-gathers are issued in the same order everywhere.
  finish_reads(kNone);
  TraceState& t = traces[train ? 0 : 1];
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
  open_event[module] = at;

  // Held first, so that making room for one of them never releases another.
  for (std::size_t p : registry.module(module).params) params[p].holds += 1;
  for (std::size_t p : registry.module(module).params) {
    if (params[p].full != nullptr) fetch.hits += 1;
    gather_param(p, /*own=*/true);
  }
  for (std::size_t p : registry.module(module).params) wait_gather(p);
  if (at == kNone) return;

  const auto ahead = t.plan.prefetch(
      at, static_cast<std::size_t>(config.zero.prefetch_bucket_size),
      static_cast<std::size_t>(config.zero.max_live_parameters), fetch.live_elements,
      [&](std::size_t p) { return params[p].full != nullptr; });
  for (std::size_t p : ahead) {
    if (!gather_param(p, /*own=*/false)) break;
    fetch.prefetches += 1;
  }
}

// A post hook at stage 3: release the module's parameters, unless the plan uses one again soon.
void Engine::Impl::leave(std::size_t module) {
  if (stage != 3) return;
  const TraceState& t = traces[train ? 0 : 1];
  const std::size_t at = open_event[module];
  const auto& module_params = registry.module(module).params;
  for (std::size_t k = 0; k < module_params.size(); ++k) {
    ParamState& state = params[module_params[k]];
    state.holds -= 1;
    if (state.holds > 0 || state.persistent) continue;
    const bool keep = at != kNone && t.have_plan && at < t.plan.size() &&
                      t.plan.reused_within(at, k,
                                           static_cast<std::size_t>(config.zero.max_reuse_distance)) &&
                      fetch.live_elements <= static_cast<std::size_t>(config.zero.max_live_parameters);
    if (!keep) release_param(module_params[k]);
  }
}

// The pass left its plan at position t.pos (`event` is the hook that came instead, or null when
// the pass ended early): what ran so far plus that hook becomes the recording, finished by the
// rest of the pass.
void Engine::Impl::diverge(TraceState& t, const TraceEvent* event, bool train_pass) {
  t.invalidations += 1;
  fetch.invalidations += 1;
  log::warn("stage 3: the {} pass's module order changed at hook {}: the recorded order has {} "
            "there, this pass {}; prefetching stops for this pass, whose order is recorded for "
            "the next",
            pass_name(train_pass), t.pos,
            t.pos < t.plan.size() ? describe_event(t.plan.event(t.pos)) : "its end",
            event != nullptr ? "has the " + describe_event(*event) : std::string("ends"));
  const auto& done = t.plan.events();
  t.recording.assign(done.begin(), done.begin() + static_cast<std::ptrdiff_t>(t.pos));
  if (event != nullptr) t.recording.push_back(*event);
  t.have_plan = false;
  t.plan = {};
  t.pos = 0;
}

// The end of a pass: a recording becomes the plan (checked across ranks at the next step), and
// whatever was gathered ahead or kept and not used is released.
void Engine::Impl::end_pass(bool train_pass) {
  if (stage != 3) return;
  TraceState& t = traces[train_pass ? 0 : 1];
  if (!t.off) {
    if (t.have_plan && t.pos != t.plan.size()) diverge(t, nullptr, train_pass);
    if (!t.have_plan && !t.recording.empty()) {
      if (t.invalidations >= kMaxInvalidations) {
        log::warn("stage 3: the {} pass's module order changed {} times; prefetching is off for "
                  "{} passes from now on",
                  pass_name(train_pass), t.invalidations, pass_name(train_pass));
        t.off = true;
      } else {
        std::vector<std::vector<std::size_t>> module_params;
        for (const ModuleSpec& m : registry.modules()) module_params.push_back(m.params);
        std::vector<std::size_t> elements;
        std::vector<bool> persistent;
        for (std::size_t p = 0; p < params.size(); ++p) {
          elements.push_back(gathered_elements(p));
          persistent.push_back(params[p].persistent);
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

// Every rank must have recorded the same orders: a plan recorded differently would make the
// ranks issue different gathers.
void Engine::Impl::check_plans() {
  if (stage != 3 || !(traces[0].unchecked || traces[1].unchecked)) return;
  auto* scratch = reinterpret_cast<std::int64_t*>(scalars) + 8;
  for (int k = 0; k < 2; ++k) {
    const std::uint64_t h = traces[k].have_plan ? traces[k].plan.hash() : 0;
    std::memcpy(&scratch[k], &h, 8);
    scratch[2 + k] = ~scratch[k];
    traces[k].unchecked = false;
  }
  comm->all_reduce(scratch, 4, DType::i64, ReduceOp::max).wait();
  for (int k = 0; k < 2; ++k) {
    if (scratch[k] != ~scratch[2 + k]) {
      const std::uint64_t h = traces[k].have_plan ? traces[k].plan.hash() : 0;
      throw make_error(ErrorCategory::usage,
                       "stage 3: the ranks recorded different {} module orders (rank {} has {} "
                       "hooks, hash {:016x}); every rank must call the hooks of the same modules "
                       "in the same order",
                       pass_name(k == 0), rank, traces[k].plan.size(), h);
    }
  }
}

// Starts gathering a parameter unless it is there or on its way. A prefetch (`own` false) that
// does not fit the arena is not issued; the arena's state is the same on every rank, so neither
// is it elsewhere. Returns whether the parameter is there or on its way.
bool Engine::Impl::gather_param(std::size_t param, bool own) {
  ParamState& state = params[param];
  if (state.full != nullptr) return true;
  const std::size_t bytes = gathered_elements(param) * dtype_size(compute);
  if (!fits_gather_arena(bytes)) {
    if (!own) return false;
    release_unheld(/*stale=*/false);  // what was kept or fetched ahead makes room
  }
  state.full_block = gather_arena->allocate(MemoryKind::param, bytes);
  state.full = state.full_block.ptr;
  if (!state.persistent) fetch.live_elements += gathered_elements(param);
  fetch.peak_live_elements = std::max(fetch.peak_live_elements, fetch.live_elements);
  fetch.gathers += 1;
  const std::size_t shard = shard_shape(registry.param(param).numel, world).shard;
  if (shard == 0) return true;
  if (swapped_param(param)) {
    start_read(param);  // gathered when the read completes (finish_reads)
    return true;
  }
  Stream& stream = device->default_stream();
  Timer timer;
  const void* source = shard_source(param);
  if (param_offload) {
    // The shard is in host memory or on NVMe: into its place in the gathered buffer, then
    // gathered in place.
    char* place = static_cast<char*>(state.full) +
                  static_cast<std::size_t>(rank) * shard * dtype_size(compute);
    fetch_shard(param, place);
    source = place;
  }
  state.gathering = comm->all_gather(source, state.full, shard, compute, &stream);
  timers.gather_issue += timer.seconds();
  state.in_flight = true;
  gathers_in_flight += 1;
  return true;
}

bool Engine::Impl::fits_gather_arena(std::size_t bytes) const {
  return bytes == 0 || gather_arena->largest_free_range() >= bytes + Arena::kDefaultAlignment;
}

void Engine::Impl::wait_gather(std::size_t param) {
  ParamState& state = params[param];
  if (state.reading) finish_reads(param);
  if (!state.in_flight) return;
  Timer timer;
  state.gathering.wait();
  timers.gather_wait += timer.seconds();
  state.in_flight = false;
  gathers_in_flight -= 1;
  state.gathering = {};
}

void Engine::Impl::release_param(std::size_t param) {
  ParamState& state = params[param];
  if (state.full == nullptr) return;
  wait_gather(param);
  device->default_stream().synchronize();  // the model's work on it is done
  gather_arena->release(state.full_block);
  if (!state.persistent) fetch.live_elements -= gathered_elements(param);
  state.full_block = {};
  state.full = nullptr;
}

// Waits for every gather in flight, then releases every gathered parameter no hook holds: those
// kept or fetched ahead, and with `stale` (a step is changing the shards) the persistent ones.
void Engine::Impl::release_unheld(bool stale) {
  if (stage != 3) return;
  // Gathers still in flight read the shards: they finish before anything (a step) writes them.
  finish_reads(kNone);
  for (std::size_t p = 0; p < params.size() && gathers_in_flight > 0; ++p) wait_gather(p);
  for (std::size_t p = 0; p < params.size(); ++p) {
    const ParamState& state = params[p];
    if (state.full == nullptr || state.holds > 0) continue;
    if (state.persistent && !stale) continue;
    release_param(p);
  }
}

void Engine::Impl::poll_gathers() {
  if (gathers_in_flight == 0) return;
  for (auto& state : params) {
    if (state.in_flight && state.gathering.test()) {
      state.in_flight = false;
      state.gathering = {};
      gathers_in_flight -= 1;
    }
  }
}

}  // namespace zero::engine
