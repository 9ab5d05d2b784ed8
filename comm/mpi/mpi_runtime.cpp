// MPI's process-wide state. Open MPI and MPICH both make MPI_THREAD_SERIALIZED cheap: one lock
// of ours around each call lets a progress thread and the caller share MPI safely.
#include "comm/mpi/mpi_runtime.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "comm/reduce_kernels.h"
#include "comm/start_watch.h"

namespace zero::comm::mpi {

void check(int rc, const char* call, const std::string& where) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw make_error(ErrorCategory::comm, "{} failed on {}: {} (MPI error {})", call, where,
                   std::string(text, static_cast<std::size_t>(length)), rc);
}

MPI_Datatype datatype_of(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_BYTE;
    // MPI has no 16-bit floats: 16-bit words with our own ops.
    case DType::f16:
    case DType::bf16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

namespace {

template <DType D, ReduceOp O>
void user_op(void* in, void* inout, int* length, MPI_Datatype*) {
  reduce_into(D, O, in, inout, static_cast<std::size_t>(*length));
}

struct HalfOps {
  MPI_Op f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL;

  HalfOps() {
    const std::string where = "MPI (creating the fp16/bf16 reduction ops)";
    check(MPI_Op_create(&user_op<DType::f16, ReduceOp::sum>, 1, &f16_sum), "MPI_Op_create", where);
    check(MPI_Op_create(&user_op<DType::f16, ReduceOp::max>, 1, &f16_max), "MPI_Op_create", where);
    check(MPI_Op_create(&user_op<DType::bf16, ReduceOp::sum>, 1, &bf16_sum), "MPI_Op_create",
          where);
    check(MPI_Op_create(&user_op<DType::bf16, ReduceOp::max>, 1, &bf16_max), "MPI_Op_create",
          where);
  }
};

}  // namespace

MPI_Op op_of(DType dtype, ReduceOp op) {
  // Created on first use, after MPI_Init (callers hold the MPI lock); freed by MPI_Finalize.
  static const HalfOps half_ops;
  const bool max = op == ReduceOp::max;
  switch (dtype) {
    case DType::f32:
    case DType::i64:
      return max ? MPI_MAX : MPI_SUM;
    case DType::f16:
      return max ? half_ops.f16_max : half_ops.f16_sum;
    case DType::bf16:
      return max ? half_ops.bf16_max : half_ops.bf16_sum;
    case DType::u8:
      break;
  }
  return MPI_OP_NULL;
}

Runtime& Runtime::get() {
  static Runtime runtime;
  return runtime;
}

Runtime::Runtime() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    MPI_Query_thread(&thread_level_);
  } else {
    // MPI_Init_thread waits for every rank with no timeout of its own: watched, with a barrier
    // after it (an MPI may return from init before every rank is there), so that a rank that
    // never arrives ends the job instead of hanging it.
    std::optional<StartWatch> watch;
    const LaunchInfo launch = detect_launch();
    if (launch.world_size > 1) {
      watch.emplace(launch, start_settings(process_environment()),
                    "MPI_Init_thread, or the barrier after it");
    }
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &thread_level_),
          "MPI_Init_thread", "this process");
    we_initialised_ = true;
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", "the job's start");
  }
  // Errors come back as return codes, which we turn into Errors naming the collective.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

Runtime::~Runtime() {
  {
    std::lock_guard guard(queue_lock_);
    stopping_ = true;
  }
  queue_ready_.notify_all();
  if (progress_.joinable()) progress_.join();
  int finalised = 0;
  MPI_Finalized(&finalised);
  if (we_initialised_ && !finalised) {
    if (skip_finalize_.load()) {
      log::warn(
          "leaving without MPI_Finalize: a collective failed or timed out, and finalizing "
          "would wait for ranks that may never arrive");
      return;
    }
    MPI_Finalize();
  }
}

void Runtime::drive(std::shared_ptr<Progressable> work) {
  {
    std::lock_guard guard(queue_lock_);
    if (!progress_.joinable()) progress_ = std::thread([this] { progress_loop(); });
    active_.push_back(std::move(work));
  }
  queue_ready_.notify_one();
}

void Runtime::progress_loop() {
  std::vector<std::shared_ptr<Progressable>> batch;
  int idle_rounds = 0;
  for (;;) {
    {
      std::unique_lock guard(queue_lock_);
      queue_ready_.wait(guard, [this] { return stopping_ || !active_.empty(); });
      if (stopping_) return;
      batch = active_;
    }
    std::vector<Progressable*> finished;
    for (const auto& work : batch) {
      if (work->advance()) finished.push_back(work.get());
    }
    const bool finished_any = !finished.empty();
    if (finished_any) {
      std::lock_guard guard(queue_lock_);
      std::erase_if(active_, [&](const auto& work) {
        return std::find(finished.begin(), finished.end(), work.get()) != finished.end();
      });
    }
    batch.clear();
    // Back off when nothing moved, so that ranks sharing cores keep them for compute.
    idle_rounds = finished_any ? 0 : idle_rounds + 1;
    if (idle_rounds > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else
      std::this_thread::yield();
  }
}

}  // namespace zero::comm::mpi
