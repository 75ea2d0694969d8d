/*
 * Parallel loops over the carriers: weft_parallel_for and _reduce
 * (weft/parallel.h).
 *
 * What it is.  A fork-join loop in the manner of Cilk/TBB's parallel_for
 * with lazy splitting, built from what the scheduler already has -- vthreads
 * and carriers -- and no task objects: one worker per carrier, each worker a
 * vthread (the calling vthread is worker 0), each owning one piece of the
 * range.
 *
 * Data.  A job (on the caller's stack) holds the body, the first error and
 * an array of workers (one allocation per call, cache-line aligned).  A
 * worker holds its piece [lo, hi) under a small spin lock of its own, a
 * `started` bit, and a relaxed copy of hi - lo (`left`) that thieves scan
 * without the lock.  Per chunk nothing is allocated and no atomic operation
 * is paid beyond the owner's lock; per index, beside the body call, one
 * load of the worker's own `interrupt` word (a line only a thief writes,
 * rarely).
 *
 *  - The owner takes a chunk from the FRONT of its piece (lo += c, under
 *    its lock) and runs it without the lock.
 *  - A worker whose piece is empty scans every worker's `left`, picks the
 *    largest stealable piece, locks it, and takes its BACK half (hi = mid)
 *    -- or all of it, when its owner has not started yet (a helper vthread
 *    still waiting for a carrier must not hold work back) -- then makes
 *    that its own piece.  A piece shorter than 2 x grain (2 for grain 0) of
 *    a started owner is not split: its owner finishes it.
 *  - When no piece can be split, the hungry worker asks the worker with
 *    the largest chunk in flight (`inflight`, of at least 2 x grain) to
 *    split it: that owner reads its `interrupt` word after every index,
 *    ends the chunk there and puts the rest back at the front of its piece
 *    (lo only ever moves by its owner, so the piece stays contiguous),
 *    where the thief steals half; while anyone is hungry (job->hungry),
 *    owners take at most half of what is left.  This is the lazy half of
 *    lazy binary splitting: a chunk sized on cheap indices that runs into
 *    expensive ones is still shared.  A thief waits at most WAIT_NS for the
 *    answer (a body that blocks inside a chunk of the caller's grain).
 *  - A worker leaves when its piece is empty and nothing can be stolen or
 *    split.  Everything left is then in someone's piece or chunk, and its
 *    owner finishes it: the loop ends when the last worker leaves.
 * Alternatives rejected: a packed (lo, hi) word changed by one CAS needs
 * 128-bit CAS for size_t ranges (not on every target, and slow where it is
 * emulated); a shared atomic counter (OpenMP's dynamic schedule) makes every
 * chunk a contended cache line and gives up locality; a task per split
 * (Cilk) allocates per split.  The lock is held for a few instructions and
 * only the owner and the rare thief take it.
 *
 * Chunk size.  grain > 0: grain indices.  grain 0: each worker measures its
 * chunks (weft_now after each) and doubles the next from 1 while a chunk
 * takes less than CHUNK_NS/2, halves it past 2 x CHUNK_NS -- so a chunk is
 * about 50 us of work whatever an index costs, the clock read is a
 * thousandth of it, a thief finds at most one chunk in flight at its
 * victim, and a stop is seen within about a chunk.  Splitting is lazy in
 * the sense of lazy binary splitting: a range is only halved when a worker
 * is hungry, never ahead of time.
 *
 * Workers.  par_workers() says how many: the carriers of the caller's
 * carrier group (group.c; from a platform thread, the default pool's), and
 * the helpers inherit that group.  Never more than the pieces the range can be
 * cut into (a 3-index range gets at most 3 workers).  From a vthread: W - 1
 * helpers are spawned (unpinned: the spawn pushes them on this carrier's
 * deque and wakes idle carriers, which steal them) and the caller works as
 * worker 0; with one worker it runs alone, inline, spawning nothing.  From a
 * platform thread: W helpers and the caller waits in weft_join (a platform
 * thread computing beside W carriers would oversubscribe the CPUs).
 * Helpers that could not be spawned leave an unstarted piece that the
 * others take whole.  The caller joins every helper before returning: no
 * helper touches the job (on the caller's stack) after the call returned.
 *
 * Computing on purpose.  A worker sets WEFT__F_COMPUTE on its vthread
 * (sched.h): the monitor then opens no hog stall for it and starts no spare
 * carrier for it (a spare would be one more thread on the same CPUs: slower
 * for CPU-bound work), but still moves what the worker's carrier leaves
 * stranded (its slot, FIFO, due timers); a body blocked in a system call
 * weft does not own is still reported pinned and compensated, as any
 * vthread (the monitor tells the two by the carrier's CPU clock: spares.c,
 * monitor_main).  The worker calls weft_yield at a
 * chunk boundary after every YIELD_NS of work, so vthreads queued on its
 * carrier run within about a millisecond; with nothing else to run a yield
 * costs a few nanoseconds.  The caller's flag is restored on return.
 *
 * Scoped values and locals (weft/local.h).  Every body sees the caller's
 * scoped-value bindings, on whichever worker it runs: each helper adopts
 * the caller's innermost frame before its first body, and the caller joins
 * every helper before returning, so the frames (on the caller's stack,
 * inside its weft_scoped_run calls) outlive every read.  Java's parallel
 * streams run bodies on pool threads that do not carry ScopedValues, so a
 * body there sees them only when the calling thread runs it; here the
 * answer does not depend on which worker took an index.  Vthread-locals
 * are per worker (a helper's own, freed as it ends): a body must not keep
 * state in them.
 *
 * Nesting.  A body may call weft_parallel_for again.  The inner call is an
 * ordinary call from a vthread: the body's worker becomes worker 0 of the
 * inner job, W - 1 new helpers are spawned, and the inner call returns once
 * they are joined.  No deadlock: a helper is a runnable vthread, and every
 * carrier runs its queue at least every YIELD_NS (its worker yields) or when
 * its worker parks in a join.  No oversubscription: helpers are vthreads on
 * the same carriers, not threads, and the monitor adds no carrier for them.
 * A helper that starts after the inner range is gone leaves at once.
 * self->par (sched.h) names the innermost worker a vthread runs bodies for,
 * saved and restored around a call, so weft_parallel_fail reaches the right
 * job.
 *
 * Stopping.  job->err holds the first error (CAS from 0): a body's
 * weft_parallel_fail, the caller's cancellation or deadline (checked at
 * every chunk boundary by worker 0 -- the caller; or seen by a platform
 * caller's join), or ENOMEM for a partial.  Every worker looks at it at each
 * chunk boundary; the failing worker also stops within its chunk (it sets
 * its own `interrupt`, read after each body call).
 * After an error the caller cancels the helpers (weft_cancel: a body blocked
 * in a weft call returns) and joins them without being interruptible itself.
 *
 * Reduce: partials and their order.  A worker folds into a partial per
 * SEGMENT: a contiguous run of indices it took, from the front of a piece it
 * started or stole, up to wherever its piece ended (thieves only cut the
 * back of a piece, so a segment stays contiguous).  Each segment records its
 * first index; segments tile the range.  A worker keeps its segments in two
 * arrays of its own (first indices, partials at a stride of acc_size rounded
 * up to 16), grown by doubling -- an allocation per steal at most, never per
 * chunk.  After the join the caller sorts every worker's segments by first
 * index and folds them into *acc in that order: the result is the
 * left-to-right fold, for any associative combine.  On error the partials
 * are dropped and *acc is untouched.
 *
 * Deterministic mode (det.c).  The virtual clock does not move while a
 * body computes, so no chunk could be timed and no yield would fall due:
 * there a chunk is `grain` indices, or DET_CHUNK for grain 0, and the
 * worker yields after every chunk -- a decision point the seed draws at, so
 * cancellation, deadlines and other vthreads are seen chunk by chunk and
 * the same seed gives the same chunks.
 *
 * Who touches what: a worker's lo/hi/started under its lock (owner and
 * thieves); left: written under the lock, read racily by scans; inflight:
 * the owner's, read by thieves; interrupt: set by thieves and the owner's
 * bodies, cleared by the owner; job->hungry by thieves; chunk, failed and
 * the segment arrays by the owner only (the caller reads them
 * after joining, which orders them); job->err by anyone (atomic); the rest
 * of the job is written before the helpers are spawned and only read after.
 */
#include "sched.h"
#include "det.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK_NS 50000    /* grain 0: a chunk aims at this much work */
#define YIELD_NS 1000000  /* a worker yields after this much work */
#define WAIT_NS 1000000   /* a thief waits at most this long for a chunk in flight to be split */
#define CHUNK_MAX ((size_t)1 << 40)
#define DET_CHUNK 256     /* deterministic mode, grain 0: a chunk is this many indices */
#define SEG_FIRST 4       /* a worker's first segment arrays: room for this many */
#define ACC_ALIGN 16      /* partials' stride: acc_size rounded up to this */

typedef struct par_job par_job;

typedef struct par_worker {
    _Alignas(WEFT__CACHELINE) _Atomic int lock;
    _Atomic int started;  /* written under lock: the owner began its piece (read by scans) */
    size_t lo, hi;        /* under lock: the piece left to take */
    _Atomic size_t left;  /* hi - lo, written under lock, read by scans */
    /* the owner's */
    par_job *job;
    int index;
    int failed;           /* a body of this worker called weft_parallel_fail */
    _Atomic int interrupt;   /* end the chunk in flight after the current index (a thief, or failed) */
    _Atomic size_t inflight; /* the size of the chunk in flight, 0 between chunks (read by thieves) */
    size_t chunk;         /* grain 0: the next chunk's size */
    size_t nseg, capseg;  /* reduce: segments */
    size_t *seg_lo;
    unsigned char *seg_acc;
    void *acc;            /* the open segment's partial */
} par_worker;

struct par_job {
    size_t grain;         /* the caller's (0: adaptive) */
    size_t split_min;     /* a started piece is split only from 2 x this */
    int n;                /* workers */
    par_worker *w;
    const weft__sframe *bindings; /* the caller's scoped values: every body sees them */
    void (*body)(size_t, void *);
    void (*rbody)(size_t, void *, void *);
    void (*init)(void *, void *);
    void *ctx;
    size_t acc_size, stride;
    int64_t deadline;     /* the caller's effective deadline, 0: none */
    _Atomic int err;      /* the first error, 0 */
    _Atomic int hungry;   /* workers waiting for a chunk in flight to be split */
};

/* How many workers a call gets: the carriers of the caller's carrier
 * group (a platform thread's: the default pool's configured carriers).
 * run_job's helpers are spawned with no group in their attr, so they
 * inherit the calling vthread's group (weft.h, weft_thread_opts.group) and run
 * where the caller may. */
static int par_workers(void) { return weft__carriers_here(); }

static void set_err(par_job *j, int err) {
    int z = 0;
    atomic_compare_exchange_strong(&j->err, &z, err);
}


static void lock(par_worker *w) {
    for (unsigned spins = 0;;) {
        if (!atomic_exchange_explicit(&w->lock, 1, memory_order_acquire)) return;
        while (atomic_load_explicit(&w->lock, memory_order_relaxed)) {
            /* the holder runs a few instructions, unless the kernel took its CPU away */
            if (++spins % 128 == 0) sched_yield();
            else weft__cpu_relax();
        }
    }
}

static void unlock(par_worker *w) { atomic_store_explicit(&w->lock, 0, memory_order_release); }

/* Reduce: opens a segment starting at index `lo` (the owner, between chunks). */
static int seg_open(par_worker *w, size_t lo) {
    par_job *j = w->job;
    if (!j->rbody) return 0;
    if (w->nseg == w->capseg) {
        size_t cap = w->capseg ? 2 * w->capseg : SEG_FIRST;
        size_t *l = realloc(w->seg_lo, cap * sizeof *l);
        if (!l) return -ENOMEM;
        w->seg_lo = l;
        unsigned char *a = realloc(w->seg_acc, cap * j->stride);
        if (!a) return -ENOMEM;
        w->seg_acc = a;
        w->capseg = cap;
    }
    w->seg_lo[w->nseg] = lo;
    w->acc = w->seg_acc + w->nseg * j->stride;
    w->nseg++;
    if (j->init) j->init(w->acc, j->ctx);
    else memset(w->acc, 0, j->acc_size);
    return 0;
}

/* Takes the next chunk of w's own piece into [*a, *b); 0 when it is empty. */
static int take(par_worker *w, size_t want, size_t *a, size_t *b) {
    lock(w);
    size_t rem = w->hi - w->lo;
    if (!rem) {
        unlock(w);
        return 0;
    }
    size_t c = want < rem ? want : rem;
    /* someone waits for work: leave it the back half */
    if (atomic_load_explicit(&w->job->hungry, memory_order_relaxed) && rem / 2 >= w->job->split_min && c > rem / 2)
        c = rem / 2;
    atomic_store_explicit(&w->inflight, c, memory_order_relaxed);
    atomic_store_explicit(&w->interrupt, 0, memory_order_relaxed);
    *a = w->lo;
    *b = w->lo + c;
    w->lo += c;
    atomic_store_explicit(&w->left, rem - c, memory_order_relaxed);
    unlock(w);
    return 1;
}

/* Nothing to steal: asks the worker with the largest chunk in flight (if
 * it can be split) to end it after its current index and put the rest
 * back in its piece, and waits until it did, or its chunk ended.  0 when no
 * chunk in flight can be split (the caller leaves), 1 to look again. */
static int split_inflight(par_worker *w) {
    par_job *j = w->job;
    par_worker *busy = NULL;
    size_t most = 0;
    for (int k = 0; k < j->n; k++) {
        par_worker *v = &j->w[k];
        size_t c = atomic_load_explicit(&v->inflight, memory_order_relaxed);
        if (v != w && c / 2 >= j->split_min && c > most) most = c, busy = v;
    }
    if (!busy) return 0;
    atomic_fetch_add(&j->hungry, 1);
    atomic_store_explicit(&busy->interrupt, 1, memory_order_relaxed);
    /* it answers within one index (a chunk of several indices is short);
     * one that does not within WAIT_NS (a body that blocks, in a chunk of
     * the caller's grain) is left to finish alone */
    int again = 1;
    int64_t t0 = 0;
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(&j->err, memory_order_relaxed)) break;
        if (atomic_load_explicit(&busy->left, memory_order_relaxed) / 2 >= j->split_min) break;
        if (atomic_load_explicit(&busy->inflight, memory_order_relaxed) / 2 < j->split_min) break;
        if (spins < 256) {
            weft__cpu_relax();
            continue;
        }
        int64_t now = weft_now();
        if (!t0) t0 = now;
        else if (now - t0 > WAIT_NS) {
            again = 0;
            break;
        }
        weft_yield(); /* whatever else waits on this carrier */
        if (spins % 64 == 0) sched_yield();
    }
    atomic_fetch_sub(&j->hungry, 1);
    return again;
}

/* w's piece is empty: takes part of another's into w's piece.  1 when it
 * got some (the new piece starts at *start), 0 when nothing is left to
 * steal anywhere. */
static int steal(par_worker *w, size_t *start) {
    par_job *j = w->job;
    for (;;) {
        /* the largest piece that can be stolen: any of an owner that has
         * not started, else one of at least 2 x split_min (a racy look,
         * checked again under the victim's lock) */
        par_worker *best = NULL;
        size_t most = 0;
        for (int k = 1; k < j->n; k++) {
            par_worker *v = &j->w[(w->index + k) % j->n];
            size_t l = atomic_load_explicit(&v->left, memory_order_relaxed);
            if (l / 2 >= j->split_min || (l && !atomic_load_explicit(&v->started, memory_order_relaxed))) {
                if (l > most) most = l, best = v;
            }
        }
        if (!best) {
            if (!split_inflight(w)) return 0;
            continue;
        }
        lock(best);
        size_t rem = best->hi - best->lo, a, b;
        if (rem && !atomic_load_explicit(&best->started, memory_order_relaxed)) {
            a = best->lo; /* all of it: its owner has not come (and may never: a failed spawn) */
            b = best->hi;
            best->hi = best->lo;
        } else if (rem / 2 >= j->split_min) {
            a = best->lo + rem / 2;
            b = best->hi;
            best->hi = a;
        } else {
            unlock(best); /* it changed since the look: look again */
            continue;
        }
        atomic_store_explicit(&best->left, best->hi - best->lo, memory_order_relaxed);
        unlock(best);
        lock(w);
        w->lo = a;
        w->hi = b;
        atomic_store_explicit(&w->left, b - a, memory_order_relaxed);
        unlock(w);
        *start = a;
        return 1;
    }
}

/* Runs indices [a, b) of w's job until interrupted (a body failed, or a
 * thief asked for a split); returns the first index not run. */
static size_t run_chunk(par_worker *w, size_t a, size_t b) {
    par_job *j = w->job;
    size_t i = a;
    if (j->rbody) {
        void (*f)(size_t, void *, void *) = j->rbody;
        void *acc = w->acc, *ctx = j->ctx;
        while (i < b) {
            f(i++, acc, ctx);
            if (atomic_load_explicit(&w->interrupt, memory_order_relaxed)) break;
        }
    } else {
        void (*f)(size_t, void *) = j->body;
        void *ctx = j->ctx;
        while (i < b) {
            f(i++, ctx);
            if (atomic_load_explicit(&w->interrupt, memory_order_relaxed)) break;
        }
    }
    return i;
}

/* The rest [next, ...) of an interrupted chunk goes back to the front of
 * w's piece: only the owner moves lo, so the piece is [b, hi) with hi >= b
 * (thieves leave at least half), and [next, hi) is contiguous with what w
 * ran -- its reduce segment goes on. */
static void give_back(par_worker *w, size_t next) {
    lock(w);
    w->lo = next;
    atomic_store_explicit(&w->left, w->hi - next, memory_order_relaxed);
    unlock(w);
}

/* A worker's whole life in a job, on a vthread. */
static void work(par_worker *w, int caller) {
    par_job *j = w->job;
    weft_thread *self = weft__self();
    void *prev_par = self->par;
    uint32_t prev_compute = self->flags & WEFT__F_COMPUTE;
    self->par = w;
    self->flags |= WEFT__F_COMPUTE;

    size_t start;
    lock(w);
    atomic_store_explicit(&w->started, 1, memory_order_relaxed);
    int have = w->lo < w->hi;
    start = w->lo;
    unlock(w);
    int64_t t0 = weft_now(), last_yield = t0;
    if (have && seg_open(w, start) < 0) {
        set_err(j, -ENOMEM);
        have = 0;
    }
    for (;;) {
        if (atomic_load_explicit(&j->err, memory_order_relaxed)) break;
        int det = atomic_load_explicit(&weft__det_on, memory_order_relaxed);
        size_t want = j->grain ? j->grain : det ? DET_CHUNK : w->chunk, a, b;
        if (!take(w, want, &a, &b)) {
            if (!steal(w, &start)) break;
            if (seg_open(w, start) < 0) {
                set_err(j, -ENOMEM);
                break;
            }
            t0 = weft_now(); /* (a steal's wait is not the next chunk's work) */
            continue;
        }
        size_t next = run_chunk(w, a, b);
        atomic_store_explicit(&w->inflight, 0, memory_order_relaxed);
        if (w->failed) break;
        if (next < b) give_back(w, next);
        int64_t t1 = weft_now();
        if (!j->grain && !det) {
            int64_t dt = t1 - t0;
            if (dt < CHUNK_NS / 2 && next - a == w->chunk && w->chunk < CHUNK_MAX) w->chunk *= 2;
            else if (dt > 2 * CHUNK_NS && w->chunk > 1) w->chunk /= 2;
        }
        if (caller) {
            if (weft_cancelled()) set_err(j, -ECANCELED);
            else if (j->deadline && t1 >= j->deadline) set_err(j, -ETIMEDOUT);
        } else if (weft_cancelled()) {
            break; /* (only this call cancels its helpers, after an error) */
        }
        if (det || t1 - last_yield >= YIELD_NS) {
            weft_yield();
            t1 = weft_now();
            last_yield = t1;
        }
        t0 = t1;
    }
    self->par = prev_par;
    weft__compute_end(self, prev_compute);
}

static void *helper_main(void *arg) {
    weft__scoped_adopt(((par_worker *)arg)->job->bindings); /* (the caller joins us before its frames go) */
    work(arg, 0);
    return NULL;
}

/* Waits for the helpers; after an error or a cancel of the caller, cancels
 * them and waits on, uninterruptibly. */
static void join_all(par_job *j, weft_thread **h, int nh) {
    int stopping = 0;
    for (int k = 0; k < nh; k++) {
        if (!h[k]) continue;
        if (!stopping && atomic_load(&j->err)) {
            stopping = 1;
            for (int i = k; i < nh; i++)
                if (h[i]) weft_cancel(h[i]);
        }
        int r = stopping ? weft__join_nocancel(h[k], NULL) : weft_join(h[k], NULL);
        if (r < 0) { /* the caller was cancelled, or its deadline passed */
            set_err(j, r);
            k--; /* still joinable: again, stopping */
        }
    }
}

/* The fold of every segment into acc, in index order (after the join). */
static int reduce_fold(par_job *j, void *acc, void (*combine)(void *, const void *, void *)) {
    size_t total = 0;
    for (int k = 0; k < j->n; k++) total += j->w[k].nseg;
    typedef struct { size_t lo; const void *acc; } seg;
    seg *s = malloc((total ? total : 1) * sizeof *s);
    if (!s) return -ENOMEM;
    size_t m = 0;
    for (int k = 0; k < j->n; k++)
        for (size_t i = 0; i < j->w[k].nseg; i++)
            s[m++] = (seg){j->w[k].seg_lo[i], j->w[k].seg_acc + i * j->stride};
    /* insertion sort: segments come per worker in increasing order, and
     * there are a few per worker */
    for (size_t i = 1; i < m; i++) {
        seg x = s[i];
        size_t p = i;
        while (p > 0 && s[p - 1].lo > x.lo) s[p] = s[p - 1], p--;
        s[p] = x;
    }
    for (size_t i = 0; i < m; i++) combine(acc, s[i].acc, j->ctx);
    free(s);
    return 0;
}

static int run_job(par_job *j, size_t begin, size_t end, void *acc,
                   void (*combine)(void *, const void *, void *)) {
    if (end < begin) return -EINVAL;
    int r = weft__ensure_init();
    if (r < 0) return r;
    weft_thread *self = weft__self();
    if (weft_cancelled()) return -ECANCELED;
    if (begin == end) return 0;

    size_t n = end - begin;
    j->split_min = j->grain ? j->grain : 1;
    size_t pieces = n / j->split_min + (n % j->split_min != 0);
    int nw = par_workers();
    if (nw < 1) nw = 1;
    if ((size_t)nw > pieces) nw = (int)pieces;
    j->n = nw;
    j->deadline = weft__effective_deadline(0);
    if (j->deadline == INT64_MAX) j->deadline = 0;
    atomic_init(&j->err, 0);
    atomic_init(&j->hungry, 0);
    j->bindings = weft__scoped_current();
    j->w = aligned_alloc(WEFT__CACHELINE, sizeof(par_worker) * (size_t)nw);
    weft_thread **h = calloc((size_t)nw, sizeof *h);
    if (!j->w || !h) {
        free(j->w);
        free(h);
        return -ENOMEM;
    }
    for (int k = 0; k < nw; k++) {
        par_worker *w = &j->w[k];
        memset(w, 0, sizeof *w);
        atomic_init(&w->lock, 0);
        atomic_init(&w->started, 0);
        atomic_init(&w->interrupt, 0);
        atomic_init(&w->inflight, 0);
        /* equal pieces, the remainder spread over the first ones */
        w->lo = begin + (size_t)k * (n / (size_t)nw) + ((size_t)k < n % (size_t)nw ? (size_t)k : n % (size_t)nw);
        w->hi = w->lo + n / (size_t)nw + ((size_t)k < n % (size_t)nw);
        atomic_init(&w->left, w->hi - w->lo);
        w->job = j;
        w->index = k;
        w->chunk = 1;
    }
    weft_thread_opts attr = {.name = "weft-parallel"};
    int first = self ? 1 : 0, spawned = 0;
    for (int k = first; k < nw; k++) {
        r = weft_spawn(&h[k], helper_main, &j->w[k], &attr);
        if (r < 0) h[k] = NULL; /* its piece, unstarted, is taken whole by others */
        else spawned++;
    }
    if (self) work(&j->w[0], 1);
    else if (!spawned) set_err(j, r);
    join_all(j, h, nw);

    int err = atomic_load(&j->err);
    if (!err && combine) err = reduce_fold(j, acc, combine);
    for (int k = 0; k < nw; k++) {
        free(j->w[k].seg_lo);
        free(j->w[k].seg_acc);
    }
    free(j->w);
    free(h);
    return err;
}

int weft_parallel_for(size_t begin, size_t end, size_t grain, void (*body)(size_t i, void *ctx), void *ctx) {
    if (!body) return -EINVAL;
    par_job j = {.grain = grain, .body = body, .ctx = ctx};
    return run_job(&j, begin, end, NULL, NULL);
}

int weft_parallel_reduce(size_t begin, size_t end, size_t grain, void *acc, size_t acc_size,
                         void (*init)(void *acc, void *ctx), void (*body)(size_t i, void *acc, void *ctx),
                         void (*combine)(void *into, const void *from, void *ctx), void *ctx) {
    if (!body || !combine || !acc || !acc_size || acc_size > ((size_t)1 << 30)) return -EINVAL;
    par_job j = {.grain = grain,
                 .rbody = body,
                 .init = init,
                 .ctx = ctx,
                 .acc_size = acc_size,
                 .stride = (acc_size + ACC_ALIGN - 1) & ~(size_t)(ACC_ALIGN - 1)};
    return run_job(&j, begin, end, acc, combine);
}

int weft_parallel_fail(int err) {
    weft_thread *self = weft__self();
    if (err >= 0 || !self || !self->par) return -EINVAL;
    par_worker *w = self->par;
    w->failed = 1;
    atomic_store_explicit(&w->interrupt, 1, memory_order_relaxed);
    set_err(w->job, err);
    return 0;
}
