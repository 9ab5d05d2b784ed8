# zero-config check on a config with three problems: exit 1, all three named on stderr; on a
# good config with an override: exit 0 and the override shown as the value's source.
file(WRITE ${DIR}/bad_config.json [=[{"train_batch_size": 32, "train_micro_batch_size_per_gpu": 17,
 "gradient_accumulation_steps": 2, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5e8},
 "tensorboard": {"enabled": true}}]=])
execute_process(COMMAND ${TOOL} check ${DIR}/bad_config.json
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1, got ${rc}: ${out} ${err}")
endif()
foreach(expected "3 problems" "32 != 17 * 2 * 1"
        "zero_optimization.reduce_bucket_sise: unknown key; did you mean reduce_bucket_size?"
        "tensorboard: TensorBoard logging")
  string(FIND "${err}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "stderr lacks '${expected}':\n${err}")
  endif()
endforeach()

file(WRITE ${DIR}/good_config.json [=[{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}]=])
execute_process(COMMAND ${TOOL} check ${DIR}/good_config.json --world-size 4
                        --set train_micro_batch_size_per_gpu=2
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "expected exit 0, got ${rc}: ${err}")
endif()
string(REGEX MATCH "train_micro_batch_size_per_gpu +2 +override" match "${out}")
string(REGEX MATCH "train_batch_size +8 +derived" match2 "${out}")
if(NOT match OR NOT match2)
  message(FATAL_ERROR "override or derivation not shown:\n${out}")
endif()

execute_process(COMMAND ${TOOL} check ${DIR}/good_config.json --set oops
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "a malformed --set should exit 2 (usage), got ${rc}: ${err}")
endif()
