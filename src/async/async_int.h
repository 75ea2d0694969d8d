/*
 * The async layer's internals that the runtime's life calls: the layer
 * above exec that holds asynchronous socket operations with completion
 * handlers (async.c, include/weft/async.h) and file channels (file.c,
 * include/weft/file.h).  It uses io (operations, fd use counts), exec
 * (handlers run on executors) and sync; nothing below calls it: the
 * backends hand an operation back through its iop's kdone (io.h).
 */
#ifndef WEFT_ASYNC_INT_H
#define WEFT_ASYNC_INT_H

/* weft_shutdown, the carriers gone, before weft__io_stop: the operations
 * left are dropped, their handlers unrun (include/weft/async.h says so). */
void weft__async_stop(void);
/* a fork child: forgets the parent's dispatchers */
void weft__async_fork_child(void);

#endif /* WEFT_ASYNC_INT_H */
