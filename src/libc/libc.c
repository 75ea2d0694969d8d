/*
 * The C library's functions, as weft calls them: the table and its resolver.
 *
 * What.  weft__libc holds, for each function of real.h's list
 * (WEFT__HOOKED_FUNCS: read, write, ... close, getaddrinfo, sigaction),
 * the next definition after weft's own in the lookup order: the C
 * library's, or a sanitizer's interceptor in front of it, which then still
 * sees every call.  weft__libc_jump holds the same for longjmp, _longjmp,
 * siglongjmp and __longjmp_chk, which hook.c defines too ("Leaving by a
 * jump" there).  Every file of the library calls the hooked functions
 * through the table (real.h rewrites the calls); hook.c's interposers
 * call onward through it.
 *
 * Why a floor of its own.  The table is what every layer stands on -- arch
 * closes a probe's pidfd, io reads its eventfd, observe writes a dump --
 * while the interposers in hook.c stand on every layer (they park through
 * sched and io).  Here, the table depends on nothing of weft's but real.h,
 * so any file may use it without reaching up.
 *
 * The lookup.  dlsym(RTLD_NEXT, name) for every entry at once, at load (a
 * constructor) or at the first call through any entry, whichever comes
 * first: each pointer starts as a stub that resolves the whole table and
 * calls on.  So a call made before weft starts, or from another library's
 * constructor, works.
 *
 * Threads.  Any thread, at any time, may call through the table; the only
 * writes are the lookup's, which store the same value whoever makes them
 * (release stores; a reader sees either the stub, which resolves again, or
 * the C library's function).  After load nothing writes.
 *
 * How it fails.  A function the C library does not have (__longjmp_chk
 * aside, which is optional) is fatal at once: the message names it and
 * dlerror's reason, then abort -- there is nothing to call onward to.
 *
 * Sanitizers.  The sigaction family is called by a sanitizer's own
 * start-up (TSan's, from a shared libweft, before its thread state exists),
 * and its first call may land on a stub here: the stubs and the lookup are
 * not instrumented (no_sanitize("thread")).
 */
#define _GNU_SOURCE
#include "real.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef WEFT__NO_LIBC_REWRITE
#error "libc.c names the C library's functions itself: compile it with -DWEFT__NO_LIBC_REWRITE (CMakeLists.txt)"
#endif

/* not instrumented: see "Sanitizers" above */
#define LIBC_NOSAN __attribute__((no_sanitize("thread")))

LIBC_NOSAN static void resolve(void);

#define STUB(ret, name, params, args)          \
    LIBC_NOSAN static ret stub_##name params { \
        resolve();                             \
        return weft__libc.name args;           \
    }
WEFT__HOOKED_FUNCS(STUB)
#undef STUB

#define STUB_INIT(ret, name, params, args) .name = stub_##name,
__attribute__((visibility("hidden"))) weft__libc_t weft__libc = {WEFT__HOOKED_FUNCS(STUB_INIT)};
#undef STUB_INIT

/* (real.h: the carrier's trap selector; set by sched on a carrier that traps) */
__thread __attribute__((tls_model("initial-exec"), visibility("hidden"))) unsigned char *weft__sud_sel;
__attribute__((visibility("hidden"))) unsigned long long weft__sud_trapped;

int weft__sigaction_now(int sig, const struct sigaction *sa, struct sigaction *old) {
#ifdef WEFT__LIBC_TSAN
    static int (*fn)(int, const struct sigaction *, struct sigaction *);
    if (!fn) {
        void *h = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
        if (h) fn = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(h, "sigaction");
        if (!fn) fn = weft__libc.sigaction; /* the next one after weft's (hook.c) */
    }
    return fn(sig, sa, old);
#else
    return weft__libc.sigaction(sig, sa, old);
#endif
}

LIBC_NOSAN static void resolve(void) {
#define LOOK(ret, name, params, args)                                                                    \
    {                                                                                                    \
        void *f = dlsym(RTLD_NEXT, #name);                                                               \
        if (!f) {                                                                                        \
            fprintf(stderr, "weft: the C library's %s cannot be found (dlsym: %s)\n", #name, dlerror()); \
            abort();                                                                                     \
        }                                                                                                \
        __atomic_store_n((void **)&weft__libc.name, f, __ATOMIC_RELEASE);                                \
    }
    WEFT__HOOKED_FUNCS(LOOK)
#undef LOOK
    weft__libc_jumps_resolve();
}

/* at load: before any thread but the loader's exists */
__attribute__((constructor(101))) static void resolve_at_load(void) { resolve(); }

/* longjmp and its kin (hook.c's jump() calls on through these) */
static const char *const jump_names[WEFT__J_N] = {"longjmp", "_longjmp", "siglongjmp", "__longjmp_chk"};
__attribute__((visibility("hidden"))) weft__jump_fn weft__libc_jump[WEFT__J_N];

LIBC_NOSAN void weft__libc_jumps_resolve(void) {
    for (int i = 0; i < WEFT__J_N; i++) {
        weft__jump_fn f = (weft__jump_fn)dlsym(RTLD_NEXT, jump_names[i]);
        if (!f && i != WEFT__J_CHK) {
            fprintf(stderr, "weft: the C library's %s cannot be found (dlsym: %s)\n", jump_names[i], dlerror());
            abort();
        }
        __atomic_store_n(&weft__libc_jump[i], f, __ATOMIC_RELEASE);
    }
}
