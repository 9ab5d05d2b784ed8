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
# the target (ZERO_PCH, on by default). Catch2, CLI11, nlohmann/json and spdlog take most of a
# test file's, a tool's or an engine file's compile time; the header costs a few seconds once
# per target. A source that must see the header first with a macro of its own sets
# SKIP_PRECOMPILE_HEADERS.
option(ZERO_PCH "precompile the heaviest headers of the test programs, tools and engine" ON)
function(zero_precompile name)
  if(ZERO_PCH)
    target_precompile_headers(${name} PRIVATE ${ARGN})
  endif()
endfunction()
