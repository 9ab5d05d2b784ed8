// SuperOffload's speculation, the scheduling half (docs/offload.md, "The overlapped step"): in
// the boundary micro-step's backward each step group is stepped on a worker thread as soon as
// its gradient is final, while the rest of backward runs; the boundary then validates (the
// Stepper: the non-finite check and the global norm) and keeps the speculated groups or rolls
// them back. This class decides when a group is final and runs the steps; what a step and a
// rollback do is the Stepper's (the callback given to arm()).
//
// A group's gradient is final once every reduction bucket holding part of its owned range has
// been added into the owned gradient shard: the buckets are added in plan order (the epilogue's
// order), so group g is final after the bucket `last_bucket(g)`, the latest of them.
//
// The policy: after rollbacks in kOffAfter of the last kWindow speculated steps, speculation
// stops (logged, with the counts) until a boundary comes that would have needed no rollback
// (no clipping, no skip); every rank sees the same verdicts, so every rank decides alike.
//
// Owns: the worker thread, the queue of final groups, the per-bucket lists of groups made final,
// the policy's history and counts. Calls: the callback (on the worker). Streams: none of its
// own. Thread safety: bucket_added() may come from the reductions' epilogue thread; everything
// else from the engine's thread. Internal to engine/.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/plan/memory_plan.h"

namespace zero::engine {

class Speculator {
 public:
  static constexpr int kWindow = 8;    // the policy looks at this many speculated steps
  static constexpr int kOffAfter = 3;  // and stops after this many rollbacks among them

  struct Counts {
    std::int64_t speculated = 0;   // boundaries whose groups were stepped in backward
    std::int64_t rolled_back = 0;  // of which rolled back (clipping or a skip)
    std::int64_t held_off = 0;     // boundaries stepped after backward while speculation was off
    bool on = true;                // speculating at the next boundary
  };

  // The groups each bucket makes final, from the layout's buckets and step groups.
  explicit Speculator(const Layout& layout);
  // stop().
  ~Speculator();
  Speculator(const Speculator&) = delete;
  Speculator& operator=(const Speculator&) = delete;

  // For group g, the last bucket (in plan order) holding part of its owned range; kNone when no
  // bucket does (it is final when the backward ends).
  std::size_t last_bucket(std::size_t group) const { return last_bucket_[group]; }
  // The order the worker steps the groups in when every bucket reports in plan order: the
  // groups each bucket makes final, bucket by bucket, then those no bucket touches.
  std::vector<std::size_t> order() const;

  // The boundary micro-step's backward begins: from now, each group whose gradient becomes
  // final is given to `step` on the worker, once. Nothing while the policy holds speculation
  // off, or after stop(); returns whether it armed.
  bool arm(std::function<void(std::size_t group)> step);
  bool armed() const;
  // In the epilogue's order, once bucket `bucket`'s reduced block is in the owned gradient.
  // Ignored while not armed.
  void bucket_added(std::size_t bucket) noexcept;
  // After the backward pass (every gradient final): gives the worker the groups it has not had,
  // waits until it has stepped them all, and disarms. Rethrows the first failure of a step (the
  // groups after it are not stepped).
  void finish();
  // Stops taking groups and ends the worker after the step it is running; idempotent.
  void stop() noexcept;

  // The boundary's verdict: whether a rollback was (with speculation) or would have been
  // (without it) needed. Moves the policy, logging when it turns speculation off or on.
  void record(bool speculated, bool rollback);
  Counts counts() const;

 private:
  void run();
  void queue_locked(std::size_t group);

  std::vector<std::size_t> last_bucket_;               // per group
  std::vector<std::vector<std::size_t>> final_after_;  // per bucket: the groups it makes final
  std::vector<std::size_t> unbucketed_;                // groups no bucket touches

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the worker: a group queued, or stop
  std::condition_variable done_;  // finish(): the queue drained, or a failure
  std::function<void(std::size_t)> step_;
  std::deque<std::size_t> queue_;
  std::vector<bool> queued_;     // per group, this boundary
  std::size_t outstanding_ = 0;  // queued or running
  bool armed_ = false;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::thread worker_;  // started at the first arm()

  std::deque<bool> history_;  // the last kWindow speculated steps: rolled back or not
  Counts counts_;
};

}  // namespace zero::engine
