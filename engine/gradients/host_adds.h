// HostAdds: optimizer offload beside a GPU, the host's side of the reduced gradients' way down
// (docs/offload.md, "The offloaded step as a pipeline"). Reduced blocks come down into a ring
// of pinned slots; each block's add into the owned shard in host memory runs on this pool of
// threads, outside the device's host-task thread (CUDA's callback thread), split over the
// threads by element range, so the epilogue stream goes on to the next block's copy while the
// host adds the ones before it, and backward is paced by neither.
//
// In the epilogue stream's order, per block: take(slot, use) in a host task waits until the
// slot's previous use is added (only when the host is a whole ring behind), the copy down
// fills it, and submit() in a host task queues its add. A block's `then` (the gradient swap's
// adds, super_offload's notice) runs once its parts are all added, in submission order; the
// slot is free after it. drain() waits for every block submitted.
//
// Owns: the worker threads, the queued blocks, the slots' use counts. Thread safety: take()
// and submit() on the device's host-task thread, next_use() and drain() on the engine's.
// Internal to engine/.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "device/cpu/stream_worker.h"
#include "device/trace.h"

namespace zero::engine {

class HostAdds {
 public:
  // `part(k, parts)` adds the k-th of `parts` element ranges of a block.
  using Part = std::function<void(int part, int parts)>;

  HostAdds(std::size_t slots, int threads, Trace* trace);
  // Waits for the blocks queued (their parts read the slots).
  ~HostAdds();
  HostAdds(const HostAdds&) = delete;
  HostAdds& operator=(const HostAdds&) = delete;

  std::size_t slots() const noexcept { return uses_.size(); }
  // On the engine's thread, as a block is delivered: the slot it comes down through (in turn)
  // and which use of the slot this is.
  std::pair<std::size_t, std::uint64_t> next_use();
  // In the epilogue's order, before the copy into the slot: waits until its earlier uses are
  // added and their `then` run.
  void take(std::size_t slot, std::uint64_t use);
  // In the epilogue's order, after the copy into the slot: the block's add, on every thread.
  void submit(std::size_t slot, Part part, std::function<void()> then);
  // Every block submitted added and its `then` run; rethrows the first failure of one.
  void drain();
  // Blocks submitted and not yet added (for tests).
  std::size_t pending();

 private:
  struct Job {
    std::size_t slot = 0;
    std::function<void()> then;
    int remaining = 0;
    bool added = false;
  };
  // A part of `job` is done: the jobs added at the queue's front are announced in order.
  void part_done(const std::shared_ptr<Job>& job, std::exception_ptr error);

  Trace* trace_;
  std::vector<std::unique_ptr<cpu::StreamWorker>> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;        // a slot freed, the queue shortened
  std::vector<std::uint64_t> uses_;        // per slot: handed out (engine thread)
  std::vector<std::uint64_t> freed_;       // per slot: uses added and announced
  std::deque<std::shared_ptr<Job>> jobs_;  // submitted, in order
  std::size_t next_slot_ = 0;
  std::exception_ptr error_;
  std::mutex announce_;  // one thread announces at a time, in order
};

}  // namespace zero::engine
