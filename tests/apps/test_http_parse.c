/* The HTTP/1.1 request parser of weft-httpd: request lines, headers, every
 * status class, the smuggling rules, pipelining, incremental parsing and its
 * limits, and path decoding. */
#include "harness.h"

#include "http_parse.h"

/* ---- helpers ---- */

#define S(lit) lit, sizeof(lit) - 1 /* a literal with its length (may hold NULs) */

static int parse(const char *s, size_t n, http_request *req)
{
    http_parser ps;
    http_parser_init(&ps);
    return http_parse_request(&ps, s, n, req);
}

static int status(const char *s, size_t n)
{
    http_request req;
    return parse(s, n, &req);
}

static int str_is(http_str v, const char *want)
{
    return v.p && v.n == strlen(want) && memcmp(v.p, want, v.n) == 0;
}

/* a string field as an offset into its buffer, -1 when absent, -2 outside */
static long long off(http_str v, const char *base, size_t n)
{
    if (!v.p) return -1;
    if (v.p < base || v.p > base + n) return v.n == 1 && v.p[0] == '/' ? -3 : -2;
    return (long long)(v.p - base) * 100000 + (long long)v.n;
}

static void check_same(const http_request *a, const char *abase, const http_request *b, const char *bbase, size_t n)
{
    CHECK_EQ(a->method, b->method);
    CHECK_EQ(a->minor, b->minor);
    CHECK_EQ(a->keep_alive, b->keep_alive);
    CHECK_EQ(a->content_length, b->content_length);
    CHECK_EQ(a->chunked, b->chunked);
    CHECK_EQ(a->expect_continue, b->expect_continue);
    CHECK_EQ(a->nheaders, b->nheaders);
    const http_str *fa[] = {&a->target, &a->path, &a->host, &a->if_none_match, &a->if_modified_since,
                            &a->if_match, &a->if_unmodified_since, &a->if_range, &a->range};
    const http_str *fb[] = {&b->target, &b->path, &b->host, &b->if_none_match, &b->if_modified_since,
                            &b->if_match, &b->if_unmodified_since, &b->if_range, &b->range};
    for (int i = 0; i < 9; i++) CHECK_EQ(off(*fa[i], abase, n), off(*fb[i], bbase, n));
}

/* Feeds s[0..n) one byte more per call, each call in a fresh exact-size
 * copy (the buffer may move; ASan sees any read past len); the first
 * non-zero answer must equal the answer for the whole input at once. */
static int check_incremental(const char *s, size_t n)
{
    http_request whole, part;
    int want = parse(s, n, &whole);
    http_parser ps;
    http_parser_init(&ps);
    for (size_t len = 1; len <= n; len++) {
        char *copy = malloc(len);
        CHECK(copy != NULL);
        memcpy(copy, s, len);
        int r = http_parse_request(&ps, copy, len, &part);
        if (r != 0) {
            CHECK_EQ(r, want);
            if (r > 0) check_same(&part, copy, &whole, s, (size_t)r);
            free(copy);
            return r;
        }
        free(copy);
    }
    CHECK_EQ(want, 0);
    return 0;
}

/* Splits s at every point: one call with the prefix, then one with all. */
static void check_splits(const char *s, size_t n)
{
    http_request whole, part;
    int want = parse(s, n, &whole);
    for (size_t k = 1; k < n; k++) {
        http_parser ps;
        http_parser_init(&ps);
        int r = http_parse_request(&ps, s, k, &part);
        if (r == 0) r = http_parse_request(&ps, s, n, &part);
        CHECK_EQ(r, want);
        if (r > 0) check_same(&part, s, &whole, s, (size_t)r);
    }
}

static char big[40000];

/* ---- request line ---- */

TEST(get_simple) {
    const char *s = "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n";
    http_request req;
    CHECK_EQ(parse(s, strlen(s), &req), (int)strlen(s));
    CHECK_EQ(req.method, HTTP_M_GET);
    CHECK_EQ(req.minor, 1);
    CHECK(str_is(req.target, "/index.html"));
    CHECK(str_is(req.path, "/index.html"));
    CHECK(str_is(req.host, "example.com"));
    CHECK_EQ(req.keep_alive, 1);
    CHECK_EQ(req.content_length, -1);
    CHECK_EQ(req.chunked, 0);
    CHECK_EQ(req.expect_continue, 0);
    CHECK_EQ(req.nheaders, 1);
    CHECK(req.range.p == NULL && req.range.n == 0);
    CHECK(req.if_none_match.p == NULL);
}

TEST(head_http10_without_host) {
    http_request req;
    CHECK_EQ(parse(S("HEAD /a HTTP/1.0\r\n\r\n"), &req), 20);
    CHECK_EQ(req.method, HTTP_M_HEAD);
    CHECK_EQ(req.minor, 0);
    CHECK_EQ(req.keep_alive, 0);
    CHECK(req.host.p == NULL && req.host.n == 0);
    CHECK_EQ(req.nheaders, 0);
}

TEST(all_methods_and_names) {
    static const char *names[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"};
    for (int m = HTTP_M_GET; m <= HTTP_M_CONNECT; m++) {
        char s[128];
        int n = snprintf(s, sizeof s, "%s %s HTTP/1.1\r\nHost: h\r\n\r\n", names[m - 1], m == HTTP_M_CONNECT ? "h:443" : "/");
        http_request req;
        CHECK_EQ(parse(s, (size_t)n, &req), n);
        CHECK_EQ(req.method, m);
        CHECK(strcmp(http_method_name(m), names[m - 1]) == 0);
    }
    CHECK(strcmp(http_method_name(0), "UNKNOWN") == 0);
    CHECK(strcmp(http_method_name(99), "UNKNOWN") == 0);
}

TEST(unknown_method_501) {
    CHECK_EQ(status(S("FOO / HTTP/1.1\r\nHost: h\r\n\r\n")), -501);
    CHECK_EQ(status(S("get / HTTP/1.1\r\nHost: h\r\n\r\n")), -501); /* methods are case-sensitive */
    CHECK_EQ(status(S("G(T / HTTP/1.1\r\nHost: h\r\n\r\n")), -400); /* not a token */
    CHECK_EQ(status(S(" GET / HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    /* longer than any method: known at the 8th byte, before the line ends */
    CHECK_EQ(status(S("PROPFIND")), -501);
    CHECK_EQ(status(S("PROPFIN")), 0);
    CHECK_EQ(status(S("SSH-2.0-OpenSSH_9.6\r\n")), -501);
}

TEST(bare_lf_line_endings) {
    http_request req;
    CHECK_EQ(parse(S("GET / HTTP/1.1\nHost: a\n\n"), &req), 24);
    CHECK(str_is(req.host, "a"));
    /* mixed */
    CHECK_EQ(parse(S("GET / HTTP/1.1\r\nHost: a\n\r\n"), &req), 26);
}

TEST(leading_empty_lines_skipped) {
    http_request req;
    const char *s = "\r\n\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n";
    CHECK_EQ(parse(s, strlen(s), &req), (int)strlen(s)); /* counted in the length */
    CHECK(str_is(req.path, "/x"));
    /* an empty line alone is not a head */
    CHECK_EQ(status(S("\r\n\r\n")), 0);
    /* more than HTTP_MAX_LEADING bytes of them: 400, even before the request line */
    memset(big, '\n', HTTP_MAX_LEADING + 1);
    CHECK_EQ(status(big, HTTP_MAX_LEADING + 1), -400);
    CHECK_EQ(status(big, HTTP_MAX_LEADING), 0);
    CHECK_EQ(status(S("\r\rGET / HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
}

TEST(path_query_fragment) {
    http_request req;
    CHECK(parse(S("GET /a/b%20c?x=1&y=/z#frag HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.target, "/a/b%20c?x=1&y=/z#frag"));
    CHECK(str_is(req.path, "/a/b%20c"));
    CHECK(parse(S("GET /#f HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.path, "/"));
}

TEST(absolute_form) {
    http_request req;
    const char *s = "GET http://example.org:8080/a/b?q=1 HTTP/1.1\r\nHost: other\r\n\r\n";
    CHECK_EQ(parse(s, strlen(s), &req), (int)strlen(s));
    CHECK(str_is(req.target, "http://example.org:8080/a/b?q=1"));
    CHECK(str_is(req.path, "/a/b"));
    CHECK(str_is(req.host, "example.org:8080")); /* RFC 9112 §3.2.2: the target's authority wins */
    CHECK(parse(S("GET HTTPS://h HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.path, "/"));
    CHECK(parse(S("GET http://h?x HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.path, "/"));
    CHECK(str_is(req.host, "h"));
    CHECK_EQ(status(S("GET http://user@h/ HTTP/1.1\r\nHost: h\r\n\r\n")), -400); /* userinfo */
    CHECK_EQ(status(S("GET http:///a HTTP/1.1\r\nHost: h\r\n\r\n")), -400);      /* empty host */
    CHECK_EQ(status(S("GET http:/a HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET a/b HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET 1http://h/ HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
}

TEST(asterisk_and_authority_forms) {
    http_request req;
    CHECK(parse(S("OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.method, HTTP_M_OPTIONS);
    CHECK(str_is(req.path, "*"));
    CHECK_EQ(status(S("GET * HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK(parse(S("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.method, HTTP_M_CONNECT);
    CHECK(str_is(req.target, "h:443"));
    CHECK(req.path.p == NULL && req.path.n == 0);
    CHECK_EQ(status(S("GET h:443 HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
}

TEST(version_505_and_malformed_400) {
    CHECK_EQ(status(S("GET / HTTP/2.0\r\nHost: h\r\n\r\n")), -505);
    CHECK_EQ(status(S("GET / HTTP/1.2\r\nHost: h\r\n\r\n")), -505);
    CHECK_EQ(status(S("GET / HTTP/0.9\r\n\r\n")), -505);
    CHECK_EQ(status(S("GET / HTTP/1.10\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / http/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.x\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET /\r\n\r\n")), -400); /* HTTP/0.9 simple request */
}

TEST(request_line_spacing) {
    CHECK_EQ(status(S("GET  / HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET /  HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1 \r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET /\tHTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\r\nHost: h\r\n\r\n")), -400);
}

TEST(target_bytes_visible_ascii) {
    CHECK_EQ(status(S("GET /caf\xc3\xa9 HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET /a\x01 HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET /a\x7f HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    CHECK(status(S("GET /a\"<>\\^`{|}~ HTTP/1.1\r\nHost: h\r\n\r\n")) > 0); /* visible: accepted, as nginx */
}

/* The word-at-a-time fast paths must still see every byte, wherever it is. */
TEST(fast_paths_see_every_byte) {
    static const struct { unsigned char c; int value_ok, target_ok; } cases[] = {
        {0x01, 0, 0}, {'\t', 1, 0}, {0x7f, 0, 0}, {0x80, 1, 0}, {0xff, 1, 0}, {'~', 1, 1}, {0x1f, 0, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int pos = 0; pos < 40; pos++) {
            char s[256];
            int n = sprintf(s, "GET / HTTP/1.1\r\nHost: h\r\nX-V: %040d\r\n\r\n", 0);
            s[30 + pos] = (char)cases[k].c;
            CHECK_EQ(memcmp(s + 25, "X-V: ", 5), 0);
            CHECK_EQ(status(s, (size_t)n), cases[k].value_ok ? n : -400);
            n = sprintf(s, "GET /%040d HTTP/1.1\r\nHost: h\r\n\r\n", 0);
            s[5 + pos] = (char)cases[k].c;
            CHECK_EQ(status(s, (size_t)n), cases[k].target_ok ? n : -400);
        }
}

/* ---- headers ---- */

TEST(host_rules) {
    CHECK_EQ(status(S("GET / HTTP/1.1\r\n\r\n")), -400);                         /* missing in 1.1 */
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n")), -400);  /* twice, even equal */
    CHECK_EQ(status(S("GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: a b\r\n\r\n")), -400);
    http_request req;
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.host, "[::1]:8080"));
    CHECK(parse(S("GET / HTTP/1.1\r\nHost:\r\n\r\n"), &req) > 0); /* empty is allowed (RFC 9112 §3.2) */
    CHECK(req.host.p != NULL && req.host.n == 0);
}

TEST(whitespace_before_colon) {
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost : h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A\t: 1\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX A: 1\r\n\r\n")), -400);
}

TEST(obs_fold_rejected) {
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\t2\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\n Host: h\r\n\r\n")), -400);
}

TEST(header_line_syntax) {
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX(A): v\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-\xc3\xa9: v\r\n\r\n")), -400);
    http_request req;
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\nX-Empty:\r\nX-B:b:c\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.nheaders, 3);
}

TEST(control_characters) {
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\0b\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x01\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x7f\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\x1b[31m\r\n\r\n")), -400);
    CHECK_EQ(status(S("G\0T / HTTP/1.1\r\nHost: h\r\n\r\n")), -400);
    /* HTAB and obs-text are allowed in values */
    CHECK(status(S("GET / HTTP/1.1\r\nHost: h\r\nX-A: a\tb \xe9\xff\r\n\r\n")) > 0);
}

TEST(bare_cr_rejected) {
    CHECK_EQ(status(S("GET / HTTP/1.1\rHost: h\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\n\r\r\n")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n")), -400);
    /* known before the head is complete */
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nX: a\rb")), -400);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nX: a\r")), 0);
}

TEST(values_trimmed_names_case_insensitive) {
    http_request req;
    CHECK(parse(S("GET / HTTP/1.1\r\nhOsT: \t a.b \t\r\nCONTENT-length:  7 \r\nIF-NONE-MATCH:\t\"x\"\r\n\r\n"), &req) > 0);
    CHECK(str_is(req.host, "a.b"));
    CHECK_EQ(req.content_length, 7);
    CHECK(str_is(req.if_none_match, "\"x\""));
}

TEST(content_length_values) {
    http_request req;
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, 0);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 007\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, 7);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775807\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, INT64_MAX);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 9223372036854775808\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999999\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: abc\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length:\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0x10\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5,\r\n\r\n")), -400);
}

TEST(content_length_duplicates) {
    http_request req;
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, 5);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, 5);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5,005\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.content_length, 5);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n")), -400);
}

/* ---- smuggling ---- */

TEST(cl_with_te_rejected) {
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n")), -400);
}

TEST(te_chunked_accepted) {
    http_request req;
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.chunked, 1);
    CHECK_EQ(req.content_length, -1);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:    chunked \t \r\n\r\n"), &req) > 0);
    CHECK_EQ(req.chunked, 1);
    CHECK(parse(S("POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding:ChUnKeD\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.chunked, 1);
}

TEST(te_other_codings_501) {
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n")), -501);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")), -501);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n")), -501);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunk ed\r\n\r\n")), -501);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n")), -501);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked;q=1\r\n\r\n")), -501);
}

TEST(te_odd_forms_400) {
    /* HTTP/1.0 */
    CHECK_EQ(status(S("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n")), -400);
    /* twice */
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n")), -400);
    /* space before the colon, a folded value, a vertical tab, empty */
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n chunked\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \x0b" "chunked\r\n\r\n")), -400);
    CHECK_EQ(status(S("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n\r\n")), -400);
}

/* ---- connection ---- */

TEST(keep_alive_rules) {
    http_request req;
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 1);
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 0);
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, CLOSE\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 0);
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection:close\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 0);
    CHECK(parse(S("GET / HTTP/1.1\r\nHost: h\r\nConnection: closed\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 1);
    CHECK(parse(S("GET / HTTP/1.0\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 0);
    CHECK(parse(S("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 1);
    CHECK(parse(S("GET / HTTP/1.0\r\nConnection: foo ,\t keep-alive ,\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 1);
    CHECK(parse(S("GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.keep_alive, 0);
}

TEST(expect_continue) {
    http_request req;
    CHECK(parse(S("PUT /f HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.expect_continue, 1);
    CHECK_EQ(req.method, HTTP_M_PUT);
    CHECK(parse(S("PUT /f HTTP/1.1\r\nHost: h\r\nexpect: 100-Continue\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.expect_continue, 1);
    CHECK(parse(S("PUT /f HTTP/1.0\r\nExpect: 100-continue\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.expect_continue, 0); /* RFC 9110 §10.1.1: ignored in 1.0 */
    CHECK(parse(S("PUT /f HTTP/1.1\r\nHost: h\r\nExpect: 200-ok\r\n\r\n"), &req) > 0);
    CHECK_EQ(req.expect_continue, 0);
}

TEST(conditional_and_range_headers) {
    http_request req;
    const char *s = "GET /f HTTP/1.1\r\nHost: h\r\n"
                    "If-None-Match: \"a\", \"b\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
                    "If-Match: *\r\nIf-Unmodified-Since: Mon, 07 Nov 1994 08:49:37 GMT\r\n"
                    "If-Range: \"e\"\r\nRange: bytes=0-99\r\nRange: bytes=5-\r\n\r\n";
    CHECK_EQ(parse(s, strlen(s), &req), (int)strlen(s));
    CHECK(str_is(req.if_none_match, "\"a\", \"b\""));
    CHECK(str_is(req.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT"));
    CHECK(str_is(req.if_match, "*"));
    CHECK(str_is(req.if_unmodified_since, "Mon, 07 Nov 1994 08:49:37 GMT"));
    CHECK(str_is(req.if_range, "\"e\""));
    CHECK(str_is(req.range, "bytes=0-99")); /* the first one */
    CHECK_EQ(req.nheaders, 8);
}

/* ---- pipelining and incremental parsing ---- */

TEST(pipelined_requests) {
    const char *s = "GET /one HTTP/1.1\r\nHost: h\r\n\r\n"
                    "HEAD /two HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
                    "GET /thr";
    size_t n = strlen(s);
    http_parser ps;
    http_request req;
    http_parser_init(&ps);
    int a = http_parse_request(&ps, s, n, &req);
    CHECK_EQ(a, 30);
    CHECK(str_is(req.path, "/one"));
    CHECK_EQ(req.keep_alive, 1);
    http_parser_init(&ps);
    int b = http_parse_request(&ps, s + a, n - (size_t)a, &req);
    CHECK(b > 0);
    CHECK_EQ(req.method, HTTP_M_HEAD);
    CHECK(str_is(req.path, "/two"));
    CHECK_EQ(req.keep_alive, 0);
    http_parser_init(&ps);
    CHECK_EQ(http_parse_request(&ps, s + a + b, n - (size_t)(a + b), &req), 0);
    CHECK_EQ(a + b + 8, (int)n);
}

TEST(pipelined_with_body_bytes_after_head) {
    const char *s = "POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\nHost: h\r\n\r\n";
    http_request req;
    int a = parse(s, strlen(s), &req);
    CHECK(a > 0);
    CHECK(memcmp(s + a, "body", 4) == 0);
    CHECK_EQ(parse(s + a + 4, strlen(s + a + 4), &req), (int)strlen(s + a + 4));
}

static const char *const samples[] = {
    "GET /index.html HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    "\r\n\nGET / HTTP/1.0\nX: y\n\n",
    "GET http://h:1/a?b HTTP/1.1\r\nHost: x\r\nRange: bytes=1-2\r\n\r\nextra",
    "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n",
    "GET / HTTP/2.0\r\nHost: h\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: h\rX\r\n\r\n",
    "GET / HTTP/1.1\r\n\r\n",
    "BREW /pot HTTP/1.1\r\nHost: h\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: h\r\nX: \x01\r\n\r\n",
    "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    "GET / HTTP/1.1\r\nHost: h\r\n\r",
};

TEST(incremental_byte_by_byte_matches_whole) {
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        check_incremental(samples[i], strlen(samples[i]));
        check_splits(samples[i], strlen(samples[i]));
    }
    CHECK_EQ(check_incremental(samples[0], strlen(samples[0])), (int)strlen(samples[0]));
    CHECK_EQ(check_incremental(samples[12], strlen(samples[12])), 0);
}

TEST(every_prefix_of_a_valid_head_is_incomplete) {
    const char *s = "\r\nGET /a HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\nIf-Range: x\r\n\r\n";
    size_t n = strlen(s);
    for (size_t k = 0; k < n; k++) CHECK_EQ(status(s, k), 0);
    CHECK_EQ(status(s, n), (int)n);
}

TEST(scanned_advances_and_buffer_may_move) {
    const char *s = "GET /x HTTP/1.1\r\nHost: h\r\n\r\n";
    size_t n = strlen(s);
    http_parser ps;
    http_request req;
    http_parser_init(&ps);
    CHECK_EQ(http_parse_request(&ps, s, 20, &req), 0);
    CHECK_EQ(ps.scanned, 20);
    char copy[64];
    memcpy(copy, s, n); /* the server may grow (move) its buffer between reads */
    CHECK_EQ(http_parse_request(&ps, copy, n, &req), (int)n);
    CHECK(req.path.p == copy + 4);
}

TEST(early_rejection_of_garbage) {
    /* a TLS ClientHello sent to the plain-HTTP port: answered at once */
    CHECK_EQ(status(S("\x16\x03\x01")), -400);
    /* the first of two errors is reported, whatever came in first */
    CHECK_EQ(status(S("GET / HTTP/9.9\r\nX: \x01")), -505);
    CHECK_EQ(status(S("GET / HTTP/1.1\r\nX\x01")), -400);
}

/* ---- limits ---- */

TEST(head_limit_431_before_completion) {
    size_t n = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: h\r\nX-Big: ");
    memset(big + n, 'a', 20000 - n);
    CHECK_EQ(status(big, 20000), -431); /* no end yet: refused anyway */
    CHECK_EQ(status(big, HTTP_MAX_HEAD), 0);
    CHECK_EQ(status(big, HTTP_MAX_HEAD + 1), -431);
    /* a head of exactly HTTP_MAX_HEAD bytes is accepted, one more is not */
    memcpy(big + HTTP_MAX_HEAD - 4, "\r\n\r\n", 4);
    CHECK_EQ(status(big, HTTP_MAX_HEAD), HTTP_MAX_HEAD);
    memset(big + HTTP_MAX_HEAD - 4, 'a', 4);
    memcpy(big + HTTP_MAX_HEAD - 3, "\r\n\r\n", 4);
    CHECK_EQ(status(big, HTTP_MAX_HEAD + 1), -431);
    /* incrementally, in 1000-byte reads: 0 until the limit passes */
    http_parser ps;
    http_request req;
    http_parser_init(&ps);
    memset(big + n, 'a', 20000 - n);
    int r = 0;
    size_t len;
    for (len = 1000; len <= 20000 && r == 0; len += 1000) r = http_parse_request(&ps, big, len, &req);
    CHECK_EQ(r, -431);
    CHECK_EQ(len - 1000, 17000);
}

TEST(target_limit_414_before_completion) {
    memcpy(big, "GET /", 5);
    memset(big + 5, 'a', 20000 - 5);
    CHECK_EQ(status(big, 20000), -414);
    CHECK_EQ(status(big, 4 + HTTP_MAX_TARGET), 0);
    CHECK_EQ(status(big, 4 + HTTP_MAX_TARGET + 1), -414);
    /* exactly HTTP_MAX_TARGET is fine */
    size_t n = 4 + HTTP_MAX_TARGET;
    n += (size_t)sprintf(big + n, " HTTP/1.1\r\nHost: h\r\n\r\n");
    http_request req;
    CHECK_EQ(parse(big, n, &req), (int)n);
    CHECK_EQ(req.target.n, HTTP_MAX_TARGET);
    /* incrementally, 100 bytes at a time */
    memset(big + 5, 'a', 20000 - 5);
    http_parser ps;
    http_parser_init(&ps);
    int r = 0;
    size_t len;
    for (len = 100; len <= 20000 && r == 0; len += 100) r = http_parse_request(&ps, big, len, &req);
    CHECK_EQ(r, -414);
    CHECK_EQ(len - 100, 8200);
}

TEST(limits_with_no_line_end_at_all) {
    memset(big, 'A', 20000);
    CHECK_EQ(status(big, 20000), -501); /* a "method" of 20000 bytes */
    memset(big, '\n', 20000);
    CHECK_EQ(status(big, 20000), -400); /* too many empty lines */
    memset(big, 0, 20000);
    CHECK_EQ(status(big, 20000), -400);
    memcpy(big, "GET /", 5);
    memset(big + 5, '/', 20000 - 5);
    CHECK_EQ(status(big, 20000), -414);
}

TEST(too_many_headers_431) {
    size_t n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: h\r\n");
    for (int i = 1; i < HTTP_MAX_HEADERS; i++) n += (size_t)sprintf(big + n, "X-%d: v\r\n", i);
    n += (size_t)sprintf(big + n, "\r\n");
    http_request req;
    CHECK_EQ(parse(big, n, &req), (int)n);
    CHECK_EQ(req.nheaders, HTTP_MAX_HEADERS);
    n -= 2;
    n += (size_t)sprintf(big + n, "X-last: v\r\n");
    size_t at = n;
    n += (size_t)sprintf(big + n, "\r\n");
    CHECK_EQ(status(big, n), -431);
    /* before the end: at the latest 1 KiB after the 101st line began */
    CHECK(at < 1024);
    memset(big + at, 'x', 2048);
    CHECK_EQ(status(big, at + 2048), -431);
    check_splits(big, at + 2048);
    /* a line without a colon: likewise */
    n = (size_t)sprintf(big, "GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n");
    memset(big + n, 'x', 2048);
    CHECK_EQ(status(big, n), 0);
    CHECK_EQ(status(big, n + 2048), -400);
}

/* ---- http_path_decode ---- */

static int dec(const char *p, char *out, size_t outsz) { return http_path_decode(p, strlen(p), out, outsz); }

#define DEC_IS(in, want)                                  \
    do {                                                  \
        char o_[256];                                     \
        CHECK_EQ(dec(in, o_, sizeof o_), strlen(want));   \
        CHECK(strcmp(o_, want) == 0);                     \
    } while (0)

TEST(path_decode_basic) {
    DEC_IS("/", "/");
    DEC_IS("/a/b.html", "/a/b.html");
    DEC_IS("/a%20b/%41%62c", "/a b/Abc");
    DEC_IS("/%7e%7E", "/~~");
    DEC_IS("/a+b", "/a+b");
    DEC_IS("/dir/", "/dir/");
    DEC_IS("/caf%C3%A9", "/caf\xc3\xa9");
    DEC_IS("/%25", "/%");
}

TEST(path_decode_traversal) {
    char o[256];
    CHECK_EQ(dec("/../x", o, sizeof o), -400);
    CHECK_EQ(dec("/..", o, sizeof o), -400);
    CHECK_EQ(dec("/a/../../x", o, sizeof o), -400);
    CHECK_EQ(dec("/%2e%2e/x", o, sizeof o), -400);
    CHECK_EQ(dec("/%2E./x", o, sizeof o), -400);
    CHECK_EQ(dec("/a%2F..%2F..%2Fx", o, sizeof o), -400);
    CHECK_EQ(dec("/a%2f..%2f..%2fetc%2fpasswd", o, sizeof o), -400);
    CHECK_EQ(dec("/a/b/../../..", o, sizeof o), -400);
    CHECK_EQ(dec("//..//x", o, sizeof o), -400);
    DEC_IS("/a/../x", "/x");
    DEC_IS("/a/b/../../x", "/x");
    DEC_IS("/a%2Fb", "/a/b");
    DEC_IS("/a/%2e/b", "/a/b");
}

TEST(path_decode_malformed) {
    char o[256];
    CHECK_EQ(dec("/%00", o, sizeof o), -400);
    CHECK_EQ(dec("/a%zz", o, sizeof o), -400);
    CHECK_EQ(dec("/a%2", o, sizeof o), -400);
    CHECK_EQ(dec("/a%", o, sizeof o), -400);
    CHECK_EQ(dec("/a%g0", o, sizeof o), -400);
    CHECK_EQ(dec("a/b", o, sizeof o), -400);
    CHECK_EQ(dec("%2fa", o, sizeof o), -400);
    CHECK_EQ(dec("", o, sizeof o), -400);
    CHECK_EQ(http_path_decode("/a\0b", 4, o, sizeof o), -400);
}

TEST(path_decode_normalise) {
    DEC_IS("//a//b/", "/a/b/");
    DEC_IS("/./a/.", "/a/");
    DEC_IS("/a/..", "/");
    DEC_IS("/a/b/..", "/a/");
    DEC_IS("/a/./b/./", "/a/b/");
    DEC_IS("/a/...", "/a/...");
    DEC_IS("/.a/..b/b..", "/.a/..b/b..");
    DEC_IS("///", "/");
    DEC_IS("/.", "/");
    DEC_IS("/a/b/c/../../d", "/a/d");
}

TEST(path_decode_length_limit) {
    char o[8];
    CHECK_EQ(dec("/abcdef", o, sizeof o), 7); /* 7 bytes + NUL fit in 8 */
    CHECK_EQ(dec("/abcdefg", o, sizeof o), -414);
    CHECK_EQ(dec("/%61%62%63%64%65%66", o, sizeof o), 7); /* the decoded length counts */
    CHECK_EQ(dec("/a/../bcdefgh", o, sizeof o), -414);    /* before normalising */
    CHECK_EQ(dec("/", o, 1), -414);
    CHECK_EQ(dec("/", o, 2), 1);
}
