/*
 * test_httpd: HTTPS itself (issue 29) -- what the TLS-wrapping mode
 * (httpd_tls.*, every other test of this program over TLS) cannot show
 * because its front speaks good TLS: the server's two ports, both TLS
 * versions, resumption, and the clients that misbehave in TLS -- garbage
 * instead of a ClientHello, a handshake that stops half-way, a
 * renegotiation.  Each of those must end in a close, and leave nothing
 * held: the server's descriptor count comes back to what it was (a
 * connection's descriptor is the last thing its thread lets go of, so it
 * coming back says the thread ended too).  The clients here are OpenSSL's
 * own, blocking, with a receive timeout.  The certificate is the tests'
 * self-signed one (support.c), so nothing here verifies it.
 *
 * These run in the plain pass (httpd.*) on every model; the async pass
 * and the TLS pass skip them (they would run the same again).
 */
#include "httpd_test.h"

#if HAVE_TEST_TLS

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

/* The plain pass runs these on every model. */
#define NEED_TLS_TEST()                                                        \
    do {                                                                       \
        NEED_SERVER();                                                         \
        const char *m_ = getenv("WEFT_TEST_HTTPD_MODEL");                      \
        if (m_ && !strcmp(m_, "async")) SKIP("HTTPS's own tests run on every model in the plain pass"); \
        if (test_tls()) SKIP("HTTPS's own tests run in the plain pass");      \
    } while (0)

/* Every model, or only $WEFT_TEST_HTTPD_MODEL's. */
#define FOR_TLS_MODELS()                                                       \
    const char *all_models[4] = {"virtual", "thread", "pool:4", "async"};      \
    int nmodels = 4;                                                           \
    if (getenv("WEFT_TEST_HTTPD_MODEL") && *getenv("WEFT_TEST_HTTPD_MODEL"))   \
        all_models[0] = getenv("WEFT_TEST_HTTPD_MODEL"), nmodels = 1;          \
    for (int m = 0; m < nmodels; m++)

/* weft-httpd on the standard docroot with HTTPS on its own port, model m. */
static void start_https(server *s, const docroot *d, const char *model, const char *extra) {
    const char *cert, *key;
    tls_test_files(&cert, &key);
    server_start(s, d->root, "--model", model, "--tls-cert", cert, "--tls-key", key, "--tls-port", "0",
                 extra ? "--header-timeout" : (const char *)NULL, extra, (const char *)NULL);
    CHECK(s->tls_port > 0 && s->port > 0 && s->tls_port != s->port);
}

static SSL_CTX *client_ctx(int max_version) {
    SSL_CTX *cx = SSL_CTX_new(TLS_client_method());
    CHECK(cx != NULL);
    SSL_CTX_set_verify(cx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_set_min_proto_version(cx, TLS1_2_VERSION);
    if (max_version) SSL_CTX_set_max_proto_version(cx, max_version);
    SSL_CTX_set_session_cache_mode(cx, SSL_SESS_CACHE_CLIENT);
    return cx;
}

/* A TLS connection to port, resuming sess if given; fails the test if the
 * handshake does. */
static SSL *tls_open(SSL_CTX *cx, int port, SSL_SESSION *sess) {
    int fd = tcp_connect(port);
    SSL *s = SSL_new(cx);
    CHECK(s && SSL_set_fd(s, fd) == 1);
    if (sess) CHECK(SSL_set_session(s, sess) == 1);
    if (SSL_connect(s) != 1) {
        char e[256];
        ERR_error_string_n(ERR_get_error(), e, sizeof e);
        FAIL("TLS handshake with port %d: %s", port, e);
    }
    return s;
}

/* Ends s cleanly (close_notify: without it OpenSSL marks the session
 * not resumable) and closes its socket. */
static void tls_free(SSL *s) {
    int fd = SSL_get_fd(s);
    SSL_shutdown(s);
    SSL_free(s);
    close(fd);
}

/* GET path over s; the response into r (one response, read whole). */
static void tls_get(SSL *s, const char *path, resp *r) {
    char req[512];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
    if (SSL_write(s, req, n) != n) FAIL("SSL_write of the request failed");
    size_t cap = 4 << 20, len = 0;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    for (;;) {
        long got = len ? parse_response(buf, len, r, 0, 0) : 0;
        if (got < 0) FAIL("malformed response over TLS: %.200s", buf);
        if (got > 0) break;
        if (len == cap) FAIL("response over 4 MiB");
        int k = SSL_read(s, buf + len, (int)(cap - len));
        if (k <= 0) FAIL("the connection ended before the whole response (%zu bytes)", len);
        len += (size_t)k;
    }
    free(buf);
}

/* The server's descriptor count once it has served one HTTPS request
 * (what it opens on first use -- the file, a carrier's ring -- is there
 * by then): what a connection that ended leaves it at. */
static SSL_CTX *client_ctx(int max_version);
static SSL *tls_open(SSL_CTX *cx, int port, SSL_SESSION *sess);
static void tls_get(SSL *s, const char *path, resp *r);
static void tls_free(SSL *s);
static int fds_at_rest(server *s) {
    SSL_CTX *cx = client_ctx(0);
    SSL *t = tls_open(cx, s->tls_port, NULL);
    resp r;
    tls_get(t, "/hello.txt", &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    tls_free(t);
    SSL_CTX_free(cx);
    int64_t until = now_ms() + 5000 + 2 * SLACK_MS;
    int n = count_fds(s->pid), was;
    do { /* until the count holds still for 100 ms (the connection's close) */
        was = n;
        sleep_ms(100);
        n = count_fds(s->pid);
    } while (n != was && now_ms() < until);
    return n;
}

/* Waits until s's descriptor count is back at base; fails after the bound. */
static void fds_back_to(server *s, int base, const char *what) {
    int64_t until = now_ms() + 5000 + 2 * SLACK_MS;
    int n;
    while ((n = count_fds(s->pid)) > base) {
        if (now_ms() > until) FAIL("%s: the server holds %d descriptors, %d before", what, n, base);
        sleep_ms(20);
    }
}

/* Reads from fd until the server ends the connection (0 or a reset);
 * fails if it does not within the client's receive timeout.  Bytes before
 * the end may only be TLS records (an alert: content type 21). */
static void expect_closed(int fd, const char *what) {
    unsigned char b[4096];
    size_t total = 0;
    for (;;) {
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k == 0 || (k < 0 && errno == ECONNRESET)) return;
        if (k < 0) FAIL("%s: the server did not close the connection (%s)", what, strerror(errno));
        if (!total && b[0] != 21 && b[0] != 22) FAIL("%s: the server sent a byte 0x%02x, not a TLS record", what, b[0]);
        total += (size_t)k;
    }
}

TEST(https_beside_http_on_both_tls_versions) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    char *big = pattern_file(&d, "big.bin", 3 << 20); /* past the cache: pread and SSL_write */
    FOR_TLS_MODELS() {
        server s;
        start_https(&s, &d, all_models[m], NULL);
        int versions[2] = {TLS1_3_VERSION, TLS1_2_VERSION};
        for (int v = 0; v < 2; v++) {
            SSL_CTX *cx = client_ctx(versions[v]);
            SSL *t = tls_open(cx, s.tls_port, NULL);
            if (SSL_version(t) != versions[v]) FAIL("%s: asked for 0x%x, got 0x%x", all_models[m], versions[v], SSL_version(t));
            resp r;
            tls_get(t, "/hello.txt", &r);
            CHECK_STATUS(&r, 200);
            CHECK_BODY_STR(&r, HELLO_BODY);
            resp_free(&r);
            tls_get(t, "/big.bin", &r); /* the same connection: keep-alive */
            CHECK_STATUS(&r, 200);
            CHECK_BODY(&r, big, (size_t)3 << 20);
            resp_free(&r);
            tls_free(t);
            SSL_CTX_free(cx);
        }
        check_alive(s.port); /* the plain port, beside */
        server_stop(&s);
    }
    free(big);
}

/* A client that pipelines many requests in one write gets every response,
 * in order, on every model (--model async hands a TLS call that completed
 * at once on at once, but only a few in a row: 300 requests answered
 * without a wait must not nest 300 handler chains). */
TEST(https_pipelined_requests_all_answered) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    enum { N = 300 };
    const char *req = "GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
    size_t rl = strlen(req), cap = 1 << 20;
    char *reqs = malloc(N * rl), *buf = malloc(cap);
    CHECK(reqs && buf);
    for (int i = 0; i < N; i++) memcpy(reqs + (size_t)i * rl, req, rl);
    FOR_TLS_MODELS() {
        server s;
        start_https(&s, &d, all_models[m], NULL);
        SSL_CTX *cx = client_ctx(0);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        if (SSL_write(t, reqs, (int)(N * rl)) != (int)(N * rl)) FAIL("%s: SSL_write of the requests failed", all_models[m]);
        size_t len = 0, at = 0;
        for (int got = 0; got < N;) {
            resp r;
            long k = len > at ? parse_response(buf + at, len - at, &r, 0, 0) : 0;
            if (k < 0) FAIL("%s: malformed response %d: %.200s", all_models[m], got, buf + at);
            if (k > 0) {
                CHECK_STATUS(&r, 200);
                CHECK_BODY_STR(&r, HELLO_BODY);
                resp_free(&r);
                at += (size_t)k;
                got++;
                continue;
            }
            if (len == cap) FAIL("%s: responses past 1 MiB", all_models[m]);
            int n = SSL_read(t, buf + len, (int)(cap - len));
            if (n <= 0) FAIL("%s: the connection ended after %d of %d responses", all_models[m], got, N);
            len += (size_t)n;
        }
        if (at != len) FAIL("%s: %zu bytes after the last response", all_models[m], len - at);
        tls_free(t);
        SSL_CTX_free(cx);
        check_alive(s.port);
        server_stop(&s);
    }
    free(reqs);
    free(buf);
}

static int run_tls_cli(char *err, size_t errsz, ...) {
    char out[4096];
    va_list ap;
    va_start(ap, errsz);
    int st = run_httpd_v(out, sizeof out, err, errsz, 0, ap);
    va_end(ap);
    return st;
}

/* A certificate or key that cannot be used is one clear line and exit 1
 * at start (2 for options that do not go together); nothing starts. */
TEST(https_bad_certificate_or_key_is_a_clear_error) {
    NEED_TLS_TEST();
    const char *cert, *key;
    tls_test_files(&cert, &key);
    docroot d;
    make_root(&d);
    char junk[160], other[160];
    snprintf(junk, sizeof junk, "%s/junk.pem", d.base);
    write_str(d.base, "junk.pem", "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n");
    snprintf(other, sizeof other, "%s/other-key.pem", d.base);
    EVP_PKEY *pk = EVP_EC_gen("P-256");
    FILE *f = fopen(other, "w");
    CHECK(pk && f && PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) == 1);
    fclose(f);
    EVP_PKEY_free(pk);
    struct {
        const char *cert, *key, *want;
        int status;
    } cases[] = {
        {"/nonexistent/cert.pem", key, "--tls-cert /nonexistent/cert.pem: No such file", 1},
        {cert, "/nonexistent/key.pem", "--tls-key /nonexistent/key.pem: No such file", 1},
        {junk, key, "not a certificate", 1},
        {cert, junk, "not a private key", 1},
        {cert, cert, "not a private key", 1}, /* a certificate where the key goes */
        {cert, other, "does not match the certificate", 1},
        {cert, NULL, "go together", 1},
    };
    char err[8192];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = cases[i].key ? run_tls_cli(err, sizeof err, "--port", "0", "--root", d.root, "--tls-cert", cases[i].cert,
                                            "--tls-key", cases[i].key, (const char *)NULL)
                              : run_tls_cli(err, sizeof err, "--port", "0", "--root", d.root, "--tls-cert", cases[i].cert,
                                            (const char *)NULL);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != cases[i].status || !strstr(err, cases[i].want))
            FAIL("case %zu: status 0x%x (want exit %d), stderr (want '%s'): %s", i, st, cases[i].status, cases[i].want, err);
        if (strstr(err, "listening on")) FAIL("case %zu: it started anyway", i);
    }
    int st = run_tls_cli(err, sizeof err, "--port", "0", "--root", d.root, "--tls-port", "0", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || !strstr(err, "--tls-port"))
        FAIL("--tls-port alone: status 0x%x, stderr: %s", st, err);
}

/* A returning client resumes: TLS 1.3 by the ticket, TLS 1.2 by the
 * session cache. */
TEST(https_returning_clients_resume) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    server s;
    start_https(&s, &d, "virtual", NULL);
    int versions[2] = {TLS1_3_VERSION, TLS1_2_VERSION};
    for (int v = 0; v < 2; v++) {
        SSL_CTX *cx = client_ctx(versions[v]);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        resp r;
        tls_get(t, "/hello.txt", &r); /* (TLS 1.3's ticket comes after the handshake: read by now) */
        resp_free(&r);
        SSL_SESSION *sess = SSL_get1_session(t);
        CHECK(sess != NULL);
        if (SSL_session_reused(t)) FAIL("the first connection says it resumed");
        tls_free(t);
        t = tls_open(cx, s.tls_port, sess);
        if (!SSL_session_reused(t)) FAIL("TLS 0x%x: the second connection did not resume", versions[v]);
        tls_get(t, "/hello.txt", &r);
        CHECK_STATUS(&r, 200);
        resp_free(&r);
        tls_free(t);
        SSL_SESSION_free(sess);
        SSL_CTX_free(cx);
    }
    server_stop(&s);
}

/* With --workers, a returning client resumes with whichever worker its
 * connection reaches (SO_REUSEPORT picks by the connection's addresses):
 * the workers share the supervisor's ticket key.  All 16 returning
 * connections must resume; with a key per worker, two in three would
 * reach a worker that cannot open the ticket. */
TEST(https_workers_share_the_ticket_key) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    const char *cert, *key;
    tls_test_files(&cert, &key);
    server s;
    server_start(&s, d.root, "--workers", "3", "--tls-cert", cert, "--tls-key", key, "--tls-port", "0",
                 (const char *)NULL);
    CHECK(s.tls_port > 0);
    int versions[2] = {TLS1_3_VERSION, TLS1_2_VERSION};
    for (int v = 0; v < 2; v++) {
        SSL_CTX *cx = client_ctx(versions[v]);
        /* (no client cache: OpenSSL's would mark a TLS 1.3 session it
         * resumed with as used up, and the tests hand sessions on here) */
        SSL_CTX_set_session_cache_mode(cx, SSL_SESS_CACHE_OFF);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        resp r;
        tls_get(t, "/hello.txt", &r);
        resp_free(&r);
        SSL_SESSION *sess = SSL_get1_session(t);
        CHECK(sess != NULL);
        tls_free(t);
        for (int i = 0; i < 16; i++) {
            t = tls_open(cx, s.tls_port, sess);
            if (!SSL_session_reused(t)) FAIL("TLS 0x%x: returning connection %d did not resume", versions[v], i);
            tls_get(t, "/hello.txt", &r);
            CHECK_STATUS(&r, 200);
            resp_free(&r);
            /* the next one offers this one's session (OpenSSL's client
             * uses a TLS 1.3 session once: the new ticket came with it) */
            SSL_SESSION_free(sess);
            sess = SSL_get1_session(t);
            CHECK(sess != NULL);
            tls_free(t);
        }
        SSL_SESSION_free(sess);
        SSL_CTX_free(cx);
    }
    server_stop(&s);
}

/* Garbage instead of a ClientHello (a plain HTTP request on the HTTPS
 * port): closed, nothing held. */
TEST(https_garbage_instead_of_client_hello_closes) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    FOR_TLS_MODELS() {
        server s;
        start_https(&s, &d, all_models[m], NULL);
        int base = fds_at_rest(&s);
        static const struct {
            const char *b;
            size_t n;
        } junk[] = {{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27},
                    {"\x16\x03\x01\x00\x05hello", 10}, /* a handshake record whose body is no ClientHello */
                    {"\x16\x03\x01\xff\xff", 5}};      /* a record longer than TLS allows */
        for (int j = 0; j < 3; j++) {
            int fd = tcp_connect(s.tls_port);
            if (send(fd, junk[j].b, junk[j].n, MSG_NOSIGNAL) < 0) FAIL("send: %s", strerror(errno));
            expect_closed(fd, all_models[m]);
            close(fd);
        }
        fds_back_to(&s, base, all_models[m]);
        /* and it still serves */
        SSL_CTX *cx = client_ctx(0);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        resp r;
        tls_get(t, "/hello.txt", &r);
        CHECK_STATUS(&r, 200);
        resp_free(&r);
        tls_free(t);
        SSL_CTX_free(cx);
        server_stop(&s);
    }
}

/* The slowloris of TLS: a handshake that stops half-way (a record
 * header, no more), and a connection that sends nothing, are cut at the
 * header timeout (1 s here); nothing held after. */
TEST(https_stalled_handshake_cut_at_header_timeout) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    FOR_TLS_MODELS() {
        server s;
        start_https(&s, &d, all_models[m], "1");
        int base = fds_at_rest(&s);
        int fd[2];
        int64_t t0 = now_ms();
        fd[0] = tcp_connect(s.tls_port);
        fd[1] = tcp_connect(s.tls_port);
        if (send(fd[0], "\x16\x03\x01\x02\x00\x01", 6, MSG_NOSIGNAL) != 6) FAIL("send: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            expect_closed(fd[i], all_models[m]);
            close(fd[i]);
        }
        int64_t took = now_ms() - t0;
        if (took > 3000 + 2 * SLACK_MS) FAIL("%s: stalled handshakes cut after %lld ms (header timeout 1 s)", all_models[m], (long long)took);
        fds_back_to(&s, base, all_models[m]);
        server_stop(&s);
    }
}

/* A TLS 1.2 client that asks to renegotiate is refused, and the
 * connection ends; nothing held. */
TEST(https_renegotiation_refused_and_closed) {
    NEED_TLS_TEST();
    docroot d;
    make_root(&d);
    FOR_TLS_MODELS() {
        server s;
        start_https(&s, &d, all_models[m], NULL);
        int base = fds_at_rest(&s);
        SSL_CTX *cx = client_ctx(TLS1_2_VERSION);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        resp r;
        tls_get(t, "/hello.txt", &r);
        CHECK_STATUS(&r, 200);
        resp_free(&r);
        CHECK(SSL_renegotiate(t) == 1);
        int hr = SSL_do_handshake(t);
        /* the server's no_renegotiation alert ends it at OpenSSL's client;
         * whatever this side makes of it, the connection must end */
        char b[256];
        int k = hr == 1 ? SSL_read(t, b, sizeof b) : 0;
        if (hr == 1 && k > 0) FAIL("%s: the renegotiation went through (and %d bytes came)", all_models[m], k);
        ERR_clear_error();
        int fd = SSL_get_fd(t);
        expect_closed(fd, all_models[m]);
        SSL_free(t);
        close(fd);
        SSL_CTX_free(cx);
        fds_back_to(&s, base, all_models[m]);
        server_stop(&s);
    }
}

/* The private key is not in what the server shows of itself: a thread
 * dump (SIGQUIT, text and JSON) taken with TLS connections open names
 * them, and holds no line of the key's PEM. */
TEST(https_key_not_in_the_dump) {
    NEED_TLS_TEST();
    const char *cert, *key;
    tls_test_files(&cert, &key);
    char pem[4096];
    FILE *f = fopen(key, "r");
    CHECK(f != NULL);
    size_t pn = fread(pem, 1, sizeof pem - 1, f);
    fclose(f);
    pem[pn] = 0;
    /* the key's base64 lines (not the BEGIN/END ones) */
    char *lines[16];
    int nl = 0;
    for (char *p = strtok(pem, "\n"); p && nl < 16; p = strtok(NULL, "\n"))
        if (strncmp(p, "-----", 5) != 0 && strlen(p) >= 16) lines[nl++] = p;
    CHECK(nl > 0);
    const char *formats[2] = {"WEFT_DUMP_ON_SIGQUIT=text", "WEFT_DUMP_ON_SIGQUIT=json"};
    for (int fmt = 0; fmt < 2; fmt++) {
        docroot d;
        make_root(&d);
        char ef[] = "/tmp/weft-httpd-err-XXXXXX";
        int errfd = mkstemp(ef);
        CHECK(errfd >= 0);
        unlink(ef);
        child_stderr = errfd;
        child_env[0] = formats[fmt];
        server s;
        start_https(&s, &d, "virtual", NULL);
        child_stderr = -1;
        child_env[0] = NULL;
        SSL_CTX *cx = client_ctx(0);
        SSL *t = tls_open(cx, s.tls_port, NULL);
        resp r;
        tls_get(t, "/hello.txt", &r);
        resp_free(&r);
        CHECK(kill(s.pid, SIGQUIT) == 0);
        char *text = malloc(1 << 20);
        CHECK(text != NULL);
        text[0] = 0; /* (looked at before the first read) */
        size_t len = 0;
        int64_t until = now_ms() + 10000 + 2 * SLACK_MS;
        /* the connection's vthread is in the dump: it was taken */
        while (!strstr(text, "conn 127.0.0.1") && now_ms() < until) {
            sleep_ms(50);
            ssize_t k = pread(errfd, text, (1 << 20) - 1, 0);
            len = k > 0 ? (size_t)k : 0;
            text[len] = 0;
        }
        if (!strstr(text, "conn 127.0.0.1")) FAIL("no dump naming the connection on stderr: %.500s", text);
        for (int i = 0; i < nl; i++)
            if (strstr(text, lines[i])) FAIL("the dump holds a line of the private key: %s", lines[i]);
        free(text);
        tls_free(t);
        SSL_CTX_free(cx);
        server_stop(&s);
        close(errfd);
    }
}

#else /* built without OpenSSL 3: the same tests, skipped */

#define NO_TLS(name)                                                           \
    TEST(name) { SKIP("built without OpenSSL 3: no HTTPS"); }
NO_TLS(https_beside_http_on_both_tls_versions)
NO_TLS(https_bad_certificate_or_key_is_a_clear_error)
NO_TLS(https_returning_clients_resume)
NO_TLS(https_garbage_instead_of_client_hello_closes)
NO_TLS(https_stalled_handshake_cut_at_header_timeout)
NO_TLS(https_renegotiation_refused_and_closed)
NO_TLS(https_key_not_in_the_dump)

#endif
