// Shared by the multi-rank programs that drive the engine through zero.h: a call that must
// succeed, or the job stops, naming the rank, the call, the status and zero_last_error().
// The including file defines `int g_rank` (its MPI rank) before using CHECK_OK.
#pragma once

#include <cstdio>

#include <mpi.h>

#include "zero/zero.h"

#define CHECK_OK(call)                                                    \
  do {                                                                    \
    const zero_status status_ = (call);                                   \
    if (status_ != ZERO_OK) {                                             \
      std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, #call, \
                   zero_status_string(status_), zero_last_error());       \
      MPI_Abort(MPI_COMM_WORLD, 2);                                       \
    }                                                                     \
  } while (0)
