/*
 * weft_tls.h -- OpenSSL over weft's socket calls, for weft's programs
 * (weft-load's client now; weft-httpd's server next).
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
 */
#ifndef WEFT_TLS_H
#define WEFT_TLS_H

#include <openssl/bio.h>
#include <openssl/ssl.h>

/* A BIO over fd, or NULL (no memory). */
BIO *weft_tls_bio_new(int fd);

/* The -errno that ended the BIO's last failed read or write (0: none, or
 * EOF). */
int weft_tls_bio_error(BIO *b);

/* OpenSSL's first queued error as text (into buf), or what fallback says;
 * the queue is cleared.  Returns buf. */
const char *weft_tls_error(char *buf, size_t len, const char *fallback);

#endif
