/*
 * The HTTP/1.1 request-head parser of weft-httpd.
 *
 * What it does.  A connection's reader appends bytes to a buffer and calls
 * http_parse_request(buf, len) after every read.  The parser answers "not
 * yet" (0), "here is a head of N bytes" (N > 0, request filled), or "answer
 * with status S and close" (-S).  It allocates nothing: the request's strings
 * point into the buffer, the only state kept between calls is one offset.
 *
 * Two parts.
 *
 *   1. The end search (cheap, incremental).  A head ends at the first empty
 *      line that follows a non-empty line (the empty lines before the request
 *      line are not its end, RFC 9112 §2.2).  Lines end in LF, optionally
 *      preceded by CR.  Whether the line ended by the LF at i is empty, and
 *      whether the line before it was, can be seen in the four bytes before
 *      i, so the search needs no state but how far it has got: each call
 *      memchr()s for LF from ps->scanned to the end of the new bytes and
 *      looks back at most four bytes per LF.  Over all calls for one request
 *      every byte is searched once.
 *
 *   2. The walk (one pass over the head).  walk() reads the head left to
 *      right, once: request line, then each header line, then the checks that
 *      need the whole head (Host present in 1.1).  It stops at the first
 *      error.  Every check is made at a byte position and looks at no byte
 *      after it, so given a prefix of the input the walk returns exactly the
 *      error the whole input would give, if that error lies in the prefix, or
 *      "incomplete" otherwise.  The answer is therefore a pure function of
 *      the bytes, whatever the split into reads ("walk semantics").  The
 *      target and the field values, the long parts, are skipped 8 bytes at a
 *      time while no byte in the word needs a look (about 200 ns for a
 *      340-byte browser head on a 2020s x86 core, -O2).
 *
 *   When the end search finds the end, the parser walks the head and returns
 *   what the walk says.  While the head is incomplete it walks only when a
 *   "trigger" appears among the new bytes, a position at which an error may
 *   have become certain, and then walks the prefix up to the latest trigger:
 *     - index HTTP_MAX_HEAD reached without an end (431, or an earlier error);
 *     - byte HTTP_MAX_TARGET+1 of the target: its position is known from the
 *       method's end, found by the bounded start check below (414 unless the
 *       request line ended before it);
 *     - a byte that is invalid anywhere in a head: NUL and other controls but
 *       HTAB/CR/LF, DEL, a CR not followed by LF (400 or an earlier error);
 *     - every multiple of WALK_STRIDE (1 KiB): an error no other trigger
 *       sees, say a 101st header line or a line without a colon, is answered
 *       at most 1 KiB after it became certain (at most 16 walks of at most
 *       16 KiB for a head that trickles in, nothing for one that arrives
 *       whole);
 *     - the start check: at most HTTP_MAX_LEADING empty-line bytes then at
 *       most 8 method bytes are looked at on every call (bounded, so cheap)
 *       and an over-long blank prefix (400), a non-token byte in the method
 *       (400) or a method longer than any known one (501) is answered at
 *       once: a TLS hello or an SSH banner sent to the port gets its answer
 *       without waiting for the header timeout.
 *   Walking the prefix up to the latest trigger returns the first error in
 *   that prefix, which by walk semantics is the whole input's answer; a
 *   trigger is a position in the data, so an input split differently walks
 *   the same prefixes or longer ones without an earlier error.  A walk of an
 *   incomplete head that finds no error happens only at the 414 position and
 *   at stride boundaries, each once per request, so a client feeding a byte
 *   at a time costs O(head) searching plus at most ~17 bounded walks, not
 *   O(head^2).
 *
 * Why the limits.  The server keeps the head in one buffer; without a bound a
 * client could make it grow forever.  nginx's defaults are similar
 * (large_client_header_buffers 4 8k: a request line must fit in 8k, the head
 * in 32k).  A head over HTTP_MAX_HEAD is 431 (RFC 6585), a target over
 * HTTP_MAX_TARGET is 414, more than HTTP_MAX_HEADERS fields is 431.  Empty
 * lines before the request line are capped at HTTP_MAX_LEADING bytes (400);
 * the RFC asks to ignore "at least one"; nginx discards any number, which a
 * parser that owns no buffer cannot do, and the cap keeps the start check
 * cheap.
 *
 * Syntax (RFC 9112 §3, §5; RFC 9110 §5.5-5.6).  Request line: method SP
 * request-target SP "HTTP/" DIGIT "." DIGIT, exactly single spaces.  The
 * method is a case-sensitive token; a token not known is 501, and so is one
 * longer than the longest known method (7) as soon as its 8th byte arrives.
 * The target is visible ASCII; origin-form ("/..."), absolute-form
 * (scheme "://" authority [path] [? query], userinfo refused as RFC 9110
 * §4.2.4 asks), "*" for OPTIONS only, anything for CONNECT (the server
 * answers 405).  A fragment ('#') ends the path, as nginx does.  A
 * well-formed version other than 1.0 / 1.1 is 505, a malformed one 400.
 * Header lines: a token, ':', a value of VCHAR / obs-text / SP / HTAB.
 * Whitespace before the colon is 400 (RFC 9112 §5.1 MUST), a line starting
 * with whitespace (obs-fold) is 400 (§5.2 allows it for a server), any
 * control character other than HTAB is 400, a CR must be followed by LF
 * (§2.2), a bare LF ends a line (§2.2 MAY; nginx does too).
 *
 * Smuggling (RFC 9112 §6.1, §6.3, RFC 9110 §8.6).  A proxy in front of us
 * and this parser must agree on where the body ends, so every ambiguity is
 * refused rather than resolved:
 *   - Content-Length and Transfer-Encoding together: 400 (the RFC lets a
 *     server prefer TE; nginx refuses, and so do we);
 *   - Transfer-Encoding in HTTP/1.0: 400 (§6.1: the framing is faulty);
 *   - Transfer-Encoding twice: 400 (nginx); a value other than exactly
 *     "chunked" (case-insensitive, surrounding whitespace trimmed), e.g.
 *     "gzip, chunked" or "chunked, gzip": 501, since we decode no other
 *     coding (nginx: 501);
 *   - Content-Length: 1*DIGIT only, no sign, no overflow of int64; a list
 *     "5, 5" or a repeated header with the same value is one value (RFC 9110
 *     §8.6 allows this), differing values are 400;
 *   - Host at most once, and exactly once in HTTP/1.1 (RFC 9112 §3.2: 400
 *     if absent or repeated), its value made of host characters and without
 *     "..".
 *   Content-Length, Transfer-Encoding and Host are "unique header lines" in
 *   nginx (a repeat is 400); we accept a repeated Content-Length with the
 *   same value, which RFC 9110 §8.6 allows.
 *
 * Where the RFC lets a recipient choose, this follows nginx: obs-text in
 * field values is accepted, unknown Expect values and Connection options are
 * ignored, repeated conditional or Range headers keep the first occurrence
 * (for If-None-Match this can only turn a 304 into a 200, never the reverse).
 */
#include "http_parse.h"

#include <string.h>

#ifdef HTTP_PARSE_PARANOID
#include <stdio.h>
#include <stdlib.h>
#endif

/* ---- Character classes ---------------------------------------------------- */

enum {
    C_TCHAR = 1,  /* token character (RFC 9110 §5.6.2) */
    C_VCHAR = 2,  /* visible ASCII 0x21-0x7E: allowed in the request-target */
    C_FIELD = 4,  /* allowed in a field value: VCHAR, obs-text, SP, HTAB */
    C_HOST = 8,   /* allowed in a Host value or an authority */
    C_BAD = 16,   /* invalid anywhere in a head: controls but HTAB CR LF, DEL */
};

#define ALNUM_(c) (((c) >= '0' && (c) <= '9') || ((c) >= 'A' && (c) <= 'Z') || ((c) >= 'a' && (c) <= 'z'))
#define TCHAR_(c) (ALNUM_(c) || (c) == '!' || (c) == '#' || (c) == '$' || (c) == '%' || (c) == '&' || \
                   (c) == '\'' || (c) == '*' || (c) == '+' || (c) == '-' || (c) == '.' || (c) == '^' || \
                   (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~')
#define HOST_(c) (ALNUM_(c) || (c) == '-' || (c) == '.' || (c) == '_' || (c) == '~' || (c) == '!' || \
                  (c) == '$' || (c) == '&' || (c) == '\'' || (c) == '(' || (c) == ')' || (c) == '*' || \
                  (c) == '+' || (c) == ',' || (c) == ';' || (c) == '=' || (c) == ':' || (c) == '[' || \
                  (c) == ']' || (c) == '%')
#define CLS_(c) ((TCHAR_(c) ? C_TCHAR : 0) | ((c) >= 0x21 && (c) <= 0x7e ? C_VCHAR : 0) |             \
                 ((c) == '\t' || ((c) >= 0x20 && (c) != 0x7f) ? C_FIELD : 0) | (HOST_(c) ? C_HOST : 0) | \
                 (((c) < 0x20 && (c) != '\t' && (c) != '\r' && (c) != '\n') || (c) == 0x7f ? C_BAD : 0))
#define R4_(b) CLS_(b), CLS_((b) + 1), CLS_((b) + 2), CLS_((b) + 3)
#define R16_(b) R4_(b), R4_((b) + 4), R4_((b) + 8), R4_((b) + 12)
#define R64_(b) R16_(b), R16_((b) + 16), R16_((b) + 32), R16_((b) + 48)
static const unsigned char cls[256] = {R64_(0), R64_(64), R64_(128), R64_(192)};

/* Word-at-a-time skipping (the bit hacks of Sean Anderson's "Bit Twiddling
 * Hacks"): exact answers to "does any byte of x ..." */
#define ONES_ 0x0101010101010101ull
#define HIGH_ 0x8080808080808080ull
static inline int any_below(uint64_t x, unsigned n) { return ((x - ONES_ * n) & ~x & HIGH_) != 0; } /* n <= 128 */
static inline int any_above(uint64_t x, unsigned n) { return (((x + ONES_ * (127 - n)) | x) & HIGH_) != 0; } /* n < 128 */
static inline int any_equal(uint64_t x, unsigned n) { return any_below(x ^ (ONES_ * n), 1); }
static inline uint64_t load8(const unsigned char *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }

/* s[0..n) equals the lower-case word w, ignoring case */
static int eq_nocase(const unsigned char *s, size_t n, const char *w)
{
    if (strlen(w) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower(s[i]) != w[i]) return 0;
    return 1;
}

static int is_ows(int c) { return c == ' ' || c == '\t'; }

static http_str mkstr(const unsigned char *p, size_t n) { return (http_str){(const char *)p, n}; }

/* ---- Methods -------------------------------------------------------------- */

static const char *const method_names[] = {
    NULL, "GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT",
};
enum { METHOD_MAX_LEN = 7 };

const char *http_method_name(int method)
{
    if (method < HTTP_M_GET || method > HTTP_M_CONNECT) return "UNKNOWN";
    return method_names[method];
}

static int method_lookup(const unsigned char *s, size_t n)
{
    for (int m = HTTP_M_GET; m <= HTTP_M_CONNECT; m++)
        if (strlen(method_names[m]) == n && memcmp(s, method_names[m], n) == 0) return m;
    return 0;
}

/* ---- The start check ------------------------------------------------------ */

/* Looks at the empty lines before the request line and at the method, both
 * bounded.  Returns:
 *   > 0  the index of the SP after the method; *start = the method's index;
 *     0  incomplete;
 *   < 0  an error, certain at index *start.
 * Shared by walk() and by the incremental triggers, so that both agree. */
static int scan_start(const unsigned char *s, size_t n, size_t *start)
{
    size_t i = 0;
    for (;;) {
        if (i >= n) return 0;
        if (s[i] != '\r' && s[i] != '\n') break;
        if (i >= HTTP_MAX_LEADING) { *start = i; return -400; }
        if (s[i] == '\r') {
            if (i + 1 >= n) return 0;
            if (s[i + 1] != '\n') { *start = i + 1; return -400; }
            i++;
        }
        i++;
    }
    size_t ms = i;
    for (;; i++) {
        if (i >= n) return 0;
        unsigned char c = s[i];
        if (c == ' ') break;
        if (!(cls[c] & C_TCHAR)) { *start = i; return -400; }
        if (i - ms >= METHOD_MAX_LEN) { *start = i; return -501; }
    }
    *start = ms;
    if (i == ms) { *start = i; return -400; } /* empty method: the line starts with SP */
    return (int)i;
}

/* ---- The walk ------------------------------------------------------------- */

typedef struct walk_state {
    int seen_host, seen_te, conn_close, conn_keep;
    int absolute; /* absolute-form target: host comes from it */
} walk_state;

/* Trims OWS on both sides of s[a..b). */
static http_str trim(const unsigned char *s, size_t a, size_t b)
{
    while (a < b && is_ows(s[a])) a++;
    while (b > a && is_ows(s[b - 1])) b--;
    return mkstr(s + a, b - a);
}

/* Content-Length: a list of 1*DIGIT, all equal (RFC 9110 §8.6). */
static int parse_content_length(http_str v, int64_t *out)
{
    const unsigned char *p = (const unsigned char *)v.p;
    size_t i = 0, n = v.n;
    int64_t val = -1;
    for (;;) {
        while (i < n && is_ows(p[i])) i++;
        size_t d = i;
        int64_t x = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            int digit = p[i] - '0';
            if (x > (INT64_MAX - digit) / 10) return -400; /* overflow */
            x = x * 10 + digit;
            i++;
        }
        if (i == d) return -400; /* empty element, sign, or junk */
        if (val >= 0 && x != val) return -400;
        val = x;
        while (i < n && is_ows(p[i])) i++;
        if (i == n) break;
        if (p[i] != ',') return -400;
        i++;
    }
    *out = val;
    return 0;
}

/* Host: host characters, no "..", and no '/' (not a host character). */
static int host_ok(http_str v)
{
    const unsigned char *p = (const unsigned char *)v.p;
    for (size_t i = 0; i < v.n; i++) {
        if (!(cls[p[i]] & C_HOST)) return 0;
        if (p[i] == '.' && i > 0 && p[i - 1] == '.') return 0;
    }
    return 1;
}

/* Connection: a comma list of options; we care about close and keep-alive. */
static void parse_connection(http_str v, walk_state *w)
{
    const unsigned char *p = (const unsigned char *)v.p;
    size_t i = 0;
    while (i < v.n) {
        size_t a = i;
        while (i < v.n && p[i] != ',') i++;
        http_str t = trim(p, a, i);
        if (eq_nocase((const unsigned char *)t.p, t.n, "close")) w->conn_close = 1;
        else if (eq_nocase((const unsigned char *)t.p, t.n, "keep-alive")) w->conn_keep = 1;
        i++;
    }
}

static void keep_first(http_str *slot, http_str v)
{
    if (!slot->p) *slot = v;
}

/* One complete header line: the name s[ns..ns+nlen), the trimmed value v. */
static int on_header(const unsigned char *name, size_t nlen, http_str v, walk_state *w, http_request *req)
{
#define IS(word) eq_nocase(name, nlen, word)
    switch (nlen) {
    case 4:
        if (IS("host")) {
            if (w->seen_host) return -400; /* RFC 9112 §3.2 */
            w->seen_host = 1;
            if (!host_ok(v)) return -400;
            if (!w->absolute) req->host = v;
        }
        break;
    case 5:
        if (IS("range")) keep_first(&req->range, v);
        break;
    case 6:
        if (IS("expect")) {
            if (req->minor >= 1 && eq_nocase((const unsigned char *)v.p, v.n, "100-continue"))
                req->expect_continue = 1;
        }
        break;
    case 8:
        if (IS("if-match")) keep_first(&req->if_match, v);
        else if (IS("if-range")) keep_first(&req->if_range, v);
        break;
    case 10:
        if (IS("connection")) parse_connection(v, w);
        break;
    case 13:
        if (IS("if-none-match")) keep_first(&req->if_none_match, v);
        break;
    case 14:
        if (IS("content-length")) {
            int64_t cl;
            if (parse_content_length(v, &cl) < 0) return -400;
            if (w->seen_te) return -400; /* CL with TE: smuggling */
            if (req->content_length >= 0 && req->content_length != cl) return -400;
            req->content_length = cl;
        }
        break;
    case 17:
        if (IS("if-modified-since")) keep_first(&req->if_modified_since, v);
        else if (IS("transfer-encoding")) {
            if (req->minor == 0) return -400;            /* RFC 9112 §6.1 */
            if (req->content_length >= 0) return -400;   /* CL with TE: smuggling */
            if (w->seen_te) return -400;                 /* repeated: nginx refuses */
            w->seen_te = 1;
            if (v.n == 0) return -400;
            if (!eq_nocase((const unsigned char *)v.p, v.n, "chunked")) return -501;
            req->chunked = 1;
        }
        break;
    case 19:
        if (IS("if-unmodified-since")) keep_first(&req->if_unmodified_since, v);
        break;
    default:
        break;
    }
    return 0;
#undef IS
}

/* Classifies the target s[a..b) and fills target, path and (absolute-form) host. */
static int on_target(const unsigned char *s, size_t a, size_t b, walk_state *w, http_request *req)
{
    static const char slash[] = "/";
    size_t n = b - a;
    const unsigned char *t = s + a;
    req->target = mkstr(t, n);
    if (n == 0) return -400; /* two spaces */
    if (req->method == HTTP_M_CONNECT) return 0; /* authority-form; the server answers 405 */
    if (t[0] == '/') {
        size_t i = 0;
        while (i < n && t[i] != '?' && t[i] != '#') i++;
        req->path = mkstr(t, i);
        return 0;
    }
    if (n == 1 && t[0] == '*') {
        if (req->method != HTTP_M_OPTIONS) return -400;
        req->path = mkstr(t, 1);
        return 0;
    }
    /* absolute-form: scheme "://" authority path-abempty [ "?" query ] */
    size_t i = 0;
    if (!((t[0] >= 'a' && t[0] <= 'z') || (t[0] >= 'A' && t[0] <= 'Z'))) return -400;
    while (i < n && (ALNUM_(t[i]) || t[i] == '+' || t[i] == '-' || t[i] == '.')) i++;
    if (n - i < 3 || memcmp(t + i, "://", 3) != 0) return -400;
    i += 3;
    size_t ha = i;
    while (i < n && t[i] != '/' && t[i] != '?' && t[i] != '#') i++;
    http_str host = mkstr(t + ha, i - ha);
    if (host.n == 0 || !host_ok(host)) return -400; /* RFC 9110 §4.2.1; '@' (userinfo) is refused here */
    w->absolute = 1;
    req->host = host;
    size_t pa = i;
    while (i < n && t[i] != '?' && t[i] != '#') i++;
    req->path = i > pa ? mkstr(t + pa, i - pa) : (http_str){slash, 1};
    return 0;
}

/* Walks s[0..m) (m <= HTTP_MAX_HEAD); see the top comment.  Returns the head
 * length, 0 if incomplete, or an error. */
static int walk_in(const unsigned char *s, size_t m, http_request *req)
{
    walk_state w = {0};
    memset(req, 0, sizeof *req);
    req->content_length = -1;

    size_t ms;
    int r = scan_start(s, m, &ms);
    if (r <= 0) return r;
    size_t i = (size_t)r;
    req->method = method_lookup(s + ms, i - ms);
    if (!req->method) return -501; /* a valid token, not a method we know */

    /* request-target */
    size_t ts = ++i;
    size_t tend = m < ts + HTTP_MAX_TARGET ? m : ts + HTTP_MAX_TARGET;
    for (;; i++) {
        while (i + 8 <= tend) { /* fast path: 8 visible bytes at a time */
            uint64_t x = load8(s + i);
            if (any_below(x, 0x21) || any_above(x, 0x7e)) break;
            i += 8;
        }
        if (i >= m) return 0;
        unsigned char c = s[i];
        if (c == ' ') break;
        if (!(cls[c] & C_VCHAR)) return -400;
        if (i - ts >= HTTP_MAX_TARGET) return -414;
    }
    if ((r = on_target(s, ts, i, &w, req)) < 0) return r;

    /* HTTP-version, then CRLF or LF */
    size_t vs = ++i;
    static const char proto[] = "HTTP/0.0";
    for (; i < vs + 8; i++) {
        if (i >= m) return 0;
        unsigned char c = s[i];
        if (proto[i - vs] == '0' ? !(c >= '0' && c <= '9') : c != (unsigned char)proto[i - vs]) return -400;
    }
    if (i >= m) return 0;
    if (s[i] == '\r') {
        if (++i >= m) return 0;
    }
    if (s[i] != '\n') return -400;
    if (s[vs + 5] != '1' || s[vs + 7] > '1') return -505;
    req->minor = s[vs + 7] - '0';
    i++;

    /* header lines */
    for (;;) {
        if (i >= m) return 0;
        unsigned char c = s[i];
        if (c == '\r') {
            if (i + 1 >= m) return 0;
            if (s[i + 1] != '\n') return -400;
            c = s[++i];
        }
        if (c == '\n') break; /* the empty line: end of head */
        if (req->nheaders >= HTTP_MAX_HEADERS) return -431;
        size_t ns = i;
        for (;; i++) {
            if (i >= m) return 0;
            c = s[i];
            if (c == ':') break;
            if (!(cls[c] & C_TCHAR)) return -400; /* also obs-fold, space before ':', no colon */
        }
        if (i == ns) return -400;
        size_t nlen = i - ns, va = ++i, vb;
        for (;; i++) {
            while (i + 8 <= m) { /* fast path: 8 bytes without CTL or DEL (nor CR, LF, HTAB) */
                uint64_t x = load8(s + i);
                if (any_below(x, 0x20) || any_equal(x, 0x7f)) break;
                i += 8;
            }
            if (i >= m) return 0;
            c = s[i];
            if (cls[c] & C_FIELD) continue;
            if (c == '\n') { vb = i; break; }
            if (c == '\r') {
                if (i + 1 >= m) return 0;
                if (s[i + 1] != '\n') return -400;
                vb = i++;
                break;
            }
            return -400;
        }
        req->nheaders++;
        if ((r = on_header(s + ns, nlen, trim(s, va, vb), &w, req)) < 0) return r;
        i++;
    }

    /* checks that need the whole head, made at its last byte */
    if (req->minor == 1 && !w.seen_host) return -400;
    req->keep_alive = req->minor == 1 ? !w.conn_close : (w.conn_keep && !w.conn_close);
    return (int)(i + 1);
}

/* The walk over s[0..n): errors by position, 431 at index HTTP_MAX_HEAD. */
static int walk(const unsigned char *s, size_t n, http_request *req)
{
    size_t m = n < HTTP_MAX_HEAD ? n : HTTP_MAX_HEAD;
    int r = walk_in(s, m, req);
    if (r == 0 && n > HTTP_MAX_HEAD) return -431;
    return r;
}

/* ---- The end search and the driver ---------------------------------------- */

/* An incomplete head is walked each time it grows past a multiple of this, so
 * an error that no cheaper trigger sees (a 101st header line, a line without
 * a colon) is answered at most this many bytes after it became certain, at a
 * cost of at most HTTP_MAX_HEAD / WALK_STRIDE extra walks per request. */
enum { WALK_STRIDE = 1024 };

/* Is the LF at s[i] the end of a head: is the line it ends empty, and the
 * line before that non-empty?  Looks at s[i-4..i) only. */
static int is_end(const unsigned char *s, size_t i)
{
    size_t j; /* the LF ending the line before */
    if (i >= 1 && s[i - 1] == '\n') j = i - 1;
    else if (i >= 2 && s[i - 1] == '\r' && s[i - 2] == '\n') j = i - 2;
    else return 0; /* a non-empty line, or an empty first line */
    if (j == 0 || s[j - 1] == '\n') return 0;
    if (s[j - 1] == '\r' && (j == 1 || s[j - 2] == '\n')) return 0;
    return 1;
}

void http_parser_init(http_parser *ps) { ps->scanned = 0; }

int http_parse_request(http_parser *ps, const char *buf, size_t len, http_request *req)
{
    const unsigned char *s = (const unsigned char *)buf;
    size_t from = ps->scanned <= len ? ps->scanned : 0;
    size_t lim = len < HTTP_MAX_HEAD ? len : HTTP_MAX_HEAD;

    /* 1. the end search, over the new bytes only */
    for (size_t i = from; i < lim;) {
        const unsigned char *lf = memchr(s + i, '\n', lim - i);
        if (!lf) break;
        i = (size_t)(lf - s);
        if (is_end(s, i)) {
            int r = walk(s, i + 1, req);
            if (r == 0) { /* cannot happen: the walk and the search agree on the end */
#ifdef HTTP_PARSE_PARANOID
                fprintf(stderr, "http_parse: end at %zu but the walk is incomplete\n", i);
                abort();
#endif
                r = -400;
            }
            ps->scanned = 0;
            return r;
        }
        i++;
    }

    /* 2. triggers among the new bytes (see the top comment) */
    size_t t = 0;
    int fire = 0;
#define TRIGGER(pos) do { size_t p_ = (pos); if (!fire || p_ > t) t = p_; fire = 1; } while (0)
    if (len > HTTP_MAX_HEAD) TRIGGER(HTTP_MAX_HEAD);
    for (size_t i = from; i < lim; i++) {
        if (i == 0 || s[i - 1] != '\r') /* fast path: no control byte, no DEL in 8 */
            while (i + 8 <= lim && !any_below(load8(s + i), 0x20) && !any_equal(load8(s + i), 0x7f)) i += 8;
        if (i >= lim) break;
        if (cls[s[i]] & C_BAD) { TRIGGER(i); break; }
        if (i > 0 && s[i - 1] == '\r' && s[i] != '\n') { TRIGGER(i); break; }
    }
    if (lim > from) {
        size_t k = (lim - 1) / WALK_STRIDE * WALK_STRIDE; /* the last stride boundary among the new bytes */
        if (k > 0 && k >= from) TRIGGER(k);
    }
    size_t ms;
    int r = scan_start(s, lim, &ms);
    if (r < 0) TRIGGER(ms);
    else if (r > 0) {
        size_t x = (size_t)r + 1 + HTTP_MAX_TARGET; /* the target's first byte too many */
        if (x >= from && x < len) TRIGGER(x);
    }
#undef TRIGGER
    if (fire) {
        r = walk(s, t + 1, req);
        if (r != 0) {
            ps->scanned = 0;
            return r;
        }
    }
    ps->scanned = len;
    return 0;
}

/* ---- Paths ---------------------------------------------------------------- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int http_path_decode(const char *p, size_t n, char *out, size_t outsz)
{
    if (n == 0 || p[0] != '/') return -400;
    /* 1. decode into out */
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (unsigned char)p[i];
        if (c == '%') {
            int hi = i + 1 < n ? hexval((unsigned char)p[i + 1]) : -1;
            int lo = i + 2 < n ? hexval((unsigned char)p[i + 2]) : -1;
            if (hi < 0 || lo < 0) return -400;
            c = hi * 16 + lo;
            i += 2;
        }
        if (c == 0) return -400;
        if (d + 1 >= outsz) return -414; /* room for c and the NUL */
        out[d++] = (char)c;
    }
    /* 2. normalise in place: w <= r always, out[0..w) is "/" or "/seg/.../" or ends in a segment */
    size_t w = 1, r = 1;
    while (r < d) {
        if (out[r] == '/') { r++; continue; } /* "//" */
        size_t e = r;
        while (e < d && out[e] != '/') e++;
        size_t sl = e - r;
        if (sl == 1 && out[r] == '.') {
            /* "." */
        } else if (sl == 2 && out[r] == '.' && out[r + 1] == '.') {
            if (w == 1) return -400; /* above the root */
            w--;                     /* out[w] was the '/' after the last segment */
            while (out[w - 1] != '/') w--;
        } else {
            memmove(out + w, out + r, sl);
            w += sl;
            if (e < d) out[w++] = '/';
        }
        r = e + 1;
    }
    out[w] = '\0';
    return (int)w;
}
