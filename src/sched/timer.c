/*
 * 4-ary min-heap of timers; see timer.h for the design.
 *
 * The heap array holds the deadline next to the pointer, so sifting
 * compares within the array: the timers live in vthread descriptors, one
 * page apart each, and chasing them on every comparison cost a TLB miss each
 * (seconds for a million timers).  Only a moved entry's index is written
 * back to its timer.
 */
#include "timer.h"

#include <errno.h>
#include <stdlib.h>

void weft__theap_init(weft__theap *h) {
    pthread_mutex_init(&h->lock, NULL);
    h->a = NULL;
    h->n = h->cap = 0;
    atomic_init(&h->min, INT64_MAX);
}

void weft__theap_fini(weft__theap *h) {
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
    pthread_mutex_destroy(&h->lock);
}

static inline void place(weft__theap *h, int32_t i, weft__theap_ent e) {
    h->a[i] = e;
    e.t->idx = i;
}

static void sift_up(weft__theap *h, int32_t i) {
    weft__theap_ent e = h->a[i];
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (h->a[p].when <= e.when) break;
        place(h, i, h->a[p]);
        i = p;
    }
    place(h, i, e);
}

static void sift_down(weft__theap *h, int32_t i) {
    weft__theap_ent e = h->a[i];
    for (;;) {
        int32_t c = 4 * i + 1;
        if (c >= h->n) break;
        int32_t best = c, end = c + 4 < h->n ? c + 4 : h->n;
        for (int32_t k = c + 1; k < end; k++)
            if (h->a[k].when < h->a[best].when) best = k;
        if (h->a[best].when >= e.when) break;
        place(h, i, h->a[best]);
        i = best;
    }
    place(h, i, e);
}

static void update_min(weft__theap *h) {
    atomic_store_explicit(&h->min, h->n ? h->a[0].when : INT64_MAX, memory_order_release);
}

int weft__theap_insert(weft__theap *h, weft__timer *t) {
    if (h->n == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 256;
        weft__theap_ent *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a) return -ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    int32_t i = h->n++;
    h->a[i] = (weft__theap_ent){t->when, t};
    sift_up(h, i);
    update_min(h);
    return 0;
}

void weft__theap_remove(weft__theap *h, weft__timer *t) {
    int32_t i = t->idx;
    t->idx = -1;
    weft__theap_ent last = h->a[--h->n];
    if (i < h->n) {
        h->a[i] = last;
        if (i > 0 && h->a[(i - 1) / 4].when > last.when) sift_up(h, i);
        else sift_down(h, i);
    }
    update_min(h);
}

weft__timer *weft__theap_pop_due(weft__theap *h, int64_t now) {
    if (h->n == 0 || h->a[0].when > now) return NULL;
    weft__timer *t = h->a[0].t;
    weft__theap_remove(h, t);
    return t;
}
