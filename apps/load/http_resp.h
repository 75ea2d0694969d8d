/*
 * http_resp.h -- weft-load's incremental HTTP/1.1 response parser.
 *
 * The parser never copies the response: it is fed the bytes received so far
 * and consumes what it can.  Line-shaped parts (status line, header lines,
 * chunk-size lines, the CRLF after a chunk, trailers) are consumed only
 * whole, so a caller keeps the unconsumed tail (at most RESP_MAX_LINE bytes)
 * and feeds it again, followed by newly received bytes.  Body bytes are
 * counted and skipped.
 *
 * Framing (RFC 9112 section 6.3): no body for a response to HEAD, for 1xx,
 * 204 and 304; Transfer-Encoding whose last coding is chunked: chunks up to
 * the zero-size chunk and the trailer section; another Transfer-Encoding:
 * until the connection closes; Content-Length: that many bytes; neither:
 * until the connection closes.  Interim 1xx responses (100, 103) are skipped.
 * Line ends may be CRLF or a bare LF.
 *
 * Usage:  resp_begin(&r, is_head); then resp_feed() as bytes arrive until it
 * says RESP_DONE (*used = bytes of this response; anything after them is not
 * part of it) or RESP_ERROR (r.error says what); on end of stream call
 * resp_eof(), which completes a body read until close and fails anything
 * else.
 */
#ifndef WEFT_LOAD_HTTP_RESP_H
#define WEFT_LOAD_HTTP_RESP_H

#include <stddef.h>
#include <stdint.h>

#define RESP_MAX_LINE 8192

enum { RESP_ERROR = -1, RESP_MORE = 0, RESP_DONE = 1 };

typedef struct resp {
    int head;               /* the request was HEAD */
    int state;
    int status;             /* the final status code (0 until the status line is in) */
    int minor;              /* HTTP/1.minor of the status line */
    int close;              /* the connection cannot be reused after this response */
    int keepalive_token;    /* Connection: keep-alive seen */
    int chunked;            /* last Transfer-Encoding coding is chunked */
    int te_other;           /* a Transfer-Encoding that does not end in chunked */
    int64_t content_length; /* -1: none */
    uint64_t left;          /* bytes left in the body or the current chunk */
    uint64_t body_bytes;    /* body bytes (chunk data only, for chunked) */
    uint64_t bytes;         /* bytes consumed, headers and framing included */
    const char *error;      /* set with RESP_ERROR */
    int want_server;        /* copy the Server header into server[] */
    char server[64];
} resp;

void resp_begin(resp *r, int head);
/* Consumes from buf[0..len); *used gets the count consumed.  Returns
 * RESP_MORE (feed the unconsumed rest again with more bytes), RESP_DONE or
 * RESP_ERROR. */
int resp_feed(resp *r, const char *buf, size_t len, size_t *used);
/* The peer closed the connection: RESP_DONE when the body runs to the close,
 * else RESP_ERROR ("closed before the end of the response"). */
int resp_eof(resp *r);
/* 1 while the parser is reading a body that ends only at the close. */
int resp_until_eof(const resp *r);

/* Checks the parser; prints failures on stderr; returns their number. */
int resp_self_test(void);

#endif /* WEFT_LOAD_HTTP_RESP_H */
