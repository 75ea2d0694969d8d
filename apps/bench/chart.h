/*
 * chart.h -- the SVG chart drawer of weft-bench's HTML report
 * (html_report.c): horizontal bar charts and line charts over categories,
 * written as inline SVG with a table of the values beside them.  chart.c's
 * essay says how they are drawn; html_report.c's says which numbers go in
 * (its "rule for numbers": classes "v", "art" and "tick").
 */
#ifndef WEFT_BENCH_CHART_H
#define WEFT_BENCH_CHART_H

#include "bench.h"

#include <stdio.h>

/* What a bar or a series shows: weft, a peer, an article's figure, a bound;
 * K_HEAD: a group's title row, no bar. */
enum kind { K_WEFT, K_PEER, K_ART, K_BOUND, K_HEAD };

typedef struct bar {
    char label[96];
    int kind;            /* enum kind; K_HEAD: a group's title row, no bar */
    double v, err;       /* err < 0: none */
    char raw[BR_VAL_LEN], raw_err[BR_VAL_LEN]; /* as printed */
    char note[48];       /* after the value: "(EAGAIN)", "hung" ... */
    const char *color;
} bar;

#define MAX_BARS 64

typedef struct bars {
    bar b[MAX_BARS];
    int n;
} bars;

#define MAX_CAT 16

#define MAX_SERIES 16

typedef struct series {
    char name[64];
    int kind;                 /* K_WEFT, K_PEER, K_ART, K_BOUND */
    const char *color;
    int dash;
    int has[MAX_CAT];
    double y[MAX_CAT];
    char raw[MAX_CAT][BR_VAL_LEN];
    int rank[MAX_CAT];        /* line_rank of the line that gave y */
} series;

typedef struct catchart {
    int ncat;
    long c[MAX_CAT], n[MAX_CAT]; /* concurrency, requests */
    int nser;
    series s[MAX_SERIES];
} catchart;

/* Text: s with &<>"' escaped. */
void html_esc(FILE *f, const char *s);

/* Colours: a fixed one for the usual names (weft, go, java25 ...), else one of four by hash. */
const char *color_for(const char *name, int kind);

/* Bar charts: bars_add and bars_art fill B (NULL when it is full); bar_chart
 * draws it (logx: a log10 axis); missing says "No data" in its place. */
bar *bars_add(bars *B, int kind, const char *label);
bar *bars_art(bars *B, const char *label, const char *raw, const char *note);
void missing(FILE *f, const char *what, const char *how);
void bar_chart(FILE *f, const char *title, const char *axis_label, const bars *B, int logx);

/* Line charts over categories (concurrency, requests): cat_index finds (or
 * adds) a category, series_get a series, series_put a value at a category
 * (unless a line of better rank put one), cat_sort orders the categories;
 * line_chart draws it. */
int cat_index(catchart *C, long c, long n, int add);
void cat_sort(catchart *C);
series *series_get(catchart *C, const char *name, int kind);
void series_put(series *s, int i, const char *raw, int rank);
void line_chart(FILE *f, const char *title, const char *ylabel, const catchart *C);

#endif
