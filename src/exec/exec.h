/*
 * exec layer internals, for the observe layer.
 */
#ifndef WEFT_EXEC_INT_H
#define WEFT_EXEC_INT_H

#include "weft.h"

/* Calls fn for every live executor with a snapshot of its counters
 * (weft_dump).  fn must not call into the executors. */
void weft__executors_each(void (*fn)(const char *label, const weft_executor_stats *s, int shut, void *ctx),
                          void *ctx);

#endif /* WEFT_EXEC_INT_H */
