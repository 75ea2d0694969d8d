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

void server_start(server *s, const char *root, ...) {
    const char *argv[48];
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
    s->port = 0;
    const char *line = launch_wait_line(&s->l, NULL, now_ms() + (TEST_SANITIZED ? 60000 : 20000));
    if (line) {
        s->port = launch_listen_port(line);
        if (s->port < 0) FAIL("server printed '%s'", line);
        return;
    }
    launch_stop(&s->l, SIGKILL, -1);
    FAIL("the server did not print 'listening on HOST:PORT' (exit status 0x%x)", s->l.status);
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
    check_exit_status(st);
    launch_close(&s->l);
    s->pid = 0;
    return took;
}

void server_stop(server *s) { server_stop_within(s, 15000 + 2 * SLACK_MS); }

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
