# cmake -P script (CTest: install_find_package). Installs the build into a fresh prefix, builds
# tests/install/consumer (find_package(tessera) + examples/c/embed.c) against it, runs it on the
# model and requires the same greedy answer as the in-tree tessera-embed-c.
# In: BUILD_DIR SOURCE_DIR WORK_DIR MODEL
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR MODEL)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "install_test.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${MODEL}")
  message(FATAL_ERROR "install_test.cmake: model '${MODEL}' not found (run .ci/fetch-model)")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${rc}):\n${out}\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
run("configuring the consumer project" ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer"
    -B "${WORK_DIR}/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DTESSERA_EXAMPLE_SOURCE=${SOURCE_DIR}/examples/c/embed.c")
run("building the consumer project" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer")

set(prompt "What is the capital of France? Answer in one sentence.")
run("the installed consumer" "${WORK_DIR}/consumer/embed_c" "${MODEL}" "${prompt}" cpu)
set(installed "${run_out}")
run("the in-tree tessera-embed-c" "${BUILD_DIR}/bin/tessera-embed-c" "${MODEL}" "${prompt}" cpu)
set(in_tree "${run_out}")
string(STRIP "${installed}" stripped)
if(stripped STREQUAL "")
  message(FATAL_ERROR "the installed consumer printed no answer")
endif()
if(NOT installed STREQUAL in_tree)
  message(FATAL_ERROR "answers differ:\n  installed: ${installed}\n  in tree:   ${in_tree}")
endif()
message(STATUS "installed consumer answered: ${stripped}")
