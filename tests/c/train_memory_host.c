/* train_memory.h on the CPU: the engine's buffers are host memory, read and written directly
 * between zero_ calls. */
#include <string.h>

#include "train_memory.h"

int train_device(void) {
  return ZERO_DEVICE_CPU;
}

int train_unavailable(const char** why) {
  (void)why;
  return 0;
}

void* train_stream(void) {
  return NULL;
}

int train_to_host(void* host, const void* buffer, size_t bytes) {
  memcpy(host, buffer, bytes);
  return 0;
}

int train_from_host(void* buffer, const void* host, size_t bytes) {
  memcpy(buffer, host, bytes);
  return 0;
}

void train_memory_release(void) {}
