/*
 * An indexed binary min-heap of pointers: the executors' scheduled tasks
 * (exec.c, ordered by (when, seq)) and the async dispatchers' deadlines
 * (async/async.c) are both one.  Each element keeps its own position in a
 * ptrdiff_t field (at byte offset idx_off), so that it can be taken out
 * from the middle in O(log n); -1 once it is off the heap.  The order is
 * the caller's `before` (strict: a goes first).  Every call takes before
 * and idx_off: a caller wraps them in small functions of its own, and with
 * both constant the compiler inlines them.  A zeroed weft__heap is empty;
 * its owner's lock (or its owner's thread) guards it.
 *
 * The carriers' timer heap is not one of these (timer.h): it is 4-ary,
 * holds its entries by value and deletes lazily, so that a sift never
 * touches a descriptor.
 */
#ifndef WEFT_SCHED_HEAP_H
#define WEFT_SCHED_HEAP_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>

typedef struct weft__heap {
    void **a;       /* a[0] first */
    size_t n, cap;
} weft__heap;

typedef int (*weft__heap_before)(const void *a, const void *b);

static inline ptrdiff_t *weft__heap_idx(void *e, size_t idx_off) { return (ptrdiff_t *)((char *)e + idx_off); }

static inline void weft__heap_put(weft__heap *h, size_t i, void *e, size_t idx_off) {
    h->a[i] = e;
    *weft__heap_idx(e, idx_off) = (ptrdiff_t)i;
}

static inline void weft__heap_up(weft__heap *h, size_t i, weft__heap_before before, size_t idx_off) {
    void *e = h->a[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(e, h->a[p])) break;
        weft__heap_put(h, i, h->a[p], idx_off);
        i = p;
    }
    weft__heap_put(h, i, e, idx_off);
}

static inline void weft__heap_down(weft__heap *h, size_t i, weft__heap_before before, size_t idx_off) {
    void *e = h->a[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(h->a[c + 1], h->a[c])) c++;
        if (!before(h->a[c], e)) break;
        weft__heap_put(h, i, h->a[c], idx_off);
        i = c;
    }
    weft__heap_put(h, i, e, idx_off);
}

/* Adds e: 0, or -ENOMEM when the array cannot grow (e is not added). */
static inline int weft__heap_push(weft__heap *h, void *e, weft__heap_before before, size_t idx_off) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        void **a = realloc(h->a, cap * sizeof *a);
        if (!a) return -ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    h->a[h->n++] = e;
    weft__heap_up(h, h->n - 1, before, idx_off);
    return 0;
}

/* Takes e, which is on h, out; its index becomes -1. */
static inline void weft__heap_remove(weft__heap *h, void *e, weft__heap_before before, size_t idx_off) {
    size_t i = (size_t)*weft__heap_idx(e, idx_off);
    *weft__heap_idx(e, idx_off) = -1;
    void *last = h->a[--h->n];
    if (i == h->n) return;
    weft__heap_put(h, i, last, idx_off);
    weft__heap_up(h, i, before, idx_off);
    weft__heap_down(h, (size_t)*weft__heap_idx(last, idx_off), before, idx_off);
}

/* The first element, or NULL. */
static inline void *weft__heap_first(const weft__heap *h) { return h->n ? h->a[0] : NULL; }

static inline void weft__heap_fini(weft__heap *h) {
    free(h->a);
    *h = (weft__heap){0};
}

#endif /* WEFT_SCHED_HEAP_H */
