/*
 * The HTTP experiments' tables (exp_http.c's essay): after the result
 * lines, weft's models and the peers' lines (--peer-line, --peer-file)
 * side by side per point -- requests/s against the limit and ab's ceiling,
 * latency mean / p95, server CPU per request for http-delay and http-db,
 * and http-every10's one table -- with the third article's figures where
 * it has them.  Read from the report's lines only, so that the same tables
 * come from a saved run.
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

void print_delay_tables(const bench_report *rep, const http_exp *x, long pool, const point *ran, int nran,
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

void print_every10_table(const bench_report *rep, const http_exp *x, const point *ran, int nran,
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

