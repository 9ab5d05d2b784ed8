// The stage-3 fetch plan: one pass's recorded module order (the trace) and what it says about
// the future at each hook, which is what prefetching and keeping gathered parameters need.
// Pure arithmetic over the trace, the modules' parameters and their sizes, with no
// communicator and no memory, so that every rank, given the same trace, makes the same
// decisions, and so that it is tested alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace zero::engine {

// A pre hook: module `module` entering its forward or its backward.
struct TraceEvent {
  std::size_t module = 0;
  bool backward = false;

  bool operator==(const TraceEvent&) const = default;
};

class FetchPlan {
 public:
  static constexpr std::size_t kNever = static_cast<std::size_t>(-1);

  FetchPlan() = default;
  // `module_params[m]`: the parameters module m uses. `elements[p]`: what a gather of parameter
  // p brings, in elements. `persistent[p]`: parameter p stays gathered once it is, so it does
  // not count against the live limit. Throws a usage Error when an event or a parameter is out
  // of range.
  FetchPlan(std::vector<TraceEvent> events,
            const std::vector<std::vector<std::size_t>>& module_params,
            std::vector<std::size_t> elements, std::vector<bool> persistent);

  std::size_t size() const noexcept { return events_.size(); }
  bool empty() const noexcept { return events_.empty(); }
  const TraceEvent& event(std::size_t i) const { return events_.at(i); }
  const std::vector<TraceEvent>& events() const noexcept { return events_; }
  // XXH3 of the events: equal on every rank that recorded the same order.
  std::uint64_t hash() const noexcept;

  // The next event after `i` that uses the k-th parameter of event i's module, or kNever.
  std::size_t next_use(std::size_t i, std::size_t k) const { return next_use_.at(i).at(k); }
  // Elements the events strictly between i and j gather (each parameter use counted), the
  // measure of stage3_max_reuse_distance. Needs i < j <= size().
  std::size_t distance(std::size_t i, std::size_t j) const;
  // Whether the k-th parameter of event i's module is used again within `max_distance`
  // elements: then releasing it after event i would only gather it again soon.
  bool reused_within(std::size_t i, std::size_t k, std::size_t max_distance) const;

  // What to gather ahead at event i, in the order it will be needed: the parameters of the
  // events after i, each once, taken while fewer than `window` elements have been walked
  // (stage3_prefetch_bucket_size; gathered ones count, since they are data already ahead),
  // skipping those `gathered(p)` says are there and stopping at the first whose gather would
  // take the live elements (`live`, plus each one taken that is not persistent) past
  // `max_live` (stage3_max_live_parameters). Not thread-safe (it keeps scratch between calls).
  std::vector<std::size_t> prefetch(std::size_t i, std::size_t window, std::size_t max_live,
                                    std::size_t live,
                                    const std::function<bool(std::size_t)>& gathered) const;

 private:
  std::vector<TraceEvent> events_;
  std::vector<std::vector<std::size_t>> module_params_;
  std::vector<std::size_t> elements_;
  std::vector<bool> persistent_;
  std::vector<std::vector<std::size_t>> next_use_;  // per event, per parameter of its module
  std::vector<std::size_t> before_;                 // before_[i]: elements gathered by events < i
  // prefetch()'s scratch: a parameter is seen this call when its entry equals the stamp.
  mutable std::vector<std::uint32_t> seen_;
  mutable std::uint32_t stamp_ = 0;
};

}  // namespace zero::engine
