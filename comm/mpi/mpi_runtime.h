// The process's MPI: initialised once (by zero, or by an embedder before us), one lock that
// serialises every MPI call zero makes, the datatypes and ops per dtype, error translation, and
// the progress thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "base/dtype.h"
#include "comm/communicator.h"

namespace zero::comm::mpi {

// Throws a comm Error "`call` failed on `where`: <MPI's message>" unless rc is MPI_SUCCESS.
void check(int rc, const char* call, const std::string& where);

MPI_Datatype datatype_of(DType dtype);
// The MPI op that computes `op` in `dtype` (avg: the sum; the caller divides afterwards).
MPI_Op op_of(DType dtype, ReduceOp op);

// Something in flight that the progress thread should drive: `advance` tests its requests
// (under the MPI lock) and finishes it; it returns true once finished.
class Progressable {
 public:
  virtual ~Progressable() = default;
  virtual bool advance() noexcept = 0;
};

class Runtime {
 public:
  // Initialises MPI (MPI_THREAD_SERIALIZED asked) unless already initialised.
  static Runtime& get();

  // Every MPI call zero makes holds this lock.
  std::mutex& lock() noexcept { return mpi_lock_; }
  // Whether MPI allows calls from our progress thread (MPI_THREAD_SERIALIZED or better).
  bool threads_allowed() const noexcept { return thread_level_ >= MPI_THREAD_SERIALIZED; }
  // Hands `work` to the progress thread (started on first use).
  void drive(std::shared_ptr<Progressable> work);
  // After a timeout or failure: MPI_Finalize synchronises with every rank, which may never
  // come, so the process leaves without it (mpirun then ends the job) instead of hanging.
  void skip_finalize() noexcept { skip_finalize_.store(true); }

  ~Runtime();

 private:
  Runtime();
  void progress_loop();

  std::mutex mpi_lock_;
  int thread_level_ = MPI_THREAD_SINGLE;
  bool we_initialised_ = false;
  std::atomic<bool> skip_finalize_{false};

  std::mutex queue_lock_;
  std::condition_variable queue_ready_;
  std::vector<std::shared_ptr<Progressable>> active_;
  bool stopping_ = false;
  std::thread progress_;
};

}  // namespace zero::comm::mpi
