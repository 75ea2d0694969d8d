# Cross build for aarch64 with Debian's cross compiler (issue 28):
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
# scripts/deps.sh cross installs gcc-aarch64-linux-gnu and qemu-user, and the
# arm64 -dev packages the library links (liburing, libdw's headers) after
# `dpkg --add-architecture arm64` (scripts/deps.sh cross does both).  ctest runs each
# test under qemu-aarch64 (CMAKE_CROSSCOMPILING_EMULATOR), which loads them and
# libc6:arm64 from the multiarch directories.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
# (WEFT_TEST_EMULATOR: the tests name the emulator in what they skip for its
# limits: tests/support/harness.h, EMU_SKIP)
set(CMAKE_CROSSCOMPILING_EMULATOR env;WEFT_TEST_EMULATOR=qemu-aarch64;qemu-aarch64)
# pkg-config: the target's .pc files (multiarch), not the build machine's
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# weft-load's https is not built here (apps/common/CMakeLists.txt says why)
set(WEFT_TLS OFF CACHE BOOL "weft-load's https (OpenSSL 3)")
