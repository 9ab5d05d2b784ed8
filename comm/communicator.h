// The Communicator: asynchronous collectives over a group of ranks.
//
// Contract (every backend):
// - Collective calls on one communicator must be issued in the same order, with the same
//   counts, dtypes, ops and roots, on every rank of it. The engine guarantees this by computing
//   its schedule ahead (docs/design.md); a rank that diverges makes the others time out.
// - A call issues the collective and returns a Work; the buffers must stay valid and untouched
//   until the Work is complete. Several works may be outstanding at once; they complete in any
//   order the backend likes, but each one's result is as if run alone.
// - Buffers are in the memory of the communicator's device (CommOptions::device): host memory
//   on the CPU device, device memory on CUDA. `stream` (the caller's stream; nullptr: the
//   device's default stream) orders the collective after the work already submitted there.
// - Reductions happen in the buffer's dtype (fp32, fp16, bf16 or int64): the engine chooses the
//   dtype from communication_data_type. avg is the sum divided by size() in that dtype (for
//   int64, truncated toward zero).
// - Counts are per rank for reduce_scatter and all_gather (equal blocks): the full buffer holds
//   size() * count elements, block r belonging to rank r. In place is allowed where NCCL allows
//   it: all_gather with input == output + rank * count, reduce_scatter with
//   output == input + rank * count (the input's other blocks are unspecified afterwards),
//   all_reduce and broadcast always. all_to_all is never in place.
// - Creating (split) and destroying a communicator are collective too: every rank of it, in
//   the same order. A poisoned communicator is the exception: its destruction frees only
//   local state, since the other ranks may never get there.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "base/dtype.h"
#include "comm/work.h"

namespace zero {

class Device;
class Stream;

enum class ReduceOp { sum, avg, max };

std::string_view reduce_op_name(ReduceOp op) noexcept;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // "local", "mpi" or "nccl".
  virtual std::string_view backend() const noexcept = 0;
  // "world", or the parent's name with the split: "world/split(1)".
  virtual const std::string& name() const noexcept = 0;
  virtual std::chrono::milliseconds timeout() const noexcept = 0;
  // The device whose memory its buffers are in (CommOptions::device); null: host memory.
  virtual Device* device() const noexcept = 0;
  // The device stream its collectives run on, where it has one of its own (NCCL); nullptr where
  // they run on a host thread (MPI) or complete in the call (local).
  virtual Stream* stream() const noexcept { return nullptr; }

  // data[0, count) reduced across ranks, in place on every rank.
  virtual Work all_reduce(void* data, std::size_t count, DType dtype, ReduceOp op,
                          Stream* stream = nullptr) = 0;
  // output[0, count) on rank r = reduction over ranks of input[r * count, (r + 1) * count).
  virtual Work reduce_scatter(const void* input, void* output, std::size_t count, DType dtype,
                              ReduceOp op, Stream* stream = nullptr) = 0;
  // output[r * count, (r + 1) * count) on every rank = input[0, count) of rank r.
  virtual Work all_gather(const void* input, void* output, std::size_t count, DType dtype,
                          Stream* stream = nullptr) = 0;
  // output[q * count, (q + 1) * count) on rank r = input[r * count, (r + 1) * count) of rank
  // q: each rank's block r goes to rank r. Input and output must not overlap.
  virtual Work all_to_all(const void* input, void* output, std::size_t count, DType dtype,
                          Stream* stream = nullptr) = 0;
  // data[0, count) of `root` copied to every rank.
  virtual Work broadcast(void* data, std::size_t count, DType dtype, int root,
                         Stream* stream = nullptr) = 0;
  // Complete once every rank has issued it.
  virtual Work barrier(Stream* stream = nullptr) = 0;

  // Collectives issued between begin_group() and end_group() are launched together (one NCCL
  // group: the engine's buckets); each still returns its own Work, complete after end_group.
  // Groups do not nest. On MPI and local these only bracket; each call is issued at once.
  virtual void begin_group() = 0;
  virtual void end_group() = 0;

  // Collective over this communicator, like MPI_Comm_split: ranks with the same color form a
  // new communicator, ordered by key then by rank here. A negative color takes no part and
  // gets nullptr. Blocks until the new communicator exists.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // True after a timeout or a failure: every later call throws at once.
  virtual bool poisoned() const noexcept = 0;

  // This rank is leaving: it issues no further collective here (its engine is being destroyed,
  // its program ending or failing). A rank of the same node that waits in a collective this
  // rank never issued then fails it at once, naming this rank, instead of waiting out the
  // timeout (MPI; ranks on other nodes, NCCL and the local backend still time out).
  virtual void depart() noexcept {}

  // Ends the whole job: reports `reason` and terminates every rank with `exit_code`
  // (MPI_Abort; ncclCommAbort then this process's exit elsewhere). For a program that has
  // decided not to go on after a comm Error; it never returns.
  [[noreturn]] virtual void abort(int exit_code, std::string_view reason) noexcept = 0;
};

}  // namespace zero
