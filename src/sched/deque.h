/*
 * A Chase-Lev work-stealing deque of vthreads (Chase & Lev 2005, with the
 * C11 orderings of Le, Pop, Cohen & Zappa Nardelli 2013).
 *
 * The owner carrier pushes at the bottom; thieves take from the top with one
 * CAS.  Thieves take half the items in one CAS, amortising the
 * contended top line (which on this 2-vCPU VM costs 100-270 ns to move).
 * The owner also takes from the top (weft__dq_take), not the bottom:
 * run queues must be FIFO, or a vthread that yields in a loop, or a stream
 * of fresh wake-ups, would starve the older entries on a carrier with no
 * thieves.  Locality for the vthread woken last comes from the carrier's
 * LIFO slot instead (as in Go and Tokio).  The array grows by doubling; an
 * old array may still be read by a thief, so it is retired onto a list and
 * freed only at shutdown (its size is bounded by the deque's peak).
 *
 * TSan does not model standalone fences, so TSan builds use seq_cst
 * operations in their place (same algorithm, same guarantees).
 */
#ifndef WEFT_DEQUE_H
#define WEFT_DEQUE_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct weft__dq_array {
    int64_t mask;
    struct weft__dq_array *retired; /* older arrays, freed at fini */
    _Atomic(void *) buf[];
} weft__dq_array;

typedef struct weft__deque {
    _Atomic int64_t top;
    char pad0[64 - sizeof(int64_t)];
    _Atomic int64_t bottom;
    _Atomic(weft__dq_array *) array;
    char pad1[64 - sizeof(int64_t) - sizeof(void *)];
} weft__deque;

static inline weft__dq_array *weft__dq_new_array(int64_t cap) {
    weft__dq_array *a = malloc(sizeof *a + (size_t)cap * sizeof(void *));
    if (a) { a->mask = cap - 1; a->retired = NULL; }
    return a;
}

static inline int weft__dq_init(weft__deque *d, int64_t cap) {
    atomic_init(&d->top, 0);
    atomic_init(&d->bottom, 0);
    weft__dq_array *a = weft__dq_new_array(cap);
    if (!a) return -1;
    atomic_init(&d->array, a);
    return 0;
}

static inline void weft__dq_fini(weft__deque *d) {
    weft__dq_array *a = atomic_load(&d->array);
    while (a) { weft__dq_array *r = a->retired; free(a); a = r; }
    atomic_store(&d->array, NULL);
}

/* Owner only.  Returns 0, or -1 when the array cannot grow (no memory). */
static inline int weft__dq_push(weft__deque *d, void *x) {
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    weft__dq_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
    if (b - t > a->mask) {
        weft__dq_array *n = weft__dq_new_array(2 * (a->mask + 1));
        if (!n) return -1;
        for (int64_t i = t; i < b; i++)
            atomic_store_explicit(&n->buf[i & n->mask],
                                  atomic_load_explicit(&a->buf[i & a->mask], memory_order_relaxed),
                                  memory_order_relaxed);
        n->retired = a;
        atomic_store_explicit(&d->array, n, memory_order_release);
        a = n;
    }
    atomic_store_explicit(&a->buf[b & a->mask], x, memory_order_relaxed);
    atomic_store_explicit(&d->bottom, b + 1, memory_order_release);
    return 0;
}

/*
 * Owner only: takes the oldest item (FIFO), or NULL.  The owner never pops
 * at the bottom, so the only race at the top is between takers, all of
 * which CAS top; that is why neither the take nor the steal needs the
 * fence the original algorithm puts between the owner's pop and a thief.
 */
static inline void *weft__dq_take(weft__deque *d) {
    for (;;) {
        int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
        int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
        if (t >= b) return NULL;
        weft__dq_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
        void *x = atomic_load_explicit(&a->buf[t & a->mask], memory_order_relaxed);
        if (atomic_compare_exchange_weak_explicit(&d->top, &t, t + 1, memory_order_acq_rel,
                                                  memory_order_relaxed))
            return x;
    }
}

/* Any thread: takes up to half of d's items, at most `max`, into out[]
 * with one CAS (amortising the contended top line over the batch).  Returns
 * the count, 0 when empty, -1 when it lost a race.  The slots read are safe:
 * the owner overwrites slot i only after top has moved past it, and our CAS
 * succeeds only if top has not moved. */
static inline int weft__dq_steal_half(weft__deque *d, void **out, int max) {
#ifdef WEFT_TSAN
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
#else
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
#endif
    int64_t n = b - t;
    if (n <= 0) return 0;
    n = n - n / 2;
    if (n > max) n = max;
    weft__dq_array *a = atomic_load_explicit(&d->array, memory_order_acquire);
    for (int64_t i = 0; i < n; i++)
        out[i] = atomic_load_explicit(&a->buf[(t + i) & a->mask], memory_order_relaxed);
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + n, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return -1;
    return (int)n;
}

/* Racy size estimate (any thread). */
static inline int64_t weft__dq_size(weft__deque *d) {
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    return b - t;
}

#endif
