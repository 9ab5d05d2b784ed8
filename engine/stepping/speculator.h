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
// After the backward the rest may be handed over (hand_over) instead of waited for (finish): the
// worker goes on with them in ascending order, and await() / drain() wait for one or all.
//
// Owns: the worker thread, the queue of final groups, the per-bucket lists of groups made final,
// which groups are stepped, the policy's history and counts. Calls: the callback (on the worker).
// Streams: none of its own. Thread safety: bucket_added() may come from the reductions' epilogue
// thread; everything else from the engine's thread. Internal to engine/.
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
  // off, or after stop(); returns whether it armed. Not while groups handed over are pending.
  // `newest_first`: the worker takes the group made final last (for a boundary that will hand
  // over: what it leaves for the next forward is then mostly the groups that forward reads
  // last, and the worker's idle stretch between the forward and the next backward is short);
  // otherwise in the order they became final (the order NVMe reads ahead in).
  bool arm(std::function<void(std::size_t group)> step, bool newest_first = false);
  bool armed() const;
  // In the epilogue's order, once bucket `bucket`'s reduced block is in the owned gradient.
  // Ignored while not armed.
  void bucket_added(std::size_t bucket) noexcept;
  // After the backward pass (every gradient final): gives the worker the groups it has not had,
  // waits until it has stepped them all, and disarms. Rethrows the first failure of a step (the
  // groups after it are not stepped).
  void finish();
  // After the backward pass, where the boundary need not wait for the steps (Speculation's
  // tail; a verdict that drops them drains first): gives the worker the groups it has not had,
  // queues every group not yet stepped in ascending order (the order the next forward reads them
  // in) and disarms, without waiting. Until drain(), await() waits for one. Rethrows (as finish())
  // when a group has failed already.
  void hand_over();
  // After hand_over(): waits until group `group` is stepped, taking it next if it is still
  // queued; rethrows a step's failure. Returns at once when nothing was handed over.
  void await(std::size_t group);
  // After hand_over(): waits until every group is stepped; rethrows a step's failure (the groups
  // after it are not stepped). Returns at once when nothing was handed over.
  void drain();
  // After hand_over(), for steps a verdict drops: the groups not yet taken are not stepped, and
  // it waits for the one running; rethrows a step's failure. Returns at once when nothing was
  // handed over.
  void abandon();
  // Whether a group of the armed (or handed over) boundary has failed so far.
  bool failed() const;
  // Stops taking groups and ends the worker after the step it is running; idempotent.
  void stop() noexcept;

  // The boundary's verdict: whether a rollback was (with speculation) or would have been
  // (without it) needed. Moves the policy, logging when it turns speculation off or on.
  void record(bool speculated, bool rollback);
  Counts counts() const;

 private:
  void run();
  void queue_locked(std::size_t group);
  // Under the mutex: waits until the queue is done, or a step failed (then the queued groups
  // are dropped) or stop() came, and the running step has ended.
  void wait_out(std::unique_lock<std::mutex>& lock);
  // Throws the failure (or, once it has been thrown, that it was); under the mutex.
  [[noreturn]] void rethrow_locked();

  std::vector<std::size_t> last_bucket_;               // per group
  std::vector<std::vector<std::size_t>> final_after_;  // per bucket: the groups it makes final
  std::vector<std::size_t> unbucketed_;                // groups no bucket touches

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the worker: a group queued, or stop
  std::condition_variable done_;  // finish(): the queue drained, or a failure
  std::function<void(std::size_t)> step_;
  std::deque<std::size_t> queue_;
  std::vector<bool> queued_;     // per group, this boundary
  std::vector<bool> stepped_;    // per group, this boundary: its step returned
  bool handed_over_ = false;     // hand_over() until drain()
  bool newest_first_ = false;    // while armed (arm)
  std::size_t outstanding_ = 0;  // queued or running
  bool armed_ = false;
  bool stopping_ = false;
  std::exception_ptr failure_;  // the first failure, until rethrown
  bool failed_ = false;         // a step failed this boundary (until the next arm)
  std::thread worker_;          // started at the first arm()

  std::deque<bool> history_;  // the last kWindow speculated steps: rolled back or not
  Counts counts_;
};

}  // namespace zero::engine
