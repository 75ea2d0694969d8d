/*
 * Wait lists for the exec layer (executors, file channels): records on the
 * waiters' own stacks -- parker and token -- linked under the owner's
 * pthread mutex, as futures' getters are.  A waker unlinks a record and
 * unparks it; if that unpark loses (the waiter timed out or was cancelled
 * in the same instant) it wakes the next one, so no wake is lost.  The
 * mutex is never held across a park.
 */
#ifndef WEFT_EXEC_XWAIT_H
#define WEFT_EXEC_XWAIT_H

#include "../sched/sched.h"

#include <errno.h>
#include <pthread.h>

typedef struct xwait {
    struct xwait *next, *prev;
    weft__parker *p;
    uint64_t tok;
    int linked;
} xwait;

typedef struct xlist {
    xwait *head, *tail;
} xlist;

static inline void xl_push(xlist *l, xwait *w) {
    w->next = NULL;
    w->prev = l->tail;
    if (l->tail) l->tail->next = w;
    else l->head = w;
    l->tail = w;
    w->linked = 1;
}

static inline void xl_remove(xlist *l, xwait *w) {
    if (w->prev) w->prev->next = w->next;
    else l->head = w->next;
    if (w->next) w->next->prev = w->prev;
    else l->tail = w->prev;
    w->linked = 0;
}

/* Wakes the first waiter whose park is still waiting; 1 if one woke. */
static inline int xl_wake_one(xlist *l) {
    while (l->head) {
        xwait *w = l->head;
        xl_remove(l, w);
        if (weft__unpark(w->p, w->tok, WEFT__PS_WOKEN)) return 1; /* w may be gone now */
    }
    return 0;
}

static inline void xl_wake_all(xlist *l) {
    while (xl_wake_one(l)) {
    }
}

/* Waits on l until woken, deadline (absolute; 0 none) or, unless nocancel,
 * cancellation: 0, -ETIMEDOUT or -ECANCELED.  Entered and left with m held.
 * obj is what the dump shows the wait is on. */
static inline int xl_wait(pthread_mutex_t *m, xlist *l, int64_t deadline, int nocancel, const void *obj) {
    weft__parker *p;
    uint64_t tok = nocancel ? weft__park_begin_nocancel(&p, WEFT__PK_GENERIC) : weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    xwait w = {.p = p, .tok = tok};
    xl_push(l, &w);
    pthread_mutex_unlock(m);
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_EXECUTOR, obj, NULL, 0);
    pthread_mutex_lock(m);
    if (w.linked) xl_remove(l, &w);
    return r;
}

#endif /* WEFT_EXEC_XWAIT_H */
