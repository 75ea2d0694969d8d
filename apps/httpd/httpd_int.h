/*
 * weft-httpd's rooms and what they share.  The server is one program in
 * several files, one concern each (the overall design is httpd.c's essay):
 *   httpd.c       the shared state, the drain's list of connections, and
 *                 a connection served by a thread (serve_conn: the
 *                 virtual, thread and pool models);
 *   acceptor.c    the acceptors with their descriptor reserve, and the
 *                 signal watcher;
 *   plan.c        response planning: from a parsed request to the bytes of
 *                 a head and where the body comes from -- no sockets, no
 *                 threads (tests/apps/http_plan tests it on its own);
 *   async.c       --model async: a connection as completion handlers;
 *   models.c      dispatch of an accepted connection to its model: a
 *                 vthread, a pthread, pool:N's queue and workers, or
 *                 async.c's handlers;
 *   access_log.c  the access log's ring and its writer thread;
 *   server.c      start, signals, drain, the --cpu-job background job;
 *   tls.c         HTTPS: the OpenSSL context (--tls-cert, --tls-key) and a
 *                 connection's handshake, reads and writes over weft's
 *                 socket calls (the thread models), or non-blocking for
 *                 async.c's handlers;
 *   workers.c     --workers N: the supervisor process, its worker
 *                 processes on SO_REUSEPORT sockets, their restarts and
 *                 SIGHUP's rolling replacement (it runs no weft runtime);
 *   cli.c         the options, --help, main.
 * Everything else a file holds is static to it.  Names here are the old
 * static ones: this is one program, and none of them leaves it.
 */
#ifndef WEFT_HTTPD_INT_H
#define WEFT_HTTPD_INT_H

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

enum { CPU_JOB_OFF, CPU_JOB_SHARED, CPU_JOB_GROUP };

/* the options (cli.c parses them; everyone reads them, nobody writes them once the server runs) */
typedef struct httpd_opts {
    const char *host, *port, *root, *access_log;
    int model, pool_threads, carriers, max_conns;
    int64_t delay_ns;
    long delay_every;
    int64_t header_timeout, idle_timeout, send_timeout, drain_timeout, body_timeout;
    int quiet;
    size_t cache_bytes;
    int cpu_job;          /* CPU_JOB_*: a CPU-bound background job in the process (--cpu-job) */
    int cpu_job_vthreads; /* its vthreads (0: one per carrier) */
    int workers;          /* --workers N: processes sharing the port (0: this one serves) */
    int worker_slot;      /* in a worker: its slot (-1: not a worker) */
    int ready_fd;         /* in a worker: the pipe it says "ready" on, -1 once said */
    int64_t drain_notice; /* --drain-notice: at SIGTERM, /healthz answers 503 this long before the drain */
    const char *tls_cert, *tls_key; /* --tls-cert, --tls-key: HTTPS (tls.c) */
    const char *tls_port; /* --tls-port: HTTPS there, plain HTTP on --port (NULL: --port speaks TLS) */
} httpd_opts;

extern httpd_opts O;

/* the descriptors: root_fd (plan.c), listen_fd and tls_listen_fd
 * (acceptor.c), log_fd (access_log.c); opened by main before the server
 * starts.  listen_fd speaks TLS when listen_tls is set (--tls-cert without
 * --tls-port); tls_listen_fd is --tls-port's (-1: none). */
extern int root_fd, listen_fd, tls_listen_fd, log_fd, listen_tls;
extern _Atomic int reserve_fd; /* given up, one acceptor at a time, to shed at EMFILE */
/* nconns: connection slots taken (an acceptor takes one before it accepts);
 * nopen: connections accepted and not yet closed (what the drain reports) */
extern atomic_int nconns, nopen, draining, drain_cut;
/* /healthz answers 503 ("going away"): the drain's notice began (plan.c's) */
extern atomic_int unhealthy;
extern weft_thread *acceptors[64];
extern int nacceptors;
extern weft_thread *_Atomic acceptor_waiting[64];

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

/* conn.idle: what the connection waits for (the drain reads it) */
enum { CONN_BUSY = 0, CONN_IDLE = 1, CONN_FIRST = 2 };

typedef struct conn {
    int fd;
    struct ssl_st *ssl; /* HTTPS: its TLS (tls.c); NULL: plain */
    atomic_int idle; /* CONN_IDLE: waiting for the first byte of its next request;
                      * CONN_FIRST: of its first one (a new connection) */
    struct conn *prev, *next;
    peer_addr peer;
    unsigned char fresh;    /* --model async: not on a dispatcher yet (in peer's padding) */
    unsigned char answered; /* --model async: a response went out on it */
} conn;

/* The drain and a new connection: one that has not sent its first request
 * when the drain begins -- typically one accepted in the same instant, whose
 * request is on its way -- gets this long from the drain's start for its
 * first bytes (a connection between requests is closed at once: a client
 * resends on a reused connection that closes, not on a new one). */
#define DRAIN_FIRST_GRACE (NS / 2)
extern _Atomic int64_t drain_started; /* weft_now() when the drain began (acceptor.c) */

static inline void set_peer(conn *c, const struct sockaddr_storage *peer) {
    if (peer) memcpy(&c->peer, peer, sizeof c->peer);
}

/* the live connections, for the drain (httpd.c; server.c's watcher walks them) */
extern pthread_mutex_t conns_lock;
extern conn *conns_head;

/* a response, planned (plan.c), then sent (blocking: httpd.c; by handlers: async.c) */

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

/* Writing into a buffer (a head, a log line), shared by the planner and the
 * access log: put is printf clamped at cap. */
static inline int put(char *b, int at, int cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline int put(char *b, int at, int cap, const char *fmt, ...) {
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
static inline int app_u64(char *b, int at, unsigned long long v) {
    char t[24];
    int n = 0;
    do t[n++] = (char)('0' + v % 10);
    while ((v /= 10));
    while (n) b[at++] = t[--n];
    return at;
}

/* A rate-limited note on stderr: at most one a second per *last. */
static inline void note_limited(_Atomic int64_t *last, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void note_limited(_Atomic int64_t *last, const char *fmt, ...) {
    int64_t now = weft_now(), was = atomic_load_explicit(last, memory_order_relaxed);
    if ((was && now - was < NS) || !atomic_compare_exchange_strong(last, &was, now)) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* plan.c */
void response_init(response *p);
void response_free(response *p);
void file_short(const char *path, size_t pn, long long got, long long want, int sent);
int plan_status(response *p, const http_request *rq, int status, int keep_alive, const char *location);
int plan_request(response *p, const http_request *rq, int *keep, int *refused);

/* access_log.c */
int log_start(void);
void log_stop(void);
void access_log(const conn *c, const http_request *rq, int status, long long bytes);

/* httpd.c */
void conn_register(conn *c);
void conn_unregister(conn *c);
int64_t request_delay(void);
void body_cut(const conn *c, const response *p);
int send_status(conn *c, const http_request *rq, int status, int keep_alive, const char *location);
int request_keep(const http_request *rq);
void serve_conn(int fd, const struct sockaddr_storage *peer, int64_t accepted_at, int tls);
void conn_slot_free(void);
void *acceptor_main(void *arg);
void *signal_watcher(void *unused);

/* async.c */
int a_start(int fd, const struct sockaddr_storage *peer, int64_t accepted_at, int tls);
void bp_sweep(ssize_t res, void *ctx);

/* models.c */
int dispatch(int fd, const struct sockaddr_storage *peer, int64_t at, int tls);
void *pool_reaper(void *unused);
int pool_start(void);
void pool_stop(void);

/* server.c */
int open_listener(const char *port, int reuseport);
void listen_addr(int fd, char *host, size_t hn, int *port);
int server(void *unused);

/* tls.c (HTTPS; c->ssl set by tls_accept, or tls_open_nb for the async model) */
int tls_on(void);    /* a context was set up */
int tls_setup(void); /* at start, from the options: 0, or -1 after saying why */
void tls_fini(void);
int tls_start(void); /* in the runtime, at the server's start: the sweep's timer; 0 or -errno */
int tls_ticket_keys_make(void); /* --workers' supervisor: a sealed memfd holding a new ticket key, or -errno */
int tls_ticket_keys_use(int fd); /* a worker: tickets under the key in fd (closed); 0, or -1 after saying why */
int tls_accept(conn *c, int64_t deadline);                        /* 0 or -errno */
ssize_t tls_recv(conn *c, void *buf, size_t n, int64_t deadline); /* bytes, 0 (end) or -errno */
ssize_t tls_recv_now(conn *c, void *buf, size_t n);               /* without waiting: 0 if nothing */
int tls_send(conn *c, const void *buf, size_t n, int more);       /* all of it, or -errno */
long long tls_send_file(conn *c, int fd, off_t *off, long long n); /* bytes sent (fewer: the file shrank), or -errno */
void tls_close(conn *c);                                          /* close_notify, and c->ssl freed */
/* the async model's (async.c): non-blocking, -EAGAIN with *wait the poll
 * event to wait for before calling again with the same arguments */
int tls_open_nb(conn *c);                                          /* c->ssl for a handshake: 0 or -ENOMEM */
int tls_handshake_nb(conn *c, short *wait);                        /* 0 done, -EAGAIN, -errno */
ssize_t tls_read_nb(conn *c, void *buf, size_t n, short *wait);   /* bytes, 0 (end), -EAGAIN, -errno */
ssize_t tls_write_nb(conn *c, const void *buf, size_t n, int more, short *wait); /* bytes (some), -EAGAIN, -errno */
int tls_pending(conn *c);                                          /* bytes wait in c->ssl (read ahead; maybe a record begun) */

/* workers.c: runs the supervisor until it stops; its exit status */
int supervise(int argc, char **argv);

#endif
