/*
 * The scheduler's private header: the carrier and the runtime, so that the
 * rooms of the sched layer can each hold one concern --
 *
 *   sched.c     the core: queues, picking, switching, parking, spawning,
 *               the carrier threads' loop (and everything on the hot paths)
 *   spares.c    the monitor: rescues, stalls, spare carriers
 *   group.c     carrier groups, their carriers included
 *   counters.c  the counters and carrier views the observe layer reads
 *
 * -- and so that the runtime layer above them all (runtime/runtime.c: init,
 * shutdown, fork, the environment) can build and tear down what they share.
 * Nothing outside those files includes this header: the rest of weft sees
 * the scheduler through sched.h.
 *
 * What lives here and why.  struct weft__carrier and the runtime, R (the
 * object weft__rt, page-aligned as it always was; its fields keep their
 * order and cache-line grouping).  And the small helpers more than one room
 * needs, as static inline functions: each room gets its own copy, and no
 * hot path of sched.c pays a call into another file for them -- the hot
 * paths' helpers (queues, pick, switch, park, spawn) stay static in
 * sched.c; what the other rooms need of sched.c's static functions it
 * exports by a thin weft__ wrapper (listed at the end), so that the hot
 * code is compiled exactly as before.
 *
 * Threads touching what: c->cur, pending_*, stacks and live_delta are owned
 * by c's OS thread; the yield FIFO too, but for the monitor, through its
 * gate (gate_in); the deque's bottom by c, its top by anyone; lifo,
 * mailbox, timers and wake_seq by anyone (atomics / locks).  Counters are
 * written by their carrier and read racily by weft_stats_get and the
 * monitor; mon_* are the monitor's; stall_* are written by the monitor and
 * read by the dump; shared by the monitor (and read by c); dormant by c
 * and by wake_carrier.  R.c[k] and R.nall are written by the monitor (a
 * spare) or weft_init, before anything reads them.
 */
#ifndef WEFT_SCHED_INTERNAL_H
#define WEFT_SCHED_INTERNAL_H

#include "sched.h"
#include "group.h"
#include "deque.h"
#include "det.h"
#include "timer.h"
#include "tfifo.h"

#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS 50000 /* how long an idle carrier looks for work before sleeping ($WEFT_SPIN_US) */
#define PIN_THRESHOLD_NS 20000000 /* a vthread holding its carrier this long is a stall (default) */
/* The monitor's lines on stderr ($WEFT_MONITOR; R.pin_log).  A stall is
 * counted, shown by the dump and compensated at every level; its lines are
 * written at once (ALL), only once it has lasted MONLOG_LONG_NS (LONG, the
 * default: a program's stderr is its own, and a short stall is weft's
 * business), or never (OFF).  The same goes for the bound's line. */
enum { WEFT__MONLOG_OFF, WEFT__MONLOG_LONG, WEFT__MONLOG_ALL };
#define MONLOG_LONG_NS 1000000000

struct weft__carrier {
    /* owned by the carrier's OS thread; the first cache line is all the
     * yield/switch path touches here */
    weft_thread *cur;
    weft_thread *pending;
    weft_thread *yq_head, *yq_tail; /* yielded vthreads: the owner's FIFO (see "The monitor") */
    _Atomic uint64_t n_switches;    /* (counter: read racily by stats and the monitor) */
    int pending_op;
    uint32_t slow_countdown;
    uint32_t lifo_streak;
    _Atomic uint32_t slow_turn;     /* (also the monitor's sign of life from a lone yielder) */
    _Atomic int yq_thief;           /* the monitor is taking the yield FIFO */
    uint8_t yq_private;             /* the FIFO may hold vthreads others could run (set at init) */
    uint8_t det;                    /* weft__det_on when the carrier was made: it cannot change
                                     * while carriers exist; the switch path tests it here, in the
                                     * line it reads anyway, not in a global */
    weft__window *win;              /* local.c: the window of the vthread it runs (its thread's) */
    void *tp_cur;                   /* own TLS (arch/tls.c): the block the thread pointer is set to,
                                     * NULL: the carrier's own (tp_own) */
    void *tp_own;                   /* the carrier thread's own thread pointer */
    void *const *tls_window;        /* its window's slots: what weft__tls_window holds on it */
    /* the system call trap (hook/trap.c): sud[0] the selector the kernel
     * reads (1: trap, while a vthread runs code not weft's), sud[1] "arm
     * again at the next hook's return" (trap.c); saved in and restored from
     * the vthread at every switch.  sud_sel: sud, or NULL where the
     * runtime does not trap (what weft__sud_sel holds on this carrier) */
    _Alignas(2) unsigned char sud[2];
    unsigned char *sud_sel;
#ifdef WEFT_TSAN
    _Atomic int yq_lock;            /* the gate also as a lock: 1 owner in, 2 monitor */
#endif
    void *sched_sp;
    uint64_t rng;
    int index;
    weft_group *grp;     /* its group (group.c); it runs that group's vthreads only */
    int gidx;            /* its index in grp->c and grp's idle mask (the default group: index) */
    int spinning;
    _Atomic int shared;  /* takes others' work: steals, the injection queue (a retired spare: 0) */
    int64_t spin_budget; /* this carrier's next spin, ns (see the top comment) */
    uint64_t id_next, id_end;
    void *tsan_fiber;
    void *asan_fake;
    const void *asan_bottom;
    size_t asan_size;
    void *altstack;
    pthread_t thread;
    /* counters: written by the owner (relaxed), read by anyone */
    _Atomic uint64_t n_started, n_finished, n_steals, n_parks;
    _Atomic uint64_t nd_started, nd_finished; /* non-daemon */
    _Atomic int64_t live_delta;
    /* shared */
    _Alignas(WEFT__CACHELINE) _Atomic(weft_thread *) lifo;
    _Alignas(WEFT__CACHELINE) weft__deque dq;
    weft__tfifo mbox;
    _Alignas(WEFT__CACHELINE) _Atomic uint32_t wake_seq;
    weft__poller *_Atomic poller;  /* set by the carrier at start; read by kickers */
    int start_err;                  /* the poller's creation failed: -errno */
    _Atomic int dormant;            /* a retired spare asleep: wake_carrier kicks it */
    _Alignas(WEFT__CACHELINE) weft__theap timers;
    /* the monitor's (see "The monitor"); stall_* also read by the dump */
    uint64_t mon_seen;              /* progress (switches + slow turns) at its last look */
    int64_t mon_since;              /* when it first saw mon_seen */
    int64_t mon_last;               /* its last look */
    int64_t mon_from;               /* the look before mon_since's: mon_seen was reached after it */
    int mon_stuck;                  /* its last look found no progress */
    int stall_said;                 /* the open stall's line was written (WEFT__MONLOG_LONG: once it lasts) */
    int64_t trim_retried;           /* (its own) the stacks' trim time it last went back for as the last to idle */
    int64_t mon_cpu0;               /* the thread's CPU time at the first look that saw no progress; -1 */
    clockid_t cpuclk;               /* the carrier thread's CPU clock */
    int cpuclk_ok;
    _Atomic int stall;              /* WEFT__STALL_*: an event is open */
    _Atomic long stall_sysno;
    _Atomic int64_t stall_since;
    _Atomic uint64_t stall_vid;
    _Atomic uint64_t stall_name[4];
    /* a pinned stall: its blocking call's site as the monitor found it,
     * return addresses, named only when shown (weft__stall_site_name) */
    _Atomic uintptr_t stall_site[WEFT__SITE_FRAMES];
    int spare;                      /* made by the monitor (index >= R.n) */
    int tid;                        /* the carrier's kernel thread id */
    _Atomic uint32_t ready;         /* a spare: its thread made its poller (start_err says how) */
    _Atomic uint32_t go;            /* a spare: published, may run */
    /* owner-only, large, cold: last */
    weft__stack_cache stacks;
};

/* The runtime: one object, page-aligned for the reason given at sched.c's
 * carrier_alloc. */
struct weft__rt {
    pthread_mutex_t init_lock;
    _Atomic int up;            /* 1 while running */
    _Atomic uint32_t carriers_ready; /* carriers past their start (weft_init waits) */
    int n;                     /* carriers configured: R.c[0 .. n-1] */
    _Atomic int nall;          /* and the monitor's spares after them (grows; "Spares") */
    weft__carrier **c;         /* WEFT__MAX_CARRIERS slots, filled up to nall */
    /* the default group: the injection queue and the idle carriers of the
     * configured carriers and spares (group.h) */
    struct weft_group g0;
    _Atomic uint64_t idle_mask[WEFT__MAX_CARRIERS / 64]; /* g0's */
    /* what closed groups' carriers counted (weft__group_carriers_stop) */
    _Atomic uint64_t gone_started, gone_finished, gone_switches, gone_steals, gone_parks;
    _Atomic uint64_t gone_nd_started, gone_nd_finished;
    uint8_t gidx_used[WEFT__MAX_CARRIERS]; /* carrier indices taken by groups (weft__groups.lock) */
    _Atomic int stop;
    _Atomic uint64_t next_id;
    _Atomic int64_t live;
    _Atomic uint64_t peak;
    _Atomic uint64_t plat_started, plat_nd_started; /* spawned on platform threads */
    /* platform threads inside weft__ready now: the vthread they made
     * runnable may run, end and let weft_shutdown begin before they have
     * kicked a carrier; shutdown waits for this to be 0 before it frees
     * the carriers (a file channel's handler counting a latch down,
     * TSan: eventfd_write against the poller's close) */
    _Atomic int plat_waking;
    /* the monitor (see "The monitor" above) */
    _Alignas(WEFT__CACHELINE) _Atomic int mon_armed; /* read when a carrier leaves idle; written rarely */
    _Atomic uint32_t mon_word;                        /* its futex: bumped to wake it */
    /* signals whose handlers ran, for the monitor to interrupt intr_target
     * with (bit per signal; intr_restart: those with SA_RESTART) */
    _Atomic uint64_t intr_pending, intr_restart;
    weft_thread *_Atomic intr_target;
    _Atomic uint32_t mon_up;                          /* it runs (weft_init waits for it) */
    pthread_mutex_t mon_fork;                         /* held through each look; and by fork (see "Fork") */
    pthread_t mon_thread;
    int mon_started;
    int64_t pin_threshold;     /* ns; < 0: no stall detection */
    int max_comp;              /* spares active at once, at most; 0: none */
    int own_tls;               /* every vthread has its own TLS unless its attr says no (weft_runtime_opts.own_tls) */
    int trap;                  /* carriers trap their vthreads' system calls (hook/trap.c; weft_runtime_opts.trap) */
    int pin_log;               /* the monitor's lines on stderr: WEFT__MONLOG_* ($WEFT_MONITOR) */
    int yq_stealable;          /* the monitor may take a yield FIFO (membarrier, or TSan's lock) */
    _Atomic int nactive;       /* spares active now */
    _Atomic uint64_t n_pinned, n_hogs;
    _Atomic int preempt_sig;   /* weft__preempt_enable: the monitor preempts with it (0: never) */
    _Atomic uint64_t n_preempt; /* preemption signals sent */
    struct sigaction old_segv;
    int segv_installed;
    uint16_t fork_gen;         /* forks since this process's ancestor first started weft ("Fork") */
    weft_runtime_opts started_with;  /* the running runtime's configuration (io: as asked) */
    int inherit_cfg;           /* a fork child: its lazy start uses started_with */
    int64_t started_at;        /* CLOCK_MONOTONIC ns at weft_init (the console's uptime) */
    uint64_t generation;       /* how many times the runtime has started, this one included */
#ifdef WEFT_TSAN
    _Atomic int tsan_fibers;   /* vthreads' TSan fibers alive (see TSAN_FIBER_CAP) */
#endif
};
extern __attribute__((visibility("hidden"))) _Alignas(4096) struct weft__rt weft__rt;
/* (the scheduler's rooms call it R, as they always have) */
#define R weft__rt

/* the carrier this OS thread is (sched.h: who may read it directly) */
#define tls_carrier weft__tls_carrier

static inline long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts,
                  uint32_t val3) {
    /* (weft's own wait: untrapped, libc/real.h) */
    return WEFT__ALLOWED(syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, val3));
}

/* Waits while *addr == val, until deadline (absolute CLOCK_MONOTONIC ns;
 * 0 = none). */
static inline void futex_wait_until(_Atomic uint32_t *addr, uint32_t val, int64_t deadline) {
    if (deadline) {
        struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
        futex(addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, val, &ts, FUTEX_BITSET_MATCH_ANY);
    } else {
        futex(addr, FUTEX_WAIT_PRIVATE, val, NULL, 0);
    }
}

static inline void futex_wake(_Atomic uint32_t *addr, int n) { futex(addr, FUTEX_WAKE_PRIVATE, (uint32_t)n, NULL, 0); }

static inline void fmt_name(const weft_thread *t, char out[32]) {
    uint64_t w[4];
    for (int i = 0; i < 4; i++)
        w[i] = atomic_load_explicit(&((weft_thread *)t)->name_words[i], memory_order_relaxed);
    memcpy(out, w, 32);
    out[31] = 0;
}

/* Every carrier, spares included: R.c[0 .. all-1] are set (acquire: pairs
 * with the release that publishes a spare). */
static inline int nall(void) { return atomic_load_explicit(&R.nall, memory_order_acquire); }

/* Carriers of g that take shared work: the configured ones and the active
 * spares (the default group), or all of a group's. */
static inline int nshared(weft_group *g) {
    return g->dflt ? R.n + atomic_load_explicit(&R.nactive, memory_order_relaxed) : g->n;
}

/* g's carriers g->c[0 .. gall(g)-1]: spares included for the default group. */
static inline int gall(weft_group *g) { return g->dflt ? nall() : g->n; }

/* Idle: in its group's idle set. */
static inline int carrier_idle(weft__carrier *v) {
    weft_group *g = v->grp;
    return (atomic_load(&g->idle_mask[v->gidx / 64]) >> (v->gidx % 64)) & 1; /* seq_cst: see monitor_main */
}

/* Asleep, owing the monitor nothing: idle, or a retired spare asleep. */
static inline int carrier_resting(weft__carrier *v) {
    return carrier_idle(v) || atomic_load(&v->dormant); /* seq_cst: see monitor_main */
}

/* A word of a vthread's descriptor that another carrier runs: it may end
 * and its slot be reused by a spawn while we read (the caller checks it
 * still runs after reading, and drops what it read otherwise), so
 * ThreadSanitizer is told to forget these reads, as the dump's are. */
#ifdef WEFT_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
static inline uint64_t ld64(const void *p) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    uint64_t v = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    return v;
}
static inline uint32_t ld32(const void *p) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    uint32_t v = __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    return v;
}
#else
static inline uint64_t ld64(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }
static inline uint32_t ld32(const void *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED); }
#endif

/* ---- sched.c, for the other rooms (thin wrappers of its static functions,
 * or functions off the hot paths) ---- */
void weft__kick(weft__carrier *c);                 /* wakes c's thread, wherever it sleeps */
void weft__mon_need(void);                         /* arms the monitor if it sleeps */
void weft__ready_elsewhere(weft_thread *t);        /* t's park ended off any carrier (the monitor) */
int weft__fire_timers(weft__carrier *c, weft__theap *h, int64_t now, int block); /* c NULL: the monitor */
weft__carrier *weft__carrier_alloc(int i);         /* a carrier's memory; its thread is started apart */
void weft__carrier_free(weft__carrier *c);         /* after its thread ended, or never started */
void *weft__carrier_main(void *arg);               /* a carrier's thread */
int64_t weft__nondaemon_live(void);                /* non-daemon vthreads not yet finished */
void weft__spin_set(int64_t ns);                   /* weft_init: $WEFT_SPIN_US */
void weft__futex_hash_fork_child(void);            /* a fork child's futex hash is a new one */
#ifdef WEFT_TSAN
void weft__tsan_fiber_drop(weft_thread *t);
#endif

/* ---- runtime/runtime.c, the layer above: the lazy start (weft__ensure_init's
 * slow path; the declared call up, see runtime.c "The lazy start") ---- */
int weft__runtime_start_lazy(void);

/* ---- spares.c: the monitor's life (weft_init, weft_shutdown) ---- */
void weft__mon_prepare(void); /* before the carriers start */
void weft__intr_deliver(void); /* the monitor: interrupts posted by handlers (sched.c, "Interrupts") */
/* after they started: 0 or -errno.  interrupts: a hooked program's
 * signals need delivering (hook/signals.c) -- then it runs even where it
 * has nothing else to watch (one carrier, no stall detection: the
 * deterministic mode), for that alone. */
int weft__mon_start(int interrupts);
void weft__mon_stop(void);

#endif
