/*
 * exec layer internals, for the observe and io layers.
 */
#ifndef WEFT_EXEC_INT_H
#define WEFT_EXEC_INT_H

#include "weft.h"

/* Calls fn for every live executor with a snapshot of its counters
 * (weft_dump).  fn must not call into the executors. */
void weft__executors_each(void (*fn)(const char *label, const weft_executor_stats *s, int shut, void *ctx),
                          void *ctx);

/* A reference on e for an asynchronous operation that names it as its
 * handler's executor (async/async.c), taken while e is open: e's memory lives,
 * shut, after weft_executor_close until the last is dropped, so a handler
 * submitted then is refused (the dispatcher runs it) rather than a use
 * after free.  Close does not wait for these. */
void weft__executor_ref(weft_executor *e);
void weft__executor_unref(weft_executor *e);

#endif /* WEFT_EXEC_INT_H */
