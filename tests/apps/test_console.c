/*
 * The live console (weft.h, "The live console"; src/observe/console.c) and
 * weft-top (apps/top/weft-top.c).
 *
 * End to end: the real weft-httpd, started with WEFT_CONSOLE, with clients
 * parked in its --delay-ms sleep; weft-top --once --json against it (by
 * PID and by path), its output parsed with weft-top's own JSON reader
 * (apps/common/json.c) and checked for the server's carriers and vthreads;
 * weft-top's screen in a detached tmux session (capture-pane shows the
 * header and a carrier row; q and Ctrl-C end it); the socket refusing
 * another uid (as root: a child that becomes nobody).  In process: the
 * socket's mode, a stale socket replaced, a live one / a file / an open
 * directory refused, the file removed at shutdown, the stream of
 * snapshots, and client bytes ignored.  Clients that misbehave: ten that
 * never read cost a reader nothing; idle ones never lock a reader out; a
 * full console says so (and weft-top repeats it); floods of refused
 * connections are logged once a second.  weft-top's own words: why it
 * cannot watch a console (as root: a second uid), and a made-up snapshot
 * drawn consistently (peak, call sites).  weft-load's progress: a live
 * line on a terminal (tmux), the banner first through a pipe.
 *
 * Nothing asserts speed.  Waits are bounded (a snapshot must come within
 * IO_TIMEOUT_MS) so that a console that never answers fails instead of
 * hanging.  The in-process tests run no vthreads while snapshots are
 * taken: under TSan, the dump's racy reads of parked vthreads are reported
 * (see test_future's note) -- those are the server's business here.
 */
#include "harness.h"
#include "proc.h"

#include "json.h"
#include "launch.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#ifdef WEFT_HTTPD_PATH
#define HAVE_APPS 1
#else
#define HAVE_APPS 0
#define WEFT_HTTPD_PATH "weft-httpd"
#define WEFT_TOP_PATH "weft-top"
#define WEFT_LOAD_PATH "weft-load"
#define WEFT_SOURCE_DIR "."
#endif

#define NEED_APPS()                                                            \
    do {                                                                       \
        if (!HAVE_APPS) SKIP("built without the weft-httpd and weft-top targets"); \
    } while (0)

#define IO_TIMEOUT_MS (TEST_SANITIZED ? 30000 : 10000)

/* now_ms, sleep_ms, FAIL: proc.h */

/* A private directory under /tmp, removed (with what is left in it) by
 * rm_dir at the end of a test that passes; a failed test leaves it for a
 * look, named after the test. */
static void make_dir(char *out, size_t cap, const char *what) {
    snprintf(out, cap, "/tmp/weft-test-console-%s-XXXXXX", what);
    CHECK(mkdtemp(out) != NULL);
}

static void rm_dir(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* ---- reading the console --------------------------------------------------- */

static int connect_path(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* Reads exactly n bytes within the deadline; returns n, or what came
 * before EOF / the deadline. */
static size_t read_full(int fd, char *buf, size_t n, int64_t until) {
    size_t got = 0;
    while (got < n) {
        int left = (int)(until - now_ms());
        if (left <= 0) break;
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, left) <= 0) continue;
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

/* One snapshot frame from the console (fails the test without one); the
 * caller frees *text.  Returns its parsed document. */
static json_doc *read_snapshot(int fd, const json **root, char **text) {
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    char line[64];
    size_t n = 0;
    while (n < sizeof line - 1) {
        if (read_full(fd, line + n, 1, until) != 1) FAIL("no snapshot frame from the console");
        if (line[n++] == '\n') break;
    }
    line[n] = 0;
    unsigned ver;
    unsigned long long bytes;
    if (sscanf(line, "weft-console %u %llu", &ver, &bytes) != 2 || ver != 1) FAIL("bad frame line '%s'", line);
    CHECK(bytes > 0 && bytes < (1ull << 31));
    char *buf = malloc(bytes + 1);
    CHECK(buf != NULL);
    if (read_full(fd, buf, bytes, until) != bytes) FAIL("a snapshot shorter than its frame said (%llu)", bytes);
    buf[bytes] = 0;
    char err[160];
    json_doc *d = json_parse(buf, bytes, root, err, sizeof err);
    if (!d) FAIL("the snapshot does not parse: %s\n%s", err, buf);
    *text = buf;
    return d;
}

/* ---- the server and weft-top as processes --------------------------------- */

typedef struct server {
    pid_t pid; /* l.pid */
    int port;
    launch l;
} server;

/* weft-httpd on a free port, serving the repository's www/, with
 * WEFT_CONSOLE=console (NULL: none) and two carriers; extra arguments
 * after, NULL-terminated. */
__attribute__((sentinel)) static void server_start(server *s, const char *console, ...) {
    const char *argv[24] = {WEFT_HTTPD_PATH, "--port", "0", "--root", WEFT_SOURCE_DIR "/www", "--carriers", "2"};
    int n = 7;
    va_list ap;
    va_start(ap, console);
    n = argv_add(argv, n, 22, ap);
    va_end(ap);
    /* the server is another process on the real clock (as test_httpd); a
     * failed test must not leave it (PR_SET_PDEATHSIG) */
    char con[512];
    snprintf(con, sizeof con, "WEFT_CONSOLE=%s", console ? console : "");
    const char *env[] = {"WEFT_DETERMINISTIC", "WEFT_TRACE", console ? con : "WEFT_CONSOLE", NULL};
    launch_opts o = {.out = LAUNCH_PIPE, .env = env, .deathsig = SIGKILL};
    int e = launch_start(&s->l, (char *const *)argv, &o);
    if (e < 0) FAIL("start %s: %s", argv[0], strerror(-e));
    s->pid = s->l.pid;
    const char *line = launch_wait_line(&s->l, NULL, now_ms() + (TEST_SANITIZED ? 60000 : 20000));
    if (line) {
        s->port = launch_listen_port(line);
        launch_close(&s->l);
        if (s->port <= 0) FAIL("the server printed '%s'", line);
        return;
    }
    kill(s->pid, SIGKILL);
    FAIL("the server did not say it listens");
}

/* SIGTERM, and its exit status must be 0 (a sanitizer report fails it) --
 * or 3 with cut_ok: the drain cut connections still in the delay. */
static void server_stop(server *s, int cut_ok) {
    CHECK_EQ(kill(s->pid, SIGTERM), 0);
    if (launch_reap(&s->l, IO_TIMEOUT_MS * 2) != 1) {
        kill(s->pid, SIGKILL);
        FAIL("the server did not exit on SIGTERM");
    }
    int st = s->l.status;
    if (!WIFEXITED(st) || (WEXITSTATUS(st) && !(cut_ok && WEXITSTATUS(st) == 3)))
        FAIL("the server ended with status 0x%x", st);
}

/* k clients that each send one request and wait for its answer (which the
 * server's --delay-ms holds back): connection vthreads parked in a sleep.
 * They run in one child process, killed by kill_clients. */
static pid_t clients_start(int port, int k) {
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int *fds = calloc((size_t)k, sizeof *fds);
    for (int i = 0; i < k; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (connect(fds[i], (struct sockaddr *)&a, sizeof a) < 0) _exit(2);
        const char *req = "GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n";
        if (write(fds[i], req, strlen(req)) < 0) _exit(3);
    }
    for (;;) pause(); /* the responses are not read: the server sleeps first anyway */
}

static void clients_stop(pid_t pid) {
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

/* Starts weft-top (argv, argv[0] its path), its stdout to out_fd and its
 * stderr to err_fd (-1: ours), as uid and gid 65534 with nobody (we are
 * root), and with an alarm that ends it should it hang. */
static void top_start(launch *l, const char **argv, int out_fd, int err_fd, int nobody) {
    launch_opts o = {.alarm_s = IO_TIMEOUT_MS / 1000 + 5, .drop = nobody, .uid = 65534, .gid = 65534};
    if (out_fd >= 0) o.out = LAUNCH_FD, o.out_fd = out_fd;
    if (err_fd >= 0) o.err = LAUNCH_FD, o.err_fd = err_fd;
    int e = launch_start(l, (char *const *)argv, &o);
    if (e < 0) FAIL("start %s: %s", argv[0], strerror(-e));
}

/* Runs weft-top with args, its stdout into a string (the caller frees);
 * *status gets its exit status. */
__attribute__((sentinel)) static char *run_top(int *status, ...) {
    const char *argv[8] = {WEFT_TOP_PATH};
    int n = 1;
    va_list ap;
    va_start(ap, status);
    n = argv_add(argv, n, 7, ap);
    va_end(ap);
    char path[] = "/tmp/weft-test-top-out-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    launch l;
    top_start(&l, argv, fd, -1, 0);
    launch_reap(&l, -1);
    *status = l.status;
    return slurp_fd(fd);
}

/* vthreads in the snapshot whose "waiting_on" is why (NULL: all). */
static int count_vthreads(const json *root, const char *why) {
    const json *vts = json_path(root, "weft_dump.vthreads");
    CHECK(vts && vts->type == JSON_ARR);
    int n = 0;
    for (const json *v = vts->first; v; v = v->next) {
        CHECK(json_num(json_get(v, "id"), 0) >= 1);
        CHECK(json_str(json_get(v, "state"), NULL) != NULL);
        if (!why || !strcmp(json_str(json_get(v, "waiting_on"), ""), why)) n++;
    }
    return n;
}

/* The checks a snapshot of the server must pass: its pid, two carriers
 * with their counters (and any spare the monitor added: on a loaded
 * machine -- TSan -- a vthread held a carrier 25 ms and one was), and at
 * least `sleepers` vthreads in the delay. */
static void check_server_snapshot(const json *root, pid_t pid, int sleepers) {
    CHECK_EQ((long long)json_num(json_path(root, "weft_console.pid"), 0), pid);
    CHECK_EQ((long long)json_num(json_path(root, "weft_console.version"), 0), 1);
    CHECK(!strcmp(json_str(json_path(root, "weft_console.program"), ""), "weft-httpd"));
    const json *cc = json_path(root, "weft_console.carrier_counters");
    CHECK(cc && cc->type == JSON_ARR);
    CHECK(cc->n >= 2);
    int k = 0, base = 0;
    for (const json *c = cc->first; c; c = c->next, k++) {
        CHECK_EQ((long long)json_num(json_get(c, "index"), -1), k);
        const json *sp = json_get(c, "spare");
        CHECK(sp && sp->type == JSON_BOOL);
        if (!sp->num) base++;
        /* busy_pct is a number for every carrier whose thread runs (one
         * the monitor started inside the window too); null only for a
         * spare whose thread has not started yet (no tid) */
        const json *b = json_get(c, "busy_pct");
        long long tid = (long long)json_num(json_get(c, "tid"), 0);
        if (sp->num && tid == 0) {
            CHECK(b && b->type == JSON_NULL);
            continue;
        }
        CHECK(b && b->type == JSON_NUM && b->num >= 0 && b->num <= 100);
        CHECK(json_num(json_get(c, "switches"), -1) >= 0);
        CHECK(json_num(json_get(c, "steals"), -1) >= 0);
        CHECK(json_num(json_get(c, "parks"), -1) >= 0);
        CHECK(json_num(json_get(c, "runnable"), -1) >= 0);
        CHECK(json_num(json_get(c, "tid"), 0) > 0);
    }
    CHECK_EQ(base, 2); /* --carriers 2 */
    const json *cs = json_path(root, "weft_dump.carrier_states");
    CHECK(cs && cs->n >= 2);
    int live = (int)json_num(json_path(root, "weft_console.stats.live"), -1);
    int listed = count_vthreads(root, NULL);
    CHECK(listed >= 1 + sleepers);
    CHECK(live >= 1);
    int asleep = count_vthreads(root, "sleep");
    if (asleep < sleepers) FAIL("%d vthreads in the delay's sleep, expected %d", asleep, sleepers);
}

/* A snapshot (weft-top --once --json ARG) showing at least `sleepers`
 * vthreads asleep: taken again until the clients' connections are all in
 * the delay (they connect while the test goes on). */
static char *top_json_showing(const char *arg, pid_t pid, int sleepers, json_doc **d, const json **root) {
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    for (;;) {
        int st;
        char *out = run_top(&st, "--once", "--json", arg, NULL);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("weft-top --once --json %s: status 0x%x: %s", arg, st, out);
        char err[160];
        *d = json_parse(out, strlen(out), root, err, sizeof err);
        if (!*d) FAIL("weft-top's JSON does not parse: %s\n%s", err, out);
        if (count_vthreads(*root, "sleep") >= sleepers || now_ms() > until) {
            check_server_snapshot(*root, pid, sleepers);
            return out;
        }
        json_free(*d);
        free(out);
        sleep_ms(50);
    }
}

/* ---- tests ------------------------------------------------------------------ */

/* The acceptance line: weft-top --once --json against a running weft-httpd
 * lists its carriers and vthreads -- by PID (found through the server's
 * WEFT_CONSOLE) and by the socket's path. */
TEST(top_once_json_lists_httpd) {
    NEED_APPS();
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "json");
    snprintf(sock, sizeof sock, "%s/httpd.sock", dir);
    server s;
    server_start(&s, sock, "--delay-ms", "60000", "--drain-timeout", "1", NULL);
    struct stat st;
    CHECK_EQ(stat(sock, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    CHECK_EQ(st.st_mode & 0777, 0600);
    enum { K = 6 };
    pid_t cl = clients_start(s.port, K);
    char pidarg[16];
    snprintf(pidarg, sizeof pidarg, "%d", (int)s.pid);
    json_doc *d;
    const json *root;
    char *out = top_json_showing(pidarg, s.pid, K, &d, &root);
    printf("weft-top --once --json %s: %zu bytes, %d vthreads, %d asleep in the delay\n", pidarg, strlen(out),
           count_vthreads(root, NULL), count_vthreads(root, "sleep"));
    json_free(d);
    free(out);
    out = top_json_showing(sock, s.pid, K, &d, &root);
    json_free(d);
    free(out);
    /* the text form, once: the header and both carriers' rows */
    int stt;
    out = run_top(&stt, "--once", pidarg, NULL);
    CHECK(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
    printf("%s", out);
    CHECK(strstr(out, "weft-top  pid ") != NULL);
    CHECK(strstr(out, "CARRIER") != NULL);
    CHECK(strstr(out, "SLOWEST SLEEPERS") != NULL);
    free(out);
    clients_stop(cl);
    /* the drain cuts the sleeping connections and the server _exits: the
     * socket file stays behind, as after a crash ... */
    server_stop(&s, 1);
    CHECK_EQ(lstat(sock, &st), 0);
    /* ... and the next server on that path finds it stale and replaces it */
    server_start(&s, sock, NULL);
    out = top_json_showing(sock, s.pid, 0, &d, &root);
    json_free(d);
    free(out);
    /* removed at shutdown */
    server_stop(&s, 0);
    CHECK(lstat(sock, &st) < 0 && errno == ENOENT);
    rm_dir(dir);
}

/* WEFT_CONSOLE=1: the default path /tmp/weft-<uid>/<pid>.sock, which
 * weft-top finds from the pid; a pid that serves no console is a clear
 * error. */
TEST(default_path_by_pid) {
    NEED_APPS();
    server s;
    server_start(&s, "1", NULL);
    char sock[128];
    snprintf(sock, sizeof sock, "/tmp/weft-%u/%d.sock", (unsigned)geteuid(), (int)s.pid);
    struct stat st;
    CHECK_EQ(stat(sock, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/weft-%u", (unsigned)geteuid());
    CHECK_EQ(lstat(dir, &st), 0);
    CHECK(S_ISDIR(st.st_mode) && (st.st_mode & 077) == 0 && st.st_uid == geteuid());
    char pidarg[16];
    snprintf(pidarg, sizeof pidarg, "%d", (int)s.pid);
    json_doc *d;
    const json *root;
    char *out = top_json_showing(pidarg, s.pid, 0, &d, &root);
    json_free(d);
    free(out);
    server_stop(&s, 0);
    CHECK(lstat(sock, &st) < 0 && errno == ENOENT);
    /* a server without a console */
    server_start(&s, NULL, NULL);
    snprintf(pidarg, sizeof pidarg, "%d", (int)s.pid);
    int status;
    out = run_top(&status, "--once", "--json", pidarg, NULL);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    CHECK_EQ(strlen(out), 0);
    free(out);
    server_stop(&s, 0);
}

/* The socket refuses another user: the file is 0600 (connect: EACCES), and
 * with the file opened up by hand, SO_PEERCRED still refuses (the
 * connection closes with no byte sent).  The owner is served. */
TEST(refuses_another_uid) {
    if (geteuid() != 0) SKIP("needs root to become a second uid (nobody, 65534)");
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "uid");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    for (int open_up = 0; open_up < 2; open_up++) {
        if (open_up) {
            CHECK_EQ(chmod(dir, 0755), 0);
            CHECK_EQ(chmod(sock, 0666), 0);
        }
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* (a plain child: it touches no weft call) */
            if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) _exit(10);
            int fd = connect_path(sock);
            if (!open_up) _exit(fd == -EACCES ? 0 : 11);
            if (fd < 0) _exit(12); /* the file is open to all now: the kernel lets it connect */
            char b[64];
            size_t got = read_full(fd, b, sizeof b, now_ms() + IO_TIMEOUT_MS);
            _exit(got == 0 ? 0 : 13); /* closed without a byte */
        }
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the second uid's check (opened up: %d) ended with 0x%x", open_up, st);
    }
    /* and the owner is served */
    int fd = connect_path(sock);
    CHECK(fd >= 0);
    const json *root;
    char *text;
    json_doc *d = read_snapshot(fd, &root, &text);
    CHECK_EQ((long long)json_num(json_path(root, "weft_console.pid"), 0), getpid());
    json_free(d);
    free(text);
    close(fd);
    weft_shutdown();
    rm_dir(dir);
}

static void *echo(void *arg) { return arg; }

/* Snapshots keep coming (one a second) while the client stays; what it
 * sends changes nothing; counters are there for every carrier. */
TEST(streams_and_ignores_input) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "stream");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock, .carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    int fd = connect_path(sock);
    CHECK(fd >= 0);
    const char *junk = "quit\nshutdown\n{\"cmd\":\"stop\"}\n";
    CHECK(write(fd, junk, strlen(junk)) == (ssize_t)strlen(junk));
    double t_prev = 0;
    for (int i = 0; i < 3; i++) {
        const json *root;
        char *text;
        json_doc *d = read_snapshot(fd, &root, &text);
        const json *cc = json_path(root, "weft_console.carrier_counters");
        /* (deterministic mode: one carrier; a spare may come on a loaded machine) */
        CHECK(cc && (int)cc->n >= (test_det_mode() ? 1 : 2));
        double t = json_num(json_path(root, "weft_console.time_ns"), 0);
        CHECK(test_det_mode() ? t >= t_prev : t > t_prev); /* (virtual time stands still with nothing to run) */
        t_prev = t;
        CHECK(json_path(root, "weft_dump.vthreads") != NULL);
        CHECK(json_path(root, "weft_dump.executors") != NULL);
        CHECK(json_path(root, "weft_dump.containers") != NULL);
        json_free(d);
        free(text);
        if (i == 0) CHECK(write(fd, junk, strlen(junk)) == (ssize_t)strlen(junk));
    }
    close(fd);
    /* the runtime is unharmed: a vthread runs and ends */
    weft_thread *t;
    void *res = NULL;
    CHECK_EQ(weft_spawn(&t, echo, (void *)&cfg, NULL), 0);
    CHECK_EQ(weft_join(t, &res), 0);
    CHECK(res == (void *)&cfg);
    weft_shutdown();
    struct stat st;
    CHECK(lstat(sock, &st) < 0 && errno == ENOENT);
    rm_dir(dir);
}

/* A fork child has no console -- the socket is its parent's: its own
 * runtime starts (no -EADDRINUSE), and its exit leaves the parent's file
 * and service alone. */
TEST(fork_child_has_none) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "fork");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* (TSan cannot start threads in a multi-threaded fork's child: see
         * test_fork; there the child checks only its exit) */
        weft_thread *t;
        void *res = NULL;
        if (!TEST_TSAN && weft_spawn(&t, echo, (void *)&cfg, NULL) != 0) _exit(10);
        if (!TEST_TSAN && (weft_join(t, &res) != 0 || res != (void *)&cfg)) _exit(11);
        if (!TEST_TSAN) weft_shutdown();
        struct stat st;
        if (lstat(sock, &st) != 0) _exit(12);
        exit(0); /* (atexit handlers run: the parent's file stays) */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the fork child ended with 0x%x", st);
    int fd = connect_path(sock);
    CHECK(fd >= 0);
    const json *root;
    char *text;
    json_doc *d = read_snapshot(fd, &root, &text);
    CHECK_EQ((long long)json_num(json_path(root, "weft_console.pid"), 0), getpid());
    json_free(d);
    free(text);
    close(fd);
    weft_shutdown();
    rm_dir(dir);
}

/* What is at the path at start: a stale socket is replaced; a live one, a
 * file, a directory open to others, a path too long are refused, and
 * weft_init fails with the error. */
TEST(stale_replaced_live_refused) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "stale");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock};
    /* stale: bound, never listened, closed */
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    CHECK_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    close(s);
    CHECK_EQ(weft_init(&cfg), 0);
    struct stat st;
    CHECK_EQ(stat(sock, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0600);
    weft_shutdown();
    CHECK(lstat(sock, &st) < 0);
    /* live: someone listens there */
    s = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK_EQ(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(s, 4), 0);
    CHECK_EQ(weft_init(&cfg), -EADDRINUSE);
    CHECK_EQ(stat(sock, &st), 0); /* not touched */
    close(s);
    unlink(sock);
    /* a regular file */
    int f = open(sock, O_CREAT | O_WRONLY, 0600);
    CHECK(f >= 0);
    close(f);
    CHECK_EQ(weft_init(&cfg), -EEXIST);
    CHECK_EQ(stat(sock, &st), 0);
    CHECK(S_ISREG(st.st_mode));
    unlink(sock);
    /* a directory anyone may write into, without the sticky bit */
    CHECK_EQ(chmod(dir, 0777), 0);
    CHECK_EQ(weft_init(&cfg), -EPERM);
    CHECK_EQ(chmod(dir, 0700), 0);
    /* a path longer than a Unix socket's */
    char longp[300];
    memset(longp, 'x', sizeof longp);
    memcpy(longp, "/tmp/", 5);
    longp[sizeof longp - 1] = 0;
    cfg.console = longp;
    CHECK_EQ(weft_init(&cfg), -ENAMETOOLONG);
    /* "0" and "": no console */
    cfg.console = "0";
    CHECK_EQ(weft_init(&cfg), 0);
    weft_shutdown();
    rm_dir(dir);
}

/* weft-top's screen, in a detached tmux session against weft-httpd: the
 * header and a carrier row show (the capture is kept in
 * /tmp/weft-top-capture.txt); q quits, and so does Ctrl-C, and the
 * terminal is given back as it was (the shell after it finds its normal
 * screen and canonical mode with echo). */
static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(NULL);
    int st = system(cmd);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "(%s: status 0x%x)\n", cmd, st);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The pane's text now (a private tmux server: -L, nobody's sessions touched). */
static char *capture(const char *srv) {
    char path[] = "/tmp/weft-test-capture-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    sh("tmux -L %s capture-pane -p -t %s > %s 2>/dev/null", srv, srv, path);
    unlink(path);
    return slurp_fd(fd);
}

/* Captures until every string shows; fails after IO_TIMEOUT_MS. */
__attribute__((sentinel)) static char *capture_showing(const char *srv, ...) {
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    for (;;) {
        char *cap = capture(srv);
        const char *missing = NULL;
        va_list ap;
        va_start(ap, srv);
        for (const char *n; !missing && (n = va_arg(ap, const char *));)
            if (!strstr(cap, n)) missing = n;
        va_end(ap);
        if (!missing) return cap;
        if (now_ms() > until) {
            sh("tmux -L %s kill-server 2>/dev/null", srv);
            FAIL("the tmux pane never showed '%s':\n%s", missing, cap);
        }
        free(cap);
        sleep_ms(100);
    }
}

/* weft-top on a program weft did not compile, run by weft-run with a
 * console: its main is foreign, has its own TLS, and waits in fgets --
 * stdio's own read(2), which the system call trap makes for it -- so
 * weft-top counts it in its "foreign code" line and lists the wait as
 * "trapped read" at the program's fgets (the dump's JSON: "foreign",
 * "own_tls", "trapped":{"call":"read","fd":0}). */
TEST(top_shows_a_foreign_program_waiting_in_a_trapped_call) {
    NEED_APPS();
#ifndef WEFT_RUN_PATH
    SKIP("built without weft-run");
#else
    if (TEST_SANITIZED) SKIP("sanitizer build: no own TLS or trap there, nor a preloadable libweft-hook.so");
    char sock[64];
    snprintf(sock, sizeof sock, "/tmp/weft-test-foreign-%d.sock", (int)getpid());
    unlink(sock);
    char con[96];
    snprintf(con, sizeof con, "WEFT_CONSOLE=%s", sock);
    int in[2];
    CHECK_EQ(pipe2(in, O_CLOEXEC), 0);
    const char *argv[] = {WEFT_RUN_PATH, "--carriers", "1", WEFT_FOREIGN_FGETS_PATH, NULL};
    const char *env[] = {con, "WEFT_TRAP", "WEFT_OWN_TLS", "WEFT_HOOK", NULL};
    launch l;
    launch_opts o = {.in = LAUNCH_FD, .in_fd = in[0], .out = LAUNCH_PIPE, .env = env, .deathsig = SIGKILL};
    CHECK_EQ(launch_start(&l, (char *const *)argv, &o), 0);
    close(in[0]);
    if (!launch_wait_line(&l, "ready", now_ms() + IO_TIMEOUT_MS)) FAIL("the program did not say ready");
    /* its snapshot, taken again until main is in its trapped read */
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    const json *main_v = NULL;
    json_doc *d = NULL;
    char *out = NULL;
    for (;;) {
        int st;
        out = run_top(&st, "--once", "--json", sock, NULL);
        const json *root;
        char err[160];
        if (WIFEXITED(st) && !WEXITSTATUS(st) && (d = json_parse(out, strlen(out), &root, err, sizeof err))) {
            const json *vts = json_path(root, "weft_dump.vthreads");
            for (const json *v = vts ? vts->first : NULL; v; v = v->next)
                if (!strcmp(json_str(json_get(v, "name"), ""), "main") && json_get(v, "trapped")) main_v = v;
            if (main_v) break;
            json_free(d);
            d = NULL;
        }
        if (now_ms() > until) FAIL("main never showed a trapped wait:\n%s", out);
        free(out);
        sleep_ms(50);
    }
    CHECK(json_get(main_v, "foreign") != NULL);
    CHECK(json_get(main_v, "own_tls") != NULL);
    CHECK(json_num(json_get(main_v, "trapped_calls"), 0) >= 1);
    const json *tr = json_get(main_v, "trapped");
    CHECK(!strcmp(json_str(json_get(tr, "call"), ""), "read"));
    CHECK_EQ((int)json_num(json_get(tr, "fd"), -1), 0);
    CHECK(strstr(json_str(json_get(main_v, "site"), ""), "foreign_fgets.c:") != NULL);
    json_free(d);
    free(out);
    /* the screen, drawn once */
    int st;
    out = run_top(&st, "--once", sock, NULL);
    printf("%s", out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(out, "foreign code: 1 vthread foreign, 1 with own TLS, 1 parked in trapped calls") != NULL);
    CHECK(strstr(out, "trapped read") != NULL);
    CHECK(strstr(out, "foreign_fgets.c:") != NULL);
    free(out);
    /* a line, and it ends as it should (launch_wait_line goes on past the
     * ready line) */
    CHECK_EQ(write(in[1], "go\n", 3), 3);
    close(in[1]);
    if (!launch_wait_line(&l, "got go", now_ms() + IO_TIMEOUT_MS)) FAIL("the program did not read its line");
    CHECK_EQ(launch_reap(&l, IO_TIMEOUT_MS), 1);
    CHECK(WIFEXITED(l.status) && WEXITSTATUS(l.status) == 0);
    launch_close(&l);
#endif
}

TEST(top_renders_in_tmux) {
    NEED_APPS();
    if (sh("command -v tmux >/dev/null 2>&1") != 0) SKIP("tmux is not installed (scripts/deps.sh installs it)");
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "tmux");
    snprintf(sock, sizeof sock, "%s/httpd.sock", dir);
    server s;
    server_start(&s, sock, "--delay-ms", "60000", "--drain-timeout", "1", NULL);
    pid_t cl = clients_start(s.port, 4);
    char srv[64];
    for (int round = 0; round < 2; round++) {
        /* a server of its own per round: one just killed may still answer */
        snprintf(srv, sizeof srv, "weft-top-test-%d-%d", (int)getpid(), round);
        /* weft-top, then what the terminal looks like after it */
        CHECK_EQ(sh("tmux -L %s new-session -d -s %s -x 132 -y 40 "
                    "\"%s %d; echo weft-top-ended; stty -a | tr ' ;' '\\n\\n' | grep -qx icanon && "
                    "stty -a | tr ' ;' '\\n\\n' | grep -qx echo && echo tty-restored; sleep 60\"",
                    srv, srv, WEFT_TOP_PATH, (int)s.pid),
                 0);
        /* the header, the carriers' heading, carrier 0's row, the sleepers */
        char *cap = capture_showing(srv, "weft-top  pid", "CARRIER GROUP STATE", "\n      0     0 ",
                                    "VTHREADS BY CALL SITE", "SLOWEST SLEEPERS 4 asleep", NULL);
        /* and a later screen: the rates, which need two snapshots ("-/s" before) */
        int64_t until = now_ms() + IO_TIMEOUT_MS;
        while (strstr(cap, "(-/s)")) {
            if (now_ms() > until) FAIL("weft-top never showed a second snapshot's rates:\n%s", cap);
            free(cap);
            sleep_ms(100);
            cap = capture_showing(srv, "weft-top  pid", "CARRIER GROUP STATE", NULL);
        }
        if (round == 0) {
            printf("%s", cap);
            FILE *f = fopen("/tmp/weft-top-capture.txt", "w");
            CHECK(f != NULL);
            fputs(cap, f);
            fclose(f);
        }
        free(cap);
        /* round 0: q quits; round 1: Ctrl-C (SIGINT) */
        CHECK_EQ(sh("tmux -L %s send-keys -t %s %s", srv, srv, round ? "C-c" : "q"), 0);
        cap = capture_showing(srv, "weft-top-ended", "tty-restored", NULL);
        CHECK(strstr(cap, "CARRIER GROUP STATE") == NULL); /* the alternate screen is gone */
        free(cap);
        sh("tmux -L %s kill-server 2>/dev/null", srv);
    }
    clients_stop(cl);
    server_stop(&s, 1);
    rm_dir(dir);
}

/* A section that fills the screen keeps the title row (the last row's
 * newline used to scroll it off), and the sleepers' list says how many it
 * left out (issue 25): 120x30, 300 connections asleep in the delay. */
TEST(top_keeps_its_title_row_when_a_section_fills_the_screen) {
    NEED_APPS();
    if (sh("command -v tmux >/dev/null 2>&1") != 0) SKIP("tmux is not installed (scripts/deps.sh installs it)");
    char dir[128], sock[192], srv[64];
    make_dir(dir, sizeof dir, "tmux-full");
    snprintf(sock, sizeof sock, "%s/httpd.sock", dir);
    server s;
    server_start(&s, sock, "--delay-ms", "60000", "--drain-timeout", "1", NULL);
    pid_t cl = clients_start(s.port, 300);
    snprintf(srv, sizeof srv, "weft-top-full-%d", (int)getpid());
    CHECK_EQ(sh("tmux -L %s new-session -d -s %s -x 120 -y 30 \"%s %d; sleep 60\"", srv, srv, WEFT_TOP_PATH,
                (int)s.pid),
             0);
    char *cap = capture_showing(srv, "SLOWEST SLEEPERS 300 asleep", "more sleepers", NULL);
    if (strncmp(cap, "weft-top  pid", 13) != 0) FAIL("the pane's first row is not the title:\n%s", cap);
    free(cap);
    sh("tmux -L %s kill-server 2>/dev/null", srv);
    clients_stop(cl);
    server_stop(&s, 1);
    rm_dir(dir);
}

/* ---- one slow client, a full console, refusals, weft-top's messages -------- */

/* A vthread asleep for the test's length: it makes every snapshot large
 * (its backtrace is in the dump).  A detached daemon: weft_shutdown
 * abandons it, after the console has stopped -- so no snapshot ever reads
 * one as it wakes (see the top comment, on TSan). */
static void *sleeper(void *a) {
    (void)a;
    weft_sleep(3600LL * 1000000000);
    return NULL;
}

/* n sleepers, waited for until they have all parked (the counters are read
 * without synchronising: polled until they say so). */
static void sleepers_start(int n) {
    weft_stats s0, s;
    weft_stats_get(&s0);
    weft_thread_opts at = {.name = "sleeper", .daemon = 1};
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(NULL, sleeper, NULL, &at), 0);
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    do {
        sleep_ms(5);
        weft_stats_get(&s);
        if (now_ms() > until) FAIL("%d sleepers did not park", n);
    } while (s.parks < s0.parks + (uint64_t)n);
}

/* A connection to path made without waiting; -1 while its backlog is
 * full. */
static int connect_nowait(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    CHECK(fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (errno != EAGAIN) FAIL("connect %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Has the console closed fd (a client that reads nothing: poll tells
 * without reading)? */
static int closed_by_peer(int fd) {
    struct pollfd pf = {fd, POLLRDHUP, 0};
    return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The console sends to each client on its own: M clients that never read,
 * each replaced by a new one as soon as the console drops it (so that
 * there are always M), cost a client that reads nothing.  The snapshots
 * are made larger than a socket buffer (400 sleepers' backtraces), so a
 * non-reader's socket is full within its first snapshot.
 *
 * Why the counts cannot be met by a console that sends in turn, blocking:
 * every round of sends then waits for each non-reader (2 s each, its
 * timeout) before the next round -- 20 of them, or the 15 that fit beside
 * the reader under the old limit of 16 clients: 30 s or more a round --
 * and the reader gets at most one snapshot a round: its 3rd no sooner than
 * 2 rounds after its first, 60 s, the bound below.  A console with a
 * sender per client sends it one a second however many clients are stuck
 * (or one per dump, where a sanitizer makes a dump of 400 vthreads take
 * seconds): 3 take a few seconds. */
TEST(slow_client_costs_others_nothing) {
    DET_SKIP("counts snapshots against the real clock while vthreads sleep in virtual time");
    enum { M = 20, K = 3 };
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "slow");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock, .carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    sleepers_start(400);
    int rd = connect_path(sock); /* (first: a place for it under any limit) */
    CHECK(rd >= 0);
    int stuck[M];
    for (int i = 0; i < M; i++) {
        stuck[i] = connect_path(sock);
        CHECK(stuck[i] >= 0);
    }
    int64_t t0 = now_ms(), bound = 60000; /* the comment above */
    int got = 0, drops = 0;
    unsigned long long biggest = 0;
    char *buf = NULL;
    size_t cap = 0;
    while (got < K || !drops) {
        if (now_ms() - t0 > bound)
            FAIL("in %lld ms the reader got %d snapshots (%d wanted) and %d non-readers were dropped",
                 (long long)(now_ms() - t0), got, K, drops);
        for (int i = 0; i < M; i++) {
            if (stuck[i] >= 0 && closed_by_peer(stuck[i])) {
                close(stuck[i]);
                stuck[i] = -1;
                drops++;
            }
            /* (without waiting: a console that accepts nobody while it is
             * stuck in a send must not hold the reader's reads here) */
            if (stuck[i] < 0) stuck[i] = connect_nowait(sock);
        }
        if (got >= K) {
            sleep_ms(20);
            continue;
        }
        /* the reader: one frame at a time, waiting at most 100 ms for its line */
        struct pollfd pf = {rd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        char line[64];
        size_t n = 0;
        int64_t until = now_ms() + IO_TIMEOUT_MS;
        while (n < sizeof line - 1) {
            if (read_full(rd, line + n, 1, until) != 1) FAIL("the reader's connection ended");
            if (line[n++] == '\n') break;
        }
        line[n] = 0;
        unsigned long long bytes;
        if (sscanf(line, "weft-console 1 %llu", &bytes) != 1) FAIL("bad frame line '%s'", line);
        if (bytes > cap) {
            cap = bytes;
            buf = realloc(buf, cap);
            CHECK(buf != NULL);
        }
        size_t body = read_full(rd, buf, bytes, until);
        if (body != bytes)
            FAIL("the reader's snapshot %d: %zu bytes of %llu, then %s, %lld ms in", got + 1, body, bytes,
                 now_ms() < until ? "the end" : "nothing more", (long long)(now_ms() - t0));
        if (bytes > biggest) biggest = bytes;
        got++;
    }
    printf("the reader got %d snapshots (up to %llu bytes) in %lld ms while %d non-readers were dropped\n", got,
           biggest, (long long)(now_ms() - t0), drops);
    /* the premise: a snapshot does not fit a socket's buffer */
    CHECK(biggest > 2 * 212992ull);
    free(buf);
    close(rd);
    for (int i = 0; i < M; i++)
        if (stuck[i] >= 0) close(stuck[i]);
    weft_shutdown(); /* (the console stops first; the sleepers are abandoned) */
    rm_dir(dir);
}

/* The console's limit (console.c CON_MAX_CLIENTS), as its refusal says it. */
#define CON_MAX 64

/* The first line the console sends on fd, within the deadline ("" when it
 * closed the connection without one). */
static void first_line(int fd, char *line, size_t cap, int64_t until) {
    size_t n = 0;
    while (n < cap - 1 && read_full(fd, line + n, 1, until) == 1)
        if (line[n++] == '\n') break;
    line[n] = 0;
}

/* Connections that never read, kept at `n` for as long as the test runs:
 * one the console drops is replaced at once (keep_idle). */
static void keep_idle(int *fds, int n, const char *sock) {
    for (int i = 0; i < n; i++)
        if (fds[i] < 0 || closed_by_peer(fds[i])) {
            if (fds[i] >= 0) close(fds[i]);
            fds[i] = connect_path(sock);
            CHECK(fds[i] >= 0);
        }
}

/* Idle connections -- connected, never reading -- do not lock a reader out:
 * a newcomer when the console is full takes the place of the one that has
 * left its snapshots unread longest.  The idle ones are kept at the
 * console's limit throughout (each the console drops is replaced), and
 * snapshots are small (no vthreads: a socket buffer holds dozens), so a
 * console that only drops a client whose buffer is full would keep the
 * newcomer out for good. */
TEST(idle_clients_do_not_lock_out) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "idle");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    int idle[CON_MAX];
    for (int i = 0; i < CON_MAX; i++) idle[i] = -1;
    keep_idle(idle, CON_MAX, sock);
    int64_t t0 = now_ms(), until = t0 + 3 * (int64_t)IO_TIMEOUT_MS;
    int tries = 0, full = 0, closed = 0;
    for (;;) {
        if (now_ms() > until)
            FAIL("no place for a reader in %lld ms: %d tries, %d refused as full, %d closed without a word",
                 (long long)(now_ms() - t0), tries, full, closed);
        keep_idle(idle, CON_MAX, sock);
        int fd = connect_path(sock);
        CHECK(fd >= 0);
        tries++;
        char line[64];
        first_line(fd, line, sizeof line, now_ms() + 2000);
        if (!strncmp(line, "weft-console 1 ", 15)) {
            close(fd);
            break;
        }
        if (!strncmp(line, "weft-console full ", 18)) full++;
        else if (!*line) closed++;
        else FAIL("the console's first line: '%s'", line);
        close(fd);
        sleep_ms(100);
    }
    printf("a reader got in after %d tries in %lld ms (%d refused as full, %d closed)\n", tries,
           (long long)(now_ms() - t0), full, closed);
    for (int i = 0; i < CON_MAX; i++) close(idle[i]);
    weft_shutdown();
    rm_dir(dir);
}

/* Readers that keep the console full: a thread drains them all. */
typedef struct drainer {
    int fds[CON_MAX];
    _Atomic int stop;
    _Atomic int evicted; /* readers the console closed: starved of CPU > 2 s (a loaded machine) */
    pthread_t th;
} drainer;

static void *drain_main(void *arg) {
    drainer *d = arg;
    char junk[65536];
    while (!atomic_load(&d->stop)) {
        struct pollfd pf[CON_MAX];
        for (int i = 0; i < CON_MAX; i++) pf[i] = (struct pollfd){d->fds[i], POLLIN, 0};
        if (poll(pf, CON_MAX, 50) <= 0) continue;
        for (int i = 0; i < CON_MAX; i++)
            if (pf[i].revents & (POLLIN | POLLHUP)) {
                ssize_t k = read(d->fds[i], junk, sizeof junk);
                if (k == 0) { /* closed: its place went to a newcomer */
                    atomic_fetch_add(&d->evicted, 1);
                    close(d->fds[i]);
                    d->fds[i] = -1;
                }
            }
    }
    return NULL;
}

/* stderr into a file for the rest of the test (the console writes there);
 * returns the file's descriptor, for slurp. */
static int capture_stderr(void) {
    char path[] = "/tmp/weft-test-console-err-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    fflush(stderr);
    CHECK(dup2(fd, 2) == 2);
    return fd;
}

static char *read_all(int fd) {
    off_t len = lseek(fd, 0, SEEK_END);
    char *b = malloc((size_t)len + 1);
    CHECK(b != NULL);
    CHECK(pread(fd, b, (size_t)len, 0) == len);
    b[len] = 0;
    return b;
}

/* The console's refusal lines in err: how many lines there are about
 * refusals, and how many refusals they account for (one each, plus the
 * "N more" summaries). */
static void count_refusals(const char *err, int *lines, long *refused) {
    *lines = 0;
    *refused = 0;
    for (const char *p = err; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char l[512];
        snprintf(l, sizeof l, "%.*s", (int)(len < sizeof l ? len : sizeof l - 1), p);
        unsigned n;
        if (strstr(l, "weft: console: ") && strstr(l, "refused")) {
            (*lines)++;
            if (strstr(l, " more connection") && sscanf(l, "weft: console: %u more connection", &n) == 1)
                *refused += n;
            else (*refused)++;
        }
        p = nl ? nl + 1 : NULL;
    }
}

/* Waits until the console has logged `want` refusals (the summary comes
 * CON_LOG_NS after the last line), then checks that the log took at most
 * about one line a second: lines <= 2 per second that passed, + 2. */
static void check_refusal_log(int errfd, long want, int64_t t0) {
    int64_t until = now_ms() + IO_TIMEOUT_MS;
    int lines;
    long refused;
    for (;;) {
        char *err = read_all(errfd);
        count_refusals(err, &lines, &refused);
        free(err);
        if (refused >= want || now_ms() > until) break;
        sleep_ms(50);
    }
    int64_t secs = (now_ms() - t0) / 1000 + 1;
    printf("%ld refusals in %d lines over %lld s\n", refused, lines, (long long)secs);
    if (refused != want || lines > 2 * secs + 2) {
        char *err = read_all(errfd);
        printf("the log (its first 2,000 bytes):\n%.2000s\n", err);
        free(err);
    }
    if (refused != want) {
        printf("the console's log accounts for %ld refusals, not %ld\n", refused, want);
        FAIL("the console's log accounts for %ld refusals, not %ld", refused, want);
    }
    if (lines > 2 * secs + 2) {
        printf("%d lines about refusals in %lld s\n", lines, (long long)secs);
        FAIL("%d lines about refusals in %lld s", lines, (long long)secs);
    }
}

/* A full console of readers: a newcomer is told so ("weft-console full
 * N") before the console closes it, weft-top says the console is full,
 * and a flood of such newcomers is logged once a second, not once each. */
TEST(full_console_says_so) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "full");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    int errfd = capture_stderr();
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    drainer *d = calloc(1, sizeof *d);
    CHECK(d != NULL);
    for (int i = 0; i < CON_MAX; i++) {
        d->fds[i] = connect_path(sock);
        CHECK(d->fds[i] >= 0);
    }
    CHECK_EQ(pthread_create(&d->th, NULL, drain_main, d), 0);
    int64_t t0 = now_ms();
    /* the raw refusal */
    int fd = connect_path(sock);
    CHECK(fd >= 0);
    char line[64];
    first_line(fd, line, sizeof line, now_ms() + IO_TIMEOUT_MS);
    char want[64];
    snprintf(want, sizeof want, "weft-console full %d\n", CON_MAX);
    if (strcmp(line, want)) { /* (said on stdout too: stderr is the console's log now) */
        printf("a newcomer to a full console got '%s'\n", line);
        FAIL("a newcomer to a full console got '%s'", line);
    }
    char b;
    CHECK(read_full(fd, &b, 1, now_ms() + IO_TIMEOUT_MS) == 0); /* and then the end */
    close(fd);
    long refused = 1;
    /* weft-top's word for it (tried again if it got in: a reader starved
     * of CPU for 2 s lost its place to it) */
    for (int tries = 0; HAVE_APPS && tries < 5; tries++) {
        char path[] = "/tmp/weft-test-top-err-XXXXXX";
        int ef = mkstemp(path);
        CHECK(ef >= 0);
        unlink(path);
        const char *argv[] = {WEFT_TOP_PATH, "--once", "--json", sock, NULL};
        launch l;
        top_start(&l, argv, -1, ef, 0);
        launch_reap(&l, -1);
        int st = l.status;
        char *msg = slurp_fd(ef);
        printf("weft-top: %s", msg);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            free(msg);
            continue;
        }
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
        CHECK(strstr(msg, "is full") != NULL);
        CHECK(strstr(msg, "64 clients") != NULL);
        free(msg);
        refused++;
        break;
    }
    /* a flood */
    enum { FLOOD = 2000 };
    for (int i = 0; i < FLOOD; i++) {
        int f = connect_path(sock);
        CHECK(f >= 0);
        close(f);
    }
    refused += FLOOD;
    atomic_store(&d->stop, 1);
    pthread_join(d->th, NULL);
    if (atomic_load(&d->evicted)) printf("(%d readers lost their place)\n", atomic_load(&d->evicted));
    check_refusal_log(errfd, refused - atomic_load(&d->evicted), t0);
    for (int i = 0; i < CON_MAX; i++)
        if (d->fds[i] >= 0) close(d->fds[i]);
    free(d);
    weft_shutdown();
    rm_dir(dir);
}

/* As root: a flood of connections from another uid is refused and logged
 * once a second (with the count of the rest), not once each. */
TEST(refusals_logged_once_a_second) {
    if (geteuid() != 0) SKIP("needs root to become a second uid (nobody, 65534)");
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "flood");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    int errfd = capture_stderr();
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(chmod(dir, 0755), 0);
    CHECK_EQ(chmod(sock, 0666), 0);
    enum { FLOOD = 5000 };
    int64_t t0 = now_ms();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) _exit(10);
        for (int i = 0; i < FLOOD; i++) {
            int fd = connect_path(sock);
            if (fd < 0) _exit(11);
            close(fd);
        }
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the second uid's flood ended with 0x%x", st);
    check_refusal_log(errfd, FLOOD, t0);
    weft_shutdown();
    rm_dir(dir);
}

/* weft-top run as uid 65534 against the console at sock: its exit status
 * and what it said on stderr (the caller frees). */
static char *top_as_nobody(const char *sock, int *status) {
    char path[] = "/tmp/weft-test-top-err-XXXXXX";
    int ef = mkstemp(path);
    CHECK(ef >= 0);
    unlink(path);
    const char *argv[] = {WEFT_TOP_PATH, "--once", "--json", sock, NULL};
    launch l;
    top_start(&l, argv, -1, ef, 1);
    launch_reap(&l, -1);
    *status = l.status;
    return slurp_fd(ef);
}

/* weft-top says why it cannot watch a console: a directory it may not
 * enter, a socket whose mode shuts it out, or another user's console that
 * closed the connection on it -- each in its own words, none of them a
 * guess. */
TEST(top_says_why_refused) {
    NEED_APPS();
    if (geteuid() != 0) SKIP("needs root to become a second uid (nobody, 65534)");
    if (access(WEFT_TOP_PATH, X_OK) < 0) SKIP("weft-top cannot be run");
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "why");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    weft_runtime_opts cfg = {.console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    /* (is weft-top where nobody may run it?) */
    int st;
    CHECK_EQ(chmod(dir, 0755), 0);
    CHECK_EQ(chmod(sock, 0666), 0);
    char *msg = top_as_nobody(sock, &st);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) SKIP("uid 65534 cannot run %s", WEFT_TOP_PATH);
    /* another user's console: connected, closed without a byte */
    printf("open to all: %s", msg);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(msg, "runs as uid 0") != NULL);
    CHECK(strstr(msg, "serves only its owner and root") != NULL);
    free(msg);
    /* the socket's mode */
    CHECK_EQ(chmod(sock, 0600), 0);
    msg = top_as_nobody(sock, &st);
    printf("socket 0600: %s", msg);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(msg, "it is uid 0's console (mode 0600)") != NULL);
    free(msg);
    /* the directory */
    CHECK_EQ(chmod(dir, 0700), 0);
    msg = top_as_nobody(sock, &st);
    printf("directory 0700: %s", msg);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(msg, "may not enter its directory") != NULL);
    CHECK(strstr(msg, "mode 0700") != NULL);
    free(msg);
    weft_shutdown();
    rm_dir(dir);
}

/* A console of the test's own making: weft-top --once against it gets the
 * snapshot `body`; returns weft-top's output (the caller frees). */
static char *top_on_snapshot(const char *body) {
    char dir[128], sock[192];
    make_dir(dir, sizeof dir, "fake");
    snprintf(sock, sizeof sock, "%s/c.sock", dir);
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(lfd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock);
    CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(lfd, 4), 0);
    char path[] = "/tmp/weft-test-top-out-XXXXXX";
    int of = mkstemp(path);
    CHECK(of >= 0);
    unlink(path);
    const char *argv[] = {WEFT_TOP_PATH, "--once", sock, NULL};
    launch l;
    top_start(&l, argv, of, -1, 0);
    struct pollfd pf = {lfd, POLLIN, 0};
    if (poll(&pf, 1, IO_TIMEOUT_MS) != 1) FAIL("weft-top did not connect");
    int c = accept(lfd, NULL, NULL);
    CHECK(c >= 0);
    char head[64];
    int k = snprintf(head, sizeof head, "weft-console 1 %zu\n", strlen(body));
    CHECK(write(c, head, (size_t)k) == k);
    CHECK(write(c, body, strlen(body)) == (ssize_t)strlen(body));
    launch_reap(&l, -1);
    int st = l.status;
    close(c);
    close(lfd);
    char *out = slurp_fd(of);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) FAIL("weft-top ended with 0x%x:\n%s", st, out);
    rm_dir(dir);
    return out;
}

/* weft-top draws what the snapshot says, consistently: the counters were
 * read before the dump listed the vthreads (more started in between), yet
 * the peak shown is never below the vthreads listed; and a call site that
 * has a function but no file:line (a release build's frame without line
 * information) shows the function, as the dump's text does, not "(no call
 * site)". */
TEST(top_draws_peak_and_sites_consistently) {
    NEED_APPS();
    const char *body =
        "{\"weft_console\":{\"version\":1,\"pid\":4242,\"uid\":0,\"program\":\"fake\",\"time_ns\":1,"
        "\"uptime_ns\":1000000000,\"window_ns\":0,\"io\":\"epoll\",\"injected\":0,"
        "\"stats\":{\"started\":3,\"live\":3,\"peak\":3,\"switches\":1,\"steals\":0,\"parks\":1,\"pinned\":0,"
        "\"hogs\":0,\"carriers\":1,\"spares\":0},\"carrier_counters\":[]},"
        " \"weft_dump\":{\"carrier_states\":[],\"groups\":[],\"executors\":[],\"containers\":[],\"vthreads\":["
        "{\"id\":1,\"name\":\"a\",\"state\":\"parked\",\"waiting_on\":\"io\",\"call\":\"weft_recv\","
        "\"since_ns\":5,\"site_function\":\"conn_main\"},"
        "{\"id\":2,\"name\":\"b\",\"state\":\"parked\",\"waiting_on\":\"io\",\"call\":\"weft_recv\","
        "\"since_ns\":5,\"site_function\":\"conn_main\"},"
        "{\"id\":3,\"name\":\"c\",\"state\":\"parked\",\"waiting_on\":\"sleep\",\"call\":\"weft_sleep\","
        "\"since_ns\":5,\"until_ns\":9,\"site\":\"app.c:12\",\"site_function\":\"nap\"},"
        "{\"id\":4,\"name\":\"d\",\"state\":\"parked\",\"waiting_on\":\"sleep\",\"call\":\"weft_sleep\","
        "\"since_ns\":5,\"until_ns\":9,\"site_function\":\"doze\"},"
        "{\"id\":5,\"name\":\"e\",\"state\":\"runnable\"}"
        "]}}\n";
    char *out = top_on_snapshot(body);
    printf("%s", out);
    CHECK(strstr(out, "vthreads 5:") != NULL);
    CHECK(strstr(out, "(started 5, peak 5)") != NULL);
    CHECK(strstr(out, "conn_main") != NULL);
    CHECK(strstr(out, "app.c:12 (nap)") != NULL);
    CHECK(strstr(out, "doze") != NULL);
    /* the one vthread with neither says so; the others do not */
    const char *p = strstr(out, "(no call site)");
    CHECK(p != NULL && strstr(p + 1, "(no call site)") == NULL);
    free(out);
}

/* ---- weft-load on a terminal and through a pipe ---------------------------- */

/* On a terminal weft-load redraws a progress line while the run goes on
 * (it used to print nothing until the end).  The server holds every
 * request a minute (--delay-ms), so the run is still going when the pane
 * is read: what shows is the live line, not a last one. */
TEST(load_shows_progress_on_a_terminal) {
    NEED_APPS();
    if (sh("command -v tmux >/dev/null 2>&1") != 0) SKIP("tmux is not installed (scripts/deps.sh installs it)");
    server s;
    server_start(&s, NULL, "--delay-ms", "60000", "--drain-timeout", "1", NULL);
    char srv[64];
    snprintf(srv, sizeof srv, "weft-load-test-%d", (int)getpid());
    CHECK_EQ(sh("tmux -L %s new-session -d -s %s -x 120 -y 30 "
                "\"env -u WEFT_DETERMINISTIC -u WEFT_TRACE %s -n 3 -c 3 --timeout 300 http://127.0.0.1:%d/; "
                "echo load-ended; sleep 60\"",
                srv, srv, WEFT_LOAD_PATH, s.port),
             0);
    char *cap = capture_showing(srv, "Benchmarking 127.0.0.1:", "weft-load: 0 of 3 requests (0%), 0 failed, 0 req/s, ",
                                NULL);
    printf("%s", cap);
    CHECK(strstr(cap, "load-ended") == NULL); /* live: the requests are all held */
    /* one line, redrawn in place: never a second progress row */
    const char *p = strstr(cap, "weft-load: 0 of 3");
    CHECK(strstr(p + 1, "weft-load: 0 of 3") == NULL);
    free(cap);
    sh("tmux -L %s kill-server 2>/dev/null", srv); /* weft-load ends on the hangup */
    server_stop(&s, 1);
}

/* Through a pipe the banner comes at once, before any response (it used to
 * come with the report at the end), and no progress line is drawn on a
 * stderr that is not a terminal. */
TEST(load_banner_comes_first_through_a_pipe) {
    NEED_APPS();
    server s;
    server_start(&s, NULL, "--delay-ms", "60000", "--drain-timeout", "1", NULL);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", s.port);
    char errpath[] = "/tmp/weft-test-load-err-XXXXXX";
    int errfd = mkstemp(errpath);
    CHECK(errfd >= 0);
    unlink(errpath);
    const char *argv[] = {WEFT_LOAD_PATH, "-n", "2", "-c", "2", "--timeout", "300", url, NULL};
    /* real time, as the server's (deterministic mode's virtual clock would
     * run the 300 s timeout out at once while every request is held) */
    const char *env[] = {"WEFT_DETERMINISTIC", "WEFT_TRACE", NULL};
    launch_opts o = {.out = LAUNCH_PIPE, .err = LAUNCH_FD, .err_fd = errfd, .deathsig = SIGKILL,
                     .alarm_s = IO_TIMEOUT_MS / 1000 * 2, .env = env};
    launch l;
    int e = launch_start(&l, (char *const *)argv, &o);
    if (e < 0) FAIL("start %s: %s", argv[0], strerror(-e));
    const char *line = launch_wait_line(&l, "Benchmarking 127.0.0.1:", now_ms() + IO_TIMEOUT_MS);
    if (!line) FAIL("no banner through the pipe; it printed: '%s'", l.buf);
    CHECK(strstr(l.buf, "This is weft-load ") == l.buf); /* the first line */
    CHECK_EQ(launch_reap(&l, 0), 0);                     /* still running: every request is held */
    sleep_ms(600); /* past two of a terminal's redraws */
    CHECK_EQ(launch_reap(&l, 0), 0);
    CHECK(launch_stop(&l, SIGTERM, IO_TIMEOUT_MS) >= 0);
    char *err = slurp_fd(errfd);
    CHECK(strstr(err, "requests (") == NULL && strchr(err, '\r') == NULL);
    free(err);
    launch_close(&l);
    server_stop(&s, 1);
}
