/*
 * libweft-hook.so: the whole runtime plus this file, for LD_PRELOAD over a
 * program weft did not compile (`weft-run PROG ARGS`, apps/run).
 *
 * Preloaded, the hooks (hook.c) come before the C library's functions and
 * are on unless WEFT_HOOK=0.  But a foreign program has no vthreads: its
 * calls come from its main thread and the threads it creates, all platform
 * threads, where a hook is the C library's call.  So, as the JVM starts
 * main on a thread it owns, this library runs the program's main on a
 * vthread: it interposes __libc_start_main (what the program's _start calls
 * through the PLT; the C library's runs the constructors, then main) and
 * hands it a main that starts the runtime, runs the real main as a vthread
 * named "main" and returns its status.  main's stack is the size the
 * process's stack limit gives (RLIMIT_STACK; 8 MiB when unlimited; at most
 * 1 GiB), reserved and only touched pages committed, as any vthread's.
 * WEFT_HOOK_MAIN=0 leaves main on the process's first thread.
 *
 * What the program's own threads (pthread_create) do is unchanged: they are
 * platform threads, their calls the C library's.  A program that wants its
 * work on vthreads links weft and spawns them; one that does not gets a
 * main that parks, which is what a single-threaded blocking client needs.
 *
 * exit() from main (or a return from it) runs the atexit handlers on the
 * vthread, with the runtime still up: they may block in hooked calls too.
 */
#define _GNU_SOURCE
#include "weft.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

extern int weft__hook_preloaded; /* hook.c */

__attribute__((constructor(102))) static void preload_init(void) { weft__hook_preloaded = 1; }

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

static struct {
    main_fn main;
    int argc;
    char **argv, **envp;
} M;

static void *main_vthread(void *unused) {
    (void)unused;
    return (void *)(intptr_t)M.main(M.argc, M.argv, M.envp);
}

static size_t main_stack_size(void) {
    struct rlimit rl;
    size_t sz = 8u << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) sz = (size_t)rl.rlim_cur;
    if (sz < (256u << 10)) sz = 256u << 10;
    if (sz > (1u << 30)) sz = 1u << 30;
    return sz;
}

static int main_on_vthread(int argc, char **argv, char **envp) {
    M.argc = argc;
    M.argv = argv;
    M.envp = envp;
    int r = weft_init(NULL);
    if (r < 0 && r != -EALREADY) {
        fprintf(stderr, "weft-hook: the runtime cannot start (%s): main runs on its own thread\n", strerror(-r));
        return M.main(argc, argv, envp);
    }
    weft_thread_opts a = {.name = "main", .stack_size = main_stack_size()};
    weft_thread *t;
    r = weft_spawn(&t, main_vthread, NULL, &a);
    if (r < 0) {
        fprintf(stderr, "weft-hook: cannot start main as a vthread (%s): main runs on its own thread\n",
                strerror(-r));
        return M.main(argc, argv, envp);
    }
    void *res = NULL;
    weft_join(t, &res);
    return (int)(intptr_t)res;
}

__attribute__((visibility("default"))) int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
    start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    if (!real) {
        fprintf(stderr, "weft-hook: __libc_start_main not found: %s\n", dlerror());
        abort();
    }
    const char *v = getenv("WEFT_HOOK_MAIN");
    if (v && strcmp(v, "0") == 0) return real(main, argc, argv, init, fini, rtld_fini, stack_end);
    M.main = main;
    return real(main_on_vthread, argc, argv, init, fini, rtld_fini, stack_end);
}
