/*
 * zero.h - the public C API of zero, a ZeRO data-parallel training engine.
 *
 * This is the only header a program embedding zero needs. It is C99 and self-contained.
 *
 * Conventions
 *   - Every function returns a zero_status (or a value that cannot fail). ZERO_OK is 0.
 *   - On failure, zero_last_error() returns a message saying what failed, where, and what to
 *     do about it. The message is per thread and stays valid until the next failing call on
 *     that thread.
 *   - No C++ exception, exit() or abort() crosses this boundary.
 *   - Handles are opaque pointers; each is created and destroyed by the functions named for it.
 *
 * Versioning: ZERO_VERSION_{MAJOR,MINOR,PATCH} give the header's version and zero_version()
 * the library's; a program may compare the two.
 */
#ifndef ZERO_ZERO_H
#define ZERO_ZERO_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ZERO_API __attribute__((visibility("default")))
#else
#define ZERO_API
#endif

#define ZERO_VERSION_MAJOR 0
#define ZERO_VERSION_MINOR 1
#define ZERO_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH */
#define ZERO_VERSION_CODE (ZERO_VERSION_MAJOR * 10000 + ZERO_VERSION_MINOR * 100 + ZERO_VERSION_PATCH)

/* Status codes. Each failure category of the library maps to one code. */
typedef enum zero_status {
  ZERO_OK = 0,
  ZERO_ERROR_CONFIG = 1,        /* a config key, value or combination is invalid */
  ZERO_ERROR_USAGE = 2,         /* an API contract was broken: bad argument, wrong call order */
  ZERO_ERROR_COMM = 3,          /* a collective or the communicator failed */
  ZERO_ERROR_TIMEOUT = 4,       /* an operation did not complete within its timeout */
  ZERO_ERROR_IO = 5,            /* a file or disk operation failed */
  ZERO_ERROR_DEVICE = 6,        /* the accelerator runtime failed, or no usable device */
  ZERO_ERROR_OUT_OF_MEMORY = 7, /* an arena, the device or the host ran out of memory */
  ZERO_ERROR_INTERNAL = 8       /* a bug in zero: please report it with the message */
} zero_status;

/* A short, static, human-readable name of a status ("config error", ...). Never NULL;
 * unknown values give "unknown status". */
ZERO_API const char* zero_status_string(zero_status status);

/* The message of the last failing call on this thread, or "" when none has failed. Never
 * NULL. Valid until the next failing call on the same thread. */
ZERO_API const char* zero_last_error(void);

/* The library's version, "MAJOR.MINOR.PATCH". Never NULL. */
ZERO_API const char* zero_version(void);

/* The library's version as ZERO_VERSION_CODE computes it. */
ZERO_API int zero_version_code(void);

#ifdef __cplusplus
}
#endif

#endif /* ZERO_ZERO_H */
