/*
 * weft/parallel.h -- parallel work on the carriers (Java's parallel streams
 * and fork/join; OpenMP's `parallel for`).  Included by weft.h; the
 * conventions stated there apply.
 *
 * Virtual threads are for waiting; these calls are for computing.  A range
 * of indices [begin, end) is split over one worker per carrier: each worker
 * takes chunks from the front of its own piece, and a worker whose piece is
 * done steals half of the largest piece left, at its back.  So skewed work
 * balances itself, and uniform work costs one short lock per chunk.
 *
 * Who computes.  Called from a vthread, the caller is one of the workers:
 * it computes too, on its own carrier, and the others are vthreads spawned
 * for the call (one per other carrier, stolen by idle carriers at once).
 * Called from a platform thread, every worker is such a vthread and the
 * caller blocks until they are done (computing on the platform thread too
 * would put one thread more than there are CPUs on the carriers' CPUs).
 * Workers tell the runtime they compute on purpose: while they compute,
 * the monitor reports no "hog" for them and starts no spare carrier for
 * them (weft.h, "The monitor"); a body blocked in a system call weft does
 * not own is still reported pinned.  They call weft_yield after about
 * every millisecond of work, so other vthreads on the same carriers still
 * run, a little later.
 *
 * Scoped values and locals (weft/local.h).  Every body sees the caller's
 * scoped-value bindings (weft_scoped_get), whichever worker runs it: the
 * workers are joined before the call returns, so they cannot outlive the
 * bindings.  (Java's parallel streams carry no ScopedValues to their pool
 * threads: there only the bodies the caller itself runs see them.)
 * Vthread-locals are per worker: weft_local_get in a body reads the storage
 * of the worker running it, so keep per-call state in ctx (or in a
 * reduction's accumulator), not in locals.
 *
 * Nesting.  A body may call weft_parallel_for/_reduce itself: the inner call
 * spreads over the same carriers (its workers are vthreads, not threads),
 * its caller helps with it, and nothing waits for a carrier that cannot come.
 *
 * Chunks.  grain > 0: chunks of grain indices (fewer at the end of a
 * piece), and a piece shorter than 2 x grain is not split.  grain 0: the
 * runtime sizes each worker's chunks to about 50 us of work, measured as it
 * goes (from 1 index, doubling), and splits down to single indices.
 *
 * Errors.  A body returns nothing: it reports an error with
 * weft_parallel_fail(-errno) and returns.  The first error reported is what
 * the call returns; every worker stops at its next chunk boundary (the
 * failing worker at once: no more indices of its chunk run), so only the
 * chunks already in flight complete.  Cancellation of the caller
 * (weft_cancel, or its scope's) and the caller's deadline (weft_deadline_set,
 * scope deadlines) stop the call the same way, with -ECANCELED /
 * -ETIMEDOUT; the workers are then cancelled too, so a body blocked in a
 * weft call returns.  A call whose caller is already cancelled runs no body.
 * Either way the call returns only after every body it started has
 * returned: nothing runs on behalf of a call after it returned.
 *
 * What runs where.  Bodies run on vthreads of the runtime's carriers, any
 * number at once: they must be safe to run concurrently for distinct
 * indices, and may block (a blocking weft call parks the worker, and its
 * piece waits or is stolen).  Which worker runs which index, and the order
 * within a worker's piece apart from "increasing", are unspecified.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_PARALLEL_H
#define WEFT_PARALLEL_H


#ifdef __cplusplus
extern "C" {
#endif

/*
 * Runs body(i, ctx) once for every i in [begin, end), over the carriers (see
 * above), and returns when all have run.  Returns 0; -EINVAL when end <
 * begin or body is NULL; -ECANCELED / -ETIMEDOUT when the caller was
 * cancelled / passed its deadline (some indices may not have run); the first
 * error a body reported with weft_parallel_fail; -ENOMEM (nothing ran) when
 * the workers could not be made; -EAGAIN / -ENOMEM from a platform thread
 * when no worker vthread could be spawned.  begin == end runs nothing and
 * returns 0.
 */
WEFT_API int weft_parallel_for(size_t begin, size_t end, size_t grain, void (*body)(size_t i, void *ctx), void *ctx);

/*
 * A reduction over [begin, end): each worker folds the indices it runs into
 * partial accumulators of acc_size bytes, first set by init(partial, ctx)
 * (NULL: all bytes zero; it must give the identity of combine), with
 * body(i, partial, ctx); at the end combine(acc, partial, ctx) folds each
 * partial into *acc, in index order: a partial covers one contiguous run of
 * indices, and runs are combined from the lowest up.  So the result is
 * *acc (its value on entry) combined with body over every index, left to
 * right, for any associative combine -- commutative or not (string
 * concatenation, matrix products).  How the runs are cut differs from call
 * to call, so a combine that is only nearly associative (floating-point
 * addition) may differ in its last bits between calls.  combine runs on the
 * caller, after every body.  No partial is shared: no atomic operation per
 * index.  Returns as weft_parallel_for, and also -EINVAL when acc, combine
 * or acc_size is 0 / NULL, and -ENOMEM when partials could not be allocated.
 * On any error *acc is left unchanged.
 */
WEFT_API int weft_parallel_reduce(size_t begin, size_t end, size_t grain, void *acc, size_t acc_size,
                                  void (*init)(void *acc, void *ctx),
                                  void (*body)(size_t i, void *acc, void *ctx),
                                  void (*combine)(void *into, const void *from, void *ctx), void *ctx);

/*
 * From a body of weft_parallel_for/_reduce: reports error err (a negative
 * errno) for the innermost call the body runs for.  The first error reported
 * wins; the call stops its remaining chunks and returns it.  The body
 * should return soon after (its worker runs no further index).  Returns 0;
 * -EINVAL when err >= 0, or when the caller is not running a body.
 */
WEFT_API int weft_parallel_fail(int err);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_PARALLEL_H */
