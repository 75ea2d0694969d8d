/*
 * weft/async.h -- completion handlers on sockets, and timers
 * (AsynchronousServerSocketChannel, AsynchronousSocketChannel and
 * CompletionHandler).  Included by weft.h; the conventions stated there
 * apply.
 *
 * An asynchronous call starts an operation and returns at once; when the
 * operation ends, its handler `void h(ssize_t result, void *ctx)` is called
 * exactly once with the result (>= 0) or -errno.  No vthread waits for it:
 * a server written with these holds, per idle connection, only what it
 * allocated itself -- no stack, no buffer (weft_poll_async waits for bytes
 * without one).
 *
 * Where handlers run.  Each carrier has a dispatcher: a vthread pinned to
 * it (named "async K"; the dump shows it "parked on async completions" when
 * idle) that starts the operations asked of it and runs the handlers of
 * those that ended, one after another -- an event loop per carrier, as
 * Netty's.  An operation started from a vthread or a handler belongs to the
 * dispatcher of the carrier it runs on, so a chain of handlers (accept ->
 * read -> write -> read ...) stays on one carrier; one started from a
 * platform thread goes to the carriers in turn.  A handler may call any weft
 * function; one that blocks (weft_sleep, weft_recv, a mutex) parks the
 * dispatcher, which delays the other handlers of that carrier (never its
 * vthreads): give such handlers an executor (opts.executor, e.g. one made
 * by weft_executor_create_virtual) and they run there instead.  A busy
 * dispatcher -- its handlers keep starting operations that complete at
 * once -- lets the carrier's other vthreads and I/O completions in between
 * handlers, at least every 200 us.  A handler
 * that the executor refuses or discards is run by the dispatcher, or by the
 * thread that made the executor discard it, never lost.  The executor may
 * be closed while operations that name it are pending: the close does not
 * wait for them, and their handlers then run on the dispatcher (the
 * operations keep what they need of it).
 *
 * Closing: weft_close on a socket ends its operations with -EBADF (their
 * handlers run), as closing a channel ends Java's with
 * AsynchronousCloseException: those in flight, and those started but not
 * yet begun by their dispatcher -- these never touch the file that gets
 * the number next.  close(2) alone does not: use weft_close.
 * Operations still pending at weft_shutdown are dropped without their
 * handlers.
 *
 * Deadlines: opts.deadline (absolute, weft_now()'s clock; 0: none) ends an
 * operation that has not completed by then with -ETIMEDOUT (a read with a
 * timeout, as AsynchronousSocketChannel.read(dst, timeout, unit, ...)).
 * An operation that completed anyway returns its result: nothing received
 * is lost.
 *
 * Buffers passed to weft_recv_async and weft_send_async must stay valid
 * until the handler runs.  Calls return 0 when the operation was started
 * (the handler will run), or -EBADF (a negative fd), -EINVAL (another bad
 * argument) or -ENOMEM, and then the handler never runs.  Both io_uring and epoll backends serve them.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_ASYNC_H
#define WEFT_ASYNC_H

typedef void (*weft_handler)(ssize_t result, void *ctx);

typedef struct weft_async_opts {
    int64_t deadline;        /* absolute ns (weft_now()); 0: none */
    weft_executor *executor; /* where the handler runs; NULL: the dispatcher
                              * (may be closed first: see above) */
    int spread;              /* 1: the carriers' dispatchers in turn, not the
                              * caller's (as from a platform thread): to
                              * spread connections over the carriers, as
                              * Netty's EventLoopGroup.next() */
} weft_async_opts;

/* Accepts a connection on listening socket fd.  result: the new socket
 * (flags: SOCK_NONBLOCK, SOCK_CLOEXEC, as accept4) or -errno. */
WEFT_API int weft_accept_async(int fd, int flags, weft_handler h, void *ctx, const weft_async_opts *opts);

/* Receives at most n bytes into buf.  result: bytes received, 0 at end of
 * stream, or -errno (-ETIMEDOUT past opts->deadline). */
WEFT_API int weft_recv_async(int fd, void *buf, size_t n, int flags, weft_handler h, void *ctx,
                             const weft_async_opts *opts);

/* Sends all n bytes of buf (a partial send is continued).  result: n, or
 * -errno -- some bytes may have gone out before the error.  Pass
 * MSG_NOSIGNAL unless SIGPIPE is wanted. */
WEFT_API int weft_send_async(int fd, const void *buf, size_t n, int flags, weft_handler h, void *ctx,
                             const weft_async_opts *opts);

/* Waits until fd is ready for events (POLLIN, POLLOUT...).  result: the
 * events that are (revents, > 0) or -errno.  With POLLIN on an idle
 * connection, this is the wait that holds no buffer: read when it ends. */
WEFT_API int weft_poll_async(int fd, int events, weft_handler h, void *ctx, const weft_async_opts *opts);

/* Calls h(0, ctx) at deadline_ns (absolute, weft_now()'s clock; a deadline
 * already past: as soon as the dispatcher runs).  opts->deadline is not
 * used; opts->executor is. */
WEFT_API int weft_timer_async(int64_t deadline_ns, weft_handler h, void *ctx, const weft_async_opts *opts);

#endif /* WEFT_ASYNC_H */
