// Runs the shared device tests against the CUDA device (GPU 0).
#include "backend/test_backend.h"

namespace zero::test {

std::unique_ptr<Device> make_test_device() {
  return create_cuda_device(0);
}

DeviceBuffer::DeviceBuffer(Device& d, std::size_t bytes)
    : device(d), size(bytes), ptr(d.reserve(Tier::device, bytes)) {}
DeviceBuffer::~DeviceBuffer() {
  device.unreserve(Tier::device, ptr, size);
}
void DeviceBuffer::upload(const void* host, std::size_t bytes) {
  device.copy(ptr, host, bytes);
}
void DeviceBuffer::download(void* host, std::size_t bytes) {
  device.copy(host, ptr, bytes);
}

}  // namespace zero::test
