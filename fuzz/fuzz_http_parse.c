/*
 * libFuzzer target for weft-httpd's request parser (apps/httpd/http_parse.c).
 * Build and run with scripts/fuzz.sh.
 *
 * Besides crashes and sanitizer reports it checks the parser's contract:
 *   - the answer is one of > 0, 0, -400, -414, -431, -501, -505, and 0 only
 *     while the input is short enough to still become a head;
 *   - on success the head length is at most the input length and
 *     HTTP_MAX_HEAD, every string in the request lies inside the head (the
 *     static "/" of an absolute-form target without a path excepted), and
 *     the fields are in range and consistent (no Content-Length with
 *     chunked, no chunked in 1.0, Host present in 1.1, ...);
 *   - parsing exactly the head gives the same answer;
 *   - for small inputs: the input split at every point (prefix call, then the
 *     whole), and fed one byte at a time, gives the same answer and the same
 *     request as the whole at once; each call gets an exact-size copy, so
 *     that ASan sees a read past len, and the copies move, as a server's
 *     buffer may;
 *   - http_path_decode, on the parsed path and on the raw input, agrees with
 *     a simple reference (decode, split, segment stack), returns a normal
 *     form ('/' first, no "//", no "." or ".." segment), and is idempotent.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

#define FAIL(...)                                                        \
    do {                                                                 \
        fprintf(stderr, "fuzz_http_parse: invariant failed (line %d): ", \
                __LINE__);                                               \
        fprintf(stderr, __VA_ARGS__);                                    \
        fputc('\n', stderr);                                             \
        abort();                                                         \
    } while (0)

enum { SPLIT_MAX = 384, BYTEWISE_MAX = 160 };

static int parse_once(const char *buf, size_t n, http_request *req)
{
    http_parser ps;
    http_parser_init(&ps);
    return http_parse_request(&ps, buf, n, req);
}

static char *dup_exact(const uint8_t *data, size_t n)
{
    char *p = malloc(n ? n : 1);
    if (!p) abort();
    memcpy(p, data, n);
    return p;
}

/* ---- the request ---- */

static const http_str *fields(const http_request *r, int i)
{
    const http_str *f[] = {&r->target, &r->path, &r->host, &r->if_none_match, &r->if_modified_since,
                           &r->if_match, &r->if_unmodified_since, &r->if_range, &r->range};
    return i < 9 ? f[i] : NULL;
}

/* an http_str as an offset/length pair relative to base: comparable across copies */
static long long off(http_str v, const char *base, size_t n)
{
    if (!v.p) return v.n == 0 ? -1 : -9;
    if (v.p < base || v.p > base + n) return -3; /* the static "/" */
    return (long long)(v.p - base) * 100000 + (long long)v.n;
}

static void check_request(const http_request *req, const char *buf, size_t size, int r)
{
    size_t h = (size_t)r;
    if (h > size || h > HTTP_MAX_HEAD) FAIL("head length %d > input %zu", r, size);
    for (int i = 0; i < 9; i++) {
        http_str v = *fields(req, i);
        if (!v.p) {
            if (v.n) FAIL("field %d: NULL with length %zu", i, v.n);
            continue;
        }
        if (v.p >= buf && v.p <= buf + h && v.n <= (size_t)(buf + h - v.p)) continue;
        if (i == 1 && v.n == 1 && v.p[0] == '/' && req->target.n > 0 && req->target.p[0] != '/') continue;
        FAIL("field %d outside the head", i);
    }
    if (req->method < HTTP_M_GET || req->method > HTTP_M_CONNECT) FAIL("method %d", req->method);
    if (req->minor != 0 && req->minor != 1) FAIL("minor %d", req->minor);
    if (req->keep_alive != 0 && req->keep_alive != 1) FAIL("keep_alive %d", req->keep_alive);
    if (req->content_length < -1) FAIL("content_length %lld", (long long)req->content_length);
    if (req->chunked && (req->content_length >= 0 || req->minor == 0)) FAIL("chunked with CL or in 1.0");
    if (req->expect_continue && req->minor == 0) FAIL("expect in 1.0");
    if (req->nheaders > HTTP_MAX_HEADERS) FAIL("nheaders %u", req->nheaders);
    if (req->target.n == 0 || req->target.n > HTTP_MAX_TARGET) FAIL("target length %zu", req->target.n);
    for (size_t i = 0; i < req->target.n; i++)
        if ((unsigned char)req->target.p[i] <= 0x20 || (unsigned char)req->target.p[i] >= 0x7f)
            FAIL("target byte 0x%02x", (unsigned char)req->target.p[i]);
    if ((req->method == HTTP_M_CONNECT) != (req->path.p == NULL)) FAIL("path absent iff CONNECT");
    if (req->path.p && req->path.n == 0) FAIL("empty path");
    if (req->path.p && req->path.p[0] != '/' && !(req->path.n == 1 && req->path.p[0] == '*'))
        FAIL("path does not start with '/'");
    if (req->minor == 1 && !req->host.p) FAIL("1.1 without host");
    for (size_t i = 0; i < req->host.n; i++)
        if (req->host.p[i] == '/' || req->host.p[i] == '@' || (unsigned char)req->host.p[i] <= 0x20)
            FAIL("host byte 0x%02x", (unsigned char)req->host.p[i]);
    for (int i = 2; i < 9; i++) {
        http_str v = *fields(req, i);
        if (v.n && (v.p[0] == ' ' || v.p[0] == '\t' || v.p[v.n - 1] == ' ' || v.p[v.n - 1] == '\t'))
            FAIL("field %d not trimmed", i);
        for (size_t k = 0; k < v.n; k++)
            if (((unsigned char)v.p[k] < 0x20 && v.p[k] != '\t') || v.p[k] == 0x7f) FAIL("control in field %d", i);
    }
}

static void check_same(const http_request *a, const char *abase, const http_request *b, const char *bbase, size_t n)
{
    if (a->method != b->method || a->minor != b->minor || a->keep_alive != b->keep_alive ||
        a->content_length != b->content_length || a->chunked != b->chunked ||
        a->expect_continue != b->expect_continue || a->nheaders != b->nheaders)
        FAIL("incremental request differs from the whole");
    for (int i = 0; i < 9; i++)
        if (off(*fields(a, i), abase, n) != off(*fields(b, i), bbase, n)) FAIL("incremental field %d differs", i);
}

static int valid_answer(int r)
{
    return r >= 0 || r == -400 || r == -414 || r == -431 || r == -501 || r == -505;
}

/* ---- paths ---- */

/* The reference: decode, then a segment stack.  Returns the length, -400 or
 * -414, like http_path_decode. */
static int ref_decode(const char *p, size_t n, char *out, size_t outsz)
{
    if (n == 0 || p[0] != '/') return -400;
    char *d = malloc(n + 1);
    size_t dn = 0;
    int ret = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)p[i];
        if (c == '%') {
            unsigned v = 0;
            if (i + 2 >= n) { ret = -400; goto out; }
            for (int k = 1; k <= 2; k++) {
                char x = p[i + k];
                unsigned hv = x >= '0' && x <= '9' ? (unsigned)(x - '0')
                            : x >= 'a' && x <= 'f' ? (unsigned)(x - 'a' + 10)
                            : x >= 'A' && x <= 'F' ? (unsigned)(x - 'A' + 10) : 99u;
                if (hv == 99u) { ret = -400; goto out; }
                v = v * 16 + hv;
            }
            c = v;
            i += 2;
        }
        if (c == 0) { ret = -400; goto out; }
        d[dn++] = (char)c;
    }
    if (dn + 1 > outsz) { ret = -414; goto out; }
    /* segments */
    size_t starts[4096], lens[4096], top = 0;
    int dir = 0; /* the result ends in '/' */
    for (size_t i = 1; i <= dn;) {
        size_t e = i;
        while (e < dn && d[e] != '/') e++;
        size_t sl = e - i;
        int last = e >= dn;
        if (sl == 0) {
            if (last) dir = 1;
        } else if (sl == 1 && d[i] == '.') {
            dir = last ? 1 : dir;
        } else if (sl == 2 && d[i] == '.' && d[i + 1] == '.') {
            if (top == 0) { ret = -400; goto out; }
            top--;
            if (last) dir = 1;
        } else {
            starts[top] = i;
            lens[top++] = sl;
            if (last) dir = 0;
        }
        if (!last) dir = 1; /* followed by '/': provisional */
        i = e + 1;
    }
    size_t w = 0;
    out[w++] = '/';
    for (size_t k = 0; k < top; k++) {
        memcpy(out + w, d + starts[k], lens[k]);
        w += lens[k];
        if (k + 1 < top || dir) out[w++] = '/';
    }
    out[w] = '\0';
    ret = (int)w;
out:
    free(d);
    return ret;
}

static void check_path(const char *p, size_t n)
{
    if (n > 3000) return;
    size_t outsz = n + 1;
    char *out = malloc(outsz), *ref = malloc(outsz), *again = malloc(outsz);
    int r = http_path_decode(p, n, out, outsz);
    int rr = ref_decode(p, n, ref, outsz);
    if (r != rr) FAIL("path decode %d, reference %d", r, rr);
    if (r == -414) FAIL("-414 with room for the whole input");
    if (r > 0) {
        if (strcmp(out, ref) != 0) FAIL("path decode \"%s\", reference \"%s\"", out, ref);
        if (out[0] != '/' || strlen(out) != (size_t)r) FAIL("path decode result shape");
        if (strstr(out, "//") || strstr(out, "/./") || strstr(out, "/../")) FAIL("not normal: %s", out);
        if ((r >= 2 && strcmp(out + r - 2, "/.") == 0) || (r >= 3 && strcmp(out + r - 3, "/..") == 0))
            FAIL("not normal: %s", out);
        if (!strchr(out, '%')) {
            int r2 = http_path_decode(out, (size_t)r, again, outsz);
            if (r2 != r || strcmp(again, out) != 0) FAIL("not idempotent: %s", out);
        }
        /* a buffer one byte short of the decoded length fails with -414, never overflows */
        if (r > 1) {
            char *tight = malloc((size_t)r);
            int r3 = http_path_decode(p, n, tight, (size_t)r);
            if (r3 >= (int)r || (r3 > 0 && strcmp(tight, out) != 0)) FAIL("short buffer %d", r3);
            free(tight);
        }
    }
    free(out);
    free(ref);
    free(again);
}

/* ---- the target ---- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = dup_exact(data, size);
    http_request whole;
    http_parser ps;
    http_parser_init(&ps);
    int r = http_parse_request(&ps, buf, size, &whole);
    if (!valid_answer(r)) FAIL("answer %d", r);
    if (r == 0 && size > HTTP_MAX_HEAD) FAIL("0 for %zu bytes", size);
    if (r == 0 && ps.scanned != size) FAIL("scanned %zu of %zu", ps.scanned, size);
    if (r > 0) {
        check_request(&whole, buf, size, r);
        http_request again;
        char *head = dup_exact(data, (size_t)r);
        if (parse_once(head, (size_t)r, &again) != r) FAIL("the head alone parses differently");
        check_same(&again, head, &whole, buf, (size_t)r);
        free(head);
        if (whole.path.p && whole.path.p[0] == '/') check_path(whole.path.p, whole.path.n);
    }

    /* split points: all of them for small inputs; for large ones the
     * parser's 1 KiB walk boundaries, the 414 boundary region and a spread */
    size_t nsplit = 0, splits[SPLIT_MAX];
    if (size <= SPLIT_MAX) {
        for (size_t k = 1; k < size; k++) splits[nsplit++] = k;
    } else {
        for (size_t b = 1024; b < size && b <= HTTP_MAX_HEAD + 1024; b += 1024)
            for (size_t d = 0; d < 3; d++) splits[nsplit++] = b - 1 + d;
        for (size_t b = 8190; b < 8230 && b < size; b += 3) splits[nsplit++] = b;
        for (size_t i = 1; i <= 40; i++) splits[nsplit++] = size * i / 41;
        splits[nsplit++] = HTTP_MAX_HEAD < size ? HTTP_MAX_HEAD : size - 1;
    }
    {
        for (size_t j = 0; j < nsplit; j++) {
            size_t k = splits[j];
            if (k == 0 || k >= size) continue;
            http_request part;
            http_parser_init(&ps);
            char *a = dup_exact(data, k);
            int r1 = http_parse_request(&ps, a, k, &part);
            const char *base = a;
            char *b = NULL;
            if (r1 == 0) {
                b = dup_exact(data, size);
                r1 = http_parse_request(&ps, b, size, &part);
                base = b;
            }
            if (r1 != r) FAIL("split at %zu: %d, whole: %d", k, r1, r);
            if (r > 0) check_same(&part, base, &whole, buf, (size_t)r);
            free(a);
            free(b);
        }
    }
    if (size <= BYTEWISE_MAX) {
        http_parser_init(&ps);
        int r1 = 0;
        for (size_t k = 1; k <= size && r1 == 0; k++) {
            http_request part;
            char *a = dup_exact(data, k);
            r1 = http_parse_request(&ps, a, k, &part);
            if (r1 != 0 && r1 != r) FAIL("byte by byte: %d at %zu, whole: %d", r1, k, r);
            if (r1 > 0) check_same(&part, a, &whole, buf, (size_t)r);
            free(a);
        }
        if (r1 != r) FAIL("byte by byte: %d, whole: %d", r1, r);
    }

    check_path(buf, size);
    free(buf);
    return 0;
}
