/*
 * Futures: a slot filled once, waited for by any number of threads from
 * either world, with dependents (then / all / any) fed by callbacks.
 *
 * State.  One 32-bit word holds the state and a lock bit:
 *     PENDING  --complete-->  OK
 *              --fail/cancel/last unref-->  FAILED
 * and nothing ever leaves OK or FAILED.  The value and error are written
 * under the lock before the store that publishes OK/FAILED (release), so a
 * reader that loads the state (acquire) and sees it filled reads them with
 * no lock: weft_future_get on a filled future is that load.  The lock is a
 * bit in the same word (as weft_join's join_state): filling a future is one
 * CAS to take it and one plain store that releases it and publishes the
 * outcome together.  It guards the waiter list and the callback list, and
 * is never held across anything that can block or call user code.
 *
 * Getters.  A getter that finds the future pending begins a park (sched.h),
 * takes the lock, looks again, links a waiter record -- on its own stack:
 * (parker, token) -- releases the lock and waits.  The filler, under the
 * lock, writes the outcome, unparks every waiter record in the list
 * (weft__unpark: a CAS on the park word), empties the list and publishes
 * the state, all before releasing the lock.  Every getter, however its wait
 * ended, takes the lock again before returning, and unlinks its record if
 * the future is still pending (it timed out or was cancelled).  So a waiter
 * record is reachable only while its getter is inside get, and the filler
 * is done with every record before any getter can return.
 *
 * The race.  A filler and a getter's timeout or cancellation may end the
 * same park at once: the park word's CAS lets exactly one win.  If the
 * timer or the canceller wins, the filler's weft__unpark returns 0 and
 * touches the getter no more (no double wake); the getter returns
 * -ETIMEDOUT / -ECANCELED even though the future may be filled by the time
 * it looks, and a later get returns the value.  If the filler wins, the
 * getter returns the value.  Only a filler holds the token of a getter's
 * GENERIC park, so a wake means "filled"; the loop in get_wait would absorb
 * a stale one anyway.
 *
 * Ownership and lifetime.  Reference counted (weft/future.h states the
 * rules for users).  Internally:
 *  - A dependent g (then/all/any) is allocated with its callback nodes
 *    inside it: one node for then, n for all/any.  Node i is linked into
 *    input i's callback list; while any of them is still linked, g holds
 *    one extra reference ("the nodes' reference"), dropped by the last node
 *    to run (all/any count down g->left).  So g outlives every node, and a
 *    node is never freed separately.
 *  - Dependents hold no reference on their inputs.  Holding one would make
 *    a cycle (input -> node -> g -> input) that leaks when the input is
 *    never filled.  Instead, when an input's last reference goes while it
 *    is pending, it is failed with ECANCELED first: nobody can fill it any
 *    more, so its dependents learn it now, and the whole graph unwinds.
 *  - The free poisons f's magic word first; ref, unref and free check it,
 *    so an unref past the last reference stops the program with a message
 *    rather than freeing f twice (sched.h, "heap objects").
 *  - weft_future_complete / _fail touch f for the last time in the store
 *    that publishes the outcome (the callbacks they run afterwards live in
 *    the dependents).  A getter that sees the outcome may therefore free f
 *    while the filler is still inside complete: the hand-off needs no
 *    reference of the filler's own.
 *
 * Where callbacks run.  On the thread that fills the input, after the lock
 * is released (its getters already woken); or, when the input is already
 * filled at registration, on the caller of then/all/any.  A node is taken
 * off its input's list under the input's lock by the one fill that
 * succeeds, or is never linked because the input was already filled, so it
 * runs exactly once.  Filling a dependent may fill its dependents in turn:
 * rather than recursing (a chain of 100000 thens would overflow a vthread's
 * stack), fills push the nodes they detach onto a worklist (each node
 * stamped with its input's outcome) that one loop, drive(), runs.
 *
 * all: node i fails g on a failure of input i (the first fill of g wins);
 * every node then counts g->left down, and the last completes g with NULL
 * -- which gives -EALREADY, harmlessly, when some input failed.  That last
 * node also drops the nodes' reference.  any: every node fills g with its
 * input's outcome (the first wins) and counts down the same way.  Inputs
 * already filled at registration run in array order, before the next is
 * registered, so any() of filled inputs takes the first in the array.
 *
 * Thread safety: every entry point may be called from any vthread or
 * platform thread; nothing here needs the runtime unless a getter parks a
 * vthread (a platform thread sleeps on its own park word with futex).
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "future_int.h"
#include "waitq.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>

enum { S_LOCK = 1, S_OK = 2, S_FAILED = 4, S_DONE = S_OK | S_FAILED };
enum { K_PLAIN = 0, K_THEN, K_ALL, K_ANY };

/* A callback: embedded in the dependent it feeds (`target`), or a watch
 * (future_int.h).  v/err are the input's outcome, stamped when the node is
 * detached for running. */
typedef weft__fnode fnode;

struct weft_future {
    _Atomic uint32_t state;  /* S_*: OK/FAILED, and the lock bit */
    _Atomic int32_t refs;
    void *value;             /* written once, before OK is published */
    int err;                 /* > 0 when FAILED */
    int kind;                /* K_*: what the nodes below do */
    weft__waitq waiters;     /* getters, on their stacks (waitq.h's list; its
                              * spinlock unused): under the lock; empty once filled */
    fnode *cb_head, *cb_tail;/* under the lock; empty once filled */
    uint32_t magic;          /* WEFT__MAGIC_FUTURE; _DEAD once freed (sched.h: 32 bytes in, not last) */
    /* dependents only */
    void *(*fn)(void *, void *);
    void *ctx;
    _Atomic size_t left;     /* nodes that have not run yet */
    fnode nodes[];
};

/* A future freed by its last unref: a call with it after that is a use
 * after free, stopped with a message where it can be (sched.h, "heap
 * objects").  The word is 64 bytes in; a future is at least 96 bytes. */
_Static_assert(offsetof(struct weft_future, magic) >= 32 &&
               offsetof(struct weft_future, magic) + 4 <= sizeof(struct weft_future) - 8,
               "the magic word must lie where glibc's free leaves it");
#define CHECK_REFERENCED(f, call) \
    WEFT__CHECK_LIVE(f, WEFT__MAGIC_FUTURE, call, "no reference left (unreferenced more often than referenced?)")

/* ---- the lock bit ------------------------------------------------------- */


/* Takes f's lock; returns the state without the lock bit. */
static uint32_t flock(weft_future *f) {
    for (int spins = 0;; spins++) {
        uint32_t s = atomic_load_explicit(&f->state, memory_order_relaxed);
        if (!(s & S_LOCK) &&
            atomic_compare_exchange_weak_explicit(&f->state, &s, s | S_LOCK, memory_order_acquire,
                                                  memory_order_relaxed))
            return s;
        /* holders never block: spin, then let a descheduled holder run */
        if (spins > 100) sched_yield();
        else weft__cpu_relax();
    }
}

/* Releases f's lock, setting the state to s (which may publish a fill). */
static inline void funlock(weft_future *f, uint32_t s) {
    atomic_store_explicit(&f->state, s, memory_order_release);
}

/* ---- filling and the worklist ------------------------------------------ */

/* Fills f (held locked, state s) with (v, err) unless it is filled: wakes
 * every getter, moves the callbacks to the front of *wl and publishes the
 * outcome with the unlock.  Returns 0 or -EALREADY. */
static int settle_locked(weft_future *f, uint32_t s, void *v, int err, fnode **wl) {
    if (s & S_DONE) {
        funlock(f, s);
        return -EALREADY;
    }
    f->value = v;
    f->err = err;
    for (weft__waiter *w; (w = weft__wq_pop(&f->waiters));) /* the getter cannot leave before we unlock */
        weft__wq_wake(w); /* 0 if its timeout or cancel won */
    fnode *h = f->cb_head;
    if (h) {
        for (fnode *n = h; n; n = n->next) {
            n->v = v;
            n->err = err;
        }
        f->cb_tail->next = *wl;
        *wl = h;
        f->cb_head = f->cb_tail = NULL;
    }
    funlock(f, err ? S_FAILED : S_OK); /* our last touch of f */
    return 0;
}

static int settle(weft_future *f, void *v, int err, fnode **wl) {
    return settle_locked(f, flock(f), v, err, wl);
}

static void release(weft_future *f, fnode **wl);

/* Runs one callback node: feeds its target.  The node lives in the target,
 * which the nodes' reference keeps alive until release() below. */
static void run_node(fnode *n, fnode **wl) {
    if (!n->target) { /* a watch: it owns the node from here */
        n->watch(n);
        return;
    }
    weft_future *g = n->target;
    void *v = n->v;
    int err = n->err;
    switch (g->kind) {
    case K_THEN:
        if (err) {
            settle(g, NULL, err, wl);
        } else {
            /* as Java: a dependent already filled (cancelled) skips fn */
            if (g->fn && !(atomic_load_explicit(&g->state, memory_order_relaxed) & S_DONE))
                v = g->fn(v, g->ctx);
            settle(g, v, 0, wl);
        }
        break;
    case K_ALL:
        if (err) settle(g, NULL, err, wl);
        if (atomic_fetch_sub_explicit(&g->left, 1, memory_order_acq_rel) != 1) return;
        settle(g, NULL, 0, wl); /* -EALREADY if an input failed */
        break;
    case K_ANY:
        settle(g, v, err, wl);
        if (atomic_fetch_sub_explicit(&g->left, 1, memory_order_acq_rel) != 1) return;
        break;
    default:
        weft__fatal("future callback node on a plain future %p", (void *)g);
    }
    release(g, wl); /* the nodes' reference */
}

/* Runs callbacks until none is left (fills they cause push more). */
static void drive(fnode *wl) {
    while (wl) {
        fnode *n = wl;
        wl = n->next;
        run_node(n, &wl);
    }
}

/* Drops a reference; the last one cancels f if pending (its dependents go
 * to *wl) and frees it. */
static void release(weft_future *f, fnode **wl) {
    if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
    uint32_t s = flock(f);
    if (f->waiters.head)
        weft__fatal("future %p freed while a getter waits on it (a getter must hold a reference)",
                    (void *)f);
    settle_locked(f, s, NULL, ECANCELED, wl); /* -EALREADY when filled: the usual case */
    WEFT__KILL(f);
    free(f);
}

/* Links node n into f's callbacks, or, if f is already filled, stamps it
 * with f's outcome and puts it on *wl to run now. */
static void attach(weft_future *f, fnode *n, fnode **wl) {
    n->next = NULL;
    uint32_t s = atomic_load_explicit(&f->state, memory_order_acquire);
    if (!(s & S_DONE)) {
        s = flock(f);
        if (!(s & S_DONE)) {
            if (f->cb_tail) f->cb_tail->next = n;
            else f->cb_head = n;
            f->cb_tail = n;
            funlock(f, s);
            return;
        }
        funlock(f, s);
    }
    n->v = f->value;
    n->err = f->err;
    n->next = *wl;
    *wl = n;
}

static weft_future *fut_alloc(int kind, size_t n) {
    if (n > (SIZE_MAX - sizeof(weft_future)) / sizeof(fnode)) return NULL;
    weft_future *f = malloc(sizeof *f + n * sizeof(fnode));
    if (!f) return NULL;
    atomic_init(&f->state, 0);
    atomic_init(&f->refs, 1);
    f->value = NULL;
    f->err = 0;
    f->kind = kind;
    f->waiters = (weft__waitq){0};
    f->cb_head = f->cb_tail = NULL;
    f->magic = WEFT__MAGIC_FUTURE;
    f->fn = NULL;
    f->ctx = NULL;
    atomic_init(&f->left, n);
    for (size_t i = 0; i < n; i++) {
        f->nodes[i].next = NULL;
        f->nodes[i].target = f;
        f->nodes[i].watch = NULL;
    }
    return f;
}

/* ---- the API ------------------------------------------------------------ */

int weft_future_create(weft_future **f) {
    if (!f) return -EINVAL;
    *f = fut_alloc(K_PLAIN, 0);
    return *f ? 0 : -ENOMEM;
}

weft_future *weft_future_ref(weft_future *f) {
    if (!f) return NULL;
    CHECK_REFERENCED(f, "weft_future_ref");
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

void weft_future_unref(weft_future *f) {
    if (!f) return;
    CHECK_REFERENCED(f, "weft_future_unref");
    fnode *wl = NULL;
    release(f, &wl);
    drive(wl);
}


int weft_future_complete(weft_future *f, void *v) {
    if (!f) return -EINVAL;
    fnode *wl = NULL;
    int r = settle(f, v, 0, &wl);
    drive(wl); /* f may be gone by now: only its dependents are touched */
    return r;
}

int weft_future_fail(weft_future *f, int err) {
    if (!f || err == 0 || err == INT_MIN) return -EINVAL;
    if (err < 0) err = -err;
    fnode *wl = NULL;
    int r = settle(f, NULL, err, &wl);
    drive(wl);
    return r;
}

int weft_future_cancel(weft_future *f) { return weft_future_fail(f, ECANCELED); }

int weft_future_done(const weft_future *f) {
    if (!f) return 0;
    return (atomic_load_explicit(&((weft_future *)f)->state, memory_order_acquire) & S_DONE) != 0;
}

static inline int outcome(const weft_future *f, void **v) {
    if (f->err) return -f->err;
    if (v) *v = f->value;
    return 0;
}

/* get's slow path: park until filled, timed out or cancelled. */
__attribute__((noinline)) static int get_wait(weft_future *f, void **v, int64_t deadline, const char *file,
                                              int line) {
    for (;;) {
        weft__parker *p;
        uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
        if (!tok) return -ECANCELED;
        uint32_t s = flock(f);
        if (s & S_DONE) { /* filled meanwhile */
            funlock(f, s);
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_FUTURE, f, file, line);
            return outcome(f, v);
        }
        weft__waiter w = {.p = p, .token = tok};
        weft__wq_push_head(&f->waiters, &w);
        funlock(f, s);

        int r = weft__park_wait(p, tok, deadline, WEFT__WHY_FUTURE, f, file, line);

        s = flock(f);
        if (w.queued) weft__wq_remove(&f->waiters, &w); /* still pending: the record is still linked */
        /* else the filler emptied the list and is done with &w */
        funlock(f, s);
        if (r < 0) return r; /* our timeout or cancel won the park */
        if (s & S_DONE) return outcome(f, v);
        /* a wake with f pending (not expected: only a filler holds our
         * token) -- wait again */
    }
}

int weft__future_get_at(weft_future *f, void **v, int64_t deadline, const char *file, int line) {
    if (!f) return -EINVAL;
    if (atomic_load_explicit(&f->state, memory_order_acquire) & S_DONE) return outcome(f, v);
    return get_wait(f, v, deadline, file, line);
}

int (weft_future_get)(weft_future *f, void **v, int64_t deadline) {
    return weft__future_get_at(f, v, deadline, NULL, 0);
}

weft_future *weft_future_then(weft_future *f, void *(*fn)(void *v, void *ctx), void *ctx) {
    if (!f) return errno = EINVAL, NULL;
    weft_future *g = fut_alloc(K_THEN, 1);
    if (!g) return errno = ENOMEM, NULL;
    g->fn = fn;
    g->ctx = ctx;
    atomic_init(&g->refs, 2); /* the caller's and the node's */
    fnode *wl = NULL;
    attach(f, &g->nodes[0], &wl);
    drive(wl); /* f was already filled: fn runs here */
    return g;
}

/* all and any: one node per input, run in array order for inputs that are
 * already filled. */
static weft_future *combine(int kind, weft_future **fs, size_t n) {
    if (n && !fs) return errno = EINVAL, NULL;
    for (size_t i = 0; i < n; i++)
        if (!fs[i]) return errno = EINVAL, NULL;
    weft_future *g = fut_alloc(kind, n);
    if (!g) return errno = ENOMEM, NULL;
    if (n == 0) {
        fnode *wl = NULL;
        if (kind == K_ALL) settle(g, NULL, 0, &wl);
        else settle(g, NULL, EINVAL, &wl);
        return g;
    }
    atomic_init(&g->refs, 2); /* the caller's and the nodes' */
    for (size_t i = 0; i < n; i++) {
        fnode *wl = NULL;
        attach(fs[i], &g->nodes[i], &wl);
        drive(wl);
    }
    return g;
}

void weft__future_watch(weft_future *f, fnode *n) {
    n->target = NULL;
    fnode *wl = NULL;
    attach(f, n, &wl);
    drive(wl);
}

weft_future *weft_future_all(weft_future **fs, size_t n) { return combine(K_ALL, fs, n); }
weft_future *weft_future_any(weft_future **fs, size_t n) { return combine(K_ANY, fs, n); }
