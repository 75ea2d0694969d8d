/*
 * exp_parallel.c -- `weft-bench parallel` (issue 12): CPU-bound work split
 * over the cores, weft_parallel_reduce against the systems people use for
 * it, all in one run.
 *
 * Workloads (bench/parallel/work.h):
 *   uniform  the sum of sqrt(i) for i in [0, N), N = -n (10^9): every index
 *            costs the same;
 *   skewed   a --size x --size (4096) Mandelbrot, --max-iter (1000)
 *            iterations at most per pixel, one row per index: the rows
 *            through the set cost up to ~100x the others.
 * Peers (--peers, default all):
 *   weft            weft_parallel_reduce(grain 0) from a vthread, on
 *                   --carriers K (default: the CPUs); on uniform also with
 *                   1 and 2 carriers (lines with carriers=1 / carriers=2:
 *                   the scaling check);
 *   pthreads        K pthreads, the range split in K equal static pieces,
 *                   one each, partial sums added in order;
 *   openmp          weft-par-omp (bench/parallel/omp.c, beside weft-bench):
 *                   `parallel for schedule(dynamic, C) reduction(+:acc)`,
 *                   C = --omp-chunk (default 16384 on uniform, 1 on skewed);
 *   java17-streams  bench/parallel/peer.sh: Java 17 parallel streams on a
 *                   common pool of K threads.
 * And the mixed workload (--workload mixed, in the default set): HTTP
 * latency while a CPU-bound job runs in the same process -- bench/mixed.sh
 * runs weft-httpd --delay-ms 10 (beside weft-bench, or $WEFT_HTTPD) under
 * weft-load -c 300 -k (or $WEFT_LOAD) three times, --cap-s seconds each
 * (default 20): no job, `--cpu-job shared` (weft_parallel_reduce in the
 * default carrier group) and `--cpu-job group` (in a group of its own with
 * one carrier); a line per run
 *   experiment=parallel workload=mixed peer=weft cpu=none|shared|group ...
 *   p99_ms=...
 * then "# mixed" with the group/shared p99 ratio (acceptance: <= 0.5).
 * Every C variant calls the same body (work.c, one object file) through a
 * function pointer per index with an accumulator passed by address: see
 * work.h, "Fairness".  Each peer runs once unmeasured (warm-up: threads
 * start, the JIT compiles), then --reps R (3) measured times; wall_s is the
 * median, wall_min_s the best.  Lines:
 *   experiment=parallel workload=W peer=P status=ok threads=K [carriers=K]
 *   n=N reps=R wall_s=S wall_min_s=S check=VALUE
 * then "# speed" lines: weft's speed relative to each peer (peer wall_s /
 * weft wall_s: 1.05 = weft 5 % faster) and the 2-carrier scaling (wall_s
 * with 1 carrier / with 2; 2.0 is perfect).  A peer that cannot run here
 * (no weft-par-omp: CMake found no OpenMP; no Java 17) is skipped with a
 * "# skipped" line.
 */
#define _GNU_SOURCE
#include "bench.h"
#include "launch.h"
#include "../../bench/parallel/work.h"

#include <weft.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LINES 32

typedef struct par_setup {
    int uniform;        /* else skewed */
    long n;             /* uniform: indices; skewed: the side */
    int max_iter;
    int threads;        /* K */
    int reps;
    par_mandel m;
} par_setup;

typedef struct par_run {
    double wall[64];
    char check[64];
    int err;
} par_run;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static const char *wname(const par_setup *s) { return s->uniform ? "uniform" : "skewed"; }

/* Prints (and keeps) the line of one finished run. */
static void emit(bench_report *rep, const par_setup *s, const char *peer, int carriers, par_run *r,
                 bench_result *out) {
    bench_result b;
    br_init(&b, "parallel", peer);
    br_set(&b, "workload", "%s", wname(s));
    if (r->err) {
        char e[32];
        br_set(&b, "status", "error");
        br_set(&b, "err", "%s", errno_name(r->err, e, sizeof e));
    } else {
        br_set(&b, "status", "ok");
    }
    br_setl(&b, "threads", carriers ? carriers : s->threads);
    if (carriers) br_setl(&b, "carriers", carriers);
    br_setl(&b, "n", s->n);
    if (!s->uniform) br_setl(&b, "max_iter", s->max_iter);
    br_setl(&b, "reps", s->reps);
    if (!r->err) {
        qsort(r->wall, (size_t)s->reps, sizeof r->wall[0], cmp_double);
        br_setf(&b, "wall_s", 4, r->wall[s->reps / 2]);
        br_setf(&b, "wall_min_s", 4, r->wall[0]);
        br_set(&b, "check", "%s", r->check);
    }
    report_add_weft(rep, &b);
    if (out) *out = b;
}

/* ---- weft ---------------------------------------------------------------- */

typedef struct weft_job {
    const par_setup *s;
    par_run *r;
} weft_job;

static int weft_main_fn(void *arg) {
    weft_job *j = arg;
    const par_setup *s = j->s;
    for (int k = -1; k < s->reps; k++) {
        double t0 = now_s();
        int e;
        if (s->uniform) {
            double sum = 0;
            e = weft_parallel_reduce(0, (size_t)s->n, 0, &sum, sizeof sum, NULL, par_sqrt_body, par_sqrt_combine,
                                     NULL);
            snprintf(j->r->check, sizeof j->r->check, "%.10e", sum);
        } else {
            uint64_t total = 0;
            e = weft_parallel_reduce(0, (size_t)s->n, 0, &total, sizeof total, NULL, par_mandel_body,
                                     par_u64_combine, (void *)&s->m);
            snprintf(j->r->check, sizeof j->r->check, "%llu", (unsigned long long)total);
        }
        double dt = now_s() - t0;
        if (e < 0) return e;
        if (k >= 0) j->r->wall[k] = dt;
    }
    return 0;
}

static void run_weft(const par_setup *s, int carriers, par_run *r) {
    memset(r, 0, sizeof *r);
    weft_runtime_opts cfg = {.carriers = carriers};
    int e = weft_init(&cfg);
    if (e < 0) {
        r->err = e;
        return;
    }
    weft_job j = {s, r};
    e = weft_main(weft_main_fn, &j);
    weft_shutdown();
    if (e < 0) r->err = e;
}

/* ---- pthreads: a static split -------------------------------------------- */

typedef struct pt_part {
    const par_setup *s;
    size_t lo, hi;
    double dsum;
    uint64_t usum;
} pt_part;

static void *pt_main(void *arg) {
    pt_part *p = arg;
    if (p->s->uniform) {
        par_body_fn f = par_work_uniform;
        double acc = 0;
        for (size_t i = p->lo; i < p->hi; i++) f(i, &acc, NULL);
        p->dsum = acc;
    } else {
        par_body_fn f = par_work_skewed;
        uint64_t acc = 0;
        void *ctx = (void *)&p->s->m;
        for (size_t i = p->lo; i < p->hi; i++) f(i, &acc, ctx);
        p->usum = acc;
    }
    return NULL;
}

static void run_pthreads(const par_setup *s, par_run *r) {
    memset(r, 0, sizeof *r);
    int k = s->threads;
    pt_part *p = calloc((size_t)k, sizeof *p);
    pthread_t *t = calloc((size_t)k, sizeof *t);
    if (!p || !t) {
        r->err = -ENOMEM;
        goto out;
    }
    size_t n = (size_t)s->n;
    for (int rep = -1; rep < s->reps; rep++) {
        double t0 = now_s();
        for (int i = 0; i < k; i++) {
            p[i] = (pt_part){.s = s, .lo = n * (size_t)i / (size_t)k, .hi = n * (size_t)(i + 1) / (size_t)k};
            int e = pthread_create(&t[i], NULL, pt_main, &p[i]);
            if (e) {
                r->err = -e;
                for (int j = 0; j < i; j++) pthread_join(t[j], NULL);
                goto out;
            }
        }
        double dsum = 0;
        uint64_t usum = 0;
        for (int i = 0; i < k; i++) {
            pthread_join(t[i], NULL);
            dsum += p[i].dsum;
            usum += p[i].usum;
        }
        double dt = now_s() - t0;
        if (rep >= 0) r->wall[rep] = dt;
        if (s->uniform) snprintf(r->check, sizeof r->check, "%.10e", dsum);
        else snprintf(r->check, sizeof r->check, "%llu", (unsigned long long)usum);
    }
out:
    free(p);
    free(t);
}

/* ---- external peers --------------------------------------------------------- */

/* Runs cmd with /bin/sh -c (after a "# PEER: CMD" line); each of its
 * lines with "experiment=parallel" is printed, kept in rep and, parsed,
 * handed to fn.  Returns its wait status, or -1 when it could not start
 * (with a "# skipped" line). */
static int run_lines(const char *peer, const char *cmd, bench_report *rep,
                     void (*fn)(const bench_result *b, void *ctx), void *ctx) {
    printf("# %s: %s\n", peer, cmd);
    fflush(stdout);
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    launch_opts o = {.out = LAUNCH_PIPE, .who = "weft-bench: "};
    launch l;
    int e = launch_start(&l, argv, &o);
    FILE *f = e < 0 ? NULL : fdopen(l.out, "r");
    if (e == 0 && !f) {
        e = -errno;
        launch_stop(&l, SIGKILL, -1);
        launch_close(&l);
    }
    if (e < 0) {
        printf("# skipped %s: %s\n", peer, strerror(-e));
        return -1;
    }
    l.out = -1; /* f's now */
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "experiment=parallel")) continue;
        line[strcspn(line, "\n")] = 0;
        printf("%s\n", line);
        fflush(stdout);
        report_add_peer_line(rep, line);
        bench_result b;
        if (br_parse(&b, line) == 0) fn(&b, ctx);
    }
    fclose(f);
    launch_reap(&l, -1);
    return l.status;
}

typedef struct first_line {
    bench_result *out;
    int got;
} first_line;

static void keep_first(const bench_result *b, void *ctx) {
    first_line *fl = ctx;
    if (!fl->got) *fl->out = *b;
    fl->got = 1;
}

/* run_lines for a peer that prints one result: kept in out.  0 when it
 * gave one; -1 otherwise (the reason on stderr and a "# skipped" line). */
static int run_external(const char *peer, const char *cmd, bench_report *rep, bench_result *out) {
    first_line fl = {out, 0};
    int st = run_lines(peer, cmd, rep, keep_first, &fl);
    if (st == -1) return -1;
    if (!fl.got || st != 0) {
        printf("# skipped %s: it gave no result line (exit status %d)\n", peer, st);
        return -1;
    }
    return 0;
}

/* The directory of this program (weft-par-omp is built beside it). */
static int self_dir(char *buf, size_t cap) {
    ssize_t k = readlink("/proc/self/exe", buf, cap - 1);
    if (k <= 0) return -1;
    buf[k] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return -1;
    *slash = 0;
    return 0;
}

static int run_openmp(const par_setup *s, long chunk, bench_report *rep, bench_result *out) {
    char dir[PATH_MAX], cmd[PATH_MAX + 128];
    const char *bin = getenv("WEFT_PAR_OMP");
    if (bin) snprintf(dir, sizeof dir, "%s", bin);
    else if (self_dir(dir, sizeof dir) == 0) strncat(dir, "/weft-par-omp", sizeof dir - strlen(dir) - 1);
    if (access(dir, X_OK) != 0) {
        printf("# skipped openmp: no %s (CMake found no OpenMP when it configured: install gcc's libgomp,"
               " or set WEFT_PAR_OMP)\n", dir);
        return -1;
    }
    if (chunk < 0) chunk = s->uniform ? PAR_OMP_UNIFORM_CHUNK : 1;
    snprintf(cmd, sizeof cmd, "'%s' %s %ld %d %d %ld %d", dir, wname(s), s->n, s->threads, s->reps, chunk,
             s->max_iter);
    return run_external("openmp", cmd, rep, out);
}

static int run_java(const par_setup *s, bench_report *rep, bench_result *out) {
    char cmd[PATH_MAX + 128];
    const char *src = getenv("WEFT_SOURCE") ? getenv("WEFT_SOURCE") : WEFT_SOURCE_DIR;
    snprintf(cmd, sizeof cmd, "'%s/bench/parallel/peer.sh' java17-streams %s %ld %d %d %d", src, wname(s), s->n,
             s->threads, s->reps, s->max_iter);
    return run_external("java17-streams", cmd, rep, out);
}

/* ---- mixed: HTTP latency beside a CPU job (bench/mixed.sh) ------------------------ */

/* run_lines' fn for mixed.sh: each run's p99 by its cpu= mode */
static void mixed_p99(const bench_result *b, void *ctx) {
    static const char *const modes[3] = {"none", "shared", "group"};
    double *p99 = ctx, v;
    const char *m = br_get(b, "cpu");
    if (!m || !br_num(b, "p99_ms", &v)) return;
    for (int i = 0; i < 3; i++)
        if (!strcmp(m, modes[i])) p99[i] = v;
}

static int run_mixed(const bench_opts *o, bench_report *rep) {
    char dir[PATH_MAX], httpd[PATH_MAX + 32], load[PATH_MAX + 32], cmd[3 * PATH_MAX + 256];
    const char *src = getenv("WEFT_SOURCE") ? getenv("WEFT_SOURCE") : WEFT_SOURCE_DIR;
    if (self_dir(dir, sizeof dir) != 0) snprintf(dir, sizeof dir, ".");
    snprintf(httpd, sizeof httpd, "%s", getenv("WEFT_HTTPD") ? getenv("WEFT_HTTPD") : "");
    if (!*httpd) snprintf(httpd, sizeof httpd, "%s/../httpd/weft-httpd", dir);
    snprintf(load, sizeof load, "%s", getenv("WEFT_LOAD") ? getenv("WEFT_LOAD") : "");
    if (!*load) snprintf(load, sizeof load, "%s/../load/weft-load", dir);
    if (access(httpd, X_OK) != 0 || access(load, X_OK) != 0) {
        printf("# skipped mixed: no %s or %s (build weft-httpd and weft-load, or set WEFT_HTTPD and WEFT_LOAD)\n",
               httpd, load);
        return -1;
    }
    long secs = o->cap_s > 0 ? (long)(o->cap_s + 0.5) : 20;
    if (secs < 1) secs = 1;
    int carriers = o->carriers > 0 ? o->carriers : 2;
    snprintf(cmd, sizeof cmd, "WEFT_HTTPD='%s' WEFT_LOAD='%s' CARRIERS=%d '%s/bench/mixed.sh' %ld", httpd, load,
             carriers, src, secs);
    double p99[3] = {-1, -1, -1};
    int st = run_lines("mixed", cmd, rep, mixed_p99, p99);
    if (st == -1) return -1;
    if (st != 0 || p99[0] < 0 || p99[1] < 0 || p99[2] < 0) {
        printf("# skipped mixed: bench/mixed.sh did not give its three lines (exit status %d)\n", st);
        return -1;
    }
    printf("# mixed p99_ms none=%.2f shared=%.2f group=%.2f: group/shared=%.3f (acceptance: <= 0.5)\n", p99[0],
           p99[1], p99[2], p99[1] > 0 ? p99[2] / p99[1] : 0.0);
    fflush(stdout);
    return 0;
}

/* ---- the experiment ------------------------------------------------------------ */

static int wants(const char *peers, const char *p) {
    if (!peers) return 1;
    size_t l = strlen(p);
    for (const char *q = peers; (q = strstr(q, p)); q += l)
        if ((q == peers || q[-1] == ' ' || q[-1] == ',') && (q[l] == 0 || q[l] == ' ' || q[l] == ',')) return 1;
    return 0;
}

static void speed_line(const char *w, const char *peer, const bench_result *weft, const bench_result *other) {
    double a, b;
    if (!br_num(weft, "wall_s", &a) || !br_num(other, "wall_s", &b) || a <= 0) return;
    double am, bm;
    int mins = br_num(weft, "wall_min_s", &am) && br_num(other, "wall_min_s", &bm) && am > 0;
    printf("# speed workload=%s weft/%s=%.3f (median)", w, peer, b / a);
    if (mins) printf(" %.3f (best)", bm / am);
    printf("\n");
}

int exp_parallel(const bench_opts *o, bench_report *rep) {
    int k = o->carriers > 0 ? o->carriers : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (k < 1) k = 1;
    int reps = o->reps > 0 ? (int)o->reps : 3;
    if (reps > 64) {
        fprintf(stderr, "weft-bench parallel: at most 64 --reps\n");
        return -EINVAL;
    }
    const char *wl = o->workload ? o->workload : "uniform,skewed,mixed";
    int any_ok = 0;
    for (int u = 1; u >= 0; u--) {
        if (!strstr(wl, u ? "uniform" : "skewed")) continue;
        par_setup s = {.uniform = u,
                       .n = u ? (o->n > 0 ? o->n : PAR_UNIFORM_N) : (o->size > 0 ? o->size : PAR_MANDEL_SIZE),
                       .max_iter = o->max_iter > 0 ? (int)o->max_iter : PAR_MANDEL_ITER,
                       .threads = k,
                       .reps = reps};
        s.m = (par_mandel){.size = (int)s.n, .max_iter = s.max_iter};
        if (!u && s.n > (1 << 20)) {
            fprintf(stderr, "weft-bench parallel: --size at most %d\n", 1 << 20);
            return -EINVAL;
        }
        bench_result wres, pres, ores, jres, w1, w2;
        int have_w = 0, have_p = 0, have_o = 0, have_j = 0, have_w1 = 0, have_w2 = 0;
        par_run r;
        if (wants(o->peers, "weft")) {
            run_weft(&s, k, &r);
            emit(rep, &s, "weft", k, &r, &wres);
            have_w = !r.err;
        }
        if (wants(o->peers, "pthreads")) {
            run_pthreads(&s, &r);
            emit(rep, &s, "pthreads", 0, &r, &pres);
            have_p = !r.err;
        }
        if (wants(o->peers, "openmp")) have_o = run_openmp(&s, o->omp_chunk, rep, &ores) == 0;
        if (wants(o->peers, "java17-streams")) have_j = run_java(&s, rep, &jres) == 0;
        if (u && wants(o->peers, "weft")) {
            /* the scaling check: 1 and 2 carriers */
            run_weft(&s, 1, &r);
            emit(rep, &s, "weft", 1, &r, &w1);
            have_w1 = !r.err;
            run_weft(&s, 2, &r);
            emit(rep, &s, "weft", 2, &r, &w2);
            have_w2 = !r.err;
        }
        any_ok |= have_w | have_p | have_o | have_j;
        if (have_w) {
            if (have_p) speed_line(wname(&s), "pthreads", &wres, &pres);
            if (have_o) speed_line(wname(&s), "openmp", &wres, &ores);
            if (have_j) speed_line(wname(&s), "java17-streams", &wres, &jres);
        }
        if (have_w1 && have_w2) {
            double a, b;
            if (br_num(&w1, "wall_s", &a) && br_num(&w2, "wall_s", &b) && b > 0)
                printf("# scaling workload=%s carriers 2 vs 1: %.3fx (2.0 = perfect; acceptance: >= 1.90)\n",
                       wname(&s), a / b);
        }
        fflush(stdout);
    }
    if (strstr(wl, "mixed") && run_mixed(o, rep) == 0) any_ok = 1;
    return any_ok ? 0 : -EIO;
}
