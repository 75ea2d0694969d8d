/* Channels and select: transfers, conservation (every message exactly
 * once), order, close, deadlines and cancellation, select's claiming and
 * fairness, the races between a transfer and a timeout / cancel, and
 * platform threads.  The ping-pong's speed is weft-bench's (micro
 * chan-pingpong and chan-buffered), never a test's. */
#include "harness.h"
#include "sched/sched.h" /* (a vthread's run state: free_under_waiter_is_fatal waits until it parks) */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL

static void spawn_ok(weft_thread **t, void *(*fn)(void *), void *arg) {
    CHECK_EQ(weft_spawn(t, fn, arg, NULL), 0);
}

static intptr_t join_val(weft_thread *t) {
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    return (intptr_t)r;
}

static void use_carriers(int n) {
    weft_runtime_opts cfg = {.carriers = n};
    CHECK_EQ(weft_init(&cfg), 0);
}

/* ---- basics ------------------------------------------------------------- */

/* A channel the test needs: made, or the test fails here. */
static weft_chan *chan_new(size_t elem_size, size_t capacity) {
    weft_chan *c = NULL;
    CHECK_EQ(weft_chan_create(&c, elem_size, capacity), 0);
    return c;
}

TEST(make_and_bad_args) {
    weft_chan *c = chan_new(8, 4);
    CHECK(c != NULL);
    CHECK_EQ(weft_chan_cap(c), 4);
    CHECK_EQ(weft_chan_len(c), 0);
    uint64_t v = 7;
    CHECK_EQ(weft_chan_send(c, &v), 0);
    CHECK_EQ(weft_chan_len(c), 1);
    CHECK_EQ(weft_chan_send(NULL, &v), -EINVAL);
    CHECK_EQ(weft_chan_send(c, NULL), -EINVAL);
    CHECK_EQ(weft_chan_recv(NULL, &v), -EINVAL);
    CHECK_EQ(weft_chan_try_send(NULL, &v), -EINVAL);
    CHECK_EQ(weft_chan_close(NULL), -EINVAL);
    weft_chan_free(c);
    weft_chan_free(NULL);
    weft_chan *d;
    CHECK_EQ(weft_chan_create(&d, SIZE_MAX / 2, 4), -EINVAL);
    CHECK(d == NULL);
    CHECK_EQ(weft_chan_create(NULL, 8, 0), -EINVAL);
    CHECK_EQ(weft_chan_create(&d, SIZE_MAX, 2), -EINVAL);
    CHECK(d == NULL);
    CHECK_EQ(weft_chan_create(&d, 0, 0), 0); /* messages with no data */
    CHECK_EQ(weft_chan_cap(d), 0);
    weft_chan_free(d);
}

/* ---- ping-pong ------------------------------------------------------------ */

typedef struct pp {
    weft_chan *ping, *pong;
    long rounds;
} pp;

static void *ponger(void *a) {
    pp *p = a;
    for (long i = 0; i < p->rounds; i++) {
        uint64_t v;
        CHECK_EQ(weft_chan_recv(p->ping, &v), 0);
        CHECK_EQ(v, (uint64_t)i);
        v++;
        CHECK_EQ(weft_chan_send(p->pong, &v), 0);
    }
    return NULL;
}

static void *pinger(void *a) {
    pp *p = a;
    for (long i = 0; i < p->rounds; i++) {
        uint64_t v = (uint64_t)i;
        CHECK_EQ(weft_chan_send(p->ping, &v), 0);
        CHECK_EQ(weft_chan_recv(p->pong, &v), 0);
        CHECK_EQ(v, (uint64_t)i + 1);
    }
    return NULL;
}

/* Runs a ping-pong of `rounds` round trips over two channels of capacity
 * cap; every value arrives, in order. */
static void chan_pingpong(size_t cap, long rounds) {
    pp p = {chan_new(8, cap), chan_new(8, cap), rounds};
    CHECK(p.ping && p.pong);
    weft_thread *a, *b;
    spawn_ok(&b, ponger, &p);
    spawn_ok(&a, pinger, &p);
    join_val(a);
    join_val(b);
    weft_chan_free(p.ping);
    weft_chan_free(p.pong);
}

TEST(rendezvous_pingpong) {
    chan_pingpong(0, SCALE(200000));
}

TEST(buffered_pingpong) {
    chan_pingpong(1, SCALE(200000));
    chan_pingpong(16, SCALE(20000));
}

TEST(pingpong_across_carriers) {
    use_carriers(2);
    chan_pingpong(0, SCALE(50000));
    chan_pingpong(4, SCALE(50000));
}

/* ---- buffered order, try_ --------------------------------------------------- */

TEST(buffered_fifo_and_try) {
    weft_chan *c = chan_new(sizeof(int), 5);
    for (int i = 0; i < 5; i++) CHECK_EQ(weft_chan_try_send(c, &i), 0);
    int x = 99;
    CHECK_EQ(weft_chan_try_send(c, &x), -EAGAIN);
    CHECK_EQ(weft_chan_len(c), 5);
    /* wrap the ring around a few times */
    for (int i = 0; i < 23; i++) {
        int v;
        CHECK_EQ(weft_chan_recv(c, &v), 0);
        CHECK_EQ(v, i);
        int w = i + 5;
        CHECK_EQ(weft_chan_send(c, &w), 0);
    }
    for (int i = 23; i < 28; i++) {
        int v;
        CHECK_EQ(weft_chan_try_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    CHECK_EQ(weft_chan_try_recv(c, &x), -EAGAIN);
    CHECK_EQ(x, 99);
    /* NULL discards */
    CHECK_EQ(weft_chan_send(c, &x), 0);
    CHECK_EQ(weft_chan_recv(c, NULL), 0);
    CHECK_EQ(weft_chan_len(c), 0);
    weft_chan_free(c);
}

static void *recv_one(void *a) {
    int v = -1;
    int r = weft_chan_recv((weft_chan *)a, &v);
    return (void *)(intptr_t)(r < 0 ? r : v);
}

TEST(rendezvous_try) {
    weft_chan *c = chan_new(sizeof(int), 0);
    int x = 5;
    CHECK_EQ(weft_chan_try_send(c, &x), -EAGAIN); /* nobody receives */
    CHECK_EQ(weft_chan_try_recv(c, &x), -EAGAIN);
    weft_thread *t;
    spawn_ok(&t, recv_one, c);
    /* succeeds once the receiver waits (a receiver that never does: the
     * harness's timeout) */
    while (weft_chan_try_send(c, &x) == -EAGAIN) usleep(100);
    CHECK_EQ(join_val(t), 5);
    weft_chan_free(c);
}

static void *send_int(void *a) {
    static int v = 42;
    return (void *)(intptr_t)weft_chan_send((weft_chan *)a, &v);
}

TEST(try_recv_takes_a_waiting_sender) {
    weft_chan *c = chan_new(sizeof(int), 0);
    weft_thread *t;
    spawn_ok(&t, send_int, c);
    int v = 0;
    while (weft_chan_try_recv(c, &v) == -EAGAIN) usleep(100); /* until the sender waits */
    CHECK_EQ(v, 42);
    CHECK_EQ(join_val(t), 0);
    weft_chan_free(c);
}

TEST(big_and_empty_messages) {
    enum { SZ = 4096 };
    weft_chan *c = chan_new(SZ, 2);
    unsigned char *m = malloc(SZ), *g = malloc(SZ);
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < SZ; i++) m[i] = (unsigned char)(i * 7 + round);
        CHECK_EQ(weft_chan_send(c, m), 0);
        memset(g, 0, SZ);
        CHECK_EQ(weft_chan_recv(c, g), 0);
        CHECK(memcmp(m, g, SZ) == 0);
    }
    free(m);
    free(g);
    weft_chan_free(c);
    weft_chan *e = chan_new(0, 1);
    CHECK_EQ(weft_chan_send(e, NULL), 0);
    CHECK_EQ(weft_chan_try_send(e, NULL), -EAGAIN);
    CHECK_EQ(weft_chan_recv(e, NULL), 0);
    weft_chan_free(e);
}

/* ---- many senders and receivers -------------------------------------------- */

enum { MAXS = 16, MAXR = 16 };

typedef struct mm {
    weft_chan *c;
    int senders, receivers;
    long per_sender;
    atomic_long received;
    atomic_llong sum;
    atomic_int next_id;
    _Atomic unsigned char *seen; /* [sender][seq] */
} mm;

static void *mm_sender(void *a) {
    mm *m = a;
    int id = atomic_fetch_add(&m->next_id, 1);
    for (long i = 0; i < m->per_sender; i++) {
        uint64_t v = ((uint64_t)id << 40) | (uint64_t)i;
        CHECK_EQ(weft_chan_send(m->c, &v), 0);
    }
    return NULL;
}

static void *mm_receiver(void *a) {
    mm *m = a;
    long last[MAXS];
    for (int i = 0; i < MAXS; i++) last[i] = -1;
    for (;;) {
        uint64_t v;
        int r = weft_chan_recv(m->c, &v);
        if (r == -EPIPE) break;
        CHECK_EQ(r, 0);
        int id = (int)(v >> 40);
        long seq = (long)(v & ((1ULL << 40) - 1));
        CHECK(id >= 0 && id < m->senders && seq < m->per_sender);
        CHECK(seq > last[id]); /* each sender's messages in order */
        last[id] = seq;
        CHECK_EQ(atomic_exchange(&m->seen[(size_t)id * (size_t)m->per_sender + (size_t)seq], 1), 0);
        atomic_fetch_add(&m->received, 1);
        atomic_fetch_add(&m->sum, (long long)seq);
    }
    return NULL;
}

/* `plat_s` of the senders and `plat_r` of the receivers run on pthreads. */
static void many_to_many(size_t cap, int ns, int nr, int plat_s, int plat_r, long per) {
    mm m = {.c = chan_new(8, cap), .senders = ns, .receivers = nr, .per_sender = per};
    m.seen = calloc((size_t)ns * (size_t)per, 1);
    weft_thread *st[MAXS], *rt[MAXR];
    pthread_t sp[MAXS], rp[MAXR];
    for (int i = 0; i < nr; i++) {
        if (i < plat_r) CHECK_EQ(pthread_create(&rp[i], NULL, mm_receiver, &m), 0);
        else spawn_ok(&rt[i], mm_receiver, &m);
    }
    for (int i = 0; i < ns; i++) {
        if (i < plat_s) CHECK_EQ(pthread_create(&sp[i], NULL, mm_sender, &m), 0);
        else spawn_ok(&st[i], mm_sender, &m);
    }
    for (int i = 0; i < ns; i++) {
        if (i < plat_s) pthread_join(sp[i], NULL);
        else join_val(st[i]);
    }
    CHECK_EQ(weft_chan_close(m.c), 0);
    for (int i = 0; i < nr; i++) {
        if (i < plat_r) pthread_join(rp[i], NULL);
        else join_val(rt[i]);
    }
    CHECK_EQ(atomic_load(&m.received), (long)ns * per);
    CHECK_EQ(atomic_load(&m.sum), (long long)ns * (per * (per - 1) / 2));
    for (size_t i = 0; i < (size_t)ns * (size_t)per; i++) CHECK_EQ(m.seen[i], 1);
    free((void *)m.seen);
    weft_chan_free(m.c);
}

TEST(many_to_many_rendezvous) {
    use_carriers(4);
    many_to_many(0, 8, 8, 0, 0, SCALE(20000));
}

TEST(many_to_many_buffered) {
    use_carriers(4);
    many_to_many(7, 8, 5, 0, 0, SCALE(20000));
}

TEST(many_to_many_with_platform_threads) {
    use_carriers(3);
    many_to_many(0, 6, 6, 2, 2, SCALE(10000));
    many_to_many(3, 6, 6, 3, 3, SCALE(10000));
}

/* one receiver sees each sender's messages consecutively numbered */
TEST(fifo_per_sender_single_receiver) {
    use_carriers(2);
    for (size_t cap = 0; cap < 3; cap++) many_to_many(cap, 6, 1, 1, 0, SCALE(20000));
}

/* ---- close -------------------------------------------------------------- */

TEST(close_drains_then_epipe) {
    weft_chan *c = chan_new(sizeof(int), 4);
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_chan_send(c, &i), 0);
    CHECK_EQ(weft_chan_close(c), 0);
    CHECK_EQ(weft_chan_close(c), -EPIPE);
    int x = 9;
    CHECK_EQ(weft_chan_send(c, &x), -EPIPE);
    CHECK_EQ(weft_chan_try_send(c, &x), -EPIPE);
    for (int i = 0; i < 3; i++) {
        int v;
        CHECK_EQ(i == 1 ? weft_chan_try_recv(c, &v) : weft_chan_recv(c, &v), 0);
        CHECK_EQ(v, i);
    }
    CHECK_EQ(weft_chan_recv(c, &x), -EPIPE);
    CHECK_EQ(weft_chan_try_recv(c, &x), -EPIPE);
    CHECK_EQ(weft_chan_recv_until(c, &x, weft_now() + MS), -EPIPE);
    CHECK_EQ(x, 9);
    weft_chan_free(c);
}

static atomic_int entered;

static void *recv_counting(void *a) {
    atomic_fetch_add(&entered, 1);
    int v;
    return (void *)(intptr_t)weft_chan_recv((weft_chan *)a, &v);
}

static void *plat_recv_counting(void *a) { return recv_counting(a); }

TEST(close_wakes_waiting_receivers) {
    weft_chan *c = chan_new(sizeof(int), 0);
    weft_thread *t[8];
    pthread_t p[2];
    for (int i = 0; i < 8; i++) spawn_ok(&t[i], recv_counting, c);
    for (int i = 0; i < 2; i++) CHECK_EQ(pthread_create(&p[i], NULL, plat_recv_counting, c), 0);
    while (atomic_load(&entered) < 10) usleep(100);
    usleep(20000); /* let them park */
    CHECK_EQ(weft_chan_close(c), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(join_val(t[i]), -EPIPE);
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(p[i], &r);
        CHECK_EQ((intptr_t)r, -EPIPE);
    }
    weft_chan_free(c);
}

static void *send_counting(void *a) {
    atomic_fetch_add(&entered, 1);
    int v = 1000 + atomic_load(&entered);
    return (void *)(intptr_t)weft_chan_send((weft_chan *)a, &v);
}

TEST(close_fails_waiting_senders) {
    weft_chan *c = chan_new(sizeof(int), 2);
    int a = 1, b = 2;
    CHECK_EQ(weft_chan_send(c, &a), 0);
    CHECK_EQ(weft_chan_send(c, &b), 0);
    weft_thread *t[6];
    for (int i = 0; i < 6; i++) spawn_ok(&t[i], send_counting, c);
    while (atomic_load(&entered) < 6) usleep(100);
    usleep(20000);
    CHECK_EQ(weft_chan_close(c), 0);
    for (int i = 0; i < 6; i++) CHECK_EQ(join_val(t[i]), -EPIPE);
    /* only what was buffered before the close is delivered */
    int v;
    CHECK_EQ(weft_chan_recv(c, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(weft_chan_recv(c, &v), 0);
    CHECK_EQ(v, 2);
    CHECK_EQ(weft_chan_recv(c, &v), -EPIPE);
    weft_chan_free(c);
}

/* ---- deadlines and cancellation --------------------------------------- */

typedef struct dl_arg {
    weft_chan *c;
    int64_t deadline;
    int own;      /* use weft_deadline_set instead of _until */
    int send;
} dl_arg;

static void *op_with_deadline(void *a) {
    dl_arg *d = a;
    int v = 1, r;
    if (d->own) {
        weft_deadline_set(d->deadline);
        r = d->send ? weft_chan_send(d->c, &v) : weft_chan_recv(d->c, &v);
        weft_deadline_set(0);
    } else {
        r = d->send ? weft_chan_send_until(d->c, &v, d->deadline) : weft_chan_recv_until(d->c, &v, d->deadline);
    }
    return (void *)(intptr_t)r;
}

TEST(deadlines_on_send_and_recv) {
    weft_chan *c = chan_new(sizeof(int), 0);
    for (int k = 0; k < 4; k++) {
        dl_arg d = {c, weft_now() + 5 * MS, k & 1, k >> 1};
        weft_thread *t;
        spawn_ok(&t, op_with_deadline, &d);
        CHECK_EQ(join_val(t), -ETIMEDOUT);
        /* not before its deadline (a t0 read after the deadline was set
         * would not bound it: the two reads can be far apart) */
        CHECK(weft_now() >= d.deadline);
        /* and on a platform thread */
        d.deadline = weft_now() + 3 * MS;
        CHECK_EQ((intptr_t)op_with_deadline(&d), -ETIMEDOUT);
        CHECK(weft_now() >= d.deadline);
    }
    /* a deadline in the past does not stop an operation that can complete */
    weft_chan *b = chan_new(sizeof(int), 1);
    int v = 3;
    CHECK_EQ(weft_chan_send_until(b, &v, 1), 0);
    CHECK_EQ(weft_chan_recv_until(b, &v, 1), 0);
    CHECK_EQ(weft_chan_recv_until(b, &v, 1), -ETIMEDOUT);
    /* the channel is as it was: nothing left behind by the timed-out waiters */
    CHECK_EQ(weft_chan_try_recv(c, &v), -EAGAIN);
    CHECK_EQ(weft_chan_try_send(c, &v), -EAGAIN);
    weft_chan_free(b);
    weft_chan_free(c);
}

static void *cancelled_ops(void *a) {
    weft_chan *c = a;
    int v = 5;
    int r = weft_chan_recv(c, &v);
    CHECK_EQ(r, -ECANCELED);
    /* sticky: even an operation that could complete refuses */
    weft_chan *b = chan_new(sizeof(int), 1);
    CHECK_EQ(weft_chan_send(b, &v), -ECANCELED);
    CHECK_EQ(weft_chan_try_send(b, &v), 0); /* try_ is not a cancellation point */
    CHECK_EQ(weft_chan_recv(b, &v), -ECANCELED);
    weft_case cs[1] = {WEFT_RECV(b, &v)};
    CHECK_EQ(weft_select(cs, 1, 0), -ECANCELED);
    CHECK_EQ(weft_try_select(cs, 1), 0);
    weft_chan_free(b);
    return NULL;
}

static void *send_parked(void *a) {
    int v = 77;
    atomic_fetch_add(&entered, 1);
    return (void *)(intptr_t)weft_chan_send((weft_chan *)a, &v);
}

TEST(cancel_send_and_recv) {
    weft_chan *c = chan_new(sizeof(int), 0);
    weft_thread *t;
    spawn_ok(&t, cancelled_ops, c);
    usleep(10000);
    CHECK_EQ(weft_cancel(t), 0);
    join_val(t);
    /* a cancelled send sent nothing */
    weft_thread *s;
    spawn_ok(&s, send_parked, c);
    while (atomic_load(&entered) < 1) usleep(100);
    usleep(10000);
    CHECK_EQ(weft_cancel(s), 0);
    CHECK_EQ(join_val(s), -ECANCELED);
    int v;
    CHECK_EQ(weft_chan_try_recv(c, &v), -EAGAIN);
    weft_chan_free(c);
}

/* ---- select ------------------------------------------------------------ */

TEST(select_ready_recv_and_send) {
    weft_chan *a = chan_new(sizeof(int), 1), *b = chan_new(sizeof(int), 1);
    int x = 11, y = 0;
    CHECK_EQ(weft_chan_send(b, &x), 0);
    weft_case cs[2] = {WEFT_RECV(a, &y), WEFT_RECV(b, &y)};
    CHECK_EQ(weft_select(cs, 2, 0), 1);
    CHECK_EQ(cs[1].result, 0);
    CHECK_EQ(y, 11);
    /* a send case with room fires */
    int z = 12;
    weft_case ss[2] = {WEFT_RECV(a, &y), WEFT_SEND(b, &z)};
    CHECK_EQ(weft_select(ss, 2, 0), 1);
    CHECK_EQ(weft_chan_recv(b, &y), 0);
    CHECK_EQ(y, 12);
    CHECK_EQ(weft_try_select(cs, 2), -EAGAIN);
    weft_chan_free(a);
    weft_chan_free(b);
}

typedef struct selw {
    weft_case cs[4];
    size_t n;
    int64_t deadline;
    int result;
} selw;

static void *select_waiter(void *a) {
    selw *s = a;
    atomic_fetch_add(&entered, 1);
    s->result = weft_select(s->cs, s->n, s->deadline);
    return NULL;
}

TEST(select_waits_for_a_partner) {
    weft_chan *a = chan_new(sizeof(int), 0), *b = chan_new(sizeof(int), 0);
    int got = 0, out = 31;
    /* receive side */
    selw s = {{WEFT_RECV(a, &got), WEFT_RECV(b, &got)}, 2, 0, -1};
    weft_thread *t;
    spawn_ok(&t, select_waiter, &s);
    usleep(5000);
    int v = 21;
    CHECK_EQ(weft_chan_send(b, &v), 0);
    join_val(t);
    CHECK_EQ(s.result, 1);
    CHECK_EQ(s.cs[1].result, 0);
    CHECK_EQ(got, 21);
    /* send side: the partner receives */
    selw s2 = {{WEFT_RECV(a, &got), WEFT_SEND(b, &out)}, 2, 0, -1};
    spawn_ok(&t, select_waiter, &s2);
    usleep(5000);
    CHECK_EQ(weft_chan_recv(b, &v), 0);
    CHECK_EQ(v, 31);
    join_val(t);
    CHECK_EQ(s2.result, 1);
    /* the records on a are gone: a is free of waiters */
    CHECK_EQ(weft_chan_try_send(a, &v), -EAGAIN);
    weft_chan_free(a);
    weft_chan_free(b);
}

TEST(select_deadline_and_nil_cases) {
    weft_chan *a = chan_new(sizeof(int), 0);
    int v;
    weft_case cs[3] = {WEFT_RECV(NULL, &v), WEFT_RECV(a, &v), WEFT_SEND(NULL, &v)};
    int64_t d = weft_now() + 5 * MS;
    CHECK_EQ(weft_select(cs, 3, d), -ETIMEDOUT);
    CHECK(weft_now() >= d); /* not before the deadline */
    /* only nil cases: waits for the deadline, like Go's empty select */
    weft_case nil[2] = {WEFT_RECV(NULL, &v), WEFT_SEND(NULL, &v)};
    d = weft_now() + 2 * MS;
    CHECK_EQ(weft_select(nil, 2, d), -ETIMEDOUT);
    CHECK(weft_now() >= d);
    CHECK_EQ(weft_select(NULL, 0, weft_now() + MS), -ETIMEDOUT);
    CHECK_EQ(weft_try_select(nil, 2), -EAGAIN);
    CHECK_EQ(weft_try_select(NULL, 0), -EAGAIN);
    /* the effective deadline applies */
    weft_deadline_set(weft_now() + 2 * MS);
    CHECK_EQ(weft_select(cs, 3, 0), -ETIMEDOUT);
    weft_deadline_set(0);
    /* a nil case never fires even with others ready */
    weft_chan *b = chan_new(sizeof(int), 1);
    int x = 4;
    CHECK_EQ(weft_chan_send(b, &x), 0);
    weft_case mix[2] = {WEFT_RECV(NULL, &v), WEFT_RECV(b, &v)};
    CHECK_EQ(weft_select(mix, 2, 0), 1);
    CHECK_EQ(v, 4);
    /* bad op */
    weft_case bad[1] = {{a, 7, 0, &v}};
    CHECK_EQ(weft_select(bad, 1, 0), -EINVAL);
    weft_chan_free(a);
    weft_chan_free(b);
}

TEST(select_fairness) {
    enum { N = 3 };
    weft_chan *c[N];
    weft_case cs[N + 1];
    int v, one = 1;
    for (int i = 0; i < N; i++) {
        c[i] = chan_new(sizeof(int), 1);
        CHECK_EQ(weft_chan_send(c[i], &one), 0);
        cs[i] = (weft_case)WEFT_RECV(c[i], &v);
    }
    weft_chan *never = chan_new(sizeof(int), 0);
    cs[N] = (weft_case)WEFT_RECV(never, &v);
    int hits[N] = {0};
    int rounds = SCALE(30000);
    for (int r = 0; r < rounds; r++) {
        int i = weft_select(cs, N + 1, 0);
        CHECK(i >= 0 && i < N);
        hits[i]++;
        CHECK_EQ(weft_chan_send(c[i], &one), 0); /* ready again */
    }
    for (int i = 0; i < N; i++) {
        printf("case %d fired %d of %d\n", i, hits[i], rounds);
        CHECK(hits[i] > rounds / N * 8 / 10 && hits[i] < rounds / N * 12 / 10);
    }
    for (int i = 0; i < N; i++) weft_chan_free(c[i]);
    weft_chan_free(never);
}

/* send cases: two buffered channels with room, each case fires about half */
TEST(select_fairness_send_cases) {
    weft_chan *a = chan_new(sizeof(int), 1), *b = chan_new(sizeof(int), 1);
    int x = 1, v, hits[2] = {0, 0};
    int rounds = SCALE(20000);
    weft_case cs[2] = {WEFT_SEND(a, &x), WEFT_SEND(b, &x)};
    for (int r = 0; r < rounds; r++) {
        int i = weft_select(cs, 2, 0);
        CHECK(i == 0 || i == 1);
        hits[i]++;
        CHECK_EQ(weft_chan_try_recv(i ? b : a, &v), 0); /* room again */
    }
    printf("send cases: %d / %d\n", hits[0], hits[1]);
    CHECK(hits[0] > rounds * 4 / 10 && hits[1] > rounds * 4 / 10);
    weft_chan_free(a);
    weft_chan_free(b);
}

TEST(select_and_close) {
    weft_chan *a = chan_new(sizeof(int), 0), *b = chan_new(sizeof(int), 0);
    int v = 0;
    selw s = {{WEFT_RECV(a, &v), WEFT_RECV(b, &v)}, 2, 0, -1};
    weft_thread *t;
    spawn_ok(&t, select_waiter, &s);
    usleep(5000);
    CHECK_EQ(weft_chan_close(b), 0);
    join_val(t);
    CHECK_EQ(s.result, 1);
    CHECK_EQ(s.cs[1].result, -EPIPE);
    /* a closed channel's cases fire at once */
    weft_case cs[2] = {WEFT_SEND(b, &v), WEFT_RECV(a, &v)};
    CHECK_EQ(weft_select(cs, 2, 0), 0);
    CHECK_EQ(cs[0].result, -EPIPE);
    weft_case rc[1] = {WEFT_RECV(b, &v)};
    CHECK_EQ(weft_try_select(rc, 1), 0);
    CHECK_EQ(rc[0].result, -EPIPE);
    weft_chan_free(a);
    weft_chan_free(b);
}

TEST(select_cancelled) {
    weft_chan *a = chan_new(sizeof(int), 0), *b = chan_new(sizeof(int), 2);
    int v = 0;
    int full = 1;
    CHECK_EQ(weft_chan_send(b, &full), 0);
    CHECK_EQ(weft_chan_send(b, &full), 0);
    selw s = {{WEFT_RECV(a, &v), WEFT_SEND(b, &v), WEFT_SEND(a, &v)}, 3, 0, -1};
    weft_thread *t;
    spawn_ok(&t, select_waiter, &s);
    usleep(5000);
    CHECK_EQ(weft_cancel(t), 0);
    join_val(t);
    CHECK_EQ(s.result, -ECANCELED);
    /* nothing was sent, no record left behind (free would stop the program) */
    CHECK_EQ(weft_chan_len(b), 2);
    CHECK_EQ(weft_chan_try_recv(a, &v), -EAGAIN);
    weft_chan_free(a);
    weft_chan_free(b);
}

/* a select's send and receive on one channel do not meet each other */
TEST(select_same_channel_both_ways) {
    weft_chan *c = chan_new(sizeof(int), 0);
    int out = 8, in = 0;
    selw s = {{WEFT_SEND(c, &out), WEFT_RECV(c, &in)}, 2, weft_now() + 5 * MS, -1};
    weft_thread *t;
    spawn_ok(&t, select_waiter, &s);
    join_val(t);
    CHECK_EQ(s.result, -ETIMEDOUT);
    /* with a partner, one of them fires */
    s.deadline = 0;
    spawn_ok(&t, select_waiter, &s);
    usleep(5000);
    int v;
    CHECK_EQ(weft_chan_recv(c, &v), 0);
    CHECK_EQ(v, 8);
    join_val(t);
    CHECK_EQ(s.result, 0);
    weft_chan_free(c);
}

static void *plat_select(void *a) { return select_waiter(a); }

TEST(select_on_platform_thread) {
    weft_chan *a = chan_new(sizeof(int), 0), *b = chan_new(sizeof(int), 0);
    int v = 0;
    selw s = {{WEFT_RECV(a, &v), WEFT_RECV(b, &v)}, 2, 0, -1};
    pthread_t p;
    CHECK_EQ(pthread_create(&p, NULL, plat_select, &s), 0);
    usleep(5000);
    int x = 66;
    weft_thread *t;
    spawn_ok(&t, send_int, a); /* sends 42 */
    CHECK_EQ(join_val(t), 0);
    pthread_join(p, NULL);
    CHECK_EQ(s.result, 0);
    CHECK_EQ(v, 42);
    /* a platform thread's select times out */
    weft_case cs[2] = {WEFT_RECV(a, &v), WEFT_SEND(b, &x)};
    CHECK_EQ(weft_select(cs, 2, weft_now() + 2 * MS), -ETIMEDOUT);
    weft_chan_free(a);
    weft_chan_free(b);
}

static void *plat_send_to(void *a) {
    int v = 50;
    return (void *)(intptr_t)weft_chan_send((weft_chan *)a, &v);
}

/* more cases than fit the stack arrays: one allocation, same behaviour */
TEST(select_many_cases) {
    enum { N = 100 };
    weft_chan *c[N];
    int v = 0;
    weft_case *cs = calloc(N, sizeof *cs);
    for (int i = 0; i < N; i++) {
        c[i] = chan_new(sizeof(int), 0);
        cs[i] = (weft_case)WEFT_RECV(i % 3 == 0 ? NULL : c[i], &v);
    }
    CHECK_EQ(weft_select(cs, N, weft_now() + MS), -ETIMEDOUT);
    pthread_t p;
    CHECK_EQ(pthread_create(&p, NULL, plat_send_to, c[50]), 0);
    CHECK_EQ(weft_select(cs, N, 0), 50);
    CHECK_EQ(v, 50);
    void *r;
    pthread_join(p, &r);
    CHECK_EQ((intptr_t)r, 0);
    /* every other channel is free of records */
    for (int i = 0; i < N; i++) CHECK_EQ(weft_chan_try_send(c[i], &v), -EAGAIN);
    free(cs);
    for (int i = 0; i < N; i++) weft_chan_free(c[i]);
}

/* ---- races, repeated ------------------------------------------------------ */

/* A receiver waits; a sender sends while a canceller cancels the receiver.
 * On a buffered channel the message is either received or still in the
 * channel afterwards -- never lost, never duplicated.  On a rendezvous
 * channel the sender (with a deadline) succeeds exactly when the receiver
 * got the message. */
typedef struct race {
    weft_chan *c;
    int round;
    atomic_int go;
    weft_thread *receiver;
    int recv_r, send_r, got;
} race;

static void *race_receiver(void *a) {
    race *r = a;
    atomic_store(&r->go, 1);
    r->got = -1;
    r->recv_r = weft_chan_recv(r->c, &r->got);
    return NULL;
}

static void *race_sender(void *a) {
    race *r = a;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 11; k++) weft_yield();
    int v = r->round;
    r->send_r = weft_chan_send_until(r->c, &v, weft_now() + 200000);
    return NULL;
}

static void *race_canceller(void *a) {
    race *r = a;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 7; k++) weft_yield();
    weft_cancel(r->receiver);
    return NULL;
}

static void send_vs_cancel(size_t cap) {
    use_carriers(3);
    weft_chan *c = chan_new(sizeof(int), cap);
    int rounds = SCALE(5000), delivered = 0, left = 0;
    for (int i = 0; i < rounds; i++) {
        race r = {.c = c, .round = i};
        weft_thread *s, *k;
        spawn_ok(&r.receiver, race_receiver, &r);
        spawn_ok(&s, race_sender, &r);
        spawn_ok(&k, race_canceller, &r);
        join_val(r.receiver);
        join_val(s);
        join_val(k);
        int v = -1;
        int in_chan = weft_chan_try_recv(c, &v) == 0;
        if (r.recv_r == 0) {
            CHECK_EQ(r.got, i);
            CHECK(!in_chan);
            CHECK_EQ(r.send_r, 0);
            delivered++;
        } else {
            CHECK_EQ(r.recv_r, -ECANCELED);
            CHECK_EQ(r.got, -1); /* received nothing, not even into its buffer */
            if (cap) {
                CHECK_EQ(r.send_r, 0);
                CHECK(in_chan);
                CHECK_EQ(v, i);
                left++;
            } else {
                CHECK_EQ(r.send_r, -ETIMEDOUT);
            }
        }
    }
    printf("cap %zu: delivered %d, cancelled %d (left in the channel %d)\n", cap, delivered, rounds - delivered, left);
    weft_chan_free(c);
}

TEST(race_send_vs_receiver_cancel_rendezvous) { send_vs_cancel(0); }
TEST(race_send_vs_receiver_cancel_buffered) { send_vs_cancel(1); }

/* A sender waits with a short deadline; a receiver comes at about that
 * time.  The sender succeeded exactly when the receiver got its message. */
static void *timed_sender(void *a) {
    race *r = a;
    int v = r->round;
    atomic_store(&r->go, 1);
    r->send_r = weft_chan_send_until(r->c, &v, weft_now() + 1000 * (r->round % 9));
    return NULL;
}

static void *late_receiver(void *a) {
    race *r = a;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 5; k++) weft_yield();
    r->got = -1;
    r->recv_r = weft_chan_recv_until(r->c, &r->got, weft_now() + 1000 * (r->round % 13));
    return NULL;
}

static void *plat_late_receiver(void *a) { return late_receiver(a); }

TEST(race_recv_vs_sender_timeout) {
    use_carriers(3);
    weft_chan *c = chan_new(sizeof(int), 0);
    int rounds = SCALE(5000), ok = 0;
    for (int i = 0; i < rounds; i++) {
        race r = {.c = c, .round = i};
        weft_thread *s, *q = NULL;
        pthread_t p;
        spawn_ok(&s, timed_sender, &r);
        if (i % 8 == 7) CHECK_EQ(pthread_create(&p, NULL, plat_late_receiver, &r), 0);
        else spawn_ok(&q, late_receiver, &r);
        join_val(s);
        if (q) join_val(q);
        else pthread_join(p, NULL);
        CHECK(r.send_r == 0 || r.send_r == -ETIMEDOUT);
        CHECK(r.recv_r == 0 || r.recv_r == -ETIMEDOUT);
        CHECK_EQ(r.send_r == 0, r.recv_r == 0);
        if (r.recv_r == 0) {
            CHECK_EQ(r.got, i);
            ok++;
        } else {
            CHECK_EQ(r.got, -1);
        }
    }
    printf("transferred %d of %d\n", ok, rounds);
    weft_chan_free(c);
}

/* A select waits on two channels; two senders come at once, each with a
 * short deadline.  Exactly one of them claims the select. */
typedef struct race2 {
    weft_chan *a, *b;
    int round;
    atomic_int go;
    int sel_r, got, sr[2];
} race2;

static void *r2_selector(void *x) {
    race2 *r = x;
    weft_case cs[2] = {WEFT_RECV(r->a, &r->got), WEFT_RECV(r->b, &r->got)};
    r->got = -1;
    atomic_store(&r->go, 1);
    /* a deadline too: on a loaded machine both senders may give up before
     * the select has even begun */
    r->sel_r = weft_select(cs, 2, weft_now() + 20 * MS);
    if (r->sel_r >= 0) CHECK_EQ(cs[r->sel_r].result, 0);
    return NULL;
}

static void *r2_sender_a(void *x) {
    race2 *r = x;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 3; k++) weft_yield();
    int v = 2 * r->round;
    r->sr[0] = weft_chan_send_until(r->a, &v, weft_now() + 300000);
    return NULL;
}

static void *r2_sender_b(void *x) {
    race2 *r = x;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 4; k++) weft_yield();
    int v = 2 * r->round + 1;
    r->sr[1] = weft_chan_send_until(r->b, &v, weft_now() + 300000);
    return NULL;
}

static void *plat_r2_sender_b(void *x) { return r2_sender_b(x); }

TEST(race_select_claimed_by_two) {
    use_carriers(3);
    weft_chan *a = chan_new(sizeof(int), 0), *b = chan_new(sizeof(int), 0);
    int rounds = SCALE(5000), which[3] = {0, 0, 0};
    for (int i = 0; i < rounds; i++) {
        race2 r = {.a = a, .b = b, .round = i};
        weft_thread *s, *ta, *tb = NULL;
        pthread_t p;
        spawn_ok(&s, r2_selector, &r);
        spawn_ok(&ta, r2_sender_a, &r);
        if (i % 8 == 3) CHECK_EQ(pthread_create(&p, NULL, plat_r2_sender_b, &r), 0);
        else spawn_ok(&tb, r2_sender_b, &r);
        join_val(s);
        join_val(ta);
        if (tb) join_val(tb);
        else pthread_join(p, NULL);
        if (r.sel_r == -ETIMEDOUT) { /* nobody came in time */
            CHECK_EQ(r.sr[0], -ETIMEDOUT);
            CHECK_EQ(r.sr[1], -ETIMEDOUT);
            CHECK_EQ(r.got, -1);
            which[2]++;
            continue;
        }
        CHECK(r.sel_r == 0 || r.sel_r == 1);
        int k = r.sel_r;
        CHECK_EQ(r.sr[k], 0);
        CHECK_EQ(r.sr[1 - k], -ETIMEDOUT);
        CHECK_EQ(r.got, 2 * i + k);
        which[k]++;
    }
    printf("a won %d, b won %d, neither %d\n", which[0], which[1], which[2]);
    weft_chan_free(a);
    weft_chan_free(b);
}

/* A select on a send and a receive meets a sender and a receiver at once,
 * with the channels closed at random moments: every message accounted
 * for. */
typedef struct race3 {
    weft_chan *in, *out;
    int round;
    atomic_int go;
    int sel_r, sel_res, got, send_r, recv_r, recvd;
} race3;

static void *r3_selector(void *x) {
    race3 *r = x;
    int mine = 1000 + r->round;
    weft_case cs[2] = {WEFT_RECV(r->in, &r->got), WEFT_SEND(r->out, &mine)};
    r->got = -1;
    atomic_store(&r->go, 1);
    r->sel_r = weft_select(cs, 2, weft_now() + 200000);
    if (r->sel_r >= 0) r->sel_res = cs[r->sel_r].result;
    return NULL;
}

static void *r3_sender(void *x) {
    race3 *r = x;
    while (!atomic_load(&r->go)) weft_yield();
    int v = r->round;
    r->send_r = weft_chan_send_until(r->in, &v, weft_now() + 100000 * (r->round % 3));
    return NULL;
}

static void *r3_receiver(void *x) {
    race3 *r = x;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 5; k++) weft_yield();
    r->recvd = -1;
    r->recv_r = weft_chan_recv_until(r->out, &r->recvd, weft_now() + 100000 * (r->round % 4));
    return NULL;
}

static void *r3_closer(void *x) {
    race3 *r = x;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 9; k++) weft_yield();
    if (r->round % 2) weft_chan_close(r->in);
    else weft_chan_close(r->out);
    return NULL;
}

TEST(race_select_send_recv_close) {
    use_carriers(3);
    int rounds = SCALE(3000);
    for (int i = 0; i < rounds; i++) {
        race3 r = {.in = chan_new(sizeof(int), 0), .out = chan_new(sizeof(int), 0), .round = i};
        weft_thread *t[4];
        spawn_ok(&t[0], r3_selector, &r);
        spawn_ok(&t[1], r3_sender, &r);
        spawn_ok(&t[2], r3_receiver, &r);
        spawn_ok(&t[3], r3_closer, &r);
        for (int k = 0; k < 4; k++) join_val(t[k]);
        /* the sender's message went to the selector iff the select fired case 0 with 0 */
        int sel_got = r.sel_r == 0 && r.sel_res == 0;
        CHECK_EQ(r.send_r == 0, sel_got);
        if (sel_got) CHECK_EQ(r.got, i);
        else CHECK_EQ(r.got, -1);
        /* the selector's message went to the receiver iff case 1 fired with 0 */
        int sel_sent = r.sel_r == 1 && r.sel_res == 0;
        CHECK_EQ(r.recv_r == 0, sel_sent);
        if (sel_sent) CHECK_EQ(r.recvd, 1000 + i);
        CHECK(r.sel_r == 0 || r.sel_r == 1 || r.sel_r == -ETIMEDOUT);
        weft_chan_free(r.in);
        weft_chan_free(r.out);
    }
}

/* ---- the carrier is not blocked ------------------------------------------ */

static atomic_long ticks;

static void *ticker(void *a) {
    weft_chan *c = a;
    while (atomic_load(&ticks) < 1000) {
        atomic_fetch_add(&ticks, 1);
        weft_yield();
    }
    int v = 123;
    CHECK_EQ(weft_chan_send(c, &v), 0);
    return NULL;
}

static void *blocked_receiver(void *a) {
    int v = 0;
    CHECK_EQ(weft_chan_recv((weft_chan *)a, &v), 0);
    CHECK_EQ(v, 123);
    CHECK(atomic_load(&ticks) >= 1000); /* the ticker ran while we waited */
    return NULL;
}

TEST(recv_does_not_block_the_carrier) {
    use_carriers(1);
    weft_chan *c = chan_new(sizeof(int), 0);
    weft_thread *r, *t;
    spawn_ok(&r, blocked_receiver, c);
    spawn_ok(&t, ticker, c);
    join_val(r);
    join_val(t);
    weft_chan_free(c);
}

/* ---- the dump shows the wait and its call site ------------------------------ */

static void *dump_receiver(void *a) {
    int v;
    atomic_fetch_add(&entered, 1);
    return (void *)(intptr_t)weft_chan_recv((weft_chan *)a, &v);
}

TEST(dump_shows_channel_wait) {
    weft_chan *c = chan_new(sizeof(int), 0);
    weft_thread_opts at = {.name = "chanwait"};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, dump_receiver, c, &at), 0);
    /* once the receiver is parked, whenever that is */
    char *d = dump_showing(WEFT_DUMP_TEXT, "channel receive", "test_chan.c:", NULL);
    free(d);
    CHECK_EQ(weft_chan_close(c), 0);
    CHECK_EQ(join_val(t), -EPIPE);
    weft_chan_free(c);
}

/* ---- misuse --------------------------------------------------------------- */

static void *recv_forever(void *arg) {
    int v;
    return (void *)(intptr_t)weft_chan_recv((weft_chan *)arg, &v);
}

/* Freeing a channel a thread waits on stops the program with one line that
 * names the call once ("weft: weft_chan_free(0x...): ..."; it said "weft:
 * weft:" before) and SIGABRT, never a use after free. */
TEST(free_under_waiter_is_fatal) {
    char path[] = "/tmp/weft-test-chan-XXXXXX"; /* the child's stderr */
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        weft_chan *c = chan_new(sizeof(int), 0);
        weft_thread *t;
        spawn_ok(&t, recv_forever, c);
        /* parked, so on the channel's list of waiters */
        while (atomic_load(&weft__thread_of(t)->rstate) != WEFT__RS_PARKED) usleep(100);
        weft_chan_free(c);
        _exit(0); /* not reached */
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    char *buf = slurp_fd(fd);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
    int named_once = !strncmp(buf, "weft: weft_chan_free(", 21) && !strstr(buf, "weft: weft:") &&
                     strstr(buf, "a thread still waits on the channel") != NULL;
    if (!named_once) fprintf(stderr, "the message: '%s'\n", buf);
    CHECK(named_once);
    free(buf);
}
