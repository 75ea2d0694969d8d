/*
 * The epoll backend, for where io_uring cannot start (seccomp profiles,
 * kernel.io_uring_disabled) or WEFT_IO=epoll.
 *
 * Sockets, pipes and other pollable fds: the call is made without blocking
 * (MSG_DONTWAIT for sockets; O_NONBLOCK set on other fds when first waited
 * on -- as Go does with every fd it polls); on EAGAIN the vthread parks on
 * the fd's readiness and tries again.  Regular files and block devices are
 * always "ready" to epoll and would block the carrier, so their operations
 * run on the blocking pool (io.c).
 *
 * Readiness.  One epoll set for the whole runtime holds the fds being
 * waited on, each registered EPOLLONESHOT with the union of its waiters'
 * events.  The fd table (fd -> waiters, under a per-fd lock) is a two-level
 * array grown on demand.  An event completes the waiters it satisfies and
 * re-arms the fd for those left.  A cancelled or timed-out waiter takes
 * itself off its fd under the same lock, so exactly one of event and
 * cancellation completes it.
 *
 * Carriers.  Each carrier has its own small epoll set holding its eventfd
 * (the kick) and the shared set.  It sleeps on its own set with the next
 * timer as timeout (epoll_pwait2: nanoseconds), so a kick wakes exactly
 * that carrier, while readiness on the shared set wakes the sleepers, the
 * first of which takes the events.  Busy carriers look at the shared set
 * from the scheduler's periodic check, at most every POLL_EVERY_NS.
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
    /* what the fd was found to be: KIND_UNKNOWN until first used, then
     * KIND_POLLABLE (made O_NONBLOCK) or KIND_FILE; reset by weft_close.
     * A stale kind (fd closed with close(2), number reused) costs only
     * speed: a file read as "pollable" never says EAGAIN, a socket sent to
     * the pool still works. */
    _Atomic int kind;
} fd_ent;

enum { KIND_UNKNOWN = 0, KIND_POLLABLE, KIND_FILE };

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

int weft__epoll_start(void) {
    E.epfd = epoll_create1(EPOLL_CLOEXEC);
    return E.epfd < 0 ? -errno : 0;
}

void weft__epoll_stop(void) {
    if (E.epfd >= 0) close(E.epfd);
    E.epfd = -1;
    for (int i = 0; i < MAX_CHUNKS; i++) {
        fd_ent *c = atomic_load(&E.chunks[i]);
        if (!c) continue;
        for (int k = 0; k < CHUNK; k++) pthread_mutex_destroy(&c[k].lock);
        free(c);
        atomic_store(&E.chunks[i], NULL);
    }
}

struct weft__poller *weft__epoll_new(int index, int *err) {
    epoll_poller *pl = calloc(1, sizeof *pl);
    if (!pl) {
        *err = -ENOMEM;
        return NULL;
    }
    pl->base.backend = WEFT_IO_EPOLL;
    pl->base.index = index;
    pl->pfd = epoll_create1(EPOLL_CLOEXEC);
    pl->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    struct epoll_event sh = {.events = EPOLLIN, .data.u64 = 1};
    if (pl->pfd < 0 || pl->efd < 0 || epoll_ctl(pl->pfd, EPOLL_CTL_ADD, pl->efd, &ev) < 0 ||
        epoll_ctl(pl->pfd, EPOLL_CTL_ADD, E.epfd, &sh) < 0) {
        *err = -errno;
        if (pl->pfd >= 0) close(pl->pfd);
        if (pl->efd >= 0) close(pl->efd);
        free(pl);
        return NULL;
    }
    return &pl->base;
}

void weft__epoll_free(struct weft__poller *p) {
    epoll_poller *pl = (epoll_poller *)p;
    close(pl->pfd);
    close(pl->efd);
    free(pl);
}

void weft__epoll_kick(struct weft__poller *p) {
    eventfd_write(((epoll_poller *)p)->efd, 1);
}

/* Re-arms fd for what its waiters want (lock held). */
static void arm(fd_ent *e, int fd) {
    uint32_t want = 0;
    for (weft__iop *w = e->waiters; w; w = w->next) want |= (uint32_t)w->events;
    if (!want) return;
    struct epoll_event ev = {.events = want | EPOLLONESHOT | EPOLLRDHUP, .data.fd = fd};
    if (e->registered && epoll_ctl(E.epfd, EPOLL_CTL_MOD, fd, &ev) == 0) return;
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
        int fd = evs[i].data.fd;
        uint32_t rev = evs[i].events;
        if (rev & EPOLLRDHUP) rev |= POLLIN;
        fd_ent *e = ent(fd);
        if (!e) continue;
        pthread_mutex_lock(&e->lock);
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

int weft__epoll_poll(struct weft__poller *p, weft_thread **out, int max, int cheap) {
    if (cheap && weft_now() - atomic_load_explicit(&E.last_poll, memory_order_relaxed) < POLL_EVERY_NS) return 0;
    return poll_shared(out, max);
}

int weft__epoll_wait(struct weft__poller *p, int64_t deadline, weft_thread **out, int max) {
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

int weft__epoll_wait_fd(int fd, int events, int64_t deadline) {
    fd_ent *e = ent(fd);
    if (!e) return fd < 0 ? -EBADF : -ENOMEM;
    weft__iop op;
    memset(&op, 0, sizeof op);
    op.p = &weft_self()->parker;
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

void weft__epoll_forget(int fd) {
    fd_ent *e = ent(fd);
    if (!e) return;
    pthread_mutex_lock(&e->lock);
    weft__iop *w = e->waiters;
    e->waiters = NULL;
    if (e->registered) epoll_ctl(E.epfd, EPOLL_CTL_DEL, fd, NULL);
    e->registered = 0;
    atomic_store_explicit(&e->kind, KIND_UNKNOWN, memory_order_relaxed);
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
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    return 0;
}

static int is_file(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode));
}

/* One non-blocking attempt; -EAGAIN when it would block. */
static ssize_t attempt(weft__ioreq *rq) {
    ssize_t r;
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
    if (r >= 0) return r;
    return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

ssize_t weft__epoll_exec(weft__ioreq *rq, int64_t deadline) {
    switch (rq->op) {
    case IOR_PREAD:
    case IOR_PWRITE:
    case IOR_FSYNC: return weft__pool_exec(rq);
    case IOR_POLL: return weft__epoll_wait_fd(rq->fd, rq->events, deadline);
    case IOR_CONNECT: {
        int r = set_nonblock(rq->fd);
        if (r < 0) return r;
        if (connect(rq->fd, rq->addr, rq->caddrlen) == 0) return 0;
        if (errno != EINPROGRESS && errno != EINTR) return -errno;
        int w = weft__epoll_wait_fd(rq->fd, POLLOUT, deadline);
        if (w < 0) return w; /* the attempt goes on in the kernel; the caller closes the fd */
        int err = 0;
        socklen_t l = sizeof err;
        if (getsockopt(rq->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0) return -errno;
        return err ? -err : 0;
    }
    case IOR_READ:
    case IOR_WRITE:
    case IOR_READV:
    case IOR_WRITEV:
    case IOR_ACCEPT: {
        fd_ent *e = ent(rq->fd);
        int kind = e ? atomic_load_explicit(&e->kind, memory_order_relaxed) : KIND_UNKNOWN;
        if (kind == KIND_UNKNOWN) {
            if (rq->op != IOR_ACCEPT && is_file(rq->fd)) {
                kind = KIND_FILE;
            } else {
                int r = set_nonblock(rq->fd);
                if (r < 0) return r;
                kind = KIND_POLLABLE;
            }
            if (e) atomic_store_explicit(&e->kind, kind, memory_order_relaxed);
        }
        if (kind == KIND_FILE) return weft__pool_exec(rq);
        break;
    }
    default: break;
    }
    int ev = weft__ioreq_events(rq);
    for (;;) {
        ssize_t r = attempt(rq);
        if (r != -EAGAIN && r != -EINTR) return r;
        if (r == -EINTR) continue;
        int w = weft__epoll_wait_fd(rq->fd, ev, deadline);
        if (w < 0) return w;
    }
}
