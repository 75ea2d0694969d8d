/*
 * http_resp.c -- the incremental HTTP/1.1 response parser (contract in
 * http_resp.h).
 *
 * A state machine over the received bytes.  Line states find the line's LF
 * with memchr and either handle the whole line or stop before it; byte
 * states (a Content-Length body, chunk data, a body until close) skip
 * min(left, available) bytes.  The parser keeps no pointer into the
 * caller's buffer between calls, so the caller may move the unconsumed tail.
 *
 * Strictness: what a load generator must get right to find the end of a
 * response is checked (status line shape, Content-Length digits and
 * agreement, chunk sizes, the CRLF after chunk data); header values it does
 * not interpret are not validated.
 */
#include "http_resp.h"

#include <stdio.h>
#include <string.h>

enum { S_STATUS, S_HEADER, S_BODY, S_CHUNK_SIZE, S_CHUNK_DATA, S_CHUNK_END, S_TRAILER, S_EOF_BODY, S_DONE };

void resp_begin(resp *r, int head) {
    int want = r->want_server;
    memset(r, 0, offsetof(resp, server));
    r->head = head;
    r->content_length = -1;
    r->state = S_STATUS;
    r->want_server = want;
    r->server[0] = 0;
}

int resp_until_eof(const resp *r) {
    return r->state == S_EOF_BODY;
}

static int fail(resp *r, const char *why) {
    r->error = why;
    return RESP_ERROR;
}

static int lower(int c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* name[0..n) equals the lowercase literal lit, ignoring case */
static int name_is(const char *name, size_t n, const char *lit) {
    size_t k = strlen(lit);
    if (n != k) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)name[i]) != lit[i]) return 0;
    return 1;
}

static int is_ows(char c) {
    return c == ' ' || c == '\t';
}

/* Walks a comma-separated list; calls back with each trimmed element. */
static void each_token(const char *v, size_t n, void (*fn)(resp *, const char *, size_t), resp *r) {
    size_t i = 0;
    while (i < n) {
        size_t s = i;
        while (i < n && v[i] != ',') i++;
        size_t e = i;
        while (s < e && is_ows(v[s])) s++;
        while (e > s && is_ows(v[e - 1])) e--;
        if (e > s) fn(r, v + s, e - s);
        i++; /* past the comma */
    }
}

static void te_token(resp *r, const char *t, size_t n) {
    /* the last coding decides: chunked must be the final one */
    int ch = name_is(t, n, "chunked");
    r->chunked = ch;
    r->te_other = !ch;
}

static void conn_token(resp *r, const char *t, size_t n) {
    if (name_is(t, n, "close")) r->close = 1;
    else if (name_is(t, n, "keep-alive")) r->keepalive_token = 1;
}

static int status_line(resp *r, const char *l, size_t n) {
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    if (n < 12 || memcmp(l, "HTTP/1.", 7) != 0 || l[7] < '0' || l[7] > '9' || l[8] != ' ')
        return fail(r, "bad status line");
    for (int i = 9; i < 12; i++)
        if (l[i] < '0' || l[i] > '9') return fail(r, "bad status code");
    if (n > 12 && l[12] != ' ') return fail(r, "bad status line");
    r->minor = l[7] - '0';
    r->status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    if (r->status < 100 || r->status > 599) return fail(r, "bad status code");
    return RESP_MORE;
}

static int header_line(resp *r, const char *l, size_t n) {
    if (is_ows(l[0])) return RESP_MORE; /* obs-fold: a continuation of a header we do not use */
    const char *colon = memchr(l, ':', n);
    if (!colon || colon == l) return fail(r, "bad header line");
    size_t nl = (size_t)(colon - l);
    if (is_ows(l[nl - 1])) return fail(r, "space before a header's colon");
    const char *v = colon + 1, *end = l + n;
    while (v < end && is_ows(*v)) v++;
    while (end > v && is_ows(end[-1])) end--;
    size_t vn = (size_t)(end - v);
    switch (lower((unsigned char)l[0])) {
    case 'c':
        if (name_is(l, nl, "content-length")) {
            if (!vn) return fail(r, "empty Content-Length");
            int64_t x = 0;
            for (size_t i = 0; i < vn; i++) {
                if (v[i] < '0' || v[i] > '9') return fail(r, "bad Content-Length");
                if (x > (INT64_MAX - 9) / 10) return fail(r, "Content-Length too large");
                x = x * 10 + (v[i] - '0');
            }
            if (r->content_length >= 0 && r->content_length != x) return fail(r, "conflicting Content-Length");
            r->content_length = x;
        } else if (name_is(l, nl, "connection")) {
            each_token(v, vn, conn_token, r);
        }
        break;
    case 't':
        if (name_is(l, nl, "transfer-encoding")) each_token(v, vn, te_token, r);
        break;
    case 's':
        if (r->want_server && name_is(l, nl, "server")) {
            size_t k = vn < sizeof r->server - 1 ? vn : sizeof r->server - 1;
            memcpy(r->server, v, k);
            r->server[k] = 0;
        }
        break;
    }
    return RESP_MORE;
}

/* The empty line after the headers: decide how the body ends. */
static int headers_done(resp *r) {
    if (r->status < 200) {
        if (r->status == 101) return fail(r, "unexpected 101 Switching Protocols");
        /* interim response: the real one follows */
        int head = r->head, want = r->want_server;
        uint64_t bytes = r->bytes;
        resp_begin(r, head);
        r->want_server = want;
        r->bytes = bytes;
        return RESP_MORE;
    }
    if (r->minor == 0 && !r->keepalive_token) r->close = 1;
    if (r->head || r->status == 204 || r->status == 304) {
        r->state = S_DONE;
        return RESP_DONE;
    }
    if (r->chunked || r->te_other) {
        if (r->content_length >= 0) r->close = 1; /* both: Transfer-Encoding wins; do not reuse */
        if (r->te_other) {
            r->close = 1;
            r->state = S_EOF_BODY;
            return RESP_MORE;
        }
        r->state = S_CHUNK_SIZE;
        return RESP_MORE;
    }
    if (r->content_length >= 0) {
        r->left = (uint64_t)r->content_length;
        if (!r->left) {
            r->state = S_DONE;
            return RESP_DONE;
        }
        r->state = S_BODY;
        return RESP_MORE;
    }
    r->close = 1;
    r->state = S_EOF_BODY;
    return RESP_MORE;
}

static int chunk_size_line(resp *r, const char *l, size_t n) {
    uint64_t x = 0;
    size_t i = 0;
    for (; i < n; i++) {
        int c = lower((unsigned char)l[i]), d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else break;
        if (x >> 56) return fail(r, "chunk size too large");
        x = x * 16 + (uint64_t)d;
    }
    if (i == 0) return fail(r, "bad chunk size");
    while (i < n && is_ows(l[i])) i++;
    if (i < n && l[i] != ';') return fail(r, "bad chunk size");
    if (x == 0) {
        r->state = S_TRAILER;
    } else {
        r->left = x;
        r->state = S_CHUNK_DATA;
    }
    return RESP_MORE;
}

int resp_feed(resp *r, const char *buf, size_t len, size_t *used) {
    size_t pos = 0;
    int ret = RESP_MORE;
    while (ret == RESP_MORE && pos < len) {
        switch (r->state) {
        case S_BODY:
        case S_CHUNK_DATA: {
            size_t k = len - pos;
            if (k > r->left) k = (size_t)r->left;
            pos += k;
            r->left -= k;
            r->body_bytes += k;
            if (!r->left) {
                if (r->state == S_CHUNK_DATA) {
                    r->state = S_CHUNK_END;
                } else {
                    r->state = S_DONE;
                    ret = RESP_DONE;
                }
            }
            continue;
        }
        case S_EOF_BODY:
            r->body_bytes += len - pos;
            pos = len;
            continue;
        case S_DONE: ret = RESP_DONE; continue;
        default: break;
        }
        /* a line state: the whole line or nothing */
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl) {
            if (len - pos > RESP_MAX_LINE) ret = fail(r, "line too long");
            break;
        }
        const char *l = buf + pos;
        size_t n = (size_t)(nl - l);
        size_t step = n + 1;
        if (n > RESP_MAX_LINE) {
            ret = fail(r, "line too long");
            break;
        }
        if (n && l[n - 1] == '\r') n--;
        pos += step;
        switch (r->state) {
        case S_STATUS:
            ret = status_line(r, l, n);
            if (ret == RESP_MORE) r->state = S_HEADER;
            break;
        case S_HEADER: ret = n ? header_line(r, l, n) : headers_done(r); break;
        case S_CHUNK_SIZE: ret = chunk_size_line(r, l, n); break;
        case S_CHUNK_END:
            if (n) ret = fail(r, "no CRLF after chunk data");
            else r->state = S_CHUNK_SIZE;
            break;
        case S_TRAILER:
            if (!n) {
                r->state = S_DONE;
                ret = RESP_DONE;
            }
            break;
        }
    }
    r->bytes += pos;
    *used = pos;
    return ret;
}

int resp_eof(resp *r) {
    if (r->state == S_EOF_BODY) {
        r->state = S_DONE;
        return RESP_DONE;
    }
    if (r->state == S_DONE) return RESP_DONE;
    return fail(r, "closed before the end of the response");
}

/* ------------------------------------------------------------------------ */
/* self-test                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct expect {
    const char *name;
    const char *in;
    int head;
    int eof;            /* the stream ends after `in` */
    int result;         /* RESP_DONE or RESP_ERROR */
    int status;
    uint64_t body;
    int close;
    size_t extra;       /* bytes after the response */
} expect;

static const expect CASES[] = {
    {"content-length", "HTTP/1.1 200 OK\r\nServer: t/1\r\nContent-Length: 5\r\n\r\nhello", 0, 0, RESP_DONE, 200, 5, 0, 0},
    {"chunked, extension, trailer",
     "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n",
     0, 0, RESP_DONE, 200, 15, 0, 0},
    {"chunked, no trailer, upper-case hex", "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, Chunked\r\n\r\n1F\r\n"
     "0123456789012345678901234567890\r\n0\r\n\r\n", 0, 0, RESP_DONE, 200, 31, 0, 0},
    {"HEAD ignores Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", 1, 0, RESP_DONE, 200, 0, 0, 0},
    {"204", "HTTP/1.1 204 No Content\r\n\r\n", 0, 0, RESP_DONE, 204, 0, 0, 0},
    {"304 with Content-Length", "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n", 0, 0, RESP_DONE, 304, 0, 0, 0},
    {"body until close", "HTTP/1.1 200 OK\r\n\r\nabcdefg", 0, 1, RESP_DONE, 200, 7, 1, 0},
    {"Connection: close", "HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 2\r\n\r\nhi", 0, 0, RESP_DONE, 200, 2, 1, 0},
    {"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", 0, 0, RESP_DONE, 200, 2, 1, 0},
    {"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nhi", 0, 0, RESP_DONE, 200, 2, 0, 0},
    {"100 Continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", 0, 0, RESP_DONE, 201, 1, 0, 0},
    {"404 is a response", "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nno!", 0, 0, RESP_DONE, 404, 3, 0, 0},
    {"bare LF", "HTTP/1.1 200 OK\nContent-Length: 3\n\nabc", 0, 0, RESP_DONE, 200, 3, 0, 0},
    {"no reason phrase", "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 0, 0, RESP_DONE, 200, 0, 0, 0},
    {"extra bytes after", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiEXTRA", 0, 0, RESP_DONE, 200, 2, 0, 5},
    {"TE and CL: chunked wins, close", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
     "3\r\nabc\r\n0\r\n\r\n", 0, 0, RESP_DONE, 200, 3, 1, 0},
    {"TE gzip: until close", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzzzz", 0, 1, RESP_DONE, 200, 4, 1, 0},
    {"same Content-Length twice", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 0, 0, RESP_DONE, 200, 1, 0, 0},
    {"obs-fold ignored", "HTTP/1.1 200 OK\r\nX-A: a\r\n  b\r\nContent-Length: 1\r\n\r\nx", 0, 0, RESP_DONE, 200, 1, 0, 0},
    /* failures */
    {"HTTP/2", "HTTP/2 200 OK\r\n\r\n", 0, 0, RESP_ERROR, 0, 0, 0, 0},
    {"not HTTP", "HTTX/1.1 200 OK\r\n\r\n", 0, 0, RESP_ERROR, 0, 0, 0, 0},
    {"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", 0, 0, RESP_ERROR, 0, 0, 0, 0},
    {"status 999", "HTTP/1.1 999 What\r\n\r\n", 0, 0, RESP_ERROR, 0, 0, 0, 0},
    {"bad Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", 0, 0, RESP_ERROR, 200, 0, 0, 0},
    {"conflicting Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", 0, 0, RESP_ERROR, 200, 0, 0, 0},
    {"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, 0, RESP_ERROR, 200, 0, 0, 0},
    {"no CRLF after chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n0\r\n\r\n", 0, 0, RESP_ERROR, 200, 5, 0, 0},
    {"header without colon", "HTTP/1.1 200 OK\r\nBroken\r\n\r\n", 0, 0, RESP_ERROR, 200, 0, 0, 0},
    {"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx", 0, 0, RESP_ERROR, 200, 0, 0, 0},
    {"closed mid-body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", 0, 1, RESP_ERROR, 200, 4, 0, 0},
    {"closed mid-headers", "HTTP/1.1 200 OK\r\nContent-Le", 0, 1, RESP_ERROR, 200, 0, 0, 0},
    {"closed mid-chunks", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", 0, 1, RESP_ERROR, 200, 5, 0, 0},
    {"closed before anything", "", 0, 1, RESP_ERROR, 0, 0, 0, 0},
    {"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", 0, 0, RESP_ERROR, 101, 0, 0, 0},
};

/* Feeds `in` in pieces: the cut points are the multiples of `step`; the
 * unconsumed tail is carried over like weft-load's connection buffer. */
static int run_case(const expect *c, size_t step, resp *r, size_t *extra) {
    char buf[1024];
    size_t have = 0, len = strlen(c->in), fed = 0;
    resp_begin(r, c->head);
    r->want_server = 1;
    for (;;) {
        size_t k = len - fed < step ? len - fed : step;
        memcpy(buf + have, c->in + fed, k);
        have += k;
        fed += k;
        size_t used;
        int ret = resp_feed(r, buf, have, &used);
        if (ret != RESP_MORE) {
            *extra = have - used + (len - fed);
            return ret;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
        if (fed == len) {
            *extra = 0;
            return c->eof ? resp_eof(r) : RESP_MORE;
        }
    }
}

int resp_self_test(void) {
    int fails = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const expect *c = &CASES[i];
        size_t len = strlen(c->in);
        for (size_t step = 1; step <= len + 1; step++) {
            resp r;
            memset(&r, 0, sizeof r);
            size_t extra = 0;
            int ret = run_case(c, step, &r, &extra);
            int ok = ret == c->result;
            if (ok && ret == RESP_DONE)
                ok = r.status == c->status && r.body_bytes == c->body && r.close == c->close && extra == c->extra;
            if (!ok) {
                fprintf(stderr,
                        "parser self-test: \"%s\" fed %zu bytes at a time: result %d status %d body %llu close %d "
                        "extra %zu (%s); want result %d status %d body %llu close %d extra %zu\n",
                        c->name, step, ret, r.status, (unsigned long long)r.body_bytes, r.close, extra,
                        r.error ? r.error : "-", c->result, c->status, (unsigned long long)c->body, c->close,
                        c->extra);
                fails++;
                break;
            }
        }
    }
    /* Server is captured when asked */
    resp r;
    memset(&r, 0, sizeof r);
    size_t extra;
    run_case(&CASES[0], 7, &r, &extra);
    if (strcmp(r.server, "t/1") != 0) {
        fprintf(stderr, "parser self-test: Server captured as \"%s\"\n", r.server);
        fails++;
    }
    /* an over-long header line fails without needing the whole line */
    static char big[RESP_MAX_LINE + 64];
    memcpy(big, "HTTP/1.1 200 OK\r\nX-Big: ", 24);
    memset(big + 24, 'a', sizeof big - 24);
    resp_begin(&r, 0);
    size_t used;
    if (resp_feed(&r, big, sizeof big, &used) != RESP_ERROR) {
        fprintf(stderr, "parser self-test: an over-long line is accepted\n");
        fails++;
    }
    /* a response of 10 MB in one Content-Length, fed in 16 KiB pieces */
    static const char hdr[] = "HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n";
    static char piece[16384];
    resp_begin(&r, 0);
    uint64_t total = 10000000 + sizeof hdr - 1, fed = 0;
    int ret = RESP_MORE;
    memcpy(piece, hdr, sizeof hdr - 1);
    size_t have = sizeof hdr - 1;
    while (ret == RESP_MORE && fed < total) {
        size_t k = total - fed - have < sizeof piece - have ? (size_t)(total - fed - have) : sizeof piece - have;
        have += k;
        ret = resp_feed(&r, piece, have, &used);
        fed += used;
        memmove(piece, piece + used, have - used);
        have -= used;
    }
    if (ret != RESP_DONE || r.body_bytes != 10000000) {
        fprintf(stderr, "parser self-test: 10 MB body: result %d body %llu\n", ret, (unsigned long long)r.body_bytes);
        fails++;
    }
    return fails;
}
