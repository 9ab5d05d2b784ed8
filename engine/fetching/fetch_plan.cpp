#include "engine/fetching/fetch_plan.h"

#include <algorithm>

#include <xxhash.h>

#include "base/error.h"

namespace zero::engine {

FetchPlan::FetchPlan(std::vector<TraceEvent> events,
                     const std::vector<std::vector<std::size_t>>& module_params,
                     std::vector<std::size_t> elements, std::vector<bool> persistent)
    : events_(std::move(events)),
      module_params_(module_params),
      elements_(std::move(elements)),
      persistent_(std::move(persistent)) {
  if (persistent_.size() != elements_.size()) {
    throw make_error(ErrorCategory::usage, "FetchPlan: {} sizes but {} persistence flags",
                     elements_.size(), persistent_.size());
  }
  for (const auto& params : module_params_) {
    for (std::size_t p : params) {
      if (p >= elements_.size()) {
        throw make_error(ErrorCategory::usage, "FetchPlan: parameter {} of {} is out of range", p,
                         elements_.size());
      }
    }
  }
  seen_.assign(elements_.size(), 0);
  before_.assign(events_.size() + 1, 0);
  for (std::size_t i = 0; i < events_.size(); ++i) {
    const std::size_t m = events_[i].module;
    if (m >= module_params_.size()) {
      throw make_error(ErrorCategory::usage, "FetchPlan: event {} names module {} of {}", i, m,
                       module_params_.size());
    }
    std::size_t sum = 0;
    for (std::size_t p : module_params_[m]) sum += elements_[p];
    before_[i + 1] = before_[i] + sum;
  }
  // Walking backwards, the next event that uses each parameter.
  next_use_.resize(events_.size());
  std::vector<std::size_t> next(elements_.size(), kNever);
  for (std::size_t i = events_.size(); i-- > 0;) {
    const auto& params = module_params_[events_[i].module];
    next_use_[i].resize(params.size());
    for (std::size_t k = 0; k < params.size(); ++k) next_use_[i][k] = next[params[k]];
    for (std::size_t p : params) next[p] = i;
  }
}

std::uint64_t FetchPlan::hash() const noexcept {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const TraceEvent& e : events_) {
    const std::uint64_t words[2] = {e.module, e.backward ? 1u : 0u};
    XXH3_64bits_update(state, words, sizeof words);
  }
  const std::uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

std::size_t FetchPlan::distance(std::size_t i, std::size_t j) const {
  if (i >= j || j > events_.size()) {
    throw make_error(ErrorCategory::usage, "FetchPlan::distance({}, {}) of a {}-event plan", i, j,
                     events_.size());
  }
  return before_[j] - before_[i + 1];
}

bool FetchPlan::reused_within(std::size_t i, std::size_t k, std::size_t max_distance) const {
  const std::size_t j = next_use(i, k);
  return j != kNever && distance(i, j) <= max_distance;
}

std::vector<std::size_t> FetchPlan::prefetch(
    std::size_t i, std::size_t window, std::size_t max_live, std::size_t live,
    const std::function<bool(std::size_t)>& gathered) const {
  std::vector<std::size_t> out;
  // Each parameter once: marked with this call's stamp, so no per-call clearing or allocation
  // (this runs at every pre hook).
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  std::size_t walked = 0;
  for (std::size_t e = i + 1; e < events_.size(); ++e) {
    for (std::size_t p : module_params_[events_[e].module]) {
      if (walked >= window) return out;
      if (seen_[p] == stamp_) continue;
      seen_[p] = stamp_;
      walked += elements_[p];
      if (gathered(p)) continue;
      const std::size_t cost = persistent_[p] ? 0 : elements_[p];
      if (live + cost > max_live) return out;
      live += cost;
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace zero::engine
