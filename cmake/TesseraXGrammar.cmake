# XGrammar (structured output, grammar/): its C++ static library built from the PyPI sdist with
# the Python bindings off. The sdist is fetched at configure time with pip into the build folder
# (never committed; a second configure reuses it) and checked against the pinned SHA-256.
# Sets TESSERA_HAVE_XGRAMMAR, or TESSERA_XGRAMMAR_WHY (why not: the stub reports it to clients).
option(TESSERA_XGRAMMAR "Structured output through XGrammar (C++ library from the PyPI sdist)" ON)
set(TESSERA_XGRAMMAR_VERSION "0.2.9")
set(TESSERA_XGRAMMAR_SHA256 "87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90")
set(TESSERA_HAVE_XGRAMMAR OFF)
set(TESSERA_XGRAMMAR_WHY "configured with -DTESSERA_XGRAMMAR=OFF")

function(tessera_fetch_xgrammar out_src out_why)
  set(dir ${CMAKE_BINARY_DIR}/_deps/xgrammar)
  set(tarball ${dir}/xgrammar-${TESSERA_XGRAMMAR_VERSION}.tar.gz)
  set(src ${dir}/xgrammar-${TESSERA_XGRAMMAR_VERSION})
  if(EXISTS ${src}/CMakeLists.txt)
    set(${out_src} ${src} PARENT_SCOPE)
    return()
  endif()
  if(NOT EXISTS ${tarball})
    set(py ${Python3_EXECUTABLE})
    if(NOT py)
      find_package(Python3 COMPONENTS Interpreter QUIET)
      set(py ${Python3_EXECUTABLE})
    endif()
    if(NOT py)
      set(${out_why} "no Python interpreter to run pip download" PARENT_SCOPE)
      return()
    endif()
    message(STATUS "XGrammar: pip download xgrammar==${TESSERA_XGRAMMAR_VERSION} (sdist) into ${dir}")
    # --no-binary for xgrammar only: its build requirements come as wheels (":all:" would build
    # CMake itself from source just to read the sdist's metadata).
    execute_process(
      COMMAND ${py} -m pip download --disable-pip-version-check --no-deps --no-binary xgrammar
              xgrammar==${TESSERA_XGRAMMAR_VERSION} -d ${dir}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0 OR NOT EXISTS ${tarball})
      string(STRIP "${err}" err)
      string(REGEX REPLACE "\n.*" "" err "${err}")
      set(${out_why} "pip download xgrammar==${TESSERA_XGRAMMAR_VERSION} failed: ${err}" PARENT_SCOPE)
      return()
    endif()
  endif()
  file(SHA256 ${tarball} got)
  if(NOT got STREQUAL TESSERA_XGRAMMAR_SHA256)
    file(REMOVE ${tarball})
    set(${out_why} "xgrammar-${TESSERA_XGRAMMAR_VERSION}.tar.gz has SHA-256 ${got}, expected ${TESSERA_XGRAMMAR_SHA256}" PARENT_SCOPE)
    return()
  endif()
  file(ARCHIVE_EXTRACT INPUT ${tarball} DESTINATION ${dir})
  if(EXISTS ${src}/CMakeLists.txt)
    set(${out_src} ${src} PARENT_SCOPE)
  else()
    set(${out_why} "${tarball} holds no CMakeLists.txt" PARENT_SCOPE)
  endif()
endfunction()

if(TESSERA_XGRAMMAR)
  set(_xgr_src "")
  set(_xgr_why "")
  tessera_fetch_xgrammar(_xgr_src _xgr_why)
  if(_xgr_src)
    # The sdist's cmake/config.cmake (read by its CMakeLists before its options) turns the Python
    # bindings on; the extracted copy gets Tessera's: the C++ library alone.
    file(WRITE ${_xgr_src}/cmake/config.cmake
         "# Written by Tessera's cmake/TesseraXGrammar.cmake: the C++ static library only.\n"
         "set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)\nset(XGRAMMAR_BUILD_CXX_TESTS OFF)\n"
         "set(XGRAMMAR_ENABLE_CPPTRACE OFF)\nset(XGRAMMAR_ENABLE_COVERAGE OFF)\nset(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)\n")
    # NOTE: XGrammar skips its install() rules under scikit-build (SKBUILD): Tessera links it
    # into its own targets and installs none of it.
    set(SKBUILD ON)
    add_subdirectory(${_xgr_src} ${CMAKE_BINARY_DIR}/_deps/xgrammar-build EXCLUDE_FROM_ALL SYSTEM)
    unset(SKBUILD)
    # Its CMakeLists adds -flto=auto and -Werror to every compile: LTO objects would make each
    # link of a Tessera binary redo code generation, and a newer compiler's warning in a pinned
    # third-party release must not fail Tessera's build. Target options come after those flags.
    target_compile_options(xgrammar PRIVATE -fno-lto -Wno-error)
    set(TESSERA_HAVE_XGRAMMAR ON)
    set(TESSERA_XGRAMMAR_WHY "")
    message(STATUS "XGrammar ${TESSERA_XGRAMMAR_VERSION}: structured output on (${_xgr_src})")
  else()
    string(REPLACE "\"" "'" _xgr_why "${_xgr_why}")  # it becomes a C string literal (no_xgrammar.cpp)
    set(TESSERA_XGRAMMAR_WHY "${_xgr_why}")
    message(WARNING "XGrammar: structured output off: ${_xgr_why}")
  endif()
endif()
