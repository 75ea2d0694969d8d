/*
 * http_db -- the virtual-threads article's service with a real database:
 * every GET /db runs SELECT pg_sleep(0.1) through unmodified, blocking
 * libpq, on a connection from a pool bounded by a weft_sem (default 200,
 * Tomcat's and the article's pool size).  weft-bench http-db drives it with
 * ab, next to Java peers doing the same with JDBC (bench/http-db/).
 *
 *   http_db [--model virtual|pool:N] [--host ADDR] [--port N] [--carriers N]
 *           [--db-pool N] [--sleep SECONDS] [--hooks on|off] CONNINFO
 *
 *   --model virtual   (default) one vthread per connection; with libc
 *                     interposition on (--hooks on, the default) libpq's
 *                     poll/recv park the vthread, so requests beyond the pool
 *                     wait on the weft_sem, not on a carrier.
 *   --model pool:N    N platform threads, each accepting and serving one
 *                     connection at a time (the kernel's accept queue is the
 *                     pool's queue): the article's Tomcat with 200 threads.
 *
 * Why an example and not a route in weft-httpd: weft-httpd is the project's
 * static-file server, tested in depth on both backends and under the
 * sanitizers; a libpq route would make libpq a dependency of the server and
 * of every test that starts it, for one benchmark.  This program is what a
 * user writes with weft and an existing blocking client library -- a plain
 * thread-per-request loop, the pool a semaphore and a stack -- and it is
 * built only where libpq is (CMake: pkg-config libpq).
 *
 * HTTP: just what a benchmark needs.  GET or HEAD of /db (the query; 200
 * "ok", 500 with libpq's message when it fails), of /hello.html or / (200
 * without the database: the bench's health check), anything else 404;
 * HTTP/1.1 keep-alive unless "Connection: close", HTTP/1.0 only with
 * "Connection: keep-alive" (ab without -k sends HTTP/1.0); request bodies
 * are not read.  It prints "listening on HOST:PORT" once every pool
 * connection is open; SIGTERM or SIGINT ends it at once (exit status 0): a
 * benchmark server needs no drain.
 */
#define _GNU_SOURCE
#include <weft.h>

#include <libpq-fe.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
    int pool_threads; /* 0: virtual */
    int carriers, db_pool, hooks, port;
    const char *host, *conninfo, *sleep_s;
} O = {.db_pool = 200, .hooks = 1, .host = "127.0.0.1", .sleep_s = "0.1"};

/* ------------------------------------------------------------------------ */
/* the connection pool                                                       */
/* ------------------------------------------------------------------------ */

static weft_sem pool_free;
static weft_mutex pool_mu = WEFT_MUTEX_INIT;
static PGconn **pool_conns;
static int pool_nfree;
static char query[64];

static void *pool_connect(void *arg) {
    long i = (long)(intptr_t)arg;
    PGconn *c = PQconnectdb(O.conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "http_db: database connection %ld: %s", i, PQerrorMessage(c));
        exit(1);
    }
    pool_conns[i] = c;
    return NULL;
}

/* Runs the query on a pooled connection; 0, or -1 with libpq's message. */
static int db_query(char *err, size_t errlen) {
    weft_sem_acquire(&pool_free);
    weft_mutex_lock(&pool_mu);
    PGconn *c = pool_conns[--pool_nfree];
    weft_mutex_unlock(&pool_mu);

    PGresult *r = PQexec(c, query);
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok) {
        snprintf(err, errlen, "%s", PQerrorMessage(c));
        if (PQstatus(c) == CONNECTION_BAD) PQreset(c); /* the next user gets a fresh one */
    }
    PQclear(r);

    weft_mutex_lock(&pool_mu);
    pool_conns[pool_nfree++] = c;
    weft_mutex_unlock(&pool_mu);
    weft_sem_release(&pool_free);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* HTTP                                                                      */
/* ------------------------------------------------------------------------ */

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = weft_send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int respond(int fd, int code, const char *reason, const char *body, int head, int keep) {
    char buf[1024];
    size_t blen = strlen(body);
    int n = snprintf(buf, sizeof buf,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n%s", code, reason,
                     blen, keep ? "" : "Connection: close\r\n", head ? "" : body);
    if (n < 0 || (size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
    return send_all(fd, buf, (size_t)n);
}

/* A header's value present in the header block (case-insensitive name). */
static int has_header_value(const char *hdrs, const char *name, const char *value) {
    size_t nl = strlen(name);
    for (const char *l = hdrs; l && *l; l = strstr(l, "\r\n"), l = l ? l + 2 : NULL) {
        if (strncasecmp(l, name, nl) == 0 && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ' || *v == '\t') v++;
            if (strncasecmp(v, value, strlen(value)) == 0) return 1;
        }
    }
    return 0;
}

/* Serves one connection until it closes; the same code for both models
 * (weft_recv and weft_send block a platform thread and park a vthread). */
static void serve(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[8192];
    size_t len = 0;
    for (;;) {
        char *end;
        while (!(end = memmem(buf, len, "\r\n\r\n", 4))) {
            if (len == sizeof buf - 1) {
                respond(fd, 431, "Request Header Fields Too Large", "too large\n", 0, 0);
                goto out;
            }
            ssize_t r = weft_recv(fd, buf + len, sizeof buf - 1 - len, 0);
            if (r <= 0) goto out;
            len += (size_t)r;
        }
        *end = '\0';
        size_t used = (size_t)(end + 4 - buf);
        char method[8], path[256], version[16];
        if (sscanf(buf, "%7s %255s %15s", method, path, version) != 3) {
            respond(fd, 400, "Bad Request", "bad request\n", 0, 0);
            goto out;
        }
        const char *hdrs = strstr(buf, "\r\n");
        hdrs = hdrs ? hdrs + 2 : "";
        int v11 = strcmp(version, "HTTP/1.1") == 0;
        int keep = v11 ? !has_header_value(hdrs, "Connection", "close") : has_header_value(hdrs, "Connection", "keep-alive");
        int head = strcmp(method, "HEAD") == 0;
        int rc;
        if (!head && strcmp(method, "GET") != 0) {
            rc = respond(fd, 405, "Method Not Allowed", "GET or HEAD\n", 0, keep);
        } else if (strcmp(path, "/db") == 0) {
            char err[256];
            if (db_query(err, sizeof err) == 0) rc = respond(fd, 200, "OK", "ok\n", head, keep);
            else rc = respond(fd, 500, "Internal Server Error", err, head, keep);
        } else if (strcmp(path, "/hello.html") == 0 || strcmp(path, "/") == 0) {
            rc = respond(fd, 200, "OK", "hello\n", head, keep);
        } else {
            rc = respond(fd, 404, "Not Found", "not found\n", head, keep);
        }
        if (rc < 0 || !keep) goto out;
        memmove(buf, buf + used, len - used);
        len -= used;
    }
out:
    weft_close(fd);
}

/* ------------------------------------------------------------------------ */
/* the models                                                                */
/* ------------------------------------------------------------------------ */

static int lfd;

static void *serve_vthread(void *arg) {
    serve((int)(intptr_t)arg);
    return NULL;
}

/* virtual: accept on a vthread, a vthread per connection */
static void *acceptor(void *arg) {
    (void)arg;
    for (;;) {
        int fd = weft_accept(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (fd == -EMFILE || fd == -ENFILE) weft_sleep(10 * 1000000); /* shed, do not spin */
            continue;
        }
        weft_thread *t;
        if (weft_spawn(&t, serve_vthread, (void *)(intptr_t)fd, NULL) < 0) {
            weft_close(fd);
            continue;
        }
        weft_detach(t);
    }
    return NULL;
}

/* pool:N: a platform thread that accepts and serves, one connection at a time */
static void *pool_worker(void *arg) {
    (void)arg;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) usleep(10000);
            continue;
        }
        serve(fd);
    }
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: http_db [--model virtual|pool:N] [--host ADDR] [--port N] [--carriers N] [--db-pool N]\n"
               "               [--sleep SECONDS] [--hooks on|off] CONNINFO\n"
               "GET /db runs SELECT pg_sleep(SECONDS) (default 0.1) on one of --db-pool (200) libpq connections;\n"
               "GET /hello.html answers without the database.  Prints \"listening on HOST:PORT\" when ready.\n");
}

int main(int argc, char **argv) {
    static const struct option opts[] = {{"model", 1, 0, 'm'},   {"host", 1, 0, 'H'},  {"port", 1, 0, 'p'},
                                         {"carriers", 1, 0, 'c'}, {"db-pool", 1, 0, 'd'}, {"sleep", 1, 0, 's'},
                                         {"hooks", 1, 0, 'k'},   {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
    int o;
    char *end;
    while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            if (strcmp(optarg, "virtual") == 0) {
                O.pool_threads = 0;
            } else if (strncmp(optarg, "pool:", 5) == 0 && (O.pool_threads = (int)strtol(optarg + 5, &end, 10)) > 0 &&
                       !*end) {
            } else {
                fprintf(stderr, "http_db: --model virtual or pool:N\n");
                return 2;
            }
            break;
        case 'H': O.host = optarg; break;
        case 'p': O.port = atoi(optarg); break;
        case 'c': O.carriers = atoi(optarg); break;
        case 'd': O.db_pool = atoi(optarg); break;
        case 's': O.sleep_s = optarg; break;
        case 'k': O.hooks = strcmp(optarg, "off") != 0; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    double sleep_s = strtod(O.sleep_s, &end);
    if (optind + 1 != argc || O.db_pool < 1 || *end || sleep_s < 0 || O.port < 0 || O.port > 65535) {
        usage(stderr);
        return 2;
    }
    O.conninfo = argv[optind];
    snprintf(query, sizeof query, "SELECT pg_sleep(%g)", sleep_s);

    /* SIGTERM and SIGINT: end now (a sigwait thread; blocked everywhere else) */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    setenv("WEFT_HOOK", O.hooks ? "1" : "0", 1); /* read by weft_init */
    weft_runtime_opts cfg = {.carriers = O.carriers};
    int e = weft_init(&cfg);
    if (e < 0) {
        fprintf(stderr, "http_db: weft_init: %s\n", strerror(-e));
        return 1;
    }

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)O.port)};
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (inet_pton(AF_INET, O.host, &a.sin_addr) != 1 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(lfd, 4096) < 0) {
        fprintf(stderr, "http_db: listen on %s:%d: %s\n", O.host, O.port, strerror(errno));
        return 1;
    }
    socklen_t al = sizeof a;
    getsockname(lfd, (struct sockaddr *)&a, &al);

    /* the pool: every connection opened at once, from vthreads */
    pool_conns = calloc((size_t)O.db_pool, sizeof *pool_conns);
    weft_thread **t = calloc((size_t)O.db_pool, sizeof *t);
    if (!pool_conns || !t) return 1;
    weft_sem_init(&pool_free, (unsigned)O.db_pool);
    for (long i = 0; i < O.db_pool; i++)
        if (weft_spawn(&t[i], pool_connect, (void *)(intptr_t)i, NULL) < 0) return 1;
    for (long i = 0; i < O.db_pool; i++) weft_join(t[i], NULL);
    free(t);
    pool_nfree = O.db_pool;

    if (O.pool_threads) {
        for (int i = 0; i < O.pool_threads; i++) {
            pthread_t th;
            pthread_attr_t at;
            pthread_attr_init(&at);
            pthread_attr_setstacksize(&at, 256 * 1024);
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            if ((e = pthread_create(&th, &at, pool_worker, NULL)) != 0) {
                fprintf(stderr, "http_db: pthread_create: %s\n", strerror(e));
                return 1;
            }
            pthread_attr_destroy(&at);
        }
    } else {
        weft_thread *acc;
        weft_thread_opts attr = {.name = "acceptor", .daemon = 1};
        if (weft_spawn(&acc, acceptor, NULL, &attr) < 0) return 1;
        weft_detach(acc);
    }
    printf("listening on %s:%d\n", O.host, ntohs(a.sin_port));
    fflush(stdout);

    int sig = 0;
    sigwait(&sigs, &sig);
    fflush(NULL);
    _exit(0);
}
