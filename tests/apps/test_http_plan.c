/* weft-httpd's response planning (apps/httpd/plan.c) on its own: no
 * server, no sockets -- a request parsed from text, planned against a
 * docroot made here, and the planned head, body and close decision looked
 * at.  Each case runs with the file cache off (files opened and read) and
 * on (bodies from memory), the two ways a plan gets its body. */
#include "harness.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "httpd_int.h"

/* ---- helpers ---------------------------------------------------------- */

#define BIG (SMALL_BODY * 2 + 123) /* above SMALL_BODY, under the cache's file limit */

static char docroot[64];

/* A docroot with hello.txt ("hello world"), big.bin (BIG bytes), empty.txt
 * and a directory sub/ holding index.html; root_fd and the cache (cache_bytes:
 * 0 is off) set up on it. */
static void setup(size_t cache_bytes) {
    snprintf(docroot, sizeof docroot, "/tmp/weft-plan-XXXXXX");
    CHECK(mkdtemp(docroot) != NULL);
    int dfd = open(docroot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    int fd = openat(dfd, "hello.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "hello world", 11) == 11);
    close(fd);
    fd = openat(dfd, "big.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    char *b = malloc(BIG);
    CHECK(b != NULL);
    for (int i = 0; i < BIG; i++) b[i] = (char)('a' + i % 26);
    CHECK(write(fd, b, BIG) == BIG);
    free(b);
    close(fd);
    fd = openat(dfd, "empty.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    close(fd);
    CHECK(mkdirat(dfd, "sub", 0755) == 0);
    fd = openat(dfd, "sub/index.html", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, "<p>x</p>", 8) == 8);
    close(fd);
    close(dfd);
    root_fd = open(docroot, O_PATH | O_DIRECTORY | O_CLOEXEC);
    CHECK(root_fd >= 0);
    CHECK_EQ(fc_init(root_fd, cache_bytes, 1000000000LL), 0);
}

/* One planned request: its text (kept: the request points into it), the
 * parse, the plan and the decisions. */
typedef struct plan_case {
    char text[2048];
    http_request rq;
    response p;
    int r, keep, refused;
} plan_case;

/* Parses req (whole) and plans it as the connection would: keep from the
 * request, then plan_request.  The result is in pc (response_free it). */
static void plan(plan_case *pc, const char *req) {
    memset(pc, 0, sizeof *pc);
    snprintf(pc->text, sizeof pc->text, "%s", req);
    http_parser ps;
    http_parser_init(&ps);
    int hl = http_parse_request(&ps, pc->text, strlen(pc->text), &pc->rq);
    if (hl <= 0) fprintf(stderr, "parse of %s: %d\n", req, hl);
    CHECK(hl > 0);
    pc->keep = pc->rq.keep_alive && !(pc->rq.chunked || pc->rq.content_length > MAX_BODY);
    response_init(&pc->p);
    pc->r = plan_request(&pc->p, &pc->rq, &pc->keep, &pc->refused);
}

/* The planned head (and a small body after it), as a string. */
static char *head_of(const plan_case *pc) {
    char *s = malloc(pc->p.head_len + 1);
    CHECK(s != NULL);
    memcpy(s, pc->p.head, pc->p.head_len);
    s[pc->p.head_len] = 0;
    return s;
}

static void has(const char *head, const char *want) {
    if (!strstr(head, want)) fprintf(stderr, "no \"%s\" in:\n%s\n", want, head);
    CHECK(strstr(head, want) != NULL);
}

static void hasnt(const char *head, const char *unwanted) {
    if (strstr(head, unwanted)) fprintf(stderr, "\"%s\" in:\n%s\n", unwanted, head);
    CHECK(strstr(head, unwanted) == NULL);
}

/* The planned head's status line is "HTTP/1.1 <code> ...", and code is logged. */
static void status_is(const plan_case *pc, int code) {
    char want[32];
    snprintf(want, sizeof want, "HTTP/1.1 %d ", code);
    char *h = head_of(pc);
    if (strncmp(h, want, strlen(want))) fprintf(stderr, "want %d, planned:\n%s\n", code, h);
    CHECK(strncmp(h, want, strlen(want)) == 0);
    CHECK_EQ(pc->p.code, code);
    free(h);
}

/* The text after the head's blank line (a small body sent with it). */
static const char *body_after_head(const char *head) {
    const char *e = strstr(head, "\r\n\r\n");
    CHECK(e != NULL);
    return e + 4;
}

/* ---- the cases, run with the cache off and on --------------------------- */

static void ok_200_keep_alive(void) {
    plan_case pc;
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    CHECK_EQ(pc.refused, 0);
    status_is(&pc, 200);
    char *h = head_of(&pc);
    has(h, "\r\nServer: weft-httpd\r\nDate: ");
    has(h, "\r\nConnection: keep-alive\r\n");
    has(h, "\r\nContent-Type: text/plain");
    has(h, "\r\nContent-Length: 11\r\n");
    has(h, "\r\nLast-Modified: ");
    has(h, "\r\nETag: \"");
    has(h, "\r\nAccept-Ranges: bytes\r\n");
    hasnt(h, "Content-Range");
    CHECK(strcmp(body_after_head(h), "hello world") == 0); /* small: one send */
    CHECK_EQ(pc.p.log_bytes, 11);
    CHECK_EQ(pc.p.mem_len, 0);
    CHECK_EQ(pc.p.file_len, 0);
    free(h);
    response_free(&pc.p);
}

static void head_has_no_body(void) {
    plan_case pc;
    plan(&pc, "HEAD /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    status_is(&pc, 200);
    char *h = head_of(&pc);
    has(h, "\r\nContent-Length: 11\r\n"); /* what a GET would send */
    CHECK(strcmp(body_after_head(h), "") == 0);
    CHECK_EQ(pc.p.log_bytes, 0);
    CHECK_EQ(pc.p.mem_len + pc.p.file_len, 0);
    free(h);
    response_free(&pc.p);
    /* an error's HTML body is left out for HEAD too */
    plan(&pc, "HEAD /nope.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    status_is(&pc, 404);
    h = head_of(&pc);
    has(h, "\r\nContent-Type: text/html\r\n");
    CHECK(strcmp(body_after_head(h), "") == 0);
    free(h);
    response_free(&pc.p);
}

/* The ETag a plain GET of path gets, into etag (quotes included). */
static void etag_of(const char *path, char *etag, size_t cap) {
    char req[256];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    plan_case pc;
    plan(&pc, req);
    char *h = head_of(&pc);
    const char *e = strstr(h, "\r\nETag: ");
    CHECK(e != NULL);
    e += 8;
    size_t n = strcspn(e, "\r");
    CHECK(n < cap);
    memcpy(etag, e, n);
    etag[n] = 0;
    free(h);
    response_free(&pc.p);
}

static void conditional_304_412(void) {
    char etag[64], req[512];
    etag_of("/hello.txt", etag, sizeof etag);
    plan_case pc;
    snprintf(req, sizeof req, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: %s\r\n\r\n", etag);
    plan(&pc, req);
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    status_is(&pc, 304);
    char *h = head_of(&pc);
    has(h, "\r\nETag: ");
    has(h, "\r\nLast-Modified: ");
    hasnt(h, "Content-Length");
    CHECK(strcmp(body_after_head(h), "") == 0);
    free(h);
    response_free(&pc.p);
    /* another ETag: the file is sent */
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"other\"\r\n\r\n");
    status_is(&pc, 200);
    response_free(&pc.p);
    /* If-Match that does not match: 412 with its HTML body, kept alive */
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nIf-Match: \"other\"\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    CHECK_EQ(pc.refused, 0);
    status_is(&pc, 412);
    h = head_of(&pc);
    has(body_after_head(h), "<h1>412 ");
    free(h);
    response_free(&pc.p);
    snprintf(req, sizeof req, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nIf-Match: %s\r\n\r\n", etag);
    plan(&pc, req);
    status_is(&pc, 200);
    response_free(&pc.p);
}

static void ranges_206_416(void) {
    plan_case pc;
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    status_is(&pc, 206);
    char *h = head_of(&pc);
    has(h, "\r\nContent-Length: 5\r\n");
    has(h, "\r\nContent-Range: bytes 0-4/11\r\n");
    CHECK(strcmp(body_after_head(h), "hello") == 0);
    CHECK_EQ(pc.p.log_bytes, 5);
    free(h);
    response_free(&pc.p);
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=-5\r\n\r\n");
    status_is(&pc, 206);
    h = head_of(&pc);
    has(h, "\r\nContent-Range: bytes 6-10/11\r\n");
    CHECK(strcmp(body_after_head(h), "world") == 0);
    free(h);
    response_free(&pc.p);
    /* unsatisfiable: 416 with the size, no body, kept alive */
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=20-30\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    status_is(&pc, 416);
    h = head_of(&pc);
    has(h, "\r\nContent-Range: bytes */11\r\nContent-Length: 0\r\n\r\n");
    CHECK(strcmp(body_after_head(h), "") == 0);
    free(h);
    response_free(&pc.p);
    /* If-Range with another validator: the whole file */
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=0-4\r\nIf-Range: \"other\"\r\n\r\n");
    status_is(&pc, 200);
    h = head_of(&pc);
    has(h, "\r\nContent-Length: 11\r\n");
    hasnt(h, "Content-Range");
    free(h);
    response_free(&pc.p);
    /* a range of a large body: from memory or by sendfile, from its offset */
    plan(&pc, "GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=100-\r\n\r\n");
    status_is(&pc, 206);
    CHECK_EQ(pc.p.log_bytes, BIG - 100);
    if (pc.p.mem_len) {
        CHECK_EQ(pc.p.mem_len, BIG - 100);
        CHECK_EQ(pc.p.mem[0], 'a' + 100 % 26);
    } else {
        CHECK(pc.p.fd >= 0);
        CHECK_EQ(pc.p.off, 100);
        CHECK_EQ(pc.p.file_len, BIG - 100);
    }
    response_free(&pc.p);
}

static void large_and_empty_bodies(void) {
    plan_case pc;
    plan(&pc, "GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    status_is(&pc, 200);
    char *h = head_of(&pc);
    char want[64];
    snprintf(want, sizeof want, "\r\nContent-Length: %d\r\n", BIG);
    has(h, want);
    CHECK(strcmp(body_after_head(h), "") == 0); /* the body goes apart */
    CHECK_EQ(pc.p.mem_len + pc.p.file_len, BIG);
    CHECK_EQ(pc.p.log_bytes, BIG);
    free(h);
    response_free(&pc.p);
    CHECK_EQ(pc.p.fd, -1);
    CHECK(pc.p.e == NULL);
    plan(&pc, "GET /empty.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    status_is(&pc, 200);
    h = head_of(&pc);
    has(h, "\r\nContent-Length: 0\r\n");
    CHECK(strcmp(body_after_head(h), "") == 0);
    CHECK_EQ(pc.p.log_bytes, 0);
    free(h);
    response_free(&pc.p);
}

static void redirect_301(void) {
    plan_case pc;
    plan(&pc, "GET /sub HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    status_is(&pc, 301);
    char *h = head_of(&pc);
    has(h, "\r\nLocation: /sub/\r\n");
    has(body_after_head(h), "<h1>301 ");
    free(h);
    response_free(&pc.p);
    /* the query comes along, the fragment does not */
    plan(&pc, "GET /sub?a=1 HTTP/1.1\r\nHost: x\r\n\r\n");
    status_is(&pc, 301);
    h = head_of(&pc);
    has(h, "\r\nLocation: /sub/?a=1\r\n");
    free(h);
    response_free(&pc.p);
    plan(&pc, "GET /sub/ HTTP/1.1\r\nHost: x\r\n\r\n");
    status_is(&pc, 200);
    h = head_of(&pc);
    CHECK(strcmp(body_after_head(h), "<p>x</p>") == 0);
    free(h);
    response_free(&pc.p);
}

/* Refusals: answered with "Connection: close", keep and refused say so. */
static void refused(const char *req, int code) {
    plan_case pc;
    plan(&pc, req);
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 0);
    CHECK_EQ(pc.refused, 1);
    status_is(&pc, code);
    char *h = head_of(&pc);
    has(h, "\r\nConnection: close\r\n");
    has(h, "\r\nContent-Type: text/html\r\n");
    if (code == 405) has(h, "\r\nAllow: GET, HEAD\r\n");
    else hasnt(h, "Allow:");
    char line[64];
    snprintf(line, sizeof line, "<title>%d ", code);
    has(body_after_head(h), line);
    free(h);
    response_free(&pc.p);
}

static void refusals_405_413_400(void) {
    refused("POST /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n", 405);
    refused("DELETE /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n", 405);
    refused("POST /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413);
    refused("GET /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413);
    refused("GET /a%00b HTTP/1.1\r\nHost: x\r\n\r\n", 400);
}

static void keep_alive_or_close(void) {
    plan_case pc;
    /* HTTP/1.0 without keep-alive, and Connection: close: planned to close */
    plan(&pc, "GET /hello.txt HTTP/1.0\r\n\r\n");
    CHECK_EQ(pc.keep, 0);
    CHECK_EQ(pc.refused, 0);
    status_is(&pc, 200);
    char *h = head_of(&pc);
    has(h, "\r\nConnection: close\r\n");
    free(h);
    response_free(&pc.p);
    plan(&pc, "GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK_EQ(pc.keep, 0);
    status_is(&pc, 200);
    h = head_of(&pc);
    has(h, "\r\nConnection: close\r\n");
    free(h);
    response_free(&pc.p);
    plan(&pc, "GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    CHECK_EQ(pc.keep, 1);
    h = head_of(&pc);
    has(h, "\r\nConnection: keep-alive\r\n");
    free(h);
    response_free(&pc.p);
    /* a 404 keeps the connection, as asked */
    plan(&pc, "GET /nope.txt HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK_EQ(pc.r, 0);
    CHECK_EQ(pc.keep, 1);
    CHECK_EQ(pc.refused, 0);
    status_is(&pc, 404);
    h = head_of(&pc);
    has(h, "\r\nConnection: keep-alive\r\n");
    free(h);
    response_free(&pc.p);
}

/* plan_status alone: the error page, 503's Retry-After, a long Location
 * (its head malloc'd), and a status without a body (304). */
static void status_pages(void) {
    response p;
    response_init(&p);
    CHECK_EQ(plan_status(&p, NULL, 503, 0, NULL), 0);
    char *h = strndup(p.head, p.head_len);
    CHECK(strncmp(h, "HTTP/1.1 503 ", 13) == 0);
    has(h, "\r\nRetry-After: 1\r\n");
    has(h, "\r\nConnection: close\r\n");
    has(body_after_head(h), "<center><h1>503 ");
    CHECK_EQ(p.log_bytes, (long long)strlen(body_after_head(h)));
    free(h);
    response_free(&p);
    char loc[2000];
    memset(loc, 'x', sizeof loc - 1);
    loc[0] = '/';
    loc[sizeof loc - 1] = 0;
    response_init(&p);
    CHECK_EQ(plan_status(&p, NULL, 301, 1, loc), 0);
    CHECK(p.head != p.buf);
    h = strndup(p.head, p.head_len);
    has(h, "\r\nConnection: keep-alive\r\n");
    has(h, loc);
    free(h);
    response_free(&p);
    CHECK(p.head == p.buf);
}

/* The cache and the docroot, gone. */
static void teardown(void) {
    fc_fini();
    close(root_fd);
    root_fd = -1;
    int dfd = open(docroot, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dfd >= 0);
    CHECK_EQ(unlinkat(dfd, "hello.txt", 0), 0);
    CHECK_EQ(unlinkat(dfd, "big.bin", 0), 0);
    CHECK_EQ(unlinkat(dfd, "empty.txt", 0), 0);
    CHECK_EQ(unlinkat(dfd, "sub/index.html", 0), 0);
    CHECK_EQ(unlinkat(dfd, "sub", AT_REMOVEDIR), 0);
    close(dfd);
    CHECK_EQ(rmdir(docroot), 0);
}

static void run_both(void (*fn)(void)) {
    setup(0);
    fn();
    teardown();
    setup(1 << 20);
    fn();
    teardown();
}

TEST(ok_200_keep_alive) { run_both(ok_200_keep_alive); }
TEST(head_has_no_body) { run_both(head_has_no_body); }
TEST(conditional_304_412) { run_both(conditional_304_412); }
TEST(ranges_206_416) { run_both(ranges_206_416); }
TEST(large_and_empty_bodies) { run_both(large_and_empty_bodies); }
TEST(redirect_301) { run_both(redirect_301); }
TEST(refusals_405_413_400) { run_both(refusals_405_413_400); }
TEST(keep_alive_or_close) { run_both(keep_alive_or_close); }
TEST(status_pages) { run_both(status_pages); }
