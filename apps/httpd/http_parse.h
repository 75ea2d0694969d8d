/*
 * weft-httpd: the HTTP/1.1 request-head parser (RFC 9112, RFC 9110).
 *
 * Pure C11, independent of the weft runtime, allocation-free: every string
 * in the result points into the caller's buffer.  The design, the limits and
 * the request-smuggling rules are explained at the top of http_parse.c.
 */
#ifndef WEFT_HTTP_PARSE_H
#define WEFT_HTTP_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* ---- Limits ---------------------------------------------------------------
 * A head that passes a limit is refused as soon as the limit is passed, even
 * before it is complete, so that a client cannot make the server buffer
 * without bound. */
#define HTTP_MAX_TARGET 8192   /* request-target bytes, else 414 */
#define HTTP_MAX_HEAD 16384    /* whole head incl. request line and final empty line, else 431 */
#define HTTP_MAX_HEADERS 100   /* header fields, else 431 */
#define HTTP_MAX_LEADING 64    /* bytes of empty lines allowed before the request line, else 400 */

/* ---- Request ------------------------------------------------------------- */

enum { HTTP_M_GET = 1, HTTP_M_HEAD, HTTP_M_POST, HTTP_M_PUT, HTTP_M_DELETE, HTTP_M_OPTIONS, HTTP_M_PATCH, HTTP_M_TRACE, HTTP_M_CONNECT };

/* A string inside the caller's buffer; p == NULL and n == 0 when absent.
 * A header present with an empty value has p != NULL and n == 0. */
typedef struct http_str { const char *p; size_t n; } http_str;

typedef struct http_request {
    int method;            /* one of HTTP_M_* */
    int minor;             /* HTTP/1.x minor version: 0 or 1 */
    http_str target;       /* raw request-target as sent: origin-form "/a/b?q", absolute-form
                            * "http://h/a", "*" (OPTIONS only) or authority-form (CONNECT only) */
    http_str path;         /* the path of target, still percent-encoded, without query or
                            * fragment.  For absolute-form the path after the authority, or a
                            * static "/" (not inside the buffer) when that is empty.  "*" for
                            * the asterisk form; absent (NULL, 0) for CONNECT. */
    http_str host;         /* Host header value, trimmed; for absolute-form the target's
                            * authority instead (RFC 9112 §3.2.2, as nginx does) */
    int keep_alive;        /* 1 if the connection persists after this request: HTTP/1.1 unless
                            * "Connection: close"; HTTP/1.0 only with "Connection: keep-alive" */
    int64_t content_length;/* -1 if absent */
    int chunked;           /* Transfer-Encoding: chunked (the only coding accepted) */
    int expect_continue;   /* Expect: 100-continue (HTTP/1.1 only; ignored in 1.0, RFC 9110 §10.1.1) */
    /* First occurrence of each, trimmed; absent = (NULL, 0). */
    http_str if_none_match, if_modified_since, if_match, if_unmodified_since, if_range, range;
    unsigned nheaders;     /* header fields seen */
} http_request;

/* Incremental state: how far the search for the end of the head has got.
 * Zero it (or call http_parser_init) before each new request. */
typedef struct http_parser { size_t scanned; } http_parser;

void http_parser_init(http_parser *ps);

/* buf[0..len) holds the bytes received so far for this request (the start of
 * the buffer is the start of the request; the buffer may move between calls,
 * only offsets are remembered).
 * Returns > 0: the length of the complete head (leading empty lines, request
 *              line, header lines and the empty line); req is filled and its
 *              strings point into buf[0..returned length) (the static "/"
 *              of an absolute-form target without a path excepted).
 *           0: the head is not complete yet; call again with more bytes.
 *         < 0: minus the HTTP status to answer before closing the connection:
 *              -400 malformed (syntax, control characters, bare CR, obs-fold,
 *                   Host missing in 1.1 or repeated, bad or conflicting
 *                   Content-Length, Content-Length with Transfer-Encoding,
 *                   Transfer-Encoding in 1.0 or repeated, too many leading
 *                   empty lines),
 *              -414 request-target longer than HTTP_MAX_TARGET,
 *              -431 head longer than HTTP_MAX_HEAD or more than
 *                   HTTP_MAX_HEADERS fields,
 *              -501 unknown method, or a Transfer-Encoding other than chunked,
 *              -505 a well-formed HTTP version other than 1.0 and 1.1.
 * The answer never depends on how the bytes were split between calls.  Most
 * errors are answered before the head is complete: the size limits as soon
 * as they are passed, control bytes and bad methods at once, anything else
 * (the header count included) within 1 KiB.  req is meaningful only when the return value is > 0. */
int http_parse_request(http_parser *ps, const char *buf, size_t len, http_request *req);

/* "GET", "HEAD", ...; "UNKNOWN" for a value that is not an HTTP_M_*. */
const char *http_method_name(int method);

/* Percent-decodes the path p[0..n) into out (size outsz) and normalises it:
 * collapses "//", removes "." segments and resolves ".." segments (RFC 3986
 * §5.2.4); a decoded "%2F" counts as a '/'.  A trailing '/' is kept, and a
 * final "." or ".." segment leaves one ("/a/." -> "/a/", "/a/.." -> "/").
 * Returns the length of out (> 0, NUL-terminated, always starting with '/'),
 * -400 for a path not starting with '/', a malformed escape, "%00" or a raw
 * NUL, or ".." climbing above the root; -414 when the decoded (not yet
 * normalised) path needs outsz bytes or more. */
int http_path_decode(const char *p, size_t n, char *out, size_t outsz);

#endif
