/*
 * The HTTP experiments' processes (exp_http.c's essay: the procedure; this
 * file its steps 1 and 5 and the load's process): where the programs are
 * (weft-httpd $WEFT_HTTPD or ../httpd/weft-httpd beside weft-bench,
 * weft-load $WEFT_LOAD or ../load/weft-load, ab from PATH, the docroot),
 * every child through launch.h (stdin /dev/null, stdout a pipe,
 * PR_SET_PDEATHSIG so that a weft-bench that dies leaves nothing behind),
 * the server started until it prints "listening on HOST:PORT" and answers
 * GET /hello.html, stopped with SIGTERM (SIGKILL after 20 s); http-db's
 * PostgreSQL (bench/pg.sh run); and the host's CPU ticks, read to wait for
 * a quiet machine before each load.  All on weft-bench's main thread.
 */
#define _GNU_SOURCE
#include "http_exp.h"

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

/* ------------------------------------------------------------------------ */
/* programs and paths                                                        */
/* ------------------------------------------------------------------------ */

static int is_file(const char *p, int mode) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, mode) == 0;
}

/* $env, else REL relative to this executable's directory. */
int find_prog(char out[PATH_LEN], const char *env, const char *rel) {
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

int find_in_path(char out[PATH_LEN], const char *name) {
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

int find_docroot(char out[PATH_LEN]) {
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

/* Runs argv to its end (SIGKILL after cap_s), collecting stdout+stderr. */
int run_capture(char *const argv[], double cap_s, run_out *ro) {
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

void host_ticks_get(host_ticks *h) {
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
void quiet_wait(void) {
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
int server_ended(server *s) { return launch_reap(&s->l, 0) == 1; }

void describe_status(char *out, size_t len, int st) {
    if (WIFEXITED(st)) snprintf(out, len, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, len, "status 0x%x", st);
}

/* Stops the server: SIGTERM, then SIGKILL after 20 s; reports an unclean end. */
void server_stop(server *s) {
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
int server_start(server *s, const progs *pg, const http_exp *x, const char *model, int carriers) {
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
    } else if (!strncmp(model, "tpc", 3)) {
        /* bench/tpc: a pthread per connection, natively or under weft-run */
        if (!strcmp(model, "tpc-weft-run")) {
            argv[a++] = (char *)pg->weft_run;
            if (carriers > 0) {
                argv[a++] = "--carriers";
                argv[a++] = car;
            }
        }
        argv[a++] = (char *)pg->tpc;
        argv[a++] = "--port";
        argv[a++] = "0";
        argv[a++] = "--delay-ms";
        argv[a++] = delay;
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

int db_start(database *db, long pool, char *conninfo, size_t len) {
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

void db_stop(database *db) {
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

