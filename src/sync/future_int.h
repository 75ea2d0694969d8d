/*
 * Futures, for the layers below sync: a watch is a callback node that runs
 * once when a future is filled, like a dependent's, but feeds no future.
 * The executors (src/exec) watch each task's future to learn that it was
 * cancelled by its owner.
 */
#ifndef WEFT_SYNC_FUTURE_INT_H
#define WEFT_SYNC_FUTURE_INT_H

#include "weft.h"

/* A callback node.  target: the dependent it feeds, or NULL for a watch.
 * v/err: the input's outcome, stamped before the node runs. */
typedef struct weft__fnode {
    struct weft__fnode *next;
    weft_future *target;
    void *v;
    int err;
    void (*watch)(struct weft__fnode *n); /* a watch's callback */
} weft__fnode;

/*
 * Links n (whose watch is set; target is set NULL here) into f's callbacks:
 * n->watch(n) runs exactly once, with n->v / n->err filled, on the thread
 * that fills f, after f's getters are woken -- or at once, on the caller,
 * when f is already filled.  The node must stay valid until then; it holds
 * no reference on f.
 */
void weft__future_watch(weft_future *f, weft__fnode *n);

#endif /* WEFT_SYNC_FUTURE_INT_H */
