# The layer check (issue 24): no undeclared upward #include or call between
# src/'s layers.  tests/lint/layers.py reads the layers and the declared
# exceptions from docs/design.md and the symbols from weft_obj's objects
# (nm), so it runs after the build, as every test does.
find_package(Python3 COMPONENTS Interpreter)
set(WEFT_LINT_NM ${CMAKE_NM})
if(NOT WEFT_LINT_NM)
  set(WEFT_LINT_NM nm)
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME lint.layers
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tests/lint/layers.py
            --src ${CMAKE_CURRENT_SOURCE_DIR}
            --objs ${CMAKE_CURRENT_BINARY_DIR}/CMakeFiles/weft_obj.dir
            --nm ${WEFT_LINT_NM})
  set_tests_properties(lint.layers PROPERTIES TIMEOUT 120)
else()
  # not skipped in silence: the suite fails and says what is missing
  message(WARNING "python3 not found: lint.layers will fail (scripts/deps.sh installs python3)")
  add_test(NAME lint.layers COMMAND sh -c "echo 'lint.layers: python3 not found (scripts/deps.sh installs it)' >&2; exit 1")
endif()
