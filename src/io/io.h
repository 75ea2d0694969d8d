/*
 * io layer internals shared by its backends (io.c: the API, the platform
 * path and the blocking pool; uring.c; epoll.c).
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
 * An op with p == NULL is an asynchronous one's (async.c): its dispatcher
 * takes it from there. */
weft_thread *weft__iop_complete(weft__iop *op, int res);

/* async.c: the kernel's part of an asynchronous operation ended with res;
 * returns its dispatcher if that must be made runnable. */
weft_thread *weft__async_kernel_done(weft__iop *op, int res);
void weft__async_stop(void);
/* fd's epoch (io.c, "Closing": the number of closes of it begun), or -1
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
void weft__fd_leave(_Atomic uint64_t *u);       /* weft__io_stop: drops what is left */
void weft__async_fork_child(void); /* a fork child: forgets the parent's dispatchers */

/*
 * Waits for op's completion as a vthread.  The first wait honours deadline
 * (absolute; the effective deadline applies) and cancellation; if either
 * ends it, cancel(op) is called once and the wait goes on, uncancellable,
 * until the operation has completed.  Returns 0, or -ETIMEDOUT/-ECANCELED
 * when the first wait was interrupted (op->res is still the outcome).
 */
int weft__iop_wait(weft__iop *op, int64_t deadline, void (*cancel)(weft__iop *));

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
    int backend; /* WEFT_IO_URING / WEFT_IO_EPOLL */
    int index;
};

extern int weft__io_mode; /* chosen backend, 0 before weft__io_start */

/* backends */
struct weft__poller *weft__uring_new(int index, int *err);
void weft__uring_free(struct weft__poller *p);
int weft__uring_poll(struct weft__poller *p, weft_thread **out, int max, int cheap);
int weft__uring_wait(struct weft__poller *p, int64_t deadline, weft_thread **out, int max);
void weft__uring_kick(struct weft__poller *p);
int weft__uring_probe(void); /* 0 or -errno */
int weft__uring_can_cancel_fd(void); /* after a successful probe: kernel >= 5.19 */
/* Asks every ring to cancel the operations on fd (they return -EBADF). */
void weft__uring_cancel_fd(int fd);
/* Takes back the requests of weft__uring_cancel_fd(fd) that a ring has not
 * acted on yet; once it returns, no ring will act on one (see uring.c). */
void weft__uring_cancel_fd_withdraw(int fd);

/* fork child: close the poller's descriptors and unmap its ring, touching
 * nothing the parent shares (io.c, "Fork"); then reset the backend's state */
void weft__uring_abandon(struct weft__poller *p);
void weft__uring_fork_child(void);
void weft__epoll_abandon(struct weft__poller *p);
void weft__epoll_fork_child(void);

struct weft__poller *weft__epoll_new(int index, int *err);
void weft__epoll_free(struct weft__poller *p);
int weft__epoll_poll(struct weft__poller *p, weft_thread **out, int max, int cheap);
int weft__epoll_wait(struct weft__poller *p, int64_t deadline, weft_thread **out, int max);
void weft__epoll_kick(struct weft__poller *p);
int weft__epoll_start(void);
void weft__epoll_stop(void);
/* Parks until fd is ready for events or the wait is interrupted; returns
 * the ready events, -ETIMEDOUT or -ECANCELED. */
int weft__epoll_wait_fd(int fd, int events, int64_t deadline);
/* 1 if weft made fd O_NONBLOCK (accept, connect, a pipe): hook.c then
 * treats it as the blocking file the program made */
int weft__epoll_nb_ours(int fd);
void weft__epoll_forget(int fd); /* wakes fd's waiters with -EBADF, drops its registration */
/* Asynchronous operations: op (fd and events set) waits for readiness
 * (completed through weft__iop_complete); taken off again (1 if it was
 * still waiting, so will not complete); one attempt of rq that cannot
 * block (-EAGAIN when it would: weft__epoll_try, below). */
int weft__epoll_add_waiter(weft__iop *op);
int weft__epoll_remove_waiter(weft__iop *op);

/* Requests the backends handle; the API (io.c) builds them. */
enum {
    IOR_READ, IOR_WRITE, IOR_PREAD, IOR_PWRITE, IOR_READV, IOR_WRITEV, IOR_RECV, IOR_SEND,
    IOR_ACCEPT, IOR_CONNECT, IOR_POLL, IOR_FSYNC,
    IOR_PREADV, IOR_PWRITEV, IOR_FDATASYNC, /* positioned vectors; fdatasync */
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

/* Queues op (p NULL: asynchronous) for rq -- or a poll of poll_events when
 * not 0 -- on the calling carrier's ring, without waiting; and cancels it. */
void weft__uring_start_op(weft__iop *op, weft__ioreq *rq, int poll_events);
void weft__uring_cancel_op(weft__iop *op);
ssize_t weft__epoll_try(weft__ioreq *rq);
ssize_t weft__uring_exec(weft__ioreq *rq, int64_t deadline);
ssize_t weft__epoll_exec(weft__ioreq *rq, int64_t deadline);
/* The plain system call, blocking the calling OS thread. */
ssize_t weft__sys_exec(weft__ioreq *rq);
/* Runs rq as a plain system call on the blocking pool (files, epoll mode). */
ssize_t weft__pool_exec(weft__ioreq *rq);

#endif /* WEFT_IO_H */
