/*
 * test_httpd: requests -- GET and HEAD on the standard docroot (headers,
 * MIME types, directories, redirects), paths that try to leave it
 * (traversal, escapes, symlinks), malformed requests and smuggling (each
 * with its status, the connection kept or closed as it should be), and
 * keep-alive, HTTP/1.0 and pipelining.
 */
#include "httpd_test.h"

/* ------------------------------------------------------------------------ */
/* basic GET / HEAD                                                          */
/* ------------------------------------------------------------------------ */

/* "Sun, 06 Nov 1994 08:49:37 GMT" -> time_t, -1 if not IMF-fixdate */
static time_t parse_imf(const char *s) {
    struct tm tm = {0};
    if (strlen(s) != 29) return -1;
    const char *e = strptime(s, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (!e || *e) return -1;
    return timegm(&tm);
}

static void fmt_imf(time_t t, char out[64]) {
    struct tm tm;
    gmtime_r(&t, &tm);
    static const char *wd[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char *mo[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(out, 64, "%s, %02d %s %04d %02d:%02d:%02d GMT", wd[tm.tm_wday], tm.tm_mday, mo[tm.tm_mon],
             tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static void file_mtime_imf(const docroot *d, const char *rel, char out[64]) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", d->root, rel);
    struct stat st;
    CHECK(stat(p, &st) == 0);
    fmt_imf(st.st_mtime, out);
}

/* The validators and entity headers every 200 for a file carries. */
static void check_file_headers(const docroot *d, const resp *r, const char *rel, size_t size, const char *type) {
    char v[256], want[64];
    snprintf(want, sizeof want, "%zu", size);
    CHECK_HDR(r, "Content-Length", want);
    CHECK_EQ(hdr_count(r, "Content-Length"), 1);
    CHECK(hdr(r, "Content-Type", v, sizeof v));
    if (strncmp(v, type, strlen(type)) != 0) FAIL("Content-Type '%s', expected %s...", v, type);
    CHECK(hdr(r, "Date", v, sizeof v));
    time_t date = parse_imf(v);
    if (date < 0 || llabs((long long)(date - time(NULL))) > 120) FAIL("bad Date '%s'", v);
    file_mtime_imf(d, rel, want);
    CHECK_HDR(r, "Last-Modified", want);
    CHECK(hdr(r, "ETag", v, sizeof v));
    size_t n = strlen(v);
    if (n < 3 || v[0] != '"' || v[n - 1] != '"' || strchr(v + 1, '"') != v + n - 1)
        FAIL("ETag '%s' is not a strong entity-tag", v);
}

TEST(get_index) {
    WITH_SERVER(d, s);
    resp r;
    get_path(s.port, "/", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, INDEX_BODY);
    check_file_headers(&d, &r, "index.html", strlen(INDEX_BODY), "text/html");
    resp_free(&r);
    /* index.html by name: the same entity */
    get_path(s.port, "/index.html", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, INDEX_BODY);
    resp_free(&r);
    server_stop(&s);
}

TEST(head_same_headers_no_body) {
    WITH_SERVER(d, s);
    client c;
    cl_open(&c, s.port);
    cl_sends(&c, "GET / HTTP/1.1\r\nHost: t\r\n\r\n");
    resp g, h;
    GET_RESPONSE(&c, &g, 0);
    CHECK_STATUS(&g, 200);
    cl_sends(&c, "HEAD / HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &h, 1);
    CHECK_STATUS(&h, 200);
    CHECK_EQ(h.body_len, 0);
    check_file_headers(&d, &h, "index.html", strlen(INDEX_BODY), "text/html");
    static const char *same[] = {"Content-Length", "Content-Type", "ETag", "Last-Modified"};
    for (int i = 0; i < 4; i++) {
        char a[256], b[256];
        CHECK(hdr(&g, same[i], a, sizeof a) && hdr(&h, same[i], b, sizeof b));
        if (strcmp(a, b)) FAIL("%s differs: GET '%s', HEAD '%s'", same[i], a, b);
    }
    /* no body went out after the HEAD's head: the next response parses */
    cl_sends(&c, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    resp_free(&g);
    resp_free(&h);
    GET_RESPONSE(&c, &g, 0);
    CHECK_STATUS(&g, 200);
    CHECK_BODY_STR(&g, HELLO_BODY);
    resp_free(&g);
    cl_close(&c);
    server_stop(&s);
}

TEST(get_subdirectory_and_query) {
    WITH_SERVER(d, s);
    resp r;
    get_path(s.port, "/sub/page.txt", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, SUBPAGE_BODY);
    check_file_headers(&d, &r, "sub/page.txt", strlen(SUBPAGE_BODY), "text/plain");
    resp_free(&r);
    get_path(s.port, "/sub/", &r); /* its index.html */
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, SUBINDEX_BODY);
    resp_free(&r);
    get_path(s.port, "/hello.txt?x=1&y=../../etc/passwd", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    resp_free(&r);
    get_path(s.port, "/sub/./../sub//page.txt", &r); /* normalised, stays inside */
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, SUBPAGE_BODY);
    resp_free(&r);
    get_path(s.port, "/%68ello.txt", &r); /* percent-encoded 'h' */
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    resp_free(&r);
    server_stop(&s);
}

TEST(not_found_keeps_connection) {
    WITH_SERVER(d, s);
    client c;
    cl_open(&c, s.port);
    cl_sends(&c, "GET /no/such/file.html HTTP/1.1\r\nHost: t\r\n\r\n");
    resp r;
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 404);
    CHECK(r.content_length >= 0 && (size_t)r.content_length == r.body_len);
    resp_free(&r);
    /* a 404 is not a reason to drop a keep-alive connection */
    cl_sends(&c, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    resp_free(&r);
    cl_close(&c);
    server_stop(&s);
}

TEST(directory_redirect_and_no_index) {
    WITH_SERVER(d, s);
    resp r;
    get_path(s.port, "/sub", &r);
    CHECK_STATUS(&r, 301);
    char loc[512];
    if (!hdr(&r, "Location", loc, sizeof loc)) FAIL("301 without Location:\n%s", r.head);
    size_t n = strlen(loc);
    if (n < 5 || strcmp(loc + n - 5, "/sub/") != 0) FAIL("Location '%s' should end in /sub/", loc);
    resp_free(&r);
    /* a directory without index.html: no listing */
    get_path(s.port, "/emptydir/", &r);
    if (r.status != 404 && r.status != 403) FAIL("GET /emptydir/: %d, expected 404 or 403:\n%s", r.status, r.head);
    CHECK(strstr(r.body, "file.txt") == NULL);
    resp_free(&r);
    get_path(s.port, "/emptydir", &r);
    CHECK_STATUS(&r, 301);
    resp_free(&r);
    server_stop(&s);
}

TEST(mime_types) {
    WITH_SERVER(d, s);
    static const struct { const char *path, *type; } t[] = {
        {"/style.css", "text/css"}, {"/img.png", "image/png"}, {"/hello.txt", "text/plain"}, {"/index.html", "text/html"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        resp r;
        get_path(s.port, t[i].path, &r);
        CHECK_STATUS(&r, 200);
        char v[256];
        CHECK(hdr(&r, "Content-Type", v, sizeof v));
        if (strncmp(v, t[i].type, strlen(t[i].type)) != 0) FAIL("%s: Content-Type '%s', expected %s", t[i].path, v, t[i].type);
        resp_free(&r);
    }
    resp r;
    get_path(s.port, "/app.js", &r);
    CHECK_STATUS(&r, 200);
    char v[256];
    CHECK(hdr(&r, "Content-Type", v, sizeof v));
    if (!strstr(v, "javascript")) FAIL("/app.js: Content-Type '%s'", v);
    resp_free(&r);
    get_path(s.port, "/img.png", &r);
    CHECK_BODY(&r, png_bytes, sizeof png_bytes);
    resp_free(&r);
    server_stop(&s);
}

TEST(empty_file) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    write_str(d.root, "empty.txt", "");
    server s;
    server_start(&s, d.root, (const char *)NULL);
    client c;
    resp r;
    cl_open(&c, s.port);
    cl_sends(&c, "GET /empty.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_HDR(&r, "Content-Length", "0");
    CHECK_EQ(r.body_len, 0);
    resp_free(&r);
    cl_sends(&c, "GET /empty.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 416);
    CHECK_HDR(&r, "Content-Range", "bytes */0");
    resp_free(&r);
    cl_sends(&c, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    cl_close(&c);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* traversal, escapes, symlinks                                              */
/* ------------------------------------------------------------------------ */

/* Nothing from outside the docroot: not 200, no foreign content. */
static void check_refused(int port, const char *req, int lo, int hi) {
    resp r;
    fetch(port, req, 0, &r);
    if (r.status < lo || r.status > hi) FAIL("%.80s -> %d, expected %d..%d:\n%s", req, r.status, lo, hi, r.head);
    if (strstr(r.body, "root:") || strstr(r.body, SECRET))
        FAIL("%.80s -> foreign content: %.80s", req, r.body);
    resp_free(&r);
}

TEST(traversal_refused) {
    WITH_SERVER(d, s);
    static const char *paths[] = {
        "/../etc/passwd",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/a/%2F..%2F..%2Fetc%2Fpasswd",
        "/..%2f..%2f..%2fetc%2fpasswd",
        "/%2E%2E/outside.txt",
        "/../outside.txt",
        "/sub/../../outside.txt",
        "/sub/%2e%2e/%2e%2e/outside.txt",
        "/./../outside.txt",
        "/..",
        "/..%5coutside.txt",
        "/%00",
        "/hello.txt%00.html",
        "/x%zz",
        "/x%2",
        "/x%",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char req[512];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", paths[i]);
        check_refused(s.port, req, 400, 404);
    }
    /* the absolute form's path goes through the same decoding */
    check_refused(s.port, "GET http://t/../outside.txt HTTP/1.1\r\nHost: t\r\n\r\n", 400, 404);
    check_refused(s.port, "GET http://t/%2e%2e/outside.txt HTTP/1.1\r\nHost: t\r\n\r\n", 400, 404);
    /* a 400 for a bad path closes; the server still serves */
    check_alive(s.port);
    server_stop(&s);
}

/* A path the server refuses after parsing (a bad escape, ".." above the
 * root) is answered "Connection: close": the connection must then close,
 * and a request pipelined behind it must not be answered. */
TEST(bad_path_closes_connection) {
    WITH_SERVER(d, s);
    static const char *paths[] = {"/x%zz", "/../etc/passwd", "/%00"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char req[512];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n",
                 paths[i]);
        client c;
        cl_open(&c, s.port);
        cl_sends(&c, req);
        resp r;
        GET_RESPONSE(&c, &r, 0);
        if (r.status != 400) FAIL("GET %s: %d, expected 400:\n%s", paths[i], r.status, r.head);
        CHECK_HDR(&r, "Connection", "close");
        resp_free(&r);
        int w = wait_closed(&c, IO_TIMEOUT_MS);
        if (w != 1)
            FAIL("GET %s: answered 400 with Connection: close, then %s", paths[i],
                 w < 0 ? "answered the pipelined request" : "kept the connection open");
        cl_close(&c);
    }
    check_alive(s.port);
    server_stop(&s);
}

TEST(symlink_escape_refused) {
    WITH_SERVER(d, s);
    static const char *paths[] = {
        "/passwd_link",        /* -> /etc/passwd */
        "/etc_link/passwd",    /* -> /etc */
        "/out_link",           /* -> ../outside.txt */
        "/outdir/outside.txt", /* -> .. */
        "/outdir/",            /* base/index.html is a secret */
        "/outdir/index.html",
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        char req[512];
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", paths[i]);
        check_refused(s.port, req, 403, 404);
    }
    /* a directory symlink leading out, named without the slash: whatever the
     * answer, not the outside */
    check_refused(s.port, "GET /outdir HTTP/1.1\r\nHost: t\r\n\r\n", 301, 404);
    check_refused(s.port, "GET /etc_link HTTP/1.1\r\nHost: t\r\n\r\n", 301, 404);
    /* a symlink staying inside: served (openat2) or refused (without it) */
    resp r;
    get_path(s.port, "/inside_link", &r);
    if (r.status == 200) CHECK_BODY_STR(&r, HELLO_BODY);
    else if (r.status != 403) FAIL("/inside_link: %d\n%s", r.status, r.head);
    resp_free(&r);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* malformed requests, smuggling                                             */
/* ------------------------------------------------------------------------ */

TEST(missing_host_400) {
    WITH_SERVER(d, s);
    check_error_str(s.port, "GET / HTTP/1.1\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
    /* HTTP/1.0 needs no Host */
    resp r;
    fetch(s.port, "GET /hello.txt HTTP/1.0\r\n\r\n", 0, &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    resp_free(&r);
    server_stop(&s);
}

TEST(version_505) {
    WITH_SERVER(d, s);
    check_error_str(s.port, "GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505);
    check_error_str(s.port, "GET / HTTP/1.2\r\nHost: t\r\n\r\n", 505);
    check_error_str(s.port, "GET / HTTP/1.x\r\nHost: t\r\n\r\n", 400);
    server_stop(&s);
}

TEST(unknown_method_501) {
    WITH_SERVER(d, s);
    check_error_str(s.port, "FOO / HTTP/1.1\r\nHost: t\r\n\r\n", 501);
    check_error_str(s.port, "get / HTTP/1.1\r\nHost: t\r\n\r\n", 501); /* methods are case-sensitive */
    server_stop(&s);
}

TEST(post_405_with_allow) {
    WITH_SERVER(d, s);
    client c;
    cl_open(&c, s.port);
    cl_sends(&c, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
    resp r;
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 405);
    char v[256];
    if (!hdr(&r, "Allow", v, sizeof v)) FAIL("405 without Allow:\n%s", r.head);
    CHECK(strstr(v, "GET") && strstr(v, "HEAD"));
    CHECK_CLOSED(&c);
    resp_free(&r);
    cl_close(&c);
    check_error_str(s.port, "DELETE /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", 405);
    check_alive(s.port);
    server_stop(&s);
}

TEST(uri_too_long_414) {
    WITH_SERVER(d, s);
    size_t n = 9000;
    char *req = malloc(n + 64);
    CHECK(req != NULL);
    memcpy(req, "GET /", 5);
    memset(req + 5, 'a', n);
    strcpy(req + 5 + n, " HTTP/1.1\r\nHost: t\r\n\r\n");
    check_error(s.port, req, strlen(req), 414);
    free(req);
    server_stop(&s);
}

TEST(headers_too_large_431) {
    WITH_SERVER(d, s);
    /* 20 KiB of headers in 20 fields */
    size_t cap = 24 * 1024;
    char *req = malloc(cap);
    CHECK(req != NULL);
    size_t at = (size_t)sprintf(req, "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 20; i++) {
        at += (size_t)sprintf(req + at, "X-Fill-%02d: ", i);
        memset(req + at, 'v', 1100);
        at += 1100;
        at += (size_t)sprintf(req + at, "\r\n");
    }
    at += (size_t)sprintf(req + at, "\r\n");
    CHECK(at > 20 * 1024 && at < cap);
    check_error(s.port, req, at, 431);
    free(req);
    server_stop(&s);
}

TEST(too_many_header_fields_431) {
    WITH_SERVER(d, s);
    char req[8192];
    size_t at = (size_t)sprintf(req, "GET / HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 100; i++) at += (size_t)sprintf(req + at, "X-%d: %d\r\n", i, i); /* 101 with Host */
    at += (size_t)sprintf(req + at, "\r\n");
    check_error(s.port, req, at, 431);
    /* exactly 100 is fine */
    at = (size_t)sprintf(req, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 99; i++) at += (size_t)sprintf(req + at, "X-%d: %d\r\n", i, i);
    at += (size_t)sprintf(req + at, "\r\n");
    resp r;
    fetch(s.port, req, 0, &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    server_stop(&s);
}

TEST(smuggling_refused) {
    WITH_SERVER(d, s);
    /* Content-Length with Transfer-Encoding */
    check_error_str(s.port,
                    "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "0\r\n\r\n",
                    400);
    check_error_str(s.port,
                    "GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
                    400);
    /* two different Content-Length */
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\n\r\nhello!", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\nhello", 400);
    /* whitespace before the colon */
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nContent-Length : 5\r\n\r\nhello", 400);
    /* Transfer-Encoding in 1.0 */
    check_error_str(s.port, "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400);
    server_stop(&s);
}

TEST(obs_fold_and_bare_cr_400) {
    WITH_SERVER(d, s);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nX-A: one\r\n two\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nX-A: one\r\n\ttwo\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\rHost: t\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nX-A: a\001b\r\n\r\n", 400);
    check_error_str(s.port, "GET  / HTTP/1.1\r\nHost: t\r\n\r\n", 400);
    check_error_str(s.port, "GET / HTTP/1.1\r\nHost: t\r\nNoColon\r\n\r\n", 400);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* keep-alive and pipelining                                                 */
/* ------------------------------------------------------------------------ */

TEST(keepalive_two_requests) {
    WITH_SERVER(d, s);
    client c;
    cl_open(&c, s.port);
    for (int i = 0; i < 2; i++) {
        cl_sends(&c, i ? "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n" : "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        resp r;
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, i ? "AAA" : HELLO_BODY);
        char v[64];
        if (hdr(&r, "Connection", v, sizeof v) && strcasecmp(v, "close") == 0) FAIL("keep-alive refused:\n%s", r.head);
        resp_free(&r);
    }
    CHECK_EQ(wait_closed(&c, 200), 0); /* still open */
    cl_close(&c);
    server_stop(&s);
}

TEST(http10_and_connection_close) {
    WITH_SERVER(d, s);
    client c;
    resp r;
    /* HTTP/1.0 without keep-alive: closed after the response */
    cl_open(&c, s.port);
    cl_sends(&c, "GET /hello.txt HTTP/1.0\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    CHECK_CLOSED(&c);
    resp_free(&r);
    cl_close(&c);
    /* HTTP/1.1 with Connection: close */
    cl_open(&c, s.port);
    cl_sends(&c, "GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    CHECK_HDR(&r, "Connection", "close");
    CHECK_CLOSED(&c);
    resp_free(&r);
    cl_close(&c);
    /* HTTP/1.0 with keep-alive: stays open */
    cl_open(&c, s.port);
    for (int i = 0; i < 2; i++) {
        cl_sends(&c, "GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, "AAA");
        resp_free(&r);
    }
    cl_close(&c);
    server_stop(&s);
}

TEST(pipelining_three) {
    WITH_SERVER(d, s);
    client c;
    cl_open(&c, s.port);
    cl_sends(&c, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n"
                 "HEAD /b.txt HTTP/1.1\r\nHost: t\r\n\r\n"
                 "GET /c.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    resp r;
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    GET_RESPONSE(&c, &r, 1);
    CHECK_STATUS(&r, 200);
    CHECK_HDR(&r, "Content-Length", "4");
    resp_free(&r);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "CCCCC");
    resp_free(&r);
    CHECK_EQ(wait_closed(&c, 200), 0); /* nothing more, still open */
    /* many at once, more than one read's worth */
    char *many = malloc(64 * 1024);
    CHECK(many != NULL);
    size_t at = 0;
    int n = 0;
    while (at < 60 * 1024) {
        at += (size_t)sprintf(many + at, "GET /%c.txt HTTP/1.1\r\nHost: t\r\nX-Seq: %d\r\n\r\n", "abc"[n % 3], n);
        n++;
    }
    cl_send(&c, many, at);
    free(many);
    for (int i = 0; i < n; i++) {
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, i % 3 == 0 ? "AAA" : i % 3 == 1 ? "BBBB" : "CCCCC");
        resp_free(&r);
    }
    cl_close(&c);
    server_stop(&s);
}

TEST(request_body_skipped) {
    WITH_SERVER(d, s);
    client c;
    resp r;
    cl_open(&c, s.port);
    /* body and the next request in one write */
    cl_sends(&c, "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
                 "GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "BBBB");
    resp_free(&r);
    /* a body split across writes, the next request after a pause; the
     * body looks like a request and must not be taken for one */
    const char *b1 = "GET /c", *b2 = ".txt HTTP/1.1\r\nHost: t\r\n\r\n";
    char req[256];
    snprintf(req, sizeof req, "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(b1) + strlen(b2), b1);
    cl_sends(&c, req);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    sleep_ms(50);
    snprintf(req, sizeof req, "%sGET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n", b2);
    cl_sends(&c, req);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "BBBB");
    resp_free(&r);
    /* a body larger than the server's buffer */
    size_t bn = 100000;
    char *big = malloc(bn + 256);
    CHECK(big != NULL);
    size_t at = (size_t)sprintf(big, "GET /a.txt HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", bn);
    memset(big + at, 'z', bn);
    at += bn;
    at += (size_t)sprintf(big + at, "GET /c.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    cl_send(&c, big, at);
    free(big);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "CCCCC");
    resp_free(&r);
    CHECK_EQ(wait_closed(&c, 200), 0);
    cl_close(&c);
    server_stop(&s);
}

/* A redirect is whole however long its Location, and it names the
 * normalised path that was looked up: never another host. */
TEST(redirect_long_and_local) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    /* directories whose path alone is over 1 KiB, and one whose name needs
     * encoding */
    char rel[1200] = "", name[201];
    memset(name, 'd', 200);
    name[200] = 0;
    for (int i = 0; i < 5; i++) {
        if (i) strcat(rel, "/");
        strcat(rel, name);
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", d.root, rel);
        if (mkdir(p, 0755) < 0) FAIL("mkdir %s: %s", p, strerror(errno));
    }
    make_dir(d.root, "a b");
    static char q[851], req[4096], want[2048], loc[4096];
    memset(q, 'q', 850);
    FOR_MODELS("pool:4") {
        server s;
        server_start(&s, d.root, "--model", all_models[m], (const char *)NULL);
        client c;
        resp r;
        cl_open(&c, s.port);
        /* a long query, with a second request pipelined behind it */
        snprintf(req, sizeof req, "GET /sub?%s HTTP/1.1\r\nHost: t\r\n\r\nGET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", q);
        cl_sends(&c, req);
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 301);
        snprintf(want, sizeof want, "/sub/?%s", q);
        if (!hdr(&r, "Location", loc, sizeof loc) || strcmp(loc, want) != 0)
            FAIL("%s: Location of a long query: '%.60s...' (%zu bytes)", all_models[m], loc, strlen(loc));
        if (r.body_len == 0 || !strstr(r.body, "301")) FAIL("%s: the 301's body is missing", all_models[m]);
        resp_free(&r);
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, HELLO_BODY);
        resp_free(&r);
        /* a long path to a directory named without its slash */
        snprintf(req, sizeof req, "GET /%s HTTP/1.1\r\nHost: t\r\n\r\n", rel);
        cl_sends(&c, req);
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 301);
        snprintf(want, sizeof want, "/%s/", rel);
        if (!hdr(&r, "Location", loc, sizeof loc) || strcmp(loc, want) != 0)
            FAIL("%s: Location of a long path: %zu bytes, expected %zu", all_models[m], strlen(loc), strlen(want));
        resp_free(&r);
        /* open redirects: the Location is the path that was served */
        static const char *const sneaky[] = {"//evil.example/../sub", "/\\evil.example/../sub",
                                             "/%2F%2Fevil.example/../sub", "//evil.example/%2e%2e/sub",
                                             "/./sub"};
        for (int i = 0; i < 5; i++) {
            snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", sneaky[i]);
            cl_sends(&c, req);
            GET_RESPONSE(&c, &r, 0);
            CHECK_STATUS(&r, 301);
            if (!hdr(&r, "Location", loc, sizeof loc) || strcmp(loc, "/sub/") != 0)
                FAIL("%s: GET %s: Location '%s', expected /sub/", all_models[m], sneaky[i], loc);
            resp_free(&r);
        }
        cl_sends(&c, "GET /a%20b HTTP/1.1\r\nHost: t\r\n\r\n");
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 301);
        CHECK_HDR(&r, "Location", "/a%20b/");
        resp_free(&r);
        cl_close(&c);
        server_stop(&s);
    }
}
