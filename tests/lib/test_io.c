/* Blocking-style I/O: pipes, socket pairs, TCP, files, deadlines,
 * cancellation (nothing lost), platform threads, weft_blocking, sendfile.
 * The backend is whatever WEFT_IO says: scripts/test.sh runs the suite on
 * io_uring and on epoll. */
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

static const char *want_backend(void) {
    const char *v = getenv("WEFT_IO");
    return v && *v ? v : "auto";
}

TEST(backend_is_the_one_asked_for) {
    int b = weft_io_backend();
    CHECK(b == WEFT_IO_URING || b == WEFT_IO_EPOLL);
    if (!strcmp(want_backend(), "epoll")) CHECK_EQ(b, WEFT_IO_EPOLL);
    if (!strcmp(want_backend(), "uring")) CHECK_EQ(b, WEFT_IO_URING);
}

/* ---- a pipe between two vthreads ---------------------------------------- */

static int pfd[2];

static void *pipe_reader(void *arg) {
    char buf[64];
    size_t got = 0;
    while (got < 5) {
        ssize_t r = weft_read(pfd[0], buf + got, sizeof buf - got);
        CHECK(r > 0);
        got += (size_t)r;
    }
    CHECK(memcmp(buf, "hello", 5) == 0);
    return (void *)got;
}

static void *pipe_writer(void *arg) {
    CHECK_EQ(weft_sleep(20 * 1000000), 0); /* the reader is parked by now */
    CHECK_EQ(weft_write(pfd[1], "hel", 3), 3);
    CHECK_EQ(weft_sleep(5 * 1000000), 0);
    CHECK_EQ(weft_write(pfd[1], "lo", 2), 2);
    return NULL;
}

TEST(pipe_read_parks_until_written) {
    CHECK_EQ(pipe(pfd), 0);
    weft_runtime_opts cfg = {.carriers = 1}; /* one carrier: the reader must not hold it */
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *r, *w;
    CHECK_EQ(weft_spawn(&r, pipe_reader, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&w, pipe_writer, NULL, NULL), 0);
    void *res;
    CHECK_EQ(weft_join(r, &res), 0);
    CHECK_EQ((intptr_t)res, 5);
    CHECK_EQ(weft_join(w, NULL), 0);
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- many socket pairs, echo -------------------------------------------- */

enum { PAIRS = 500, ROUNDS = 20 };
static int sp[PAIRS][2];

static void *echo_server(void *arg) {
    int fd = sp[(intptr_t)arg][1];
    char buf[256];
    for (;;) {
        ssize_t r = weft_recv(fd, buf, sizeof buf, 0);
        if (r == 0) break;
        CHECK(r > 0);
        CHECK_EQ(weft_write_all(fd, buf, (size_t)r), r);
    }
    return NULL;
}

static void *echo_client(void *arg) {
    int i = (int)(intptr_t)arg, fd = sp[i][0];
    for (int k = 0; k < ROUNDS; k++) {
        char out[32], in[32];
        int n = snprintf(out, sizeof out, "pair %d round %d", i, k);
        CHECK_EQ(weft_send(fd, out, (size_t)n, 0), n);
        int got = 0;
        while (got < n) {
            ssize_t r = weft_read(fd, in + got, sizeof in - (size_t)got);
            CHECK(r > 0);
            got += (int)r;
        }
        CHECK_EQ(got, n);
        CHECK(memcmp(in, out, (size_t)n) == 0);
    }
    shutdown(fd, SHUT_WR);
    return NULL;
}

TEST(socketpair_echo_many) {
    int pairs = LIVE_CAP(SCALE(PAIRS) < 50 ? 50 : SCALE(PAIRS));
    weft_thread *t[2 * PAIRS];
    for (int i = 0; i < pairs; i++) CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp[i]), 0);
    for (int i = 0; i < pairs; i++) {
        CHECK_EQ(weft_spawn(&t[2 * i], echo_server, (void *)(intptr_t)i, NULL), 0);
        CHECK_EQ(weft_spawn(&t[2 * i + 1], echo_client, (void *)(intptr_t)i, NULL), 0);
    }
    for (int i = 0; i < 2 * pairs; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < pairs; i++) {
        CHECK_EQ(weft_close(sp[i][0]), 0);
        CHECK_EQ(weft_close(sp[i][1]), 0);
    }
}

/* ---- TCP on loopback ---------------------------------------------------- */

static int lfd, lport;
static atomic_int served;

static void *tcp_conn(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[128];
    ssize_t r;
    while ((r = weft_recv(fd, buf, sizeof buf, 0)) > 0) CHECK_EQ(weft_send(fd, buf, (size_t)r, MSG_NOSIGNAL), r);
    CHECK_EQ(r, 0);
    CHECK_EQ(weft_close(fd), 0);
    atomic_fetch_add(&served, 1);
    return NULL;
}

static void *tcp_acceptor(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        int c = weft_accept(lfd, NULL, NULL, SOCK_CLOEXEC);
        CHECK(c >= 0);
        CHECK_EQ(weft_spawn(NULL, tcp_conn, (void *)(intptr_t)c, NULL), 0);
    }
    return NULL;
}

static void *tcp_client(void *arg) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lport),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(weft_connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    for (int k = 0; k < 10; k++) {
        char msg[16], in[16];
        int n = snprintf(msg, sizeof msg, "%d:%d", (int)(intptr_t)arg, k);
        CHECK_EQ(weft_write(fd, msg, (size_t)n), n);
        int got = 0;
        while (got < n) {
            ssize_t r = weft_recv(fd, in + got, sizeof in - (size_t)got, 0);
            CHECK(r > 0);
            got += (int)r;
        }
        CHECK(memcmp(in, msg, (size_t)n) == 0);
    }
    CHECK_EQ(weft_close(fd), 0);
    return NULL;
}

TEST(tcp_accept_connect_echo) {
    int n = LIVE_CAP(SCALE(1000) < 100 ? 100 : SCALE(1000));
    lfd = listen_any(&lport);
    atomic_store(&served, 0);
    weft_thread *acc;
    CHECK_EQ(weft_spawn(&acc, tcp_acceptor, (void *)(intptr_t)n, NULL), 0);
    weft_thread **cl = calloc((size_t)n, sizeof *cl);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&cl[i], tcp_client, (void *)(intptr_t)i, NULL), 0);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_join(cl[i], NULL), 0);
    CHECK_EQ(weft_join(acc, NULL), 0);
    while (atomic_load(&served) < n) weft_sleep(1000000);
    free(cl);
    CHECK_EQ(weft_close(lfd), 0);
}

/* ---- deadlines and cancellation ----------------------------------------- */

static void *read_with_deadline(void *arg) {
    char c;
    int64_t t0 = weft_now();
    int64_t old = weft_deadline_set(t0 + 30 * 1000000);
    CHECK_EQ(weft_read(pfd[0], &c, 1), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 30 * 1000000);
    weft_deadline_set(old);
    /* the timed-out read consumed nothing */
    CHECK_EQ(write(pfd[1], "x", 1), 1);
    CHECK_EQ(weft_read(pfd[0], &c, 1), 1);
    CHECK_EQ(c, 'x');
    /* weft_poll's own deadline */
    t0 = weft_now();
    CHECK_EQ(weft_poll(pfd[0], POLLIN, weft_now() + 20 * 1000000), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 20 * 1000000);
    CHECK_EQ(write(pfd[1], "y", 1), 1);
    int ev = weft_poll(pfd[0], POLLIN, weft_now() + 1000000000);
    CHECK(ev > 0 && (ev & POLLIN));
    CHECK_EQ(weft_read(pfd[0], &c, 1), 1);
    return NULL;
}

TEST(read_deadline_consumes_nothing) {
    CHECK_EQ(pipe(pfd), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, read_with_deadline, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    close(pfd[0]);
    close(pfd[1]);
}

static void *blocked_reader(void *arg) {
    char c;
    ssize_t r = weft_read(pfd[0], &c, 1);
    CHECK_EQ(r, -ECANCELED);
    CHECK(weft_cancelled());
    CHECK_EQ(weft_read(pfd[0], &c, 1), -ECANCELED); /* sticky */
    return NULL;
}

TEST(cancel_blocked_read) {
    CHECK_EQ(pipe(pfd), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, blocked_reader, NULL, NULL), 0);
    weft_sleep(20 * 1000000);
    CHECK_EQ(weft_cancel(t), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    /* the pipe is untouched and usable */
    CHECK_EQ(write(pfd[1], "z", 1), 1);
    char c;
    CHECK_EQ(weft_read(pfd[0], &c, 1), 1);
    close(pfd[0]);
    close(pfd[1]);
}

/* Cancellation racing completion, many times: every byte written is either
 * read by the cancelled reader (which then reports it) or still in the
 * socket -- never lost. */
enum { RACES = 2000 };
static int rsp[2];
static atomic_long bytes_read;

static void *racing_reader(void *arg) {
    char buf[8];
    ssize_t r = weft_recv(rsp[0], buf, sizeof buf, 0);
    if (r > 0) atomic_fetch_add(&bytes_read, r);
    else CHECK(r == -ECANCELED);
    return NULL;
}

static void *racing_writer(void *arg) {
    CHECK_EQ(weft_send(rsp[1], "a", 1, 0), 1);
    return NULL;
}

TEST(cancel_vs_completion_loses_nothing) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rsp), 0);
    atomic_store(&bytes_read, 0);
    int races = SCALE(RACES);
    long rest = 0;
    for (int i = 0; i < races; i++) {
        weft_thread *r, *w;
        CHECK_EQ(weft_spawn(&r, racing_reader, NULL, NULL), 0);
        if (i % 3) weft_yield();
        CHECK_EQ(weft_spawn(&w, racing_writer, NULL, NULL), 0);
        if (i % 2) weft_yield();
        CHECK_EQ(weft_cancel(r), 0);
        CHECK_EQ(weft_join(r, NULL), 0);
        /* take what no reader took (the reader is done), or after a few
         * hundred rounds lost to the cancel the socket is full and the
         * writer blocks for good */
        char b[64];
        ssize_t got;
        while ((got = recv(rsp[0], b, sizeof b, MSG_DONTWAIT)) > 0) rest += got;
        CHECK_EQ(weft_join(w, NULL), 0);
    }
    /* what was not read is still there */
    char buf[RACES];
    ssize_t k;
    while ((k = recv(rsp[0], buf, sizeof buf, MSG_DONTWAIT)) > 0) rest += k;
    CHECK_EQ(atomic_load(&bytes_read) + rest, races);
    close(rsp[0]);
    close(rsp[1]);
}

/* Deadlines racing completion, from a vthread on another carrier. */
static void *deadline_reader(void *arg) {
    char buf[8];
    weft_deadline_set(weft_now() + (int64_t)(intptr_t)arg * 1000);
    ssize_t r = weft_recv(rsp[0], buf, sizeof buf, 0);
    weft_deadline_set(0);
    if (r > 0) atomic_fetch_add(&bytes_read, r);
    else CHECK(r == -ETIMEDOUT);
    return NULL;
}

TEST(deadline_vs_completion_loses_nothing) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, rsp), 0);
    atomic_store(&bytes_read, 0);
    int races = SCALE(RACES);
    long rest = 0;
    for (int i = 0; i < races; i++) {
        weft_thread *r, *w;
        CHECK_EQ(weft_spawn(&r, deadline_reader, (void *)(intptr_t)(i % 50), NULL), 0);
        CHECK_EQ(weft_spawn(&w, racing_writer, NULL, NULL), 0);
        CHECK_EQ(weft_join(r, NULL), 0);
        char b[64]; /* as above: keep the socket from filling up */
        ssize_t got;
        while ((got = recv(rsp[0], b, sizeof b, MSG_DONTWAIT)) > 0) rest += got;
        CHECK_EQ(weft_join(w, NULL), 0);
    }
    char buf[RACES];
    ssize_t k;
    while ((k = recv(rsp[0], buf, sizeof buf, MSG_DONTWAIT)) > 0) rest += k;
    CHECK_EQ(atomic_load(&bytes_read) + rest, races);
    close(rsp[0]);
    close(rsp[1]);
}

static void *accept_deadline(void *arg) {
    int64_t old = weft_deadline_set(weft_now() + 20 * 1000000);
    CHECK_EQ(weft_accept(lfd, NULL, NULL, 0), -ETIMEDOUT);
    weft_deadline_set(old);
    return NULL;
}

TEST(accept_deadline) {
    lfd = listen_any(&lport);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, accept_deadline, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    close(lfd);
}

/* ---- files -------------------------------------------------------------- */

static char tmpl[64];

static void *file_io(void *arg) {
    int fd = open(tmpl, O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    char block[4096];
    for (int i = 0; i < 64; i++) {
        memset(block, 'a' + i % 26, sizeof block);
        CHECK_EQ(weft_pwrite(fd, block, sizeof block, (off_t)i * 4096), 4096);
    }
    CHECK_EQ(weft_fsync(fd), 0);
    for (int i = 63; i >= 0; i--) {
        CHECK_EQ(weft_pread(fd, block, sizeof block, (off_t)i * 4096), 4096);
        CHECK(block[0] == 'a' + i % 26 && block[4095] == 'a' + i % 26);
    }
    CHECK_EQ(weft_pread(fd, block, sizeof block, 64 * 4096), 0); /* end of file */
    CHECK_EQ(lseek(fd, 4096, SEEK_SET), 4096);
    CHECK_EQ(weft_read(fd, block, 10), 10); /* read(2) at the file position */
    CHECK_EQ(block[0], 'b');
    CHECK_EQ(weft_pread(fd, block, 1, -1), -EINVAL);
    CHECK_EQ(weft_close(fd), 0);
    return NULL;
}

TEST(file_pread_pwrite_fsync) {
    snprintf(tmpl, sizeof tmpl, "/tmp/weft-io-XXXXXX");
    int fd = mkstemp(tmpl);
    CHECK(fd >= 0);
    close(fd);
    weft_thread *t[4];
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_spawn(&t[i], file_io, NULL, NULL), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    file_io(NULL); /* and from a platform thread */
    unlink(tmpl);
}

static void *bad_fd(void *arg) {
    char c;
    CHECK_EQ(weft_read(-1, &c, 1), -EBADF);
    CHECK_EQ(weft_read(1000000, &c, 1), -EBADF);
    CHECK_EQ(weft_recv(999999, &c, 1, 0), -EBADF);
    CHECK_EQ(weft_close(-1), -EBADF);
    return NULL;
}

TEST(bad_fds_are_errors) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, bad_fd, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    bad_fd(NULL);
}

/* ---- sendfile ----------------------------------------------------------- */

static void *sendfile_vt(void *arg) {
    int nonblock = (int)(intptr_t)arg;
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0, sv), 0);
    int fd = open(tmpl, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    /* a reader on another vthread drains while we send more than the buffer holds */
    off_t off = 0;
    long total = 0;
    char *got = malloc((size_t)st.st_size);
    int rfd = sv[1];
    while (off < st.st_size) {
        ssize_t r = weft_sendfile(sv[0], fd, &off, (size_t)(st.st_size - off));
        CHECK(r > 0);
        /* drain what is there so the next send has room */
        for (;;) {
            ssize_t k = recv(rfd, got + total, (size_t)(st.st_size - total), MSG_DONTWAIT);
            if (k <= 0) break;
            total += k;
        }
    }
    while (total < st.st_size) {
        ssize_t k = weft_recv(rfd, got + total, (size_t)(st.st_size - total), 0);
        CHECK(k > 0);
        total += k;
    }
    CHECK_EQ(total, st.st_size);
    for (long i = 0; i < total; i += 4096) CHECK_EQ(got[i], 'a' + (i / 4096) % 26);
    free(got);
    close(fd);
    close(sv[0]);
    close(sv[1]);
    return NULL;
}

TEST(sendfile_blocking_and_nonblocking_sockets) {
    snprintf(tmpl, sizeof tmpl, "/tmp/weft-io-XXXXXX");
    int fd = mkstemp(tmpl);
    CHECK(fd >= 0);
    char block[4096];
    for (int i = 0; i < 256; i++) { /* 1 MiB: more than a socket buffer */
        memset(block, 'a' + i % 26, sizeof block);
        CHECK_EQ(write(fd, block, sizeof block), 4096);
    }
    close(fd);
    for (int nb = 0; nb < 2; nb++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, sendfile_vt, (void *)(intptr_t)nb, NULL), 0);
        CHECK_EQ(weft_join(t, NULL), 0);
    }
    unlink(tmpl);
}

/* ---- platform threads --------------------------------------------------- */

TEST(platform_thread_io_and_deadline) {
    DET_SKIP("a platform thread's I/O deadline passes in real time, the clock is virtual");
    CHECK_EQ(weft_init(NULL), 0);
    CHECK_EQ(pipe(pfd), 0);
    CHECK_EQ(weft_write(pfd[1], "ab", 2), 2);
    char buf[4];
    CHECK_EQ(weft_read(pfd[0], buf, 4), 2);
    int64_t t0 = weft_now();
    weft_deadline_set(t0 + 20 * 1000000);
    CHECK_EQ(weft_read(pfd[0], buf, 1), -ETIMEDOUT);
    weft_deadline_set(0);
    CHECK(weft_now() - t0 >= 20 * 1000000);
    CHECK_EQ(weft_poll(pfd[1], POLLOUT, 0) & POLLOUT, POLLOUT);
    /* a vthread writes while the platform thread blocks in read */
    weft_thread *w;
    CHECK_EQ(weft_spawn(&w, pipe_writer, NULL, NULL), 0);
    size_t got = 0;
    while (got < 5) {
        ssize_t r = weft_read(pfd[0], buf, 4);
        CHECK(r > 0);
        got += (size_t)r;
    }
    CHECK_EQ(weft_join(w, NULL), 0);
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- weft_blocking ------------------------------------------------------ */

static atomic_int ticks;

static void *foreign_sleep(void *arg) {
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL); /* blocks its OS thread: must not be a carrier */
    return (void *)(intptr_t)(atomic_load(&ticks) + 1000);
}

static void *ticker(void *arg) {
    for (int i = 0; i < 20; i++) {
        atomic_fetch_add(&ticks, 1);
        weft_sleep(1000000);
    }
    return NULL;
}

static void *use_blocking(void *arg) {
    void *res = NULL;
    CHECK_EQ(weft_blocking(foreign_sleep, NULL, &res), 0);
    CHECK((intptr_t)res > 1000); /* the ticker ran meanwhile */
    return NULL;
}

TEST(blocking_runs_off_carrier) {
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    atomic_store(&ticks, 0);
    weft_thread *b, *t;
    CHECK_EQ(weft_spawn(&t, ticker, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&b, use_blocking, NULL, NULL), 0);
    CHECK_EQ(weft_join(b, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    void *res;
    CHECK_EQ(weft_blocking(foreign_sleep, NULL, &res), 0); /* platform thread: runs inline */
    CHECK_EQ(weft_blocking(NULL, NULL, NULL), -EINVAL);
}

/* ---- parked on I/O costs no CPU ----------------------------------------- */

static int idle_sv[200][2];

static void *idle_reader(void *arg) {
    char c;
    CHECK_EQ(weft_read(idle_sv[(intptr_t)arg][0], &c, 1), 0);
    return NULL;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The readers may still be parking, and the carriers finishing the spawn
 * burst, when the first window opens on a loaded machine: one quiet 0.5 s
 * window of five is enough; a carrier spinning or polling in a loop is busy
 * in every one. */
TEST(parked_readers_cost_no_cpu) {
    weft_thread *t[200];
    weft_stats st0, st;
    weft_stats_get(&st0);
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, idle_sv[i]), 0);
        CHECK_EQ(weft_spawn(&t[i], idle_reader, (void *)(intptr_t)i, NULL), 0);
    }
    do { /* all parked (counters read without synchronising: until they show it) */
        weft_sleep(1000000);
        weft_stats_get(&st);
    } while (st.parks < st0.parks + 200);
    double used = 0;
    for (int k = 0; k < 5; k++) {
        double c0 = cpu_s();
        struct timespec ts = {0, 500 * 1000000};
        nanosleep(&ts, NULL);
        used = cpu_s() - c0;
        printf("cpu %.4f s in 0.5 s with 200 parked readers\n", used);
        /* a carrier spinning or polling in a loop would burn ~0.5 s per carrier */
        if (used < 0.1) break;
    }
    CHECK(used < 0.1);
    for (int i = 0; i < 200; i++) shutdown(idle_sv[i][1], SHUT_WR);
    for (int i = 0; i < 200; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < 200; i++) {
        close(idle_sv[i][0]);
        close(idle_sv[i][1]);
    }
}

/* A platform thread's call blocks even on an O_NONBLOCK socket (the
 * models of weft-httpd that run on pthreads rely on it). */
static int nb_sv[2];

static void *late_writer(void *arg) {
    weft_sleep(20 * 1000000);
    CHECK_EQ(weft_send(nb_sv[1], "q", 1, 0), 1);
    return NULL;
}

TEST(platform_thread_blocks_on_nonblocking_fd) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, nb_sv), 0);
    weft_thread *w;
    CHECK_EQ(weft_spawn(&w, late_writer, NULL, NULL), 0);
    char c = 0;
    CHECK_EQ(weft_recv(nb_sv[0], &c, 1, 0), 1);
    CHECK_EQ(c, 'q');
    CHECK_EQ(weft_join(w, NULL), 0);
    close(nb_sv[0]);
    close(nb_sv[1]);
}

/* Out of descriptors at start: weft_init fails with -EMFILE, cleanly, and
 * works once descriptors are available again. */
TEST(init_without_descriptors_fails_cleanly) {
    DET_SKIP("configures 2 carriers (their pollers' descriptors)");
    struct rlimit old;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    int open_now = 0;
    for (int fd = 0; fd < 1024; fd++) open_now += fcntl(fd, F_GETFD) >= 0;
    struct rlimit tiny = {(rlim_t)open_now + 1, old.rlim_max};
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &tiny), 0);
    weft_runtime_opts cfg = {.carriers = 2};
    int r = weft_init(&cfg);
    CHECK(r == -EMFILE || r == -ENFILE);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(pipe(pfd), 0);
    CHECK_EQ(weft_write(pfd[1], "k", 1), 1);
    char c;
    CHECK_EQ(weft_read(pfd[0], &c, 1), 1);
    close(pfd[0]);
    close(pfd[1]);
}

/* ---- closing an fd other vthreads are blocked on ----------------------- */

/* As in Go and Java: weft_close ends the operations in flight on the fd
 * with -EBADF (io_uring: cancelled by fd; epoll: the waiters woken). */
static int csp[2];

static void *blocked_until_closed(void *arg) {
    char c;
    ssize_t r = weft_recv(csp[0], &c, 1, 0);
    CHECK_EQ(r, -EBADF);
    CHECK(!weft_cancelled());
    return NULL;
}

static void *closer(void *arg) {
    CHECK_EQ(weft_close(csp[0]), 0);
    return NULL;
}

TEST(close_wakes_blocked_readers) {
    for (int from_vthread = 0; from_vthread < 2; from_vthread++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, csp), 0);
        enum { READERS = 4 };
        weft_thread *r[READERS];
        for (int i = 0; i < READERS; i++) CHECK_EQ(weft_spawn(&r[i], blocked_until_closed, NULL, NULL), 0);
        weft_sleep(20 * 1000000); /* all four parked in their recv */
        if (from_vthread) {
            weft_thread *c;
            CHECK_EQ(weft_spawn(&c, closer, NULL, NULL), 0);
            CHECK_EQ(weft_join(c, NULL), 0);
        } else {
            CHECK_EQ(weft_close(csp[0]), 0);
        }
        for (int i = 0; i < READERS; i++) CHECK_EQ(weft_join(r[i], NULL), 0);
        CHECK_EQ(fcntl(csp[0], F_GETFD), -1); /* really closed */
        CHECK_EQ(errno, EBADF);
        close(csp[1]);
    }
}

static int close_lfd;

static void *blocked_accept(void *arg) {
    CHECK_EQ(weft_accept(close_lfd, NULL, NULL, SOCK_CLOEXEC), -EBADF);
    return NULL;
}

TEST(close_wakes_blocked_accept) {
    int port;
    close_lfd = listen_any(&port);
    weft_thread *a;
    CHECK_EQ(weft_spawn(&a, blocked_accept, NULL, NULL), 0);
    weft_sleep(20 * 1000000);
    CHECK_EQ(weft_close(close_lfd), 0);
    CHECK_EQ(weft_join(a, NULL), 0);
}

/* The number a close frees is reused at once by socket(): the new socket's
 * operations must work, nothing of the old one's close may stick to it. */
TEST(close_then_reuse_number) {
    int rounds = SCALE(200);
    for (int i = 0; i < rounds; i++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, csp), 0);
        int old = csp[0];
        weft_thread *r;
        CHECK_EQ(weft_spawn(&r, blocked_until_closed, NULL, NULL), 0);
        if (i % 2) weft_sleep(1000000);
        else weft_yield();
        /* the reader may not have started: then its recv finds the fd
         * closed (-EBADF from the kernel) -- the same answer */
        CHECK_EQ(weft_close(old), 0);
        CHECK_EQ(weft_join(r, NULL), 0);
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        CHECK_EQ(weft_send(sv[1], "n", 1, 0), 1);
        char c = 0;
        CHECK_EQ(weft_recv(sv[0], &c, 1, 0), 1);
        CHECK_EQ(c, 'n');
        CHECK_EQ(weft_close(sv[0]), 0);
        CHECK_EQ(weft_close(sv[1]), 0);
        close(csp[1]);
    }
}

/* A reader looping on recv while another vthread closes the fd at a random
 * moment, data flowing meanwhile: every reader ends (-EBADF, or 0 when it
 * saw the peer's end), no fd is left open, nothing hangs. */
static void *read_until_error(void *arg) {
    int fd = (int)(intptr_t)arg;
    char buf[16];
    for (;;) {
        ssize_t r = weft_recv(fd, buf, sizeof buf, 0);
        if (r <= 0) {
            CHECK(r == -EBADF || r == 0);
            return NULL;
        }
    }
}

typedef struct close_race {
    int sv[2];
    int round;
} close_race;

static void *write_then_close(void *arg) {
    close_race *cr = arg;
    for (int i = 0; i < 3; i++) {
        if (weft_send(cr->sv[1], "abc", 3, MSG_NOSIGNAL) < 0) break;
        weft_yield();
    }
    /* every other round, late enough that the reader is parked in recv */
    if (cr->round % 2) weft_sleep(200 * 1000);
    CHECK_EQ(weft_close(cr->sv[0]), 0);
    return NULL;
}

TEST(close_races_reads_never_hang) {
    int before = 0;
    int rounds = SCALE(1000);
    for (int i = 0; i < rounds; i++) {
        if (i == 1) /* the runtime's own descriptors exist by now */
            for (int fd = 0; fd < 1024; fd++) before += fcntl(fd, F_GETFD) >= 0;
        close_race cr = {.round = i};
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cr.sv), 0);
        weft_thread *r, *w;
        CHECK_EQ(weft_spawn(&r, read_until_error, (void *)(intptr_t)cr.sv[0], NULL), 0);
        CHECK_EQ(weft_spawn(&w, write_then_close, &cr, NULL), 0);
        CHECK_EQ(weft_join(w, NULL), 0);
        CHECK_EQ(weft_join(r, NULL), 0);
        close(cr.sv[1]);
    }
    int after = 0;
    for (int fd = 0; fd < 1024; fd++) after += fcntl(fd, F_GETFD) >= 0;
    CHECK_EQ(after, before);
}

/* Closes racing on reused numbers: threads open and weft_close sockets as
 * fast as they can, so a number one thread's close(2) has just freed is
 * often another thread's new socket before the first close is over.  Every
 * close must close (0, no fd left behind): the number's second owner waits
 * for the first close to end instead of being refused. */
static atomic_int close_fail;

static void *open_close_loop(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            atomic_fetch_add(&close_fail, 1);
            continue;
        }
        if (weft_close(sv[0]) != 0) atomic_fetch_add(&close_fail, 1);
        if (weft_close(sv[1]) != 0) atomic_fetch_add(&close_fail, 1);
    }
    return NULL;
}

static void *noop(void *arg) { return arg; }

TEST(close_on_reused_numbers_always_closes) {
    /* the loops below hold their carriers (no call parks): the monitor
     * would start spare carriers, whose rings and eventfds are the
     * runtime's own but opened mid-test -- and, on a loaded machine, find
     * a loop pinned in close(2) and name its site, which opens (and
     * caches) the modules' files for libdw: so no monitor at all */
    weft_runtime_opts cfg = {.max_compensate = -1, .pin_threshold_ns = -1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t; /* the runtime is up: its own descriptors are counted below */
    CHECK_EQ(weft_spawn(&t, noop, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    int before = 0;
    for (int fd = 0; fd < 1024; fd++) before += fcntl(fd, F_GETFD) >= 0;
    atomic_store(&close_fail, 0);
    int rounds = SCALE(20000);
    enum { PTHREADS = 3, VTHREADS = 3 };
    pthread_t pt[PTHREADS];
    weft_thread *vt[VTHREADS];
    for (int i = 0; i < PTHREADS; i++)
        CHECK_EQ(pthread_create(&pt[i], NULL, open_close_loop, (void *)(intptr_t)rounds), 0);
    for (int i = 0; i < VTHREADS; i++)
        CHECK_EQ(weft_spawn(&vt[i], open_close_loop, (void *)(intptr_t)rounds, NULL), 0);
    for (int i = 0; i < PTHREADS; i++) CHECK_EQ(pthread_join(pt[i], NULL), 0);
    for (int i = 0; i < VTHREADS; i++) CHECK_EQ(weft_join(vt[i], NULL), 0);
    CHECK_EQ(atomic_load(&close_fail), 0);
    int after = 0;
    for (int fd = 0; fd < 1024; fd++) after += fcntl(fd, F_GETFD) >= 0;
    CHECK_EQ(after, before);
}

/* ---- io_uring forbidden (seccomp, as in a container) -------------------- */

#include "no_uring.h"

#define NO_URING_UNDER_QEMU "no_uring's seccomp filter is checked against the host's system calls, not the guest's: qemu-user cannot run it"

/* Runs fn in a child where io_uring is forbidden, with WEFT_IO=mode;
 * returns the child's stderr and exit status. */
static char *run_without_uring(int (*fn)(void), const char *mode, int *status) {
    int ep[2];
    CHECK_EQ(pipe(ep), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        dup2(ep[1], 2);
        close(ep[0]);
        close(ep[1]);
        if (forbid_io_uring() < 0) _exit(90);
        setenv("WEFT_IO", mode, 1);
        int r = fn();
        fflush(NULL);
        exit(r);
    }
    close(ep[1]);
    static char buf[8192];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof buf - 1 && (k = read(ep[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)k;
    buf[n] = 0;
    close(ep[0]);
    CHECK_EQ(waitpid(pid, status, 0), pid);
    return buf;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static int use_io_auto(void) {
    CHECK_EQ(weft_init(NULL), 0);
    CHECK_EQ(weft_io_backend(), WEFT_IO_EPOLL);
    /* and I/O works: a reader parked on a pipe, a writer */
    CHECK_EQ(pipe(pfd), 0);
    weft_thread *r, *w;
    CHECK_EQ(weft_spawn(&r, pipe_reader, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&w, pipe_writer, NULL, NULL), 0);
    void *got = NULL;
    CHECK_EQ(weft_join(r, &got), 0);
    CHECK_EQ((intptr_t)got, 5);
    CHECK_EQ(weft_join(w, NULL), 0);
    weft_shutdown();
    CHECK_EQ(weft_init(NULL), 0); /* started again: no second line */
    weft_shutdown();
    return 0;
}

TEST(auto_picks_epoll_where_io_uring_is_forbidden) {
    EMU_SKIP(NO_URING_UNDER_QEMU);
    int st;
    char *err = run_without_uring(use_io_auto, "auto", &st);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || count_lines(err) != 1) fprintf(stderr, "child stderr:\n%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(count_lines(err), 1); /* one line, saying why */
    CHECK(strncmp(err, "weft: io_uring is not available here (", 38) == 0);
    CHECK(strstr(err, "Operation not permitted") != NULL);
    CHECK(strstr(err, "seccomp") != NULL);
    CHECK(strstr(err, ": using epoll\n") != NULL);
}

static int use_io_uring_by_env(void) {
    CHECK_EQ(weft_init(NULL), -EPERM);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, noop, NULL, NULL), -EPERM); /* a clear error, not a hang */
    CHECK_EQ(weft_init(NULL), -EPERM);
    weft_shutdown(); /* nothing to stop */
    return 0;
}

TEST(weft_io_uring_fails_clearly_where_io_uring_is_forbidden) {
    EMU_SKIP(NO_URING_UNDER_QEMU);
    int st;
    char *err = run_without_uring(use_io_uring_by_env, "uring", &st);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || count_lines(err) != 1) fprintf(stderr, "child stderr:\n%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(count_lines(err), 1); /* said once, however often it is asked */
    CHECK(strstr(err, "weft: WEFT_IO=uring asks for io_uring, which cannot be used here (") == err);
    CHECK(strstr(err, "seccomp") != NULL);
    CHECK(strstr(err, "use WEFT_IO=epoll or auto") != NULL);
}

static int use_io_uring_by_config(void) {
    weft_runtime_opts cfg = {.io = WEFT_IO_URING};
    CHECK_EQ(weft_init(&cfg), -EPERM);
    weft_runtime_opts cfg2 = {.io = WEFT_IO_EPOLL}; /* the caller can fall back itself */
    CHECK_EQ(weft_init(&cfg2), 0);
    CHECK_EQ(weft_io_backend(), WEFT_IO_EPOLL);
    weft_shutdown();
    return 0;
}

TEST(config_io_uring_fails_clearly_where_io_uring_is_forbidden) {
    EMU_SKIP(NO_URING_UNDER_QEMU);
    int st;
    char *err = run_without_uring(use_io_uring_by_config, "auto", &st);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || count_lines(err) != 1) fprintf(stderr, "child stderr:\n%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(count_lines(err), 1);
    CHECK(strstr(err, "weft: weft_runtime_opts.io = WEFT_IO_URING asks for io_uring, which cannot be used here (") == err);
}

/* The helpers scripts/test.sh relies on: io_probe says no under no_uring,
 * with weft's reason on stderr. */
static int run_probe_without_uring(void) {
    execl(WEFT_NO_URING_PATH, "no_uring", WEFT_IO_PROBE_PATH, (char *)NULL);
    return 127;
}

TEST(probe_says_no_under_no_uring) {
    EMU_SKIP(NO_URING_UNDER_QEMU);
    int st;
    char *err = run_without_uring(run_probe_without_uring, "auto", &st);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 1)) fprintf(stderr, "probe stderr:\n%s", err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    CHECK(strstr(err, "cannot be used here (Operation not permitted") != NULL);
}
