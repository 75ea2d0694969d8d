/* 4-ary min-heap of park deadlines with lazy deletion; see timer.h. */
#include "timer.h"

#include <errno.h>
#include <stdlib.h>

void weft__theap_init(weft__theap *h) {
    pthread_mutex_init(&h->lock, NULL);
    h->a = NULL;
    h->n = h->cap = 0;
    atomic_init(&h->min, INT64_MAX);
    atomic_init(&h->dead, 0);
}

void weft__theap_fini(weft__theap *h) {
    free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
    pthread_mutex_destroy(&h->lock);
}

static void sift_up(weft__theap *h, int32_t i) {
    weft__theap_ent e = h->a[i];
    while (i > 0) {
        int32_t p = (i - 1) / 4;
        if (h->a[p].when <= e.when) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = e;
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
        h->a[i] = h->a[best];
        i = best;
    }
    h->a[i] = e;
}

static void update_min(weft__theap *h) {
    atomic_store_explicit(&h->min, h->n ? h->a[0].when : INT64_MAX, memory_order_release);
}

/* Is the park this entry was made for still waiting? */
static int live(const weft__theap_ent *e) {
    uint64_t w = atomic_load_explicit(&e->t->parker.word, memory_order_relaxed);
    unsigned st = WEFT__PW_STATE(w);
    return WEFT__PW_SAME_PARK(w, e->token) && (st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED);
}

/* Drops dead entries and re-heapifies: O(n), run when more than half are
 * dead, so O(1) amortised per early-ended park. */
static void compact(weft__theap *h) {
    int32_t k = 0;
    for (int32_t i = 0; i < h->n; i++)
        if (live(&h->a[i])) h->a[k++] = h->a[i];
    atomic_fetch_sub_explicit(&h->dead, h->n - k, memory_order_relaxed);
    h->n = k;
    for (int32_t i = (h->n - 2) / 4; i >= 0 && h->n > 1; i--) sift_down(h, i);
    update_min(h);
}

int weft__theap_insert(weft__theap *h, int64_t when, weft_thread *t, uint64_t token) {
    if (h->n >= 1024 && atomic_load_explicit(&h->dead, memory_order_relaxed) > h->n / 2) compact(h);
    if (h->n == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 256;
        weft__theap_ent *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a) return -ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    int32_t i = h->n++;
    h->a[i] = (weft__theap_ent){when, t, token};
    sift_up(h, i);
    update_min(h);
    return 0;
}

int weft__theap_pop_due(weft__theap *h, int64_t now, weft__theap_ent *out) {
    if (h->n == 0 || h->a[0].when > now) return 0;
    *out = h->a[0];
    h->a[0] = h->a[--h->n];
    if (h->n > 1) sift_down(h, 0);
    update_min(h);
    return 1;
}
