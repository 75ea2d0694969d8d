/*
 * weft_tls.h -- OpenSSL over weft's socket calls, for weft's programs
 * (weft-load's client, weft-httpd's server).
 *
 * A BIO of our own whose read and write are weft_recv and weft_send: an
 * SSL_connect, SSL_read or SSL_write on a vthread parks it in weft's ring
 * (io_uring or epoll) exactly where the plain socket call would, under the
 * vthread's deadline (weft_deadline_set) and cancellation -- no libc hooks
 * needed, and no OpenSSL socket BIO calling read(2) behind weft's back.
 * Why not the hooks (WEFT_HOOK=1, OpenSSL's own socket BIO): they would
 * park too, but only in a process that turned them on, and the error that
 * ended a read (ETIMEDOUT from the deadline, ECONNRESET) would reach us only
 * as errno through OpenSSL's error queue; here the BIO keeps it
 * (weft_tls_bio_error), so a caller tells a timeout from a reset.  What the
 * socket BIO would give and this one does not: kernel TLS, which OpenSSL
 * enables through the socket BIO's BIO_CTRL_SET_KTLS -- a later step (this
 * machine's kernel has no "tls" ULP anyway).
 *
 * The BIO is blocking in weft's sense: a read or write returns only with
 * bytes, EOF, or an error, never "retry".  One per connection, owned by the
 * SSL it is given to (SSL_set_bio); fd stays the caller's to close.
 *
 * Code that waits for readiness itself -- completion handlers, which must
 * not park (weft-httpd --model async) -- turns the BIO non-blocking
 * (weft_tls_bio_set_nonblock): a read or write that would wait makes one
 * recv or send with MSG_DONTWAIT and says "retry" (SSL_ERROR_WANT_READ or
 * _WRITE), and the caller waits with weft_poll_async and calls again.  The
 * deadline is then the caller's to keep; MSG_MORE still applies.
 */
#ifndef WEFT_TLS_H
#define WEFT_TLS_H

#include <stdint.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

/* A BIO over fd, or NULL (no memory). */
BIO *weft_tls_bio_new(int fd);

/* The deadline (absolute, weft_now(); 0: none) of the BIO's reads and
 * writes from now on, on top of the calling thread's own (weft_X_until):
 * a server gives a handshake, a request or a response its timeout. */
void weft_tls_bio_set_deadline(BIO *b, int64_t deadline_ns);

/* more != 0: the BIO's writes go out with MSG_MORE (more records follow at
 * once: the kernel may hold a partial segment) until it is set back to 0. */
void weft_tls_bio_set_more(BIO *b, int more);

/* nonblock != 0: the BIO's reads and writes do not wait (above). */
void weft_tls_bio_set_nonblock(BIO *b, int nonblock);

/* The -errno that ended the BIO's last failed read or write (0: none, or
 * EOF). */
int weft_tls_bio_error(BIO *b);

/* OpenSSL's first queued error as text (into buf), or what fallback says;
 * the queue is cleared.  Returns buf. */
const char *weft_tls_error(char *buf, size_t len, const char *fallback);

#endif
