/*
 * The wait queue under weft's locks (sync.c explains the protocol).
 *
 * A queue is a spinlock word and a doubly-linked FIFO of waiters; each
 * waiter lives on the stack of the thread that waits.  The spinlock is held
 * for a few instructions at a time -- queue surgery, state-word updates and
 * the unpark CAS -- and never across a park or a switch, so its holder is
 * always running (or preempted by the OS: after a short spin contenders
 * sched_yield).
 *
 * head is also read without the lock (a cheap "anyone waiting?" test), so
 * it is written with atomic stores.
 *
 * This is weft's one list of parked waiters.  Futures and channels link
 * their records with these calls under locks of their own, and so do the
 * executors and file channels (exec.c, async/file.c), which wait under a
 * pthread mutex: weft__wq_wait_mutex and weft__wq_wake_one/_all at the end.
 * A queue used that way leaves its spinlock word alone.
 */
#ifndef WEFT_SYNC_WAITQ_H
#define WEFT_SYNC_WAITQ_H

#include "../sched/sched.h"
#include "../sched/det.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

typedef struct weft__waiter {
    struct weft__waiter *next, *prev;
    weft__parker *p;       /* the waiting thread's park word ... */
    uint64_t token;        /* ... and the park it waits in */
    int kind;              /* primitive-specific (rwlock: reader or writer) */
    int queued;            /* 1 while in the queue; written under the lock */
    int granted;           /* the waker handed it what it waited for; written
                            * under the lock before the unpark that won */
} weft__waiter;

__attribute__((noinline, unused)) static void weft__wq_lock_slow(weft__waitq *q) {
    for (int spins = 0;; spins++) {
        if (!__atomic_load_n(&q->lock, __ATOMIC_RELAXED) && !__atomic_exchange_n(&q->lock, 1u, __ATOMIC_ACQUIRE))
            return;
        if (spins < 64) weft__cpu_relax();
        else sched_yield(); /* the holder's OS thread was preempted */
    }
}

static inline void weft__wq_lock(weft__waitq *q) {
    if (__builtin_expect(!__atomic_exchange_n(&q->lock, 1u, __ATOMIC_ACQUIRE), 1)) return;
    weft__wq_lock_slow(q);
}

static inline void weft__wq_unlock(weft__waitq *q) { __atomic_store_n(&q->lock, 0u, __ATOMIC_RELEASE); }

/* Racy: is anyone queued? */
static inline int weft__wq_nonempty(const weft__waitq *q) {
    return __atomic_load_n(&q->head, __ATOMIC_RELAXED) != NULL;
}

static inline void weft__wq_push_tail(weft__waitq *q, weft__waiter *w) {
    w->next = NULL;
    w->prev = q->tail;
    if (q->tail) q->tail->next = w;
    else __atomic_store_n(&q->head, w, __ATOMIC_RELAXED);
    q->tail = w;
    w->queued = 1;
}

static inline void weft__wq_push_head(weft__waitq *q, weft__waiter *w) {
    w->prev = NULL;
    w->next = q->head;
    if (q->head) q->head->prev = w;
    else q->tail = w;
    __atomic_store_n(&q->head, w, __ATOMIC_RELAXED);
    w->queued = 1;
}

static inline void weft__wq_remove(weft__waitq *q, weft__waiter *w) {
    if (w->prev) w->prev->next = w->next;
    else __atomic_store_n(&q->head, w->next, __ATOMIC_RELAXED);
    if (w->next) w->next->prev = w->prev;
    else q->tail = w->prev;
    w->queued = 0;
}

static inline weft__waiter *weft__wq_pop(weft__waitq *q) {
    weft__waiter *w = q->head;
    if (w) weft__wq_remove(q, w);
    return w;
}

/* Pops the waiter a wake-one serves where the order is the
 * implementation's choice (weft_mutex is not FIFO): the head, or in
 * deterministic mode one the seed draws (det.c). */
static inline weft__waiter *weft__wq_pop_any(weft__waitq *q) {
    weft__waiter *w = q->head;
    if (__builtin_expect(WEFT__DET_ON(), 0) && w && w->next) {
        uint32_t n = 0;
        for (weft__waiter *x = w; x; x = x->next) n++;
        for (uint32_t k = weft__det_choose(n, "mutex-waiter"); k; k--) w = w->next;
    }
    if (w) weft__wq_remove(q, w);
    return w;
}

/* Ends w's park with WOKEN.  Call with the lock held, w just popped.
 * Returns 1 if this won (w's wait returns 0 and w may run at once: do not
 * touch w again), 0 if w's park had already ended -- timed out or
 * cancelled: w is waiting for the lock to find out it was dequeued, and
 * whatever was handed to it must go elsewhere. */
static inline int weft__wq_wake(weft__waiter *w) {
    return weft__unpark(w->p, w->token, WEFT__PS_WOKEN);
}

/* ---- waiting under the owner's pthread mutex (executors, file channels) ----
 *
 * Records on the waiters' own stacks, linked under the owner's mutex, which
 * is never held across a park.  A waker pops a record and unparks it; if
 * that unpark loses (the waiter timed out or was cancelled in the same
 * instant) it wakes the next one, so no wake is lost. */

/* Wakes the first waiter whose park is still waiting; 1 if one woke. */
static inline int weft__wq_wake_one(weft__waitq *q) {
    weft__waiter *w;
    while ((w = weft__wq_pop(q)))
        if (weft__wq_wake(w)) return 1; /* w may be gone now */
    return 0;
}

static inline void weft__wq_wake_all(weft__waitq *q) {
    while (weft__wq_wake_one(q)) {
    }
}

/* Waits on q until woken, deadline (absolute; 0 none) or, unless nocancel,
 * cancellation: 0, -ETIMEDOUT or -ECANCELED.  Entered and left with m held.
 * obj is what the dump shows the wait is on. */
static inline int weft__wq_wait_mutex(pthread_mutex_t *m, weft__waitq *q, int64_t deadline, int nocancel,
                                      const void *obj) {
    weft__parker *p;
    uint64_t tok = nocancel ? weft__park_begin_nocancel(&p, WEFT__PK_GENERIC) : weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    weft__waiter w = {.p = p, .token = tok};
    weft__wq_push_tail(q, &w);
    pthread_mutex_unlock(m);
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_EXECUTOR, obj, NULL, 0);
    pthread_mutex_lock(m);
    if (w.queued) weft__wq_remove(q, &w);
    return r;
}

#endif /* WEFT_SYNC_WAITQ_H */
