/*
 * exp_micro.c -- "micro": the costs of weft's basic operations.  Each
 * benchmark starts the runtime with its own configuration (weft_init) and
 * stops it afterwards (weft_shutdown), so they do not influence each other.
 *
 *   switch          1 carrier, two vthreads that each call weft_yield()
 *                   --rounds times (5,000,000): ns_per_switch = wall / all
 *                   yields.  Compare: peers boost-context (jump_fcontext)
 *                   and go-gosched.
 *   switch-tls      the same with both vthreads having their own TLS
 *                   (weft_thread_opts.own_tls): every switch also sets the
 *                   fs base (fs_base: wrfsbase, or arch_prctl where the CPU
 *                   or kernel lacks FSGSBASE); ns_fs_write is one such
 *                   write alone (the fs base set to its own value, on the
 *                   calling thread, the same way): no switch to a vthread
 *                   with its own TLS can cost less over a plain switch than
 *                   one of those on the machine; ns_over_switch is the
 *                   difference from the switch line of the same run, and
 *                   tls_block_bytes what each such vthread's block takes.
 *   spawn-join      a vthread spawns -n (1,000,000) trivial vthreads (each
 *                   increments an atomic) and joins them, 1000 at a time;
 *                   the round runs twice and the second is reported
 *                   (first_round_s: the first), as the Go peer does.
 *   pingpong        two vthreads hand a turn to each other --rounds times
 *                   (2,000,000) with weft_unpark / weft_park; a round trip
 *                   is 2 switches.  The scheduler may keep both on one
 *                   carrier (a woken vthread runs on its waker's carrier);
 *                   cross_pct says how many hand-offs crossed carriers.
 *   pingpong-cross  the same with the two vthreads pinned to different
 *                   carriers (100,000 rounds): every hand-off wakes the
 *                   other carrier.  Compare: peer go-chan.
 *
 * Times come from weft_now() read inside the vthreads, from the moment both
 * parties are running to the moment the last one is done.  A carrier is
 * identified by pthread_self(), called through a volatile pointer so that
 * the compiler cannot reuse a value read before a blocking call (a vthread
 * can change carriers there).
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SWITCH_DEFAULT_ROUNDS 5000000L
#define SPAWN_JOIN_DEFAULT_N 1000000L
#define SPAWN_JOIN_BATCH 1000
#define PINGPONG_DEFAULT_ROUNDS 2000000L
#define PINGPONG_CROSS_DEFAULT_ROUNDS 100000L
#define MICRO_DEFAULT_CAP_S 120.0
#define PLACEMENT_TRIES 100

static pthread_t (*volatile carrier_id_fn)(void) = pthread_self;

/* The OS thread (carrier) the caller runs on right now. */
static uintptr_t carrier_id(void) { return (uintptr_t)carrier_id_fn(); }

static inline void cpu_relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* Starts the runtime for one benchmark. */
static int micro_init(int carriers) {
    weft_runtime_opts cfg = {.carriers = carriers};
    int r = weft_init(&cfg);
    if (r < 0) fprintf(stderr, "weft-bench: weft_init(carriers=%d): %s\n", carriers, strerror(-r));
    return r;
}

/*
 * Joins t from the main thread, giving up at the absolute weft_now() time
 * deadline: then the run is stuck, weft_dump shows where, and the caller
 * must leave the process without weft_shutdown.
 */
static int join_capped(weft_thread *t, int64_t deadline, const char *what) {
    int64_t old = weft_deadline_set(deadline);
    int r = weft_join(t, NULL);
    (void)weft_deadline_set(old);
    if (r == -ETIMEDOUT) {
        fprintf(stderr, "weft-bench: %s did not finish within the cap; thread dump:\n", what);
        (void)weft_dump(2, WEFT_DUMP_TEXT);
    } else if (r < 0) {
        fprintf(stderr, "weft-bench: weft_join (%s): %s\n", what, strerror(-r));
    }
    return r;
}

static int64_t cap_deadline(const bench_opts *o) {
    double cap = o->cap_s > 0 ? o->cap_s : MICRO_DEFAULT_CAP_S;
    return weft_now() + (int64_t)(cap * 1e9);
}

static void put_stats_delta(bench_result *r, const weft_stats *a, const weft_stats *b) {
    br_setl(r, "carriers", (long long)b->carriers);
    br_setl(r, "weft_switches", (long long)(b->switches - a->switches));
    br_setl(r, "weft_steals", (long long)(b->steals - a->steals));
}

/* Spawns fn(arg) as a joinable vthread, printing the error. */
static int spawn_or_say(weft_thread **t, void *(*fn)(void *), void *arg, const weft_thread_opts *a) {
    int r = weft_spawn(t, fn, arg, a);
    if (r < 0) fprintf(stderr, "weft-bench: weft_spawn (%s): %s\n", a && a->name ? a->name : "?", strerror(-r));
    return r;
}

/* ------------------------------------------------------------------------ */
/* switch                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct yield_run {
    long rounds;
    atomic_int arrived;
    atomic_int finished;
    _Atomic int64_t t0;
    int64_t t1;
} yield_run;

static void *yielder(void *arg) {
    yield_run *y = arg;
    atomic_fetch_add(&y->arrived, 1);
    while (atomic_load(&y->arrived) < 2) weft_yield();
    int64_t zero = 0;
    atomic_compare_exchange_strong(&y->t0, &zero, weft_now());
    for (long i = 0; i < y->rounds; i++) weft_yield();
    if (atomic_fetch_add(&y->finished, 1) == 1) y->t1 = weft_now();
    return NULL;
}

/* ns per switch of the last "switch" run, for switch-tls's difference */
static double last_switch_ns;

/* ns per write of the fs base, the way sched writes it for a vthread with
 * its own TLS (arch/tls.c): wrfsbase where AT_HWCAP2 allows it, else
 * arch_prctl(ARCH_SET_FS) -- here with the base it has, so nothing
 * changes; n writes.  -1: not x86-64, or the base cannot be read. */
static double fs_write_ns(long n) {
#if defined(__x86_64__)
    int fsgs = (getauxval(AT_HWCAP2) & 2) != 0;
    unsigned long base = 0;
    if (syscall(SYS_arch_prctl, 0x1003 /* ARCH_GET_FS */, &base) != 0) return -1;
    int64_t t0 = weft_now();
    for (long i = 0; i < n; i++) {
        if (fsgs) __asm__ volatile(".byte 0xf3, 0x48, 0x0f, 0xae, 0xd0" /* wrfsbase %rax */ ::"a"(base) : "memory");
        else syscall(SYS_arch_prctl, 0x1002 /* ARCH_SET_FS */, base);
    }
    return (double)(weft_now() - t0) / (double)n;
#else
    (void)n;
    return -1;
#endif
}

static int switch_run(const bench_opts *o, bench_report *rep, int own_tls) {
    const char *name = own_tls ? "switch-tls" : "switch";
    int r = micro_init(1);
    if (r < 0) return r;
    yield_run y = {.rounds = o->rounds ? o->rounds : SWITCH_DEFAULT_ROUNDS};
    weft_stats s0, s1;
    cpu_usage u0, u1;
    weft_stats_get(&s0);
    cpu_usage_get(&u0);
    weft_thread *a, *b;
    weft_thread_opts aa = {.name = "yield-a", .own_tls = own_tls ? 1 : -1},
                     ab = {.name = "yield-b", .own_tls = own_tls ? 1 : -1};
    if ((r = spawn_or_say(&a, yielder, &y, &aa)) < 0) {
        if (r == -ENOTSUP) { /* a sanitizer build, or a C library tls.c does not know: said, not failed */
            weft_shutdown();
            bench_result res;
            br_init(&res, name, "weft");
            br_set(&res, "status", "unsupported");
            return report_add_weft(rep, &res);
        }
        return r;
    }
    if ((r = spawn_or_say(&b, yielder, &y, &ab)) < 0) return r;
    int64_t dl = cap_deadline(o);
    if ((r = join_capped(a, dl, name)) < 0 || (r = join_capped(b, dl, name)) < 0) return r == -ETIMEDOUT ? EXP_LEAVE_NOW : r;
    weft_stats_get(&s1);
    cpu_usage_get(&u1);
    weft_shutdown();

    double wall = (double)(y.t1 - y.t0) / 1e9;
    long switches = 2 * y.rounds;
    double ns = wall * 1e9 / (double)switches;
    bench_result res;
    br_init(&res, name, "weft");
    br_set(&res, "status", "ok");
    br_setl(&res, "switches", switches);
    br_setf(&res, "wall_s", 3, wall);
    br_setf(&res, "ns_per_switch", 2, ns);
    if (own_tls) {
        /* how the fs base is written: wrfsbase where AT_HWCAP2 says the
         * CPU and kernel allow it (FSGSBASE, bit 1), else a system call */
        br_set(&res, "fs_base", "%s", (getauxval(AT_HWCAP2) & 2) ? "wrfsbase" : "arch_prctl");
        br_setl(&res, "tls_block_bytes", (long long)s1.tls_block_bytes);
        if (last_switch_ns > 0) br_setf(&res, "ns_over_switch", 2, ns - last_switch_ns);
        /* (a system call's worth of writes is enough to time: 200,000) */
        double fw = fs_write_ns((getauxval(AT_HWCAP2) & 2) ? 20000000L : 200000L);
        if (fw >= 0) br_setf(&res, "ns_fs_write", 2, fw);
    } else {
        last_switch_ns = ns;
    }
    put_stats_delta(&res, &s0, &s1);
    br_set_cpu(&res, &u0, &u1);
    return report_add_weft(rep, &res);
}

static int micro_switch(const bench_opts *o, bench_report *rep) { return switch_run(o, rep, 0); }
static int micro_switch_tls(const bench_opts *o, bench_report *rep) { return switch_run(o, rep, 1); }

/* ------------------------------------------------------------------------ */
/* spawn-join                                                                */
/* ------------------------------------------------------------------------ */

typedef struct sj_run {
    long n;
    atomic_long counter;
    double round_s[2];
    long round_count[2];
    int err;          /* first weft error (-errno) */
    const char *where;
    weft_thread *h[SPAWN_JOIN_BATCH];
} sj_run;

static void *trivial(void *arg) {
    atomic_fetch_add_explicit((atomic_long *)arg, 1, memory_order_relaxed);
    return NULL;
}

static void *sj_driver(void *arg) {
    sj_run *j = arg;
    for (int round = 0; round < 2 && !j->err; round++) {
        atomic_store(&j->counter, 0);
        int64_t t0 = weft_now();
        for (long i = 0; i < j->n && !j->err; i += SPAWN_JOIN_BATCH) {
            long m = j->n - i < SPAWN_JOIN_BATCH ? j->n - i : SPAWN_JOIN_BATCH, k = 0;
            for (; k < m; k++) {
                int r = weft_spawn(&j->h[k], trivial, &j->counter, NULL);
                if (r < 0) {
                    j->err = r;
                    j->where = "weft_spawn";
                    break;
                }
            }
            for (long q = 0; q < k; q++) {
                int r = weft_join(j->h[q], NULL);
                if (r < 0 && !j->err) {
                    j->err = r;
                    j->where = "weft_join";
                }
            }
        }
        j->round_s[round] = (double)(weft_now() - t0) / 1e9;
        j->round_count[round] = atomic_load(&j->counter);
    }
    return NULL;
}

static int micro_spawn_join(const bench_opts *o, bench_report *rep) {
    int r = micro_init(o->carriers);
    if (r < 0) return r;
    sj_run *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    j->n = o->n ? o->n : SPAWN_JOIN_DEFAULT_N;
    weft_stats s0, s1;
    cpu_usage u0, u1;
    weft_stats_get(&s0);
    cpu_usage_get(&u0);
    weft_thread *d;
    weft_thread_opts ad = {.name = "spawn-join"};
    if ((r = spawn_or_say(&d, sj_driver, j, &ad)) < 0) {
        free(j);
        return r;
    }
    if ((r = join_capped(d, cap_deadline(o), "spawn-join")) < 0) return r == -ETIMEDOUT ? EXP_LEAVE_NOW : r;
    weft_stats_get(&s1);
    cpu_usage_get(&u1);
    weft_shutdown();

    bench_result res;
    br_init(&res, "spawn-join", "weft");
    int counted = j->round_count[0] == j->n && j->round_count[1] == j->n;
    br_set(&res, "status", "%s", j->err ? "failed" : counted ? "ok" : "wrong_count");
    br_setl(&res, "n", j->n);
    br_setf(&res, "wall_s", 3, j->round_s[1]);
    br_setf(&res, "ns_per_task", 0, j->round_s[1] * 1e9 / (double)j->n);
    br_setf(&res, "first_round_s", 3, j->round_s[0]);
    br_setl(&res, "batch", SPAWN_JOIN_BATCH);
    put_stats_delta(&res, &s0, &s1);
    br_set_cpu(&res, &u0, &u1);
    if (j->err) {
        char e[32];
        br_set(&res, "stopped_by", "%s", errno_name(j->err, e, sizeof e));
        fprintf(stderr, "weft-bench: spawn-join: %s failed: %s\n", j->where, strerror(-j->err));
    }
    if (!counted) {
        br_setl(&res, "counted", j->round_count[1]);
        if (!j->err)
            fprintf(stderr, "weft-bench: BUG? spawn-join counted %ld and %ld tasks, expected %ld each round\n",
                    j->round_count[0], j->round_count[1], j->n);
    }
    free(j);
    return report_add_weft(rep, &res);
}

/* ------------------------------------------------------------------------ */
/* pingpong and pingpong-cross                                               */
/* ------------------------------------------------------------------------ */

enum { GO_WAIT = 0, GO_RUN = 1, GO_ABORT = 2 };

typedef struct pp_run pp_run;

/* What each party's vthread gets: the run and which party it is. */
typedef struct pp_party_arg {
    pp_run *p;
    int me;
} pp_party_arg;

struct pp_run {
    long rounds;
    int pinned;                   /* the cross variant: hold carriers apart */
    weft_thread *party[2];        /* A = 0, B = 1; written before go */
    atomic_int go;                /* GO_* */
    atomic_int quiesced;          /* parties done with each other's handle */
    atomic_int turn;              /* whose turn it is: 0 or 1 */
    atomic_int failed;            /* a party's weft call failed: both stop */
    _Atomic uintptr_t passer;     /* carrier of the last party to pass the turn */
    _Atomic uintptr_t home[2];    /* carrier each party started on; 0 = not yet */
    long cross[2];                /* hand-offs received from another carrier */
    long moved[2];                /* turns taken on a carrier other than home */
    int err[2];                   /* weft_park failure (-errno) */
    int64_t t0, t1;
    pp_party_arg arg[2];
};

/* Waits until it is me's turn (0), or until the other party has failed (1);
 * weft_park may return spuriously.  A negative errno when weft_park fails. */
static int wait_turn(pp_run *p, int me) {
    while (atomic_load_explicit(&p->turn, memory_order_acquire) != me) {
        if (atomic_load_explicit(&p->failed, memory_order_relaxed)) return 1;
        int r = weft_park(0);
        if (r < 0) return r;
    }
    return 0;
}

static int take_turn(pp_run *p, int me) {
    int r = wait_turn(p, me);
    if (r != 0) return r;
    uintptr_t here = carrier_id();
    if (atomic_load_explicit(&p->passer, memory_order_relaxed) != here) p->cross[me]++;
    if (here != atomic_load_explicit(&p->home[me], memory_order_relaxed)) p->moved[me]++;
    return 0;
}

static int pass_turn(pp_run *p, int me) {
    atomic_store_explicit(&p->passer, carrier_id(), memory_order_relaxed);
    atomic_store_explicit(&p->turn, 1 - me, memory_order_release);
    return weft_unpark(p->party[1 - me]);
}

static void *pp_party(void *arg) {
    pp_run *p = ((pp_party_arg *)arg)->p;
    int me = ((pp_party_arg *)arg)->me;
    atomic_store(&p->home[me], carrier_id());
    /* Until the start, A in the cross variant keeps its carrier busy, so that
     * B can only start on another one; everyone else lets its carrier work. */
    while (atomic_load(&p->go) == GO_WAIT) {
        if (p->pinned && me == 0) cpu_relax();
        else weft_yield();
    }
    if (atomic_load(&p->go) == GO_ABORT) {
        atomic_fetch_add(&p->quiesced, 1);
        return NULL;
    }
    if (me == 0) {
        atomic_store(&p->passer, carrier_id());
        p->t0 = weft_now();
    }
    int r = 0;
    for (long i = 0; i < p->rounds && r == 0; i++) {
        r = take_turn(p, me);
        if (r == 0) r = pass_turn(p, me);
    }
    /* A waits for B's last pass: then every switch is done. */
    if (me == 0 && r == 0) {
        r = wait_turn(p, 0);
        p->t1 = weft_now();
    }
    p->err[me] = r < 0 ? r : 0;
    if (r < 0) { /* let the other party end too */
        atomic_store(&p->failed, 1);
        (void)weft_unpark(p->party[1 - me]);
    }
    /* From here on this party does not touch the other's handle.  A party can
     * finish while the other is still inside weft_unpark(its handle), so the
     * main thread joins only after both have said so (pp_join). */
    atomic_fetch_add(&p->quiesced, 1);
    return NULL;
}

/*
 * Waits until both parties are done with each other's handles (polling every
 * millisecond: the times are taken inside the vthreads), then joins them.
 * 0, EXP_LEAVE_NOW when the cap passed (the runtime is stuck), or a
 * negative errno.
 */
static int pp_join(pp_run *p, int64_t deadline, const char *what) {
    while (atomic_load(&p->quiesced) < 2) {
        if (weft_now() > deadline) {
            fprintf(stderr, "weft-bench: %s did not finish within the cap; thread dump:\n", what);
            (void)weft_dump(2, WEFT_DUMP_TEXT);
            return EXP_LEAVE_NOW;
        }
        sleep_ns_os(1000 * 1000);
    }
    int r = join_capped(p->party[0], deadline, what);
    if (r == 0) r = join_capped(p->party[1], deadline, what);
    return r == -ETIMEDOUT ? EXP_LEAVE_NOW : r;
}

/* Waits (on the main thread) until *v is non-zero; 0 or -ETIMEDOUT. */
static int wait_nonzero(_Atomic uintptr_t *v, double secs) {
    double t0 = now_s();
    while (atomic_load(v) == 0) {
        if (now_s() - t0 > secs) return -ETIMEDOUT;
        sleep_ns_os(10 * 1000);
    }
    return 0;
}

/*
 * Starts both parties.  For the cross variant, A is pinned first; while it
 * spins on its carrier, B (pinned) can only start on another; if it still
 * lands on A's carrier, both are told to quit and it is tried again.
 * Returns the attempts used (>= 1), or a negative errno.
 */
static int pp_start(pp_run *p) {
    weft_thread_opts attr[2] = {{.name = "ping", .pinned = p->pinned}, {.name = "pong", .pinned = p->pinned}};
    for (int attempt = 1; attempt <= PLACEMENT_TRIES; attempt++) {
        atomic_store(&p->go, GO_WAIT);
        atomic_store(&p->quiesced, 0);
        atomic_store(&p->home[0], 0);
        atomic_store(&p->home[1], 0);
        int r = spawn_or_say(&p->party[0], pp_party, &p->arg[0], &attr[0]);
        if (r < 0) return r;
        if (p->pinned && wait_nonzero(&p->home[0], 5.0) < 0) {
            fprintf(stderr, "weft-bench: pingpong: the first party did not start within 5 s\n");
            return -ETIMEDOUT;
        }
        r = spawn_or_say(&p->party[1], pp_party, &p->arg[1], &attr[1]);
        if (r < 0) return r;
        if (!p->pinned) {
            atomic_store(&p->go, GO_RUN);
            return attempt;
        }
        if (wait_nonzero(&p->home[1], 5.0) < 0) {
            fprintf(stderr, "weft-bench: pingpong-cross: the second party did not start within 5 s "
                            "(the first one holds its carrier; are there 2 carriers?)\n");
            return -ETIMEDOUT;
        }
        if (atomic_load(&p->home[0]) != atomic_load(&p->home[1])) {
            atomic_store(&p->go, GO_RUN);
            return attempt;
        }
        atomic_store(&p->go, GO_ABORT);
        if ((r = pp_join(p, weft_now() + 5000000000LL, "pingpong-cross placement")) != 0)
            return r > 0 ? -ETIMEDOUT : r;
    }
    fprintf(stderr, "weft-bench: pingpong-cross: the two pinned vthreads landed on the same carrier %d times\n",
            PLACEMENT_TRIES);
    return -EAGAIN;
}

static int micro_pingpong(const bench_opts *o, bench_report *rep, int cross) {
    const char *name = cross ? "pingpong-cross" : "pingpong";
    int r = micro_init(o->carriers);
    if (r < 0) return r;
    weft_stats s0, s1;
    weft_stats_get(&s0);
    bench_result res;
    br_init(&res, name, "weft");
    if (cross && s0.carriers < 2) {
        weft_shutdown();
        br_set(&res, "status", "skipped");
        br_set(&res, "reason", "needs_2_carriers");
        br_setl(&res, "carriers", (long long)s0.carriers);
        return report_add_weft(rep, &res);
    }
    pp_run *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->rounds = o->rounds ? o->rounds : cross ? PINGPONG_CROSS_DEFAULT_ROUNDS : PINGPONG_DEFAULT_ROUNDS;
    p->pinned = cross;
    p->arg[0] = (pp_party_arg){p, 0};
    p->arg[1] = (pp_party_arg){p, 1};
    cpu_usage u0, u1;
    cpu_usage_get(&u0);
    int attempts = pp_start(p);
    if (attempts < 0) return attempts == -ETIMEDOUT ? EXP_LEAVE_NOW : attempts; /* parties may be stuck: leave */
    int64_t dl = cap_deadline(o);
    if ((r = pp_join(p, dl, name)) != 0) return r;
    weft_stats_get(&s1);
    cpu_usage_get(&u1);
    weft_shutdown();

    double wall = (double)(p->t1 - p->t0) / 1e9;
    long switches = 2 * p->rounds;
    int err = p->err[0] ? p->err[0] : p->err[1];
    long moved = p->moved[0] + p->moved[1];
    const char *status = err ? "failed" : cross && moved ? "pin_violated" : "ok";
    br_set(&res, "status", "%s", status);
    br_setl(&res, "switches", switches);
    br_setf(&res, "wall_s", 3, wall);
    br_setf(&res, "ns_per_switch", 1, wall * 1e9 / (double)switches);
    br_setf(&res, "cross_pct", 1, 100.0 * (double)(p->cross[0] + p->cross[1]) / (double)switches);
    if (cross) {
        br_setl(&res, "pinned_moves", moved);
        br_setl(&res, "attempts", attempts);
    }
    put_stats_delta(&res, &s0, &s1);
    br_set_cpu(&res, &u0, &u1);
    if (err) {
        char e[32];
        br_set(&res, "stopped_by", "%s", errno_name(err, e, sizeof e));
        fprintf(stderr, "weft-bench: %s: weft_park failed: %s\n", name, strerror(-err));
    }
    if (cross && moved)
        fprintf(stderr, "weft-bench: BUG? pinned vthreads took %ld turns away from their first carrier\n", moved);
    free(p);
    return report_add_weft(rep, &res);
}

/* ------------------------------------------------------------------------ */

static int micro_pingpong_same(const bench_opts *o, bench_report *rep) { return micro_pingpong(o, rep, 0); }
static int micro_pingpong_cross(const bench_opts *o, bench_report *rep) { return micro_pingpong(o, rep, 1); }

/* ------------------------------------------------------------------------ */
/* hook: what libc interposition costs a call that does not wait             */
/* ------------------------------------------------------------------------ */

/*
 * A 1-byte write then read on a pipe, R times, on one vthread of a
 * 1-carrier runtime, four ways in one run: the system calls themselves
 * (syscall(2): the floor), write/read with hooks off (the pass-through
 * every program linking weft pays), with hooks on (the non-blocking first
 * attempt: pwritev2/preadv2 RWF_NOWAIT), weft_write/weft_read, and --
 * "trap" -- the system calls themselves again with the hooks and the
 * system call trap on (weft_runtime_opts.trap): each traps, and the
 * hooks' write and read make it (what a call the C library makes on its
 * own costs, against "on": the same work reached through the PLT), and
 * "trap-floor" -- the kernel's part of that: the same system calls on a
 * plain thread (no runtime) that this file arms for syscall user dispatch
 * itself, with a SIGSYS handler that only makes the call and returns (a
 * restorer of its own in the range the kernel lets through, as weft's).
 * No trap can cost less than trap-floor on the machine; "trap" minus
 * "trap-floor" is what weft's handler adds.  ns_per_call_over_syscall:
 * (this mode's pair - the syscall mode's pair) / 2, one call's extra.
 */
enum { HOOK_SYSCALL, HOOK_OFF, HOOK_ON, HOOK_WEFT, HOOK_TRAP, HOOK_FLOOR, HOOK_MODES };
static const char *const hook_mode_name[HOOK_MODES] = {"syscall", "off", "on", "weft", "trap", "trap-floor"};

typedef struct hook_run {
    int mode;
    long rounds;
    int fd[2];
    int err;
    double wall_s;
} hook_run;

#if defined(__x86_64__) && defined(__linux__)
/*
 * The floor's handler and restorer.  The range [fl_begin, fl_end) is what
 * the kernel lets through: the restorer's rt_sigreturn and fl_sys, the
 * handler's own system call (the selector stays 1 throughout: nothing
 * outside the range makes a call while the floor runs).
 */
extern char weft_bench_fl_begin[], weft_bench_fl_end[], weft_bench_fl_restorer[];
long weft_bench_fl_sys(long nr, long a, long b, long c);
__asm__(".text\n"
        ".globl weft_bench_fl_begin\n.hidden weft_bench_fl_begin\nweft_bench_fl_begin:\n"
        ".globl weft_bench_fl_restorer\n.hidden weft_bench_fl_restorer\nweft_bench_fl_restorer:\n"
        "  mov $15, %eax\n  syscall\n  hlt\n"
        ".globl weft_bench_fl_sys\n.hidden weft_bench_fl_sys\nweft_bench_fl_sys:\n"
        "  mov %rdi, %rax\n  mov %rsi, %rdi\n  mov %rdx, %rsi\n  mov %rcx, %rdx\n  syscall\n  ret\n"
        ".globl weft_bench_fl_end\n.hidden weft_bench_fl_end\nweft_bench_fl_end:\n");

#include <signal.h>
#include <sys/prctl.h>
#include <ucontext.h>
#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#endif
#ifndef PR_SYS_DISPATCH_OFF
#define PR_SYS_DISPATCH_OFF 0
#define PR_SYS_DISPATCH_ON 1
#endif

struct fl_ksigaction {
    void (*handler)(int, siginfo_t *, void *);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

static void fl_on_sigsys(int sig, siginfo_t *si, void *ucv) {
    (void)sig;
    greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
    g[REG_RAX] = weft_bench_fl_sys(si->si_syscall, g[REG_RDI], g[REG_RSI], g[REG_RDX]);
}

/* R write+read pairs trapped on this thread; -errno where the kernel refuses. */
static int hook_floor(hook_run *h) {
    static volatile unsigned char sel;
    struct fl_ksigaction sa = {fl_on_sigsys, SA_SIGINFO | SA_NODEFER | 0x04000000UL /* SA_RESTORER */,
                               (void (*)(void))(void *)weft_bench_fl_restorer, 0},
                         old;
    if (syscall(SYS_rt_sigaction, SIGSYS, &sa, &old, 8) != 0) return -errno;
    sel = 0;
    int r = 0;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, (unsigned long)weft_bench_fl_begin,
              (unsigned long)(weft_bench_fl_end - weft_bench_fl_begin), &sel) != 0)
        r = -errno;
    else {
        char c = 'x';
        int64_t t0 = weft_now(); /* vDSO: no system call */
        sel = 1;
        for (long i = 0; i < h->rounds && !h->err; i++) {
            long w = syscall(SYS_write, h->fd[1], &c, 1);
            long rd = syscall(SYS_read, h->fd[0], &c, 1);
            if (w != 1 || rd != 1) h->err = errno ? errno : EIO;
        }
        sel = 0;
        h->wall_s = (double)(weft_now() - t0) / 1e9;
        prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0);
    }
    syscall(SYS_rt_sigaction, SIGSYS, &old, NULL, 8);
    return r;
}
#else
static int hook_floor(hook_run *h) {
    (void)h;
    return -ENOTSUP;
}
#endif


static void *hook_body(void *arg) {
    hook_run *h = arg;
    char c = 'x';
    int64_t t0 = weft_now();
    for (long i = 0; i < h->rounds && !h->err; i++) {
        ssize_t w, r;
        switch (h->mode) {
        case HOOK_SYSCALL:
        case HOOK_TRAP:
            w = syscall(SYS_write, h->fd[1], &c, 1);
            r = syscall(SYS_read, h->fd[0], &c, 1);
            break;
        case HOOK_OFF:
        case HOOK_ON:
            w = write(h->fd[1], &c, 1);
            r = read(h->fd[0], &c, 1);
            break;
        default:
            w = weft_write(h->fd[1], &c, 1);
            r = weft_read(h->fd[0], &c, 1);
            if (w < 0) errno = (int)-w, w = -1;
            if (r < 0) errno = (int)-r, r = -1;
        }
        if (w != 1 || r != 1) h->err = errno ? errno : EIO;
    }
    h->wall_s = (double)(weft_now() - t0) / 1e9;
    return NULL;
}

/* The floor on a plain thread of its own (no runtime, nothing else armed). */
static void *hook_floor_thread(void *arg) {
    hook_run *h = arg;
    int r = hook_floor(h);
    if (r < 0 && !h->err) h->err = -r;
    return NULL;
}

static int micro_hook_floor(long rounds, double syscall_pair_ns, bench_report *rep) {
    hook_run h = {.mode = HOOK_FLOOR, .rounds = rounds};
    if (pipe(h.fd) != 0) return -errno;
    pthread_t th;
    int r = pthread_create(&th, NULL, hook_floor_thread, &h);
    if (r == 0) pthread_join(th, NULL);
    else h.err = r;
    close(h.fd[0]);
    close(h.fd[1]);
    bench_result res;
    char e[32];
    br_init(&res, "hook", "weft");
    br_set(&res, "status", "%s", h.err == ENOTSUP || h.err == EINVAL ? "unsupported" : h.err ? "failed" : "ok");
    br_set(&res, "mode", "%s", hook_mode_name[HOOK_FLOOR]);
    br_setl(&res, "pairs", rounds);
    if (!h.err) {
        double pair = h.wall_s * 1e9 / (double)rounds;
        br_setf(&res, "wall_s", 3, h.wall_s);
        br_setf(&res, "ns_per_write_read", 1, pair);
        br_setf(&res, "ns_per_call_over_syscall", 1, (pair - syscall_pair_ns) / 2);
    } else
        br_set(&res, "err", "%s", errno_name(-h.err, e, sizeof e));
    return report_add_weft(rep, &res);
}

static int micro_hook(const bench_opts *o, bench_report *rep) {
    long rounds = o->rounds ? o->rounds : 1000000;
    double syscall_pair_ns = 0;
    for (int mode = 0; mode < HOOK_MODES; mode++) {
        if (mode == HOOK_FLOOR) {
            int r = micro_hook_floor(rounds, syscall_pair_ns, rep);
            if (r < 0) return r;
            continue;
        }
        weft_runtime_opts cfg = {.carriers = 1,
                                 .hook = mode == HOOK_ON || mode == HOOK_TRAP ? WEFT_HOOK_ON : WEFT_HOOK_OFF,
                                 .trap = mode == HOOK_TRAP ? 1 : -1};
        int r = weft_init(&cfg);
        if (r < 0) {
            fprintf(stderr, "weft-bench: weft_init: %s\n", strerror(-r));
            return r;
        }
        weft_stats s0, s1;
        weft_stats_get(&s0);
        hook_run h = {.mode = mode, .rounds = rounds};
        if (pipe(h.fd) != 0) {
            r = -errno;
            weft_shutdown();
            return r;
        }
        weft_thread *t;
        weft_thread_opts a = {.name = "hook"};
        if ((r = spawn_or_say(&t, hook_body, &h, &a)) < 0) return r;
        if ((r = join_capped(t, cap_deadline(o), "hook")) < 0) return r == -ETIMEDOUT ? EXP_LEAVE_NOW : r;
        int active = weft_hook_active();
        weft_stats_get(&s1);
        weft_shutdown();
        close(h.fd[0]);
        close(h.fd[1]);
        bench_result res;
        char e[32];
        br_init(&res, "hook", "weft");
        br_set(&res, "status", "%s", h.err ? "failed" : "ok");
        br_set(&res, "mode", "%s", hook_mode_name[mode]);
        br_setl(&res, "hooks_active", active);
        br_setl(&res, "trapped", (long)(s1.trapped - s0.trapped));
        br_setl(&res, "pairs", rounds);
        br_setf(&res, "wall_s", 3, h.wall_s);
        double pair = h.wall_s * 1e9 / (double)rounds;
        if (mode == HOOK_SYSCALL) syscall_pair_ns = pair;
        br_setf(&res, "ns_per_write_read", 1, pair);
        br_setf(&res, "ns_per_call_over_syscall", 1, (pair - syscall_pair_ns) / 2);
        if (h.err) br_set(&res, "err", "%s", errno_name(-h.err, e, sizeof e));
        if ((r = report_add_weft(rep, &res)) < 0) return r;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* local: what a per-request value costs to read                            */
/* ------------------------------------------------------------------------ */

/*
 * One vthread of a 1-carrier runtime reads a value R times five ways, in
 * one run: weft_local_get, weft_scoped_get with the key bound 3
 * weft_scoped_run levels up (two other keys bound in between, so the get
 * walks three frames) and with a key bound by the innermost one,
 * pthread_getspecific, and a plain __thread read.
 * Every loop has the same two empty asm statements per get: the first
 * takes the key as an input/output register and clobbers memory, so the
 * compiler can neither hoist the get out of the loop nor reuse an earlier
 * result (for the __thread read: a fresh load each time); the second
 * consumes the value.  No blocking call happens inside a loop, so the
 * __thread read and pthread_getspecific are right there (not after a
 * migration: that is what they cannot do).  The five take turns in blocks
 * of a million gets, so that load from elsewhere weighs on all alike.
 * ns_per_get = the variant's time / R; x_thread_read: that divided by the
 * __thread read's (same run).
 */
enum { LOCAL_WEFT, LOCAL_SCOPED, LOCAL_SCOPED1, LOCAL_PTHREAD, LOCAL_TLS, LOCAL_MODES };
static const char *const local_mode_name[LOCAL_MODES] = {"weft_local_get", "weft_scoped_get", "weft_scoped_get",
                                                         "pthread_getspecific", "thread_read"};
#define LOCAL_DEFAULT_ROUNDS 50000000L

static __thread void *local_tls;
static weft_scoped_key local_sk = WEFT_SCOPED_KEY("bench"), local_sk2 = WEFT_SCOPED_KEY("bench-2"),
                       local_sk3 = WEFT_SCOPED_KEY("bench-3");
static char local_value; /* its address is the value every variant reads */

typedef struct local_run {
    long rounds;
    weft_local_key wk;
    pthread_key_t pk;
    double ns[LOCAL_MODES];
    int bad; /* a get read the wrong value */
} local_run;

#define LOCAL_BLOCK 1000000L /* gets per timed block; the modes take turns block by block */

#define LOCAL_LOOP(mode, key, get, n)                                                     \
    do {                                                                                  \
        int64_t t0_ = weft_now();                                                         \
        for (long i_ = 0; i_ < (n); i_++) {                                               \
            __asm__ volatile("" : "+r"(key) : : "memory");                                \
            void *v_ = (get);                                                             \
            __asm__ volatile("" : : "r"(v_));                                             \
        }                                                                                 \
        ns[mode] += weft_now() - t0_;                                                     \
    } while (0)

static inline void *scoped_get_value(weft_scoped_key *k) {
    void *v = NULL;
    (void)weft_scoped_get(k, &v);
    return v;
}

/* The innermost level: every variant's loop.  Each loop starts a 64-byte
 * line: one this small runs a turn in a cycle or two, and one that
 * happens to straddle a line boundary takes a cycle more -- which moved
 * weft_local_get from 1.1x to 2.0x a __thread read between two builds
 * that differed only in an unrelated loop added before it (GCC 12, AMD
 * EPYC).  Aligned, no variant wins or loses by where it fell. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("align-loops=64")))
#endif
static int local_loops(void *arg) {
    local_run *l = arg;
    weft_local_key wk = l->wk;
    pthread_key_t pk = l->pk;
    weft_scoped_key *sk = &local_sk, *sk1 = &local_sk3;
    void *tls_key = NULL; /* (the __thread read has no key: this stands in, as the asm's operand) */
    local_tls = &local_value;
    if (pthread_setspecific(pk, &local_value) != 0) l->bad = 1;
    if (weft_local_get(wk) != &local_value || scoped_get_value(sk) != &local_value ||
        scoped_get_value(sk1) != &local_sk3 ||
        pthread_getspecific(pk) != &local_value || local_tls != &local_value)
        l->bad = 1;
    /* the five take turns, a block each, so that a machine whose load
     * changes during the run weighs on all of them alike; a warm-up block
     * of each first */
    int64_t ns[LOCAL_MODES] = {0};
    for (long done = -LOCAL_BLOCK; done < l->rounds; done += LOCAL_BLOCK) {
        long n = l->rounds - done < LOCAL_BLOCK ? l->rounds - done : LOCAL_BLOCK;
        if (done < 0) n = LOCAL_BLOCK / 10;
        LOCAL_LOOP(LOCAL_WEFT, wk, weft_local_get(wk), n);
        LOCAL_LOOP(LOCAL_SCOPED, sk, scoped_get_value(sk), n);
        LOCAL_LOOP(LOCAL_SCOPED1, sk1, scoped_get_value(sk1), n);
        LOCAL_LOOP(LOCAL_PTHREAD, pk, pthread_getspecific(pk), n);
        LOCAL_LOOP(LOCAL_TLS, tls_key, local_tls, n);
        if (done < 0) memset(ns, 0, sizeof ns);
    }
    for (int m = 0; m < LOCAL_MODES; m++) l->ns[m] = (double)ns[m] / (double)l->rounds;
    (void)tls_key;
    return 0;
}

static int local_level2(void *arg) {
    weft_binding b = {&local_sk3, &local_sk3};
    return weft_scoped_run(&b, 1, local_loops, arg);
}

static int local_level1(void *arg) {
    weft_binding b = {&local_sk2, &local_sk2};
    return weft_scoped_run(&b, 1, local_level2, arg);
}

static void *local_body(void *arg) {
    local_run *l = arg;
    if (weft_local_set(l->wk, &local_value) != 0) l->bad = 1;
    weft_binding b = {&local_sk, &local_value};
    if (weft_scoped_run(&b, 1, local_level1, l) != 0) l->bad = 1;
    return NULL;
}

static int micro_local(const bench_opts *o, bench_report *rep) {
    /* the vthread computes on purpose, seconds without a switch: no
     * monitor reports (it would call it a hog) */
    weft_runtime_opts cfg = {.carriers = 1, .pin_threshold_ns = -1};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-bench: weft_init: %s\n", strerror(-r));
        return r;
    }
    local_run l = {.rounds = o->rounds ? o->rounds : LOCAL_DEFAULT_ROUNDS};
    if ((r = weft_local_key_create(&l.wk, NULL)) < 0) {
        fprintf(stderr, "weft-bench: weft_local_key_create: %s\n", strerror(-r));
        weft_shutdown();
        return r;
    }
    if ((r = pthread_key_create(&l.pk, NULL)) != 0) {
        fprintf(stderr, "weft-bench: pthread_key_create: %s\n", strerror(r));
        weft_local_key_delete(l.wk);
        weft_shutdown();
        return -r;
    }
    weft_thread *t;
    weft_thread_opts a = {.name = "local"};
    if ((r = spawn_or_say(&t, local_body, &l, &a)) < 0) return r;
    if ((r = join_capped(t, cap_deadline(o), "local")) < 0) return r == -ETIMEDOUT ? EXP_LEAVE_NOW : r;
    weft_shutdown();
    weft_local_key_delete(l.wk);
    pthread_key_delete(l.pk);
    for (int m = 0; m < LOCAL_MODES; m++) {
        bench_result res;
        br_init(&res, "local", "weft");
        br_set(&res, "status", "%s", l.bad ? "failed" : "ok");
        br_set(&res, "get", "%s", local_mode_name[m]);
        if (m == LOCAL_SCOPED) br_setl(&res, "levels_up", 3);
        if (m == LOCAL_SCOPED1) br_setl(&res, "levels_up", 1);
        br_setl(&res, "gets", l.rounds);
        br_setf(&res, "ns_per_get", 2, l.ns[m]);
        if (l.ns[LOCAL_TLS] > 0) br_setf(&res, "x_thread_read", 2, l.ns[m] / l.ns[LOCAL_TLS]);
        if ((r = report_add_weft(rep, &res)) < 0) return r;
    }
    return 0;
}

int exp_micro(const bench_opts *o, bench_report *rep) {
    static const struct {
        int bit;
        const char *name;
        int (*run)(const bench_opts *, bench_report *);
    } benches[] = {
        {MICRO_SWITCH, "switch", micro_switch},
        {MICRO_SWITCH_TLS, "switch-tls", micro_switch_tls},
        {MICRO_SPAWN_JOIN, "spawn-join", micro_spawn_join},
        {MICRO_PINGPONG, "pingpong", micro_pingpong_same},
        {MICRO_PINGPONG_CROSS, "pingpong-cross", micro_pingpong_cross},
        {MICRO_CHAN, "chan-pingpong", micro_chan_pingpong},
        {MICRO_CHAN_BUF, "chan-buffered", micro_chan_buffered},
        {MICRO_MUTEX, "mutex", micro_mutex},
        {MICRO_SELECT, "select", micro_select},
        {MICRO_HOOK, "hook", micro_hook},
        {MICRO_LOCAL, "local", micro_local},
    };
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
        if (!(o->micro & benches[i].bit)) continue;
        int r = benches[i].run(o, rep);
        if (r == 0) continue;
        /* Stuck or failed half-way: the runtime may hold vthreads that never
         * end, so neither weft_shutdown nor the next benchmark's weft_init can
         * be trusted.  Say so on a line and leave. */
        bench_result f;
        char e[32];
        br_init(&f, benches[i].name, "weft");
        br_set(&f, "status", "%s", r == EXP_LEAVE_NOW ? "timeout" : "error");
        if (r < 0) br_set(&f, "err", "%s", errno_name(r, e, sizeof e));
        (void)report_add_weft(rep, &f);
        return EXP_LEAVE_NOW;
    }
    return 0;
}
