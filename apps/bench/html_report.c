/*
 * html_report.c -- `weft-bench report DIR [--from FILE] [--only EXP,...]`:
 * one self-contained HTML page with every experiment drawn against its
 * peers and the articles' figures.
 *
 * Where the numbers come from.  Without --from, every experiment runs
 * through bench/compare.sh (the same drivers, the same sitting rules as by
 * hand), one after the other, with this weft-bench as $WEFT_BENCH; what each
 * prints on stdout is appended to DIR/lines.txt, with a "# report: ..."
 * comment before it (what ran, when) and after it (its exit status).  With
 * --from FILE, FILE plays the part of DIR/lines.txt: lines saved earlier.
 * Either way the page is DIR/report.html, drawn from these lines only:
 *   - result lines "experiment=E peer=P key=value ..." (and run.sh's
 *     "SUMMARY experiment=..." lines, whose median is their value), parsed
 *     by br_parse;
 *   - "# machine ..." lines (weft-bench's): the machine facts;
 *   - every other "# ..." line: the commands that ran and their notes
 *     ("# compare.sh ...", "# run.sh ...", "# speed ...", "# skipped ..."),
 *     shown verbatim;
 *   - anything else (weft-bench's text tables) is not read.
 * Plus the articles' published figures, which are in no line: they are in
 * the ARTICLE tables below, each citing its article (../shared/seeds).
 *
 * The rule for numbers.  A number printed from a line is printed as the
 * line has it -- no rounding, no unit change -- with the digits of its
 * integer part grouped by threes with a narrow no-break space (U+202F) when
 * it has five or more, and a SUMMARY's "[min..max]" left off.  Such a
 * number sits in an element of class "v"; the articles' figures in class
 * "art"; the axes' tick labels (computed, not data) in class "tick".  The
 * test (tests/report_test.py) takes the numbers out of the "v" elements,
 * removes the grouping and finds each among the numbers of the lines.
 * Computed quantities (ratios, sums) are never printed: the "# speed" lines
 * of weft-bench parallel already say them.
 *
 * Which line a chart uses.  Several lines can describe the same point (run.sh
 * prints every repetition, then one with rep=median; a sitting may be
 * repeated): a line with rep=median or reps= (a summary) wins over one
 * without, and among equals the later line wins -- the last sitting.
 * Lines whose status is not ok still show in tables (with their status);
 * charts draw only the values they have.
 *
 * Drawing.  chart.c draws (inline SVG: bar charts, line charts over
 * categories); this file picks the lines and fills the charts.  No script,
 * no external fetch; CSS inline, @media print keeps each figure on one page.
 * All text from the lines goes through html_esc.
 *
 * Memory: the lines are read into one growing array (a bench_result is
 * 8 KiB; a full report is a few hundred lines), freed at the end.  Single
 * threaded; errors return -errno with a message on stderr.
 */
#define _GNU_SOURCE
#include "bench.h"
#include "chart.h"
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* the lines                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct lines {
    bench_result *r; /* result lines, in file order */
    int n, cap;
    char **comment;  /* "# ..." lines other than "# machine", verbatim */
    int ncomment, capcomment;
    char **machine;  /* distinct "# machine ..." lines, without "# machine " */
    int nmachine, capmachine;
} lines;

static int push_str(char ***arr, int *n, int *cap, const char *s) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        char **a = realloc(*arr, (size_t)nc * sizeof *a);
        if (!a) return -ENOMEM;
        *arr = a;
        *cap = nc;
    }
    if (!((*arr)[*n] = strdup(s))) return -ENOMEM;
    (*n)++;
    return 0;
}

static void lines_free(lines *L) {
    free(L->r);
    for (int i = 0; i < L->ncomment; i++) free(L->comment[i]);
    for (int i = 0; i < L->nmachine; i++) free(L->machine[i]);
    free(L->comment);
    free(L->machine);
    memset(L, 0, sizeof *L);
}

static int lines_read(lines *L, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        fprintf(stderr, "weft-bench report: %s: %s\n", path, strerror(e));
        return -e;
    }
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t len;
    int r = 0, lineno = 0, bad = 0;
    while (r == 0 && (len = getline(&buf, &bcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
        const char *s = buf + strspn(buf, " \t");
        if (*s == '#') {
            if (strncmp(s, "# machine ", 10) == 0) {
                /* one entry per machine: the facts without date=, then "\t" and the dates */
                char facts[1024], date[64] = "";
                snprintf(facts, sizeof facts, "%s", s + 10);
                char *d = strstr(facts, " date=");
                if (d) {
                    char *end = d + 6 + strcspn(d + 6, " ");
                    snprintf(date, sizeof date, "%.*s", (int)(end - d - 6), d + 6);
                    memmove(d, end, strlen(end) + 1);
                }
                int k;
                size_t fl = strlen(facts);
                for (k = 0; k < L->nmachine; k++)
                    if (strncmp(L->machine[k], facts, fl) == 0 && L->machine[k][fl] == '\t') break;
                if (k == L->nmachine) {
                    char entry[1100];
                    snprintf(entry, sizeof entry, "%s\t%s", facts, date);
                    r = push_str(&L->machine, &L->nmachine, &L->capmachine, entry);
                } else if (date[0]) {
                    size_t ol = strlen(L->machine[k]);
                    char *grown = realloc(L->machine[k], ol + strlen(date) + 2);
                    if (!grown) { r = -ENOMEM; continue; }
                    snprintf(grown + ol, strlen(date) + 2, " %s", date);
                    L->machine[k] = grown;
                }
            } else {
                r = push_str(&L->comment, &L->ncomment, &L->capcomment, s);
            }
            continue;
        }
        if (!strstr(s, "experiment=")) continue; /* weft-bench's text tables */
        if (L->n == L->cap) {
            int nc = L->cap ? L->cap * 2 : 64;
            bench_result *a = realloc(L->r, (size_t)nc * sizeof *a);
            if (!a) { r = -ENOMEM; break; }
            L->r = a;
            L->cap = nc;
        }
        if (strlen(s) >= 4000 || br_parse(&L->r[L->n], s) != 0) {
            if (bad++ < 5) fprintf(stderr, "weft-bench report: %s:%d: not a result line (needs experiment= and peer=), left out\n", path, lineno);
            continue;
        }
        L->n++;
    }
    if (r == 0 && ferror(f)) r = -EIO;
    if (r < 0) fprintf(stderr, "weft-bench report: reading %s: %s\n", path, strerror(-r));
    free(buf);
    fclose(f);
    return r;
}

static int is(const bench_result *r, const char *key, const char *val) {
    const char *v = br_get(r, key);
    return v && strcmp(v, val) == 0;
}

/* 2 for a summary (rep=median, reps=N), 1 for any other line. */
static int line_rank(const bench_result *r) {
    return is(r, "rep", "median") || br_get(r, "reps") ? 2 : 1;
}

/* A bar from line r's key (and err_key for whiskers); NULL when r lacks key. */
static int is_ok(const bench_result *r) {
    const char *st = br_get(r, "status");
    return !st || strncmp(st, "ok", 2) == 0;
}

/* A bar for r's value of key, with r's status as its note when that is not
 * ok.  A failed line without the value gets a bar all the same, empty, its
 * note saying so ("failed: error -EAGAIN"): weft's failures and the peers'
 * are drawn alike, and neither vanishes from its chart.  NULL: r is ok and
 * has no such value (or the chart is full). */
static bar *bars_from(bars *B, const bench_result *r, const char *label, const char *key, const char *err_key,
                      const char *color_name) {
    double v;
    int have = br_num(r, key, &v);
    if (!have && is_ok(r)) return NULL;
    bar *b = bars_add(B, is(r, "peer", "weft") || strncmp(br_get(r, "peer"), "weft", 4) == 0 ? K_WEFT : K_PEER, label);
    if (!b) return NULL;
    b->v = have ? v : 0;
    snprintf(b->raw, sizeof b->raw, "%s", have ? br_get(r, key) : "");
    double e;
    if (err_key && br_num(r, err_key, &e)) {
        b->err = e;
        snprintf(b->raw_err, sizeof b->raw_err, "%s", br_get(r, err_key));
    }
    const char *st = br_get(r, "status");
    if (st && strncmp(st, "ok", 2) != 0) {
        const char *why = br_get(r, "err");
        if (!why) why = br_get(r, "stopped_by");
        snprintf(b->note, sizeof b->note, "%s%.20s%s%.20s", have ? "" : "failed: ", st, why ? " " : "",
                 why ? why : "");
    }
    b->color = color_for(color_name ? color_name : br_get(r, "peer"), b->kind);
    return b;
}

/* ------------------------------------------------------------------------ */
/* the articles' figures (../shared/seeds/README.md, the articles there)    */
/* ------------------------------------------------------------------------ */

/* "Java 21 virtual threads: benchmarks, thread pools, when to use them"
 * (seeds 002): 3000 requests, 100 ms of simulated I/O each; platform = a
 * pool of 200 threads. */
static const struct {
    long c, n;
    const char *rps_platform, *rps_virtual, *p95_platform, *p95_virtual;
} ART_JAVA21[] = {
    {50, 3000, "467", "455", "108", "110"},
    {150, 3000, "1316", "1289", "111", "113"},
    {300, 3000, "1769", "2297", "212", "116"},
    {500, 3000, "1780", "3451", "362", "136"},
    {1000, 3000, "1755", "5071", "711", "260"},
};

/* "How Loom fixes Java's concurrency model" (seeds 003). */
static const struct { const char *label, *value, *note; } ART_LOOM_THREADS[] = {
    {"article: platform threads (Java)", "32539", "crashed"},
    {"article: virtual threads (Java, 64 GB)", "14625956", "hung, did not crash"},
};
static const struct { const char *label, *wall_s; } ART_LOOM_SLEEP[] = {
    {"article: thread-per-task (Java 19)", "18.77"},
    {"article: cached pool (Java 19)", "11.52"},
    {"article: virtual threads (Java 19)", "2.62"},
};

/* "Java 7 NIO.2 file channels on the test bench" (seeds 001), i5-2310,
 * 5-byte writes per second. */
static const struct { const char *label, *ops; } ART_FILE[] = {
    {"article: FileOutputStream (Java 7)", "367806"},
    {"article: AsynchronousFileChannel (Java 7)", "190226"},
};

/* "Concurrency in modern languages: Java" (seeds 000): ab -c 100 -n 10000,
 * every 10th request sleeps 2 s. */
static const struct { const char *label, *rps; } ART_EVERY10[] = {
    {"article: thread per connection (Java)", "491.98"},
    {"article: async (Java)", "494.00"},
};

/* ------------------------------------------------------------------------ */
/* the sections                                                              */
/* ------------------------------------------------------------------------ */

static int count_exp(const lines *L, const char *exp) {
    int n = 0;
    for (int i = 0; i < L->n; i++) n += is(&L->r[i], "experiment", exp);
    return n;
}

/* A bar label: the peer, then the keys that tell its lines apart. */
static void label_of(char *out, size_t len, const bench_result *r, const char *prefix, const char *size_key,
                     const char *usual_size) {
    const char *peer = br_get(r, "peer");
    int n = snprintf(out, len, "%s%s", prefix ? prefix : "", peer);
    static const char *const extra[] = {"executor", "mode", "workload", "cpu", "carriers", "pool"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && (size_t)n < len; i++) {
        const char *v = br_get(r, extra[i]);
        if (!v || (strcmp(extra[i], "mode") == 0 && strncmp(peer, "weft", 4) != 0 && strstr(peer, v))) continue;
        if (strcmp(extra[i], "executor") == 0 && strcmp(v, "virtual") == 0) continue;
        if (strcmp(extra[i], "carriers") == 0 && !is(r, "experiment", "parallel")) continue;
        if (strcmp(extra[i], "workload") == 0) continue; /* the chart's group says it */
        if (strcmp(extra[i], "carriers") == 0) n += snprintf(out + n, len - (size_t)n, " carriers=%s", v);
        else n += snprintf(out + n, len - (size_t)n, " %s", v);
    }
    if (size_key && (size_t)n < len) {
        const char *v = br_get(r, size_key);
        if (v && (!usual_size || strcmp(v, usual_size) != 0))
            snprintf(out + n, len - (size_t)n, " (%s=%s)", size_key, v);
    }
}

/* Keeps, of the lines of exp matching filter, the best one per label (see
 * "Which line a chart uses"); idx gets their indexes in first-seen order. */
static int pick(const lines *L, const char *exp, const char *size_key, const char *usual,
                int (*filter)(const bench_result *), int *idx, int max) {
    char labels[MAX_BARS][96];
    int n = 0;
    for (int i = 0; i < L->n; i++) {
        const bench_result *r = &L->r[i];
        if (!is(r, "experiment", exp) || (filter && !filter(r))) continue;
        char lab[96];
        label_of(lab, sizeof lab, r, NULL, size_key, usual);
        int k;
        for (k = 0; k < n; k++)
            if (strcmp(labels[k], lab) == 0) break;
        if (k == n) {
            if (n == max || n == MAX_BARS) continue;
            snprintf(labels[n], sizeof labels[n], "%s", lab);
            idx[n++] = i;
        } else if (line_rank(r) >= line_rank(&L->r[idx[k]])) {
            idx[k] = i;
        }
    }
    /* weft's lines first, the peers' after, each in first-seen order */
    int out[MAX_BARS], m = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < n; k++)
            if ((strncmp(br_get(&L->r[idx[k]], "peer"), "weft", 4) == 0) == !pass) out[m++] = idx[k];
    memcpy(idx, out, (size_t)n * sizeof *idx);
    return n;
}

static void section(FILE *f, const char *id, const char *title, const char *intro) {
    fprintf(f, "<section id=\"%s\">\n<h2>", id);
    html_esc(f, title);
    fputs("</h2>\n<p class=\"intro\">", f);
    html_esc(f, intro);
    fputs("</p>\n", f);
}

static const char LEGEND_BARS[] =
    "<p class=\"key\"><span class=\"sw\" style=\"background:#1f5fbf\"></span>weft "
    "<span class=\"sw\" style=\"background:#2f9e44\"></span>Go "
    "<span class=\"sw\" style=\"background:#e8590c\"></span>Java 25 "
    "<span class=\"sw\" style=\"background:#8c564b\"></span>Java 17 "
    "<span class=\"sw\" style=\"background:#6c757d\"></span>C "
    "<span class=\"sw\" style=\"background:#a0a0a0\"></span>the article's figure (published, "
    "not measured here) -- other colours: other peers, named on their bars</p>\n";

static void sec_loom(FILE *f, const lines *L) {
    section(f, "loom", "How Loom fixes Java's concurrency model: threads and sleeping tasks",
            "The Loom article (Deepu K Sasidharan) creates threads that block forever until creation fails, "
            "and runs 100,000 tasks that each sleep 1 s. weft-bench threads / sleep-tasks against the peers' "
            "park-many / sleep-tasks and the article's figures (i9-11900H, 64 GB).");
    fputs(LEGEND_BARS, f);
    int idx[MAX_BARS], n;
    bars *B = calloc(1, sizeof *B);
    if (!B) return;
    /* threads created: log scale, the article's two counts beside */
    const char *exps[] = {"threads", "park-many"};
    for (int e = 0; e < 2; e++) {
        n = pick(L, exps[e], "n", NULL, NULL, idx, MAX_BARS);
        for (int k = 0; k < n; k++) {
            const bench_result *r = &L->r[idx[k]];
            char lab[96];
            label_of(lab, sizeof lab, r, NULL, "n", NULL);
            if (!bars_from(B, r, lab, "created", NULL, NULL)) bars_from(B, r, lab, "n", NULL, NULL);
        }
    }
    if (B->n == 0) missing(f, "no threads or park-many lines", "bench/compare.sh threads");
    else
        for (size_t a = 0; a < sizeof ART_LOOM_THREADS / sizeof ART_LOOM_THREADS[0]; a++)
            bars_art(B, ART_LOOM_THREADS[a].label, ART_LOOM_THREADS[a].value, ART_LOOM_THREADS[a].note);
    bar_chart(f, "Threads that park forever, created in one process (n = the run's target; a failed run shows where it stopped)",
              "threads created", B, 1);
    B->n = 0;
    for (int e = 0; e < 2; e++) {
        n = pick(L, exps[e], "n", NULL, NULL, idx, MAX_BARS);
        for (int k = 0; k < n; k++) {
            char lab[96];
            label_of(lab, sizeof lab, &L->r[idx[k]], NULL, "n", NULL);
            bars_from(B, &L->r[idx[k]], lab, "rss_per_task_b", NULL, NULL);
        }
    }
    bar_chart(f, "Memory per parked thread (growth of RSS / threads)", "bytes per thread", B, 0);
    B->n = 0;
    n = pick(L, "sleep-tasks", "n", "100000", NULL, idx, MAX_BARS);
    for (int k = 0; k < n; k++) {
        char lab[96];
        label_of(lab, sizeof lab, &L->r[idx[k]], NULL, "n", "100000");
        bars_from(B, &L->r[idx[k]], lab, "wall_s", NULL, NULL);
    }
    if (B->n == 0) missing(f, "no sleep-tasks lines", "bench/compare.sh sleep-tasks");
    else
        for (size_t a = 0; a < sizeof ART_LOOM_SLEEP / sizeof ART_LOOM_SLEEP[0]; a++)
            bars_art(B, ART_LOOM_SLEEP[a].label, ART_LOOM_SLEEP[a].wall_s, NULL);
    bar_chart(f, "100,000 tasks that each sleep 1 s, all waited for: wall time (lower is better; other n shown as (n=...))",
              "wall time, s", B, 0);
    free(B);
    fputs("</section>\n", f);
}

/* rps / p95 against concurrency: weft's lines of wexp, the peers' of pexp. */
static void http_charts(FILE *f, const lines *L, const char *wexp, const char *pexp, int article, const char *what) {
    catchart *C = calloc(2, sizeof *C);
    if (!C) return;
    catchart *P = &C[1];
    for (int pass = 0; pass < 2; pass++) {
        catchart *X = pass ? P : C;
        const char *key = pass ? "p95_ms" : "rps";
        for (int i = 0; i < L->n; i++) {
            const bench_result *r = &L->r[i];
            int weft = is(r, "experiment", wexp);
            if (!weft && !(pexp && is(r, "experiment", pexp))) continue;
            double c, n;
            if (!br_num(r, "concurrency", &c) || !br_num(r, "n", &n) || !br_get(r, key)) continue;
            int ci = cat_index(X, (long)c, (long)n, 1);
            const char *peer = br_get(r, "peer");
            series_put(series_get(X, peer, strncmp(peer, "weft", 4) == 0 ? K_WEFT : K_PEER), ci, br_get(r, key),
                       line_rank(r));
            if (weft && !pass) {
                const char *lim = br_get(r, "limit_rps"), *abc = br_get(r, "ab_ceiling_rps");
                if (lim) series_put(series_get(X, "Little's-law limit", K_BOUND), ci, lim, 0);
                if (abc && strtod(abc, NULL) > 0)
                    series_put(series_get(X, "ab's ceiling", K_BOUND), ci, abc, 0);
            }
        }
        if (article) {
            int any = X->ncat > 0;
            for (size_t a = 0; any && a < sizeof ART_JAVA21 / sizeof ART_JAVA21[0]; a++) {
                int ci = cat_index(X, ART_JAVA21[a].c, ART_JAVA21[a].n, 1);
                series_put(series_get(X, "article: virtual (Java 21)", K_ART), ci,
                           pass ? ART_JAVA21[a].p95_virtual : ART_JAVA21[a].rps_virtual, 0);
                series_put(series_get(X, "article: pool of 200 (Java 21)", K_ART), ci,
                           pass ? ART_JAVA21[a].p95_platform : ART_JAVA21[a].rps_platform, 0);
            }
            /* the two article series get colours of their own */
            for (int s = 0; s < X->nser; s++)
                if (X->s[s].kind == K_ART)
                    X->s[s].color = strstr(X->s[s].name, "virtual") ? "#868e96" : "#c0a080";
        }
        cat_sort(X);
        /* legend order: weft, peers, the article, the bounds (stable) */
        for (int i = 1; i < X->nser; i++)
            for (int j = i; j > 0 && X->s[j - 1].kind > X->s[j].kind; j--) {
                series t = X->s[j];
                X->s[j] = X->s[j - 1];
                X->s[j - 1] = t;
            }
    }
    char title[256];
    snprintf(title, sizeof title, "%s: requests per second against concurrency (higher is better)", what);
    line_chart(f, title, "requests per second", C);
    snprintf(title, sizeof title, "%s: 95th percentile latency against concurrency (lower is better)", what);
    line_chart(f, title, "p95 latency, ms", P);
    free(C);
    /* a point that failed has no rps to draw: it is named under the charts
     * (the bar charts give it an empty bar and a note) */
    int any = 0;
    for (int i = 0; i < L->n; i++) {
        const bench_result *r = &L->r[i];
        if (!is(r, "experiment", wexp) && !(pexp && is(r, "experiment", pexp))) continue;
        if (is_ok(r) || br_get(r, "rps")) continue;
        fputs(any++ ? "; " : "<p class=\"failed\">Failed, with nothing to draw: ", f);
        const char *keys[] = {"peer", "concurrency", "n", "status", "err"};
        const char *pre[] = {"", " C=", " n=", ": ", " "};
        for (int k = 0; k < 5; k++) {
            const char *v = br_get(r, keys[k]);
            if (!v) continue;
            fputs(pre[k], f);
            html_esc(f, v);
        }
    }
    if (any) fputs(".</p>\n", f);
}

static void sec_http(FILE *f, const lines *L) {
    section(f, "java21", "Java 21 virtual threads: a server whose requests wait 100 ms",
            "weft-httpd --delay-ms 100 under ab -r without keep-alive (weft-bench http-delay: models virtual, "
            "pool:200 ...) against the peers' delay100 servers (Go, Java 25 virtual threads, Java 17 with a pool "
            "of 200), the article's figures (3000 requests; platform = Tomcat-like pool of 200), Little's-law limit "
            "C / 0.1 s and the most ab lets any server reach (ab sends its first request alone).");
    if (count_exp(L, "http-delay") + count_exp(L, "delay100") == 0)
        missing(f, "no http-delay or delay100 lines", "bench/compare.sh http-delay");
    http_charts(f, L, "http-delay", "delay100", 1, "100 ms per request");
    /* every 10th request sleeps 2 s: bars */
    bars *B = calloc(1, sizeof *B);
    if (!B) return;
    int idx[MAX_BARS], n;
    const char *exps[] = {"http-every10", "delay2s-every10"};
    for (int e = 0; e < 2; e++) {
        n = pick(L, exps[e], NULL, NULL, NULL, idx, MAX_BARS);
        for (int k = 0; k < n; k++) {
            char lab[96];
            label_of(lab, sizeof lab, &L->r[idx[k]], NULL, NULL, NULL);
            bars_from(B, &L->r[idx[k]], lab, "rps", NULL, NULL);
        }
    }
    int measured = B->n;
    for (size_t a = 0; a < sizeof ART_EVERY10 / sizeof ART_EVERY10[0]; a++)
        bars_art(B, ART_EVERY10[a].label, ART_EVERY10[a].rps, NULL);
    if (!measured) B->n = 0;
    bar_chart(f, "Every 10th request sleeps 2 s, ab -r -c 100 -n 10000 (\"Concurrency in modern languages: Java\"; limit 500/s)",
              "requests per second", B, 0);
    free(B);
    fputs("</section>\n", f);
    if (count_exp(L, "http-db")) {
        section(f, "httpdb", "A real database: SELECT pg_sleep(0.1) per request",
                "weft-bench http-db: examples/http_db.c on blocking libpq (models virtual, pool:200) and the Java "
                "peers on JDBC (Java 25 virtual threads, Java 17 pool of 200), 200 pooled connections; the limit "
                "and ab's ceiling count min(C, pool).");
        http_charts(f, L, "http-db", NULL, 0, "pg_sleep(0.1) per request");
        fputs("</section>\n", f);
    }
}

static void sec_file(FILE *f, const lines *L) {
    section(f, "file", "Java 7 NIO.2 file channels: 5-byte writes per second",
            "weft-bench file-write (write(2), weft_file_write from 1 and 100 vthreads, asynchronous with futures "
            "and handlers) against the peers (C write and io_uring, Java 17 FileOutputStream and "
            "AsynchronousFileChannel) and the article's figures (i5-2310): mean of 5 one-second intervals after "
            "2 warm-up ones, whiskers +- the sample standard deviation.");
    fputs(LEGEND_BARS, f);
    bars *B = calloc(1, sizeof *B);
    if (!B) return;
    int idx[MAX_BARS];
    int n = pick(L, "file-write", "size", "5", NULL, idx, MAX_BARS);
    for (int pass = 0; pass < 2; pass++) /* weft first, then the peers */
        for (int k = 0; k < n; k++) {
            const bench_result *r = &L->r[idx[k]];
            if (is(r, "peer", "weft") != !pass) continue;
            char lab[96];
            label_of(lab, sizeof lab, r, NULL, "size", "5");
            bars_from(B, r, lab, "ops_s_mean", "ops_s_stddev", NULL);
        }
    int measured = B->n;
    for (size_t a = 0; a < sizeof ART_FILE / sizeof ART_FILE[0]; a++) bars_art(B, ART_FILE[a].label, ART_FILE[a].ops, NULL);
    if (!measured) {
        B->n = 0;
        missing(f, "no file-write lines", "bench/compare.sh file-write");
    }
    bar_chart(f, "Writes per second (mean +- standard deviation; higher is better)", "writes per second", B, 0);
    free(B);
    fputs("</section>\n", f);
}

static const struct micro_group {
    const char *title;
    const char *key;
    const char *weft_exps[6];
    const char *peer_exp;
} MICRO[] = {
    {"context switch: yield, park/unpark hand-off, channel ping-pong", "ns_per_switch",
     {"switch", "pingpong", "pingpong-cross", "chan-pingpong", "chan-buffered"}, "switch"},
    {"spawn + join a trivial thread", "ns_per_task", {"spawn-join"}, "spawn-join"},
    {"contended mutex, 1000 threads x 1000", "ns_per_op", {"mutex"}, "mutex"},
    {"select over 4 channels", "ns_per_op", {"select"}, "select"},
    {"1-byte pipe write + read on a vthread", "ns_per_write_read", {"hook"}, NULL},
};

static void sec_micro(FILE *f, const lines *L) {
    section(f, "micro", "Micro benchmarks",
            "weft-bench micro against the peers' switch (Boost.Context, Go's Gosched and channels, two pthreads "
            "on a futex), spawn-join, mutex and select: nanoseconds per operation, log scale (lower is better).");
    fputs(LEGEND_BARS, f);
    bars *B = calloc(1, sizeof *B);
    if (!B) return;
    int idx[MAX_BARS];
    for (size_t g = 0; g < sizeof MICRO / sizeof MICRO[0]; g++) {
        const struct micro_group *G = &MICRO[g];
        int head = B->n;
        bars_add(B, K_HEAD, G->title);
        for (int e = 0; e < 6 && G->weft_exps[e]; e++) {
            int n = pick(L, G->weft_exps[e], NULL, NULL, NULL, idx, MAX_BARS);
            for (int k = 0; k < n; k++) {
                if (!is(&L->r[idx[k]], "peer", "weft")) continue; /* the peers' switch lines come below */
                char lab[96];
                label_of(lab, sizeof lab, &L->r[idx[k]], NULL, NULL, NULL);
                char wl[96]; /* "weft MODE" -> "weft EXP MODE" */
                snprintf(wl, sizeof wl, "weft %s%.60s", G->weft_exps[e], lab + 4);
                bars_from(B, &L->r[idx[k]], wl, G->key, NULL, NULL);
            }
        }
        if (G->peer_exp) {
            int n = pick(L, G->peer_exp, NULL, NULL, NULL, idx, MAX_BARS);
            for (int k = 0; k < n; k++) {
                if (is(&L->r[idx[k]], "peer", "weft")) continue;
                char lab[96];
                label_of(lab, sizeof lab, &L->r[idx[k]], NULL, NULL, NULL);
                bars_from(B, &L->r[idx[k]], lab, G->key, NULL, NULL);
            }
        }
        if (B->n == head + 1) B->n = head; /* nothing in this group */
    }
    if (B->n == 0) missing(f, "no micro lines", "bench/compare.sh micro");
    bar_chart(f, "Nanoseconds per operation (lower is better)", "ns per operation", B, 1);
    free(B);
    fputs("</section>\n", f);
}

static int workload_is(const bench_result *r, const char *w) { return is(r, "workload", w); }
static int wl_uniform(const bench_result *r) { return workload_is(r, "uniform"); }
static int wl_skewed(const bench_result *r) { return workload_is(r, "skewed"); }
static int wl_mixed(const bench_result *r) { return workload_is(r, "mixed"); }

static void comments_with(FILE *f, const lines *L, const char *const prefixes[]) {
    int any = 0;
    for (int i = 0; i < L->ncomment; i++)
        for (int p = 0; prefixes[p]; p++)
            if (strncmp(L->comment[i], prefixes[p], strlen(prefixes[p])) == 0) {
                fputs(any++ ? "\n" : "<pre class=\"lines\">", f);
                html_esc(f, L->comment[i]);
                break;
            }
    if (any) fputs("</pre>\n", f);
}

static void sec_parallel(FILE *f, const lines *L) {
    section(f, "parallel", "CPU-bound work: weft_parallel_reduce against OpenMP, pthreads and Java 17 streams",
            "weft-bench parallel, every peer in the same run: uniform = sum of sqrt(i), skewed = the upper half of "
            "a Mandelbrot, a row per index; wall time is the median of the run's repetitions (lower is better). "
            "The mixed run: HTTP p99 while a CPU job runs in the same process.");
    if (count_exp(L, "parallel") == 0) {
        missing(f, "no parallel lines", "bench/compare.sh parallel");
        fputs("</section>\n", f);
        return;
    }
    fputs(LEGEND_BARS, f);
    bars *B = calloc(1, sizeof *B);
    if (!B) return;
    int idx[MAX_BARS];
    static const struct { const char *name; int (*filter)(const bench_result *); } W[] = {
        {"uniform", wl_uniform}, {"skewed", wl_skewed}};
    for (int w = 0; w < 2; w++) {
        int head = B->n;
        bars_add(B, K_HEAD, W[w].name);
        int n = pick(L, "parallel", NULL, NULL, W[w].filter, idx, MAX_BARS);
        for (int k = 0; k < n; k++) {
            char lab[96];
            label_of(lab, sizeof lab, &L->r[idx[k]], NULL, NULL, NULL);
            bars_from(B, &L->r[idx[k]], lab, "wall_s", NULL, NULL);
        }
        if (B->n == head + 1) B->n = head;
    }
    bar_chart(f, "Wall time of one pass over the workload (carriers N: weft at N carriers)", "wall time, s", B, 0);
    B->n = 0;
    int n = pick(L, "parallel", NULL, NULL, wl_mixed, idx, MAX_BARS);
    for (int k = 0; k < n; k++) {
        char lab[96];
        const bench_result *r = &L->r[idx[k]];
        snprintf(lab, sizeof lab, "weft-httpd, CPU job: %.40s", br_get(r, "cpu") ? br_get(r, "cpu") : "?");
        bars_from(B, r, lab, "p99_ms", NULL, NULL);
    }
    bar_chart(f, "Mixed: HTTP p99 with no CPU job, the job in the shared carriers, the job in a group of its own",
              "p99 latency, ms", B, 0);
    free(B);
    static const char *const pre[] = {"# speed", "# scaling", "# mixed", "# skipped", NULL};
    comments_with(f, L, pre);
    fputs("</section>\n", f);
}

static void sec_machine(FILE *f, lines *L, const char *from) {
    fputs("<section id=\"machine\">\n<h2>The machine and the commands</h2>\n", f);
    if (L->nmachine == 0) {
        fputs("<p class=\"missing\">No data: no \"# machine\" line (weft-bench prints one at its start).</p>\n", f);
    } else {
        fputs("<table class=\"data mach\"><tr><th>the machine (weft-bench's \"# machine\" lines)</th>"
              "<th>date= of each such line</th></tr>\n", f);
        for (int i = 0; i < L->nmachine; i++) {
            char *tab = strchr(L->machine[i], '\t');
            fputs("<tr><td class=\"lines\">", f);
            *tab = '\0';
            html_esc(f, L->machine[i]);
            fputs("</td><td class=\"lines\">", f);
            html_esc(f, tab + 1);
            *tab = '\t';
            fputs("</td></tr>\n", f);
        }
        fputs("</table>\n", f);
    }
    fputs("<p>The commands that ran and their notes, as the lines have them (from ", f);
    html_esc(f, from);
    fputs("):</p>\n", f);
    if (L->ncomment == 0) {
        fputs("<p class=\"missing\">No data: no \"#\" line in the file.</p>\n", f);
    } else {
        fputs("<pre class=\"lines\">", f);
        for (int i = 0; i < L->ncomment; i++) {
            if (i) fputc('\n', f);
            html_esc(f, L->comment[i]);
        }
        fputs("</pre>\n", f);
    }
    fputs("</section>\n", f);
}

static const char CSS[] =
    "body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;color:#111;margin:24px;max-width:1000px}"
    "h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;border-bottom:1px solid #999;margin-top:28px}"
    "p{font-size:13px;line-height:1.45}.intro{color:#333}.missing{color:#a61e1e;font-weight:bold}"
    ".failed{color:#a61e1e}"
    "figure{margin:12px 0 20px;break-inside:avoid;page-break-inside:avoid}"
    "figcaption{font-size:14px;font-weight:bold;margin-bottom:4px}"
    "svg{display:block;max-width:100%;height:auto;font-size:12px}"
    "svg text{fill:#111}.tick{font-size:11px;fill:#333}.small{font-size:10px}"
    ".axlabel{font-size:12px;font-style:italic}.label{font-size:12px}.artlabel{font-style:italic}"
    ".grouphead{font-size:12px;font-weight:bold}.val{font-size:11px}.note{fill:#a61e1e}"
    ".grid{stroke:#ddd;stroke-width:1}.axis{stroke:#222;stroke-width:1}.whisker{stroke:#111;stroke-width:1.3;fill:none}"
    ".artbar{stroke:#555;stroke-width:.6;stroke-dasharray:3 2}.legend{font-size:12px}"
    "table.data{border-collapse:collapse;font-size:11.5px;margin-top:6px}"
    "table.data td,table.data th{border:1px solid #bbb;padding:2px 6px;text-align:right}table.mach td{text-align:left}"
    "table.data th{background:#eee}td.art{font-style:italic;color:#555}"
    "pre.lines{font-size:10.5px;white-space:pre-wrap;word-break:break-all;background:#f6f6f6;padding:6px;"
    "border:1px solid #ddd}"
    ".key{font-size:12px}.sw{display:inline-block;width:11px;height:11px;margin:0 3px 0 10px;vertical-align:-1px}"
    "nav{font-size:13px}"
    "@media print{body{margin:0;max-width:none}h2{break-after:avoid}a{color:#111;text-decoration:none}"
    "*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}";

static int write_html(const char *out, lines *L, const char *from) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", out);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        int e = errno;
        fprintf(stderr, "weft-bench report: %s: %s\n", tmp, strerror(e));
        return -e;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<title>weft-bench report</title>\n<style>",
          f);
    fputs(CSS, f);
    fputs("</style></head><body>\n<h1>weft-bench report: every experiment against its peers</h1>\n<p>Drawn from ", f);
    html_esc(f, from);
    fprintf(f, ". Numbers on this page are the lines' own, digits grouped by threes; the "
               "articles' published figures are in italics and grey (dashed lines and bars); axis ticks are "
               "computed.</p>\n");
    fputs("<nav><a href=\"#loom\">threads and sleep-tasks</a> \xc2\xb7 <a href=\"#java21\">HTTP with a 100 ms wait</a>"
          " \xc2\xb7 <a href=\"#file\">file writes</a> \xc2\xb7 <a href=\"#micro\">micro</a> \xc2\xb7 "
          "<a href=\"#parallel\">parallel</a> \xc2\xb7 ",
          f);
    if (count_exp(L, "http-db")) fputs("<a href=\"#httpdb\">HTTP with a database</a> \xc2\xb7 ", f);
    fputs("<a href=\"#machine\">machine and commands</a></nav>\n", f);
    sec_loom(f, L);
    sec_http(f, L);
    sec_file(f, L);
    sec_micro(f, L);
    sec_parallel(f, L);
    sec_machine(f, L, from);
    fputs("</body></html>\n", f);
    int r = 0;
    if (ferror(f)) r = -EIO;
    if (fclose(f) != 0 && r == 0) r = -errno;
    if (r == 0 && rename(tmp, out) != 0) r = -errno;
    if (r < 0) {
        fprintf(stderr, "weft-bench report: writing %s: %s\n", out, strerror(-r));
        unlink(tmp);
    }
    return r;
}

/* ------------------------------------------------------------------------ */
/* running the experiments                                                   */
/* ------------------------------------------------------------------------ */

static const char *const ALL_EXPS[] = {"threads", "sleep-tasks", "micro", "file-write", "http-delay",
                                       "http-every10", "http-db", "parallel", NULL};

static int known_exp(const char *e) {
    for (int i = 0; ALL_EXPS[i]; i++)
        if (strcmp(ALL_EXPS[i], e) == 0) return 1;
    return 0;
}

static void utc_now(char *out, size_t len) {
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm)) snprintf(out, len, "unknown");
}

/* Whether --only's list (NULL: all) names exp. */
static int chosen(const char *exp, const char *only) {
    if (!only) return 1;
    char pat[64], list[1024];
    snprintf(pat, sizeof pat, ",%s,", exp);
    snprintf(list, sizeof list, ",%s,", only);
    return strstr(list, pat) != NULL;
}

/* write(2) until all of it is out; 0 or -1 with errno. */
static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One progress line on stderr for a result line that compare.sh printed:
 * what it measured and how it ended, so that a run of an hour shows each
 * point as it lands. */
static void point_progress(const char *line, const char *tag, int k) {
    bench_result *r = malloc(sizeof *r);
    if (!r) return;
    if (br_parse(r, line) == 0) {
        char now[32], what[160];
        utc_now(now, sizeof now);
        int n = snprintf(what, sizeof what, "%s", br_get(r, "peer") ? br_get(r, "peer") : "?");
        const char *keys[] = {"mode", "workload", "concurrency", "n"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && (size_t)n < sizeof what; i++)
            if (br_get(r, keys[i])) n += snprintf(what + n, sizeof what - (size_t)n, " %s=%s", keys[i], br_get(r, keys[i]));
        const char *st = br_get(r, "status"), *err = br_get(r, "err");
        fprintf(stderr, "weft-bench report: %s point %d: %s: %s%s%s (%s)\n", tag, k, what, st ? st : "done",
                err ? " " : "", err ? err : "", now);
    }
    free(r);
}

/* bench/compare.sh EXP, its stdout appended to fd line by line as it comes
 * (a progress line on stderr for each result line); its exit status, or
 * -errno.  The pipe is read until compare.sh has ended and the pipe is
 * empty, not until its end of file: a server or daemon it left behind
 * with our pipe as its stdout would otherwise hold the report for good
 * (appending straight to the file, as before, had no such risk). */
static int run_compare(const char *script, const char *exp, int fd, const char *self, const char *tag) {
    if (setenv("WEFT_BENCH", self, 1) != 0) return -errno;
    char *argv[] = {(char *)script, (char *)exp, NULL};
    launch l;
    launch_opts lo = {.out = LAUNCH_PIPE};
    int e = launch_start(&l, argv, &lo);
    if (e < 0) return e;
    char buf[16384];
    size_t have = 0;
    int points = 0, werr = 0, ended = 0;
    for (;;) {
        struct pollfd pf = {.fd = l.out, .events = POLLIN};
        int pr = poll(&pf, 1, ended ? 0 : 500);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) {
            if (ended) break; /* ended, and nothing more is there */
            e = launch_reap(&l, 0);
            if (e < 0) break;
            ended = e == 1; /* then one more look at the pipe */
            continue;
        }
        ssize_t got = read(l.out, buf + have, sizeof buf - have);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        have += (size_t)got;
        size_t start = 0;
        for (char *nl; (nl = memchr(buf + start, '\n', have - start));) {
            size_t len = (size_t)(nl - (buf + start)) + 1;
            if (!werr && write_all(fd, buf + start, len) < 0) werr = errno;
            *nl = 0;
            if (strncmp(buf + start, "experiment=", 11) == 0 || strncmp(buf + start, "SUMMARY ", 8) == 0)
                point_progress(buf + start, tag, ++points);
            start += len;
        }
        if (start == 0 && have == sizeof buf) { /* a line longer than the buffer: pass it on as it is */
            if (!werr && write_all(fd, buf, have) < 0) werr = errno;
            have = 0;
        } else {
            memmove(buf, buf + start, have - start);
            have -= start;
        }
    }
    if (have && !werr && write_all(fd, buf, have) < 0) werr = errno;
    e = ended ? 1 : launch_reap(&l, -1);
    launch_close(&l);
    if (werr) return -werr;
    if (e < 0) return e;
    int st = l.status;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_all(const char *path, const char *only) {
    char script[4096], self[4096];
    const char *env = getenv("WEFT_COMPARE");
    snprintf(script, sizeof script, "%s", env && *env ? env : WEFT_SOURCE_DIR "/bench/compare.sh");
    if (access(script, X_OK) != 0) {
        fprintf(stderr, "weft-bench report: cannot run %s: %s (set WEFT_COMPARE, or use --from FILE)\n", script,
                strerror(errno));
        return -ENOENT;
    }
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return -errno;
    self[sl] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "weft-bench report: %s: %s\n", path, strerror(e));
        return -e;
    }
    int total = 0, done = 0;
    for (int i = 0; ALL_EXPS[i]; i++) total += chosen(ALL_EXPS[i], only);
    for (int i = 0; ALL_EXPS[i]; i++) {
        const char *exp = ALL_EXPS[i];
        if (!chosen(exp, only)) continue;
        char now[32], tag[96];
        snprintf(tag, sizeof tag, "[%d/%d %s]", ++done, total, exp);
        utc_now(now, sizeof now);
        dprintf(fd, "# report: %s %s (%s)\n", script, exp, now);
        fprintf(stderr, "weft-bench report: %s %s %s (%s) ...\n", tag, script, exp, now);
        int st = run_compare(script, exp, fd, self, tag);
        utc_now(now, sizeof now);
        if (st < 0) dprintf(fd, "# report: %s %s could not start: %s (%s)\n", script, exp, strerror(-st), now);
        else dprintf(fd, "# report: %s %s exit %d (%s)\n", script, exp, st, now);
        if (st != 0) fprintf(stderr, "weft-bench report: compare.sh %s: %s %d; going on\n", exp,
                             st < 0 ? "could not start, errno" : "exit", st < 0 ? -st : st);
    }
    close(fd);
    return 0;
}

static void report_usage(FILE *f) {
    fputs("usage: weft-bench report DIR [--from FILE] [--only EXP[,EXP...]]\n"
          "  Writes DIR/report.html: one self-contained page (inline SVG, no script) with every\n"
          "  experiment drawn against its peers and the articles' figures, the machine facts and\n"
          "  the commands run.  Without --from, runs bench/compare.sh for each experiment\n"
          "  (threads sleep-tasks micro file-write http-delay http-every10 http-db parallel, or\n"
          "  --only's), collecting their lines in DIR/lines.txt -- this takes long; with --from,\n"
          "  draws the result lines saved earlier in FILE.  $WEFT_COMPARE: another compare.sh.\n",
          f);
}

int bench_html_report_main(int argc, char **argv) {
    const char *dir = NULL, *from = NULL, *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            report_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--from") == 0 || strcmp(argv[i], "--only") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, "weft-bench report: %s needs a value\n", argv[i]);
                goto usage;
            }
            if (argv[i][2] == 'f') from = argv[++i];
            else only = argv[++i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "weft-bench report: unknown option '%s'\n", argv[i]);
            goto usage;
        } else if (!dir) {
            dir = argv[i];
        } else {
            fprintf(stderr, "weft-bench report: unexpected argument '%s'\n", argv[i]);
            goto usage;
        }
    }
    if (!dir || !*dir) {
        fprintf(stderr, "weft-bench report: no DIR\n");
        goto usage;
    }
    if (only) {
        char list[1024];
        snprintf(list, sizeof list, "%s", only);
        char *save = NULL;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!known_exp(t)) {
                fprintf(stderr, "weft-bench report: --only: unknown experiment '%s' (threads, sleep-tasks, micro, "
                                "file-write, http-delay, http-every10, http-db, parallel)\n", t);
                goto usage;
            }
        if (from) {
            fprintf(stderr, "weft-bench report: --only chooses what runs; with --from nothing runs\n");
            goto usage;
        }
    }
    if (strlen(dir) > 4000) {
        fprintf(stderr, "weft-bench report: DIR is too long\n");
        return 2;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "weft-bench report: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "weft-bench report: %s is not a directory\n", dir);
        return 1;
    }
    char path[4200], out[4200];
    if (!from) {
        snprintf(path, sizeof path, "%s/lines.txt", dir);
        if (run_all(path, only) < 0) return 1;
        from = path;
    }
    lines L;
    memset(&L, 0, sizeof L);
    int r = lines_read(&L, from);
    if (r == 0 && L.n == 0) fprintf(stderr, "weft-bench report: %s holds no result line; the page says so\n", from);
    snprintf(out, sizeof out, "%s/report.html", dir);
    if (r == 0) r = write_html(out, &L, from);
    lines_free(&L);
    if (r < 0) return 1;
    printf("%s\n", out);
    return 0;
usage:
    report_usage(stderr);
    return 2;
}
