// What every backend shares: the description of an issued collective, the communicator's
// health (poisoned after a timeout or failure), argument checks, and the sequence counter.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/dtype.h"
#include "comm/communicator.h"

namespace zero::comm {

// One issued collective, for messages.
struct OpInfo {
  const char* collective = "";
  std::uint64_t sequence = 0;  // 1-based, per communicator, barriers and all
  std::size_t count = 0;       // elements of the caller's buffer
  DType dtype = DType::f32;
  std::optional<ReduceOp> op;
  int root = -1;

  // "all_reduce #12 (4096 bf16 elements, 8.0 KiB, sum)"
  std::string describe() const;
};

// Shared by a communicator and its outstanding works, which may outlive it.
class Health {
 public:
  // `where`: "communicator world (mpi, rank 0 of 4)".
  explicit Health(std::string where) : where_(std::move(where)) {}

  const std::string& where() const noexcept { return where_; }
  bool poisoned() const noexcept { return poisoned_.load(std::memory_order_acquire); }
  // Marks the communicator unusable; the first reason is kept.
  void poison(const std::string& reason);
  // Throws a comm Error saying why the communicator is unusable, when it is.
  void check() const;

 private:
  std::string where_;
  std::atomic<bool> poisoned_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

// The timeout Error's message; `arrivals` says which ranks have not issued the collective
// (empty when the backend cannot know).
std::string timeout_message(const OpInfo& op, const Health& health,
                            std::chrono::milliseconds waited, const std::string& arrivals);

// A WorkState that knows its op and health: check_health, default_timeout and expire.
class TrackedWork : public WorkState {
 public:
  TrackedWork(OpInfo op, std::shared_ptr<Health> health, std::chrono::milliseconds timeout)
      : op_(std::move(op)), health_(std::move(health)), timeout_(timeout) {}

  std::chrono::milliseconds default_timeout() const noexcept override { return timeout_; }
  void check_health() const override;
  std::string expire(std::chrono::milliseconds waited) override;

 protected:
  // Which ranks have not issued this collective, where the backend can know ("" otherwise).
  virtual std::string missing_ranks() { return {}; }

  const OpInfo& op() const noexcept { return op_; }
  Health& health() const noexcept { return *health_; }

 private:
  OpInfo op_;
  std::shared_ptr<Health> health_;
  std::chrono::milliseconds timeout_;
};

// A work complete when issued (world of one, zero-length, or already finished).
class CompleteWork final : public TrackedWork {
 public:
  using TrackedWork::TrackedWork;
  bool poll() override { return true; }
};

// The bookkeeping part of a backend: identity, sequence numbers, health and argument checks.
class CommunicatorBase : public Communicator {
 public:
  CommunicatorBase(std::string name, std::string_view backend, int rank, int size,
                   std::chrono::milliseconds timeout);

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  std::string_view backend() const noexcept override { return backend_; }
  const std::string& name() const noexcept override { return name_; }
  std::chrono::milliseconds timeout() const noexcept override { return timeout_; }
  bool poisoned() const noexcept override { return health_->poisoned(); }

 protected:
  // Checks health and arguments, then numbers the collective. Usage Errors name the call.
  OpInfo begin_all_reduce(const void* data, std::size_t count, DType dtype, ReduceOp op);
  OpInfo begin_reduce_scatter(const void* input, const void* output, std::size_t count, DType dtype,
                              ReduceOp op);
  OpInfo begin_all_gather(const void* input, const void* output, std::size_t count, DType dtype);
  OpInfo begin_all_to_all(const void* input, const void* output, std::size_t count, DType dtype);
  OpInfo begin_broadcast(const void* data, std::size_t count, DType dtype, int root);
  OpInfo begin_barrier();

  // For split(): the child's name.
  std::string child_name(int color) const;
  // Group bracketing checks (no nesting, end after begin).
  void enter_group();
  void leave_group();
  bool in_group() const noexcept { return in_group_; }

  const std::shared_ptr<Health>& health() const noexcept { return health_; }
  Work complete(const OpInfo& op) const;

 private:
  OpInfo number(OpInfo op);

  std::string name_;
  std::string backend_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Health> health_;
  std::uint64_t sequence_ = 0;
  bool in_group_ = false;
};

}  // namespace zero::comm
