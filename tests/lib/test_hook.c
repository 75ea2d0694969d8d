/*
 * libc interposition (src/hook): plain blocking calls -- read, recv, poll,
 * connect, nanosleep ... -- made on vthreads park them, return what the C
 * library would (errno included), honour deadlines and cancellation, and
 * leave platform threads alone.  Most tests run on ONE carrier with the
 * waiting and the waking side both vthreads: a hooked call that blocked
 * its carrier instead of parking would hang the test (the harness's
 * timeout fails it).
 *
 * This file includes only weft.h: its calls of read() & co. are the
 * program's, and reach the hooks as a foreign library's would.
 */
#include "harness.h"
#include "fortified.h"
#include "proc.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>

static void start(int carriers, int hook) {
    weft_runtime_opts c = {.carriers = carriers, .hook = hook};
    CHECK_EQ(weft_init(&c), 0);
}

/* go, join: harness.h */

static uint64_t parks_now(void) {
    weft_stats s;
    weft_stats_get(&s);
    return s.parks;
}

/* a loopback listener and a connected, accepted pair (blocking sockets) */
static void tcp_pair(int *client, int *server) {
    int port;
    int l = listen_any(&port);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(c >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    int s = accept(l, NULL, NULL);
    CHECK(s >= 0);
    close(l);
    *client = c;
    *server = s;
}

/* ---- a blocking pipe on one carrier ---- */

static int pp[2];
static _Atomic int reader_in;

static void *pipe_reader(void *unused) {
    char b[16];
    atomic_store(&reader_in, 1);
    ssize_t n = read(pp[0], b, sizeof b);
    CHECK_EQ(n, 5);
    CHECK(memcmp(b, "hello", 5) == 0);
    return NULL;
}

static void *pipe_writer(void *unused) {
    while (!atomic_load(&reader_in)) weft_yield();
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL); /* hooked too: the reader gets the carrier */
    CHECK_EQ(write(pp[1], "hello", 5), 5);
    return NULL;
}

TEST(blocking_pipe_read_parks) {
    start(1, WEFT_HOOK_ON);
    CHECK_EQ(weft_hook_active(), 1);
    CHECK_EQ(pipe(pp), 0);
    uint64_t p0 = parks_now();
    weft_thread *r = go(pipe_reader, NULL), *w = go(pipe_writer, NULL);
    join(r);
    join(w);
    CHECK(parks_now() > p0);
    close(pp[0]);
    close(pp[1]);
}

/* ---- _FORTIFY_SOURCE's entry points park as the plain names do ---- */

/* One carrier: a vthread waits in a fortified call (support/fortified.c,
 * built with -D_FORTIFY_SOURCE=2: __read_chk & co.) on a pipe or socket
 * that another vthread fills after a hooked sleep.  Had the call held the
 * carrier, the filler would have run only on a spare carrier after the
 * monitor saw the stall: a pinned event.  Issue 26: they all pinned. */
enum { F_READ, F_RECV, F_RECVFROM, F_POLL, F_PPOLL, F_KINDS };
static const char *const F_NAME[F_KINDS] = {"__read_chk", "__recv_chk", "__recvfrom_chk", "__poll_chk", "__ppoll_chk"};
static int ff[2];
static _Atomic int f_kind, f_in;

static void *fortified_waiter(void *unused) {
    char b[FORTIFIED_BUF];
    atomic_store(&f_in, 1);
    switch (atomic_load(&f_kind)) {
    case F_READ: CHECK_EQ(fortified_read(ff[0], b, sizeof b), 5); break;
    case F_RECV: CHECK_EQ(fortified_recv(ff[0], b, sizeof b, 0), 5); break;
    case F_RECVFROM: CHECK_EQ(fortified_recvfrom(ff[0], b, sizeof b, 0), 5); break;
    case F_POLL: CHECK_EQ(fortified_poll(ff[0], 2, -1), 1); return NULL;
    case F_PPOLL: CHECK_EQ(fortified_ppoll(ff[0], 2), 1); return NULL;
    }
    CHECK(memcmp(b, "hello", 5) == 0);
    return NULL;
}

static void *fortified_filler(void *unused) {
    while (!atomic_load(&f_in)) weft_yield();
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_EQ(write(ff[1], "hello", 5), 5);
    return NULL;
}

/* stderr into a pipe while the rounds run (the monitor's pinned lines) */
static int fcap[2], fcap_saved;
static void fcap_begin(void) {
    fflush(stderr);
    CHECK_EQ(pipe2(fcap, O_CLOEXEC | O_NONBLOCK), 0);
    fcntl(fcap[1], F_SETPIPE_SZ, 1 << 20);
    fcap_saved = dup(2);
    CHECK(fcap_saved >= 0 && dup2(fcap[1], 2) == 2);
}
static char *fcap_end(void) {
    fflush(stderr);
    dup2(fcap_saved, 2);
    close(fcap_saved);
    close(fcap[1]);
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    CHECK(b != NULL);
    for (ssize_t r; n < cap - 1 && (r = read(fcap[0], b + n, cap - 1 - n)) > 0;) n += (size_t)r;
    b[n] = 0;
    close(fcap[0]);
    if (n) fputs(b, stderr);
    return b;
}

/* A pinned line that names one of the waiting calls: the fortified call
 * held its carrier.  (On an overloaded machine a carrier may be reported
 * in one of weft's own short waits -- a futex -- which is not the call's
 * doing: test_backends.c sorts its lines the same way.) */
static int pinned_in_waiting_call(const char *log) {
    static const char *const calls[] = {"blocked in read ", "blocked in recvfrom ", "blocked in poll ",
                                        "blocked in ppoll ", "blocked in pread64 "};
    for (const char *l = log; (l = strstr(l, "weft: pinned:")); l++) {
        size_t len = strcspn(l, "\n");
        for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
            const char *c = strstr(l, calls[i]);
            if (c && (size_t)(c - l) < len) return 1;
        }
    }
    return 0;
}

TEST(fortified_calls_park) {
    setenv("WEFT_MONITOR", "log", 1); /* every pinned event's line (by default only those of a second) */
    start(1, WEFT_HOOK_ON);
    fcap_begin();
    for (int k = 0; k < F_KINDS; k++) {
        for (int round = 0; round < 3; round++) {
            if (k == F_RECV || k == F_RECVFROM) CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ff), 0);
            else CHECK_EQ(pipe(ff), 0);
            atomic_store(&f_kind, k);
            atomic_store(&f_in, 0);
            uint64_t p0 = parks_now();
            weft_thread *w = go(fortified_waiter, NULL), *f = go(fortified_filler, NULL);
            join(w);
            join(f);
            CHECK(parks_now() > p0);
            close(ff[0]);
            close(ff[1]);
        }
    }
    char *log = fcap_end();
    if (pinned_in_waiting_call(log)) FAIL("a fortified call held its carrier:\n%s", log);
    free(log);
    /* pread: a regular file, through the hook (a ring operation), and the
     * large-file name a _FILE_OFFSET_BITS=64 build calls */
    char path[] = "/tmp/weft-fortified-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(write(fd, "0123456789", 10), 10);
    char b[FORTIFIED_BUF];
    CHECK_EQ(fortified_pread(fd, b, 4, 3), 4);
    CHECK(memcmp(b, "3456", 4) == 0);
    extern ssize_t pread64(int, void *, size_t, off_t);
    CHECK_EQ(pread64(fd, b, 2, 8), 2);
    CHECK(memcmp(b, "89", 2) == 0);
    close(fd);
}

/* The check itself: a length past the buffer stops the program as glibc's
 * own __read_chk does, hooks on or off. */
static void overflow_child(void *hook) {
    start(1, hook ? WEFT_HOOK_ON : WEFT_HOOK_OFF);
    int p[2];
    if (pipe(p) != 0 || write(p[1], "x", 1) != 1) _exit(3);
    char b[FORTIFIED_BUF + 8];
    fortified_read(p[0], b, FORTIFIED_BUF + 1); /* must not return */
    _exit(4);
}

TEST(fortified_overflow_stops_the_program) {
    for (intptr_t hook = 0; hook < 2; hook++) {
        int st;
        const char *said = fork_stderr(overflow_child, (void *)hook, &st);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
            FAIL("hooks %s: status 0x%x, said '%s'", hook ? "on" : "off", st, said);
        CHECK(strstr(said, "buffer overflow detected") != NULL);
    }
}

/* The dump names the program's call site for a vthread parked in a hooked
 * call, not hook.c: with the fortified names added, the hooks were inlined
 * into one another and libdw read a hook's frame as an inline instance of
 * itself, so the site came out as "hook/hook.c:347 (read)". */
static int sp_pipe[2];
static void *site_reader(void *unused) {
    char b[8];
    CHECK_EQ(read(sp_pipe[0], b, sizeof b), 1);
    return NULL;
}
static void *site_fortified(void *unused) {
    char b[FORTIFIED_BUF];
    CHECK_EQ(fortified_read(sp_pipe[0], b, 8), 1);
    return NULL;
}

TEST(dump_names_the_programs_site_in_a_hooked_call) {
    if (TEST_TSAN) SKIP("the dump's walk of parked stacks races by design (test_future's note)");
    start(1, WEFT_HOOK_ON);
    void *(*fns[2])(void *) = {site_reader, site_fortified};
    const char *want[2] = {"(site_reader)", "(fortified_read)"}, *file[2] = {"test_hook.c:", "fortified.c:"};
    for (int k = 0; k < 2; k++) {
        CHECK_EQ(pipe(sp_pipe), 0);
        weft_thread *t = go(fns[k], NULL);
        char *d = dump_showing(WEFT_DUMP_TEXT, want[k], NULL);
        /* the vthread's line: "#N ... parked on io ... in weft_poll (fd F) at FILE:LINE (FN)" */
        const char *fn = strstr(d, want[k]), *line = fn;
        while (line > d && line[-1] != '\n') line--;
        size_t len = (size_t)(fn - line);
        char *l = strndup(line, len + strlen(want[k]));
        if (!strstr(l, "parked on io") || !strstr(l, file[k]) || strstr(l, "hook/hook.c"))
            FAIL("the parked call's line names the wrong site: '%s'\n%s", l, d);
        free(l);
        free(d);
        CHECK_EQ(write(sp_pipe[1], "x", 1), 1);
        join(t);
        close(sp_pipe[0]);
        close(sp_pipe[1]);
    }
}

/* ---- TCP: accept, connect, send, recv, all libc, one carrier ---- */

enum { ECHO_BYTES = 1 << 20 };
static int echo_port;
static int echo_listener;

static void *echo_server(void *unused) {
    int c = accept(echo_listener, NULL, NULL);
    CHECK(c >= 0);
    char *b = malloc(65536);
    CHECK(b != NULL);
    for (;;) {
        ssize_t n = recv(c, b, 65536, 0);
        CHECK(n >= 0);
        if (n == 0) break;
        CHECK_EQ(send(c, b, (size_t)n, 0), n); /* a blocking send sends all */
    }
    free(b);
    close(c);
    return NULL;
}

static void *echo_sender(void *arg) {
    int fd = (int)(intptr_t)arg;
    char *b = malloc(ECHO_BYTES);
    CHECK(b != NULL);
    for (int i = 0; i < ECHO_BYTES; i++) b[i] = (char)(i * 7 + 3);
    /* one big write: it goes on until all is written, as a blocking one */
    CHECK_EQ(write(fd, b, ECHO_BYTES), ECHO_BYTES);
    shutdown(fd, SHUT_WR);
    free(b);
    return NULL;
}

static int echo_conn_fd;
static struct sockaddr_in echo_conn_addr;

static void *echo_connect(void *unused) {
    CHECK_EQ(connect(echo_conn_fd, (struct sockaddr *)&echo_conn_addr, sizeof echo_conn_addr), 0);
    return NULL;
}

/* the receiving side: readv into two halves */
static void *echo_receiver(void *p) {
    int fd = (int)(intptr_t)p;
    char *b = malloc(ECHO_BYTES);
    CHECK(b != NULL);
    size_t got = 0;
    while (got < ECHO_BYTES) {
        size_t left = ECHO_BYTES - got, h = left / 2;
        struct iovec v[2] = {{b + got, h}, {b + got + h, left - h}};
        ssize_t n = readv(fd, v, 2);
        CHECK(n > 0);
        got += (size_t)n;
    }
    for (int i = 0; i < ECHO_BYTES; i++) CHECK(b[i] == (char)(i * 7 + 3));
    char one;
    CHECK_EQ(read(fd, &one, 1), 0); /* EOF after the server closed */
    free(b);
    return NULL;
}

TEST(tcp_echo_with_plain_calls) {
    start(1, WEFT_HOOK_ON);
    echo_listener = listen_any(&echo_port);
    weft_thread *srv = go(echo_server, NULL);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(c >= 0);
    /* connect on a vthread: the main thread is a platform thread */
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)echo_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    echo_conn_fd = c;
    echo_conn_addr = a;
    join(go(echo_connect, NULL));
    weft_thread *snd = go(echo_sender, (void *)(intptr_t)c);
    weft_thread *r = go(echo_receiver, (void *)(intptr_t)c);
    join(snd);
    join(r);
    join(srv);
    close(c);
    close(echo_listener);
}

/* ---- UDP and the message calls ---- */

static int udp_a, udp_b;
static struct sockaddr_in udp_b_addr;

static void *udp_receiver(void *unused) {
    char b[32];
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(udp_a, b, sizeof b, 0, (struct sockaddr *)&from, &fl); /* parks */
    CHECK_EQ(n, 4);
    CHECK(memcmp(b, "ping", 4) == 0);
    CHECK_EQ(from.sin_port, udp_b_addr.sin_port);
    return NULL;
}

static void *udp_sender(void *arg) {
    struct sockaddr_in *to = arg;
    weft_sleep(2 * 1000 * 1000);
    CHECK_EQ(sendto(udp_b, "ping", 4, 0, (struct sockaddr *)to, sizeof *to), 4);
    return NULL;
}

enum { MSG_BYTES = 3 << 20 };
static int msg_pair[2];

static void *msg_sender(void *unused) {
    static char part[3][1 << 20];
    for (int k = 0; k < 3; k++) memset(part[k], 'a' + k, sizeof part[k]);
    struct iovec v[3] = {{part[0], sizeof part[0]}, {part[1], sizeof part[1]}, {part[2], sizeof part[2]}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = 3};
    CHECK_EQ(sendmsg(msg_pair[0], &m, 0), MSG_BYTES); /* all of it: the socket is blocking */
    return NULL;
}

static void *msg_receiver(void *unused) {
    static char b[65536];
    size_t got = 0;
    while (got < MSG_BYTES) {
        struct iovec v = {b, sizeof b};
        struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
        ssize_t n = recvmsg(msg_pair[1], &m, 0);
        CHECK(n > 0);
        for (ssize_t i = 0; i < n; i++) CHECK(b[i] == 'a' + (int)((got + (size_t)i) >> 20));
        got += (size_t)n;
    }
    return NULL;
}

TEST(udp_and_message_calls) {
    start(1, WEFT_HOOK_ON);
    udp_a = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    udp_b = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    CHECK_EQ(bind(udp_a, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(getsockname(udp_a, (struct sockaddr *)&a, &l), 0);
    struct sockaddr_in b = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    l = sizeof b;
    CHECK_EQ(bind(udp_b, (struct sockaddr *)&b, sizeof b), 0);
    CHECK_EQ(getsockname(udp_b, (struct sockaddr *)&b, &l), 0);
    udp_b_addr = b;
    weft_thread *r = go(udp_receiver, NULL), *w = go(udp_sender, &a);
    join(r);
    join(w);
    close(udp_a);
    close(udp_b);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, msg_pair), 0);
    w = go(msg_sender, NULL);
    r = go(msg_receiver, NULL);
    join(w);
    join(r);
    close(msg_pair[0]);
    close(msg_pair[1]);
}

/* ---- the program's own non-blocking mode is kept ---- */

static void *nonblocking_body(void *unused) {
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    char b[4];
    errno = 0;
    CHECK_EQ(read(p[0], b, 4), -1);
    CHECK_EQ(errno, EAGAIN);
    int c, s;
    tcp_pair(&c, &s);
    errno = 0;
    CHECK_EQ(recv(c, b, 4, MSG_DONTWAIT), -1); /* blocking socket, non-blocking call */
    CHECK_EQ(errno, EAGAIN);
    CHECK_EQ(fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK), 0);
    errno = 0;
    CHECK_EQ(recv(s, b, 4, 0), -1);
    CHECK_EQ(errno, EAGAIN);
    /* accept on a non-blocking listener */
    int port, l = listen_any(&port);
    CHECK_EQ(fcntl(l, F_SETFL, fcntl(l, F_GETFL) | O_NONBLOCK), 0);
    errno = 0;
    CHECK_EQ(accept(l, NULL, NULL), -1);
    CHECK_EQ(errno, EAGAIN);
    /* connect on a non-blocking socket: in progress, then poll says done */
    int nc = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int r = connect(nc, (struct sockaddr *)&a, sizeof a);
    CHECK(r == 0 || errno == EINPROGRESS);
    struct pollfd pf = {.fd = nc, .events = POLLOUT};
    CHECK_EQ(poll(&pf, 1, -1), 1);
    CHECK(pf.revents & POLLOUT);
    /* a pipe weft parked on stays blocking for the program */
    CHECK_EQ(fcntl(p[0], F_GETFL) & O_NONBLOCK, O_NONBLOCK);
    close(nc);
    close(l);
    close(c);
    close(s);
    close(p[0]);
    close(p[1]);
    return NULL;
}

TEST(nonblocking_fds_answer_eagain) {
    start(1, WEFT_HOOK_ON);
    join(go(nonblocking_body, NULL));
}

/* A blocking file stays blocking: after parked reads, its flags are the
 * program's (the epoll backend must not leave O_NONBLOCK behind on the
 * sockets it accepted or connected for a hooked call either). */
static void *late_send(void *p) {
    weft_sleep(2 * 1000 * 1000);
    CHECK_EQ(send((int)(intptr_t)p, "x", 1, 0), 1);
    return NULL;
}

static void *flags_body(void *unused) {
    int c, s;
    tcp_pair(&c, &s);
    /* a hooked connect and accept left both blocking */
    CHECK_EQ(fcntl(c, F_GETFL) & O_NONBLOCK, 0);
    CHECK_EQ(fcntl(s, F_GETFL) & O_NONBLOCK, 0);
    weft_thread *t = go(late_send, (void *)(intptr_t)s);
    char b;
    CHECK_EQ(recv(c, &b, 1, 0), 1);
    join(t);
    /* now the program makes it non-blocking itself: EAGAIN from then on */
    CHECK_EQ(fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK), 0);
    errno = 0;
    CHECK_EQ(recv(c, &b, 1, 0), -1);
    CHECK_EQ(errno, EAGAIN);
    close(c);
    close(s);
    return NULL;
}

TEST(blocking_mode_is_the_programs) {
    start(1, WEFT_HOOK_ON);
    join(go(flags_body, NULL));
}

/* ---- SO_RCVTIMEO / SO_SNDTIMEO ---- */

static void *sotimeo_body(void *unused) {
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    struct timeval tv = {0, 30 * 1000};
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    char b[8];
    int64_t t0 = weft_now();
    errno = 0;
    CHECK_EQ(recv(sv[0], b, sizeof b, 0), -1);
    CHECK_EQ(errno, EAGAIN);
    CHECK(weft_now() - t0 >= 25 * 1000 * 1000); /* it waited (a lower bound) */
    errno = 0;
    CHECK_EQ(read(sv[0], b, sizeof b), -1);
    CHECK_EQ(errno, EAGAIN);
    /* a full send buffer: the send timeout ends a blocking send with what it sent */
    CHECK_EQ(setsockopt(sv[1], SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
    static char big[1 << 20];
    ssize_t n = send(sv[1], big, sizeof big, 0);
    CHECK(n > 0 && n < (ssize_t)sizeof big);
    close(sv[0]);
    close(sv[1]);
    return NULL;
}

TEST(socket_timeouts_as_libc) {
    start(1, WEFT_HOOK_ON);
    join(go(sotimeo_body, NULL));
}

/* ---- sleeps ---- */

static _Atomic long ticks;
static _Atomic int sleepers_left;

static void *ticker(void *unused) {
    while (atomic_load(&sleepers_left) > 0) {
        atomic_fetch_add(&ticks, 1);
        weft_yield();
    }
    return NULL;
}

/* Each sleep must let the ticker run meanwhile: it shares the one carrier. */
static void *sleeper(void *arg) {
    int kind = (int)(intptr_t)arg;
    long before = atomic_load(&ticks);
    switch (kind) {
    case 0: {
        struct timespec ts = {0, 20 * 1000 * 1000}, rem;
        CHECK_EQ(nanosleep(&ts, &rem), 0);
        break;
    }
    case 1: CHECK_EQ(usleep(20 * 1000), 0); break;
    case 2: CHECK_EQ(sleep(1), 0u); break;
    case 3: {
        struct timespec ts = {0, 20 * 1000 * 1000};
        CHECK_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL), 0);
        break;
    }
    case 4: {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        now.tv_nsec += 20 * 1000 * 1000;
        if (now.tv_nsec >= 1000000000) now.tv_sec++, now.tv_nsec -= 1000000000;
        CHECK_EQ(clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &now, NULL), 0);
        break;
    }
    case 5: CHECK_EQ(poll(NULL, 0, 20), 0); break;
    case 6: {
        struct timeval tv = {0, 20 * 1000};
        CHECK_EQ(select(0, NULL, NULL, NULL, &tv), 0);
        break;
    }
    }
    CHECK(atomic_load(&ticks) > before);
    atomic_fetch_sub(&sleepers_left, 1);
    return NULL;
}

static void *bad_sleeps(void *unused) {
    struct timespec bad = {0, 1000000000};
    errno = 0;
    CHECK_EQ(nanosleep(&bad, NULL), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(clock_nanosleep(CLOCK_MONOTONIC, 0, &bad, NULL), EINVAL); /* returned, not errno */
    return NULL;
}

TEST(sleeps_park) {
    start(1, WEFT_HOOK_ON);
    enum { KINDS = 7 };
    atomic_store(&sleepers_left, KINDS);
    weft_thread *tk = go(ticker, NULL);
    weft_thread *s[KINDS];
    for (int i = 0; i < KINDS; i++) s[i] = go(sleeper, (void *)(intptr_t)i);
    for (int i = 0; i < KINDS; i++) join(s[i]);
    join(tk);
    join(go(bad_sleeps, NULL));
}

/* ---- poll, select, epoll_wait over several fds ---- */

static int pipes[3][2];

static void *fill_second(void *unused) {
    weft_sleep(5 * 1000 * 1000);
    CHECK_EQ(write(pipes[1][1], "z", 1), 1);
    return NULL;
}

static void drain_second(void) {
    char c;
    CHECK_EQ(read(pipes[1][0], &c, 1), 1);
}

static void *multi_wait_body(void *unused) {
    for (int i = 0; i < 3; i++) CHECK_EQ(pipe(pipes[i]), 0);
    /* poll */
    struct pollfd pf[4] = {{pipes[0][0], POLLIN, 0}, {pipes[1][0], POLLIN, 0}, {-1, POLLIN, 0}, {pipes[2][0], POLLIN, 0}};
    weft_thread *f = go(fill_second, NULL);
    CHECK_EQ(poll(pf, 4, -1), 1);
    CHECK_EQ(pf[0].revents, 0);
    CHECK(pf[1].revents & POLLIN);
    CHECK_EQ(pf[3].revents, 0);
    join(f);
    drain_second();
    /* its own timeout */
    CHECK_EQ(poll(pf, 4, 10), 0);
    /* an fd that is not open: POLLNVAL at once */
    struct pollfd bad = {.fd = 999, .events = POLLIN};
    CHECK_EQ(poll(&bad, 1, -1), 1);
    CHECK(bad.revents & POLLNVAL);
    /* select */
    f = go(fill_second, NULL);
    fd_set rs;
    FD_ZERO(&rs);
    for (int i = 0; i < 3; i++) FD_SET(pipes[i][0], &rs);
    int nfds = 0;
    for (int i = 0; i < 3; i++) nfds = pipes[i][0] + 1 > nfds ? pipes[i][0] + 1 : nfds;
    CHECK_EQ(select(nfds, &rs, NULL, NULL, NULL), 1);
    CHECK(FD_ISSET(pipes[1][0], &rs));
    CHECK(!FD_ISSET(pipes[0][0], &rs));
    join(f);
    drain_second();
    struct timeval tv = {0, 10 * 1000};
    FD_ZERO(&rs);
    FD_SET(pipes[0][0], &rs);
    CHECK_EQ(select(pipes[0][0] + 1, &rs, NULL, NULL, &tv), 0);
    CHECK(!FD_ISSET(pipes[0][0], &rs));
    /* epoll_wait */
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    struct epoll_event e = {.events = EPOLLIN, .data.u32 = 42};
    CHECK_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, pipes[1][0], &e), 0);
    f = go(fill_second, NULL);
    struct epoll_event got[4];
    CHECK_EQ(epoll_wait(ep, got, 4, -1), 1);
    CHECK_EQ(got[0].data.u32, 42);
    join(f);
    drain_second();
    CHECK_EQ(epoll_wait(ep, got, 4, 10), 0);
    close(ep);
    for (int i = 0; i < 3; i++) close(pipes[i][0]), close(pipes[i][1]);
    return NULL;
}

TEST(poll_select_epoll_wait_park) {
    start(1, WEFT_HOOK_ON);
    join(go(multi_wait_body, NULL));
}

/* ---- cancellation and deadlines ---- */

static int cancel_pipe[2];
static _Atomic int cancel_in;

static void *blocked_reader(void *unused) {
    char b;
    atomic_store(&cancel_in, 1);
    errno = 0;
    ssize_t n = read(cancel_pipe[0], &b, 1);
    CHECK_EQ(n, -1);
    CHECK_EQ(errno, ECANCELED);
    return NULL;
}

static void *deadline_body(void *unused) {
    char b;
    weft_deadline_set(weft_now() + 10 * 1000 * 1000);
    errno = 0;
    CHECK_EQ(read(cancel_pipe[0], &b, 1), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    struct pollfd pf = {.fd = cancel_pipe[0], .events = POLLIN};
    errno = 0;
    CHECK_EQ(poll(&pf, 1, -1), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    errno = 0;
    CHECK_EQ(usleep(1000 * 1000), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    weft_deadline_set(0);
    return NULL;
}

TEST(cancel_and_deadline) {
    start(1, WEFT_HOOK_ON);
    CHECK_EQ(pipe(cancel_pipe), 0);
    weft_thread *r = go(blocked_reader, NULL);
    char *d = dump_showing(WEFT_DUMP_TEXT, "parked on io", NULL);
    free(d);
    CHECK_EQ(weft_cancel(r), 0);
    join(r);
    join(go(deadline_body, NULL));
    close(cancel_pipe[0]);
    close(cancel_pipe[1]);
}

/* ---- close ends a call in flight ---- */

static void *recv_ebadf(void *p) {
    char b;
    errno = 0;
    CHECK_EQ(recv((int)(intptr_t)p, &b, 1, 0), -1);
    CHECK_EQ(errno, EBADF);
    return NULL;
}

static void *close_body(void *unused) {
    int c, s;
    tcp_pair(&c, &s);
    weft_thread *t = go(recv_ebadf, (void *)(intptr_t)c);
    weft_sleep(5 * 1000 * 1000);
    CHECK_EQ(close(c), 0);
    join(t);
    close(s);
    return NULL;
}

TEST(close_ends_blocked_recv) {
    start(2, WEFT_HOOK_ON);
    join(go(close_body, NULL));
}

/* ---- files ---- */

static void *file_body(void *unused) {
    char path[] = "/tmp/weft-hook-file-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    CHECK_EQ(write(fd, "abcdef", 6), 6);
    struct iovec v[2] = {{"gh", 2}, {"ij", 2}};
    CHECK_EQ(writev(fd, v, 2), 4);
    CHECK_EQ(pwrite(fd, "XY", 2, 1), 2);
    CHECK_EQ(fsync(fd), 0);
    CHECK_EQ(fdatasync(fd), 0);
    CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    char b[16] = {0};
    CHECK_EQ(read(fd, b, 3), 3);
    CHECK(memcmp(b, "aXY", 3) == 0);
    char b2[4] = {0}, b3[16] = {0};
    struct iovec r[2] = {{b2, 2}, {b3, sizeof b3}};
    CHECK_EQ(readv(fd, r, 2), 7); /* the file position moved */
    CHECK(memcmp(b2, "de", 2) == 0 && memcmp(b3, "fghij", 5) == 0);
    CHECK_EQ(pread(fd, b, 4, 6), 4);
    CHECK(memcmp(b, "ghij", 4) == 0);
    errno = 0;
    CHECK_EQ(pread(fd, b, 1, -1), -1);
    CHECK_EQ(errno, EINVAL);
    close(fd);
    errno = 0;
    CHECK_EQ(write(fd, "x", 1), -1);
    CHECK_EQ(errno, EBADF);
    return NULL;
}

TEST(file_calls_as_libc) {
    start(1, WEFT_HOOK_ON);
    join(go(file_body, NULL));
}

/* ---- getaddrinfo on the blocking pool ---- */

static void *gai_body(void *unused) {
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    CHECK_EQ(getaddrinfo("127.0.0.1", "80", &hints, &res), 0);
    CHECK(res != NULL);
    CHECK_EQ(((struct sockaddr_in *)res->ai_addr)->sin_port, htons(80));
    freeaddrinfo(res);
    res = NULL;
    hints.ai_flags = AI_NUMERICHOST;
    CHECK_EQ(getaddrinfo("not-a-number", NULL, &hints, &res), EAI_NONAME);
    return NULL;
}

TEST(getaddrinfo_works) {
    start(2, WEFT_HOOK_ON);
    weft_thread *t[50];
    for (int i = 0; i < 50; i++) t[i] = go(gai_body, NULL);
    for (int i = 0; i < 50; i++) join(t[i]);
}

/* ---- platform threads and hooks off: the C library's calls ---- */

static void *platform_reader(void *p) {
    int fd = *(int *)p;
    char b[5];
    CHECK_EQ(read(fd, b, 5), 5); /* blocks this thread, as libc's */
    return NULL;
}

static void *late_writer(void *p) {
    int fd = *(int *)p;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK_EQ(write(fd, "12345", 5), 5);
    return NULL;
}

static void *nap_unhooked(void *unused) {
    uint64_t p0 = parks_now();
    struct timespec ts = {0, 1000 * 1000};
    CHECK_EQ(nanosleep(&ts, NULL), 0);
    CHECK_EQ(parks_now(), p0);
    return NULL;
}

TEST(platform_threads_and_hooks_off) {
    start(1, WEFT_HOOK_ON);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, platform_reader, &p[0]), 0);
    join(go(late_writer, &p[1]));
    pthread_join(th, NULL);
    close(p[0]);
    close(p[1]);
    weft_shutdown();
    /* off: a vthread's nanosleep blocks its carrier -- it does not park */
    start(1, WEFT_HOOK_OFF);
    CHECK_EQ(weft_hook_active(), 0);
    join(go(nap_unhooked, NULL));
    weft_shutdown();
    /* and WEFT_HOOK=1 in the environment is the same as WEFT_HOOK_ON */
    setenv("WEFT_HOOK", "1", 1);
    start(1, WEFT_HOOK_DEFAULT);
    CHECK_EQ(weft_hook_active(), 1);
    unsetenv("WEFT_HOOK");
}

/* ---- errno under migration: the acceptance ---- */

static int refused_port;
static int timeo_sock; /* a blocking socket with a 1 ms receive timeout */
static _Atomic long moved, stayed_wrong;

/* errno's address and the OS thread, read now: glibc declares
 * __errno_location and pthread_self const, so the compiler may reuse an
 * earlier call's result -- which is the hazard under test, but after
 * weft_yield (weft's own call, which may move the vthread) the test must
 * look afresh. */
__attribute__((noinline)) static int *errno_addr_now(void) {
    int *p = __errno_location();
    __asm__ volatile("" : "+r"(p));
    return p;
}
__attribute__((noinline)) static pthread_t thread_now(void) {
    pthread_t t = pthread_self();
    __asm__ volatile("" : "+r"(t));
    return t;
}

/* errno's address taken once, as a compiler may: after a hooked call that
 * parked, it must still be this carrier's errno -- the call pins the
 * vthread to its carrier. */
__attribute__((noinline)) static void check_errno_calls(int rounds) {
    char b[4];
    for (int i = 0; i < rounds; i++) {
        int *ep = errno_addr_now();
        pthread_t before = thread_now();
        /* EAGAIN after a park (SO_RCVTIMEO) */
        *ep = 0;
        CHECK_EQ(recv(timeo_sock, b, sizeof b, 0), -1);
        CHECK_EQ(*ep, EAGAIN);
        CHECK_EQ(*errno_addr_now(), EAGAIN);
        if (!pthread_equal(before, thread_now())) atomic_fetch_add(&stayed_wrong, 1);
        /* ECONNREFUSED from a connect that went through the ring / poller */
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(s >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)refused_port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        *ep = 0;
        CHECK_EQ(connect(s, (struct sockaddr *)&a, sizeof a), -1);
        CHECK_EQ(*ep, ECONNREFUSED);
        CHECK_EQ(close(s), 0);
        /* EBADF at once */
        *ep = 0;
        CHECK_EQ(read(-1, b, 1), -1);
        CHECK_EQ(*ep, EBADF);
        /* then move, maybe: errno's address may change here, and that is
         * weft's own call, not foreign code */
        pthread_t t0 = thread_now();
        weft_yield();
        if (!pthread_equal(t0, thread_now())) atomic_fetch_add(&moved, 1);
    }
}

static void *errno_worker(void *arg) {
    check_errno_calls((int)(intptr_t)arg);
    return NULL;
}

TEST(errno_right_under_migration) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    start(4, WEFT_HOOK_ON);
    /* a port nobody listens on */
    int l = listen_any(&refused_port);
    close(l);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    struct timeval tv = {0, 1000};
    CHECK_EQ(setsockopt(sv[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    timeo_sock = sv[0];
    int n = LIVE_CAP(10000);
    /* at most this many sockets at once: one per vthread in connect */
    if ((rlim_t)n + 100 > rl.rlim_cur) n = (int)rl.rlim_cur - 100;
    int rounds = TEST_SANITIZED ? 2 : 5;
    weft_thread **t = malloc(sizeof *t * (size_t)n);
    CHECK(t != NULL);
    for (int i = 0; i < n; i++) t[i] = go(errno_worker, (void *)(intptr_t)rounds);
    for (int i = 0; i < n; i++) join(t[i]);
    free(t);
    CHECK_EQ(atomic_load(&stayed_wrong), 0);
    printf("%d vthreads x %d rounds on 4 carriers: %ld moves between carriers\n", n, rounds, atomic_load(&moved));
    close(sv[0]);
    close(sv[1]);
}

/* ---- hooked calls answer as libc's: each case run on a vthread (hooked)
 * and on a platform thread (the C library's), and compared ---- */

/* Runs fn on a platform thread and returns its result. */
static void *on_platform(void *(*fn)(void *), void *arg) {
    pthread_t th;
    void *r = NULL;
    CHECK_EQ(pthread_create(&th, NULL, fn, arg), 0);
    CHECK_EQ(pthread_join(th, &r), 0);
    return r;
}

/* A result and its errno, packed for a thread's return value. */
static void *res_of(long r) { return (void *)(intptr_t)(r < 0 ? -(long)errno * 1000 - 1 : r); }

typedef struct late_write {
    int fd;
    int64_t ns;
    const char *bytes;
    size_t n;
} late_write;

static void *late_write_body(void *arg) {
    late_write *w = arg;
    struct timespec ts = {0, (long)w->ns};
    nanosleep(&ts, NULL); /* hooked on a vthread, libc's on a thread */
    CHECK_EQ(write(w->fd, w->bytes, w->n), (ssize_t)w->n);
    return NULL;
}

/* the writer runs on the kind of thread the caller is not, so that the
 * caller's wait is real either way */
static void write_later(late_write *w, pthread_t *th) { CHECK_EQ(pthread_create(th, NULL, late_write_body, w), 0); }

/* a. POLLRDNORM (and POLLRDBAND) over several fds wakes */
static void *rdnorm_case(void *unused) {
    int a[2], b[2];
    CHECK_EQ(pipe(a), 0);
    CHECK_EQ(pipe(b), 0);
    late_write w = {b[1], 5 * 1000 * 1000, "x", 1};
    pthread_t th;
    write_later(&w, &th);
    struct pollfd pf[2] = {{a[0], POLLRDNORM | POLLRDBAND, 0}, {b[0], POLLRDNORM, 0}};
    int r = poll(pf, 2, 5000);
    pthread_join(th, NULL);
    CHECK_EQ(r, 1);
    CHECK_EQ(pf[0].revents, 0);
    CHECK(pf[1].revents & POLLRDNORM);
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
    return (void *)(intptr_t)pf[1].revents;
}

TEST(poll_rdnorm_as_libc) {
    DET_SKIP("a platform thread writes on the real clock while the wait's timeout runs on the virtual one");
    start(1, WEFT_HOOK_ON);
    void *hooked = join(go(rdnorm_case, NULL));
    CHECK(hooked == on_platform(rdnorm_case, NULL));
}

/* b. recvmsg and recv with MSG_WAITALL: all of it on a stream, one message
 * on a datagram socket */
static void *waitall_case(void *unused) {
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(write(sv[1], "ab", 2), 2);
    late_write w = {sv[1], 5 * 1000 * 1000, "c", 1};
    pthread_t th;
    write_later(&w, &th);
    char x[2] = {0}, y[4] = {0};
    struct iovec v[2] = {{x, 2}, {y, 1}};
    struct msghdr m = {.msg_iov = v, .msg_iovlen = 2};
    ssize_t n = recvmsg(sv[0], &m, MSG_WAITALL);
    pthread_join(th, NULL);
    CHECK_EQ(n, 3);
    CHECK(memcmp(x, "ab", 2) == 0 && y[0] == 'c');
    close(sv[0]), close(sv[1]);
    /* a datagram socket: one message, however short */
    CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(write(sv[1], "de", 2), 2);
    late_write w2 = {sv[1], 20 * 1000 * 1000, "f", 1};
    write_later(&w2, &th);
    char z[4] = {0};
    ssize_t k = recv(sv[0], z, 3, MSG_WAITALL);
    CHECK_EQ(k, 2);
    v[0] = (struct iovec){z, 3};
    m = (struct msghdr){.msg_iov = v, .msg_iovlen = 1};
    ssize_t k2 = recvmsg(sv[0], &m, MSG_WAITALL); /* the late one */
    CHECK_EQ(k2, 1);
    pthread_join(th, NULL);
    close(sv[0]), close(sv[1]);
    return (void *)(intptr_t)(n * 100 + k * 10 + k2);
}

TEST(recv_waitall_as_libc) {
    start(1, WEFT_HOOK_ON);
    void *hooked = join(go(waitall_case, NULL));
    CHECK(hooked == on_platform(waitall_case, NULL));
}

/* c. poll and select over several fds at the fd limit */
static void *fd_limit_case(void *unused) {
    int a[2], b[2];
    CHECK_EQ(pipe(a), 0);
    CHECK_EQ(pipe(b), 0);
    /* take every number left */
    static int held[20000];
    int nh = 0;
    for (int fd; nh < 20000 && (fd = dup(0)) >= 0;) held[nh++] = fd;
    CHECK_EQ(errno, EMFILE);
    late_write w = {b[1], 5 * 1000 * 1000, "x", 1};
    pthread_t th;
    write_later(&w, &th);
    struct pollfd pf[2] = {{a[0], POLLIN, 0}, {b[0], POLLIN, 0}};
    errno = 0;
    int r1 = poll(pf, 2, 5000);
    int e1 = r1 < 0 ? errno : 0;
    pthread_join(th, NULL);
    char c;
    CHECK_EQ(read(b[0], &c, 1), 1);
    write_later(&w, &th);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(a[0], &rs);
    FD_SET(b[0], &rs);
    errno = 0;
    int r2 = select((a[0] > b[0] ? a[0] : b[0]) + 1, &rs, NULL, NULL, NULL);
    int e2 = r2 < 0 ? errno : 0;
    pthread_join(th, NULL);
    for (int i = 0; i < nh; i++) close(held[i]);
    CHECK_EQ(e1, 0);
    CHECK_EQ(r1, 1);
    CHECK_EQ(e2, 0);
    CHECK_EQ(r2, 1);
    CHECK(FD_ISSET(b[0], &rs) && !FD_ISSET(a[0], &rs));
    close(a[0]), close(a[1]), close(b[0]), close(b[1]);
    return (void *)(intptr_t)(r1 * 10 + r2);
}

TEST(poll_select_at_fd_limit) {
    DET_SKIP("a platform thread writes on the real clock while the wait's timeout runs on the virtual one");
    struct rlimit rl, low;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    start(1, WEFT_HOOK_ON);
    low = rl;
    low.rlim_cur = 256; /* a limit the test can fill quickly */
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    void *hooked = join(go(fd_limit_case, NULL));
    CHECK(hooked == on_platform(fd_limit_case, NULL));
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* d. select with sets larger than FD_SETSIZE */
enum { BIG_FD = 1500, BIG_NFDS = 2048 };
static void *big_select_case(void *unused) {
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(dup2(p[0], BIG_FD), BIG_FD);
    unsigned long set[BIG_NFDS / (8 * sizeof(unsigned long))];
    const size_t W = 8 * sizeof(unsigned long);
    int r[2];
    for (int round = 0; round < 2; round++) {
        int nfds = round == 0 ? BIG_FD + 1 : BIG_NFDS;
        memset(set, 0, sizeof set);
        set[BIG_FD / W] |= 1UL << (BIG_FD % W);
        set[p[0] / W] |= 1UL << (p[0] % W);
        late_write w = {p[1], 5 * 1000 * 1000, "x", 1};
        pthread_t th;
        write_later(&w, &th);
        errno = 0;
        r[round] = select(nfds, (fd_set *)set, NULL, NULL, NULL);
        if (r[round] < 0) printf("select(%d): %s\n", nfds, strerror(errno));
        pthread_join(th, NULL);
        CHECK_EQ(r[round], 2); /* the same pipe under two numbers */
        CHECK(set[BIG_FD / W] & (1UL << (BIG_FD % W)));
        char c;
        CHECK_EQ(read(p[0], &c, 1), 1);
    }
    close(BIG_FD);
    close(p[0]), close(p[1]);
    return (void *)(intptr_t)(r[0] * 10 + r[1]);
}

TEST(select_beyond_fd_setsize_as_libc) {
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_max < BIG_NFDS) SKIP("RLIMIT_NOFILE's hard limit is below %d", BIG_NFDS);
    if (rl.rlim_cur < BIG_NFDS) {
        rl.rlim_cur = BIG_NFDS;
        CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    start(1, WEFT_HOOK_ON);
    void *hooked = join(go(big_select_case, NULL));
    CHECK(hooked == on_platform(big_select_case, NULL));
}

/* e. select's timeval as glibc reads it, and an fd beyond the file table */
static void *select_tv_case(void *unused) {
    int p[2];
    CHECK_EQ(pipe(p), 0);
    long out = 0;
    /* tv_usec of a second and a half: normalised, not EINVAL */
    late_write w = {p[1], 5 * 1000 * 1000, "x", 1};
    pthread_t th;
    write_later(&w, &th);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(p[0], &rs);
    struct timeval tv = {0, 1500000};
    errno = 0;
    int r = select(p[0] + 1, &rs, NULL, NULL, &tv);
    if (r < 0) printf("select(tv_usec 1500000): %s\n", strerror(errno));
    CHECK_EQ(r, 1);
    pthread_join(th, NULL);
    out = r;
    /* negative parts: EINVAL, as libc */
    tv = (struct timeval){0, -1};
    errno = 0;
    CHECK_EQ(select(p[0] + 1, &rs, NULL, NULL, &tv), -1);
    CHECK_EQ(errno, EINVAL);
    /* an fd far beyond the file table: ignored, as the kernel does (a
     * timeout), not EBADF */
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    int far = (int)(rl.rlim_cur < FD_SETSIZE ? rl.rlim_cur : FD_SETSIZE) - 1;
    FD_ZERO(&rs);
    FD_SET(far, &rs);
    FD_SET(p[0], &rs);
    char c;
    CHECK_EQ(read(p[0], &c, 1), 1);
    tv = (struct timeval){0, 20 * 1000};
    errno = 0;
    r = select(far + 1, &rs, NULL, NULL, &tv);
    out = out * 1000 + (r < 0 ? -errno : r);
    /* and with no timeout, a write to the pipe ends it */
    FD_ZERO(&rs);
    FD_SET(far, &rs);
    FD_SET(p[0], &rs);
    write_later(&w, &th);
    errno = 0;
    r = select(far + 1, &rs, NULL, NULL, NULL);
    pthread_join(th, NULL);
    out = out * 1000 + (r < 0 ? -errno : r);
    close(p[0]), close(p[1]);
    return (void *)(intptr_t)out;
}

TEST(select_timeval_and_far_fd_as_libc) {
    DET_SKIP("a platform thread writes on the real clock while the wait's timeout runs on the virtual one");
    start(1, WEFT_HOOK_ON);
    void *libc = on_platform(select_tv_case, NULL);
    void *hooked = join(go(select_tv_case, NULL));
    printf("libc %ld, hooked %ld\n", (long)(intptr_t)libc, (long)(intptr_t)hooked);
    CHECK(hooked == libc);
}

/* f. connect again after a refused one: ECONNREFUSED again */
static int nobody_port;
static void *refused_twice_case(void *unused) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)nobody_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    long out = 0;
    for (int i = 0; i < 3; i++) {
        errno = 0;
        int r = connect(s, (struct sockaddr *)&a, sizeof a);
        out = out * 1000 + (r < 0 ? errno : 0);
    }
    close(s);
    return (void *)(intptr_t)out;
}

static void *weft_connect_twice(void *unused) {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)nobody_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(weft_connect(s, (struct sockaddr *)&a, sizeof a), -ECONNREFUSED);
    CHECK_EQ(weft_connect(s, (struct sockaddr *)&a, sizeof a), -ECONNREFUSED);
    weft_close(s);
    return NULL;
}

TEST(connect_after_refused_as_libc) {
    start(1, WEFT_HOOK_ON);
    int l = listen_any(&nobody_port);
    close(l);
    void *libc = on_platform(refused_twice_case, NULL);
    void *hooked = join(go(refused_twice_case, NULL));
    printf("libc %ld, hooked %ld\n", (long)(intptr_t)libc, (long)(intptr_t)hooked);
    CHECK(libc == (void *)(intptr_t)(ECONNREFUSED * 1000000L + ECONNREFUSED * 1000L + ECONNREFUSED));
    CHECK(hooked == libc);
    join(go(weft_connect_twice, NULL));
}

/* g. a platform thread's accept after a vthread's hooked one still waits */
static int acc_listener, acc_port;

static void *connect_later(void *unused) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)acc_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(c, (struct sockaddr *)&a, sizeof a), 0);
    return (void *)(intptr_t)c;
}

static void *accept_case(void *unused) {
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, connect_later, NULL), 0);
    errno = 0;
    int s = accept(acc_listener, NULL, NULL);
    int e = s < 0 ? errno : 0;
    void *c;
    pthread_join(th, &c);
    close((int)(intptr_t)c);
    CHECK_EQ(e, 0);
    CHECK(s >= 0);
    close(s);
    return (void *)(intptr_t)(s >= 0 ? 0 : -e);
}

TEST(platform_accept_after_hooked_accept) {
    start(1, WEFT_HOOK_ON);
    acc_listener = listen_any(&acc_port);
    CHECK(join(go(accept_case, NULL)) == NULL);       /* hooked: parks */
    CHECK(on_platform(accept_case, NULL) == NULL);    /* blocks, as the program's blocking socket does */
    CHECK(join(go(accept_case, NULL)) == NULL);
    close(acc_listener);
}

/* ---- signal handlers: a hooked call there goes to the kernel ---- */

static _Atomic int sig_plain_runs, sig_info_runs, sig_old_runs, sig_info_bad;
static int sig_idle[2]; /* a pipe nobody writes: a poll on it would park */

/* async-signal-safe calls only: each is hooked, and each would park */
static void sig_calls(void) {
    int e = errno;
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
    struct pollfd pf = {.fd = sig_idle[0], .events = POLLIN};
    poll(&pf, 1, 1);
    errno = e;
}

static void on_plain(int sig) {
    (void)sig;
    sig_calls();
    atomic_fetch_add(&sig_plain_runs, 1);
}

static void on_info(int sig, siginfo_t *si, void *uc) {
    if (sig != SIGUSR2 || !si || si->si_signo != SIGUSR2 || !uc) atomic_fetch_add(&sig_info_bad, 1);
    sig_calls();
    atomic_fetch_add(&sig_info_runs, 1);
}

static void on_old(int sig) {
    (void)sig;
    sig_calls();
    atomic_fetch_add(&sig_old_runs, 1);
}

static sigjmp_buf sig_jb;
static void on_jump(int sig) {
    (void)sig;
    siglongjmp(sig_jb, 1); /* out of the handler */
}

/* a platform thread: writes once the vthread has parked (or, if it never
 * does within 5 s, writes anyway and the check fails) */
static void *write_once_parked(void *arg) {
    uint64_t p0 = (uint64_t)(uintptr_t)arg;
    int64_t give_up = weft_now() + 5LL * 1000 * 1000 * 1000;
    while (parks_now() == p0 && weft_now() < give_up) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ(write(sig_idle[1], "j", 1), 1);
    return NULL;
}

/* A hooked read outside any handler parks (the writer waits for the park). */
static void expect_read_parks(void) {
    uint64_t p0 = parks_now();
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, write_once_parked, (void *)(uintptr_t)p0), 0);
    char c;
    CHECK_EQ(read(sig_idle[0], &c, 1), 1);
    CHECK(parks_now() > p0);
    pthread_join(th, NULL);
}

static void *jump_body(void *unused) {
    for (int i = 0; i < 5; i++) {
        volatile int jumped = 0;
        if (!sigsetjmp(sig_jb, 1)) raise(SIGURG);
        else jumped = 1;
        CHECK(jumped);
        /* out of the handler: a hooked call parks again */
        expect_read_parks();
    }
    return NULL;
}

/* On a vthread with hooks on: the handlers' sleeps and polls do not park. */
static void *raise_body(void *unused) {
    for (int i = 0; i < 20; i++) {
        uint64_t p0 = parks_now();
        CHECK_EQ(raise(SIGUSR1), 0);
        CHECK_EQ(raise(SIGUSR2), 0);
        CHECK_EQ(raise(SIGWINCH), 0);
        CHECK_EQ(parks_now(), p0);
    }
    /* and outside a handler a hooked call parks, as before (the writer
     * waits for the park: a spare carrier the monitor adds while a
     * handler's sleep holds this one must not make the read find data) */
    expect_read_parks();
    return NULL;
}

TEST(signal_handler_calls_go_to_kernel) {
    CHECK_EQ(pipe(sig_idle), 0);
    /* a handler installed behind the library's back, with the C library's
     * own sigaction, before the runtime starts: found when hooks go on */
    void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
    CHECK(libc != NULL);
    int (*libc_sigaction)(int, const struct sigaction *, struct sigaction *) =
        (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(libc, "sigaction");
    CHECK(libc_sigaction != NULL);
    struct sigaction a, o;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_old;
    sigemptyset(&a.sa_mask);
    CHECK_EQ(libc_sigaction(SIGWINCH, &a, NULL), 0);
    /* a plain handler through signal(), an SA_SIGINFO one through sigaction */
    CHECK(signal(SIGUSR1, on_plain) != SIG_ERR);
    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_info;
    a.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&a.sa_mask);
    CHECK_EQ(sigaction(SIGUSR2, &a, NULL), 0);
    /* what the program is told is its own handler, flags and all */
    CHECK_EQ(sigaction(SIGUSR1, NULL, &o), 0);
    CHECK(o.sa_handler == on_plain);
    CHECK(!(o.sa_flags & SA_SIGINFO));
    CHECK_EQ(sigaction(SIGUSR2, NULL, &o), 0);
    CHECK(o.sa_sigaction == on_info);
    CHECK(o.sa_flags & SA_SIGINFO);
    CHECK(o.sa_flags & SA_RESTART);
    CHECK(signal(SIGUSR1, on_plain) == on_plain); /* signal() returns the old one */
    start(1, WEFT_HOOK_ON);
    CHECK_EQ(sigaction(SIGWINCH, NULL, &o), 0);
    CHECK(o.sa_handler == on_old);
    join(go(raise_body, NULL));
    /* a handler left by siglongjmp: the count goes with it */
    CHECK(signal(SIGURG, on_jump) != SIG_ERR);
    join(go(jump_body, NULL));
    signal(SIGURG, SIG_DFL);
    CHECK_EQ(atomic_load(&sig_plain_runs), 20);
    CHECK_EQ(atomic_load(&sig_info_runs), 20);
    CHECK_EQ(atomic_load(&sig_old_runs), 20);
    CHECK_EQ(atomic_load(&sig_info_bad), 0);
    /* SIG_IGN and SIG_DFL go to the kernel as they are; the old handler
     * comes back as the program's */
    CHECK(signal(SIGUSR1, SIG_IGN) == on_plain);
    CHECK_EQ(raise(SIGUSR1), 0); /* ignored */
    CHECK_EQ(sigaction(SIGUSR1, NULL, &o), 0);
    CHECK(o.sa_handler == SIG_IGN);
    memset(&a, 0, sizeof a);
    a.sa_handler = SIG_DFL;
    CHECK_EQ(sigaction(SIGUSR2, &a, &o), 0);
    CHECK(o.sa_sigaction == on_info);
    /* SA_RESETHAND: the kernel's reset is what the program sees */
    memset(&a, 0, sizeof a);
    a.sa_handler = on_plain;
    a.sa_flags = SA_RESETHAND;
    CHECK_EQ(sigaction(SIGUSR1, &a, NULL), 0);
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(sigaction(SIGUSR1, NULL, &o), 0);
    CHECK(o.sa_handler == SIG_DFL);
    CHECK_EQ(atomic_load(&sig_plain_runs), 21);
    /* bad input as libc */
    errno = 0;
    CHECK_EQ(sigaction(SIGKILL, &a, NULL), -1);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK_EQ(sigaction(0, NULL, &o), -1);
    CHECK_EQ(errno, EINVAL);
    signal(SIGWINCH, SIG_DFL);
    close(sig_idle[0]);
    close(sig_idle[1]);
}

/* Signals at random moments: into vthreads' code, and into carriers in
 * the middle of a switch or a park, holding the scheduler's locks. */
enum { STORM_WORKERS = 8 };
static _Atomic int storm_stop;
static _Atomic int storm_tids[64];
static _Atomic int storm_ntids;
static weft_chan *storm_ch[STORM_WORKERS / 2];

static _Atomic int storm_last_tid; /* the carrier a worker ran on last */

static void storm_note_tid(void) {
    int tid = (int)gettid();
    atomic_store_explicit(&storm_last_tid, tid, memory_order_relaxed);
    int n = atomic_load(&storm_ntids);
    for (int i = 0; i < n; i++)
        if (atomic_load(&storm_tids[i]) == tid) return;
    if (n < 64 && atomic_compare_exchange_strong(&storm_ntids, &n, n + 1)) atomic_store(&storm_tids[n], tid);
}

/* pairs ping-pong through rendezvous channels (a park and a wake a
 * message), with hooked sleeps in between */
static void *storm_worker(void *arg) {
    int i = (int)(intptr_t)arg;
    weft_chan *c = storm_ch[i / 2];
    int v = 0;
    for (long k = 0; !atomic_load(&storm_stop); k++) {
        storm_note_tid();
        if (TEST_TSAN) { /* TSan runs a handler only when its thread passes
                          * one of its interceptors: give it one */
            static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
            pthread_mutex_lock(&m);
            pthread_mutex_unlock(&m);
        }
        if (i % 2 == 0) {
            if (weft_chan_send(c, &v) < 0) break;
        } else {
            if (weft_chan_recv(c, &v) < 0) break;
        }
        if (k % 16 == 0) {
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

TEST(signal_storm_while_parking) {
    CHECK_EQ(pipe(sig_idle), 0);
    CHECK(signal(SIGUSR1, on_plain) != SIG_ERR);
    start(0, WEFT_HOOK_ON);
    weft_thread *t[STORM_WORKERS];
    for (int i = 0; i < STORM_WORKERS / 2; i++) CHECK_EQ(weft_chan_create(&storm_ch[i], sizeof(int), 0), 0);
    for (int i = 0; i < STORM_WORKERS; i++) t[i] = go(storm_worker, (void *)(intptr_t)i);
    while (atomic_load(&storm_ntids) == 0) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL); /* a platform thread: the C library's */
    }
    int rounds = SCALE(500), sent = 0, tsan_late = 0;
    for (int r = 0; r < rounds; r++) {
        int before = atomic_load(&sig_plain_runs);
        int n = atomic_load(&storm_ntids);
        /* every carrier seen, in turn -- but under TSan, which runs a
         * handler only when its thread next enters one of its interceptors,
         * one that is running workers: an idle carrier asleep in a raw
         * system call (epoll_pwait2, io_uring_enter) may not wake for longer
         * than the wait below (src/observe/dump.c says the same) */
        int tid = TEST_TSAN ? atomic_load(&storm_last_tid) : atomic_load(&storm_tids[r % n]);
        /* to any thread of the process (not under TSan: above) */
        if (!TEST_TSAN && r % 10 == 9) CHECK_EQ(kill(getpid(), SIGUSR1), 0);
        else if (tid == 0 || syscall(SYS_tgkill, getpid(), tid, SIGUSR1) < 0) continue; /* a spare carrier gone */
        sent++;
        /* bounded: a handler that deadlocked fails here, not by hanging */
        int64_t give_up = weft_now() + 10LL * 1000 * 1000 * 1000;
        /* TSan keeps a signal with the fiber (vthread or carrier) it landed
         * on and runs the handler only when that fiber next passes one of
         * its interceptors, which may be never: there, wait a little and go
         * on (a deadlock would still hang the workers' joins) */
        if (TEST_TSAN) give_up = weft_now() + 20 * 1000 * 1000;
        while (atomic_load(&sig_plain_runs) == before) {
            int late = weft_now() >= give_up;
            if (TEST_TSAN && late) {
                tsan_late++;
                break;
            }
            if (late) { /* where the thread is, for the failure */
                char path[64], line[256] = "";
                snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
                FILE *f = fopen(path, "r");
                if (f && fgets(line, sizeof line, f)) printf("signal %d to tid %d unhandled; its syscall: %s", r, tid, line);
                if (f) fclose(f);
                fflush(stdout);
                weft_dump(1, WEFT_DUMP_TEXT);
            }
            CHECK(!late);
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL); /* a platform thread: the C library's */
        }
    }
    atomic_store(&storm_stop, 1);
    for (int i = 0; i < STORM_WORKERS / 2; i++) weft_chan_close(storm_ch[i]);
    for (int i = 0; i < STORM_WORKERS; i++) join(t[i]);
    for (int i = 0; i < STORM_WORKERS / 2; i++) weft_chan_free(storm_ch[i]);
    CHECK(sent > rounds / 2);
    if (TEST_TSAN) CHECK(atomic_load(&sig_plain_runs) <= sent);
    else CHECK_EQ(atomic_load(&sig_plain_runs), sent);
    printf("%d signals, %d carriers seen, %d left with TSan\n", sent, atomic_load(&storm_ntids), tsan_late);
    signal(SIGUSR1, SIG_DFL);
    close(sig_idle[0]);
    close(sig_idle[1]);
}

/* ---- LD_PRELOAD over a program weft did not compile ---- */

static char *run_foreign(const char *extra_env, int *status) {
    int out[2];
    CHECK_EQ(pipe(out), 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        if (extra_env) putenv((char *)extra_env);
        /* sanitizer builds: the foreign program is instrumented too, and
         * the preloaded library comes before the sanitizer's runtime */
        setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
        execl(WEFT_RUN_PATH, "weft-run", "--carriers", "1", WEFT_HOOK_FOREIGN_PATH, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    static char buf[4096];
    size_t got = 0;
    ssize_t n;
    while ((n = read(out[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
    buf[got] = 0;
    close(out[0]);
    CHECK_EQ(waitpid(pid, status, 0), pid);
    return buf;
}

TEST(preload_parks_a_foreign_program) {
    int st;
    char *o = run_foreign(NULL, &st);
    fprintf(stderr, "%s", o);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(o, "foreign on_vthread=1 ") != NULL);
    unsigned long long parks = 0;
    const char *p = strstr(o, "parks=");
    CHECK(p != NULL);
    parks = strtoull(p + 6, NULL, 10);
    CHECK(parks >= 3); /* the sleep, the pipe read, the connect at least */
    /* WEFT_HOOK=0: main is still a vthread, but nothing parks */
    o = run_foreign("WEFT_HOOK=0", &st);
    fprintf(stderr, "%s", o);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(o, "foreign on_vthread=1 parks=0 ok") != NULL);
}

