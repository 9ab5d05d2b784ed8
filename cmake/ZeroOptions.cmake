# Language standard, build type, and the flags every target of ours gets.
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_C_STANDARD 99)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)   # static libraries end up inside libzero.so
set(CMAKE_CXX_VISIBILITY_PRESET hidden)   # only zero_* leaves the shared library
set(CMAKE_C_VISIBILITY_PRESET hidden)
set(CMAKE_CUDA_VISIBILITY_PRESET hidden)
set(CMAKE_VISIBILITY_INLINES_HIDDEN ON)
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

# ZERO_DEBUG_INFO: `full` (-g, the build type's) or `lines` (-g1: functions, files and lines,
# which is what a backtrace, perf and a sanitizer's report use, and no variables). GCC spends
# up to 40% of a template-heavy source's compile time (nlohmann/json) on full debug
# information, about 15% of the whole build's; CI and the sanitizer builds take `lines`.
set(ZERO_DEBUG_INFO "full" CACHE STRING "debug information: full (-g) or lines (-g1)")
set_property(CACHE ZERO_DEBUG_INFO PROPERTY STRINGS full lines)
if(ZERO_DEBUG_INFO STREQUAL "lines")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX,C>:-g1>)  # after the build type's -g: it wins
elseif(NOT ZERO_DEBUG_INFO STREQUAL "full")
  message(FATAL_ERROR "ZERO_DEBUG_INFO='${ZERO_DEBUG_INFO}': use full or lines")
endif()

# Warnings as errors on our own code (not on third-party headers, which come in as SYSTEM).
add_library(zero_warnings INTERFACE)
target_compile_options(zero_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Werror>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra -Werror=all-warnings>)
# GCC 12 at -O3 reports -Wrestrict inside libstdc++'s std::string (GCC bug 105329, a false
# positive), which -Werror would turn into a failed Release build.
# At -O3 it also reports -Warray-bounds and -Wstringop-overflow/-overread inside std::string's
# copies in the config reader since the headers are precompiled (a Release build without them
# was clean): false positives of GCC 12 too, off in Release builds only, where -O3 inlines that
# deep; the other builds keep the three warnings.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  target_compile_options(zero_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-restrict>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release>>:
      -Wno-array-bounds -Wno-stringop-overflow -Wno-stringop-overread>)
endif()

# A unity build (CMAKE_UNITY_BUILD, as `make test-asan` and `make test-tsan` build) includes the
# sources into one file per batch, so GCC takes a class of a .cpp that holds a member of a type
# from that file's anonymous namespace for one of a header (-Wsubobject-linkage): spurious there.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(zero_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
endif()

# ZERO_HOT_OPTIMIZE (say -O1): the optimization of the code whose tests loop over large arrays
# (the CPU optimizers' kernels and their oracle test, the emulated CUDA layers, the models' CPU
# layers and kernels: the targets and sources that link zero_hot), for a build whose type does not optimize. `make test-asan` builds
# the rest at -O0, in half the time of -O1, and these at -O1, without which their tests run
# several times slower under the sanitizers. Empty (the default): the build type's flags.
set(ZERO_HOT_OPTIMIZE "" CACHE STRING "optimization flag for the hot code of an -O0 build")
add_library(zero_hot INTERFACE)
if(ZERO_HOT_OPTIMIZE)
  target_compile_options(zero_hot INTERFACE $<$<COMPILE_LANGUAGE:CXX,C>:${ZERO_HOT_OPTIMIZE}>)
endif()

# ZERO_COLD_OPTIMIZE (-Og by default): the optimization, in a build whose type optimizes, of the
# code whose speed does not matter: the test programs' own code (what tests/ builds, but the
# emulated CUDA layers of tests/emu), the tools' command lines (their main.cpp, which parses
# the options with CLI11 once: zero_cold_sources) and the tools whose own code only sets up,
# plans and reports (zero-train, zero-run, zero-mem and its planner, zero-ckpt:
# zero_cold_target); the code they call keeps the build type's. A
# test file is mostly Catch2 assertions, and CLI11 is a header of inline functions: GCC compiles
# them about twice as fast at -Og as at -O2 (zero_unit_tests' first batch of 16 sources: 15 s
# against 38 s; zero-run's main.cpp: 6 s against 12 s). The one test source that sweeps large
# arrays against an oracle keeps the build type's flag (zero_hot_sources). Empty: the build
# type's flags everywhere.
set(ZERO_COLD_OPTIMIZE "-Og" CACHE STRING
    "optimization flag for the tests' own code and the tools' command lines in an optimized build")
string(TOUPPER "${CMAKE_BUILD_TYPE}" zero_build_type)
# The build type's optimization flag: the last -O of the flags every C++ source gets.
string(REGEX MATCHALL "-O[^ ]*" zero_optimize_flags
       "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${zero_build_type}}")
set(zero_build_type_optimize "")
if(zero_optimize_flags)
  list(GET zero_optimize_flags -1 zero_build_type_optimize)
endif()
set(zero_cold_compile_options "")
if(ZERO_COLD_OPTIMIZE AND zero_build_type_optimize AND NOT zero_build_type_optimize STREQUAL "-O0")
  set(zero_cold_compile_options "$<$<COMPILE_LANGUAGE:CXX,C>:${ZERO_COLD_OPTIMIZE}>")
endif()

# zero_cold_sources(FILE...): sources of the current folder at ZERO_COLD_OPTIMIZE. (Such a source
# leaves its unity batch and takes no precompiled header, which GCC takes only at the
# optimization level it was built at.)
function(zero_cold_sources)
  if(zero_cold_compile_options)
    set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${ZERO_COLD_OPTIMIZE}"
                                                   SKIP_PRECOMPILE_HEADERS ON)
  endif()
endfunction()

# zero_cold_target(NAME...): every source of the targets at ZERO_COLD_OPTIMIZE, in their unity
# batches (a tool's whole batch at -Og: zero-train's 9 s of CPU against 12 s at -O2, zero-mem's
# planner 9 s against 16 s, zero-ckpt 11 s against 20 s).
function(zero_cold_target)
  if(zero_cold_compile_options)
    foreach(name ${ARGN})
      target_compile_options(${name} PRIVATE ${zero_cold_compile_options})
    endforeach()
  endif()
endfunction()

# zero_hot_sources(FILE...): test sources that loop over large arrays, at the hot code's
# optimization: ZERO_HOT_OPTIMIZE in an -O0 build, the build type's where the other test code is
# at ZERO_COLD_OPTIMIZE. (Such a source leaves its unity batch, and takes no precompiled header:
# GCC takes none built at another optimization level.)
function(zero_hot_sources)
  if(ZERO_HOT_OPTIMIZE)
    set(flag ${ZERO_HOT_OPTIMIZE})
  elseif(zero_cold_compile_options)
    set(flag ${zero_build_type_optimize})
  else()
    return()
  endif()
  set_source_files_properties(${ARGN} PROPERTIES COMPILE_OPTIONS "${flag}"
                                                 SKIP_PRECOMPILE_HEADERS ON)
endfunction()

# Sanitizers for our code and the programs linked with it.
add_library(zero_sanitize INTERFACE)
if(ZERO_SANITIZE)
  if(NOT ZERO_SANITIZE MATCHES "^(address|undefined|thread|address,undefined|undefined,address)$")
    message(FATAL_ERROR "ZERO_SANITIZE='${ZERO_SANITIZE}': use address,undefined or thread")
  endif()
  target_compile_options(zero_sanitize INTERFACE
    $<$<COMPILE_LANGUAGE:CXX,C>:-fsanitize=${ZERO_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all>)
  target_link_options(zero_sanitize INTERFACE -fsanitize=${ZERO_SANITIZE})
endif()
