/*
 * Blocking-style I/O: the public calls, the platform-thread path, the wait
 * for an operation's completion, fd use counts for weft_close, and
 * choosing the backend.  (The blocking pool is pool.c's.)
 *
 * Who does what.  A vthread's call builds a request (weft__ioreq) and hands
 * it to the backend of the runtime: io_uring (uring.c: the operation goes
 * to the ring of the carrier the vthread runs on, and the vthread parks
 * until the carrier reaps its completion) or epoll (epoll.c: the call is
 * tried without blocking and the vthread parks on the fd's readiness;
 * regular files go to the blocking pool, pool.c).  A platform thread makes
 * the plain system call, after a poll(2) for its deadline where the call
 * can wait.
 *
 * The wait (weft__iop_wait).  The operation record lives on the vthread's
 * stack.  The completer -- a carrier reaping a CQE, a carrier handling an
 * epoll event, a pool thread -- stores the result, sets `done` and then
 * ends the thread's current park of kind IO.  The vthread loops: begin an
 * IO park, look at `done`, wait.  Park word and `done` are written and then
 * the other read, both seq_cst, on each side, so either the vthread sees
 * `done` or the completer sees the park.  A completer that comes late may
 * end a later IO park of the same thread: the loop absorbs that.
 *
 * Interruption.  The first wait honours the deadline and weft_cancel.  If
 * either ends it, the backend's cancel hook runs (io_uring: an
 * IORING_OP_ASYNC_CANCEL on the operation's ring; epoll: the waiter is
 * taken off its fd) and the wait continues uncancellable until the kernel
 * is done with the buffer.  An operation that completed anyway returns its
 * result -- nothing read or written is lost; the cancellation stays sticky
 * for the next call.
 *
 * Several fds at once (weft__poll_any: hook.c's poll and select).  Each fd
 * waits through what its backend already has -- a poll operation on the
 * ring, a waiter on the fd's epoll entry -- all on the vthread's one
 * parker; the first completion ends the park and the rest are withdrawn
 * and, on the ring, awaited.  No file is made per call.  These waits are
 * not counted on their fds (weft_close does not wait for them): on epoll
 * weft_close wakes them with -EBADF like any waiter; on io_uring a poll
 * goes on with the file it had, as poll(2) does when a number is closed
 * under it, until a cancel keyed on the fd, its other fds or its deadline
 * end it.
 *
 * Closing (weft_close), as Go's and Java's sockets close: the operations
 * other vthreads have in flight on the fd end with -EBADF, and close(2)
 * waits until none is using the fd, so that no call -- not even a
 * non-blocking attempt -- ever runs on a number that close(2) has freed and
 * a socket() may have taken.  Each fd has a use count and a CLOSING bit
 * (fdu: a two-level table of atomic words, chunks of FDU_CHUNK made on
 * first use, sized by RLIMIT_NOFILE's hard limit at start).  A vthread's
 * call counts itself in for its whole length (exec); one that finds CLOSING
 * set backs out and waits (cancellably, in short naps) until it clears,
 * then goes on with the number as it is then: closed (-EBADF from the
 * kernel) or a new file's -- unless another close of the number began
 * while it waited (the word also counts closes begun): that close may have
 * closed the very file the call was made for (the number reused and closed
 * again), so the call ends with -EBADF, as one in flight would.
 * weft_close sets CLOSING, then, until the count
 * is zero, interrupts the fd's waiters now and then -- io_uring: a cancel
 * keyed on the fd on every ring (they come back -EBADF); epoll: the fd's
 * waiters woken with -EBADF -- and naps, uncancellably; then takes back the
 * io_uring cancels that busy rings have not acted on (the kernel would
 * resolve them to whatever file has the number when they are submitted:
 * uring.c), then close(2), then CLOSING cleared.  A weft_close that finds CLOSING set waits its turn
 * (the number may already be a new file's).  Not counted, so not
 * interrupted: platform threads' plain system calls.  On io_uring kernels
 * before 5.19 (no cancel-by-fd), or for fds beyond the table, weft_close
 * is close(2) alone (epoll: after waking the waiters).  Cost: two atomic
 * operations per call on a word of its own fd (no other call contends for
 * it unless it uses the same fd).  An asynchronous operation (src/async)
 * takes the number's epoch when it is called and counts itself in only
 * while in the kernel: one queued for its dispatcher when a close begins
 * ends with -EBADF without touching the number, and the close does not
 * wait for the dispatcher.
 *
 * The call site.  For weft_dump, a vthread's call stores in its own
 * descriptor the public call's return address (its caller's site), the fd
 * and the operation (exec: three relaxed stores, nothing else on the
 * path); weft_close, whose waits are naps, stores the same.  The dump
 * reads them while the vthread is parked on I/O and names the site with
 * libdw (src/observe/symbolize.c).
 *
 * Choosing the backend (weft__io_start, once per runtime start).  io_uring
 * unless told otherwise, if a probe ring can be made and entered on this
 * kernel with the operations weft needs; else epoll.  Where it cannot --
 * a seccomp filter (container runtimes' default profiles forbid
 * io_uring_setup: EPERM), kernel.io_uring_disabled (EPERM), no io_uring
 * (ENOSYS) -- auto says so in one line naming the likely cause (the
 * sysctl is read to tell it from seccomp), once per process, and uses
 * epoll; io_uring asked for by name fails the start with the kernel's
 * errno after one line of its own.  The chosen backend's table of
 * operations (io.h, struct weft__io_ops) is copied into weft__io, which
 * nothing writes while carriers run (weft__io_stop and a fork child zero
 * it); every call goes through it, and nothing outside uring.c and
 * epoll.c asks which backend runs.  A poller keeps its own backend's table
 * (p->ops): the scheduler's poll, wait and kick, and freeing it, use that.
 *
 * Fork.  A child process must never reach the parent's runtime through
 * what it inherited: the rings and epoll sets are the parent's own kernel
 * objects (an SQE or an epoll_ctl from the child would act on them).  The
 * scheduler's pthread_atfork child handler has weft__io_fork_child close
 * the child's copies of every ring, eventfd and epoll fd (a ring's memory
 * unmapped, nothing submitted; pollers are registered in PL, whose lock
 * prepare takes so that none is freed mid-fork), forget the blocking pool
 * (pool.c) and reset the backend choice: the child's next weft call probes
 * and starts afresh.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

struct weft__io_ops weft__io;

/* ------------------------------------------------------------------------ */
/* completion and waiting                                                    */
/* ------------------------------------------------------------------------ */

weft_thread *weft__iop_complete(weft__iop *op, int res) {
    weft__parker *p = op->p;
    if (!p) return op->kdone(op, res);
    op->res = res;
    atomic_store(&op->done, 1); /* seq_cst; op may be gone after this */
    if (weft__unpark_kind(p, WEFT__PK_IO) == 2) return p->vt;
    return NULL;
}

int weft__iop_wait(weft__iop *op, int64_t deadline, void (*cancel)(weft__iop *)) {
    int interrupted = 0;
    while (!atomic_load(&op->done)) {
        weft__parker *p;
        uint64_t tok;
        if (!interrupted) {
            tok = weft__park_begin(&p, WEFT__PK_IO);
            if (!tok) { /* cancelled before waiting */
                interrupted = -ECANCELED;
                if (cancel) cancel(op);
                continue;
            }
        } else {
            tok = weft__park_begin_nocancel(&p, WEFT__PK_IO);
        }
        if (atomic_load(&op->done)) {
            /* completed meanwhile: end our own park, or take the wake that
             * ended it (park_wait returns at once) */
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_IO, op, NULL, 0);
            break;
        }
        int r = weft__park_wait(p, tok, interrupted ? 0 : deadline, WEFT__WHY_IO, op, NULL, 0);
        if (r < 0 && !interrupted) {
            interrupted = r;
            if (cancel) cancel(op);
        }
    }
    return interrupted;
}

int weft__iop_wait_nocancel(weft__iop *op, int64_t deadline, void (*cancel)(weft__iop *)) {
    int interrupted = 0;
    while (!atomic_load(&op->done)) {
        weft__parker *p;
        uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_IO);
        if (atomic_load(&op->done)) {
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_IO, op, NULL, 0);
            break;
        }
        int r = weft__park_wait(p, tok, interrupted ? 0 : deadline, WEFT__WHY_IO, op, NULL, 0);
        if (r < 0 && !interrupted) {
            interrupted = r;
            if (cancel) cancel(op);
        }
    }
    return interrupted;
}

int weft__futex_wait(const uint32_t *addr, uint32_t val, uint32_t mask, int private, int64_t deadline) {
    if (!weft__io.futex_wait || !weft__self() || !weft__poller_self()) return -ENOSYS;
    return weft__io.futex_wait(addr, val, mask, private, deadline);
}

/*
 * Waiting for any of several fds (hook.c's poll and select).  Each fd
 * waits through what the backend already has -- a poll operation on the
 * carrier's ring, a waiter on the fd's entry in the shared epoll set -- all
 * on the vthread's one parker; the first completion ends the park, the
 * others are withdrawn (ring: cancelled, and their completions awaited,
 * since the records are on this stack; epoll: taken off their fd, or, if a
 * completer had taken one first, already complete under the fd's lock).
 * No file of its own: a call at the fd limit waits as well as any.
 */
static int any_done(const weft__iop *ops, size_t n, int all) {
    for (size_t i = 0; i < n; i++) {
        if (!ops[i].p) continue; /* not waited on */
        int d = atomic_load(&ops[i].done);
        if (d && !all) return 1;
        if (!d && all) return 0;
    }
    return all;
}

static void any_park(weft__iop *ops, size_t n, int all) {
    while (!any_done(ops, n, all)) {
        weft__parker *p;
        uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_IO);
        if (any_done(ops, n, all)) {
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_IO, ops, NULL, 0);
            return;
        }
        weft__park_wait(p, tok, 0, WEFT__WHY_IO, ops, NULL, 0);
    }
}

int weft__poll_any(struct pollfd *fds, size_t n, int64_t deadline) {
    weft_thread *self = weft__self();
    if (!self || !weft__poller_self()) return -EINVAL; /* vthreads only */
    weft__iop small[8], *ops = n <= 8 ? small : malloc(n * sizeof *ops);
    if (!ops) return -ENOMEM;
    /* for the dump, as exec's: a poll, on the first fd */
    for (size_t i = 0; i < n; i++)
        if (fds[i].fd >= 0) {
            atomic_store_explicit(&self->block_pc, __builtin_return_address(0), memory_order_relaxed);
            atomic_store_explicit(&self->block_fd, fds[i].fd, memory_order_relaxed);
            atomic_store_explicit(&self->block_op, (uint8_t)IOR_POLL, memory_order_relaxed);
            break;
        }
    for (size_t i = 0; i < n; i++) {
        weft__iop *op = &ops[i];
        memset(op, 0, sizeof *op);
        fds[i].revents = 0;
        if (fds[i].fd < 0) continue; /* p NULL: not waited on */
        op->p = &self->parker;
        op->fd = fds[i].fd;
        op->events = (unsigned short)fds[i].events;
        int r = weft__io.wait_ready(op); /* may complete it at once */
        if (r < 0) {
            op->res = r;
            atomic_store(&op->done, 1);
        }
    }
    int intr = 0;
    while (!any_done(ops, n, 0)) {
        weft__parker *p;
        uint64_t tok = weft__park_begin(&p, WEFT__PK_IO);
        if (!tok) {
            intr = -ECANCELED;
            break;
        }
        if (any_done(ops, n, 0)) {
            if (!weft__park_abort(p, tok)) weft__park_wait(p, tok, 0, WEFT__WHY_IO, ops, NULL, 0);
            break;
        }
        int r = weft__park_wait(p, tok, deadline, WEFT__WHY_IO, ops, NULL, 0);
        if (r < 0) {
            intr = r;
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        weft__iop *op = &ops[i];
        if (!op->p || atomic_load(&op->done)) continue;
        if (weft__io.withdraw(op)) { /* off its fd: it will not complete */
            op->res = -ECANCELED;
            atomic_store(&op->done, 1);
        }
    }
    any_park(ops, n, 1); /* the ring's completions: the records are ours */
    for (size_t i = 0; i < n; i++) {
        if (!ops[i].p) continue;
        int res = ops[i].res;
        fds[i].revents = res > 0 ? (short)res : res == -EBADF ? POLLNVAL : 0;
    }
    if (ops != small) free(ops);
    return intr ? intr : 1;
}

/* ------------------------------------------------------------------------ */
/* the platform path                                                         */
/* ------------------------------------------------------------------------ */

ssize_t weft__sys_exec(weft__ioreq *rq) {
    ssize_t r;
    do {
        switch (rq->op) {
        case IOR_READ: r = read(rq->fd, rq->buf, rq->n); break;
        case IOR_WRITE: r = write(rq->fd, rq->buf, rq->n); break;
        case IOR_PREAD: r = pread(rq->fd, rq->buf, rq->n, rq->off); break;
        case IOR_PWRITE: r = pwrite(rq->fd, rq->buf, rq->n, rq->off); break;
        case IOR_READV: r = readv(rq->fd, rq->iov, rq->iovcnt); break;
        case IOR_WRITEV: r = writev(rq->fd, rq->iov, rq->iovcnt); break;
        case IOR_PREADV: r = preadv(rq->fd, rq->iov, rq->iovcnt, rq->off); break;
        case IOR_PWRITEV: r = pwritev(rq->fd, rq->iov, rq->iovcnt, rq->off); break;
        case IOR_FDATASYNC: r = fdatasync(rq->fd); break;
        case IOR_RECV: r = recv(rq->fd, rq->buf, rq->n, rq->flags); break;
        case IOR_SEND: r = send(rq->fd, rq->buf, rq->n, rq->flags); break;
        case IOR_ACCEPT: r = accept4(rq->fd, rq->addr, rq->addrlen, rq->flags); break;
        case IOR_CONNECT:
            r = connect(rq->fd, rq->addr, rq->caddrlen);
            if (r < 0 && errno == EINTR) { /* the connection goes on: wait for it */
                struct pollfd pf = {.fd = rq->fd, .events = POLLOUT};
                while (poll(&pf, 1, -1) < 0 && errno == EINTR) {
                }
                int err = 0;
                socklen_t l = sizeof err;
                getsockopt(rq->fd, SOL_SOCKET, SO_ERROR, &err, &l);
                return err ? -err : 0;
            }
            break;
        case IOR_FSYNC: r = fsync(rq->fd); break;
        case IOR_POLL: {
            struct pollfd pf = {.fd = rq->fd, .events = (short)rq->events};
            r = poll(&pf, 1, -1);
            if (r > 0) r = pf.revents;
            break;
        }
        default: errno = EINVAL; r = -1;
        }
    } while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : r;
}

int weft__ioreq_events(const weft__ioreq *rq) {
    switch (rq->op) {
    case IOR_POLL: return rq->events;
    case IOR_WRITE:
    case IOR_WRITEV:
    case IOR_SEND:
    case IOR_CONNECT: return POLLOUT;
    default: return POLLIN;
    }
}

static int can_wait(int op) {
    return op == IOR_READ || op == IOR_WRITE || op == IOR_READV || op == IOR_WRITEV || op == IOR_RECV ||
           op == IOR_SEND || op == IOR_ACCEPT || op == IOR_POLL;
}

/* A platform thread: the plain call, blocking it.  Where the call can wait,
 * a deadline is honoured by a poll(2) first, and an O_NONBLOCK fd's EAGAIN
 * turns into a wait too, so the call blocks as documented whatever the fd's
 * flags (not for connect and files). */
static ssize_t platform_exec(weft__ioreq *rq, int64_t deadline) {
    /* an executor's pool thread can be cancelled: it waits in ppoll on its
     * cancel eventfd too (sched.h, weft__pcancel_*) */
    int cfd = weft__pcancel_fd();
    if (cfd >= 0 && weft_cancelled()) return -ECANCELED;
    if (!can_wait(rq->op)) return weft__sys_exec(rq);
    int ev = weft__ioreq_events(rq);
    int must_wait = deadline != 0 || cfd >= 0;
    for (;;) {
        if (must_wait) {
            struct pollfd pf[2] = {{.fd = rq->fd, .events = (short)ev}, {.fd = cfd, .events = POLLIN}};
            struct timespec ts, *tsp = NULL;
            if (deadline) {
                int64_t left = deadline - weft_now();
                if (left <= 0) return -ETIMEDOUT;
                ts.tv_sec = left / 1000000000;
                ts.tv_nsec = left % 1000000000;
                tsp = &ts;
            }
            int r = ppoll(pf, cfd >= 0 ? 2 : 1, tsp, NULL);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return -errno;
            if (r == 0) return -ETIMEDOUT;
            if (cfd >= 0 && pf[1].revents) return -ECANCELED;
            if (rq->op == IOR_POLL) return pf[0].revents;
        }
        ssize_t r = weft__sys_exec(rq);
        if (r != -EAGAIN) return r;
        must_wait = 1;
    }
}

/* ------------------------------------------------------------------------ */
/* fd use counts, for weft_close                                             */
/* ------------------------------------------------------------------------ */

/* A word: bits 0-23 the calls using the fd, 24-62 the number of closes
 * begun (its epoch, mod 2^39), bit 63 CLOSING.  The epoch is wide because
 * an asynchronous operation keeps the one it saw when it was called for as
 * long as it waits in its dispatcher's inbox (src/async/async.c): it must
 * not come round again however many times the number is closed and reused
 * meanwhile (with 7 bits, 128 closes of the number while an operation
 * waited brought it round, and the operation ran on the new file). */
#define FDU_CHUNK 4096u
#define FDU_CLOSING (1ull << 63)
#define FDU_USES 0xFFFFFFull
#define FDU_EPOCH_MASK ((1ull << 39) - 1)
#define FDU_EPOCH(w) ((int64_t)(((w) >> 24) & FDU_EPOCH_MASK))
#define FDU_MAX_FDS (1u << 24)

static _Atomic(_Atomic uint64_t *) *fdu_top;
static size_t fdu_nchunks;

static void fdu_start(void) {
    struct rlimit rl;
    size_t maxfd = 1u << 20;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY) maxfd = (size_t)rl.rlim_max;
    if (maxfd > FDU_MAX_FDS) maxfd = FDU_MAX_FDS;
    fdu_nchunks = (maxfd + FDU_CHUNK - 1) / FDU_CHUNK;
    fdu_top = calloc(fdu_nchunks, sizeof *fdu_top);
    if (!fdu_top) fdu_nchunks = 0; /* no counts: weft_close is close(2) alone */
}

static void fdu_stop(void) {
    for (size_t i = 0; i < fdu_nchunks; i++) free((void *)atomic_load(&fdu_top[i]));
    free(fdu_top);
    fdu_top = NULL;
    fdu_nchunks = 0;
}

/* fd's word; NULL if fd is not counted (create: make its chunk) */
static _Atomic uint64_t *fdu_slot(int fd, int create) {
    if (fd < 0 || (size_t)fd / FDU_CHUNK >= fdu_nchunks) return NULL;
    _Atomic(_Atomic uint64_t *) *top = &fdu_top[(size_t)fd / FDU_CHUNK];
    _Atomic uint64_t *ch = atomic_load_explicit(top, memory_order_acquire);
    if (!ch) {
        if (!create) return NULL;
        _Atomic uint64_t *fresh = calloc(FDU_CHUNK, sizeof *fresh);
        if (!fresh) return NULL;
        _Atomic uint64_t *none = NULL;
        if (atomic_compare_exchange_strong(top, &none, fresh)) {
            ch = fresh;
        } else {
            free((void *)fresh);
            ch = none;
        }
    }
    return &ch[(size_t)fd % FDU_CHUNK];
}

/* A short wait that neither a cancellation nor a deadline cuts short. */
static void nap(int64_t ns) {
    weft__parker *p;
    uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_GENERIC);
    weft__park_wait(p, tok, weft_now() + ns, WEFT__WHY_IO, NULL, __FILE__, __LINE__);
}

/* One that they do: 0 after ns, or -ECANCELED / -ETIMEDOUT. */
static int nap_cancellable(int64_t ns, int64_t deadline) {
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    int64_t until = weft_now() + ns;
    int own = deadline && deadline <= until;
    int r = weft__park_wait(p, tok, own ? deadline : until, WEFT__WHY_IO, NULL, __FILE__, __LINE__);
    if (r == -ETIMEDOUT && !own) return 0; /* the nap's own end, not a deadline */
    return r;
}

/* fd's epoch now (io.h): an asynchronous operation's hold on the number,
 * taken when it is called.  A chunk not made yet is all zeros: no close of
 * its numbers has begun. */
int64_t weft__fd_epoch(int fd) {
    if (!fdu_top || fd < 0 || (size_t)fd / FDU_CHUNK >= fdu_nchunks) return -1;
    _Atomic uint64_t *u = fdu_slot(fd, 0);
    return u ? FDU_EPOCH(atomic_load_explicit(u, memory_order_acquire)) : 0;
}

/* One try at counting in on fd, without waiting (io.h): the asynchronous
 * operations' entry, and each round of fd_enter's. */
_Atomic uint64_t *weft__fd_enter_nowait(int fd, int64_t *epoch, int *err) {
    *err = 0;
    _Atomic uint64_t *u = fdu_top ? fdu_slot(fd, 1) : NULL;
    if (!u) return NULL;
    uint64_t w = atomic_fetch_add_explicit(u, 1, memory_order_acq_rel);
    int64_t e = FDU_EPOCH(w);
    if ((w & FDU_CLOSING) || (*epoch >= 0 && e != *epoch)) {
        atomic_fetch_sub_explicit(u, 1, memory_order_release);
        /* A close under way that began before this operation was called
         * (or the one it has been waiting for): try again once it is over,
         * with the number as it is then -- as fd_enter waits.  Any other
         * close may have closed this operation's own file. */
        if ((w & FDU_CLOSING) && (*epoch < 0 || e == *epoch)) {
            *epoch = e;
            *err = -EAGAIN;
        } else {
            *err = -EBADF;
        }
        return NULL;
    }
    *epoch = e;
    return u;
}

/* Counts a call in on fd, after any close under way; *err on interruption.
 * A call that finds a close under way waits for it and then goes on with
 * the number as it is then -- unless another close of the number began
 * meanwhile: the file it was called for may be the one that close closed
 * (the number was reused by the time it was called, and closed again while
 * it waited), so it fails with -EBADF, as a call in flight on a closed fd
 * does, rather than run on whatever file has the number now. */
static _Atomic uint64_t *fd_enter(int fd, int64_t deadline, int *err) {
    int64_t epoch = -1;
    for (;;) {
        _Atomic uint64_t *u = weft__fd_enter_nowait(fd, &epoch, err);
        if (*err != -EAGAIN) return u;
        if ((*err = nap_cancellable(20000, deadline)) != 0) return NULL;
    }
}

static void fd_leave(_Atomic uint64_t *u) {
    if (u) atomic_fetch_sub_explicit(u, 1, memory_order_release);
}

void weft__fd_leave(_Atomic uint64_t *u) { fd_leave(u); }

static ssize_t exec(weft__ioreq *rq) {
    int r = weft__ensure_init();
    if (r < 0) return r;
    int64_t deadline = weft__effective_deadline(0);
    if (rq->op == IOR_POLL && rq->n) /* weft_poll's own deadline rides in n */
        deadline = deadline && deadline < (int64_t)rq->n ? deadline : (int64_t)rq->n;
    if (rq->op != IOR_POLL && rq->n > (1u << 30)) rq->n = 1u << 30; /* results are int32 in a CQE */
    weft_thread *self = weft__self();
    if (!self || !weft__poller_self()) return platform_exec(rq, deadline);
    /* for the dump: what this call waits for, and where it was made
     * (relaxed stores to the vthread's own descriptor, read racily) */
    atomic_store_explicit(&self->block_pc, rq->pc, memory_order_relaxed);
    atomic_store_explicit(&self->block_fd, rq->fd, memory_order_relaxed);
    atomic_store_explicit(&self->block_op, (uint8_t)rq->op, memory_order_relaxed);
    if (weft_cancelled()) return -ECANCELED;
    if (deadline && deadline <= weft_now()) return -ETIMEDOUT;
    int err;
    _Atomic uint64_t *use = fd_enter(rq->fd, deadline, &err);
    if (err) return err;
    ssize_t res = weft__io.exec(rq, deadline);
    fd_leave(use);
    return res;
}

/* ------------------------------------------------------------------------ */
/* the API                                                                   */
/* ------------------------------------------------------------------------ */

/* The public call's return address: the site the dump names (see "The
 * call site" above).  Read in the public function itself, so that neither
 * inlining nor a tail call inside weft moves it. */
#define CALLER __builtin_return_address(0)

static ssize_t sendfile_at(int out, int in, off_t *off, size_t n, const void *pc);

ssize_t weft_read(int fd, void *buf, size_t n) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_READ, .fd = fd, .buf = buf, .n = n};
    return exec(&rq);
}
ssize_t weft_write(int fd, const void *buf, size_t n) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_WRITE, .fd = fd, .buf = (void *)buf, .n = n};
    return exec(&rq);
}
static ssize_t write_all_at(int fd, const void *buf, size_t n, const void *pc) {
    size_t done = 0;
    while (done < n) {
        weft__ioreq rq = {.pc = pc, .op = IOR_WRITE, .fd = fd, .buf = (char *)buf + done, .n = n - done};
        ssize_t r = exec(&rq);
        if (r < 0) return done ? (ssize_t)done : r;
        if (r == 0) return done ? (ssize_t)done : -EIO;
        done += (size_t)r;
    }
    return (ssize_t)done;
}
ssize_t weft_write_all(int fd, const void *buf, size_t n) { return write_all_at(fd, buf, n, CALLER); }
ssize_t weft_pread(int fd, void *buf, size_t n, off_t off) {
    if (off < 0) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_PREAD, .fd = fd, .buf = buf, .n = n, .off = off};
    return exec(&rq);
}
ssize_t weft_pwrite(int fd, const void *buf, size_t n, off_t off) {
    if (off < 0) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_PWRITE, .fd = fd, .buf = (void *)buf, .n = n, .off = off};
    return exec(&rq);
}
ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt) {
    if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_READV, .fd = fd, .iov = iov, .iovcnt = iovcnt};
    return exec(&rq);
}
ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt) {
    if (iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_WRITEV, .fd = fd, .iov = iov, .iovcnt = iovcnt};
    return exec(&rq);
}
ssize_t weft_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off) {
    if (off < 0 || iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_PREADV, .fd = fd, .iov = iov, .iovcnt = iovcnt, .off = off};
    return exec(&rq);
}
ssize_t weft_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off) {
    if (off < 0 || iovcnt < 0 || iovcnt > IOV_MAX) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_PWRITEV, .fd = fd, .iov = iov, .iovcnt = iovcnt, .off = off};
    return exec(&rq);
}
ssize_t weft_recv(int fd, void *buf, size_t n, int flags) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_RECV, .fd = fd, .buf = buf, .n = n, .flags = flags};
    return exec(&rq);
}
ssize_t weft_send(int fd, const void *buf, size_t n, int flags) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_SEND, .fd = fd, .buf = (void *)buf, .n = n, .flags = flags};
    return exec(&rq);
}
int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags) {
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_ACCEPT, .fd = fd, .addr = addr, .addrlen = addrlen, .flags = flags};
    return (int)exec(&rq);
}
int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_CONNECT, .fd = fd, .addr = (struct sockaddr *)addr, .caddrlen = addrlen};
    return (int)exec(&rq);
}

/* Per-call deadlines (weft_X_until): the call under the earlier of its
 * deadline and the thread's own, which is left as it was (the thread's
 * deadline is what exec's waits honour).  Each reads its own CALLER, so
 * the dump names its caller's line. */
static int64_t until_begin(int64_t d) {
    int64_t saved = weft_deadline_set(d);
    if (saved > 0 && (d <= 0 || saved < d)) weft_deadline_set(saved);
    return saved;
}
static ssize_t exec_until(weft__ioreq *rq, int64_t d) {
    int64_t saved = until_begin(d);
    ssize_t r = exec(rq);
    weft_deadline_set(saved);
    return r;
}
ssize_t weft_read_until(int fd, void *buf, size_t n, int64_t deadline_ns) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_READ, .fd = fd, .buf = buf, .n = n};
    return exec_until(&rq, deadline_ns);
}
ssize_t weft_write_until(int fd, const void *buf, size_t n, int64_t deadline_ns) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_WRITE, .fd = fd, .buf = (void *)buf, .n = n};
    return exec_until(&rq, deadline_ns);
}
ssize_t weft_write_all_until(int fd, const void *buf, size_t n, int64_t deadline_ns) {
    int64_t saved = until_begin(deadline_ns);
    ssize_t r = write_all_at(fd, buf, n, CALLER);
    weft_deadline_set(saved);
    return r;
}
ssize_t weft_recv_until(int fd, void *buf, size_t n, int flags, int64_t deadline_ns) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_RECV, .fd = fd, .buf = buf, .n = n, .flags = flags};
    return exec_until(&rq, deadline_ns);
}
ssize_t weft_send_until(int fd, const void *buf, size_t n, int flags, int64_t deadline_ns) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_SEND, .fd = fd, .buf = (void *)buf, .n = n, .flags = flags};
    return exec_until(&rq, deadline_ns);
}
int weft_accept_until(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags, int64_t deadline_ns) {
    if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_ACCEPT, .fd = fd, .addr = addr, .addrlen = addrlen, .flags = flags};
    return (int)exec_until(&rq, deadline_ns);
}
int weft_connect_until(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_CONNECT, .fd = fd, .addr = (struct sockaddr *)addr, .caddrlen = addrlen};
    return (int)exec_until(&rq, deadline_ns);
}
ssize_t weft_sendfile_until(int out, int in, off_t *off, size_t n, int64_t deadline_ns) {
    int64_t saved = until_begin(deadline_ns);
    ssize_t r = sendfile_at(out, in, off, n, CALLER);
    weft_deadline_set(saved);
    return r;
}
int weft_poll(int fd, int events, int64_t deadline_ns) {
    if (deadline_ns < 0) return -EINVAL;
    weft__ioreq rq = {.pc = CALLER, .op = IOR_POLL, .fd = fd, .events = events, .n = (size_t)deadline_ns};
    return (int)exec(&rq);
}
int weft_fsync(int fd) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_FSYNC, .fd = fd};
    return (int)exec(&rq);
}

int weft_fdatasync(int fd) {
    weft__ioreq rq = {.pc = CALLER, .op = IOR_FDATASYNC, .fd = fd};
    return (int)exec(&rq);
}

int weft_close(int fd) {
    if (fd < 0) return -EBADF;
    int asked = 0;
    weft_thread *self = weft__self();
    if (self) { /* for the dump, should the close wait (below) */
        atomic_store_explicit(&self->block_pc, CALLER, memory_order_relaxed);
        atomic_store_explicit(&self->block_fd, fd, memory_order_relaxed);
        atomic_store_explicit(&self->block_op, (uint8_t)IOR_CLOSE, memory_order_relaxed);
    }
    /* create: a call's fd_enter may be making fd's chunk right now */
    _Atomic uint64_t *u = fdu_top ? fdu_slot(fd, 1) : NULL;
    if (u) {
        /* Another weft_close of the number under way: wait for it to end.
         * Mostly it is not the same file's: close(2) frees the number a
         * moment before CLOSING clears, and an accept() may have given it
         * to a new connection whose owner is closing it already.  (Closing
         * the same file twice gets -EBADF from close(2), as usual.) */
        for (uint64_t w = atomic_load_explicit(u, memory_order_relaxed);;) {
            if (w & FDU_CLOSING) {
                nap(20000);
                w = atomic_load_explicit(u, memory_order_relaxed);
                continue;
            }
            uint64_t to = (w & FDU_USES) | FDU_CLOSING | ((((uint64_t)FDU_EPOCH(w) + 1) & FDU_EPOCH_MASK) << 24);
            if (atomic_compare_exchange_weak_explicit(u, &w, to, memory_order_acq_rel, memory_order_relaxed)) break;
        }
        /* until no call uses fd: interrupt the waits now and then (a call
         * may begin its wait after an interruption), nap in between */
        for (int round = 0; atomic_load_explicit(u, memory_order_acquire) & FDU_USES; round++) {
            if (round % 16 == 0) {
                weft__io.interrupt_fd(fd); /* (see "Closing" above) */
                asked = 1;
            }
            nap(20000);
        }
    }
    /* What the backend keeps about the number goes: an interruption that a
     * ring was asked for and has not acted on yet (its carrier busy in a
     * vthread) would act later, keyed on the number, and so on whatever
     * file has the number then; epoll's registration and the fd's kind.
     * Nothing uses fd now, so nothing is lost. */
    if (weft__io.closing) weft__io.closing(fd, asked);
    /* close(2) is not retried on EINTR: the fd is gone either way on Linux */
    int r = close(fd) < 0 && errno != EINTR ? -errno : 0;
    /* a call that came meanwhile waited for this; it now finds the number
     * closed, or a new file's if a socket() took it */
    if (u) atomic_fetch_and_explicit(u, ~FDU_CLOSING, memory_order_release);
    return r;
}

ssize_t weft_sendfile(int out, int in, off_t *off, size_t n) { return sendfile_at(out, in, off, n, CALLER); }

/* pc: the dump's call site, for the waits below */
static ssize_t sendfile_at(int out, int in, off_t *off, size_t n, const void *pc) {
    if (!off) return -EINVAL;
    if (n == 0) return 0;
    int fl = fcntl(out, F_GETFL);
    if (fl < 0) return -errno;
    if (!(fl & O_NONBLOCK) && weft_self()) {
        /* a blocking socket would hold the carrier: copy through a buffer */
        char buf[16384];
        size_t want = n < sizeof buf ? n : sizeof buf;
        weft__ioreq rq = {.pc = pc, .op = IOR_PREAD, .fd = in, .buf = buf, .n = want, .off = *off};
        ssize_t r = exec(&rq);
        if (r <= 0) return r;
        ssize_t w = write_all_at(out, buf, (size_t)r, pc);
        if (w > 0) *off += w;
        return w;
    }
    for (;;) {
        int err = 0;
        /* counted in on out, as exec's calls are, so a weft_close waits */
        _Atomic uint64_t *use = weft_self() ? fd_enter(out, weft__effective_deadline(0), &err) : NULL;
        if (err) return err;
        ssize_t r = sendfile(out, in, off, n);
        int e = errno;
        fd_leave(use);
        if (r >= 0) return r;
        if (e == EINTR) continue;
        if (e != EAGAIN) return -e;
        weft__ioreq rq = {.pc = pc, .op = IOR_POLL, .fd = out, .events = POLLOUT};
        int p = (int)exec(&rq);
        if (p < 0) return p;
    }
}

int weft_io_backend(void) {
    int r = weft__ensure_init();
    return r < 0 ? r : weft__io.id;
}

/* ------------------------------------------------------------------------ */
/* the poller, as the scheduler sees it                                      */
/* ------------------------------------------------------------------------ */

static int env_mode(void) {
    const char *v = getenv("WEFT_IO");
    if (!v || !*v || !strcmp(v, "auto")) return WEFT_IO_AUTO;
    if (!strcmp(v, "uring") || !strcmp(v, "io_uring")) return WEFT_IO_URING;
    if (!strcmp(v, "epoll")) return WEFT_IO_EPOLL;
    /* weft_init fails, as on any bad WEFT_* value (arch.h, weft__env_long) */
    fprintf(stderr, "weft: WEFT_IO=%s is not auto, uring or epoll\n", v);
    return -EINVAL;
}

int weft__io_start(int mode) {
    if (mode < 0 || mode > WEFT_IO_EPOLL) return -EINVAL;
    int by_env = mode == WEFT_IO_AUTO;
    if (mode == WEFT_IO_AUTO) mode = env_mode();
    if (mode < 0) return mode;
    if (mode == WEFT_IO_AUTO && RUNNING_ON_VALGRIND) {
        /* Under valgrind (3.19 here) a carrier asleep in io_uring_enter
         * stops every other thread for good (its scheduler lock is not let
         * go for that call: weft_init never returned); it is for
         * epoll_pwait2. */
        static _Atomic int vg_logged;
        if (!atomic_exchange(&vg_logged, 1))
            fprintf(stderr, "weft: running under valgrind, whose io_uring_enter blocks every thread: using epoll\n");
        mode = WEFT_IO_EPOLL;
    }
    const struct weft__io_ops *b = NULL;
    if (mode != WEFT_IO_EPOLL) {
        int r = weft__io_uring.start();
        if (r == 0) {
            b = &weft__io_uring;
        } else {
            char why[200];
            if (mode == WEFT_IO_URING) { /* asked for by name: no fallback, and say why, once */
                static _Atomic int told;
                if (!atomic_exchange(&told, 1))
                    fprintf(stderr, "weft: %s asks for io_uring, which cannot be used here (%s); "
                                    "use WEFT_IO=epoll or auto\n",
                            by_env ? "WEFT_IO=uring" : "weft_runtime_opts.io = WEFT_IO_URING",
                            weft__io_uring.why_not(r, why, sizeof why));
                return r;
            }
            static _Atomic int logged;
            if (!atomic_exchange(&logged, 1))
                fprintf(stderr, "weft: io_uring is not available here (%s): using epoll\n",
                        weft__io_uring.why_not(r, why, sizeof why));
        }
    }
    if (!b) {
        int r = weft__io_epoll.start();
        if (r < 0) return r;
        b = &weft__io_epoll;
    }
    if (b->can_interrupt_fd()) fdu_start();
    weft__io = *b; /* no carrier runs yet: they all see it */
    return 0;
}

void weft__io_drain(void) { weft__pool_stop(); }

void weft__io_stop(void) {
    weft__pool_stop();
    if (weft__io.stop) weft__io.stop();
    fdu_stop();
    weft__io = (struct weft__io_ops){0};
}

/* Every live poller, for a fork child to forget (see "Fork" above). */
static struct {
    pthread_mutex_t lock;
    weft__poller *p[WEFT__MAX_CARRIERS];
} PL = {.lock = PTHREAD_MUTEX_INITIALIZER};

weft__poller *weft__poller_new(int index, int *err) {
    *err = 0;
    weft__poller *p = NULL;
    if (weft__io.poller_new) p = weft__io.poller_new(index, err);
    if (p && index >= 0 && index < WEFT__MAX_CARRIERS) {
        pthread_mutex_lock(&PL.lock);
        PL.p[index] = p;
        pthread_mutex_unlock(&PL.lock);
    }
    return p;
}
void weft__poller_free(weft__poller *p) {
    pthread_mutex_lock(&PL.lock);
    if (p->index >= 0 && p->index < WEFT__MAX_CARRIERS && PL.p[p->index] == p) PL.p[p->index] = NULL;
    pthread_mutex_unlock(&PL.lock);
    p->ops->poller_free(p);
}

/* ------------------------------------------------------------------------ */
/* fork                                                                      */
/* ------------------------------------------------------------------------ */

/* No poller is freed while a fork copies the process (PL's lock). */
void weft__io_fork_prepare(void) { pthread_mutex_lock(&PL.lock); }
void weft__io_fork_parent(void) { pthread_mutex_unlock(&PL.lock); }

void weft__io_fork_child(void) {
    for (int i = 0; i < WEFT__MAX_CARRIERS; i++) {
        weft__poller *p = PL.p[i];
        if (!p) continue;
        p->ops->poller_abandon(p);
        weft__fork_keep(p);
        PL.p[i] = NULL;
    }
    PL.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__uring_fork_child();
    weft__epoll_fork_child();
    weft__fork_keep((void *)fdu_top);
    fdu_top = NULL;
    fdu_nchunks = 0;
    weft__pool_fork_child();
    weft__io = (struct weft__io_ops){0};
}

/* The scheduler's calls, on the poller's backend. */
int weft__poller_poll(weft__poller *p, weft_thread **out, int max, int cheap) {
    return p->ops->poller_poll(p, out, max, cheap);
}
int weft__poller_wait(weft__poller *p, int64_t deadline, weft_thread **out, int max) {
    return p->ops->poller_wait(p, deadline, out, max);
}
void weft__poller_kick(weft__poller *p) { p->ops->poller_kick(p); }
