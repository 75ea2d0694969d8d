/*
 * Deterministic mode: WEFT_DETERMINISTIC=SEED (or weft_runtime_opts.deterministic).
 *
 * What it is for.  A race between vthreads shows up once in a thousand runs
 * under the ordinary scheduler, and never under the debugger.  Here the
 * same program with the same seed runs its vthreads in the same order, so a
 * failing seed replays the failure every time; a test runs a body under
 * many seeds (tests/det.h) to find one.
 *
 * Shape.  One carrier, no spares, no monitor (weft_init forces carriers = 1,
 * pin_threshold -1, max_compensate 0: nothing moves work behind the
 * carrier's back, and no stall is reported).  The carrier keeps one run set
 * -- an array of every runnable vthread, in this file -- instead of the
 * deque, the LIFO slot, the mailbox and the yield FIFO: sched.c's queue
 * pushes made on the carrier go here (weft__det_push), and pick_local asks
 * here (weft__det_pick) for the next vthread, drawn uniformly from the whole
 * set by a generator seeded with SEED.  Removal swaps the last element into
 * the hole: the set's order is a function of the pushes and picks, so of the
 * seed.  weft_yield puts the yielder into the set before the pick, so a
 * yield may pick the yielder again (a decision point like any other).
 * Every decision on the carrier draws from the same generator, in program
 * order: the pick, a select's choice among its ready cases (chan.c), the
 * mutex waiter a normal-mode unlock wakes (the mutex is not FIFO; cond, sem
 * and rwlock are FIFO by contract and stay so -- the order the woken then
 * run in is the pick's).
 *
 * Virtual time.  weft_now() reads a clock kept here, which starts at
 * WEFT__DET_EPOCH (1000 s) and moves only by the carrier: WEFT__DET_TICK_NS
 * (1 us) per scheduling decision (so a loop that polls weft_now() and
 * yields ends), and, when nothing is runnable and timers are pending, a
 * jump to the earliest timer (weft__det_jump): a sleep of an hour returns
 * at once, after every vthread that could run has run.  Timers, deadlines,
 * the executors' delays, the hooks' timeouts all use weft_now(), so all are
 * virtual.  A platform thread's timed wait is real: its deadline is turned
 * into a CLOCK_MONOTONIC one (weft__det_real_deadline) at the wait's start
 * -- the main thread of a test that waits 50 ms waits 50 ms.
 *
 * I/O.  Completions (the poller's, the blocking pool's) join the run set as
 * they are reaped, and the seeded pick decides when each runs.  What is
 * guaranteed: given the same completions reaped at the same decision
 * points, the same order.  What is not: when the kernel completes an
 * operation, and when a blocking pool thread finishes, is real time; a
 * program whose vthreads wait for I/O is deterministic only as far as the
 * I/O's timing is (a pipe written and read by vthreads on the one carrier
 * usually is; a socket to another process is not).  The clock does not jump
 * while vthreads wait for I/O -- or completion handlers do: an async
 * dispatcher with operations in the kernel -- without first giving it
 * WEFT__DET_IO_WAIT_NS (5 ms, real) to complete: a deadline on a read that
 * a platform thread answers soon does not expire merely because the
 * carrier went idle.  A
 * longer grace (WEFT__DET_GRACE_NS, 100 ms real) holds the clock while a
 * platform thread is active: from a hand-in (a spawn, a wake-up of a
 * vthread) or the carrier's waking one (a join, a timed wait the clock
 * ended) until a platform thread begins to wait in weft (a park, which
 * kicks the carrier): a main thread that spawns three sleepers one after
 * the other, or cancels a sleeper after a join, does so before the clock
 * jumps past them.  Past the grace the clock goes on: a platform thread
 * that takes longer (a loaded machine) is late, as real time makes it.
 * The rule sees platform threads as one: with several active at once,
 * one that parks ends the grace for all.
 * The blocking pool and every platform thread are outside the mode: they
 * run in parallel with the carrier, in real time.
 *
 * Platform threads.  weft_spawn, weft_join and the rest work from them as
 * ever: what they make runnable goes through the injection queue, which the
 * carrier drains into the run set at its next decision (traced as
 * "inject").  When in the carrier's sequence that happens is real time, so
 * the interleaving is reproducible -- byte for byte in the trace -- for
 * vthreads spawned by vthreads: a program whose platform thread spawns one
 * root vthread and joins it (weft_main, tests/det.h) is deterministic as a
 * whole; one whose platform threads keep handing work in is deterministic
 * only between those hand-offs.  Vthread ids are deterministic on the same
 * terms: a deterministic weft_init restarts them at 1, the carrier takes
 * blocks of them in spawn order, and a platform thread's spawn takes the
 * next one.
 *
 * Trace (WEFT_TRACE=PATH, or weft_runtime_opts.trace): one line per decision,
 *   step 17 vt=34000 pick t5 of 3 runnable (seed-choice 2)
 *   step 18 vt=35000 jump +9965000 ns to 10000000
 *   inject t12
 * (vt: virtual ns since the epoch), written by the carrier thread with one
 * write(2) per line, so a crash loses nothing before it.  Nothing else
 * writes it; nothing real-time (addresses, real clocks) is in it.
 *
 * Threads touching what.  The run set, the generator, the step counter,
 * io_pending are the carrier thread's only (det_choose returns 0
 * without a draw on any other thread; a platform thread's select uses its
 * own generator).  The clock is written by the carrier and read by anyone
 * (relaxed atomic); while no runtime runs, a platform thread's timed wait
 * -- real then: nobody runs the clock -- moves it to the deadline it
 * waited for (CAS).  The platform waits' list is under its lock.
 * weft__det_on is written at load (a constructor: with $WEFT_DETERMINISTIC
 * set, weft_now() reads the virtual clock, at the epoch, before the runtime
 * starts -- a test's t0 read before its first spawn must be on the clock
 * its deadlines will run on), by weft_init (off when the configuration
 * says so) and weft_shutdown, while no carrier runs.
 *
 * Deadlock.  With one carrier and virtual time, the carrier idle with no
 * vthread runnable and no timer pending (its heap's or a platform
 * thread's timed wait) is stuck for good unless something outside the
 * carrier can still make a vthread runnable.  What can: an I/O operation
 * the kernel or the blocking pool completes (a vthread parked on it:
 * weft__det_io_begin), an asynchronous operations' dispatcher parked
 * while its operations may be in the kernel (counted the same way; so is
 * a dispatcher with none -- this file cannot tell, and says nothing
 * rather than something false), a platform thread that is active (the
 * rule above: it handed work in or was woken, and has not waited in weft
 * since), and through those, signals (a handler reaches a vthread only
 * through an fd it reads, or a platform thread).  And a non-daemon vthread
 * must be alive: with none, or only daemons, nothing is stuck that the
 * program waits for.  With none of these for
 * WEFT__DET_DEADLOCK_NS of real time (1 s: a platform thread that weft
 * counts as parked, past the grace, may still be about to act; an
 * executor's new pool thread counts as active from its start, and one
 * running a task rules a deadlock out: weft__det_work), it is a
 * deadlock: one line on stderr (seed, step, virtual time), the trace's
 * last line, weft_dump on stderr -- sched calling up to observe here, as
 * the monitor does for its stall probe -- and the process ends with
 * status 2 (WEFT__DET_DEADLOCK_EXIT, as Go's "all goroutines are
 * asleep"), through _exit: an exit handler that shut the runtime down
 * would wait for the deadlocked vthreads.  Idling on silently was the
 * alternative: a seed that deadlocks then hung its test until a timeout,
 * with nothing to say which lock.  A program whose platform thread stays
 * away from weft longer than that while every vthread waits for it
 * (counted as parked once a timer's grace ran out, or once another
 * platform thread parked: the rule sees them as one) is taken for one.
 * Vthreads' "parked since" is taken on the virtual clock in this mode,
 * as the dump's now and every deadline are.
 *
 * Failure.  The run set grows by doubling; if it cannot grow, the vthread
 * waits on an overflow list (through t->next) that moves into the set as
 * it has room -- out of memory never loses a runnable vthread.  A trace
 * that cannot be opened fails weft_init with its -errno.
 *
 * Cost when off: none here; sched.c tests weft__det_on (one predictable
 * branch) in pick_local, weft__ready, the queue pushes, weft_yield,
 * weft_now, the idle path and park_wait; sync reads it in mutex_wake_one
 * and select.
 */
#include "det.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

_Atomic int weft__det_on;
static int env_on;      /* $WEFT_DETERMINISTIC held a seed when the library loaded */
static int clock_set;   /* the clock has been started in this process */


static struct {
    _Atomic int64_t clock;      /* virtual ns */
    uint64_t rng;               /* splitmix64 state */
    uint64_t step;
    weft_thread **set;          /* the run set */
    size_t n, cap;
    weft_thread *ovf_head, *ovf_tail; /* could not grow: waiting for room */
    size_t novf;
    int trace_fd;               /* -1: none */
    int io_pending;
    int outside;                /* parks something outside may end (weft__det_io_begin) */
    uint64_t seed;
    int64_t stuck_since;        /* real ns: idle with nothing that could wake a vthread since; 0: not */
} D = {.trace_fd = -1};

/* weft_now() before weft_init (a test's t0, read before its first spawn
 * starts the runtime) must already be the virtual clock the runtime will
 * run on, or deadlines made from it are real-time ones: with the variable
 * set, the mode's clock reads from the start (at the epoch; nothing else of
 * the mode runs before weft_init, which may still turn it off). */
__attribute__((constructor)) static void det_env_at_load(void) {
    const char *e = getenv("WEFT_DETERMINISTIC");
    uint64_t seed;
    char *end;
    if (!e || !*e || e[0] == '-') return;
    errno = 0;
    seed = strtoull(e, &end, 0);
    (void)seed;
    if (errno || *end) return;
    env_on = 1;
    clock_set = 1;
    atomic_store_explicit(&D.clock, WEFT__DET_EPOCH, memory_order_relaxed);
    atomic_store_explicit(&weft__det_on, 1, memory_order_relaxed);
}

/* platform threads' activity (weft__det_platform_*) */
static _Atomic uint64_t pev, pev_active, pev_parked;

/* platform threads' timed waits (weft__det_pwait_*) */
static pthread_mutex_t pw_lock = PTHREAD_MUTEX_INITIALIZER;
static weft__det_pwait *pw_head;
static _Atomic int64_t pw_min = INT64_MAX;

static uint64_t next64(void) {
    uint64_t z = (D.rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...) {
    if (D.trace_fd < 0) return;
    char line[160];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k > sizeof line - 2) k = (int)sizeof line - 2;
    line[k++] = '\n';
    for (int off = 0; off < k;) {
        ssize_t w = write(D.trace_fd, line + off, (size_t)(k - off));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* a full disk loses trace lines, not the program */
        off += (int)w;
    }
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end || s[0] == '-') return -EINVAL;
    *out = v;
    return 0;
}

int weft__det_resolve(const weft_runtime_opts *cfg, uint64_t *seed, const char **tr) {
    int flag = cfg ? cfg->deterministic : WEFT_DET_DEFAULT;
    *tr = cfg && cfg->trace ? cfg->trace : NULL;
    if (!*tr) {
        const char *e = getenv("WEFT_TRACE");
        *tr = e && *e ? e : NULL;
    }
    switch (flag) {
    case WEFT_DET_OFF: return 0;
    case WEFT_DET_ON: *seed = cfg->deterministic_seed; return 1;
    case WEFT_DET_DEFAULT: {
        const char *e = getenv("WEFT_DETERMINISTIC");
        if (!e || !*e) return 0;
        if (parse_u64(e, seed) < 0) {
            fprintf(stderr, "weft: WEFT_DETERMINISTIC=%s is not a seed (an unsigned integer)\n", e);
            return -EINVAL;
        }
        return 1;
    }
    default: return -EINVAL;
    }
}

int weft__det_start(uint64_t seed, const char *tr) {
    int fd = -1;
    if (tr) {
        fd = open(tr, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
        if (fd < 0) {
            int e = errno;
            fprintf(stderr, "weft: cannot open the trace %s: %s\n", tr, strerror(e));
            return -e;
        }
    }
    D.trace_fd = weft__fd_own(fd);
    /* the epoch once per process: a runtime started again goes on from
     * where the last one left the clock (time never runs backwards) */
    if (!clock_set) atomic_store_explicit(&D.clock, WEFT__DET_EPOCH, memory_order_relaxed);
    clock_set = 1;
    D.rng = seed;
    D.seed = seed;
    D.stuck_since = 0;
    D.outside = 0;
    D.step = 0;
    D.n = 0;
    D.ovf_head = D.ovf_tail = NULL;
    D.novf = 0;
    D.io_pending = 0;
    atomic_store_explicit(&weft__det_on, 1, memory_order_relaxed);
    trace("seed %llu", (unsigned long long)seed);
    return 0;
}

void weft__det_stop(void) {
    if (!WEFT__DET_ON()) return;
    /* platform threads still in a timed wait: no carrier runs the clock
     * any more, so their deadlines are due now rather than never */
    pthread_mutex_lock(&pw_lock);
    for (weft__det_pwait *w = pw_head; w; w = w->next) weft__unpark(w->p, w->token, WEFT__PS_TIMEDOUT);
    pthread_mutex_unlock(&pw_lock);
    trace("end after %llu steps, vt=%lld", (unsigned long long)D.step,
          (long long)(atomic_load_explicit(&D.clock, memory_order_relaxed) - WEFT__DET_EPOCH));
    weft__fd_close_own(D.trace_fd);
    D.trace_fd = -1;
    free(D.set);
    D.set = NULL;
    D.n = D.cap = 0;
    D.ovf_head = D.ovf_tail = NULL; /* daemons abandoned at shutdown */
    D.novf = 0;
    atomic_store_explicit(&weft__det_on, env_on, memory_order_relaxed); /* (the clock stays readable, stopped, until the next start) */
}

void weft__det_fork_child(void) {
    atomic_store(&pev_active, 0);
    atomic_store(&pev_parked, 0);
    pw_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pw_head = NULL; /* other threads' waits: those threads are not in the child */
    atomic_store(&pw_min, INT64_MAX);
    weft__fd_close_own(D.trace_fd); /* the parent's file: not ours to write */
    D.trace_fd = -1;
    D.set = NULL; /* the carrier may have been mid-realloc: leaked, not freed */
    D.n = D.cap = 0;
    D.ovf_head = D.ovf_tail = NULL;
    D.novf = 0;
    /* weft__det_on stays: the clock reads as it was until the child's runtime starts */
}

int64_t weft__det_now(void) { return atomic_load_explicit(&D.clock, memory_order_relaxed); }

static void advance(int64_t to) { atomic_store_explicit(&D.clock, to, memory_order_relaxed); }

void weft__det_jump(int64_t to) {
    int64_t now = weft__det_now();
    if (to <= now) return;
    trace("step %llu vt=%lld jump +%lld ns", (unsigned long long)D.step, (long long)(now - WEFT__DET_EPOCH),
          (long long)(to - now));
    advance(to);
}

void weft__det_clock_reach(int64_t t) {
    int64_t now = weft__det_now();
    while (now < t && !atomic_compare_exchange_weak_explicit(&D.clock, &now, t, memory_order_relaxed,
                                                            memory_order_relaxed)) {}
}

int64_t weft__det_real_deadline(int64_t d) {
    if (!d) return 0;
    int64_t left = d - weft__det_now();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t real = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (left <= 0) return real;
    return left > INT64_MAX - real ? INT64_MAX : real + left;
}

uint32_t weft__det_choose(uint32_t n, const char *what) {
    if (n <= 1 || !weft__carrier_self()) return 0;
    uint32_t k = (uint32_t)(((unsigned __int128)next64() * n) >> 64);
    if (what) trace("step %llu %s choice %u of %u", (unsigned long long)D.step, what, k, n);
    return k;
}

/* Moves what waits on the overflow list into the set while it has room. */
static void ovf_drain(void) {
    while (D.ovf_head && D.n < D.cap) {
        weft_thread *t = D.ovf_head;
        D.ovf_head = t->next;
        if (!D.ovf_head) D.ovf_tail = NULL;
        D.novf--;
        t->next = NULL;
        D.set[D.n++] = t;
    }
}

void weft__det_push(weft_thread *t) {
    if (D.n == D.cap) {
        size_t cap = D.cap ? 2 * D.cap : 64;
        weft_thread **s = realloc(D.set, cap * sizeof *s);
        if (!s) {
            t->next = NULL;
            if (D.ovf_tail) D.ovf_tail->next = t;
            else D.ovf_head = t;
            D.ovf_tail = t;
            D.novf++;
            return;
        }
        D.set = s;
        D.cap = cap;
        ovf_drain();
        if (D.n == D.cap) { /* (cannot happen: the drain stops at cap) */
            weft__det_push(t);
            return;
        }
    }
    D.set[D.n++] = t;
}

void weft__det_note_inject(weft_thread *t) { trace("inject t%llu", (unsigned long long)t->id); }

weft_thread *weft__det_pick(void) {
    if (D.n == 0) {
        if (!D.ovf_head) return NULL;
        ovf_drain();
        if (D.n == 0) { /* no room at all: the overflow list runs FIFO */
            weft_thread *t = D.ovf_head;
            D.ovf_head = t->next;
            if (!D.ovf_head) D.ovf_tail = NULL;
            D.novf--;
            t->next = NULL;
            D.stuck_since = 0;
            return t;
        }
    }
    size_t n = D.n;
    uint32_t k = n > 1 ? (uint32_t)(((unsigned __int128)next64() * n) >> 64) : 0;
    weft_thread *t = D.set[k];
    D.set[k] = D.set[--D.n];
    ovf_drain();
    D.stuck_since = 0;
    D.step++;
    int64_t vt = weft__det_now() + WEFT__DET_TICK_NS;
    advance(vt);
    trace("step %llu vt=%lld pick t%llu of %zu runnable (seed-choice %u)", (unsigned long long)D.step,
          (long long)(vt - WEFT__DET_EPOCH), (unsigned long long)t->id, n + D.novf, k);
    return t;
}

/* ---- platform threads' timed waits ---- */


static void pw_recompute(void) {
    int64_t m = INT64_MAX;
    for (weft__det_pwait *w = pw_head; w; w = w->next)
        if (w->deadline < m) m = w->deadline;
    atomic_store(&pw_min, m);
}

void weft__det_pwait_add(weft__det_pwait *w) {
    pthread_mutex_lock(&pw_lock);
    w->prev = NULL;
    w->next = pw_head;
    if (pw_head) pw_head->prev = w;
    pw_head = w;
    if (w->deadline < atomic_load(&pw_min)) atomic_store(&pw_min, w->deadline);
    pthread_mutex_unlock(&pw_lock);
}

void weft__det_pwait_del(weft__det_pwait *w) {
    pthread_mutex_lock(&pw_lock);
    if (w->prev) w->prev->next = w->next;
    else pw_head = w->next;
    if (w->next) w->next->prev = w->prev;
    pw_recompute();
    pthread_mutex_unlock(&pw_lock);
}

int64_t weft__det_pwait_min(void) { return atomic_load_explicit(&pw_min, memory_order_relaxed); }

void weft__det_pwait_fire(int64_t now) {
    if (atomic_load(&pw_min) > now) return;
    pthread_mutex_lock(&pw_lock);
    /* the waiter removes its own node (under this lock) before it returns:
     * every p here is a live thread's parker */
    for (weft__det_pwait *w = pw_head; w; w = w->next)
        if (w->deadline <= now) weft__unpark(w->p, w->token, WEFT__PS_TIMEDOUT); /* (platform_active) */
    pthread_mutex_unlock(&pw_lock);
}

void weft__det_io_begin(int hold) {
    D.io_pending += hold;
    D.outside++;
}
void weft__det_io_end(int hold) {
    D.io_pending -= hold;
    D.outside--;
}
/* Platform threads' activity, as events on one counter: the latest
 * "active" (one handed work in, or the carrier woke one) after the latest
 * "parked" (one began to wait) means a platform thread may be about to act. */

static int platform_busy(void) {
    return atomic_load_explicit(&pev_active, memory_order_relaxed) >
           atomic_load_explicit(&pev_parked, memory_order_relaxed);
}

int64_t weft__det_hold_ns(void) {
    return platform_busy() ? WEFT__DET_GRACE_NS : D.io_pending > 0 ? WEFT__DET_IO_WAIT_NS : 0;
}

void weft__det_waited(void) { /* the grace ran out: as if it parked */
    atomic_store_explicit(&pev_parked, atomic_fetch_add(&pev, 1) + 1, memory_order_relaxed);
}

void weft__det_platform_active(void) {
    atomic_store_explicit(&pev_active, atomic_fetch_add(&pev, 1) + 1, memory_order_relaxed);
}

int weft__det_platform_parks(void) {
    int was = platform_busy();
    atomic_store_explicit(&pev_parked, atomic_fetch_add(&pev, 1) + 1, memory_order_relaxed);
    return was;
}

/* ---- deadlock ---- */

static int64_t real_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static _Atomic int plat_work; /* pool tasks running (weft__det_work) */

void weft__det_work(int d) { atomic_fetch_add_explicit(&plat_work, d, memory_order_relaxed); }

int64_t weft__det_deadlock_in(int64_t min) {
    /* a timer (the carrier's or a platform thread's timed wait), an
     * operation the kernel or the blocking pool may complete, a platform
     * thread that may act: not (yet) a deadlock */
    if (min != INT64_MAX || D.outside > 0 || platform_busy() || atomic_load_explicit(&plat_work, memory_order_relaxed) > 0) {
        D.stuck_since = 0;
        return INT64_MAX;
    }
    int64_t now = real_now();
    if (!D.stuck_since) D.stuck_since = now;
    int64_t left = D.stuck_since + WEFT__DET_DEADLOCK_NS - now;
    return left > 0 ? left : 0;
}

_Noreturn void weft__det_deadlock(void) {
    int64_t vt = weft__det_now() - WEFT__DET_EPOCH;
    trace("step %llu vt=%lld deadlock", (unsigned long long)D.step, (long long)vt);
    fprintf(stderr,
            "weft: deadlock (deterministic mode, seed %llu, step %llu, vt=%lld ns): no vthread can run, no "
            "timer is pending, and no I/O, blocking job or platform thread is left to wake one\n",
            (unsigned long long)D.seed, (unsigned long long)D.step, (long long)vt);
    weft_dump(2, WEFT_DUMP_TEXT);
    /* what the program printed, unless a thread holds the stream (one
     * blocked in it would hang us), then no exit handlers: one that shuts
     * the runtime down would wait for the deadlocked vthreads */
    if (ftrylockfile(stdout) == 0) {
        fflush_unlocked(stdout);
        funlockfile(stdout);
    }
    weft__fd_close_own(D.trace_fd);
    _exit(WEFT__DET_DEADLOCK_EXIT);
}
