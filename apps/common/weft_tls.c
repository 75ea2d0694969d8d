/*
 * weft_tls.c -- the BIO over weft's socket calls (the design is
 * weft_tls.h's).  The method is made once (pthread_once) and shared; each
 * BIO's data is a small struct: the fd, the last error, the deadline and
 * the MSG_MORE flag of its calls.
 */
#define _GNU_SOURCE
#include "weft_tls.h"

#include <weft.h>

#include <errno.h>
#include <openssl/err.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef struct wbio {
    int fd;
    int err;          /* -errno of the last failed call */
    int more;         /* MSG_MORE on writes */
    int nonblock;     /* recv/send with MSG_DONTWAIT; EAGAIN: retry */
    int64_t deadline; /* of every read and write (0: none) */
} wbio;

static BIO_METHOD *method;
static pthread_once_t method_once = PTHREAD_ONCE_INIT;

/* The non-blocking BIO's call: bytes, or -errno (-EAGAIN: none now). */
static ssize_t nb_call(wbio *w, char *buf, size_t n, int write) {
    ssize_t r;
    do r = write ? send(w->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT | (w->more ? MSG_MORE : 0))
                 : recv(w->fd, buf, n, MSG_DONTWAIT);
    while (r < 0 && errno == EINTR);
    return r < 0 ? (errno == EWOULDBLOCK ? -EAGAIN : -errno) : r;
}

static int wb_write(BIO *b, const char *buf, size_t n, size_t *done) {
    wbio *w = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t r = w->nonblock ? nb_call(w, (char *)buf, n, 1)
                            : weft_send_until(w->fd, buf, n, MSG_NOSIGNAL | (w->more ? MSG_MORE : 0), w->deadline);
    if (r == -EAGAIN && w->nonblock) {
        BIO_set_retry_write(b);
        *done = 0;
        return 0;
    }
    if (r <= 0) {
        w->err = r < 0 ? (int)r : -EIO;
        *done = 0;
        return 0;
    }
    *done = (size_t)r;
    return 1;
}

static int wb_read(BIO *b, char *buf, size_t n, size_t *done) {
    wbio *w = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    ssize_t r = w->nonblock ? nb_call(w, buf, n, 0) : weft_recv_until(w->fd, buf, n, 0, w->deadline);
    *done = 0;
    if (r == -EAGAIN && w->nonblock) {
        BIO_set_retry_read(b);
        return 0;
    }
    if (r < 0) {
        w->err = (int)r;
        return 0;
    }
    if (r == 0) { /* EOF: OpenSSL asks BIO_eof (the ctrl below) */
        BIO_set_flags(b, BIO_FLAGS_IN_EOF);
        return 0;
    }
    *done = (size_t)r;
    return 1;
}

static long wb_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)num;
    wbio *w = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH: return 1; /* nothing is buffered here */
    case BIO_CTRL_EOF: return BIO_test_flags(b, BIO_FLAGS_IN_EOF) != 0;
    case BIO_C_GET_FD:
        if (ptr) *(int *)ptr = w->fd;
        return w->fd;
    case BIO_CTRL_PUSH:
    case BIO_CTRL_POP: return 0;
    default: return 0;
    }
}

static int wb_create(BIO *b) {
    BIO_set_init(b, 0);
    return 1;
}

static int wb_destroy(BIO *b) {
    free(BIO_get_data(b));
    BIO_set_data(b, NULL);
    return 1;
}

static void make_method(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "weft socket");
    if (!m) return;
    if (!BIO_meth_set_write_ex(m, wb_write) || !BIO_meth_set_read_ex(m, wb_read) || !BIO_meth_set_ctrl(m, wb_ctrl) ||
        !BIO_meth_set_create(m, wb_create) || !BIO_meth_set_destroy(m, wb_destroy)) {
        BIO_meth_free(m);
        return;
    }
    method = m;
}

BIO *weft_tls_bio_new(int fd) {
    pthread_once(&method_once, make_method);
    if (!method) return NULL;
    wbio *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    BIO *b = BIO_new(method);
    if (!b) {
        free(w);
        return NULL;
    }
    w->fd = fd;
    BIO_set_data(b, w);
    BIO_set_init(b, 1);
    return b;
}

void weft_tls_bio_set_deadline(BIO *b, int64_t deadline_ns) {
    wbio *w = b ? BIO_get_data(b) : NULL;
    if (w) w->deadline = deadline_ns;
}

void weft_tls_bio_set_more(BIO *b, int more) {
    wbio *w = b ? BIO_get_data(b) : NULL;
    if (w) w->more = more;
}

void weft_tls_bio_set_nonblock(BIO *b, int nonblock) {
    wbio *w = b ? BIO_get_data(b) : NULL;
    if (w) w->nonblock = nonblock;
}

int weft_tls_bio_error(BIO *b) {
    wbio *w = b ? BIO_get_data(b) : NULL;
    return w ? w->err : 0;
}

const char *weft_tls_error(char *buf, size_t len, const char *fallback) {
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, buf, len);
    else snprintf(buf, len, "%s", fallback);
    ERR_clear_error();
    return buf;
}
