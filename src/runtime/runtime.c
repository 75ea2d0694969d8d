/*
 * The runtime's life: weft_init, weft_shutdown, weft_main, the fork
 * handlers, the environment (WEFT_* variables), and the stack overflow
 * handler -- the layer above every other.
 *
 * Why a layer of its own.  Starting weft starts every layer in turn: the
 * io backend and the stack allocator, the carriers (sched), the live
 * console (observe), the libc hooks (hook); stopping it, and forking, go
 * through all of them in the reverse order.  While this lived in sched.c,
 * the scheduler called up into io, observe and hook for it, arrows the
 * layer rule (docs/design.md) forbids; here, above them all, every one of
 * those calls goes down.  What a layer does to start or stop stays that
 * layer's (weft__io_start, weft__stacks_init, the carriers' threads in
 * sched.c, weft__console_start, weft__hook_start ...); this file only
 * decides the order, the configuration, and what a failure undoes.  It
 * reads and writes the scheduler's runtime object R (sched/internal.h)
 * directly: the carriers it makes and frees are sched.c's
 * (weft__carrier_alloc, weft__carrier_main), the monitor spares.c's.
 *
 * The lazy start.  Every layer's first call starts a runtime if none runs
 * (weft__ensure_init, in sched.c: one load on the fast path).  Its slow
 * path calls weft__runtime_start_lazy here: the one call up into this
 * layer, declared in docs/design.md.  A registered pointer -- this file
 * storing its start function into one sched.c owns, from a constructor --
 * would hide the arrow rather than remove it, and would break: linked from
 * libweft.a, an object file nothing refers to is left out of the program,
 * so a program that never calls weft_init (weft_spawn is enough to start
 * weft) would have no runtime.o, no constructor, and no way to start.
 * The direct call makes the linker bring this file along.
 *
 * Configuration.  A field of weft_runtime_opts that is 0 falls back to its
 * environment variable (WEFT_CARRIERS, WEFT_STACK_SIZE,
 * WEFT_PIN_THRESHOLD_MS, WEFT_MAX_COMPENSATE, WEFT_SPIN_US, WEFT_MONITOR;
 * the io layer reads WEFT_IO, det.c WEFT_DETERMINISTIC), then to its
 * default; a value that is not a number or out of its range fails
 * weft_init with -EINVAL and a line naming it.  R.started_with keeps what
 * was resolved, for a fork child's lazy start.
 *
 * Threads: weft_init, weft_shutdown and the lazy start run on whichever
 * thread calls them, serialised by R.init_lock; the fork handlers on the
 * forking thread; the SIGSEGV handler on the faulting carrier's altstack.
 *
 * Fork.  A child process has one thread -- the one that called fork() --
 * and none of the carriers (spares included), the monitor or the blocking pool; whatever
 * those held (locks, half-updated queues) stays as the fork caught it.  So
 * the runtime is not carried into the child but abandoned there, and a
 * fresh one starts on the child's next weft call.  pthread_atfork
 * handlers, registered by the first weft_init: prepare keeps the io
 * layer's pollers from being freed mid-fork, idle carriers from carving
 * stacks and the monitor from looking (R.mon_fork: a look may probe a
 * stall, make a spare -- malloc; ASan's allocator, unlike glibc's, is not
 * locked across fork by libasan 12, and a child forked amid a malloc on
 * another thread can hang in its own); the child handler closes the
 * child's copies of the parent's rings, eventfds and epoll sets (the same
 * kernel objects as the parent's: the child must never submit to them),
 * reinitialises the locks, and forgets carriers, queues, timers and stacks
 * without freeing or unmapping them (a thread that is not there may have
 * been mid-update; weft__fork_keep keeps them reachable for LeakSanitizer,
 * and copy-on-write makes them cost nothing untouched).  Then R.up is 0 and
 * weft__ensure_init starts a new runtime when the child next needs one,
 * configured as the parent's was (its carriers and stack size as resolved,
 * its backend as asked for), unless the child calls weft_init itself.
 * The parent's vthreads do not exist in the child: every descriptor
 * carries the fork generation it was spawned in (R.fork_gen, bumped in the
 * child), and weft_join, _detach, _cancel and _unpark refuse a stale one
 * with -ECHILD, while weft__ready drops one (a sync object shared with the
 * parent may name a parent's vthread as its waiter: it must never run in
 * the child).  fork() from a vthread: the child's thread is the carrier's,
 * running on the vthread's stack; tls_carrier is cleared, so that thread
 * goes on as the child's platform thread (its weft calls block it, and
 * start the fresh runtime as any platform thread's would), on that stack,
 * which stays mapped.  It must end with exit/_exit/exec: returning from the
 * vthread's function has no carrier to return to, and stops with a message
 * (vthread_start).  A fork while another thread is in weft_init or
 * weft_shutdown is not supported (the child would see the runtime half
 * built or half freed); the prepare handler cannot wait for them, since
 * shutdown may be waiting for the very vthread that forks.
 */
#include "../sched/internal.h"
#include "../async/async_int.h" /* the async layer stops first */
#include "../hook/hook.h"
#include "../io/io.h"
#include "../observe/observe.h"
#include "../scope/scope.h" /* weft_shutdown refuses a scope left open */

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void segv_handler(int sig, siginfo_t *si, void *uctx);

/* $WEFT_STACK_SIZE: bytes, or with a k or m suffix; 1 with *out set, 0
 * when unset, -EINVAL (one line on stderr, as weft__env_long) otherwise. */
static int env_size(const char *name, size_t *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 0;
    if (shift) end++;
    if (errno || *end || end == v || v[0] == '-' || x == 0 || x > (SIZE_MAX >> shift)) {
        fprintf(stderr, "weft: %s=%s is not a size (bytes, or with k or m)\n", name, v);
        return -EINVAL;
    }
    *out = (size_t)x << shift;
    return 1;
}

static void free_carriers(int n) {
    for (int i = 0; i < n; i++)
        if (R.c[i]) weft__carrier_free(R.c[i]);
    free(R.c);
    R.c = NULL;
    R.n = 0;
    atomic_store(&R.nall, 0);
    atomic_store(&R.nactive, 0);
}

/* ---- fork (see "Fork" at the top) ---- */

static void fork_prepare(void) {
    /* first: a look may make a spare, whose poller the io layer's lock
     * (taken next) would hold up */
    pthread_mutex_lock(&R.mon_fork);
    weft__io_fork_prepare();
    weft__stacks_fork_prepare();
    weft__tls_fork_prepare();
}
static void fork_parent(void) {
    weft__tls_fork_parent();
    weft__stacks_fork_parent();
    weft__io_fork_parent();
    pthread_mutex_unlock(&R.mon_fork);
}

static void fork_child(void) {
    R.fork_gen++;
    weft__futex_hash_fork_child(); /* the child's futex hash is a new, default one */
    /* the parent's platform threads mid-wake-up (a spawn whose vthread
     * forked before its spawner had returned) are not in the child */
    atomic_store(&R.plat_waking, 0);
    /* a vthread that forked goes on as the child's platform thread */
    tls_carrier = NULL;
    R.init_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    R.mon_fork = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    R.g0.inj.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__groups.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__groups.mon_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__fork_keep(weft__groups.head); /* the groups, their carriers (in R.c) */
    weft__groups.head = NULL;
    weft__groups.ngroups = 0;
    memset(R.gidx_used, 0, sizeof R.gidx_used);
    weft__io_fork_child();
    weft__async_fork_child();
    weft__stacks_fork_child();
    weft__tls_fork_child();
    weft__det_fork_child();
    weft__fork_keep(R.c); /* the carriers, their queues, heaps and caches */
    R.c = NULL;
    R.n = 0;
    atomic_store(&R.nall, 0);
    atomic_store(&R.nactive, 0);
    weft__tfifo_clear(&R.g0.inj);
    R.g0.c = NULL;
    R.mon_started = 0;
    atomic_store(&R.stop, 0);
    if (atomic_load(&R.up)) R.inherit_cfg = 1;
    atomic_store(&R.up, 0);
}

static void register_atfork(void) {
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        fprintf(stderr, "weft: pthread_atfork failed: a child process forked while weft runs cannot use it\n");
}

/* weft_init, or (lazy) the start a weft call makes when none runs: in a
 * fork child that one is configured as the parent's was ("Fork"), decided
 * under the lock (several threads may start it at once). */
/* A fatal stop's thread dump (weft__fatal_dump_hook): text, to stderr. */
static void fatal_dump(void) { weft_dump(2, WEFT_DUMP_TEXT); }

static int init_runtime(const weft_runtime_opts *cfg, int lazy) {
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&R.init_lock);
    if (atomic_load(&R.up)) {
        pthread_mutex_unlock(&R.init_lock);
        return -EALREADY;
    }
    weft_runtime_opts inherited;
    if (lazy && R.inherit_cfg) {
        inherited = R.started_with;
        cfg = &inherited;
    }
    /* deterministic mode (det.c): one carrier, no monitor, no spares */
    uint64_t det_seed = 0;
    const char *det_trace = NULL;
    int det = weft__det_resolve(cfg, &det_seed, &det_trace);
    if (det < 0) {
        pthread_mutex_unlock(&R.init_lock);
        return det;
    }
    if (lazy && R.inherit_cfg) det_trace = NULL; /* a fork child: the trace is the parent's */
    /* The environment, where cfg leaves a field 0: a value that is not a
     * number, or out of its range, fails weft_init with -EINVAL and a line
     * naming it (weft__env_long), as $WEFT_DETERMINISTIC's does -- a
     * typo must not quietly run the default. */
    long nl = sysconf(_SC_NPROCESSORS_ONLN), ms = 0, maxc = 0, spin_us = SPIN_NS / 1000;
    if (nl < 1) nl = 1;
    if (nl > WEFT__MAX_CARRIERS) nl = WEFT__MAX_CARRIERS;
    size_t stack = 256 * 1024;
    int bad = 0, maxc_env = 0;
    if (det) nl = 1;
    else if (cfg && cfg->carriers) nl = cfg->carriers;
    else bad |= weft__env_long("WEFT_CARRIERS", 1, WEFT__MAX_CARRIERS, "a carrier count (1 to 1024)", &nl) < 0;
    if (cfg && cfg->stack_size) stack = cfg->stack_size;
    else bad |= env_size("WEFT_STACK_SIZE", &stack) < 0;
    if (!(cfg && cfg->pin_threshold_ns))
        bad |= weft__env_long("WEFT_PIN_THRESHOLD_MS", LONG_MIN, INT64_MAX / 1000000,
                              "a threshold in ms (negative: off)", &ms) < 0;
    if (cfg && cfg->max_compensate) maxc = cfg->max_compensate, maxc_env = 1;
    else if ((maxc_env = weft__env_long("WEFT_MAX_COMPENSATE", LONG_MIN, LONG_MAX,
                                        "a number of spare carriers (0 or less: none)", &maxc)) < 0)
        bad = 1;
    bad |= weft__env_long("WEFT_SPIN_US", 0, INT64_MAX / 1000, "a spin in us (0 or more)", &spin_us) < 0;
    /* the monitor's lines: every stall (log), none (off), or by default
     * only those that last a second -- a program's stderr is its own --
     * and under weft-run none (it runs programs that compare their
     * stderr: CPython's tests; issue 27) */
    extern int weft__hook_preloaded; /* (hook.c) */
    int pin_log = weft__hook_preloaded ? WEFT__MONLOG_OFF : WEFT__MONLOG_LONG;
    const char *monv = getenv("WEFT_MONITOR");
    if (monv && *monv) {
        if (!strcmp(monv, "log")) pin_log = WEFT__MONLOG_ALL;
        else if (!strcmp(monv, "off")) pin_log = WEFT__MONLOG_OFF;
        else if (strcmp(monv, "default") != 0) {
            fprintf(stderr, "weft: WEFT_MONITOR=%s is not log, default or off\n", monv);
            bad = 1;
        }
    }
    long own_tls = 0;
    int own_tls_said = 0; /* cfg or the environment said on or off (the trap's default, below) */
    if (cfg && cfg->own_tls) own_tls = cfg->own_tls > 0, own_tls_said = 1;
    else {
        int e = weft__env_long("WEFT_OWN_TLS", 0, 1, "0 or 1 (own TLS for every vthread)", &own_tls);
        bad |= e < 0;
        own_tls_said = e > 0;
    }
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    if (stack < 1024 * 1024) stack = 1024 * 1024; /* sanitizers need deeper stacks */
#endif
    /* a negative count is refused in deterministic mode too: that mode
     * overrides a count, not a bad one */
    if (bad || nl < 1 || nl > WEFT__MAX_CARRIERS || (cfg && cfg->carriers < 0)) {
        pthread_mutex_unlock(&R.init_lock);
        return -EINVAL;
    }
    int n = (int)nl;
    /* the monitor's stall threshold and bound (weft.h, "The monitor") */
    int64_t thr = cfg && cfg->pin_threshold_ns ? cfg->pin_threshold_ns : 0;
    if (!thr) thr = ms < 0 ? -1 : ms > 0 ? (int64_t)ms * 1000000 : PIN_THRESHOLD_NS;
    if (thr < 0 || det) thr = -1;
    /* Loom's scheduler compensates up to 256 carriers; twice the carriers,
     * the old default, hung a program whose blocking calls held more than
     * that while what they waited for was behind them (issue 26).  A spare
     * costs nothing until made: a thread and a ring, when first needed. */
    if (!maxc_env) maxc = WEFT__DEFAULT_SPARES;
    if (maxc < 0 || det) maxc = 0;
    if (maxc > WEFT__MAX_CARRIERS - n) maxc = WEFT__MAX_CARRIERS - n;
    weft__spin_set((int64_t)spin_us * 1000);
    if (!det) atomic_store_explicit(&weft__det_on, 0, memory_order_relaxed); /* (on since load with $WEFT_DETERMINISTIC: cfg said off) */
    /* before the first thread or ring of ours (spares.c says why) */
    (void)weft__membarrier_ready();
    int r = det ? weft__det_start(det_seed, det_trace) : 0;
    if (r < 0) goto fail0;
    if (det) atomic_store(&R.next_id, 1); /* ids are part of the replay */
    r = weft__io_start(cfg ? cfg->io : 0);
    if (r < 0) goto faildet;
    r = weft__stacks_init(stack);
    if (r < 0) goto failio;
    /* every slot a spare may take: R.c never moves while carriers read it */
    R.c = calloc(WEFT__MAX_CARRIERS, sizeof *R.c);
    if (!R.c) { r = -ENOMEM; goto fail1; }
    R.n = n;
    for (int i = 0; i < n; i++) {
        weft__carrier *c = weft__carrier_alloc(i);
        if (!c) { r = -ENOMEM; goto fail2; }
        c->go = 1;
        R.c[i] = c;
    }
    atomic_store(&R.nall, n);
    atomic_store(&R.nactive, 0);
    atomic_store(&R.n_pinned, 0);
    atomic_store(&R.n_hogs, 0);
    /* own TLS by default: where blocks cannot be made, said once and
     * dropped -- the vthreads run as they would without it */
    if (own_tls && weft__tls_probe() < 0) {
        fprintf(stderr, "weft: own TLS for every vthread was asked for, but this %s cannot give it: vthreads "
                        "use their carriers' TLS\n",
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
                "sanitizer build"
#else
                "C library"
#endif
        );
        own_tls = 0;
    }
    R.own_tls = (int)own_tls;
    /* the system call trap (hook/trap.c): before the carriers, which each
     * arm it on their own thread */
    r = weft__trap_start(cfg ? cfg->trap : 0, weft__hook_wanted(cfg ? cfg->hook : 0));
    if (r < 0) goto fail2;
    R.trap = r > 0;
    r = 0; /* (1 said "on": left in r, it kept the console and the monitor from starting) */
    /* the trap traps only vthreads with their own TLS (hook/trap.c, "Whom
     * it traps"): it turns own TLS on for every vthread unless that was
     * said off, and where there can be none it stays off */
    if (R.trap && !R.own_tls) {
        if (!own_tls_said && weft__tls_probe() == 0) R.own_tls = 1;
        else {
            fprintf(stderr, "weft: the system call trap traps only vthreads with their own TLS, and %s: it stays "
                            "off\n", own_tls_said ? "own TLS was turned off (WEFT_OWN_TLS, weft_runtime_opts.own_tls)"
                                                  : "this C library cannot give it");
            weft__trap_stop();
            R.trap = 0;
        }
    }
    R.pin_threshold = thr;
    R.max_comp = thr < 0 ? 0 : maxc;
    R.pin_log = pin_log;
    atomic_store(&R.stop, 0);
    atomic_store(&R.g0.nidle, 0);
    atomic_store(&R.g0.nspinning, 0);
    R.g0.c = R.c;
    R.g0.n = n;
    atomic_store(&R.gone_started, 0);
    atomic_store(&R.gone_finished, 0);
    atomic_store(&R.gone_switches, 0);
    atomic_store(&R.gone_steals, 0);
    atomic_store(&R.gone_parks, 0);
    atomic_store(&R.gone_nd_started, 0);
    atomic_store(&R.gone_nd_finished, 0);
    pthread_mutex_lock(&weft__groups.lock);
    weft__groups.down = 0;
    pthread_mutex_unlock(&weft__groups.lock);
    for (size_t i = 0; i < WEFT__MAX_CARRIERS / 64; i++) atomic_store(&R.idle_mask[i], 0);
    atomic_store(&R.live, 0);
    atomic_store(&R.peak, 0);
    atomic_store(&R.plat_started, 0);
    atomic_store(&R.plat_nd_started, 0);
    if (!R.segv_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &R.old_segv) == 0) R.segv_installed = 1;
    }
    weft__mon_prepare();
    int started = 0;
    atomic_store(&R.carriers_ready, 0);
    for (int i = 0; i < n; i++) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        int e = pthread_create(&R.c[i]->thread, &a, weft__carrier_main, R.c[i]);
        pthread_attr_destroy(&a);
        if (e) { r = -e; break; }
        char tn[16];
        snprintf(tn, sizeof tn, "weft-c%d", i);
        pthread_setname_np(R.c[i]->thread, tn); /* visible in top, perf, gdb */
        started++;
    }
    /* every carrier has its poller before weft_init returns: an fd table
     * filled by the program later cannot take a carrier's rings away */
    for (;;) {
        uint32_t k = atomic_load(&R.carriers_ready);
        if ((int)k >= started) break;
        struct timespec ts = {0, 5 * 1000000};
        futex(&R.carriers_ready, FUTEX_WAIT_PRIVATE, k, &ts, 0);
    }
    for (int i = 0; i < started && r == 0; i++) {
        if (R.c[i]->start_err) {
            r = R.c[i]->start_err;
            fprintf(stderr, "weft: carrier %d cannot start its I/O poller: %s\n", i, strerror(-r));
        }
    }
    /* the live console (observe/console.c): a fork child has none -- the
     * socket is its parent's ("Fork") */
    R.started_at = weft_now();
    R.generation++; /* (the deterministic clock starts at the same time each run: not an id) */
    if (started == n && r == 0 && !(lazy && R.inherit_cfg)) r = weft__console_start(cfg ? cfg->console : NULL);
    if (started == n && r == 0) {
        r = weft__mon_start(weft__hook_preloaded);
        if (r < 0) fprintf(stderr, "weft: cannot start the monitor thread: %s\n", strerror(-r));
    }
    if (started < n || r < 0) {
        weft__console_stop();
        atomic_store(&R.stop, 1);
        for (int i = 0; i < started; i++) weft__kick(R.c[i]);
        for (int i = 0; i < started; i++) pthread_join(R.c[i]->thread, NULL);
        goto fail2;
    }
    R.started_with = (weft_runtime_opts){.carriers = n, .stack_size = stack, .io = cfg ? cfg->io : 0,
                                   .hook = cfg ? cfg->hook : 0,
                                   .pin_threshold_ns = thr, .max_compensate = maxc ? (int)maxc : -1,
                                   .deterministic = det ? WEFT_DET_ON : WEFT_DET_OFF,
                                   .deterministic_seed = det_seed, .own_tls = R.own_tls ? 1 : -1,
                                   .trap = R.trap ? 1 : -1};
    weft__hook_start(cfg ? cfg->hook : 0);
    R.started_with.virtual_pthreads =
        weft__threads_start(cfg ? cfg->virtual_pthreads : 0, weft__hook_wanted(cfg ? cfg->hook : 0), stack) ? 1 : -1;
    R.inherit_cfg = 0;
    atomic_store(&R.up, 1);
    pthread_mutex_unlock(&R.init_lock);
    weft__dump_env();
    atomic_store_explicit(&weft__fatal_dump_hook, fatal_dump, memory_order_release);
    return 0;
fail2:
    free_carriers(n);
fail1:
    weft__stacks_fini();
failio:
    weft__io_stop();
faildet:
    weft__det_stop();
fail0:
    pthread_mutex_unlock(&R.init_lock);
    return r;
}

int weft_init(const weft_runtime_opts *cfg) { return init_runtime(cfg, 0); }

/* The lazy start (weft__ensure_init, sched.c): see "The lazy start". */
int weft__runtime_start_lazy(void) { return init_runtime(NULL, 1); }

#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
/* A daemon abandoned at shutdown leaves its frames' poison on its stack,
 * and ASan keeps a shadow across munmap: clean it (arch/stack.c, "ASan");
 * under TSan it holds a fiber, one of the ~8k threads TSan allows. */
static void clean_abandoned(weft__stack *s, void *unused) {
    weft_thread *t = (weft_thread *)s;
    if (atomic_load_explicit(&t->rstate, memory_order_relaxed) == WEFT__RS_FREE) return;
    weft__stack_done(s, t->sp);
#ifdef WEFT_TSAN
    weft__tsan_fiber_drop(t);
#endif
}
#endif

static void abandon_state(weft__stack *s, void *unused) {
    (void)unused;
    weft_thread *t = (weft_thread *)s;
    if (atomic_load_explicit(&t->rstate, memory_order_relaxed) == WEFT__RS_FREE) return;
    if (t->locals) weft__locals_abandon(t);
    if (t->tls) { /* its own TLS block: back to the pool, its destructors not run (unless
                   * another layer keeps it: weft__spawn_tls) */
        if (!t->tls_kept) weft__tls_put(t->tls);
        t->tls = NULL;
    }
}

void weft_shutdown(void) {
    if (weft__carrier_self()) { /* it would wait for itself: refuse, loudly */
        fprintf(stderr, "weft: weft_shutdown called from a vthread: ignored (call it from a platform thread)\n");
        return;
    }
    /* a scope this thread opened and did not close: its tasks would keep
     * the wait below going forever (scope.c, "Left open") */
    weft_scope *left = *(weft_scope **)weft__platform_scopes();
    if (left && atomic_load(&R.up)) weft__scopes_left_open("weft_shutdown was called", left);
    pthread_mutex_lock(&R.init_lock);
    if (!atomic_load(&R.up)) {
        pthread_mutex_unlock(&R.init_lock);
        return;
    }
    while (weft__nondaemon_live() > 0) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    /* a platform thread that woke the last of them may still be kicking a
     * carrier (plat_waking); a few microseconds at most */
    while (atomic_load(&R.plat_waking) > 0) sched_yield();
    weft__threads_stop();
    weft__hook_stop(); /* the vthreads left are daemons: abandoned */
    weft__trap_stop();
    weft__console_stop(); /* its snapshots read the carriers: it ends first */
    /* the blocking pool's threads wake vthreads: they end before carriers do */
    weft__io_drain();
    atomic_store(&R.stop, 1);
    weft__mon_stop(); /* no spare is made after this: nall is final */
    weft__groups_shutdown(); /* (their carriers see R.stop too) */
    int n = nall();
    for (int i = 0; i < n; i++) weft__kick(R.c[i]);
    for (int i = 0; i < n; i++) pthread_join(R.c[i]->thread, NULL);
    atomic_store(&R.up, 0);
    weft__tfifo_clear(&R.g0.inj);
    free_carriers(n);
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    weft__stacks_walk(clean_abandoned, NULL);
#endif
    /* daemons abandoned with local storage or their own TLS: freed (the
     * TLS block pooled), destructors not run */
    if (atomic_load(&weft__locals_live) > 0 || weft__tls_blocks() > 0) weft__stacks_walk(abandon_state, NULL);
    weft__stacks_fini();
    weft__async_stop(); /* what is left of the asynchronous operations, before io's state goes */
    weft__io_stop();
    weft__det_stop();
    pthread_mutex_unlock(&R.init_lock);
}

struct main_arg {
    int (*fn)(void *);
    void *arg;
    int result;
};

static void *main_tramp(void *p) {
    struct main_arg *m = p;
    m->result = m->fn(m->arg);
    return NULL;
}

int weft_main(int (*fn)(void *), void *arg) {
    if (!fn) return -EINVAL;
    int r = weft__ensure_init();
    if (r < 0) return r;
    struct main_arg m = {fn, arg, 0};
    weft_thread *t;
    weft_thread_opts a = {.name = "main"};
    r = weft_spawn(&t, main_tramp, &m, &a);
    if (r < 0) return r;
    r = (weft_join)(t, NULL);
    weft_shutdown();
    return r < 0 ? r : m.result;
}

/* ------------------------------------------------------------------------ */
/* stack overflow                                                            */
/* ------------------------------------------------------------------------ */

static size_t put_str(char *b, size_t at, size_t cap, const char *s) {
    while (*s && at + 1 < cap) b[at++] = *s++;
    return at;
}

static size_t put_u(char *b, size_t at, size_t cap, unsigned long long v, int base) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = "0123456789abcdef"[v % (unsigned)base]; v /= (unsigned)base; } while (v);
    while (n && at + 1 < cap) b[at++] = tmp[--n];
    return at;
}

/* SIG_DFL for sig, from inside a handler: through the C library's
 * sigaction (the prelude's rewrite), not signal(), which is hook.c's
 * wrapper and takes its table's lock. */
static void sig_default(int sig) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

/* A fault (si_code > 0: the kernel's, at an address) or a sent SIGSEGV
 * (si_code <= 0: kill, tgkill, raise, sigqueue -- si_addr is no address
 * then).  Only a fault can be a vthread's stack overflow, and only a fault
 * repeats when the handler returns; a sent one that nobody else handles
 * must end the process now, as the kernel's default would: SIG_DFL, and
 * the signal sent again to this thread, where it stays pending until the
 * handler returns and the mask it blocked comes off. */
static void segv_handler(int sig, siginfo_t *si, void *uctx) {
    weft__carrier *c = tls_carrier;
    /* c->cur is NULL while the scheduler runs on a vthread's stack: the
     * vthread is c->pending then */
    weft_thread *t = c ? (c->cur ? c->cur : c->pending) : NULL;
    int sent = si->si_code <= 0;
    if (!sent && t && weft__stack_guard_hit(&t->stk, si->si_addr)) {
        char b[256], name[32];
        fmt_name(t, name);
        size_t n = 0;
        n = put_str(b, n, sizeof b, "weft: stack overflow in vthread ");
        n = put_u(b, n, sizeof b, t->id, 10);
        n = put_str(b, n, sizeof b, " \"");
        n = put_str(b, n, sizeof b, name);
        n = put_str(b, n, sizeof b, "\" (stack ");
        n = put_u(b, n, sizeof b, t->stk.size / 1024, 10);
        n = put_str(b, n, sizeof b, " KiB, fault at 0x");
        n = put_u(b, n, sizeof b, (uintptr_t)si->si_addr, 16);
        n = put_str(b, n, sizeof b, ")\n");
        ssize_t w = write(2, b, n);
        (void)w;
        sig_default(SIGABRT);
        abort();
    }
    /* not ours: hand it on */
    if ((R.old_segv.sa_flags & SA_SIGINFO) && R.old_segv.sa_sigaction) {
        R.old_segv.sa_sigaction(sig, si, uctx);
        return;
    }
    if (R.old_segv.sa_handler != SIG_DFL && R.old_segv.sa_handler != SIG_IGN && R.old_segv.sa_handler) {
        R.old_segv.sa_handler(sig);
        return;
    }
    if (sent && R.old_segv.sa_handler == SIG_IGN) return; /* ignored, as it would have been */
    sig_default(SIGSEGV); /* a fault repeats and kills us as usual */
    /* (untrapped: it may have come while foreign code ran, hook/trap.c) */
    if (sent) WEFT__ALLOWED(syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGSEGV));
}
