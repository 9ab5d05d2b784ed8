// Work: the handle a collective returns. A collective is issued when its call returns; its
// buffers belong to the communicator until test() has returned true or wait() has returned.
//
// Every wait is bounded: wait() uses the communicator's timeout (comm_timeout_s), wait(t) the
// given one. A collective not complete in time throws a timeout Error naming the collective,
// its size, its sequence number on the communicator and, where the backend can know, the ranks
// that have not issued it; the communicator is then poisoned and every later call on it (or on
// works still outstanding) fails at once. The caller decides whether to abort the job
// (Communicator::abort).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace zero {

class Stream;

namespace comm {

// What the backends implement for one issued collective. Not used by callers.
class WorkState {
 public:
  virtual ~WorkState() = default;
  // Advances the collective where the backend needs the caller to (polling progress) and
  // returns true once it is complete and its results are in the caller's buffers. Throws a
  // comm Error when the backend reports a failure.
  virtual bool poll() = 0;
  // Orders later work on `stream` after this collective without blocking the host, and
  // returns true; or returns false (the default) and the caller waits on the host instead.
  virtual bool block(Stream& stream) {
    (void)stream;
    return false;
  }
  // Builds the timeout message and poisons the communicator; returns the message.
  virtual std::string expire(std::chrono::milliseconds waited) = 0;
  // The communicator's timeout, for wait() without an argument.
  virtual std::chrono::milliseconds default_timeout() const noexcept = 0;
  // Throws the poison Error when the communicator was poisoned after this work was issued.
  virtual void check_health() const = 0;
};

}  // namespace comm

class Work {
 public:
  Work() = default;  // an empty Work is complete
  explicit Work(std::shared_ptr<comm::WorkState> state) : state_(std::move(state)) {}

  // True when the collective is complete. Never blocks; throws a comm Error if it failed.
  bool test();
  // Blocks until complete, at most the communicator's timeout (then a timeout Error).
  void wait();
  void wait(std::chrono::milliseconds timeout);
  // Makes later work on `stream` wait for this collective: without host synchronisation on
  // NCCL, by waiting on the host elsewhere.
  void block(Stream& stream);

 private:
  std::shared_ptr<comm::WorkState> state_;
  bool done_ = false;
};

}  // namespace zero
