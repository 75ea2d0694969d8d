/*
 * What every area of test_httpd shares (httpd_test.h says what each is),
 * and the harness's main: the temporary directories and their guardian,
 * the standard docroot, the server process (through launch.h), the client
 * with its response parser, and the waits and checks the areas use.
 */
#define HTTPD_TEST_MAIN
#include "httpd_test.h"

/* ------------------------------------------------------------------------ */
/* temporary directories and their guardian                                  */
/* ------------------------------------------------------------------------ */

static int guard_fd = -1;

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

static void rm_rf(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void guard_dir(const char *dir) {
    if (guard_fd < 0) {
        int p[2];
        CHECK(pipe2(p, O_CLOEXEC) == 0);
        pid_t g = fork();
        CHECK(g >= 0);
        if (g == 0) {
            close(p[1]);
            int dn = open("/dev/null", O_RDWR);
            if (dn >= 0) {
                dup2(dn, 0), dup2(dn, 1), dup2(dn, 2);
            }
            static char names[8192];
            size_t n = 0;
            for (;;) {
                ssize_t r = read(p[0], names + n, sizeof names - 1 - n);
                if (r > 0) n += (size_t)r;
                else if (r == 0 || errno != EINTR) break;
            }
            names[n] = 0;
            for (char *s = names, *e; *s; s = e + 1) {
                e = strchr(s, '\n');
                if (!e) break;
                *e = 0;
                if (strncmp(s, "/tmp/weft-httpd-", 16) == 0) rm_rf(s);
            }
            _exit(0);
        }
        close(p[0]);
        guard_fd = p[1];
    }
    dprintf(guard_fd, "%s\n", dir);
}

void write_file(const char *dir, const char *rel, const void *data, size_t n) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) FAIL("create %s: %s", p, strerror(errno));
    const char *b = data;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) FAIL("write %s: %s", p, strerror(errno));
        b += w;
        n -= (size_t)w;
    }
    close(fd);
}

void write_str(const char *dir, const char *rel, const char *s) { write_file(dir, rel, s, strlen(s)); }

void make_dir(const char *dir, const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (mkdir(p, 0755) < 0) FAIL("mkdir %s: %s", p, strerror(errno));
}

void make_link(const char *dir, const char *rel, const char *target) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    if (symlink(target, p) < 0) FAIL("symlink %s: %s", p, strerror(errno));
}

const unsigned char png_bytes[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 0x0d, 'I', 'H', 'D', 'R'};

unsigned char pattern_at(size_t i) { return (unsigned char)((i * 131u) ^ (i >> 9) ^ (i >> 17)); }

void make_root(docroot *d) {
    snprintf(d->base, sizeof d->base, "/tmp/weft-httpd-XXXXXX");
    if (!mkdtemp(d->base)) FAIL("mkdtemp: %s", strerror(errno));
    guard_dir(d->base);
    snprintf(d->root, sizeof d->root, "%s/www", d->base);
    make_dir(d->base, "www");
    write_str(d->base, "outside.txt", SECRET "\n");
    write_str(d->base, "index.html", SECRET " (index)\n");
    const char *r = d->root;
    write_str(r, "index.html", INDEX_BODY);
    write_str(r, "hello.txt", HELLO_BODY);
    write_str(r, "digits.txt", DIGITS_BODY);
    write_str(r, "a.txt", "AAA");
    write_str(r, "b.txt", "BBBB");
    write_str(r, "c.txt", "CCCCC");
    write_str(r, "style.css", "body { color: black }\n");
    write_str(r, "app.js", "console.log('hi');\n");
    write_file(r, "img.png", png_bytes, sizeof png_bytes);
    make_dir(r, "sub");
    write_str(r, "sub/page.txt", SUBPAGE_BODY);
    write_str(r, "sub/index.html", SUBINDEX_BODY);
    make_dir(r, "emptydir");
    write_str(r, "emptydir/file.txt", "x");
    make_link(r, "passwd_link", "/etc/passwd");
    make_link(r, "etc_link", "/etc");
    make_link(r, "out_link", "../outside.txt");
    make_link(r, "outdir", "..");
    make_link(r, "inside_link", "hello.txt");
}

char *pattern_file(const docroot *d, const char *rel, size_t n) {
    char *b = malloc(n);
    CHECK(b != NULL);
    for (size_t i = 0; i < n; i++) b[i] = (char)pattern_at(i);
    write_file(d->root, rel, b, n);
    return b;
}

/* ------------------------------------------------------------------------ */
/* the server process                                                        */
/* ------------------------------------------------------------------------ */

rlim_t child_nofile;
int child_stderr = -1;
const char *child_env[4];

/* ------------------------------------------------------------------------ */
/* HTTPS: the test client's TLS-wrapping mode                                */
/* ------------------------------------------------------------------------ */

int test_tls(void) {
    const char *e = getenv("WEFT_TEST_HTTPD_TLS");
    return e && *e == '1';
}

#if HAVE_TEST_TLS
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

/* A self-signed P-256 certificate for "localhost" and its key, made once
 * per test process in a directory of its own (the guardian removes it). */
void tls_test_files(const char **cert, const char **key) {
    static char dir[64], c[96], k[96];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/weft-httpd-tls-XXXXXX");
        if (!mkdtemp(dir)) FAIL("mkdtemp: %s", strerror(errno));
        guard_dir(dir);
        snprintf(c, sizeof c, "%s/cert.pem", dir);
        snprintf(k, sizeof k, "%s/key.pem", dir);
        EVP_PKEY *pk = EVP_EC_gen("P-256");
        X509 *x = X509_new();
        CHECK(pk && x);
        X509_set_version(x, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
        X509_gmtime_adj(X509_getm_notBefore(x), -3600);
        X509_gmtime_adj(X509_getm_notAfter(x), 7 * 86400);
        X509_NAME *nm = X509_get_subject_name(x);
        X509_NAME_add_entry_by_txt(nm, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
        X509_set_issuer_name(x, nm);
        X509_set_pubkey(x, pk);
        CHECK(X509_sign(x, pk, EVP_sha256()) > 0);
        FILE *f = fopen(c, "w");
        CHECK(f && PEM_write_X509(f, x) == 1);
        fclose(f);
        f = fopen(k, "w");
        CHECK(f && PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) == 1);
        fclose(f);
        X509_free(x);
        EVP_PKEY_free(pk);
    }
    *cert = c;
    *key = k;
}
#else
void tls_test_files(const char **cert, const char **key) {
    (void)cert, (void)key;
    SKIP("built without OpenSSL 3: no HTTPS to test");
}
#endif

void server_start(server *s, const char *root, ...) {
    const char *argv[52];
    int n = 0;
    argv[n++] = WEFT_HTTPD_PATH;
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--root";
    argv[n++] = root;
    const char *model = getenv("WEFT_TEST_HTTPD_MODEL");
    if (model && *model) {
        argv[n++] = "--model";
        argv[n++] = model;
    }
    if (child_stderr < 0) argv[n++] = "--quiet";
    va_list ap;
    va_start(ap, root);
    n = argv_add(argv, n, 46, ap);
    va_end(ap);
    if (test_tls()) {
        /* the TLS-wrapping mode: the server speaks HTTPS only, on --port,
         * and prog_start puts a tls_front before it */
        int has_tls = 0;
        for (int i = 1; i < n; i++)
            if (!strcmp(argv[i], "--tls-cert")) has_tls = 1;
        if (!has_tls) {
            const char *cert, *key;
            tls_test_files(&cert, &key);
            argv[n++] = "--tls-cert";
            argv[n++] = cert;
            argv[n++] = "--tls-key";
            argv[n++] = key;
            argv[n] = NULL;
        }
    }
    prog_start(s, argv);
}

void server_opts(launch_opts *o, const char **env, int settings) {
    int e = 0;
    env[e++] = "WEFT_DETERMINISTIC";
    env[e++] = "WEFT_TRACE";
    for (int i = 0; settings && i < 4 && child_env[i]; i++) env[e++] = child_env[i];
    env[e] = NULL;
    *o = (launch_opts){.env = env, .deathsig = SIGKILL};
}

void prog_start(server *s, const char **argv) {
    const char *env[8];
    launch_opts o;
    server_opts(&o, env, 1);
    o.out = LAUNCH_PIPE;
    if (child_stderr >= 0) o.err = LAUNCH_FD, o.err_fd = child_stderr;
    o.nofile = child_nofile;
    int e = launch_start(&s->l, (char *const *)argv, &o);
    if (e < 0) FAIL("start %s: %s", argv[0], strerror(-e));
    s->pid = s->l.pid;
    s->port = s->tls_port = 0;
    s->front = 0;
    int64_t until = now_ms() + (TEST_SANITIZED ? 60000 : 20000);
    const char *line = launch_wait_line(&s->l, NULL, until);
    if (!line) {
        launch_stop(&s->l, SIGKILL, -1);
        FAIL("the server did not print 'listening on HOST:PORT' (exit status 0x%x)", s->l.status);
    }
    s->port = s->own_port = launch_listen_port(line);
    if (s->port < 0) FAIL("server printed '%s'", line);
    int https = strstr(line, "(https)") != NULL;
    for (int i = 1; argv[i]; i++) {
        if (strcmp(argv[i], "--tls-port") != 0) continue;
        /* HTTPS beside plain HTTP: its own line */
        const char *tl = launch_wait_line(&s->l, NULL, until);
        if (!tl || !strstr(tl, "(https)") || (s->tls_port = launch_listen_port(tl)) < 0)
            FAIL("the server printed no 'listening on HOST:PORT (https)' line for --tls-port");
        return;
    }
    if (!https) return;
    s->tls_port = s->port;
    if (!test_tls()) return;
#ifdef WEFT_TLS_FRONT_PATH
    /* the tests talk plain TCP to the front; it speaks TLS to the server */
    char port[16];
    snprintf(port, sizeof port, "%d", s->tls_port);
    const char *fargv[] = {WEFT_TLS_FRONT_PATH, port, NULL};
    const char *fenv[8];
    launch_opts fo;
    server_opts(&fo, fenv, 0);
    fo.out = LAUNCH_PIPE;
    e = launch_start(&s->fl, (char *const *)fargv, &fo);
    if (e < 0) FAIL("start %s: %s", fargv[0], strerror(-e));
    const char *fline = launch_wait_line(&s->fl, NULL, until);
    if (!fline || (s->port = launch_listen_port(fline)) < 0) FAIL("tls_front printed no 'listening on' line");
    s->front = 1;
#endif
}

/* The front ends with its server (a test that lets a server go on its own
 * leaves it to the test's end: it dies with the test process). */
static void front_stop(server *s) {
    if (!s->front) return;
    launch_stop(&s->fl, SIGKILL, -1);
    launch_close(&s->fl);
    s->front = 0;
}

int server_wait(server *s, int ms, int *st) {
    int r = launch_reap(&s->l, ms);
    if (r < 0) FAIL("waitpid: %s", strerror(-r));
    if (r) *st = s->l.status;
    return r;
}

void server_kill(server *s, int *st) {
    launch_stop(&s->l, SIGKILL, -1);
    if (st) *st = s->l.status;
    front_stop(s);
}

void check_exit_status(int st) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return;
    if (WIFSIGNALED(st)) FAIL("the server was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    FAIL("the server exited with status %d", WEXITSTATUS(st));
}

int64_t server_stop_within(server *s, int within_ms) {
    int64_t t0 = now_ms();
    CHECK(kill(s->pid, SIGTERM) == 0);
    int st;
    if (!server_wait(s, within_ms, &st)) {
        server_kill(s, &st);
        FAIL("the server did not exit within %d ms of SIGTERM", within_ms);
    }
    int64_t took = now_ms() - t0;
    front_stop(s);
    check_exit_status(st);
    launch_close(&s->l);
    s->pid = 0;
    return took;
}

void server_stop(server *s) { server_stop_within(s, 15000 + 2 * SLACK_MS); }

/* Runs weft-httpd with args (NULL-ended); its stdout and stderr into out and
 * err (NUL-terminated, truncated); returns the wait status. */
int run_httpd_v(char *out, size_t outsz, char *err, size_t errsz, int as_nobody, va_list ap) {
    const char *argv[32];
    int n = 0;
    argv[n++] = WEFT_HTTPD_PATH;
    n = argv_add(argv, n, 31, ap);
    char of[] = "/tmp/weft-httpd-out-XXXXXX", ef[] = "/tmp/weft-httpd-err-XXXXXX";
    int ofd = mkstemp(of), efd = mkstemp(ef);
    CHECK(ofd >= 0 && efd >= 0);
    unlink(of);
    unlink(ef);
    const char *env[8];
    launch_opts o;
    server_opts(&o, env, 1); /* (child_env: none unless a test sets it) */
    if (as_nobody) o.drop = 1, o.uid = 65534, o.gid = 65534;
    o.out = o.err = LAUNCH_FD;
    o.out_fd = ofd, o.err_fd = efd;
    server sv;
    int e = launch_start(&sv.l, (char *const *)argv, &o);
    if (e < 0) FAIL("start %s: %s", argv[0], strerror(-e));
    sv.pid = sv.l.pid;
    int st;
    if (!server_wait(&sv, 10000 + 5 * SLACK_MS, &st)) {
        server_kill(&sv, &st);
        FAIL("weft-httpd %s did not exit", argv[1]);
    }
    ssize_t k = pread(ofd, out, outsz - 1, 0);
    out[k > 0 ? k : 0] = 0;
    k = pread(efd, err, errsz - 1, 0);
    err[k > 0 ? k : 0] = 0;
    close(ofd);
    close(efd);
    return st;
}

/* ------------------------------------------------------------------------ */
/* clients                                                                   */
/* ------------------------------------------------------------------------ */

int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = {IO_TIMEOUT_MS / 1000, (IO_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) FAIL("connect to port %d: %s", port, strerror(errno));
    return fd;
}

void close_rst(int fd) {
    struct linger l = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close(fd);
}

void cl_open(client *c, int port) {
    c->fd = tcp_connect(port);
    c->len = 0;
    c->cap = 64 * 1024;
    c->buf = malloc(c->cap);
    CHECK(c->buf != NULL);
}

void cl_close(client *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    free(c->buf);
    c->buf = NULL;
}

void cl_send(client *c, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) FAIL("send: %s", strerror(errno));
        p += w;
        n -= (size_t)w;
    }
}

void cl_sends(client *c, const char *s) { cl_send(c, s, strlen(s)); }

void cl_send_lenient(client *c, const void *data, size_t n) {
    const char *p = data;
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

void resp_free(resp *r) {
    free(r->body);
    r->body = NULL;
}

int hdr(const resp *r, const char *name, char *out, size_t outsz) {
    size_t nl = strlen(name);
    const char *p = strstr(r->head, "\r\n");
    while (p && p[2]) {
        const char *line = p + 2;
        const char *end = strstr(line, "\r\n");
        if (!end) end = line + strlen(line);
        if ((size_t)(end - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
            const char *v = line + nl + 1;
            while (v < end && (*v == ' ' || *v == '\t')) v++;
            const char *ve = end;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
            size_t vn = (size_t)(ve - v) < outsz - 1 ? (size_t)(ve - v) : outsz - 1;
            memcpy(out, v, vn);
            out[vn] = 0;
            return 1;
        }
        p = *end ? end : NULL;
    }
    return 0;
}

int hdr_count(const resp *r, const char *name) {
    size_t nl = strlen(name);
    int k = 0;
    for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
        if (strncasecmp(p + 2, name, nl) == 0 && p[2 + nl] == ':') k++;
    return k;
}

long parse_response(const char *buf, size_t len, resp *r, int head, int eof) {
    const char *end = NULL;
    for (size_t i = 0; i + 3 < len; i++)
        if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' && buf[i + 3] == '\n') {
            end = buf + i;
            break;
        }
    if (!end) return len >= sizeof r->head ? -1 : 0;
    size_t hl = (size_t)(end - buf);
    if (hl >= sizeof r->head) return -1;
    memcpy(r->head, buf, hl);
    r->head[hl] = 0;
    r->head_len = hl;
    if (strncmp(r->head, "HTTP/1.", 7) != 0 || hl < 12 || r->head[8] != ' ') return -1;
    r->status = atoi(r->head + 9);
    if (r->status < 100 || r->status > 599) return -1;
    char v[64];
    r->content_length = -1;
    if (hdr(r, "Content-Length", v, sizeof v)) {
        char *e;
        r->content_length = strtoll(v, &e, 10);
        if (*e || r->content_length < 0) return -1;
    }
    size_t at = hl + 4;
    size_t blen;
    if (head || r->status == 304 || r->status == 204 || r->status < 200) blen = 0;
    else if (r->content_length >= 0) blen = (size_t)r->content_length;
    else if (eof) blen = len - at;
    else return 0;
    if (len - at < blen) return 0;
    r->body = malloc(blen + 1);
    CHECK(r->body != NULL);
    memcpy(r->body, buf + at, blen);
    r->body[blen] = 0;
    r->body_len = blen;
    return (long)(at + blen);
}

int read_response(client *c, resp *r, int head) {
    r->body = NULL;
    r->status = 0;
    r->head[0] = 0;
    for (;;) {
        long k = parse_response(c->buf, c->len, r, head, 0);
        if (k < 0) {
            fprintf(stderr, "malformed response: %.200s\n", c->buf);
            return -1;
        }
        if (k > 0) {
            memmove(c->buf, c->buf + k, c->len - (size_t)k);
            c->len -= (size_t)k;
            return 1;
        }
        if (c->len == c->cap) {
            c->cap *= 2;
            c->buf = realloc(c->buf, c->cap);
            CHECK(c->buf != NULL);
        }
        ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (n > 0) {
            c->len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0 || errno == ECONNRESET) {
            if (c->len == 0) return 0;
            k = parse_response(c->buf, c->len, r, head, 1);
            if (k > 0) {
                memmove(c->buf, c->buf + k, c->len - (size_t)k);
                c->len -= (size_t)k;
                return 1;
            }
            fprintf(stderr, "connection ended inside a response (%zu bytes): %.200s\n", c->len, c->buf);
            return -1;
        }
        fprintf(stderr, "recv: %s (after %zu bytes)\n", errno == EAGAIN ? "timed out" : strerror(errno), c->len);
        return -1;
    }
}

int wait_closed(client *c, int ms) {
    if (c->len) return -1;
    int64_t until = now_ms() + ms;
    for (;;) {
        int left = (int)(until - now_ms());
        if (left < 0) left = 0;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int pr = poll(&pf, 1, left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) return 0;
        char b[4096];
        ssize_t n = recv(c->fd, b, sizeof b, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) return 1;
        if (n > 0) {
            if (c->len + (size_t)n > c->cap) n = (ssize_t)(c->cap - c->len);
            memcpy(c->buf + c->len, b, (size_t)n);
            c->len += (size_t)n;
            return -1;
        }
        if (now_ms() >= until) return 0;
    }
}

void fetch(int port, const char *req, int head, resp *r) {
    client c;
    cl_open(&c, port);
    cl_sends(&c, req);
    GET_RESPONSE(&c, r, head);
    cl_close(&c);
}

void get_path(int port, const char *path, resp *r) {
    char req[2048];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: t\r\n\r\n", path);
    fetch(port, req, 0, r);
}

void check_alive(int port) {
    resp r;
    get_path(port, "/hello.txt", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, HELLO_BODY);
    resp_free(&r);
}

void check_error(int port, const char *raw, size_t n, int status) {
    client c;
    cl_open(&c, port);
    cl_send_lenient(&c, raw, n);
    resp r;
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, status);
    CHECK_HDR(&r, "Connection", "close");
    CHECK_CLOSED(&c);
    resp_free(&r);
    cl_close(&c);
    check_alive(port);
}

void check_error_str(int port, const char *raw, int status) { check_error(port, raw, strlen(raw), status); }

int64_t wait_cut_off(client *c, int64_t t0, int bound_ms) {
    struct pollfd pf = {c->fd, POLLIN, 0};
    int left = (int)(t0 + bound_ms - now_ms());
    if (c->len == 0 && poll(&pf, 1, left > 0 ? left : 0) == 0)
        FAIL("neither a 408 nor a close within %d ms", bound_ms);
    resp r;
    int got = read_response(c, &r, 0);
    if (got == 1) {
        CHECK_STATUS(&r, 408);
        resp_free(&r);
        CHECK_CLOSED(c);
    } else if (got < 0) {
        FAIL("after the partial head: no clean 408 and no close (see above)");
    }
    int64_t took = now_ms() - t0;
    if (took > bound_ms) FAIL("cut off after %lld ms, bound %d ms", (long long)took, bound_ms);
    return took;
}

/* ------------------------------------------------------------------------ */
/* every model (issue 9), and a pipe read until it says something            */
/* ------------------------------------------------------------------------ */

int test_models(const char **m, const char *pool) {
    const char *only = getenv("WEFT_TEST_HTTPD_MODEL");
    if (only && *only) {
        m[0] = only;
        return 1;
    }
    m[0] = "virtual";
    m[1] = "thread";
    m[2] = pool;
    m[3] = "async";
    return 4;
}

int count_fds(pid_t pid) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(p);
    if (!dir) return -1;
    int n = 0;
    while (readdir(dir)) n++;
    closedir(dir);
    return n - 2;
}

/* The TCP state of the socket with this inode in pid's network namespace
 * (/proc/PID/net/tcp), as the kernel's number, or -1. */
static int tcp_state_of(pid_t pid, unsigned long ino) {
    char p[64], line[512];
    snprintf(p, sizeof p, "/proc/%d/net/tcp", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    int st = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned s;
        unsigned long i;
        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu", &s, &i) == 2 && i == ino) {
            st = (int)s;
            break;
        }
    }
    fclose(f);
    return st;
}

/* pid's descriptor table (/proc/PID/fd), or NULL */
static DIR *fds_open(pid_t pid) {
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/fd", (int)pid);
    return opendir(p);
}

/* The next descriptor's target in dir ("socket:[123]", "pipe:[4]", a
 * path...) into t, NUL-terminated; 0 past the last. */
static int fds_next(DIR *dir, pid_t pid, char *t, size_t cap) {
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        char lp[96];
        snprintf(lp, sizeof lp, "/proc/%d/fd/%s", (int)pid, e->d_name);
        ssize_t k = readlink(lp, t, cap - 1);
        if (k <= 0) continue;
        t[k] = 0;
        return 1;
    }
    return 0;
}

int count_conn_fds(pid_t pid) {
    DIR *dir = fds_open(pid);
    if (!dir) return -1;
    int n = 0;
    char t[64];
    while (fds_next(dir, pid, t, sizeof t))
        if (strncmp(t, "anon_inode:", 11) != 0 && strncmp(t, "pipe:", 5) != 0) n++;
    closedir(dir);
    return n;
}

static const char *proc_state(launch *l, char *b, size_t n) {
    if (launch_reap(l, 0) != 1) return "running";
    if (WIFEXITED(l->status)) snprintf(b, n, "exited with status %d", WEXITSTATUS(l->status));
    else if (WIFSIGNALED(l->status)) snprintf(b, n, "killed by signal %d", WTERMSIG(l->status));
    else snprintf(b, n, "ended (wait status %#x)", l->status);
    return b;
}

void describe_server(server *s, char *out, size_t cap) {
    char a[64], b[64];
    const char *st = proc_state(&s->l, a, sizeof a);
    if (s->front) snprintf(out, cap, "the server %s, its TLS front %s", st, proc_state(&s->fl, b, sizeof b));
    else snprintf(out, cap, "the server %s", st);
}

void describe_fds(pid_t pid, char *out, size_t cap) {
    static const char *const tcp[] = {"?",         "ESTABLISHED", "SYN_SENT",   "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2",
                                      "TIME_WAIT", "CLOSE",       "CLOSE_WAIT", "LAST_ACK", "LISTEN",    "CLOSING"};
    int states[12] = {0}, other_sockets = 0, files = 0, anon = 0, pipes = 0;
    DIR *dir = fds_open(pid);
    size_t at = 0;
    out[0] = 0;
    if (!dir) return;
    char t[256];
    while (fds_next(dir, pid, t, sizeof t)) {
        unsigned long ino;
        if (sscanf(t, "socket:[%lu]", &ino) == 1) {
            int st = tcp_state_of(pid, ino);
            if (st > 0 && st < 12) states[st]++;
            else other_sockets++;
        } else if (!strncmp(t, "anon_inode:", 11)) {
            anon++;
        } else if (!strncmp(t, "pipe:", 5)) {
            pipes++;
        } else {
            files++;
            if (at + strlen(t) + 8 < cap / 2) at += (size_t)snprintf(out + at, cap - at, "%s%s", at ? ", " : "file ", t);
        }
    }
    closedir(dir);
    for (int i = 1; i < 12; i++)
        if (states[i] && at + 32 < cap)
            at += (size_t)snprintf(out + at, cap - at, "%s%d tcp %s", at ? "; " : "", states[i], tcp[i]);
    if (at + 96 < cap)
        snprintf(out + at, cap - at, "%s%d other sockets, %d anon inodes, %d pipes, %d files", at ? "; " : "",
                 other_sockets, anon, pipes, files);
}

int read_until(int fd, char *buf, size_t cap, size_t *len, const char *want, int ms) {
    int64_t until = now_ms() + ms;
    for (;;) {
        buf[*len] = 0;
        if (strstr(buf, want)) return 1;
        int left = (int)(until - now_ms());
        if (left <= 0 || *len >= cap - 1) return 0;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, left) <= 0) continue;
        ssize_t r = read(fd, buf + *len, cap - 1 - *len);
        if (r <= 0) return 0;
        *len += (size_t)r;
    }
}
