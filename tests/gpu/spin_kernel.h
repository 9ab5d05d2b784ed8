// spin_on: keeps `stream` (a cudaStream_t) busy for `cycles` GPU clock cycles, as a model's
// compute would; false when the launch failed. Plain C++, so that host code can call it.
#pragma once

namespace zero_test {

bool spin_on(void* stream, long long cycles);

}  // namespace zero_test
