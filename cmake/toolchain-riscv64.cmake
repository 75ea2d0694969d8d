# Cross build for riscv64 (LP64D) with Debian's cross compiler (issue 28):
#   scripts/sysroot.sh riscv64 build-riscv64-sysroot
#   cmake -S . -B build-riscv64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-riscv64.cmake
# Debian 12 has no riscv64 architecture to add with dpkg, so the libraries the
# library links (liburing, libdw and glibc itself) come from a tree of Debian 13's
# riscv64 packages made by debootstrap --foreign (scripts/sysroot.sh), and
# gcc-riscv64-linux-gnu builds against it with --sysroot.  ctest runs each test
# under qemu-riscv64 -L on that tree, so a test loads the tree's ld.so and libc --
# never the cross toolchain's own /usr/riscv64-linux-gnu (another glibc).
# WEFT_RISCV64_SYSROOT names another tree (default: build-riscv64-sysroot beside
# this directory).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR riscv64)
if(NOT WEFT_RISCV64_SYSROOT)
  if(DEFINED ENV{WEFT_RISCV64_SYSROOT})
    set(WEFT_RISCV64_SYSROOT $ENV{WEFT_RISCV64_SYSROOT})
  else()
    get_filename_component(WEFT_RISCV64_SYSROOT ${CMAKE_CURRENT_LIST_DIR}/../build-riscv64-sysroot ABSOLUTE)
  endif()
endif()
# (try_compile projects run this file again: pass the tree on to them)
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WEFT_RISCV64_SYSROOT)
if(NOT EXISTS ${WEFT_RISCV64_SYSROOT}/usr/include/liburing.h)
  message(FATAL_ERROR "no riscv64 tree at ${WEFT_RISCV64_SYSROOT}: run scripts/sysroot.sh riscv64 ${WEFT_RISCV64_SYSROOT} (as root)")
endif()
set(CMAKE_SYSROOT ${WEFT_RISCV64_SYSROOT})
set(CMAKE_C_COMPILER riscv64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER riscv64-linux-gnu-gcc)
# (WEFT_TEST_EMULATOR: the tests name the emulator in what they skip for its
# limits: tests/support/harness.h, EMU_SKIP)
set(CMAKE_CROSSCOMPILING_EMULATOR env;WEFT_TEST_EMULATOR=qemu-riscv64;QEMU_LD_PREFIX=${WEFT_RISCV64_SYSROOT};qemu-riscv64)
# (tests that run a riscv64 program by path -- a script's, through
# binfmt_misc -- need the tree too: tests/CMakeLists.txt sets this on them)
set(WEFT_TEST_ENV QEMU_LD_PREFIX=${WEFT_RISCV64_SYSROOT})
# pkg-config: the tree's .pc files, their paths inside the tree
set(ENV{PKG_CONFIG_LIBDIR} ${WEFT_RISCV64_SYSROOT}/usr/lib/riscv64-linux-gnu/pkgconfig:${WEFT_RISCV64_SYSROOT}/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${WEFT_RISCV64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH ${WEFT_RISCV64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# weft-load's https is not built here (apps/common/CMakeLists.txt says why)
set(WEFT_TLS OFF CACHE BOOL "weft-load's https (OpenSSL 3)")
