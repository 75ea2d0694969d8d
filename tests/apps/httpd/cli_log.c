/*
 * test_httpd: the command line (--help, bad options and their words) and
 * the access log (its lines, a pipe nobody reads, escaped request lines).
 */
#include "httpd_test.h"

/* ------------------------------------------------------------------------ */
/* command line, access log                                                  */
/* ------------------------------------------------------------------------ */

static int cli_as_nobody; /* run_cli as uid and gid 65534 (we are root) */
static int run_cli(char *out, size_t outsz, char *err, size_t errsz, ...) {
    va_list ap;
    va_start(ap, errsz);
    int st = run_httpd_v(out, outsz, err, errsz, cli_as_nobody, ap);
    va_end(ap);
    return st;
}

TEST(cli_help_and_bad_options) {
    NEED_SERVER();
    char out[8192], err[8192];
    int st = run_cli(out, sizeof out, err, sizeof err, "--help", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) FAIL("--help: status 0x%x, stderr: %s", st, err);
    if (!strstr(out, "usage") || !strstr(out, "--port") || !strstr(out, "--root")) FAIL("--help printed: %s", out);

    st = run_cli(out, sizeof out, err, sizeof err, "--no-such-option", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) FAIL("--no-such-option: status 0x%x", st);
    if (!err[0]) FAIL("--no-such-option: nothing on stderr");

    st = run_cli(out, sizeof out, err, sizeof err, "--port", "99999", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) FAIL("--port 99999: status 0x%x, stderr: %s", st, err);
    if (!strstr(err, "port")) FAIL("--port 99999: stderr says: %s", err);

    st = run_cli(out, sizeof out, err, sizeof err, "--model", "nonsense", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) FAIL("--model nonsense: status 0x%x", st);
    if (!err[0]) FAIL("--model nonsense: nothing on stderr");

    st = run_cli(out, sizeof out, err, sizeof err, "--workers", "0", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2 || !strstr(err, "--workers")) FAIL("--workers 0: status 0x%x, stderr: %s", st, err);
    st = run_cli(out, sizeof out, err, sizeof err, "--workers", "257", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) FAIL("--workers 257: status 0x%x, stderr: %s", st, err);

    st = run_cli(out, sizeof out, err, sizeof err, "--port", "0", "extra-argument", (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 2) FAIL("a stray argument: status 0x%x", st);

    const char *missing = "/nonexistent/weft-httpd-test-root";
    st = run_cli(out, sizeof out, err, sizeof err, "--port", "0", "--root", missing, (const char *)NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) == 0) FAIL("--root %s: status 0x%x", missing, st);
    if (!strstr(err, missing)) FAIL("--root %s: stderr does not name it: %s", missing, err);
}

/* A docroot the server cannot read: it says so at start and exits 1, where
 * it said "listening" and answered 403 to everything (issue 25). */
TEST(cli_unreadable_root_refused_at_start) {
    NEED_SERVER();
    char dir[] = "/tmp/weft-httpd-noread-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(chmod(dir, 0) == 0);
    cli_as_nobody = geteuid() == 0; /* root reads it anyway: become nobody */
    char out[4096], err[4096];
    int st = run_cli(out, sizeof out, err, sizeof err, "--port", "0", "--root", dir, (const char *)NULL);
    cli_as_nobody = 0;
    rmdir(dir);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) FAIL("--root %s (mode 000): status 0x%x, stderr: %s", dir, st, err);
    if (!strstr(err, dir) || !strstr(err, "Permission denied") || !strstr(err, "read and search"))
        FAIL("--root %s (mode 000): stderr says: %s", dir, err);
    if (strstr(out, "listening")) FAIL("it still said listening: %s", out);
}

/* --workers: a worker that cannot start (here the runtime refuses a bad
 * WEFT_IO in its environment) fails the whole start -- exit 1, the worker's
 * own reason and the supervisor's line on stderr, no "listening" -- rather
 * than being restarted for ever. */
TEST(cli_workers_that_cannot_start_fail_the_start) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    char out[4096], err[8192];
    child_env[0] = "WEFT_IO=bogus";
    int st = run_cli(out, sizeof out, err, sizeof err, "--port", "0", "--root", d.root, "--workers", "2", (const char *)NULL);
    child_env[0] = NULL;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 1) FAIL("status 0x%x, stderr: %s", st, err);
    if (!strstr(err, "WEFT_IO=bogus") || !strstr(err, "before it was ready")) FAIL("stderr says: %s", err);
    if (strstr(out, "listening")) FAIL("it said listening: %s", out);
}

TEST(access_log) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    char logp[160];
    snprintf(logp, sizeof logp, "%s/access.log", d.base);
    server s;
    server_start(&s, d.root, "--access-log", logp, (const char *)NULL);
    resp r;
    get_path(s.port, "/hello.txt", &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    get_path(s.port, "/missing.txt", &r);
    CHECK_STATUS(&r, 404);
    resp_free(&r);
    fetch(s.port, "HEAD /a.txt HTTP/1.1\r\nHost: t\r\n\r\n", 1, &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    get_path(s.port, "/sub/page.txt?q=1", &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    server_stop(&s); /* every line written */
    FILE *f = fopen(logp, "r");
    if (!f) FAIL("no access log at %s", logp);
    char line[1024];
    int lines = 0, seen = 0;
    static const struct { const char *path, *status; } want[] = {
        {"/hello.txt", "200"}, {"/missing.txt", "404"}, {"/a.txt", "200"}, {"/sub/page.txt", "200"}};
    while (fgets(line, sizeof line, f)) {
        lines++;
        for (int i = 0; i < 4; i++) {
            char st[8];
            snprintf(st, sizeof st, " %s", want[i].status);
            const char *p = strstr(line, want[i].path);
            if (p && strstr(p, st)) seen |= 1 << i;
        }
    }
    fclose(f);
    if (lines != 4 || seen != 15) FAIL("access log: %d lines, found %#x of 0xf", lines, seen);
}

/* ------------------------------------------------------------------------ */
/* the access log (issue 23, items 11 and 12)                                */
/* ------------------------------------------------------------------------ */

/* --access-log - into a pipe that nobody reads (this program reads the
 * server's stdout only up to "listening on"): the log must not hold a
 * connection.  Every request is answered, the lines that found no room are
 * dropped, and the server says so while it runs and how many in all when
 * it stops (the lines still queued then count too) -- and still exits 0. */
TEST(access_log_unread_pipe_drops_lines) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    static char err[8192];
    int e[2];
    CHECK(pipe2(e, O_CLOEXEC) == 0);
    child_stderr = e[1];
    server s;
    server_start(&s, d.root, "--access-log", "-", (const char *)NULL);
    child_stderr = -1;
    close(e[1]);
    /* lines of about 1 KiB (a long query): the pipe (64 KiB) and the log's
     * ring (2 MiB) hold fewer than 2,200 of them */
    enum { K = 4, PER = 1500 };
    static char req[1200];
    int rn = snprintf(req, sizeof req, "GET /hello.txt?");
    memset(req + rn, 'q', 1000);
    snprintf(req + rn + 1000, sizeof req - (size_t)rn - 1000, " HTTP/1.1\r\nHost: t\r\n\r\n");
    client c[K];
    for (int k = 0; k < K; k++) cl_open(&c[k], s.port);
    for (int i = 0; i < PER; i++) {
        for (int k = 0; k < K; k++) cl_sends(&c[k], req);
        for (int k = 0; k < K; k++) {
            resp r;
            int got = read_response(&c[k], &r, 0);
            if (got != 1) FAIL("request %d of %d: no answer (the log's pipe is full)", i * K + k + 1, K * PER);
            CHECK_STATUS(&r, 200);
            resp_free(&r);
        }
    }
    for (int k = 0; k < K; k++) cl_close(&c[k]);
    server_stop_within(&s, 10000 + 2 * SLACK_MS);
    size_t len = 0;
    err[0] = 0;
    read_until(e[0], err, sizeof err, &len, "\1", 5000); /* to EOF */
    close(e[0]);
    if (!strstr(err, "line(s) dropped so far")) FAIL("no word of dropped lines while it ran; stderr: %s", err);
    const char *p = strstr(err, "line(s) dropped in all");
    if (!p) FAIL("the server did not report its dropped log lines; stderr: %s", err);
    p--; /* the space */
    while (p > err && p[-1] >= '0' && p[-1] <= '9') p--;
    long dropped = atol(p);
    if (dropped <= 0 || dropped > K * PER) FAIL("dropped %ld of %d lines? stderr: %s", dropped, K * PER, err);
}

/* A request target cannot end the log line's quoted field, or the line:
 * '"', '\' and bytes outside 0x20..0x7e are written as \xHH, as nginx
 * does (this target forged a second record). */
TEST(access_log_escapes_request_line) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    char logp[160];
    snprintf(logp, sizeof logp, "%s/access.log", d.base);
    server s;
    server_start(&s, d.root, "--access-log", logp, (const char *)NULL);
    resp r;
    fetch(s.port, "GET /a\"%20HTTP/1.1\"%20200%2099999%0A?\"x HTTP/1.1\r\nHost: t\r\n\r\n", 0, &r);
    resp_free(&r);
    fetch(s.port, "GET /b\\c?\"\\ HTTP/1.1\r\nHost: t\r\n\r\n", 0, &r);
    resp_free(&r);
    server_stop(&s);
    FILE *f = fopen(logp, "r");
    if (!f) FAIL("no access log at %s", logp);
    char line[2048];
    int lines = 0, seen = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        int quotes = 0;
        for (const char *q = line; *q; q++) quotes += *q == '"';
        if (quotes != 2) FAIL("a log line with %d '\"': %s", quotes, line);
        if (strstr(line, "\"GET /a\\x22%20HTTP/1.1\\x22%20200%2099999%0A?\\x22x HTTP/1.1\" ")) seen |= 1;
        if (strstr(line, "\"GET /b\\x5Cc?\\x22\\x5C HTTP/1.1\" ")) seen |= 2;
    }
    fclose(f);
    if (lines != 2 || seen != 3) FAIL("access log: %d lines, found %#x of 0x3", lines, seen);
}
