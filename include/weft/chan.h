/*
 * weft/chan.h -- channels and select (Go's chan, CSP message passing).
 * Included by weft.h; the conventions stated there apply.
 *
 * A channel carries fixed-size messages of elem_size bytes, copied in by
 * the sender and out by the receiver.  Capacity 0 makes a rendezvous
 * channel: a send completes only when a receiver takes the message (and
 * the other way round).  Capacity N > 0 buffers up to N messages, FIFO.
 * Any number of senders and receivers may use a channel at once, vthreads
 * and platform threads alike; a blocked vthread parks (its carrier runs
 * other vthreads), a blocked platform thread sleeps.
 *
 * Messages from one sender arrive in the order it sent them.  Every
 * message sent is received exactly once, unless the channel is closed
 * while the message still waits in its buffer and nobody drains it.
 *
 * Blocking calls (send, recv, select) are cancellation points: a cancelled
 * caller gets -ECANCELED at once, even when the operation could have
 * completed, so that a cancelled vthread winds down.  They honour the
 * effective deadline (weft_deadline_set, plus the _until/select deadline),
 * which matters only when the call would have to wait: an operation that
 * can complete at once does, whatever the deadline.  A send that returns
 * -ECANCELED or -ETIMEDOUT sent nothing; a receive that does received
 * nothing (the message stays for the next receiver).  The try_ forms never
 * wait and are not cancellation points.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_CHAN_H
#define WEFT_CHAN_H


#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Channels                                                                  */
/* ------------------------------------------------------------------------ */


/*
 * Makes a channel for messages of elem_size bytes (0 is allowed: messages
 * that carry no data, only the event) with room for `capacity` of them
 * (0 = rendezvous).  The buffer is allocated here, once: operations never
 * allocate.  Stores the channel in *c and returns 0, or (*c then NULL
 * where c is not) -EINVAL (c NULL, or elem_size * capacity overflows) or
 * -ENOMEM.
 */
WEFT_API int weft_chan_create(weft_chan **c, size_t elem_size, size_t capacity);

/*
 * Sends the elem_size bytes at msg (NULL only when elem_size is 0), waiting
 * for room or a receiver as long as needed.  Returns 0 when the message is
 * in the channel (buffered) or taken (rendezvous); -EPIPE when the channel
 * is or gets closed first (the message was not sent); -ECANCELED;
 * -ETIMEDOUT; -EINVAL (c NULL).
 */
WEFT_API int weft_chan_send(weft_chan *c, const void *msg);

/*
 * Receives the oldest message into msg (elem_size bytes; NULL discards it),
 * waiting for one as long as needed.  Returns 0; -EPIPE once the channel is
 * closed and every message sent before the close has been received;
 * -ECANCELED; -ETIMEDOUT; -EINVAL (c NULL).
 */
WEFT_API int weft_chan_recv(weft_chan *c, void *msg);

/* As weft_chan_send / _recv, waiting at most until deadline_ns (absolute,
 * weft_now(); 0 = none; the effective deadline applies too). */
WEFT_API int weft_chan_send_until(weft_chan *c, const void *msg, int64_t deadline_ns);
WEFT_API int weft_chan_recv_until(weft_chan *c, void *msg, int64_t deadline_ns);

/*
 * Non-blocking forms: they complete the operation when it can be done at
 * once (room in the buffer, or a receiver / sender already waiting) and
 * return 0; otherwise -EAGAIN.  -EPIPE as above.
 */
WEFT_API int weft_chan_try_send(weft_chan *c, const void *msg);
WEFT_API int weft_chan_try_recv(weft_chan *c, void *msg);

/*
 * Closes the channel: later sends fail with -EPIPE, and so do the senders
 * waiting now (their messages are not delivered).  Receivers get what is
 * still buffered, then -EPIPE; receivers waiting now wake with -EPIPE.
 * Returns 0, or -EPIPE when the channel was already closed (-EINVAL: c NULL).
 */
WEFT_API int weft_chan_close(weft_chan *c);

/*
 * Frees the channel and any messages still buffered.  The caller
 * guarantees that nobody uses it any more: freeing a channel that a thread
 * still waits on stops the program with a message.  NULL is ignored.
 */
WEFT_API void weft_chan_free(weft_chan *c);

/* Messages buffered now (a snapshot), and the capacity. */
WEFT_API size_t weft_chan_len(const weft_chan *c);
WEFT_API size_t weft_chan_cap(const weft_chan *c);

/* ------------------------------------------------------------------------ */
/* Select                                                                    */
/* ------------------------------------------------------------------------ */

enum { WEFT_CASE_SEND = 1, WEFT_CASE_RECV = 2 };

/*
 * One case of a select.  chan NULL: the case is ignored (Go's nil
 * channel).  op: WEFT_CASE_SEND (msg points to the message to send) or
 * WEFT_CASE_RECV (msg receives the message; NULL discards it).  result is
 * written for the case that fires: 0, or -EPIPE when it fired because its
 * channel is closed (a send to a closed channel; a receive from a closed
 * and drained one).
 */
typedef struct weft_case {
    weft_chan *chan;
    int op;
    int result;
    void *msg;
} weft_case;

/* Initialisers: weft_case cs[] = { WEFT_SEND(a, &x), WEFT_RECV(b, &y) }; */
#define WEFT_SEND(c, m) {(c), WEFT_CASE_SEND, 0, (void *)(uintptr_t)(const void *)(m)}
#define WEFT_RECV(c, m) {(c), WEFT_CASE_RECV, 0, (void *)(m)}

/*
 * Waits until one of the n cases can proceed, performs exactly that one
 * and returns its index (its result in cases[i].result).  When several are
 * ready, one is chosen at random, so that over many selects each ready case
 * fires about equally often.  Returns -ETIMEDOUT at deadline_ns (absolute,
 * weft_now(); 0 = none; the effective deadline applies too), -ECANCELED,
 * or -EINVAL (cases NULL with n > 0, or a case with a bad op).  With no
 * case left (n == 0, or all chans NULL) it waits for the deadline or the
 * cancellation, as Go's empty select does.  Cases beyond 32 cost one
 * allocation per select (-ENOMEM when it fails); up to 32, none.
 *
 * weft_try_select does not wait: the index of a case that could proceed at
 * once, or -EAGAIN.
 */
WEFT_API int weft_select(weft_case *cases, size_t n, int64_t deadline_ns);
WEFT_API int weft_try_select(weft_case *cases, size_t n);

/* Call-site capture (see weft.h): the real functions stay callable as
 * (weft_chan_send)(c, m) or through pointers. */
WEFT_API int weft__chan_send_at(weft_chan *c, const void *msg, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__chan_recv_at(weft_chan *c, void *msg, int64_t deadline_ns, const char *file, int line);
WEFT_API int weft__select_at(weft_case *cases, size_t n, int64_t deadline_ns, const char *file, int line);

#define weft_chan_send(c, m) weft__chan_send_at((c), (m), 0, __FILE__, __LINE__)
#define weft_chan_recv(c, m) weft__chan_recv_at((c), (m), 0, __FILE__, __LINE__)
#define weft_chan_send_until(c, m, d) weft__chan_send_at((c), (m), (d), __FILE__, __LINE__)
#define weft_chan_recv_until(c, m, d) weft__chan_recv_at((c), (m), (d), __FILE__, __LINE__)
#define weft_select(cs, n, d) weft__select_at((cs), (n), (d), __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif /* WEFT_CHAN_H */
