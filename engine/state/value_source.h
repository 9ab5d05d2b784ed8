// Where new values of the model state come from: the initial values at init, a checkpoint,
// pretrained weights. ModelState::assign asks a source for the ranges this rank keeps,
// on every rank in registration order. Internal to engine/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace zero::engine {

struct ValueSource {
  virtual ~ValueSource() = default;
  // Called on every rank for each parameter in registration order before its values(): a
  // source may take part in collectives here.
  virtual void begin(std::size_t param) { (void)param; }
  // The fp32 values of global elements [first, first + count) of the parameter.
  virtual void values(std::size_t param, std::uint64_t first, std::size_t count, float* out) = 0;
  // Moment m of a trainable parameter over [first, first + count) in `dtype`; false: zeros.
  virtual bool moment(std::size_t param, int m, std::uint64_t first, std::size_t count, DType dtype,
                      void* out) {
    (void)param, (void)m, (void)first, (void)count, (void)dtype, (void)out;
    return false;
  }
};

}  // namespace zero::engine
