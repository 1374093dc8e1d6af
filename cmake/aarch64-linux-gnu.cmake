# Cross-compiles Tessera for 64-bit ARM Linux from x86-64 Debian 12:
#   apt-get install g++-aarch64-linux-gnu qemu-user-static   (after dpkg --add-architecture arm64)
#   apt-get install libhwy-dev:arm64 libgtest-dev:arm64
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# Binaries run on x86-64 under qemu-aarch64-static (CMAKE_CROSSCOMPILING_EMULATOR, so CTest and
# gtest discovery run them through it). GPU backends are off: their SDKs here are x86-64 only.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Debian multiarch: arm64 libraries under /usr/lib/aarch64-linux-gnu, arch-independent headers
# (CLI11, nlohmann-json) under /usr/include; the sysroot is / for both.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# x86-64 package configs (oneDNN, Vulkan) live in /usr/lib/x86_64-linux-gnu/cmake: never use them.
set(CMAKE_IGNORE_PREFIX_PATH /usr/lib/x86_64-linux-gnu)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
find_program(_tessera_qemu qemu-aarch64-static)
if(_tessera_qemu)
  # The multiarch libc6:arm64 provides /lib/ld-linux-aarch64.so.1, so no -L sysroot is needed.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${_tessera_qemu})
endif()
set(TESSERA_VULKAN OFF CACHE STRING "" FORCE)
set(TESSERA_CUDA OFF CACHE STRING "" FORCE)
set(TESSERA_HIP OFF CACHE STRING "" FORCE)
