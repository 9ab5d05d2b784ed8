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
