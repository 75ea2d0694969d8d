/*
 * Carrier groups: the scheduler's per-group state (see group.c's essay).
 * Private to src/sched: sched.c runs the carriers, group.c the life of a
 * group (create, close, stats, the list the monitor and the dump walk).
 */
#ifndef WEFT_GROUP_H
#define WEFT_GROUP_H

#include "sched.h"
#include "tfifo.h"

struct weft_group {
    /* read-mostly: set before the group's carriers start (stop: once) */
    _Atomic uint64_t *idle_mask;   /* (n + 63) / 64 words, bit gidx; the default group's is R's */
    weft__carrier **c;             /* by gidx; the default group's is R.c (spares after the configured ones) */
    int n;                         /* carriers (the default group: configured, spares not counted) */
    int dflt;                      /* the default group (the runtime's pool) */
    int compute;                   /* weft_group_opts.compute: no hog events for its carriers */
    _Atomic int stop;              /* its carriers end (weft_group_close) */
    uint32_t id;                   /* 0: the default group; then 1, 2 ... */
    char name[32];
    /* The group's injection queue: its vthreads made runnable away from
     * its carriers (a platform thread, the monitor, another group's
     * carrier, a full deque).  Only this group's carriers pop it. */
    weft__tfifo inj;
    /* Idle carriers, per group: the wake-up protocol of sched.c's top
     * comment ("Waking idle carriers") holds inside each group, with
     * these counts and the mask above. */
    _Alignas(WEFT__CACHELINE) _Atomic int nidle;
    _Atomic int nspinning;
    /* life (not for the default group) */
    _Alignas(WEFT__CACHELINE) _Atomic int64_t nlive; /* its vthreads spawned and not finished, hand-offs, +1 while open */
    _Atomic int closing;           /* weft_group_close began: spawns refused */
    _Atomic uint64_t started;      /* vthreads ever spawned into it */
    pthread_mutex_t lock;          /* drained, closer, closer_token */
    int drained;                   /* nlive reached 0 after the close (under lock) */
    weft__parker *closer;          /* weft_group_close waits here for drained */
    uint64_t closer_token;
    weft_group *next;              /* the list of open groups (weft__groups) */
};

/* The open groups other than the default one, newest first: the monitor
 * walks it under mon_lock, the counters and the dump under lock. */
typedef struct weft__group_list {
    /* The list changes under both locks (mon_lock first); the monitor
     * walks it under mon_lock alone, so that its slow look (a stall's
     * probe reads /proc) never holds `lock`, which weft_stats_get, the
     * dump and spawning code paths take: a vthread calling those would
     * otherwise block on it and look pinned to the probe. */
    pthread_mutex_t mon_lock;
    pthread_mutex_t lock;
    weft_group *head;
    int ngroups;
    int down;        /* weft_shutdown closed them all: weft_group_create refuses */
} weft__group_list;
extern weft__group_list weft__groups;

/* sched.c: the default group (the runtime's carriers). */
weft_group *weft__group_default(void);
/* group.c: starts g->n carriers for g (indices from the group range);
 * 0 or -EAGAIN (no carrier index left: WEFT__MAX_CARRIERS in all) or
 * -ENOMEM / -errno (a thread or poller could not be made).  On failure
 * nothing is left running. */
int weft__group_carriers_start(weft_group *g);
/* group.c: stops and frees g's carriers (none of its vthreads is left):
 * their counters are kept in the runtime's totals.  Caller holds
 * weft__groups.lock and has unlinked g. */
void weft__group_carriers_stop(weft_group *g);
/* group.c: per-group counters (racy sums over its carriers). */
void weft__group_sum(weft_group *g, uint64_t *switches, uint64_t *steals, uint64_t *runnable);
/* group.c: the carrier indices of g into idx (at most cap); returns the count. */
int weft__group_carrier_indices(weft_group *g, int *idx, int cap);
/* sched.c: the calling vthread's group (NULL on a platform thread). */
weft_group *weft__group_self(void);
/* group.c: the caller took g's count to 0 (g is closing): wake the closer. */
void weft__group_last_exit(weft_group *g);
/* group.c: counts a spawn into g; -ESHUTDOWN once g's count is 0. */
int weft__group_ref(weft_group *g);
/* group.c, from weft_shutdown (no vthread runs any more): frees every
 * group still open. */
void weft__groups_shutdown(void);

#endif /* WEFT_GROUP_H */
