# aarch64 with branch protection (BTI landing pads, PAC-signed return addresses) on
# the whole program, run under `qemu-aarch64 -cpu max`, which enforces both (issue 28):
#   scripts/sysroot.sh arm64 build-arm64-sysroot
#   cmake -S . -B build-aarch64-bti -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-bti.cmake
# A program is mapped with BTI enforced only when every object linked into it carries
# the GNU property note for BTI.  Debian 12's arm64 start files (crt1.o, crti.o),
# libc_nonshared and gcc 12's crtbegin/crtend and libgcc carry none, so against them
# no program comes out marked (-z force-bti marks it anyway, and then it dies in the
# start files' first indirect call).  Debian 13's do: this links against a tree of
# Debian 13's arm64 packages (scripts/sysroot.sh arm64; its glibc, and gcc 14's start
# files and libgcc through -B), compiled by Debian 12's cross gcc with
# -mbranch-protection=standard.  ctest runs each test under qemu-aarch64 with
# QEMU_CPU=max (pauth-impdef: the same checks with a cheaper signing function, so that
# the suite's run takes minutes, not tens of them) and -L on the tree.
# WEFT_ARM64_SYSROOT names another tree (default: build-arm64-sysroot beside this
# directory).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
if(NOT WEFT_ARM64_SYSROOT)
  if(DEFINED ENV{WEFT_ARM64_SYSROOT})
    set(WEFT_ARM64_SYSROOT $ENV{WEFT_ARM64_SYSROOT})
  else()
    get_filename_component(WEFT_ARM64_SYSROOT ${CMAKE_CURRENT_LIST_DIR}/../build-arm64-sysroot ABSOLUTE)
  endif()
endif()
set(CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WEFT_ARM64_SYSROOT)
file(GLOB _gcc_dirs ${WEFT_ARM64_SYSROOT}/usr/lib/gcc/aarch64-linux-gnu/*)
if(NOT EXISTS ${WEFT_ARM64_SYSROOT}/usr/include/liburing.h OR NOT _gcc_dirs)
  message(FATAL_ERROR "no arm64 tree at ${WEFT_ARM64_SYSROOT}: run scripts/sysroot.sh arm64 ${WEFT_ARM64_SYSROOT} (as root)")
endif()
list(GET _gcc_dirs 0 _gcc_dir)
set(_lib ${WEFT_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu)
set(CMAKE_SYSROOT ${WEFT_ARM64_SYSROOT})
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
# (the cross gcc searches its own /usr/aarch64-linux-gnu/lib before the sysroot:
# -B and -L put the tree's start files, libc and libgcc first)
set(CMAKE_C_FLAGS_INIT "-mbranch-protection=standard -B${_gcc_dir} -B${_lib}")
set(CMAKE_ASM_FLAGS_INIT "-mbranch-protection=standard")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-B${_gcc_dir} -B${_lib} -L${_lib}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-B${_gcc_dir} -B${_lib} -L${_lib}")
set(CMAKE_CROSSCOMPILING_EMULATOR
    env;WEFT_TEST_EMULATOR=qemu-aarch64;QEMU_CPU=max,pauth-impdef=on;QEMU_LD_PREFIX=${WEFT_ARM64_SYSROOT};qemu-aarch64)
set(WEFT_TEST_ENV QEMU_CPU=max,pauth-impdef=on QEMU_LD_PREFIX=${WEFT_ARM64_SYSROOT})
set(ENV{PKG_CONFIG_LIBDIR} ${_lib}/pkgconfig:${WEFT_ARM64_SYSROOT}/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${WEFT_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH ${WEFT_ARM64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# weft-load's https is not built here (apps/common/CMakeLists.txt says why)
set(WEFT_TLS OFF CACHE BOOL "weft-load's https (OpenSSL 3)")
