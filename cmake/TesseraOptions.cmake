# Build options. Each GPU backend is ON when its toolchain is found (see TesseraDependencies).
option(TESSERA_BUILD_TESTS "Build the GoogleTest suites" ON)
option(TESSERA_WERROR "Treat warnings as errors (CI sets this)" OFF)
option(TESSERA_SANITIZE "Build with AddressSanitizer + UndefinedBehaviorSanitizer" OFF)
option(TESSERA_TSAN "Build with ThreadSanitizer" OFF)
option(TESSERA_FUZZ "Build libFuzzer targets (needs clang)" OFF)
set(TESSERA_VULKAN "AUTO" CACHE STRING "Vulkan backend: AUTO, ON or OFF")
set(TESSERA_CUDA "AUTO" CACHE STRING "CUDA backend: AUTO, ON or OFF")
set(TESSERA_MPI "AUTO" CACHE STRING "MPI communicator for tensor parallelism (libopenmpi-dev): AUTO, ON or OFF")
set_property(CACHE TESSERA_MPI PROPERTY STRINGS AUTO ON OFF)
set(TESSERA_HIP "AUTO" CACHE STRING "HIP backend: AUTO, ON or OFF")
set(TESSERA_CUDA_ARCHS "80;89;90a;100a;120a" CACHE STRING "CUDA architectures (Ampere, Ada, Hopper, Blackwell DC, Blackwell RTX)")
set(TESSERA_HIP_ARCHS "gfx90a;gfx1030" CACHE STRING "HIP offload architectures")

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# Warnings for our own targets (applied with tessera_target_warnings()).
function(tessera_target_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
  if(TESSERA_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

if(TESSERA_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(TESSERA_SANITIZE=1)
  # GCC's flow analysis sees through ASan's instrumentation poorly and reports false
  # "may be used uninitialized" inside libstdc++ (std::regex); -Werror would turn that into a
  # failed sanitizer build. The normal build keeps the warning.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()
if(TESSERA_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
  add_compile_definitions(TESSERA_TSAN=1)
endif()
option(TESSERA_NULL_BACKEND "Build the null backend (backends/null), the skeleton a new backend copies" OFF)
