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
 *
 * The files: this one holds the experiments, a point's load and its line
 * (one load, the parsers of ab's and weft-load's output) and the run over
 * models and points; http_run.c runs the programs (the server and its
 * start, the database, the load's process, the host's quiet); http_tables.c
 * prints the tables after the lines.  http_exp.h is theirs.
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
/* the three experiments                                                     */
/* ------------------------------------------------------------------------ */

const http_exp HTTP_DELAY = {"http-delay", "delay100", 100, 1, "50 150 300 500 1000 1000:20000",
                             "virtual async pool:200", 3000, "/hello.html", 0};
const http_exp HTTP_EVERY10 = {"http-every10", "delay2s-every10", 2000, 10, "100",
                               "virtual thread pool:200 async", 10000, "/hello.html", 0};
/* The third article's experiment with PostgreSQL's pg_sleep(0.1) in place of
 * the simulated 100 ms; peer_exp names no run.sh experiment: its peers run
 * here, as models. */
const http_exp HTTP_DB = {"http-db", "db100", 100, 1, "50 150 300 500 1000",
                          "virtual pool:200 java25-virtual java17-pool200", 3000, "/db", 1};

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
void peer_name(char *out, size_t len, const char *model) {
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

double limit_rps(const http_exp *x, long c, long pool) {
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
double ab_ceiling_rps(const http_exp *x, const point *p, long pool) {
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
        else /* (tpc: bench/tpc's thread-per-connection server, natively or under weft-run) */
            ok = ok || strcmp(t, "thread") == 0 || strcmp(t, "async") == 0 || strcmp(t, "tpc") == 0 ||
                 strcmp(t, "tpc-weft-run") == 0;
        if (!ok || k == MAX_MODELS || strlen(t) >= 32) {
            fprintf(stderr, "weft-bench: --models: bad model '%s' (%s)\n", t,
                    x->db ? "virtual, pool:N, java25-virtual, java17-pool200, java25-pool200"
                          : "virtual, thread, pool:N, async, tpc, tpc-weft-run");
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
    for (int i = 0; i < nmodels && !x->db; i++) {
        if (strncmp(models[i], "tpc", 3) != 0) continue;
        if ((e = find_prog(pg.tpc, "WEFT_TPC_SERVER", "../../tpc_server")) < 0) {
            fprintf(stderr, "weft-bench: no tpc_server at %s (build the tpc_server target, or set WEFT_TPC_SERVER)\n",
                    pg.tpc);
            return e;
        }
        if (!strcmp(models[i], "tpc-weft-run") && (e = find_prog(pg.weft_run, "WEFT_RUN", "../run/weft-run")) < 0) {
            fprintf(stderr, "weft-bench: no weft-run at %s (build the weft-run target, or set WEFT_RUN)\n",
                    pg.weft_run);
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
