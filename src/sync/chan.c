/*
 * chan.c -- channels and select.
 *
 * What.  A channel is one lock, a ring buffer of `cap` slots of `es` bytes,
 * and two FIFO queues of waiter records: receivers waiting for a message
 * and senders waiting for a receiver or for room.  A rendezvous channel
 * (cap 0) has no ring: every transfer goes straight from a sender's buffer
 * to a receiver's.  select is the same machinery with one waiter record per
 * case, all sharing the one park of the selecting thread.
 *
 * Who owns what.
 *  - The lock (a test-and-test-and-set spinlock that yields the CPU after
 *    a while) guards the ring (head, count), `closed`, both queues and the
 *    `linked` flag of every record in them.  It is held for a few dozen
 *    instructions: never across a park; the only copies under it are those
 *    into and out of the ring (a direct hand-off copies after unlocking);
 *    the park CAS done under it may futex-wake a platform thread.
 *  - A waiter record (chan_waiter) and the operation it belongs to
 *    (chan_sel: the park, `fired`, `result`) live on the blocked thread's
 *    stack: no operation allocates.  A record stays valid while it is
 *    linked, because its owner unlinks it under the lock before it returns;
 *    and while its owner waits for `fired`, see below.
 *  - The park word (src/sched) decides who ends a park.
 *
 * The transfer, and its race with timeout and cancellation.  A thread that
 * finds a partner waiting (a sender finding a receiver, a receiver finding a
 * sender, a receiver refilling the ring from a waiting sender, the closer)
 * takes the partner's record off its queue and, still under the lock, tries
 * to win the partner's park: weft__unpark(p, token, WOKEN).  The park CAS
 * lets exactly one of that wake, the partner's timer and weft_cancel end
 * the park, so:
 *  - If the wake wins, the partner is committed to succeed: nothing else can
 *    end its park.  Only now does the waker copy the message (into the
 *    partner's buffer, or out of it), store the result, and publish
 *    `fired` (the case index) with a release store.  That store is the last
 *    touch of the record.  The partner, woken (park_wait returned 0), spins
 *    until it sees `fired` -- usually it already does: the waker copies
 *    before the partner gets a carrier -- and returns success.
 *  - If the wake loses, the partner timed out or was cancelled: the waker
 *    leaves it alone (its record is just unlinked, as dead) and tries the
 *    next record, or the ring, or waits itself.  The partner, whose
 *    park_wait returned -ETIMEDOUT / -ECANCELED, takes the lock, unlinks
 *    its record if it is still linked, and returns the error having sent or
 *    received nothing: no message is lost, none duplicated.
 * A park that ended otherwise than by a partner never gets `fired`: a
 * generic park is ended only by its token's owners (weft__unpark with the
 * token, the timer, weft_cancel), and here the token is known only to the
 * channel's lock holders.  This file never uses weft__unpark_kind.
 *
 * Cancellation is checked on entry to every blocking call (it is sticky:
 * a cancelled vthread gets -ECANCELED even from an operation that could
 * complete); deadlines matter only once the caller has to wait.
 *
 * Records are linked only while their owner is still in the park they were
 * linked for (or has just ended it and is on its way to the lock to unlink
 * them): an owner unlinks all its records before it parks again.  So a
 * waker never meets a stale record of a later park.
 *
 * Select.  Pass 1 locks the channels one at a time in a random order and
 * performs the first case that can proceed at once (no park at all).  If
 * none can, pass 2 begins one park, then visits the cases in the same
 * order: under each channel's lock it checks again and otherwise links a
 * record there.  The first partner to win the shared park claims the
 * select; partners that come later on other channels lose the CAS and skip
 * (and unlink) those records.  Should pass 2 find a case that can proceed
 * now (a partner arrived after pass 1), the selector must first claim its
 * own park (weft__park_abort) -- a partner on an earlier channel may have
 * won it already, and then the selector just waits for that partner's
 * `fired`.  If the own claim succeeds but the partner it saw died (timed
 * out) before it could be claimed, the selector unlinks everything and
 * starts pass 2 again with a new park.  After the select is decided the
 * selector unlinks its records from every other channel.  A select never
 * takes its own records as partners (a send and a receive on one channel
 * in one select do not meet each other).
 *
 * Fairness.  Queues are FIFO: the waiter that came first is served first;
 * a buffered channel refills its ring from the oldest waiting sender when a
 * receiver frees a slot, so each sender's messages keep their order.
 * select shuffles its cases (Fisher-Yates with a per-thread xorshift): of
 * the cases ready at once, each is equally likely to fire.
 *
 * Close.  Under the lock: `closed` is set, every waiting receiver and
 * sender whose park the closer wins is completed with -EPIPE (a sender's
 * message is not delivered).  Later sends fail at once; receivers take
 * what is left in the ring, then get -EPIPE.  Closing twice returns -EPIPE.
 *
 * Speed.  Per hand-off a ping-pong pays four atomic read-modify-writes:
 * the sender's lock and its park CAS on the receiver, the receiver's lock
 * and its weft__park_begin.  What makes that possible is how a waiter
 * waits (chan_park): a vthread first yields a couple of times with its park
 * still WAIT_RUN, and only then really parks.  Its partner is usually
 * runnable on the same carrier; it finds the record, wins the park from
 * WAIT_RUN -- which leaves nothing to schedule: no weft__ready, no LIFO
 * slot, no WAIT_PARKED CAS in the switch -- and the waiter, back from its
 * yield, sees the outcome.  A yield costs a plain switch.  During those
 * yields weft_cancel still ends the park (its CAS works from WAIT_RUN); the
 * deadline's timer is armed only by the real park, a few switches later.  (Parking at once
 * measured about 64 ns per switch on one carrier against 41 ns with the
 * yields; Go's unbuffered channel, about 100 ns on the same machine.)  The
 * waker copies the message outside the lock.
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "../sched/det.h"
#include "weft/chan.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* data                                                                      */
/* ------------------------------------------------------------------------ */

/* One blocked operation (a send, a receive, or a whole select). */
typedef struct chan_sel {
    weft__parker *p;
    uint64_t tok;
    _Atomic int fired;  /* -1 until completed by a partner: then the case index */
    int result;         /* 0 or -EPIPE, written before fired */
} chan_sel;

/* One case of a blocked operation, queued on a channel. */
typedef struct chan_waiter {
    struct chan_waiter *next, *prev;
    chan_sel *sel;
    void *buf;          /* send: the message; receive: where it goes (NULL: discard) */
    weft_chan *chan;    /* owner's: which channel the record went to */
    int index;          /* the case index this record stands for */
    int op;             /* WEFT_CASE_SEND / _RECV */
    int linked;         /* under the channel's lock */
    int queued;         /* owner's: linked in this round (unlink it after) */
} chan_waiter;

typedef struct chan_q {
    chan_waiter *head, *tail;
} chan_q;

struct weft_chan {
    _Atomic int lock;
    int closed;
    size_t es;                  /* elem_size */
    size_t cap;
    size_t head;                /* ring: the oldest message */
    _Atomic size_t count;       /* ring: messages buffered (written under the lock) */
    chan_q recvq, sendq;
    unsigned char *ring;        /* cap * es bytes, after the struct */
};

/* ------------------------------------------------------------------------ */
/* the lock                                                                  */
/* ------------------------------------------------------------------------ */

__attribute__((noinline)) static void lock_slow(weft_chan *c) {
    unsigned spins = 0;
    for (;;) {
        while (atomic_load_explicit(&c->lock, memory_order_relaxed)) {
            /* the holder may be a preempted platform thread: after a while
             * let it have the CPU */
            if (++spins < 200) weft__cpu_relax();
            else sched_yield();
        }
        if (!atomic_exchange_explicit(&c->lock, 1, memory_order_acquire)) return;
    }
}

static inline void chan_lock(weft_chan *c) {
    if (__builtin_expect(atomic_exchange_explicit(&c->lock, 1, memory_order_acquire) != 0, 0)) lock_slow(c);
}

static inline void chan_unlock(weft_chan *c) {
    atomic_store_explicit(&c->lock, 0, memory_order_release);
}

/* ------------------------------------------------------------------------ */
/* queues and the hand-off                                                   */
/* ------------------------------------------------------------------------ */

static inline void q_push(chan_q *q, chan_waiter *w) {
    w->next = NULL;
    w->prev = q->tail;
    if (q->tail) q->tail->next = w;
    else q->head = w;
    q->tail = w;
    w->linked = 1;
}

static inline void q_unlink(chan_q *q, chan_waiter *w) {
    if (w->prev) w->prev->next = w->next;
    else q->head = w->next;
    if (w->next) w->next->prev = w->prev;
    else q->tail = w->prev;
    w->linked = 0;
}

/* Under the lock: the first record of q not belonging to `self` whose park
 * the caller wins (woken: it is now committed to succeed, see the top).
 * It and the dead records met before it are unlinked.  NULL if none. */
static inline chan_waiter *q_claim(chan_q *q, const chan_sel *self) {
    chan_waiter *w = q->head;
    while (w) {
        chan_waiter *next = w->next;
        if (w->sel != self) {
            q_unlink(q, w);
            if (weft__unpark(w->sel->p, w->sel->tok, WEFT__PS_WOKEN)) return w;
        }
        w = next;
    }
    return NULL;
}

/* Under the lock: whether q holds a record (not self's) whose park still
 * waits.  A peek: the park may end before the caller claims it. */
static int q_has_live(const chan_q *q, const chan_sel *self) {
    for (const chan_waiter *w = q->head; w; w = w->next) {
        if (w->sel == self) continue;
        uint64_t word = atomic_load(&w->sel->p->word);
        unsigned st = WEFT__PW_STATE(word);
        if (WEFT__PW_SAME_PARK(word, w->sel->tok) && (st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED))
            return 1;
    }
    return 0;
}

/* Completes w's operation, whose park the caller won: the last touch of w
 * (its owner may return at once). */
static inline void finish(chan_waiter *w, int result) {
    chan_sel *s = w->sel;
    int index = w->index;
    s->result = result;
    atomic_store_explicit(&s->fired, index, memory_order_release);
}

/* The owner's side: woken by a partner, wait for its `fired`. */
static int await_fired(chan_sel *s) {
    int k = atomic_load_explicit(&s->fired, memory_order_acquire);
    for (unsigned spins = 0; k < 0; spins++) {
        /* the partner is between its park CAS and its store, on another
         * OS thread; a platform thread might have been preempted there */
        if (spins < 1000) weft__cpu_relax();
        else sched_yield();
        k = atomic_load_explicit(&s->fired, memory_order_acquire);
    }
    return k;
}

/* Yields a vthread makes before it parks (see "Speed" at the top). */
#define SPIN_YIELDS 2

/*
 * Waits for the park `tok` of p to end, as weft__park_wait.  A vthread
 * first yields a few times with the park still WAIT_RUN: the partner is
 * often runnable on this very carrier, and a waker that ends a WAIT_RUN
 * park has nothing to schedule -- no LIFO hand-off, no switch into the
 * scheduler, no WAIT_PARKED CAS.  Only then does it really park.
 */
static int chan_park(weft__parker *p, uint64_t tok, int64_t deadline, int why, const void *obj,
                     const char *file, int line) {
    if (p->vt) {
        for (int i = 0; i < SPIN_YIELDS; i++) {
            weft_yield();
            uint64_t w = atomic_load(&p->word);
            if (w != tok) {
                switch (WEFT__PW_STATE(w)) {
                case WEFT__PS_TIMEDOUT: return -ETIMEDOUT;
                case WEFT__PS_CANCELLED: return -ECANCELED;
                default: return 0;
                }
            }
        }
    }
    return weft__park_wait(p, tok, deadline, why, obj, file, line);
}

static inline void copy(void *dst, const void *src, size_t n) {
    if (dst && n) memcpy(dst, src, n);
}

static inline unsigned char *slot(const weft_chan *c, size_t i) {
    if (i >= c->cap) i -= c->cap;
    return c->ring + i * c->es;
}

/* ------------------------------------------------------------------------ */
/* operations that do not wait                                               */
/* ------------------------------------------------------------------------ */

/*
 * Called with c locked.  Sends msg if that can be done now: returns 0 or
 * -EPIPE with c unlocked; -EAGAIN with c still locked.  self: the caller's
 * own select, whose records are not partners.
 */
static inline int send_now(weft_chan *c, const void *msg, const chan_sel *self) {
    if (c->closed) {
        chan_unlock(c);
        return -EPIPE;
    }
    size_t es = c->es;
    chan_waiter *w = c->recvq.head ? q_claim(&c->recvq, self) : NULL;
    if (w) {
        chan_unlock(c);
        copy(w->buf, msg, es);
        finish(w, 0);
        return 0;
    }
    size_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    if (n < c->cap) {
        copy(slot(c, c->head + n), msg, es);
        atomic_store_explicit(&c->count, n + 1, memory_order_relaxed);
        chan_unlock(c);
        return 0;
    }
    return -EAGAIN;
}

/* As send_now, for a receive into buf. */
static inline int recv_now(weft_chan *c, void *buf, const chan_sel *self) {
    size_t es = c->es;
    size_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    if (n > 0) {
        copy(buf, slot(c, c->head), es);
        c->head = c->head + 1 == c->cap ? 0 : c->head + 1;
        n--;
        /* room now: the oldest waiting sender's message goes to the tail */
        chan_waiter *w = c->sendq.head ? q_claim(&c->sendq, self) : NULL;
        if (w) {
            copy(slot(c, c->head + n), w->buf, es);
            n++;
        }
        atomic_store_explicit(&c->count, n, memory_order_relaxed);
        chan_unlock(c);
        if (w) finish(w, 0);
        return 0;
    }
    chan_waiter *w = c->sendq.head ? q_claim(&c->sendq, self) : NULL;
    if (w) {
        chan_unlock(c);
        copy(buf, w->buf, es);
        finish(w, 0);
        return 0;
    }
    if (c->closed) {
        chan_unlock(c);
        return -EPIPE;
    }
    return -EAGAIN;
}

static inline int op_now(weft_chan *c, int op, void *buf, const chan_sel *self) {
    return op == WEFT_CASE_SEND ? send_now(c, buf, self) : recv_now(c, buf, self);
}

/* Under the lock: whether op could proceed now (a peek, see q_has_live). */
static int op_ready(const weft_chan *c, int op, const chan_sel *self) {
    size_t n = atomic_load_explicit(&c->count, memory_order_relaxed);
    if (c->closed) return 1;
    if (op == WEFT_CASE_SEND) return n < c->cap || q_has_live(&c->recvq, self);
    return n > 0 || q_has_live(&c->sendq, self);
}

static inline chan_q *queue_of(weft_chan *c, int op) {
    return op == WEFT_CASE_SEND ? &c->sendq : &c->recvq;
}

/* ------------------------------------------------------------------------ */
/* send and receive                                                          */
/* ------------------------------------------------------------------------ */

/* The slow path of send / receive, entered with c locked and the operation
 * unable to proceed: wait for a partner, the deadline or cancellation. */
__attribute__((noinline)) static int op_wait(weft_chan *c, int op, void *buf, int64_t deadline,
                                             const char *file, int line) {
    chan_sel sel;
    chan_waiter w;
    sel.tok = weft__park_begin(&sel.p, WEFT__PK_GENERIC);
    if (!sel.tok) {
        chan_unlock(c);
        return -ECANCELED;
    }
    atomic_init(&sel.fired, -1);
    sel.result = 0;
    w.sel = &sel;
    w.buf = buf;
    w.index = 0;
    chan_q *q = queue_of(c, op);
    q_push(q, &w);
    chan_unlock(c);
    int r = chan_park(sel.p, sel.tok, deadline, op == WEFT_CASE_SEND ? WEFT__WHY_CHAN_SEND : WEFT__WHY_CHAN_RECV,
                            c, file, line);
    if (r == 0) {
        await_fired(&sel);
        return sel.result;
    }
    /* timed out or cancelled: no partner won the park, none will */
    chan_lock(c);
    if (w.linked) q_unlink(q, &w);
    chan_unlock(c);
    return r;
}

int weft__chan_send_at(weft_chan *c, const void *msg, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!c || (!msg && c->es), 0)) return -EINVAL;
    if (weft_cancelled()) return -ECANCELED;
    chan_lock(c);
    int r = send_now(c, msg, NULL);
    if (r != -EAGAIN) return r;
    return op_wait(c, WEFT_CASE_SEND, (void *)(uintptr_t)msg, deadline, file, line);
}

int weft__chan_recv_at(weft_chan *c, void *msg, int64_t deadline, const char *file, int line) {
    if (__builtin_expect(!c, 0)) return -EINVAL;
    if (weft_cancelled()) return -ECANCELED;
    chan_lock(c);
    int r = recv_now(c, msg, NULL);
    if (r != -EAGAIN) return r;
    return op_wait(c, WEFT_CASE_RECV, msg, deadline, file, line);
}

int (weft_chan_send)(weft_chan *c, const void *msg) { return weft__chan_send_at(c, msg, 0, NULL, 0); }
int (weft_chan_recv)(weft_chan *c, void *msg) { return weft__chan_recv_at(c, msg, 0, NULL, 0); }
int (weft_chan_send_until)(weft_chan *c, const void *msg, int64_t d) { return weft__chan_send_at(c, msg, d, NULL, 0); }
int (weft_chan_recv_until)(weft_chan *c, void *msg, int64_t d) { return weft__chan_recv_at(c, msg, d, NULL, 0); }

int weft_chan_try_send(weft_chan *c, const void *msg) {
    if (!c || (!msg && c->es)) return -EINVAL;
    chan_lock(c);
    int r = send_now(c, msg, NULL);
    if (r == -EAGAIN) chan_unlock(c);
    return r;
}

int weft_chan_try_recv(weft_chan *c, void *msg) {
    if (!c) return -EINVAL;
    chan_lock(c);
    int r = recv_now(c, msg, NULL);
    if (r == -EAGAIN) chan_unlock(c);
    return r;
}

/* ------------------------------------------------------------------------ */
/* life                                                                      */
/* ------------------------------------------------------------------------ */

int weft_chan_create(weft_chan **out, size_t es, size_t cap) {
    if (!out) return -EINVAL;
    *out = NULL;
    size_t bytes;
    if (__builtin_mul_overflow(es, cap, &bytes) || bytes > SIZE_MAX - sizeof(weft_chan) - WEFT__CACHELINE)
        return -EINVAL;
    void *mem;
    if (posix_memalign(&mem, WEFT__CACHELINE, sizeof(weft_chan) + bytes) != 0) return -ENOMEM;
    weft_chan *c = mem;
    memset(c, 0, sizeof *c);
    atomic_init(&c->lock, 0);
    atomic_init(&c->count, 0);
    c->es = es;
    c->cap = cap;
    c->ring = (unsigned char *)(c + 1);
    *out = c;
    return 0;
}

int weft_chan_close(weft_chan *c) {
    if (!c) return -EINVAL;
    chan_lock(c);
    if (c->closed) {
        chan_unlock(c);
        return -EPIPE;
    }
    c->closed = 1;
    chan_q *qs[2] = {&c->recvq, &c->sendq};
    for (int i = 0; i < 2; i++) {
        chan_waiter *w;
        while ((w = q_claim(qs[i], NULL))) finish(w, -EPIPE);
    }
    chan_unlock(c);
    return 0;
}

void weft_chan_free(weft_chan *c) {
    if (!c) return;
    chan_lock(c);
    if (c->recvq.head || c->sendq.head)
        weft__fatal("weft_chan_free(%p): a thread still waits on the channel", (void *)c);
    chan_unlock(c);
    free(c);
}

size_t weft_chan_len(const weft_chan *c) {
    return c ? atomic_load_explicit(&c->count, memory_order_relaxed) : 0;
}

size_t weft_chan_cap(const weft_chan *c) { return c ? c->cap : 0; }

/* ------------------------------------------------------------------------ */
/* select                                                                    */
/* ------------------------------------------------------------------------ */

#define SEL_STACK 32

/* Per-thread xorshift64*: a platform thread or carrier each has its own;
 * not inlined, and never read across a park (see DESIGN: thread-locals). */
static __thread uint64_t sel_rng;

__attribute__((noinline)) static uint32_t sel_random(void) {
    uint64_t x = sel_rng;
    if (!x) x = ((uint64_t)(uintptr_t)&sel_rng * 0x9E3779B97F4A7C15ull) ^ (uint64_t)weft_now() ^ 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    sel_rng = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1Dull) >> 32);
}

/* Unlinks the records the selector queued in this round. */
static void sel_unlink(chan_waiter *recs, size_t m) {
    for (size_t k = 0; k < m; k++) {
        chan_waiter *w = &recs[k];
        if (!w->queued) continue;
        chan_lock(w->chan);
        if (w->linked) q_unlink(queue_of(w->chan, w->op), w);
        chan_unlock(w->chan);
        w->queued = 0;
    }
}

/* Pass 2 (see the top): park on every case.  order[0..m) are the shuffled
 * indices of the live cases. */
static int sel_wait(weft_case *cases, const uint32_t *order, size_t m, chan_waiter *recs, int64_t deadline,
                    const char *file, int line) {
    chan_sel sel;
    for (size_t k = 0; k < m; k++) recs[k].queued = 0;
again:
    sel.tok = weft__park_begin(&sel.p, WEFT__PK_GENERIC);
    if (!sel.tok) return -ECANCELED;
    atomic_init(&sel.fired, -1);
    sel.result = 0;
    for (size_t k = 0; k < m; k++) {
        uint32_t i = order[k];
        weft_chan *c = cases[i].chan;
        chan_lock(c);
        if (op_ready(c, cases[i].op, &sel)) {
            /* it can go now -- if we still own ourselves */
            if (!weft__park_abort(sel.p, sel.tok)) {
                chan_unlock(c); /* a partner (or a canceller) ended our park: take its outcome */
                break;
            }
            int r = op_now(c, cases[i].op, cases[i].msg, &sel);
            if (r == -EAGAIN) {
                /* the partner we saw timed out meanwhile: start over */
                chan_unlock(c);
                sel_unlink(recs, m);
                goto again;
            }
            sel_unlink(recs, m);
            cases[i].result = r;
            return (int)i;
        }
        chan_waiter *w = &recs[k];
        w->sel = &sel;
        w->buf = cases[i].msg;
        w->chan = c;
        w->index = (int)i;
        w->op = cases[i].op;
        w->queued = 1;
        q_push(queue_of(c, w->op), w);
        chan_unlock(c);
    }
    int r = chan_park(sel.p, sel.tok, deadline, WEFT__WHY_SELECT, cases, file, line);
    if (r == 0) {
        int i = await_fired(&sel);
        sel_unlink(recs, m);
        cases[i].result = sel.result;
        return i;
    }
    sel_unlink(recs, m);
    return r;
}

static int select_common(weft_case *cases, size_t n, int64_t deadline, int wait, const char *file, int line) {
    if (n && !cases) return -EINVAL;
    uint32_t order_stack[SEL_STACK];
    chan_waiter recs_stack[SEL_STACK];
    uint32_t *order = order_stack;
    chan_waiter *recs = recs_stack;
    void *heap = NULL;
    if (n > SEL_STACK) {
        if (n > UINT32_MAX) return -EINVAL;
        heap = malloc(n * (sizeof(uint32_t) + sizeof(chan_waiter)));
        if (!heap) return -ENOMEM;
        recs = heap;
        order = (uint32_t *)(recs + n);
    }
    /* the live cases, shuffled */
    size_t m = 0;
    int r;
    for (size_t i = 0; i < n; i++) {
        weft_case *cs = &cases[i];
        if (!cs->chan) continue;
        if ((cs->op != WEFT_CASE_SEND && cs->op != WEFT_CASE_RECV) ||
            (cs->op == WEFT_CASE_SEND && !cs->msg && cs->chan->es)) {
            r = -EINVAL;
            goto out;
        }
        /* inside-out Fisher-Yates; deterministic mode, on the carrier: the
         * seed's draw (det.c), so which ready case is taken replays with it
         * (a platform thread's select is outside the mode) */
        size_t j = !m ? 0
                   : __builtin_expect(WEFT__DET_ON(), 0) && weft__carrier_self() ? weft__det_choose((uint32_t)(m + 1), NULL)
                                                                              : sel_random() % (m + 1);
        if (j != m) order[m] = order[j];
        order[j] = (uint32_t)i;
        m++;
    }
    if (wait && weft_cancelled()) {
        r = -ECANCELED;
        goto out;
    }
    /* pass 1: the first case that can go now */
    for (size_t k = 0; k < m; k++) {
        uint32_t i = order[k];
        weft_chan *c = cases[i].chan;
        chan_lock(c);
        r = op_now(c, cases[i].op, cases[i].msg, NULL);
        if (r != -EAGAIN) {
            cases[i].result = r;
            r = (int)i;
            goto out;
        }
        chan_unlock(c);
    }
    r = wait ? sel_wait(cases, order, m, recs, deadline, file, line) : -EAGAIN;
out:
    free(heap);
    return r;
}

int weft__select_at(weft_case *cases, size_t n, int64_t deadline, const char *file, int line) {
    return select_common(cases, n, deadline, 1, file, line);
}

int (weft_select)(weft_case *cases, size_t n, int64_t deadline) { return select_common(cases, n, deadline, 1, NULL, 0); }

int weft_try_select(weft_case *cases, size_t n) { return select_common(cases, n, 0, 0, NULL, 0); }
