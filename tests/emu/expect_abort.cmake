# cmake -DPROGRAM=... -DCASE=... -DEXPECT=regex -P expect_abort.cmake: runs the Catch2 test case
# CASE of PROGRAM, which must fail (an abort or a fault ends it) with output matching EXPECT:
# the emulator's report of a kernel that breaks CUDA's rules. (ctest fails a test killed by a
# signal whatever its output, hence this script.)
execute_process(COMMAND ${PROGRAM} ${CASE} RESULT_VARIABLE status OUTPUT_VARIABLE out
                ERROR_VARIABLE out)
message("${out}")
if(status EQUAL 0)
  message(FATAL_ERROR "'${CASE}' ran to its end; the emulator should have stopped it")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "'${CASE}' failed (${status}) without the report /${EXPECT}/")
endif()
