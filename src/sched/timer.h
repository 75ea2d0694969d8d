/*
 * Timer heaps: one per carrier, a 4-ary min-heap of weft__timer pointers
 * keyed by deadline.  Each timer knows its index, so cancel is O(log n) like
 * insert; a 4-ary heap is shallower than a binary one (10 levels for a
 * million timers) and its children share cache lines.
 *
 * A heap is locked by its mutex: the owner carrier inserts and fires; a
 * vthread that resumed on another carrier removes its own timer; an idle
 * carrier may fire a busy carrier's expired timers.  `min` mirrors the
 * earliest deadline so that the scheduler can peek without the lock.
 */
#ifndef WEFT_TIMER_H
#define WEFT_TIMER_H

#include "sched.h"

typedef struct weft__theap_ent {
    int64_t when;
    weft__timer *t;
} weft__theap_ent;

typedef struct weft__theap {
    pthread_mutex_t lock;
    weft__theap_ent *a;
    int32_t n, cap;
    _Atomic int64_t min; /* INT64_MAX when empty */
} weft__theap;

void weft__theap_init(weft__theap *h);
void weft__theap_fini(weft__theap *h);
/* lock held for all of these */
int weft__theap_insert(weft__theap *h, weft__timer *t);   /* 0 or -ENOMEM */
void weft__theap_remove(weft__theap *h, weft__timer *t);  /* t->idx >= 0 */
weft__timer *weft__theap_pop_due(weft__theap *h, int64_t now); /* NULL if none */

#endif
