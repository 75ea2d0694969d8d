/*
 * File channels (weft/file.h): positioned blocking-style I/O, and
 * asynchronous operations carried out in order, with adjacent writes
 * coalesced.
 *
 * Objects and who owns them.
 *  - weft_file: made by weft_file_create, freed by close / close_now.  A
 *    pthread mutex guards its queue and counters; it is never held across
 *    I/O, a park or a future's fill.
 *  - freq: one asynchronous operation, malloc'd by its submitter, owned by
 *    the file's queue until a flusher takes it, then by that flusher until
 *    its future is filled and its handler handed to the executor (the
 *    handler task frees it).  A write of at most WEFT_FILE_INLINE bytes is
 *    copied into the freq.
 *
 * The flusher.  Accepted operations wait in a FIFO.  At most one flusher
 * -- a vthread, spawned when an operation arrives and none runs, ending
 * when the queue is empty -- takes the whole queue at a time and carries it
 * out in order: a run of writes each starting where the previous ended
 * (every write, for an APPEND file) becomes one pwritev (writev) of up to
 * IOV_MAX pieces, continued after a short write; reads, forces and
 * non-adjacent writes go one by one.  A coalesced write of at most
 * DIRECT_MAX bytes is one system call on the flusher's carrier (see
 * "blocking-style" below: on ext4 io_uring would hand it to an io-wq
 * thread); a bigger one, or any while the file is "slow", is weft's own
 * I/O: a ring operation on io_uring, the bounded blocking pool on epoll.  While the flusher writes, new operations
 * queue up behind it, so the busier the file, the bigger the batches --
 * group commit, with no timer and no added latency when idle.
 *
 * Completion.  The flusher fills each operation's future (count, or the
 * error), then submits its handler, if any, to the file's executor; an
 * executor that refuses it (shut down, or a discarding policy) does not lose
 * it: the flusher runs it itself.
 *
 * Backpressure and close.  `inflight` counts operations accepted and not
 * complete; a submitter beyond max_inflight waits on `room`.  close marks
 * the file closing (new operations fail with -EBADF), waits on `idle` until
 * inflight is 0 and no flusher runs, then closes.  close_now first takes
 * the queue back and fails its operations with -ECANCELED.  A close that
 * finds another under way returns -EBADF and touches f no more (the other
 * frees it).  The free poisons f's magic word first, and both closes check
 * it: closing a closed file stops the program with a message rather than
 * freeing twice (sched.h, "heap objects").
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "../sync/waitq.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define DEFAULT_MAX_INFLIGHT 65536
#define DIRECT_MAX (64 * 1024)        /* blocking-style calls up to this size may go direct */
#define DIRECT_SLOW_NS 200000         /* a direct call this slow ... */
#define RING_FACTOR 10                /* ... sends the file's calls through the ring 10x as long, */
#define RING_FOR_NS 100000000         /* ... at most this long */
#define RUN_MAX_BYTES (4u << 20) /* one coalesced write at most */

enum { R_WRITE, R_READ, R_FSYNC, R_FDATASYNC };

typedef struct freq {
    struct freq *next;
    int kind;
    const char *buf;   /* write: the bytes (inl, or the caller's) */
    char *rbuf;        /* read: the caller's */
    size_t n;
    off_t pos;
    ssize_t res;
    weft_future *fut;  /* the file's reference */
    void (*done)(ssize_t res, void *ctx);
    void *ctx;
    char inl[WEFT_FILE_INLINE];
} freq;

struct weft_file {
    int fd;
    int flags;
    char *path;          /* DELETE_ON_CLOSE: unlinked at close */
    weft_executor *ex;
    size_t max_inflight;
    uint32_t magic;      /* WEFT__MAGIC_FILE; _DEAD once closed (sched.h: 32 bytes in, not last) */
    pthread_mutex_t lock;
    freq *qh, *qt;       /* accepted, not started */
    size_t queued;
    size_t inflight;     /* accepted, not complete */
    int flusher;         /* a flusher runs */
    int closing;
    weft__waitq room, idle;
    _Atomic int64_t ring_until; /* blocking-style calls take the ring until then */
    _Atomic(weft_thread *) flusher_vt; /* the flusher vthread, while it runs */
};

/* A closed file is freed: a call with it after close is a use after free,
 * stopped with a message where it can be (sched.h, "heap objects"). */
_Static_assert(offsetof(struct weft_file, magic) >= 32 &&
               offsetof(struct weft_file, magic) + 4 <= sizeof(struct weft_file) - 8,
               "the magic word must lie where glibc's free leaves it");
#define CHECK_OPEN(f, call) WEFT__CHECK_LIVE(f, WEFT__MAGIC_FILE, call, "not an open file (closed already?)")

/* ---- the default executor for handlers ----------------------------------------- */

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static weft_executor *default_ex;

/* NULL when it could not be made (no memory): handlers then run on the
 * caller, as with no executor */
static void default_make(void) { weft_executor_create_fixed(&default_ex, 5, 2500, WEFT_REJECT_CALLER_RUNS); }

weft_executor *weft_file_default_executor(void) {
    pthread_once(&default_once, default_make);
    return default_ex;
}

/* ---- open ---------------------------------------------------------------------- */

int weft_file_create(weft_file **out, const char *path, int flags, mode_t mode, const weft_file_opts *o) {
    if (!out) return -EINVAL;
    *out = NULL;
    int known = WEFT_READ | WEFT_WRITE | WEFT_CREATE | WEFT_CREATE_NEW | WEFT_TRUNCATE | WEFT_APPEND |
                WEFT_DELETE_ON_CLOSE | WEFT_DSYNC | WEFT_SYNC;
    if (!path || (flags & ~known) || !(flags & (WEFT_READ | WEFT_WRITE)) ||
        ((flags & (WEFT_TRUNCATE | WEFT_APPEND | WEFT_CREATE | WEFT_CREATE_NEW)) && !(flags & WEFT_WRITE))) {
        return -EINVAL;
    }
    int of = O_CLOEXEC | O_NOCTTY;
    of |= (flags & WEFT_READ) && (flags & WEFT_WRITE) ? O_RDWR : (flags & WEFT_WRITE) ? O_WRONLY : O_RDONLY;
    if (flags & WEFT_CREATE_NEW) of |= O_CREAT | O_EXCL;
    else if (flags & WEFT_CREATE) of |= O_CREAT;
    if (flags & WEFT_TRUNCATE) of |= O_TRUNC;
    if (flags & WEFT_APPEND) of |= O_APPEND;
    if (flags & WEFT_SYNC) of |= O_SYNC;
    else if (flags & WEFT_DSYNC) of |= O_DSYNC;
    weft_file *f = calloc(1, sizeof *f);
    if (!f) return -ENOMEM;
    if ((flags & WEFT_DELETE_ON_CLOSE) && !(f->path = strdup(path))) {
        free(f);
        return -ENOMEM;
    }
    f->fd = open(path, of, mode);
    if (f->fd < 0) {
        int e = errno;
        free(f->path);
        free(f);
        return -e;
    }
    struct stat st;
    if (fstat(f->fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(f->fd);
        free(f->path);
        free(f);
        return -EISDIR;
    }
    f->flags = flags;
    f->ex = o && o->executor ? o->executor : NULL; /* NULL: the default, made when first needed */
    f->max_inflight = o && o->max_inflight ? o->max_inflight : DEFAULT_MAX_INFLIGHT;
    pthread_mutex_init(&f->lock, NULL);
    f->magic = WEFT__MAGIC_FILE;
    *out = f;
    return 0;
}

/* ---- blocking-style ------------------------------------------------------------------ *
 *
 * A small buffered read or write of a regular file is a copy to or from the
 * page cache: about 1-2 us as a system call, while a ring operation for it
 * costs a round trip through io_uring's worker threads (ext4 cannot do
 * buffered writes without blocking, so io_uring hands them to io-wq) --
 * ten times more.  So, as Go and Loom do for files, a blocking-style call
 * of at most DIRECT_MAX bytes on a file without DSYNC/SYNC is made directly
 * on the carrier.  A direct call can still block (dirty-page throttling, a
 * cold read): one that took over DIRECT_SLOW_NS sends the file's
 * blocking-style calls through the ring for RING_FACTOR times as long as it
 * took (at most RING_FOR_NS), so a slow disk holds a carrier at most about
 * 1/(RING_FACTOR+1) of the time, not continually.  The time is wall time,
 * so a carrier preempted in the call (a busy machine, a VM's steal) looks
 * slow too: the window in proportion keeps such a false alarm cheap (a
 * fixed 100 ms window cost a busy 2-vCPU VM two thirds of its direct
 * writes).  Cancellation and deadlines are checked before a direct call
 * (it is not interrupted). */

/* Which direct calls are timed: one in DIRECT_SAMPLE (a carrier's count;
 * the count is only touched between two parks, so a carrier-local is
 * right), and the first after a ring window.  Two clock reads are a tenth
 * of a 5-byte write; a file whose calls block does so again and again
 * (dirty-page throttling acts on every write past the limit, a cold file
 * is read piece by piece), so a sample finds it within a few stalls, and
 * a stall missed meanwhile is what the monitor already covers: it moves a
 * stuck carrier's queue to the others (sched/spares.c, "The monitor"). */
#define DIRECT_SAMPLE 4
static __thread unsigned direct_tick;

/* 0: take the ring.  Otherwise the call may go direct, and *t0 is now when
 * the call is to be timed (note_direct), else 0. */
static int go_direct(weft_file *f, size_t n, int64_t *t0) {
    if (n > DIRECT_MAX || (f->flags & (WEFT_DSYNC | WEFT_SYNC)) || !weft_self()) return 0;
    *t0 = 0;
    int64_t until = atomic_load_explicit(&f->ring_until, memory_order_relaxed);
    if (until) {
        int64_t now = weft_now();
        if (now < until) return 0;
        /* the window is over: clear it (unless a slow call just set another) */
        atomic_compare_exchange_strong_explicit(&f->ring_until, &until, 0, memory_order_relaxed,
                                                memory_order_relaxed);
        *t0 = now;
    } else if (++direct_tick % DIRECT_SAMPLE == 0) {
        *t0 = weft_now();
    }
    return 1;
}

/* After a direct call that started at t0 (0: not timed): a slow one sends
 * the file's calls through the ring for a while. */
static void note_direct(weft_file *f, int64_t t0) {
    if (!t0) return;
    int64_t t1 = weft_now();
    int64_t took = t1 - t0;
    if (took > DIRECT_SLOW_NS) {
        int64_t span = took < RING_FOR_NS / RING_FACTOR ? took * RING_FACTOR : RING_FOR_NS;
        atomic_store_explicit(&f->ring_until, t1 + span, memory_order_relaxed);
    }
}

/* The system calls are made with syscall(2), not glibc's wrappers: those are
 * pthread cancellation points, whose bookkeeping costs a tenth of a 5-byte
 * write, and weft's carriers are never pthread-cancelled. */
static ssize_t direct_io(weft_file *f, int wr, void *b, size_t n, off_t pos, int64_t t0) {
    if (weft_cancelled()) return -ECANCELED;
    int64_t d = weft__effective_deadline(0);
    if (d && (t0 ? t0 : weft_now()) >= d) return -ETIMEDOUT;
    long r;
    do {
        r = !wr                        ? syscall(SYS_pread64, f->fd, b, n, pos)
            : (f->flags & WEFT_APPEND) ? syscall(SYS_write, f->fd, b, n)
                                       : syscall(SYS_pwrite64, f->fd, b, n, pos);
    } while (r < 0 && errno == EINTR);
    if (r < 0) r = -errno;
    note_direct(f, t0);
    return r;
}

/* The flusher's coalesced write, direct (as above; no check for
 * cancellation: the flusher is never cancelled). */
static ssize_t direct_writev(weft_file *f, const struct iovec *iov, int cnt, off_t pos, int64_t t0) {
    long r;
    do {
        r = (f->flags & WEFT_APPEND) ? syscall(SYS_writev, f->fd, iov, cnt)
                                     : syscall(SYS_pwritev, f->fd, iov, cnt, (long)pos, (long)((uint64_t)pos >> 32));
    } while (r < 0 && errno == EINTR);
    if (r < 0) r = -errno;
    note_direct(f, t0);
    return r;
}

ssize_t weft_file_write(weft_file *f, const void *b, size_t n, off_t pos) {
    if (!f || (n && !b) || pos < 0) return -EINVAL;
    size_t done = 0;
    while (done < n) {
        const char *at = (const char *)b + done;
        size_t left = n - done;
        off_t p = pos + (off_t)done;
        int64_t t0;
        ssize_t r = go_direct(f, left, &t0)      ? direct_io(f, 1, (void *)at, left, p, t0)
                    : (f->flags & WEFT_APPEND) ? weft_write(f->fd, at, left)
                                               : weft_pwrite(f->fd, at, left, p);
        if (r < 0) return r;
        if (r == 0) return -EIO;
        done += (size_t)r;
    }
    return (ssize_t)n;
}

ssize_t weft_file_read(weft_file *f, void *b, size_t n, off_t pos) {
    if (!f || (n && !b) || pos < 0) return -EINVAL;
    int64_t t0;
    return go_direct(f, n, &t0) ? direct_io(f, 0, b, n, pos, t0) : weft_pread(f->fd, b, n, pos);
}

/* ---- the flusher ------------------------------------------------------------------- */

static void *call_done(void *arg) {
    freq *r = arg;
    r->done(r->res, r->ctx);
    free(r);
    return NULL;
}

/* Fills r's future and hands its handler on (or frees r). */
static void complete(weft_file *f, freq *r) {
    weft_future *fut = r->fut;
    if (r->res >= 0) weft_future_complete(fut, (void *)(intptr_t)r->res);
    else weft_future_fail(fut, (int)-r->res);
    weft_future_unref(fut);
    if (!r->done) {
        free(r);
        return;
    }
    weft_executor *ex = f->ex ? f->ex : weft_file_default_executor();
    weft_future *g = ex ? weft_submit(ex, call_done, r) : NULL;
    /* refused (or no executor, no memory): run it here rather than lose it */
    int ran_or_queued = g && (!weft_future_done(g) || weft_future_get(g, NULL, 0) == 0);
    weft_future_unref(g);
    if (!ran_or_queued) call_done(r);
}

/* Carries out a run of adjacent writes starting at w (count k); sets each
 * one's res. */
static void write_run(weft_file *f, freq *w, int k) {
    struct iovec iov[k];
    size_t total = 0;
    freq *r = w;
    for (int i = 0; i < k; i++, r = r->next) {
        iov[i].iov_base = (void *)r->buf;
        iov[i].iov_len = r->n;
        total += r->n;
    }
    size_t done = 0;
    ssize_t err = 0;
    int at = 0;
    int append = (f->flags & WEFT_APPEND) != 0;
    while (done < total) {
        int64_t t0;
        ssize_t n = go_direct(f, total - done, &t0) ? direct_writev(f, iov + at, k - at, w->pos + (off_t)done, t0)
                    : append                        ? weft_writev(f->fd, iov + at, k - at)
                                                    : weft_pwritev(f->fd, iov + at, k - at, w->pos + (off_t)done);
        if (n <= 0) {
            err = n < 0 ? n : -EIO;
            break;
        }
        done += (size_t)n;
        while (at < k && (size_t)n >= iov[at].iov_len) { /* drop what was written */
            n -= (ssize_t)iov[at].iov_len;
            at++;
        }
        if (at < k && n) {
            iov[at].iov_base = (char *)iov[at].iov_base + n;
            iov[at].iov_len -= (size_t)n;
        }
    }
    size_t start = 0;
    r = w;
    for (int i = 0; i < k; i++, r = r->next) {
        r->res = start + r->n <= done ? (ssize_t)r->n : err;
        start += r->n;
    }
}

/* Carries out the list l in order, completing each operation. */
static void run_list(weft_file *f, freq *l) {
    while (l) {
        freq *r = l;
        int k = 1;
        if (r->kind == R_WRITE) { /* the run of adjacent writes it starts */
            size_t bytes = r->n;
            off_t end = r->pos + (off_t)r->n;
            for (freq *x = r->next; x && x->kind == R_WRITE && k < IOV_MAX && bytes + x->n <= RUN_MAX_BYTES &&
                                    ((f->flags & WEFT_APPEND) || x->pos == end);
                 x = x->next) {
                k++;
                bytes += x->n;
                end += (off_t)x->n;
            }
            write_run(f, r, k);
        } else if (r->kind == R_READ) {
            r->res = weft_pread(f->fd, r->rbuf, r->n, r->pos);
        } else {
            r->res = r->kind == R_FSYNC ? weft_fsync(f->fd) : weft_fdatasync(f->fd);
        }
        for (int i = 0; i < k; i++) {
            freq *next = l->next;
            complete(f, l);
            l = next;
        }
        pthread_mutex_lock(&f->lock);
        f->inflight -= (size_t)k;
        weft__wq_wake_all(&f->room);
        pthread_mutex_unlock(&f->lock);
    }
}

static void *flusher_main(void *arg) {
    weft_file *f = arg;
    atomic_store(&f->flusher_vt, weft_self());
    pthread_mutex_lock(&f->lock);
    for (;;) {
        freq *l = f->qh;
        f->qh = f->qt = NULL;
        f->queued = 0;
        if (!l) break;
        pthread_mutex_unlock(&f->lock);
        run_list(f, l);
        pthread_mutex_lock(&f->lock);
    }
    f->flusher = 0;
    atomic_store(&f->flusher_vt, NULL);
    if (f->inflight == 0) weft__wq_wake_all(&f->idle);
    pthread_mutex_unlock(&f->lock); /* a closer may free f from here on */
    return NULL;
}

/* ---- asynchronous submission ------------------------------------------------------------ */

/* An operation refused before it was queued: its future fails with err
 * now; its handler is not called (the caller has the error at once).
 * The caller holds its own reference on the future. */
static void refuse(weft_file *f, freq *r, int err) {
    r->res = err;
    r->done = NULL;
    complete(f, r);
}

/* refuse(), for an operation whose caller's reference is not taken yet. */
static weft_future *refuse_now(weft_file *f, freq *r, int err) {
    weft_future *user = weft_future_ref(r->fut);
    refuse(f, r, err);
    return user;
}

/* Queues r (its future made) and returns the caller's future. */
static weft_future *submit(weft_file *f, freq *r) {
    weft_future *user = weft_future_ref(r->fut); /* before a running flusher can fill and drop r */
    int err = 0, spawn = 0;
    pthread_mutex_lock(&f->lock);
    while (!f->closing && f->inflight >= f->max_inflight) {
        err = weft__wq_wait_mutex(&f->lock, &f->room, 0, 0, f);
        if (err < 0) break;
    }
    if (!err && f->closing) err = -EBADF;
    if (!err) {
        f->inflight++;
        r->next = NULL;
        if (f->qt) f->qt->next = r;
        else f->qh = r;
        f->qt = r;
        f->queued++;
        if (!f->flusher) f->flusher = spawn = 1;
    }
    pthread_mutex_unlock(&f->lock);
    if (err) {
        refuse(f, r, err);
        return user;
    }
    if (spawn) {
        weft_thread_opts a = {.name = "file flusher", .group = weft_group_default()}; /* runtime work: not a group's */
        if (weft_spawn(NULL, flusher_main, f, &a) < 0) flusher_main(f); /* no vthread: do it here */
    }
    return user;
}

static freq *freq_new(int kind, void (*done)(ssize_t, void *), void *ctx) {
    freq *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (weft_future_create(&r->fut) < 0) {
        free(r);
        return NULL;
    }
    r->kind = kind;
    r->done = done;
    r->ctx = ctx;
    return r;
}

weft_future *weft_file_write_async(weft_file *f, const void *b, size_t n, off_t pos,
                                   void (*done)(ssize_t res, void *ctx), void *ctx) {
    if (!f) return errno = EINVAL, NULL;
    freq *r = freq_new(R_WRITE, done, ctx);
    if (!r) return errno = ENOMEM, NULL;
    if ((n && !b) || pos < 0 || n > SSIZE_MAX) return refuse_now(f, r, -EINVAL);
    if (n <= WEFT_FILE_INLINE) {
        memcpy(r->inl, b, n);
        r->buf = r->inl;
    } else {
        r->buf = b;
    }
    r->n = n;
    r->pos = pos;
    return submit(f, r);
}

weft_future *weft_file_read_async(weft_file *f, void *b, size_t n, off_t pos,
                                  void (*done)(ssize_t res, void *ctx), void *ctx) {
    if (!f) return errno = EINVAL, NULL;
    freq *r = freq_new(R_READ, done, ctx);
    if (!r) return errno = ENOMEM, NULL;
    if ((n && !b) || pos < 0) return refuse_now(f, r, -EINVAL);
    r->rbuf = b;
    r->n = n;
    r->pos = pos;
    return submit(f, r);
}

/* A handler running on the flusher (caller-runs) that would wait for it. */
static int on_own_flusher(weft_file *f) {
    weft_thread *self = weft_self();
    return self && atomic_load(&f->flusher_vt) == self;
}

int weft_file_force(weft_file *f, int metadata) {
    if (!f) return -EINVAL;
    if (on_own_flusher(f)) return -EDEADLK;
    freq *r = freq_new(metadata ? R_FSYNC : R_FDATASYNC, NULL, NULL);
    if (!r) return -ENOMEM;
    weft_future *u = submit(f, r); /* behind every operation accepted before */
    int res = weft_future_get(u, NULL, 0);
    weft_future_unref(u);
    return res;
}

/* ---- size, truncate, locks --------------------------------------------------------------- */

off_t weft_file_size(weft_file *f) {
    if (!f) return -EINVAL;
    struct stat st;
    if (fstat(f->fd, &st) < 0) return -errno;
    return st.st_size;
}

int weft_file_truncate(weft_file *f, off_t size) {
    if (!f || size < 0) return -EINVAL;
    if (ftruncate(f->fd, size) < 0) return -errno;
    return 0;
}

static int ofd_lock(weft_file *f, off_t pos, off_t len, int type) {
    if (!f || pos < 0 || len < 0) return -EINVAL;
    struct flock fl = {.l_type = (short)type, .l_whence = SEEK_SET, .l_start = pos, .l_len = len};
    if (fcntl(f->fd, F_OFD_SETLK, &fl) == 0) return 0;
    return errno == EACCES ? -EAGAIN : -errno;
}

int weft_file_try_lock(weft_file *f, off_t pos, off_t len, int shared) {
    return ofd_lock(f, pos, len, shared ? F_RDLCK : F_WRLCK);
}

int weft_file_lock(weft_file *f, off_t pos, off_t len, int shared, int64_t deadline) {
    /* The kernel's waiting lock (F_OFD_SETLKW) cannot be given a deadline
     * or cancelled; a conflicting lock is waited out by retrying, from
     * 1 ms up to every 50 ms, as a parked vthread. */
    int64_t backoff = 1000000;
    for (;;) {
        int r = weft_file_try_lock(f, pos, len, shared);
        if (r != -EAGAIN) return r;
        int64_t until = weft_now() + backoff;
        if (deadline && until > deadline) until = deadline;
        if (deadline && weft_now() >= deadline) return -ETIMEDOUT;
        r = weft_sleep_until(until);
        if (r < 0) return r;
        if (backoff < 50000000) backoff *= 2;
    }
}

int weft_file_unlock(weft_file *f, off_t pos, off_t len) { return ofd_lock(f, pos, len, F_UNLCK); }

/* ---- close ------------------------------------------------------------------------------ */

static int finish_close(weft_file *f) {
    pthread_mutex_lock(&f->lock);
    while (f->inflight || f->flusher) weft__wq_wait_mutex(&f->lock, &f->idle, 0, 1, f);
    pthread_mutex_unlock(&f->lock);
    int r = 0;
    if (f->path && unlink(f->path) < 0) r = -errno;
    if (close(f->fd) < 0 && !r) r = -errno;
    pthread_mutex_lock(&f->lock); /* the flusher's last unlock is done */
    pthread_mutex_unlock(&f->lock);
    pthread_mutex_destroy(&f->lock);
    free(f->path);
    WEFT__KILL(f);
    free(f);
    return r;
}

int weft_file_close(weft_file *f) {
    if (!f) return -EINVAL;
    CHECK_OPEN(f, "weft_file_close");
    if (on_own_flusher(f)) return -EDEADLK;
    pthread_mutex_lock(&f->lock);
    if (f->closing) { /* another close is under way (it frees f: not touched again here) */
        pthread_mutex_unlock(&f->lock);
        return -EBADF;
    }
    f->closing = 1;
    weft__wq_wake_all(&f->room); /* waiting submitters fail with -EBADF */
    pthread_mutex_unlock(&f->lock);
    return finish_close(f);
}

int weft_file_close_now(weft_file *f) {
    if (!f) return -EINVAL;
    CHECK_OPEN(f, "weft_file_close_now");
    if (on_own_flusher(f)) return -EDEADLK;
    pthread_mutex_lock(&f->lock);
    if (f->closing) {
        pthread_mutex_unlock(&f->lock);
        return -EBADF;
    }
    f->closing = 1;
    weft__wq_wake_all(&f->room);
    freq *l = f->qh;
    int n = (int)f->queued;
    f->qh = f->qt = NULL;
    f->queued = 0;
    pthread_mutex_unlock(&f->lock);
    while (l) { /* never started: cancelled, their handlers told so */
        freq *next = l->next;
        l->res = -ECANCELED;
        complete(f, l);
        l = next;
    }
    pthread_mutex_lock(&f->lock);
    f->inflight -= (size_t)n;
    if (f->inflight == 0) weft__wq_wake_all(&f->idle);
    pthread_mutex_unlock(&f->lock);
    int r = finish_close(f);
    return r < 0 ? r : n;
}
