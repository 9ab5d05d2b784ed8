/* train_memory.h on GPU 0: copies through the CUDA runtime on a non-blocking stream, the one
 * every hook is given, so what the copies read is what the hooks ordered before them. */
#include <cuda_runtime.h>
#include <stdio.h>

#include "train_memory.h"

static cudaStream_t stream_ = NULL;
static char reason_[256];

int train_device(void) {
  return ZERO_DEVICE_CUDA;
}

int train_unavailable(const char** why) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    snprintf(reason_, sizeof reason_, "no GPU: %s",
             status != cudaSuccess ? cudaGetErrorString(status) : "cudaGetDeviceCount gives 0");
    *why = reason_;
    return 1;
  }
  return 0;
}

void* train_stream(void) {
  if (stream_ == NULL) {
    cudaSetDevice(0);
    if (cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) return NULL;
  }
  return stream_;
}

static int copy(void* to, const void* from, size_t bytes, enum cudaMemcpyKind kind) {
  cudaError_t status = cudaMemcpyAsync(to, from, bytes, kind, (cudaStream_t)train_stream());
  if (status == cudaSuccess) status = cudaStreamSynchronize((cudaStream_t)train_stream());
  if (status != cudaSuccess) {
    fprintf(stderr, "cudaMemcpyAsync: %s\n", cudaGetErrorString(status));
    return 1;
  }
  return 0;
}

int train_to_host(void* host, const void* buffer, size_t bytes) {
  return copy(host, buffer, bytes, cudaMemcpyDeviceToHost);
}

int train_from_host(void* buffer, const void* host, size_t bytes) {
  return copy(buffer, host, bytes, cudaMemcpyHostToDevice);
}

void train_memory_release(void) {
  if (stream_ != NULL) cudaStreamDestroy(stream_);
  stream_ = NULL;
}
