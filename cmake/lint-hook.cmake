# The hook layer's check in the suite: no object of libweft (weft_obj) or
# of libweft-hook.so's own (preload.c) but hook.c's, locks.c's,
# threads.c's and signals.c's -- the interposers --
# references a hooked C library function directly.  Such
# a call binds to weft's own exported interposer instead of the C library's
# -- the prelude's rewrite (src/prelude.h, src/libc/real.h) missed it.  The
# names are read from real.h's WEFT__HOOKED_FUNCS, the list the table is
# built from.  Included at the end of the root CMakeLists.txt.
if(WEFT_BUILD_TESTS)
  set(lint_cppflags "")
  if(WEFT_SANITIZE STREQUAL "thread")
    set(lint_cppflags "-D__SANITIZE_THREAD__=1") # (real.h's list has no locks nor threads there)
  elseif(WEFT_SANITIZE STREQUAL "address")
    set(lint_cppflags "-D__SANITIZE_ADDRESS__=1") # (... no threads there)
  endif()
  add_test(NAME lint.libc_calls
    COMMAND ${CMAKE_COMMAND} -E env "LINT_CPPFLAGS=${lint_cppflags}" bash ${CMAKE_SOURCE_DIR}/scripts/lint-libc-calls.sh
            ${CMAKE_C_COMPILER} ${CMAKE_SOURCE_DIR}/src/libc/real.h ${CMAKE_NM} src/hook/hook.c,src/hook/locks.c,src/hook/threads.c,src/hook/signals.c
            $<TARGET_OBJECTS:weft_obj> $<TARGET_OBJECTS:weft_hook>
    COMMAND_EXPAND_LISTS)
  set_tests_properties(lint.libc_calls PROPERTIES TIMEOUT 60)
endif()
