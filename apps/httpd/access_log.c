/*
 * weft-httpd's access log (--access-log): a line per answered request, in
 * the common log format with the target escaped as nginx does (\x22 for
 * '"').  The connections queue lines into a bounded ring; a thread of its
 * own writes them.  A connection never waits for it: lines it cannot take
 * are dropped, counted and reported on stderr.  The design is below, with
 * the ring.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

/* --access-log's descriptor, opened by main (-1: no log) */
int log_fd = -1;

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
int log_start(void) {
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
void log_stop(void) {
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
void access_log(const conn *c, const http_request *rq, int status, long long bytes) {
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
