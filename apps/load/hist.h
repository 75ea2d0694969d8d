/*
 * hist.h -- weft-load's latency histogram: log-linear buckets in the manner
 * of HdrHistogram (written here from the idea, not from its code).
 *
 * Values are nanoseconds; they are bucketed by microsecond.  Microseconds
 * 0..2047 each have their own counter (1 us resolution up to 2.048 ms).
 * Above that, every power of two [2^k, 2^(k+1)) us is cut into 1024 equal
 * sub-buckets, so a bucket is at most 1/1024 (0.098 %) of the values it
 * holds wide.  The top is 2^27 us (134 s); larger values land in the last
 * bucket, while min, max and the sum stay exact (in ns).
 *
 * Memory.  18,432 counters would be 144 KiB per histogram, too much for one
 * per connection at -c 10000.  The counters are therefore held in pages of
 * HIST_PAGE counters, allocated the first time a value falls in them: a
 * histogram costs its page table (2.3 KiB) plus 512 bytes for every page
 * in use -- a few pages, since one connection's latencies cluster.  A page
 * is allocated at most once per histogram, never per value.
 *
 * A histogram belongs to one thread at a time: no atomics.  Workers record
 * into their own and the owner merges them at the end (hist_merge).
 */
#ifndef WEFT_LOAD_HIST_H
#define WEFT_LOAD_HIST_H

#include <stdint.h>

#define HIST_LINEAR 2048                                      /* 1 us counters below 2.048 ms */
#define HIST_SUB 1024                                         /* sub-buckets per power of two above */
#define HIST_TOP_BITS 27                                      /* values up to 2^27 us */
#define HIST_COUNTERS (HIST_LINEAR + (HIST_TOP_BITS - 11) * HIST_SUB) /* 18,432 */
#define HIST_PAGE 64
#define HIST_PAGES (HIST_COUNTERS / HIST_PAGE)

typedef struct hist {
    uint64_t count;
    uint64_t min_ns, max_ns;
    double sum_ns;        /* for the mean; a double does not overflow */
    int oom;              /* a page could not be allocated: values were dropped */
    uint64_t *page[HIST_PAGES];
} hist;

void hist_init(hist *h);
void hist_free(hist *h);
/* Records one value (ns).  Returns 0, or -1 when a page could not be
 * allocated (the value is counted in count/min/max/sum, not in a bucket). */
int hist_record(hist *h, int64_t ns);
/* Adds src into dst (src is left as it is).  Returns 0 or -1 (no memory). */
int hist_merge(hist *dst, const hist *src);
/* The value (ns) at percentile q (0..100): the highest value equivalent to
 * the bucket that holds the q-th percentile, clipped to [min, max]; q = 100
 * gives max, q = 0 min.  0 when the histogram is empty. */
int64_t hist_percentile(const hist *h, double q);
double hist_mean_ns(const hist *h);

/* Bucket arithmetic, exposed for the self-test. */
int hist_index(uint64_t us);
uint64_t hist_low_us(int idx);   /* lowest microsecond value of bucket idx */
uint64_t hist_width_us(int idx); /* its width in microseconds */

/* Checks the histogram; prints failures on stderr; returns their number. */
int hist_self_test(void);

#endif /* WEFT_LOAD_HIST_H */
