/*
 * weft-httpd: a static-file HTTP/1.1 server, one vthread per connection
 * (or one of three other models).
 *
 * Shape.  weft_main runs the server: it opens the docroot (O_PATH) and the
 * listening socket, prints "listening on HOST:PORT", starts a signal
 * watcher (a vthread reading a signalfd) and one acceptor vthread per
 * carrier.  Every vthread has a name for the thread dump (SIGQUIT writes
 * one to stderr; WEFT_DUMP_ON_SIGQUIT=json for JSON): "main", "watcher",
 * "acceptor 0" ..., "conn 127.0.0.1:53412" (the peer, formatted by hand:
 * the connection path stays cheap), "pool-reaper", "cpu-job".  Each accepted connection is served by serve_conn(), the same
 * code for every model:
 *   virtual   a detached vthread per connection (the default);
 *   thread    a detached pthread per connection (the first article's
 *             server); weft's I/O calls then make the plain system calls;
 *   pool:N    N pthreads taking connections from a bounded queue (Tomcat's
 *             executor): a connection holds its thread while it lives.  A
 *             connection's clocks start at its accept: one that waits in
 *             the queue past --idle-timeout is answered 503 and closed by a
 *             reaper vthread, without taking a worker;
 *   async     no thread per connection: the same HTTP as a chain of
 *             completion handlers (weft/async.h; "--model async" below),
 *             an idle connection holding no stack and no buffer.
 *
 * A connection.  A 16 KiB buffer on the connection's stack holds what was
 * received; the parser (http_parse.c) finds one request head at a time,
 * pipelined requests stay in the buffer for the next round.  A head must
 * arrive within --header-timeout from its first byte (slowloris); an idle
 * keep-alive connection is closed after --idle-timeout; every send must
 * progress within --send-timeout.  These are weft deadlines, so a timed-out
 * read consumes nothing and leaves the connection in a known state (we
 * answer 408 if a head was started, and close).  GET and HEAD of regular
 * files only: a file's head and body go out in one send when the body is
 * small (SMALL_BODY), else the head with MSG_MORE and the body by
 * weft_sendfile (zero-copy).  A request body (Content-Length) is read and
 * dropped up to MAX_BODY, all of it within --body-timeout; a chunked one,
 * or anything after an error response, closes the connection after the
 * answer -- the parser has already refused the smuggling cases.  Every
 * header is counted into its buffer: a response goes out whole or not at
 * all.  A directory's redirect names the normalised path that was looked
 * up, percent-encoded (never the raw target, which could name a host).  A
 * file that gives fewer bytes than its fstat promised (it shrank meanwhile)
 * is answered 500 if its head has not gone out yet; if it has, the
 * connection closes after the short body, as nginx does -- the client sees
 * less than Content-Length, never the next response's bytes in its place.
 * Either way a note goes to stderr (at most one a second) and the access
 * log has the line, with the bytes really sent.
 *
 * The access log (--access-log) is written by a thread of its own from a
 * bounded ring (see "the access log" below): a connection never waits for
 * it; lines it cannot take are dropped, counted and reported on stderr.
 * The request target is escaped in it as nginx does (\x22 for '"').
 *
 * Limits.  --max-conns bounds live connections: an acceptor at the limit
 * waits (weft_park) until one ends, leaving newcomers in the kernel's
 * backlog.  EMFILE/ENFILE: the acceptor gives up a reserved fd, accepts the
 * newcomer and tries to re-reserve: if it can, descriptors were freed since
 * the EMFILE (stale on a loaded machine) and the newcomer is served; if not,
 * it is closed (so it is not left hanging) and the reserve taken back; the
 * acceptor logs at most once a second and sleeps briefly -- no spinning.  If another thread took
 * the freed number first, an acceptor takes a new reserve before a later
 * accept, once a descriptor is free; a newcomer accepted while it still
 * cannot is shed, and its number becomes the reserve.
 *
 * Drain.  SIGTERM/SIGINT: the acceptors are cancelled (their weft_accept
 * returns -ECANCELED) and the listening socket closed; connections waiting
 * for their next request are shut down for reading, which ends their wait;
 * those in the middle of a request finish the response and close.  A
 * request already received is served, not dropped: a connection that
 * waited in the pool's queue, or starts after the drain began, reads what
 * is there without waiting and answers it (with "Connection: close"); only
 * one with nothing to read is closed at once.  The server exits when the
 * last one is gone (queued ones included), or after --drain-timeout, or at
 * a second SIGTERM/SIGINT; connections cut that way (still queued, or in
 * the middle of a response) make the exit status 3, and stderr says how
 * many.
 *
 * Threads touching what: the connection list (for the drain) is under a
 * mutex, taken twice per connection; counters are atomics; everything else
 * belongs to one connection's thread.
 */
#define _GNU_SOURCE
#include "file_cache.h"
#include "http_files.h"
#include "http_parse.h"
#include "weft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (HTTP_MAX_HEAD + 512)
#define SMALL_BODY 8192
#define MAX_BODY (1024 * 1024)
#define NS 1000000000LL
#define EXIT_CUT 3 /* the exit status when the drain cut connections */

enum { MODEL_VIRTUAL, MODEL_THREAD, MODEL_POOL, MODEL_ASYNC };

static struct {
    const char *host, *port, *root, *access_log;
    int model, pool_threads, carriers, max_conns;
    int64_t delay_ns;
    long delay_every;
    int64_t header_timeout, idle_timeout, send_timeout, drain_timeout, body_timeout;
    int quiet;
    size_t cache_bytes;
    int cpu_job;          /* CPU_JOB_*: a CPU-bound background job in the process (--cpu-job) */
    int cpu_job_vthreads; /* its vthreads (0: one per carrier) */
} O = {.cache_bytes = 64 << 20, .host = "127.0.0.1", .port = "8080", .root = "./www", .model = MODEL_VIRTUAL, .pool_threads = 200,
       .header_timeout = 10 * NS, .idle_timeout = 15 * NS, .send_timeout = 30 * NS, .drain_timeout = 10 * NS,
       .body_timeout = 10 * NS};

static int root_fd = -1, listen_fd = -1, log_fd = -1;
static _Atomic int reserve_fd = -1; /* given up, one acceptor at a time, to shed at EMFILE */
/* nconns: connection slots taken (an acceptor takes one before it accepts);
 * nopen: connections accepted and not yet closed (what the drain reports) */
static atomic_int nconns, nopen, draining, drain_cut;
static atomic_long nrequests;
static weft_thread *acceptors[64];
static int nacceptors;
static weft_thread *_Atomic acceptor_waiting[64];

/* ------------------------------------------------------------------------ */
/* connections list (for the drain)                                          */
/* ------------------------------------------------------------------------ */

/* the client's address, for the access log (28 bytes, not a sockaddr_storage's 128:
 * --model async keeps one per idle connection) */
typedef union peer_addr {
    struct sockaddr sa;
    struct sockaddr_in in;
    struct sockaddr_in6 in6;
} peer_addr;

typedef struct conn {
    int fd;
    atomic_int idle; /* waiting for the first byte of a request */
    struct conn *prev, *next;
    peer_addr peer;
    int fresh; /* --model async: not on a dispatcher yet (in peer's padding) */
} conn;

static void set_peer(conn *c, const struct sockaddr_storage *peer) {
    if (peer) memcpy(&c->peer, peer, sizeof c->peer);
}

static pthread_mutex_t conns_lock = PTHREAD_MUTEX_INITIALIZER;
static conn *conns_head;

static void conn_register(conn *c) {
    pthread_mutex_lock(&conns_lock);
    c->prev = NULL;
    c->next = conns_head;
    if (conns_head) conns_head->prev = c;
    conns_head = c;
    int d = atomic_load(&draining);
    pthread_mutex_unlock(&conns_lock);
    if (d) shutdown(c->fd, SHUT_RD);
}

static void conn_unregister(conn *c) {
    pthread_mutex_lock(&conns_lock);
    if (c->prev) c->prev->next = c->next;
    else conns_head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&conns_lock);
}

/* Puts fd back as the reserve, unless another acceptor re-armed it first. */
static void reserve_put(int fd) {
    int expect = -1;
    if (!atomic_compare_exchange_strong(&reserve_fd, &expect, fd)) close(fd);
}

/* The spare descriptor, given up to shed load at EMFILE, comes back as soon
 * as a descriptor can be had again: an acceptor that finds it missing tries
 * before each accept (the shedding acceptor's own re-arm can lose the race
 * for the number it freed to another thread opening a file or accepting).
 * While it is there this is one load; while it is missing, one failing
 * open() per accept, and accepts at EMFILE are 10 ms apart. */
static void reserve_rearm(void) {
    if (atomic_load_explicit(&reserve_fd, memory_order_relaxed) >= 0) return;
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) reserve_put(fd);
}

/* A connection ended (its descriptor closed): one more may be accepted. */
static void conn_slot_free(void) {
    atomic_fetch_sub(&nopen, 1);
    atomic_fetch_sub(&nconns, 1);
    for (int i = 0; i < nacceptors; i++) {
        weft_thread *a = atomic_exchange(&acceptor_waiting[i], NULL);
        if (a) weft_unpark(a);
    }
}

/* ------------------------------------------------------------------------ */
/* responses                                                                 */
/* ------------------------------------------------------------------------ */

/* The simulated I/O this request waits for (--delay-ms, --delay-every):
 * ns, or 0. */
static int64_t request_delay(void) {
    if (!O.delay_ns) return 0;
    long k = atomic_fetch_add(&nrequests, 1) + 1;
    if (O.delay_every > 1 && k % O.delay_every != 0) return 0;
    return O.delay_ns;
}

static void sleep_delay(void) {
    if (!request_delay()) return;
    if (O.model == MODEL_VIRTUAL) {
        weft_sleep(O.delay_ns);
    } else {
        struct timespec ts = {O.delay_ns / NS, O.delay_ns % NS};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
    }
}

/* Sends all of buf; returns 0 or -errno (a send stuck past --send-timeout
 * is -ETIMEDOUT). */
static int send_all(int fd, const char *buf, size_t n, int more) {
    while (n) {
        ssize_t r = weft_send_until(fd, buf, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0), weft_now() + O.send_timeout);
        if (r < 0) return (int)r;
        buf += r;
        n -= (size_t)r;
    }
    return 0;
}

static int put(char *b, int at, int cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int put(char *b, int at, int cap, const char *fmt, ...) {
    if (at >= cap) return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b + at, (size_t)(cap - at), fmt, ap);
    va_end(ap);
    return n < 0 ? at : (at + n < cap ? at + n : cap);
}

/* Appenders for the hot path (vsnprintf costs ~0.3 us a call here); cap
 * is checked by the callers' fixed sizes: every piece is bounded. */
static inline int app(char *b, int at, const char *s, size_t n) {
    memcpy(b + at, s, n);
    return at + (int)n;
}
#define APP_LIT(b, at, lit) app((b), (at), (lit), sizeof(lit) - 1)
static inline int app_str(char *b, int at, const char *s) { return app(b, at, s, strlen(s)); }
static int app_u64(char *b, int at, unsigned long long v) {
    char t[24];
    int n = 0;
    do t[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (n) b[at++] = t[--n];
    return at;
}

static int head_common(char *b, int cap, int status, int keep_alive) {
    (void)cap; /* under 200 bytes: every caller has 1 KiB */
    char date[HTTP_DATE_LEN];
    http_fmt_date(time(NULL), date);
    int at = APP_LIT(b, 0, "HTTP/1.1 ");
    at = app_u64(b, at, (unsigned)status);
    b[at++] = ' ';
    at = app_str(b, at, http_reason(status));
    at = APP_LIT(b, at, "\r\nServer: weft-httpd\r\nDate: ");
    at = app(b, at, date, HTTP_DATE_LEN - 1);
    if (keep_alive) at = APP_LIT(b, at, "\r\nConnection: keep-alive\r\n");
    else at = APP_LIT(b, at, "\r\nConnection: close\r\n");
    return at;
}

/* ------------------------------------------------------------------------ */
/* the access log: queued by the connections, written by a thread of its own */
/* ------------------------------------------------------------------------ */

/*
 * A connection never writes the log itself: a log that cannot take lines
 * (a pipe nobody reads, a stalled disk) would hold its carrier, and with
 * it every connection on that carrier.  A line goes into a ring of bytes
 * (LOG_RING: about 25,000 lines of 80 bytes, some seconds of a busy
 * server), and the writer, a plain pthread, takes the ready lines in order
 * and writes them with one writev a batch.  A full ring drops the line and
 * counts it; so does a failed write (a full disk loses log lines, not
 * requests).  Drops are reported on stderr at most once a second while
 * they happen, and in total when the server stops.
 *
 * The ring.  head counts the bytes reserved, tail those the writer has
 * written; both only grow.  A producer formats its line on its stack,
 * reserves a record -- a 4-byte header and the line, rounded up to 8 --
 * with one CAS on head (refused if it would pass tail by a whole ring),
 * copies the line in and publishes the header (release).  A record never
 * wraps: one that would is preceded by a padding record to the ring's end.
 * The writer reads records from tail while their headers are published,
 * writes them, zeroes the bytes (so that a stale byte never looks like a
 * published header) and then moves tail (release), which gives the space
 * back.  A record whose producer is still copying stops the batch there:
 * order is kept.
 *
 * Waking the writer costs a connection nothing in the common case: after a
 * batch the writer naps LOG_NAP_NS (lines gather into the next batch) and
 * is woken early only when the ring is a quarter full; with nothing to
 * write it sleeps until the next line's producer wakes it.  The producer's
 * check is one load of wstate after publishing its record (seq_cst both,
 * against the writer's store of wstate and look at the ring: one of them
 * sees the other).
 */
#define LOG_RING ((size_t)2 << 20) /* bytes (a power of 2) */
#define LOG_LINE 1024              /* a line at most: the request target is cut to fit */
#define LOG_BATCH 512              /* lines a writev at most (<= IOV_MAX) */
#define LOG_NAP_NS (10 * 1000000LL)
#define LOG_PAD 0x80000000u /* a header's flag: padding to the ring's end, not a line */

enum { W_AWAKE, W_NAP, W_SLEEP };

static struct {
    char *ring;
    _Alignas(64) atomic_size_t head; /* bytes reserved */
    _Alignas(64) atomic_size_t tail; /* bytes written and given back (only the writer moves it) */
    atomic_int wstate;               /* W_*: how the writer waits */
    atomic_long dropped;             /* lines lost: the ring full, or the write failed */
    atomic_int done;                 /* the writer has ended */
    int stop, started;
    pthread_t th;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} LG = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static inline _Atomic uint32_t *log_hdr(size_t pos) { return (_Atomic uint32_t *)(LG.ring + (pos & (LOG_RING - 1))); }
static inline size_t log_rec_size(size_t len) { return (4 + len + 7) & ~(size_t)7; }

/* A rate-limited note on stderr: at most one a second per *last. */
static void note_limited(_Atomic int64_t *last, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_limited(_Atomic int64_t *last, const char *fmt, ...) {
    int64_t now = weft_now(), was = atomic_load_explicit(last, memory_order_relaxed);
    if ((was && now - was < NS) || !atomic_compare_exchange_strong(last, &was, now)) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void log_dropped(long n) {
    static _Atomic int64_t last;
    long total = atomic_fetch_add_explicit(&LG.dropped, n, memory_order_relaxed) + n;
    note_limited(&last, "weft-httpd: access log: %ld line(s) dropped so far (it cannot keep up)\n", total);
}

/* Writes the published lines from tail on, at most LOG_BATCH; returns how
 * many records were taken (lines written or counted as dropped, padding). */
static int log_write_batch(void) {
    struct iovec iov[LOG_BATCH];
    size_t start = atomic_load_explicit(&LG.tail, memory_order_relaxed), pos = start;
    int n = 0, recs = 0;
    while (n < LOG_BATCH) {
        uint32_t h = atomic_load_explicit(log_hdr(pos), memory_order_acquire);
        if (!h) break;
        recs++;
        if (h & LOG_PAD) {
            pos += h & ~LOG_PAD;
            continue;
        }
        iov[n].iov_base = LG.ring + (pos & (LOG_RING - 1)) + 4;
        iov[n].iov_len = h;
        n++;
        pos += log_rec_size(h);
    }
    if (!recs) return 0;
    int i = 0;
    while (i < n) {
        ssize_t w = writev(log_fd, iov + i, n - i);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) { /* a full disk, a closed pipe: these lines are lost */
            static _Atomic int64_t last;
            note_limited(&last, "weft-httpd: access log: write: %s\n", strerror(errno));
            log_dropped(n - i);
            break;
        }
        while (i < n && (size_t)w >= iov[i].iov_len) w -= (ssize_t)iov[i++].iov_len;
        if (i < n) {
            iov[i].iov_base = (char *)iov[i].iov_base + w;
            iov[i].iov_len -= (size_t)w;
        }
    }
    /* records never wrap, and the span [start, pos) may: zero it in two pieces */
    size_t off = start & (LOG_RING - 1), len = pos - start;
    size_t first = len < LOG_RING - off ? len : LOG_RING - off;
    memset(LG.ring + off, 0, first);
    memset(LG.ring, 0, len - first);
    atomic_store_explicit(&LG.tail, pos, memory_order_release);
    return recs;
}

static int log_pending(void) {
    return atomic_load(log_hdr(atomic_load_explicit(&LG.tail, memory_order_relaxed))) != 0;
}

static void *log_writer(void *unused) {
    for (;;) {
        int n = log_write_batch();
        if (n >= LOG_BATCH) continue; /* there may be more */
        pthread_mutex_lock(&LG.lock);
        if (LG.stop && !n) {
            pthread_mutex_unlock(&LG.lock);
            break;
        }
        if (LG.stop) {
            pthread_mutex_unlock(&LG.lock);
            continue;
        }
        /* wrote some: nap, so that lines gather; wrote none: sleep until a line comes */
        atomic_store(&LG.wstate, n ? W_NAP : W_SLEEP);
        if (!n && log_pending()) atomic_store(&LG.wstate, W_AWAKE);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += LOG_NAP_NS;
        if (until.tv_nsec >= NS) until.tv_sec++, until.tv_nsec -= NS;
        while (atomic_load(&LG.wstate) != W_AWAKE && !LG.stop) {
            if (n) {
                if (pthread_cond_timedwait(&LG.cond, &LG.lock, &until) == ETIMEDOUT) break;
            } else {
                pthread_cond_wait(&LG.cond, &LG.lock);
            }
        }
        atomic_store(&LG.wstate, W_AWAKE);
        pthread_mutex_unlock(&LG.lock);
    }
    atomic_store(&LG.done, 1);
    return NULL;
}

/* Starts the writer (after the signal mask is set: it inherits it).  0 or -1. */
static int log_start(void) {
    if (log_fd < 0) return 0;
    LG.ring = calloc(1, LOG_RING);
    if (!LG.ring) {
        fprintf(stderr, "weft-httpd: out of memory for the access log's ring\n");
        return -1;
    }
    int e = pthread_create(&LG.th, NULL, log_writer, NULL);
    if (e) {
        fprintf(stderr, "weft-httpd: access log: cannot start its writer: %s\n", strerror(e));
        return -1;
    }
    LG.started = 1;
    return 0;
}

/* Writes what is queued and ends the writer: waits while it makes
 * progress, and gives up on a log that takes nothing for a second (the
 * lines still queued are counted as dropped).  Then says how many lines
 * were lost. */
static void log_stop(void) {
    if (!LG.started) return;
    LG.started = 0;
    pthread_mutex_lock(&LG.lock);
    LG.stop = 1;
    pthread_cond_signal(&LG.cond);
    pthread_mutex_unlock(&LG.lock);
    size_t seen = atomic_load(&LG.tail);
    int64_t stalled_since = weft_now();
    while (!atomic_load(&LG.done)) {
        size_t t = atomic_load(&LG.tail);
        if (t != seen) seen = t, stalled_since = weft_now();
        else if (weft_now() - stalled_since > NS) break;
        weft_sleep(5 * 1000000);
    }
    if (atomic_load(&LG.done)) {
        pthread_join(LG.th, NULL);
    } else { /* stuck in a write: count the lines still in the ring, its batch's included */
        long left = 0;
        for (size_t pos = atomic_load(&LG.tail), end = atomic_load(&LG.head); pos < end;) {
            uint32_t h = atomic_load(log_hdr(pos));
            if (!h) break;
            if (h & LOG_PAD) {
                pos += h & ~LOG_PAD;
            } else {
                left++;
                pos += log_rec_size(h);
            }
        }
        atomic_fetch_add(&LG.dropped, left);
    }
    long d = atomic_load(&LG.dropped);
    if (d) fprintf(stderr, "weft-httpd: access log: %ld line(s) dropped in all (it could not keep up)\n", d);
}

/* Queues the line for rq's answer; never waits (a full ring drops it). */
static void access_log(const conn *c, const http_request *rq, int status, long long bytes) {
    if (log_fd < 0) return;
    char b[LOG_LINE];
    char host[INET6_ADDRSTRLEN] = "-";
    if (c->peer.sa.sa_family == AF_INET) inet_ntop(AF_INET, &c->peer.in.sin_addr, host, sizeof host);
    else if (c->peer.sa.sa_family == AF_INET6) inet_ntop(AF_INET6, &c->peer.in6.sin6_addr, host, sizeof host);
    char date[HTTP_DATE_LEN];
    http_fmt_date(time(NULL), date);
    /* every piece but the target is bounded (< 140 bytes); the target,
     * escaped, gets what is left of the line */
    int at = app_str(b, 0, host);
    at = APP_LIT(b, at, " [");
    at = app(b, at, date, HTTP_DATE_LEN - 1);
    at = APP_LIT(b, at, "] \"");
    if (rq) {
        at = app_str(b, at, http_method_name(rq->method));
        b[at++] = ' ';
        at += (int)http_log_escape(b + at, LOG_LINE - 64 - (size_t)at, rq->target.p, rq->target.n);
    } else {
        at = APP_LIT(b, at, "- -");
    }
    at = APP_LIT(b, at, " HTTP/1.");
    b[at++] = (char)('0' + (rq ? rq->minor % 10 : 1));
    at = APP_LIT(b, at, "\" ");
    at = app_u64(b, at, (unsigned)status);
    b[at++] = ' ';
    at = app_u64(b, at, bytes > 0 ? (unsigned long long)bytes : 0);
    b[at++] = '\n';
    /* reserve a record (after padding to the ring's end, if it would wrap) */
    size_t need = log_rec_size((size_t)at), pos = atomic_load_explicit(&LG.head, memory_order_relaxed), pad;
    do {
        size_t room = LOG_RING - (pos & (LOG_RING - 1));
        pad = need > room ? room : 0;
        if (pos + pad + need - atomic_load_explicit(&LG.tail, memory_order_acquire) > LOG_RING) {
            log_dropped(1); /* full: the writer is a ring behind */
            return;
        }
    } while (!atomic_compare_exchange_weak_explicit(&LG.head, &pos, pos + pad + need, memory_order_relaxed,
                                                    memory_order_relaxed));
    if (pad) atomic_store_explicit(log_hdr(pos), LOG_PAD | (uint32_t)pad, memory_order_release);
    memcpy(LG.ring + ((pos + pad) & (LOG_RING - 1)) + 4, b, (size_t)at);
    /* publish, then look at how the writer waits (seq_cst both: see above) */
    atomic_store(log_hdr(pos + pad), (uint32_t)at);
    int ws = atomic_load(&LG.wstate);
    if (ws == W_AWAKE) return;
    if (ws == W_NAP && pos + pad + need - atomic_load_explicit(&LG.tail, memory_order_relaxed) < LOG_RING / 4) return;
    if (atomic_compare_exchange_strong(&LG.wstate, &ws, W_AWAKE)) {
        pthread_mutex_lock(&LG.lock);
        pthread_cond_signal(&LG.cond);
        pthread_mutex_unlock(&LG.lock);
    }
}

/* ------------------------------------------------------------------------ */
/* a response, planned, then sent (blocking, or by handlers: --model async)  */
/* ------------------------------------------------------------------------ */

/* What goes out: the head (a small body appended to it), then a body from
 * memory (a cache entry's) or from a file (sendfile).  Every byte of a head
 * is counted into its buffer: a response is whole or not sent at all. */
typedef struct response {
    char *head; /* buf, or malloc'd for a long Location */
    size_t head_len;
    const char *mem; /* body from memory, after the head */
    size_t mem_len;
    int fd; /* body from this file by sendfile: file_len bytes at off */
    off_t off;
    long long file_len;
    fc_entry *e; /* the cache entry mem points into */
    /* the access log's line, written once the response went out */
    const http_request *rq;
    int code;
    long long log_bytes;
    char buf[1024 + SMALL_BODY];
} response;

static void response_init(response *p) {
    memset(p, 0, offsetof(response, buf));
    p->head = p->buf;
    p->fd = -1;
}

static void response_free(response *p) {
    if (p->e) fc_release(p->e);
    if (p->fd >= 0) close(p->fd);
    if (p->head != p->buf) free(p->head);
    p->e = NULL;
    p->fd = -1;
    p->head = p->buf;
}

/* A file that gave fewer bytes than its fstat promised (it shrank, or a
 * read failed): a note on stderr, at most one a second.  sent: whether the
 * head had gone out (then the connection closes after the short body). */
static void file_short(const char *path, size_t pn, long long got, long long want, int sent) {
    static _Atomic int64_t last;
    char esc[256];
    int en = (int)http_log_escape(esc, sizeof esc, path, pn);
    note_limited(&last, "weft-httpd: %.*s: the file shrank while it was served (%lld of %lld bytes): %s\n", en, esc,
                 got, want, sent ? "the body is cut short and the connection closed" : "answered 500");
}

/* The body of p stopped short (the file shrank under sendfile): the head
 * went out, so the only honest end is to close after what was sent -- the
 * client sees fewer bytes than Content-Length.  Logged, with the bytes
 * sent. */
static void body_cut(const conn *c, const response *p) {
    long long sent = p->log_bytes - p->file_len;
    file_short(p->rq ? p->rq->path.p : "-", p->rq ? p->rq->path.n : 1, sent, p->log_bytes, 1);
    access_log(c, p->rq, p->code, sent);
}

/* An error (or redirect) with a small HTML body: 0, or -EOVERFLOW /
 * -ENOMEM (then nothing is to be sent: the connection closes). */
static int plan_status(response *p, const http_request *rq, int status, int keep_alive, const char *location) {
    char body[256];
    int bn = snprintf(body, sizeof body,
                      "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n"
                      "<hr><center>weft-httpd</center>\r\n</body>\r\n</html>\r\n",
                      status, http_reason(status), status, http_reason(status));
    size_t ln = location ? strlen(location) : 0;
    int cap = 1024;
    char *head = p->buf;
    if (ln > 256) {
        cap = 1024 + (int)ln;
        head = malloc((size_t)cap);
        if (!head) return -ENOMEM;
    }
    int at = head_common(head, cap, status, keep_alive);
    at = put(head, at, cap, "Content-Type: text/html\r\nContent-Length: %d\r\n", bn);
    if (status == 405) at = put(head, at, cap, "Allow: GET, HEAD\r\n");
    if (status == 503) at = put(head, at, cap, "Retry-After: 1\r\n");
    if (location) at = put(head, at, cap, "Location: %s\r\n", location);
    at = put(head, at, cap, "\r\n");
    int with_body = !(rq && rq->method == HTTP_M_HEAD) && status != 304;
    if (at >= cap || (with_body && at + bn > cap)) { /* never a cut header: close instead */
        if (head != p->buf) free(head);
        return -EOVERFLOW;
    }
    if (with_body) {
        memcpy(head + at, body, (size_t)bn);
        at += bn;
    }
    p->head = head;
    p->head_len = (size_t)at;
    p->rq = rq;
    p->code = status;
    p->log_bytes = with_body ? bn : 0;
    return 0;
}

/* Sends p as a blocking call: 0 or -errno. */
static int send_response(conn *c, response *p) {
    int more = p->mem_len || p->file_len;
    int err = send_all(c->fd, p->head, p->head_len, more);
    if (!err && p->mem_len) err = send_all(c->fd, p->mem, p->mem_len, 0);
    while (!err && p->file_len > 0) {
        ssize_t sn = weft_sendfile_until(c->fd, p->fd, &p->off, (size_t)p->file_len, weft_now() + O.send_timeout);
        if (sn < 0) {
            err = (int)sn;
        } else if (sn == 0) { /* the file shrank: the response cannot be completed */
            body_cut(c, p);
            err = -EIO;
        } else {
            p->file_len -= sn;
        }
    }
    if (!err) access_log(c, p->rq, p->code, p->log_bytes);
    return err;
}

static int send_status(conn *c, const http_request *rq, int status, int keep_alive, const char *location) {
    response p;
    response_init(&p);
    int r = plan_status(&p, rq, status, keep_alive, location);
    if (!r) r = send_response(c, &p);
    response_free(&p);
    return r;
}

/* The Location of a directory's redirect: the normalised path that was
 * looked up (never the raw target: "//host/.." or "/\\host/.." would send a
 * browser elsewhere), percent-encoded, a '/', then the query as received
 * (the parser allows only visible ASCII in it).  malloc'd; NULL: no memory. */
static char *redirect_location(const char *path, const http_request *rq) {
    static const char hex[] = "0123456789ABCDEF";
    const char *q = memchr(rq->target.p, '?', rq->target.n);
    size_t qn = q ? (size_t)(rq->target.p + rq->target.n - q) : 0;
    if (q) {
        const char *hash = memchr(q, '#', qn);
        if (hash) qn = (size_t)(hash - q);
    }
    size_t pn = strlen(path);
    char *loc = malloc(3 * pn + qn + 2);
    if (!loc) return NULL;
    size_t n = 0;
    for (size_t i = 0; i < pn; i++) {
        unsigned char ch = (unsigned char)path[i];
        /* RFC 3986 pchar and '/', less what some clients misread ('\\') */
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            (ch && strchr("/-._~!$&'()*+,;=:@", ch))) {
            loc[n++] = (char)ch;
        } else {
            loc[n++] = '%';
            loc[n++] = hex[ch >> 4];
            loc[n++] = hex[ch & 15];
        }
    }
    loc[n++] = '/';
    memcpy(loc + n, q ? q : "", qn);
    loc[n + qn] = 0;
    return loc;
}

/* GET/HEAD of a path: finds the file (cache or open), checks conditions and
 * ranges, plans the answer into p.  Returns 0 (answered as keep_alive
 * said), CLOSE (refused, answered with "Connection: close" whatever
 * keep_alive said: close it after) or -errno (nothing to send). */
#define CLOSE 1
static int plan_file(response *p, const http_request *rq, int keep_alive) {
    char path[HTTP_MAX_TARGET + 2];
    int r = http_path_decode(rq->path.p, rq->path.n, path, sizeof path);
    if (r < 0) {
        r = plan_status(p, rq, -r, 0, NULL);
        return r < 0 ? r : CLOSE;
    }
    fc_entry *e = NULL;
    int fd = -1;
    struct stat own_st;
    const struct stat *st = &own_st;
    const char *mime = NULL, *etag, *lm;
    char own_etag[HTTP_ETAG_LEN], own_lm[HTTP_DATE_LEN];
    int status = fc_get(path, &e);
    if (status == 200 && !e) status = http_open_file(root_fd, path, &fd, &own_st, &mime);
    if (status == HTTP_FILE_REDIRECT) {
        char *loc = redirect_location(path, rq);
        r = loc ? plan_status(p, rq, 301, keep_alive, loc) : -ENOMEM;
        free(loc);
        return r;
    }
    if (status != 200) {
        int keep = keep_alive && status < 500;
        r = plan_status(p, rq, status, keep, NULL);
        return r < 0 ? r : keep == keep_alive ? 0 : CLOSE;
    }
    p->e = e;   /* released by response_free */
    p->fd = fd; /* closed by response_free, or read from below */
    if (e) {
        st = &e->st;
        mime = e->mime;
        etag = e->etag;
        lm = e->last_modified;
    } else {
        http_etag(&own_st, own_etag);
        http_fmt_date(own_st.st_mtime, own_lm);
        etag = own_etag;
        lm = own_lm;
    }
    char *head = p->buf;
    const int cap = 1024;
    p->rq = rq;
    int cond = http_conditional(st, etag, rq->if_match.p, rq->if_match.n, rq->if_unmodified_since.p,
                                rq->if_unmodified_since.n, rq->if_none_match.p, rq->if_none_match.n,
                                rq->if_modified_since.p, rq->if_modified_since.n);
    if (cond == 304) {
        int at = head_common(head, cap, 304, keep_alive);
        at = put(head, at, cap, "Last-Modified: %s\r\nETag: %s\r\n\r\n", lm, etag);
        p->head_len = (size_t)at;
        p->code = 304;
        return 0;
    }
    if (cond == 412) return plan_status(p, rq, 412, keep_alive, NULL);
    off_t first = 0, last = st->st_size - 1;
    int partial = 0;
    if (rq->range.n && http_if_range_ok(st, etag, rq->if_range.p, rq->if_range.n)) {
        int rr = http_parse_range(rq->range.p, rq->range.n, st->st_size, &first, &last);
        if (rr == -416) {
            int at = head_common(head, cap, 416, keep_alive);
            at = put(head, at, cap, "Content-Range: bytes */%lld\r\nContent-Length: 0\r\n\r\n", (long long)st->st_size);
            p->head_len = (size_t)at;
            p->code = 416;
            return 0;
        }
        if (rr == 1) partial = 1;
        else first = 0, last = st->st_size - 1;
    }
    long long len = st->st_size ? (long long)(last - first + 1) : 0;
    p->code = partial ? 206 : 200;
    int at = head_common(head, cap, p->code, keep_alive);
    /* mime (< 64), the date (29) and the ETag (< 48) keep this far below cap */
    at = APP_LIT(head, at, "Content-Type: ");
    at = app_str(head, at, mime);
    at = APP_LIT(head, at, "\r\nContent-Length: ");
    at = app_u64(head, at, (unsigned long long)len);
    at = APP_LIT(head, at, "\r\nLast-Modified: ");
    at = app(head, at, lm, HTTP_DATE_LEN - 1);
    at = APP_LIT(head, at, "\r\nETag: ");
    at = app_str(head, at, etag);
    at = APP_LIT(head, at, "\r\nAccept-Ranges: bytes\r\n");
    if (partial)
        at = put(head, at, cap, "Content-Range: bytes %lld-%lld/%lld\r\n", (long long)first, (long long)last,
                 (long long)st->st_size);
    at = APP_LIT(head, at, "\r\n");
    p->head_len = (size_t)at;
    if (rq->method == HTTP_M_HEAD || len == 0) return 0;
    p->log_bytes = len;
    if (e && len <= SMALL_BODY) { /* head and body in one send */
        memcpy(head + at, e->body + first, (size_t)len);
        p->head_len += (size_t)len;
    } else if (e) {
        p->mem = e->body + first;
        p->mem_len = (size_t)len;
    } else if (len <= SMALL_BODY) {
        long long got = 0;
        while (got < len) {
            ssize_t g = weft_pread(fd, head + at + got, (size_t)(len - got), first + (off_t)got);
            if (g <= 0) break;
            got += g;
        }
        if (got != len) { /* shrank since its fstat (or a read error): nothing sent yet, so say so */
            file_short(path, strlen(path), got, len, 0);
            r = plan_status(p, rq, 500, 0, NULL);
            return r < 0 ? r : CLOSE;
        }
        p->head_len += (size_t)len;
    } else {
        p->off = first;
        p->file_len = len;
    }
    return 0;
}

/* Whether the connection may stay open after rq's answer, as far as rq
 * says: a body we do not want is read and dropped (Content-Length), but a
 * chunked or too large one closes the connection after the answer. */
static int request_keep(const http_request *rq) {
    int keep = rq->keep_alive && !atomic_load_explicit(&draining, memory_order_relaxed);
    if (rq->chunked || rq->content_length > MAX_BODY) keep = 0;
    return keep;
}

/* The answer to a parsed request, into p: 0 or -errno (nothing to send).
 * *refused (and *keep = 0) when the answer refuses it. */
static int plan_request(response *p, const http_request *rq, int *keep, int *refused) {
    int status = 0;
    if (rq->method != HTTP_M_GET && rq->method != HTTP_M_HEAD) status = rq->content_length > MAX_BODY ? 413 : 405;
    else if (rq->content_length > MAX_BODY) status = 413;
    else if (rq->path.n == 0 || rq->path.p[0] != '/') status = 400;
    int r;
    if (status) {
        r = plan_status(p, rq, status, 0, NULL);
    } else {
        r = plan_file(p, rq, *keep);
        if (r != CLOSE) return r;
        r = 0;
    }
    *keep = 0;
    *refused = 1;
    return r;
}

/* ------------------------------------------------------------------------ */
/* a connection                                                              */
/* ------------------------------------------------------------------------ */

/* Receives more into buf; the deadline depends on whether a head started. */
static ssize_t recv_more(conn *c, char *buf, size_t len, size_t cap, int64_t head_deadline, int64_t idle_from) {
    int64_t d = len ? head_deadline : idle_from + O.idle_timeout;
    if (!len) {
        /* idle first, then look at draining: the drain looks at them in the
         * other order (seq_cst both), so it cannot miss us */
        atomic_store(&c->idle, 1);
        if (atomic_load(&draining)) {
            /* a request already here is served (the drain waits for it):
             * a connection that waited in the pool's queue, or started
             * after the drain did, may well have one; none: we are done */
            atomic_store_explicit(&c->idle, 0, memory_order_relaxed);
            ssize_t r;
            do r = recv(c->fd, buf, cap, MSG_DONTWAIT);
            while (r < 0 && errno == EINTR);
            if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
            return r;
        }
    }
    ssize_t r = weft_recv_until(c->fd, buf + len, cap - len, 0, d);
    atomic_store_explicit(&c->idle, 0, memory_order_relaxed);
    return r;
}

/* Serves a connection accepted at accepted_at (weft_now()): the first
 * request's idle clock runs from then, whatever the connection waited for. */
static void serve_conn(int fd, const struct sockaddr_storage *peer, int64_t accepted_at) {
    conn c = {.fd = fd};
    int64_t idle_from = accepted_at;
    set_peer(&c, peer);
    conn_register(&c);
    char buf[BUF_SIZE];
    size_t len = 0;
    int keep = 1;
    while (keep) {
        http_parser ps;
        http_parser_init(&ps);
        http_request rq;
        /* a head that began with the previous read (pipelined) has had its
         * first byte already: its clock runs from now */
        int64_t head_deadline = len ? weft_now() + O.header_timeout : 0;
        int hl;
        for (;;) {
            hl = len ? http_parse_request(&ps, buf, len, &rq) : 0;
            if (hl != 0) break;
            ssize_t r = recv_more(&c, buf, len, sizeof buf, head_deadline, idle_from);
            if (r == 0 || r == -ECONNRESET || r == -ECANCELED) goto out;
            if (r == -ETIMEDOUT) {
                if (len) send_status(&c, NULL, 408, 0, NULL);
                goto out;
            }
            if (r < 0) goto out;
            if (!len) head_deadline = weft_now() + O.header_timeout;
            len += (size_t)r;
        }
        if (hl < 0) { /* malformed: answer and close */
            if (send_status(&c, NULL, -hl, 0, NULL) < 0) goto out;
            goto linger;
        }
        sleep_delay();
        keep = request_keep(&rq); /* after the wait: a drain begun meanwhile closes */
        int refused = 0;
        response resp;
        response_init(&resp);
        int err = plan_request(&resp, &rq, &keep, &refused);
        if (err >= 0) err = send_response(&c, &resp);
        response_free(&resp);
        if (err < 0) goto out;
        if (!keep) {
            /* a plain end (HTTP/1.0, Connection: close) closes at once; an
             * answer that refused the request, or input still unread, gets
             * the lingering close */
            if (refused || len > (size_t)hl || rq.content_length > 0 || rq.chunked) goto linger;
            goto out;
        }
        /* drop the head, then the body if any, keep what is pipelined; the
         * whole body must come within --body-timeout (a trickle of bytes
         * cannot hold the connection) */
        size_t used = (size_t)hl;
        long long body = rq.content_length > 0 ? rq.content_length : 0;
        int64_t body_deadline = weft_now() + O.body_timeout;
        while (body > 0) {
            size_t inbuf = len - used;
            if ((long long)inbuf >= body) {
                used += (size_t)body;
                body = 0;
                break;
            }
            body -= (long long)inbuf;
            used = len = 0;
            ssize_t r = weft_recv_until(fd, buf, sizeof buf, 0, body_deadline);
            if (r <= 0) goto out;
            len = (size_t)r;
        }
        memmove(buf, buf + used, len - used);
        len -= used;
        idle_from = weft_now();
    }
    goto out;
linger:
    /* Closing with unread input makes the kernel send RST, which can
     * destroy the answer before the client read it.  So, as nginx's
     * lingering close: stop sending, read and drop what still comes for a
     * moment (bounded in time and bytes), then close. */
    shutdown(fd, SHUT_WR);
    {
        int64_t until = weft_now() + NS;
        size_t dropped = 0;
        while (dropped < (1u << 20)) {
            ssize_t r = weft_recv_until(fd, buf, sizeof buf, 0, until);
            if (r <= 0) break;
            dropped += (size_t)r;
        }
    }
out:
    conn_unregister(&c);
    weft_close(fd);
    conn_slot_free();
}

/* ------------------------------------------------------------------------ */
/* --model async: a connection as a chain of completion handlers             */
/* ------------------------------------------------------------------------ */

/*
 * The same HTTP as serve_conn (request_keep, plan_request, the same
 * deadlines, the same lingering close), written as a state machine whose
 * steps are completion handlers (weft/async.h) on the carrier's dispatcher:
 * no thread and no stack per connection.  An idle keep-alive connection
 * holds only its aconn -- its fd, its place in the drain's list, the
 * client's address and its idle clock: 80 bytes -- and waits with
 * weft_poll_async, without a buffer; a request's state and its receive
 * buffer (areq) come from a pool when bytes arrive and go back when the
 * connection is idle again with nothing pipelined; a response is malloc'd
 * while it is being sent.  Each connection has at most one operation in
 * flight, so its handlers never run at the same time and its state needs
 * no lock.  The acceptors are the other models' (a vthread per carrier);
 * dispatch() starts a connection here instead of spawning.
 */
typedef struct areq areq;

typedef struct aconn {
    conn c;           /* registered for the drain, like the others */
    areq *r;          /* while a request is read or answered, or bytes wait */
    int64_t idle_from; /* the idle clock: from the accept, then each answer */
} aconn;

/* A request in progress: its buffer and everything the answer needs.  From
 * the pool when bytes arrive, back to it when the connection is idle with
 * nothing pipelined. */
struct areq {
    areq *next_free;
    size_t len, used;
    int64_t head_deadline, body_deadline, linger_until;
    http_parser ps;
    http_request rq;
    int hl, keep, refused;
    long long body_left;
    size_t dropped;    /* the lingering close's */
    response *resp;    /* while one is being sent */
    char buf[BUF_SIZE];
};

/* The pool of areqs: a free list under a mutex.  Once a second (bp_sweep,
 * a timer handler) those that stayed in the list all that second -- its
 * low-water mark -- are freed and the heap trimmed, so a burst's memory
 * goes back to the system once it is over, as the virtual model's stacks
 * do. */
static struct {
    pthread_mutex_t lock;
    areq *free;
    int n, low;
} BP = {.lock = PTHREAD_MUTEX_INITIALIZER};

static areq *areq_get(void) {
    pthread_mutex_lock(&BP.lock);
    areq *r = BP.free;
    if (r) {
        BP.free = r->next_free;
        if (--BP.n < BP.low) BP.low = BP.n;
    }
    pthread_mutex_unlock(&BP.lock);
    if (!r && !(r = malloc(sizeof *r))) return NULL;
    r->len = r->used = 0;
    r->resp = NULL;
    return r;
}

static void areq_put(areq *r) {
    if (!r) return;
    if (r->resp) {
        response_free(r->resp);
        free(r->resp);
    }
    pthread_mutex_lock(&BP.lock);
    r->next_free = BP.free;
    BP.free = r;
    BP.n++;
    pthread_mutex_unlock(&BP.lock);
}

static void bp_sweep(ssize_t res, void *ctx) {
    areq *drop = NULL;
    pthread_mutex_lock(&BP.lock);
    for (int k = BP.low; k > 0; k--) { /* unused all second: not needed */
        areq *r = BP.free;
        BP.free = r->next_free;
        r->next_free = drop;
        drop = r;
        BP.n--;
    }
    BP.low = BP.n;
    pthread_mutex_unlock(&BP.lock);
    int freed = drop != NULL;
    while (drop) {
        areq *nx = drop->next_free;
        free(drop);
        drop = nx;
    }
    if (freed) malloc_trim(0); /* the heap's free pages, not only its top */
    if (weft_timer_async(weft_now() + NS, bp_sweep, NULL, NULL) < 0) { /* no memory: no more sweeps */
    }
}

static void a_next_request(aconn *a);
static void a_parse(aconn *a);

static void a_end(aconn *a) {
    conn_unregister(&a->c);
    weft_close(a->c.fd);
    areq_put(a->r);
    free(a);
    conn_slot_free();
}

/* A step that could not be started (no memory): the connection ends. */
static void a_check(aconn *a, int r) {
    if (r < 0) a_end(a);
}

/* -- the lingering close: stop sending, drop what still comes for a moment */
static void a_lingered(ssize_t n, void *ctx) {
    aconn *a = ctx;
    areq *r = a->r;
    if (n <= 0 || (r->dropped += (size_t)n) >= (1u << 20)) {
        a_end(a);
        return;
    }
    weft_async_opts o = {.deadline = r->linger_until};
    a_check(a, weft_recv_async(a->c.fd, r->buf, BUF_SIZE, 0, a_lingered, a, &o));
}

static void a_linger(aconn *a) {
    areq *r = a->r;
    shutdown(a->c.fd, SHUT_WR);
    r->dropped = 0;
    r->linger_until = weft_now() + NS;
    weft_async_opts o = {.deadline = r->linger_until};
    a_check(a, weft_recv_async(a->c.fd, r->buf, BUF_SIZE, 0, a_lingered, a, &o));
}

/* -- after a response: drop the request's body, keep what is pipelined */
static void a_body_bytes(ssize_t n, void *ctx);

static void a_drop_body(aconn *a) {
    areq *r = a->r;
    while (r->body_left > 0) {
        size_t inbuf = r->len - r->used;
        if ((long long)inbuf >= r->body_left) {
            r->used += (size_t)r->body_left;
            r->body_left = 0;
            break;
        }
        r->body_left -= (long long)inbuf;
        r->used = r->len = 0;
        weft_async_opts o = {.deadline = r->body_deadline};
        a_check(a, weft_recv_async(a->c.fd, r->buf, BUF_SIZE, 0, a_body_bytes, a, &o));
        return;
    }
    memmove(r->buf, r->buf + r->used, r->len - r->used);
    r->len -= r->used;
    a->idle_from = weft_now();
    a_next_request(a);
}

static void a_body_bytes(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n <= 0) {
        a_end(a);
        return;
    }
    a->r->len = (size_t)n;
    a_drop_body(a);
}

static void a_answered(aconn *a) {
    areq *r = a->r;
    response_free(r->resp);
    free(r->resp);
    r->resp = NULL;
    if (!r->keep) {
        /* as serve_conn: a plain end closes at once; a refusal, or input
         * still unread, gets the lingering close */
        if (r->refused || r->len > (size_t)r->hl || r->rq.content_length > 0 || r->rq.chunked) a_linger(a);
        else a_end(a);
        return;
    }
    r->used = (size_t)r->hl;
    r->body_left = r->rq.content_length > 0 ? r->rq.content_length : 0;
    r->body_deadline = weft_now() + O.body_timeout;
    a_drop_body(a);
}

/* -- sending a response: head, then body from memory or by sendfile */
static void a_sent_body(ssize_t n, void *ctx);

static void a_file_ready(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    while (p->file_len > 0) { /* the socket is O_NONBLOCK (accepted so) */
        ssize_t sn = sendfile(a->c.fd, p->fd, &p->off, (size_t)p->file_len);
        if (sn > 0) {
            p->file_len -= sn;
            continue;
        }
        if (sn < 0 && errno == EINTR) continue;
        if (sn < 0 && errno == EAGAIN) { /* the socket's buffer is full: wait for room */
            weft_async_opts o = {.deadline = weft_now() + O.send_timeout};
            a_check(a, weft_poll_async(a->c.fd, POLLOUT, a_file_ready, a, &o));
            return;
        }
        if (sn == 0) body_cut(&a->c, p); /* the file shrank */
        a_end(a);
        return;
    }
    a_sent_body(0, a);
}

static void a_sent_body(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    access_log(&a->c, p->rq, p->code, p->log_bytes);
    a_answered(a);
}

static void a_sent_head(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n < 0) {
        a_end(a);
        return;
    }
    response *p = a->r->resp;
    if (p->mem_len) {
        weft_async_opts o = {.deadline = weft_now() + O.send_timeout};
        a_check(a, weft_send_async(a->c.fd, p->mem, p->mem_len, MSG_NOSIGNAL, a_sent_body, a, &o));
    } else if (p->file_len) {
        a_file_ready(POLLOUT, a);
    } else {
        a_sent_body(0, a);
    }
}

static void a_send(aconn *a) {
    response *p = a->r->resp;
    int more = p->mem_len || p->file_len;
    weft_async_opts o = {.deadline = weft_now() + O.send_timeout};
    a_check(a, weft_send_async(a->c.fd, p->head, p->head_len, MSG_NOSIGNAL | (more ? MSG_MORE : 0), a_sent_head, a, &o));
}

/* A status answer outside a request's normal course (400..., 408), then
 * the connection ends: lingering (malformed input) or not (a timeout). */
static void a_status_then(aconn *a, int status, int linger) {
    areq *r = a->r;
    if (!(r->resp = malloc(sizeof *r->resp))) {
        a_end(a);
        return;
    }
    response_init(r->resp);
    if (plan_status(r->resp, NULL, status, 0, NULL) < 0) {
        a_end(a);
        return;
    }
    r->keep = 0;
    r->refused = linger;
    memset(&r->rq, 0, sizeof r->rq); /* no request: a_answered goes by `refused` alone */
    r->hl = (int)r->len;
    a_send(a);
}

/* -- a request */
static void a_respond(aconn *a) {
    areq *r = a->r;
    r->keep = request_keep(&r->rq); /* at answer time: a drain begun in a --delay-ms wait closes */
    if (!(r->resp = malloc(sizeof *r->resp))) {
        a_end(a);
        return;
    }
    response_init(r->resp);
    r->refused = 0;
    if (plan_request(r->resp, &r->rq, &r->keep, &r->refused) < 0) {
        a_end(a);
        return;
    }
    a_send(a);
}

static void a_delayed(ssize_t n, void *ctx) { a_respond(ctx); }

static void a_request(aconn *a) {
    int64_t d = request_delay();
    if (d) a_check(a, weft_timer_async(weft_now() + d, a_delayed, a, NULL));
    else a_respond(a);
}

/* -- reading a request head */
static void a_head_bytes(ssize_t n, void *ctx) {
    aconn *a = ctx;
    if (n == -ETIMEDOUT) {
        if (a->r->len) a_status_then(a, 408, 0);
        else a_end(a);
        return;
    }
    if (n <= 0) {
        a_end(a);
        return;
    }
    a->r->len += (size_t)n;
    a_parse(a);
}

static void a_parse(aconn *a) {
    areq *r = a->r;
    r->hl = http_parse_request(&r->ps, r->buf, r->len, &r->rq);
    if (r->hl < 0) { /* malformed: answer and close */
        a_status_then(a, -r->hl, 1);
        return;
    }
    if (r->hl > 0) {
        a_request(a);
        return;
    }
    weft_async_opts o = {.deadline = r->head_deadline};
    a_check(a, weft_recv_async(a->c.fd, r->buf + r->len, BUF_SIZE - r->len, 0, a_head_bytes, a, &o));
}

/* -- idle: waiting for a request's first byte, holding no buffer */

/* Reads what a readable connection has: the start of a request, parsed.
 * Nothing there is a stale readiness (idle again) -- or, draining, the end. */
static void a_take_request(aconn *a, int draining_now) {
    if (!(a->r = areq_get())) {
        a_end(a);
        return;
    }
    areq *r = a->r;
    ssize_t n;
    do n = recv(a->c.fd, r->buf, BUF_SIZE, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !draining_now) {
        a_next_request(a);
        return;
    }
    if (n <= 0) { /* the client closed, or reset; or draining, and nothing came */
        a_end(a);
        return;
    }
    r->len = (size_t)n;
    r->head_deadline = weft_now() + O.header_timeout;
    http_parser_init(&r->ps);
    a_parse(a);
}

static void a_readable(ssize_t n, void *ctx) {
    aconn *a = ctx;
    atomic_store_explicit(&a->c.idle, 0, memory_order_relaxed);
    if (n < 0) { /* the idle timeout, or closed */
        a_end(a);
        return;
    }
    a_take_request(a, 0);
}

static void a_next_request(aconn *a) {
    if (a->r && a->r->len) { /* pipelined: its first byte is here, its clock runs from now */
        http_parser_init(&a->r->ps);
        a->r->head_deadline = weft_now() + O.header_timeout;
        a_parse(a);
        return;
    }
    areq_put(a->r);
    a->r = NULL;
    /* idle first, then look at draining: the drain looks at them in the
     * other order (seq_cst both), so it cannot miss us */
    atomic_store(&a->c.idle, 1);
    if (atomic_load(&draining)) {
        /* as recv_more: a request already here is served, else we are done */
        atomic_store_explicit(&a->c.idle, 0, memory_order_relaxed);
        a_take_request(a, 1);
        return;
    }
    /* a new connection goes to the carriers' dispatchers in turn (its
     * acceptor runs wherever the scheduler put it); its later steps stay
     * on the one it got */
    weft_async_opts o = {.deadline = a->idle_from + O.idle_timeout, .spread = a->c.fresh};
    a->c.fresh = 0;
    a_check(a, weft_poll_async(a->c.fd, POLLIN, a_readable, a, &o));
}

/* Serves a connection accepted at accepted_at with handlers: 0 or -ENOMEM
 * (fd then the caller's). */
static int a_start(int fd, const struct sockaddr_storage *peer, int64_t accepted_at) {
    aconn *a = calloc(1, sizeof *a);
    if (!a) return -ENOMEM;
    a->c.fd = fd;
    set_peer(&a->c, peer);
    a->idle_from = accepted_at;
    a->c.fresh = 1;
    conn_register(&a->c);
    a_next_request(a);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* models                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct accepted {
    int fd;
    int64_t at; /* weft_now() when accepted */
    struct sockaddr_storage peer;
} accepted;

/* A connection vthread's name, "conn 127.0.0.1:53412" (the dump shows
 * it): written by hand for IPv4, the common case on the connection path,
 * which must stay cheap (snprintf and inet_ntop cost more than the rest of
 * the spawn); inet_ntop for IPv6 ("conn [::1]:53412", cut at 31 bytes).
 * out holds 32 bytes. */
static char *put_u(char *p, unsigned v) {
    char d[10];
    int n = 0;
    do d[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 10);
    while (n) *p++ = d[--n];
    return p;
}

static void conn_name(char *out, const struct sockaddr_storage *peer) {
    char *p = out;
    memcpy(p, "conn ", 5);
    p += 5;
    if (peer->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)peer;
        const unsigned char *b = (const unsigned char *)&in->sin_addr;
        for (int i = 0; i < 4; i++) {
            p = put_u(p, b[i]);
            *p++ = i < 3 ? '.' : ':';
        }
        p = put_u(p, ntohs(in->sin_port));
        *p = 0;
    } else if (peer->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)peer;
        char host[INET6_ADDRSTRLEN];
        if (!inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host)) host[0] = 0;
        snprintf(p, 32 - 5, "[%s]:%u", host, (unsigned)ntohs(in6->sin6_port));
    } else {
        memcpy(p, "?", 2);
    }
}

/* A connection's vthread or pthread (it owns the malloc'd accepted). */
static void *conn_main(void *arg) {
    accepted a = *(accepted *)arg;
    free(arg);
    serve_conn(a.fd, &a.peer, a.at);
    return NULL;
}

/* Starts fn(arg) on a detached pthread with a 256 KiB stack; 0 or an errno. */
static int start_detached(void *(*fn)(void *), void *arg) {
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 * 1024);
    int e = pthread_create(&th, &at, fn, arg);
    pthread_attr_destroy(&at);
    return e;
}

/* pool:N -- a bounded FIFO of accepted connections.  A connection's idle
 * clock runs from its accept: one still queued when it runs out (every
 * worker busy for --idle-timeout) is answered 503 and closed by the reaper
 * (a vthread sleeping until the oldest entry's deadline), and a worker
 * that dequeues one already late does the same instead of serving it. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    accepted *q;
    int cap, head, n, stop;
} PQ = {.lock = PTHREAD_MUTEX_INITIALIZER, .nonempty = PTHREAD_COND_INITIALIZER};

static int queue_late(const accepted *a, int64_t now) { return now - a->at >= O.idle_timeout; }

/* A connection that waited out its idle time in the queue. */
static void refuse_late(const accepted *a) {
    conn c = {.fd = a->fd};
    set_peer(&c, &a->peer);
    if (send_status(&c, NULL, 503, 0, NULL) == 0) shutdown(a->fd, SHUT_WR);
    weft_close(a->fd);
    conn_slot_free();
}

static void *pool_reaper(void *unused) {
    for (;;) {
        accepted late[64];
        int k = 0;
        int64_t now = weft_now(), next;
        pthread_mutex_lock(&PQ.lock);
        while (PQ.n && k < 64 && queue_late(&PQ.q[PQ.head], now)) {
            late[k++] = PQ.q[PQ.head];
            PQ.head = (PQ.head + 1) % PQ.cap;
            PQ.n--;
        }
        next = (PQ.n ? PQ.q[PQ.head].at : now) + O.idle_timeout;
        pthread_mutex_unlock(&PQ.lock);
        for (int i = 0; i < k; i++) refuse_late(&late[i]);
        if (k == 64) continue;
        /* entries queued meanwhile are due later than the head */
        if (weft_sleep_until(next) == -ECANCELED) return NULL;
    }
}

static void *pool_worker(void *unused) {
    for (;;) {
        pthread_mutex_lock(&PQ.lock);
        while (!PQ.n && !PQ.stop) pthread_cond_wait(&PQ.nonempty, &PQ.lock);
        if (!PQ.n) {
            pthread_mutex_unlock(&PQ.lock);
            return NULL;
        }
        accepted a = PQ.q[PQ.head];
        PQ.head = (PQ.head + 1) % PQ.cap;
        PQ.n--;
        pthread_mutex_unlock(&PQ.lock);
        if (queue_late(&a, weft_now())) refuse_late(&a);
        else serve_conn(a.fd, &a.peer, a.at);
    }
}

/* Hands a connection to the model; returns 0 or -errno (fd then closed by caller). */
static int dispatch(int fd, const struct sockaddr_storage *peer, int64_t at) {
    if (O.model == MODEL_POOL) {
        for (;;) {
            pthread_mutex_lock(&PQ.lock);
            if (PQ.n < PQ.cap) {
                PQ.q[(PQ.head + PQ.n) % PQ.cap] = (accepted){fd, at, *peer};
                PQ.n++;
                pthread_cond_signal(&PQ.nonempty);
                pthread_mutex_unlock(&PQ.lock);
                return 0;
            }
            pthread_mutex_unlock(&PQ.lock);
            weft_sleep(1000000); /* queue full: the backlog holds the rest */
            if (atomic_load(&draining)) return -ECANCELED;
        }
    }
    if (O.model == MODEL_ASYNC) return a_start(fd, peer, at);
    accepted *a = malloc(sizeof *a);
    if (!a) return -ENOMEM;
    a->fd = fd;
    a->at = at;
    a->peer = *peer;
    if (O.model == MODEL_VIRTUAL) {
        char name[32];
        conn_name(name, peer);
        weft_thread_opts wa = {.name = name};
        int r = weft_spawn(NULL, conn_main, a, &wa);
        if (r < 0) free(a);
        return r;
    }
    int e = start_detached(conn_main, a);
    if (e) {
        free(a);
        return -e;
    }
    return 0;
}

static void log_limited(const char *what, int err) {
    static _Atomic int64_t last;
    int64_t now = weft_now();
    if (now - atomic_load(&last) < NS) return;
    atomic_store(&last, now);
    fprintf(stderr, "weft-httpd: %s: %s\n", what, strerror(err));
}

static void *acceptor_main(void *arg) {
    int me = (int)(intptr_t)arg;
    while (!atomic_load(&draining)) {
        /* take a connection slot before accepting (several acceptors share
         * the limit); at the limit wait for a connection to end */
        int n = atomic_load(&nconns);
        if (n >= O.max_conns) {
            atomic_store(&acceptor_waiting[me], weft_self());
            if (atomic_load(&nconns) >= O.max_conns && weft_park(weft_now() + NS / 10) == -ECANCELED) return NULL;
            atomic_store(&acceptor_waiting[me], NULL);
            continue;
        }
        if (!atomic_compare_exchange_weak(&nconns, &n, n + 1)) continue;
        reserve_rearm();
        struct sockaddr_storage peer;
        socklen_t pl = sizeof peer;
        int fd = weft_accept(listen_fd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) atomic_fetch_sub(&nconns, 1); /* the slot was not used */
        if (fd == -ECANCELED) break;
        if (fd == -EMFILE || fd == -ENFILE) {
            log_limited("accept (out of file descriptors; shedding connections)", -fd);
            /* one acceptor at a time gives up the reserve (the exchange) */
            int rfd = atomic_exchange(&reserve_fd, -1);
            if (rfd >= 0) {
                close(rfd);
                pl = sizeof peer;
                int x = accept4(listen_fd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
                /* Out of descriptors still?  The EMFILE may be stale: on a
                 * loaded machine the accept's completion can be handled
                 * after the connections that filled the table have gone.
                 * If the reserve can be had back while x is open, there
                 * is room: serve x rather than shed it. */
                int spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (x >= 0 && spare >= 0 && atomic_fetch_add(&nconns, 1) < O.max_conns) {
                    reserve_put(spare);
                    atomic_fetch_add(&nopen, 1);
                    if (dispatch(x, &peer, weft_now()) < 0) {
                        close(x);
                        conn_slot_free();
                    }
                    continue;
                }
                if (x >= 0 && spare >= 0) atomic_fetch_sub(&nconns, 1); /* at the limit after all */
                if (x >= 0) close(x); /* shed */
                if (spare < 0) spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (spare >= 0) reserve_put(spare);
            }
            weft_sleep(10 * 1000000);
            continue;
        }
        if (fd < 0) {
            if (fd != -ECONNABORTED && fd != -EINTR) log_limited("accept", -fd);
            if (fd == -ENOBUFS || fd == -ENOMEM) weft_sleep(10 * 1000000);
            continue;
        }
        if (atomic_load_explicit(&reserve_fd, memory_order_relaxed) < 0) {
            /* The reserve is missing and could not be had back before
             * this accept: the table is full but for the newcomer's
             * descriptor (another acceptor's accept, pending in its ring,
             * can take the number a shedding acceptor freed).  Shed the
             * newcomer and take its number as the reserve, or shedding
             * would stop until some connection ends. */
            int spare = open("/dev/null", O_RDONLY | O_CLOEXEC), shed = spare < 0;
            if (shed) {
                close(fd);
                atomic_fetch_sub(&nconns, 1);
                spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
            }
            if (spare >= 0) reserve_put(spare);
            if (shed) continue;
        }
        atomic_fetch_add(&nopen, 1);
        int r = dispatch(fd, &peer, weft_now());
        if (r < 0) {
            log_limited("cannot start a connection", -r);
            close(fd);
            conn_slot_free();
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* start, signals, drain                                                     */
/* ------------------------------------------------------------------------ */

static int sig_fd = -1;

/* The first SIGTERM/SIGINT starts the drain; a second one cuts it short. */
static void *signal_watcher(void *unused) {
    struct signalfd_siginfo si;
    ssize_t r = weft_read(sig_fd, &si, sizeof si);
    if (r == -ECANCELED) return NULL;
    /* the flag before the line: whoever reads the line knows that every
     * answer decided from now on closes its connection */
    int open_now = atomic_load(&nopen);
    atomic_store(&draining, 1);
    if (!O.quiet)
        fprintf(stderr, "weft-httpd: %s: draining %d connection(s)\n", strsignal((int)si.ssi_signo), open_now);
    for (int i = 0; i < nacceptors; i++) weft_cancel(acceptors[i]);
    /* connections waiting for a request: end their wait */
    pthread_mutex_lock(&conns_lock);
    for (conn *c = conns_head; c; c = c->next)
        if (atomic_load(&c->idle)) shutdown(c->fd, SHUT_RD);
    pthread_mutex_unlock(&conns_lock);
    r = weft_read(sig_fd, &si, sizeof si);
    if (r == -ECANCELED) return NULL;
    if (!O.quiet) fprintf(stderr, "weft-httpd: %s again: not waiting for the drain\n", strsignal((int)si.ssi_signo));
    atomic_store(&drain_cut, 1);
    return NULL;
}

/* ---- the CPU-bound background job (--cpu-job) ------------------------------------
 *
 * For the "mixed run" of issue 12: HTTP latency while a CPU-bound job runs
 * in the same process, either in the default carrier group, sharing the
 * carriers with the connections' vthreads (shared), or in a carrier group
 * of its own with one carrier and the compute option (group).  The job is
 * a driver vthread (N with --cpu-job-vthreads) running weft_parallel_reduce
 * -- the sum of sqrt(i) over 2^22 indices a round, round after round --
 * whose workers are its group's carriers: all of the default group's
 * (shared) or the one carrier of its own (group).  The workers yield about
 * every millisecond (parallel.c), as a well-behaved computation on virtual
 * threads does; progress (rounds, sums in millions) is printed on stderr
 * when the server stops.
 */
enum { CPU_JOB_OFF, CPU_JOB_SHARED, CPU_JOB_GROUP };
#define CPU_JOB_ROUND ((size_t)1 << 22)
static struct {
    weft_group *group;
    weft_thread *t[256];
    int n;
    atomic_int stop;
    atomic_long slices, msums;
    volatile double sink;
} CJ;

static void cpu_job_body(size_t i, void *acc, void *ctx) {
    (void)ctx;
    *(double *)acc += __builtin_sqrt((double)i);
}

static void cpu_job_combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(double *)into += *(const double *)from;
}

static void *cpu_job_main(void *arg) {
    size_t base = (size_t)(intptr_t)arg << 40;
    double acc = 0;
    while (!atomic_load_explicit(&CJ.stop, memory_order_relaxed)) {
        double round = 0;
        if (weft_parallel_reduce(base, base + CPU_JOB_ROUND, 0, &round, sizeof round, NULL, cpu_job_body,
                                 cpu_job_combine, NULL) < 0)
            break; /* cancelled (shutdown) or no memory */
        acc += round;
        base += CPU_JOB_ROUND;
        atomic_fetch_add_explicit(&CJ.slices, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&CJ.msums, (long)(CPU_JOB_ROUND / 1000000), memory_order_relaxed);
    }
    CJ.sink = acc;
    return NULL;
}

static int cpu_job_start(void) {
    if (O.cpu_job == CPU_JOB_OFF) return 0;
    int n = O.cpu_job_vthreads > 0 ? O.cpu_job_vthreads : 1;
    if (n > 256) n = 256;
    if (O.cpu_job == CPU_JOB_GROUP) {
        weft_group_opts go = {.compute = 1};
        int r = weft_group_create(&CJ.group, "cpu-job", 1, &go);
        if (r < 0) {
            fprintf(stderr, "weft-httpd: --cpu-job group: cannot make its carrier group: %s\n", strerror(-r));
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        /* group NULL (shared): the spawning vthread's group, the default one */
        weft_thread_opts a = {.name = "cpu-job", .group = CJ.group};
        int r = weft_spawn(&CJ.t[i], cpu_job_main, (void *)(intptr_t)i, &a);
        if (r < 0) {
            fprintf(stderr, "weft-httpd: --cpu-job: cannot start its vthreads: %s\n", strerror(-r));
            return -1;
        }
        CJ.n++;
    }
    if (!O.quiet)
        fprintf(stderr, "weft-httpd: cpu job: %d weft_parallel_reduce driver(s) in %s\n", n,
                CJ.group ? "its own carrier group (1 carrier)" : "the default carrier group");
    return 0;
}

static void cpu_job_stop(void) {
    if (O.cpu_job == CPU_JOB_OFF) return;
    atomic_store(&CJ.stop, 1);
    for (int i = 0; i < CJ.n; i++) weft_join(CJ.t[i], NULL);
    CJ.n = 0;
    fprintf(stderr, "weft-httpd: cpu job (%s): %ld rounds, %ld M sqrt\n",
            O.cpu_job == CPU_JOB_GROUP ? "group" : "shared", atomic_load(&CJ.slices), atomic_load(&CJ.msums));
    if (CJ.group) {
        weft_group_close(CJ.group);
        CJ.group = NULL;
    }
}

static int open_listener(void) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    int e = getaddrinfo(O.host, O.port, &hints, &res);
    if (e) {
        fprintf(stderr, "weft-httpd: --host %s --port %s: %s\n", O.host, O.port, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        /* non-blocking: the EMFILE shedding accepts with plain accept4, which must
         * never wait (weft_accept waits in the ring either way) */
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* accepted sockets inherit it */
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 4096) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
        errno = e;
    }
    if (fd < 0) fprintf(stderr, "weft-httpd: cannot listen on %s:%s: %s\n", O.host, O.port, strerror(errno));
    freeaddrinfo(res);
    return fd;
}

static int server(void *unused) {
    weft_set_name("main");
    /* SIGQUIT writes a thread dump to stderr, as a JVM's does, unless
     * WEFT_DUMP_ON_SIGQUIT chose otherwise (weft_init armed it then) */
    const char *dq = getenv("WEFT_DUMP_ON_SIGQUIT");
    if ((!dq || !*dq) && weft_dump_on_signal(SIGQUIT, 2, WEFT_DUMP_TEXT) < 0)
        fprintf(stderr, "weft-httpd: cannot arm the thread dump on SIGQUIT\n");
    /* signals arrive through a signalfd read by a vthread */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    sig_fd = signalfd(-1, &ss, SFD_CLOEXEC);
    if (sig_fd < 0) {
        perror("weft-httpd: signalfd");
        return 1;
    }
    nacceptors = O.carriers > 0 ? O.carriers : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nacceptors > 64) nacceptors = 64;
    if (nacceptors < 1) nacceptors = 1;
    for (int i = 0; i < nacceptors; i++) {
        char an[32];
        snprintf(an, sizeof an, "acceptor %d", i);
        weft_thread_opts aa = {.name = an};
        if (weft_spawn(&acceptors[i], acceptor_main, (void *)(intptr_t)i, &aa) < 0) {
            fprintf(stderr, "weft-httpd: cannot start acceptors\n");
            return 1;
        }
    }
    /* after the acceptors: it reads acceptors[] (a signal that came
     * meanwhile waits in the signalfd) */
    weft_thread *sw, *reaper = NULL;
    weft_thread_opts sa = {.name = "watcher", .daemon = 1}; /* of SIGTERM and SIGINT */
    if (weft_spawn(&sw, signal_watcher, NULL, &sa) < 0) return 1;
    weft_thread_opts ra = {.name = "pool-reaper", .daemon = 1};
    if (O.model == MODEL_POOL && weft_spawn(&reaper, pool_reaper, NULL, &ra) < 0) return 1;
    if (O.model == MODEL_ASYNC && weft_timer_async(weft_now() + NS, bp_sweep, NULL, NULL) < 0) return 1;
    if (cpu_job_start() < 0) {
        cpu_job_stop();
        return 1;
    }
    for (int i = 0; i < nacceptors; i++) weft_join(acceptors[i], NULL);
    cpu_job_stop(); /* (prints its progress) */
    close(listen_fd);
    int64_t until = weft_now() + O.drain_timeout;
    while (atomic_load(&nconns) > 0 && weft_now() < until && !atomic_load(&drain_cut)) weft_sleep(5 * 1000000);
    int left = atomic_load(&nopen);
    if (left && !O.quiet)
        fprintf(stderr, "weft-httpd: %s: %d connection(s) cut\n",
                atomic_load(&drain_cut) ? "stopped by a second signal" : "drain timeout", left);
    log_stop(); /* what is queued, and how many lines were dropped */
    if (!O.quiet) fprintf(stderr, "weft-httpd: stopped\n");
    /* with connections cut, their vthreads may still hold carriers' work:
     * leave without waiting for them, and say so in the exit status */
    if (left) {
        fflush(NULL);
        _exit(EXIT_CUT);
    }
    weft_cancel(sw);
    weft_join(sw, NULL);
    if (reaper) {
        weft_cancel(reaper);
        weft_join(reaper, NULL);
    }
    if (O.model == MODEL_POOL) {
        pthread_mutex_lock(&PQ.lock);
        PQ.stop = 1;
        pthread_cond_broadcast(&PQ.nonempty);
        pthread_mutex_unlock(&PQ.lock);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-httpd [options]\n"
            "A static-file HTTP/1.1 server on weft: one virtual thread per connection.\n\n"
            "  --host ADDR            address to listen on (default 127.0.0.1)\n"
            "  --port N               port (default 8080; 0 picks a free one)\n"
            "  --root DIR             document root (default ./www)\n"
            "  --model M              virtual | thread | pool:N | async  (default virtual)\n"
            "                         virtual: a vthread per connection; thread: a pthread per\n"
            "                         connection; pool:N: N pthreads with a bounded queue;\n"
            "                         async: completion handlers, no thread per connection\n"
            "  --carriers N           carrier threads (default: online CPUs, or $WEFT_CARRIERS)\n"
            "  --max-conns N          live connections at most (default 60000, or the fd limit)\n"
            "  --delay-ms D           every request sleeps D ms before it is answered\n"
            "  --delay-every K        ... only every K-th request (default 1)\n"
            "  --header-timeout S     a request head must arrive within S s (default 10)\n"
            "  --idle-timeout S       close keep-alive connections idle for S s (default 15)\n"
            "  --send-timeout S       a send that makes no progress for S s fails (default 30)\n"
            "  --body-timeout S       a request body must arrive within S s (default 10)\n"
            "  --drain-timeout S      on SIGTERM/SIGINT wait at most S s for requests in progress\n"
            "                         or already received (default 10);\n"
            "                         a second SIGTERM/SIGINT stops at once\n"
            "  --access-log FILE|-    log every request (- is stdout), from a queue by a thread\n"
            "                         of its own: lines it cannot take are dropped and counted\n"
            "  --cache-mb N           keep small files (<= 64 KiB) in memory, N MiB at most,\n"
            "                         looked at again once a second (default 64; 0: off)\n"
            "  --cpu-job shared|group run a CPU-bound background job in the process (default: none):\n"
            "                         weft_parallel_reduce summing sqrt, round after round, its\n"
            "                         workers yielding every ~1 ms; shared: in the default carrier\n"
            "                         group, with the connections; group: in a carrier group of its\n"
            "                         own, 1 carrier, compute option.  Its progress goes to stderr\n"
            "                         when the server stops\n"
            "  --cpu-job-vthreads N   vthreads driving such loops (default 1; at most 256)\n"
            "  --quiet                no start/stop messages on stderr\n"
            "  --help                 this text\n"
            "It prints \"listening on HOST:PORT\" when ready.  Errors go to stderr.\n"
            "SIGQUIT writes a thread dump to stderr: every vthread (\"conn 127.0.0.1:53412\",\n"
            "\"acceptor 0\", \"watcher\", \"main\") with its state, blocking call and site, and\n"
            "its stack with file:line; then the vthreads grouped by stack.  In JSON with\n"
            "WEFT_DUMP_ON_SIGQUIT=json.\n"
            "Exit status: 0 after a clean stop (every connection finished), 3 when the\n"
            "drain cut connections (its timeout, or a second signal), 1 when it cannot\n"
            "start, 2 for a bad option.\n");
}

static int parse_seconds(const char *v, int64_t *out) {
    char *end;
    double d = strtod(v, &end);
    if (*end || d <= 0 || d > 86400) return -1;
    *out = (int64_t)(d * NS);
    return 0;
}

static int parse_int(const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    enum { OPT_HOST = 256, OPT_PORT, OPT_ROOT, OPT_MODEL, OPT_CARRIERS, OPT_MAXC, OPT_DELAY, OPT_EVERY, OPT_HT,
           OPT_IT, OPT_ST, OPT_DT, OPT_LOG, OPT_QUIET, OPT_HELP, OPT_CACHE, OPT_BT, OPT_CPU, OPT_CPUN };
    static const struct option opts[] = {
        {"host", 1, 0, OPT_HOST}, {"port", 1, 0, OPT_PORT}, {"root", 1, 0, OPT_ROOT},
        {"model", 1, 0, OPT_MODEL}, {"carriers", 1, 0, OPT_CARRIERS}, {"max-conns", 1, 0, OPT_MAXC},
        {"delay-ms", 1, 0, OPT_DELAY}, {"delay-every", 1, 0, OPT_EVERY}, {"header-timeout", 1, 0, OPT_HT},
        {"idle-timeout", 1, 0, OPT_IT}, {"send-timeout", 1, 0, OPT_ST}, {"drain-timeout", 1, 0, OPT_DT},
        {"access-log", 1, 0, OPT_LOG}, {"quiet", 0, 0, OPT_QUIET}, {"help", 0, 0, OPT_HELP},
        {"cache-mb", 1, 0, OPT_CACHE}, {"body-timeout", 1, 0, OPT_BT}, {"cpu-job", 1, 0, OPT_CPU},
        {"cpu-job-vthreads", 1, 0, OPT_CPUN}, {0, 0, 0, 0}};
    long x;
    int o;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case OPT_HOST: O.host = optarg; break;
        case OPT_PORT:
            if (parse_int(optarg, 0, 65535, &x)) goto bad;
            O.port = optarg;
            break;
        case OPT_ROOT: O.root = optarg; break;
        case OPT_MODEL:
            if (!strcmp(optarg, "virtual")) O.model = MODEL_VIRTUAL;
            else if (!strcmp(optarg, "thread")) O.model = MODEL_THREAD;
            else if (!strcmp(optarg, "async")) O.model = MODEL_ASYNC;
            else if (!strncmp(optarg, "pool:", 5) && !parse_int(optarg + 5, 1, 100000, &x)) {
                O.model = MODEL_POOL;
                O.pool_threads = (int)x;
            } else goto bad;
            break;
        case OPT_CARRIERS:
            if (parse_int(optarg, 1, 1024, &x)) goto bad;
            O.carriers = (int)x;
            break;
        case OPT_MAXC:
            if (parse_int(optarg, 1, 10000000, &x)) goto bad;
            O.max_conns = (int)x;
            break;
        case OPT_DELAY:
            if (parse_int(optarg, 0, 86400000, &x)) goto bad;
            O.delay_ns = x * 1000000LL;
            break;
        case OPT_EVERY:
            if (parse_int(optarg, 1, LONG_MAX, &x)) goto bad;
            O.delay_every = x;
            break;
        case OPT_HT: if (parse_seconds(optarg, &O.header_timeout)) goto bad; break;
        case OPT_IT: if (parse_seconds(optarg, &O.idle_timeout)) goto bad; break;
        case OPT_ST: if (parse_seconds(optarg, &O.send_timeout)) goto bad; break;
        case OPT_DT: if (parse_seconds(optarg, &O.drain_timeout)) goto bad; break;
        case OPT_BT: if (parse_seconds(optarg, &O.body_timeout)) goto bad; break;
        case OPT_LOG: O.access_log = optarg; break;
        case OPT_QUIET: O.quiet = 1; break;
        case OPT_CACHE:
            if (parse_int(optarg, 0, 1 << 20, &x)) goto bad;
            O.cache_bytes = (size_t)x << 20;
            break;
        case OPT_CPU:
            if (!strcmp(optarg, "shared")) O.cpu_job = CPU_JOB_SHARED;
            else if (!strcmp(optarg, "group")) O.cpu_job = CPU_JOB_GROUP;
            else goto bad;
            break;
        case OPT_CPUN:
            if (parse_int(optarg, 1, 256, &x)) goto bad;
            O.cpu_job_vthreads = (int)x;
            break;
        case OPT_HELP:
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
        continue;
    bad:
        fprintf(stderr, "weft-httpd: bad value for --%s: '%s'\n", opts[o - OPT_HOST].name, optarg);
        return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "weft-httpd: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    /* descriptors: as many as allowed; connections bounded below that */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    long fd_room = (long)rl.rlim_cur - 64;
    if (!O.max_conns) O.max_conns = fd_room < 60000 ? (int)(fd_room > 16 ? fd_room : 16) : 60000;
    root_fd = open(O.root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root_fd < 0) {
        fprintf(stderr, "weft-httpd: --root %s: %s\n", O.root, strerror(errno));
        return 1;
    }
    if (O.access_log) {
        log_fd = !strcmp(O.access_log, "-") ? dup(1) : open(O.access_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log_fd < 0) {
            fprintf(stderr, "weft-httpd: --access-log %s: %s\n", O.access_log, strerror(errno));
            return 1;
        }
    }
    atomic_store(&reserve_fd, open("/dev/null", O_RDONLY | O_CLOEXEC));
    fc_init(root_fd, O.cache_bytes, NS);
    signal(SIGPIPE, SIG_IGN);
    /* SIGTERM/SIGINT go to the signalfd: blocked in every thread, which
     * inherit this mask from here */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    pthread_sigmask(SIG_BLOCK, &ss, NULL);
    if (log_start() < 0) return 1;
    listen_fd = open_listener();
    if (listen_fd < 0) return 1;
    if (O.model == MODEL_POOL) {
        PQ.cap = O.max_conns;
        PQ.q = calloc((size_t)PQ.cap, sizeof *PQ.q);
        if (!PQ.q) {
            fprintf(stderr, "weft-httpd: out of memory for the pool's queue\n");
            return 1;
        }
        for (int i = 0; i < O.pool_threads; i++) {
            int e = start_detached(pool_worker, NULL);
            if (e) {
                fprintf(stderr, "weft-httpd: pool:%d: thread %d: %s\n", O.pool_threads, i, strerror(e));
                return 1;
            }
        }
    }
    weft_runtime_opts cfg = {.carriers = O.carriers};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-httpd: cannot start the runtime: %s\n", strerror(-r));
        return 1;
    }
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    getsockname(listen_fd, (struct sockaddr *)&a, &al);
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (a.ss_family == AF_INET) {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in *)&a)->sin_port);
    } else if (a.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, host, sizeof host);
        port = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
    }
    printf("listening on %s:%d\n", host, port);
    fflush(stdout);
    r = weft_main(server, NULL);
    fc_fini();
    return r < 0 ? 1 : r;
}
