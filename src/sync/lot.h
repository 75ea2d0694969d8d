/*
 * The parking lot: threads waiting on an address they do not own.
 *
 * weft's own locks keep their waiters in the lock (waitq.h).  A lock weft
 * did not write -- a pthread_mutex_t, a pthread_cond_t, later a futex word
 * -- has no room for them, so its waiters wait here, keyed by its address,
 * as Linux keeps futex waiters in a hash of the address and WebKit's
 * ParkingLot keeps its locks' waiters.  A wait and a wake meet in one of
 * LOT_BUCKETS buckets, each a waitq (its spinlock and FIFO); a bucket holds
 * the waiters of every address that hashes to it, each record naming its
 * address.
 *
 * No lost wake-up.  A waiter enqueues under the bucket's lock, then asks
 * `still` whether it must wait (the lock still held ...); a waker changes
 * that state first, then looks for waiters.  Each side's store comes
 * before its load, with a full fence between (Dekker): either the waker
 * sees the waiter's record, or the waiter sees the new state and does not
 * park.  A waiter whose park ended otherwise (its deadline) and whose
 * record a waker popped in the same instant loses nothing: the waker's
 * unpark fails and it wakes the next record of that address.
 *
 * Who waits: vthreads (they park) and platform threads (they sleep on
 * their park word: sched.h), on any runtime that is up.  The records live
 * on the waiters' stacks.  Waits are never cancelled (a foreign lock has no
 * way to say so) and end by a wake or their deadline.
 */
#ifndef WEFT_SYNC_LOT_H
#define WEFT_SYNC_LOT_H

#include "waitq.h"

typedef struct weft__lot_waiter {
    weft__waiter w;  /* first: the bucket's queue links it */
    const void *key; /* the address it waits on */
    unsigned bucket;
} weft__lot_waiter;

/* Enqueues the caller on key (a park begun, not yet waited) unless
 * still(key, arg), asked after the enqueue, says there is nothing to wait
 * for (0): then -EAGAIN, nothing left queued.  still NULL: always wait.
 * Returns 0 when queued: the caller then calls weft__lot_park, or
 * weft__lot_leave if it changes its mind. */
int weft__lot_enter(weft__lot_waiter *lw, const void *key, int (*still)(const void *key, void *arg), void *arg);
/* Waits until woken (0) or deadline (weft_now's clock; 0: none) passes
 * (-ETIMEDOUT); why/obj describe the wait for the dump.  Never cancelled. */
int weft__lot_park(weft__lot_waiter *lw, int64_t deadline, int why, const void *obj);
/* Leaves the queue without waiting (an entered record). */
void weft__lot_leave(weft__lot_waiter *lw);
/* Wakes up to n waiters of key, oldest first; how many woke.  Cheap when
 * none waits in key's bucket: a fence and a load. */
int weft__lot_wake(const void *key, int n);

#endif /* WEFT_SYNC_LOT_H */
