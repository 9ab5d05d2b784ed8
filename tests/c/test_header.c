/* Compiled as C99 with -pedantic and linked against libzero.so alone: the public header is
 * valid C and the library's basic entry points answer. Exits non-zero on any mismatch. */
#include <stdio.h>
#include <string.h>

#include "zero/zero.h"

int main(void) {
  char expected[32];
  snprintf(expected, sizeof expected, "%d.%d.%d", ZERO_VERSION_MAJOR, ZERO_VERSION_MINOR,
           ZERO_VERSION_PATCH);
  if (strcmp(zero_version(), expected) != 0) {
    fprintf(stderr, "zero_version() = %s, header says %s\n", zero_version(), expected);
    return 1;
  }
  if (zero_version_code() != ZERO_VERSION_CODE) return 2;
  if (strcmp(zero_status_string(ZERO_ERROR_CONFIG), "config error") != 0) return 3;
  if (strcmp(zero_last_error(), "") != 0) return 4;
  {
    /* The options' initializer is valid C99 under -Wextra -pedantic, and sets only the size. */
    zero_create_options options = ZERO_CREATE_OPTIONS_INIT;
    if (options.size != sizeof options || options.device != ZERO_DEVICE_AUTO ||
        options.cpu_device != ZERO_CPU_DEVICE_FROM_ENV || options.overrides != NULL)
      return 5;
  }
  printf("zero %s: C header OK\n", zero_version());
  return 0;
}
