# Third-party libraries. Required ones fail the configure step with the Debian package to
# install; optional backends (CUDA, NCCL, MPI) follow their AUTO/ON/OFF option.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBURING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# OpenBLAS's OpenMP build (libopenblas-openmp-dev), where installed: the CPU layers run their
# loops with OpenMP between matrix products, and the pthreads build (Debian's default) keeps a
# second pool whose threads contend with OpenMP's spinning ones for the cores: on 2 cores
# zero-train's gpt2-124m went from 105 to 120 tokens/s with a second thread on the pthreads
# build and to 188 on the OpenMP one. Debian keeps each build's openblas.pc in its own folder.
# The CPU layers do not link it: models/blas loads it at run time, after choosing its kernels
# (models/blas/openblas.h), from the file found here (the cache variable ZERO_OPENBLAS_LIBRARY,
# which names another: a newer OpenBLAS, say), else by its soname.
set(ZERO_OPENBLAS_OPENMP_PC "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp/pkgconfig")
if(EXISTS "${ZERO_OPENBLAS_OPENMP_PC}/openblas.pc")
  set(ZERO_SAVED_PKG_CONFIG_PATH "$ENV{PKG_CONFIG_PATH}")
  set(ENV{PKG_CONFIG_PATH} "${ZERO_OPENBLAS_OPENMP_PC}:$ENV{PKG_CONFIG_PATH}")
  pkg_check_modules(OPENBLAS_OPENMP REQUIRED openblas)
  set(ENV{PKG_CONFIG_PATH} "${ZERO_SAVED_PKG_CONFIG_PATH}")
  set(ZERO_OPENBLAS_THREADING openmp)
  set(ZERO_OPENBLAS_LIBRARY_DIR "${OPENBLAS_OPENMP_LIBRARY_DIRS}")
else()
  pkg_check_modules(OPENBLAS REQUIRED openblas)  # libopenblas-dev
  set(ZERO_OPENBLAS_THREADING "not openmp")
  set(ZERO_OPENBLAS_LIBRARY_DIR "${OPENBLAS_LIBRARY_DIRS}")
  message(WARNING "OpenBLAS is not its OpenMP build (${OPENBLAS_LIBRARY_DIRS}): the CPU layers "
                  "gain little from a second thread with it. Install libopenblas-openmp-dev "
                  "(scripts/install-deps.sh does) and configure again.")
endif()
set(zero_openblas_found "libopenblas.so.0")
if(ZERO_OPENBLAS_LIBRARY_DIR AND EXISTS "${ZERO_OPENBLAS_LIBRARY_DIR}/libopenblas.so.0")
  cmake_path(SET zero_openblas_found NORMALIZE "${ZERO_OPENBLAS_LIBRARY_DIR}/libopenblas.so.0")
endif()
set(ZERO_OPENBLAS_LIBRARY "${zero_openblas_found}" CACHE FILEPATH
    "the OpenBLAS the CPU layers load at run time (models/blas/openblas.h): a path, or a soname")

function(zero_resolve_option option found)
  if(${option} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${option}=ON but the dependency was not found")
  endif()
endfunction()

# CUDA: compiled wherever nvcc exists, even on machines without a GPU.
set(ZERO_HAVE_CUDA OFF)
if(NOT ZERO_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # The models' attention multiplies with bf16 mma.sync (models/cuda/mma.cuh): sm_80 or later.
    foreach(arch IN LISTS ZERO_CUDA_ARCHS)
      string(REGEX MATCH "^[0-9]+" arch_number "${arch}")
      if(NOT arch_number OR arch_number LESS 80)
        message(FATAL_ERROR "ZERO_CUDA_ARCHS='${ZERO_CUDA_ARCHS}' names '${arch}': the CUDA "
                            "layers need bf16 tensor cores, sm_80 (A100) or later; name only "
                            "such architectures (e.g. -DZERO_CUDA_ARCHS=\"80;90\"), or build "
                            "without CUDA (-DZERO_WITH_CUDA=OFF)")
      endif()
    endforeach()
    set(CMAKE_CUDA_ARCHITECTURES "${ZERO_CUDA_ARCHS}")
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc 13; the .cu files are C++17 and include only
    # their own headers and the CUDA toolkit's.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(ZERO_HAVE_CUDA ON)
  endif()
  zero_resolve_option(ZERO_WITH_CUDA ZERO_HAVE_CUDA)
endif()

# NCCL: with CUDA only; the library ships with the CUDA toolkit here.
set(ZERO_HAVE_NCCL OFF)
if(ZERO_HAVE_CUDA AND NOT ZERO_WITH_NCCL STREQUAL "OFF")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(ZERO_HAVE_NCCL ON)
  endif()
endif()
if(NOT ZERO_WITH_NCCL STREQUAL "OFF")
  zero_resolve_option(ZERO_WITH_NCCL ZERO_HAVE_NCCL)
endif()

# MPI: the CPU collectives and the multi-rank tests.
set(ZERO_HAVE_MPI OFF)
if(NOT ZERO_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C)
  if(MPI_C_FOUND)
    set(ZERO_HAVE_MPI ON)
  endif()
  zero_resolve_option(ZERO_WITH_MPI ZERO_HAVE_MPI)
endif()
