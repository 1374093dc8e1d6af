# Third-party libraries. Debian 12 packages (see README / shared toolchain notes).
find_package(Threads REQUIRED)
find_package(hwy REQUIRED)          # libhwy-dev: SIMD with dynamic dispatch
find_package(dnnl QUIET)            # libdnnl-dev: large f32/bf16 GEMMs
find_package(CLI11 QUIET)           # libcli11-dev
find_package(nlohmann_json QUIET)   # nlohmann-json3-dev
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
  pkg_check_modules(ZMQ QUIET IMPORTED_TARGET libzmq)  # libzmq3-dev: the server's KV events (optional)
endif()

# --- MPI (tensor parallelism's communicator on CPU and Vulkan ranks) -------
set(TESSERA_HAVE_MPI OFF)
if(NOT TESSERA_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    set(TESSERA_HAVE_MPI ON)
    find_program(TESSERA_MPIEXEC NAMES mpirun mpiexec HINTS ${MPIEXEC_EXECUTABLE})
  elseif(TESSERA_MPI STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_MPI=ON but MPI was not found (apt-get install libopenmpi-dev openmpi-bin)")
  endif()
endif()

# --- Vulkan ---------------------------------------------------------------
set(TESSERA_HAVE_VULKAN OFF)
if(NOT TESSERA_VULKAN STREQUAL "OFF")
  find_package(Vulkan QUIET COMPONENTS glslc)
  if(Vulkan_FOUND AND Vulkan_glslc_FOUND)
    set(TESSERA_HAVE_VULKAN ON)
  elseif(TESSERA_VULKAN STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_VULKAN=ON but Vulkan headers/loader or glslc were not found")
  endif()
endif()

# --- CUDA -----------------------------------------------------------------
set(TESSERA_HAVE_CUDA OFF)
if(NOT TESSERA_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${TESSERA_CUDA_ARCHS})
    enable_language(CUDA)
    # CMake 3.25 predates nvcc's C++20 support and would refuse the project's CXX_STANDARD 20
    # for .cu files; nvcc 12+ takes -std=c++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit QUIET)
    if(CUDAToolkit_FOUND)
      set(TESSERA_HAVE_CUDA ON)
    endif()
  endif()
  if(TESSERA_CUDA STREQUAL "ON" AND NOT TESSERA_HAVE_CUDA)
    message(FATAL_ERROR "TESSERA_CUDA=ON but no CUDA toolkit was found")
  endif()
endif()

# --- HIP (compiled through hipcc by a custom command; see backends/hip) ---
set(TESSERA_HAVE_HIP OFF)
if(NOT TESSERA_HIP STREQUAL "OFF")
  find_program(HIPCC_PROGRAM hipcc)
  find_library(AMDHIP64_LIBRARY amdhip64)
  if(HIPCC_PROGRAM AND AMDHIP64_LIBRARY)
    set(TESSERA_HAVE_HIP ON)
  elseif(TESSERA_HIP STREQUAL "ON")
    message(FATAL_ERROR "TESSERA_HIP=ON but hipcc/libamdhip64 were not found")
  endif()
endif()

# --- Boost.Context: fast fiber switches for the GPU kernel simulator (backends/cuda/sim) ---
set(TESSERA_HAVE_BOOST_CONTEXT OFF)
find_package(Boost 1.74 QUIET COMPONENTS context)
if(Boost_CONTEXT_FOUND)
  set(TESSERA_HAVE_BOOST_CONTEXT ON)
endif()

message(STATUS "tessera: Vulkan=${TESSERA_HAVE_VULKAN} CUDA=${TESSERA_HAVE_CUDA} HIP=${TESSERA_HAVE_HIP} oneDNN=${dnnl_FOUND}")

# Optional: oneTBB (libtbb-dev) and OpenMP, for the pool design comparison (backends/cpu). Found
# here, at the top scope, because an installed static tessera_backends names TBB::tbb in its link
# interface and tesseraConfig.cmake must then find it for a consumer.
find_package(OpenMP QUIET)
find_package(TBB CONFIG QUIET)
set(TESSERA_HAVE_TBB OFF)
if(TBB_FOUND)
  set(TESSERA_HAVE_TBB ON)
endif()
