/* Completion handlers on sockets, and timers (include/weft/async.h): an
 * echo server written as a chain of handlers, deadlines, closing with
 * operations in flight (also from a handler), large sends, O_NONBLOCK
 * sockets, handlers on an executor (refused ones too), many idle
 * connections held with no vthread each.  The backend is whatever WEFT_IO
 * says: ctest runs each test on io_uring and on epoll. */
#include "harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define MS 1000000LL

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* ---- an echo server as a chain of handlers ---------------------------------------- */

typedef struct server {
    int lfd;
    atomic_int accepted, closed, accept_errors;
    atomic_int on_vthread; /* handlers that ran on a vthread (the dispatcher) */
    atomic_int chains_left; /* the accept chains not ended yet */
} server;

typedef struct conn {
    server *s;
    int fd;
    char buf[512];
} conn;

static void conn_read(conn *c);

static void conn_sent(ssize_t r, void *ctx) {
    conn *c = ctx;
    if (weft_self()) atomic_fetch_add(&c->s->on_vthread, 1);
    if (r < 0) {
        CHECK_EQ(weft_close(c->fd), 0);
        atomic_fetch_add(&c->s->closed, 1);
        free(c);
        return;
    }
    conn_read(c);
}

static void conn_got(ssize_t r, void *ctx) {
    conn *c = ctx;
    if (weft_self()) atomic_fetch_add(&c->s->on_vthread, 1);
    if (r <= 0) { /* end of stream (or an error): the chain ends here */
        CHECK_EQ(weft_close(c->fd), 0);
        atomic_fetch_add(&c->s->closed, 1);
        free(c);
        return;
    }
    CHECK_EQ(weft_send_async(c->fd, c->buf, (size_t)r, MSG_NOSIGNAL, conn_sent, c, NULL), 0);
}

static void conn_read(conn *c) { CHECK_EQ(weft_recv_async(c->fd, c->buf, sizeof c->buf, 0, conn_got, c, NULL), 0); }

static void accepted(ssize_t r, void *ctx) {
    server *s = ctx;
    if (r < 0) { /* the listening socket was closed: the chain ends */
        CHECK_EQ(r, -EBADF);
        atomic_fetch_sub(&s->chains_left, 1); /* the handler's last touch of s */
        return;
    }
    atomic_fetch_add(&s->accepted, 1);
    conn *c = calloc(1, sizeof *c);
    CHECK(c != NULL);
    c->s = s;
    c->fd = (int)r;
    conn_read(c);
    CHECK_EQ(weft_accept_async(s->lfd, SOCK_CLOEXEC, accepted, s, NULL), 0);
}

/* Starts the server with `chains` accepts pending (from this thread: they
 * go to the carriers in turn). */
static void server_start(server *s, int *port, int chains) {
    memset(s, 0, sizeof *s);
    s->lfd = listen_any(port);
    atomic_store(&s->chains_left, chains);
    for (int i = 0; i < chains; i++) CHECK_EQ(weft_accept_async(s->lfd, SOCK_CLOEXEC, accepted, s, NULL), 0);
}

static void server_stop(server *s) {
    CHECK_EQ(weft_close(s->lfd), 0); /* ends the pending accepts with -EBADF */
    while (atomic_load(&s->chains_left)) usleep(500);
}

typedef struct client_arg {
    int port, rounds;
    atomic_int *ok;
} client_arg;

static void *client(void *arg) {
    client_arg *a = arg;
    int fd = dial(a->port);
    for (int i = 0; i < a->rounds; i++) {
        char msg[64], got[64];
        int n = snprintf(msg, sizeof msg, "message %d from %p", i, (void *)&fd);
        CHECK_EQ(send(fd, msg, (size_t)n, MSG_NOSIGNAL), n);
        int have = 0;
        while (have < n) {
            ssize_t r = recv(fd, got + have, sizeof got - (size_t)have, 0);
            CHECK(r > 0);
            have += (int)r;
        }
        CHECK_EQ(have, n);
        CHECK(memcmp(msg, got, (size_t)n) == 0);
    }
    close(fd);
    atomic_fetch_add(a->ok, 1);
    return NULL;
}

TEST(echo_server_as_handlers) {
    for (int rep = 0; rep < 5; rep++) {
        server s;
        int port;
        server_start(&s, &port, 2);
        enum { CLIENTS = 40 };
        atomic_int ok = 0;
        client_arg ca = {port, 50, &ok};
        pthread_t th[CLIENTS];
        for (int i = 0; i < CLIENTS; i++) CHECK_EQ(pthread_create(&th[i], NULL, client, &ca), 0);
        for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
        CHECK_EQ(atomic_load(&ok), CLIENTS);
        CHECK_EQ(atomic_load(&s.accepted), CLIENTS);
        while (atomic_load(&s.closed) < CLIENTS) usleep(1000); /* the last EOFs */
        CHECK(atomic_load(&s.on_vthread) > 0);                 /* on the dispatchers */
        server_stop(&s);
    }
}

/* ---- no vthread per connection -------------------------------------------------- */

typedef struct idle {
    int fd;
    atomic_int *ready;
} idle;

static void idle_ready(ssize_t r, void *ctx) {
    idle *c = ctx;
    CHECK(r > 0 && (r & POLLIN));
    char b[8];
    CHECK_EQ(recv(c->fd, b, sizeof b, MSG_DONTWAIT), 1);
    atomic_fetch_add(c->ready, 1);
}

TEST(idle_connections_hold_no_vthread) {
    enum { N = 2000 };
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < 2 * N + 64) {
        rl.rlim_cur = rl.rlim_max < 2 * N + 64 ? rl.rlim_max : 2 * N + 64;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int n = rl.rlim_cur >= 2 * N + 64 ? N : (int)(rl.rlim_cur - 64) / 2;
    int (*sv)[2] = calloc((size_t)n, sizeof *sv);
    idle *cs = calloc((size_t)n, sizeof *cs);
    atomic_int ready = 0;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv[i]), 0);
        cs[i] = (idle){sv[i][0], &ready};
        CHECK_EQ(weft_poll_async(sv[i][0], POLLIN, idle_ready, &cs[i], NULL), 0);
    }
    /* every wait in place, and the vthreads alive are the dispatchers only */
    char *d = dump_showing(WEFT_DUMP_TEXT, "async completions", NULL);
    free(d);
    weft_stats st;
    weft_stats_get(&st);
    CHECK(st.live <= st.carriers);
    for (int i = 0; i < n; i++) CHECK_EQ(write(sv[i][1], "x", 1), 1);
    while (atomic_load(&ready) < n) usleep(1000);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(weft_close(sv[i][0]), 0);
        close(sv[i][1]);
    }
    free(sv);
    free(cs);
}

/* ---- deadlines ----------------------------------------------------------------- */

/* A handler's outcome.  Not a weft_latch: a count_down may still touch
 * the latch after its waiter returned, and these live on the stack and are
 * reused at once; setting `done` is a handler's last touch. */
typedef struct waiter {
    atomic_long res;
    atomic_int done;
} waiter;

static void arm_w(waiter *w) {
    atomic_store(&w->res, 0);
    atomic_store(&w->done, 0);
}

static void note(ssize_t r, void *ctx) {
    waiter *w = ctx;
    atomic_store(&w->res, r);
    atomic_store(&w->done, 1);
}

static ssize_t await(waiter *w) {
    while (!atomic_load(&w->done)) usleep(100);
    return atomic_load(&w->res);
}

TEST(recv_deadline_times_out_and_loses_nothing) {
    for (int rep = 0; rep < 20; rep++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char buf[16];
        waiter w;
        arm_w(&w);
        int64_t t0 = weft_now();
        weft_async_opts o = {.deadline = t0 + 20 * MS};
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, &o), 0);
        CHECK_EQ(await(&w), -ETIMEDOUT);
        CHECK(weft_now() >= t0 + 20 * MS); /* not before its deadline */
        /* the socket is intact: what comes next is read whole */
        CHECK_EQ(write(sv[1], "after", 5), 5);
        arm_w(&w);
        o.deadline = weft_now() + 60 * 1000 * MS;
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, &o), 0);
        CHECK_EQ(await(&w), 5);
        CHECK(memcmp(buf, "after", 5) == 0);
        /* a deadline already past */
        arm_w(&w);
        o.deadline = weft_now() - 1;
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, &o), 0);
        CHECK_EQ(await(&w), -ETIMEDOUT);
        CHECK_EQ(weft_close(sv[0]), 0);
        close(sv[1]);
    }
}

/* Data that arrives just as the deadline passes: either the bytes or
 * -ETIMEDOUT, and after -ETIMEDOUT the bytes are still there. */
TEST(deadline_races_data) {
    for (int rep = 0; rep < 200; rep++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char buf[4] = {0};
        waiter w;
        arm_w(&w);
        weft_async_opts o = {.deadline = weft_now() + 2 * MS};
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, &o), 0);
        struct timespec ts = {0, (rep % 4) * 1000000L};
        nanosleep(&ts, NULL);
        CHECK_EQ(write(sv[1], "abcd", 4), 4);
        ssize_t r = await(&w);
        if (r == -ETIMEDOUT) {
            CHECK_EQ(recv(sv[0], buf, sizeof buf, 0), 4);
        } else {
            CHECK(r > 0);
            if (r < 4) CHECK_EQ(recv(sv[0], buf + r, sizeof buf - (size_t)r, 0), 4 - r);
        }
        CHECK(memcmp(buf, "abcd", 4) == 0);
        CHECK_EQ(weft_close(sv[0]), 0);
        close(sv[1]);
    }
}

/* ---- closing ------------------------------------------------------------------- */

TEST(close_ends_pending_operations) {
    for (int rep = 0; rep < 50; rep++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char buf[16];
        waiter w, p;
        arm_w(&w);
        arm_w(&p);
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, NULL), 0);
        CHECK_EQ(weft_poll_async(sv[0], POLLIN, note, &p, NULL), 0);
        if (rep % 2) usleep(200); /* in the kernel by now, or still in the inbox */
        CHECK_EQ(weft_close(sv[0]), 0);
        CHECK_EQ(await(&w), -EBADF);
        CHECK_EQ(await(&p), -EBADF);
        close(sv[1]);
    }
}

/* A handler closes a socket on which another operation is in flight: the
 * close must not wait for its own dispatcher. */
typedef struct closer {
    int fd;
    waiter *w;
} closer;

static void close_it(ssize_t r, void *ctx) {
    closer *c = ctx;
    CHECK_EQ(r, 0);
    CHECK_EQ(weft_close(c->fd), 0);
    note(0, c->w);
}

typedef struct close_case {
    int rep;
    closer c;
    char buf[16];
    waiter *w;
} close_case;

/* From a vthread, both calls go to its carrier's dispatcher. */
static void *start_both(void *arg) {
    close_case *k = arg;
    CHECK_EQ(weft_recv_async(k->c.fd, k->buf, sizeof k->buf, 0, note, k->w, NULL), 0);
    CHECK_EQ(weft_timer_async(weft_now() + (k->rep % 3) * MS, close_it, &k->c, NULL), 0);
    return NULL;
}

TEST(handler_closes_socket_with_operation_in_flight) {
    for (int rep = 0; rep < 50; rep++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        waiter w, t;
        arm_w(&w);
        arm_w(&t);
        close_case k = {rep, {sv[0], &t}, {0}, &w};
        weft_thread *th;
        CHECK_EQ(weft_spawn(&th, start_both, &k, NULL), 0);
        CHECK_EQ(weft_join(th, NULL), 0);
        await(&t);
        CHECK_EQ(await(&w), -EBADF);
        close(sv[1]);
    }
}

/* ---- sends --------------------------------------------------------------------- */

typedef struct drain {
    int fd;
    size_t n;
    unsigned char *got;
} drain;

static void *drain_main(void *arg) {
    drain *d = arg;
    size_t have = 0;
    while (have < d->n) {
        ssize_t r = recv(d->fd, d->got + have, d->n - have < 7000 ? d->n - have : 7000, 0);
        CHECK(r > 0);
        have += (size_t)r;
        if (have % 5 == 0) usleep(50); /* a slow reader: the sender meets a full buffer */
    }
    return NULL;
}

static void large_send(int nonblock) {
    size_t n = 8u << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(i * 2654435761u >> 13);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0, sv), 0);
    drain d = {sv[1], n, dst};
    if (nonblock) CHECK_EQ(fcntl(sv[1], F_SETFL, 0), 0); /* the reader blocks */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, drain_main, &d), 0);
    waiter w;
    arm_w(&w);
    CHECK_EQ(weft_send_async(sv[0], src, n, MSG_NOSIGNAL, note, &w, NULL), 0);
    CHECK_EQ(await(&w), (ssize_t)n);
    pthread_join(th, NULL);
    CHECK(memcmp(src, dst, n) == 0);
    CHECK_EQ(weft_close(sv[0]), 0);
    close(sv[1]);
    free(src);
    free(dst);
}

TEST(send_all_of_a_large_buffer) { large_send(0); }
TEST(nonblocking_socket_waits_too) {
    large_send(1);
    /* and a recv on an O_NONBLOCK socket waits for data rather than -EAGAIN */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
    char buf[8];
    waiter w;
    arm_w(&w);
    CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, NULL), 0);
    usleep(2000);
    CHECK_EQ(write(sv[1], "late", 4), 4);
    CHECK_EQ(await(&w), 4);
    CHECK_EQ(weft_close(sv[0]), 0);
    close(sv[1]);
}

TEST(errors_reach_the_handler) {
    /* a peer that went away: EOF for a read, EPIPE for a send */
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    close(sv[1]);
    char buf[8];
    waiter w;
    arm_w(&w);
    CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, NULL), 0);
    CHECK_EQ(await(&w), 0);
    arm_w(&w);
    CHECK_EQ(weft_send_async(sv[0], "x", 1, MSG_NOSIGNAL, note, &w, NULL), 0);
    CHECK_EQ(await(&w), -EPIPE);
    CHECK_EQ(weft_close(sv[0]), 0);
    /* a number that is no socket at all */
    arm_w(&w);
    CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note, &w, NULL), 0);
    CHECK_EQ(await(&w), -EBADF);
    /* bad arguments: refused, and the handler never runs */
    CHECK_EQ(weft_recv_async(-1, buf, 1, 0, note, &w, NULL), -EBADF); /* as weft_recv says it */
    CHECK_EQ(weft_recv_async(3, NULL, 1, 0, note, &w, NULL), -EINVAL);
    CHECK_EQ(weft_send_async(3, buf, 1, 0, NULL, &w, NULL), -EINVAL);
    CHECK_EQ(weft_accept_async(3, 0x4000, note, &w, NULL), -EINVAL);
    CHECK_EQ(weft_poll_async(3, 0, note, &w, NULL), -EINVAL);
    CHECK_EQ(weft_timer_async(-1, note, &w, NULL), -EINVAL);
}

/* ---- timers -------------------------------------------------------------------- */

typedef struct tick {
    int64_t due;
    atomic_int *fired;
    atomic_int *early;
} tick;

static void ticked(ssize_t r, void *ctx) {
    tick *t = ctx;
    CHECK_EQ(r, 0);
    if (weft_now() < t->due) atomic_fetch_add(t->early, 1);
    atomic_fetch_add(t->fired, 1);
}

static void *timers_from_vthread(void *arg) {
    tick *ts = arg;
    for (int i = 1000; i < 2000; i++) CHECK_EQ(weft_timer_async(ts[i].due, ticked, &ts[i], NULL), 0);
    return NULL;
}

TEST(timers_fire_once_and_never_early) {
    enum { N = 2000 };
    tick *ts = calloc(N, sizeof *ts);
    atomic_int fired = 0, early = 0;
    int64_t now = weft_now();
    for (int i = 0; i < N; i++) ts[i] = (tick){now + (int64_t)((i * 7919) % 50) * MS, &fired, &early};
    for (int i = 0; i < 1000; i++) CHECK_EQ(weft_timer_async(ts[i].due, ticked, &ts[i], NULL), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, timers_from_vthread, ts, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    while (atomic_load(&fired) < N) usleep(1000);
    usleep(20000);
    CHECK_EQ(atomic_load(&fired), N);
    CHECK_EQ(atomic_load(&early), 0);
    free(ts);
}

/* A dispatcher whose handlers keep its inbox full -- here a timer that
 * re-arms itself for now, for ever -- never parks.  Its carrier must still
 * get to its other vthreads and its own timers: a vthread pinned to that
 * carrier sleeps, and ends the chain when it wakes.  Before the dispatcher
 * yielded in a long turn, the sleeper never woke (the carrier fires its
 * timers only between vthreads), and this hung until the harness's
 * timeout. */
typedef struct spin {
    atomic_int stop, rounds, ended;
} spin;

static void spun(ssize_t r, void *ctx) {
    spin *sp = ctx;
    CHECK_EQ(r, 0);
    atomic_fetch_add(&sp->rounds, 1);
    if (atomic_load(&sp->stop)) {
        atomic_store(&sp->ended, 1);
        return;
    }
    CHECK_EQ(weft_timer_async(0, spun, sp, NULL), 0); /* due already: the inbox again */
}

static void *spin_beside(void *arg) {
    spin *sp = arg;
    CHECK_EQ(weft_timer_async(0, spun, sp, NULL), 0); /* on this carrier's dispatcher */
    while (atomic_load(&sp->rounds) < 1000) weft_yield(); /* it is spinning */
    CHECK_EQ(weft_sleep(MS), 0); /* wakes only if the carrier gets a turn */
    atomic_store(&sp->stop, 1);
    return NULL;
}

TEST(busy_dispatcher_lets_its_carrier_run) {
    for (int rep = 0; rep < 20; rep++) {
        spin sp = {0};
        weft_thread *t;
        weft_thread_opts o = {.pinned = 1};
        CHECK_EQ(weft_spawn(&t, spin_beside, &sp, &o), 0);
        CHECK_EQ(weft_join(t, NULL), 0);
        while (!atomic_load(&sp.ended)) usleep(100);
    }
}

/* ---- handlers on an executor ------------------------------------------------------ */

typedef struct where {
    atomic_int on_pool, on_vthread, total;
    weft_latch gate;
} where;

static void where_ran(ssize_t r, void *ctx) {
    where *w = ctx;
    CHECK_EQ(r, 0);
    if (weft_self()) atomic_fetch_add(&w->on_vthread, 1);
    else atomic_fetch_add(&w->on_pool, 1);
    atomic_fetch_add(&w->total, 1);
}

static void *hold(void *arg) {
    CHECK_EQ(weft_latch_await(arg), 0);
    return NULL;
}

TEST(handlers_on_an_executor_refused_ones_too) {
    where w = {0};
    /* one thread, a queue of 2, ABORT: with the thread held, most handlers
     * are refused -- and still run, on the dispatcher */
    weft_executor *ex;
    CHECK_EQ(weft_executor_create_fixed(&ex, 1, 2, WEFT_REJECT_ABORT), 0);
    weft_latch_init(&w.gate, 1);
    weft_future *h = weft_submit(ex, hold, &w.gate);
    weft_async_opts o = {.executor = ex};
    enum { N = 100 };
    for (int i = 0; i < N; i++) CHECK_EQ(weft_timer_async(weft_now(), where_ran, &w, &o), 0);
    while (atomic_load(&w.total) < N - 2) usleep(1000);
    CHECK(atomic_load(&w.on_vthread) >= N - 2); /* refused: run by the dispatcher */
    weft_latch_count_down(&w.gate);
    while (atomic_load(&w.total) < N) usleep(1000);
    CHECK(atomic_load(&w.on_pool) <= 2);
    CHECK_EQ(weft_future_get(h, NULL, 0), 0);
    weft_future_unref(h);
    CHECK_EQ(weft_executor_close(ex), 0);
    /* an executor with room: every handler on its threads */
    where w2 = {0};
    CHECK_EQ(weft_executor_create_fixed(&ex, 2, 0, WEFT_REJECT_ABORT), 0);
    o.executor = ex;
    for (int i = 0; i < N; i++) CHECK_EQ(weft_timer_async(weft_now(), where_ran, &w2, &o), 0);
    while (atomic_load(&w2.total) < N) usleep(1000);
    CHECK_EQ(atomic_load(&w2.on_pool), N);
    CHECK_EQ(weft_executor_close(ex), 0);
}

/* ---- operations closed before their dispatch (issue 23) ---------------------------- */

/* Every dispatcher is held in a handler (a gate) while the test starts
 * operations, weft_closes their sockets and lets new sockets take the
 * numbers: each operation is closed before its dispatcher gets to it,
 * whatever the carriers and a loaded machine do.  (A close that waited for
 * such an operation would wait here for ever: the dispatcher is held.) */
typedef struct gate {
    weft_latch open;
    atomic_int entered, left;
} gate;

static void gate_hold(ssize_t r, void *ctx) {
    gate *g = ctx;
    CHECK_EQ(r, 0);
    atomic_fetch_add(&g->entered, 1);
    CHECK_EQ(weft_latch_await(&g->open), 0);
    atomic_fetch_add(&g->left, 1); /* the last touch of g */
}

/* Until *v reaches n; a minute at most (a lost handler fails, not hangs) */
static void wait_count(atomic_int *v, int n, const char *what) {
    int64_t until = weft_now() + 60000 * MS;
    while (atomic_load(v) < n) {
        if (weft_now() >= until) {
            fprintf(stderr, "%s: %d of %d after a minute\n", what, atomic_load(v), n);
            CHECK(!"waited too long");
        }
        if (weft_self()) weft_sleep(100000); /* a vthread parks: its carrier's dispatcher may run */
        else usleep(100);
    }
}

/* Holds all `carriers` dispatchers: timers from a platform thread go to the
 * dispatchers in turn, one each. */
static void gates_shut(gate *g, int carriers) {
    CHECK_EQ(weft_latch_init(&g->open, 1), 0);
    atomic_store(&g->entered, 0);
    atomic_store(&g->left, 0);
    weft_async_opts o = {.spread = 1};
    for (int k = 0; k < carriers; k++) CHECK_EQ(weft_timer_async(weft_now(), gate_hold, g, &o), 0);
    wait_count(&g->entered, carriers, "dispatchers held");
}

enum { EARLY_SEND, EARLY_RECV, EARLY_POLL };

typedef struct early {
    int kind;
    int peer;   /* the closed socket's peer */
    int nfd[2]; /* the socketpair made right after the close: one has its number */
    char buf[16];
    atomic_long res;
    atomic_int calls;
    atomic_int *done;
} early;

static void early_done(ssize_t r, void *ctx) {
    early *e = ctx;
    atomic_store(&e->res, r);
    atomic_fetch_add(&e->calls, 1);
    atomic_fetch_add(e->done, 1); /* the last touch of e's batch */
}

typedef struct early_batch {
    early *e;
    int n, carriers, reused;
    atomic_int done;
} early_batch;

/* Exactly one byte waits in fd, and it is c (nothing more arrived, nothing
 * was taken). */
static void one_byte_waits(int fd, char c) {
    char b[16];
    CHECK_EQ(recv(fd, b, sizeof b, MSG_DONTWAIT), 1);
    CHECK_EQ(b[0], c);
}

static void *early_batch_run(void *arg) {
    early_batch *b = arg;
    gate g;
    gates_shut(&g, b->carriers);
    atomic_store(&b->done, 0);
    for (int i = 0; i < b->n; i++) {
        early *e = &b->e[i];
        e->done = &b->done;
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        e->peer = sv[1];
        e->kind = i % 3;
        switch (e->kind) {
        case EARLY_SEND: CHECK_EQ(weft_send_async(sv[0], "SECRET", 6, MSG_NOSIGNAL, early_done, e, NULL), 0); break;
        case EARLY_RECV: CHECK_EQ(weft_recv_async(sv[0], e->buf, sizeof e->buf, 0, early_done, e, NULL), 0); break;
        default: CHECK_EQ(weft_poll_async(sv[0], POLLIN, early_done, e, NULL), 0); break;
        }
        CHECK_EQ(weft_close(sv[0]), 0);
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, e->nfd), 0);
        if (e->nfd[0] == sv[0] || e->nfd[1] == sv[0]) b->reused++;
        /* a byte waits in each new socket: a recv on either would take it,
         * a poll on either would see it */
        CHECK_EQ(write(e->nfd[1], "N", 1), 1);
        CHECK_EQ(write(e->nfd[0], "M", 1), 1);
    }
    weft_latch_count_down(&g.open);
    wait_count(&b->done, b->n, "handlers run");
    wait_count(&g.left, b->carriers, "dispatchers let go");
    for (int i = 0; i < b->n; i++) {
        early *e = &b->e[i];
        one_byte_waits(e->nfd[0], 'N'); /* 0 bytes reached or left a new socket */
        one_byte_waits(e->nfd[1], 'M');
        char c;
        CHECK_EQ(recv(e->peer, &c, 1, MSG_DONTWAIT), 0); /* the old peer: end of stream, no "SECRET" */
        CHECK_EQ(atomic_load(&e->res), -EBADF);
        CHECK_EQ(atomic_load(&e->calls), 1);
        /* close(2), not weft_close: on epoll an operation registered on
         * the new socket would then be lost */
        close(e->nfd[0]);
        close(e->nfd[1]);
        close(e->peer);
    }
    return NULL;
}

TEST(operations_closed_before_dispatch_touch_no_new_socket) {
    enum { N = 10000, BATCH = 100 };
    CHECK(weft_io_backend() > 0); /* the runtime started: its carriers counted */
    weft_stats st;
    weft_stats_get(&st);
    CHECK(st.carriers >= 1);
    early *all = calloc(N, sizeof *all);
    CHECK(all != NULL);
    int reused = 0;
    for (int at = 0; at < N; at += BATCH) {
        early_batch b = {.e = all + at, .n = BATCH, .carriers = (int)st.carriers};
        if ((at / BATCH) % 2) { /* from a vthread: its carrier's dispatcher */
            weft_thread *t;
            CHECK_EQ(weft_spawn(&t, early_batch_run, &b, NULL), 0);
            CHECK_EQ(weft_join(t, NULL), 0);
        } else { /* from this platform thread: the dispatchers in turn */
            early_batch_run(&b);
        }
        reused += b.reused;
    }
    usleep(20000); /* a second call of any handler would show now */
    for (int i = 0; i < N; i++) CHECK_EQ(atomic_load(&all[i].calls), 1);
    /* nearly always the new socket has the very number (a runtime thread
     * may take one now and then) */
    CHECK(reused >= N / 2);
    free(all);
}

/* An operation waits (its dispatcher held) while its number is closed and
 * taken by a new socket 256 times: it still ends with -EBADF and touches
 * none of them.  (The close count it holds must not come round: with 7
 * bits it did, and the recv took the last new socket's byte.) */
TEST(operation_queued_through_many_reuses_of_its_number) {
    CHECK(weft_io_backend() > 0);
    weft_stats st;
    weft_stats_get(&st);
    gate g;
    gates_shut(&g, (int)st.carriers);
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    int num = sv[0];
    atomic_int done = 0;
    early e = {.kind = EARLY_RECV, .peer = sv[1], .done = &done};
    CHECK_EQ(weft_recv_async(num, e.buf, sizeof e.buf, 0, early_done, &e, NULL), 0);
    CHECK_EQ(weft_close(num), 0);
    int closes = 1, holder = -1, other = -1;
    int stray[64], nstray = 0; /* pairs that did not get the number (a runtime thread took it) */
    for (int i = 0; holder < 0; i++) {
        CHECK(i < 1000);
        int nv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, nv), 0);
        int at = nv[0] == num ? 0 : nv[1] == num ? 1 : -1;
        if (at < 0) {
            CHECK(nstray < 62);
            stray[nstray++] = nv[0];
            stray[nstray++] = nv[1];
            continue;
        }
        if (closes < 256) { /* closed, and the number taken again */
            CHECK_EQ(weft_close(nv[0]), 0);
            CHECK_EQ(weft_close(nv[1]), 0);
            closes++;
        } else { /* the 256th new socket on the number stays */
            holder = nv[at];
            other = nv[1 - at];
        }
    }
    CHECK_EQ(write(other, "N", 1), 1);
    weft_latch_count_down(&g.open);
    wait_count(&done, 1, "handlers run");
    wait_count(&g.left, (int)st.carriers, "dispatchers let go");
    one_byte_waits(holder, 'N');
    CHECK_EQ(atomic_load(&e.res), -EBADF);
    usleep(20000);
    CHECK_EQ(atomic_load(&e.calls), 1);
    close(holder);
    close(other);
    close(sv[1]);
    for (int i = 0; i < nstray; i++) close(stray[i]);
}

/* ---- an executor closed while operations that name it wait (issue 23) ---------------- */

typedef struct on_ex {
    waiter w;
    atomic_int on_vthread; /* 1: ran on a vthread (the dispatcher, for a pool executor) */
} on_ex;

static void note_where(ssize_t r, void *ctx) {
    on_ex *o = ctx;
    atomic_store(&o->on_vthread, weft_self() != NULL);
    note(r, &o->w);
}

/* The handlers still run, once each, on the dispatcher (as a refused one
 * does): the executor's memory lives until they are handed over.  A new
 * executor made right after the close would otherwise get that memory
 * (malloc reuses it), and the recv's handler ran on the new one's thread;
 * under ASan the use after free shows at once. */
TEST(executor_closed_before_its_pending_operations_end) {
    for (int rep = 0; rep < 60; rep++) {
        int kind = rep % 3;
        weft_executor *ex;
        CHECK_EQ(kind == 0   ? weft_executor_create_fixed(&ex, 1, 0, WEFT_REJECT_ABORT)
                 : kind == 1 ? weft_executor_create_virtual(&ex)
                             : weft_executor_create_cached(&ex, 2, 0),
                 0);
        weft_async_opts o = {.executor = ex};
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        char buf[8];
        on_ex r, t;
        arm_w(&r.w);
        arm_w(&t.w);
        CHECK_EQ(weft_recv_async(sv[0], buf, sizeof buf, 0, note_where, &r, &o), 0);
        CHECK_EQ(weft_timer_async(weft_now() + (rep % 4) * MS, note_where, &t, &o), 0);
        if (rep % 2) CHECK_EQ(weft_executor_close(ex), 0); /* does not wait for the operations */
        else CHECK(weft_executor_close_now(ex) >= 0);
        weft_executor *decoy;
        CHECK_EQ(weft_executor_create_fixed(&decoy, 1, 0, WEFT_REJECT_ABORT), 0);
        CHECK_EQ(write(sv[1], "x", 1), 1);
        CHECK_EQ(await(&r.w), 1);
        CHECK_EQ(buf[0], 'x');
        CHECK_EQ(atomic_load(&r.on_vthread), 1); /* the dispatcher, not the decoy's thread */
        CHECK_EQ(await(&t.w), 0); /* (on ex's thread if it fired before the close) */
        CHECK_EQ(weft_executor_close(decoy), 0);
        CHECK_EQ(weft_close(sv[0]), 0);
        close(sv[1]);
    }
}
