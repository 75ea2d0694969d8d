/*
 * chart.c -- the SVG chart drawer of weft-bench's HTML report.
 *
 * Drawing.  Inline SVG written here, nothing else: horizontal bar charts
 * (linear or log10 axis, optional +- error whiskers) and line charts over
 * categories (concurrency points), with ticks, axis labels and a legend;
 * a chart with no data says so in place of the drawing.  No script, no
 * external fetch.  All text goes through html_esc.  Numbers are printed as
 * their lines have them (num_text: html_report.c's "rule for numbers"),
 * the data's in class "v", the articles' in class "art", the computed
 * tick labels in class "tick".
 *
 * The report (html_report.c) fills the bars and series from its lines and
 * calls the drawers; a chart is its caller's (on the stack), writes to the
 * caller's FILE and keeps nothing.  Single threaded, no allocation.
 */
#define _GNU_SOURCE
#include "chart.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* text                                                                      */
/* ------------------------------------------------------------------------ */

void html_esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

#define GROUP_SEP "\xe2\x80\xaf" /* U+202F narrow no-break space */

/* A value as printed (see "The rule for numbers"): out gets raw without a
 * "[min..max]" tail, its integer digits grouped when there are five or more. */
static void num_text(char *out, size_t len, const char *raw) {
    char v[BR_VAL_LEN];
    snprintf(v, sizeof v, "%s", raw);
    char *b = strchr(v, '[');
    if (b && b != v) *b = '\0';
    size_t i = (v[0] == '-' || v[0] == '+') ? 1 : 0, digits = 0;
    while (v[i + digits] >= '0' && v[i + digits] <= '9') digits++;
    size_t o = 0;
    if (digits < 5) {
        snprintf(out, len, "%s", v);
        return;
    }
    for (size_t k = 0; k < i && o + 1 < len; k++) out[o++] = v[k];
    for (size_t k = 0; k < digits && o + 4 < len; k++) {
        if (k > 0 && (digits - k) % 3 == 0) {
            memcpy(out + o, GROUP_SEP, 3);
            o += 3;
        }
        out[o++] = v[i + k];
    }
    snprintf(out + o, len - o, "%s", v + i + digits);
}

/* A number for a tick label (computed: class "tick"). */
static void tick_text(char *out, size_t len, double v) {
    if (v != 0 && (fabs(v) >= 1e12 || fabs(v) < 1e-3)) {
        snprintf(out, len, "%.0e", v);
        return;
    }
    char raw[64];
    if (v == floor(v)) snprintf(raw, sizeof raw, "%.0f", v);
    else snprintf(raw, sizeof raw, "%.3g", v);
    num_text(out, len, raw);
}

/* ------------------------------------------------------------------------ */
/* colours                                                                   */
/* ------------------------------------------------------------------------ */

const char *color_for(const char *name, int kind) {
    if (kind == K_ART) return "#a0a0a0";
    if (kind == K_HEAD) return "none";
    static const struct { const char *prefix; const char *color; } C[] = {
        {"weft-pool", "#7aa6e6"}, {"weft-thread", "#0b3a80"}, {"weft-async", "#3fa7a0"},
        {"weft", "#1f5fbf"}, {"go", "#2f9e44"}, {"java25", "#e8590c"}, {"java17", "#8c564b"},
        {"boost", "#9467bd"}, {"openmp", "#c92a2a"}, {"pthreads", "#b8a000"}, {"c-", "#6c757d"},
        {"nginx", "#1098ad"}, {"node", "#5c940d"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++)
        if (strncmp(name, C[i].prefix, strlen(C[i].prefix)) == 0) return C[i].color;
    static const char *const other[] = {"#d6336c", "#495057", "#f08c00", "#364fc7"};
    unsigned h = 0;
    for (const char *p = name; *p; p++) h = h * 31 + (unsigned char)*p;
    return other[h % 4];
}

/* ------------------------------------------------------------------------ */
/* bar charts                                                                */
/* ------------------------------------------------------------------------ */

bar *bars_add(bars *B, int kind, const char *label) {
    if (B->n == MAX_BARS) return NULL;
    bar *b = &B->b[B->n++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->err = -1;
    snprintf(b->label, sizeof b->label, "%s", label);
    return b;
}

bar *bars_art(bars *B, const char *label, const char *raw, const char *note) {
    bar *b = bars_add(B, K_ART, label);
    if (!b) return NULL;
    b->v = strtod(raw, NULL);
    snprintf(b->raw, sizeof b->raw, "%s", raw);
    if (note) snprintf(b->note, sizeof b->note, "%s", note);
    b->color = color_for("", K_ART);
    return b;
}

void missing(FILE *f, const char *what, const char *how) {
    fputs("<p class=\"missing\">No data: ", f);
    html_esc(f, what);
    fputs(" (", f);
    html_esc(f, how);
    fputs(").</p>\n", f);
}

/* Tick values for [lo, hi] on a linear axis: 1-2-5 steps, about 6 ticks. */
static int lin_ticks(double lo, double hi, double *t, int max, double *top) {
    double range = hi - lo;
    if (range <= 0) range = hi > 0 ? hi : 1;
    double raw = range / 5, mag = pow(10, floor(log10(raw))), step;
    double m = raw / mag;
    step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * mag;
    int n = 0;
    double first = floor(lo / step) * step;
    for (double v = first; n < max; v += step) {
        t[n++] = v;
        if (v >= hi - step * 1e-9) break;
    }
    *top = t[n - 1];
    return n;
}

static void text_num(FILE *f, double x, double y, const char *anchor, const char *cls, const char *txt) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" class=\"%s\">", x, y, anchor, cls);
    html_esc(f, txt);
    fputs("</text>", f);
}

/*
 * Horizontal bars, one row each: label left, bar, value (and +- err, note)
 * right.  logx: log10 axis from the decade below the smallest value.
 */
void bar_chart(FILE *f, const char *title, const char *axis_label, const bars *B, int logx) {
    fputs("<figure>\n<figcaption>", f);
    html_esc(f, title);
    fputs("</figcaption>\n", f);
    int nbars = 0;
    double lo = INFINITY, hi = 0;
    for (int i = 0; i < B->n; i++) {
        const bar *b = &B->b[i];
        if (b->kind == K_HEAD) continue;
        nbars++;
        double top = b->v + (b->err > 0 ? b->err : 0);
        if (top > hi) hi = top;
        if (b->v > 0 && b->v < lo) lo = b->v;
    }
    if (nbars == 0) {
        fputs("<p class=\"missing\">No data for this chart in the lines.</p>\n</figure>\n", f);
        return;
    }
    if (hi <= 0) hi = 1; /* only failed runs, without values: an axis for their notes */
    if (logx && !isfinite(lo)) lo = hi;
    const double W = 980, L = 290, R = 200, T = 12, ROW = 21, AX = 44;
    const double PW = W - L - R;
    double H = T + ROW * B->n + AX;
    double ticks[32], a0, a1;
    int nt;
    if (logx) {
        a0 = floor(log10(lo));
        a1 = ceil(log10(hi));
        if (a1 <= a0) a1 = a0 + 1;
        nt = 0;
        for (double d = a0; d <= a1 && nt < 32; d++) ticks[nt++] = pow(10, d);
    } else {
        nt = lin_ticks(0, hi, ticks, 32, &a1);
        a0 = 0;
    }
#define XPOS(val) (L + PW * (logx ? (log10(val) - a0) / (a1 - a0) : ((val) - a0) / (a1 - a0)))
    fprintf(f, "<svg viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", W, H, W, H);
    double y0 = T, y1 = T + ROW * B->n;
    for (int i = 0; i < nt; i++) {
        double x = XPOS(ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, y0, x, y1 + 4);
        char t[48];
        tick_text(t, sizeof t, ticks[i]);
        text_num(f, x, y1 + 17, "middle", "tick", t);
        fputc('\n', f);
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"axis\"/>\n", L, y0, L, y1);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"axis\"/>\n", L, y1, L + PW, y1);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"middle\" class=\"axlabel\">", L + PW / 2, y1 + 36);
    html_esc(f, axis_label);
    fputs(logx ? " (log scale)</text>\n" : "</text>\n", f);
    for (int i = 0; i < B->n; i++) {
        const bar *b = &B->b[i];
        double y = T + ROW * i;
        if (b->kind == K_HEAD) {
            fprintf(f, "<text x=\"4\" y=\"%.1f\" class=\"grouphead\">", y + 15);
            html_esc(f, b->label);
            fputs("</text>\n", f);
            continue;
        }
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\" class=\"%s\">", L - 6, y + 15,
                b->kind == K_ART ? "label artlabel" : "label");
        html_esc(f, b->label);
        fputs("</text>", f);
        double x = b->v > 0 ? XPOS(b->v) : L;
        if (logx && b->v > 0 && b->v < pow(10, a0)) x = L;
        fprintf(f, "<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\"%s/>", L, y + 3,
                x - L > 0 ? x - L : 0, ROW - 6, b->color, b->kind == K_ART ? " class=\"artbar\"" : "");
        double xt = x;
        if (b->err > 0 && b->v > 0) {
            double xl = b->v - b->err > 0 ? XPOS(b->v - b->err) : L, xr = XPOS(b->v + b->err);
            if (logx && b->v - b->err <= pow(10, a0)) xl = L;
            double ym = y + ROW / 2.0;
            fprintf(f, "<path d=\"M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f\" class=\"whisker\"/>", xl, ym, xr, xl,
                    ym - 5, ym + 5, xr, ym - 5, ym + 5);
            xt = xr;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"val\">", xt + 5, y + 15);
        char t[128];
        if (b->raw[0]) { /* (a failed run may have no value: its note says so) */
            num_text(t, sizeof t, b->raw);
            fprintf(f, "<tspan class=\"%s\">", b->kind == K_ART ? "art" : "v");
            html_esc(f, t);
            fputs("</tspan>", f);
        }
        if (b->err > 0) {
            num_text(t, sizeof t, b->raw_err);
            fputs(" \xc2\xb1 <tspan class=\"v\">", f);
            html_esc(f, t);
            fputs("</tspan>", f);
        }
        if (b->note[0]) {
            fputs(" <tspan class=\"note\">", f);
            html_esc(f, b->note);
            fputs("</tspan>", f);
        }
        fputs("</text>\n", f);
    }
#undef XPOS
    fputs("</svg>\n</figure>\n", f);
}

/* ------------------------------------------------------------------------ */
/* line charts over categories                                               */
/* ------------------------------------------------------------------------ */

int cat_index(catchart *C, long c, long n, int add) {
    for (int i = 0; i < C->ncat; i++)
        if (C->c[i] == c && C->n[i] == n) return i;
    if (!add || C->ncat == MAX_CAT) return -1;
    int i = C->ncat++;
    C->c[i] = c;
    C->n[i] = n;
    return i;
}

void cat_sort(catchart *C) {
    /* insertion sort of the categories, carrying every series' column */
    for (int i = 1; i < C->ncat; i++)
        for (int j = i; j > 0 && (C->c[j - 1] > C->c[j] || (C->c[j - 1] == C->c[j] && C->n[j - 1] > C->n[j])); j--) {
            long t = C->c[j]; C->c[j] = C->c[j - 1]; C->c[j - 1] = t;
            t = C->n[j]; C->n[j] = C->n[j - 1]; C->n[j - 1] = t;
            for (int s = 0; s < C->nser; s++) {
                series *S = &C->s[s];
                int h = S->has[j]; S->has[j] = S->has[j - 1]; S->has[j - 1] = h;
                double y = S->y[j]; S->y[j] = S->y[j - 1]; S->y[j - 1] = y;
                int rk = S->rank[j]; S->rank[j] = S->rank[j - 1]; S->rank[j - 1] = rk;
                char tmp[BR_VAL_LEN];
                memcpy(tmp, S->raw[j], sizeof tmp);
                memcpy(S->raw[j], S->raw[j - 1], sizeof tmp);
                memcpy(S->raw[j - 1], tmp, sizeof tmp);
            }
        }
}

series *series_get(catchart *C, const char *name, int kind) {
    for (int i = 0; i < C->nser; i++)
        if (strcmp(C->s[i].name, name) == 0 && C->s[i].kind == kind) return &C->s[i];
    if (C->nser == MAX_SERIES) return NULL;
    series *s = &C->s[C->nser++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind;
    s->color = color_for(name, kind);
    s->dash = kind == K_ART || kind == K_BOUND;
    return s;
}

/* Puts raw value (rank: line_rank) at category i, unless a better line did. */
void series_put(series *s, int i, const char *raw, int rank) {
    if (!s || i < 0 || !raw) return;
    char *end;
    double y = strtod(raw, &end);
    if (end == raw) return;
    if (s->has[i] && s->rank[i] > rank) return;
    s->has[i] = 1;
    s->y[i] = y;
    s->rank[i] = rank;
    snprintf(s->raw[i], BR_VAL_LEN, "%s", raw);
}

void line_chart(FILE *f, const char *title, const char *ylabel, const catchart *C) {
    fputs("<figure>\n<figcaption>", f);
    html_esc(f, title);
    fputs("</figcaption>\n", f);
    double hi = 0;
    int any = 0;
    for (int s = 0; s < C->nser; s++)
        for (int i = 0; i < C->ncat; i++)
            if (C->s[s].has[i]) {
                if (C->s[s].kind != K_ART && C->s[s].kind != K_BOUND) any = 1;
                if (C->s[s].y[i] > hi) hi = C->s[s].y[i];
            }
    if (!any || hi <= 0) {
        fputs("<p class=\"missing\">No data for this chart in the lines.</p>\n</figure>\n", f);
        return;
    }
    const double W = 980, L = 78, R = 250, T = 14, B = 58, H = 380;
    const double PW = W - L - R, PH = H - T - B;
    double ticks[32], top;
    int nt = lin_ticks(0, hi, ticks, 32, &top);
    fprintf(f, "<svg viewBox=\"0 0 %.0f %.0f\" width=\"%.0f\" height=\"%.0f\" role=\"img\">\n", W, H, W, H);
#define YPOS(val) (T + PH - PH * (val) / top)
#define XCAT(i) (L + PW * ((i) + 0.5) / C->ncat)
    for (int i = 0; i < nt; i++) {
        double y = YPOS(ticks[i]);
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"grid\"/>", L - 4, y, L + PW, y);
        char t[48];
        tick_text(t, sizeof t, ticks[i]);
        text_num(f, L - 8, y + 4, "end", "tick", t);
        fputc('\n', f);
    }
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" class=\"axis\"/>\n", L, T, L, T + PH);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" class=\"axis\"/>\n", L, T + PH, L + PW, T + PH);
    for (int i = 0; i < C->ncat; i++) {
        char c[48], n[48], raw[32];
        snprintf(raw, sizeof raw, "%ld", C->c[i]);
        tick_text(c, sizeof c, (double)C->c[i]);
        snprintf(raw, sizeof raw, "%ld", C->n[i]);
        num_text(n, sizeof n, raw);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"axis\"/>", XCAT(i), T + PH, XCAT(i),
                T + PH + 4);
        text_num(f, XCAT(i), T + PH + 17, "middle", "tick", c);
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" class=\"tick small\">n=", XCAT(i), T + PH + 30);
        html_esc(f, n);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\" class=\"axlabel\">concurrency C (requests n)</text>\n",
            L + PW / 2, H - 8);
    fprintf(f, "<text transform=\"translate(16 %.0f) rotate(-90)\" text-anchor=\"middle\" class=\"axlabel\">", T + PH / 2);
    html_esc(f, ylabel);
    fputs("</text>\n", f);
    int leg = 0;
    for (int s = 0; s < C->nser; s++) {
        const series *S = &C->s[s];
        int pts = 0;
        for (int i = 0; i < C->ncat; i++) pts += S->has[i];
        if (!pts) continue;
        const char *dash = S->kind == K_BOUND ? (strncmp(S->name, "ab", 2) == 0 ? " stroke-dasharray=\"2 3\"" : " stroke-dasharray=\"8 4\"")
                           : S->dash ? " stroke-dasharray=\"3 3\"" : "";
        const char *stroke = S->kind != K_BOUND ? S->color : strncmp(S->name, "ab", 2) == 0 ? "#a61e1e" : "#222";
        fprintf(f, "<path d=\"");
        int pen = 0;
        for (int i = 0; i < C->ncat; i++) {
            if (!S->has[i]) { pen = 0; continue; }
            fprintf(f, "%s%.1f %.1f", pen ? "L" : "M", XCAT(i), YPOS(S->y[i]));
            pen = 1;
        }
        fprintf(f, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n", stroke,
                S->kind == K_WEFT ? "2.5" : "1.6", dash);
        for (int i = 0; i < C->ncat; i++)
            if (S->has[i] && S->kind != K_BOUND)
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"/>", XCAT(i), YPOS(S->y[i]),
                        S->kind == K_ART ? "2.5" : "3.5", S->color);
        double ly = T + 8 + 19 * leg++;
        fprintf(f, "\n<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>",
                L + PW + 14, ly, L + PW + 40, ly, stroke, dash);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" class=\"legend\">", L + PW + 46, ly + 4);
        html_esc(f, S->name);
        fputs("</text>\n", f);
    }
#undef YPOS
#undef XCAT
    fputs("</svg>\n", f);
    /* the values themselves, under the chart */
    fputs("<table class=\"data\"><tr><th>C (n)</th>", f);
    for (int s = 0; s < C->nser; s++) {
        fputs("<th>", f);
        html_esc(f, C->s[s].name);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int i = 0; i < C->ncat; i++) {
        char c[32], n[32], raw[32];
        snprintf(raw, sizeof raw, "%ld", C->c[i]);
        num_text(c, sizeof c, raw);
        snprintf(raw, sizeof raw, "%ld", C->n[i]);
        num_text(n, sizeof n, raw);
        fprintf(f, "<tr><td>%s (%s)</td>", c, n); /* from the lines' concurrency= and n= */
        for (int s = 0; s < C->nser; s++) {
            const series *S = &C->s[s];
            if (!S->has[i]) { fputs("<td>-</td>", f); continue; }
            char t[128];
            num_text(t, sizeof t, S->raw[i]);
            fprintf(f, "<td class=\"%s\">", S->kind == K_ART ? "art" : "v");
            html_esc(f, t);
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n</figure>\n", f);
}
