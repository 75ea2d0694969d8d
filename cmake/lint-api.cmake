# The public API's own checks (issue 24).  Every public header compiles
# alone, as installed.  A fixture installs the tree into the build folder
# (the real install rules, so a header left out of them is caught too);
# then one test per header runs
#   cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only
#      -I <installed include dir> -include weft/X.h -x c /dev/null
# A header is found by a glob, so one added later is checked without
# touching this file.

# weft's own code (the library and every program under apps/) is built
# with WEFT_NO_DEPRECATED: the compatibility section at the end of weft.h
# is left out, so a deprecated name there fails to compile.  Tests are
# not: they may be written against ../shared/DESIGN.md's names.
function(weft_api_no_deprecated dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(NOT type MATCHES "INTERFACE_LIBRARY|UTILITY")
      target_compile_definitions(${t} PRIVATE WEFT_NO_DEPRECATED)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d ${subdirs})
    weft_api_no_deprecated(${d})
  endforeach()
endfunction()
foreach(t weft_obj weft_hook)
  target_compile_definitions(${t} PRIVATE WEFT_NO_DEPRECATED)
endforeach()
if(WEFT_BUILD_APPS)
  weft_api_no_deprecated(${CMAKE_SOURCE_DIR}/apps)
endif()

if(NOT WEFT_BUILD_TESTS)
  return()
endif()

set(WEFT_API_PREFIX ${CMAKE_BINARY_DIR}/api-install)
add_test(NAME api.install_headers
         COMMAND ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR} --prefix ${WEFT_API_PREFIX})
set_tests_properties(api.install_headers PROPERTIES FIXTURES_SETUP weft_api_install)

file(GLOB WEFT_API_HEADERS RELATIVE ${CMAKE_SOURCE_DIR}/include CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/include/weft.h ${CMAKE_SOURCE_DIR}/include/weft/*.h)
foreach(h ${WEFT_API_HEADERS})
  string(REGEX REPLACE "\\.h$" "" name ${h})
  string(REPLACE "/" "." name ${name})
  add_test(NAME api.header_alone.${name}
           COMMAND ${CMAKE_C_COMPILER} -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only
                   -I ${WEFT_API_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR} -include ${h} -x c /dev/null)
  set_tests_properties(api.header_alone.${name} PROPERTIES FIXTURES_REQUIRED weft_api_install)
endforeach()

# The compatibility section: every ../shared/DESIGN.md name that 0.1
# renamed still compiles and works with its old shape (tests/api/compat.c,
# built without the deprecation warnings).
add_executable(test_api_compat ${CMAKE_SOURCE_DIR}/tests/api/compat.c)
target_compile_options(test_api_compat PRIVATE ${WEFT_WARN} -Werror)
target_compile_definitions(test_api_compat PRIVATE WEFT_ALLOW_DEPRECATED)
target_link_libraries(test_api_compat PRIVATE weft_static)
add_test(NAME api.compat_design_names COMMAND test_api_compat)
set_tests_properties(api.compat_design_names PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)

# The fd calls' per-call deadlines (weft_recv_until & co.: inline in
# weft.h): the earlier of the call's and the thread's applies, and the
# thread's is left as it was.
add_executable(test_api_until ${CMAKE_SOURCE_DIR}/tests/api/until.c)
target_compile_options(test_api_until PRIVATE ${WEFT_WARN} -Werror)
target_link_libraries(test_api_until PRIVATE weft_static)
add_test(NAME api.io_until COMMAND test_api_until)
set_tests_properties(api.io_until PROPERTIES TIMEOUT 60)

# Every public call that can fail says why: a table of bad inputs and the
# -errno each must return, checked to cover every int/ssize_t/off_t call
# the headers declare (tests/api/bad_input.c).
add_executable(test_api_bad_input ${CMAKE_SOURCE_DIR}/tests/api/bad_input.c)
target_compile_options(test_api_bad_input PRIVATE ${WEFT_WARN} -Werror)
target_compile_definitions(test_api_bad_input PRIVATE WEFT_INCLUDE_DIR="${CMAKE_SOURCE_DIR}/include")
target_link_libraries(test_api_bad_input PRIVATE weft_static)
add_test(NAME api.bad_input COMMAND test_api_bad_input)
set_tests_properties(api.bad_input PROPERTIES TIMEOUT 60)
