/*
 * exp_http.c -- the HTTP experiments: weft-httpd under ab (or weft-load),
 * measured the way the peers' http/run.sh (../shared/peers/http/run.sh
 * beside the source tree) measures the peers, so
 * that weft's lines and theirs stand in one table.
 *
 *   http-delay    every request sleeps 100 ms (--delay-ms 100); ab -r without
 *                 keep-alive at each (concurrency, requests) point.  The third
 *                 article's experiment: Spring Boot on Tomcat, 3000 requests
 *                 at concurrency 50..1000, platform pool of 200 vs virtual
 *                 threads.  run.sh's "delay100".
 *   http-every10  every 10th request sleeps 2 s (--delay-ms 2000
 *                 --delay-every 10); ab -r -c 100 -n 10000.  The first
 *                 article's experiment (491.98 req/s).  run.sh's
 *                 "delay2s-every10".
 *   http-db       http-delay's procedure with a real database (issue 11): the
 *                 server is examples/http_db.c (models virtual, pool:N) or a
 *                 Java peer (bench/http-db/peer.sh: java25-virtual,
 *                 java17-pool200, java25-pool200), and every GET /db runs
 *                 SELECT pg_sleep(0.1) on one of --db-pool (200) connections.
 *                 PostgreSQL is bench/pg.sh run, started before the first
 *                 model and stopped after the last, so every server meets
 *                 the same database in the same sitting.
 *
 * The procedure, per model (--models), as run.sh's:
 *   1. start weft-httpd --model M --port 0 --root DOCROOT --quiet --delay-ms..
 *      and read "listening on HOST:PORT" from its stdout (30 s at most);
 *   2. check that GET /hello.html answers 200;
 *   3. warm up: ab -r -n 1000 -c 100, discarded;
 *   4. for each point: wait (QUIET_WAIT_S, default 10 s at most) until the
 *      host is below 25 % busy, then run the load, reading the server's
 *      utime+stime (/proc/PID/stat: all its threads, live and exited) and
 *      the host's CPU ticks before and after;
 *   5. SIGTERM, and wait for the server to exit (it drains; SIGKILL after
 *      20 s).  An exit other than status 0 is reported on stderr.
 * Unlike run.sh there is no repetition of disturbed loads and no median:
 * other_pct on each line says how much CPU the rest of the machine took.
 *
 * Latency figures are ab's: mean_ms is the "Total" mean of its connection
 * times, p50..p99 its percentile table, failed = "Failed requests" plus
 * "Non-2xx responses".  Points of 10,000 connections or more go to
 * weft-load (-q, no keep-alive) since ab cannot hold that many.
 * cpu_us_per_req = server CPU time over the load / completed requests;
 * limit_rps = C / mean delay (Little's law: C requests in flight, each
 * taking at least the delay); for http-db min(C, pool) / delay, since only
 * the pool's connections can be in pg_sleep at once.
 *
 * Programs: weft-httpd is $WEFT_HTTPD, else ../httpd/weft-httpd next to this
 * executable; weft-load $WEFT_LOAD, else ../load/weft-load; ab from PATH.
 * The docroot is $WEFT_DOCROOT, else the peers' docroot ($WEFT_PEERS/http/
 * docroot; the peers' directory is ../shared/peers beside the source tree
 * by default), else the source tree's www/ -- the first that holds
 * hello.html.
 *
 * Children get PR_SET_PDEATHSIG, so a weft-bench that dies leaves no server
 * behind.
 */
#define _GNU_SOURCE
#include "bench.h"
#include "launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_POINTS 32
#define MAX_MODELS 8
#define MAX_PEERS 10
#define PATH_LEN 4096
#define WEFT_LOAD_MIN_CONC 10000 /* from here on the load is weft-load's */
#define DEFAULT_CAP_S 300.0      /* one load at most, without --cap-s */

/* ------------------------------------------------------------------------ */
/* the two experiments                                                       */
/* ------------------------------------------------------------------------ */

typedef struct http_exp {
    const char *name;     /* weft-bench's experiment */
    const char *peer_exp; /* run.sh's */
    long delay_ms, every;
    const char *conc, *models; /* defaults */
    long n;
    const char *path; /* what the load requests */
    int db;           /* http-db: examples/http_db.c and the Java peers on PostgreSQL */
} http_exp;

static const http_exp HTTP_DELAY = {"http-delay", "delay100", 100, 1, "50 150 300 500 1000 1000:20000",
                                    "virtual async pool:200", 3000, "/hello.html", 0};
static const http_exp HTTP_EVERY10 = {"http-every10", "delay2s-every10", 2000, 10, "100",
                                      "virtual thread pool:200 async", 10000, "/hello.html", 0};
/* The third article's experiment with PostgreSQL's pg_sleep(0.1) in place of
 * the simulated 100 ms; peer_exp names no run.sh experiment: its peers run
 * here, as models. */
static const http_exp HTTP_DB = {"http-db", "db100", 100, 1, "50 150 300 500 1000",
                                 "virtual pool:200 java25-virtual java17-pool200", 3000, "/db", 1};

/* A Java peer of http-db (bench/http-db/peer.sh), not a weft model. */
static int is_java(const char *model) { return strncmp(model, "java", 4) == 0; }

typedef struct point {
    long c, n;
} point;

/* The third article's tables (Spring Boot 3 on Tomcat, Java 21; 3000
 * requests at each concurrency; platform = Tomcat's pool of 200). */
static const struct article3 {
    long c;
    double virt_rps, virt_mean, virt_p95;
    double plat_rps, plat_mean, plat_p95;
} ARTICLE3[] = {
    {50, 455.28, 109.8, 110, 467.26, 107.0, 108},
    {150, 1288.79, 116.4, 113, 1316.24, 114.0, 111},
    {300, 2297.41, 130.6, 116, 1768.79, 169.6, 212},
    {500, 3451.08, 144.9, 136, 1780.12, 280.9, 362},
    {1000, 5070.74, 197.2, 260, 1754.76, 569.9, 711},
};

/* ------------------------------------------------------------------------ */
/* programs and paths                                                        */
/* ------------------------------------------------------------------------ */

typedef struct progs {
    char httpd[PATH_LEN], load[PATH_LEN], ab[PATH_LEN], root[PATH_LEN];
    int have_load;
    /* http-db: the server (examples/http_db.c), the Java peers' driver,
     * PostgreSQL's conninfo and the pool size */
    char http_db[PATH_LEN], peer_sh[PATH_LEN], conninfo[256];
    long db_pool;
} progs;

static int is_file(const char *p, int mode) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, mode) == 0;
}

/* $env, else REL relative to this executable's directory. */
static int find_prog(char out[PATH_LEN], const char *env, const char *rel) {
    const char *e = getenv(env);
    if (e && *e) {
        if (snprintf(out, PATH_LEN, "%s", e) >= PATH_LEN) return -ENAMETOOLONG;
    } else {
        char exe[PATH_LEN];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n < 0) return -errno;
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        if (snprintf(out, PATH_LEN, "%s/%s", exe, rel) >= PATH_LEN) return -ENAMETOOLONG;
    }
    return is_file(out, X_OK) ? 0 : -ENOENT;
}

static int find_in_path(char out[PATH_LEN], const char *name) {
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        if (len && snprintf(out, PATH_LEN, "%.*s/%s", (int)len, path, name) < PATH_LEN && is_file(out, X_OK))
            return 0;
        path += len + (path[len] == ':');
    }
    return -ENOENT;
}

static int find_docroot(char out[PATH_LEN]) {
    const char *env = getenv("WEFT_DOCROOT"), *peers = getenv("WEFT_PEERS");
    char cand[2][PATH_LEN], hello[PATH_LEN + 16];
    int len;
    int nc = 0;
    if (env && *env) {
        snprintf(cand[nc++], PATH_LEN, "%s", env);
    } else {
        snprintf(cand[nc++], PATH_LEN, "%s/http/docroot", peers && *peers ? peers : WEFT_PEERS_DEFAULT);
        snprintf(cand[nc++], PATH_LEN, "%s/www", WEFT_SOURCE_DIR);
    }
    for (int i = 0; i < nc; i++) {
        len = snprintf(hello, sizeof hello, "%s/hello.html", cand[i]);
        if (len < (int)sizeof hello && is_file(hello, R_OK)) {
            memcpy(out, cand[i], PATH_LEN);
            return 0;
        }
    }
    fprintf(stderr, "weft-bench: no docroot with hello.html (tried %s%s%s; set WEFT_DOCROOT)\n", cand[0],
            nc > 1 ? " and " : "", nc > 1 ? cand[1] : "");
    return -ENOENT;
}

/* ------------------------------------------------------------------------ */
/* child processes                                                           */
/* ------------------------------------------------------------------------ */

/*
 * Every child (launch.h): stdin /dev/null, stdout a pipe (and stderr with
 * it when merge), an empty signal mask, deathsig when we die.  0 or -errno.
 */
static int spawn(launch *l, char *const argv[], int merge, int deathsig) {
    launch_opts o = {.in = LAUNCH_NULL, .out = LAUNCH_PIPE, .err = merge ? LAUNCH_TO_OUT : LAUNCH_INHERIT,
                     .deathsig = deathsig, .unblock = 1, .who = "weft-bench: "};
    return launch_start(l, argv, &o);
}

typedef struct run_out {
    char *text;
    size_t len;
    int status, timed_out;
    struct rusage ru;
} run_out;

/* Runs argv to its end (SIGKILL after cap_s), collecting stdout+stderr. */
static int run_capture(char *const argv[], double cap_s, run_out *ro) {
    memset(ro, 0, sizeof *ro);
    launch l;
    int e = spawn(&l, argv, 1, SIGKILL);
    if (e < 0) return e;
    e = launch_read_all(&l, launch_now_ms() + (int64_t)(cap_s * 1000), &ro->text, &ro->len);
    if (e == -ETIMEDOUT) {
        ro->timed_out = 1;
        kill(l.pid, SIGKILL);
    }
    launch_close(&l);
    launch_reap(&l, -1);
    ro->status = l.status;
    ro->ru = l.ru;
    return ro->text ? 0 : -ENOMEM;
}

/* ------------------------------------------------------------------------ */
/* /proc                                                                     */
/* ------------------------------------------------------------------------ */

/* (a process's CPU ticks and VmHWM: launch_proc_ticks, launch_proc_status) */

typedef struct host_ticks {
    long long busy, total;
} host_ticks;

static void host_ticks_get(host_ticks *h) {
    long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    h->busy = h->total = 0;
    if (!f) return;
    /* cpu user nice system idle iowait irq softirq steal */
    if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) == 8) {
        h->busy = v[0] + v[1] + v[2] + v[5] + v[6];
        for (int i = 0; i < 8; i++) h->total += v[i];
    }
    fclose(f);
}

/* Waits until the host is below 25 % busy over half a second, at most
 * $QUIET_WAIT_S (10) seconds. */
static void quiet_wait(void) {
    const char *e = getenv("QUIET_WAIT_S");
    double max_s = e && *e ? strtod(e, NULL) : 10;
    if (max_s <= 0) return;
    double t0 = now_s();
    int busy = 0;
    for (;;) {
        host_ticks a, b;
        host_ticks_get(&a);
        sleep_ns_os(500000000);
        host_ticks_get(&b);
        busy = b.total > a.total ? (int)(100 * (b.busy - a.busy) / (b.total - a.total)) : 0;
        if (busy < 25) break;
        if (now_s() - t0 >= max_s) {
            printf("# host still %d%% busy after %.0f s: measuring anyway\n", busy, max_s);
            return;
        }
    }
    if (now_s() - t0 > 1.5) printf("# waited %.0f s for a quiet host\n", now_s() - t0);
}

/* ------------------------------------------------------------------------ */
/* the server                                                                */
/* ------------------------------------------------------------------------ */

typedef struct server {
    launch l; /* the process: l.pid; l.reaped, l.status once it ended */
    int port;
    int java; /* a JVM: SIGTERM ends it with status 143 */
} server;

/* GET path on 127.0.0.1:port with HTTP/1.0; the status code or -errno.
 * EINTR is retried: the io_uring rings of weft_carriers_for's runtime are
 * torn down asynchronously after weft_shutdown, and the kernel's task_work
 * for that (TWA_SIGNAL) makes one wait with SO_RCVTIMEO fail with EINTR. */
static int http_status(int port, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[256];
    int r = -EPROTO, n;
    int c;
    while ((c = connect(fd, (struct sockaddr *)&a, sizeof a)) < 0 && errno == EINTR) {
    }
    if (c < 0) {
        r = -errno;
        goto out;
    }
    n = snprintf(buf, sizeof buf, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    ssize_t sent;
    while ((sent = send(fd, buf, (size_t)n, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (sent != n) {
        r = sent < 0 ? -errno : -EIO;
        goto out;
    }
    size_t got = 0;
    while (got < 12) {
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            r = k < 0 ? -errno : -EPROTO;
            goto out;
        }
        got += (size_t)k;
    }
    buf[got] = '\0';
    int code;
    if (sscanf(buf, "HTTP/%*d.%*d %d", &code) == 1) r = code;
out:
    close(fd);
    return r;
}

/* 1 if the server has ended (reaped: s->l.status), without waiting. */
static int server_ended(server *s) { return launch_reap(&s->l, 0) == 1; }

static void describe_status(char *out, size_t len, int st) {
    if (WIFEXITED(st)) snprintf(out, len, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, len, "status 0x%x", st);
}

/* Stops the server: SIGTERM, then SIGKILL after 20 s; reports an unclean end. */
static void server_stop(server *s) {
    if (!s->l.reaped) {
        kill(s->l.pid, SIGTERM);
        if (launch_reap(&s->l, 20000) != 1) {
            fprintf(stderr, "weft-bench: weft-httpd (pid %d) still running 20 s after SIGTERM: SIGKILL\n",
                    (int)s->l.pid);
            launch_stop(&s->l, SIGKILL, -1);
            return;
        }
    }
    int st = s->l.status;
    int clean = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || (s->java && WEXITSTATUS(st) == 143));
    if (!clean) {
        char d[96];
        describe_status(d, sizeof d, st);
        fprintf(stderr, "weft-bench: the server (pid %d) ended with %s\n", (int)s->l.pid, d);
    }
}

/* Starts weft-httpd; 0, or -errno with the reason on stderr. */
static int server_start(server *s, const progs *pg, const http_exp *x, const char *model, int carriers) {
    memset(s, 0, sizeof *s);
    char delay[24], every[24], car[24];
    snprintf(delay, sizeof delay, "%ld", x->delay_ms);
    snprintf(every, sizeof every, "%ld", x->every);
    snprintf(car, sizeof car, "%d", carriers);
    char dbpool[24], sleep_s[24];
    snprintf(dbpool, sizeof dbpool, "%ld", pg->db_pool);
    snprintf(sleep_s, sizeof sleep_s, "%g", (double)x->delay_ms / 1000.0);
    char *argv[20];
    int a = 0;
    if (x->db && is_java(model)) {
        /* bench/http-db/peer.sh PEER PORT CONNINFO POOL SLEEP_S (it execs the JVM) */
        s->java = 1;
        argv[a++] = "/bin/bash";
        argv[a++] = (char *)pg->peer_sh;
        argv[a++] = (char *)model;
        argv[a++] = "0";
        argv[a++] = (char *)pg->conninfo;
        argv[a++] = dbpool;
        argv[a++] = sleep_s;
    } else if (x->db) {
        argv[a++] = (char *)pg->http_db;
        argv[a++] = "--model";
        argv[a++] = (char *)model;
        argv[a++] = "--port";
        argv[a++] = "0";
        argv[a++] = "--db-pool";
        argv[a++] = dbpool;
        argv[a++] = "--sleep";
        argv[a++] = sleep_s;
        argv[a++] = "--hooks";
        argv[a++] = "on";
        if (carriers > 0) {
            argv[a++] = "--carriers";
            argv[a++] = car;
        }
        argv[a++] = (char *)pg->conninfo;
    } else {
        argv[a++] = (char *)pg->httpd;
        argv[a++] = "--model";
        argv[a++] = (char *)model;
        argv[a++] = "--port";
        argv[a++] = "0";
        argv[a++] = "--root";
        argv[a++] = (char *)pg->root;
        argv[a++] = "--quiet";
        argv[a++] = "--delay-ms";
        argv[a++] = delay;
        if (x->every > 1) {
            argv[a++] = "--delay-every";
            argv[a++] = every;
        }
        if (carriers > 0) {
            argv[a++] = "--carriers";
            argv[a++] = car;
        }
    }
    argv[a] = NULL;
    int r = spawn(&s->l, argv, 0, SIGTERM);
    if (r < 0) {
        fprintf(stderr, "weft-bench: cannot start %s: %s\n", argv[0], strerror(-r));
        return r;
    }
    /* "listening on HOST:PORT"; the servers of http-db first open their
     * database pool, a JVM compiles the peer on its first run */
    const char *l = launch_wait_line(&s->l, "listening on ", launch_now_ms() + (x->db ? 120 : 30) * 1000);
    if (l) {
        s->port = launch_listen_port(l);
        r = s->port > 0 ? 0 : -EPROTO;
    } else {
        r = errno == EPIPE ? -EPIPE : -ETIMEDOUT;
    }
    launch_close(&s->l); /* the servers write nothing more to stdout (weft-httpd: without --access-log) */
    if (r == 0) {
        int code = http_status(s->port, "/hello.html");
        if (code != 200) {
            if (code < 0) fprintf(stderr, "weft-bench: GET /hello.html on port %d: %s\n", s->port, strerror(-code));
            else fprintf(stderr, "weft-bench: GET /hello.html on port %d answered %d (docroot %s)\n", s->port, code, pg->root);
            r = -EPROTO;
        }
    } else if (server_ended(s)) {
        char d[96];
        describe_status(d, sizeof d, s->l.status);
        fprintf(stderr, "weft-bench: %s (model %s) ended during start (%s)\n", argv[0], model, d);
    } else {
        fprintf(stderr, "weft-bench: %s (model %s) did not print \"listening on HOST:PORT\" within %d s\n", argv[0],
                model, x->db ? 120 : 30);
    }
    if (r < 0 && !s->l.reaped) launch_stop(&s->l, SIGKILL, -1);
    return r;
}

/* ------------------------------------------------------------------------ */
/* http-db's PostgreSQL                                                      */
/* ------------------------------------------------------------------------ */

/*
 * bench/pg.sh run DIR in a temporary directory: it starts PostgreSQL, prints
 * "ready CONNINFO" and stays until SIGTERM, then stops the server and
 * removes DIR.  It gets SIGTERM as its parent-death signal too, so a
 * weft-bench that dies leaves no database behind.  Its output pipe stays
 * open until it has ended (a closed pipe would kill it with SIGPIPE before
 * its cleanup).
 */
typedef struct database {
    launch l; /* l.pid 0: none */
    char dir[64];
} database;

static void db_stop(database *db);

static int db_start(database *db, long pool, char *conninfo, size_t len) {
    char script[PATH_LEN], maxc[24];
    snprintf(script, sizeof script, "%s/bench/pg.sh", WEFT_SOURCE_DIR);
    if (!is_file(script, R_OK)) {
        fprintf(stderr, "weft-bench: no %s (the source tree's bench/pg.sh)\n", script);
        return -ENOENT;
    }
    snprintf(db->dir, sizeof db->dir, "/tmp/weft-bench-pg-XXXXXX");
    if (!mkdtemp(db->dir)) return -errno;
    snprintf(maxc, sizeof maxc, "%ld", pool + 50);
    setenv("PG_MAX_CONNECTIONS", maxc, 1);
    char *argv[] = {"/bin/bash", script, "run", db->dir, NULL};
    int e = spawn(&db->l, argv, 1, SIGTERM);
    if (e < 0) {
        db->l.pid = 0;
        rmdir(db->dir);
        return e;
    }
    const char *l = launch_wait_line(&db->l, "ready ", launch_now_ms() + 180 * 1000);
    if (l) {
        snprintf(conninfo, len, "%s", l + 6);
        return 0;
    }
    fprintf(stderr, "weft-bench: bench/pg.sh did not start PostgreSQL:\n%s\n", db->l.buf);
    db_stop(db);
    return -EIO;
}

static void db_stop(database *db) {
    if (db->l.pid <= 0) return;
    kill(db->l.pid, SIGTERM);
    if (launch_reap(&db->l, 90000) != 1) {
        fprintf(stderr, "weft-bench: bench/pg.sh (pid %d) still running 90 s after SIGTERM: SIGKILL; %s may be left\n",
                (int)db->l.pid, db->dir);
        launch_stop(&db->l, SIGKILL, -1);
    }
    launch_close(&db->l);
    db->l.pid = 0;
}

/* ------------------------------------------------------------------------ */
/* one load                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct load_result {
    int ok;
    double rps, mean_ms, p50_ms, p90_ms, p95_ms, p99_ms, max_ms, time_s;
    long complete, failed;
    char err[80];
} load_result;

/* The last non-empty line of text (for an error message). */
static void last_line(char *out, size_t len, const char *text) {
    const char *end = text + strlen(text);
    while (end > text && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ')) end--;
    const char *start = end;
    while (start > text && start[-1] != '\n') start--;
    snprintf(out, len, "%.*s", (int)(end - start), start);
}

static void parse_ab(const char *text, load_result *lr) {
    long non2xx = 0, failed = 0;
    double d, mean;
    int pct;
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (sscanf(l, "Complete requests: %ld", &lr->complete) == 1) continue;
        if (sscanf(l, "Failed requests: %ld", &failed) == 1) continue;
        if (sscanf(l, "Non-2xx responses: %ld", &non2xx) == 1) continue;
        if (sscanf(l, "Time taken for tests: %lf", &lr->time_s) == 1) continue;
        if (sscanf(l, "Requests per second: %lf", &lr->rps) == 1) {
            lr->ok = 1;
            continue;
        }
        if (sscanf(l, "Total: %lf %lf", &d, &mean) == 2) {
            lr->mean_ms = mean;
            continue;
        }
        if (sscanf(l, " %d%% %lf", &pct, &d) == 2) {
            if (pct == 50) lr->p50_ms = d;
            else if (pct == 90) lr->p90_ms = d;
            else if (pct == 95) lr->p95_ms = d;
            else if (pct == 99) lr->p99_ms = d;
            else if (pct == 100) lr->max_ms = d;
        }
    }
    lr->failed = failed + non2xx;
    if (!lr->ok) last_line(lr->err, sizeof lr->err, text);
}

static void parse_weft_load(const char *text, load_result *lr) {
    const char *l = strstr(text, "experiment=load");
    bench_result r;
    if (!l || br_parse(&r, l) != 0 || !br_num(&r, "rps", &lr->rps)) {
        last_line(lr->err, sizeof lr->err, text);
        return;
    }
    lr->ok = 1;
    double v;
    br_num(&r, "mean_ms", &lr->mean_ms);
    br_num(&r, "p50_ms", &lr->p50_ms);
    br_num(&r, "p90_ms", &lr->p90_ms);
    br_num(&r, "p95_ms", &lr->p95_ms);
    br_num(&r, "p99_ms", &lr->p99_ms);
    br_num(&r, "max_ms", &lr->max_ms);
    br_num(&r, "wall_s", &lr->time_s);
    if (br_num(&r, "complete", &v)) lr->complete = (long)v;
    if (br_num(&r, "failed", &v)) lr->failed = (long)v;
}

/* "weft-virtual", "weft-pool200"; a Java peer of http-db keeps its name
 * ("java25-virtual"), as run.sh's peers are named */
static void peer_name(char *out, size_t len, const char *model) {
    if (is_java(model)) {
        snprintf(out, len, "%s", model);
        return;
    }
    int n = snprintf(out, len, "weft-");
    for (const char *p = model; *p && (size_t)n < len - 1; p++)
        if (*p != ':') out[n++] = *p;
    out[n] = '\0';
}

/* Requests that can be in their delay at once: C, or the database pool
 * when http-db's pool is smaller (the rest wait for a connection). */
static long in_delay(long c, long pool) { return pool > 0 && pool < c ? pool : c; }

static double limit_rps(const http_exp *x, long c, long pool) {
    return (double)in_delay(c, pool) * (double)x->every * 1000.0 / (double)x->delay_ms;
}

/*
 * What ab itself lets a server reach when every request takes the delay
 * (every == 1): ab 2.3 sends its first request alone and opens the other
 * C - 1 connections only once that answer is in (strace: one connect, the
 * 100 ms wait, then the rest), so n requests need at least
 * (1 + ceil((n - 1) / C)) delays.  At n = 3000 that caps C = 300 at 90.9 %
 * of the limit, 500 at 85.7 %, 1000 at 75 %, whatever the server.  With a
 * database pool of P < C (http-db) only P are in their delay at once, so
 * 1 + ceil((n - 1) / P): at P = 200, n = 3000, 1,875/s for every C >= 200
 * (93.75 % of the pool's 2,000/s).  0 where it does not apply (weft-load,
 * which starts all C at once; every > 1).
 */
static double ab_ceiling_rps(const http_exp *x, const point *p, long pool) {
    if (x->every != 1 || p->c >= WEFT_LOAD_MIN_CONC || p->c <= 0 || p->n <= 0) return 0;
    long k = in_delay(p->c, pool);
    double waves = 1.0 + (double)((p->n - 1 + k - 1) / k);
    return (double)p->n * 1000.0 / (waves * (double)x->delay_ms);
}

static void set_point(bench_result *r, const http_exp *x, const char *model) {
    char peer[64];
    peer_name(peer, sizeof peer, model);
    br_init(r, x->name, peer);
}

static void error_line(bench_report *rep, const http_exp *x, const char *model, const point *p, const char *err) {
    bench_result r;
    set_point(&r, x, model);
    br_set(&r, "status", "error");
    if (p) {
        br_setl(&r, "concurrency", p->c);
        br_setl(&r, "n", p->n);
    }
    br_set(&r, "model", "%s", model);
    br_set(&r, "err", "%s", err);
    report_add_weft(rep, &r);
}

/* Runs one load against s and adds its line. */
static void measure(server *s, const progs *pg, const http_exp *x, const char *model, const point *p, double cap_s,
                    bench_report *rep) {
    char url[64], cs[24], ns[24];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, x->path);
    snprintf(cs, sizeof cs, "%ld", p->c);
    snprintf(ns, sizeof ns, "%ld", p->n);
    int use_load = p->c >= WEFT_LOAD_MIN_CONC;
    if (use_load && !pg->have_load) {
        error_line(rep, x, model, p, "no_weft_load");
        return;
    }
    char *ab_argv[] = {(char *)pg->ab, "-r", "-c", cs, "-n", ns, url, NULL};
    char *load_argv[] = {(char *)pg->load, "-q", "-c", cs, "-n", ns, url, NULL};

    quiet_wait();
    static long hz;
    if (!hz) hz = sysconf(_SC_CLK_TCK);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    host_ticks h0, h1;
    host_ticks_get(&h0);
    long long s0 = launch_proc_ticks(s->l.pid);
    double t0 = now_s();
    run_out ro;
    int e = run_capture(use_load ? load_argv : ab_argv, cap_s, &ro);
    double wall = now_s() - t0;
    long long s1 = launch_proc_ticks(s->l.pid);
    host_ticks_get(&h1);
    long hwm = launch_proc_status(s->l.pid, "VmHWM");

    load_result lr;
    memset(&lr, 0, sizeof lr);
    if (e < 0) snprintf(lr.err, sizeof lr.err, "cannot run the load: %s", strerror(-e));
    else if (ro.timed_out) snprintf(lr.err, sizeof lr.err, "timeout after %.0f s (--cap-s)", cap_s);
    else if (use_load) parse_weft_load(ro.text, &lr);
    else parse_ab(ro.text, &lr);
    if (e == 0 && ro.timed_out) lr.ok = 0;

    double srv_s = s0 >= 0 && s1 >= 0 ? (double)(s1 - s0) / (double)hz : -1;
    double cli_s = e == 0 ? (double)ro.ru.ru_utime.tv_sec + ro.ru.ru_utime.tv_usec / 1e6 + (double)ro.ru.ru_stime.tv_sec +
                                ro.ru.ru_stime.tv_usec / 1e6
                          : 0;
    double busy_s = (double)(h1.busy - h0.busy) / (double)hz;
    long pool = x->db ? pg->db_pool : 0;
    double lim = limit_rps(x, p->c, pool);

    bench_result r;
    set_point(&r, x, model);
    br_set(&r, "status", "%s", lr.ok ? "ok" : "error");
    br_setl(&r, "concurrency", p->c);
    br_setl(&r, "n", p->n);
    if (lr.ok) {
        br_setf(&r, "rps", 2, lr.rps);
        br_setf(&r, "limit_rps", 0, lim);
        br_setf(&r, "pct_of_limit", 1, 100 * lr.rps / lim);
        double ceil_rps = ab_ceiling_rps(x, p, pool);
        if (ceil_rps > 0) {
            br_setf(&r, "ab_ceiling_rps", 0, ceil_rps);
            br_setf(&r, "pct_of_ab_ceiling", 1, 100 * lr.rps / ceil_rps);
        }
        br_setf(&r, "mean_ms", lr.mean_ms == (long)lr.mean_ms ? 0 : 3, lr.mean_ms);
        br_setf(&r, "p95_ms", lr.p95_ms == (long)lr.p95_ms ? 0 : 3, lr.p95_ms);
        br_setl(&r, "failed", lr.failed);
        if (srv_s >= 0 && lr.complete > 0) br_setf(&r, "cpu_us_per_req", 1, srv_s * 1e6 / (double)lr.complete);
    }
    br_set(&r, "model", "%s", model);
    br_set(&r, "load", "%s", use_load ? "weft-load" : "ab");
    if (lr.ok) {
        br_setf(&r, "p50_ms", lr.p50_ms == (long)lr.p50_ms ? 0 : 3, lr.p50_ms);
        br_setf(&r, "p90_ms", lr.p90_ms == (long)lr.p90_ms ? 0 : 3, lr.p90_ms);
        br_setf(&r, "p99_ms", lr.p99_ms == (long)lr.p99_ms ? 0 : 3, lr.p99_ms);
        br_setf(&r, "max_ms", lr.max_ms == (long)lr.max_ms ? 0 : 3, lr.max_ms);
        br_setl(&r, "complete", lr.complete);
        br_setf(&r, "time_s", 3, lr.time_s);
    } else {
        br_set(&r, "err", "%s", lr.err[0] ? lr.err : "no_result");
    }
    br_setf(&r, "wall_s", 2, wall);
    if (srv_s >= 0) br_setf(&r, "srv_cpu_s", 2, srv_s);
    br_setf(&r, "client_cpu_s", 2, cli_s);
    if (srv_s >= 0 && wall > 0 && ncpu > 0)
        br_setf(&r, "other_pct", 1, 100 * (busy_s - srv_s - cli_s) / (wall * (double)ncpu));
    if (hwm >= 0) br_setf(&r, "srv_hwm_mb", 0, (double)hwm / 1024);
    br_setl(&r, "delay_ms", x->delay_ms);
    br_setl(&r, "delay_every", x->every);
    if (x->db) br_setl(&r, "db_pool", pg->db_pool);
    report_add_weft(rep, &r);
    free(ro.text);
}

/* ab -r -n 1000 -c 100, discarded; smaller when the largest point is (a
 * smoke run of http-db, whose requests each take 0.1 s) */
static void warm_up(server *s, const progs *pg, const http_exp *x, long max_n, double cap_s) {
    char url[64], ns[24], cs[24];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, x->path);
    long n = max_n < 1000 ? max_n : 1000;
    snprintf(ns, sizeof ns, "%ld", n);
    snprintf(cs, sizeof cs, "%ld", n < 100 ? n : 100);
    char *argv[] = {(char *)pg->ab, "-r", "-n", ns, "-c", cs, url, NULL};
    run_out ro;
    if (run_capture(argv, cap_s, &ro) == 0 && !strstr(ro.text, "Requests per second")) {
        char l[160];
        last_line(l, sizeof l, ro.text);
        printf("# warm-up failed: %s\n", l);
    }
    free(ro.text);
}

/* ------------------------------------------------------------------------ */
/* the tables                                                                */
/* ------------------------------------------------------------------------ */

#define T_ROWS 48
#define T_COLS 14
#define T_CELL 40

typedef struct tbl {
    int nr, nc;
    char c[T_ROWS][T_COLS][T_CELL];
} tbl;

static void tbl_print(const tbl *t) {
    int w[T_COLS] = {0};
    for (int r = 0; r < t->nr; r++)
        for (int c = 0; c < t->nc; c++) {
            int l = (int)strlen(t->c[r][c]);
            if (l > w[c]) w[c] = l;
        }
    for (int r = 0; r < t->nr; r++) {
        printf("  ");
        for (int c = 0; c < t->nc; c++) {
            int last = c == t->nc - 1;
            /* first column left-aligned, figures right-aligned */
            if (c == 0) printf("%-*s", last ? 0 : w[c], t->c[r][c]);
            else printf("%*s", w[c], t->c[r][c]);
            fputs(last ? "\n" : "  ", stdout);
        }
        if (r == 0) {
            printf("  ");
            for (int c = 0; c < t->nc; c++) {
                for (int k = 0; k < w[c]; k++) putchar('-');
                fputs(c == t->nc - 1 ? "\n" : "  ", stdout);
            }
        }
    }
}

static char *cell(tbl *t, int r, int c) {
    if (c >= t->nc) t->nc = c + 1;
    return t->c[r][c];
}

static int matches(const bench_result *r, const char *exp, const char *peer, const point *p) {
    double c, n;
    if (strcmp(br_get(r, "experiment"), exp) != 0) return 0;
    if (peer && strcmp(br_get(r, "peer"), peer) != 0) return 0;
    if (!p) return 1;
    return br_num(r, "concurrency", &c) && br_num(r, "n", &n) && (long)c == p->c && (long)n == p->n;
}

/* weft's line for (model, point): the last one. */
static const bench_result *find_weft(const bench_report *rep, const http_exp *x, const char *peer, const point *p) {
    const bench_result *found = NULL;
    for (int i = 0; i < rep->nweft; i++)
        if (matches(&rep->weft[i], x->name, peer, p)) found = &rep->weft[i];
    return found;
}

/* A peer's line for a point: its median line (rep=median, or a SUMMARY) when
 * there is one, else the last. */
static const bench_result *find_peer(const bench_report *rep, const http_exp *x, const char *peer, const point *p) {
    const bench_result *found = NULL, *median = NULL;
    for (int i = 0; i < rep->npeers; i++) {
        const bench_result *r = &rep->peers[i];
        if (!matches(r, x->peer_exp, peer, p) || !br_get(r, "rps")) continue;
        const char *rp = br_get(r, "rep");
        if ((rp && strcmp(rp, "median") == 0) || br_get(r, "reps")) median = r;
        found = r;
    }
    return median ? median : found;
}

/* The peers of the experiment, in the order of their first line. */
static int peer_list(const bench_report *rep, const http_exp *x, const char *names[MAX_PEERS]) {
    int n = 0;
    for (int i = 0; i < rep->npeers; i++) {
        const bench_result *r = &rep->peers[i];
        if (strcmp(br_get(r, "experiment"), x->peer_exp) != 0 || !br_get(r, "rps")) continue;
        const char *p = br_get(r, "peer");
        int k;
        for (k = 0; k < n && strcmp(names[k], p) != 0; k++) {
        }
        if (k == n && n < MAX_PEERS) names[n++] = p;
    }
    return n;
}

/* The points: weft's, then the peers' that weft did not run. */
static int point_list(const bench_report *rep, const http_exp *x, const point *ran, int nran, point out[MAX_POINTS]) {
    int n = 0;
    for (int i = 0; i < nran && n < MAX_POINTS; i++) out[n++] = ran[i];
    for (int i = 0; i < rep->npeers && n < MAX_POINTS; i++) {
        const bench_result *r = &rep->peers[i];
        double c, nn;
        if (strcmp(br_get(r, "experiment"), x->peer_exp) != 0 || !br_get(r, "rps")) continue;
        if (!br_num(r, "concurrency", &c) || !br_num(r, "n", &nn)) continue;
        int k;
        for (k = 0; k < n && !(out[k].c == (long)c && out[k].n == (long)nn); k++) {
        }
        if (k == n) out[n++] = (point){(long)c, (long)nn};
    }
    return n;
}

static const struct article3 *article_for(const point *p) {
    if (p->n != 3000) return NULL;
    for (size_t i = 0; i < sizeof ARTICLE3 / sizeof ARTICLE3[0]; i++)
        if (ARTICLE3[i].c == p->c) return &ARTICLE3[i];
    return NULL;
}

enum what { W_RPS, W_LATENCY, W_CPU };

/* A result's figure as a cell. */
static void fig(char out[T_CELL], const bench_result *r, enum what w) {
    double a, b, f;
    if (!r) {
        snprintf(out, T_CELL, "-");
        return;
    }
    const char *st = br_get(r, "status");
    if (st && strcmp(st, "ok") != 0 && !br_get(r, "rps")) {
        snprintf(out, T_CELL, "%.12s", st);
        return;
    }
    switch (w) {
    case W_RPS:
        if (!br_num(r, "rps", &a)) {
            snprintf(out, T_CELL, "-");
            return;
        }
        if (br_num(r, "failed", &f) && f > 0) snprintf(out, T_CELL, "%.1f (%.0f failed)", a, f);
        else snprintf(out, T_CELL, "%.1f", a);
        break;
    case W_LATENCY:
        if (!br_num(r, "mean_ms", &a) || !br_num(r, "p95_ms", &b)) snprintf(out, T_CELL, "-");
        else snprintf(out, T_CELL, "%.1f / %.0f", a, b);
        break;
    case W_CPU:
        if (br_num(r, "cpu_us_per_req", &a) || br_num(r, "srv_cpu_us_req", &a)) snprintf(out, T_CELL, "%.0f", a);
        else snprintf(out, T_CELL, "-");
        break;
    }
}

static void print_delay_tables(const bench_report *rep, const http_exp *x, long pool, const point *ran, int nran,
                               char models[][32], int nmodels) {
    const char *peers[MAX_PEERS];
    int npeers = peer_list(rep, x, peers);
    point pts[MAX_POINTS];
    int npts = point_list(rep, x, ran, nran, pts);
    static const char *const titles[] = {"requests/s", "latency mean / p95, ms", "server CPU per request, us"};
    if (x->db) {
        printf("\nhttp-db: every request runs SELECT pg_sleep(0.1) on one of a pool of connections (weft: blocking "
               "libpq, hooks on for virtual; Java: JDBC); ab -r, no keep-alive; limit = min(C, pool) / 0.1 s; ab "
               "ceiling = 1 + ceil((n-1)/min(C, pool)) delays (ab sends its first request alone); server CPU "
               "leaves out PostgreSQL's\n"
               "article: Spring Boot 3 on Tomcat, Java 21, a simulated 100 ms, 3000 requests per C (platform: "
               "Tomcat's 200 threads)\n");
    } else {
        printf("\nhttp-delay: every request sleeps 100 ms; ab -r, no keep-alive (weft-load from C=%d); "
               "limit = C / 0.1 s (Little's law); ab ceiling = what ab allows any server: it sends its first "
               "request alone, so n requests take at least 1 + ceil((n-1)/C) delays\n"
               "article: Spring Boot 3 on Tomcat, Java 21, 3000 requests per C (platform: Tomcat's 200 threads); "
               "peers: run.sh delay100 (%d peer%s, median line when REPS>1)\n",
               WEFT_LOAD_MIN_CONC, npeers, npeers == 1 ? "" : "s");
    }
    for (int w = W_RPS; w <= W_CPU; w++) {
        static tbl t;
        memset(&t, 0, sizeof t);
        int col = 0;
        snprintf(cell(&t, 0, col++), T_CELL, "C");
        snprintf(cell(&t, 0, col++), T_CELL, "n");
        if (w == W_RPS) snprintf(cell(&t, 0, col++), T_CELL, "limit");
        if (w == W_RPS) snprintf(cell(&t, 0, col++), T_CELL, "ab ceiling");
        if (w != W_CPU) {
            snprintf(cell(&t, 0, col++), T_CELL, "article virtual");
            snprintf(cell(&t, 0, col++), T_CELL, "article platform");
        }
        int first_weft = col;
        for (int m = 0; m < nmodels; m++) peer_name(cell(&t, 0, col++), T_CELL, models[m]);
        for (int k = 0; k < npeers; k++) snprintf(cell(&t, 0, col++), T_CELL, "%s", peers[k]);
        for (int i = 0; i < npts && i + 1 < T_ROWS; i++) {
            int r = i + 1;
            col = 0;
            snprintf(cell(&t, r, col++), T_CELL, "%ld", pts[i].c);
            snprintf(cell(&t, r, col++), T_CELL, "%ld", pts[i].n);
            if (w == W_RPS) snprintf(cell(&t, r, col++), T_CELL, "%.0f", limit_rps(x, pts[i].c, pool));
            if (w == W_RPS) {
                double ab_c = ab_ceiling_rps(x, &pts[i], pool);
                if (ab_c > 0) snprintf(cell(&t, r, col++), T_CELL, "%.0f", ab_c);
                else snprintf(cell(&t, r, col++), T_CELL, "-");
            }
            if (w != W_CPU) {
                const struct article3 *a = article_for(&pts[i]);
                if (!a) {
                    snprintf(cell(&t, r, col++), T_CELL, "-");
                    snprintf(cell(&t, r, col++), T_CELL, "-");
                } else if (w == W_RPS) {
                    snprintf(cell(&t, r, col++), T_CELL, "%.2f", a->virt_rps);
                    snprintf(cell(&t, r, col++), T_CELL, "%.2f", a->plat_rps);
                } else {
                    snprintf(cell(&t, r, col++), T_CELL, "%.1f / %.0f", a->virt_mean, a->virt_p95);
                    snprintf(cell(&t, r, col++), T_CELL, "%.1f / %.0f", a->plat_mean, a->plat_p95);
                }
            }
            for (int m = 0; m < nmodels; m++) {
                char pn[64];
                peer_name(pn, sizeof pn, models[m]);
                fig(cell(&t, r, first_weft + m), find_weft(rep, x, pn, &pts[i]), (enum what)w);
            }
            for (int k = 0; k < npeers; k++)
                fig(cell(&t, r, first_weft + nmodels + k), find_peer(rep, x, peers[k], &pts[i]), (enum what)w);
            t.nr = r + 1;
        }
        printf("\n%s\n", titles[w]);
        tbl_print(&t);
    }
}

static void every10_row(tbl *t, const char *label, const bench_result *r, const http_exp *x) {
    if (t->nr >= T_ROWS) return;
    int row = t->nr++;
    double c = 0, n = 0, v;
    br_num(r, "concurrency", &c);
    br_num(r, "n", &n);
    snprintf(cell(t, row, 0), T_CELL, "%s", label);
    snprintf(cell(t, row, 1), T_CELL, "%.0f", c);
    snprintf(cell(t, row, 2), T_CELL, "%.0f", n);
    static const char *const keys[] = {"rps", "pct", "mean_ms", "p90_ms", "p95_ms", "failed", "cpu"};
    for (int k = 0; k < 7; k++) {
        char *out = cell(t, row, 3 + k);
        snprintf(out, T_CELL, "-");
        if (k == 1) {
            if (br_num(r, "rps", &v) && c > 0) snprintf(out, T_CELL, "%.1f", 100 * v / limit_rps(x, (long)c, 0));
        } else if (k == 6) {
            fig(out, r, W_CPU);
        } else if (br_num(r, keys[k], &v)) {
            snprintf(out, T_CELL, k == 0 ? "%.2f" : "%.0f", v);
        }
    }
    const char *st = br_get(r, "status");
    if (st && strcmp(st, "ok") != 0 && !br_get(r, "rps")) snprintf(cell(t, row, 3), T_CELL, "%.12s", st);
}

static void print_every10_table(const bench_report *rep, const http_exp *x, const point *ran, int nran,
                                char models[][32], int nmodels) {
    static tbl t;
    memset(&t, 0, sizeof t);
    static const char *const head[] = {"source", "C", "n", "req/s", "% of limit", "mean ms", "p90 ms", "p95 ms",
                                       "failed", "server us/req"};
    for (int c = 0; c < 10; c++) snprintf(cell(&t, 0, c), T_CELL, "%s", head[c]);
    t.nr = 1;
    bench_result a;
    br_parse(&a, "experiment=article peer=article concurrency=100 n=10000 rps=491.98 mean_ms=202 p90_ms=2000 "
                 "p95_ms=2001 failed=0");
    every10_row(&t, "article: thread per connection (Java)", &a, x);
    br_parse(&a, "experiment=article peer=article concurrency=100 n=10000 rps=494.00 mean_ms=202 p90_ms=2000 "
                 "p95_ms=2001 failed=0");
    every10_row(&t, "article: async (NIO.2)", &a, x);
    br_parse(&a, "experiment=limit peer=limit concurrency=100 n=10000 rps=500");
    every10_row(&t, "limit (Little's law)", &a, x);
    for (int i = 0; i < nran; i++)
        for (int m = 0; m < nmodels; m++) {
            char pn[64];
            peer_name(pn, sizeof pn, models[m]);
            const bench_result *r = find_weft(rep, x, pn, &ran[i]);
            if (r) every10_row(&t, pn, r, x);
        }
    const char *peers[MAX_PEERS];
    int npeers = peer_list(rep, x, peers);
    point pts[MAX_POINTS];
    int npts = point_list(rep, x, NULL, 0, pts);
    for (int i = 0; i < npts; i++)
        for (int k = 0; k < npeers; k++) {
            const bench_result *r = find_peer(rep, x, peers[k], &pts[i]);
            if (r) every10_row(&t, peers[k], r, x);
        }
    printf("\nhttp-every10: every 10th request sleeps 2 s; ab -r -c 100 -n 10000, no keep-alive; "
           "limit = C / (2 s / 10) = 500 req/s at C=100\n"
           "article: Java 16, 176-byte hello.html (its ab ran without -r); peers: run.sh delay2s-every10 "
           "(%d peer%s)\n",
           npeers, npeers == 1 ? "" : "s");
    tbl_print(&t);
}

/* ------------------------------------------------------------------------ */
/* the experiment                                                            */
/* ------------------------------------------------------------------------ */

/* "C[:N] ..." (blank- or comma-separated); C alone takes n. */
static int parse_points(const char *s, long n, point out[MAX_POINTS]) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " ,\t", &save); t; t = strtok_r(NULL, " ,\t", &save)) {
        char *end;
        long c = strtol(t, &end, 10), nn = n;
        if (*end == ':') nn = strtol(end + 1, &end, 10);
        if (*end || c < 1 || nn < 1 || k == MAX_POINTS) {
            fprintf(stderr, "weft-bench: --conc: bad entry '%s' (C or C:N, at most %d)\n", t, MAX_POINTS);
            return -EINVAL;
        }
        if (c > nn) {
            fprintf(stderr, "weft-bench: --conc %s: concurrency above the number of requests (%ld)\n", t, nn);
            return -EINVAL;
        }
        out[k++] = (point){c, nn};
    }
    if (!k) {
        fprintf(stderr, "weft-bench: --conc: empty list\n");
        return -EINVAL;
    }
    return k;
}

static int parse_models(const http_exp *x, const char *s, char out[MAX_MODELS][32]) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    int k = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, " ,\t", &save); t; t = strtok_r(NULL, " ,\t", &save)) {
        char *end = NULL;
        int ok = strcmp(t, "virtual") == 0 || (strncmp(t, "pool:", 5) == 0 && strtol(t + 5, &end, 10) > 0 && end && !*end);
        if (x->db) /* examples/http_db.c has virtual and pool:N; the Java peers */
            ok = ok || strcmp(t, "java25-virtual") == 0 || strcmp(t, "java17-pool200") == 0 ||
                 strcmp(t, "java25-pool200") == 0;
        else
            ok = ok || strcmp(t, "thread") == 0 || strcmp(t, "async") == 0;
        if (!ok || k == MAX_MODELS || strlen(t) >= 32) {
            fprintf(stderr, "weft-bench: --models: bad model '%s' (%s)\n", t,
                    x->db ? "virtual, pool:N, java25-virtual, java17-pool200, java25-pool200"
                          : "virtual, thread, pool:N, async");
            return -EINVAL;
        }
        snprintf(out[k++], 32, "%s", t);
    }
    if (!k) {
        fprintf(stderr, "weft-bench: --models: empty list\n");
        return -EINVAL;
    }
    return k;
}

static int exp_http(const http_exp *x, const bench_opts *o, bench_report *rep) {
    point pts[MAX_POINTS];
    char models[MAX_MODELS][32];
    int npts = parse_points(o->conc ? o->conc : x->conc, o->n ? o->n : x->n, pts);
    if (npts < 0) return npts;
    if (o->big) {
        if (npts == MAX_POINTS) return -EINVAL;
        pts[npts++] = (point){10000, 100000};
    }
    int nmodels = parse_models(x, o->models ? o->models : x->models, models);
    if (nmodels < 0) return nmodels;

    static progs pg;
    int e;
    if (x->db) {
        e = find_prog(pg.http_db, "WEFT_HTTP_DB", "../../http_db");
        if (e < 0) {
            fprintf(stderr, "weft-bench: no http_db at %s (examples/http_db.c, built where libpq-dev is; or set "
                            "WEFT_HTTP_DB)\n", pg.http_db);
            return e;
        }
        snprintf(pg.peer_sh, PATH_LEN, "%s/bench/http-db/peer.sh", WEFT_SOURCE_DIR);
        pg.db_pool = o->db_pool > 0 ? o->db_pool : 200;
        snprintf(pg.httpd, PATH_LEN, "%s", pg.http_db);
        snprintf(pg.root, PATH_LEN, "-");
    } else {
        e = find_prog(pg.httpd, "WEFT_HTTPD", "../httpd/weft-httpd");
        if (e < 0) {
            fprintf(stderr, "weft-bench: no weft-httpd at %s (build the weft-httpd target, or set WEFT_HTTPD)\n", pg.httpd);
            return e;
        }
    }
    if ((e = find_in_path(pg.ab, "ab")) < 0) {
        fprintf(stderr, "weft-bench: ab (ApacheBench) is not in PATH (apt-get install apache2-utils)\n");
        return e;
    }
    if (!x->db && (e = find_docroot(pg.root)) < 0) return e;
    int need_load = 0;
    for (int i = 0; i < npts; i++) need_load |= pts[i].c >= WEFT_LOAD_MIN_CONC;
    if (need_load) {
        pg.have_load = find_prog(pg.load, "WEFT_LOAD", "../load/weft-load") == 0;
        if (!pg.have_load)
            fprintf(stderr, "weft-bench: no weft-load at %s (build the weft-load target, or set WEFT_LOAD): "
                            "points with C >= %d are skipped\n", pg.load, WEFT_LOAD_MIN_CONC);
    }
    /* ab at C=1000, weft-load at 10,000, and the server: as many fds as allowed */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    getrlimit(RLIMIT_NOFILE, &rl);
    for (int i = 0; i < npts; i++)
        if ((rlim_t)pts[i].c + 64 > rl.rlim_cur)
            fprintf(stderr, "weft-bench: note: C=%ld with only %llu file descriptors allowed\n", pts[i].c,
                    (unsigned long long)rl.rlim_cur);

    double cap_s = o->cap_s > 0 ? o->cap_s : DEFAULT_CAP_S;
    long max_n = 0;
    for (int i = 0; i < npts; i++) max_n = pts[i].n > max_n ? pts[i].n : max_n;
    database db = {.l.pid = 0};
    if (x->db) {
        if ((e = db_start(&db, pg.db_pool, pg.conninfo, sizeof pg.conninfo)) < 0) return e;
        printf("# %s: PostgreSQL %s (bench/pg.sh run %s, max_connections %ld); pool %ld connections a server; "
               "Java peers by %s\n",
               x->name, pg.conninfo, db.dir, pg.db_pool + 50, pg.db_pool, pg.peer_sh);
    }
    printf("# %s: server %s, docroot %s, load %s%s%s, delay %ld ms every %ld request(s), carriers %s, nofile %llu\n",
           x->name, pg.httpd, pg.root, pg.ab, need_load && pg.have_load ? " and " : "",
           need_load && pg.have_load ? pg.load : "", x->delay_ms, x->every, o->carriers ? "(--carriers)" : "default",
           (unsigned long long)rl.rlim_cur);
    fflush(stdout);

    int ran_any = 0;
    for (int m = 0; m < nmodels; m++) {
        server s;
        printf("# model %s\n", models[m]);
        fflush(stdout);
        if (server_start(&s, &pg, x, models[m], o->carriers) < 0) {
            error_line(rep, x, models[m], NULL, "server_start");
            continue;
        }
        warm_up(&s, &pg, x, max_n, cap_s);
        for (int i = 0; i < npts; i++) {
            if (server_ended(&s)) {
                char d[96];
                describe_status(d, sizeof d, s.l.status);
                fprintf(stderr, "weft-bench: weft-httpd --model %s died (%s)\n", models[m], d);
                error_line(rep, x, models[m], &pts[i], "server_died");
                continue;
            }
            measure(&s, &pg, x, models[m], &pts[i], cap_s, rep);
            ran_any = 1;
        }
        server_stop(&s);
    }
    if (x->db) db_stop(&db);

    if (x == &HTTP_DELAY || x == &HTTP_DB) print_delay_tables(rep, x, x->db ? pg.db_pool : 0, pts, npts, models, nmodels);
    else print_every10_table(rep, x, pts, npts, models, nmodels);
    return ran_any ? 0 : -ECHILD;
}

int exp_http_delay(const bench_opts *o, bench_report *rep) { return exp_http(&HTTP_DELAY, o, rep); }

int exp_http_every10(const bench_opts *o, bench_report *rep) { return exp_http(&HTTP_EVERY10, o, rep); }

int exp_http_db(const bench_opts *o, bench_report *rep) { return exp_http(&HTTP_DB, o, rep); }
