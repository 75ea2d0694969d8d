/*
 * The parking lot (lot.h): waiters keyed by an address, in hashed buckets.
 *
 * Buckets.  LOT_BUCKETS waitqs (spinlock + FIFO), each on its own cache
 * line, in static storage: nothing to make or free, usable from a
 * constructor or after weft_shutdown (a wait then sleeps as a platform
 * thread would).  An address goes to bucket (addr >> 4) * golden >> (64 -
 * LOT_BITS): locks are 4- to 48-byte objects, so the low bits say little.
 * 1024 buckets: with a hundred contended locks alive the chance that two
 * share one is small, and a shared bucket costs only a longer walk (each
 * record names its key).
 *
 * Lock order: a bucket's lock is taken alone, never with another bucket's
 * or any other lock, and never across a park; weft__unpark under it is the
 * CAS and a push onto a run queue (or a platform thread's futex wake), as
 * under waitq.h's locks.
 */
#include "lot.h"

#include "../sched/sched.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>

#define LOT_BITS 10
#define LOT_BUCKETS (1u << LOT_BITS)

static struct {
    weft__waitq q;
} __attribute__((aligned(64))) lot[LOT_BUCKETS];

/* The full fence between a side's store and its look (lot.h).  TSan does
 * not model a lone fence (-Wtsan): there it is a sequentially consistent
 * read-modify-write, which on x86 is the same locked instruction -- and
 * a TSan build does not use the lot (hook/locks.c is not built there). */
static inline void lot_fence(void) {
#ifdef WEFT_TSAN
    static _Atomic int tsan_fence;
    atomic_fetch_add_explicit(&tsan_fence, 0, memory_order_seq_cst);
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline unsigned bucket_of(const void *key) {
    return (unsigned)((((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) >> (64 - LOT_BITS));
}

int weft__lot_enter(weft__lot_waiter *lw, const void *key, int (*still)(const void *key, void *arg), void *arg) {
    weft__parker *p;
    uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_GENERIC);
    *lw = (weft__lot_waiter){.w = {.p = p, .token = tok}, .key = key, .bucket = bucket_of(key)};
    weft__waitq *q = &lot[lw->bucket].q;
    weft__wq_lock(q);
    weft__wq_push_tail(q, &lw->w);
    /* the record is visible before the state is read: pairs with the
     * waker's fence between its state change and its look (lot.h) */
    lot_fence();
    if (still && !still(key, arg)) {
        weft__wq_remove(q, &lw->w);
        weft__wq_unlock(q);
        /* nobody could have woken it (it was queued under the lock the
         * whole time): the abort wins; if it did not, consume the wake */
        if (!weft__park_abort(p, tok)) (void)weft__park_wait(p, tok, 0, WEFT__WHY_PARK, key, NULL, 0);
        return -EAGAIN;
    }
    weft__wq_unlock(q);
    return 0;
}

int weft__lot_park(weft__lot_waiter *lw, int64_t deadline, int why, const void *obj) {
    int r = weft__park_wait(lw->w.p, lw->w.token, deadline, why, obj, NULL, 0);
    if (r != 0) { /* its deadline: still queued unless a waker popped it just now */
        weft__waitq *q = &lot[lw->bucket].q;
        weft__wq_lock(q);
        if (lw->w.queued) weft__wq_remove(q, &lw->w);
        weft__wq_unlock(q);
    }
    return r;
}

void weft__lot_leave(weft__lot_waiter *lw) {
    weft__waitq *q = &lot[lw->bucket].q;
    weft__wq_lock(q);
    int was = lw->w.queued;
    if (was) weft__wq_remove(q, &lw->w);
    weft__wq_unlock(q);
    /* end the park: aborted, or (a waker popped it first) its wake consumed */
    if (!was || !weft__park_abort(lw->w.p, lw->w.token))
        (void)weft__park_wait(lw->w.p, lw->w.token, 0, WEFT__WHY_PARK, lw->key, NULL, 0);
}

int weft__lot_wake(const void *key, int n) {
    weft__waitq *q = &lot[bucket_of(key)].q;
    /* the state change the caller made is visible before the look (lot.h) */
    lot_fence();
    if (!weft__wq_nonempty(q)) return 0;
    int woken = 0;
    weft__wq_lock(q);
    for (weft__waiter *w = q->head, *next; w && woken < n; w = next) {
        next = w->next;
        if (((weft__lot_waiter *)w)->key != key) continue;
        weft__wq_remove(q, w);
        woken += weft__wq_wake(w); /* 0: its deadline ended it first; the next one then */
    }
    weft__wq_unlock(q);
    return woken;
}
