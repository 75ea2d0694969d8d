/*
 * Timer heaps: one per carrier, a 4-ary min-heap of park deadlines.
 *
 * An entry is {deadline, vthread, park token}; firing it tries to end that
 * park with WEFT__PS_TIMEDOUT, which fails harmlessly if the park has ended
 * already (the token's sequence number never repeats in a stack slot, and
 * slots stay mapped until shutdown).  So a park that ends early -- woken,
 * cancelled -- does not remove its entry: it only counts it dead, and dead
 * entries are dropped when they reach the top or, once they are more than
 * half the heap, by a compaction pass.  Insert is O(log n) and early ends
 * are O(1), and heap operations touch only the heap's own array: the
 * descriptors the entries point to sit a page apart each, and visiting them
 * while sifting cost a TLB miss per level (seconds for a million timers).
 * A 4-ary heap is shallow (10 levels for a million) and its four children
 * share cache lines.
 *
 * A heap is locked by its mutex: the owner carrier inserts and fires; a
 * carrier looking for work (spinning, not asleep) and the monitor (for a
 * carrier that runs one vthread all along: spares.c) may fire a busy
 * carrier's expired timers.  `min` mirrors the
 * earliest deadline so that the scheduler can peek without the lock, and
 * `dead` is updated without it.
 */
#ifndef WEFT_TIMER_H
#define WEFT_TIMER_H

#include "sched.h"

typedef struct weft__theap_ent {
    int64_t when;
    weft_thread *t;
    uint64_t token;
} weft__theap_ent;

typedef struct weft__theap {
    pthread_mutex_t lock;
    weft__theap_ent *a;
    int32_t n, cap;
    _Atomic int64_t min;  /* INT64_MAX when empty */
    _Atomic int64_t dead; /* entries whose park ended otherwise (may lag) */
} weft__theap;

void weft__theap_init(weft__theap *h);
void weft__theap_fini(weft__theap *h);
/* lock held for these two */
int weft__theap_insert(weft__theap *h, int64_t when, weft_thread *t, uint64_t token); /* 0 or -ENOMEM */
int weft__theap_pop_due(weft__theap *h, int64_t now, weft__theap_ent *out);         /* 1 or 0 */

#endif
