/*
 * A locked FIFO of vthreads, linked through weft_thread.next: the
 * scheduler's injection queue (one per group, group.h) and each carrier's
 * mailbox (internal.h) are both one.  Anyone pushes, under the mutex; the
 * owner (the group's carriers, the mailbox's carrier) pops.  n is kept
 * beside the list so that a carrier can skip an empty queue with one
 * relaxed load and no lock (weft__tfifo_pop), and the counters and the
 * monitor can read its length without taking the lock.  The list needs no
 * memory: a push cannot fail, which is why a full deque spills into the
 * injection queue.
 */
#ifndef WEFT_SCHED_TFIFO_H
#define WEFT_SCHED_TFIFO_H

#include "sched.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct weft__tfifo {
    _Alignas(WEFT__CACHELINE) pthread_mutex_t lock;
    weft_thread *head, *tail;
    _Atomic int64_t n; /* entries; read without the lock */
} weft__tfifo;

static inline void weft__tfifo_init(weft__tfifo *q) {
    pthread_mutex_init(&q->lock, NULL);
    q->head = q->tail = NULL;
    atomic_store(&q->n, 0);
}

static inline void weft__tfifo_fini(weft__tfifo *q) { pthread_mutex_destroy(&q->lock); }

/* Forgets the entries without touching the lock (fork's child, shutdown). */
static inline void weft__tfifo_clear(weft__tfifo *q) {
    q->head = q->tail = NULL;
    atomic_store(&q->n, 0);
}

/* Racy: how many are queued. */
static inline int64_t weft__tfifo_len(const weft__tfifo *q) {
    return atomic_load_explicit(&((weft__tfifo *)q)->n, memory_order_relaxed);
}

static inline void weft__tfifo_push(weft__tfifo *q, weft_thread *t) {
    t->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->tail) q->tail->next = t;
    else q->head = t;
    q->tail = t;
    atomic_fetch_add(&q->n, 1);
    pthread_mutex_unlock(&q->lock);
}

static inline weft_thread *weft__tfifo_pop_locked(weft__tfifo *q) {
    pthread_mutex_lock(&q->lock);
    weft_thread *t = q->head;
    if (t) {
        q->head = t->next;
        if (!q->head) q->tail = NULL;
        atomic_fetch_sub(&q->n, 1);
    }
    pthread_mutex_unlock(&q->lock);
    return t;
}

/* The head, or NULL; an empty queue costs one relaxed load. */
static inline weft_thread *weft__tfifo_pop(weft__tfifo *q) {
    if (weft__tfifo_len(q) <= 0) return NULL;
    return weft__tfifo_pop_locked(q);
}

#endif /* WEFT_SCHED_TFIFO_H */
