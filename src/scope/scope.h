/*
 * scope layer internals (see scope.c), shared with the dump.
 */
#ifndef WEFT_SCOPE_INTERNAL_H
#define WEFT_SCOPE_INTERNAL_H

#include "../sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

/* A task's record: what its handle needs, freed as soon as nobody can ask
 * (scope.c, "Records").  72 bytes. */
struct weft_task {
    weft_scope *scope;
    struct weft_task *prev, *next; /* on s->live while it runs, then on s->kept while its handle is held */
    weft_thread *thread;      /* its vthread's descriptor: set as it starts, cleared as it finishes (under the scope's lock) */
    int (*fn)(void *, void **);
    void *arg;
    uint32_t magic;           /* WEFT__MAGIC_TASK; _DEAD once released or freed (sched.h: 32 bytes in, not last) */
    int error;
    void *result;
    _Atomic int state;        /* WEFT_TASK_* */
    unsigned char released;   /* the program let go of the handle (under the scope's lock) */
};

struct weft_scope {
    uint64_t id;
    unsigned fork_gen;        /* weft__fork_gen() at open: another value, a parent process's scope */
    int policy;
    int64_t deadline;         /* absolute; 0 = none (capped by the opener's) */
    weft_thread *owner;       /* NULL: a platform thread */
    uint32_t magic;           /* WEFT__MAGIC_SCOPE; _DEAD once closed (sched.h: 32 bytes in, not last) */
    uint64_t owner_id;
    weft_scope *parent;       /* in the tree: enclosing scope, or the owner's task's scope */
    weft_scope *owner_prev;   /* the owner's next-outer owned scope (under R) */
    weft_scope *live_prev, *live_next; /* registry (under R) */
    pthread_mutex_t lock;     /* guards what follows */
    weft_task *live;          /* forked and not finished: the tree walks cancel these */
    weft_task *kept;          /* finished, their handles held: freed by release or close */
    uint64_t ntasks;          /* forked, in all */
    int running;              /* forked and not ended: until the vthread is gone (weft__on_exit) */
    int shutdown;
    int timed_out;
    int cancelled;            /* shut down from outside the policy */
    int closing;              /* owner only */
    int shielded;             /* opened inside a weft_shield_begin region: its owner's cancellation skips it */
    int first_error;
    int has_winner;           /* FIRST_SUCCESS: winner_result is the winner's */
    void *winner_result;
    weft__parker *joiner;
    uint64_t joiner_token;
    /* the opener's scoped-value bindings at open: its forks see them (on
     * the opener's stack, which outlives the scope: scope.c) */
    const weft__sframe *bindings;
    uint32_t inherited;       /* keys they bind (for the dump) */
};

/* A structure violation (scope.c, "Left open"): names the scopes of the
 * chain from head, writes a dump, aborts.  who: "vthread #1 "main"
 * returned", "weft_shutdown was called". */
_Noreturn void weft__scopes_left_open(const char *who, weft_scope *head);

/* For weft_dump: the registry of open scopes, walked under its lock. */
void weft__scopes_lock(void);
void weft__scopes_unlock(void);
weft_scope *weft__scopes_first(void);

#endif
