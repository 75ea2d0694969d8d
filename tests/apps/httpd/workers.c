/*
 * test_httpd: --workers N (the supervisor and its worker processes on
 * SO_REUSEPORT sockets, apps/httpd/workers.c) and GET /healthz.
 *
 *  - the workers share the port, each in a process group of its own, and
 *    /healthz answers from memory, not from a docroot file of that name;
 *  - a worker killed with SIGKILL is restarted, and the supervisor says so;
 *    under load, only the requests it was serving fail;
 *  - SIGHUP, twice, under a steady load of new connections, replaces every
 *    worker without one failed request;
 *  - SIGTERM drains every worker: the requests in flight are answered, the
 *    supervisor exits 0 and leaves no worker behind;
 *  - --drain-notice: /healthz answers 503 first, alone and with workers
 *    (a worker that cannot start failing the start: cli_log.c).
 * Workers are found as the supervisor's children in /proc (this kernel has
 * no /proc/PID/task/TID/children).  Nothing here depends on how the kernel
 * spreads connections over the workers.
 */
#include "httpd_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

/* The supervisor's children, up to max; how many. */
static int children(pid_t parent, pid_t *out, int max) {
    DIR *d = opendir("/proc");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t k = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (k <= 0) continue;
        buf[k] = 0;
        char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        char state;
        long ppid;
        if (!rp || sscanf(rp + 1, " %c %ld", &state, &ppid) != 2) continue;
        if (ppid == parent && state != 'Z') out[n++] = (pid_t)pid;
    }
    closedir(d);
    return n;
}

static int has_pid(const pid_t *set, int n, pid_t p) {
    for (int i = 0; i < n; i++)
        if (set[i] == p) return 1;
    return 0;
}

/* Waits up to ms for want children, none of them in avoid[0..na); 1 if so. */
static int wait_children(pid_t parent, int want, const pid_t *avoid, int na, int ms, pid_t *out) {
    int64_t until = now_ms() + ms;
    do {
        pid_t k[64];
        int n = children(parent, k, 64), fresh = 0;
        for (int i = 0; i < n; i++) fresh += !has_pid(avoid, na, k[i]);
        if (n == want && fresh == want) {
            if (out) memcpy(out, k, sizeof *k * (size_t)n);
            return 1;
        }
        sleep_ms(20);
    } while (now_ms() < until);
    return 0;
}

/* Reads what the supervisor wrote on fd (non-blocking) into buf, appended. */
static void drain_pipe(int fd, char *buf, size_t cap) {
    size_t at = strlen(buf);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0 || at + 1 >= cap) break;
        ssize_t k = read(fd, buf + at, cap - 1 - at);
        if (k <= 0) break;
        at += (size_t)k;
        buf[at] = 0;
    }
}

TEST(workers_share_the_port_and_answer_healthz) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    write_str(d.root, "healthz", "a file of that name, never served at /healthz\n");
    server s;
    server_start(&s, d.root, "--workers", "3", (const char *)NULL);
    pid_t w[64];
    if (!wait_children(s.pid, 3, NULL, 0, 10000 + SLACK_MS, w)) FAIL("no 3 workers under the supervisor");
    for (int i = 0; i < 3; i++) {
        if (getpgid(w[i]) != w[i]) FAIL("worker %d is not in a process group of its own", (int)w[i]);
    }
    for (int i = 0; i < 30; i++) check_alive(s.port);
    resp r;
    get_path(s.port, "/healthz", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "ok\n");
    CHECK_HDR(&r, "Content-Type", "text/plain");
    resp_free(&r);
    client c;
    cl_open(&c, s.port);
    cl_sends(&c, "HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz?probe=1 HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 1);
    CHECK_STATUS(&r, 200);
    CHECK(r.body_len == 0);
    resp_free(&r);
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "ok\n");
    resp_free(&r);
    cl_close(&c);
    server_stop(&s);
    for (int i = 0; i < 3; i++)
        if (kill(w[i], 0) == 0) FAIL("worker %d outlived the supervisor", (int)w[i]);
}

TEST(worker_killed_is_restarted) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    int e[2];
    CHECK(pipe2(e, O_CLOEXEC) == 0);
    child_stderr = e[1];
    server s;
    server_start(&s, d.root, "--workers", "2", (const char *)NULL);
    child_stderr = -1;
    close(e[1]);
    pid_t w[64];
    if (!wait_children(s.pid, 2, NULL, 0, 10000 + SLACK_MS, w)) FAIL("no 2 workers");
    CHECK(kill(w[0], SIGKILL) == 0);
    pid_t gone[1] = {w[0]}, now[64];
    if (!wait_children(s.pid, 2, gone, 1, 10000 + SLACK_MS, now)) FAIL("the killed worker was not replaced");
    if (!has_pid(now, 2, w[1])) FAIL("the other worker did not go on");
    for (int i = 0; i < 20; i++) check_alive(s.port);
    static char err[16384];
    err[0] = 0;
    int64_t until = now_ms() + 5000;
    while (!strstr(err, "killed by signal 9") && now_ms() < until) {
        drain_pipe(e[0], err, sizeof err);
        sleep_ms(10);
    }
    if (!strstr(err, "killed by signal 9") || !strstr(err, "starting another"))
        FAIL("the supervisor did not say a worker died and was restarted: %s", err);
    server_stop(&s);
    close(e[0]);
}

/* ---- a steady load of new connections, counting what fails ---------------- */

typedef struct load {
    int port;
    atomic_int stop;
    atomic_long ok, failed;
    pthread_mutex_t why_lock; /* the client threads fail at once at times: why is shared */
    char why[256];            /* the last failure's reason (read once the threads are joined) */
} load;

/* One GET /hello.txt on a new connection ("Connection: close"): 1 if it was
 * answered 200 with the body, else 0 and the reason in why (the caller's). */
static int one_request(int port, char *why, size_t wn) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return snprintf(why, wn, "socket: %s", strerror(errno)), 0;
    struct timeval tv = {.tv_sec = IO_TIMEOUT_MS / 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char req[] = "GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    char buf[2048];
    size_t got = 0;
    int ok = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        snprintf(why, wn, "connect: %s", strerror(errno));
    } else if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof req - 1)) {
        snprintf(why, wn, "send: %s", strerror(errno));
    } else {
        for (;;) {
            ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
            if (k <= 0) {
                if (k < 0) snprintf(why, wn, "recv: %s", strerror(errno));
                break;
            }
            got += (size_t)k;
            if (got == sizeof buf - 1) break;
        }
        buf[got] = 0;
        ok = !strncmp(buf, "HTTP/1.1 200", 12) && strstr(buf, "\r\n\r\n" HELLO_BODY);
        if (!ok && got) snprintf(why, wn, "answer: %.60s", buf);
        else if (!ok && !*why) snprintf(why, wn, "closed without an answer");
    }
    close(fd);
    return ok;
}

static void *load_main(void *arg) {
    load *L = arg;
    while (!atomic_load(&L->stop)) {
        char why[256] = "";
        if (one_request(L->port, why, sizeof why)) {
            atomic_fetch_add(&L->ok, 1);
        } else {
            atomic_fetch_add(&L->failed, 1);
            pthread_mutex_lock(&L->why_lock);
            snprintf(L->why, sizeof L->why, "%s", why);
            pthread_mutex_unlock(&L->why_lock);
        }
    }
    return NULL;
}

/* n client threads of load_main against port, and their end (joined) */
static void load_start(load *L, int port, pthread_t *t, int n) {
    L->port = port;
    for (int i = 0; i < n; i++) CHECK(pthread_create(&t[i], NULL, load_main, L) == 0);
}
static void load_stop(load *L, pthread_t *t, int n) {
    atomic_store(&L->stop, 1);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

TEST(sighup_replaces_workers_under_load) {
    WITH_SERVER(d, s, "--workers", "2");
    pid_t first[64], second[64], third[64];
    if (!wait_children(s.pid, 2, NULL, 0, 10000 + SLACK_MS, first)) FAIL("no 2 workers");
    static load L = {.why_lock = PTHREAD_MUTEX_INITIALIZER};
    enum { CLIENTS = 4 };
    pthread_t t[CLIENTS];
    load_start(&L, s.port, t, CLIENTS);
    sleep_ms(200);
    /* twice: every worker replaced, then every replacement replaced */
    CHECK(kill(s.pid, SIGHUP) == 0);
    if (!wait_children(s.pid, 2, first, 2, 20000 + 5 * SLACK_MS, second)) FAIL("SIGHUP did not replace both workers");
    CHECK(kill(s.pid, SIGHUP) == 0);
    if (!wait_children(s.pid, 2, second, 2, 20000 + 5 * SLACK_MS, third)) FAIL("a second SIGHUP did not replace both");
    sleep_ms(200);
    load_stop(&L, t, CLIENTS);
    long ok = atomic_load(&L.ok), failed = atomic_load(&L.failed);
    printf("%ld requests answered, %ld failed, across two SIGHUPs\n", ok, failed);
    if (failed) FAIL("%ld of %ld requests failed while the workers were replaced (last: %s)", failed, ok + failed, L.why);
    CHECK(ok > 0);
    check_alive(s.port);
    server_stop(&s);
}

/* The sockets (connections, and its slot's listening socket) a process holds. */
static int sockets_of(pid_t pid) {
    char dir[64], path[128], link[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k > 0) {
            link[k] = 0;
            n += !strncmp(link, "socket:", 7);
        }
    }
    closedir(d);
    return n;
}

/* kill -9 of a worker under load: it is restarted, and what is lost is at
 * most what that worker held -- each client thread has one request in
 * flight at a time, so no more than CLIENTS; the connections the kernel had
 * queued on its socket wait for the new worker. */
TEST(worker_kill_loses_only_its_connections) {
    WITH_SERVER(d, s, "--workers", "2");
    pid_t w[64], now[64];
    if (!wait_children(s.pid, 2, NULL, 0, 10000 + SLACK_MS, w)) FAIL("no 2 workers");
    static load L = {.why_lock = PTHREAD_MUTEX_INITIALIZER};
    enum { CLIENTS = 8 };
    pthread_t t[CLIENTS];
    load_start(&L, s.port, t, CLIENTS);
    sleep_ms(300);
    int held = sockets_of(w[0]) - 1; /* less its slot's listening socket */
    long before = atomic_load(&L.failed);
    CHECK(kill(w[0], SIGKILL) == 0);
    pid_t gone[1] = {w[0]};
    if (!wait_children(s.pid, 2, gone, 1, 10000 + SLACK_MS, now)) FAIL("the killed worker was not replaced");
    sleep_ms(300);
    load_stop(&L, t, CLIENTS);
    long ok = atomic_load(&L.ok), failed = atomic_load(&L.failed);
    printf("kill -9 of a worker holding %d connection(s) a moment before: %ld of %ld requests failed (%ld before it)\n",
           held, failed, ok + failed, before);
    if (before) FAIL("%ld requests failed before the kill (%s)", before, L.why);
    if (failed > CLIENTS) FAIL("%ld requests failed: more than the %d that can have been in flight (last: %s)", failed, CLIENTS, L.why);
    CHECK(ok > 0);
    check_alive(s.port);
    server_stop(&s);
}

TEST(sigterm_drains_every_worker) {
    WITH_SERVER(d, s, "--workers", "2", "--delay-ms", "500");
    pid_t w[64];
    if (!wait_children(s.pid, 2, NULL, 0, 10000 + SLACK_MS, w)) FAIL("no 2 workers");
    enum { K = 6 };
    client c[K];
    for (int i = 0; i < K; i++) {
        cl_open(&c[i], s.port);
        cl_sends(&c[i], "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    }
    /* every connection accepted by a worker before the signal (one still
     * in a socket's backlog when its worker drains is not served: a
     * loaded machine -- TSan, four tests at once -- took over 150 ms to
     * accept them all) */
    int64_t until = now_ms() + 10000 + SLACK_MS;
    int held = 0;
    while ((held = sockets_of(w[0]) + sockets_of(w[1]) - 2) < K) {
        if (now_ms() > until) FAIL("the workers accepted %d of %d connections in 10 s", held, K);
        sleep_ms(10);
    }
    sleep_ms(50);
    CHECK(kill(s.pid, SIGTERM) == 0);
    for (int i = 0; i < K; i++) {
        resp r;
        GET_RESPONSE(&c[i], &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, HELLO_BODY);
        resp_free(&r);
        CHECK_CLOSED(&c[i]);
        cl_close(&c[i]);
    }
    int st;
    if (!server_wait(&s, 10000 + SLACK_MS, &st)) {
        server_kill(&s, NULL);
        FAIL("the supervisor did not exit within 10 s of SIGTERM");
    }
    check_exit_status(st);
    launch_close(&s.l);
    for (int i = 0; i < 2; i++)
        if (kill(w[i], 0) == 0) FAIL("worker %d outlived the supervisor", (int)w[i]);
}

/* --drain-notice: at SIGTERM /healthz answers 503 at once while files are
 * still served; a second SIGTERM ends the notice and the server drains and
 * exits 0.  (A 60 s notice, ended by the signal: nothing here waits on it.)
 * Alone and with --workers (where the supervisor gives the notice by
 * SIGUSR2 to its workers). */
static void notice_then_drain(const char *workers) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    server s;
    if (workers) server_start(&s, d.root, "--drain-notice", "60", "--workers", workers, (const char *)NULL);
    else server_start(&s, d.root, "--drain-notice", "60", (const char *)NULL);
    pid_t w[64];
    if (workers && !wait_children(s.pid, atoi(workers), NULL, 0, 10000 + SLACK_MS, w)) FAIL("no workers");
    resp r;
    get_path(s.port, "/healthz", &r);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    CHECK(kill(s.pid, SIGTERM) == 0);
    /* every worker answers 503 once it took the notice: ask until enough
     * answers in a row say so (the kernel spreads connections over them) */
    int in_a_row = 0;
    int64_t until = now_ms() + 10000 + SLACK_MS;
    while (in_a_row < 20) {
        if (now_ms() > until) FAIL("/healthz did not answer 503 within 10 s of SIGTERM");
        get_path(s.port, "/healthz", &r);
        if (r.status == 503) {
            CHECK_BODY_STR(&r, "draining\n");
            CHECK_HDR(&r, "Connection", "close");
            in_a_row++;
        } else {
            CHECK_STATUS(&r, 200);
            in_a_row = 0;
            sleep_ms(10);
        }
        resp_free(&r);
    }
    for (int i = 0; i < 10; i++) check_alive(s.port); /* the notice still serves */
    CHECK(kill(s.pid, SIGTERM) == 0);                 /* ends the notice: the drain */
    int st;
    if (!server_wait(&s, 10000 + SLACK_MS, &st)) {
        server_kill(&s, NULL);
        FAIL("the server did not exit within 10 s of the second SIGTERM");
    }
    check_exit_status(st);
    launch_close(&s.l);
}

TEST(drain_notice_answers_healthz_503_first) { notice_then_drain(NULL); }

TEST(drain_notice_with_workers) { notice_then_drain("2"); }
