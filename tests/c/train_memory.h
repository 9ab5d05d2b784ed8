/* How test_train.c reaches the engine's buffers: in host memory directly (train_memory_host.c,
 * the CPU program), or in a GPU's memory by copies on a stream of its own that every hook is
 * given (train_memory_cuda.c, the GPU program). C99. */
#ifndef ZERO_TESTS_C_TRAIN_MEMORY_H
#define ZERO_TESTS_C_TRAIN_MEMORY_H

#include <stddef.h>

#include "zero/zero.h"

/* zero_create_options.device for this program: ZERO_DEVICE_CPU or ZERO_DEVICE_CUDA. */
int train_device(void);
/* 0 when this program can run here; else non-zero, with the reason in *why. */
int train_unavailable(const char** why);
/* The stream the hooks are given: a cudaStream_t, or NULL. */
void* train_stream(void);
/* Copies between an engine buffer and host memory after the work queued on train_stream(),
 * complete on return; 0 on success. */
int train_to_host(void* host, const void* buffer, size_t bytes);
int train_from_host(void* buffer, const void* host, size_t bytes);
/* Frees what train_stream() made. */
void train_memory_release(void);

#endif
