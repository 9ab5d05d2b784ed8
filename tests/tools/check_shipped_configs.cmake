# Runs `zero-config check` on every config in CONFIG_DIR (with a world size that suits it).
file(GLOB configs ${CONFIG_DIR}/*.json)
foreach(config IN LISTS configs)
  execute_process(COMMAND ${TOOL} check ${config} --world-size 2
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zero-config check ${config} failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()
list(LENGTH configs n)
if(n LESS 7)
  message(FATAL_ERROR "expected at least 7 shipped configs in ${CONFIG_DIR}, found ${n}")
endif()
