/*
 * Locks and synchronisers that park virtual threads: mutex, condition
 * variable, semaphore, read-write lock, latch, once.
 *
 * Shape.  Each object is a state word (what the fast paths CAS) and a wait
 * queue (waitq.h): a spinlock word and a doubly-linked FIFO of waiters.  A
 * waiter is a small record on the waiting thread's own stack naming its park
 * word and the token of the park it waits in (sched.h's park primitive), so
 * waiting allocates nothing and vthreads and platform threads queue alike:
 * the primitive parks the one and futex-waits the other.  The state word
 * carries a WAITERS bit that is set and cleared only under the queue lock:
 * set in the same locked section that queues a waiter (and only by a CAS
 * that still sees the reason to wait), cleared when the queue empties.  A
 * releaser that sees WAITERS wakes someone.  Because setting WAITERS and
 * releasing are RMWs of the same word, either the waiter's CAS sees the
 * release (and it does not wait) or the release sees WAITERS: no wake-up is
 * lost.  (An acquirer that sees WAITERS queues behind the waiters, in every
 * primitive but the mutex, which barges.)
 *
 * Who owns what.  The queue, and the `queued` and `granted` fields of every
 * waiter in it, belong to whoever holds the queue lock.  The lock is held
 * for a few instructions -- queue surgery, a state update, the unpark CAS --
 * and never across a park, so its holder is always on a CPU.
 *
 * The race between a wake and a timeout or cancel.  A waker (unlock, signal,
 * release ...) pops a waiter and ends its park with weft__unpark *while it
 * still holds the queue lock*; whatever it hands over (mutex ownership in
 * starvation mode, a semaphore permit, a read or write hold) it records in
 * the state and in w->granted before the unpark.  The park word's CAS picks
 * exactly one of wake, timeout and cancel:
 *  - the wake won: the waiter's weft__park_wait returns 0 and the grant is
 *    its own; it returns without touching the queue (the waker no longer
 *    touches the waiter either: it may have returned already).
 *  - the timeout or cancel won: the waker undoes the grant (state and
 *    w->granted) and offers it to the next waiter, still under the lock;
 *    if there is none, the lock is released / the permit counted.  The
 *    waiter, whose wait returned -ETIMEDOUT or -ECANCELED, takes the queue
 *    lock before returning -- so it cannot leave while the waker still
 *    looks at its record -- finds itself dequeued (queued == 0) or removes
 *    itself, and returns the error having taken nothing.
 * So a failed call never swallows a hand-off, and a wake never goes to a
 * waiter that is leaving.  This relies on a GENERIC park ending WOKEN only
 * through its exact token, which only the queue hands out: a waiter whose
 * wait returns 0 has always been granted (checked: a violation is fatal).
 * A waiter that finds, once queued-to-be, that it need not wait after all
 * ends its own park with weft__park_abort.
 *
 * Mutex: barging with a starvation guard, after Go's sync.Mutex.  State:
 * LOCKED, WOKEN (a woken waiter is about to try: an unlock need not wake
 * another), STARVING, WAITERS.  Lock is a load and one CAS, unlock one
 * fetch-sub, no system call.  The lock fast path takes the mutex whenever
 * it is free in normal mode, waiters or not: a CAS from 0 alone (Go's)
 * sends every lock to the slow path while anyone waits, for one atomic
 * more -- about +50% on the 1,000 x 1,000 contended benchmark.
 *
 * Spinning.  A thread that finds the mutex locked while nobody is queued
 * spins briefly (4 rounds of 30 PAUSEs, Go's figures) before it queues: the
 * holder may be a vthread on another carrier about to let go, and parking
 * would cost a switch and move the waiter to the unlocker's carrier (two
 * vthreads with short critical sections on two carriers ran twice as fast
 * with the spin).  Once anyone is queued, newcomers and woken waiters do not
 * spin but queue at once: under that much contention a spinner rarely wins
 * against the running holder, and on a busy machine its spinning takes the
 * CPU that a holder descheduled by the OS needs (the 1,000 x 1,000
 * benchmark on a loaded 2-CPU box: median 21 ns/op against 29 spinning
 * always) -- the reason Go's canSpin will not spin while a P has other
 * work.  A spinner does not count as woken: with nobody queued there is
 * nobody an unlock would wake.
 *
 * Normal mode: unlock releases the lock and, if there are waiters and
 * nobody is already woken, wakes the head of the queue, which then competes
 * with newcomers.  Barging was chosen over strict FIFO hand-off because a
 * contended lock then stays with the vthread that runs: one that unlocks
 * and relocks in a loop keeps it without a switch, and the woken waiter
 * sits in the LIFO slot of the unlocker's carrier, so the hand-off costs
 * one switch when the holder blocks or ends.  Strict FIFO
 * would force a switch per lock under contention.  A woken waiter that
 * loses goes back to the head of the queue; if it has waited 1 ms or more
 * (since its first park in this call) it sets STARVING: unlock then keeps
 * LOCKED set and hands ownership to the head waiter (w->granted = HANDOFF),
 * newcomers neither barge nor spin but queue at the tail.  The recipient
 * leaves starvation mode when it is the last waiter or waited under 1 ms.
 * A waiter that times out or is cancelled leaves the queue; if that empties
 * it, WAITERS and STARVING go too.  A starving unlock that finds the head
 * waiter leaving passes ownership to the next one, or releases the lock
 * when none is left.
 *
 * Condition variable: a FIFO of waiters.  wait queues itself (under the
 * queue lock) before it unlocks the mutex, so a signal made after the
 * unlock -- with the mutex held or not -- finds it.  signal pops waiters
 * until an unpark wins: one that was being cancelled or timing out is
 * skipped and the signal goes to the next, so a signal is never consumed by
 * a waiter that then reports failure.  broadcast wakes all.  Whatever the
 * wait's outcome, the caller re-locks the mutex before returning, with an
 * uncancellable park (weft__park_begin_nocancel, no deadline): the caller's
 * invariants hold the mutex, so the call never returns without it.
 *
 * Semaphore: state is permits << 1 | WAITERS, and WAITERS implies no free
 * permit.  acquire takes a permit while there is one and nobody waits,
 * otherwise queues (FIFO).  release hands its permit straight to the head
 * waiter (granted) and only counts it when nobody waits, so an acquire never
 * overtakes a waiter and a permit is never lost: one offered to a waiter
 * that timed out goes to the next, or back to the count.
 *
 * Read-write lock: state is readers << 2 | WAITERS << 1 | WRITER.  A reader
 * enters while no writer holds it and nobody waits; a writer when it is
 * free and nobody waits; otherwise they queue in arrival order.  Whenever
 * the lock or the queue changes (an unlock, a waiter leaving) rw_grant
 * serves the head: a writer once no reader holds it, or every reader at the
 * head of the queue (readers share).  FIFO service means a stream of
 * readers cannot starve a writer (they queue behind it), and writers cannot
 * starve readers.  The queue lock makes the grant and the state update one
 * step.
 *
 * Latch and once: a count (a state) and a queue of waiters; the transition
 * to zero (to done) takes the queue lock and wakes every waiter.  A waiter
 * checks the count under the queue lock before queueing, so the waker's
 * pass, which follows its transition, sees it.
 *
 * Threads touching what: state words by anyone (atomics); queues and waiter
 * records under their queue lock; a waiter's record after the queue lock
 * handed it a winning wake, by nobody.  Nothing here allocates or frees.
 */
#define _GNU_SOURCE
#include "waitq.h"

#include <errno.h>
#include <limits.h>

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

static inline unsigned ld(const unsigned *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
static inline unsigned ld_acq(const unsigned *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

/* CAS *p from *exp to des; on failure *exp gets the current value. */
static inline int cas(unsigned *p, unsigned *exp, unsigned des) {
    return __atomic_compare_exchange_n(p, exp, des, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

static inline void set_bits(unsigned *p, unsigned b) { __atomic_fetch_or(p, b, __ATOMIC_ACQ_REL); }
static inline void clear_bits(unsigned *p, unsigned b) { __atomic_fetch_and(p, ~b, __ATOMIC_ACQ_REL); }

/* What a waker hands a waiter (weft__waiter.granted). */
enum { G_NONE = 0, G_WOKEN = 1 /* wake up and try again */, G_HANDOFF = 2 /* it is yours */ };

static inline uint64_t begin_park(weft__parker **p, int nocancel) {
    return nocancel ? weft__park_begin_nocancel(p, WEFT__PK_GENERIC) : weft__park_begin(p, WEFT__PK_GENERIC);
}

/* Ends our own park begun but not waited in (we need not wait after all).
 * If a canceller ended it first, its outcome is consumed here; the
 * cancellation stays sticky for the next call. */
static void unpark_self(weft__parker *p, uint64_t tok) {
    if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_NONE, NULL, NULL, 0);
}

/* A wait that returned 0 was ended by a waker that granted something. */
static inline void check_granted(const weft__waiter *w, const char *what) {
    if (__builtin_expect(w->granted == G_NONE, 0))
        weft__fatal("%s: woken without a grant (a GENERIC park was unparked by someone without its token)", what);
}

/* ------------------------------------------------------------------------ */
/* mutex                                                                     */
/* ------------------------------------------------------------------------ */

#define M_LOCKED 1u
#define M_WOKEN 2u
#define M_STARVING 4u
#define M_WAITERS 8u
#define STARVE_NS 1000000  /* a waiter past this switches the mutex to hand-off */
#define SPIN_ROUNDS 4      /* as Go's active_spin ... */
#define SPIN_PAUSES 30     /* ... and active_spin_cnt */

int weft_mutex_init(weft_mutex *m) {
    if (!m) return -EINVAL;
    *m = (weft_mutex)WEFT_MUTEX_INIT;
    return 0;
}

/* Ownership goes to the head waiter (starvation mode).  Returns 0 if the
 * mutex turned out not to be starving after all. */
static int mutex_handoff(weft_mutex *m) {
    weft__wq_lock(&m->q);
    unsigned s = ld(&m->state);
    if (!(s & M_STARVING)) {
        weft__wq_unlock(&m->q);
        return 0;
    }
    if (s & M_LOCKED) {
        /* Someone owns it already: while we were on our way here the queue
         * emptied (starvation ended), the mutex was taken, and a new
         * starving waiter came.  The owner's unlock hands it off. */
        weft__wq_unlock(&m->q);
        return 1;
    }
    /* Starving and not locked: a hand-off is due, and nobody can take the
     * mutex but by one, under this lock.  We do it. */
    set_bits(&m->state, M_LOCKED);
    weft__waiter *w;
    while ((w = weft__wq_pop(&m->q))) {
        if (!m->q.head) clear_bits(&m->state, M_WAITERS);
        w->granted = G_HANDOFF;
        if (weft__wq_wake(w)) goto out;
        w->granted = G_NONE; /* it is leaving: the next one */
    }
    clear_bits(&m->state, M_LOCKED | M_STARVING | M_WAITERS);
out:
    weft__wq_unlock(&m->q);
    return 1;
}

/* Normal mode: wake the head waiter to compete (WOKEN is set, by us). */
static void mutex_wake_one(weft_mutex *m) {
    weft__wq_lock(&m->q);
    weft__waiter *w;
    while ((w = weft__wq_pop_any(&m->q))) {
        if (!m->q.head) clear_bits(&m->state, M_WAITERS);
        w->granted = G_WOKEN;
        if (weft__wq_wake(w)) {
            weft__wq_unlock(&m->q);
            return;
        }
        w->granted = G_NONE;
    }
    clear_bits(&m->state, M_WOKEN); /* nobody left to wake */
    weft__wq_unlock(&m->q);
}

/* s: the state just after our release cleared LOCKED. */
__attribute__((noinline)) static void mutex_unlock_slow(weft_mutex *m, unsigned s) {
    for (;;) {
        if (s & M_STARVING) {
            if (mutex_handoff(m)) return;
            s = ld(&m->state);
            continue;
        }
        /* no waiters, somebody took it again, or somebody is woken already */
        if (!(s & M_WAITERS) || (s & (M_LOCKED | M_WOKEN))) return;
        if (cas(&m->state, &s, s | M_WOKEN)) {
            mutex_wake_one(m);
            return;
        }
    }
}

int (weft_mutex_unlock)(weft_mutex *m) {
    if (__builtin_expect(!m, 0)) return -EINVAL;
    if (__builtin_expect(!(ld(&m->state) & M_LOCKED), 0)) return -EPERM;
    unsigned old = __atomic_fetch_sub(&m->state, M_LOCKED, __ATOMIC_RELEASE);
    if (__builtin_expect(old == M_LOCKED, 1)) return 0;
    mutex_unlock_slow(m, old - M_LOCKED);
    return 0;
}

/*
 * nocancel: the cond's re-lock: never refused, never interrupted, no
 * deadline (returns 0).
 */
__attribute__((noinline)) static int mutex_lock_slow(weft_mutex *m, int64_t deadline, int nocancel, const char *file,
                                                     int line) {
    int64_t wait_start = 0;
    int awoke = 0;    /* we were woken, and own the WOKEN bit */
    int starving = 0; /* we have waited STARVE_NS: ask for hand-off */
    int requeue = 0;  /* we have waited before: back to the head of the queue */
    int spins = 0;
    unsigned s = ld(&m->state);
    for (;;) {
        /* spin while the holder may be about to let go: only while nobody
         * is queued (and so never when starving) */
        if ((s & (M_LOCKED | M_STARVING | M_WAITERS)) == M_LOCKED && spins < SPIN_ROUNDS) {
            for (int i = 0; i < SPIN_PAUSES; i++) weft__cpu_relax();
            spins++;
            s = ld(&m->state);
            continue;
        }
        if (!(s & (M_LOCKED | M_STARVING))) { /* free, normal mode: take it */
            unsigned n = (s | M_LOCKED) & ~(awoke ? M_WOKEN : 0u);
            if (cas(&m->state, &s, n)) return 0;
            continue;
        }
        /* wait */
        if (!wait_start) wait_start = weft_now();
        weft__parker *p;
        uint64_t tok = begin_park(&p, nocancel);
        if (!tok) {
            if (awoke) clear_bits(&m->state, M_WOKEN);
            return -ECANCELED;
        }
        weft__wq_lock(&m->q);
        s = ld(&m->state);
        int queue = 0;
        while (s & (M_LOCKED | M_STARVING)) {
            unsigned n = s | M_WAITERS;
            if (awoke) n &= ~M_WOKEN;
            if (starving && (s & M_LOCKED)) n |= M_STARVING;
            if (cas(&m->state, &s, n)) {
                queue = 1;
                break;
            }
        }
        if (!queue) { /* released meanwhile: try again */
            weft__wq_unlock(&m->q);
            unpark_self(p, tok);
            continue;
        }
        awoke = 0;
        weft__waiter w;
        w.p = p;
        w.token = tok;
        w.kind = 0;
        w.granted = G_NONE;
        if (requeue) weft__wq_push_head(&m->q, &w);
        else weft__wq_push_tail(&m->q, &w);
        weft__wq_unlock(&m->q);

        int r = weft__park_wait(p, tok, deadline, WEFT__WHY_MUTEX, m, file, line);
        if (r < 0) {
            /* dequeued by a waker that then lost to us, or still queued */
            weft__wq_lock(&m->q);
            if (w.queued) {
                weft__wq_remove(&m->q, &w);
                if (!m->q.head) clear_bits(&m->state, M_WAITERS | M_STARVING);
            }
            weft__wq_unlock(&m->q);
            return r;
        }
        check_granted(&w, "weft_mutex_lock");
        if (w.granted == G_HANDOFF) { /* starvation mode: it is ours, LOCKED set */
            s = ld(&m->state);
            if (!(s & M_WAITERS) || weft_now() - wait_start < STARVE_NS) clear_bits(&m->state, M_STARVING);
            return 0;
        }
        /* woken to compete; the waker set WOKEN for us */
        awoke = 1;
        requeue = 1;
        spins = 0;
        if (weft_now() - wait_start >= STARVE_NS) starving = 1;
        s = ld(&m->state);
    }
}

/* The fast path takes the mutex whenever it is free in normal mode, waiters
 * or not (barging): one load and one CAS.  CAS(0 -> LOCKED) alone would send
 * every lock to the slow path while anyone waits, for one more atomic. */
static inline int mutex_try_fast(weft_mutex *m) {
    unsigned s = ld(&m->state);
    return !(s & (M_LOCKED | M_STARVING)) &&
           __atomic_compare_exchange_n(&m->state, &s, s | M_LOCKED, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

int weft__mutex_lock_at(weft_mutex *m, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!m, 0)) return -EINVAL;
    if (__builtin_expect(mutex_try_fast(m), 1)) return 0;
    return mutex_lock_slow(m, deadline, 0, file, line);
}

int (weft_mutex_lock)(weft_mutex *m) { return weft__mutex_lock_at(m, 0, NULL, 0); }
int (weft_mutex_lock_until)(weft_mutex *m, int64_t d) { return weft__mutex_lock_at(m, d, NULL, 0); }

int weft_mutex_try_lock(weft_mutex *m) {
    if (__builtin_expect(!m, 0)) return -EINVAL;
    unsigned s = ld(&m->state);
    while (!(s & (M_LOCKED | M_STARVING)))
        if (cas(&m->state, &s, s | M_LOCKED)) return 0;
    return -EBUSY;
}

int weft_mutex_destroy(weft_mutex *m) {
    if (!m) return -EINVAL;
    if (ld(&m->state) != 0 || weft__wq_nonempty(&m->q)) return -EBUSY;
    return 0;
}

/* The cond's re-lock: uncancellable, no deadline. */
static void mutex_relock(weft_mutex *m, const char *file, int line) {
    if (!mutex_try_fast(m)) mutex_lock_slow(m, 0, 1, file, line);
}

/* ------------------------------------------------------------------------ */
/* condition variable                                                        */
/* ------------------------------------------------------------------------ */

int weft_cond_init(weft_cond *c) {
    if (!c) return -EINVAL;
    *c = (weft_cond)WEFT_COND_INIT;
    return 0;
}

int weft__cond_wait_at(weft_cond *c, weft_mutex *m, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!c || !m, 0)) return -EINVAL;
    if (!(ld(&m->state) & M_LOCKED)) return -EPERM;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED; /* m still held: never released */
    weft__waiter w;
    w.p = p;
    w.token = tok;
    w.kind = 0;
    w.granted = G_NONE;
    weft__wq_lock(&c->q);
    weft__wq_push_tail(&c->q, &w);
    weft__wq_unlock(&c->q);
    (weft_mutex_unlock)(m);
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_COND, c, file, line);
    if (r < 0) {
        weft__wq_lock(&c->q);
        if (w.queued) weft__wq_remove(&c->q, &w);
        /* else: a signal picked us and lost to the timeout/cancel: it went
         * to the next waiter */
        weft__wq_unlock(&c->q);
    } else {
        check_granted(&w, "weft_cond_wait");
    }
    mutex_relock(m, file, line);
    return r;
}

int (weft_cond_wait)(weft_cond *c, weft_mutex *m) { return weft__cond_wait_at(c, m, 0, NULL, 0); }
int (weft_cond_wait_until)(weft_cond *c, weft_mutex *m, int64_t d) { return weft__cond_wait_at(c, m, d, NULL, 0); }

int weft_cond_signal(weft_cond *c) {
    if (__builtin_expect(!c, 0)) return -EINVAL;
    if (!weft__wq_nonempty(&c->q)) return 0;
    weft__wq_lock(&c->q);
    weft__waiter *w;
    while ((w = weft__wq_pop(&c->q))) {
        w->granted = G_WOKEN;
        if (weft__wq_wake(w)) break;
        w->granted = G_NONE; /* it is leaving: the signal goes to the next */
    }
    weft__wq_unlock(&c->q);
    return 0;
}

/* Wakes every waiter of q, its lock held (each gets G_WOKEN: try again). */
static void wake_all_locked(weft__waitq *q) {
    weft__waiter *w;
    while ((w = weft__wq_pop(q))) {
        w->granted = G_WOKEN;
        if (!weft__wq_wake(w)) w->granted = G_NONE;
    }
}

int weft_cond_broadcast(weft_cond *c) {
    if (__builtin_expect(!c, 0)) return -EINVAL;
    if (!weft__wq_nonempty(&c->q)) return 0;
    weft__wq_lock(&c->q);
    wake_all_locked(&c->q);
    weft__wq_unlock(&c->q);
    return 0;
}

int weft_cond_destroy(weft_cond *c) {
    if (!c) return -EINVAL;
    return weft__wq_nonempty(&c->q) ? -EBUSY : 0;
}

/* ------------------------------------------------------------------------ */
/* semaphore                                                                 */
/* ------------------------------------------------------------------------ */

#define S_WAITERS 1u
#define S_ONE 2u

int weft_sem_init(weft_sem *s, unsigned value) {
    if (!s || value > WEFT_SEM_MAX) return -EINVAL;
    *s = (weft_sem)WEFT_SEM_INIT(value);
    return 0;
}

int weft_sem_try_acquire(weft_sem *s) {
    if (__builtin_expect(!s, 0)) return -EINVAL;
    unsigned v = ld(&s->state);
    while (v >= S_ONE && !(v & S_WAITERS))
        if (cas(&s->state, &v, v - S_ONE)) return 0;
    return -EAGAIN;
}

int weft__sem_acquire_at(weft_sem *s, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!s, 0)) return -EINVAL;
    if (weft_sem_try_acquire(s) == 0) return 0;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    weft__wq_lock(&s->q);
    unsigned v = ld(&s->state);
    for (;;) {
        if (v >= S_ONE) { /* a permit is free (and so nobody waits) */
            if (cas(&s->state, &v, v - S_ONE)) {
                weft__wq_unlock(&s->q);
                unpark_self(p, tok);
                return 0;
            }
            continue;
        }
        if (cas(&s->state, &v, v | S_WAITERS)) break;
    }
    weft__waiter w;
    w.p = p;
    w.token = tok;
    w.kind = 0;
    w.granted = G_NONE;
    weft__wq_push_tail(&s->q, &w);
    weft__wq_unlock(&s->q);
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_SEM, s, file, line);
    if (r == 0) {
        check_granted(&w, "weft_sem_acquire");
        return 0; /* release handed us its permit */
    }
    weft__wq_lock(&s->q);
    if (w.queued) {
        weft__wq_remove(&s->q, &w);
        if (!s->q.head) clear_bits(&s->state, S_WAITERS);
    }
    weft__wq_unlock(&s->q);
    return r;
}

int (weft_sem_acquire)(weft_sem *s) { return weft__sem_acquire_at(s, 0, NULL, 0); }
int (weft_sem_acquire_until)(weft_sem *s, int64_t d) { return weft__sem_acquire_at(s, d, NULL, 0); }

int weft_sem_release(weft_sem *s) {
    if (__builtin_expect(!s, 0)) return -EINVAL;
    unsigned v = ld(&s->state);
    while (!(v & S_WAITERS)) {
        if ((v >> 1) >= WEFT_SEM_MAX) return -EOVERFLOW;
        if (cas(&s->state, &v, v + S_ONE)) return 0;
    }
    weft__wq_lock(&s->q);
    weft__waiter *w;
    while ((w = weft__wq_pop(&s->q))) {
        if (!s->q.head) clear_bits(&s->state, S_WAITERS);
        w->granted = G_HANDOFF;
        if (weft__wq_wake(w)) {
            weft__wq_unlock(&s->q);
            return 0;
        }
        w->granted = G_NONE; /* timed out or cancelled: the next one */
    }
    /* nobody is left to take it: count it (WAITERS is clear, so the fast
     * paths could not have changed the count meanwhile but by releasing) */
    __atomic_fetch_add(&s->state, S_ONE, __ATOMIC_ACQ_REL);
    weft__wq_unlock(&s->q);
    return 0;
}

unsigned weft_sem_value(const weft_sem *s) { return ld(&s->state) >> 1; }

int weft_sem_destroy(weft_sem *s) {
    if (!s) return -EINVAL;
    return (ld(&s->state) & S_WAITERS) || weft__wq_nonempty(&s->q) ? -EBUSY : 0;
}

/* ------------------------------------------------------------------------ */
/* read-write lock                                                           */
/* ------------------------------------------------------------------------ */

#define RW_WRITER 1u
#define RW_WAITERS 2u
#define RW_RD 4u
#define RW_MAX_READERS ((UINT_MAX >> 2) - 1)
enum { RW_KIND_READ = 1, RW_KIND_WRITE = 2 };

int weft_rwlock_init(weft_rwlock *l) {
    if (!l) return -EINVAL;
    *l = (weft_rwlock)WEFT_RWLOCK_INIT;
    return 0;
}

/* Serves the head of the queue as far as the lock allows: one writer, or
 * every reader at the head.  Queue lock held. */
static void rw_grant(weft_rwlock *l) {
    weft__waiter *w;
    while ((w = l->q.head)) {
        unsigned s = ld(&l->state);
        if (s & RW_WRITER) return;
        if (w->kind == RW_KIND_WRITE) {
            if (s >= RW_RD) return; /* readers still in: it waits for the last */
            weft__wq_remove(&l->q, w);
            /* no reader can enter meanwhile: WAITERS is still set */
            set_bits(&l->state, RW_WRITER);
            w->granted = G_HANDOFF;
            if (weft__wq_wake(w)) break;
            w->granted = G_NONE;
            clear_bits(&l->state, RW_WRITER);
        } else {
            weft__wq_remove(&l->q, w);
            __atomic_fetch_add(&l->state, RW_RD, __ATOMIC_ACQ_REL);
            w->granted = G_HANDOFF;
            if (!weft__wq_wake(w)) {
                w->granted = G_NONE;
                __atomic_fetch_sub(&l->state, RW_RD, __ATOMIC_ACQ_REL);
            }
        }
    }
    if (!l->q.head) clear_bits(&l->state, RW_WAITERS);
}

static int rw_try(weft_rwlock *l, int kind, unsigned *sp) {
    unsigned s = *sp;
    if (kind == RW_KIND_READ) {
        while (!(s & (RW_WRITER | RW_WAITERS))) {
            if ((s >> 2) >= RW_MAX_READERS) return -EOVERFLOW;
            if (cas(&l->state, &s, s + RW_RD)) return 0;
        }
    } else {
        while (s == 0)
            if (cas(&l->state, &s, RW_WRITER)) return 0;
    }
    *sp = s;
    return -EBUSY;
}

__attribute__((noinline)) static int rw_lock_slow(weft_rwlock *l, int kind, int64_t deadline, const char *file,
                                                  int line) {
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    weft__wq_lock(&l->q);
    unsigned s = ld(&l->state);
    for (;;) {
        int r = rw_try(l, kind, &s);
        if (r != -EBUSY) {
            weft__wq_unlock(&l->q);
            unpark_self(p, tok);
            return r;
        }
        if (cas(&l->state, &s, s | RW_WAITERS)) break;
    }
    weft__waiter w;
    w.p = p;
    w.token = tok;
    w.kind = kind;
    w.granted = G_NONE;
    weft__wq_push_tail(&l->q, &w);
    weft__wq_unlock(&l->q);
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_RWLOCK, l, file, line);
    if (r == 0) {
        check_granted(&w, "weft_rwlock_lock");
        return 0; /* rw_grant entered us */
    }
    weft__wq_lock(&l->q);
    if (w.queued) {
        weft__wq_remove(&l->q, &w);
        rw_grant(l); /* readers queued behind a leaving writer may enter */
    }
    weft__wq_unlock(&l->q);
    return r;
}

int weft__rwlock_rdlock_at(weft_rwlock *l, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->state);
    int r = rw_try(l, RW_KIND_READ, &s);
    if (r != -EBUSY) return r;
    return rw_lock_slow(l, RW_KIND_READ, deadline, file, line);
}

int weft__rwlock_wrlock_at(weft_rwlock *l, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = 0;
    if (__atomic_compare_exchange_n(&l->state, &s, RW_WRITER, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return 0;
    return rw_lock_slow(l, RW_KIND_WRITE, deadline, file, line);
}

int (weft_rwlock_rdlock)(weft_rwlock *l) { return weft__rwlock_rdlock_at(l, 0, NULL, 0); }
int (weft_rwlock_wrlock)(weft_rwlock *l) { return weft__rwlock_wrlock_at(l, 0, NULL, 0); }
int (weft_rwlock_rdlock_until)(weft_rwlock *l, int64_t d) { return weft__rwlock_rdlock_at(l, d, NULL, 0); }
int (weft_rwlock_wrlock_until)(weft_rwlock *l, int64_t d) { return weft__rwlock_wrlock_at(l, d, NULL, 0); }

int weft_rwlock_try_rdlock(weft_rwlock *l) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->state);
    return rw_try(l, RW_KIND_READ, &s);
}

int weft_rwlock_try_wrlock(weft_rwlock *l) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->state);
    return rw_try(l, RW_KIND_WRITE, &s);
}

int weft_rwlock_unlock(weft_rwlock *l) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->state);
    for (;;) {
        if (s & RW_WRITER) {
            if (s & RW_WAITERS) break;
            if (cas(&l->state, &s, s & ~RW_WRITER)) return 0;
        } else if (s >= RW_RD) {
            if ((s & RW_WAITERS) && s < 2 * RW_RD) break; /* the last reader, and someone waits */
            if (cas(&l->state, &s, s - RW_RD)) return 0;
        } else {
            return -EPERM;
        }
    }
    weft__wq_lock(&l->q);
    s = ld(&l->state);
    while (!cas(&l->state, &s, (s & RW_WRITER) ? s & ~RW_WRITER : s - RW_RD)) {
    }
    rw_grant(l);
    weft__wq_unlock(&l->q);
    return 0;
}

int weft_rwlock_destroy(weft_rwlock *l) {
    if (!l) return -EINVAL;
    return ld(&l->state) != 0 || weft__wq_nonempty(&l->q) ? -EBUSY : 0;
}

/* ------------------------------------------------------------------------ */
/* latch                                                                     */
/* ------------------------------------------------------------------------ */

int weft_latch_init(weft_latch *l, unsigned count) {
    if (!l) return -EINVAL;
    *l = (weft_latch)WEFT_LATCH_INIT(count);
    return 0;
}

/* Wakes every waiter of q (the thing they wait for has happened). */
static void wake_all(weft__waitq *q) {
    weft__wq_lock(q);
    wake_all_locked(q);
    weft__wq_unlock(q);
}

/* The last count (1 -> 0) is taken under the queue's lock, and its waking
 * done before that lock is let go; an awaiter returns only after it has
 * held the lock once count read 0 (await, wait_for_word).  So once any
 * await has returned, no count_down still touches the latch: the program
 * may destroy it, or init it again for another round, at once -- as
 * POSIX allows for a semaphore whose waiters have returned.  (Before, the
 * last count_down could still be on its way to wake_all when the awaiter,
 * seeing 0, returned and re-inited the latch; the stale wake then hit the
 * next round's waiter: "woken without a grant".) */
int weft_latch_count_down(weft_latch *l) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->count);
    for (;;) {
        if (s == 0) return -EINVAL;
        if (s == 1) {
            weft__wq_lock(&l->q);
            if (cas(&l->count, &s, 0)) {
                wake_all_locked(&l->q);
                weft__wq_unlock(&l->q);
                return 0;
            }
            weft__wq_unlock(&l->q);
            continue;
        }
        if (cas(&l->count, &s, s - 1)) return 0;
    }
}

int weft_latch_add(weft_latch *l, unsigned n) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    unsigned s = ld(&l->count);
    for (;;) {
        if (s > UINT_MAX - n) return -EOVERFLOW;
        if (cas(&l->count, &s, s + n)) return 0;
    }
}

unsigned weft_latch_count(const weft_latch *l) { return ld(&l->count); }

/* Waits in q until *word reads `until` (latch: count 0; once: done). */
static int wait_for_word(weft__waitq *q, unsigned *word, unsigned until, int64_t deadline, int why, const void *obj,
                         const char *file, int line) {
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    weft__wq_lock(q);
    if (ld_acq(word) == until) { /* the waker's pass follows this change */
        weft__wq_unlock(q);
        unpark_self(p, tok);
        return 0;
    }
    weft__waiter w;
    w.p = p;
    w.token = tok;
    w.kind = 0;
    w.granted = G_NONE;
    weft__wq_push_tail(q, &w);
    weft__wq_unlock(q);
    int r = weft__park_wait(p, tok, deadline, why, obj, file, line);
    if (r == 0) {
        check_granted(&w, why == WEFT__WHY_ONCE ? "weft_once" : "weft_latch_await");
        (void)ld_acq(word); /* acquire what the waker published */
        /* the waker may still be waking others under the lock: wait until
         * it has let go (weft_latch_count_down) */
        weft__wq_lock(q);
        weft__wq_unlock(q);
        return 0;
    }
    weft__wq_lock(q);
    if (w.queued) weft__wq_remove(q, &w);
    weft__wq_unlock(q);
    return r;
}

int weft__latch_await_at(weft_latch *l, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!l, 0)) return -EINVAL;
    if (ld_acq(&l->count) == 0) { /* the last count_down may still hold the lock (above) */
        weft__wq_lock(&l->q);
        weft__wq_unlock(&l->q);
        return 0;
    }
    return wait_for_word(&l->q, &l->count, 0, deadline, WEFT__WHY_LATCH, l, file, line);
}

int (weft_latch_await)(weft_latch *l) { return weft__latch_await_at(l, 0, NULL, 0); }
int (weft_latch_await_until)(weft_latch *l, int64_t d) { return weft__latch_await_at(l, d, NULL, 0); }

int weft_latch_destroy(weft_latch *l) {
    if (!l) return -EINVAL;
    return weft__wq_nonempty(&l->q) ? -EBUSY : 0;
}

/* ------------------------------------------------------------------------ */
/* once                                                                      */
/* ------------------------------------------------------------------------ */

enum { ONCE_NEW = 0, ONCE_RUNNING = 1, ONCE_DONE = 2 };

int weft__once_at(weft_once_t *o, void (*fn)(void), const char *file, int line) {
    if (__builtin_expect(!o, 0)) return -EINVAL;
    unsigned s = ld_acq(&o->state);
    if (__builtin_expect(s == ONCE_DONE, 1)) return 0;
    if (!fn) return -EINVAL;
    if (s == ONCE_NEW &&
        __atomic_compare_exchange_n(&o->state, &s, ONCE_RUNNING, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        fn();
        __atomic_store_n(&o->state, ONCE_DONE, __ATOMIC_RELEASE);
        wake_all(&o->q);
        return 0;
    }
    if (s == ONCE_DONE) return 0;
    return wait_for_word(&o->q, &o->state, ONCE_DONE, 0, WEFT__WHY_ONCE, o, file, line);
}

int (weft_once)(weft_once_t *o, void (*fn)(void)) { return weft__once_at(o, fn, NULL, 0); }
