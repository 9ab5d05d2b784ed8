# Runs the timeout program on 3 ranks and checks what the waiting ranks report and how the job
# ends: the timeout error names the collective, its size and sequence number and the rank that
# never issued it; the next call is refused; abort ends every rank with exit code 3. The
# waiting ranks abort only once both have reported (--sync), or the first abort could end the
# other before its own timeout came.
set(sync "${CMAKE_CURRENT_BINARY_DIR}/timeout-sync")
file(REMOVE_RECURSE "${sync}")
file(MAKE_DIRECTORY "${sync}")
execute_process(COMMAND ${RUN} -n 3 -- ${PROGRAM} --sync "${sync}"
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}\n${err}")
message("${all}")
if(NOT status EQUAL 3)
  message(FATAL_ERROR "expected exit status 3 from abort, got '${status}'")
endif()
foreach(rank 0 1)
  foreach(expected
      "rank ${rank}: timeout error: all_reduce #2 (1000 fp32 elements, 3.91 KiB, sum) on communicator world (mpi, rank ${rank} of 3) timed out after 2"
      "ranks that have not issued it: 2 (last issued #1)"
      "rank ${rank}: then: communicator world (mpi, rank ${rank} of 3) is unusable after an earlier failure")
    string(FIND "${all}" "${expected}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "missing from the output: ${expected}")
    endif()
  endforeach()
endforeach()
foreach(unexpected "NO TIMEOUT" "NOT POISONED")
  string(FIND "${all}" "${unexpected}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "unexpected: ${unexpected}")
  endif()
endforeach()

# Without abort: the waiting ranks return 4 and leave without MPI_Finalize, so mpirun ends the
# stuck rank instead of every process hanging in finalize (ctest's timeout would catch that).
execute_process(COMMAND ${RUN} -n 3 -- ${PROGRAM} --return
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}\n${err}")
if(NOT status EQUAL 4)
  message(FATAL_ERROR "expected exit status 4 from the returning ranks, got '${status}'")
endif()
string(FIND "${out}\n${err}" "leaving without MPI_Finalize" at)
if(at EQUAL -1)
  message(FATAL_ERROR "missing the warning about leaving without MPI_Finalize")
endif()
