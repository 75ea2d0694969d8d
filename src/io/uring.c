/*
 * The io_uring backend: one ring per carrier.
 *
 * Ownership.  A ring is made by its carrier's OS thread and only that
 * thread touches its submission queue (IORING_SETUP_SINGLE_ISSUER): a
 * vthread running on the carrier queues its SQE there, then parks.  Other
 * threads reach a ring only through its eventfd (the kick) and the cancel
 * list (below).  A fork child never does: it unmaps and closes its copy of
 * every ring without a system call on it (uring_abandon; io.c,
 * "Fork"), since the ring is the parent's as much as its own.
 *
 * Batching.  SQEs are not submitted one by one: the carrier submits what
 * is queued when it runs out of vthreads (before spinning and before
 * sleeping), every SLOW_EVERY switches from the scheduler's periodic
 * check, and at once when BATCH are waiting.  A burst of connections that
 * each start a read then costs one io_uring_enter for the lot.
 *
 * Completions.  CQEs are read without a system call.  The ring runs with
 * COOP_TASKRUN + TASKRUN_FLAG: the kernel does not interrupt a busy carrier
 * to post completions; it raises a flag, and the next poll sees it and asks
 * for them (io_uring_get_events).  user_data is the operation's address in
 * the low 48 bits and a 16-bit generation on top, so that a late cancel
 * request can never hit a newer operation at the same address.
 *
 * A ring's completions are reaped by its own carrier only: a completion for
 * a vthread that parked there waits while that carrier runs a vthread that
 * neither blocks nor yields -- until it is preempted, if it is a foreign
 * program's (hook/trap.c; the preemption's yield polls the ring:
 * weft__yield_polled); other carriers cannot take it for it.
 *
 * Sleeping.  An idle carrier waits in io_uring_submit_and_wait_timeout with
 * its next timer as the timeout.  A read on its eventfd is always armed;
 * uring_kick writes the eventfd, which completes that read.
 *
 * Cancellation.  A vthread whose wait was interrupted must cancel on the
 * ring its operation went to.  On that ring's carrier it queues the
 * IORING_OP_ASYNC_CANCEL itself; elsewhere it appends the user_data to the
 * ring's cancel list (a mutex-guarded array) and kicks the ring's carrier,
 * which queues the cancels on its next poll.  Either way the vthread then
 * waits for the original completion (io.c).
 *
 * Closing (the rest is io.c's).  uring_cancel_fd asks every ring to
 * cancel the operations keyed on an fd (IORING_OP_ASYNC_CANCEL with
 * IORING_ASYNC_CANCEL_FD | _ALL): its own directly, the others through
 * their cancel lists and a kick.  An operation that ends with -ECANCELED
 * though its own wait was not interrupted was ended so and returns -EBADF.
 * Kernels before 5.19 cannot cancel by fd (probed at start).
 * The kernel resolves a cancel-by-fd's number to a file when the request is
 * submitted, not when it was asked for: a request still in the list of a
 * ring whose carrier is busy in a vthread would, once the number is closed
 * and reused, cancel the new file's operations.  So a ring's carrier keeps
 * its list's lock from taking the requests until io_uring_enter has
 * submitted them (an ASYNC_CANCEL acts during the submission), and the
 * closer, once no call uses the fd, withdraws what is still in the lists
 * (uring_closing) before close(2): after that no ring acts on the number.
 * A close therefore waits only for the rings that have an operation on the
 * fd, never for an idle one or a busy one that has none.  A ring's list
 * holds one request per fd however often a close asks.
 *
 * Sends.  A send almost always finds room in the socket buffer, so a
 * vthread's send (uring_exec) first tries once with MSG_DONTWAIT -- a
 * system call, but no ring round trip, park or timer -- and only a full
 * buffer sends it through the ring.  (The async layer's sends do the
 * same, as this backend's kernel_ops say it may.)
 *
 * The interface (io.h, struct weft__io_ops): weft__io_uring at the end.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define RING_ENTRIES 256
#define CQ_ENTRIES 8192
#define BATCH 32
#define TAG_EFD 1
#define TAG_CANCEL 2
#define PTR_MASK ((UINT64_C(1) << 48) - 1)

#define MAX_RINGS 1024

/* A cancellation another thread asks of a ring: one operation (its
 * user_data), or, with fd >= 0, every operation on fd. */
struct cancel_req {
    uint64_t ud;
    int fd;
};

typedef struct uring_poller {
    struct weft__poller base;
    struct io_uring ring;
    int efd;
    uint64_t efd_buf;
    int efd_armed;
    int pending; /* SQEs queued, not yet submitted */
    uint16_t gen;
    pthread_mutex_t cancel_lock;
    _Atomic int ncancel;
    struct cancel_req *cancels;
    int cancel_cap;
} uring_poller;

static int cancel_fd_ok; /* the kernel cancels by fd (probed) */
static int futex_ok;     /* the kernel has IORING_OP_FUTEX_WAIT (6.7; probed) */

/* (liburing 2.3's headers predate the futex operations: the kernel's ABI) */
#define WEFT_IORING_OP_FUTEX_WAIT 51
#define WEFT_FUTEX2_SIZE_U32 0x02
#define WEFT_FUTEX2_PRIVATE 128

/* every ring, for uring_cancel_fd */
static pthread_mutex_t rings_lock = PTHREAD_MUTEX_INITIALIZER;
static uring_poller *rings[MAX_RINGS];
static int rings_hi; /* rings[] is empty from here on */

static void *probe_main(void *arg) {
    int *res = arg;
    struct io_uring r;
    int e = io_uring_queue_init(2, &r, 0);
    if (e < 0) {
        *res = e;
        return NULL;
    }
    /* the ops weft needs (all in Linux 5.6+); a kernel without them is
     * treated as having no io_uring */
    struct io_uring_probe *pr = io_uring_get_probe_ring(&r);
    int ok = 1;
    futex_ok = 0;
    if (pr) {
        int ops[] = {IORING_OP_READ, IORING_OP_WRITE, IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_RECV,
                     IORING_OP_SEND, IORING_OP_ACCEPT, IORING_OP_CONNECT, IORING_OP_POLL_ADD,
                     IORING_OP_ASYNC_CANCEL, IORING_OP_FSYNC};
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
            if (!io_uring_opcode_supported(pr, ops[i])) ok = 0;
        futex_ok = io_uring_opcode_supported(pr, WEFT_IORING_OP_FUTEX_WAIT);
        io_uring_free_probe(pr);
    }
    /* cancel-by-fd (5.19): a key that matches nothing answers -ENOENT, a
     * kernel that does not know the flag -EINVAL.  It is also the probe's
     * io_uring_enter: a filter that lets a ring be made but not entered
     * (seccomp can forbid each call on its own) means no io_uring. */
    cancel_fd_ok = 0;
    int err = ok ? 0 : -ENOSYS;
    if (ok) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&r);
        struct io_uring_cqe *cqe;
        if (sqe) {
            io_uring_prep_cancel_fd(sqe, r.ring_fd, IORING_ASYNC_CANCEL_ALL);
            int k = io_uring_submit(&r);
            if (k == 1 && io_uring_wait_cqe(&r, &cqe) == 0) {
                cancel_fd_ok = cqe->res == -ENOENT || cqe->res == 0;
                io_uring_cqe_seen(&r, cqe);
            } else if (k < 0) {
                err = k;
            }
        }
    }
    io_uring_queue_exit(&r);
    *res = err;
    return NULL;
}

/* The probe runs on a thread of its own: the kernel tears a ring down in
 * the background and then interrupts the thread that made it (task work),
 * which would surface as one spurious EINTR in the caller's next blocking
 * system call. */
static int uring_start(void) {
    int res = -ENOSYS;
    pthread_t th;
    if (pthread_create(&th, NULL, probe_main, &res) != 0) {
        probe_main(&res);
        return res;
    }
    pthread_join(th, NULL);
    return res;
}

static int can_cancel_fd(void) { return cancel_fd_ok; }

static struct io_uring_sqe *get_sqe(uring_poller *pl) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&pl->ring);
    while (!sqe) {
        io_uring_submit(&pl->ring);
        pl->pending = 0;
        sqe = io_uring_get_sqe(&pl->ring);
    }
    pl->pending++;
    return sqe;
}

static void arm_efd(uring_poller *pl) {
    struct io_uring_sqe *sqe = get_sqe(pl);
    io_uring_prep_read(sqe, pl->efd, &pl->efd_buf, sizeof pl->efd_buf, 0);
    io_uring_sqe_set_data64(sqe, TAG_EFD);
    pl->efd_armed = 1;
}

static struct weft__poller *uring_new(int index, int *err) {
    uring_poller *pl = calloc(1, sizeof *pl);
    if (!pl) {
        *err = -ENOMEM;
        return NULL;
    }
    pl->base.ops = &weft__io_uring;
    pl->base.index = index;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN |
              IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SUBMIT_ALL;
    p.cq_entries = CQ_ENTRIES;
    int e = io_uring_queue_init_params(RING_ENTRIES, &pl->ring, &p);
    if (e == -EINVAL) { /* an older kernel: the plain ring */
        memset(&p, 0, sizeof p);
        p.flags = IORING_SETUP_CQSIZE;
        p.cq_entries = CQ_ENTRIES;
        e = io_uring_queue_init_params(RING_ENTRIES, &pl->ring, &p);
    }
    if (e < 0) {
        *err = e;
        free(pl);
        return NULL;
    }
    /* (io_uring_queue_exit closes it: disowned first; the maps stay valid
     * if weft__fd_own moves it, and liburing enters through ring_fd
     * unless the ring is registered, which it is not) */
    pl->ring.ring_fd = pl->ring.enter_ring_fd = weft__fd_own(pl->ring.ring_fd);
    pl->efd = weft__fd_own(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (pl->efd < 0) {
        *err = -errno;
        weft__fd_disown(pl->ring.ring_fd);
        io_uring_queue_exit(&pl->ring);
        free(pl);
        return NULL;
    }
    pthread_mutex_init(&pl->cancel_lock, NULL);
    arm_efd(pl);
    io_uring_submit(&pl->ring);
    pl->pending = 0;
    pthread_mutex_lock(&rings_lock);
    if (index >= 0 && index < MAX_RINGS) {
        rings[index] = pl;
        if (index >= rings_hi) rings_hi = index + 1;
    }
    pthread_mutex_unlock(&rings_lock);
    return &pl->base;
}

static void uring_free(struct weft__poller *p) {
    uring_poller *pl = (uring_poller *)p;
    pthread_mutex_lock(&rings_lock);
    if (pl->base.index >= 0 && pl->base.index < MAX_RINGS && rings[pl->base.index] == pl)
        rings[pl->base.index] = NULL;
    pthread_mutex_unlock(&rings_lock);
    weft__fd_disown(pl->ring.ring_fd);
    io_uring_queue_exit(&pl->ring);
    weft__fd_close_own(pl->efd);
    pthread_mutex_destroy(&pl->cancel_lock);
    free(pl->cancels);
    free(pl);
}

static void uring_abandon(struct weft__poller *p) {
    uring_poller *pl = (uring_poller *)p;
    /* not io_uring_queue_exit: only what it does for a ring whose fd was
     * never registered, spelt out, so that nothing here can ever make a
     * system call on the ring -- which is the parent's too */
    struct io_uring *r = &pl->ring;
    size_t sqe_size = sizeof(struct io_uring_sqe) * ((r->flags & IORING_SETUP_SQE128) ? 2 : 1);
    munmap(r->sq.sqes, sqe_size * r->sq.ring_entries);
    if (r->cq.ring_ptr && r->cq.ring_ptr != r->sq.ring_ptr) munmap(r->cq.ring_ptr, r->cq.ring_sz);
    munmap(r->sq.ring_ptr, r->sq.ring_sz);
    weft__fd_close_own(r->ring_fd);
    weft__fd_close_own(pl->efd);
}

void weft__uring_fork_child(void) {
    rings_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    memset(rings, 0, sizeof rings);
    rings_hi = 0;
}

static void uring_kick(struct weft__poller *p) {
    uring_poller *pl = (uring_poller *)p;
    eventfd_write(pl->efd, 1);
}

static void queue_cancel(uring_poller *pl, struct cancel_req c) {
    struct io_uring_sqe *sqe = get_sqe(pl);
    if (c.fd >= 0) io_uring_prep_cancel_fd(sqe, c.fd, IORING_ASYNC_CANCEL_ALL);
    else io_uring_prep_cancel64(sqe, c.ud, 0);
    io_uring_sqe_set_data64(sqe, TAG_CANCEL);
}

/* Queues the cancel list's requests and submits them before letting go of
 * the list's lock: a request no longer in the list has been acted on by the
 * kernel (an ASYNC_CANCEL runs at submission), which is what
 * uring_cancel_fd_withdraw relies on. */
static void take_cancels(uring_poller *pl) {
    if (!atomic_load_explicit(&pl->ncancel, memory_order_acquire)) return;
    pthread_mutex_lock(&pl->cancel_lock);
    int n = atomic_load_explicit(&pl->ncancel, memory_order_relaxed);
    for (int i = 0; i < n; i++) queue_cancel(pl, pl->cancels[i]);
    if (n) {
        io_uring_submit(&pl->ring);
        pl->pending = 0;
    }
    /* emptied only once submitted: a withdrawer that reads 0 without the
     * lock knows every request it made has been acted on */
    atomic_store_explicit(&pl->ncancel, 0, memory_order_release);
    pthread_mutex_unlock(&pl->cancel_lock);
}

static void flush(uring_poller *pl) {
    take_cancels(pl);
    if (pl->pending) {
        io_uring_submit(&pl->ring);
        pl->pending = 0;
    }
}

static int reap(uring_poller *pl, weft_thread **out, int max) {
    if (!io_uring_cq_ready(&pl->ring) &&
        (IO_URING_READ_ONCE(*pl->ring.sq.kflags) & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)))
        io_uring_get_events(&pl->ring);
    unsigned head, seen = 0;
    int n = 0;
    struct io_uring_cqe *cqe;
    io_uring_for_each_cqe(&pl->ring, head, cqe) {
        if (n == max) break;
        seen++;
        uint64_t ud = cqe->user_data;
        if (ud == TAG_EFD) {
            pl->efd_armed = 0;
            if (cqe->res != -EBADF && cqe->res != -ECANCELED) arm_efd(pl);
        } else if (ud != TAG_CANCEL && ud != 0) {
            weft_thread *t = weft__iop_complete((weft__iop *)(uintptr_t)(ud & PTR_MASK), cqe->res);
            if (t) out[n++] = t;
        }
    }
    io_uring_cq_advance(&pl->ring, seen);
    return n;
}

static int uring_poll(struct weft__poller *p, weft_thread **out, int max, int cheap) {
    uring_poller *pl = (uring_poller *)p;
    flush(pl);
    return reap(pl, out, max);
}

static int uring_wait(struct weft__poller *p, int64_t deadline, weft_thread **out, int max) {
    uring_poller *pl = (uring_poller *)p;
    take_cancels(pl);
    if (!pl->efd_armed) arm_efd(pl);
    if (!io_uring_cq_ready(&pl->ring)) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts, *tsp = NULL;
        if (deadline) {
            int64_t left = deadline - weft_now();
            if (left < 0) left = 0;
            ts.tv_sec = left / 1000000000;
            ts.tv_nsec = left % 1000000000;
            tsp = &ts;
        }
        int r = io_uring_submit_and_wait_timeout(&pl->ring, &cqe, 1, tsp, NULL);
        if (r >= 0 || r == -ETIME || r == -EINTR) pl->pending = 0;
    } else {
        flush(pl);
    }
    return reap(pl, out, max);
}

/* Has ring pl cancel c: at once on pl's own carrier, else through its
 * cancel list and a kick. */
static void cancel_on(uring_poller *pl, struct cancel_req c) {
    if (weft__poller_self() == &pl->base) {
        queue_cancel(pl, c);
        flush(pl);
        return;
    }
    pthread_mutex_lock(&pl->cancel_lock);
    int n = atomic_load_explicit(&pl->ncancel, memory_order_relaxed);
    if (c.fd >= 0) /* a close's repeated request for the same fd: once is enough */
        for (int i = 0; i < n; i++)
            if (pl->cancels[i].fd == c.fd) {
                pthread_mutex_unlock(&pl->cancel_lock);
                uring_kick(&pl->base);
                return;
            }
    if (n == pl->cancel_cap) {
        int cap = pl->cancel_cap ? 2 * pl->cancel_cap : 16;
        struct cancel_req *a = realloc(pl->cancels, (size_t)cap * sizeof *a);
        if (!a) weft__fatal("out of memory queueing an io_uring cancellation");
        pl->cancels = a;
        pl->cancel_cap = cap;
    }
    pl->cancels[n] = c;
    atomic_store_explicit(&pl->ncancel, n + 1, memory_order_release);
    pthread_mutex_unlock(&pl->cancel_lock);
    uring_kick(&pl->base);
}

static void uring_cancel(weft__iop *op) {
    cancel_on((uring_poller *)op->pl, (struct cancel_req){.ud = op->ud, .fd = -1});
}

/* Fills sqe for rq, or for a poll of poll_events when that is not 0. */
static void prep(struct io_uring_sqe *sqe, weft__ioreq *rq, int poll_events) {
    if (poll_events) {
        io_uring_prep_poll_add(sqe, rq->fd, (unsigned)poll_events);
        return;
    }
    switch (rq->op) {
    case IOR_READ: io_uring_prep_read(sqe, rq->fd, rq->buf, (unsigned)rq->n, (uint64_t)-1); break;
    case IOR_WRITE: io_uring_prep_write(sqe, rq->fd, rq->buf, (unsigned)rq->n, (uint64_t)-1); break;
    case IOR_PREAD: io_uring_prep_read(sqe, rq->fd, rq->buf, (unsigned)rq->n, (uint64_t)rq->off); break;
    case IOR_PWRITE: io_uring_prep_write(sqe, rq->fd, rq->buf, (unsigned)rq->n, (uint64_t)rq->off); break;
    case IOR_READV: io_uring_prep_readv(sqe, rq->fd, rq->iov, (unsigned)rq->iovcnt, (uint64_t)-1); break;
    case IOR_WRITEV: io_uring_prep_writev(sqe, rq->fd, rq->iov, (unsigned)rq->iovcnt, (uint64_t)-1); break;
    case IOR_RECV: io_uring_prep_recv(sqe, rq->fd, rq->buf, rq->n, rq->flags); break;
    case IOR_SEND: io_uring_prep_send(sqe, rq->fd, rq->buf, rq->n, rq->flags); break;
    case IOR_ACCEPT: io_uring_prep_accept(sqe, rq->fd, rq->addr, rq->addrlen, rq->flags); break;
    case IOR_CONNECT: io_uring_prep_connect(sqe, rq->fd, rq->addr, rq->caddrlen); break;
    case IOR_FSYNC: io_uring_prep_fsync(sqe, rq->fd, 0); break;
    case IOR_FDATASYNC: io_uring_prep_fsync(sqe, rq->fd, IORING_FSYNC_DATASYNC); break;
    case IOR_PREADV: io_uring_prep_readv(sqe, rq->fd, rq->iov, (unsigned)rq->iovcnt, (uint64_t)rq->off); break;
    case IOR_PWRITEV: io_uring_prep_writev(sqe, rq->fd, rq->iov, (unsigned)rq->iovcnt, (uint64_t)rq->off); break;
    case IOR_POLL: io_uring_prep_poll_add(sqe, rq->fd, (unsigned)rq->events); break;
    case IOR_FUTEX_WAIT:
        io_uring_prep_rw(WEFT_IORING_OP_FUTEX_WAIT, sqe, rq->flags, rq->buf, 0, 0);
        sqe->addr2 = (uint64_t)rq->n; /* the value */
        sqe->addr3 = (uint64_t)rq->off; /* the bitset */
        break;
    }
}

/* Queues op's SQE on the calling carrier's ring (op->p is set by the
 * caller; its other fields here). */
static void queue_op(uring_poller *pl, weft__ioreq *rq, int poll_events, weft__iop *op) {
    struct io_uring_sqe *sqe = get_sqe(pl);
    prep(sqe, rq, poll_events);
    op->res = 0;
    atomic_store_explicit(&op->done, 0, memory_order_relaxed);
    op->pl = &pl->base;
    op->ud = (uint64_t)(uintptr_t)op | ((uint64_t)++pl->gen << 48);
    io_uring_sqe_set_data64(sqe, op->ud);
    if (pl->pending >= BATCH) flush(pl);
}

/* Queues one operation for rq on the calling carrier's ring and waits. */
static int submit_wait(weft__ioreq *rq, int poll_events, int64_t deadline, weft__iop *op) {
    uring_poller *pl = (uring_poller *)weft__poller_self();
    memset(op, 0, sizeof *op);
    op->p = &weft__self()->parker;
    queue_op(pl, rq, poll_events, op);
    int intr = weft__iop_wait(op, deadline, uring_cancel);
    /* not cancelled by its own wait: weft_close ended it */
    if (!intr && op->res == -ECANCELED) op->res = -EBADF;
    return intr;
}

static void uring_submit(weft__iop *op, weft__ioreq *rq) { queue_op((uring_poller *)weft__poller_self(), rq, 0, op); }

static int uring_wait_ready(weft__iop *op) {
    weft__ioreq rq = {.op = IOR_POLL, .fd = op->fd, .events = op->events};
    queue_op((uring_poller *)weft__poller_self(), &rq, 0, op);
    return 0;
}

/* A futex wait as a ring operation (io.h, weft__futex_wait): queued like
 * any other, the vthread parked until its completion -- 0 woken, -EAGAIN
 * the word moved before the kernel looked (the submission is batched:
 * a wake in between changed the word first, so nothing is lost).  Its
 * deadline cancels it; nothing else does (a lock's waiter waits again
 * anyway: neither weft_cancel nor a signal ends it, as they did not end
 * the blocking-pool wait this replaces). */
static int uring_futex_wait(const uint32_t *addr, uint32_t val, uint32_t mask, int private, int64_t deadline) {
    if (!futex_ok) return -ENOSYS;
    weft__ioreq rq = {.op = IOR_FUTEX_WAIT,
                      .fd = -1,
                      .buf = (void *)(uintptr_t)addr,
                      .n = val,
                      .off = (off_t)mask,
                      .flags = WEFT_FUTEX2_SIZE_U32 | (private ? WEFT_FUTEX2_PRIVATE : 0)};
    uring_poller *pl = (uring_poller *)weft__poller_self();
    weft__iop op;
    memset(&op, 0, sizeof op);
    op.p = &weft__self()->parker;
    queue_op(pl, &rq, 0, &op);
    int intr = weft__iop_wait_nocancel(&op, deadline, uring_cancel);
    if (intr && op.res == -ECANCELED) return intr;
    return op.res;
}

/* The cancel's completion or the operation's own ends it, later. */
static int uring_withdraw(weft__iop *op) {
    uring_cancel(op);
    return 0;
}

static void uring_cancel_fd(int fd) {
    pthread_mutex_lock(&rings_lock);
    for (int i = 0; i < rings_hi; i++)
        if (rings[i]) cancel_on(rings[i], (struct cancel_req){.fd = fd});
    pthread_mutex_unlock(&rings_lock);
}

static void uring_cancel_fd_withdraw(int fd) {
    pthread_mutex_lock(&rings_lock);
    for (int i = 0; i < rings_hi; i++) {
        uring_poller *pl = rings[i];
        if (!pl || !atomic_load_explicit(&pl->ncancel, memory_order_acquire)) continue;
        pthread_mutex_lock(&pl->cancel_lock);
        int n = atomic_load_explicit(&pl->ncancel, memory_order_relaxed), k = 0;
        for (int j = 0; j < n; j++)
            if (pl->cancels[j].fd != fd) pl->cancels[k++] = pl->cancels[j];
        atomic_store_explicit(&pl->ncancel, k, memory_order_release);
        pthread_mutex_unlock(&pl->cancel_lock);
    }
    pthread_mutex_unlock(&rings_lock);
}

static ssize_t uring_exec(weft__ioreq *rq, int64_t deadline) {
    if (rq->op == IOR_SEND) {
        /* A send almost always finds room in the socket buffer: one
         * non-blocking attempt costs a system call but saves the ring's
         * round trip, a park and a timer.  Only when the buffer is full does
         * the send go through the ring and wait. */
        ssize_t res = send(rq->fd, rq->buf, rq->n, rq->flags | MSG_DONTWAIT);
        if (res < 0) res = -errno;
        if (res >= 0 || (res != -EAGAIN && res != -EWOULDBLOCK && res != -EINTR)) return res;
    }
    for (;;) {
        weft__iop op;
        int intr = submit_wait(rq, 0, deadline, &op);
        int res = op.res;
        if (intr) /* completed anyway? then that is the answer */
            return res == -ECANCELED || res == -EINTR || res == -EAGAIN ? intr : res;
        if (res == -EINPROGRESS && rq->op == IOR_CONNECT) { /* O_NONBLOCK socket */
            intr = submit_wait(rq, POLLOUT, deadline, &op);
            if (intr) return intr;
            if (op.res < 0) return op.res; /* closed meanwhile */
            int err = 0;
            socklen_t l = sizeof err;
            if (getsockopt(rq->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) return -errno;
            return err ? -err : 0;
        }
        if (res != -EAGAIN || rq->op == IOR_POLL) return res;
        /* an O_NONBLOCK fd: the ring answered at once; wait for readiness */
        intr = submit_wait(rq, weft__ioreq_events(rq), deadline, &op);
        if (intr) return intr;
        if (op.res < 0) return op.res;
    }
}

/* The kernel's numbers are resolved at submission (see the top): what is
 * still in a cancel list goes before close(2) frees the number. */
static void uring_closing(int fd, int asked) {
    if (asked) uring_cancel_fd_withdraw(fd);
}

/* Why io_uring cannot be used here (err: the probe's -errno), in words
 * for the one line that says so. */
static const char *uring_why(int err, char *buf, size_t n) {
    int disabled = -1;
    FILE *f = fopen("/proc/sys/kernel/io_uring_disabled", "r");
    if (f) {
        if (fscanf(f, "%d", &disabled) != 1) disabled = -1;
        fclose(f);
    }
    if ((err == -EPERM || err == -EACCES) && disabled == 2)
        snprintf(buf, n, "%s: kernel.io_uring_disabled is 2", strerror(-err));
    else if ((err == -EPERM || err == -EACCES) && disabled == 1)
        snprintf(buf, n, "%s: kernel.io_uring_disabled is 1 and this process is not in kernel.io_uring_group",
                 strerror(-err));
    else if (err == -EPERM || err == -EACCES)
        snprintf(buf, n, "%s: a seccomp filter forbids it, as container runtimes' default profiles do",
                 strerror(-err));
    else if (err == -ENOSYS)
        snprintf(buf, n, "this kernel has no io_uring, or not the operations weft needs (Linux 5.6)");
    else
        snprintf(buf, n, "%s", strerror(-err));
    return buf;
}

const struct weft__io_ops weft__io_uring = {
    .id = WEFT_IO_URING,
    .kernel_ops = 1,
    .connect_keeps_flags = 1,
    .start = uring_start,
    .why_not = uring_why,
    .can_interrupt_fd = can_cancel_fd,
    .poller_new = uring_new,
    .poller_free = uring_free,
    .poller_poll = uring_poll,
    .poller_wait = uring_wait,
    .poller_kick = uring_kick,
    .poller_abandon = uring_abandon,
    .exec = uring_exec,
    .wait_ready = uring_wait_ready,
    .submit = uring_submit,
    .withdraw = uring_withdraw,
    .interrupt_fd = uring_cancel_fd,
    .closing = uring_closing,
    .futex_wait = uring_futex_wait,
};
