/*
 * weft/future.h -- futures (java.util.concurrent.CompletableFuture).
 * Included by weft.h; the conventions stated there apply.
 *
 * A future is a slot for one result that is filled exactly once: with a
 * value (weft_future_complete) or an error (weft_future_fail).  Any number
 * of threads -- vthreads and platform threads alike -- may wait for it
 * (weft_future_get) and any thread may fill it; the first fill wins and
 * every waiter wakes.  Dependent futures (weft_future_then, _all, _any)
 * are filled by callbacks that run when their inputs are.
 *
 * Ownership: futures are reference counted.
 *  - weft_future_create stores, and _then, _all and _any return, a future
 *    holding one reference, the caller's.  weft_future_ref adds one; weft_future_unref
 *    drops one, and the last drop frees the future.
 *  - Every call on a future needs it valid for the call's whole duration:
 *    hold a reference, or know that someone else does.  One exception makes
 *    the common hand-off easy: weft_future_complete / _fail touch the future
 *    for the last time in the very instant that makes it done.  So an owner
 *    that has seen the result (weft_future_get returned, or
 *    weft_future_done said 1) may free the future at once, even while the
 *    thread that completed it is still inside weft_future_complete.
 *  - A dependent keeps itself alive until its inputs have fed it: freeing
 *    the future returned by _then/_all/_any early is fine.  Dependents hold
 *    no reference on their inputs.
 *  - Dropping the last reference to a future that is still pending cancels
 *    it: its dependents see a failure with ECANCELED (a "broken promise":
 *    nobody can fill it any more).  So a program that abandons futures,
 *    even whole graphs of them, leaks nothing.  Freeing a future while a
 *    getter waits on it is a bug (that getter holds no reference) and stops
 *    the program with a message.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_FUTURE_H
#define WEFT_FUTURE_H


#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Futures                                                                   */
/* ------------------------------------------------------------------------ */


/* Makes a pending future holding one reference (the caller's) and stores
 * it in *f.  Returns 0, or (*f then NULL where f is not) -EINVAL (f NULL)
 * or -ENOMEM.  Needs no running runtime. */
WEFT_API int weft_future_create(weft_future **f);

/*
 * Fills f with the value v (which weft does not interpret or own) and wakes
 * every getter; then runs f's dependents' callbacks on the calling thread
 * (see weft_future_then).  Returns 0, or -EALREADY when f was already filled
 * (the first fill wins; v is then ignored), -EINVAL when f is NULL.  Works
 * from vthreads and platform threads; never blocks (apart from what the
 * dependents' callbacks do).
 */
WEFT_API int weft_future_complete(weft_future *f, void *v);

/*
 * Fills f with the error err, an errno value: getters then receive -err.
 * err may also be given negative, as weft calls return it (-EIO is taken as
 * EIO), so a result can be passed straight through; 0 is -EINVAL.  Returns
 * as weft_future_complete.
 */
WEFT_API int weft_future_fail(weft_future *f, int err);

/* weft_future_fail(f, ECANCELED).  Nothing else is interrupted: a thread
 * computing f's value goes on, and its later complete gets -EALREADY. */
WEFT_API int weft_future_cancel(weft_future *f);

/* 1 when f has been filled (completed or failed), else 0.  A load. */
WEFT_API int weft_future_done(const weft_future *f);

/*
 * Waits until f is filled, then returns 0 and stores the value in *v (if v
 * is not NULL), or returns the failure as -err (*v untouched).  Gives up
 * with -ETIMEDOUT at deadline_ns (absolute, weft_now(); 0 = none; the
 * caller's effective deadline applies too) and with -ECANCELED when the
 * calling vthread is cancelled; f stays valid and pending then, and a later
 * fill still wakes every other getter.  A future already filled returns its
 * result at once (a load), even to a cancelled caller or after the
 * deadline.  A fill that comes in the same instant as the deadline or the
 * cancellation may lose to it: the getter then returns -ETIMEDOUT /
 * -ECANCELED, and its next get returns the result.  Parks a vthread, blocks
 * a platform thread; any number of getters at once.
 */
WEFT_API int weft_future_get(weft_future *f, void **v, int64_t deadline_ns);

/*
 * A new future g completed with fn(v, ctx) once f completes with v (Java's
 * thenApply).  When f fails, g fails with the same error and fn is not
 * called -- so do not make fn the only owner of ctx.  fn NULL: g takes f's
 * value as it is.  If g has already been filled by other means
 * (weft_future_cancel(g)) when f completes, fn is skipped.
 *
 * Where fn runs: on the thread that fills f, inside its
 * weft_future_complete, after every getter of f has been woken; or, when f
 * is already filled, on the caller, before weft_future_then returns.  fn
 * runs exactly once (or not at all, as above); it may call any weft
 * function, but while it blocks so does whoever filled f, so keep it short
 * or hand the work to a vthread.  Chains of any length complete without
 * deep recursion.
 *
 * Returns g (one reference, the caller's) or NULL when out of memory or f
 * is NULL.
 */
WEFT_API weft_future *weft_future_then(weft_future *f, void *(*fn)(void *v, void *ctx), void *ctx);

/*
 * A future that completes when all of fs[0..n-1] have completed, with the
 * value NULL (read each input's value with weft_future_get, which returns
 * at once), or fails as soon as one input fails, with that failure (the
 * first to happen).  n == 0: a future already completed with NULL (as
 * Java's allOf()).  The same future may appear twice.  fs is not kept.
 * Returns NULL when out of memory or fs or one of its entries is NULL.
 */
WEFT_API weft_future *weft_future_all(weft_future **fs, size_t n);

/*
 * A future filled like the first of fs[0..n-1] to be filled, whether that is
 * a success or a failure (Java's anyOf): its value, or its error.  Inputs
 * already filled count in array order.  n == 0: a future already failed
 * with EINVAL (Java's anyOf() would never complete).  Returns NULL when out
 * of memory or fs or one of its entries is NULL.
 */
WEFT_API weft_future *weft_future_any(weft_future **fs, size_t n);

/* Adds a reference to f; returns f. */
WEFT_API weft_future *weft_future_ref(weft_future *f);

/* Drops a reference to f (NULL is ignored).  The last one frees f; if f is
 * still pending then, its dependents fail with ECANCELED first (their
 * callbacks run here).  Dropping more references than were held is a use
 * after free, which the runtime stops, where it can tell, with "weft:
 * weft_future_unref(...): no reference left" and the caller's address,
 * then abort (docs/errors.md, "Misuse"). */
WEFT_API void weft_future_unref(weft_future *f);


/* call-site capture (weft.h, "Conventions") */
WEFT_API int weft__future_get_at(weft_future *f, void **v, int64_t deadline_ns, const char *file, int line);
#define weft_future_get(f, v, d) weft__future_get_at((f), (v), (d), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif /* WEFT_FUTURE_H */
