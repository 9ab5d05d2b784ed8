// Speculator: when a step group's gradient is final, and the worker that steps it (see
// speculator.h).
#include "engine/stepping/speculator.h"

#include <algorithm>
#include <utility>

#include "base/error.h"
#include "base/log.h"

namespace zero::engine {

Speculator::Speculator(const Layout& layout)
    : last_bucket_(layout.step_groups.size(), kNone),
      final_after_(layout.buckets.size()),
      queued_(layout.step_groups.size(), false),
      stepped_(layout.step_groups.size(), false) {
  // Per trainable parameter, the buckets holding a piece of its shard, with the piece's range.
  struct Held {
    std::size_t bucket, begin, end;
  };
  std::vector<std::vector<Held>> held(layout.trainable.size());
  for (std::size_t b = 0; b < layout.buckets.size(); ++b) {
    for (const BucketPiece& piece : layout.buckets[b].pieces) {
      held[piece.param].push_back({b, piece.begin, piece.end});
    }
  }
  for (std::size_t g = 0; g < layout.step_groups.size(); ++g) {
    std::size_t last = kNone;
    for (const BucketPiece& piece : layout.step_groups[g].pieces) {
      for (const Held& h : held[piece.param]) {
        if (h.begin < piece.end && piece.begin < h.end) {
          last = last == kNone ? h.bucket : std::max(last, h.bucket);
        }
      }
    }
    last_bucket_[g] = last;
    if (last == kNone) {
      unbucketed_.push_back(g);
    } else {
      final_after_[last].push_back(g);
    }
  }
}

std::vector<std::size_t> Speculator::order() const {
  std::vector<std::size_t> out;
  out.reserve(last_bucket_.size());
  for (const std::vector<std::size_t>& groups : final_after_) {
    out.insert(out.end(), groups.begin(), groups.end());
  }
  out.insert(out.end(), unbucketed_.begin(), unbucketed_.end());
  return out;
}

Speculator::~Speculator() {
  stop();
}

void Speculator::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    armed_ = false;
    outstanding_ -= queue_.size();
    queue_.clear();
  }
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

bool Speculator::arm(std::function<void(std::size_t)> step, bool newest_first) {
  std::lock_guard lock(mutex_);
  if (stopping_ || !counts_.on) return false;
  if (handed_over_) {
    throw make_error(ErrorCategory::internal,
                     "super_offload: a boundary armed while the last one's steps are pending");
  }
  step_ = std::move(step);
  std::fill(queued_.begin(), queued_.end(), false);
  std::fill(stepped_.begin(), stepped_.end(), false);
  failure_ = nullptr;
  failed_ = false;
  outstanding_ = 0;
  newest_first_ = newest_first;
  armed_ = true;
  if (!worker_.joinable()) worker_ = std::thread([this] { run(); });
  return true;
}

bool Speculator::armed() const {
  std::lock_guard lock(mutex_);
  return armed_;
}

void Speculator::queue_locked(std::size_t group) {
  if (queued_[group]) return;
  queued_[group] = true;
  queue_.push_back(group);
  outstanding_ += 1;
}

void Speculator::bucket_added(std::size_t bucket) noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!armed_ || bucket >= final_after_.size()) return;
    for (std::size_t g : final_after_[bucket]) queue_locked(g);
  }
  wake_.notify_one();
}

void Speculator::finish() {
  std::unique_lock lock(mutex_);
  if (!armed_) return;
  // Every gradient is final now: the groups not yet given (no bucket, or buckets whose
  // epilogue did not report) follow in order.
  for (std::size_t g = 0; g < queued_.size(); ++g) queue_locked(g);
  wake_.notify_one();
  wait_out(lock);
  armed_ = false;
  if (failure_ != nullptr) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void Speculator::hand_over() {
  {
    std::unique_lock lock(mutex_);
    if (!armed_) return;
    armed_ = false;
    if (failed_) {
      // A group failed in backward: the step fails now, as after finish().
      wait_out(lock);
      rethrow_locked();
    }
    handed_over_ = true;
    for (std::size_t g = 0; g < queued_.size(); ++g) queue_locked(g);
    // The next forward reads the groups from the first on (the layout follows the parameters'
    // order); the running one, if any, is not in the queue.
    std::sort(queue_.begin(), queue_.end());
  }
  wake_.notify_one();
}

void Speculator::await(std::size_t group) {
  std::unique_lock lock(mutex_);
  if (!handed_over_ || stepped_[group]) return;
  if (const auto queued = std::find(queue_.begin(), queue_.end(), group); queued != queue_.end()) {
    queue_.erase(queued);
    queue_.push_front(group);
  }
  done_.wait(lock, [&] { return stepped_[group] || failed_ || stopping_; });
  if (failed_) rethrow_locked();
  if (!stepped_[group]) {
    throw make_error(ErrorCategory::internal,
                     "super_offload: the worker stopped before stepping group {}", group);
  }
}

void Speculator::drain() {
  std::unique_lock lock(mutex_);
  if (!handed_over_) return;
  wait_out(lock);
  handed_over_ = false;
  if (failed_) rethrow_locked();
  if (std::find(stepped_.begin(), stepped_.end(), false) != stepped_.end()) {
    throw make_error(ErrorCategory::internal,
                     "super_offload: the worker stopped before stepping the last groups");
  }
}

void Speculator::abandon() {
  std::unique_lock lock(mutex_);
  if (!handed_over_) return;
  outstanding_ -= queue_.size();
  queue_.clear();
  done_.wait(lock, [this] { return outstanding_ == 0; });
  handed_over_ = false;
  if (failed_) rethrow_locked();
}

void Speculator::wait_out(std::unique_lock<std::mutex>& lock) {
  done_.wait(lock, [this] { return outstanding_ == 0 || failed_ || stopping_; });
  // After a failure the groups still queued are not stepped; the one running ends before the
  // caller touches the state.
  outstanding_ -= queue_.size();
  queue_.clear();
  done_.wait(lock, [this] { return outstanding_ == 0; });
}

bool Speculator::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void Speculator::rethrow_locked() {
  if (failure_ != nullptr) std::rethrow_exception(std::exchange(failure_, nullptr));
  throw make_error(ErrorCategory::internal,
                   "super_offload: a step of the last boundary failed (reported before)");
}

void Speculator::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const bool newest = armed_ && newest_first_;
    const std::size_t group = newest ? queue_.back() : queue_.front();
    if (newest) {
      queue_.pop_back();
    } else {
      queue_.pop_front();
    }
    const bool skip = failed_;
    if (!skip) {
      lock.unlock();
      std::exception_ptr error;
      try {
        step_(group);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error != nullptr && !failed_) {
        failure_ = error;
        failed_ = true;
      }
      stepped_[group] = error == nullptr;
    }
    outstanding_ -= 1;
    done_.notify_all();
  }
}

void Speculator::record(bool speculated, bool rollback) {
  std::lock_guard lock(mutex_);
  if (!speculated) {
    counts_.held_off += counts_.on ? 0 : 1;
    if (!counts_.on && !rollback) {
      counts_.on = true;
      log::info(
          "super_offload: a step without clipping or a skip; speculating again (so far {} "
          "speculated steps, {} rolled back, {} stepped after backward)",
          counts_.speculated, counts_.rolled_back, counts_.held_off);
    }
    return;
  }
  counts_.speculated += 1;
  counts_.rolled_back += rollback ? 1 : 0;
  history_.push_back(rollback);
  if (history_.size() > static_cast<std::size_t>(kWindow)) history_.pop_front();
  const auto rollbacks = std::count(history_.begin(), history_.end(), true);
  if (rollbacks >= kOffAfter) {
    counts_.on = false;
    history_.clear();
    log::info(
        "super_offload: {} of the last {} speculated steps were rolled back (clipping or a "
        "skip); stepping after backward until a step needs neither (so far {} speculated, {} "
        "rolled back)",
        rollbacks, kWindow, counts_.speculated, counts_.rolled_back);
  }
}

Speculator::Counts Speculator::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace zero::engine
