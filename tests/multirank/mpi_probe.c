/* zero_mpi_probe: does MPI start here, and which MPI is it? Calls MPI_Init, an allreduce over
 * MPI_COMM_WORLD and MPI_Finalize, and prints one line per rank: its rank and the world's size,
 * the MPI standard version, the first line of MPI_Get_library_version (the implementation and
 * its version) and the file the library was loaded from (the machine's or a bundle's). Run
 * alone (a singleton MPI_Init) or under mpirun (zero-run -n N). gpu-check's environment step
 * runs it both ways before anything else uses MPI. Exits 0 when every call succeeds and the
 * allreduce counts every rank, else 1 (MPI_Init's own failures usually abort the process). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    fprintf(stderr, "zero_mpi_probe: MPI_Init failed\n");
    return 1;
  }
  int rank = 0, size = 0, major = 0, minor = 0, length = 0, one = 1, sum = 0;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_version(&major, &minor);
  MPI_Get_library_version(version, &length);
  version[strcspn(version, "\n")] = '\0'; /* Open MPI's string runs over several lines */
  const size_t end = strlen(version);
  if (end > 0 && version[end - 1] == ',') version[end - 1] = '\0';
  Dl_info info;
  const char* file = "an unknown file";
  if (dladdr((void*)&MPI_Init, &info) != 0 && info.dli_fname != NULL) file = info.dli_fname;
  const int reduced = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const int ok = reduced == MPI_SUCCESS && sum == size;
  printf("zero_mpi_probe: rank %d of %d: MPI %d.%d, %s, from %s; allreduce %s\n", rank, size, major,
         minor, version, file, ok ? "ok" : "wrong");
  fflush(stdout);
  MPI_Finalize();
  return ok ? 0 : 1;
}
