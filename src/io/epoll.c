/*
 * The epoll backend, for where io_uring cannot start (seccomp profiles,
 * kernel.io_uring_disabled) or WEFT_IO=epoll.
 *
 * Sockets, pipes and other pollable fds: the call is made without blocking
 * and on EAGAIN the vthread parks on the fd's readiness and tries again.
 * Regular files and block devices are always "ready" to epoll and would
 * block the carrier, so their operations run on the blocking pool (io.c).
 *
 * What an fd is.  The table remembers what each number was found to be --
 * a socket, another pollable file (pipe, FIFO, eventfd, tty...), or a file
 * for the pool -- so that a call need not ask the kernel every time.  But a
 * program may close(2) a number behind weft's back (any library does) and
 * the next socket() or pipe() may get it: what the table says is then about
 * a file that no longer exists.  weft_close resets the entry; for the rest,
 * no remembered kind may ever make a call block its carrier or outlive its
 * deadline, so each kind is used in a way that holds whatever file the
 * number names now:
 *  - a socket is never made O_NONBLOCK: every attempt carries MSG_DONTWAIT
 *    (read/write/readv/writev become recv/send/recvmsg/sendmsg, the same
 *    calls on a socket), which cannot block whatever the file's flags; a
 *    number that is no longer a socket answers ENOTSOCK and is looked at
 *    again.  accept has no such flag: the listening socket's O_NONBLOCK is
 *    checked (F_GETFL) before each attempt and set if missing;
 *  - another pollable file is made O_NONBLOCK when first met (as Go does
 *    with every fd it polls), and each call checks the flag first (F_GETFL,
 *    one system call): a file without it is not the one weft prepared and
 *    is looked at again.  (A regular file that the program itself opened
 *    O_NONBLOCK and that took such a number is read on the carrier: the
 *    page cache's time, never an unbounded wait);
 *  - a pool file is checked with fstat before each job (the job's hand-off
 *    costs far more): a number that is no longer a regular file is looked
 *    at again, so a socket never waits on the pool, where no deadline
 *    reaches it.
 *
 * Readiness.  One epoll set for the whole runtime holds the fds being
 * waited on, each registered EPOLLONESHOT with the union of its waiters'
 * events.  The fd table (fd -> waiters, under a per-fd lock) is a two-level
 * array grown on demand.  An event completes the waiters it satisfies and
 * re-arms the fd for those left.  A cancelled or timed-out waiter takes
 * itself off its fd under the same lock, so exactly one of event and
 * cancellation completes it.
 * An event names its registration, not just the number: the data word is
 * the fd and a generation that the entry takes anew at every EPOLL_CTL_ADD
 * (a closed file's registration is gone -- weft_close deletes it, close(2)
 * makes the kernel drop it -- so a file that takes the number is always
 * ADDed).  A carrier that fetched an event for the old file and handles it
 * after the number was closed and reused finds another generation under
 * the entry's lock and drops it: a weft_poll on the new file never reports
 * the old one's readiness (and a read never retries on it).  Within one
 * file an event may still tell of a moment before the waiter came (the
 * registration stays armed after a waiter that timed out, and fires when
 * data comes later): reads and writes just try again, and weft_poll checks
 * with poll(2) before it answers, so that its answer is true at a moment
 * within the call.
 *
 * Carriers.  Each carrier has its own small epoll set holding its eventfd
 * (the kick) and the shared set.  It sleeps on its own set with the next
 * timer as timeout (epoll_pwait2: nanoseconds), so a kick wakes exactly
 * that carrier, while readiness on the shared set wakes the sleepers, the
 * first of which takes the events.  Busy carriers look at the shared set
 * from the scheduler's periodic check, at most every POLL_EVERY_NS.
 *
 * Fork.  The shared set and the carriers' sets are kernel objects the
 * child shares with the parent: an epoll_ctl from the child would change
 * what the parent waits for.  A fork child closes its copies
 * (epoll_abandon, weft__epoll_fork_child) and starts a table of its own
 * on its next runtime.
 *
 * The interface (io.h, struct weft__io_ops): weft__io_epoll at the end.
 * The kernel does no operation here (kernel_ops 0): the async layer makes
 * each attempt itself (try_op) and waits for readiness in between.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK 1024
#define MAX_CHUNKS 4096 /* 4 Mi fds */
#define POLL_EVERY_NS 200000

typedef struct fd_ent {
    pthread_mutex_t lock;
    weft__iop *waiters;
    int registered;
    uint32_t gen; /* the registration's generation (lock held): see the top */
    /* what the number was found to be (see "What an fd is" above): a hint,
     * checked by every call; reset by weft_close */
    _Atomic int kind;
    /* weft made the file O_NONBLOCK (set_nonblock): the program did not,
     * and a hooked call treats it as blocking (hook.c); reset with kind */
    _Atomic int nb_ours;
} fd_ent;

enum { KIND_UNKNOWN = 0, KIND_SOCKET, KIND_POLLABLE, KIND_FILE };

#define EV_DATA(fd, gen) (((uint64_t)(gen) << 32) | (uint32_t)(fd))

static struct {
    int epfd;
    pthread_mutex_t grow;
    fd_ent *_Atomic chunks[MAX_CHUNKS];
    _Atomic int64_t last_poll;
} E = {.epfd = -1, .grow = PTHREAD_MUTEX_INITIALIZER};

typedef struct epoll_poller {
    struct weft__poller base;
    int pfd;
    int efd;
} epoll_poller;

static fd_ent *ent(int fd) {
    if (fd < 0 || fd / CHUNK >= MAX_CHUNKS) return NULL;
    fd_ent *c = atomic_load_explicit(&E.chunks[fd / CHUNK], memory_order_acquire);
    if (!c) {
        pthread_mutex_lock(&E.grow);
        c = atomic_load_explicit(&E.chunks[fd / CHUNK], memory_order_relaxed);
        if (!c) {
            c = calloc(CHUNK, sizeof *c);
            if (c) {
                for (int i = 0; i < CHUNK; i++) pthread_mutex_init(&c[i].lock, NULL);
                atomic_store_explicit(&E.chunks[fd / CHUNK], c, memory_order_release);
            }
        }
        pthread_mutex_unlock(&E.grow);
        if (!c) return NULL;
    }
    return &c[fd % CHUNK];
}

static int epoll_start(void) {
    E.epfd = weft__fd_own(epoll_create1(EPOLL_CLOEXEC));
    return E.epfd < 0 ? -errno : 0;
}

static void epoll_stop(void) {
    weft__fd_close_own(E.epfd);
    E.epfd = -1;
    for (int i = 0; i < MAX_CHUNKS; i++) {
        fd_ent *c = atomic_load(&E.chunks[i]);
        if (!c) continue;
        for (int k = 0; k < CHUNK; k++) pthread_mutex_destroy(&c[k].lock);
        free(c);
        atomic_store(&E.chunks[i], NULL);
    }
}

static struct weft__poller *epoll_new(int index, int *err) {
    epoll_poller *pl = calloc(1, sizeof *pl);
    if (!pl) {
        *err = -ENOMEM;
        return NULL;
    }
    pl->base.ops = &weft__io_epoll;
    pl->base.index = index;
    pl->pfd = weft__fd_own(epoll_create1(EPOLL_CLOEXEC));
    pl->efd = weft__fd_own(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    struct epoll_event sh = {.events = EPOLLIN, .data.u64 = 1};
    if (pl->pfd < 0 || pl->efd < 0 || epoll_ctl(pl->pfd, EPOLL_CTL_ADD, pl->efd, &ev) < 0 ||
        epoll_ctl(pl->pfd, EPOLL_CTL_ADD, E.epfd, &sh) < 0) {
        *err = -errno;
        weft__fd_close_own(pl->pfd);
        weft__fd_close_own(pl->efd);
        free(pl);
        return NULL;
    }
    return &pl->base;
}

static void epoll_free(struct weft__poller *p) {
    epoll_poller *pl = (epoll_poller *)p;
    weft__fd_close_own(pl->pfd);
    weft__fd_close_own(pl->efd);
    free(pl);
}

static void epoll_abandon(struct weft__poller *p) {
    epoll_poller *pl = (epoll_poller *)p;
    weft__fd_close_own(pl->pfd);
    weft__fd_close_own(pl->efd);
}

/* The shared set is the parent's too: an epoll_ctl on it from the child
 * would change what the parent's carriers wait for.  Close it; the fd
 * table's chunks (their locks possibly held by threads not here) are kept
 * and a fresh table starts. */
void weft__epoll_fork_child(void) {
    weft__fd_close_own(E.epfd);
    E.epfd = -1;
    E.grow = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    for (int i = 0; i < MAX_CHUNKS; i++) {
        fd_ent *c = atomic_load_explicit(&E.chunks[i], memory_order_relaxed);
        if (!c) continue;
        weft__fork_keep(c);
        atomic_store_explicit(&E.chunks[i], NULL, memory_order_relaxed);
    }
    atomic_store(&E.last_poll, 0);
}

static void epoll_kick(struct weft__poller *p) {
    eventfd_write(((epoll_poller *)p)->efd, 1);
}

/* Re-arms fd for what its waiters want (lock held). */
static void arm(fd_ent *e, int fd) {
    uint32_t want = 0;
    for (weft__iop *w = e->waiters; w; w = w->next) want |= (uint32_t)w->events;
    if (!want) return;
    struct epoll_event ev = {.events = want | EPOLLONESHOT | EPOLLRDHUP, .data.u64 = EV_DATA(fd, e->gen)};
    if (e->registered && epoll_ctl(E.epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return;
    /* a new registration (the first, or the file was closed behind our
     * back): a new generation, so that events of the old one are dropped */
    ev.data.u64 = EV_DATA(fd, ++e->gen);
    if (epoll_ctl(E.epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
        e->registered = 1;
        return;
    }
    if (errno == EEXIST && epoll_ctl(E.epfd, EPOLL_CTL_MOD, fd, &ev) == 0) {
        e->registered = 1;
        return;
    }
    /* not pollable (EPERM: a regular file) or gone (EBADF): complete them
     * now with what poll(2) would say */
    int err = errno;
    weft__iop *w = e->waiters;
    e->waiters = NULL;
    while (w) {
        weft__iop *nx = w->next;
        weft_thread *t = weft__iop_complete(w, err == EPERM ? (w->events & (POLLIN | POLLOUT)) : -err);
        if (t) weft__ready(t);
        w = nx;
    }
}

static int handle(struct epoll_event *evs, int k, weft_thread **out, int max) {
    int n = 0;
    for (int i = 0; i < k; i++) {
        int fd = (int)(uint32_t)evs[i].data.u64;
        uint32_t gen = (uint32_t)(evs[i].data.u64 >> 32);
        uint32_t rev = evs[i].events;
        if (rev & EPOLLRDHUP) rev |= POLLIN;
        fd_ent *e = ent(fd);
        if (!e) continue;
        pthread_mutex_lock(&e->lock);
        if (gen != e->gen) { /* a closed file's event (see the top) */
            pthread_mutex_unlock(&e->lock);
            continue;
        }
        weft__iop **pp = &e->waiters;
        while (*pp) {
            weft__iop *w = *pp;
            uint32_t got = rev & ((uint32_t)w->events | POLLERR | POLLHUP);
            if (got) {
                *pp = w->next;
                weft_thread *t = weft__iop_complete(w, (int)got);
                if (t) {
                    if (n < max) out[n++] = t;
                    else weft__ready(t);
                }
            } else {
                pp = &w->next;
            }
        }
        arm(e, fd);
        pthread_mutex_unlock(&e->lock);
    }
    return n;
}

static int poll_shared(weft_thread **out, int max) {
    struct epoll_event evs[64];
    int k = epoll_wait(E.epfd, evs, max < 64 ? max : 64, 0);
    atomic_store_explicit(&E.last_poll, weft_now(), memory_order_relaxed);
    return k > 0 ? handle(evs, k, out, max) : 0;
}

static int epoll_poll(struct weft__poller *p, weft_thread **out, int max, int cheap) {
    if (cheap && weft_now() - atomic_load_explicit(&E.last_poll, memory_order_relaxed) < POLL_EVERY_NS) return 0;
    return poll_shared(out, max);
}

static int epoll_wait_poller(struct weft__poller *p, int64_t deadline, weft_thread **out, int max) {
    epoll_poller *pl = (epoll_poller *)p;
    struct epoll_event evs[2];
    struct timespec ts, *tsp = NULL;
    if (deadline) {
        int64_t left = deadline - weft_now();
        if (left < 0) left = 0;
        ts.tv_sec = left / 1000000000;
        ts.tv_nsec = left % 1000000000;
        tsp = &ts;
    }
    int k = (int)syscall(SYS_epoll_pwait2, pl->pfd, evs, 2, tsp, NULL, 0);
    if (k < 0 && errno == ENOSYS) {
        int ms = tsp ? (int)(ts.tv_sec * 1000 + (ts.tv_nsec + 999999) / 1000000) : -1;
        k = epoll_wait(pl->pfd, evs, 2, ms);
    }
    for (int i = 0; i < k; i++) {
        if (evs[i].data.u64 == 0) {
            eventfd_t v;
            eventfd_read(pl->efd, &v);
        }
    }
    return poll_shared(out, max);
}

static void epoll_cancel(weft__iop *op) {
    fd_ent *e = ent(op->fd);
    pthread_mutex_lock(&e->lock);
    for (weft__iop **pp = &e->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == op) {
            *pp = op->next;
            weft__iop_complete(op, -ECANCELED); /* we are running: nothing to wake */
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
}

/* Parks until fd is ready for events or the wait is interrupted; returns
 * the ready events, -ETIMEDOUT or -ECANCELED. */
static int wait_fd(int fd, int events, int64_t deadline) {
    fd_ent *e = ent(fd);
    if (!e) return fd < 0 ? -EBADF : -ENOMEM;
    weft__iop op;
    memset(&op, 0, sizeof op);
    op.p = &weft__self()->parker;
    op.fd = fd;
    op.events = events;
    pthread_mutex_lock(&e->lock);
    op.next = e->waiters;
    e->waiters = &op;
    arm(e, fd);
    pthread_mutex_unlock(&e->lock);
    int intr = weft__iop_wait(&op, deadline, epoll_cancel);
    if (intr) return op.res > 0 ? op.res : intr;
    return op.res;
}

static int epoll_add_waiter(weft__iop *op) {
    fd_ent *e = ent(op->fd);
    if (!e) return op->fd < 0 ? -EBADF : -ENOMEM;
    pthread_mutex_lock(&e->lock);
    op->next = e->waiters;
    e->waiters = op;
    arm(e, op->fd); /* may complete it at once (a file that cannot be polled) */
    pthread_mutex_unlock(&e->lock);
    return 0;
}

static int epoll_remove_waiter(weft__iop *op) {
    fd_ent *e = ent(op->fd);
    int found = 0;
    if (!e) return 0;
    pthread_mutex_lock(&e->lock);
    for (weft__iop **pp = &e->waiters; *pp; pp = &(*pp)->next) {
        if (*pp == op) {
            *pp = op->next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return found;
}

/* Wakes fd's waiters with -EBADF, drops its registration and what the
 * table says about the number. */
static void epoll_forget(int fd) {
    fd_ent *e = ent(fd);
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    weft__iop *w = e->waiters;
    e->waiters = NULL;
    if (e->registered) epoll_ctl(E.epfd, EPOLL_CTL_DEL, fd, NULL);
    e->registered = 0;
    atomic_store_explicit(&e->kind, KIND_UNKNOWN, memory_order_relaxed);
    atomic_store_explicit(&e->nb_ours, 0, memory_order_relaxed);
    while (w) {
        weft__iop *nx = w->next;
        weft_thread *t = weft__iop_complete(w, -EBADF);
        if (t) weft__ready(t);
        w = nx;
    }
    pthread_mutex_unlock(&e->lock);
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -errno;
    if (!(fl & O_NONBLOCK)) {
        if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
        fd_ent *e = ent(fd);
        if (e) atomic_store_explicit(&e->nb_ours, 1, memory_order_relaxed);
    }
    return 0;
}

static int epoll_nb_ours(int fd) {
    fd_ent *e = fd >= 0 && fd / CHUNK < MAX_CHUNKS ? atomic_load_explicit(&E.chunks[fd / CHUNK], memory_order_acquire) : NULL;
    return e ? atomic_load_explicit(&e[fd % CHUNK].nb_ours, memory_order_relaxed) : 0;
}

/* What fd is now (fstat): KIND_SOCKET, KIND_FILE, KIND_POLLABLE (made
 * O_NONBLOCK here), or -errno. */
static int pool_mode(mode_t m) { return S_ISREG(m) || S_ISBLK(m) || S_ISDIR(m); }

static int classify(int fd) {
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    if (S_ISSOCK(st.st_mode)) return KIND_SOCKET;
    if (pool_mode(st.st_mode)) return KIND_FILE;
    int r = set_nonblock(fd);
    return r < 0 ? r : KIND_POLLABLE;
}

static int still_file(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && pool_mode(st.st_mode);
}

/* 1 if fd's file is O_NONBLOCK, 0 if not, -errno */
static int has_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -errno : (fl & O_NONBLOCK) != 0;
}

/* One attempt that cannot block whatever the file's flags are (kind as
 * checked by the caller); -EAGAIN when it would block. */
static ssize_t attempt(weft__ioreq *rq, int kind) {
    ssize_t r;
    if (kind == KIND_SOCKET) {
        struct msghdr mh = {.msg_iov = (struct iovec *)rq->iov, .msg_iovlen = (size_t)rq->iovcnt};
        switch (rq->op) {
        case IOR_READ: r = recv(rq->fd, rq->buf, rq->n, MSG_DONTWAIT); break;
        case IOR_WRITE: r = send(rq->fd, rq->buf, rq->n, MSG_DONTWAIT); break;
        case IOR_READV: r = recvmsg(rq->fd, &mh, MSG_DONTWAIT); break;
        case IOR_WRITEV: r = sendmsg(rq->fd, &mh, MSG_DONTWAIT); break;
        default: goto plain;
        }
        goto out;
    }
plain:
    switch (rq->op) {
    case IOR_RECV: r = recv(rq->fd, rq->buf, rq->n, rq->flags | MSG_DONTWAIT); break;
    case IOR_SEND: r = send(rq->fd, rq->buf, rq->n, rq->flags | MSG_DONTWAIT); break;
    case IOR_READ: r = read(rq->fd, rq->buf, rq->n); break;
    case IOR_WRITE: r = write(rq->fd, rq->buf, rq->n); break;
    case IOR_READV: r = readv(rq->fd, rq->iov, rq->iovcnt); break;
    case IOR_WRITEV: r = writev(rq->fd, rq->iov, rq->iovcnt); break;
    case IOR_ACCEPT: r = accept4(rq->fd, rq->addr, rq->addrlen, rq->flags); break;
    default: errno = EINVAL; r = -1;
    }
out:
    if (r >= 0) return r;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

/* The kind of rq's fd, checked as the top comment says, so that an attempt
 * with it cannot block: KIND_SOCKET, KIND_POLLABLE, KIND_FILE, or -errno. */
static int checked_kind(weft__ioreq *rq) {
    fd_ent *e = ent(rq->fd);
    int kind = e ? atomic_load_explicit(&e->kind, memory_order_relaxed) : KIND_UNKNOWN;
    int ok;
    switch (kind) {
    case KIND_SOCKET:
        /* accept has no per-call flag: its socket must be O_NONBLOCK */
        if (rq->op != IOR_ACCEPT) return kind;
        ok = has_nonblock(rq->fd);
        if (ok < 0) return ok;
        if (ok) return kind;
        if ((ok = set_nonblock(rq->fd)) < 0) return ok;
        return kind;
    case KIND_POLLABLE:
        ok = has_nonblock(rq->fd);
        if (ok < 0) return ok;
        if (ok) return kind;
        break; /* not the file we prepared */
    case KIND_FILE:
        if (still_file(rq->fd)) return kind;
        break;
    default:
        break;
    }
    kind = classify(rq->fd);
    if (kind < 0) return kind;
    if (kind == KIND_SOCKET && rq->op == IOR_ACCEPT && (ok = set_nonblock(rq->fd)) < 0) return ok;
    if (e) atomic_store_explicit(&e->kind, kind, memory_order_relaxed);
    return kind;
}

static ssize_t epoll_try(weft__ioreq *rq) {
    for (;;) {
        int kind = checked_kind(rq);
        if (kind < 0) return kind;
        if (kind == KIND_FILE) return -ENOTSOCK; /* asynchronous operations are for sockets */
        ssize_t r = attempt(rq, kind);
        if (r == -ENOTSOCK && kind == KIND_SOCKET) { /* a socket no longer: look again */
            fd_ent *e = ent(rq->fd);
            if (e) atomic_store_explicit(&e->kind, KIND_UNKNOWN, memory_order_relaxed);
            continue;
        }
        if (r != -EINTR) return r;
    }
}

static ssize_t epoll_exec(weft__ioreq *rq, int64_t deadline) {
    switch (rq->op) {
    case IOR_PREAD:
    case IOR_PWRITE:
    case IOR_PREADV:
    case IOR_PWRITEV:
    case IOR_FDATASYNC:
    case IOR_FSYNC: return weft__pool_exec(rq);
    case IOR_POLL:
        for (;;) {
            int r = wait_fd(rq->fd, rq->events, deadline);
            if (r <= 0) return r;
            /* An event tells of a moment that may precede this call: a
             * registration armed for an earlier wait (one that timed out)
             * fires when data comes, and that data may be gone again.  A
             * poll answers for a moment within the call: check. */
            struct pollfd pf = {.fd = rq->fd, .events = (short)rq->events};
            int k = poll(&pf, 1, 0);
            if (k > 0) return pf.revents;
            if (k < 0 && errno != EINTR) return -errno;
        }
    case IOR_CONNECT: {
        int r = set_nonblock(rq->fd);
        if (r < 0) return r;
        if (connect(rq->fd, rq->addr, rq->caddrlen) == 0) return 0;
        if (errno != EINPROGRESS && errno != EINTR) return -errno;
        for (;;) {
            int w = wait_fd(rq->fd, POLLOUT, deadline);
            if (w < 0) return w; /* the attempt goes on in the kernel; the caller closes the fd */
            /* the outcome from connect itself, as a blocking connect learns
             * it: the error once, and the socket ready for another try
             * (SO_ERROR would leave it "connecting", and the next connect
             * would fail with ECONNABORTED) */
            if (connect(rq->fd, rq->addr, rq->caddrlen) == 0 || errno == EISCONN) return 0;
            if (errno != EALREADY && errno != EINPROGRESS && errno != EINTR) return -errno;
        }
    }
    default: break;
    }
    int ev = weft__ioreq_events(rq);
    int check = rq->op == IOR_READ || rq->op == IOR_WRITE || rq->op == IOR_READV || rq->op == IOR_WRITEV ||
                rq->op == IOR_ACCEPT;
    for (;;) {
        int kind = KIND_UNKNOWN;
        if (check) {
            /* every attempt: the number may have changed files while we
             * waited, too */
            kind = checked_kind(rq);
            if (kind < 0) return kind;
            if (kind == KIND_FILE) {
                if (rq->op == IOR_ACCEPT) return -ENOTSOCK;
                return weft__pool_exec(rq);
            }
        }
        ssize_t r = attempt(rq, kind);
        if (r == -ENOTSOCK && kind == KIND_SOCKET) { /* a socket no longer: look again */
            fd_ent *e = ent(rq->fd);
            if (e) atomic_store_explicit(&e->kind, KIND_UNKNOWN, memory_order_relaxed);
            continue;
        }
        if (r != -EAGAIN && r != -EINTR) return r;
        if (r == -EINTR) continue;
        int w = wait_fd(rq->fd, ev, deadline);
        if (w < 0) return w;
    }
}

static int can_interrupt_fd(void) { return 1; }

static void epoll_closing(int fd, int asked) {
    (void)asked;
    epoll_forget(fd); /* its registration and kind go */
}

const struct weft__io_ops weft__io_epoll = {
    .id = WEFT_IO_EPOLL,
    .kernel_ops = 0,
    .connect_keeps_flags = 0,
    .start = epoll_start,
    .can_interrupt_fd = can_interrupt_fd,
    .stop = epoll_stop,
    .poller_new = epoll_new,
    .poller_free = epoll_free,
    .poller_poll = epoll_poll,
    .poller_wait = epoll_wait_poller,
    .poller_kick = epoll_kick,
    .poller_abandon = epoll_abandon,
    .exec = epoll_exec,
    .wait_ready = epoll_add_waiter,
    .try_op = epoll_try,
    .withdraw = epoll_remove_waiter,
    .interrupt_fd = epoll_forget,
    .closing = epoll_closing,
    .nb_ours = epoll_nb_ours,
};
