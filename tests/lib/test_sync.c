/* The sync layer: mutex, cond, semaphore, rwlock, latch, once -- from
 * vthreads, platform threads and both at once; mutual exclusion under
 * contention across carriers; deadlines and cancellation on every blocking
 * call; and the races between a wake and a timeout or cancel, repeated. */
#include "harness.h"
#include "sync/waitq.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- helpers ------------------------------------------------------------ */

static void start(int carriers) {
    weft_runtime_opts cfg = {.carriers = carriers};
    CHECK_EQ(weft_init(&cfg), 0);
}

/* Sleeps on either kind of thread. */
static void nap_us(int us) {
    if (weft_self()) CHECK_EQ(weft_sleep((int64_t)us * 1000), 0);
    else usleep((useconds_t)us);
}

/* Waiters queued on q right now (under the queue's lock). */
static int qlen(weft__waitq *q) {
    weft__wq_lock(q);
    int n = 0;
    for (weft__waiter *w = q->head; w; w = w->next) n++;
    weft__wq_unlock(q);
    return n;
}

/* Until n wait on q (never: the harness's timeout). */
static void wait_qlen(weft__waitq *q, int n) {
    while (qlen(q) < n) nap_us(50);
}

static intptr_t join_val(weft_thread *t) {
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    return (intptr_t)r;
}

static void vary(int k) {
    for (int i = 0; i < k; i++) weft_yield();
}

static int64_t ms(int n) { return (int64_t)n * 1000000; }

/* The mutex's state bits (white-box, src/sync/sync.c). */
#define T_M_LOCKED 1u
#define T_M_STARVING 4u

/* ======================================================================== */
/* mutex                                                                     */
/* ======================================================================== */

TEST(mutex_basic) {
    weft_mutex m = WEFT_MUTEX_INIT;
    CHECK_EQ(weft_mutex_lock(&m), 0);
    CHECK_EQ(weft_mutex_try_lock(&m), -EBUSY);
    CHECK_EQ(weft_mutex_destroy(&m), -EBUSY);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
    CHECK_EQ(weft_mutex_unlock(&m), -EPERM);
    CHECK_EQ(weft_mutex_try_lock(&m), 0);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
    CHECK_EQ(weft_mutex_destroy(&m), 0);
    weft_mutex m2;
    memset(&m2, 0xff, sizeof m2);
    CHECK_EQ(weft_mutex_init(&m2), 0);
    CHECK_EQ((weft_mutex_lock)(&m2), 0);
    CHECK_EQ((weft_mutex_lock_until)(&m2, weft_now() + ms(1)), -ETIMEDOUT); /* not recursive */
    CHECK_EQ(weft_mutex_unlock(&m2), 0);
    CHECK_EQ(m2.state, 0);
}

/* ---- mutual exclusion under contention ---------------------------------- */

typedef struct counter {
    weft_mutex m;
    long value;
    atomic_int inside;
    int per;
    int yield_every; /* > 0: sometimes yield or sleep while holding the lock */
} counter;

static void count_once(counter *c, int i) {
    CHECK_EQ(weft_mutex_lock(&c->m), 0);
    CHECK_EQ(atomic_fetch_add_explicit(&c->inside, 1, memory_order_relaxed), 0);
    long v = c->value;
    if (c->yield_every && i % c->yield_every == 0) {
        if (weft_self()) weft_yield();
        else sched_yield();
    }
    c->value = v + 1;
    atomic_fetch_sub_explicit(&c->inside, 1, memory_order_relaxed);
    CHECK_EQ(weft_mutex_unlock(&c->m), 0);
}

static void *counter_fn(void *arg) {
    counter *c = arg;
    for (int i = 0; i < c->per; i++) count_once(c, i);
    return NULL;
}

TEST(mutex_counter_stress_vthreads) {
    start(4);
    static counter c = {.m = WEFT_MUTEX_INIT};
    enum { N = 200 };
    c.per = SCALE(2000);
    c.yield_every = 97;
    weft_thread *t[N];
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], counter_fn, &c, NULL), 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(c.value, (long)N * c.per);
    CHECK_EQ(c.m.state, 0);
    CHECK_EQ(weft_mutex_destroy(&c.m), 0);
}

/* 1,000 vthreads x 1,000 increments (the acceptance benchmark's shape),
 * checked for the count only. */
TEST(mutex_thousand_vthreads) {
    static counter c = {.m = WEFT_MUTEX_INIT};
    enum { N = 1000 };
    c.per = SCALE(1000);
    static weft_thread *t[N];
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], counter_fn, &c, NULL), 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(c.value, (long)N * c.per);
}

TEST(mutex_mixed_platform_and_vthreads) {
    start(3);
    static counter c = {.m = WEFT_MUTEX_INIT};
    enum { NV = 64, NP = 4 };
    c.per = SCALE(3000);
    c.yield_every = 31;
    weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, counter_fn, &c), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], counter_fn, &c, NULL), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(c.value, (long)(NV + NP) * c.per);
    CHECK_EQ(c.m.state, 0);
}

/* Platform threads alone, the runtime never started. */
TEST(mutex_platform_only) {
    static counter c = {.m = WEFT_MUTEX_INIT};
    enum { NP = 4 };
    c.per = SCALE(20000);
    c.yield_every = 101;
    pthread_t p[NP];
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, counter_fn, &c), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(c.value, (long)NP * c.per);
    CHECK_EQ(c.m.state, 0);
}

/* ---- a waiting vthread frees its carrier; holders of both kinds -------- */

static weft_mutex hold_m = WEFT_MUTEX_INIT;
static atomic_int side_ran, got_lock, release_holder;

static void *locker(void *arg) {
    CHECK_EQ(weft_mutex_lock(&hold_m), 0);
    atomic_fetch_add(&got_lock, 1);
    CHECK_EQ(weft_mutex_unlock(&hold_m), 0);
    return NULL;
}

static void *side_job(void *arg) {
    atomic_store(&side_ran, 1);
    return NULL;
}

/* Holds hold_m until release_holder is set, sleeping meanwhile. */
static void *sleepy_holder(void *arg) {
    CHECK_EQ(weft_mutex_lock(&hold_m), 0);
    atomic_store(&got_lock, -1000);
    while (!atomic_load(&release_holder)) nap_us(500);
    atomic_store(&got_lock, 0);
    CHECK_EQ(weft_mutex_unlock(&hold_m), 0);
    return NULL;
}

TEST(mutex_waiter_does_not_pin_carrier) {
    start(1);
    weft_thread *h, *w[8], *s;
    CHECK_EQ(weft_spawn(&h, sleepy_holder, NULL, NULL), 0);
    while (atomic_load(&got_lock) != -1000) usleep(100);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_spawn(&w[i], locker, NULL, NULL), 0);
    wait_qlen(&hold_m.q, 8);
    /* eight vthreads wait for the lock on the only carrier: it still runs others */
    CHECK_EQ(weft_spawn(&s, side_job, NULL, NULL), 0);
    CHECK_EQ(weft_join(s, NULL), 0);
    CHECK_EQ(atomic_load(&side_ran), 1);
    atomic_store(&release_holder, 1);
    CHECK_EQ(weft_join(h, NULL), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_join(w[i], NULL), 0);
    CHECK_EQ(atomic_load(&got_lock), 8);
}

TEST(mutex_held_by_platform_wanted_by_vthreads) {
    start(2);
    CHECK_EQ(weft_mutex_lock(&hold_m), 0); /* this platform thread holds it */
    weft_thread *w[16];
    for (int i = 0; i < 16; i++) CHECK_EQ(weft_spawn(&w[i], locker, NULL, NULL), 0);
    wait_qlen(&hold_m.q, 16);
    CHECK_EQ(atomic_load(&got_lock), 0);
    CHECK_EQ(weft_mutex_unlock(&hold_m), 0);
    for (int i = 0; i < 16; i++) CHECK_EQ(weft_join(w[i], NULL), 0);
    CHECK_EQ(atomic_load(&got_lock), 16);
}

/* Lets the holder go once the three pthreads and main all wait. */
static void *release_when_four_wait(void *arg) {
    wait_qlen(&hold_m.q, 4);
    atomic_store(&release_holder, 1);
    return NULL;
}

TEST(mutex_held_by_vthread_wanted_by_platform) {
    start(2);
    weft_thread *h;
    CHECK_EQ(weft_spawn(&h, sleepy_holder, NULL, NULL), 0);
    while (atomic_load(&got_lock) != -1000) usleep(100);
    pthread_t p[4];
    for (int i = 0; i < 3; i++) CHECK_EQ(pthread_create(&p[i], NULL, locker, NULL), 0);
    CHECK_EQ(pthread_create(&p[3], NULL, release_when_four_wait, NULL), 0);
    CHECK_EQ(weft_mutex_lock(&hold_m), 0); /* blocks this pthread until the holder lets go */
    CHECK(atomic_load(&got_lock) >= 0);
    CHECK_EQ(weft_mutex_unlock(&hold_m), 0);
    for (int i = 0; i < 4; i++) pthread_join(p[i], NULL);
    CHECK_EQ(weft_join(h, NULL), 0);
    CHECK_EQ(atomic_load(&got_lock), 3);
}

/* ---- deadlines and cancellation ---------------------------------------- */

static void *lock_with_deadlines(void *arg) {
    weft_mutex *m = arg;
    int64_t t0 = weft_now();
    CHECK_EQ(weft_mutex_lock_until(m, t0 + ms(3)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= ms(3));
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_mutex_lock(m), -ETIMEDOUT);
    weft_deadline_set(old);
    CHECK_EQ(weft_mutex_lock_until(m, 1), -ETIMEDOUT); /* already past */
    return NULL;
}

TEST(mutex_deadlines) {
    start(2);
    weft_mutex m = WEFT_MUTEX_INIT;
    CHECK_EQ(weft_mutex_lock(&m), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, lock_with_deadlines, &m, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    pthread_t p;
    CHECK_EQ(pthread_create(&p, NULL, lock_with_deadlines, &m), 0); /* and from a pthread */
    pthread_join(p, NULL);
    CHECK_EQ(qlen(&m.q), 0);
    CHECK_EQ(m.state, T_M_LOCKED); /* no waiter bits left behind */
    CHECK_EQ(weft_mutex_unlock(&m), 0);
    CHECK_EQ(weft_mutex_try_lock(&m), 0);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
}

static void *lock_result(void *arg) {
    weft_mutex *m = arg;
    int r = weft_mutex_lock(m);
    if (r == 0) CHECK_EQ(weft_mutex_unlock(m), 0);
    return (void *)(intptr_t)r;
}

/* A cancelled vthread: the call that need not wait succeeds, the one that
 * would wait fails at once. */
static void *cancelled_locker(void *arg) {
    weft_mutex *m = arg;
    while (!weft_cancelled()) weft_yield();
    CHECK_EQ(weft_mutex_lock(m), 0); /* uncontended: no wait, no cancellation point */
    CHECK_EQ(weft_mutex_unlock(m), 0);
    return NULL;
}

static void *cancelled_contender(void *arg) {
    weft_mutex *m = arg;
    while (!weft_cancelled()) weft_yield();
    return (void *)(intptr_t)weft_mutex_lock(m);
}

TEST(mutex_cancel_waiter) {
    start(2);
    weft_mutex m0 = WEFT_MUTEX_INIT;
    weft_thread *c0;
    CHECK_EQ(weft_spawn(&c0, cancelled_locker, &m0, NULL), 0);
    CHECK_EQ(weft_cancel(c0), 0);
    CHECK_EQ(weft_join(c0, NULL), 0);
    CHECK_EQ(weft_mutex_lock(&m0), 0);
    CHECK_EQ(weft_spawn(&c0, cancelled_contender, &m0, NULL), 0);
    CHECK_EQ(weft_cancel(c0), 0);
    CHECK_EQ(join_val(c0), -ECANCELED);
    CHECK_EQ(m0.state, T_M_LOCKED);
    CHECK_EQ(weft_mutex_unlock(&m0), 0);

    weft_mutex m = WEFT_MUTEX_INIT;
    CHECK_EQ(weft_mutex_lock(&m), 0);
    weft_thread *a, *b;
    CHECK_EQ(weft_spawn(&a, lock_result, &m, NULL), 0);
    CHECK_EQ(weft_spawn(&b, lock_result, &m, NULL), 0);
    wait_qlen(&m.q, 2);
    CHECK_EQ(weft_cancel(a), 0);
    CHECK_EQ(join_val(a), -ECANCELED);
    CHECK_EQ(qlen(&m.q), 1);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
    CHECK_EQ(join_val(b), 0);
    CHECK_EQ(m.state, 0);
}

/* ---- RACE: unlock vs cancel of the waiter ------------------------------- */

typedef struct ucrace {
    weft_mutex m;
    weft_thread *victim;
    int round;
} ucrace;

static void *uc_canceller(void *arg) {
    ucrace *u = arg;
    vary(u->round % 5);
    CHECK_EQ(weft_cancel(u->victim), 0);
    return NULL;
}

static void *uc_unlocker(void *arg) {
    ucrace *u = arg;
    vary(u->round % 3);
    CHECK_EQ(weft_mutex_unlock(&u->m), 0);
    return NULL;
}

/* One round: a holder, the victim and a second waiter queued; then the
 * unlock and the victim's cancel race (in starvation mode too, forced).
 * Whatever wins, the second waiter gets the lock (it waits with no deadline:
 * a lost hand-off hangs) and the lock is free and whole afterwards. */
static int uc_round(int i) {
    ucrace u = {.m = WEFT_MUTEX_INIT, .round = i};
    CHECK_EQ(weft_mutex_lock(&u.m), 0);
    weft_thread *w2, *c, *un;
    CHECK_EQ(weft_spawn(&u.victim, lock_result, &u.m, NULL), 0);
    wait_qlen(&u.m.q, 1);
    CHECK_EQ(weft_spawn(&w2, lock_result, &u.m, NULL), 0);
    wait_qlen(&u.m.q, 2);
    if (i % 2) __atomic_fetch_or(&u.m.state, T_M_STARVING, __ATOMIC_SEQ_CST); /* hand-off mode */
    CHECK_EQ(weft_spawn(&c, uc_canceller, &u, NULL), 0);
    if (i % 4 < 2) {
        CHECK_EQ(weft_spawn(&un, uc_unlocker, &u, NULL), 0);
        CHECK_EQ(weft_join(un, NULL), 0);
    } else {
        vary(i % 3);
        CHECK_EQ(weft_mutex_unlock(&u.m), 0); /* from the driver, a platform or vthread */
    }
    CHECK_EQ(weft_join(c, NULL), 0);
    intptr_t r = join_val(u.victim);
    CHECK(r == 0 || r == -ECANCELED);
    CHECK_EQ(join_val(w2), 0);
    CHECK_EQ(u.m.state, 0);
    CHECK_EQ(weft_mutex_try_lock(&u.m), 0);
    CHECK_EQ(weft_mutex_try_lock(&u.m), -EBUSY);
    CHECK_EQ(weft_mutex_unlock(&u.m), 0);
    CHECK_EQ(weft_mutex_destroy(&u.m), 0);
    return r == 0;
}

static void *uc_driver(void *arg) {
    int n = (int)(intptr_t)arg, won = 0;
    for (int i = 0; i < n; i++) won += uc_round(i);
    return (void *)(intptr_t)won;
}

TEST(race_mutex_unlock_vs_cancel) {
    start(4);
    weft_thread *d;
    CHECK_EQ(weft_spawn(&d, uc_driver, (void *)(intptr_t)SCALE(3000), NULL), 0);
    intptr_t won = (intptr_t)uc_driver((void *)(intptr_t)SCALE(1000)); /* the driver on a platform thread too */
    won += join_val(d);
    printf("victim got the lock in %ld of %d rounds\n", (long)won, SCALE(3000) + SCALE(1000));
}

/* ---- starvation guard ---------------------------------------------------- */

typedef struct barge {
    weft_mutex m;
    atomic_int stop;
    atomic_int saw_starving;
    long value;
} barge;

static void *barger(void *arg) {
    barge *b = arg;
    while (!atomic_load(&b->stop)) {
        for (int i = 0; i < 20000 && !atomic_load_explicit(&b->stop, memory_order_relaxed); i++) {
            CHECK_EQ(weft_mutex_lock(&b->m), 0);
            if (__atomic_load_n(&b->m.state, __ATOMIC_RELAXED) & T_M_STARVING) atomic_store(&b->saw_starving, 1);
            for (int k = 0; k < 20; k++) b->value++; /* a critical section worth contending for */
            __asm__ volatile("" ::: "memory");
            CHECK_EQ(weft_mutex_unlock(&b->m), 0);
        }
        weft_yield();
    }
    return NULL;
}

static void *late_locker(void *arg) {
    barge *b = arg;
    for (int i = 0; i < 50; i++) {
        CHECK_EQ(weft_mutex_lock(&b->m), 0);
        b->value++;
        /* hold it a little: the bargers pile up as waiters */
        if (weft_self()) weft_yield();
        CHECK_EQ(weft_mutex_unlock(&b->m), 0);
    }
    return NULL;
}

/* Bargers hammer the lock on every carrier; a late comer still gets it 50
 * times, promptly (the starvation guard hands it over). */
TEST(mutex_starvation_guard) {
    start(3);
    static barge b = {.m = WEFT_MUTEX_INIT};
    weft_thread *t[6], *l;
    for (int i = 0; i < 6; i++) CHECK_EQ(weft_spawn(&t[i], barger, &b, NULL), 0);
    usleep(5000);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_spawn(&l, late_locker, &b, NULL), 0);
    CHECK_EQ(weft_join(l, NULL), 0);
    pthread_t p;
    CHECK_EQ(pthread_create(&p, NULL, late_locker, &b), 0);
    pthread_join(p, NULL);
    int64_t took = weft_now() - t0;
    atomic_store(&b.stop, 1);
    for (int i = 0; i < 6; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    printf("late lockers done in %.1f ms; starvation mode seen: %d\n", (double)took / 1e6, atomic_load(&b.saw_starving));
    CHECK(took < 20LL * 1000000000);
    CHECK_EQ(b.m.state, 0);
}

/* ======================================================================== */
/* condition variable                                                        */
/* ======================================================================== */

typedef struct pc {
    weft_mutex m;
    weft_cond nonempty, nonfull;
    int buf[4];
    int head, count;
    int per;
    long sum;
} pc;

static void *producer(void *arg) {
    pc *q = arg;
    for (int i = 1; i <= q->per; i++) {
        CHECK_EQ(weft_mutex_lock(&q->m), 0);
        while (q->count == 4) CHECK_EQ(weft_cond_wait(&q->nonfull, &q->m), 0);
        q->buf[(q->head + q->count++) % 4] = i;
        CHECK_EQ(weft_cond_signal(&q->nonempty), 0);
        CHECK_EQ(weft_mutex_unlock(&q->m), 0);
    }
    return NULL;
}

static void *consumer(void *arg) {
    pc *q = arg;
    for (int i = 1; i <= q->per; i++) {
        CHECK_EQ(weft_mutex_lock(&q->m), 0);
        while (q->count == 0) CHECK_EQ(weft_cond_wait(&q->nonempty, &q->m), 0);
        q->sum += q->buf[q->head];
        q->head = (q->head + 1) % 4;
        q->count--;
        CHECK_EQ(weft_mutex_unlock(&q->m), 0);
        CHECK_EQ(weft_cond_signal(&q->nonfull), 0); /* outside the lock, too */
    }
    return NULL;
}

/* Bounded buffer, 3 producers and 3 consumers of each kind of thread mix. */
TEST(cond_producer_consumer) {
    start(3);
    for (int mix = 0; mix < 3; mix++) {
        pc q = {.m = WEFT_MUTEX_INIT, .nonempty = WEFT_COND_INIT, .nonfull = WEFT_COND_INIT};
        q.per = SCALE(5000);
        weft_thread *t[6] = {0};
        pthread_t p[6];
        for (int i = 0; i < 6; i++) {
            void *(*fn)(void *) = i < 3 ? producer : consumer;
            int plat = mix == 1 ? (i % 2) : mix == 2 ? (i < 3) : 0;
            if (plat) CHECK_EQ(pthread_create(&p[i], NULL, fn, &q), 0);
            else CHECK_EQ(weft_spawn(&t[i], fn, &q, NULL), 0);
        }
        for (int i = 0; i < 6; i++) {
            if (t[i]) CHECK_EQ(weft_join(t[i], NULL), 0);
            else pthread_join(p[i], NULL);
        }
        CHECK_EQ(q.sum, 3L * q.per * (q.per + 1) / 2);
        CHECK_EQ(weft_cond_destroy(&q.nonempty), 0);
        CHECK_EQ(weft_cond_destroy(&q.nonfull), 0);
    }
}

/* ---- no lost wake-ups: ping-pong on one flag, repeated ------------------- */

typedef struct pingpong {
    weft_mutex m;
    weft_cond c;
    int turn; /* 0 or 1 */
    int rounds;
} pingpong;

typedef struct side {
    pingpong *pp;
    int me;
} side;

static void *pp_side(void *arg) {
    side *s = arg;
    pingpong *pp = s->pp;
    for (int i = 0; i < pp->rounds; i++) {
        CHECK_EQ(weft_mutex_lock(&pp->m), 0);
        while (pp->turn != s->me) CHECK_EQ(weft_cond_wait(&pp->c, &pp->m), 0); /* no deadline: a lost wake hangs */
        pp->turn = !s->me;
        CHECK_EQ(weft_cond_signal(&pp->c), 0);
        CHECK_EQ(weft_mutex_unlock(&pp->m), 0);
    }
    return NULL;
}

TEST(cond_no_lost_wakeup_pingpong) {
    start(2);
    for (int mix = 0; mix < 3; mix++) {
        pingpong pp = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT, .rounds = SCALE(mix == 0 ? 20000 : 5000)};
        side a = {&pp, 0}, b = {&pp, 1};
        weft_thread *ta = NULL, *tb;
        pthread_t pa;
        if (mix == 0) CHECK_EQ(weft_spawn(&ta, pp_side, &a, NULL), 0);
        else CHECK_EQ(pthread_create(&pa, NULL, pp_side, &a), 0);
        if (mix == 2) {
            pthread_t pb;
            CHECK_EQ(pthread_create(&pb, NULL, pp_side, &b), 0);
            pthread_join(pb, NULL);
        } else {
            CHECK_EQ(weft_spawn(&tb, pp_side, &b, NULL), 0);
            CHECK_EQ(weft_join(tb, NULL), 0);
        }
        if (ta) CHECK_EQ(weft_join(ta, NULL), 0);
        else pthread_join(pa, NULL);
    }
}

/* ---- broadcast ------------------------------------------------------------ */

typedef struct gate {
    weft_mutex m;
    weft_cond c;
    int open;
    atomic_int waiting, passed;
} gate;

static void *gate_waiter(void *arg) {
    gate *g = arg;
    CHECK_EQ(weft_mutex_lock(&g->m), 0);
    atomic_fetch_add(&g->waiting, 1);
    while (!g->open) CHECK_EQ(weft_cond_wait(&g->c, &g->m), 0);
    atomic_fetch_add(&g->passed, 1);
    CHECK_EQ(weft_mutex_unlock(&g->m), 0);
    return NULL;
}

TEST(cond_broadcast_wakes_all) {
    start(2);
    for (int round = 0; round < SCALE(20); round++) {
        gate g = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
        enum { NV = 200, NP = 3 };
        weft_thread *t[NV];
        pthread_t p[NP];
        for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], gate_waiter, &g, NULL), 0);
        for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, gate_waiter, &g), 0);
        if (round % 2) wait_qlen(&g.c.q, NV + NP); /* all asleep first, or not */
        CHECK_EQ(weft_mutex_lock(&g.m), 0);
        g.open = 1;
        CHECK_EQ(weft_cond_broadcast(&g.c), 0);
        CHECK_EQ(weft_mutex_unlock(&g.m), 0);
        for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
        for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
        CHECK_EQ(atomic_load(&g.passed), NV + NP);
        CHECK_EQ(weft_cond_destroy(&g.c), 0);
    }
}

/* ---- deadlines and cancellation: the mutex is held again on return ------- */

static void *cond_timeout_fn(void *arg) {
    gate *g = arg;
    CHECK_EQ(weft_mutex_lock(&g->m), 0);
    int64_t t0 = weft_now();
    CHECK_EQ(weft_cond_wait_until(&g->c, &g->m, t0 + ms(3)), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= ms(3));
    CHECK_EQ(weft_mutex_try_lock(&g->m), -EBUSY); /* held again */
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_cond_wait(&g->c, &g->m), -ETIMEDOUT);
    weft_deadline_set(old);
    CHECK_EQ(weft_mutex_unlock(&g->m), 0);
    /* not holding the mutex: refused, nothing done */
    CHECK_EQ(weft_cond_wait(&g->c, &g->m), -EPERM);
    return NULL;
}

TEST(cond_deadlines) {
    start(2);
    gate g = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cond_timeout_fn, &g, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    pthread_t p;
    CHECK_EQ(pthread_create(&p, NULL, cond_timeout_fn, &g), 0);
    pthread_join(p, NULL);
    CHECK_EQ(qlen(&g.c.q), 0);
    CHECK_EQ(g.m.state, 0);
}

static atomic_int cc_inside;
static void *cond_cancel_fn(void *arg) {
    gate *g = arg;
    CHECK_EQ(weft_mutex_lock(&g->m), 0);
    int r = weft_cond_wait(&g->c, &g->m);
    /* whatever happened, we hold the mutex: nobody else is inside */
    CHECK_EQ(atomic_fetch_add(&cc_inside, 1), 0);
    CHECK_EQ(weft_mutex_try_lock(&g->m), -EBUSY);
    /* cancellation is sticky: the next wait fails at once, m still held */
    if (r == -ECANCELED) CHECK_EQ(weft_cond_wait(&g->c, &g->m), -ECANCELED);
    atomic_fetch_sub(&cc_inside, 1);
    CHECK_EQ(weft_mutex_unlock(&g->m), 0);
    return (void *)(intptr_t)r;
}

TEST(cond_cancel_relocks_uncancellably) {
    start(2);
    gate g = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cond_cancel_fn, &g, NULL), 0);
    wait_qlen(&g.c.q, 1);
    /* cancel it while we hold the mutex: its re-lock must wait for us */
    CHECK_EQ(weft_mutex_lock(&g.m), 0);
    CHECK_EQ(weft_cancel(t), 0);
    wait_qlen(&g.m.q, 1);                 /* it waits for the mutex, cancelled or not ... */
    nap_us(2000);
    CHECK_EQ(atomic_load(&cc_inside), 0); /* ... and did not return without it */
    CHECK_EQ(weft_mutex_unlock(&g.m), 0);
    CHECK_EQ(join_val(t), -ECANCELED);
    CHECK_EQ(qlen(&g.c.q), 0);
    CHECK_EQ(g.m.state, 0);
}

/* ---- RACE: signal vs cancel of the signalled waiter ---------------------- */

typedef struct scrace {
    weft_mutex m;
    weft_cond c;
    int round;
    weft_thread *victim;
    int tickets; /* signals sent and not yet claimed, under m */
} scrace;

/* Waits for a ticket; returns 0 when it took one, else the error. */
static void *sc_waiter(void *arg) {
    scrace *s = arg;
    CHECK_EQ(weft_mutex_lock(&s->m), 0);
    int r = 0;
    while (s->tickets == 0) {
        r = weft_cond_wait(&s->c, &s->m);
        if (r < 0) break;
    }
    if (r == 0) s->tickets--;
    CHECK_EQ(weft_mutex_unlock(&s->m), 0);
    return (void *)(intptr_t)r;
}

static void *sc_canceller(void *arg) {
    scrace *s = arg;
    vary(s->round % 4);
    CHECK_EQ(weft_cancel(s->victim), 0);
    return NULL;
}

static void *sc_signaller(void *arg) {
    scrace *s = arg;
    vary(s->round % 3);
    CHECK_EQ(weft_mutex_lock(&s->m), 0);
    s->tickets++;
    CHECK_EQ(weft_mutex_unlock(&s->m), 0);
    CHECK_EQ(weft_cond_signal(&s->c), 0); /* after the unlock: the waiter must still be queued to get it */
    return NULL;
}

static void *sc_driver(void *arg) {
    int n = (int)(intptr_t)arg;
    int victim_won = 0;
    for (int i = 0; i < n; i++) {
        scrace s = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT, .round = i};
        weft_thread *w2, *c, *sg;
        CHECK_EQ(weft_spawn(&s.victim, sc_waiter, &s, NULL), 0);
        wait_qlen(&s.c.q, 1);
        CHECK_EQ(weft_spawn(&w2, sc_waiter, &s, NULL), 0); /* no deadline: a lost signal hangs it */
        wait_qlen(&s.c.q, 2);
        CHECK_EQ(weft_spawn(&c, sc_canceller, &s, NULL), 0);
        CHECK_EQ(weft_spawn(&sg, sc_signaller, &s, NULL), 0);
        CHECK_EQ(weft_join(c, NULL), 0);
        CHECK_EQ(weft_join(sg, NULL), 0);
        intptr_t r = join_val(s.victim);
        CHECK(r == 0 || r == -ECANCELED);
        if (r == 0) {
            victim_won++;
            /* it took the ticket: w2 needs another signal */
            CHECK_EQ(weft_mutex_lock(&s.m), 0);
            s.tickets++;
            CHECK_EQ(weft_cond_signal(&s.c), 0);
            CHECK_EQ(weft_mutex_unlock(&s.m), 0);
        }
        CHECK_EQ(join_val(w2), 0);
        CHECK_EQ(s.tickets, 0);
        CHECK_EQ(qlen(&s.c.q), 0);
        CHECK_EQ(s.m.state, 0);
    }
    return (void *)(intptr_t)victim_won;
}

TEST(race_cond_signal_vs_cancel) {
    start(4);
    weft_thread *d;
    CHECK_EQ(weft_spawn(&d, sc_driver, (void *)(intptr_t)SCALE(3000), NULL), 0);
    intptr_t won = (intptr_t)sc_driver((void *)(intptr_t)SCALE(500));
    won += join_val(d);
    printf("victim took the signal in %ld of %d rounds\n", (long)won, SCALE(3000) + SCALE(500));
}

/* ======================================================================== */
/* semaphore                                                                 */
/* ======================================================================== */

TEST(sem_counting) {
    weft_sem s = WEFT_SEM_INIT(3);
    CHECK_EQ(weft_sem_value(&s), 3);
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_sem_try_acquire(&s), 0);
    CHECK_EQ(weft_sem_try_acquire(&s), -EAGAIN);
    CHECK_EQ(weft_sem_acquire_until(&s, weft_now() + ms(2)), -ETIMEDOUT);
    CHECK_EQ(weft_sem_release(&s), 0);
    CHECK_EQ(weft_sem_value(&s), 1);
    CHECK_EQ(weft_sem_acquire(&s), 0);
    CHECK_EQ(weft_sem_value(&s), 0);
    CHECK_EQ(weft_sem_destroy(&s), 0);
    weft_sem s2;
    CHECK_EQ(weft_sem_init(&s2, WEFT_SEM_MAX + 1u), -EINVAL);
    CHECK_EQ(weft_sem_init(&s2, WEFT_SEM_MAX), 0);
    CHECK_EQ(weft_sem_release(&s2), -EOVERFLOW);
    CHECK_EQ(weft_sem_value(&s2), WEFT_SEM_MAX);
}

typedef struct bounded {
    weft_sem s;
    atomic_int in, peak;
    int per;
} bounded;

static void *bounded_fn(void *arg) {
    bounded *b = arg;
    for (int i = 0; i < b->per; i++) {
        CHECK_EQ(weft_sem_acquire(&b->s), 0);
        int n = atomic_fetch_add(&b->in, 1) + 1;
        CHECK(n <= 3);
        int pk = atomic_load(&b->peak);
        while (n > pk && !atomic_compare_exchange_weak(&b->peak, &pk, n)) {}
        if (i % 7 == 0) {
            if (weft_self()) weft_yield();
            else sched_yield();
        }
        atomic_fetch_sub(&b->in, 1);
        CHECK_EQ(weft_sem_release(&b->s), 0);
    }
    return NULL;
}

/* At most 3 holders at once, vthreads and pthreads together. */
TEST(sem_bounds_concurrency_mixed) {
    start(3);
    static bounded b = {.s = WEFT_SEM_INIT(3)};
    b.per = SCALE(3000);
    enum { NV = 40, NP = 3 };
    weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, bounded_fn, &b), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], bounded_fn, &b, NULL), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(weft_sem_value(&b.s), 3);
    printf("peak concurrent holders %d (at most 3)\n", atomic_load(&b.peak));
    CHECK_EQ(weft_sem_destroy(&b.s), 0);
}

static weft_sem fifo_s = WEFT_SEM_INIT(0);
static atomic_int fifo_next;
static void *fifo_acq(void *arg) {
    CHECK_EQ(weft_sem_acquire(&fifo_s), 0);
    CHECK_EQ(atomic_fetch_add(&fifo_next, 1), (int)(intptr_t)arg); /* served in arrival order */
    return NULL;
}

TEST(sem_fifo_and_platform_waiters) {
    start(2);
    weft_thread *t[8];
    pthread_t p[8];
    for (int i = 0; i < 8; i++) { /* queue them in a known order, alternating kinds */
        if (i % 2) CHECK_EQ(pthread_create(&p[i], NULL, fifo_acq, (void *)(intptr_t)i), 0);
        else CHECK_EQ(weft_spawn(&t[i], fifo_acq, (void *)(intptr_t)i, NULL), 0);
        wait_qlen(&fifo_s.q, i + 1);
    }
    CHECK_EQ(weft_sem_destroy(&fifo_s), -EBUSY);
    CHECK_EQ(weft_sem_try_acquire(&fifo_s), -EAGAIN);
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(weft_sem_release(&fifo_s), 0);
        while (atomic_load(&fifo_next) <= i) usleep(50); /* one at a time */
        CHECK_EQ(weft_sem_value(&fifo_s), 0);             /* handed over, not counted */
    }
    for (int i = 0; i < 8; i++) {
        if (i % 2) pthread_join(p[i], NULL);
        else CHECK_EQ(weft_join(t[i], NULL), 0);
    }
    CHECK_EQ(weft_sem_destroy(&fifo_s), 0);
}

static void *sem_acq_result(void *arg) { return (void *)(intptr_t)weft_sem_acquire((weft_sem *)arg); }

TEST(sem_cancel_and_deadline) {
    start(2);
    weft_sem s = WEFT_SEM_INIT(0);
    weft_thread *a, *b;
    CHECK_EQ(weft_spawn(&a, sem_acq_result, &s, NULL), 0);
    CHECK_EQ(weft_spawn(&b, sem_acq_result, &s, NULL), 0);
    wait_qlen(&s.q, 2);
    CHECK_EQ(weft_cancel(a), 0);
    CHECK_EQ(join_val(a), -ECANCELED);
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_sem_acquire(&s), -ETIMEDOUT); /* platform thread, effective deadline */
    weft_deadline_set(old);
    CHECK_EQ(weft_sem_value(&s), 0);
    CHECK_EQ(weft_sem_release(&s), 0); /* goes to b, the one still waiting */
    CHECK_EQ(join_val(b), 0);
    CHECK_EQ(weft_sem_value(&s), 0);
    CHECK_EQ(s.state, 0);
}

/* ---- RACE: release vs timeout (and cancel): permits conserved ------------ */

typedef struct srrace {
    weft_sem s;
    int round;
    weft_thread *victim;
    atomic_int done;
} srrace;

static void *sr_waiter(void *arg) {
    srrace *r = arg;
    int res = weft_sem_acquire_until(&r->s, weft_now() + 1000 * (r->round % 6));
    atomic_store(&r->done, 1);
    return (void *)(intptr_t)res;
}

static void *sr_releaser(void *arg) {
    srrace *r = arg;
    vary(r->round % 4);
    CHECK_EQ(weft_sem_release(&r->s), 0);
    return NULL;
}

static void *sr_canceller(void *arg) {
    srrace *r = arg;
    vary(r->round % 3);
    CHECK_EQ(weft_cancel(r->victim), 0);
    return NULL;
}

static void *sr_driver(void *arg) {
    int n = (int)(intptr_t)arg, got = 0;
    for (int i = 0; i < n; i++) {
        srrace r = {.s = WEFT_SEM_INIT(0), .round = i};
        weft_thread *rel, *c = NULL;
        CHECK_EQ(weft_spawn(&r.victim, sr_waiter, &r, NULL), 0);
        if (i % 2) /* parked first, unless its deadline is already over */
            while (qlen(&r.s.q) == 0 && !atomic_load(&r.done)) nap_us(20);
        if (i % 3 == 0) CHECK_EQ(weft_spawn(&c, sr_canceller, &r, NULL), 0);
        CHECK_EQ(weft_spawn(&rel, sr_releaser, &r, NULL), 0);
        CHECK_EQ(weft_join(rel, NULL), 0);
        if (c) CHECK_EQ(weft_join(c, NULL), 0);
        intptr_t res = join_val(r.victim);
        CHECK(res == 0 || res == -ETIMEDOUT || res == -ECANCELED);
        got += res == 0;
        CHECK_EQ((res == 0) + (int)weft_sem_value(&r.s), 1); /* the permit is somewhere, once */
        CHECK_EQ(qlen(&r.s.q), 0);
        CHECK_EQ(r.s.state, res == 0 ? 0 : 2);
    }
    return (void *)(intptr_t)got;
}

TEST(race_sem_release_vs_timeout) {
    start(4);
    weft_thread *d;
    int n = SCALE(5000);
    CHECK_EQ(weft_spawn(&d, sr_driver, (void *)(intptr_t)n, NULL), 0);
    intptr_t got = join_val(d);
    printf("waiter got the permit in %ld of %d rounds\n", (long)got, n);
}

/* ======================================================================== */
/* read-write lock                                                           */
/* ======================================================================== */

typedef struct rwt {
    weft_rwlock l;
    atomic_int readers, writers, max_readers;
    weft_latch all_in;
    long data[8];
    int per;
} rwt;

static void *reader_share(void *arg) {
    rwt *x = arg;
    CHECK_EQ(weft_rwlock_rdlock(&x->l), 0);
    atomic_fetch_add(&x->readers, 1);
    CHECK_EQ(weft_latch_count_down(&x->all_in), 0);
    CHECK_EQ(weft_latch_await(&x->all_in), 0); /* every reader is inside at once */
    atomic_fetch_sub(&x->readers, 1);
    CHECK_EQ(weft_rwlock_unlock(&x->l), 0);
    return NULL;
}

TEST(rwlock_readers_share) {
    start(2);
    static rwt x = {.l = WEFT_RWLOCK_INIT};
    enum { NV = 20, NP = 2 };
    CHECK_EQ(weft_latch_init(&x.all_in, NV + NP), 0);
    weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], reader_share, &x, NULL), 0);
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, reader_share, &x), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(x.l.state, 0);
    /* try forms */
    CHECK_EQ(weft_rwlock_try_rdlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_try_rdlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_try_wrlock(&x.l), -EBUSY);
    CHECK_EQ(weft_rwlock_destroy(&x.l), -EBUSY);
    CHECK_EQ(weft_rwlock_unlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_unlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_unlock(&x.l), -EPERM);
    CHECK_EQ(weft_rwlock_try_wrlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_try_rdlock(&x.l), -EBUSY);
    CHECK_EQ(weft_rwlock_try_wrlock(&x.l), -EBUSY);
    CHECK_EQ(weft_rwlock_unlock(&x.l), 0);
    CHECK_EQ(weft_rwlock_destroy(&x.l), 0);
}

static void *rw_worker(void *arg) {
    rwt *x = arg;
    uint64_t seed = (uint64_t)(uintptr_t)&seed;
    for (int i = 0; i < x->per; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if ((seed >> 33) % 8 == 0) {
            CHECK_EQ(weft_rwlock_wrlock(&x->l), 0);
            CHECK_EQ(atomic_fetch_add(&x->writers, 1), 0);
            CHECK_EQ(atomic_load(&x->readers), 0);
            for (int k = 0; k < 8; k++) x->data[k]++;
            if (i % 5 == 0 && weft_self()) weft_yield();
            atomic_fetch_sub(&x->writers, 1);
            CHECK_EQ(weft_rwlock_unlock(&x->l), 0);
        } else {
            CHECK_EQ(weft_rwlock_rdlock(&x->l), 0);
            int n = atomic_fetch_add(&x->readers, 1) + 1;
            int m = atomic_load(&x->max_readers);
            while (n > m && !atomic_compare_exchange_weak(&x->max_readers, &m, n)) {}
            CHECK_EQ(atomic_load(&x->writers), 0);
            long d0 = x->data[0];
            for (int k = 1; k < 8; k++) CHECK_EQ(x->data[k], d0); /* never a torn write */
            if (i % 3 == 0 && weft_self()) weft_yield();
            atomic_fetch_sub(&x->readers, 1);
            CHECK_EQ(weft_rwlock_unlock(&x->l), 0);
        }
    }
    return NULL;
}

TEST(rwlock_writer_exclusive_stress) {
    start(4);
    static rwt x = {.l = WEFT_RWLOCK_INIT};
    x.per = SCALE(4000);
    enum { NV = 32, NP = 2 };
    weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, rw_worker, &x), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], rw_worker, &x, NULL), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(x.l.state, 0);
    /* (that readers share is rwlock_readers_share's to prove; here it is luck) */
    printf("max concurrent readers %d, writes %ld\n", atomic_load(&x.max_readers), x.data[0]);
}

/* ---- writers are not starved by a stream of readers ---------------------- */

typedef struct stream {
    weft_rwlock l;
    atomic_int stop;
    atomic_int writer_waiting;
    atomic_long reads;
} stream;

static void *stream_reader(void *arg) {
    stream *s = arg;
    while (!atomic_load(&s->stop)) {
        CHECK_EQ(weft_rwlock_rdlock(&s->l), 0);
        atomic_fetch_add(&s->reads, 1);
        nap_us(200); /* readers overlap: the lock is never free of readers */
        CHECK_EQ(weft_rwlock_unlock(&s->l), 0);
    }
    return NULL;
}

static void *wr_hold(void *arg) { return (void *)(intptr_t)weft_rwlock_wrlock((weft_rwlock *)arg); }

TEST(rwlock_writer_not_starved) {
    start(2);
    static stream s = {.l = WEFT_RWLOCK_INIT};
    enum { NR = 16 };
    weft_thread *t[NR];
    for (int i = 0; i < NR; i++) CHECK_EQ(weft_spawn(&t[i], stream_reader, &s, NULL), 0);
    while (atomic_load(&s.reads) < 100) usleep(100);
    int64_t longest = 0;
    for (int k = 0; k < 20; k++) {
        int64_t t0 = weft_now();
        CHECK_EQ(weft_rwlock_wrlock(&s.l), 0); /* a platform thread: blocks until the readers drain */
        int64_t waited = weft_now() - t0;
        if (waited > longest) longest = waited;
        /* the readers inside finish a 0.2 ms nap (at most 4 ms measured
         * under TSan beside two `yes` processes); a starved writer waits for
         * a moment with no reader inside, which 16 overlapping readers may
         * never leave */
        CHECK(waited < 5LL * 1000000000);
        CHECK_EQ(weft_rwlock_unlock(&s.l), 0);
        nap_us(500);
    }
    printf("the writer waited %.1f ms at most\n", (double)longest / 1e6);
    /* a queued writer makes new readers queue behind it */
    weft_rwlock l = WEFT_RWLOCK_INIT;
    CHECK_EQ(weft_rwlock_rdlock(&l), 0);
    weft_thread *w;
    CHECK_EQ(weft_spawn(&w, wr_hold, &l, NULL), 0);
    wait_qlen(&l.q, 1);
    CHECK_EQ(weft_rwlock_try_rdlock(&l), -EBUSY);
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    CHECK_EQ(join_val(w), 0); /* it holds l for writing now */
    CHECK_EQ(weft_rwlock_try_rdlock(&l), -EBUSY);
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < NR; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
}

/* FIFO: readers that arrived behind a writer enter after it, together. */
static atomic_int order_n;
static int order_log[8];
static weft_rwlock order_l = WEFT_RWLOCK_INIT;

static void *order_reader(void *arg) {
    CHECK_EQ(weft_rwlock_rdlock(&order_l), 0);
    order_log[atomic_fetch_add(&order_n, 1)] = (int)(intptr_t)arg;
    nap_us(2000);
    CHECK_EQ(weft_rwlock_unlock(&order_l), 0);
    return NULL;
}

static void *order_writer(void *arg) {
    CHECK_EQ(weft_rwlock_wrlock(&order_l), 0);
    order_log[atomic_fetch_add(&order_n, 1)] = (int)(intptr_t)arg;
    nap_us(2000);
    CHECK_EQ(weft_rwlock_unlock(&order_l), 0);
    return NULL;
}

TEST(rwlock_fifo_policy) {
    start(2);
    CHECK_EQ(weft_rwlock_wrlock(&order_l), 0);
    /* queue: W1 R2 R3 W4 R5 */
    void *(*fn[5])(void *) = {order_writer, order_reader, order_reader, order_writer, order_reader};
    weft_thread *t[5];
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(weft_spawn(&t[i], fn[i], (void *)(intptr_t)(i + 1), NULL), 0);
        wait_qlen(&order_l.q, i + 1);
    }
    CHECK_EQ(weft_rwlock_unlock(&order_l), 0);
    for (int i = 0; i < 5; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(order_log[0], 1);
    CHECK((order_log[1] == 2 && order_log[2] == 3) || (order_log[1] == 3 && order_log[2] == 2));
    CHECK_EQ(order_log[3], 4);
    CHECK_EQ(order_log[4], 5);
}

static void *rd_result(void *arg) {
    int r = weft_rwlock_rdlock((weft_rwlock *)arg);
    if (r == 0) CHECK_EQ(weft_rwlock_unlock((weft_rwlock *)arg), 0);
    return (void *)(intptr_t)r;
}

static void *wr_result(void *arg);

/* Deadlines and cancellation; a writer that gives up at the head of the
 * queue lets the readers queued behind it in. */
TEST(rwlock_deadlines_and_cancel) {
    start(2);
    weft_rwlock l = WEFT_RWLOCK_INIT;
    CHECK_EQ(weft_rwlock_rdlock(&l), 0);
    weft_thread *w, *r[4];
    CHECK_EQ(weft_spawn(&w, wr_result, &l, NULL), 0);
    wait_qlen(&l.q, 1);
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_spawn(&r[i], rd_result, &l, NULL), 0);
    wait_qlen(&l.q, 5);
    CHECK_EQ(weft_cancel(w), 0); /* (a timeout takes the same path out) */
    CHECK_EQ(join_val(w), -ECANCELED);
    for (int i = 0; i < 4; i++) CHECK_EQ(join_val(r[i]), 0); /* let in behind the leaving writer */
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    CHECK_EQ(l.state, 0);
    /* a reader waiting for a writer, cancelled; a platform writer's deadline */
    CHECK_EQ(weft_rwlock_wrlock(&l), 0);
    weft_thread *rd;
    CHECK_EQ(weft_spawn(&rd, rd_result, &l, NULL), 0);
    wait_qlen(&l.q, 1);
    CHECK_EQ(weft_cancel(rd), 0);
    CHECK_EQ(join_val(rd), -ECANCELED);
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    CHECK_EQ(weft_rwlock_rdlock(&l), 0);
    CHECK_EQ(weft_rwlock_wrlock_until(&l, weft_now() + ms(2)), -ETIMEDOUT);
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_rwlock_wrlock(&l), -ETIMEDOUT);
    weft_deadline_set(old);
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    CHECK_EQ(l.state, 0);
    CHECK_EQ(weft_rwlock_destroy(&l), 0);
}

/* RACE: unlock vs cancel of a queued writer, with readers behind it. */
typedef struct rwrace {
    weft_rwlock l;
    weft_thread *victim;
    int round;
} rwrace;

static void *rwr_cancel(void *arg) {
    rwrace *x = arg;
    vary(x->round % 4);
    CHECK_EQ(weft_cancel(x->victim), 0);
    return NULL;
}

static void *wr_result(void *arg) {
    int r = weft_rwlock_wrlock((weft_rwlock *)arg);
    if (r == 0) CHECK_EQ(weft_rwlock_unlock((weft_rwlock *)arg), 0);
    return (void *)(intptr_t)r;
}

static void *rwr_driver(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        rwrace x = {.l = WEFT_RWLOCK_INIT, .round = i};
        if (i % 2) CHECK_EQ(weft_rwlock_rdlock(&x.l), 0);
        else CHECK_EQ(weft_rwlock_wrlock(&x.l), 0);
        weft_thread *rd, *w2, *c;
        CHECK_EQ(weft_spawn(&x.victim, wr_result, &x.l, NULL), 0);
        wait_qlen(&x.l.q, 1);
        CHECK_EQ(weft_spawn(&rd, rd_result, &x.l, NULL), 0);
        CHECK_EQ(weft_spawn(&w2, wr_result, &x.l, NULL), 0);
        wait_qlen(&x.l.q, 3);
        CHECK_EQ(weft_spawn(&c, rwr_cancel, &x, NULL), 0);
        vary(i % 3);
        CHECK_EQ(weft_rwlock_unlock(&x.l), 0);
        CHECK_EQ(weft_join(c, NULL), 0);
        intptr_t r = join_val(x.victim);
        CHECK(r == 0 || r == -ECANCELED);
        CHECK_EQ(join_val(rd), 0);
        CHECK_EQ(join_val(w2), 0);
        CHECK_EQ(x.l.state, 0);
        CHECK_EQ(weft_rwlock_try_wrlock(&x.l), 0);
        CHECK_EQ(weft_rwlock_unlock(&x.l), 0);
    }
    return NULL;
}

TEST(race_rwlock_unlock_vs_cancel) {
    start(4);
    weft_thread *d;
    CHECK_EQ(weft_spawn(&d, rwr_driver, (void *)(intptr_t)SCALE(2000), NULL), 0);
    CHECK_EQ(weft_join(d, NULL), 0);
}

/* ======================================================================== */
/* latch                                                                     */
/* ======================================================================== */

static void *latch_awaiter(void *arg) { return (void *)(intptr_t)weft_latch_await((weft_latch *)arg); }

TEST(latch_basic_mixed) {
    start(2);
    weft_latch l = WEFT_LATCH_INIT(3);
    enum { NV = 50, NP = 3 };
    weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], latch_awaiter, &l, NULL), 0);
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, latch_awaiter, &l), 0);
    wait_qlen(&l.q, NV + NP);
    CHECK_EQ(weft_latch_destroy(&l), -EBUSY);
    CHECK_EQ(weft_latch_count_down(&l), 0);
    CHECK_EQ(weft_latch_count_down(&l), 0);
    CHECK_EQ(weft_latch_count(&l), 1);
    CHECK_EQ(qlen(&l.q), NV + NP); /* still closed */
    CHECK_EQ(weft_latch_count_down(&l), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(join_val(t[i]), 0);
    for (int i = 0; i < NP; i++) {
        void *r;
        pthread_join(p[i], &r);
        CHECK_EQ((intptr_t)r, 0);
    }
    CHECK_EQ(weft_latch_count_down(&l), -EINVAL); /* past zero: refused, still open */
    CHECK_EQ(weft_latch_count(&l), 0);
    CHECK_EQ(weft_latch_await(&l), 0);
    /* as a wait group: add, then count down */
    CHECK_EQ(weft_latch_add(&l, 2), 0);
    CHECK_EQ(weft_latch_await_until(&l, weft_now() + ms(2)), -ETIMEDOUT);
    CHECK_EQ(weft_latch_add(&l, UINT32_MAX), -EOVERFLOW);
    CHECK_EQ(weft_latch_count_down(&l), 0);
    CHECK_EQ(weft_latch_count_down(&l), 0);
    CHECK_EQ(weft_latch_await(&l), 0);
    CHECK_EQ(weft_latch_destroy(&l), 0);
    weft_latch l0;
    CHECK_EQ(weft_latch_init(&l0, 0), 0);
    CHECK_EQ(weft_latch_await(&l0), 0); /* open from the start */
}

static void *latch_counter(void *arg) {
    CHECK_EQ(weft_latch_count_down((weft_latch *)arg), 0);
    return NULL;
}

/* Many counters-down racing many awaiters, repeated: everyone gets out. */
TEST(latch_race_count_down_vs_await) {
    start(4);
    for (int round = 0; round < SCALE(300); round++) {
        weft_latch l = WEFT_LATCH_INIT(16);
        weft_thread *a[16], *c[16];
        for (int i = 0; i < 16; i++) {
            CHECK_EQ(weft_spawn(&a[i], latch_awaiter, &l, NULL), 0);
            CHECK_EQ(weft_spawn(&c[i], latch_counter, &l, NULL), 0);
        }
        for (int i = 0; i < 16; i++) CHECK_EQ(join_val(a[i]), 0);
        for (int i = 0; i < 16; i++) CHECK_EQ(weft_join(c[i], NULL), 0);
        CHECK_EQ(weft_latch_count(&l), 0);
        CHECK_EQ(qlen(&l.q), 0);
    }
}

/* One latch, re-inited for each round as soon as the await returns, while
 * the round's detached counters may still be inside count_down: no stale
 * wake may reach the next round's await (it stopped the program with
 * "woken without a grant" before the last count was taken under the
 * queue's lock; seen from weft-bench scope-memory).  From a platform
 * thread and from a vthread. */
static weft_latch reused;
static void *reused_counter(void *arg) {
    (void)arg;
    CHECK_EQ(weft_latch_count_down(&reused), 0);
    return NULL;
}
static void *reuse_rounds(void *arg) {
    (void)arg;
    for (int round = 0; round < SCALE(3000); round++) {
        int n = 1 + round % 8;
        CHECK_EQ(weft_latch_init(&reused, (unsigned)n), 0);
        for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(NULL, reused_counter, NULL, NULL), 0);
        CHECK_EQ(weft_latch_await(&reused), 0);
        CHECK_EQ(weft_latch_destroy(&reused), 0);
    }
    return NULL;
}
TEST(latch_reinit_right_after_await) {
    start(2);
    reuse_rounds(NULL);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, reuse_rounds, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
}

TEST(latch_cancel_and_deadline) {
    start(2);
    weft_latch l = WEFT_LATCH_INIT(1);
    weft_thread *a, *b;
    CHECK_EQ(weft_spawn(&a, latch_awaiter, &l, NULL), 0);
    CHECK_EQ(weft_spawn(&b, latch_awaiter, &l, NULL), 0);
    wait_qlen(&l.q, 2);
    CHECK_EQ(weft_cancel(a), 0);
    CHECK_EQ(join_val(a), -ECANCELED);
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_latch_await(&l), -ETIMEDOUT);
    weft_deadline_set(old);
    CHECK_EQ(qlen(&l.q), 1);
    CHECK_EQ(weft_latch_count_down(&l), 0);
    CHECK_EQ(join_val(b), 0);
}

/* ======================================================================== */
/* once                                                                      */
/* ======================================================================== */

static weft_once_t once_o = WEFT_ONCE_INIT;
static atomic_int once_calls, once_effect, once_checked;

static void once_fn(void) {
    atomic_fetch_add(&once_calls, 1);
    nap_us(20000); /* slow: the others must wait for it */
    atomic_store(&once_effect, 1);
}

static void *once_caller(void *arg) {
    CHECK_EQ(weft_once(&once_o, once_fn), 0);
    CHECK_EQ(atomic_load(&once_effect), 1); /* returned only after fn finished */
    atomic_fetch_add(&once_checked, 1);
    return NULL;
}

TEST(once_thousand_racing_callers) {
    start(4);
    enum { NV = 1000, NP = 4 };
    static weft_thread *t[NV];
    pthread_t p[NP];
    for (int i = 0; i < NP; i++) CHECK_EQ(pthread_create(&p[i], NULL, once_caller, NULL), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_spawn(&t[i], once_caller, NULL, NULL), 0);
    for (int i = 0; i < NV; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    for (int i = 0; i < NP; i++) pthread_join(p[i], NULL);
    CHECK_EQ(atomic_load(&once_calls), 1);
    CHECK_EQ(atomic_load(&once_checked), NV + NP);
    CHECK_EQ(weft_once(&once_o, once_fn), 0);
    CHECK_EQ(atomic_load(&once_calls), 1);
    CHECK_EQ(qlen(&once_o.q), 0);
}

static weft_once_t once_slow = WEFT_ONCE_INIT;
static atomic_int slow_release;
static void slow_fn(void) {
    while (!atomic_load(&slow_release))
        if (weft_sleep(200000) < 0) weft_yield(); /* cancelled: sleeps fail at once */
}
static void *once_slow_caller(void *arg) { return (void *)(intptr_t)weft_once(&once_slow, slow_fn); }

TEST(once_waiter_cancel_and_deadline) {
    start(2);
    weft_thread *runner, *a;
    CHECK_EQ(weft_spawn(&runner, once_slow_caller, NULL, NULL), 0);
    while (__atomic_load_n(&once_slow.state, __ATOMIC_ACQUIRE) != 1) usleep(100);
    CHECK_EQ(weft_spawn(&a, once_slow_caller, NULL, NULL), 0);
    wait_qlen(&once_slow.q, 1);
    CHECK_EQ(weft_cancel(a), 0);
    CHECK_EQ(join_val(a), -ECANCELED);
    int64_t old = weft_deadline_set(weft_now() + ms(2));
    CHECK_EQ(weft_once(&once_slow, slow_fn), -ETIMEDOUT);
    weft_deadline_set(old);
    CHECK_EQ(weft_cancel(runner), 0); /* the runner's fn is not interrupted ... */
    nap_us(2000);
    atomic_store(&slow_release, 1);
    CHECK_EQ(join_val(runner), 0); /* ... and it completes */
    CHECK_EQ(weft_once(&once_slow, slow_fn), 0);
}

/* ======================================================================== */
/* destroy -EBUSY, the dump                                                  */
/* ======================================================================== */

static void *cond_waiter_once(void *arg) {
    gate *g = arg;
    CHECK_EQ(weft_mutex_lock(&g->m), 0);
    while (!g->open) CHECK_EQ(weft_cond_wait(&g->c, &g->m), 0);
    CHECK_EQ(weft_mutex_unlock(&g->m), 0);
    return NULL;
}

/* destroy says -EBUSY exactly while someone waits, over many rounds of
 * waiters arriving and leaving (timeouts) around it. */
static void *mutex_short_try(void *arg) {
    int r = weft_mutex_lock_until((weft_mutex *)arg, weft_now() + 20000);
    if (r == 0) CHECK_EQ(weft_mutex_unlock((weft_mutex *)arg), 0);
    return NULL;
}

TEST(destroy_busy) {
    start(2);
    gate g = {.m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cond_waiter_once, &g, NULL), 0);
    wait_qlen(&g.c.q, 1);
    CHECK_EQ(weft_cond_destroy(&g.c), -EBUSY);
    /* the waiter is on the cond's queue before it lets the mutex go: wait
     * for that too (under qemu the gap was seen: destroy said -EBUSY) */
    while (__atomic_load_n(&g.m.state, __ATOMIC_ACQUIRE) != 0) nap_us(50);
    CHECK_EQ(weft_mutex_destroy(&g.m), 0); /* unlocked, no waiters: fine to check */
    CHECK_EQ(weft_mutex_lock(&g.m), 0);
    g.open = 1;
    CHECK_EQ(weft_cond_broadcast(&g.c), 0);
    CHECK_EQ(weft_mutex_unlock(&g.m), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(weft_cond_destroy(&g.c), 0);

    weft_mutex m = WEFT_MUTEX_INIT;
    for (int round = 0; round < SCALE(2000); round++) {
        CHECK_EQ(weft_mutex_lock(&m), 0);
        weft_thread *w[3];
        for (int i = 0; i < 3; i++) CHECK_EQ(weft_spawn(&w[i], mutex_short_try, &m, NULL), 0);
        CHECK_EQ(weft_mutex_destroy(&m), -EBUSY); /* locked, at least */
        vary(round % 4);
        CHECK_EQ(weft_mutex_unlock(&m), 0);
        for (int i = 0; i < 3; i++) CHECK_EQ(weft_join(w[i], NULL), 0);
        CHECK_EQ(weft_mutex_destroy(&m), 0);
        CHECK_EQ(m.state, 0);
    }

    weft_rwlock l = WEFT_RWLOCK_INIT;
    CHECK_EQ(weft_rwlock_wrlock(&l), 0);
    CHECK_EQ(weft_spawn(&t, rd_result, &l, NULL), 0);
    wait_qlen(&l.q, 1);
    CHECK_EQ(weft_rwlock_destroy(&l), -EBUSY);
    CHECK_EQ(weft_rwlock_unlock(&l), 0);
    CHECK_EQ(join_val(t), 0);
    CHECK_EQ(weft_rwlock_destroy(&l), 0);
}

static atomic_int dump_in;
static void *dump_locker(void *arg) {
    atomic_store(&dump_in, 1);
    CHECK_EQ(weft_mutex_lock((weft_mutex *)arg), 0);
    CHECK_EQ(weft_mutex_unlock((weft_mutex *)arg), 0);
    return NULL;
}

TEST(dump_shows_mutex_wait) {
    start(2);
    weft_mutex m = WEFT_MUTEX_INIT;
    CHECK_EQ(weft_mutex_lock(&m), 0);
    weft_thread_opts at = {.name = "mutexwait"};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, dump_locker, &m, &at), 0);
    wait_qlen(&m.q, 1); /* queued; parked a moment later */
    char *d = dump_showing(WEFT_DUMP_TEXT, "mutexwait", "parked on mutex", "test_sync.c:", NULL);
    free(d);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
}
