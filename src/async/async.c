/*
 * Asynchronous socket operations and timers with completion handlers
 * (include/weft/async.h): the dispatchers.
 *
 * Layer.  The async layer (this file and file.c) stands above exec: it
 * uses io's operations and fd use counts (io.h) and hands handlers to
 * executors (weft_submit).  Nothing below calls into it: io sees an
 * operation of ours only as a weft__iop without a parker, and completes it
 * through the iop's kdone; the runtime's life stops it (weft__async_stop,
 * before weft__io_stop) and forgets it in a fork child (async_int.h).
 *
 * Pieces.  An operation is an `aop`, allocated by the call that starts it
 * and freed after its handler ran.  Its first member is a weft__iop whose
 * parker is NULL: that is how the backends' completion path
 * (weft__iop_complete) knows to hand it here (its kdone, kernel_done)
 * instead of waking a vthread.  Each carrier k has a dispatcher: a daemon
 * vthread pinned to k, made when k first needs one, living until the
 * runtime stops.  It owns
 *   - an inbox: a lock-free LIFO (Treiber stack) of aops, pushed by anyone
 *     -- operations to start, handed over by other threads, and operations
 *     whose kernel part ended, by whichever thread saw the completion --
 *     and taken whole by the dispatcher (atomic exchange), then reversed;
 *   - a timer heap of aops (deadlines and timers), touched only by the
 *     dispatcher.
 * The dispatcher loop: take the inbox, start or continue each aop in it,
 * fire due timers; when there is nothing, park (kind WEFT__PK_LOOP) until
 * the heap's first deadline.  A push that finds the inbox empty ends that
 * park; the Dekker pair -- the pusher's CAS then its look at the park word,
 * the dispatcher's park begin then its look at the inbox, all seq_cst --
 * means either the dispatcher sees the aop or the pusher sees the park.
 *
 * Turns.  A dispatcher whose handlers keep refilling its inbox (work that
 * completes at once: TLS records already read ahead, sends with room)
 * would never park, and only its carrier reaps its ring (io/uring.c): the
 * completions of its own other operations, and of every vthread parked
 * there, would wait -- seen: 3000 TLS handshakes in a burst held both
 * carriers 1 to 2.8 s without a switch on a loaded 2-CPU machine.  So
 * after TURN_NS of work without a park, or TURN_OPS aops (deterministic
 * mode's clock moves only by the carrier's decisions), it yields with a
 * poll (weft__yield_polled: the ring reaped, timers fired, the carrier's
 * other vthreads run), as an event loop polls between turns.  It checks
 * after each aop and each timer: one inbox can hold thousands.  A timer
 * that a handler starts goes by the inbox, not at once: one due already
 * would fire in the same fire(), and a handler that re-arms it so would
 * keep the dispatcher there for ever.
 *
 * An aop's life: NEW (to be started by its dispatcher) -> KERNEL (an SQE on
 * the dispatcher's carrier's ring, or a waiter on the fd in the epoll
 * table) -> BACK (the kernel part ended: res in iop.res, in the inbox) ->
 * the dispatcher continues it (KERNEL again: a partial send's rest, an
 * O_NONBLOCK socket's -EAGAIN turned into a poll and a retry, an epoll
 * readiness turned into the non-blocking attempt) or finishes it: off the
 * heap, handler called (or handed to the executor), freed.  io_uring's
 * single issuer rule holds because only the dispatcher, pinned to the
 * ring's carrier, queues SQEs for its aops.
 *
 * Closing (src/io/io.c's "Closing").  An aop's hold on its number is
 * taken by the call that starts it: the number's epoch then
 * (weft__fd_epoch, the count of closes of it begun).  Everything the dispatcher does with the fd --
 * the first issue, each restart -- first counts in without waiting
 * (weft__fd_enter_nowait) and ends the aop with -EBADF, touching nothing,
 * if a close began since the call: the number may be another file's by
 * then (weft_send_async, weft_close, socket() got the number: the send
 * must not go to the new socket's peer).  While in the kernel an aop holds
 * that count, like a blocking call, so weft_close interrupts it
 * (-ECANCELED from the ring, -EBADF from the epoll table) and waits for it.
 * The count is dropped where the kernel part ends (kernel_done),
 * not when the dispatcher gets to it; and an aop waiting in an inbox holds
 * the epoch, not a count.  Either count would make weft_close wait for the
 * dispatcher: for ever when the closer is a handler on that dispatcher, or
 * anything a handler there waits for.  The epoch cannot come round while an
 * aop waits (39 bits: io.c).  A close that began before the aop was called
 * -- an accept got the number while the old file's weft_close was
 * finishing -- is waited out on the dispatcher's retry list, in 20 us
 * steps, as a blocking call waits in fd_enter; a second close of the
 * number meanwhile ends it with -EBADF.
 *
 * Deadlines.  An aop with a deadline is on its dispatcher's heap; when it
 * is due the aop is marked timed out and interrupted (an ASYNC_CANCEL on
 * the ring, or taken off the fd's waiters); it comes back with -ECANCELED
 * and ends with -ETIMEDOUT -- or with its result, if it completed first.
 *
 * Handlers on an executor: the aop is freed first, and a small record of
 * the handler (hcall) is the task's argument.  A watch on the task's
 * future runs when the future is filled; if the task did not run (refused,
 * discarded, cancelled) the watch runs the handler itself, and it frees the
 * record either way.  An aop holds a reference on its executor from its
 * call until its handler was submitted (exec.h, weft__executor_ref): an
 * executor closed meanwhile stays in memory, shut, refuses the handler,
 * and the dispatcher runs it -- not a use after free.  weft_executor_close
 * does not wait for such operations (an idle connection's would hold it
 * for ever).
 */
#define _GNU_SOURCE
#include "async_int.h"
#include "../exec/exec.h"
#include "../io/io.h"
#include "../sched/heap.h"
#include "../sync/future_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

enum { A_ACCEPT, A_RECV, A_SEND, A_POLL, A_TIMER };
enum { ST_NEW, ST_KERNEL, ST_BACK };

struct disp;

typedef struct aop {
    weft__iop iop; /* first: the backends know only this (p == NULL) */
    weft__ioreq rq;
    struct disp *d;
    struct aop *next; /* the inbox */
    weft_handler h;
    void *ctx;
    weft_executor *ex;
    _Atomic int state; /* ST_*: written where the kernel part ends, read by the dispatcher */
    int8_t kind;
    int8_t polling;   /* 1: waiting for readiness after an -EAGAIN; -1: an attempt's result */
    int8_t timed_out; /* its deadline passed */
    int8_t spread;    /* started on the next dispatcher in turn */
    int8_t in_kernel; /* counted in its dispatcher's inflight */
    ptrdiff_t hidx;   /* in d's heap (sched/heap.h), or -1 */
    int64_t epoch;    /* its fd's epoch when it was called (its hold on the number); -1: not counted */
    int64_t deadline;
    const char *base; /* send: all of it (rq.buf: the rest) */
    size_t total;
    _Atomic uint64_t *use; /* the fd count held while in the kernel */
} aop;

/* A handler handed to an executor (the aop is freed first: an idle
 * connection's wait stays small). */
typedef struct hcall {
    weft__fnode watch; /* on the handler task's future */
    _Atomic int ran;   /* the task ran */
    weft_handler h;
    void *ctx;
    ssize_t result;
} hcall;

typedef struct disp {
    int k;
    weft_thread *vt;
    _Atomic(aop *) inbox;
    weft__heap heap; /* aops by deadline: the dispatcher's */
    aop *retry; /* waiting for a close of their number to end: the dispatcher's */
    int64_t retry_at;
    int64_t turn_start; /* when it last parked or yielded */
    int turn_ops;       /* aops and timers since */
    int inflight;       /* aops whose kernel part runs (deterministic mode's clock waits for them) */
} disp;

#define RETRY_NS 20000 /* as weft_close's own naps */
#define TURN_NS 200000 /* the most a busy dispatcher runs before its carrier polls (see the top) */
#define TURN_OPS 256    /* or this many aops: deterministic mode's clock stands still while it runs */

static struct {
    pthread_mutex_t lock;
    disp *_Atomic d[WEFT__MAX_CARRIERS];
    _Atomic unsigned rr;
} A = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- the timer heap (the dispatcher's) ------------------------------------------- */

static int sooner(const void *x, const void *y) { return ((const aop *)x)->deadline < ((const aop *)y)->deadline; }

/* a's kernel part begins / has ended (the dispatcher's count: see disp_main's park) */
static void kernel_begin(disp *d, aop *a) {
    atomic_store_explicit(&a->state, ST_KERNEL, memory_order_relaxed);
    a->in_kernel = 1;
    d->inflight++;
}
static void kernel_end(disp *d, aop *a) {
    if (!a->in_kernel) return;
    a->in_kernel = 0;
    d->inflight--;
}

static int heap_add(disp *d, aop *a) { return weft__heap_push(&d->heap, a, sooner, offsetof(aop, hidx)); }

static void heap_del(disp *d, aop *a) { weft__heap_remove(&d->heap, a, sooner, offsetof(aop, hidx)); }

static aop *heap_first(disp *d) { return weft__heap_first(&d->heap); }

/* ---- the inbox ----------------------------------------------------------------- */

/* Pushes a; returns d's vthread if its park must be ended (the caller makes
 * it runnable), else NULL. */
static weft_thread *push(disp *d, aop *a) {
    aop *old = atomic_load(&d->inbox);
    do {
        a->next = old;
    } while (!atomic_compare_exchange_weak(&d->inbox, &old, a));
    if (old) return NULL; /* not empty: the dispatcher has yet to take it */
    return weft__unpark_kind(&d->vt->parker, WEFT__PK_LOOP) == 2 ? d->vt : NULL;
}

/* a's kernel part ended (its iop's kdone: io.h) */
static weft_thread *kernel_done(weft__iop *op, int res) {
    aop *a = (aop *)op;
    a->iop.res = res;
    if (a->use) { /* a close waiting for the fd goes on (see the top) */
        weft__fd_leave(a->use);
        a->use = NULL;
    }
    atomic_store_explicit(&a->state, ST_BACK, memory_order_relaxed);
    return push(a->d, a);
}

/* ---- finishing: the handler ------------------------------------------------------ */

static void *handler_task(void *arg) {
    hcall *c = arg;
    atomic_store(&c->ran, 1);
    c->h(c->result, c->ctx);
    return NULL;
}

static void handler_watch(weft__fnode *n) {
    hcall *c = (hcall *)((char *)n - offsetof(hcall, watch));
    if (!atomic_load(&c->ran)) c->h(c->result, c->ctx); /* refused or discarded: not lost */
    free(c);
}

static void finish(disp *d, aop *a, ssize_t r) {
    if (a->hidx >= 0) heap_del(d, a);
    weft_handler h = a->h;
    void *ctx = a->ctx;
    weft_executor *ex = a->ex;
    free(a); /* before the handler: it may start another operation */
    if (ex) {
        hcall *c = malloc(sizeof *c);
        weft_future *g = NULL;
        if (c) {
            *c = (hcall){.h = h, .ctx = ctx, .result = r, .watch.watch = handler_watch};
            g = weft_submit(ex, handler_task, c); /* refused if ex was closed meanwhile */
        }
        weft__executor_unref(ex); /* the operation's (see new_aop) */
        if (g) {
            weft__future_watch(g, &c->watch); /* may run at once, and free c */
            weft_future_unref(g);
            return;
        }
        free(c); /* no memory for the task: here rather than never */
    }
    h(r, ctx);
}

/* An aop that never started: its handler will not run. */
static void drop(aop *a) {
    if (a->ex) weft__executor_unref(a->ex);
    free(a);
}

/* ---- starting and continuing ------------------------------------------------------- */

/* An attempt made on the dispatcher (not in the kernel's queue) gave r: a
 * goes back through the inbox, in turn after what is already there (its
 * handler must not run inside the call that started it). */
static void attempted(disp *d, aop *a, ssize_t r) {
    weft__fd_leave(a->use);
    a->use = NULL;
    a->iop.res = (int32_t)r;
    atomic_store_explicit(&a->state, ST_BACK, memory_order_relaxed);
    a->polling = -1; /* an attempt's result, not a readiness */
    push(d, a);
}

/* Starts (or restarts) a's kernel part; a is d's and this runs on d. */
static void issue(disp *d, aop *a) {
    if (a->kind == A_TIMER) {
        if (heap_add(d, a) < 0) finish(d, a, -ENOMEM);
        return;
    }
    if (a->timed_out) {
        finish(d, a, -ETIMEDOUT);
        return;
    }
    if (a->deadline && a->hidx < 0) {
        if (a->deadline <= weft_now()) {
            finish(d, a, -ETIMEDOUT);
            return;
        }
        if (heap_add(d, a) < 0) {
            finish(d, a, -ENOMEM);
            return;
        }
    }
    int err;
    a->use = weft__fd_enter_nowait(a->rq.fd, &a->epoch, &err);
    if (err == -EAGAIN) { /* a close of the number is ending: again in a moment */
        if (!d->retry) d->retry_at = weft_now() + RETRY_NS;
        a->next = d->retry;
        d->retry = a;
        return;
    }
    if (err) {
        finish(d, a, err);
        return;
    }
    if (!a->polling && weft__io.kernel_ops) { /* io_uring: the kernel carries it out */
        if (a->kind == A_SEND) {
            /* A send almost always finds room in the socket buffer: one
             * non-blocking attempt costs a system call but saves the
             * ring's round trip (as a blocking weft_send does) */
            ssize_t r = send(a->rq.fd, a->rq.buf, a->rq.n, a->rq.flags | MSG_DONTWAIT);
            if (r < 0) r = -errno;
            if (r != -EAGAIN && r != -EWOULDBLOCK && r != -EINTR) {
                attempted(d, a, r);
                return;
            }
        }
        kernel_begin(d, a);
        weft__io.submit(&a->iop, &a->rq);
        return;
    }
    if (!a->polling && a->kind != A_POLL) {
        /* epoll: try it; wait for readiness only if it would block */
        ssize_t r = weft__io.try_op(&a->rq);
        if (r != -EAGAIN) {
            attempted(d, a, r);
            return;
        }
        a->polling = 1;
    }
    /* readiness: after an attempt's (or an O_NONBLOCK socket's) -EAGAIN,
     * or a poll's own on epoll */
    a->iop.fd = a->rq.fd;
    a->iop.events = weft__ioreq_events(&a->rq);
    kernel_begin(d, a);
    int r = weft__io.wait_ready(&a->iop); /* may complete it at once: then it is in the inbox */
    if (r < 0) {
        kernel_end(d, a);
        weft__fd_leave(a->use);
        a->use = NULL;
        finish(d, a, r);
    }
}

/* What an operation's result means for it: done, or more to do. */
static void progress(disp *d, aop *a, ssize_t r) {
    if (a->kind == A_SEND && r >= 0) {
        if (r == 0) {
            finish(d, a, -EIO);
            return;
        }
        size_t sent = (size_t)((const char *)a->rq.buf - a->base) + (size_t)r;
        if (sent < a->total) {
            size_t left = a->total - sent;
            a->rq.buf = (void *)(a->base + sent);
            a->rq.n = left < (1u << 30) ? left : (1u << 30);
            issue(d, a);
            return;
        }
        r = (ssize_t)a->total;
    }
    finish(d, a, r);
}

/* a's kernel part ended with a->iop.res; a is d's. */
static void back(disp *d, aop *a) {
    int res = a->iop.res;
    kernel_end(d, a);
    if (a->polling == -1) { /* an attempt's own result */
        a->polling = 0;
        progress(d, a, res);
        return;
    }
    if (res == -ECANCELED) { /* io_uring: its deadline's cancel, or weft_close's */
        finish(d, a, a->timed_out ? -ETIMEDOUT : -EBADF);
    } else if (a->polling) { /* readiness (or its error): try the operation again */
        a->polling = 0;
        if (res < 0) finish(d, a, res);
        else issue(d, a);
    } else if (res == -EAGAIN && a->kind != A_POLL) { /* io_uring: an O_NONBLOCK socket */
        a->polling = 1;
        issue(d, a);
    } else { /* the operation's result (on epoll, a poll's readiness) */
        progress(d, a, res);
    }
}

/* Yields with a poll if d has worked TURN_NS, or TURN_OPS aops, since it
 * last parked or yielded (see the top). */
static void turn_check(disp *d) {
    if (++d->turn_ops < TURN_OPS && weft_now() - d->turn_start < TURN_NS) return;
    weft__yield_polled();
    d->turn_start = weft_now();
    d->turn_ops = 0;
}

/* Due deadlines and timers, and the retries. */
static void fire(disp *d) {
    int64_t now = weft_now();
    if (d->retry && now >= d->retry_at) {
        aop *a = d->retry;
        d->retry = NULL;
        while (a) {
            aop *nx = a->next;
            issue(d, a); /* may put it back on the list */
            a = nx;
        }
    }
    for (aop *a; (a = heap_first(d)) && a->deadline <= now;) {
        heap_del(d, a);
        if (a->kind == A_TIMER) {
            finish(d, a, 0);
            turn_check(d);
            continue;
        }
        a->timed_out = 1;
        if (atomic_load_explicit(&a->state, memory_order_relaxed) != ST_KERNEL) continue; /* issue/back see it */
        /* io_uring: it comes back with -ECANCELED, or its result; epoll:
         * off its fd, or its readiness is in the inbox already */
        if (weft__io.withdraw(&a->iop)) {
            kernel_end(d, a);
            weft__fd_leave(a->use);
            a->use = NULL;
            finish(d, a, -ETIMEDOUT);
        }
    }
}

static void *disp_main(void *arg) {
    disp *d = arg;
    d->turn_start = weft_now();
    for (;;) {
        aop *list = atomic_exchange(&d->inbox, NULL);
        if (list) {
            aop *fifo = NULL; /* the stack reversed: oldest first */
            while (list) {
                aop *nx = list->next;
                list->next = fifo;
                fifo = list;
                list = nx;
            }
            while (fifo) {
                aop *a = fifo;
                fifo = a->next;
                if (atomic_load_explicit(&a->state, memory_order_relaxed) == ST_NEW) issue(d, a);
                else back(d, a);
                turn_check(d);
            }
            fire(d);
            continue;
        }
        fire(d);
        weft__parker *p;
        uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_LOOP);
        if (atomic_load(&d->inbox)) {
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_ASYNC, NULL, __FILE__, __LINE__);
            continue;
        }
        int64_t until = heap_first(d) ? heap_first(d)->deadline : 0;
        if (d->retry && (!until || d->retry_at < until)) until = d->retry_at;
        /* (with operations in the kernel the park names d: in deterministic
         * mode the clock then gives them time to complete before it jumps
         * to a deadline, as for a vthread parked in a read -- sched.c) */
        weft__park_wait(p, tok, until, WEFT__WHY_ASYNC, d->inflight ? d : NULL, __FILE__, __LINE__);
        d->turn_start = weft_now();
        d->turn_ops = 0;
    }
    return NULL;
}

/* Carrier k's dispatcher, made when first asked for; NULL if it cannot be. */
static disp *disp_of(int k) {
    disp *d = atomic_load_explicit(&A.d[k], memory_order_acquire);
    if (d) return d;
    pthread_mutex_lock(&A.lock);
    d = atomic_load_explicit(&A.d[k], memory_order_relaxed);
    if (!d && (d = calloc(1, sizeof *d))) {
        d->k = k;
        char name[16];
        snprintf(name, sizeof name, "async %d", k);
        weft_thread_opts at = {.name = name, .daemon = 1};
        if (weft__spawn_on(k, &d->vt, disp_main, d, &at) == 0) {
            atomic_store_explicit(&A.d[k], d, memory_order_release);
        } else {
            free(d);
            d = NULL;
        }
    }
    pthread_mutex_unlock(&A.lock);
    return d;
}

/* Hands a (filled in) to a dispatcher: the caller's carrier's, or the next
 * one's in turn for a platform thread. */
static int start(aop *a) {
    int r = weft__ensure_init();
    if (r < 0) {
        drop(a);
        return r;
    }
    weft__carrier *c = weft__carrier_self();
    /* The hold on the number, now: a weft_close from here on ends the
     * operation, even one that comes before its dispatcher does. */
    a->epoch = a->kind == A_TIMER ? -1 : weft__fd_epoch(a->rq.fd);
    int n = weft__carriers();
    int k = c && !a->spread ? weft__carrier_index(c) : (int)(atomic_fetch_add(&A.rr, 1) % (unsigned)n);
    if (k >= n) k %= n; /* a spare carrier (the monitor's): the dispatchers live on the configured ones */
    disp *d = disp_of(k);
    if (!d) {
        drop(a);
        return -ENOMEM;
    }
    a->d = d;
    a->hidx = -1;
    atomic_store_explicit(&a->state, ST_NEW, memory_order_relaxed);
    if (weft__self() == d->vt && a->kind != A_TIMER) {
        issue(d, a); /* a handler starting its next operation: at once */
        return 0;
    }
    /* (a timer goes by the inbox even from a handler: "Turns" at the top) */
    weft_thread *t = push(d, a);
    if (t) weft__ready(t);
    return 0;
}

static aop *new_aop(int kind, weft_handler h, void *ctx, const weft_async_opts *o) {
    aop *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->iop.kdone = kernel_done; /* p NULL: the backends hand it back here */
    a->kind = kind;
    a->h = h;
    a->ctx = ctx;
    a->ex = o ? o->executor : NULL;
    if (a->ex) weft__executor_ref(a->ex); /* so that closing it early frees nothing finish() uses */
    a->deadline = o && o->deadline > 0 ? o->deadline : 0;
    a->spread = o && o->spread;
    return a;
}

/* ---- the API ------------------------------------------------------------------- */

int weft_accept_async(int fd, int flags, weft_handler h, void *ctx, const weft_async_opts *opts) {
    if (fd < 0) return -EBADF; /* as the blocking calls say it */
    if (!h || (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))) return -EINVAL;
    aop *a = new_aop(A_ACCEPT, h, ctx, opts);
    if (!a) return -ENOMEM;
    a->rq = (weft__ioreq){.op = IOR_ACCEPT, .fd = fd, .flags = flags};
    return start(a);
}

int weft_recv_async(int fd, void *buf, size_t n, int flags, weft_handler h, void *ctx, const weft_async_opts *opts) {
    if (fd < 0) return -EBADF; /* as the blocking calls say it */
    if (!h || (n && !buf)) return -EINVAL;
    aop *a = new_aop(A_RECV, h, ctx, opts);
    if (!a) return -ENOMEM;
    if (n > (1u << 30)) n = 1u << 30; /* results are int32 in a CQE */
    a->rq = (weft__ioreq){.op = IOR_RECV, .fd = fd, .buf = buf, .n = n, .flags = flags};
    return start(a);
}

int weft_send_async(int fd, const void *buf, size_t n, int flags, weft_handler h, void *ctx,
                    const weft_async_opts *opts) {
    if (fd < 0) return -EBADF; /* as the blocking calls say it */
    if (!h || (n && !buf) || n > SSIZE_MAX) return -EINVAL;
    aop *a = new_aop(A_SEND, h, ctx, opts);
    if (!a) return -ENOMEM;
    a->base = buf;
    a->total = n;
    a->rq = (weft__ioreq){.op = IOR_SEND, .fd = fd, .buf = (void *)buf, .n = n < (1u << 30) ? n : (1u << 30),
                          .flags = flags};
    if (n == 0) a->kind = A_TIMER, a->deadline = 0; /* nothing to send: the handler, in turn, with 0 */
    return start(a);
}

int weft_poll_async(int fd, int events, weft_handler h, void *ctx, const weft_async_opts *opts) {
    if (fd < 0) return -EBADF; /* as the blocking calls say it */
    if (!h || !events) return -EINVAL;
    aop *a = new_aop(A_POLL, h, ctx, opts);
    if (!a) return -ENOMEM;
    a->rq = (weft__ioreq){.op = IOR_POLL, .fd = fd, .events = events};
    return start(a);
}

int weft_timer_async(int64_t deadline, weft_handler h, void *ctx, const weft_async_opts *opts) {
    if (!h || deadline < 0) return -EINVAL;
    aop *a = new_aop(A_TIMER, h, ctx, opts);
    if (!a) return -ENOMEM;
    a->deadline = deadline;
    return start(a);
}

/* ---- runtime stop and fork ---------------------------------------------------------- */

/* weft_shutdown, the carriers gone: what is left is dropped, unrun (the
 * header says so).  An aop in a ring without a deadline is lost with the
 * ring (the program left an operation pending: LeakSanitizer says so). */
void weft__async_stop(void) {
    for (int k = 0; k < WEFT__MAX_CARRIERS; k++) {
        disp *d = atomic_load(&A.d[k]);
        if (!d) continue;
        for (aop *a = atomic_exchange(&d->inbox, NULL), *nx; a; a = nx) {
            nx = a->next;
            if (a->hidx >= 0) d->heap.a[a->hidx] = NULL; /* on the heap too */
            drop(a);
        }
        for (aop *a = d->retry, *nx; a; a = nx) {
            nx = a->next;
            if (a->hidx >= 0) d->heap.a[a->hidx] = NULL;
            drop(a);
        }
        for (size_t i = 0; i < d->heap.n; i++)
            if (d->heap.a[i]) drop(d->heap.a[i]);
        weft__heap_fini(&d->heap);
        free(d);
        atomic_store(&A.d[k], NULL);
    }
}

void weft__async_fork_child(void) {
    for (int k = 0; k < WEFT__MAX_CARRIERS; k++) {
        disp *d = atomic_load_explicit(&A.d[k], memory_order_relaxed);
        if (d) weft__fork_keep(d);
        atomic_store_explicit(&A.d[k], NULL, memory_order_relaxed);
    }
    A.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}
