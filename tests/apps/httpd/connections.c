/*
 * test_httpd: connections -- the timeouts (slowloris in its forms, idle
 * keep-alive, a body's total deadline, the pool's queue deadline), clients
 * that reset, a thousand at once, the connection limit, running out of
 * file descriptors (shed, no spinning, the spare descriptor re-armed), and
 * the memory a burst leaves behind.
 */
#include "httpd_test.h"

/* ------------------------------------------------------------------------ */
/* timeouts                                                                  */
/* ------------------------------------------------------------------------ */

TEST(slowloris_header_timeout) {
    WITH_SERVER(d, s, "--header-timeout", "1");
    client c;
    cl_open(&c, s.port);
    int64_t t0 = now_ms();
    cl_sends(&c, "GET / HTTP/1.1\r\nHost: x\r\n");
    wait_cut_off(&c, t0, 3000 + SLACK_MS);
    cl_close(&c);
    check_alive(s.port);
    server_stop(&s);
}

TEST(slowloris_trickle) {
    WITH_SERVER(d, s, "--header-timeout", "1");
    client c;
    cl_open(&c, s.port);
    const char *head = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    int64_t t0 = now_ms();
    int bound = 3000 + SLACK_MS;
    for (size_t i = 0;; i++) {
        if (!head[i]) FAIL("the whole trickled head went in without a cut-off");
        if (send(c.fd, head + i, 1, MSG_NOSIGNAL) != 1) break; /* the server closed */
        struct pollfd pf = {c.fd, POLLIN, 0};
        if (poll(&pf, 1, 300) > 0) break; /* 408 or EOF */
        if (now_ms() - t0 > bound) FAIL("still trickling after %lld ms", (long long)(now_ms() - t0));
    }
    wait_cut_off(&c, t0, bound);
    cl_close(&c);
    check_alive(s.port);
    server_stop(&s);
}

/* The start of the next head arrives with the previous request (pipelined),
 * then nothing: the header timeout runs from those first bytes too. */
TEST(slowloris_pipelined_partial_head) {
    WITH_SERVER(d, s, "--header-timeout", "1", "--idle-timeout", "1");
    client c;
    cl_open(&c, s.port);
    int64_t t0 = now_ms();
    cl_sends(&c, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\nGET /b.txt HTTP/1.1\r\nHo");
    resp r;
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "AAA");
    resp_free(&r);
    wait_cut_off(&c, t0, 3000 + SLACK_MS);
    cl_close(&c);
    check_alive(s.port);
    server_stop(&s);
}

TEST(idle_keepalive_timeout) {
    WITH_SERVER(d, s, "--idle-timeout", "1");
    client c;
    resp r;
    cl_open(&c, s.port);
    cl_sends(&c, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    int64_t t0 = now_ms();
    int w = wait_closed(&c, 3000 + SLACK_MS);
    if (w != 1) FAIL("the idle connection was %s after %lld ms", w ? "answered" : "still open", (long long)(now_ms() - t0));
    cl_close(&c);
    /* a connection that never sends anything is idle too */
    cl_open(&c, s.port);
    t0 = now_ms();
    w = wait_closed(&c, 3000 + SLACK_MS);
    if (w != 1) FAIL("the silent connection was %s after %lld ms", w ? "answered" : "still open", (long long)(now_ms() - t0));
    cl_close(&c);
    check_alive(s.port);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* abrupt clients, many clients, the connection limit                        */
/* ------------------------------------------------------------------------ */

TEST(abrupt_resets) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    char *bp = pattern_file(&d, "big.bin", 3 << 20);
    free(bp);
    server s;
    server_start(&s, d.root, (const char *)NULL);
    for (int i = 0; i < 200; i++) { /* half a request, then RST */
        int fd = tcp_connect(s.port);
        send(fd, "GET /hello.txt HTTP/1.1\r\nHo", 27, MSG_NOSIGNAL);
        close_rst(fd);
    }
    for (int i = 0; i < 100; i++) { /* a whole request, RST before reading */
        int fd = tcp_connect(s.port);
        send(fd, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n", 36, MSG_NOSIGNAL);
        close_rst(fd);
    }
    for (int i = 0; i < 20; i++) { /* RST in the middle of a sendfile */
        int fd = tcp_connect(s.port);
        send(fd, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n", 34, MSG_NOSIGNAL);
        char b[4096];
        (void)!recv(fd, b, sizeof b, 0);
        close_rst(fd);
    }
    for (int i = 0; i < 20; i++) { /* a plain close with the response unread */
        int fd = tcp_connect(s.port);
        send(fd, "GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n", 34, MSG_NOSIGNAL);
        close(fd);
    }
    check_alive(s.port);
    resp r;
    get_path(s.port, "/", &r);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, INDEX_BODY);
    resp_free(&r);
    server_stop(&s);
}

TEST(thousand_concurrent_clients) {
    /* --header-timeout and --idle-timeout 60: over HTTPS each connection's
     * handshake must end within the first of its accept, and its first
     * request come within the second; a thousand handshakes at once, with
     * the front's thousand on the same CPUs, took longer than the defaults
     * (10 s, 15 s) under ASan on a loaded machine, and the last were cut (a
     * reset "after 0 bytes", or an end with none): the limits doing their
     * job, not what this tests */
    WITH_SERVER(d, s, "--header-timeout", "60", "--idle-timeout", "60");
    int n = 1000;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)n + 100 && rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < (rlim_t)n + 100 ? rl.rlim_max : (rlim_t)n + 100;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < (rlim_t)n + 100) {
        n = (int)rl.rlim_cur - 100;
        printf("RLIMIT_NOFILE %llu: %d clients only\n", (unsigned long long)rl.rlim_cur, n);
    }
    CHECK(n >= 100);
    int *fds = calloc((size_t)n, sizeof *fds);
    enum { CAP = 4096 };
    char(*bufs)[CAP] = calloc((size_t)n, CAP);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    struct pollfd *pf = calloc((size_t)n, sizeof *pf);
    CHECK(fds && bufs && lens && pf);
    /* all connected before any request, so all are live at once */
    for (int i = 0; i < n; i++) fds[i] = tcp_connect(s.port);
    for (int i = 0; i < n; i++) {
        const char *req = "GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        if (send(fds[i], req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) FAIL("send %d: %s", i, strerror(errno));
    }
    int open_n = n;
    int64_t until = now_ms() + 30000 + 10 * SLACK_MS;
    while (open_n > 0) {
        int k = 0;
        for (int i = 0; i < n; i++)
            if (fds[i] >= 0) pf[k++] = (struct pollfd){fds[i], POLLIN, 0};
        int left = (int)(until - now_ms());
        if (left <= 0) FAIL("%d of %d responses missing", open_n, n);
        int pr = poll(pf, (nfds_t)k, left);
        if (pr < 0 && errno == EINTR) continue;
        CHECK(pr >= 0);
        for (int j = 0; j < k; j++) {
            if (!pf[j].revents) continue;
            int i = 0;
            while (fds[i] != pf[j].fd) i++;
            ssize_t r = recv(fds[i], bufs[i] + lens[i], CAP - lens[i], MSG_DONTWAIT);
            if (r > 0) {
                lens[i] += (size_t)r;
                if (lens[i] == CAP) FAIL("client %d: response too long", i);
                continue;
            }
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
            if (r < 0) FAIL("client %d: %s after %zu bytes", i, strerror(errno), lens[i]);
            close(fds[i]);
            fds[i] = -1;
            open_n--;
        }
    }
    for (int i = 0; i < n; i++) {
        resp r;
        r.body = NULL;
        long k = parse_response(bufs[i], lens[i], &r, 0, 1);
        if (k <= 0) FAIL("client %d: bad response (%zu bytes): %.100s", i, lens[i], bufs[i]);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, INDEX_BODY);
        CHECK_EQ(k, lens[i]);
        resp_free(&r);
    }
    free(fds);
    free(bufs);
    free(lens);
    free(pf);
    server_stop(&s);
}

TEST(max_conns_limit) {
    WITH_SERVER(d, s, "--max-conns", "2");
    client a, b, c;
    resp r;
    cl_open(&a, s.port);
    cl_sends(&a, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&a, &r, 0);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    cl_open(&b, s.port);
    cl_sends(&b, "GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&b, &r, 0);
    CHECK_STATUS(&r, 200);
    resp_free(&r);
    /* a and b are idle keep-alive connections: the limit is reached */
    cl_open(&c, s.port); /* the kernel completes the handshake; the server must not take it */
    cl_sends(&c, "GET /c.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    int w = wait_closed(&c, 500);
    if (w != 0) FAIL("a third connection over --max-conns 2 was %s", w > 0 ? "closed" : "answered");
    cl_close(&a);
    int64_t t0 = now_ms();
    GET_RESPONSE(&c, &r, 0);
    CHECK_STATUS(&r, 200);
    CHECK_BODY_STR(&r, "CCCCC");
    resp_free(&r);
    int64_t took = now_ms() - t0;
    if (took > 3000 + SLACK_MS) FAIL("the freed slot was used after %lld ms", (long long)took);
    cl_close(&b);
    cl_close(&c);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* out of file descriptors                                                  */
/* ------------------------------------------------------------------------ */

/* Asks for /hello.txt every 100 ms until a 200 comes or ms pass; 1 if it
 * came.  After an episode out of descriptors the server may still be at
 * its limit for a while, however few it holds at one moment: the listen
 * backlog still has the episode's closed connections, and accepting them
 * fills the table again until they are read and closed.  Meanwhile a new
 * connection may be shed (closed, or answered 503), as it should be. */
static int serves_again(int port, int ms) {
    int64_t until = now_ms() + ms;
    for (int tries = 1;; tries++) {
        client c;
        cl_open(&c, port);
        cl_sends(&c, "GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        resp r;
        int rr = read_response(&c, &r, 0), got = rr == 1, status = got ? r.status : 0;
        int ok = got && r.status == 200 && r.body_len == strlen(HELLO_BODY) && memcmp(r.body, HELLO_BODY, r.body_len) == 0;
        if (got) resp_free(&r); /* a 503 while shedding has a body too */
        cl_close(&c);
        if (ok) return 1;
        if (now_ms() > until) {
            /* (what the last try got, for the failure's message) */
            fprintf(stderr, "serves_again: %d tries in %d ms; the last: %s %d\n", tries, ms,
                    got ? "status" : rr == 0 ? "closed before a byte," : "timed out or failed,", status);
            return 0;
        }
        sleep_ms(100);
    }
}

/* Out of file descriptors: the server sheds the newcomers it cannot hold
 * (closes them rather than leaving them hanging), does not spin, and
 * serves again once descriptors are free. */
TEST(emfile_sheds_without_spinning) {
    child_nofile = 48;
    WITH_SERVER(d, s, "--max-conns", "1000");
    child_nofile = 0;
    enum { N = 80 };
    int fds[N];
    for (int i = 0; i < N; i++) fds[i] = tcp_connect(s.port);
    sleep_ms(300);
    long long t0 = launch_proc_ticks(s.pid);
    sleep_ms(1000);
    long long t1 = launch_proc_ticks(s.pid);
    CHECK(t0 >= 0 && t1 >= 0);
    /* a spinning acceptor would use ~100 ticks a second */
    if (t1 - t0 > 30) FAIL("the server used %lld ticks in 1 s while out of descriptors", t1 - t0);
    /* some were shed: closed by the server, not left hanging */
    int shed = 0;
    for (int i = 0; i < N; i++) {
        struct pollfd pf = {fds[i], POLLIN, 0};
        char c;
        if (poll(&pf, 1, 0) == 1 && recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0) shed++;
    }
    /* (how many depends on timing: at least one must have been seen) */
    for (int i = 0; i < N; i++) close(fds[i]);
    /* the held connections end as their clients closed */
    if (!serves_again(s.port, 5000 + SLACK_MS)) {
        char who[160];
        describe_server(&s, who, sizeof who);
        FAIL("the server did not serve again after descriptors were freed (%s)", who);
    }
    if (shed == 0) FAIL("no connection was shed while out of descriptors");
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* a body's deadline, the pool's queue (issue 9)                            */
/* ------------------------------------------------------------------------ */

/* Sends one byte every 200 ms until the server ends the connection or ms
 * pass; returns 1 if it ended it. */
static int trickle_until_closed(client *c, int ms) {
    int64_t until = now_ms() + ms;
    while (now_ms() < until) {
        if (send(c->fd, "x", 1, MSG_NOSIGNAL) < 0) return 1; /* EPIPE, ECONNRESET */
        int w = wait_closed(c, 200);
        if (w == 1) return 1;
        if (w < 0) FAIL("bytes after the response: %.100s", c->buf);
    }
    return 0;
}

/* A request body must arrive whole within --body-timeout: a trickle of
 * bytes (each read well within the header timeout) cannot hold the
 * connection, nor, on pool:N, the worker. */
TEST(slow_body_total_deadline) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    const char *req = "GET /hello.txt HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n";
    FOR_MODELS("pool:2") {
        const char *const *models = all_models;
        server s;
        /* a per-read clock (the header timeout) would never fire */
        server_start(&s, d.root, "--model", models[m], "--header-timeout", "60", "--body-timeout", "1",
                     (const char *)NULL);
        client t[2];
        resp r;
        for (int i = 0; i < 2; i++) { /* on pool:2 these hold both workers */
            cl_open(&t[i], s.port);
            cl_sends(&t[i], req);
            GET_RESPONSE(&t[i], &r, 0); /* answered before the body is read */
            CHECK_STATUS(&r, 200);
            resp_free(&r);
        }
        if (!trickle_until_closed(&t[0], 15000 + 2 * SLACK_MS))
            FAIL("%s: a body trickled for 15 s was never cut off", models[m]);
        /* the second one stopped sending: cut off as well, and a newcomer
         * gets its worker */
        client c;
        cl_open(&c, s.port);
        cl_sends(&c, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        GET_RESPONSE(&c, &r, 0);
        CHECK_STATUS(&r, 200);
        CHECK_BODY_STR(&r, "AAA");
        resp_free(&r);
        CHECK_CLOSED(&t[1]);
        cl_close(&t[0]);
        cl_close(&t[1]);
        cl_close(&c);
        server_stop(&s);
    }
}

/* pool:N: a connection's clocks start at accept.  One queued behind busy
 * workers for its idle time is answered 503 (or closed) without a worker,
 * and a crowd of idle connections clears in one idle period, not one
 * period per N of them. */
TEST(pool_queue_deadline) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    server s;
    server_start(&s, d.root, "--model", "pool:1", "--idle-timeout", "1", (const char *)NULL);
    client a, b;
    resp r;
    cl_open(&a, s.port); /* holds the only worker: never idle for 1 s */
    cl_sends(&a, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    GET_RESPONSE(&a, &r, 0);
    resp_free(&r);
    cl_open(&b, s.port);
    cl_sends(&b, "GET /b.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    int64_t until = now_ms() + 15000 + 2 * SLACK_MS;
    int seen = 0;
    while (!seen && now_ms() < until) {
        cl_sends(&a, "GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
        GET_RESPONSE(&a, &r, 0);
        CHECK_STATUS(&r, 200);
        resp_free(&r);
        int w = wait_closed(&b, 200);
        if (w == 1) seen = 1;
        if (w < 0) {
            GET_RESPONSE(&b, &r, 0);
            CHECK_STATUS(&r, 503);
            resp_free(&r);
            seen = 1;
        }
    }
    if (!seen) FAIL("a connection queued behind a busy worker was kept for 15 s (idle timeout 1 s)");
    cl_close(&a);
    cl_close(&b);
    server_stop(&s);

    /* forty idle connections on two workers */
    server_start(&s, d.root, "--model", "pool:2", "--idle-timeout", "1", (const char *)NULL);
    enum { N = 40 };
    client m[N];
    for (int i = 0; i < N; i++) cl_open(&m[i], s.port);
    int closed[N] = {0}, nclosed = 0;
    until = now_ms() + 15000 + 2 * SLACK_MS;
    int64_t first = 0;
    while (nclosed < N) {
        int64_t t = now_ms();
        if (!first && t > until) FAIL("no idle connection was closed in 15 s (idle timeout 1 s)");
        /* from the first close on, all were due: 2 per second would take 20 s */
        if (first && t > first + 10000 + 2 * SLACK_MS)
            FAIL("%d of %d idle connections closed 10 s after the first", nclosed, N);
        for (int i = 0; i < N; i++) {
            if (closed[i]) continue;
            int w = wait_closed(&m[i], 0);
            if (w < 0) { /* a 503 is an answer too */
                GET_RESPONSE(&m[i], &r, 0);
                CHECK_STATUS(&r, 503);
                resp_free(&r);
                w = 1;
            }
            if (w == 1) {
                closed[i] = 1;
                nclosed++;
                if (!first) first = now_ms();
            }
        }
        sleep_ms(50);
    }
    for (int i = 0; i < N; i++) cl_close(&m[i]);
    server_stop(&s);
}

/* ------------------------------------------------------------------------ */
/* out of descriptors again (issue 9), memory after a burst                 */
/* ------------------------------------------------------------------------ */

/* Opens n connections; waits (up to ms) until at least one is closed by the
 * server (shed), then lets the server go on shedding (and racing for the
 * numbers it frees) for another linger_ms; returns how many were shed; the
 * fds stay in fds[]. */
static int shed_episode(int port, int *fds, int n, int ms, int linger_ms) {
    for (int i = 0; i < n; i++) fds[i] = tcp_connect(port);
    int64_t until = now_ms() + ms;
    int shed = 0;
    while (!shed && now_ms() < until) {
        for (int i = 0; i < n; i++) {
            struct pollfd pf = {fds[i], POLLIN, 0};
            char ch;
            if (poll(&pf, 1, 0) == 1 && recv(fds[i], &ch, 1, MSG_DONTWAIT) <= 0) shed++;
        }
        if (!shed) sleep_ms(50);
    }
    if (shed) sleep_ms(linger_ms);
    return shed;
}

/* A process that keeps k connections busy with HEAD requests for a file
 * too big for the cache (each one opens it): descriptors come and go in
 * the server all the time.  Killed by the caller (or with the test). */
static pid_t busy_clients(int port, int k) {
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    CHECK(pid >= 0);
    if (pid) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    static const char req[] = "HEAD /big.bin HTTP/1.1\r\nHost: t\r\n\r\n";
    int fd[16];
    for (int i = 0; i < k; i++) fd[i] = -1;
    for (;;) {
        for (int i = 0; i < k; i++) {
            if (fd[i] < 0) {
                fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                struct timeval tv = {0, 200000};
                setsockopt(fd[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                if (connect(fd[i], (struct sockaddr *)&a, sizeof a) < 0) {
                    close(fd[i]);
                    fd[i] = -1;
                    continue;
                }
            }
            char b[4096];
            if (send(fd[i], req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1 ||
                recv(fd[i], b, sizeof b, 0) <= 0) {
                close(fd[i]);
                fd[i] = -1;
            }
        }
        sleep_ms(1);
    }
}

/* Out of descriptors again and again, while other connections open files:
 * the spare descriptor the server gives up to shed load comes back, so
 * every episode sheds. */
TEST(emfile_spare_fd_rearmed) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    char big[160];
    snprintf(big, sizeof big, "%s/big.bin", d.root);
    int bf = open(big, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(bf >= 0 && ftruncate(bf, 1 << 20) == 0); /* over the cache's 64 KiB: opened per request */
    close(bf);
    enum { N = 600 };
    static int fds[N];
    FOR_MODELS("pool:4") {
        child_nofile = 256;
        server s;
        /* four acceptors shedding at once: each may take a number another
         * freed */
        server_start(&s, d.root, "--model", all_models[m], "--max-conns", "5000", "--carriers", "4",
                     (const char *)NULL);
        child_nofile = 0;
        pid_t busy = busy_clients(s.port, 2); /* fewer than pool:4 has workers */
        /* An episode can shed nothing when its first shed loses the freed
         * number to another thread: the reserve is then missing until a
         * descriptor is free, i.e. until the episode ends.  What must not
         * happen is that it stays lost: the last episodes shed. */
        int shed[4];
        for (int ep = 0; ep < 4; ep++) {
            shed[ep] = shed_episode(s.port, fds, N, (ep < 2 ? 4000 : 10000) + 2 * SLACK_MS, 1500);
            for (int i = 0; i < N; i++) close(fds[i]);
            /* the server lets go of them, then serves again (its sockets
             * and files: under ASan the monitor's spare carriers, each with
             * its own poller for good, held 103 anonymous inodes of 256) */
            int64_t until = now_ms() + 15000 + 2 * SLACK_MS;
            while (count_conn_fds(s.pid) > 96) {
                if (now_ms() > until) {
                    char what[1024];
                    describe_fds(s.pid, what, sizeof what);
                    FAIL("%s: the server still holds %d fds (%s)", all_models[m], count_fds(s.pid), what);
                }
                sleep_ms(50);
            }
            if (!serves_again(s.port, 15000 + 2 * SLACK_MS)) {
                char what[1024], who[160];
                describe_fds(s.pid, what, sizeof what);
                describe_server(&s, who, sizeof who);
                FAIL("%s: the server did not serve again after episode %d (%s; its fds: %s)", all_models[m], ep, who,
                     what);
            }
        }
        if (!shed[2] && !shed[3])
            FAIL("%s: nothing shed in the last two of four episodes out of descriptors (%d, %d, %d, %d)",
                 all_models[m], shed[0], shed[1], shed[2], shed[3]);
        kill(busy, SIGKILL);
        waitpid(busy, NULL, 0);
        server_stop(&s);
    }
}

/* After a burst of connections the virtual model gives its stacks' memory
 * back once idle (the async model its receive buffers): the resident size
 * falls at least half of the way back from the peak (without it a server
 * keeps the burst's stacks for good: ~100 % of the growth).  Half, not the
 * three quarters this asked before: how much more than the stacks comes
 * back (malloc's free pages, the second round's fragmentation) depends on
 * the machine's load -- a loaded CI-style run kept 27,320 kB of 81,604 where
 * three quarters wanted 22,861, and an earlier one 20,052 of 65,856 where it
 * wanted 19,406; alone both pass.  The sanitizers keep shadow memory for
 * every page ever touched, so there the test checks only that the server
 * still serves. */
TEST(rss_returned_after_burst) {
    NEED_SERVER();
    docroot d;
    make_root(&d);
    server s;
    /* every connection lives through the delay: all their vthreads at once;
     * stacks given back after a 2 s lull instead of the default 10 s, so
     * that the two rounds fit the harness's time */
    setenv("WEFT_STACK_IDLE_MS", "2000", 1);
    server_start(&s, d.root, "--delay-ms", "1000", (const char *)NULL);
    unsetenv("WEFT_STACK_IDLE_MS");
    /* over TLS each connection costs both sides a handshake besides
     * (tls_front's thread and the server's): half as many there, where a
     * loaded CI-style run took over the harness's 5 s per response */
    int n = TEST_SANITIZED ? 200 : test_tls() ? 1500 : 3000;
    int *fds = calloc((size_t)n, sizeof *fds);
    CHECK(fds != NULL);
    check_alive(s.port);
    long base = launch_proc_status(s.pid, "VmRSS");
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++) fds[i] = tcp_connect(s.port);
        const char *req = "GET /index.html HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
        for (int i = 0; i < n; i++)
            if (send(fds[i], req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req)) FAIL("send: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            client c = {.fd = fds[i], .cap = 4096};
            c.buf = malloc(c.cap);
            resp r;
            GET_RESPONSE(&c, &r, 0);
            CHECK_STATUS(&r, 200);
            resp_free(&r);
            cl_close(&c);
        }
        long peak = launch_proc_status(s.pid, "VmHWM");
        CHECK(base > 0 && peak > 0);
        if (TEST_SANITIZED) continue;
        if (peak - base < 10000) FAIL("the burst added only %ld kB (from %ld kB): no burst to give back", peak - base, base);
        long want = base + (peak - base) / 2, rss = 0;
        int64_t until = now_ms() + 20000;
        while ((rss = launch_proc_status(s.pid, "VmRSS")) > want && now_ms() < until) sleep_ms(100);
        printf("round %d: %ld kB before, %ld kB at the peak, %ld kB once idle (anon %ld, file %ld)\n", round, base, peak, rss, launch_proc_status(s.pid, "RssAnon"), launch_proc_status(s.pid, "RssFile"));
        if (rss > want) FAIL("resident %ld kB 20 s after a burst (peak %ld kB, before %ld kB)", rss, peak, base);
    }
    check_alive(s.port);
    free(fds);
    server_stop(&s);
}
