/*
 * weft-httpd end to end (test_httpd: the files of this folder, one program):
 * each test builds a docroot under /tmp, starts the real server binary on
 * a free port (--port 0, the port read from its "listening on HOST:PORT"
 * line), talks to it with plain blocking sockets and stops it with
 * SIGTERM, checking that it exits 0 -- so a crash, a hang in the drain or
 * a sanitizer report in the server (built with the same sanitizers as this
 * program) fails the test.  The server's stderr is this program's, so its
 * messages appear in the test output.
 *
 * Nothing here asserts speed.  The time bounds (a header timeout of 1 s
 * must close within 3 s, a released connection slot must be used within
 * 3 s) are correctness bounds: they catch a timeout that never fires or a
 * limit that never releases.  Client sockets carry SO_RCVTIMEO so that a
 * missing response fails the check instead of hanging until the harness's
 * alarm.
 *
 * Cleanup does not depend on the test passing: the server gets
 * PR_SET_PDEATHSIG (a failed CHECK _exits the test, which kills it), and a
 * small guardian process removes the temporary directories once the test
 * process is gone, however it ended.
 *
 * The files: this header and support.c (the docroot, the server process,
 * the client and its response parser, the checks every area uses, and the
 * harness's main), then one file an area -- requests.c (GET and HEAD,
 * paths and symlinks, malformed requests, keep-alive), files.c
 * (conditional requests, ranges, large files, files that shrink),
 * connections.c (timeouts, many and abrupt clients, limits, out of
 * descriptors, memory), drain.c (the graceful drain and the models),
 * cli_log.c (the command line and the access log) and dump.c (the thread
 * dump under load).  Each registers its TESTs as httpd.NAME (and
 * httpd_async.NAME: tests/CMakeLists.txt).
 */
#ifndef WEFT_TEST_HTTPD_H
#define WEFT_TEST_HTTPD_H

/* the harness's test list and main are support.c's */
#ifndef HTTPD_TEST_MAIN
#define TEST_PART
#endif
#include "harness.h"
#include "proc.h"

#include "json.h"
#include "launch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#ifdef WEFT_HTTPD_PATH
#define HAVE_SERVER 1
#else
#define HAVE_SERVER 0
#define WEFT_HTTPD_PATH "weft-httpd"
#endif

/* without the server binary (apps not built) every test says so and passes */
#define NEED_SERVER()                                                          \
    do {                                                                       \
        if (!HAVE_SERVER) {                                                    \
            printf("skipped: built without the weft-httpd target\n");          \
            return;                                                            \
        }                                                                      \
    } while (0)

/* how long a client waits for bytes that must come */
#define IO_TIMEOUT_MS (TEST_SANITIZED ? 20000 : 5000)
/* added to the time bounds in sanitizer builds (the server is slower) */
#define SLACK_MS (TEST_SANITIZED ? 2000 : 0)

/* now_ms, sleep_ms, FAIL: proc.h */

/* ------------------------------------------------------------------------ */
/* temporary directories and their guardian                                  */
/* ------------------------------------------------------------------------ */

/* The guardian: a child that reads directory names from a pipe and, when
 * the pipe reaches EOF (this process is gone), removes them. */
void guard_dir(const char *dir);

void write_file(const char *dir, const char *rel, const void *data, size_t n);

void write_str(const char *dir, const char *rel, const char *s);

void make_dir(const char *dir, const char *rel);

void make_link(const char *dir, const char *rel, const char *target);

/* The standard docroot's files. */
#define INDEX_BODY "<!doctype html>\n<title>weft test</title>\n<p>the index page</p>\n"
#define HELLO_BODY "hello, world\n"
#define SUBPAGE_BODY "a page in a subdirectory\n"
#define SUBINDEX_BODY "<p>sub's index</p>\n"
#define DIGITS_BODY "0123456789abcdefghij" /* 20 bytes, for ranges */
#define SECRET "TOP SECRET outside the docroot"

/* The PNG signature and IHDR's first bytes: img.png. */
extern const unsigned char png_bytes[16];

/* A byte of the large files' pattern: not periodic in any small power of
 * two, so an offset error shows. */
unsigned char pattern_at(size_t i);

typedef struct docroot {
    char base[64];  /* /tmp/weft-httpd-XXXXXX: holds www/ and secrets beside it */
    char root[96];  /* base/www: what the server serves */
} docroot;

/* Builds base/www with the standard files, base/outside.txt and
 * base/index.html (secrets outside the docroot), and symlinks inside www
 * that lead out. */
void make_root(docroot *d);

char *pattern_file(const docroot *d, const char *rel, size_t n);

/* ------------------------------------------------------------------------ */
/* the server process                                                        */
/* ------------------------------------------------------------------------ */

typedef struct server {
    pid_t pid; /* l.pid */
    int port;     /* where the tests connect: plain HTTP, or the tls_front */
    int tls_port; /* its HTTPS port (--tls-cert), 0 none */
    int own_port; /* the port of its "listening on" line (s->port but for a front) */
    launch l;  /* its stdout: read for the "listening" line, kept open */
    int front; /* fl runs: the TLS-wrapping mode's tls_front before an HTTPS-only server */
    launch fl;
} server;

/* The TLS-wrapping mode (WEFT_TEST_HTTPD_TLS=1: ctest's httpd_tls.* pass).
 * server_start gives the server --tls-cert and --tls-key (HTTPS only, on
 * --port) and puts tests/support/tls_front.c before it: a plain port whose
 * connections it carries over TLS, s->port; the server's own is
 * s->tls_port. */
int test_tls(void);

/* The tests' certificate and key (self-signed, "localhost", P-256), made
 * once per process; skips the test in a build without OpenSSL. */
void tls_test_files(const char **cert, const char **key);

/* The port the server itself listens on: s->port, or behind the
 * TLS-wrapping mode's front its HTTPS port. */
static inline int server_own_port(const server *s) { return s->own_port; }

/* When set, the next server starts with this RLIMIT_NOFILE. */
extern rlim_t child_nofile;
/* When >= 0, the next server starts without --quiet, its stderr here. */
extern int child_stderr;
/* The next server starts with these in its environment ("NAME=VALUE"). */
extern const char *child_env[4];

/* Starts weft-httpd --port 0 --root ROOT --quiet EXTRA... (NULL-ended);
 * with $WEFT_TEST_HTTPD_MODEL, --model that first (a --model in EXTRA
 * overrides it). */
void server_start(server *s, const char *root, ...);

/* How every server process starts: a test that fails _exits, and the
 * server must not outlive it (PR_SET_PDEATHSIG); it is another process, on
 * the real clock -- deterministic mode is the test process's (its timeouts
 * would run on a virtual clock that jumps while the client, in real time,
 * writes); then, with settings, child_env's.  env: 8 slots. */
void server_opts(launch_opts *o, const char **env, int settings);

/* Starts argv[0] (a path) with argv, its stdout a pipe read until it
 * prints "listening on HOST:PORT" (s->port); stderr: child_stderr if set;
 * with child_env's settings in its environment; a small fd table (soft and
 * hard) with child_nofile. */
void prog_start(server *s, const char **argv);

/* Waits up to ms for the server to exit; returns 1 and *st if it did. */
int server_wait(server *s, int ms, int *st);

/* Runs weft-httpd with the args in ap (NULL-ended) to its end (a bad
 * option, --help: it must end within 10 s); its stdout and stderr into out
 * and err (NUL-terminated, truncated); as_nobody: as uid and gid 65534.
 * Returns the wait status. */
int run_httpd_v(char *out, size_t outsz, char *err, size_t errsz, int as_nobody, va_list ap);

/* SIGKILL and reap; *st (if not NULL) gets how it ended. */
void server_kill(server *s, int *st);

void check_exit_status(int st);

/* SIGTERM, then it must exit 0 within within_ms; returns how long it took. */
int64_t server_stop_within(server *s, int within_ms);

/* the drain waits for live connections up to 10 s: leave room for that */
void server_stop(server *s);

/* ------------------------------------------------------------------------ */
/* clients                                                                   */
/* ------------------------------------------------------------------------ */

int tcp_connect(int port);

/* Closes with RST instead of FIN. */
void close_rst(int fd);

typedef struct client {
    int fd;
    char *buf; /* received, not yet parsed */
    size_t len, cap;
} client;

void cl_open(client *c, int port);

void cl_close(client *c);

/* All of data; a failure fails the test. */
void cl_send(client *c, const void *data, size_t n);

void cl_sends(client *c, const char *s);

/* As much of data as the server takes: it may answer and close before
 * reading all of an oversized request. */
void cl_send_lenient(client *c, const void *data, size_t n);

typedef struct resp {
    int status;
    char head[16384]; /* status line and header lines, NUL-terminated */
    size_t head_len;
    char *body;       /* malloc'd (resp_free), NUL-terminated */
    size_t body_len;
    long long content_length; /* -1 if absent */
} resp;

void resp_free(resp *r);

/* The value of header name (first occurrence, trimmed) into out; 1 if present. */
int hdr(const resp *r, const char *name, char *out, size_t outsz);

int hdr_count(const resp *r, const char *name);

/* Parses one response at the start of buf[0..len).  Returns its length
 * (> 0), 0 if incomplete, -1 if malformed.  head: the request was HEAD (no
 * body whatever Content-Length says); eof: the connection has ended, so a
 * response without Content-Length ends here. */
long parse_response(const char *buf, size_t len, resp *r, int head, int eof);

/* Reads one response.  Returns 1 (r filled), 0 if the connection ended
 * before its first byte, -1 on a timeout, an error or a malformed or
 * truncated response (after saying which on stderr). */
int read_response(client *c, resp *r, int head);

#define GET_RESPONSE(c, r, head)                                               \
    do {                                                                       \
        int got_ = read_response((c), (r), (head));                            \
        if (got_ != 1) FAIL("no response (%s)", got_ == 0 ? "connection closed" : "see above"); \
    } while (0)

#define CHECK_STATUS(r, code)                                                  \
    do {                                                                       \
        if ((r)->status != (code))                                             \
            FAIL("expected status %d, got %d; response head:\n%s", (code), (r)->status, (r)->head); \
    } while (0)

/* header name must equal value */
#define CHECK_HDR(r, name, value)                                              \
    do {                                                                       \
        char v_[1024];                                                         \
        if (!hdr((r), (name), v_, sizeof v_)) FAIL("no %s header in:\n%s", (name), (r)->head); \
        if (strcmp(v_, (value)) != 0)                                          \
            FAIL("%s: expected '%s', got '%s'; response head:\n%s", (name), (value), v_, (r)->head); \
    } while (0)

#define CHECK_BODY(r, data, n)                                                 \
    do {                                                                       \
        size_t n_ = (n);                                                       \
        if ((r)->body_len != n_ || memcmp((r)->body, (data), n_) != 0)         \
            FAIL("body: expected %zu bytes '%.40s', got %zu bytes '%.40s'", n_, (const char *)(data), \
                 (r)->body_len, (r)->body);                                    \
    } while (0)

#define CHECK_BODY_STR(r, s) CHECK_BODY((r), (s), strlen(s))

/* What the connection does within ms: 1 it ends (EOF or RST), 0 nothing,
 * -1 more bytes arrive (the bytes are left in c->buf). */
int wait_closed(client *c, int ms);

#define CHECK_CLOSED(c)                                                        \
    do {                                                                       \
        int w_ = wait_closed((c), IO_TIMEOUT_MS);                              \
        if (w_ != 1)                                                           \
            FAIL("expected the server to close the connection, got %s%.*s",   \
                 w_ == 0 ? "nothing (still open)" : "bytes: ",                 \
                 w_ == 0 ? 0 : (int)((c)->len < 200 ? (c)->len : 200), (c)->buf); \
    } while (0)

/* One request on a new connection; the response into r. */
void fetch(int port, const char *req, int head, resp *r);

void get_path(int port, const char *path, resp *r);

/* The server answers a plain request on a new connection. */
void check_alive(int port);

/* Sends raw bytes on a new connection: the answer must be status, then the
 * connection closed; then the server must still answer normally.  The raw
 * request may be oversized, so sending stops when the server stops
 * reading. */
void check_error(int port, const char *raw, size_t n, int status);

void check_error_str(int port, const char *raw, int status);

/* A server on the standard docroot, for tests that need nothing else. */
#define WITH_SERVER(d, s, ...)                                                 \
    NEED_SERVER();                                                             \
    docroot d;                                                                 \
    make_root(&d);                                                             \
    server s;                                                                  \
    server_start(&s, d.root, ##__VA_ARGS__, (const char *)NULL)

/* After a partial head, the server answers 408 (or just closes); returns
 * the time from t0 until the connection ended. */
int64_t wait_cut_off(client *c, int64_t t0, int bound_ms);

/* ------------------------------------------------------------------------ */
/* every model (issue 9), and a pipe read until it says something            */
/* ------------------------------------------------------------------------ */

/* The models a test runs on: all four, or only $WEFT_TEST_HTTPD_MODEL when
 * the suite runs for one model (ctest's httpd_async pass). */
int test_models(const char **m, const char *pool);
#define FOR_MODELS(pool)                                                                       \
    const char *all_models[4];                                                                 \
    int nmodels = test_models(all_models, pool);                                               \
    for (int m = 0; m < nmodels; m++)

/* The descriptors process pid holds (-1: cannot tell). */
int count_fds(pid_t pid);
/* The descriptors of pid that connections and requests hold: sockets and
 * files, not the runtime's anonymous inodes (its carriers' rings, epoll
 * and eventfds: a spare carrier the monitor starts keeps its own for the
 * process's life) nor pipes (-1: cannot tell). */
int count_conn_fds(pid_t pid);
/* What pid's descriptors are, for a failure's message: its TCP sockets by
 * state, its other sockets, anonymous inodes (eventfds, epoll, rings),
 * pipes, and files (named). */
void describe_fds(pid_t pid, char *out, size_t cap);

/* Whether s's server (and its TLS front, if it has one) still runs, for a
 * failure's message: "running", "exited with status N", "killed by signal
 * N" (reaps one that ended). */
void describe_server(server *s, char *out, size_t cap);

/* Reads what a pipe has until it holds `want` or ms pass; 1 if seen. */
int read_until(int fd, char *buf, size_t cap, size_t *len, const char *want, int ms);

#endif
