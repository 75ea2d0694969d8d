/*
 * weft-load -- an HTTP/1.1 load generator built on weft, in the manner of
 * ab: -n requests over -c concurrent connections, with or without
 * keep-alive, reporting requests/s and the latency distribution.
 *
 *   weft-load [options] http://HOST[:PORT]/path        (weft-load --help)
 *
 * Design.
 *
 * Workers.  One vthread per connection: -c workers (at most -n), each
 * owning one socket at a time, one 16 KiB receive buffer (allocated once,
 * reused for every response), one latency histogram and its own counters.
 * A worker's loop is plain blocking code -- socket(), weft_connect, send the
 * request, weft_recv until the response parser says the response is
 * complete -- and weft turns each blocking call into a park on the
 * carrier's io_uring (or epoll), so -c 10000 costs 10,000 small stacks, not
 * 10,000 threads.  Nothing is shared on the hot path but the request
 * counter.  The request is formatted once at start; a worker only sends
 * those bytes, with weft_send(MSG_NOSIGNAL) rather than weft_write_all (see
 * send_all).  Sockets get TCP_NODELAY.
 *
 * The request counter.  Requests are tickets handed out by one atomic
 * fetch-add: a worker takes a ticket before each request and stops when
 * the tickets run out, so exactly -n requests are sent however the work
 * spreads over connections (a failed request still used its ticket, as in
 * ab).  With -t the workers stop taking tickets when the time is up, and
 * the end of the run is also every request's deadline: a request still
 * waiting when its deadline fires is reported as "unfinished" (neither
 * complete nor failed, not in the latencies), so that a -t run lasts the
 * time asked even against a server that stalls.  (A response that arrives
 * just as the run ends, before the deadline's timer has fired, still
 * counts as complete.)
 *
 * Keep-alive.  Without -k every request opens a connection, sends
 * "Connection: close" and closes after the response, as ab does.  With -k a
 * worker sends its requests back to back on one connection ("Connection:
 * keep-alive"), and opens a new one when the server says Connection: close
 * (nginx does after keepalive_requests), when the body ran to the close,
 * after any failure, or when the server sent bytes beyond the response
 * (counted as "stray bytes").  A reused connection that the server has
 * closed before any byte of the response arrives (EOF, ECONNRESET or EPIPE
 * on it: the server's idle close raced our request) gets the request
 * resent once on a fresh connection; this is reported as "keep-alive
 * retries" and is not a failure.  (ab counts such a request as failed.)  A
 * second failure, or one on a fresh connection, counts.
 *
 * Source addresses.  Against an IPv4 loopback target each worker binds its
 * socket to a source address of its own from 127.0.1.0/24 (worker i gets
 * 127.0.1.(i % 256)), with IP_BIND_ADDRESS_NO_PORT so that the port is
 * still chosen at connect time.  With one source address, a run of 10,000
 * connections leaves 10,000 ports of the 28,232 in TIME_WAIT; the next run
 * within a minute makes the kernel search a nearly full port range on every
 * connect (measured: client system time 0.33 s -> 0.88 s for 10,000
 * connects, p90 latency 254 -> 614 ms).  256 sources give each its own
 * range.  A bind that fails (a kernel without the option) falls back to the
 * kernel's choice.  --no-spread turns it off.
 *
 * Failure accounting.  Each request ends in exactly one of: complete (a
 * whole response was parsed), or a failure of one kind -- connect
 * (socket/connect failed: refused, unreachable, no ports), write (sending
 * the request failed: reset, broken pipe), read (receiving failed: reset,
 * or the server closed before the end of the response -- a short
 * response), timeout (the per-request --timeout passed), parse (the bytes
 * were not an HTTP/1.x response), status (a complete response whose status
 * is not 2xx/3xx).  A status failure is also a complete response: its
 * latency is recorded and its connection may be reused.  Counters are per
 * worker and summed at the end; the first error of each kind is kept for
 * the report.
 *
 * Rate (-r R).  Without it each worker sends its next request as soon as
 * the last one ended (closed loop, as ab).  With it the requests follow a
 * schedule: request k (counted over all workers, one fetch-add) is due at
 * the run's start + k/R, and the worker that takes it sleeps until then.
 * Its latency is counted from when it was due, not from when a worker got
 * to it, so a server that falls behind shows in the latencies instead of
 * silently lowering the rate (wrk2's answer to coordinated omission); -c
 * must be large enough to keep R requests in flight.
 *
 * HTTPS.  An https:// URL runs every connection over TLS (OpenSSL 3):
 * SSL_connect after the TCP connect -- the handshake is part of the
 * connection, so of a new connection's request's latency -- then
 * SSL_write and SSL_read where the plain path uses weft_send and
 * weft_recv.  The SSL object reads and writes through weft_tls.h's BIO
 * (weft_recv/weft_send: the vthread parks in weft's ring, under the
 * request's deadline), so a failure keeps its errno: a timeout is a
 * timeout, a reset a reset; a failed handshake is a connect failure named
 * by OpenSSL's reason.  The certificate is not verified (a load generator,
 * as wrk and ab); SNI names the host unless it is an address.  Each
 * connection makes a full handshake unless --tls-resume, which offers each
 * worker's last session (TLS 1.3: the server's ticket) on its next
 * connection; resumed handshakes are counted.  --tls-version pins 1.2 or
 * 1.3 (default: the best both sides have).
 *
 * Latency.  From just before the request is written -- or, when the request
 * needs a new connection, just before connect() starts, so that it includes
 * the TCP handshake like ab's "Total" -- to the moment the last byte of the
 * response has been parsed.  A keep-alive retry keeps the first attempt's
 * start.  Recorded (ns) for every complete response in the worker's
 * histogram (hist.h: log-linear, 1 us resolution below 2 ms, <= 0.1 %
 * relative error above, to 134 s; min, max and mean exact).  The worker
 * histograms are merged when the run is over.
 *
 * Wall time runs from before the first worker is spawned to after the last
 * has been joined; requests/s = complete responses / wall time.  The
 * per-request deadline is set with weft_deadline_set, so it covers connect,
 * send and every receive of the request together.
 *
 * Progress.  The banner ("This is weft-load ...", "Benchmarking HOST:PORT")
 * is printed and flushed before the run, so a pipe sees it at once.  When
 * stderr is a terminal (and not -q), a progress line is redrawn there
 * every 250 ms -- requests ended of -n (or seconds of -t), failures, the
 * rate so far -- as wrk and ab show theirs, and left standing with a
 * newline when the requests are done.  Each worker publishes its own two
 * counters (relaxed stores, one writer each: no shared cache line on the
 * hot path); the run's vthread sums them.
 *
 * Output: a report like ab's, then one machine-readable line
 *   experiment=load peer=weft-load concurrency=C n=N keepalive=0|1 rps=...
 *   mean_ms=... p50_ms=... p90_ms=... p95_ms=... p99_ms=... max_ms=...
 *   failed=... wall_s=... (then complete=, err_*=, retries=, ...)
 * -q prints only that line; --csv prints it as a CSV header and row.
 * --self-test checks the histogram and the response parser and exits 0/1.
 *
 * Exit status: 0 every request succeeded, 1 some failed, 2 usage error or
 * not enough file descriptors for -c, 3 the runtime could not start.
 */
#define _GNU_SOURCE
#include "hist.h"
#include "http_resp.h"
#if WEFT_LOAD_TLS
#include "weft_tls.h"

#include <openssl/err.h>
#endif

#include <weft.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define RECV_BUF 16384
#define MAX_HEADERS 64

/* failure kinds, in report order */
enum { F_CONNECT, F_WRITE, F_READ, F_TIMEOUT, F_STATUS, F_PARSE, F_KINDS };
static const char *const KIND_NAME[F_KINDS] = {"connect", "write", "read", "timeout", "status", "parse"};

/* ------------------------------------------------------------------------ */
/* configuration                                                             */
/* ------------------------------------------------------------------------ */

static struct {
    int64_t n;          /* requests; -1: unlimited (-t alone) */
    int c;              /* connections asked for */
    int workers;        /* connections used: min(c, n) */
    int keepalive;
    double duration_s;  /* -t; 0: none */
    const char *method;
    int head;
    int64_t timeout_ns;
    int carriers;
    int quiet, csv;
    int spread;         /* bind loopback sources from 127.0.1.0/24 (see the top comment) */
    double hold_s;      /* --hold: keep the connections open, idle, this long after the requests */
    double rate;        /* -r: requests a second over the run, on a schedule; 0: as fast as they go */
    int tls;            /* https:// */
    int tls_version;    /* --tls-version: 0 (best), 12 or 13 */
    int tls_resume;     /* --tls-resume */
#if WEFT_LOAD_TLS
    SSL_CTX *ctx;
#endif
    const char *headers[MAX_HEADERS];
    int nheaders;
    /* target */
    char host[256];
    int port;
    const char *path;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    /* the request, formatted once */
    char *req;
    size_t req_len;
} C = {.n = 1, .c = 1, .method = "GET", .timeout_ns = 30 * INT64_C(1000000000), .spread = 1};

/* shared while the run goes on */
static _Atomic int64_t g_next;   /* next ticket */
static _Atomic int g_stop;       /* workers stop taking tickets (spawn failure) */
static int64_t g_run_end;        /* -t: when workers stop (absolute ns); 0: none */
static int64_t g_run_start;      /* -r: the schedule's origin (absolute ns) */
static _Atomic int64_t g_due;    /* -r: the next request's number on the schedule */
static _Atomic int g_first_err[F_KINDS]; /* 0: none yet; else 1 + the error below */
static int g_err_code[F_KINDS];          /* -errno, or 0 with g_err_text */
static const char *g_err_text[F_KINDS];
static int g_err_status[F_KINDS];
static _Atomic int g_server_state;       /* 0 not captured, 1 being written, 2 done */
/* --hold: workers whose requests are done (holding or not), and whether
 * the hold is over (run() says so; the workers wait in 10 ms naps) */
static _Atomic int g_done_workers, g_holding, g_hold_over;
static char g_server[64];

/* ------------------------------------------------------------------------ */
/* workers                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct worker {
    weft_thread *t;
    char *buf;
    int fd;
#if WEFT_LOAD_TLS
    SSL *ssl;                    /* https: the connection's TLS, over fd */
    SSL_SESSION *sess;           /* --tls-resume: the session to offer next */
#endif
    uint64_t resumed;            /* handshakes that resumed a session */
    int index;                   /* 0..workers-1: picks the source address */
    int reused;                  /* the connection has carried a response already */
    uint64_t fails[F_KINDS];
    uint64_t complete;           /* whole responses, any status */
    uint64_t unfinished;         /* -t: cut by the end of the run */
    uint64_t bytes, body_bytes;  /* received: every byte / bodies of complete responses */
    uint64_t connects, retries, stray;
    int64_t doc_len;             /* body length of the first successful response; -1 none */
    int doc_varies;
    _Atomic uint64_t shown_ended, shown_failed; /* for the progress line (this worker writes) */
    hist h;
} __attribute__((aligned(64))) worker;

static void note_fail(worker *w, int kind, int err, const char *text, int status) {
    w->fails[kind]++;
    if (atomic_load_explicit(&g_first_err[kind], memory_order_relaxed)) return;
    int zero = 0;
    if (atomic_compare_exchange_strong(&g_first_err[kind], &zero, -1)) {
        g_err_code[kind] = err;
        g_err_text[kind] = text;
        g_err_status[kind] = status;
        atomic_store(&g_first_err[kind], 1);
    }
}

static _Atomic int g_tls_proto; /* the first handshake's version: 12, 13; -1 being written */
static char g_tls_cipher[64];

static const char *tls_proto_name(int v) { return v == 13 ? "TLSv1.3" : v == 12 ? "TLSv1.2" : "none"; }

#if WEFT_LOAD_TLS
/* The first TLS failure's words (OpenSSL's reason), for the report. */
static char g_tls_text[200];
static _Atomic int g_tls_text_set; /* 0 not yet, 1 being written, 2 done */

static const char *tls_note(const char *what) {
    int zero = 0;
    if (atomic_compare_exchange_strong(&g_tls_text_set, &zero, 1)) {
        char e[160];
        snprintf(g_tls_text, sizeof g_tls_text, "%s: %s", what, weft_tls_error(e, sizeof e, "the peer closed"));
        atomic_store(&g_tls_text_set, 2);
    } else {
        ERR_clear_error();
    }
    return atomic_load(&g_tls_text_set) == 2 ? g_tls_text : what;
}
#else
static const char *tls_note(const char *what) { return what; }
#endif

/* Ends w's connection.  clean: it ended as it should (its last response was
 * whole): over TLS a close_notify goes first, without waiting for the
 * peer's -- a server may take a session whose connection was cut as one
 * not to resume (OpenSSL's servers do). */
static void drop_conn_as(worker *w, int clean) {
#if WEFT_LOAD_TLS
    if (w->ssl && clean) SSL_shutdown(w->ssl);
    if (w->ssl) {
        if (C.tls_resume) { /* its session, for the next connection */
            SSL_SESSION *s = SSL_get1_session(w->ssl);
            if (s && SSL_SESSION_is_resumable(s)) {
                if (w->sess) SSL_SESSION_free(w->sess);
                w->sess = s;
            } else if (s) {
                SSL_SESSION_free(s);
            }
        }
        SSL_free(w->ssl); /* (and its BIO; fd is closed below) */
        w->ssl = NULL;
    }
#else
    (void)clean;
#endif
    if (w->fd >= 0) weft_close(w->fd);
    w->fd = -1;
    w->reused = 0;
}

static void drop_conn(worker *w) { drop_conn_as(w, 0); }

static int open_conn(worker *w) {
    int fd = socket(C.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno; /* errno read right after socket(): no weft call between */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (C.spread && C.addr.ss_family == AF_INET &&
        (ntohl(((const struct sockaddr_in *)&C.addr)->sin_addr.s_addr) >> 24) == 127) {
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl((127u << 24) | (1u << 8) | (unsigned)(w->index & 255));
        /* no port yet: the kernel picks it at connect, for the whole 4-tuple */
        if (setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one) == 0)
            (void)bind(fd, (const struct sockaddr *)&src, sizeof src); /* failing: the kernel's choice */
    }
    int r = weft_connect(fd, (const struct sockaddr *)&C.addr, C.addrlen);
    if (r < 0) {
        weft_close(fd);
        return r;
    }
    w->connects++;
#if WEFT_LOAD_TLS
    if (C.tls) {
        SSL *s = SSL_new(C.ctx);
        BIO *b = s ? weft_tls_bio_new(fd) : NULL;
        if (!b) {
            if (s) SSL_free(s);
            weft_close(fd);
            return -ENOMEM;
        }
        SSL_set_bio(s, b, b);
        struct in6_addr ip;
        if (inet_pton(AF_INET, C.host, &ip) != 1 && inet_pton(AF_INET6, C.host, &ip) != 1)
            SSL_set_tlsext_host_name(s, C.host);
        if (w->sess) SSL_set_session(s, w->sess);
        if (SSL_connect(s) != 1) {
            int be = weft_tls_bio_error(b);
            if (!be) tls_note("TLS handshake");
            else ERR_clear_error();
            SSL_free(s);
            weft_close(fd);
            return be ? be : -EPROTO;
        }
        if (SSL_session_reused(s)) w->resumed++;
        int zero = 0;
        if (atomic_load_explicit(&g_tls_proto, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&g_tls_proto, &zero, -1)) {
            snprintf(g_tls_cipher, sizeof g_tls_cipher, "%s", SSL_get_cipher_name(s));
            atomic_store(&g_tls_proto, SSL_version(s) == TLS1_3_VERSION ? 13 : 12);
        }
        w->ssl = s;
    }
#endif
    w->fd = fd;
    w->reused = 0;
    return 0;
}

/* What the connection received into buf (plain or TLS): bytes, 0 at its
 * end, or -errno (-EPROTO: a TLS error, tls_note says which). */
static ssize_t conn_recv(worker *w, char *buf, size_t n) {
#if WEFT_LOAD_TLS
    if (!w->ssl) return weft_recv(w->fd, buf, n, 0);
    size_t got = 0;
    if (SSL_read_ex(w->ssl, buf, n, &got)) return (ssize_t)got;
    int e = SSL_get_error(w->ssl, 0);
    int be = weft_tls_bio_error(SSL_get_rbio(w->ssl));
    if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && !be)) {
        ERR_clear_error();
        return 0; /* close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a plain end */
    }
    if (be) {
        ERR_clear_error();
        return be;
    }
    tls_note("TLS read");
    return -EPROTO;
#else
    return weft_recv(w->fd, buf, n, 0);
#endif
}

/* weft_send until the request is out.  Not weft_write_all: write(2) on a
 * socket the peer has reset raises SIGPIPE (MSG_NOSIGNAL here gives EPIPE;
 * SIGPIPE is ignored as well), and in epoll mode every weft_write costs an
 * fstat and an fcntl besides the write, where weft_send is one send(2). */
static ssize_t send_all(worker *w, const char *p, size_t n) {
#if WEFT_LOAD_TLS
    if (w->ssl) {
        size_t put = 0;
        if (SSL_write_ex(w->ssl, p, n, &put) && put == n) return (ssize_t)n;
        int be = weft_tls_bio_error(SSL_get_wbio(w->ssl));
        if (be) {
            ERR_clear_error();
            return be;
        }
        tls_note("TLS write");
        return -EPROTO;
    }
#endif
    int fd = w->fd;
    size_t done = 0;
    while (done < n) {
        ssize_t r = weft_send(fd, p + done, n - done, MSG_NOSIGNAL);
        if (r < 0) return r;
        if (r == 0) return -EIO;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* A deadline passed: the request's own timeout, or (-t) the end of the run. */
static void timed_out(worker *w) {
    if (g_run_end && weft_now() >= g_run_end) w->unfinished++;
    else note_fail(w, F_TIMEOUT, 0, "no complete response within --timeout", 0);
}

enum { DONE_OK, DONE_FAILED, RETRY };

/* One attempt at the request on w's connection (opened here if needed). */
static int attempt(worker *w, resp *p, int may_retry) {
    if (w->fd < 0) {
        int r = open_conn(w);
        if (r < 0) {
            if (r == -ETIMEDOUT) timed_out(w);
            else note_fail(w, F_CONNECT, r, r == -EPROTO ? tls_note("TLS handshake") : NULL, 0);
            return DONE_FAILED;
        }
    }
    int reused = w->reused;
    ssize_t s = send_all(w, C.req, C.req_len);
    if (s < 0) {
        drop_conn(w);
        if (s == -ETIMEDOUT) timed_out(w);
        else if (reused && may_retry && (s == -EPIPE || s == -ECONNRESET)) return RETRY;
        else note_fail(w, F_WRITE, (int)s, s == -EPROTO ? tls_note("TLS write") : NULL, 0);
        return DONE_FAILED;
    }
    resp_begin(p, C.head);
    p->want_server = atomic_load_explicit(&g_server_state, memory_order_relaxed) == 0;
    size_t have = 0;
    uint64_t got = 0;
    for (;;) {
        ssize_t r = conn_recv(w, w->buf + have, RECV_BUF - have);
        int pr;
        size_t used = 0;
        if (r < 0) {
            drop_conn(w);
            if (r == -ETIMEDOUT) timed_out(w);
            else if (!got && reused && may_retry && r == -ECONNRESET) return RETRY;
            else note_fail(w, F_READ, (int)r, r == -EPROTO ? tls_note("TLS read") : NULL, 0);
            return DONE_FAILED;
        }
        if (r == 0) {
            if (!got && reused && may_retry) {
                drop_conn(w);
                return RETRY;
            }
            pr = resp_eof(p);
            if (pr != RESP_DONE) {
                drop_conn(w);
                note_fail(w, F_READ, 0, got ? "closed before the end of the response" : "closed before any response", 0);
                return DONE_FAILED;
            }
        } else {
            got += (uint64_t)r;
            w->bytes += (uint64_t)r;
            have += (size_t)r;
            pr = resp_feed(p, w->buf, have, &used);
            if (pr == RESP_ERROR) {
                drop_conn(w);
                note_fail(w, F_PARSE, 0, p->error, 0);
                return DONE_FAILED;
            }
            if (pr == RESP_MORE) {
                if (used) memmove(w->buf, w->buf + used, have - used);
                have -= used;
                continue;
            }
        }
        /* complete */
        if (pr == RESP_DONE && r > 0 && have > used) w->stray++, p->close = 1;
        if (p->close || !C.keepalive || r == 0) drop_conn_as(w, 1);
        else w->reused = 1;
        return DONE_OK;
    }
}

/* Publishes w's counts for the progress line: requests ended (complete,
 * failed or cut by -t) and failed (a status failure is also complete). */
static void publish(worker *w) {
    uint64_t failed = 0, lost = 0;
    for (int k = 0; k < F_KINDS; k++) {
        failed += w->fails[k];
        lost += k == F_STATUS ? 0 : w->fails[k];
    }
    atomic_store_explicit(&w->shown_ended, w->complete + w->unfinished + lost, memory_order_relaxed);
    atomic_store_explicit(&w->shown_failed, failed, memory_order_relaxed);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    resp p;
    memset(&p, 0, sizeof p);
    /* --hold: every connection is to be held, so each worker makes its
     * share of the requests, not what it can grab */
    int64_t quota = C.hold_s > 0 && C.n >= 0 ? (C.n + C.workers - 1) / C.workers : -1, done = 0;
    for (;; publish(w)) {
        if (atomic_load_explicit(&g_stop, memory_order_relaxed)) break;
        if (g_run_end && weft_now() >= g_run_end) break;
        if (quota >= 0 && done++ >= quota) break;
        if (C.n >= 0 && atomic_fetch_add_explicit(&g_next, 1, memory_order_relaxed) >= C.n) break;
        int64_t t0 = weft_now(), start = t0;
        if (C.rate > 0) { /* wait for this request's time on the schedule; its latency counts from then */
            int64_t k = atomic_fetch_add_explicit(&g_due, 1, memory_order_relaxed);
            int64_t due = g_run_start + (int64_t)((double)k * 1e9 / C.rate);
            if (g_run_end && due >= g_run_end) break;
            if (due > t0 && weft_sleep(due - t0) < 0) break;
            if (due > t0) start = due;
            t0 = due;
        }
        /* --timeout from when the request is sent: a late one still gets all of it */
        int64_t dl = start + C.timeout_ns;
        if (g_run_end && g_run_end < dl) dl = g_run_end;
        int64_t saved = weft_deadline_set(dl);
        int r = attempt(w, &p, 1);
        if (r == RETRY) {
            w->retries++;
            r = attempt(w, &p, 0);
        }
        weft_deadline_set(saved);
        if (r != DONE_OK) continue;
        int64_t t1 = weft_now();
        hist_record(&w->h, t1 - t0);
        w->complete++;
        w->body_bytes += p.body_bytes;
        if (p.status >= 400) {
            note_fail(w, F_STATUS, 0, NULL, p.status);
        } else {
            if (w->doc_len < 0) w->doc_len = (int64_t)p.body_bytes;
            else if ((uint64_t)w->doc_len != p.body_bytes) w->doc_varies = 1;
            if (p.want_server) {
                int zero = 0;
                if (atomic_compare_exchange_strong(&g_server_state, &zero, 1)) {
                    memcpy(g_server, p.server, sizeof g_server);
                    atomic_store(&g_server_state, 2);
                }
            }
        }
    }
    publish(w);
    if (C.hold_s > 0 && w->fd >= 0) { /* idle on its open connection until the hold ends */
        atomic_fetch_add(&g_holding, 1);
        atomic_fetch_add(&g_done_workers, 1);
        while (!atomic_load(&g_hold_over)) weft_sleep(10 * 1000000);
    } else {
        atomic_fetch_add(&g_done_workers, 1);
    }
    drop_conn_as(w, 1);
#if WEFT_LOAD_TLS
    if (w->sess) SSL_SESSION_free(w->sess);
    w->sess = NULL;
#endif
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the run                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct results {
    worker *w;
    int spawned;
    int64_t wall_ns;
    int spawn_err;
    int backend;
    int progress; /* draw the progress line (stderr is a terminal) */
} results;

/* The progress line on the terminal (stderr), redrawn in place. */
static void show_progress(const results *res, int64_t t0, int last) {
    uint64_t ended = 0, failed = 0;
    for (int i = 0; i < res->spawned; i++) {
        ended += atomic_load_explicit(&res->w[i].shown_ended, memory_order_relaxed);
        failed += atomic_load_explicit(&res->w[i].shown_failed, memory_order_relaxed);
    }
    double el = (double)(weft_now() - t0) / 1e9;
    char what[96];
    if (C.n >= 0)
        snprintf(what, sizeof what, "%llu of %lld requests (%d%%)", (unsigned long long)ended, (long long)C.n,
                 (int)(C.n ? ended * 100 / (uint64_t)C.n : 100));
    else snprintf(what, sizeof what, "%llu requests", (unsigned long long)ended);
    char when[48];
    if (C.duration_s > 0) snprintf(when, sizeof when, "%.1f of %g s", el, C.duration_s);
    else snprintf(when, sizeof when, "%.1f s", el);
    /* \r and erase to the end of the line: one line, redrawn */
    fprintf(stderr, "\r\033[Kweft-load: %s, %llu failed, %.0f req/s, %s%s", what, (unsigned long long)failed,
            el > 0 ? (double)ended / el : 0.0, when, last ? "\n" : "");
    fflush(stderr);
}

static int run(void *arg) {
    results *res = arg;
    res->backend = weft_io_backend();
    int64_t t0 = weft_now();
    g_run_start = t0;
    if (C.duration_s > 0) g_run_end = t0 + (int64_t)(C.duration_s * 1e9);
    weft_thread_opts a = {.name = "load"};
    for (int i = 0; i < C.workers; i++) {
        int r = weft_spawn(&res->w[i].t, worker_main, &res->w[i], &a);
        if (r < 0) {
            res->spawn_err = r;
            atomic_store(&g_stop, 1);
            break;
        }
        res->spawned++;
    }
    if (res->progress) {
        /* until every worker has made its requests (the hold, if any, after) */
        while (atomic_load(&g_done_workers) < res->spawned) {
            show_progress(res, t0, 0);
            for (int k = 0; k < 25 && atomic_load(&g_done_workers) < res->spawned; k++) weft_sleep(10 * 1000000);
        }
        show_progress(res, t0, 1);
    }
    if (C.hold_s > 0) {
        /* every worker done: say how many connections are held, hold them */
        while (atomic_load(&g_done_workers) < res->spawned) weft_sleep(10 * 1000000);
        res->wall_ns = weft_now() - t0; /* the requests' time, not the hold's */
        fprintf(stderr, "weft-load: holding %d idle connections for %g s\n", atomic_load(&g_holding), C.hold_s);
        fflush(stderr);
        weft_sleep((int64_t)(C.hold_s * 1e9));
        atomic_store(&g_hold_over, 1);
    }
    for (int i = 0; i < res->spawned; i++) weft_join(res->w[i].t, NULL);
    if (!(C.hold_s > 0)) res->wall_ns = weft_now() - t0;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* options, URL, request                                                     */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: weft-load [options] http[s]://HOST[:PORT]/path\n"
            "  -n N            requests to send (default 1)\n"
            "  -c C            concurrent connections, one vthread each (default 1)\n"
            "  -k              keep-alive: each connection sends its requests back to back\n"
            "                  (default: one connection per request, Connection: close)\n"
            "  -t SECONDS      run for this long instead of -n requests (with -n: whichever ends first)\n"
            "  -r RATE         send RATE requests a second in all, on a schedule (latency counted\n"
            "                  from each request's due time); default: each connection as fast as\n"
            "                  its responses come\n"
            "  -H 'Name: value' extra request header (repeatable; Host and User-Agent replace ours)\n"
            "  -m METHOD       GET (default) or HEAD\n"
            "  --timeout S     per-request timeout in seconds, connect included (default 30)\n"
            "  --carriers N    weft carrier threads (default: $WEFT_CARRIERS or the CPU count)\n"
            "  -q              quiet: only the machine-readable line\n"
            "  --csv           the machine-readable result as a CSV header and row\n"
            "  --tls-version V 1.2 or 1.3: with https://, only that version (default: the best both have)\n"
            "  --tls-resume    with https://, offer each connection's session again on its worker's\n"
            "                  next connection (default: a full handshake every connection)\n"
            "  --hold SECONDS  with -k: after the requests, keep each connection open and idle\n"
            "                  this long (a line on stderr says when all are held; for\n"
            "                  measuring what idle connections cost a server); not in the wall time\n"
            "  --no-spread     against 127.x.x.x, do not give each connection a source address\n"
            "                  of its own from 127.0.1.0/24 (the default keeps ephemeral ports\n"
            "                  from running out when runs follow each other)\n"
            "  --self-test     check the histogram and the response parser, exit 0 or 1\n"
            "  -h, --help      this text\n"
            "The io backend follows $WEFT_IO (uring, epoll; default auto).\n"
            "Exit status: 0 all requests succeeded, 1 some failed, 2 usage or fd limit, 3 runtime error.\n");
}

static int bad(const char *fmt, const char *what) {
    fprintf(stderr, "weft-load: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    usage(stderr);
    return 2;
}

static int parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_secs(const char *s, double *out) {
    char *e;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || e == s || *e || !(v > 0) || v > 1e7) return -1;
    *out = v;
    return 0;
}

/* http://HOST[:PORT][/path]; HOST may be [v6]. */
static int parse_url(const char *url) {
    const char *h, *end;
    if (strncasecmp(url, "http://", 7) == 0) h = url + 7;
    else if (strncasecmp(url, "https://", 8) == 0) h = url + 8, C.tls = 1;
    else return -1;
    const char *slash = strchr(h, '/');
    const char *hostend = slash ? slash : h + strlen(h);
    const char *colon;
    if (*h == '[') {
        end = memchr(h, ']', (size_t)(hostend - h));
        if (!end) return -1;
        if ((size_t)(end - h - 1) >= sizeof C.host) return -1;
        memcpy(C.host, h + 1, (size_t)(end - h - 1));
        C.host[end - h - 1] = 0;
        colon = end + 1 < hostend && end[1] == ':' ? end + 1 : NULL;
        if (!colon && end + 1 != hostend) return -1;
    } else {
        colon = memchr(h, ':', (size_t)(hostend - h));
        end = colon ? colon : hostend;
        if (end == h || (size_t)(end - h) >= sizeof C.host) return -1;
        memcpy(C.host, h, (size_t)(end - h));
        C.host[end - h] = 0;
    }
    if (strchr(C.host, '@')) return -1; /* no userinfo */
    C.port = C.tls ? 443 : 80;
    if (colon) {
        char port[8];
        size_t pl = (size_t)(hostend - colon - 1);
        if (pl == 0 || pl >= sizeof port) return -1;
        memcpy(port, colon + 1, pl);
        port[pl] = 0;
        int64_t v;
        if (parse_int64(port, 1, 65535, &v) < 0) return -1;
        C.port = (int)v;
    }
    C.path = slash ? slash : "/";
    for (const char *q = C.path; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f) return -1;
    return 0;
}

static int resolve(void) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC}, *ai;
    char port[8];
    snprintf(port, sizeof port, "%d", C.port);
    int e = getaddrinfo(C.host, port, &hints, &ai);
    if (e) {
        fprintf(stderr, "weft-load: cannot resolve %s: %s\n", C.host, gai_strerror(e));
        return -1;
    }
    struct addrinfo *pick = ai;
    for (struct addrinfo *p = ai; p; p = p->ai_next)
        if (p->ai_family == AF_INET) { pick = p; break; } /* IPv4 first, like ab */
    memcpy(&C.addr, pick->ai_addr, pick->ai_addrlen);
    C.addrlen = pick->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

static int header_named(const char *h, const char *name) {
    size_t n = strlen(name);
    return strncasecmp(h, name, n) == 0 && h[n] == ':';
}

static int build_request(void) {
    int has_host = 0, has_ua = 0, has_accept = 0;
    for (int i = 0; i < C.nheaders; i++) {
        has_host |= header_named(C.headers[i], "host");
        has_ua |= header_named(C.headers[i], "user-agent");
        has_accept |= header_named(C.headers[i], "accept");
    }
    size_t cap = 512 + strlen(C.path) + strlen(C.host);
    for (int i = 0; i < C.nheaders; i++) cap += strlen(C.headers[i]) + 2;
    C.req = malloc(cap);
    if (!C.req) return -1;
    int v6 = strchr(C.host, ':') != NULL;
    size_t n = (size_t)snprintf(C.req, cap, "%s %s HTTP/1.1\r\n", C.method, C.path);
    if (!has_host) {
        n += (size_t)snprintf(C.req + n, cap - n, "Host: %s%s%s", v6 ? "[" : "", C.host, v6 ? "]" : "");
        if (C.port != (C.tls ? 443 : 80)) n += (size_t)snprintf(C.req + n, cap - n, ":%d", C.port);
        n += (size_t)snprintf(C.req + n, cap - n, "\r\n");
    }
    if (!has_ua) n += (size_t)snprintf(C.req + n, cap - n, "User-Agent: weft-load/%d.%d\r\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR);
    if (!has_accept) n += (size_t)snprintf(C.req + n, cap - n, "Accept: */*\r\n");
    n += (size_t)snprintf(C.req + n, cap - n, "Connection: %s\r\n", C.keepalive ? "keep-alive" : "close");
    for (int i = 0; i < C.nheaders; i++) n += (size_t)snprintf(C.req + n, cap - n, "%s\r\n", C.headers[i]);
    n += (size_t)snprintf(C.req + n, cap - n, "\r\n");
    C.req_len = n;
    return 0;
}

/* Raises RLIMIT_NOFILE to the hard limit; 0 when -c connections fit. */
static int fds_for(int conns, int carriers) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max;
        rl.rlim_cur = want;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) getrlimit(RLIMIT_NOFILE, &rl);
    }
    /* per carrier: a ring or epoll set and an eventfd; plus stdio, the
     * shared epoll set, the blocking pool's slack */
    long need = (long)conns + 3L * carriers + 32;
    if (rl.rlim_cur != RLIM_INFINITY && (rlim_t)need > rl.rlim_cur) {
        fprintf(stderr,
                "weft-load: -c %d needs about %ld file descriptors, but RLIMIT_NOFILE is %llu (hard limit %llu): "
                "lower -c, or raise the hard limit (ulimit -Hn, /etc/security/limits.conf)\n",
                conns, need, (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* report                                                                    */
/* ------------------------------------------------------------------------ */

static double ms(int64_t ns) {
    return (double)ns / 1e6;
}

static void first_error(int kind, char *out, size_t cap) {
    out[0] = 0;
    if (atomic_load(&g_first_err[kind]) != 1) return;
    if (g_err_status[kind]) snprintf(out, cap, "first: HTTP %d", g_err_status[kind]);
    else if (g_err_text[kind]) snprintf(out, cap, "first: %s", g_err_text[kind]);
    else if (g_err_code[kind]) snprintf(out, cap, "first: %s", strerror(-g_err_code[kind]));
}

static int report(results *res) {
    worker *w = res->w;
    hist h;
    hist_init(&h);
    uint64_t fails[F_KINDS] = {0}, complete = 0, unfinished = 0, bytes = 0, body = 0, connects = 0, retries = 0,
             stray = 0, resumed = 0;
    int64_t doc = -1;
    int doc_varies = 0;
    uint64_t wmin = UINT64_MAX, wmax = 0; /* requests per worker: fairness */
    for (int i = 0; i < res->spawned; i++) {
        uint64_t wn = w[i].complete + w[i].unfinished;
        for (int k = 0; k < F_KINDS; k++) wn += k == F_STATUS ? 0 : w[i].fails[k];
        if (wn < wmin) wmin = wn;
        if (wn > wmax) wmax = wn;
        for (int k = 0; k < F_KINDS; k++) fails[k] += w[i].fails[k];
        complete += w[i].complete;
        unfinished += w[i].unfinished;
        bytes += w[i].bytes;
        body += w[i].body_bytes;
        connects += w[i].connects;
        retries += w[i].retries;
        stray += w[i].stray;
        resumed += w[i].resumed;
        if (w[i].doc_len >= 0) {
            if (doc < 0) doc = w[i].doc_len;
            else if (doc != w[i].doc_len) doc_varies = 1;
        }
        doc_varies |= w[i].doc_varies;
        if (hist_merge(&h, &w[i].h) < 0) fprintf(stderr, "weft-load: out of memory merging histograms\n");
        hist_free(&w[i].h);
    }
    uint64_t failed = 0;
    for (int k = 0; k < F_KINDS; k++) failed += fails[k];
    /* a status failure is a complete response too */
    uint64_t attempted = complete + failed - fails[F_STATUS];
    double wall = (double)res->wall_ns / 1e9;
    double rps = wall > 0 ? (double)complete / wall : 0;
    double mean = hist_mean_ns(&h);
    int64_t p50 = hist_percentile(&h, 50), p90 = hist_percentile(&h, 90), p95 = hist_percentile(&h, 95),
            p99 = hist_percentile(&h, 99), mx = hist_percentile(&h, 100);
    if (h.oom) fprintf(stderr, "weft-load: out of memory for histogram pages: some latencies are not in the percentiles\n");

    if (!C.quiet) {
        printf("\nServer Software:        %s\n", atomic_load(&g_server_state) == 2 ? g_server : "");
        printf("Server Hostname:        %s\n", C.host);
        printf("Server Port:            %d\n", C.port);
        int tp = atomic_load(&g_tls_proto);
        if (C.tls && tp > 0)
            printf("TLS:                    %s, %s; %llu of %llu handshakes resumed%s\n", tls_proto_name(tp),
                   g_tls_cipher, (unsigned long long)resumed,
                   (unsigned long long)connects, C.tls_resume ? "" : " (--tls-resume: off)");
        else if (C.tls)
            printf("TLS:                    no handshake completed\n");
        printf("\n");
        printf("Document Path:          %s\n", C.path);
        if (doc >= 0) printf("Document Length:        %lld bytes%s\n\n", (long long)doc, doc_varies ? " (varies)" : "");
        else printf("Document Length:        (no successful response)\n\n");
        printf("Concurrency Level:      %d\n", res->spawned);
        printf("Keep-Alive:             %s\n", C.keepalive ? "yes (requests back to back on each connection)"
                                                            : "no (Connection: close, one connection per request)");
        printf("Time taken for tests:   %.3f seconds\n", wall);
        printf("Requests sent:          %llu\n", (unsigned long long)attempted);
        printf("Complete requests:      %llu   (whole responses, any status)\n", (unsigned long long)complete);
        printf("Failed requests:        %llu\n", (unsigned long long)failed);
        if (failed) {
            for (int k = 0; k < F_KINDS; k++) {
                if (!fails[k]) continue;
                char e[160];
                first_error(k, e, sizeof e);
                printf("   %-8s %llu%s%s%s\n", KIND_NAME[k], (unsigned long long)fails[k], *e ? "  (" : "", e,
                       *e ? ")" : "");
            }
        }
        if (unfinished) printf("Unfinished at -t end:   %llu   (cut by the end of the run; not counted)\n", (unsigned long long)unfinished);
        printf("Connections opened:     %llu\n", (unsigned long long)connects);
        if (res->spawned)
            printf("Requests per worker:    min %llu, mean %.1f, max %llu\n", (unsigned long long)wmin,
                   (double)(attempted + unfinished) / res->spawned, (unsigned long long)wmax);
        if (C.keepalive)
            printf("Keep-alive retries:     %llu   (reused connection closed before any response byte: request resent\n"
                   "                               once on a new connection, not counted as failed)\n",
                   (unsigned long long)retries);
        if (stray) printf("Stray bytes:            %llu responses were followed by unexpected bytes (connection dropped)\n",
                          (unsigned long long)stray);
        printf("Total transferred:      %llu bytes\n", (unsigned long long)bytes);
        printf("HTML transferred:       %llu bytes\n", (unsigned long long)body);
        printf("Requests per second:    %.2f [#/sec] (mean)\n", rps);
        if (complete) {
            printf("Time per request:       %.3f [ms] (mean, measured)\n", mean / 1e6);
            printf("Time per request:       %.3f [ms] (mean, across all concurrent requests)\n", wall * 1e3 / (double)complete);
        }
        printf("Transfer rate:          %.2f [Kbytes/sec] received\n\n", wall > 0 ? (double)bytes / 1024 / wall : 0);
        if (complete) {
            printf("Latency of complete requests (ms), from %s to the last response byte:\n",
                   C.keepalive ? "writing the request (connect, for a new connection)" : "connect");
            printf("  min %.3f  mean %.3f  p50 %.3f  p90 %.3f  p95 %.3f  p99 %.3f  max %.3f\n\n", ms((int64_t)h.min_ns),
                   mean / 1e6, ms(p50), ms(p90), ms(p95), ms(p99), ms(mx));
            printf("Percentage of the requests served within a certain time (ms)\n");
            static const double qs[] = {50, 66, 75, 80, 90, 95, 98, 99, 99.9, 99.99};
            for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
                printf(" %6g%%  %9.3f\n", qs[i], ms(hist_percentile(&h, qs[i])));
            printf("    100%%  %9.3f (longest request)\n", ms(mx));
        }
        fflush(stdout);
    }

    char line[1024];
    const char *keys[] = {"experiment", "peer", "concurrency", "n", "keepalive", "rps", "mean_ms", "p50_ms",
                          "p90_ms", "p95_ms", "p99_ms", "max_ms", "failed", "wall_s", "complete", "err_connect",
                          "err_write", "err_read", "err_timeout", "err_status", "err_parse", "retries",
                          "unfinished", "connections", "io", "tls", "tls_resumed"};
    char vals[27][48];
    int k = 0;
    snprintf(vals[k++], 48, "load");
    snprintf(vals[k++], 48, "weft-load");
    snprintf(vals[k++], 48, "%d", res->spawned);
    snprintf(vals[k++], 48, "%llu", (unsigned long long)attempted);
    snprintf(vals[k++], 48, "%d", C.keepalive);
    snprintf(vals[k++], 48, "%.2f", rps);
    snprintf(vals[k++], 48, "%.3f", mean / 1e6);
    snprintf(vals[k++], 48, "%.3f", ms(p50));
    snprintf(vals[k++], 48, "%.3f", ms(p90));
    snprintf(vals[k++], 48, "%.3f", ms(p95));
    snprintf(vals[k++], 48, "%.3f", ms(p99));
    snprintf(vals[k++], 48, "%.3f", ms(mx));
    snprintf(vals[k++], 48, "%llu", (unsigned long long)failed);
    snprintf(vals[k++], 48, "%.3f", wall);
    snprintf(vals[k++], 48, "%llu", (unsigned long long)complete);
    for (int f = 0; f < F_KINDS; f++) {
        static const int order[F_KINDS] = {F_CONNECT, F_WRITE, F_READ, F_TIMEOUT, F_STATUS, F_PARSE};
        snprintf(vals[k++], 48, "%llu", (unsigned long long)fails[order[f]]);
    }
    snprintf(vals[k++], 48, "%llu", (unsigned long long)retries);
    snprintf(vals[k++], 48, "%llu", (unsigned long long)unfinished);
    snprintf(vals[k++], 48, "%llu", (unsigned long long)connects);
    snprintf(vals[k++], 48, "%s", res->backend == WEFT_IO_URING ? "uring" : "epoll");
    if (C.tls) { /* (https only: the plain line stays as it was) */
        int tp = atomic_load(&g_tls_proto);
        snprintf(vals[k++], 48, "%s", tls_proto_name(tp));
        snprintf(vals[k++], 48, "%llu", (unsigned long long)resumed);
    }
    size_t n = 0;
    if (C.csv) {
        for (int i = 0; i < k; i++) n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? "," : "", keys[i]);
        printf("%s\n", line);
        n = 0;
        for (int i = 0; i < k; i++) n += (size_t)snprintf(line + n, sizeof line - n, "%s%s", i ? "," : "", vals[i]);
    } else {
        for (int i = 0; i < k; i++) n += (size_t)snprintf(line + n, sizeof line - n, "%s%s=%s", i ? " " : "", keys[i], vals[i]);
    }
    printf("%s\n", line);
    fflush(stdout);
    hist_free(&h);
    return failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

enum { OPT_TIMEOUT = 256, OPT_CARRIERS, OPT_CSV, OPT_SELF_TEST, OPT_NO_SPREAD, OPT_HOLD, OPT_TLS_VERSION, OPT_TLS_RESUME };

static const struct option LONG_OPTS[] = {
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"carriers", required_argument, NULL, OPT_CARRIERS},
    {"csv", no_argument, NULL, OPT_CSV},
    {"no-spread", no_argument, NULL, OPT_NO_SPREAD},
    {"hold", required_argument, NULL, OPT_HOLD},
    {"tls-version", required_argument, NULL, OPT_TLS_VERSION},
    {"tls-resume", no_argument, NULL, OPT_TLS_RESUME},
    {"self-test", no_argument, NULL, OPT_SELF_TEST},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int self_test(void) {
    int f = hist_self_test();
    int g = resp_self_test();
    printf("weft-load self-test: histogram %s (%d failures), response parser %s (%d failures)\n", f ? "FAILED" : "ok", f,
           g ? "FAILED" : "ok", g);
    return f || g ? 1 : 0;
}

int main(int argc, char **argv) {
    int opt, n_given = 0;
    int64_t v;
    while ((opt = getopt_long(argc, argv, "n:c:kt:r:H:m:qh", LONG_OPTS, NULL)) != -1) {
        switch (opt) {
        case 'n':
            if (parse_int64(optarg, 1, INT64_MAX / 2, &v) < 0) return bad("-n wants a positive count, not '%s'", optarg);
            C.n = v;
            n_given = 1;
            break;
        case 'c':
            if (parse_int64(optarg, 1, 10000000, &v) < 0) return bad("-c wants a positive count, not '%s'", optarg);
            C.c = (int)v;
            break;
        case 'k': C.keepalive = 1; break;
        case 't':
            if (parse_secs(optarg, &C.duration_s) < 0) return bad("-t wants a positive number of seconds, not '%s'", optarg);
            break;
        case 'r':
            if (parse_secs(optarg, &C.rate) < 0) return bad("-r wants a positive rate (requests a second), not '%s'", optarg);
            break;
        case 'H':
            if (C.nheaders == MAX_HEADERS) return bad("too many -H (at most %s)", "64");
            if (!strchr(optarg, ':') || optarg[0] == ':' || strpbrk(optarg, "\r\n"))
                return bad("-H wants 'Name: value', not '%s'", optarg);
            C.headers[C.nheaders++] = optarg;
            break;
        case 'm':
            if (strcmp(optarg, "GET") != 0 && strcmp(optarg, "HEAD") != 0) return bad("-m wants GET or HEAD, not '%s'", optarg);
            C.method = optarg;
            C.head = strcmp(optarg, "HEAD") == 0;
            break;
        case OPT_TIMEOUT: {
            double s;
            if (parse_secs(optarg, &s) < 0) return bad("--timeout wants a positive number of seconds, not '%s'", optarg);
            C.timeout_ns = (int64_t)(s * 1e9);
            break;
        }
        case OPT_CARRIERS:
            if (parse_int64(optarg, 1, 1024, &v) < 0) return bad("--carriers wants 1..1024, not '%s'", optarg);
            C.carriers = (int)v;
            break;
        case 'q': C.quiet = 1; break;
        case OPT_CSV: C.csv = 1; break;
        case OPT_NO_SPREAD: C.spread = 0; break;
        case OPT_HOLD:
            if (parse_secs(optarg, &C.hold_s) < 0) return bad("--hold wants a positive number of seconds, not '%s'", optarg);
            break;
        case OPT_TLS_VERSION:
            if (!strcmp(optarg, "1.2")) C.tls_version = 12;
            else if (!strcmp(optarg, "1.3")) C.tls_version = 13;
            else return bad("--tls-version wants 1.2 or 1.3, not '%s'", optarg);
            break;
        case OPT_TLS_RESUME: C.tls_resume = 1; break;
        case OPT_SELF_TEST: return self_test();
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc - 1) return bad("%s", optind < argc ? "exactly one URL, please" : "no URL given");
    if (parse_url(argv[optind]) < 0) return bad("bad URL '%s' (want http[s]://HOST[:PORT]/path)", argv[optind]);
    if ((C.tls_version || C.tls_resume) && !C.tls) return bad("%s", "--tls-version and --tls-resume need an https:// URL");
#if WEFT_LOAD_TLS
    if (C.tls) {
        /* the client side of every connection: no certificate check (a load
         * generator), an end without close_notify is an end */
        int ver = C.tls_version == 13 ? TLS1_3_VERSION : TLS1_2_VERSION;
        C.ctx = SSL_CTX_new(TLS_client_method());
        if (!C.ctx || !SSL_CTX_set_min_proto_version(C.ctx, ver) ||
            (C.tls_version && !SSL_CTX_set_max_proto_version(C.ctx, ver))) {
            char e[160];
            fprintf(stderr, "weft-load: cannot set up TLS: %s\n", weft_tls_error(e, sizeof e, "out of memory"));
            return 3;
        }
        SSL_CTX_set_verify(C.ctx, SSL_VERIFY_NONE, NULL);
        SSL_CTX_set_options(C.ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
        SSL_CTX_set_session_cache_mode(C.ctx, SSL_SESS_CACHE_OFF); /* sessions are the workers' own (--tls-resume) */
    }
#else
    if (C.tls) return bad("%s", "this weft-load was built without OpenSSL 3: no https (apt-get install libssl-dev, then build again)");
#endif
    if (C.hold_s > 0 && !C.keepalive) return bad("%s", "--hold needs -k (a connection to hold)");
    if (C.duration_s > 0 && !n_given) C.n = -1;
    C.workers = C.n >= 0 && C.n < C.c ? (int)C.n : C.c;
    if (C.workers < C.c && !C.quiet)
        fprintf(stderr, "weft-load: -c %d is more than -n %lld: using %d connections\n", C.c, (long long)C.n, C.workers);
    if (resolve() < 0) return 2;
    if (build_request() < 0) {
        fprintf(stderr, "weft-load: out of memory\n");
        return 3;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int carriers = C.carriers ? C.carriers : getenv("WEFT_CARRIERS") ? atoi(getenv("WEFT_CARRIERS")) : (int)ncpu;
    if (fds_for(C.workers, carriers > 0 ? carriers : 1) < 0) return 2;
    signal(SIGPIPE, SIG_IGN);

    results res = {0};
    res.w = aligned_alloc(64, sizeof(worker) * (size_t)C.workers);
    if (!res.w) {
        fprintf(stderr, "weft-load: out of memory for %d workers\n", C.workers);
        return 3;
    }
    for (int i = 0; i < C.workers; i++) {
        worker *w = &res.w[i];
        memset(w, 0, sizeof *w);
        w->fd = -1;
        w->index = i;
        w->doc_len = -1;
        hist_init(&w->h);
        w->buf = malloc(RECV_BUF);
        if (!w->buf) {
            fprintf(stderr, "weft-load: out of memory for %d receive buffers\n", C.workers);
            return 3;
        }
    }
    weft_runtime_opts cfg = {.carriers = C.carriers};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-load: weft_init: %s\n", strerror(-r));
        return 3;
    }
    res.backend = weft_io_backend();
    if (!C.quiet) {
        /* the banner before the run: a pipe or a log sees it at once */
        int be = res.backend;
        printf("This is weft-load %d.%d.%d (HTTP/1.1 load on weft vthreads; %s backend)\n\n", WEFT_VERSION_MAJOR,
               WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, be == WEFT_IO_URING ? "io_uring" : be == WEFT_IO_EPOLL ? "epoll" : "?");
        printf("Benchmarking %s%s%s:%d (be patient)\n", strchr(C.host, ':') ? "[" : "", C.host,
               strchr(C.host, ':') ? "]" : "", C.port);
        fflush(stdout);
        res.progress = isatty(STDERR_FILENO);
    }
    r = weft_main(run, &res);
    if (r < 0) {
        fprintf(stderr, "weft-load: weft_main: %s\n", strerror(-r));
        return 3;
    }
    if (res.spawn_err)
        fprintf(stderr, "weft-load: could spawn only %d of %d workers: %s\n", res.spawned, C.workers,
                strerror(-res.spawn_err));
    r = report(&res);
    for (int i = 0; i < C.workers; i++) free(res.w[i].buf);
    free(res.w);
    free(C.req);
    return res.spawn_err ? 3 : r;
}
