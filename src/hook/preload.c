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
 * A signal whose handler the program installed interrupts main's hooked
 * wait as the kernel would interrupt its blocking call (sched.c,
 * "Interrupts": EINTR from a sleep, poll or select, and from a read or
 * write unless the handler has SA_RESTART).
 * A child forked from main that returns from main has no runtime to return
 * to: main_vthread calls exit(status) itself, as the C library would after
 * main (stdio flushed, atexit handlers run).
 *
 * What a foreign main gets that weft's own vthreads ask for (weft.h, "Own
 * TLS" and "The system call trap"), unless the environment says otherwise:
 *  - its own TLS (WEFT_OWN_TLS=0 leaves it out): the program's __thread
 *    variables, errno, and the owner of its recursive locks and FILEs are
 *    main's, not the carrier's, and its hooked calls need no errno pin;
 *  - the system call trap (WEFT_TRAP=0 leaves it out), with the hooks and
 *    own TLS (it traps only vthreads that have their own: hook/trap.c):
 *    the calls the C library makes itself (stdio's read, its locks' futex
 *    waits, popen's wait) park too.
 * A sanitizer build has neither (each says why where it is asked for by
 * name; a default it cannot keep is left out quietly), nor can its
 * libweft-hook.so be preloaded into an uninstrumented program anyway.
 * main is marked foreign for the dump and weft-top.
 */
#define _GNU_SOURCE
#include "weft.h"
#include "../sched/sched.h"
#include "hook.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

extern int weft__hook_preloaded; /* hook.c */

__attribute__((constructor(102))) static void preload_init(void) { weft__hook_preloaded = 1; }

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

static struct {
    main_fn main;
    int argc;
    char **argv, **envp;
    uint64_t mask; /* the signal mask the process started with (the kernel's layout) */
} M;

/* The mask the process started with is main's; the carriers start with
 * none of it (weft_init makes them from this thread), so that with
 * virtual masks (signals.c) the kernel can deliver what a vthread
 * unblocks.  Given back to this thread where main does not run as a
 * vthread. */
static void mask_take(void) {
    uint64_t none = 0;
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, &M.mask, sizeof none);
}
static void mask_give_back(void) { syscall(SYS_rt_sigprocmask, SIG_SETMASK, &M.mask, NULL, sizeof M.mask); }

static void *main_vthread(void *unused) {
    (void)unused;
    weft_thread *me = weft__self();
    if (me) atomic_store_explicit(&me->foreign, 1, memory_order_relaxed);
    /* a process-directed signal's handler interrupts main's blocking call,
     * as the kernel's would (sched.c, "Interrupts") */
    weft__intr_target_set(me);
    /* its mask: its own (signals.c), else its carrier's */
    if (!me || !weft__vsig_on() || weft__vsig_mask(SIG_SETMASK, &M.mask, NULL, 0) < 0) mask_give_back();
    /* (as a virtual pthread's body: pthread_exit, join, names; hook/threads.c) */
    int st = weft__threads_main(M.main, M.argc, M.argv, M.envp);
    weft__intr_target_set(NULL);
    /* main returned in a child it forked: no runtime there to return to
     * (the child has one thread, this one, and no carrier); what the C
     * library does after main -- exit(status): atexit handlers, stdio
     * flushed -- is done here */
    if (!weft__carrier_self()) exit(st);
    return (void *)(intptr_t)st;
}

__attribute__((unused)) static int env_unset(const char *name) {
    const char *v = getenv(name);
    return !v || !*v;
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
    weft_runtime_opts cfg = {0};
#if !defined(WEFT_ASAN) && !defined(WEFT_TSAN)
    const char *ot = getenv("WEFT_OWN_TLS");
    if (env_unset("WEFT_TRAP") && !(ot && !strcmp(ot, "0")) && weft__hook_wanted(0)) cfg.trap = 1;
#endif
    mask_take();
    int r = weft_init(&cfg);
    if (r < 0 && r != -EALREADY) {
        mask_give_back();
        fprintf(stderr, "weft-hook: the runtime cannot start (%s): main runs on its own thread\n", strerror(-r));
        return M.main(argc, argv, envp);
    }
    weft_thread_opts a = {.name = "main", .stack_size = main_stack_size()};
#if !defined(WEFT_ASAN) && !defined(WEFT_TSAN)
    if (env_unset("WEFT_OWN_TLS")) a.own_tls = 1;
#endif
    weft_thread *t;
    r = weft_spawn(&t, main_vthread, NULL, &a);
    if (r == -ENOTSUP && a.own_tls > 0) {
        fprintf(stderr, "weft-hook: this C library cannot give main a TLS block of its own: main uses its "
                        "carriers' TLS\n");
        a.own_tls = 0;
        r = weft_spawn(&t, main_vthread, NULL, &a);
    }
    if (r < 0) {
        mask_give_back();
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
