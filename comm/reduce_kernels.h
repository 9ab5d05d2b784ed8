// The element-wise reductions host backends apply themselves: MPI's user-defined ops for fp16
// and bf16 (MPI has no such types) and the division that turns a sum into an average. Each
// element is computed in fp32 and rounded back to the buffer's dtype, as NCCL does.
#pragma once

#include <cstddef>

#include "base/dtype.h"
#include "comm/communicator.h"

namespace zero::comm {

// inout[i] = inout[i] (op) in[i]; op is sum or max (avg is a sum, then divide_by).
void reduce_into(DType dtype, ReduceOp op, const void* in, void* inout, std::size_t count);

// data[i] = data[i] / divisor in the dtype (int64: truncated toward zero).
void divide_by(DType dtype, void* data, std::size_t count, int divisor);

}  // namespace zero::comm
