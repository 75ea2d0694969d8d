/*
 * hist.c -- the log-linear latency histogram (design in hist.h).
 *
 * Bucket of a value v (microseconds):
 *   v < 2048:  bucket v (width 1);
 *   else:      k = floor(log2 v) (11..26), the top 11 bits of v are
 *              1024 + s (s in 0..1023): bucket 2048 + (k - 11) * 1024 + s,
 *              low value (1024 + s) << (k - 10), width 1 << (k - 10).
 * Values at or above 2^27 us go to the last bucket.
 */
#include "hist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hist_index(uint64_t us) {
    if (us < HIST_LINEAR) return (int)us;
    if (us >> HIST_TOP_BITS) return HIST_COUNTERS - 1;
    int k = 63 - __builtin_clzll(us);
    int shift = k - 10;
    return HIST_LINEAR + (k - 11) * HIST_SUB + (int)((us >> shift) - HIST_SUB);
}

uint64_t hist_low_us(int idx) {
    if (idx < HIST_LINEAR) return (uint64_t)idx;
    int j = idx - HIST_LINEAR;
    int k = 11 + j / HIST_SUB;
    return (uint64_t)(HIST_SUB + j % HIST_SUB) << (k - 10);
}

uint64_t hist_width_us(int idx) {
    if (idx < HIST_LINEAR) return 1;
    return UINT64_C(1) << (1 + (idx - HIST_LINEAR) / HIST_SUB);
}

void hist_init(hist *h) {
    memset(h, 0, sizeof *h);
}

void hist_free(hist *h) {
    for (int i = 0; i < HIST_PAGES; i++) free(h->page[i]);
    hist_init(h);
}

static uint64_t *counter(hist *h, int idx) {
    uint64_t **pg = &h->page[idx / HIST_PAGE];
    if (__builtin_expect(!*pg, 0)) {
        *pg = calloc(HIST_PAGE, sizeof **pg);
        if (!*pg) {
            h->oom = 1;
            return NULL;
        }
    }
    return &(*pg)[idx % HIST_PAGE];
}

static void note(hist *h, uint64_t ns, uint64_t n) {
    if (!h->count || ns < h->min_ns) h->min_ns = ns;
    if (ns > h->max_ns) h->max_ns = ns;
    h->count += n;
}

int hist_record(hist *h, int64_t ns) {
    uint64_t v = ns < 0 ? 0 : (uint64_t)ns;
    note(h, v, 1);
    h->sum_ns += (double)v;
    uint64_t *c = counter(h, hist_index(v / 1000));
    if (!c) return -1;
    ++*c;
    return 0;
}

int hist_merge(hist *dst, const hist *src) {
    if (!src->count) return 0;
    note(dst, src->min_ns, 0);
    if (src->max_ns > dst->max_ns) dst->max_ns = src->max_ns;
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
    dst->oom |= src->oom;
    for (int p = 0; p < HIST_PAGES; p++) {
        if (!src->page[p]) continue;
        for (int i = 0; i < HIST_PAGE; i++) {
            if (!src->page[p][i]) continue;
            uint64_t *c = counter(dst, p * HIST_PAGE + i);
            if (!c) return -1;
            *c += src->page[p][i];
        }
    }
    return 0;
}

int64_t hist_percentile(const hist *h, double q) {
    if (!h->count) return 0;
    if (q <= 0) return (int64_t)h->min_ns;
    if (q >= 100) return (int64_t)h->max_ns;
    uint64_t total = 0; /* what the buckets hold (all of count unless a page was missing) */
    for (int p = 0; p < HIST_PAGES; p++)
        if (h->page[p])
            for (int i = 0; i < HIST_PAGE; i++) total += h->page[p][i];
    if (!total) return (int64_t)h->max_ns;
    uint64_t rank = (uint64_t)ceil(q / 100.0 * (double)total);
    if (rank < 1) rank = 1;
    if (rank > total) rank = total;
    uint64_t seen = 0;
    for (int p = 0; p < HIST_PAGES; p++) {
        if (!h->page[p]) continue;
        for (int i = 0; i < HIST_PAGE; i++) {
            seen += h->page[p][i];
            if (seen >= rank) {
                int idx = p * HIST_PAGE + i;
                uint64_t hi = (hist_low_us(idx) + hist_width_us(idx)) * 1000 - 1;
                if (hi > h->max_ns) hi = h->max_ns;
                if (hi < h->min_ns) hi = h->min_ns;
                return (int64_t)hi;
            }
        }
    }
    return (int64_t)h->max_ns;
}

double hist_mean_ns(const hist *h) {
    return h->count ? h->sum_ns / (double)h->count : 0.0;
}

/* ------------------------------------------------------------------------ */
/* self-test                                                                 */
/* ------------------------------------------------------------------------ */

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "hist self-test: %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                                    \
            fputc('\n', stderr);                                                                             \
            fails++;                                                                                         \
        }                                                                                                    \
    } while (0)

/* |got - want| within the histogram's promise: 1 us, or 1/1024 of want */
static int close_enough(int64_t got, int64_t want) {
    double err = fabs((double)got - (double)want);
    return err <= 1000.0 || err <= (double)want / 1024.0;
}

int hist_self_test(void) {
    int fails = 0;

    /* bucket arithmetic: contiguous, in order, widths as promised */
    uint64_t expect_low = 0;
    for (int i = 0; i < HIST_COUNTERS; i++) {
        uint64_t lo = hist_low_us(i), w = hist_width_us(i);
        CHECK(lo == expect_low, "bucket %d starts at %llu, not %llu", i, (unsigned long long)lo,
              (unsigned long long)expect_low);
        CHECK(hist_index(lo) == i, "index(low of %d) = %d", i, hist_index(lo));
        CHECK(hist_index(lo + w - 1) == i, "index(high of %d) = %d", i, hist_index(lo + w - 1));
        if (i < HIST_LINEAR) CHECK(w == 1, "bucket %d is %llu us wide", i, (unsigned long long)w);
        else CHECK(w * 1024 <= lo, "bucket %d: width %llu > low %llu / 1024", i, (unsigned long long)w,
                   (unsigned long long)lo);
        expect_low = lo + w;
        if (fails > 10) return fails;
    }
    CHECK(expect_low == UINT64_C(1) << HIST_TOP_BITS, "top %llu", (unsigned long long)expect_low);
    CHECK(hist_index(UINT64_C(100) * 1000 * 1000) < HIST_COUNTERS - 1, "100 s is not below the top bucket");
    CHECK(hist_index(UINT64_MAX / 2) == HIST_COUNTERS - 1, "huge values clamp");

    /* empty */
    hist h, a, b;
    hist_init(&h);
    CHECK(hist_percentile(&h, 50) == 0 && hist_mean_ns(&h) == 0.0, "empty histogram");

    /* one value: every percentile is it */
    hist_record(&h, 123456);
    CHECK(hist_percentile(&h, 0) == 123456 && hist_percentile(&h, 50) == 123456 &&
              hist_percentile(&h, 100) == 123456,
          "single value: p50 %lld", (long long)hist_percentile(&h, 50));
    hist_free(&h);

    /* 1..200,000 us, each once, as ns with a sub-us part: percentiles within
     * the promised error of the exact ones, min/max/mean exact */
    hist_init(&h);
    hist_init(&a);
    hist_init(&b);
    const int64_t N = 200000;
    for (int64_t us = 1; us <= N; us++) {
        int64_t ns = us * 1000 + 321;
        hist_record(&h, ns);
        hist_record(us % 2 ? &a : &b, ns);
    }
    CHECK(h.count == (uint64_t)N, "count %llu", (unsigned long long)h.count);
    CHECK(h.min_ns == 1321 && h.max_ns == (uint64_t)(N * 1000 + 321), "min %llu max %llu",
          (unsigned long long)h.min_ns, (unsigned long long)h.max_ns);
    CHECK(fabs(hist_mean_ns(&h) - ((double)(N + 1) / 2 * 1000 + 321)) < 1e-3, "mean %f", hist_mean_ns(&h));
    static const double qs[] = {1, 10, 25, 50, 66, 75, 80, 90, 95, 98, 99, 99.9, 99.99};
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        int64_t rank = (int64_t)ceil(qs[i] / 100 * (double)N);
        int64_t want = rank * 1000 + 321;
        int64_t got = hist_percentile(&h, qs[i]);
        CHECK(close_enough(got, want), "p%g = %lld, exact %lld", qs[i], (long long)got, (long long)want);
        CHECK(got >= want, "p%g = %lld is below the exact %lld (highest-equivalent rule)", qs[i], (long long)got,
              (long long)want);
    }
    CHECK(hist_percentile(&h, 100) == N * 1000 + 321, "p100 is max");

    /* merging the two halves gives the whole */
    hist m;
    hist_init(&m);
    CHECK(hist_merge(&m, &a) == 0 && hist_merge(&m, &b) == 0, "merge");
    CHECK(m.count == h.count && m.min_ns == h.min_ns && m.max_ns == h.max_ns, "merged count/min/max");
    CHECK(fabs(m.sum_ns - h.sum_ns) < 1.0, "merged sum");
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
        CHECK(hist_percentile(&m, qs[i]) == hist_percentile(&h, qs[i]), "merged p%g", qs[i]);
    hist_free(&m);
    hist_free(&a);
    hist_free(&b);
    hist_free(&h);

    /* a skewed set: 99 fast values, 1 slow one; 1 us resolution down low */
    hist_init(&h);
    for (int i = 0; i < 99; i++) hist_record(&h, 50 * 1000 + i); /* 50.000..50.098 us */
    hist_record(&h, 3 * INT64_C(1000000000));                  /* 3 s */
    /* the bucket's highest equivalent value: 50.999 us */
    CHECK(hist_percentile(&h, 50) == 50 * 1000 + 999, "skewed p50 %lld", (long long)hist_percentile(&h, 50));
    CHECK(hist_percentile(&h, 99) == 50 * 1000 + 999, "skewed p99 %lld", (long long)hist_percentile(&h, 99));
    CHECK(hist_percentile(&h, 99.5) == 3 * INT64_C(1000000000), "skewed p99.5 %lld",
          (long long)hist_percentile(&h, 99.5));
    /* beyond the top: clamped bucket, exact max */
    hist_record(&h, 500 * INT64_C(1000000000));
    CHECK(hist_percentile(&h, 100) == 500 * INT64_C(1000000000), "max beyond the top");
    int pages = 0;
    for (int p = 0; p < HIST_PAGES; p++) pages += h.page[p] != NULL;
    CHECK(pages == 3, "%d pages in use for three clusters", pages);
    hist_free(&h);

    /* every bucket's reported value is within 0.1 % (or 1 us) of its values */
    for (uint64_t us = 1; us < (UINT64_C(1) << HIST_TOP_BITS); us = us * 5 / 4 + 1) {
        hist_init(&h);
        hist_record(&h, (int64_t)(us * 1000));
        hist_record(&h, (int64_t)(us * 1000 * 3)); /* max elsewhere, so p50 is not clipped to it */
        int64_t got = hist_percentile(&h, 50);
        CHECK(close_enough(got, (int64_t)us * 1000), "%llu us reported as %lld ns", (unsigned long long)us,
              (long long)got);
        hist_free(&h);
    }
    return fails;
}
