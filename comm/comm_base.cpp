// Shared bookkeeping of the backends: messages, health, argument checks and numbering.
#include "comm/comm_base.h"

#include <fmt/format.h>

#include "base/error.h"
#include "device/arena.h"

namespace zero {

std::string_view reduce_op_name(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

namespace comm {

std::string OpInfo::describe() const {
  std::string text = fmt::format("{} #{}", collective, sequence);
  if (std::string_view(collective) == "barrier") return text;
  text += fmt::format(" ({} {} elements, {}", count, dtype_name(dtype),
                      format_bytes(count * dtype_size(dtype)));
  if (op) text += fmt::format(", {}", reduce_op_name(*op));
  if (root >= 0) text += fmt::format(", root {}", root);
  return text + ")";
}

void Health::poison(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (poisoned_.load(std::memory_order_relaxed)) return;
  reason_ = reason;
  poisoned_.store(true, std::memory_order_release);
}

void Health::check() const {
  if (!poisoned()) return;
  std::lock_guard lock(mutex_);
  throw make_error(ErrorCategory::comm,
                   "{} is unusable after an earlier failure, so this call was refused: {}", where_,
                   reason_);
}

std::string timeout_message(const OpInfo& op, const Health& health,
                            std::chrono::milliseconds waited, const std::string& arrivals) {
  std::string text = fmt::format("{} on {} timed out after {:.3g} s", op.describe(), health.where(),
                                 waited.count() / 1000.0);
  if (!arrivals.empty()) text += "; " + arrivals;
  text +=
      ". Every rank must issue the same collectives in the same order: look for a rank that "
      "died, hangs or diverged. The communicator is now unusable; end the job (abort) or raise "
      "comm_timeout_s if the collective is just slow.";
  return text;
}

void TrackedWork::check_health() const {
  health_->check();
}

std::string TrackedWork::expire(std::chrono::milliseconds waited) {
  std::string message = timeout_message(op_, *health_, waited, missing_ranks());
  health_->poison(op_.describe() + " timed out");
  return message;
}

CommunicatorBase::CommunicatorBase(std::string name, std::string_view backend, int rank, int size,
                                   std::chrono::milliseconds timeout)
    : name_(std::move(name)),
      backend_(backend),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      health_(std::make_shared<Health>(
          fmt::format("communicator {} ({}, rank {} of {})", name_, backend_, rank, size))) {
  if (timeout_.count() <= 0) {
    throw make_error(ErrorCategory::usage, "communicator {}: the timeout must be positive", name_);
  }
}

namespace {

void check_buffer(const void* pointer, std::size_t count, const char* call, const char* what) {
  if (pointer == nullptr && count > 0) {
    throw make_error(ErrorCategory::usage, "{}: {} is null with {} elements", call, what, count);
  }
}

// Bytes (u8) have no arithmetic: they are moved, never reduced.
void check_reducible(DType dtype, const char* call) {
  if (dtype == DType::u8) {
    throw make_error(ErrorCategory::usage,
                     "{}: {} cannot be reduced; reduce fp32, fp16, bf16 or int64 (bytes are "
                     "moved by all_gather, all_to_all and broadcast)",
                     call, dtype_name(dtype));
  }
}

}  // namespace

OpInfo CommunicatorBase::number(OpInfo op) {
  health_->check();
  op.sequence = ++sequence_;
  return op;
}

OpInfo CommunicatorBase::begin_all_reduce(const void* data, std::size_t count, DType dtype,
                                          ReduceOp op) {
  check_buffer(data, count, "all_reduce", "data");
  check_reducible(dtype, "all_reduce");
  return number(OpInfo{"all_reduce", 0, count, dtype, op, -1});
}

OpInfo CommunicatorBase::begin_reduce_scatter(const void* input, const void* output,
                                              std::size_t count, DType dtype, ReduceOp op) {
  check_buffer(input, count, "reduce_scatter", "input");
  check_buffer(output, count, "reduce_scatter", "output");
  check_reducible(dtype, "reduce_scatter");
  const auto* in = static_cast<const char*>(input);
  const auto* out = static_cast<const char*>(output);
  const std::size_t block = count * dtype_size(dtype);
  if (count > 0 && out != in + rank_ * block && out < in + size_ * block && in < out + block) {
    throw make_error(ErrorCategory::usage,
                     "reduce_scatter: the output overlaps the input other than as this rank's "
                     "block (output == input + rank * count is the in-place form)");
  }
  return number(OpInfo{"reduce_scatter", 0, count, dtype, op, -1});
}

OpInfo CommunicatorBase::begin_all_gather(const void* input, const void* output, std::size_t count,
                                          DType dtype) {
  check_buffer(input, count, "all_gather", "input");
  check_buffer(output, count, "all_gather", "output");
  const auto* in = static_cast<const char*>(input);
  const auto* out = static_cast<const char*>(output);
  const std::size_t block = count * dtype_size(dtype);
  if (count > 0 && in != out + rank_ * block && in < out + size_ * block && out < in + block) {
    throw make_error(ErrorCategory::usage,
                     "all_gather: the input overlaps the output other than as this rank's block "
                     "(input == output + rank * count is the in-place form)");
  }
  return number(OpInfo{"all_gather", 0, count, dtype, std::nullopt, -1});
}

OpInfo CommunicatorBase::begin_all_to_all(const void* input, const void* output, std::size_t count,
                                          DType dtype) {
  check_buffer(input, count, "all_to_all", "input");
  check_buffer(output, count, "all_to_all", "output");
  const auto* in = static_cast<const char*>(input);
  const auto* out = static_cast<const char*>(output);
  const std::size_t total = count * static_cast<std::size_t>(size_) * dtype_size(dtype);
  if (count > 0 && in < out + total && out < in + total) {
    throw make_error(ErrorCategory::usage,
                     "all_to_all: the input and the output overlap; all_to_all is never in place");
  }
  return number(OpInfo{"all_to_all", 0, count, dtype, std::nullopt, -1});
}

OpInfo CommunicatorBase::begin_broadcast(const void* data, std::size_t count, DType dtype,
                                         int root) {
  check_buffer(data, count, "broadcast", "data");
  if (root < 0 || root >= size_) {
    throw make_error(ErrorCategory::usage, "broadcast: root {} is not a rank of {} ({} ranks)",
                     root, name_, size_);
  }
  return number(OpInfo{"broadcast", 0, count, dtype, std::nullopt, root});
}

OpInfo CommunicatorBase::begin_barrier() {
  return number(OpInfo{"barrier", 0, 0, DType::f32, std::nullopt, -1});
}

std::string CommunicatorBase::child_name(int color) const {
  return fmt::format("{}/split({})", name_, color);
}

void CommunicatorBase::enter_group() {
  health_->check();
  if (in_group_) {
    throw make_error(ErrorCategory::usage, "{}: begin_group inside a group (groups do not nest)",
                     health_->where());
  }
  in_group_ = true;
}

void CommunicatorBase::leave_group() {
  if (!in_group_) {
    throw make_error(ErrorCategory::usage, "{}: end_group without begin_group", health_->where());
  }
  in_group_ = false;
}

Work CommunicatorBase::complete(const OpInfo& op) const {
  return Work(std::make_shared<CompleteWork>(op, health_, timeout_));
}

}  // namespace comm
}  // namespace zero
