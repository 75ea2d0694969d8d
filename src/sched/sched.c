/*
 * The scheduler: vthreads on N carrier threads.
 *
 * Shape.  Each carrier is an OS thread with a run queue (a Chase-Lev deque,
 * deque.h, used FIFO: the owner pushes at the bottom and takes from the top,
 * thieves take half from the top in one CAS), a LIFO slot for the vthread
 * woken last, a FIFO for vthreads that yielded (the yield FIFO), a mailbox for
 * vthreads pinned to it, and a timer heap (timer.h).  Work from platform
 * threads goes to one injection queue.  A carrier runs the scheduler loop on
 * its own OS stack (the "sched context"); vthreads run on their own stacks.
 *
 * Switching.  A vthread that blocks, yields or ends leaves an operation for
 * whoever runs next (c->pending_op) and switches directly to the next local
 * vthread if there is one -- one user-mode switch, which carries the carrier
 * pointer across so the resumed side need not look it up -- or else to the
 * sched context, which looks further (timers, other carriers, sleep).  Every
 * resume point first runs finish_pending(): the park's commit, the exit's
 * cleanup and a yield's push to a shared queue all happen after the old
 * stack has been left, so no other carrier can pick a vthread up while its
 * stack is still in use.  A yield to the yield FIFO needs no such care
 * (no other carrier takes from it while this one is in its scheduler: see
 * the monitor) and is the cheapest path: no atomic operation at all.  A
 * yield goes there while no carrier idles; when one does, the yielding
 * carrier's next yield spills the FIFO to the stealable deque and wakes a
 * sleeper.  Until then -- and for a carrier that never yields again -- the
 * monitor takes the FIFO from a carrier that has stopped switching.
 *
 * Parking (the primitive under every blocking call) is a protocol on one
 * atomic word per thread, described in sched.h: exactly one of wake,
 * timeout and cancel wins a park, by CAS; the winner resumes the thread if it
 * had already switched away.
 *
 * Waking idle carriers without lost wake-ups (after Go's proc.go).  Counts
 * nidle and nspinning, an idle bitmask, and a futex word per carrier:
 *  - whoever makes work visible to other carriers (a deque push, the
 *    injection queue, a displaced LIFO slot) then issues a full fence and
 *    reads nspinning and nidle; if nobody spins and someone sleeps, it wakes
 *    one sleeper and counts it as spinning (wake_one);
 *  - a carrier that finds nothing sets its idle bit and increments nidle
 *    (seq_cst) *before* a last look at every queue, and sleeps only if that
 *    look finds nothing.
 * By the fence on both sides, either the submitter sees the sleeper or the
 * sleeper sees the work.  A carrier that gives up spinning decrements
 * nspinning before its last look, for the same reason.  Spinning is bounded
 * (SPIN_NS, about twice what waking a sleeping carrier costs on a VM), and
 * at most half the busy carriers plus one spin, so idle CPUs sleep.
 * Each carrier adapts its bound to what spinning has been worth lately
 * (spin_budget): a spin that finds work within SPIN_PAYS_NS (about the CPU
 * time a sleep and a wake-up take) restores the full SPIN_NS; one that finds work
 * later, or none, halves the next, down to SPIN_PAYS_NS -- so work that
 * would have paid is always still caught.  A hand-off that comes back
 * within microseconds keeps the full spin; a server whose work arrives now
 * and then from a client on the same cores stops burning the CPU that
 * client needs.
 *
 * LIFO slot.  weft__ready() called by a vthread puts the woken vthread in its
 * own carrier's slot: it runs next, on a warm cache (message passing between
 * two vthreads stays on one carrier).  Filling an empty slot wakes nobody --
 * this carrier runs it soon, and a wake-up per message would cost a system
 * call and a spinning carrier per hand-off; a displaced occupant goes to the
 * deque and may wake a carrier.  The slot is capped (LIFO_CAP runs in a
 * row, then the deque goes first), spinning thieves take it after two
 * fruitless rounds, and if this carrier goes on computing instead of
 * switching, the monitor takes it.  The cap counts the mailbox as waiting
 * work too, and the slot goes before the mailbox: with libc hooks on, every
 * vthread woken from a hooked call is pinned (its mailbox), and when a burst
 * of those each handed something to a waiter (a pool's connection, by a
 * semaphore), mailbox-first ran the whole burst before any waiter --
 * http-db at C = 1000 measured 220-600 us from a connection's release to
 * its next query instead of 26 us, and 1 % less throughput than the
 * platform pool.  A child that ends queues its joiner FIFO
 * instead: there is no hand-off to keep warm, and a parent joining a batch
 * then finds the rest done.
 *
 * Idle carriers also do the stack allocator's background work
 * (weft__stacks_refill / _trim): carving stacks ahead during a spawn burst,
 * returning memory above the high-water mark afterwards.
 *
 * Handles (sched.h, "handles").  A vthread's descriptor lives in its stack
 * slot, and a slot is reused at once (the carrier's cache is LIFO: the next
 * spawn gets the stack just freed), so a weft_thread * that is only the
 * descriptor's address cannot tell, after its weft_join, the slot's next
 * vthread from its own: a second join returned 0 and freed the slot again
 * (two spawns then shared one stack), and a stale handle joined, detached,
 * cancelled or unparked whatever vthread ran there next.  pthread leaves
 * this undefined (glibc's pthread_t is its descriptor's address, in a
 * cached stack, just the same); Go has no handles to goroutines; Java's
 * Thread is an object the collector keeps.  weft does what a handle table
 * with generations does, without the table: the slot keeps a 24-bit
 * generation (t->gen), free_thread bumps it, and the handle given to the
 * program (weft_spawn, weft_self) carries it in address bits that are
 * always 0.  Every call that takes a handle compares the two first -- a
 * load and a compare -- and refuses a stale one with -ESRCH (join, detach,
 * cancel, unpark; weft_id says 0).  What is detected: any use of a handle
 * after the join or detach that freed its vthread, or after a detached
 * vthread ended, whatever ran in the slot since -- unless the slot has
 * been freed a multiple of 2^24 - 1 times in between (generations skip 0)
 * or, zapped and populated again, drew the same generation (one chance in
 * 2^24).  A slot populated afresh starts at a generation spread from its
 * unique seq_base, not at 1.  Two joins of one vthread at once: the fast
 * path claims a finished vthread with a CAS (done -> reaped), the slow
 * path under join_lock, which also re-reads the generation (spawn's
 * release store of join_state pairs with the lock's acquire), and a
 * vthread that ends while a joiner waits is left to that joiner (a state
 * of its own, which the CAS does not take), so exactly one caller reaps
 * it and the other gets -ESRCH or -EINVAL.  The runtime
 * passes raw descriptors (generation 0) to the same calls internally; they
 * are not checked.  A handle from before a fork is still refused with
 * -ECHILD (its descriptor is readable in the child, and its generation
 * unchanged).  After weft_shutdown the slots are unmapped: a handle from
 * before is no longer anything.
 *
 * Deterministic mode (det.c, which has the design).  With weft__det_on the
 * runtime has one carrier and no monitor, and each decision point takes one
 * predictable branch to det.c: dq_push and weft__ready put the vthread in
 * det.c's run set (no deque, no LIFO slot), pick_local becomes pick_det (the
 * injection queue and the mailbox drained into the set, due timers on the
 * virtual clock fired, completions reaped, then the seeded pick), weft_yield
 * puts the yielder in the set before the pick, find_work becomes
 * find_work_det (no stealing or spinning; idle with timers pending, the
 * clock jumps), weft_now reads the virtual clock, and park_wait counts I/O
 * parks and has platform threads' timed waits ended by the carrier.
 *
 * Carrier groups (group.c has the essay).  Everything above about the
 * injection queue, the idle counts and mask, stealing and spinning holds
 * per group: those live in a struct weft_group (group.h), c->grp is the
 * carrier's and t->grp the vthread's, and the loops over "the carriers"
 * that serve scheduling (steal_once, work_visible, take_idle) run over
 * c->grp's.  The default group is R.g0: the configured carriers and the
 * spares, as before.  A vthread made runnable by a carrier of another
 * group, or by no carrier, goes to its own group's injection queue with a
 * wake-up there (enqueue_foreign): it never runs on another group's
 * carrier.  What iterates every carrier (the monitor, counters, the dump,
 * shutdown) walks the open groups too (group.h: which lock).
 *
 * Rooms.  This file is the scheduler's core and its hot paths: queues,
 * picking, switching, parking, spawning and joining, the carrier threads'
 * loop, and the thin wrappers the other rooms call (at the end).  The
 * carrier and the runtime (R) are defined in internal.h, which says who
 * touches what from which thread.  The monitor -- rescues, stalls and
 * spare carriers ("The monitor", "Stalls", "Spares" there) -- is
 * spares.c; the carriers of groups are group.c's; the counters and
 * carrier views the observe layer reads are counters.c's; the runtime's
 * life -- weft_init, weft_shutdown, fork handling ("Fork" there), the
 * environment, starting io, the console and the hooks, the stack overflow
 * handler -- is runtime/runtime.c, a layer above every other, so that
 * nothing here calls up into io, observe or hook to start or stop them.
 * One call goes up on purpose: weft__ensure_init, the lazy start every
 * layer makes, finds the runtime down and calls weft__runtime_start_lazy
 * (runtime.c; a declared exception in docs/design.md -- why a call and not
 * a registered pointer: see there).
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

#define LIFO_CAP 3
static int64_t spin_ns = SPIN_NS;
#define SPIN_PAYS_NS 3000 /* a spin that finds work this soon was worth it (the CPU a sleep and a
                           * wake-up cost); also the shortest spin */
#define SLOW_EVERY 61
#define STEAL_MAX 32
#define LIVE_FLUSH 32
#define ID_BLOCK 1024
#define ALTSTACK_SIZE (64 * 1024)

enum { OP_NONE = 0, OP_YIELD, OP_PARK, OP_EXIT };

/* The runtime (internal.h has its fields; page-aligned: see carrier_alloc). */
_Alignas(4096) struct weft__rt weft__rt = {
    .init_lock = PTHREAD_MUTEX_INITIALIZER,
    .mon_fork = PTHREAD_MUTEX_INITIALIZER,
    .g0 = {.inj.lock = PTHREAD_MUTEX_INITIALIZER, .idle_mask = R.idle_mask, .dflt = 1, .name = "default"},
    .next_id = 1};

/* (sched.h: who may read it directly; exported for weft/local.h's inline
 * gets, which read it from an asm statement) */
WEFT_API WEFT_TLS weft__carrier *weft__tls_carrier;
_Static_assert(offsetof(struct weft__carrier, cur) == 0, "weft__carrier_cur and weft/local.h read the first field");
_Static_assert(offsetof(struct weft_thread, scoped) == WEFT__THREAD_SCOPED_OFF, "weft/local.h: fix the offset");
static WEFT_TLS weft__parker tls_parker;   /* a platform thread's park word */
/* a platform thread's cancellation (weft__pcancel_*: the executors' pool
 * threads; no other platform thread is ever cancelled) */
struct weft__pcancel {
    _Atomic int cancelled;
    _Atomic int shielded; /* weft_shield_begin on this platform thread */
    _Atomic int efd;     /* eventfd written by a cancel, made on demand; -1 none */
    int enabled;
    weft__parker *parker;
};
static WEFT_TLS weft__pcancel tls_pc = {0, 0, -1, 0, NULL};
static WEFT_TLS int64_t tls_deadline;      /* a platform thread's deadline */

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */
/* ------------------------------------------------------------------------ */

__attribute__((noinline)) weft__carrier *weft__carrier_self(void) {
    weft__carrier *c = tls_carrier;
    __asm__ volatile("" : "+r"(c)); /* opaque: never cached across a switch */
    return c;
}

/* The same, inlined: only for a function that reads it once, before any
 * switch, and never uses it after one. */
static inline weft__carrier *carrier_here(void) { return tls_carrier; }

weft_thread *weft__self(void) {
    weft__carrier *c = weft__carrier_self();
    return c ? c->cur : NULL;
}

weft__carrier *weft__carrier_hide(void) {
    weft__carrier *c = tls_carrier;
    tls_carrier = NULL;
    return c;
}

void weft__carrier_show(weft__carrier *c) { tls_carrier = c; }


static inline void bump(_Atomic uint64_t *ctr) {
    atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* CLOCK_MONOTONIC whatever the mode (deterministic mode's real waits). */
static int64_t mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_now(void) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) return weft__det_now(); /* virtual time (det.c) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A few milliseconds' resolution, a fraction of the cost: for the dump's
 * "parked since", on every park. */
static inline int64_t coarse_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
/* The futex hash.  Since Linux 6.16 a process gets a private futex hash
 * sized for its CPUs, not its threads: 16 buckets on a 2-CPU machine.
 * Every FUTEX_WAKE walks its bucket under the bucket's lock, so with 15,000
 * pool threads asleep (a cached executor running sleeping tasks) each wake
 * walks ~900 waiters and wakes took half the machine.  Pools that grow call
 * this with the platform threads they keep: the hash grows (only grows) to
 * twice that, a power of two, at most FH_MAX buckets (64 bytes each).  A
 * kernel without the private hash (PR_FUTEX_HASH unknown), or a process on
 * the global hash, is left alone. */
#define FH_PRCTL 78 /* PR_FUTEX_HASH */
#define FH_SET 1    /* PR_FUTEX_HASH_SET_SLOTS */
#define FH_GET 2    /* PR_FUTEX_HASH_GET_SLOTS */
#define FH_MAX (1L << 16)
static _Atomic long fh_slots;   /* buckets set (0: not yet looked; -1: leave alone) */
static pthread_mutex_t fh_lock = PTHREAD_MUTEX_INITIALIZER;

void weft__futex_hash_fit(long threads) {
    long cur = atomic_load_explicit(&fh_slots, memory_order_relaxed);
    if (cur < 0 || (cur && threads <= cur / 2) || (!cur && threads <= 8)) return;
    pthread_mutex_lock(&fh_lock);
    cur = atomic_load_explicit(&fh_slots, memory_order_relaxed);
    if (!cur) {
        int n = prctl(FH_PRCTL, FH_GET, 0, 0, 0);
        cur = n > 0 ? n : -1; /* 0: the global hash; -1: no private hash */
    }
    long want = 32;
    while (want < 2 * threads && want < FH_MAX) want <<= 1;
    if (cur > 0 && want > cur) cur = prctl(FH_PRCTL, FH_SET, want, 0, 0) == 0 ? want : -1;
    atomic_store_explicit(&fh_slots, cur, memory_order_relaxed);
    pthread_mutex_unlock(&fh_lock);
}

/* The low 32 bits of a park word, for futex (little-endian). */
static inline _Atomic uint32_t *word_lo(_Atomic uint64_t *w) { return (_Atomic uint32_t *)(void *)w; }

void weft__fatal(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    weft_thread *t = weft__self();
    char name[32] = "";
    if (t) fmt_name(t, name);
    if (t)
        fprintf(stderr, "weft: %s (vthread %llu \"%s\")\n", buf, (unsigned long long)t->id, name);
    else
        fprintf(stderr, "weft: %s\n", buf);
    abort();
}

void weft__thread_name(const weft_thread *t, char out[32]) { fmt_name(t, out); }

void (*_Atomic weft__scopes_left_hook)(weft_thread *t);
void (*_Atomic weft__fatal_dump_hook)(void);

void weft__misuse(const char *call, const void *obj, const char *what, const void *site) {
    char where[512] = "an unknown site";
    /* (the observe layer's symbolizer: file and line where the caller has them) */
    if (site && weft__symbolize((uintptr_t)site, where, sizeof where) < 0) snprintf(where, sizeof where, "%p", site);
    weft__fatal("%s(%p): %s; called from %s", call, obj, what, where);
}

int weft__carrier_index(const weft__carrier *c) { return c ? c->index : -1; }

int weft__carrier_tid_of(const weft_thread *t) {
    const weft__carrier *c = __atomic_load_n(&t->carrier, __ATOMIC_ACQUIRE);
    return c ? c->tid : -1;
}
int weft__carriers(void) { return R.n; }
int weft__carriers_all(void) { return nall(); }

weft_group *weft__group_default(void) { return &R.g0; }

/* The carriers of the calling vthread's group; of the default group (the
 * configured ones) on a platform thread or a default-group vthread. */
int weft__carriers_here(void) {
    weft_group *g = weft__group_self();
    return g && !g->dflt ? g->n : R.n;
}

/* The group a vthread spawned now by the caller goes to when its attr
 * names none: the caller's own (a vthread), or the default one. */
weft_group *weft__group_self(void) {
    weft__carrier *c = weft__carrier_self();
    return c && c->cur ? c->cur->grp : NULL;
}

const weft_thread *weft__carrier_running(const weft__carrier *c) {
    return c ? (const weft_thread *)__atomic_load_n(&c->cur, __ATOMIC_RELAXED) : NULL;
}

unsigned weft__fork_gen(void) { return R.fork_gen; }

/* t belongs to the runtime of a process this one was forked from ("Fork") */
static inline int stale(const weft_thread *t) { return __builtin_expect(t->fork_gen != R.fork_gen, 0); }

/* The descriptor handle h names, or NULL when h is stale ("Handles"): a
 * load and a compare.  A handle without a generation (the runtime's own)
 * is taken as it is. */
static inline weft_thread *handle_get(const weft_thread *h) {
    weft_thread *t = weft__thread_of(h);
    uint64_t g = weft__handle_gen(h);
    if (__builtin_expect(g != atomic_load_explicit(&t->gen, memory_order_acquire), 0) && g) return NULL;
    return t;
}

/* ------------------------------------------------------------------------ */
/* idle carriers                                                             */
/* ------------------------------------------------------------------------ */

/* Idle bits are per group, at each carrier's gidx (group.h). */
static void set_idle_bit(weft_group *g, int k) {
    atomic_fetch_or(&g->idle_mask[k / 64], (uint64_t)1 << (k % 64));
}

/* Clears bit k of g; returns 1 if this call cleared it. */
static int clear_idle_bit(weft_group *g, int k) {
    uint64_t b = (uint64_t)1 << (k % 64);
    return (atomic_fetch_and(&g->idle_mask[k / 64], ~b) & b) != 0;
}

/* Takes one sleeping carrier of g off the idle set, or returns -1. */
static int take_idle(weft_group *g) {
    int words = (gall(g) + 63) / 64;
    for (int i = 0; i < words; i++) {
        uint64_t m = atomic_load(&g->idle_mask[i]);
        while (m) {
            int k = i * 64 + __builtin_ctzll(m);
            if (clear_idle_bit(g, k)) return k;
            m = atomic_load(&g->idle_mask[i]);
        }
    }
    return -1;
}

static void kick(weft__carrier *c) {
    atomic_fetch_add(&c->wake_seq, 1);
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_acquire);
    if (pl) weft__poller_kick(pl);
    else futex_wake(&c->wake_seq, 1);
}

/* Wakes one sleeping carrier of g as a spinner if nobody of g spins. */
static void wake_one(weft_group *g) {
    int zero = 0;
    if (atomic_load(&g->nspinning) != 0 || !atomic_compare_exchange_strong(&g->nspinning, &zero, 1))
        return;
    int k = take_idle(g);
    if (k < 0) {
        atomic_fetch_sub(&g->nspinning, 1);
        return;
    }
    atomic_fetch_sub(&g->nidle, 1);
    kick(g->c[k]);
}

/* A full barrier.  On x86 a locked add to the stack is one, and cheaper
 * than mfence (Linux's smp_mb does the same). */
static inline void full_fence(void) {
#if defined(WEFT_TSAN)
    /* TSan models neither fences nor inline asm: a seq_cst RMW it does */
    static _Atomic int tsan_fence;
    atomic_fetch_add_explicit(&tsan_fence, 0, memory_order_seq_cst);
#elif defined(__x86_64__)
    __asm__ volatile("lock orq $0, (%%rsp)" ::: "memory", "cc");
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Called after making work visible to the other carriers of group g. */
static inline void wake_if_needed(weft_group *g) {
    full_fence();
    if (atomic_load_explicit(&g->nspinning, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&g->nidle, memory_order_relaxed) > 0)
        wake_one(g);
}

/* Wakes carrier c itself if it sleeps (pinned work arrived for it).  A
 * retired spare sleeps outside the idle set ("Spares"): its dormant flag
 * and its last look are the same Dekker pair as the idle bit's. */
static void wake_carrier(weft__carrier *c) {
    full_fence();
    weft_group *g = c->grp;
    if (atomic_load(&g->idle_mask[c->gidx / 64]) & ((uint64_t)1 << (c->gidx % 64))) {
        if (clear_idle_bit(g, c->gidx)) {
            atomic_fetch_sub(&g->nidle, 1);
            atomic_fetch_add(&g->nspinning, 1); /* it wakes up counted as spinning */
            kick(c);
        }
    } else if (__builtin_expect(atomic_load(&c->dormant), 0) && atomic_exchange(&c->dormant, 0)) {
        kick(c);
    }
}

/* The monitor is needed: this carrier leaves idle (see "The monitor").  One
 * load, and a system call only when the monitor sleeps without a deadline.
 * The caller has cleared its idle bit (seq_cst) first. */
static void mon_arm(void) {
    if (atomic_exchange(&R.mon_armed, 1)) return;
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
}

static inline void mon_need(void) {
    /* seq_cst: pairs with the monitor's disarm (a plain load on x86) */
    if (__builtin_expect(!atomic_load(&R.mon_armed), 0)) mon_arm();
}

/* ------------------------------------------------------------------------ */
/* queues                                                                    */
/* ------------------------------------------------------------------------ */

/* The injection queue of t's group. */
static void inject_push(weft_thread *t) {
    /* deterministic mode: only platform threads push here (det.c: grace) */
    if (__builtin_expect(WEFT__DET_ON(), 0)) weft__det_platform_active();
    weft__tfifo_push(&t->grp->inj, t);
}

/* The injection queue of carrier c's group: not for a retired spare (looked
 * at only when the queue is not empty: nothing more on the empty path). */
static inline weft_thread *inject_pop(weft__carrier *c) {
    weft_group *g = c->grp;
    if (weft__tfifo_len(&g->inj) <= 0) return NULL;
    if (__builtin_expect(!atomic_load_explicit(&c->shared, memory_order_relaxed), 0)) return NULL;
    return weft__tfifo_pop_locked(&g->inj);
}

/* The hand-off between groups (group.c, "Hand-offs"): t, of another group
 * than the caller's carrier (or made runnable off any carrier), goes to its
 * own group's injection queue, and a carrier of that group is woken by the
 * same protocol as within a group. */
static void enqueue_foreign(weft_thread *t) {
    /* t's group, read before the push: once queued, t may run, end and its
     * slot be reused by a spawn.  And the group must outlive the wake-up
     * below: a hand-off in flight counts as one of its live vthreads, so
     * weft_group_close cannot free it meanwhile (the default group is
     * never freed) */
    weft_group *g = t->grp;
    if (!g->dflt) atomic_fetch_add(&g->nlive, 1);
    inject_push(t);
    wake_if_needed(g);
    if (!g->dflt && atomic_fetch_sub(&g->nlive, 1) == 1) weft__group_last_exit(g);
}

static void mbox_push(weft__carrier *c, weft_thread *t) { weft__tfifo_push(&c->mbox, t); }

static inline weft_thread *mbox_pop(weft__carrier *c) { return weft__tfifo_pop(&c->mbox); }

/* Queues t on c's deque; if the deque cannot grow (no memory), on the
 * injection queue instead, a linked list that needs none: out of memory
 * never loses a runnable vthread. */
static inline __attribute__((always_inline)) void dq_push(weft__carrier *c, weft_thread *t) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) { /* the one carrier's run set (det.c) */
        weft__det_push(t);
        return;
    }
    if (__builtin_expect(weft__dq_push(&c->dq, t) != 0, 0)) inject_push(t);
}

/* Queues t on carrier c, which is the caller's own carrier. */
/* A pinned vthread goes to its home carrier's mailbox (c: the caller's
 * carrier, or NULL).  Returns 0 for one that is not pinned (yet). */
static int enqueue_pinned(weft__carrier *c, weft_thread *t) {
    /* read before the push: once queued, t may run and end a hooked
     * call's pin (weft__pin_end clears home) */
    weft__carrier *home = t->home;
    if (!((t->flags & WEFT__F_PINNED) && home)) return 0;
    mbox_push(home, t);
    if (home != c) wake_carrier(home);
    return 1;
}

static void enqueue_local(weft__carrier *c, weft_thread *t) {
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    if (enqueue_pinned(c, t)) return;
    if (__builtin_expect(t->grp != c->grp, 0)) enqueue_foreign(t); /* never run on another group's carrier */
    else dq_push(c, t);
}

/* Queues t, whose park the caller ended, at the back of c's run queue. */
static void enqueue_fifo(weft__carrier *c, weft_thread *t) {
    int pinned = (t->flags & WEFT__F_PINNED) != 0; /* before t can run */
    enqueue_local(c, t);
    if (!pinned) wake_if_needed(c->grp);
}

void weft__ready(weft_thread *t) {
    if (stale(t)) return; /* a parent's vthread, woken in a fork child: it does not exist here */
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    weft__carrier *c = weft__carrier_self();
    if (!c) { /* a platform thread: counted until its wake-up is complete (plat_waking) */
        atomic_fetch_add(&R.plat_waking, 1);
        if (!enqueue_pinned(NULL, t)) enqueue_foreign(t);
        atomic_fetch_sub(&R.plat_waking, 1);
        return;
    }
    if (enqueue_pinned(c, t)) return;
    if (__builtin_expect(t->grp != c->grp, 0)) {
        enqueue_foreign(t); /* a platform thread's wake, or another group's */
        return;
    }
    if (__builtin_expect(WEFT__DET_ON(), 0)) { /* no LIFO slot: the seeded pick decides */
        weft__det_push(t);
        return;
    }
    if (c->cur) {
        weft_thread *old = atomic_exchange_explicit(&c->lifo, t, memory_order_acq_rel);
        if (!old) return; /* this carrier runs it soon (or the monitor moves it): wake nobody */
        dq_push(c, old);
    } else {
        dq_push(c, t);
    }
    wake_if_needed(c->grp);
}

/* ------------------------------------------------------------------------ */
/* timers                                                                    */
/* ------------------------------------------------------------------------ */

static int unpark_claim(weft__parker *p, uint64_t token, int state);

/* Makes t, whose park the caller ended, runnable from a thread that is no
 * carrier (the monitor): the injection queue, or its home's mailbox. */
static void enqueue_elsewhere(weft_thread *t) {
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    if (!enqueue_pinned(NULL, t)) enqueue_foreign(t); /* its group's queue, and a wake-up there */
}

/* Fires the due timers of heap h; the vthreads whose park they end are
 * queued on the caller's carrier c so that the earliest deadline runs first
 * (c NULL: the monitor; on the injection queue).
 * block = 0: give up if another carrier holds the lock. */
static int fire_timers(weft__carrier *c, weft__theap *h, int64_t now, int block) {
    if (atomic_load_explicit(&h->min, memory_order_acquire) > now) return 0;
    if (block) pthread_mutex_lock(&h->lock);
    else if (pthread_mutex_trylock(&h->lock) != 0) return 0;
    weft_thread *batch[64];
    int n = 0, total = 0;
    weft__theap_ent e;
    for (;;) {
        if (n < 64 && weft__theap_pop_due(h, now, &e)) {
            /* a stale entry (its park ended otherwise) fails harmlessly */
            int r = unpark_claim(&e.t->parker, e.token, WEFT__PS_TIMEDOUT);
            if (r == 2) batch[n++] = e.t;
            else if (r == 0) atomic_fetch_sub_explicit(&h->dead, 1, memory_order_relaxed);
            continue;
        }
        /* in deadline order: the run queue is FIFO */
        for (int i = 0; i < n; i++) {
            if (c) enqueue_local(c, batch[i]);
            else enqueue_elsewhere(batch[i]);
        }
        total += n;
        if (n < 64) break;
        n = 0;
    }
    pthread_mutex_unlock(&h->lock);
    if (total && c) wake_if_needed(c->grp);
    return total;
}

/* ------------------------------------------------------------------------ */
/* picking work                                                              */
/* ------------------------------------------------------------------------ */

static inline weft_thread *yield_pop(weft__carrier *c);

/* Queues the vthreads whose I/O completed, in completion order. */
static int io_poll(weft__carrier *c, weft__poller *pl, int cheap) {
    weft_thread *batch[64];
    int total = 0, n;
    do {
        n = weft__poller_poll(pl, batch, 64, cheap);
        for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
        total += n;
    } while (n == 64);
    if (total) wake_if_needed(c->grp);
    return total;
}

/* The checks pick_local makes only every SLOW_EVERY picks: due timers, I/O
 * completions, and -- in turn -- the injection queue and the yield queue
 * first, so that neither starves behind a busy deque or LIFO slot.  61 as
 * Go's scheduler checks its global queue: a carrier that never runs dry
 * still looks every few microseconds, and a yield pays for the clock read
 * and the ring check a quarter as often as at 16 (switch 6.39 vs 6.65 ns,
 * same sitting).  A carrier that does run dry looks at once (find_work). */
static weft_thread *pick_slow(weft__carrier *c) {
    weft_thread *t = NULL;
    if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) != INT64_MAX)
        fire_timers(c, &c->timers, weft_now(), 1);
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
    if (pl) io_poll(c, pl, 1);
    uint32_t turn = atomic_load_explicit(&c->slow_turn, memory_order_relaxed) + 1;
    atomic_store_explicit(&c->slow_turn, turn, memory_order_relaxed);
    if (turn % 4 == 0) t = inject_pop(c);
    else if (turn % 4 == 2) t = yield_pop(c);
    return t;
}

static weft_thread *pick_det(weft__carrier *c);

/* pick_local without the deterministic-mode test, for callers that made it
 * already (weft_yield, find_work): the switch path pays for one test of
 * weft__det_on, not two (two atomic loads of the global were 7 of a
 * yield's ~93 instructions, callgrind on micro switch; now c->det, one
 * compare in the carrier's first line). */
static inline __attribute__((always_inline)) weft_thread *pick_local_rt(weft__carrier *c);

static inline __attribute__((always_inline)) weft_thread *pick_local(weft__carrier *c) {
    if (__builtin_expect(c->det, 0)) return pick_det(c);
    return pick_local_rt(c);
}

static inline __attribute__((always_inline)) weft_thread *pick_local_rt(weft__carrier *c) {
    weft_thread *t;
    if (__builtin_expect(--c->slow_countdown == 0, 0)) {
        c->slow_countdown = SLOW_EVERY;
        if ((t = pick_slow(c))) return t;
    }
    /* the LIFO slot first, unless it has run LIFO_CAP times in a row while
     * the mailbox or the deque waits (only this carrier fills its own slot,
     * so what we see here cannot change under us except by a thief
     * emptying it) */
    if (atomic_load_explicit(&c->lifo, memory_order_relaxed)) {
        if (c->lifo_streak < LIFO_CAP ||
            (weft__dq_size(&c->dq) <= 0 && weft__tfifo_len(&c->mbox) <= 0)) {
            t = atomic_exchange_explicit(&c->lifo, NULL, memory_order_acq_rel);
            if (t) {
                c->lifo_streak++;
                return t;
            }
        }
    }
    if (c->lifo_streak) c->lifo_streak = 0;
    if ((t = mbox_pop(c))) return t;
    if ((t = weft__dq_take(&c->dq))) return t;
    if ((t = yield_pop(c))) return t;
    return inject_pop(c);
}

static uint32_t rnd(weft__carrier *c) {
    uint64_t x = c->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->rng = x;
    return (uint32_t)(x >> 32);
}

/* One pass over the other carriers from a random start. */
static weft_thread *steal_once(weft__carrier *c, int take_lifo, int64_t now) {
    weft_group *g = c->grp; /* its own group's carriers only */
    int n = gall(g);
    if (n <= 1) return NULL;
    uint32_t start = rnd(c) % (uint32_t)n;
    for (int i = 0; i < n; i++) {
        weft__carrier *v = g->c[(start + (uint32_t)i) % (uint32_t)n];
        if (v == c) continue;
        for (int tries = 0; tries < 4; tries++) {
            void *batch[STEAL_MAX];
            int k = weft__dq_steal_half(&v->dq, batch, STEAL_MAX);
            if (k == 0) break;
            if (k > 0) {
                /* run the first, queue the rest here */
                for (int j = 1; j < k; j++) dq_push(c, batch[j]);
                atomic_store_explicit(&c->n_steals, atomic_load_explicit(&c->n_steals, memory_order_relaxed) + (uint64_t)k,
                                      memory_order_relaxed);
                return batch[0];
            }
        }
        if (take_lifo && atomic_load_explicit(&v->lifo, memory_order_relaxed)) {
            weft_thread *t = atomic_exchange_explicit(&v->lifo, NULL, memory_order_acq_rel);
            if (t) {
                bump(&c->n_steals);
                return t;
            }
        }
        /* a busy carrier's overdue timers */
        if (now && fire_timers(c, &v->timers, now, 0)) {
            weft_thread *t = weft__dq_take(&c->dq);
            if (t) return t;
        }
    }
    return NULL;
}

static int work_visible(weft__carrier *c) {
    weft_group *g = c->grp;
    if (atomic_load(&g->inj.n) > 0 || atomic_load(&c->mbox.n) > 0) return 1;
    for (int i = 0, n = gall(g); i < n; i++) {
        weft__carrier *v = g->c[i];
        if (weft__dq_size(&v->dq) > 0 || atomic_load(&v->lifo)) return 1;
    }
    return atomic_load(&c->timers.min) <= weft_now();
}

static void stop_spinning(weft__carrier *c) {
    if (!c->spinning) return;
    c->spinning = 0;
    /* the last spinner to find work makes sure another looks for more */
    if (atomic_fetch_sub(&c->grp->nspinning, 1) == 1) wake_if_needed(c->grp);
}

static void flush_live(weft__carrier *c);
static void retired_sleep(weft__carrier *c, weft__poller *pl);

/* ---- deterministic mode (det.c has the design) ----------------------------
 * The one carrier's decision: what arrived from outside (the injection
 * queue, the mailbox: platform threads, the blocking pool) and what is due
 * (timers on the virtual clock, reaped I/O completions) joins the run set,
 * then det.c draws the next vthread from it. */
static weft_thread *pick_det(weft__carrier *c) {
    weft_thread *t;
    while ((t = inject_pop(c)) || (t = mbox_pop(c))) {
        weft__det_note_inject(t);
        weft__det_push(t);
    }
    int64_t now = weft__det_now();
    if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) <= now) fire_timers(c, &c->timers, now, 1);
    weft__det_pwait_fire(now); /* platform threads' timed waits */
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
    if (pl) io_poll(c, pl, 1);
    return weft__det_pick();
}

/* find_work in deterministic mode: no stealing or spinning (one carrier);
 * nothing runnable and timers pending: the clock jumps to the first, after
 * outstanding I/O had WEFT__DET_IO_WAIT_NS of real time to complete;
 * nothing at all: sleep in the poller (or on the futex) as find_work does,
 * until a platform thread, the blocking pool or the kernel hands work in. */
static inline int64_t det_real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static weft_thread *find_work_det(weft__carrier *c) {
    weft_group *g = c->grp; /* the default group: the mode has no other */
    /* when (real time) the I/O's time before the jump is over: a wait the
     * poller ends early with nothing (a stale kick, the stacks' trim) goes
     * on for the rest, rather than jumping at once */
    int64_t hold_end = 0;
    for (;;) {
        if (atomic_load_explicit(&R.stop, memory_order_acquire)) return NULL;
        weft_thread *t = pick_det(c);
        if (t) return t;
        weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
        if (pl && io_poll(c, pl, 0)) continue;
        int64_t min = atomic_load(&c->timers.min), pmin = weft__det_pwait_min();
        if (pmin < min) min = pmin;
        int waited = 0;
        int64_t hold = min != INT64_MAX ? weft__det_hold_ns() : 0;
        /* nothing runnable, no timer, nothing outside that could wake a
         * vthread, for WEFT__DET_DEADLOCK_NS of real time: a deadlock,
         * reported (det.c) rather than idled on forever */
        int64_t stuck = weft__det_deadlock_in(min);
        if (stuck == 0) {
            /* only if some vthread waits: a runtime with none (a program
             * between two of its own) or only daemons idles as ever */
            if (!work_visible(c) && weft__nondaemon_live() > 0) weft__det_deadlock();
            stuck = INT64_MAX;
        }
        if (min != INT64_MAX && !hold) {
            hold_end = 0; /* (a later hold in this search starts afresh) */
            weft__det_jump(min);
            continue;
        }
        /* the stack allocator's background work, as find_work does it (on
         * the real clock: memory, not scheduling) */
        if (weft__stacks_refill() > 0) continue;
        if (weft__stacks_trim() || weft__stacks_idle_trim(&c->stacks)) continue;
        /* go idle: publish, then look once more (as find_work) */
        flush_live(c);
        uint32_t seq = atomic_load(&c->wake_seq);
        set_idle_bit(g, c->gidx);
        atomic_fetch_add(&g->nidle, 1);
        if (!work_visible(c) && !atomic_load(&R.stop)) {
            /* a bounded real wait if a jump is due after it, or the
             * stacks' idle trim (real time) */
            int64_t rnow = det_real_ns(), wait = stuck;
            if (min != INT64_MAX) {
                if (!hold_end) hold_end = rnow + hold;
                wait = hold_end > rnow ? hold_end - rnow : 0;
            }
            int64_t trim = weft__stacks_trim_due(&c->stacks);
            if (trim != INT64_MAX) {
                int64_t left = trim - rnow;
                if (left < wait) wait = left > 0 ? left : 0;
            }
            int64_t vdl = wait != INT64_MAX ? weft__det_now() + (wait ? wait : 1) : 0;
            if (pl) {
                weft_thread *batch[64];
                int n = weft__poller_wait(pl, vdl, batch, 64); /* (its timeout: vdl - weft_now()) */
                for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
                waited = n == 0 && atomic_load(&c->wake_seq) == seq; /* not kicked */
            } else {
                futex_wait_until(&c->wake_seq, seq, weft__det_real_deadline(vdl));
                waited = atomic_load(&c->wake_seq) == seq;
            }
        }
        if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
        else atomic_fetch_sub(&g->nspinning, 1); /* a waker counted us as spinning: we do not spin */
        if (waited && min != INT64_MAX && !weft__tfifo_len(&g->inj) && det_real_ns() >= hold_end) {
            hold_end = 0;
            weft__det_waited();
            weft__det_jump(min); /* the I/O did not come in time: virtual time goes on */
        }
    }
}

/* The sched context's search; returns NULL only when stopping. */
static weft_thread *find_work(weft__carrier *c) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) return find_work_det(c);
    weft_group *g = c->grp; /* the idle protocol below is g's */
    for (;;) {
        if (atomic_load_explicit(&R.stop, memory_order_acquire) ||
            atomic_load_explicit(&g->stop, memory_order_acquire))
            return NULL;
        weft_thread *t = pick_local_rt(c); /* (det: find_work_det, above) */
        if (t) { stop_spinning(c); return t; }
        int64_t now = 0;
        if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) != INT64_MAX) {
            now = weft_now();
            if (fire_timers(c, &c->timers, now, 1)) continue;
        }
        weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
        if (pl && io_poll(c, pl, 0)) continue;
        if (__builtin_expect(!atomic_load_explicit(&c->shared, memory_order_acquire), 0)) {
            /* a retired spare: nothing of its own left; it takes no one
             * else's work ("Spares") and passes on a wake-up meant for a
             * carrier that would */
            stop_spinning(c);
            retired_sleep(c, pl);
            continue;
        }
        /* Runnable vthreads elsewhere come first: a spawn burst's children
         * must start (and, say, begin their sleep) without waiting for the
         * spawner to finish.  Then, if that burst is outrunning the stack
         * supply, help make stacks. */
        if ((t = steal_once(c, 0, now))) {
            stop_spinning(c);
            return t;
        }
        if (weft__stacks_refill() > 0) continue;
        if (!c->spinning) {
            int sp = atomic_load(&g->nspinning);
            if (2 * sp <= nshared(g) - atomic_load(&g->nidle)) { /* at most half the busy ones, and one at least */
                c->spinning = 1;
                atomic_fetch_add(&g->nspinning, 1);
            }
        }
        if (c->spinning) {
            /* Spin (up to SPIN_NS, as spin_budget says) before sleeping: on
             * this kind of VM waking a sleeping carrier costs tens of
             * microseconds, so a hand-off that comes back within that time
             * is far cheaper caught spinning. */
            int64_t budget = c->spin_budget > spin_ns || c->spin_budget <= 0 ? spin_ns : c->spin_budget;
            int64_t start = weft_now(), until = start + budget, last = start;
            for (int r = 0;; r++) {
                t = steal_once(c, r >= 2, (r & 7) == 0 ? (last = weft_now()) : 0);
                if (!t && pl && (r & 7) == 4) io_poll(c, pl, 1);
                if (!t) t = pick_local_rt(c);
                if (t) break;
                for (int k = 0; k < 16; k++) weft__cpu_relax();
                if ((r & 7) == 7 &&
                    ((last = weft_now()) >= until || atomic_load_explicit(&R.stop, memory_order_relaxed) ||
                     atomic_load_explicit(&g->stop, memory_order_relaxed) ||
                     !atomic_load_explicit(&c->shared, memory_order_relaxed)))
                    break;
            }
            if (t && last - start <= SPIN_PAYS_NS) { /* (last: the loop's latest clock read) */
                c->spin_budget = spin_ns;
            } else {
                int64_t half = budget / 2;
                c->spin_budget = half > SPIN_PAYS_NS ? half : SPIN_PAYS_NS;
            }
            if (t) { stop_spinning(c); return t; }
        }
        /* Memory above the stack cache's high-water mark goes back in a lull:
         * only when every other carrier sleeps too, since each batch's TLB
         * shootdown interrupts the carriers still running (a group's
         * carrier: its group's and the default group's; other groups'
         * are not looked at).  After an idle
         * period the deep pages of the stacks kept hot go back as well. */
        if (atomic_load_explicit(&g->nidle, memory_order_relaxed) >= nshared(g) - 1 &&
            (g->dflt || atomic_load_explicit(&R.g0.nidle, memory_order_relaxed) >= nshared(&R.g0)) &&
            (weft__stacks_trim() || weft__stacks_idle_trim(&c->stacks)))
            continue;
        /* go idle: publish, then look once more */
        flush_live(c);
        uint32_t seq = atomic_load(&c->wake_seq);
        set_idle_bit(g, c->gidx);
        int idle_now = atomic_fetch_add(&g->nidle, 1) + 1;
        if (c->spinning) {
            c->spinning = 0;
            atomic_fetch_sub(&g->nspinning, 1);
        }
        /* A spare retired since the loop's top looked (its kick may have
         * been taken by the spin's polls) sleeps outside the idle set: in
         * it, it would count as a carrier ready for work -- keeping the
         * monitor from activating a spare -- while it takes none.  And a
         * wake-up it absorbed as a spinner (a submitter saw nspinning and
         * woke nobody) is passed on: its last look does not cover the
         * injection queue, which it no longer takes. */
        if (__builtin_expect(!atomic_load(&c->shared), 0)) {
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1; /* a waker counted us as spinning: passed on at the top */
            wake_if_needed(g);
            mon_need();
            continue;
        }
        if (work_visible(c) || atomic_load(&R.stop) || atomic_load(&g->stop)) {
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1; /* a waker counted us as spinning */
            mon_need(); /* busy again (the monitor may have seen us idle) */
            continue;
        }
        int64_t min = atomic_load(&c->timers.min);
        /* wake for the idle trim when it falls due (not when it is due
         * already: then the other carriers are busy, and it waits for the
         * next lull) */
        int64_t trim = weft__stacks_trim_due(&c->stacks), tnow = trim != INT64_MAX ? weft_now() : 0;
        if (trim < min && trim > tnow) min = trim;
        /* ... except for the last carrier to go idle, once per lull: two
         * carriers that woke for the same trim at once each saw the other
         * busy, and went back to sleep with it due -- and nobody trimmed
         * until the next burst's lull (rss_returned_after_burst failed on
         * it in a suite).  Its fetch_add saw the full count: it trims now. */
        else if (trim != INT64_MAX && trim <= tnow && trim != c->trim_retried && idle_now >= nshared(g) && g->dflt) {
            c->trim_retried = trim;
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1;
            mon_need();
            continue;
        }
        if (pl) {
            /* asleep in the poller: a completion, a kick (its eventfd) or
             * the next timer ends it */
            weft_thread *batch[64];
            int n = weft__poller_wait(pl, min == INT64_MAX ? 0 : min, batch, 64);
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1;
            mon_need();
            for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
            if (n) wake_if_needed(g);
            continue;
        }
        futex_wait_until(&c->wake_seq, seq, min == INT64_MAX ? 0 : min);
        if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
        else c->spinning = 1;
        mon_need();
    }
}

/* ------------------------------------------------------------------------ */
/* a retired spare's sleep (spares.c, "Spares")                            */
/* ------------------------------------------------------------------------ */

/* What a retired spare still owes: its own queues, its due timers. */
static int own_work(weft__carrier *c) {
    return atomic_load(&c->mbox.n) > 0 || weft__dq_size(&c->dq) > 0 || atomic_load(&c->lifo) || c->yq_head ||
           atomic_load(&c->timers.min) <= weft_now();
}

/* A retired spare with nothing of its own to run sleeps in its poller (its
 * ring's completions, its next timer, a kick), outside the idle set: only
 * wake_carrier (work pinned to it) and the monitor (activating it) wake
 * it.  dormant and its last look are a Dekker pair with wake_carrier's
 * fence and with the monitor's disarm (any_busy). */
static void retired_sleep(weft__carrier *c, weft__poller *pl) {
    flush_live(c);
    /* its cached stacks to the depot: only idle shared carriers return
     * stack memory, and a retired spare may sleep until shutdown (a burst
     * it helped with left up to WEFT__STACK_CACHE_CAP stacks here, whole) */
    weft__stacks_cache_flush(&c->stacks);
    uint32_t seq = atomic_load(&c->wake_seq);
    atomic_store(&c->dormant, 1);
    if (own_work(c) || atomic_load(&c->shared) || atomic_load(&R.stop)) {
        atomic_store(&c->dormant, 0);
        mon_need();
        return;
    }
    int64_t min = atomic_load(&c->timers.min);
    if (pl) {
        weft_thread *batch[64];
        int n = weft__poller_wait(pl, min == INT64_MAX ? 0 : min, batch, 64);
        atomic_store(&c->dormant, 0);
        mon_need();
        for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
        if (n) wake_if_needed(c->grp);
        return;
    }
    futex_wait_until(&c->wake_seq, seq, min == INT64_MAX ? 0 : min);
    atomic_store(&c->dormant, 0);
    mon_need();
}

/* ------------------------------------------------------------------------ */
/* switching                                                                 */
/* ------------------------------------------------------------------------ */

static void exit_finish(weft__carrier *c, weft_thread *t);

/*
 * A yielded vthread goes to the carrier's private FIFO: no atomic operation
 * on the yield path.  Private means thieves cannot see it, so as soon as
 * some carrier idles, the whole private queue moves to the deque (where it
 * can be stolen) and a sleeper is woken.  Pinned vthreads can always stay.
 */
static inline void yq_append(weft__carrier *c, weft_thread *t) {
    t->next = NULL; /* (rstate stays RUNNABLE: see the dump's note on it) */
    if (c->yq_tail) c->yq_tail->next = t;
    else c->yq_head = t;
    c->yq_tail = t;
}

static void yield_enqueue(weft__carrier *c, weft_thread *t) {
    yq_append(c, t);
    if (!c->yq_private || atomic_load_explicit(&c->grp->nidle, memory_order_relaxed) > 0) {
        weft_thread *keep = NULL, *keep_tail = NULL;
        for (weft_thread *x = c->yq_head, *nx; x; x = nx) {
            nx = x->next;
            if (x->flags & WEFT__F_PINNED) {
                x->next = NULL;
                if (keep_tail) keep_tail->next = x;
                else keep = x;
                keep_tail = x;
            } else {
                dq_push(c, x);
            }
        }
        c->yq_head = keep;
        c->yq_tail = keep_tail;
        wake_if_needed(c->grp);
    }
}

/*
 * The yield FIFO's gate (see "The monitor").  The owner carrier is "in"
 * from the moment a vthread enters the scheduler (a yield, a park, an exit)
 * until the next vthread, already on its own stack, is about to run its own
 * code (resumed(), after finish_pending), and touches its FIFO only while
 * in.  Out therefore also means that every vthread in the FIFO has left its
 * stack (a yield queues itself there before its switch).  In is told by
 * c->cur: NULL while in (as in the sched context), the vthread while its
 * own code runs.  So stepping in costs one store and a load of the
 * monitor's flag, and stepping out is the store of c->cur that a switch
 * makes anyway: no fence.  (c->pending names the vthread that stepped in,
 * for the stack overflow handler.)  The monitor takes a busy carrier's
 * FIFO only while the carrier is out, and pays for both sides with
 * membarrier(2), which runs a full barrier on every CPU running the
 * process (an asymmetric Dekker): after it, either the monitor sees c->cur
 * NULL, or the owner, stepping in later, sees the monitor's flag and waits
 * for it.  TSan models no such barrier: its builds also hold a real lock
 * (yq_lock) while in.
 */
#ifndef WEFT_TSAN
__attribute__((noinline)) static void yq_wait_thief(weft__carrier *c) {
    while (atomic_load_explicit(&c->yq_thief, memory_order_acquire)) weft__cpu_relax();
}
#endif
static inline __attribute__((always_inline)) void gate_in(weft__carrier *c, weft_thread *self) {
    c->pending = self;
    __atomic_store_n(&c->cur, (weft_thread *)NULL, __ATOMIC_RELAXED);
    /* its vthread-locals leave the carrier's window (local.c) */
    if (__builtin_expect(self->locals != NULL, 0)) weft__locals_leave(c->win, self);
#ifdef WEFT_TSAN
    for (int z = 0; !atomic_compare_exchange_weak_explicit(&c->yq_lock, &z, 1, memory_order_acquire,
                                                         memory_order_relaxed);
         z = 0)
        weft__cpu_relax();
#else
    atomic_signal_fence(memory_order_seq_cst); /* the CPU's order: the thief's membarrier */
    if (__builtin_expect(atomic_load_explicit(&c->yq_thief, memory_order_relaxed), 0)) yq_wait_thief(c);
#endif
}
/* t's code runs on c from here (release: the FIFO's writes before it) */
static inline __attribute__((always_inline)) void gate_out(weft__carrier *c, weft_thread *t) {
#ifdef WEFT_TSAN
    atomic_store_explicit(&c->yq_lock, 0, memory_order_release);
#endif
    __atomic_store_n(&c->cur, t, __ATOMIC_RELEASE);
    /* its vthread-locals into the carrier's window (local.c) */
    if (__builtin_expect(t->locals != NULL, 0)) weft__locals_enter(c->win, t);
}
static inline weft_thread *yield_pop(weft__carrier *c) {
    weft_thread *t = c->yq_head;
    if (t) {
        c->yq_head = t->next;
        if (!c->yq_head) c->yq_tail = NULL;
    }
    return t;
}

/* Called in the scheduler (the gate in), after the old stack was left. */
static void finish_pending(weft__carrier *c) {
    int op = c->pending_op;
    if (op == OP_NONE) return;
    weft_thread *t = c->pending;
    c->pending_op = OP_NONE;
    c->pending = NULL;
    switch (op) {
    case OP_YIELD:
        yield_enqueue(c, t);
        break;
    case OP_PARK: {
        uint64_t tok = t->park_token;
        uint64_t parked = (tok & ~(uint64_t)0xF) | WEFT__PS_WAIT_PARKED;
        atomic_store_explicit(&t->rstate, WEFT__RS_PARKED, memory_order_relaxed);
        if (!atomic_compare_exchange_strong(&t->parker.word, &tok, parked))
            enqueue_local(c, t); /* ended before we got here: run it again */
        break;
    }
    case OP_EXIT:
        exit_finish(c, t);
        break;
    }
}

static inline void check_canary(weft_thread *t) {
    if (__builtin_expect(t->stk.guard == WEFT__GUARD_CANARY, 0) &&
        *(volatile uint64_t *)t->stk.lo != WEFT__CANARY) {
        char name[32];
        fmt_name(t, name);
        fprintf(stderr, "weft: stack overflow in vthread %llu \"%s\" (stack %zu KiB): canary smashed\n",
                (unsigned long long)t->id, name, t->stk.size / 1024);
        abort();
    }
}

/* The thread pointer for the next context: tp, a vthread's own TLS block
 * (arch/tls.c), or NULL, the carrier's own.  On a block, weft's own
 * thread-locals are the block's copies: the carrier and its window are
 * written there, so that weft's code the vthread runs finds them as on
 * the carrier.  They are initial-exec, at the same offset from every
 * thread pointer (tls_off_*, taken once), so they are written through the
 * block's address before the fs base changes: no access through %fs waits
 * on the new base.  Nothing between this and the switch reads a
 * thread-local (the canary at %fs:0x28 is the same in every block). */
static ptrdiff_t tls_off_carrier, tls_off_window, tls_off_sud;
__attribute__((constructor)) static void tls_offsets(void) { /* (at load: one thread) */
    tls_off_carrier = (char *)&tls_carrier - (char *)weft__tp_get();
    tls_off_window = (char *)&weft__tls_window - (char *)weft__tp_get();
    tls_off_sud = (char *)&weft__sud_sel - (char *)weft__tp_get();
}
__attribute__((noinline)) static void tp_switch_slow(weft__carrier *c, void *tp) {
    if (tp) {
        *(weft__carrier **)((char *)tp + tls_off_carrier) = c;
        *(void *const **)((char *)tp + tls_off_window) = c->tls_window;
        *(unsigned char **)((char *)tp + tls_off_sud) = c->sud_sel;
    }
    weft__tp_set(tp ? tp : c->tp_own);
    c->tp_cur = tp;
}
static inline __attribute__((always_inline)) void tp_switch(weft__carrier *c, void *tp) {
    if (__builtin_expect(tp != c->tp_cur, 0)) tp_switch_slow(c, tp);
}

/* CLOCK_MONOTONIC, ns, whatever weft_now's clock is (deterministic mode's
 * is virtual): an own-TLS vthread's time on its carrier ("cpu_ns") */
static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft__thread_cpu_ns(void) {
    weft_thread *self = weft__self();
    if (!self || !self->tls) return -1;
    return self->cpu_ns + (mono_ns() - self->cpu_since);
}

/* Sets up `next` to run on c; called just before switching to it.  now:
 * mono_ns(), read by the caller if next has its own TLS (its CPU clock:
 * weft__thread_cpu_ns), else unused. */
static inline void enter(weft__carrier *c, weft_thread *next, int64_t now) {
    if (next->tls) next->cpu_since = now;
    tp_switch(c, next->tls);
    /* the trap's selector as next left it (internal.h: sud) */
    if (c->sud_sel) __builtin_memcpy(c->sud, &next->sud, 2); /* (all 0 where nothing traps) */
    /* a release store (on x86 a plain mov): weft_dump reads it from
     * other threads and then reads c, which another thread may have made
     * (a spare, made by the monitor) -- the release passes on what this
     * carrier saw of c's making.  c->cur is set by next itself, once on
     * its stack (resumed) */
    __atomic_store_n(&next->carrier, c, __ATOMIC_RELEASE);
    bump(&c->n_switches);
}

/* Called by every vthread right after it is switched back in; c is the
 * carrier that switched to it (the switch's arg). */
static inline void resumed(weft_thread *self, weft__carrier *c) {
#ifdef WEFT_ASAN
    __sanitizer_finish_switch_fiber(self->asan_fake, NULL, NULL);
#endif
    (void)self;
    if (c->pending_op != OP_NONE) finish_pending(c); /* a private-queue yield leaves none */
    gate_out(c, self); /* our own code runs from here */
}

/* Switches from vthread self to next (NULL: the sched context), leaving
 * `op` for the next context to finish.  Returns when self is resumed. */
static inline __attribute__((always_inline)) void switch_to(weft__carrier *c, weft_thread *self, weft_thread *next, int op) {
    check_canary(self);
    /* (one clock read for both own-TLS vthreads' CPU clocks) */
    int64_t now = self->tls || (next && next->tls) ? mono_ns() : 0;
    if (self->tls) self->cpu_ns += now - self->cpu_since;
    /* its trap selector, for enter() when it runs again; weft's own code
     * from here to the switch (enter's thread pointer write may be a
     * system call) */
    if (c->sud_sel) {
        __builtin_memcpy(&self->sud, c->sud, 2);
        c->sud[0] = 0;
    }
    c->pending_op = op; /* (c->pending = self: gate_in) */
    void *to_sp;
#ifdef WEFT_ASAN
    const void *bottom;
    size_t size;
#endif
    if (next) {
        enter(c, next, now);
        to_sp = next->sp;
#ifdef WEFT_ASAN
        bottom = next->stk.lo;
        size = next->stk.size;
#endif
#ifdef WEFT_TSAN
        __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
    } else { /* (c->cur is NULL: gate_in) */
        tp_switch(c, NULL);
        if (c->sud_sel) c->sud[1] = 0; /* (sud[0]: above) the sched context is weft's own code */
        to_sp = c->sched_sp;
#ifdef WEFT_ASAN
        bottom = c->asan_bottom;
        size = c->asan_size;
#endif
#ifdef WEFT_TSAN
        __tsan_switch_to_fiber(c->tsan_fiber, 0);
#endif
    }
#ifdef WEFT_ASAN
    __sanitizer_start_switch_fiber(op == OP_EXIT ? NULL : &self->asan_fake, bottom, size);
#endif
    c = weft__ctx_switch(&self->sp, to_sp, c);
    resumed(self, c);
}

/* Leaves the CPU to park or exit: runs the next local vthread, or the
 * sched context when there is none. */
static void switch_out(weft__carrier *c, weft_thread *self, int op) {
    gate_in(c, self);
    switch_to(c, self, pick_local(c), op);
}

/* Runs t from the sched context of c until it switches back there. */
static void run_from_sched(weft__carrier *c, weft_thread *t) {
    enter(c, t, t->tls ? mono_ns() : 0);
#ifdef WEFT_ASAN
    __sanitizer_start_switch_fiber(&c->asan_fake, t->stk.lo, t->stk.size);
#endif
#ifdef WEFT_TSAN
    __tsan_switch_to_fiber(t->tsan_fiber, 0);
#endif
    weft__ctx_switch(&c->sched_sp, t->sp, c);
#ifdef WEFT_ASAN
    __sanitizer_finish_switch_fiber(c->asan_fake, NULL, NULL);
#endif
    finish_pending(c);
}

/* ------------------------------------------------------------------------ */
/* parking                                                                   */
/* ------------------------------------------------------------------------ */

/* Publishes the next park of p (seq + 1, kind, WAIT_RUN) and returns it. */
static uint64_t publish_park(weft_thread *self, weft__parker *p, int kind) {
    if (!self) kind |= WEFT__PK_PLATFORM;
    uint64_t w = atomic_load_explicit(&p->word, memory_order_relaxed);
    uint64_t tok = (((w >> 8) + 1) << 8) | ((uint64_t)kind << 4) | WEFT__PS_WAIT_RUN;
    atomic_store(&p->word, tok); /* seq_cst: pairs with weft_cancel */
    if (self) self->park_token = tok;
    return tok;
}

uint64_t weft__park_begin_nocancel(weft__parker **pp, int kind) {
    weft_thread *self = weft__self();
    *pp = self ? &self->parker : &tls_parker;
    return publish_park(self, *pp, kind | WEFT__PK_NOCANCEL);
}

uint64_t weft__park_begin(weft__parker **pp, int kind) {
    weft_thread *self = weft__self();
    weft__parker *p;
    _Atomic int *cancelled, *shielded;
    if (self) {
        p = &self->parker;
        cancelled = &self->cancelled;
        shielded = &self->shielded;
    } else {
        p = &tls_parker;
        cancelled = &tls_pc.cancelled;
        shielded = &tls_pc.shielded;
    }
    /* inside a shield a cancellation waits for weft_shield_end (the
     * canceller leaves a shielded park alone: weft__cancel_one) */
    if (atomic_load_explicit(shielded, memory_order_relaxed)) {
        *pp = p;
        return publish_park(self, p, kind);
    }
    if (atomic_load_explicit(cancelled, memory_order_relaxed)) return 0;
    *pp = p;
    uint64_t tok = publish_park(self, p, kind);
    /* (an interrupt: only inside the hooked wait it was meant for, "Interrupts") */
    if (atomic_load(cancelled) ||
        (self && __builtin_expect(atomic_load(&self->intr_sig) != 0, 0) && (atomic_load(&self->intr_seq) & 1))) {
        uint64_t e = tok;
        atomic_compare_exchange_strong(&p->word, &e, (tok & ~(uint64_t)0xF) | WEFT__PS_CANCELLED);
        return 0;
    }
    return tok;
}

/* Ends park `token` with `state` if it still waits.  Returns 0 if it had
 * already ended, 1 if this call ended it before the thread switched away
 * (nothing more to do), 2 if the thread is parked and the caller must make
 * it runnable.  A platform thread is woken here. */
static int unpark_claim(weft__parker *p, uint64_t token, int state) {
    uint64_t cur = atomic_load(&p->word);
    for (;;) {
        if (!WEFT__PW_SAME_PARK(cur, token)) return 0;
        unsigned st = WEFT__PW_STATE(cur);
        if (st != WEFT__PS_WAIT_RUN && st != WEFT__PS_WAIT_PARKED) return 0;
        uint64_t to = (cur & ~(uint64_t)0xF) | (uint64_t)state;
        if (atomic_compare_exchange_weak(&p->word, &cur, to)) {
            /* p is not read past this point unless st was WAIT_PARKED */
            if (WEFT__PW_PLATFORM(cur)) {
                futex_wake(word_lo(&p->word), INT_MAX);
                if (__builtin_expect(WEFT__DET_ON(), 0)) weft__det_platform_active(); /* (det.c: grace) */
                return 1;
            }
            return st == WEFT__PS_WAIT_PARKED ? 2 : 1;
        }
    }
}

int weft__unpark_kind(weft__parker *p, int kind) {
    uint64_t w = atomic_load(&p->word);
    unsigned st = WEFT__PW_STATE(w);
    if (WEFT__PW_KIND(w) != (unsigned)kind || (st != WEFT__PS_WAIT_RUN && st != WEFT__PS_WAIT_PARKED)) return 0;
    return unpark_claim(p, w, WEFT__PS_WOKEN);
}

int weft__park_abort(weft__parker *p, uint64_t token) {
    uint64_t e = token; /* still WAIT_RUN: we have not switched away */
    return atomic_compare_exchange_strong(&p->word, &e, (token & ~(uint64_t)0xF) | WEFT__PS_WOKEN);
}

weft__poller *weft__poller_self(void) {
    weft__carrier *c = tls_carrier;
    return c ? atomic_load_explicit(&c->poller, memory_order_relaxed) : NULL;
}

int weft__unpark(weft__parker *p, uint64_t token, int state) {
    int r = unpark_claim(p, token, state);
    if (r == 2) weft__ready(p->vt);
    return r != 0;
}

static int outcome(uint64_t w) {
    switch (WEFT__PW_STATE(w)) {
    case WEFT__PS_TIMEDOUT: return -ETIMEDOUT;
    case WEFT__PS_CANCELLED: return -ECANCELED;
    default: return 0;
    }
}

int64_t weft__effective_deadline(int64_t d) {
    weft_thread *self = weft__self();
    int64_t own = self ? self->deadline : tls_deadline;
    if (own && (!d || own < d)) d = own;
    if (self && self->scope_deadline && (!d || self->scope_deadline < d)) d = self->scope_deadline;
    return d;
}

int weft__park_wait(weft__parker *p, uint64_t token, int64_t deadline, int why,
                    const void *obj, const char *file, int line) {
    if (!WEFT__PW_NOCANCEL(token)) deadline = weft__effective_deadline(deadline);
    if (deadline == INT64_MAX) deadline = 0;
    weft_thread *self = p->vt;
    if (!self) {
        /* platform thread: sleep on the word itself (deterministic mode:
         * for real, the virtual deadline made a real one, det.c) */
        weft__det_pwait dw = {.p = p, .token = token, .deadline = deadline};
        int det = __builtin_expect(WEFT__DET_ON(), 0) && deadline, real = 0;
        int64_t until = deadline; /* (on the clock the loop reads) */
        if (det && !atomic_load(&R.up)) {
            /* no carrier to run the virtual clock (a channel used before
             * the runtime starts): the wait is real */
            det = 0;
            real = 1;
            until = weft__det_real_deadline(deadline);
        }
        if (__builtin_expect(WEFT__DET_ON(), 0) && atomic_load(&R.up)) {
            /* the carrier times it out on the virtual clock, and may hold
             * the clock for us while we are active (det.c): registered
             * first, then "parked", then a kick (the jump may be due) */
            if (det) weft__det_pwait_add(&dw);
            int was = weft__det_platform_parks();
            uint64_t w = atomic_load(&p->word);
            if (!WEFT__PW_SAME_PARK(w, token) || WEFT__PW_STATE(w) != WEFT__PS_WAIT_RUN)
                weft__det_platform_active(); /* ended already: we go on at once */
            else if (was || det)
                kick(R.c[0]);
        }
        for (;;) {
            uint64_t w = atomic_load(&p->word);
            if (!WEFT__PW_SAME_PARK(w, token) || WEFT__PW_STATE(w) != WEFT__PS_WAIT_RUN) break;
            if (until && (real ? mono_now() : weft_now()) >= until) {
                if (real) weft__det_clock_reach(deadline); /* the clock nobody else runs */
                /* end it ourselves, without weft__unpark's futex wake: only
                 * this thread sleeps on its word (a wake walks the futex
                 * hash bucket, which 10,000 sleeping pool threads make
                 * long) */
                atomic_compare_exchange_strong(&p->word, &w, (w & ~(uint64_t)0xF) | WEFT__PS_TIMEDOUT);
                continue;
            }
            futex_wait_until(word_lo(&p->word), (uint32_t)w, det ? 0 : until);
        }
        if (det) weft__det_pwait_del(&dw);
        return outcome(atomic_load(&p->word));
    }
    if (deadline && deadline <= weft_now()) {
        weft__unpark(p, token, WEFT__PS_TIMEDOUT);
        return outcome(atomic_load(&p->word));
    }
    weft__carrier *c = weft__carrier_self();
    weft__theap *h = NULL;
    if (deadline) {
        h = &c->timers;
        self->timer_heap = c->index;
        pthread_mutex_lock(&h->lock);
        int r = weft__theap_insert(h, deadline, self, token);
        pthread_mutex_unlock(&h->lock);
        if (r < 0) {
            /* cannot time out: end the park ourselves */
            if (weft__unpark(p, token, WEFT__PS_WOKEN)) return r;
            return outcome(atomic_load(&p->word));
        }
    }
    __atomic_store_n(&self->why, (uint8_t)why, __ATOMIC_RELAXED); /* read by weft_dump */
    atomic_store_explicit(&self->block_file, file, memory_order_relaxed);
    atomic_store_explicit(&self->block_line, line, memory_order_relaxed);
    atomic_store_explicit(&self->block_obj, obj, memory_order_relaxed);
    /* (on weft_now's clock, as block_until and the dump's now: the virtual
     * one in deterministic mode) */
    atomic_store_explicit(&self->block_since, __builtin_expect(WEFT__DET_ON(), 0) ? weft__det_now() : coarse_now(),
                          memory_order_relaxed);
    atomic_store_explicit(&self->block_until, deadline, memory_order_relaxed);
    bump(&c->n_parks);
    /* deterministic mode: an operation the kernel or the pool completes
     * (io.c parks on it with its op as obj; an async dispatcher with
     * operations in the kernel names itself) holds back the clock's jump;
     * that and any dispatcher's park (operations may be handed to it from
     * outside) rule a deadlock out */
    int det_io = __builtin_expect(WEFT__DET_ON(), 0) && ((why == WEFT__WHY_IO && obj) || why == WEFT__WHY_ASYNC);
    int det_hold = why == WEFT__WHY_IO || (why == WEFT__WHY_ASYNC && obj);
    if (det_io) weft__det_io_begin(det_hold);
    while (atomic_load(&p->word) == token) switch_out(weft__carrier_self(), self, OP_PARK);
    if (det_io) weft__det_io_end(det_hold);
    if (h && WEFT__PW_STATE(atomic_load(&p->word)) != WEFT__PS_TIMEDOUT) {
        /* ended otherwise: its heap entry is dead (counted, dropped later) */
        atomic_fetch_add_explicit(&R.c[self->timer_heap]->timers.dead, 1, memory_order_relaxed);
    }
    __atomic_store_n(&self->why, (uint8_t)WEFT__WHY_NONE, __ATOMIC_RELAXED);
    atomic_store_explicit(&self->block_file, NULL, memory_order_relaxed);
    return outcome(atomic_load(&p->word));
}

/* Moves the calling vthread to carrier k (sched.h).  A park that has ended
 * before the switch (WOKEN written by the vthread itself: nobody else knows
 * the token, and a NOCANCEL park is left alone by weft_cancel) makes
 * finish_pending queue it at once -- and a pinned vthread goes to its
 * home's mailbox: home is k for the length of the move. */
int weft__migrate(int k) {
    weft__carrier *c = weft__carrier_self();
    weft_thread *self = c ? c->cur : NULL;
    if (!self) return -EPERM;
    if (k < 0 || k >= nall() || !R.c[k] || R.c[k]->grp != self->grp || (self->flags & WEFT__F_PINNED))
        return -EINVAL;
    if (R.c[k] == c) return 0;
    self->home = R.c[k];
    self->flags |= WEFT__F_PINNED;
    uint64_t tok = publish_park(self, &self->parker, WEFT__PK_GENERIC | WEFT__PK_NOCANCEL);
    atomic_store(&self->parker.word, (tok & ~(uint64_t)0xF) | WEFT__PS_WOKEN);
    switch_out(c, self, OP_PARK);
    self->flags &= ~(uint32_t)WEFT__F_PINNED;
    self->home = NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* vthreads                                                                  */
/* ------------------------------------------------------------------------ */

static void join_lock(weft_thread *t);
static void join_unlock(weft_thread *t);
#define JOIN_LOCK 0x100

static void vthread_start(void *arg, void *carrier) {
    weft_thread *self = arg;
    /* pinned: to the carrier it first runs on -- unless weft__spawn_on
     * chose it, and its spawner may still be reading home (enqueue_pinned) */
    if ((self->flags & WEFT__F_PINNED) && !self->home) self->home = carrier;
    atomic_store_explicit(&self->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed); /* no longer new */
    resumed(self, carrier);
    if (self->tls) {
        /* its own TLS block, the thread pointer since enter(): set up as a
         * new thread's; a reused block's thread-locals go back to their
         * initial values, weft's among them -- written again (tp_switch) */
        weft__tls_start(self->id, self->tls_reused);
        weft__carrier *c = carrier;
        tls_carrier = c;
        weft__tls_window = c->tls_window;
        weft__sud_sel = c->sud_sel;
    }
    /* its function is the program's code: trapped, where the runtime traps
     * (hook/trap.c); weft's code from its return on */
    /* (every carrier traps, or none; and only a vthread with its own TLS
     * is trapped: hook/trap.c, "Whom it traps") */
    int trapping = ((weft__carrier *)carrier)->sud_sel != NULL && self->tls != NULL;
    if (trapping) ((weft__carrier *)carrier)->sud[0] = 1;
    self->result = self->fn(self->arg);
    if (trapping) { /* (fn may have moved it: the carrier it ends on) */
        weft__carrier *c = weft__carrier_self();
        if (c) c->sud[0] = c->sud[1] = 0;
    }
    if (__builtin_expect(self->scopes != NULL, 0)) { /* scopes left open: a structure violation */
        void (*h)(weft_thread *) = atomic_load_explicit(&weft__scopes_left_hook, memory_order_acquire);
        if (h) h(self);
    }
    /* its locals' destructors, on the vthread itself (they may block), before
     * anyone's join can return (local.c) */
    if (self->locals) weft__locals_end(self);
    /* its own TLS's thread_local and pthread key destructors, on it too */
    if (self->tls) weft__tls_end();
    weft__carrier *c = weft__carrier_self();
    if (__builtin_expect(!c, 0)) /* fn forked and this is the child: no carrier to end on ("Fork") */
        weft__fatal("a vthread's function returned in a child process it forked; the child of a "
                    "fork() from a vthread must end with _exit, exit or exec");
    switch_out(c, self, OP_EXIT);
    __builtin_unreachable();
}

static void flush_live(weft__carrier *c) {
    int64_t d = atomic_load_explicit(&c->live_delta, memory_order_relaxed);
    if (!d) return;
    atomic_store_explicit(&c->live_delta, 0, memory_order_relaxed);
    int64_t live = atomic_fetch_add(&R.live, d) + d;
    uint64_t pk = atomic_load(&R.peak);
    while (live > 0 && (uint64_t)live > pk && !atomic_compare_exchange_weak(&R.peak, &pk, (uint64_t)live)) {
    }
}

static inline void live_add(weft__carrier *c, int64_t d) {
    if (!c) {
        int64_t live = atomic_fetch_add(&R.live, d) + d;
        uint64_t pk = atomic_load(&R.peak);
        while (live > 0 && (uint64_t)live > pk && !atomic_compare_exchange_weak(&R.peak, &pk, (uint64_t)live)) {
        }
        return;
    }
    int64_t v = atomic_load_explicit(&c->live_delta, memory_order_relaxed) + d;
    atomic_store_explicit(&c->live_delta, v, memory_order_relaxed);
    if (v >= LIVE_FLUSH || v <= -LIVE_FLUSH) flush_live(c);
}

/*
 * TSan gives every vthread a fiber, and a fiber is a thread to it: past
 * 8128 threads in all it prints "Thread limit exceeded. Dying." and ends
 * the process.  So a TSan build refuses a spawn with -EAGAIN (and says so
 * once) while TSAN_FIBER_CAP fibers live, leaving the rest for OS threads:
 * carriers, the monitor, the blocking pool, the program's own.
 */
#ifdef WEFT_TSAN
#define TSAN_FIBER_CAP 7500
static int tsan_fiber_reserve(void) {
    if (atomic_fetch_add(&R.tsan_fibers, 1) < TSAN_FIBER_CAP) return 0;
    atomic_fetch_sub(&R.tsan_fibers, 1);
    static _Atomic int told;
    if (!atomic_exchange(&told, 1))
        fprintf(stderr, "weft: ThreadSanitizer counts each vthread as a thread and allows about 8k: "
                        "weft_spawn returns -EAGAIN while %d vthreads live (TSan builds only)\n", TSAN_FIBER_CAP);
    return -EAGAIN;
}
static void tsan_fiber_drop(weft_thread *t) {
    if (!t->tsan_fiber) return;
    __tsan_destroy_fiber(t->tsan_fiber);
    t->tsan_fiber = NULL;
    atomic_fetch_sub(&R.tsan_fibers, 1);
}
#endif

static inline __attribute__((always_inline)) void free_thread(weft__carrier *c, weft_thread *t) {
#ifdef WEFT_TSAN
    tsan_fiber_drop(t);
#endif
    /* its TLS block goes back with its descriptor, not as it ends (its
     * joiner may still look at it) -- unless the layer that made it keeps
     * it longer (weft__spawn_tls: hook/threads.c, whose pthread_t is the
     * block's address until it is joined) */
    if (t->tls) { /* (no longer the thread pointer: switch_to left it) */
        if (!t->tls_kept) weft__tls_put(t->tls);
        t->tls = NULL;
    }
    /* every handle of t is stale from here on ("Handles") */
    atomic_store_explicit(&t->gen, weft__gen_next(atomic_load_explicit(&t->gen, memory_order_relaxed)),
                          memory_order_release);
    atomic_store_explicit(&t->rstate, WEFT__RS_FREE, memory_order_release);
    if (!c || !weft__stack_put_cached(&c->stacks, &t->stk)) weft__stack_put(c ? &c->stacks : NULL, &t->stk);
}

static void exit_finish(weft__carrier *c, weft_thread *t) {
    weft__stack_done(&t->stk, t->sp); /* (ASan: its last frames' poison; before t can be reused) */
    bump(&c->n_finished);
    if (!(t->flags & WEFT__F_DAEMON)) bump(&c->nd_finished);
    live_add(c, -1);
    /* its group's last vthread: wake weft_group_close (which stops this
     * carrier only after it has left this function; nothing here touches
     * the group after this) */
    weft_group *g = t->grp;
    if (!g->dflt && atomic_fetch_sub(&g->nlive, 1) == 1) weft__group_last_exit(g);
#ifdef WEFT_TSAN
    tsan_fiber_drop(t);
#endif
    /* weft__on_exit's call: after everything above, so that whoever it
     * tells sees this vthread gone from the counters too */
    if (t->exit_fn) t->exit_fn(t->exit_arg);
    atomic_store_explicit(&t->rstate, WEFT__RS_DONE, memory_order_relaxed);
    int st = atomic_load_explicit(&t->join_state, memory_order_relaxed);
    if (st == 3) { /* detached (and nobody holds the lock) */
        free_thread(c, t);
        return;
    }
    /* nobody waits yet: publish "done" -- our last touch of t */
    if (st == 0 && atomic_compare_exchange_strong_explicit(&t->join_state, &st, 2, memory_order_release,
                                                           memory_order_relaxed))
        return;
    join_lock(t);
    st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st == 3) { /* detached */
        join_unlock(t);
        free_thread(c, t);
        return;
    }
    /* done; with a joiner waiting, done for that joiner to reap (5), which
     * nobody else may then claim */
    atomic_store_explicit(&t->join_state, (st == 1 ? 5 : 2) | JOIN_LOCK, memory_order_relaxed);
    /* The joiner goes to the back of the run queue, not the LIFO slot: the
     * child is gone, so there is no hand-off to keep warm, and a parent
     * joining a batch of children then finds most of them done. */
    if (st == 1 && unpark_claim(t->joiner, t->joiner_token, WEFT__PS_WOKEN) == 2)
        enqueue_fifo(c, t->joiner->vt);
    join_unlock(t);
}

/* join_state: 0 running, 1 a joiner waits, 2 done, 3 detached, 4 reaped
 * (a join or detach has claimed the finished vthread and frees it), 5 done
 * while a joiner waited (that joiner's to reap: others are refused as in
 * 1, even before it has woken); its transitions and the joiner fields are
 * under a tiny spinlock kept in the high bit so that a joiner's parker is
 * never woken after it returned.  Done -> reaped is also taken by a CAS
 * without the lock (weft_join's fast path): exactly one of two callers
 * racing to reap t wins. */
static void join_lock(weft_thread *t) {
    for (int spins = 0;; spins++) {
        int v = atomic_load_explicit(&t->join_state, memory_order_relaxed);
        if (!(v & JOIN_LOCK) &&
            atomic_compare_exchange_weak_explicit(&t->join_state, &v, v | JOIN_LOCK,
                                                  memory_order_acquire, memory_order_relaxed))
            return;
        if (spins > 100) sched_yield();
        else weft__cpu_relax();
    }
}
static void join_unlock(weft_thread *t) {
    atomic_fetch_and_explicit(&t->join_state, ~JOIN_LOCK, memory_order_release);
}

static int spawn_impl(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr, int on,
                      void *tls_given, int given_reused, weft_thread *_Atomic *desc);

int weft_spawn(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr) {
    return spawn_impl(out, fn, arg, attr, -1, NULL, 0, NULL);
}

int weft__spawn_on(int k, weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr) {
    if (k < 0) return -EINVAL;
    return spawn_impl(out, fn, arg, attr, k, NULL, 0, NULL);
}

int weft__spawn_tls(weft_thread *_Atomic *desc, void *(*fn)(void *), void *arg, const weft_thread_opts *attr,
                    void *tls, int reused) {
    if (!tls || !desc) return -EINVAL;
    return spawn_impl(NULL, fn, arg, attr, -1, tls, reused, desc);
}

/* A generation for a freshly populated slot (seq_base: unique to this
 * population): spread over the 24 bits, never 0, laid out as a handle's
 * bits.  Also checks, once per population, that t's address leaves those
 * bits free. */
__attribute__((noinline)) static uint64_t fresh_gen(weft_thread *t, uint64_t seq_base) {
    if ((uintptr_t)t & ~(uintptr_t)WEFT__HANDLE_ADDR)
        weft__fatal("a vthread descriptor at %p: not 256-byte aligned below 2^48, so its handle cannot "
                    "carry a generation", (void *)t);
    uint32_t g = (uint32_t)((seq_base >> 32) * 0x9e3779b1u) & 0xffffffu;
    g = g ? g : 1;
    uint64_t bits = (uint64_t)(g >> 8) << 48 | (g & 0xff);
    atomic_store_explicit(&t->gen, bits, memory_order_relaxed);
    return bits;
}

/* on >= 0: pinned to carrier on (weft__spawn_on); tls_given: the caller's
 * block, desc where its descriptor goes (weft__spawn_tls) */
static int spawn_impl(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr, int on,
                      void *tls_given, int given_reused, weft_thread *_Atomic *desc) {
    if (!fn) return -EINVAL;
    int r = weft__ensure_init();
    if (r < 0) return r;
#ifdef WEFT_TSAN
    if ((r = tsan_fiber_reserve()) < 0) return r;
#endif
    weft__carrier *c = carrier_here(); /* no switch in here */
    /* its group (group.c, "Which group"): the attr's; else the spawning
     * vthread's own; the runtime's helpers (weft__spawn_on) the default */
    weft_group *g;
    if (__builtin_expect(on < 0 && !(attr && attr->group) && c && c->cur, 1)) g = c->cur->grp;
    else g = on < 0 && attr && attr->group ? attr->group : &R.g0;
    const int own = !g->dflt; /* (read once: the atomics below would make the compiler read it again) */
    if (own) {
        /* counted before the check: weft_group_close sets closing, then
         * drops the group's own count (both seq_cst): one of the two sees
         * the other (group.c, "Life") */
        if ((r = weft__group_ref(g)) < 0) goto unreserve;
        if (atomic_load(&g->closing)) {
            r = -ESHUTDOWN;
            goto unref;
        }
    }
    /* its own TLS (arch/tls.c): asked for (own_tls > 0), refused (< 0),
     * or the runtime's default; -ENOTSUP where blocks cannot be made */
    void *tls = tls_given;
    int tls_reused = given_reused;
    if (!tls && __builtin_expect(attr && attr->own_tls ? attr->own_tls > 0 : R.own_tls, 0)) {
        if ((r = weft__tls_probe()) < 0) goto unref;
        if (!(tls = weft__tls_get(&tls_reused))) {
            r = -ENOMEM;
            goto unref;
        }
    }
    size_t size = attr ? attr->stack_size : 0;
    weft__stack *s = c && !size ? weft__stack_get_cached(&c->stacks) : NULL;
    if (!s && !(s = weft__stack_get(c ? &c->stacks : NULL, size))) {
        if (tls && !tls_given) weft__tls_put(tls);
        r = -ENOMEM;
        goto unref;
    }
    weft_thread *t = (weft_thread *)s;
    /* a freshly populated slot starts its park sequence from seq_base, and
     * its handles' generation from a value drawn from it ("Handles": its
     * descriptor may have been zeroed since a stale handle was given out) */
    uint64_t w = s->seq_base ? s->seq_base << 8 : atomic_load_explicit(&t->parker.word, memory_order_relaxed) & ~(uint64_t)0xFF;
    uint64_t gen = atomic_load_explicit(&t->gen, memory_order_relaxed);
    /* (0 only in a slot's first descriptor since its memory was mapped or
     * zapped: a fresh population) */
    if (__builtin_expect(gen == 0, 0)) gen = fresh_gen(t, s->seq_base);
    s->seq_base = 0;
    atomic_store_explicit(&t->parker.word, w, memory_order_relaxed);
    t->parker.vt = t;
    /* the stack starts right below the descriptor, whose place within its
     * page differs between neighbouring slots (stack.c's colour): two
     * vthreads switching on one carrier do not push and pop at the same page
     * offsets (4K store-to-load aliasing) */
    t->sp = weft__ctx_make((char *)t, vthread_start, t);
    t->next = NULL;
    __atomic_store_n(&t->carrier, (weft__carrier *)NULL, __ATOMIC_RELAXED);
    t->home = NULL;
    t->grp = g;
    __atomic_store_n(&t->grp_id, g->id, __ATOMIC_RELAXED); /* (read racily by weft_dump) */
    if (own) atomic_fetch_add_explicit(&g->started, 1, memory_order_relaxed);
    t->flags = (attr && attr->daemon ? WEFT__F_DAEMON : 0) | (attr && attr->pinned ? WEFT__F_PINNED : 0);
    __atomic_store_n(&t->why, (uint8_t)WEFT__WHY_NONE, __ATOMIC_RELAXED);
    t->park_token = 0;
    t->timer_heap = -1;
    atomic_store_explicit(&t->permit, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cancelled, 0, memory_order_relaxed);
    atomic_store_explicit(&t->shielded, 0, memory_order_relaxed);
    t->fork_gen = R.fork_gen;
    t->deadline = 0;
    atomic_store_explicit(&t->task, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->task_scope, 0, memory_order_relaxed);
    t->exit_fn = NULL;
    t->exit_arg = NULL;
    t->scopes = NULL;
    t->scope_deadline = 0;
    t->par = NULL;
    t->locals = NULL;  /* local.c: nothing set; bindings are not inherited by a spawn */
    t->scoped = NULL;
    atomic_store_explicit(&t->scoped_n, 0, memory_order_relaxed);
    t->fn = fn;
    t->arg = arg;
    t->result = NULL;
    t->tls = tls;
    t->tls_reused = (uint8_t)tls_reused;
    t->tls_kept = tls_given != NULL;
    t->cpu_ns = 0;
    t->sud = 0;
    atomic_store_explicit(&t->foreign, 0, memory_order_relaxed);
    atomic_store_explicit(&t->trap_call, 0, memory_order_relaxed);
    atomic_store_explicit(&t->trap_count, 0, memory_order_relaxed);
    atomic_store_explicit(&t->intr_kind, 0, memory_order_relaxed);
    atomic_store_explicit(&t->intr_sig, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sig_pend, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sig_routed, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sig_wait, 0, memory_order_relaxed);
    {
        weft_thread *cr = weft__self(); /* (a mask is inherited, as pthread_create's) */
        atomic_store_explicit(&t->sig_mask, cr ? atomic_load_explicit(&cr->sig_mask, memory_order_relaxed) : 0,
                              memory_order_relaxed);
    }
    atomic_store_explicit(&t->intr_seq, atomic_load_explicit(&t->intr_seq, memory_order_relaxed) & ~1u,
                          memory_order_relaxed);
    /* (release: a late caller racing to reap the slot's last vthread, which
     * takes join_lock and reads this, then sees the generation it bumped) */
    atomic_store_explicit(&t->join_state, out ? 0 : 3, memory_order_release);
    t->joiner = NULL;
    atomic_store_explicit(&t->block_file, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->block_pc, NULL, memory_order_relaxed); /* (the slot's last owner's) */
    if (attr && attr->name) {
        char name[32] = {0};
        strncpy(name, attr->name, 31);
        uint64_t nw[4];
        memcpy(nw, name, 32);
        for (int i = 0; i < 4; i++) atomic_store_explicit(&t->name_words[i], nw[i], memory_order_relaxed);
    } else {
        atomic_store_explicit(&t->name_words[0], 0, memory_order_relaxed); /* "" */
    }
    t->asan_fake = NULL;
#ifdef WEFT_TSAN
    t->tsan_fiber = __tsan_create_fiber(0);
    if (attr && attr->name) __tsan_set_fiber_name(t->tsan_fiber, attr->name);
#else
    t->tsan_fiber = NULL;
#endif
    if (c) {
        if (c->id_next == c->id_end) {
            c->id_next = atomic_fetch_add(&R.next_id, ID_BLOCK);
            c->id_end = c->id_next + ID_BLOCK;
        }
        t->id = c->id_next++;
        bump(&c->n_started);
        if (!(t->flags & WEFT__F_DAEMON)) bump(&c->nd_started);
        live_add(c, 1);
    } else {
        t->id = atomic_fetch_add(&R.next_id, 1);
        atomic_fetch_add(&R.plat_started, 1);
        if (!(t->flags & WEFT__F_DAEMON)) atomic_fetch_add(&R.plat_nd_started, 1);
        live_add(NULL, 1);
    }
    atomic_store_explicit(&t->rstate, WEFT__RS_NEW, memory_order_release);
    /* the program's handle carries the generation; the runtime's own
     * (weft__spawn_on) is the descriptor */
    if (out) *out = (weft_thread *)((uintptr_t)t | (on < 0 ? (uintptr_t)gen : 0));
    if (desc) atomic_store_explicit(desc, t, memory_order_release); /* (before it can run) */
    if (on >= 0) {
        t->home = R.c[on % R.n];
        t->flags |= WEFT__F_PINNED;
        enqueue_pinned(c, t);
    } else if (c && c->grp == g) {
        dq_push(c, t);
        wake_if_needed(g);
    } else if (!c) { /* from a platform thread: as weft__ready's (plat_waking) */
        atomic_fetch_add(&R.plat_waking, 1);
        enqueue_foreign(t);
        atomic_fetch_sub(&R.plat_waking, 1);
    } else {
        enqueue_foreign(t); /* into another group */
    }
    return 0;
unref:
    if (own && atomic_fetch_sub(&g->nlive, 1) == 1) weft__group_last_exit(g);
unreserve:
#ifdef WEFT_TSAN
    atomic_fetch_sub(&R.tsan_fibers, 1);
#endif
    return r;
}

static int join_wait(weft_thread *t, uint64_t g, void **result, const char *file, int line, int nocancel);

/* Frees t for its reaper (join_state reaped), after taking its result. */
static inline int reap(weft__carrier *c, weft_thread *t, void **result) {
    /* t->result was written before exit_finish published "done" */
    if (result) *result = t->result;
    free_thread(c, t);
    return 0;
}

/* weft_join and the runtime's uncancellable join.  The fast path, for a
 * vthread that has finished: the handle's check (a load and a compare)
 * and one CAS that claims it. */
static inline int join_k(weft_thread *h, void **result, const char *file, int line, int nocancel) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH; /* joined already, or detached and ended ("Handles") */
    if (stale(t)) return -ECHILD;
    weft__carrier *c = carrier_here();
    if (c && t == c->cur) return -EDEADLK;
    int st = 2;
    if (atomic_compare_exchange_strong_explicit(&t->join_state, &st, 4, memory_order_acquire, memory_order_relaxed))
        return reap(c, t, result); /* finished, and exit_finish is done with it */
    return join_wait(t, weft__handle_gen(h), result, file, line, nocancel);
}

int weft__join_nocancel(weft_thread *t, void **result) { return join_k(t, result, NULL, 0, 1); }

int weft__join_at(weft_thread *t, void **result, const char *file, int line) {
    return join_k(t, result, file, line, 0);
}

/* join_lock(t) for a caller holding a handle of generation g (0: the
 * runtime's own): 1 when t is still that handle's vthread, else 0 with the
 * lock released (another caller reaped it, and its slot may be in use
 * again: the spawn's release store of join_state, read by our lock's
 * acquire, makes the bumped generation visible). */
static int join_lock_handle(weft_thread *t, uint64_t g) {
    join_lock(t);
    if (!g || atomic_load_explicit(&t->gen, memory_order_relaxed) == g) return 1;
    join_unlock(t);
    return 0;
}

/* weft_join's slow path, out of line so that the fast one stays small. */
__attribute__((noinline)) static int join_wait(weft_thread *t, uint64_t g, void **result, const char *file,
                                              int line, int nocancel) {
    int st;
    weft__parker *p;
    uint64_t tok = nocancel ? weft__park_begin_nocancel(&p, WEFT__PK_GENERIC) : weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    if (!join_lock_handle(t, g)) {
        weft__unpark(p, tok, WEFT__PS_WOKEN);
        return -ESRCH;
    }
    st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st != 0 && st != 2) { /* another joins it (1, 5), it is detached (-EINVAL), or it was just reaped */
        join_unlock(t);
        weft__unpark(p, tok, WEFT__PS_WOKEN);
        return st == 4 ? -ESRCH : -EINVAL;
    }
    int r = 0;
    if (st == 0) {
        t->joiner = p;
        t->joiner_token = tok;
        atomic_store_explicit(&t->join_state, 1 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        r = weft__park_wait(p, tok, 0, WEFT__WHY_JOIN, t, file, line);
        join_lock(t);
        st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
        if (st != 5) { /* gave up (cancelled / timed out) before t ended: withdraw */
            atomic_store_explicit(&t->join_state, 0 | JOIN_LOCK, memory_order_relaxed);
            join_unlock(t);
            return r < 0 ? r : -EINTR;
        }
    } else {
        weft__unpark(p, tok, WEFT__PS_WOKEN);
    }
    atomic_store_explicit(&t->join_state, 4 | JOIN_LOCK, memory_order_relaxed);
    join_unlock(t);
    return reap(weft__carrier_self(), t, result);
}

int (weft_join)(weft_thread *t, void **result) { return weft__join_at(t, result, NULL, 0); }

int weft_detach(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    if (!join_lock_handle(t, weft__handle_gen(h))) return -ESRCH;
    int st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st == 0) {
        atomic_store_explicit(&t->join_state, 3 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        return 0;
    }
    if (st == 2) {
        atomic_store_explicit(&t->join_state, 4 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        free_thread(weft__carrier_self(), t);
        return 0;
    }
    join_unlock(t);
    return st == 4 ? -ESRCH : -EINVAL; /* reaped just now; joined by another, or detached already */
}

weft_thread *weft_self(void) { return weft__handle(weft__self()); }

/* A pin for the length of a hooked call (sched.h).  flags and home are
 * written by the vthread itself, before it parks: a waker reads them after
 * its CAS on the park word won, which orders them (enqueue_pinned). */
int weft__pin_begin(void) {
    weft_thread *self = weft__self();
    /* (own TLS: its errno is in its own block, wherever it resumes) */
    if (!self || (self->flags & WEFT__F_PINNED) || self->tls) return 0;
    self->home = self->carrier;
    self->flags |= WEFT__F_PINNED;
    return 1;
}

void weft__pin_end(int pinned_here) {
    if (!pinned_here) return;
    weft_thread *self = weft__self();
    self->flags &= ~(uint32_t)WEFT__F_PINNED;
    self->home = NULL;
}
uint64_t weft_id(const weft_thread *h) {
    const weft_thread *t = h ? handle_get(h) : NULL;
    return t ? t->id : 0;
}

const char *weft_name(const weft_thread *h) {
    const weft_thread *t = h ? handle_get(h) : NULL;
    return t ? (const char *)(const void *)t->name_words : "";
}

int weft_set_name(const char *name) {
    weft_thread *self = weft__self();
    if (!self) return -EPERM;
    char buf[32] = {0};
    if (name) strncpy(buf, name, 31);
    uint64_t nw[4];
    memcpy(nw, buf, 32);
    /* word by word: a dump reading meanwhile sees a mix of old and new,
     * never an unterminated string (the last byte stays 0) */
    for (int i = 0; i < 4; i++) atomic_store_explicit(&self->name_words[i], nw[i], memory_order_relaxed);
    return 0;
}

int weft_yield(void) {
    weft__carrier *c = carrier_here();
    weft_thread *self = c ? c->cur : NULL;
    if (!self) {
        sched_yield();
        return 0;
    }
    gate_in(c, self);
    if (__builtin_expect(c->det, 0)) {
        /* the yielder is a candidate too: it joins the run set first, and
         * stays there (as in the yield FIFO) while another runs */
        weft__det_push(self);
        weft_thread *next = pick_det(c);
        if (next == self) gate_out(c, self);
        else switch_to(c, self, next, OP_NONE);
        return 0;
    }
    weft_thread *next = pick_local_rt(c); /* (det: above) */
    if (!next) { /* nothing else to run here */
        gate_out(c, self);
        return 0;
    }
    if ((self->flags & WEFT__F_PINNED) ||
        (c->yq_private && atomic_load_explicit(&c->grp->nidle, memory_order_relaxed) == 0)) {
        /* the yield FIFO: only this carrier (and the monitor, through the
         * gate) touches it, so self can be queued before the switch, with
         * no pending work after it */
        yq_append(c, self);
        switch_to(c, self, next, OP_NONE);
    } else {
        switch_to(c, self, next, OP_YIELD); /* to the deque, after the switch */
    }
    return 0;
}

/* (The preempted vthread's carrier has computed for WEFT__PREEMPT_NS:
 * a vthread parked in a read there, its SQE maybe not yet submitted, or a
 * timed wait due there, waits for this carrier's next slow pick -- at one
 * preemption in 10 ms, SLOW_EVERY of them.  Seen: CPython's
 * test_hang_global_shutdown_lock, a pool thread looping while main waited
 * for a child's answer on a pipe: 500 ms a round against 86 natively.) */
int weft__yield_polled(void) {
    weft__carrier *c = carrier_here();
    if (c) c->slow_countdown = 1; /* pick_local_rt's next pick is slow */
    return weft_yield();
}

int64_t weft__sleep_deadline(int64_t ns) {
    if (ns <= 0) return weft_now();
    int64_t now = weft_now();
    return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

int weft__sleep_until_at(int64_t deadline, const char *file, int line) {
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    int64_t own = weft__effective_deadline(0);
    int r;
    /* a deadline in the past returns at once, as weft_sleep(ns <= 0): 0
     * and below too, which are park_wait's "none" or would be sleeps
     * until cancelled (1 is as past, and a deadline to it) */
    if (deadline <= 0) deadline = 1;
    if (deadline != INT64_MAX && (!own || deadline <= own)) {
        /* our own sleep time comes first: its expiry is success */
        r = weft__park_wait(p, tok, deadline, WEFT__WHY_SLEEP, NULL, file, line);
        if (r == -ETIMEDOUT) r = 0;
    } else {
        r = weft__park_wait(p, tok, 0, WEFT__WHY_SLEEP, NULL, file, line);
    }
    return r;
}

int (weft_sleep_until)(int64_t deadline) { return weft__sleep_until_at(deadline, NULL, 0); }
int (weft_sleep)(int64_t ns) { return weft__sleep_until_at(weft__sleep_deadline(ns), NULL, 0); }

int64_t weft_deadline_set(int64_t d) {
    weft_thread *self = weft__self();
    int64_t *slot = self ? &self->deadline : &tls_deadline;
    int64_t old = *slot;
    *slot = d < 0 ? 0 : d;
    return old;
}

void weft__on_exit(void (*fn)(void *), void *arg) {
    weft_thread *self = weft__self();
    self->exit_fn = fn;
    self->exit_arg = arg;
}

void (*_Atomic weft__cancel_hook)(weft_thread *t);

/*
 * Interrupts.  A program weft did not write expects a signal to end the
 * blocking call its thread is in: a handler without SA_RESTART ends a
 * read with EINTR, and any handler ends a sleep, a poll or a select
 * (signal(7)); Python's Ctrl-C during time.sleep relies on it.  Under
 * weft that call parks a vthread, while the kernel runs the handler on
 * whichever OS thread it picked -- a carrier, the process's first thread
 * waiting in weft_join -- and the park goes on.  So:
 *  - the hook's trampoline, after the program's handler, posts the
 *    signal (weft__intr_post: two atomic ORs and a futex wake of the
 *    monitor -- async-signal-safe; nothing here may park or lock there);
 *  - the monitor thread (spares.c's loop, weft__intr_deliver) takes what
 *    was posted and, if the target vthread is inside a hooked wait (its
 *    intr_seq odd) of a kind the handler's flags end, stores the signal
 *    in intr_sig and ends the park as a cancel does (PS_CANCELLED, which
 *    every hooked wait already undoes cleanly: an I/O operation is
 *    withdrawn or its completion kept);
 *  - the vthread's wait returns -ECANCELED, weft__intr_end hands it the
 *    signal, and the hook answers EINTR.
 * The Dekker pair is a cancel's: the monitor stores intr_sig, then reads
 * the parker's word; weft__park_begin publishes the park, then reads
 * intr_sig -- so a park that begins in between is refused at once.  A
 * signal stored just as the call ends is taken back (CAS) when intr_seq
 * has moved, and a park outside a hooked wait never sees one (park_begin
 * checks intr_seq is odd).  The target is one vthread: a foreign main
 * (hook/preload.c), which is what the kernel interrupts for a
 * process-directed signal in a program that has not blocked it -- its
 * first thread gets first choice.  Masks are not looked at, nor are
 * signals sent to one thread (pthread_kill): issue 27's per-vthread masks.
 * A pthread_cancel of a virtual pthread (hook/threads.c) uses the same
 * path with its own mark, WEFT__INTR_CANCEL, which stays until the hook's
 * EINTR return acts on it (weft__intr_end keeps it; a signal's post never
 * replaces it).
 */
void weft__intr_target_set(weft_thread *t) { atomic_store(&R.intr_target, t); }

/* Ends t's park, if it waits in one a cancel may end. */
static void intr_wake(weft_thread *t) {
    uint64_t w = atomic_load(&t->parker.word);
    unsigned st = WEFT__PW_STATE(w);
    if ((st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED) && !WEFT__PW_NOCANCEL(w) &&
        !atomic_load(&t->shielded))
        weft__unpark(&t->parker, w, WEFT__PS_CANCELLED);
}

/* Stores sig as what interrupts t's hooked wait (intr_seq s1, odd) and
 * ends it; one already there -- another signal's, a pthread_cancel's --
 * stays.  A wait that ended meanwhile takes it back: not for the next. */
static void intr_put(weft_thread *t, uint32_t s1, uint8_t sig) {
    uint8_t z = 0;
    if (!atomic_compare_exchange_strong(&t->intr_sig, &z, sig)) return;
    if (atomic_load(&t->intr_seq) != s1) {
        uint8_t e = sig;
        atomic_compare_exchange_strong(&t->intr_sig, &e, 0);
        return;
    }
    intr_wake(t);
}

void (*_Atomic weft__sig_route_hook)(void);

/* (bit 0 of intr_pending, which no signal uses: route) */
void weft__intr_kick(void) {
    atomic_fetch_or(&R.intr_pending, 1);
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
}

uint64_t weft__intr_target_masks(uint64_t set) {
    weft_thread *t = atomic_load(&R.intr_target);
    return t ? atomic_load_explicit(&t->sig_mask, memory_order_relaxed) & set : 0;
}

void weft__intr_post(int sig, int restart) {
    if (sig <= 0 || sig >= 64 || !atomic_load_explicit(&R.intr_target, memory_order_relaxed)) return;
    uint64_t b = 1ull << sig;
    if (restart) atomic_fetch_or(&R.intr_restart, b);
    else atomic_fetch_and(&R.intr_restart, ~b);
    atomic_fetch_or(&R.intr_pending, b);
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
}

void weft__intr_deliver(void) {
    uint64_t pend = atomic_exchange(&R.intr_pending, 0);
    if (pend & 1) {
        void (*route)(void) = atomic_load_explicit(&weft__sig_route_hook, memory_order_acquire);
        if (route) route();
        pend &= ~1ull;
    }
    weft_thread *t = atomic_load(&R.intr_target);
    if (!pend || !t) return;
    uint32_t s1 = atomic_load(&t->intr_seq);
    if (!(s1 & 1)) return; /* not in a hooked wait: the handler ran, the code goes on */
    int kind = atomic_load_explicit(&t->intr_kind, memory_order_relaxed);
    uint64_t ends = kind == WEFT__INTR_ALWAYS ? pend : pend & ~atomic_load(&R.intr_restart);
    if (!ends) return; /* SA_RESTART: the call goes on, as the kernel restarts it */
    intr_put(t, s1, (uint8_t)__builtin_ctzll(ends));
}

void weft__intr_signal(weft_thread *t, int sig, int restart) {
    uint32_t s1 = atomic_load(&t->intr_seq);
    if (!(s1 & 1)) return; /* not in a hooked wait: raised at its next hooked call's end */
    if (restart && atomic_load_explicit(&t->intr_kind, memory_order_relaxed) != WEFT__INTR_ALWAYS) return;
    intr_put(t, s1, (uint8_t)sig);
}

void weft__intr_cancel(weft_thread *t) {
    atomic_store(&t->intr_sig, WEFT__INTR_CANCEL); /* seq_cst: pairs with weft__park_begin */
    if (atomic_load(&t->intr_seq) & 1) intr_wake(t);
}

void weft__cancel_one(weft_thread *t) {
    atomic_store(&t->cancelled, 1); /* seq_cst: pairs with weft__park_begin */
    uint64_t w = atomic_load(&t->parker.word);
    unsigned st = WEFT__PW_STATE(w);
    /* a park inside a shield is left alone: the shield was set (seq_cst)
     * before that park was published, and ends only after it has ended */
    if ((st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED) && !WEFT__PW_NOCANCEL(w) &&
        !atomic_load(&t->shielded))
        weft__unpark(&t->parker, w, WEFT__PS_CANCELLED);
}

int weft_cancel(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    weft__cancel_one(t);
    void (*hook)(weft_thread *) = atomic_load_explicit(&weft__cancel_hook, memory_order_acquire);
    if (hook) hook(t);
    return 0;
}

static WEFT_TLS void *tls_scopes;
void **weft__platform_scopes(void) { return &tls_scopes; }

int weft_cancelled(void) {
    weft_thread *self = weft__self();
    if (self) return atomic_load(&self->cancelled) && !atomic_load_explicit(&self->shielded, memory_order_relaxed);
    return atomic_load(&tls_pc.cancelled) && !atomic_load_explicit(&tls_pc.shielded, memory_order_relaxed);
}

int weft__shielded(void) {
    weft_thread *self = weft__self();
    return atomic_load_explicit(self ? &self->shielded : &tls_pc.shielded, memory_order_relaxed);
}

/* A shield swaps the thread's deadlines for its own (every blocking call
 * reads them through weft__effective_deadline) and sets the flag that
 * weft__park_begin and the cancellers look at; its end puts back what it
 * found.  The cancelled flag itself is never touched: a cancellation made
 * meanwhile stays, and applies once the flag is down. */
int weft_shield_begin(weft_shield *sh, int64_t deadline_ns) {
    if (!sh || deadline_ns < 0) return -EINVAL;
    weft_thread *self = weft__self();
    if (self) {
        sh->saved_deadline = self->deadline;
        sh->saved_scope_deadline = self->scope_deadline;
        sh->saved_shielded = atomic_load_explicit(&self->shielded, memory_order_relaxed);
        self->deadline = deadline_ns;
        self->scope_deadline = 0;
        atomic_store(&self->shielded, 1); /* seq_cst: before any park it makes */
    } else {
        sh->saved_deadline = tls_deadline;
        sh->saved_scope_deadline = 0;
        sh->saved_shielded = atomic_load_explicit(&tls_pc.shielded, memory_order_relaxed);
        tls_deadline = deadline_ns;
        atomic_store(&tls_pc.shielded, 1);
    }
    return 0;
}

int weft_shield_end(weft_shield *sh) {
    if (!sh) return -EINVAL;
    weft_thread *self = weft__self();
    if (self) {
        self->deadline = sh->saved_deadline;
        self->scope_deadline = sh->saved_scope_deadline;
        atomic_store(&self->shielded, sh->saved_shielded);
    } else {
        tls_deadline = sh->saved_deadline;
        atomic_store(&tls_pc.shielded, sh->saved_shielded);
    }
    return weft_cancelled() ? -ECANCELED : 0;
}

/* ---- cancelling a platform thread ------------------------------------------
 * As weft__cancel_one for a vthread: the flag (seq_cst, pairing with
 * weft__park_begin's second look), then the current park, if cancellable,
 * ends with CANCELLED.  A blocking system call that waits in ppoll (the io
 * layer's platform path) also watches the eventfd, which the cancel writes.
 * The eventfd is published before its owner looks at the flag again, so one
 * of the two always sees the other. */
weft__pcancel *weft__pcancel_enable(void) {
    tls_pc.enabled = 1;
    tls_pc.parker = &tls_parker;
    return &tls_pc;
}

void weft__pcancel_fire(weft__pcancel *h) {
    atomic_store(&h->cancelled, 1);
    uint64_t w = atomic_load(&h->parker->word);
    unsigned st = WEFT__PW_STATE(w);
    if ((st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED) && !WEFT__PW_NOCANCEL(w) &&
        !atomic_load(&h->shielded))
        weft__unpark(h->parker, w, WEFT__PS_CANCELLED);
    int fd = atomic_load(&h->efd);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(fd, &one, sizeof one); /* EAGAIN: already readable */
        (void)r;
    }
}

void weft__pcancel_clear(void) {
    atomic_store(&tls_pc.cancelled, 0);
    int fd = atomic_load_explicit(&tls_pc.efd, memory_order_relaxed);
    if (fd >= 0) {
        uint64_t v;
        ssize_t r = read(fd, &v, sizeof v); /* EAGAIN: was not written */
        (void)r;
    }
}

int weft__pcancel_fd(void) {
    /* (a shield: the call is not to be interrupted, so no fd to watch) */
    if (!tls_pc.enabled || atomic_load_explicit(&tls_pc.shielded, memory_order_relaxed)) return -1;
    int fd = atomic_load_explicit(&tls_pc.efd, memory_order_relaxed);
    if (fd < 0) {
        fd = weft__fd_own(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (fd < 0) return -1; /* out of descriptors: calls are not interruptible, no worse */
        atomic_store(&tls_pc.efd, fd);
    }
    return fd;
}

void weft__pcancel_disable(void) {
    int fd = atomic_exchange(&tls_pc.efd, -1);
    weft__fd_close_own(fd);
    atomic_store(&tls_pc.cancelled, 0);
    tls_pc.enabled = 0;
}

int weft__park_at(int64_t deadline, const char *file, int line) {
    weft_thread *self = weft__self();
    if (self && atomic_exchange(&self->permit, 0)) return 0;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_PERMIT);
    if (!tok) return -ECANCELED;
    if (self && atomic_exchange(&self->permit, 0)) { /* seq_cst: pairs with unpark */
        if (weft__unpark(p, tok, WEFT__PS_WOKEN)) return 0;
    }
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_PARK, NULL, file, line);
    if (self) atomic_store(&self->permit, 0);
    return r;
}

int (weft_park)(int64_t deadline) { return weft__park_at(deadline, NULL, 0); }

int weft_unpark(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    atomic_store(&t->permit, 1);
    uint64_t w = atomic_load(&t->parker.word);
    unsigned st = WEFT__PW_STATE(w);
    if (WEFT__PW_KIND(w) == WEFT__PK_PERMIT && (st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED))
        weft__unpark(&t->parker, w, WEFT__PS_WOKEN);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* carriers                                                                 */
/* ------------------------------------------------------------------------ */

/* A carrier's thread: makes its poller, then runs its scheduler loop until
 * the runtime (or its group) stops.  Started by weft_init (runtime.c), the
 * monitor (a spare, spares.c) or a group (group.c). */
void *weft__carrier_main(void *arg) {
    weft__carrier *c = arg;
    tls_carrier = c;
    stack_t ss = {.ss_sp = c->altstack, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    sigaltstack(&ss, NULL);
#ifdef WEFT_TSAN
    c->tsan_fiber = __tsan_get_current_fiber();
#endif
#ifdef WEFT_ASAN
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        void *addr;
        size_t size;
        pthread_attr_getstack(&a, &addr, &size);
        c->asan_bottom = addr;
        c->asan_size = size;
        pthread_attr_destroy(&a);
    }
#endif
    /* the ring's single issuer is this thread: it makes the poller; weft_init
     * waits for every carrier's, and fails if one cannot have it */
    int perr = 0;
    c->tid = (int)syscall(SYS_gettid); /* the monitor reads /proc/self/task/<tid> */
    c->cpuclk_ok = pthread_getcpuclockid(pthread_self(), &c->cpuclk) == 0; /* and this clock */
    /* the window its vthreads' locals are read from (local.c): a carrier
     * without one cannot run a vthread that has locals, so it fails too */
    c->win = weft__window_carrier_attach();
    c->tls_window = weft__tls_window; /* (set by the attach) */
    c->tp_own = weft__tp_get();
    c->tp_cur = NULL;
    /* the system call trap (hook/trap.c), where the runtime traps: this
     * thread's selector, registered with the kernel; probed by weft_init,
     * so a refusal here is a kernel that changed its mind -- said, and this
     * carrier runs untrapped */
    c->sud[0] = c->sud[1] = 0;
    c->sud_sel = NULL;
    if (R.trap) {
        int e = weft__sud_arm(c->sud);
        if (e == 0) {
            c->sud_sel = c->sud;
            sigset_t sys; /* never blocked here: the kernel kills a thread whose forced SIGSYS is */
            sigemptyset(&sys);
            sigaddset(&sys, SIGSYS);
            pthread_sigmask(SIG_UNBLOCK, &sys, NULL);
        }
        else fprintf(stderr, "weft: carrier %d: syscall user dispatch refused (%s): its vthreads' system calls are not trapped\n", c->index, strerror(-e));
    }
    weft__sud_sel = c->sud_sel;

    if (!c->win) perr = -ENOMEM;
    else atomic_store_explicit(&c->poller, weft__poller_new(c->index, &perr), memory_order_release);
    c->start_err = perr;
    atomic_fetch_add(&R.carriers_ready, 1);
    futex_wake(&R.carriers_ready, INT_MAX);
    atomic_store(&c->ready, 1); /* (a spare's maker waits on this one) */
    futex_wake(&c->ready, 1);
    if (perr) {
        weft__window_carrier_detach(c->win);
        c->win = NULL;
        ss.ss_flags = SS_DISABLE; /* our altstack is ours to free, not the thread library's */
        sigaltstack(&ss, NULL);
        tls_carrier = NULL;
        return NULL;
    }
    /* a spare runs once published (R.nall): every carrier its vthreads'
     * counters live on is one the others iterate */
    while (!atomic_load(&c->go)) futex(&c->go, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
    for (;;) {
        weft_thread *t = find_work(c);
        if (!t) break;
        run_from_sched(c, t);
    }
    flush_live(c);
    weft__window_carrier_detach(c->win);
    c->win = NULL;
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    tls_carrier = NULL;
    return NULL;
}

weft__window *weft__carrier_window(const weft__carrier *c) { return c ? c->win : NULL; }

/* A carrier's memory, for index i (its thread is started apart). */
weft__carrier *weft__carrier_alloc(int i) {
    /* Page-aligned: the hot fields at the start of a page can never sit
     * at the page offsets where vthreads' top frames and descriptors
     * live (the upper part of a page), so the switch path's loads from
     * the carrier are never stalled by 4K aliasing with stack stores. */
    weft__carrier *c = aligned_alloc(4096, (sizeof *c + 4095) & ~(size_t)4095);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->index = i;
    c->grp = &R.g0; /* (a group's carrier: weft__group_carriers_start sets both) */
    c->gidx = i;
    c->slow_countdown = SLOW_EVERY;
    c->det = WEFT__DET_ON() != 0;
    atomic_init(&c->shared, 1);
    c->mon_seen = UINT64_MAX; /* the monitor's first look at it only records */
    c->mon_last = INT64_MIN;
    c->mon_cpu0 = -1;
#ifdef WEFT_TSAN
    atomic_init(&c->yq_lock, 1); /* in the scheduler until a vthread runs */
#endif
    c->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) | 1;
    c->altstack = malloc(ALTSTACK_SIZE);
    if (!c->altstack || weft__dq_init(&c->dq, 256) != 0) {
        free(c->altstack);
        free(c);
        return NULL;
    }
    weft__tfifo_init(&c->mbox);
    weft__theap_init(&c->timers);
    return c;
}

/* Freed after the carrier's thread ended (or never started): nobody can
 * kick it. */
void weft__carrier_free(weft__carrier *c) {
    weft__poller *pl = atomic_load(&c->poller);
    if (pl) weft__poller_free(pl);
    weft__dq_fini(&c->dq);
    weft__theap_fini(&c->timers);
    weft__tfifo_fini(&c->mbox);
    free(c->altstack);
    free(c);
}

int weft__running(void) { return atomic_load_explicit(&R.up, memory_order_acquire); }

/* The lazy start every layer's first call makes.  The start itself is the
 * runtime layer's (runtime.c): the one call up from here, declared. */
int weft__ensure_init(void) {
    if (__builtin_expect(atomic_load_explicit(&R.up, memory_order_acquire), 1)) return 0;
    /* a fork child starts what its parent ran, backend included (runtime.c, "Fork") */
    int r = weft__runtime_start_lazy();
    return r == -EALREADY ? 0 : r;
}

/* Non-daemon vthreads not yet finished.  Finished counts are read before
 * started ones: a finish implies its start, so this never undercounts. */
int64_t weft__nondaemon_live(void) {
    uint64_t fin = 0, st = 0;
    /* (a spare published between the two loops: its starts count, and no
     * finish without its start) */
    /* (groups: under their lock, so that none closes between the loops;
     * a closed one's counts are in gone_*) */
    pthread_mutex_lock(&weft__groups.lock);
    fin += atomic_load(&R.gone_nd_finished);
    for (int i = 0; i < nall(); i++) fin += atomic_load(&R.c[i]->nd_finished);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) fin += atomic_load(&g->c[i]->nd_finished);
    for (int i = 0; i < nall(); i++) st += atomic_load(&R.c[i]->nd_started);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) st += atomic_load(&g->c[i]->nd_started);
    st += atomic_load(&R.gone_nd_started);
    pthread_mutex_unlock(&weft__groups.lock);
    st += atomic_load(&R.plat_nd_started);
    return (int64_t)(st - fin);
}

/* ------------------------------------------------------------------------ */
/* for the other rooms (internal.h)                                         */
/* ------------------------------------------------------------------------ */

/* Thin wrappers: the functions stay static, and the hot paths that use
 * them are compiled as if the other rooms did not exist. */
void weft__kick(weft__carrier *c) { kick(c); }
void weft__mon_need(void) { mon_need(); }
void weft__ready_elsewhere(weft_thread *t) { enqueue_elsewhere(t); }
int weft__fire_timers(weft__carrier *c, weft__theap *h, int64_t now, int block) {
    return fire_timers(c, h, now, block);
}
void weft__spin_set(int64_t ns) { spin_ns = ns; }
void weft__futex_hash_fork_child(void) { atomic_store(&fh_slots, 0); }
#ifdef WEFT_TSAN
void weft__tsan_fiber_drop(weft_thread *t) { tsan_fiber_drop(t); }
#endif
