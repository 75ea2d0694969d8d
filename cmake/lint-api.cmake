# The public API's own checks (issue 24): every public header compiles
# alone, as installed.  A fixture installs the tree into the build folder
# (the real install rules, so a header left out of them is caught too);
# then one test per header runs
#   cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only
#      -I <installed include dir> -include weft/X.h -x c /dev/null
# A header is found by a glob, so one added later is checked without
# touching this file.
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
