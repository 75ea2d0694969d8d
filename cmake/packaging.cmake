# Debian packages by CPack (issue 29): `cpack -G DEB` in a build configured
# with -DCMAKE_INSTALL_PREFIX=/usr makes three, one per install component:
#
#   libweft0     (component lib)   the shared library, libweft.so.0 -- named
#                                  after its SONAME, as Debian's policy (8.1)
#                                  and lintian want of a shared library package
#   libweft-dev  (component dev)   headers, the static library, the .so link,
#                                  weft.pc, the CMake package, weft(3)
#   weft-tools   (component tools) weft-httpd, weft-run (and libweft-hook.so,
#                                  which it preloads), weft-top, weft-load,
#                                  weft-bench, with their man pages
#
# Their Depends come from dpkg-shlibdeps (liburing2, libc6 ...), plus libdw1
# by hand: the thread dump's symbolizer opens libdw.so.1 with dlopen (so the
# library loads without it, src/observe/symbolize.c), which dpkg-shlibdeps
# cannot see; the dev package's from its -dev peers by hand (a static
# libweft.a needs liburing's); libweft0 ships a shlibs file and its ldconfig
# trigger.  Each package carries /usr/share/doc/PKG/copyright and a
# changelog.Debian.gz, which Debian requires of every binary package.
# tests/integration/deb_test.sh builds, lints, installs and removes them.

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "weft")
set(CPACK_PACKAGE_VENDOR "the weft authors")
set(CPACK_PACKAGE_CONTACT "weft developers <weft-devel@lists.weft.invalid>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${CPACK_PACKAGE_CONTACT})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev tools)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://weft.invalid/")
# reproducible and owned by root, as dpkg-deb --root-owner-group makes them
set(CPACK_DEBIAN_ARCHIVE_TYPE gnutar)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
# a package's binaries without their debug info (the build tree keeps it)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libweft0)
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# a shlibs file for libweft.so.0 (the only library with a versioned SONAME:
# weft-tools' libweft-hook.so lives in a directory of its own), and the
# ldconfig trigger Debian wants instead of maintainer scripts calling
# ldconfig: CPack 3.25 writes such scripts for a package with a library in
# /usr/lib unless the package brings its own postinst and postrm, so
# libweft0 brings ones that do nothing (cmake/debian-lib-*)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-lib-triggers/triggers
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-lib-triggers/postinst
  ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-lib-triggers/postrm)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_LIB_PACKAGE_DEPENDS "libdw1")
set(CPACK_COMPONENT_LIB_DESCRIPTION "virtual threads for C: the shared library
weft runs plain blocking C code -- a thread per request, read, sleep,
lock -- on millions of cheap virtual threads scheduled over a few carrier
threads, with structured concurrency, channels, futures and socket and
file I/O on io_uring (epoll where io_uring is not allowed).
.
This package holds the shared library, libweft.so.0.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libweft-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "libweft0 (= ${PROJECT_VERSION}-1), liburing-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION "virtual threads for C: development files
weft runs plain blocking C code on millions of cheap virtual threads
scheduled over a few carrier threads.
.
This package holds the headers (weft.h and weft/), the static library,
pkg-config's weft.pc, the CMake package (find_package(weft)) and the
weft(3) manual page.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME weft-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libdw1")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION "virtual threads for C: HTTP server, runner and tools
weft-httpd, a static-file HTTP/1.1 server on virtual threads (worker
processes, health checks, graceful drain); weft-run, which runs a program
weft did not compile with every thread it makes a virtual thread;
weft-top, a live view of a running weft program; weft-load, an HTTP load
generator; weft-bench, the benchmarks.")

# the files Debian wants in every binary package (policy 12.5 and 12.7):
# usr/share/doc/PKG/copyright and changelog.Debian.gz (gzip -n: no timestamp, so
# the packages are reproducible)
find_program(WEFT_GZIP gzip)
set(_pkg_doc ${CMAKE_CURRENT_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${_pkg_doc})
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-copyright ${_pkg_doc}/copyright COPYONLY)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-changelog.in ${_pkg_doc}/changelog @ONLY)
if(WEFT_GZIP)
  add_custom_command(OUTPUT ${_pkg_doc}/changelog.Debian.gz
    COMMAND ${CMAKE_COMMAND} -E copy ${_pkg_doc}/changelog ${_pkg_doc}/changelog.Debian
    COMMAND ${WEFT_GZIP} -9nf ${_pkg_doc}/changelog.Debian
    DEPENDS ${_pkg_doc}/changelog VERBATIM)
  add_custom_target(weft_pkg_changelog ALL DEPENDS ${_pkg_doc}/changelog.Debian.gz)
  foreach(c lib dev tools)
    string(TOUPPER ${c} C)
    install(FILES ${_pkg_doc}/copyright ${_pkg_doc}/changelog.Debian.gz
      DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${C}_PACKAGE_NAME} COMPONENT ${c})
  endforeach()
endif()

# the man pages gzip'd in the packages (cmake/debian-gzip-man.cmake)
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_CURRENT_SOURCE_DIR}/cmake/debian-gzip-man.cmake)

include(CPack)
