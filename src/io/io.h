/*
 * io layer internals shared by its files (io.c: the API, the platform
 * path, weft_close's use counts, choosing the backend; pool.c: the blocking
 * pool; the backends uring.c and epoll.c) and by the async layer above.
 */
#ifndef WEFT_IO_H
#define WEFT_IO_H

#include "../sched/sched.h"

#include <poll.h>
#include <stdatomic.h>
#include <sys/types.h>

/* One operation in flight for a vthread.  Lives on the vthread's stack until
 * `done` is set: whoever completes it reads p first, stores res, sets done,
 * and after that touches only the parker (weft__unpark_kind), never op. */
typedef struct weft__iop {
    weft__parker *p;
    /* p NULL: an asynchronous operation's (the async layer's), whose
     * kernel part ended with res; returns what to make runnable, or NULL */
    weft_thread *(*kdone)(struct weft__iop *op, int res);
    int32_t res;
    _Atomic int done;
    struct weft__poller *pl; /* the poller it was submitted to */
    uint64_t ud;             /* uring: its user_data (pointer + generation) */
    /* epoll: the readiness wait's fd and events */
    int fd;
    int events;
    struct weft__iop *next;  /* epoll: waiters on one fd */
} weft__iop;

/* Completes op with res; returns the vthread to make runnable, or NULL.
 * An op with p == NULL is an asynchronous one's (src/async/async.c): its
 * kdone takes it from there. */
weft_thread *weft__iop_complete(weft__iop *op, int res);

/* For the async layer above (src/async/async.c).  fd's epoch (io.c, "Closing": the number of closes of it begun), or -1
 * if fd is not counted.  An asynchronous operation takes it when it is
 * called: its hold on the number while it waits for its dispatcher. */
int64_t weft__fd_epoch(int fd);
/* An asynchronous operation's count on fd, taken without waiting.
 * *epoch: the operation's (weft__fd_epoch at its call; -1: none yet, then
 * set).  NULL with *err: -EAGAIN while a close that began before the
 * operation was called is under way (try again shortly); -EBADF if
 * another close began since (the operation's own file may be the one
 * closed, and the number another file's now).  NULL with *err 0: fd is
 * not counted. */
_Atomic uint64_t *weft__fd_enter_nowait(int fd, int64_t *epoch, int *err);
void weft__fd_leave(_Atomic uint64_t *u);

/*
 * Waits for op's completion as a vthread.  The first wait honours deadline
 * (absolute; the effective deadline applies) and cancellation; if either
 * ends it, cancel(op) is called once and the wait goes on, uncancellable,
 * until the operation has completed.  Returns 0, or -ETIMEDOUT/-ECANCELED
 * when the first wait was interrupted (op->res is still the outcome).
 */
int weft__iop_wait(weft__iop *op, int64_t deadline, void (*cancel)(weft__iop *));
/* The same, but only the deadline ends the first wait: neither a cancel
 * nor an interrupt (a lock's wait: the caller waits again anyway). */
int weft__iop_wait_nocancel(weft__iop *op, int64_t deadline, void (*cancel)(weft__iop *));

/*
 * A futex(2) wait made by the kernel for a vthread that parks meanwhile:
 * the kernel's own wait queue, so every wake reaches it -- a carrier's, a
 * kernel thread's, another process's for a shared word -- with no thread
 * held for it (hook/trap.c's trapped waits).  addr the 32-bit word, val
 * what it must hold, mask the bitset (FUTEX_BITSET_MATCH_ANY for a plain
 * wait), deadline absolute (weft_now's clock; 0 none).  0 when woken (or
 * spuriously), -EAGAIN when the word did not hold val, -ETIMEDOUT;
 * -ENOSYS where it cannot be made so (the epoll backend, a kernel without
 * io_uring's futex operations, not a vthread): the caller waits another
 * way.
 */
int weft__futex_wait(const uint32_t *addr, uint32_t val, uint32_t mask, int private, int64_t deadline);

/*
 * Parks the calling vthread until one of the n fds (fds[i].fd < 0:
 * skipped) may be ready for its events, deadline (absolute, 0 none; the
 * vthread's own applies too) passes, or it is cancelled -- without a file
 * of its own (io.c).  Each revents is set to what its fd's wait saw (the
 * events; POLLNVAL: the fd is not open; 0: nothing yet).  Returns 1, or
 * -ETIMEDOUT, -ECANCELED, -ENOMEM, -EINVAL (not a vthread).  Readiness
 * may be gone again by the time the caller looks.
 */
int weft__poll_any(struct pollfd *fds, size_t n, int64_t deadline);

struct weft__poller {
    const struct weft__io_ops *ops; /* its backend's (for freeing and abandoning it) */
    int index;
};

/* Requests the backends handle; the API (io.c) builds them. */
enum {
    IOR_READ, IOR_WRITE, IOR_PREAD, IOR_PWRITE, IOR_READV, IOR_WRITEV, IOR_RECV, IOR_SEND,
    IOR_ACCEPT, IOR_CONNECT, IOR_POLL, IOR_FSYNC,
    IOR_PREADV, IOR_PWRITEV, IOR_FDATASYNC, /* positioned vectors; fdatasync */
    IOR_FUTEX_WAIT, /* io_uring only: buf the word, n its value, off the bitset, flags FUTEX2_* */
    IOR_CLOSE, /* never a request: weft_close's waits, as the dump names them */
};
typedef struct weft__ioreq {
    const void *pc; /* the public call's return address: its call site, for the dump */
    int op;
    int fd;
    void *buf;
    size_t n;
    off_t off;
    int flags;
    const struct iovec *iov;
    int iovcnt;
    struct sockaddr *addr;
    socklen_t *addrlen;
    socklen_t caddrlen;
    int events;
} weft__ioreq;

/* The readiness an operation waits for when it cannot go on: POLLOUT for
 * the sending side (and connect), POLLIN otherwise; a poll's own events. */
int weft__ioreq_events(const weft__ioreq *rq);

/*
 * The backend interface.  Each backend (uring.c, epoll.c) fills one of
 * these; weft__io_start chooses one and copies it into weft__io, which
 * stays as it is until weft__io_stop (or a fork child) zeroes it.  Nothing
 * outside the backends asks which backend runs: what differs is an
 * operation here, or a property (the fields before the operations).
 * Threads: as each operation says; "the carrier" is the calling thread,
 * which must be the carrier that owns the poller (or op's dispatcher's).
 */
struct weft__io_ops {
    int id;           /* WEFT_IO_URING / WEFT_IO_EPOLL: weft_io_backend's answer */
    /* The kernel carries an operation out and completes it (io_uring):
     * submit works, and a readiness wait is only for an O_NONBLOCK fd's
     * -EAGAIN.  0 (epoll): the kernel only tells readiness; the caller
     * makes each attempt (try_op). */
    int kernel_ops;
    /* weft_connect leaves the socket's flags as they were (io_uring); 0
     * (epoll): it makes the socket O_NONBLOCK, as it makes every pollable
     * fd it waits on (hook.c gives a blocking socket back blocking). */
    int connect_keeps_flags;

    /* -- life (weft__io_start / _stop, any one thread) -- */
    /* Makes what the backend shares (or probes that it can run); 0, or
     * -errno when it cannot be used here. */
    int (*start)(void);
    /* Why start failed with err, in words for one line (NULL: strerror). */
    const char *(*why_not)(int err, char *buf, size_t n);
    /* After a start: interrupt_fd can end every wait on an fd (io_uring:
     * kernel >= 5.19).  If not, weft_close is close(2) alone. */
    int (*can_interrupt_fd)(void);
    void (*stop)(void); /* undoes start; NULL: nothing to undo */

    /* -- the poller (sched.h's weft__poller_*) -- */
    struct weft__poller *(*poller_new)(int index, int *err);
    void (*poller_free)(struct weft__poller *p);
    int (*poller_poll)(struct weft__poller *p, weft_thread **out, int max, int cheap);
    int (*poller_wait)(struct weft__poller *p, int64_t deadline, weft_thread **out, int max);
    void (*poller_kick)(struct weft__poller *p);
    /* fork child: close the poller's descriptors and unmap its ring,
     * touching nothing the parent shares (io.c, "Fork") */
    void (*poller_abandon)(struct weft__poller *p);

    /* -- a vthread's blocking-style call (io.c's exec, counted in on rq->fd) -- */
    ssize_t (*exec)(weft__ioreq *rq, int64_t deadline);

    /* -- waits that complete through weft__iop_complete (weft__poll_any,
     * the async layer's operations; op->p NULL: an asynchronous one's) -- */
    /* Queues a readiness wait for op->fd's op->events on the carrier; 0,
     * or -errno (then it was not queued).  It may complete at once. */
    int (*wait_ready)(weft__iop *op);
    /* kernel_ops only: queues op for rq on the carrier, without waiting. */
    void (*submit)(weft__iop *op, weft__ioreq *rq);
    /* !kernel_ops only: one attempt of rq that cannot block; -EAGAIN when
     * it would (sockets only: -ENOTSOCK for a file). */
    ssize_t (*try_op)(weft__ioreq *rq);
    /* Takes op (queued by wait_ready or submit) back: 1 if it will not
     * complete now (the caller completes it); 0 if it will, or has
     * (io_uring: with -ECANCELED, or its result, some time later). */
    int (*withdraw)(weft__iop *op);

    /* -- weft_close (io.c, "Closing") -- */
    /* Ends the waits of the calls on fd (they come back -EBADF). */
    void (*interrupt_fd)(int fd);
    /* No call uses fd any more, and close(2) comes next (asked: whether
     * interrupt_fd was called): forget what is kept about the number.
     * Also for an fd that was never counted. */
    void (*closing)(int fd, int asked);
    /* 1 if weft made fd O_NONBLOCK (accept, connect, a pipe): hook.c then
     * treats it as the blocking file the program made.  NULL: never. */
    int (*nb_ours)(int fd);

    /* -- a futex wait that parks (weft__futex_wait) -- */
    /* NULL, or -ENOSYS: the backend cannot (epoll; io_uring before 6.7). */
    int (*futex_wait)(const uint32_t *addr, uint32_t val, uint32_t mask, int private, int64_t deadline);
};

/* The two backends; their state shared by all pollers reset in a fork
 * child (each backend's, whichever ran). */
extern const struct weft__io_ops weft__io_uring, weft__io_epoll;
void weft__uring_fork_child(void);
void weft__epoll_fork_child(void);

/* ---- the io layer's life: called by the runtime (runtime/runtime.c) ---- */

int weft__io_start(int mode); /* weft_init, before carriers start: choose the backend */
void weft__io_drain(void);    /* weft_shutdown, before carriers stop: ends the blocking pool */
void weft__io_stop(void);     /* weft_shutdown, after carriers ended */
/* pthread_atfork, run by the runtime's handlers: prepare keeps every
 * poller alive across the fork (parent lets go); in the child, every poller
 * of the parent's runtime is forgotten -- its descriptors closed, its ring
 * unmapped, nothing freed or submitted -- and the io layer's state reset. */
void weft__io_fork_prepare(void);
void weft__io_fork_parent(void);
void weft__io_fork_child(void);

/* The backend in use (all zero before weft__io_start and after _stop):
 * written only while no carrier runs, read by everyone. */
extern struct weft__io_ops weft__io;

/* hook.c's question, 0 while no backend runs */
static inline int weft__io_nb_ours(int fd) { return weft__io.nb_ours && weft__io.nb_ours(fd); }

/* The plain system call, blocking the calling OS thread. */
ssize_t weft__sys_exec(weft__ioreq *rq);
/* The blocking pool (pool.c).  Runs rq as a plain system call on it
 * (files, epoll mode), waiting uncancellably; ends its threads (waits for
 * them: weft__io_drain, weft__io_stop); forgets them in a fork child. */
ssize_t weft__pool_exec(weft__ioreq *rq);
void weft__pool_stop(void);
/* weft_blocking for the system call trap's handler (hook/trap.c): never
 * creates a thread in the caller -- the spawner does, which
 * weft__pool_spawner_start starts (0 or -errno) when the trap goes on. */
int weft__pool_call(void *(*fn)(void *), void *arg);
int weft__pool_spawner_start(void);
void weft__pool_fork_child(void);

#endif /* WEFT_IO_H */
