/*
 * report.c -- result lines and the side-by-side table.
 *
 * A result line is "experiment=E peer=P key=value ...", the form the peer
 * programs print through ../shared/peers/runtime/run.sh.  bench.sh's
 * "SUMMARY experiment=... key=median[min..max]" lines are read too; their
 * median is the figure shown.  Lines starting with "#" are comments, even
 * when they quote a result line (run.sh's "# disturbed ..., repeating: ...").
 *
 * The table: for each weft result, one row for weft, one per figure from the
 * article, and one per peer line of the matching peer experiment (weft's
 * "threads" is the peers' "park-many"; "pingpong" and "pingpong-cross" are
 * compared with "switch").  Next to a peer's figure stands the ratio
 * weft/peer:
 *   - always for per-operation figures (ns_per_switch, ns_per_task,
 *     rss_per_task_b), which do not depend on the run's size;
 *   - for totals (wall_s, create_s, peak_rss_mib) only when the run's size
 *     keys (n, sleep_ms) are equal, since otherwise the ratio means nothing.
 * Counts (n, created, completed) get no ratio.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* bench_result                                                              */
/* ------------------------------------------------------------------------ */

static int br_find(const bench_result *r, const char *key) {
    for (int i = 0; i < r->nkv; i++)
        if (strcmp(r->key[i], key) == 0) return i;
    return -1;
}

static void br_put(bench_result *r, const char *key, const char *val) {
    int i = br_find(r, key);
    if (i < 0) {
        if (r->nkv == BR_MAX_KV) {
            fprintf(stderr, "weft-bench: internal: too many keys in a result (dropped %s)\n", key);
            return;
        }
        i = r->nkv++;
        snprintf(r->key[i], BR_KEY_LEN, "%s", key);
    }
    snprintf(r->val[i], BR_VAL_LEN, "%s", val);
}

void br_init(bench_result *r, const char *experiment, const char *peer) {
    r->nkv = 0;
    br_put(r, "experiment", experiment);
    br_put(r, "peer", peer);
}

void br_set(bench_result *r, const char *key, const char *fmt, ...) {
    char v[BR_VAL_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    /* values are single tokens on the line */
    for (char *p = v; *p; p++)
        if (*p == ' ' || *p == '\t' || *p == '\n') *p = '_';
    br_put(r, key, v);
}

void br_setl(bench_result *r, const char *key, long long v) { br_set(r, key, "%lld", v); }

void br_setf(bench_result *r, const char *key, int decimals, double v) { br_set(r, key, "%.*f", decimals, v); }

const char *br_get(const bench_result *r, const char *key) {
    int i = br_find(r, key);
    return i < 0 ? NULL : r->val[i];
}

int br_num(const bench_result *r, const char *key, double *out) {
    const char *v = br_get(r, key);
    if (!v) return 0;
    char *end;
    double d = strtod(v, &end);
    if (end == v) return 0;
    *out = d;
    return 1;
}

int br_parse(bench_result *r, const char *line) {
    r->nkv = 0;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", line);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok) continue; /* "SUMMARY" and other words */
        *eq = '\0';
        br_put(r, tok, eq + 1);
    }
    return br_get(r, "experiment") && br_get(r, "peer") ? 0 : -1;
}

void br_print(const bench_result *r) {
    for (int i = 0; i < r->nkv; i++) printf("%s%s=%s", i ? " " : "", r->key[i], r->val[i]);
    putchar('\n');
    fflush(stdout);
}

/* ------------------------------------------------------------------------ */
/* the report's lists                                                        */
/* ------------------------------------------------------------------------ */

void report_init(bench_report *rep) { memset(rep, 0, sizeof *rep); }

void report_free(bench_report *rep) {
    free(rep->weft);
    free(rep->peers);
    memset(rep, 0, sizeof *rep);
}

static int push(bench_result **arr, int *n, int *cap, const bench_result *r) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        bench_result *a = realloc(*arr, (size_t)nc * sizeof *a);
        if (!a) return -ENOMEM;
        *arr = a;
        *cap = nc;
    }
    (*arr)[(*n)++] = *r;
    return 0;
}

int report_add_weft(bench_report *rep, const bench_result *r) {
    br_print(r);
    return push(&rep->weft, &rep->nweft, &rep->capweft, r);
}

int report_add_peer_line(bench_report *rep, const char *line) {
    bench_result r;
    if (br_parse(&r, line) != 0) return -EINVAL;
    return push(&rep->peers, &rep->npeers, &rep->cappeers, &r);
}

int report_add_peer_file(bench_report *rep, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -errno;
    char *line = NULL;
    size_t cap = 0;
    int r = 0;
    while (getline(&line, &cap, f) > 0) {
        if (!strstr(line, "experiment=") || line[strspn(line, " \t")] == '#') continue; /* not comments */
        int e = report_add_peer_line(rep, line);
        if (e == -ENOMEM) { r = e; break; }
        if (e < 0) fprintf(stderr, "weft-bench: %s: ignored a line without experiment= and peer=\n", path);
    }
    if (ferror(f) && r == 0) r = -EIO;
    free(line);
    fclose(f);
    return r;
}

/* ------------------------------------------------------------------------ */
/* what the table shows for each experiment                                  */
/* ------------------------------------------------------------------------ */

enum ratio_kind { R_NONE, R_PER_OP, R_TOTAL };

typedef struct col_spec {
    const char *key;
    int ratio;          /* enum ratio_kind */
    int n_if_ok;        /* missing key: show n when status=ok (peers that
                           print only n when all were created) */
} col_spec;

typedef struct article_row {
    const char *label;
    const char *kv;     /* key=value pairs, as on a result line */
} article_row;

typedef struct exp_spec {
    const char *weft_exp;
    const char *peer_exp;
    const char *size_keys[3];
    const char *size_defaults[3]; /* value assumed when a line lacks the key */
    col_spec cols[6];
    article_row article[4];
    const char *article_note;
} exp_spec;

static const exp_spec SPECS[] = {
    {"threads", "park-many", {"n"}, {NULL},
     {{"created", R_NONE, 1}, {"create_s", R_TOTAL, 0}, {"ns_per_task", R_PER_OP, 0},
      {"rss_per_task_b", R_PER_OP, 0}},
     {{"article: platform threads (Java)", "status=crashed created=32539"},
      {"article: virtual threads (Java)", "status=hung created=14625956"}},
     "threads that park forever, until creation fails; i9-11900H, 64 GB: platform threads crashed, "
     "virtual threads hung without crashing"},
    {"sleep-tasks", "sleep-tasks", {"n", "sleep_ms"}, {NULL, "1000"},
     {{"n", R_NONE, 0}, {"completed", R_NONE, 0}, {"wall_s", R_TOTAL, 0}, {"user_s", R_TOTAL, 0},
      {"sys_s", R_TOTAL, 0}, {"peak_rss_mib", R_TOTAL, 0}},
     /* /usr/bin/time of the whole JVM, which also prints every task's number */
     {{"article: thread-per-task (Java 19)",
       "status=ok n=100000 completed=100000 wall_s=18.77 user_s=18.15 sys_s=7.19 peak_rss_mib=726.2"},
      {"article: cached pool (Java 19)",
       "status=ok n=100000 completed=100000 wall_s=11.52 user_s=13.21 sys_s=4.91 peak_rss_mib=2164.0"},
      {"article: virtual threads (Java 19)",
       "status=ok n=100000 completed=100000 wall_s=2.62 user_s=6.83 sys_s=1.46 peak_rss_mib=342.1"}},
     "100,000 tasks that each sleep 1 s; i9-11900H, 8 cores, whole JVM process"},
    {"switch", "switch", {NULL}, {NULL}, {{"switches", R_NONE, 0}, {"ns_per_switch", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"pingpong", "switch", {NULL}, {NULL}, {{"switches", R_NONE, 0}, {"ns_per_switch", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"pingpong-cross", "switch", {NULL}, {NULL}, {{"switches", R_NONE, 0}, {"ns_per_switch", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"spawn-join", "spawn-join", {"n"}, {NULL},
     {{"n", R_NONE, 0}, {"wall_s", R_TOTAL, 0}, {"ns_per_task", R_PER_OP, 0}, {"first_round_s", R_TOTAL, 0}},
     {{NULL, NULL}}, NULL},
    /* channel ping-pong against the peers' switch lines (go-chan) */
    {"chan-pingpong", "switch", {NULL}, {NULL}, {{"ns_per_switch", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"mutex", "mutex", {NULL}, {NULL}, {{"wall_s", R_TOTAL, 0}, {"ns_per_op", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"select", "select", {NULL}, {NULL}, {{"wall_s", R_TOTAL, 0}, {"ns_per_op", R_PER_OP, 0}}, {{NULL, NULL}}, NULL},
    {"file-write", "file-write", {"size"}, {"5"},
     {{"mode", R_NONE, 0}, {"ops_s_mean", R_TOTAL, 0}, {"ops_s_stddev", R_NONE, 0}, {"threads_peak", R_NONE, 0}},
     {{"article: FileOutputStream (Java 7)", "status=ok ops_s_mean=367806"},
      {"article: AsynchronousFileChannel (Java 7)", "status=ok ops_s_mean=190226"}},
     "5-byte writes per second, 2 warm-up + 5 one-second intervals; i5-2310; (r) = weft/peer, higher is faster"},
    {"cancel-storm", "cancel-storm", {NULL}, {NULL},
     {{"n", R_NONE, 0}, {"scopes", R_NONE, 0}, {"cancel_s", R_TOTAL, 0}, {"live_after", R_NONE, 0},
      {"fds_after", R_NONE, 0}},
     {{NULL, NULL}}, NULL},
};

static const exp_spec *spec_for(const char *weft_exp) {
    for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++)
        if (strcmp(SPECS[i].weft_exp, weft_exp) == 0) return &SPECS[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the table                                                                 */
/* ------------------------------------------------------------------------ */

#define TBL_ROWS 64
#define TBL_COLS 8
#define CELL 64

typedef struct table {
    int nrows, ncols;
    char cell[TBL_ROWS][TBL_COLS][CELL];
} table;

/* A value as shown: a SUMMARY median loses its "[min..max]". */
static void shown(char out[CELL], const char *v) {
    if (!v) {
        snprintf(out, CELL, "-");
        return;
    }
    snprintf(out, CELL, "%s", v);
    char *b = strchr(out, '[');
    if (b && b != out) *b = '\0';
}

static const char *size_of(const exp_spec *s, const bench_result *r, int k) {
    const char *v = br_get(r, s->size_keys[k]);
    return v ? v : s->size_defaults[k];
}

/* 1 when weft's run and r have the same size (so totals compare). */
static int same_size(const exp_spec *s, const bench_result *w, const bench_result *r) {
    for (int k = 0; k < 3 && s->size_keys[k]; k++) {
        const char *a = size_of(s, w, k), *b = size_of(s, r, k);
        if (!a || !b) return 0;
        char sa[CELL], sb[CELL];
        shown(sa, a);
        shown(sb, b);
        if (strtod(sa, NULL) != strtod(sb, NULL)) return 0;
    }
    return 1;
}

static void fmt_ratio(char *out, size_t len, double r) {
    if (r >= 100) snprintf(out, len, " (%.0fx)", r);
    else if (r >= 0.1) snprintf(out, len, " (%.2fx)", r);
    else snprintf(out, len, " (%.2gx)", r);
}

static void row_label(char out[CELL], const bench_result *r) {
    const char *peer = br_get(r, "peer");
    int n = snprintf(out, CELL, "%s", peer);
    static const char *const extra[] = {"executor", "mode", "pin", "stack_kib", "pool"};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < CELL; i++) {
        const char *raw = br_get(r, extra[i]);
        if (!raw) continue;
        char v[CELL];
        shown(v, raw);
        if (strcmp(extra[i], "mode") == 0 && strstr(peer, v)) continue; /* go-chan mode=chan */
        n += snprintf(out + n, CELL - (size_t)n, " %s=%s", extra[i], v);
    }
    if (n < CELL && br_get(r, "reps")) snprintf(out + n, CELL - (size_t)n, " (median)");
}

static void status_cell(char out[CELL], const bench_result *r) {
    char st[CELL];
    shown(st, br_get(r, "status"));
    const char *why = br_get(r, "stopped_by");
    if (!why || strcmp(why, "none") == 0) why = br_get(r, "err");
    if (why && strcmp(why, "none") != 0) snprintf(out, CELL, "%.30s %.30s", st, why);
    else snprintf(out, CELL, "%s", st);
}

static void add_row(table *t, const exp_spec *s, const bench_result *w, const bench_result *r,
                    const char *label) {
    if (t->nrows == TBL_ROWS) return;
    int row = t->nrows++;
    snprintf(t->cell[row][0], CELL, "%s", label);
    status_cell(t->cell[row][1], r);
    int same = same_size(s, w, r);
    for (int c = 0; c < 6 && s->cols[c].key; c++) {
        const col_spec *cs = &s->cols[c];
        char *out = t->cell[row][c + 2];
        const char *v = br_get(r, cs->key);
        if (!v && cs->n_if_ok) {
            const char *st = br_get(r, "status");
            if (st && strncmp(st, "ok", 2) == 0) v = br_get(r, "n");
        }
        shown(out, v);
        double wv, pv;
        if (r == w || !v || cs->ratio == R_NONE || (cs->ratio == R_TOTAL && !same)) continue;
        if (!br_num(w, cs->key, &wv) || !br_num(r, cs->key, &pv) || pv == 0) continue;
        size_t used = strlen(out);
        fmt_ratio(out + used, CELL - used, wv / pv);
    }
}

static void print_table(const table *t) {
    int width[TBL_COLS] = {0};
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            int l = (int)strlen(t->cell[r][c]);
            if (l > width[c]) width[c] = l;
        }
    for (int r = 0; r < t->nrows; r++) {
        printf("  ");
        for (int c = 0; c < t->ncols; c++)
            printf("%-*s%s", c == t->ncols - 1 ? 0 : width[c], t->cell[r][c], c == t->ncols - 1 ? "\n" : "  ");
        if (r == 0) {
            printf("  ");
            for (int c = 0; c < t->ncols; c++) {
                for (int k = 0; k < width[c]; k++) putchar('-');
                fputs(c == t->ncols - 1 ? "\n" : "  ", stdout);
            }
        }
    }
}

static void report_one(const bench_report *rep, const bench_result *w) {
    const char *exp = br_get(w, "experiment");
    const exp_spec *s = spec_for(exp);
    if (!s) return;
    table t;
    memset(&t, 0, sizeof t);
    t.nrows = 1;
    snprintf(t.cell[0][0], CELL, "source");
    snprintf(t.cell[0][1], CELL, "status");
    int ncols = 2;
    for (int c = 0; c < 6 && s->cols[c].key; c++) snprintf(t.cell[0][ncols++], CELL, "%s", s->cols[c].key);
    t.ncols = ncols;

    char label[CELL];
    row_label(label, w);
    add_row(&t, s, w, w, label);
    for (int a = 0; a < 4 && s->article[a].label; a++) {
        char line[512];
        bench_result ar;
        snprintf(line, sizeof line, "experiment=%s peer=article %s", s->peer_exp, s->article[a].kv);
        if (br_parse(&ar, line) == 0) add_row(&t, s, w, &ar, s->article[a].label);
    }
    int npeers = 0;
    for (int i = 0; i < rep->npeers; i++) {
        const bench_result *p = &rep->peers[i];
        if (strcmp(br_get(p, "experiment"), s->peer_exp) != 0) continue;
        row_label(label, p);
        add_row(&t, s, w, p, label);
        npeers++;
    }

    printf("\n%s (weft) vs ", exp);
    if (s->article[0].label) printf("the article (%s)", s->article_note);
    else printf("the article: -");
    printf(" and %d %s peer line%s; (r) = weft/peer", npeers, s->peer_exp, npeers == 1 ? "" : "s");
    if (s->size_keys[0]) printf(", totals only at the same %s%s", s->size_keys[0], s->size_keys[1] ? " etc." : "");
    printf("\n");
    print_table(&t);
}

void report_print(const bench_report *rep) {
    for (int i = 0; i < rep->nweft; i++) report_one(rep, &rep->weft[i]);
    if (rep->npeers == 0 && rep->nweft > 0)
        printf("\n(no peer lines: pass them with --peer-line/--peer-file; bench/compare.sh runs the peers)\n");
    fflush(stdout);
}
