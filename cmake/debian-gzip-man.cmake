# CPACK_PRE_BUILD_SCRIPTS (cmake/packaging.cmake): run by cpack once the files
# are staged and before the packages are made.  Debian's policy (12.1) wants
# manual pages gzip'd (-9n: no name or timestamp in them, so the packages
# are reproducible); `cmake --install` leaves them plain, which man reads too.
file(GLOB_RECURSE _pages LIST_DIRECTORIES false "${CPACK_TEMPORARY_DIRECTORY}/*.[1-8]")
list(FILTER _pages INCLUDE REGEX "/share/man/man[1-8]/[^/]+\\.[1-8]$")
if(NOT _pages)
  message(FATAL_ERROR "no man page staged under ${CPACK_TEMPORARY_DIRECTORY}")
endif()
foreach(p IN LISTS _pages)
  execute_process(COMMAND gzip -9nf "${p}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${p}: ${rc}")
  endif()
endforeach()
