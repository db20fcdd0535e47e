# Cross-compiling for aarch64 Linux on an x86-64 Debian host (g++-aarch64-linux-gnu):
#   cmake -S runtime_ext -DCMAKE_TOOLCHAIN_FILE=tests/aarch64/toolchain.cmake
# or, for a wheel: CMAKE_TOOLCHAIN_FILE=<this file> _PYTHON_HOST_PLATFORM=linux-aarch64 pip wheel .
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
