# Runs `zero-config check` on every config in CONFIG_DIR (with a world size that suits it). A
# config whose scheduler leaves total_num_steps "auto" (zero-train --steps fills it) gets 1000.
file(GLOB configs ${CONFIG_DIR}/*.json)
foreach(config IN LISTS configs)
  file(READ ${config} text)
  set(fill "")
  if(text MATCHES "\"total_num_steps\": *\"auto\"")
    set(fill --set scheduler.params.total_num_steps=1000)
  endif()
  execute_process(COMMAND ${TOOL} check ${config} --world-size 2 ${fill}
                  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "zero-config check ${config} failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()
list(LENGTH configs n)
if(n LESS 7)
  message(FATAL_ERROR "expected at least 7 shipped configs in ${CONFIG_DIR}, found ${n}")
endif()
