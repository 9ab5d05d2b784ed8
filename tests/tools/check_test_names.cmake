# Test case names with ';' or '[' break catch_discover_tests (CMake lists), which then
# silently merges cases into one unrunnable test: refuse them.
execute_process(COMMAND ${TESTS} --list-test-names-only OUTPUT_VARIABLE names RESULT_VARIABLE rc)
string(FIND "${names}" ";" semicolon)
string(FIND "${names}" "[" bracket)
if(NOT semicolon EQUAL -1 OR NOT bracket EQUAL -1)
  message(FATAL_ERROR "a test case name contains ';' or '[' (ctest cannot register it):\n${names}")
endif()
