/*
 * weft/sync.h -- locks and other synchronisers that park virtual threads.
 * Included by weft.h; do not include it on its own.
 *
 * Every primitive here parks a waiting vthread (its carrier runs other
 * vthreads meanwhile) and blocks a waiting platform thread; both kinds of
 * thread may share one object (a mutex held by a pthread and wanted by
 * vthreads, and the reverse).  The objects are caller-allocated, need no
 * destruction beyond the optional *_destroy check, and each has a static
 * initialiser.  None may be moved or copied while in use.
 *
 * Blocking calls and cancellation, for every call below that can wait:
 *  - it is a cancellation point: a cancelled caller that has to wait returns
 *    -ECANCELED; one whose deadline (weft_deadline_set, or the call's own
 *    deadline_ns in the *_until forms, whichever is earlier; 0 = none)
 *    passes returns -ETIMEDOUT.
 *  - a call that can complete without waiting completes, even for a
 *    cancelled caller (as weft_join reaps a finished thread): an uncontended
 *    lock stays one atomic instruction.  Cancellation interrupts waiting.
 *  - a call that fails leaves the object valid and took nothing: a lock that
 *    returns -ECANCELED does not hold the lock, and no unlock's hand-off was
 *    lost on it (it went to the next waiter); a semaphore acquire that fails
 *    consumed no permit; a condition signal that picked a waiter just
 *    cancelled wakes another one instead.
 *  - a call that succeeded at the same instant as its cancellation returns
 *    success; the cancellation stays pending for the next call.
 *
 * Fairness:
 *  - weft_mutex is not FIFO: a thread that finds it unlocked takes it even
 *    when others wait ("barging", as Go's sync.Mutex in normal mode), which
 *    keeps a contended lock on one carrier's warm cache.  Starvation guard:
 *    a waiter that has waited 1 ms or more and still lost switches the mutex
 *    to FIFO hand-off (unlock passes ownership straight to the longest
 *    waiter; newcomers queue) until the queue drains or a waiter is served
 *    within 1 ms.  So no waiter waits forever behind bargers.
 *  - weft_cond, weft_sem and weft_rwlock are FIFO: signal wakes the longest
 *    waiter; a semaphore release while threads wait hands its permit to the
 *    longest waiter (an acquire never overtakes a waiter); a read-write lock
 *    serves waiters in arrival order, a writer alone or a run of readers
 *    together, and once anyone waits new readers queue too -- so neither
 *    writers nor readers starve.
 *  - weft_latch and weft_once release all their waiters at once.
 *
 * Errors besides -ECANCELED / -ETIMEDOUT: -EBUSY (trylock failed; destroy of
 * an object in use), -EAGAIN (try_acquire found no permit), -EPERM (unlock
 * of an unlocked mutex or rwlock), -EINVAL, -EOVERFLOW.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_SYNC_H
#define WEFT_SYNC_H

/* Private: a wait queue (src/sync/waitq.h).  Zero is an empty queue. */
struct weft__waiter;
typedef struct weft__waitq {
    unsigned int lock;                   /* spinlock: held for a few instructions, never across a park */
    struct weft__waiter *head, *tail;    /* FIFO of waiters, each on its thread's stack */
} weft__waitq;
#define WEFT__WAITQ_INIT {0u, 0, 0}

/* ------------------------------------------------------------------------ */
/* Mutex                                                                     */
/* ------------------------------------------------------------------------ */

/* A mutual-exclusion lock; not recursive; any thread may unlock it (no owner
 * is recorded).  All fields are private. */
typedef struct weft_mutex {
    unsigned int state;
    weft__waitq q;
} weft_mutex;
#define WEFT_MUTEX_INIT {0u, WEFT__WAITQ_INIT}

/* Initialises m unlocked (the same as WEFT_MUTEX_INIT).  Returns 0. */
WEFT_API int weft_mutex_init(weft_mutex *m);
/*
 * Locks m, waiting as long as it takes: a vthread spins very briefly (the
 * holder may be about to release it on another carrier) and then parks.
 * Returns 0, or -ECANCELED / -ETIMEDOUT without the lock.
 * weft_mutex_lock_until also gives up at deadline_ns (0 = none).
 */
WEFT_API int weft_mutex_lock(weft_mutex *m);
WEFT_API int weft_mutex_lock_until(weft_mutex *m, int64_t deadline_ns);
/* Locks m if that needs no wait: 0, or -EBUSY.  Not a cancellation point. */
WEFT_API int weft_mutex_try_lock(weft_mutex *m);
/* Unlocks m.  Returns 0, or -EPERM if m was not locked.  Never blocks. */
WEFT_API int weft_mutex_unlock(weft_mutex *m);
/* Returns 0, or -EBUSY (and does nothing) if m is locked or has waiters.
 * (DESIGN.md lists it as void; the int result is source-compatible.) */
WEFT_API int weft_mutex_destroy(weft_mutex *m);

/* ------------------------------------------------------------------------ */
/* Condition variable                                                        */
/* ------------------------------------------------------------------------ */

typedef struct weft_cond {
    weft__waitq q;
} weft_cond;
#define WEFT_COND_INIT {WEFT__WAITQ_INIT}

WEFT_API int weft_cond_init(weft_cond *c);
/*
 * Atomically unlocks m (which the caller holds) and waits for a signal or
 * broadcast on c, then locks m again.  Returns 0 when signalled,
 * -ECANCELED / -ETIMEDOUT when cancelled or past the deadline (deadline_ns
 * for weft_cond_wait_until, 0 = none; the caller's own deadline applies to
 * both), or -EPERM (m was not locked: nothing done).
 *
 * Whatever it returns, the caller holds m again, as with pthread_cond_wait:
 * the re-lock after the wait is not a cancellation point and ignores
 * deadlines -- it waits for m as long as m's holder keeps it.  A cancelled
 * caller calling weft_cond_wait again gets -ECANCELED at once (m still
 * held).  The wait may also end with 0 and no signal, so wait in a loop
 * that re-checks the predicate.  A signal meant for a waiter that was being
 * cancelled at that moment wakes another waiter instead: none is lost.
 */
WEFT_API int weft_cond_wait(weft_cond *c, weft_mutex *m);
WEFT_API int weft_cond_wait_until(weft_cond *c, weft_mutex *m, int64_t deadline_ns);
/* Wakes the longest-waiting waiter (signal) or all waiters (broadcast).
 * Either may be called with or without m held.  Return 0. */
WEFT_API int weft_cond_signal(weft_cond *c);
WEFT_API int weft_cond_broadcast(weft_cond *c);
/* Returns 0, or -EBUSY if threads wait on c. */
WEFT_API int weft_cond_destroy(weft_cond *c);

/* ------------------------------------------------------------------------ */
/* Counting semaphore                                                        */
/* ------------------------------------------------------------------------ */

typedef struct weft_sem {
    unsigned int state; /* permits << 1 | waiters */
    weft__waitq q;
} weft_sem;
#define WEFT_SEM_MAX 0x7fffffffu
#define WEFT_SEM_INIT(value) {(unsigned int)(value) << 1, WEFT__WAITQ_INIT}

/* Initialises s with `value` permits: 0, or -EINVAL above WEFT_SEM_MAX. */
WEFT_API int weft_sem_init(weft_sem *s, unsigned value);
/* Takes one permit, waiting for a release when there is none (FIFO).
 * Returns 0, or -ECANCELED / -ETIMEDOUT having taken nothing. */
WEFT_API int weft_sem_acquire(weft_sem *s);
WEFT_API int weft_sem_acquire_until(weft_sem *s, int64_t deadline_ns);
/* Takes a permit if one is free and nobody waits: 0, or -EAGAIN. */
WEFT_API int weft_sem_try_acquire(weft_sem *s);
/* Returns one permit, to the longest waiter if any.  0, or -EOVERFLOW when
 * the count would pass WEFT_SEM_MAX.  Never blocks. */
WEFT_API int weft_sem_release(weft_sem *s);
/* The permits free now (racy unless quiescent). */
WEFT_API unsigned weft_sem_value(const weft_sem *s);
/* Returns 0, or -EBUSY if threads wait on s. */
WEFT_API int weft_sem_destroy(weft_sem *s);

/* ------------------------------------------------------------------------ */
/* Read-write lock                                                           */
/* ------------------------------------------------------------------------ */

/* Many readers or one writer; FIFO between waiters (see Fairness above).
 * Not recursive: a reader that read-locks again while a writer waits
 * deadlocks, as with any writer-fair lock. */
typedef struct weft_rwlock {
    unsigned int state; /* readers << 2 | waiters << 1 | writer */
    weft__waitq q;
} weft_rwlock;
#define WEFT_RWLOCK_INIT {0u, WEFT__WAITQ_INIT}

WEFT_API int weft_rwlock_init(weft_rwlock *l);
/* Lock for reading / writing: 0, or -ECANCELED / -ETIMEDOUT without it;
 * -EOVERFLOW past 2^30 readers. */
WEFT_API int weft_rwlock_rdlock(weft_rwlock *l);
WEFT_API int weft_rwlock_wrlock(weft_rwlock *l);
WEFT_API int weft_rwlock_rdlock_until(weft_rwlock *l, int64_t deadline_ns);
WEFT_API int weft_rwlock_wrlock_until(weft_rwlock *l, int64_t deadline_ns);
/* Without waiting: 0, or -EBUSY. */
WEFT_API int weft_rwlock_try_rdlock(weft_rwlock *l);
WEFT_API int weft_rwlock_try_wrlock(weft_rwlock *l);
/* Releases the caller's read or write hold (the lock knows which kind is
 * held).  0, or -EPERM if it is not locked. */
WEFT_API int weft_rwlock_unlock(weft_rwlock *l);
/* Returns 0, or -EBUSY if l is held or has waiters. */
WEFT_API int weft_rwlock_destroy(weft_rwlock *l);

/* ------------------------------------------------------------------------ */
/* Latch (count-down latch / wait group)                                     */
/* ------------------------------------------------------------------------ */

typedef struct weft_latch {
    unsigned int count;
    weft__waitq q;
} weft_latch;
#define WEFT_LATCH_INIT(count) {(unsigned int)(count), WEFT__WAITQ_INIT}

/* Initialises l closed with `count` (0: open).  Returns 0. */
WEFT_API int weft_latch_init(weft_latch *l, unsigned count);
/* Decrements the count; at zero every waiter is released.  Returns 0, or
 * -EINVAL (and changes nothing) when the count is already zero. */
WEFT_API int weft_latch_count_down(weft_latch *l);
/* Adds n to the count (a wait group's Add; on an open latch it closes it
 * again -- do that only once the previous awaiters have returned).
 * Returns 0, or -EOVERFLOW. */
WEFT_API int weft_latch_add(weft_latch *l, unsigned n);
/* Waits until the count is zero: 0, or -ECANCELED / -ETIMEDOUT. */
WEFT_API int weft_latch_await(weft_latch *l);
WEFT_API int weft_latch_await_until(weft_latch *l, int64_t deadline_ns);
/* The count now (racy unless quiescent). */
WEFT_API unsigned weft_latch_count(const weft_latch *l);
/* Returns 0, or -EBUSY if threads wait on l. */
WEFT_API int weft_latch_destroy(weft_latch *l);

/* ------------------------------------------------------------------------ */
/* Once                                                                      */
/* ------------------------------------------------------------------------ */

typedef struct weft_once_t {
    unsigned int state; /* 0 new, 1 running, 2 done */
    weft__waitq q;
} weft_once_t;
#define WEFT_ONCE_INIT {0u, WEFT__WAITQ_INIT}

/*
 * Runs fn exactly once per o, whoever calls and however many at once.  The
 * first caller runs it (even if cancelled: fn is not interrupted); the
 * others wait until it has returned, so that everyone returns 0 after fn's
 * effects.  A waiting caller that is cancelled or times out returns
 * -ECANCELED / -ETIMEDOUT with fn possibly still running.  fn must not call
 * weft_once on the same o (it would wait for itself).
 */
WEFT_API int weft_once(weft_once_t *o, void (*fn)(void));

/* ------------------------------------------------------------------------ */
/* Call-site capture (see weft.h): the blocking calls record where they were */
/* called from, for weft_dump; the real functions stay callable as           */
/* (weft_mutex_lock)(m).                                                     */
/* ------------------------------------------------------------------------ */

WEFT_API int weft__mutex_lock_at(weft_mutex *m, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__cond_wait_at(weft_cond *c, weft_mutex *m, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__sem_acquire_at(weft_sem *s, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__rwlock_rdlock_at(weft_rwlock *l, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__rwlock_wrlock_at(weft_rwlock *l, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__latch_await_at(weft_latch *l, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__once_at(weft_once_t *o, void (*fn)(void), const char *file, int line);

#define weft_mutex_lock(m) weft__mutex_lock_at((m), 0, __FILE__, __LINE__)
#define weft_mutex_lock_until(m, d) weft__mutex_lock_at((m), (d), __FILE__, __LINE__)
#define weft_cond_wait(c, m) weft__cond_wait_at((c), (m), 0, __FILE__, __LINE__)
#define weft_cond_wait_until(c, m, d) weft__cond_wait_at((c), (m), (d), __FILE__, __LINE__)
#define weft_sem_acquire(s) weft__sem_acquire_at((s), 0, __FILE__, __LINE__)
#define weft_sem_acquire_until(s, d) weft__sem_acquire_at((s), (d), __FILE__, __LINE__)
#define weft_rwlock_rdlock(l) weft__rwlock_rdlock_at((l), 0, __FILE__, __LINE__)
#define weft_rwlock_wrlock(l) weft__rwlock_wrlock_at((l), 0, __FILE__, __LINE__)
#define weft_rwlock_rdlock_until(l, d) weft__rwlock_rdlock_at((l), (d), __FILE__, __LINE__)
#define weft_rwlock_wrlock_until(l, d) weft__rwlock_wrlock_at((l), (d), __FILE__, __LINE__)
#define weft_latch_await(l) weft__latch_await_at((l), 0, __FILE__, __LINE__)
#define weft_latch_await_until(l, d) weft__latch_await_at((l), (d), __FILE__, __LINE__)
#define weft_once(o, fn) weft__once_at((o), (fn), __FILE__, __LINE__)

#endif /* WEFT_SYNC_H */
