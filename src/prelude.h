/*
 * The library's prelude: what every source file of libweft sees before its
 * first line.
 *
 * It is not included by hand.  CMakeLists.txt puts it in front of every C
 * file of the library (weft_obj) and of libweft-hook.so (preload.c) with
 * the compiler's `-include`, so a file cannot forget it and a file added
 * later gets it without a line of its own.  Including it from a header
 * instead ("sched.h includes real.h last") let files that do not include
 * that header slip: arch/stack.c's close() calls bound to weft's own
 * exported close, the interposer, which reaches up into io.  A forgotten
 * include is silent; a missing forced one is not -- and the suite's check
 * (scripts/lint-libc-calls.sh, registered by cmake/lint-hook.cmake) fails
 * any object of the library, hook.c's aside, that references a hooked
 * libc function directly, whatever the reason.
 *
 * What it holds:
 *  - _GNU_SOURCE, which every library file wants (most said so themselves,
 *    the rest through sched.h): the prelude is first, so it decides which
 *    declarations the system headers give;
 *  - libc/real.h: the C library's functions weft hooks, and the rewrite of
 *    the library's own calls of them into calls through weft__libc (the
 *    ground floor: see real.h).  It includes the system headers that
 *    declare those functions first, so their declarations are never
 *    rewritten.  The two files that name the functions themselves --
 *    libc/libc.c and hook/hook.c -- are compiled with
 *    -DWEFT__NO_LIBC_REWRITE and get the declarations without the macros.
 *
 * Nothing of weft's layers belongs here: the prelude is the floor under
 * all of them, and a layer's own header stays that layer's.
 */
#ifndef WEFT_PRELUDE_H
#define WEFT_PRELUDE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "libc/real.h"

#endif /* WEFT_PRELUDE_H */
