# zero_add_library(NAME SOURCES... [DEPS ...]): one static library per folder, with our
# warnings and sanitizer flags, the repository root as include path, and DEPS linked publicly.
function(zero_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE zero_warnings zero_sanitize)
endfunction()

# zero_add_program(NAME SOURCES... DEPS ...): an executable of ours.
function(zero_add_program name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} zero_warnings zero_sanitize)
endfunction()

# zero_precompile(NAME HEADER...): headers most of a target's sources include, compiled once for
# the target (ZERO_PCH). Catch2, CLI11, nlohmann/json and spdlog take a good part of a test
# file's, a tool's or an engine file's compile time; the header costs 4 to 7 s once per target.
# That pays where a target has many sources, not in a unity build, where a target is one to four
# batches of 16 sources: there a batch compiled with the header as with its PCH took the same
# time to within a second (GCC 12, -O2 -g1: 14.8 s for zero_config's one batch either way, 21.3
# and 22.2 s for one of zero_unit_tests'), so ZERO_PCH=AUTO, the default, precompiles only in a
# build that is not a unity build. A source that must see the header first with a macro of its
# own sets SKIP_PRECOMPILE_HEADERS.
set(ZERO_PCH AUTO CACHE STRING
    "precompile the heaviest headers: AUTO (unless CMAKE_UNITY_BUILD), ON or OFF")
set_property(CACHE ZERO_PCH PROPERTY STRINGS AUTO ON OFF)
if(ZERO_PCH STREQUAL "AUTO")
  if(CMAKE_UNITY_BUILD)
    set(zero_use_pch OFF)
  else()
    set(zero_use_pch ON)
  endif()
elseif(ZERO_PCH)
  set(zero_use_pch ON)
else()
  set(zero_use_pch OFF)
endif()
function(zero_precompile name)
  if(zero_use_pch)
    target_precompile_headers(${name} PRIVATE ${ARGN})
  endif()
endfunction()
