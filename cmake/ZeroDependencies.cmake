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
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)  # libopenblas-dev

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
