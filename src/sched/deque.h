/*
 * A Chase-Lev work-stealing deque of vthreads (Chase & Lev 2005, with the
 * C11 orderings of Le, Pop, Cohen & Zappa Nardelli 2013).
 *
 * The owner carrier pushes and pops at the bottom (LIFO, cache-warm); thieves
 * take from the top (FIFO, the oldest work) with one CAS.  The array grows by
 * doubling; an old array may still be read by a thief, so it is retired onto
 * a list and freed only at shutdown (its size is bounded by the deque's peak).
 *
 * Owner fast path: an empty deque is detected without the seq_cst fence,
 * because top only grows: bottom <= (a stale) top implies bottom <= top.
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

#define WEFT__DQ_EMPTY ((void *)0)
#define WEFT__DQ_ABORT ((void *)1)

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

/* Owner only.  Returns an item or NULL. */
static inline void *weft__dq_pop(weft__deque *d) {
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    if (b <= atomic_load_explicit(&d->top, memory_order_relaxed)) return NULL;
    b--;
    weft__dq_array *a = atomic_load_explicit(&d->array, memory_order_relaxed);
#ifdef WEFT_TSAN
    atomic_exchange_explicit(&d->bottom, b, memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
#else
    atomic_store_explicit(&d->bottom, b, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
#endif
    void *x = NULL;
    if (t <= b) {
        x = atomic_load_explicit(&a->buf[b & a->mask], memory_order_relaxed);
        if (t == b) {
            if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                         memory_order_relaxed))
                x = NULL;
            atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
        }
    } else {
        atomic_store_explicit(&d->bottom, b + 1, memory_order_relaxed);
    }
    return x;
}

/* Any thread.  Returns an item, WEFT__DQ_EMPTY or WEFT__DQ_ABORT (lost a
 * race: try again). */
static inline void *weft__dq_steal(weft__deque *d) {
#ifdef WEFT_TSAN
    int64_t t = atomic_load_explicit(&d->top, memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_seq_cst);
#else
    int64_t t = atomic_load_explicit(&d->top, memory_order_acquire);
    atomic_thread_fence(memory_order_seq_cst);
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_acquire);
#endif
    if (t >= b) return WEFT__DQ_EMPTY;
    weft__dq_array *a = atomic_load_explicit(&d->array, memory_order_acquire);
    void *x = atomic_load_explicit(&a->buf[t & a->mask], memory_order_relaxed);
    if (!atomic_compare_exchange_strong_explicit(&d->top, &t, t + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return WEFT__DQ_ABORT;
    return x;
}

/* Racy size estimate (any thread). */
static inline int64_t weft__dq_size(weft__deque *d) {
    int64_t b = atomic_load_explicit(&d->bottom, memory_order_relaxed);
    int64_t t = atomic_load_explicit(&d->top, memory_order_relaxed);
    return b - t;
}

#endif
