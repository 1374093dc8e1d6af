# `tessera-bench model --isa`: a tiny Q4_0 model runs with the kernels pinned to AVX2 and to the
# scalar path (a row of figures each), and an unknown target is refused with its name.
file(MAKE_DIRECTORY ${OUT})
execute_process(COMMAND ${MAKE_TINY} --arch llama --dtype q4_0 --seed 3 --out ${OUT}/tiny-q4_0.gguf
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_tiny_model failed: ${rc}")
endif()
foreach(isa avx2 scalar)
  execute_process(COMMAND ${BENCH} model ${OUT}/tiny-q4_0.gguf --threads 1 --concurrency 1 --prompt 8 --decode 4
                          --repeats 1 --isa ${isa}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(isa STREQUAL "avx2" AND NOT rc EQUAL 0 AND err MATCHES "--isa avx2: not a SIMD target")
    # Hardware absent (an x86 CPU or emulator without AVX2): the test's one allowed skip, marked
    # "[hardware]" for .ci/check-skips like every other.
    message("SKIPPED [hardware] this CPU has no AVX2")
    return()
  endif()
  string(TOUPPER ${isa} name)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "CPU kernels forced to ${name}" OR NOT out MATCHES "\n1 +1 +[0-9.]+ +[0-9.]+ ")
    message(FATAL_ERROR "--isa ${isa}: rc ${rc}\n${out}\n${err}")
  endif()
endforeach()
execute_process(COMMAND ${BENCH} model ${OUT}/tiny-q4_0.gguf --isa avx9
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "--isa avx9: not a SIMD target")
  message(FATAL_ERROR "--isa avx9 was not refused: rc ${rc}\n${out}\n${err}")
endif()
