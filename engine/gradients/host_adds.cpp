// HostAdds (see host_adds.h).
#include "engine/gradients/host_adds.h"

#include <utility>

namespace zero::engine {

HostAdds::HostAdds(std::size_t slots, int threads, Trace* trace)
    : trace_(trace), uses_(slots, 0), freed_(slots, 0) {
  for (int t = 0; t < std::max(threads, 1); ++t) {
    workers_.push_back(std::make_unique<cpu::StreamWorker>());
  }
}

HostAdds::~HostAdds() {
  try {
    drain();
  } catch (...) {  // reported by the drain the engine made; nothing more to do at teardown
  }
}

std::pair<std::size_t, std::uint64_t> HostAdds::next_use() {
  std::lock_guard lock(mutex_);
  const std::size_t slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % uses_.size();
  return {slot, uses_[slot]++};
}

void HostAdds::take(std::size_t slot, std::uint64_t use) {
  std::unique_lock lock(mutex_);
  if (freed_[slot] >= use) return;
  TraceSpan span(trace_, "host adds", "wait slot");
  changed_.wait(lock, [&] { return freed_[slot] >= use; });
}

void HostAdds::submit(std::size_t slot, Part part, std::function<void()> then) {
  auto job = std::make_shared<Job>();
  job->slot = slot;
  job->then = std::move(then);
  const int parts = static_cast<int>(workers_.size());
  job->remaining = parts;
  {
    std::lock_guard lock(announce_);
    jobs_.push_back(job);
  }
  auto shared = std::make_shared<Part>(std::move(part));
  for (int k = 0; k < parts; ++k) {
    workers_[static_cast<std::size_t>(k)]->submit([this, job, shared, k, parts] {
      std::exception_ptr error;
      try {
        TraceSpan span(trace_, "host adds", "add");
        (*shared)(k, parts);
      } catch (...) {
        error = std::current_exception();
      }
      part_done(job, error);
    });
  }
}

void HostAdds::part_done(const std::shared_ptr<Job>& job, std::exception_ptr error) {
  std::lock_guard order(announce_);
  if (error) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = error;
  }
  if (--job->remaining > 0) return;
  job->added = true;
  while (!jobs_.empty() && jobs_.front()->added) {
    std::shared_ptr<Job> done = std::move(jobs_.front());
    jobs_.pop_front();
    try {
      if (done->then) done->then();
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    freed_[done->slot] += 1;
    changed_.notify_all();
  }
}

void HostAdds::drain() {
  for (auto& worker : workers_) worker->drain();
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::size_t HostAdds::pending() {
  std::lock_guard lock(announce_);
  return jobs_.size();
}

}  // namespace zero::engine
