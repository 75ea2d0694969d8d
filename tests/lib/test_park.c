/* The park primitive: exactly one of wake / timeout / cancel ends a park,
 * every time; no wake-up is ever lost; cancellation and deadlines. */
#include "harness.h"
#include "sched/sched.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- one park, three contenders, repeated ------------------------------ */

typedef struct race {
    int round;
    _Atomic(weft__parker *) p;
    _Atomic uint64_t tok;
    atomic_int go;
    atomic_int wake_won, cancel_won;
    int park_result;
} race;

static void *parker_fn(void *arg) {
    race *r = arg;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    CHECK(tok != 0);
    atomic_store(&r->p, p);
    atomic_store(&r->tok, tok);
    atomic_store(&r->go, 1);
    /* a deadline a few microseconds away: the timer is a real contender */
    r->park_result = weft__park_wait(p, tok, weft_now() + 1000 * (r->round % 5), WEFT__WHY_PARK, NULL, __FILE__, __LINE__);
    return NULL;
}

static void *waker_fn(void *arg) {
    race *r = arg;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 13; k++) weft_yield(); /* vary who comes first */
    if (weft__unpark(atomic_load(&r->p), atomic_load(&r->tok), WEFT__PS_WOKEN)) atomic_store(&r->wake_won, 1);
    return NULL;
}

static void *canceller_fn(void *arg) {
    race *r = arg;
    while (!atomic_load(&r->go)) weft_yield();
    for (int k = 0; k < r->round % 7; k++) weft_yield();
    if (weft__unpark(atomic_load(&r->p), atomic_load(&r->tok), WEFT__PS_CANCELLED)) atomic_store(&r->cancel_won, 1);
    return NULL;
}

TEST(exactly_one_of_wake_timeout_cancel_wins) {
    int wins[3] = {0, 0, 0};
    int rounds = SCALE(20000);
    for (int i = 0; i < rounds; i++) {
        race r = {.round = i};
        weft_thread *a, *b, *c;
        CHECK_EQ(weft_spawn(&a, parker_fn, &r, NULL), 0);
        CHECK_EQ(weft_spawn(&b, waker_fn, &r, NULL), 0);
        CHECK_EQ(weft_spawn(&c, canceller_fn, &r, NULL), 0);
        CHECK_EQ(weft_join(a, NULL), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        CHECK_EQ(weft_join(c, NULL), 0);
        int w = atomic_load(&r.wake_won), k = atomic_load(&r.cancel_won);
        int t = r.park_result == -ETIMEDOUT;
        CHECK_EQ(w + k + t, 1);
        if (w) CHECK_EQ(r.park_result, 0);
        if (k) CHECK_EQ(r.park_result, -ECANCELED);
        wins[w ? 0 : k ? 1 : 2]++;
    }
    printf("wake %d, cancel %d, timeout %d of %d\n", wins[0], wins[1], wins[2], rounds);
}

/* The same race with the parker on a platform thread (futex path). */
static void *plat_parker(void *arg) {
    race *r = arg;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    atomic_store(&r->p, p);
    atomic_store(&r->tok, tok);
    atomic_store(&r->go, 1);
    r->park_result = weft__park_wait(p, tok, weft_now() + 20000, WEFT__WHY_PARK, NULL, __FILE__, __LINE__);
    return NULL;
}

TEST(platform_park_races) {
    int rounds = SCALE(3000);
    for (int i = 0; i < rounds; i++) {
        race r = {0};
        pthread_t pt;
        pthread_create(&pt, NULL, plat_parker, &r);
        weft_thread *b;
        CHECK_EQ(weft_spawn(&b, waker_fn, &r, NULL), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        pthread_join(pt, NULL);
        int w = atomic_load(&r.wake_won), t = r.park_result == -ETIMEDOUT;
        CHECK_EQ(w + t, 1);
        if (w) CHECK_EQ(r.park_result, 0);
    }
}

/* ---- wake-up storms: nobody sleeps through a wake ----------------------- */

enum { STORM = 2000 };
static weft_thread *sleepers[STORM];
static atomic_int ready_count, done_count;
static atomic_int flags[STORM];

static void *storm_sleeper(void *arg) {
    int i = (int)(intptr_t)arg;
    atomic_fetch_add(&ready_count, 1);
    while (!atomic_load(&flags[i])) (weft_park)(0); /* no deadline: a lost wake hangs */
    atomic_fetch_add(&done_count, 1);
    return NULL;
}

static void *storm_waker(void *arg) {
    int k = (int)(intptr_t)arg;
    for (int i = k; i < STORM; i += 4) {
        atomic_store(&flags[i], 1);
        weft_unpark(sleepers[i]);
    }
    return NULL;
}

static void storm_round(int round) {
    atomic_store(&ready_count, 0);
    atomic_store(&done_count, 0);
    for (int i = 0; i < STORM; i++) atomic_store(&flags[i], 0);
    for (int i = 0; i < STORM; i++) CHECK_EQ(weft_spawn(&sleepers[i], storm_sleeper, (void *)(intptr_t)i, NULL), 0);
    if (round % 2) while (atomic_load(&ready_count) < STORM) usleep(100); /* all parked first */
    /* two wakers on platform threads, two on vthreads */
    pthread_t p[2];
    weft_thread *v[2];
    for (int k = 0; k < 2; k++) pthread_create(&p[k], NULL, storm_waker, (void *)(intptr_t)k);
    for (int k = 0; k < 2; k++) CHECK_EQ(weft_spawn(&v[k], storm_waker, (void *)(intptr_t)(k + 2), NULL), 0);
    for (int k = 0; k < 2; k++) pthread_join(p[k], NULL);
    for (int k = 0; k < 2; k++) CHECK_EQ(weft_join(v[k], NULL), 0);
    for (int i = 0; i < STORM; i++) CHECK_EQ(weft_join(sleepers[i], NULL), 0);
    CHECK_EQ(atomic_load(&done_count), STORM);
}

TEST(wakeup_storm_no_lost_wakeup) {
    /* (TSan: 2 rounds of 2,000 -- each spawn costs it a fiber, ~4 ms; the
     * release build repeats 50) */
    int rounds = TEST_TSAN ? 2 : SCALE(50);
    for (int r = 0; r < rounds; r++) storm_round(r);
}

/* Idle carriers must wake for work pushed from anywhere: many short-lived
 * bursts with sleeps in between let carriers go to sleep every time. */
static atomic_int burst_done;
static void *burst_task(void *arg) {
    atomic_fetch_add(&burst_done, 1);
    return NULL;
}

TEST(idle_carriers_wake_for_bursts) {
    weft_runtime_opts cfg = {.carriers = 4};
    CHECK_EQ(weft_init(&cfg), 0);
    for (int r = 0; r < SCALE(300); r++) {
        atomic_store(&burst_done, 0);
        for (int i = 0; i < 8; i++) CHECK_EQ(weft_spawn(NULL, burst_task, NULL, NULL), 0);
        /* a lost wake-up leaves a task queued for good: the harness's timeout */
        while (atomic_load(&burst_done) < 8) usleep(50);
        usleep(200); /* let the carriers fall asleep */
    }
}

/* ---- permits (weft_park / weft_unpark) ---------------------------------- */

static void *permit_fn(void *arg) {
    /* unpark before park: the permit makes park return at once */
    weft_unpark(weft_self());
    CHECK_EQ((weft_park)(0), 0);
    /* no permit now: a deadline ends it */
    CHECK_EQ((weft_park)(weft_now() + 2000000), -ETIMEDOUT);
    return NULL;
}

TEST(permit_semantics) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, permit_fn, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    /* a platform thread can park with a deadline */
    int64_t t0 = weft_now();
    CHECK_EQ((weft_park)(t0 + 3000000), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 3000000);
}

/* ---- cancellation ------------------------------------------------------- */

static atomic_int entered;
static void *sleep_long(void *arg) {
    atomic_fetch_add(&entered, 1);
    int r = (weft_sleep)(60LL * 1000000000);
    CHECK_EQ(weft_cancelled(), 1);
    /* sticky: every later blocking call fails at once */
    CHECK_EQ((weft_sleep)(1000000), -ECANCELED);
    CHECK_EQ((weft_park)(0), -ECANCELED);
    return (void *)(intptr_t)r;
}

TEST(cancel_sleeping_vthread) {
    DET_SKIP("a platform thread cancels sleeps after real time; virtual sleeps are over by then");
    weft_thread *t[16];
    for (int i = 0; i < 16; i++) CHECK_EQ(weft_spawn(&t[i], sleep_long, NULL, NULL), 0);
    while (atomic_load(&entered) < 16) usleep(100);
    usleep(2000);
    for (int i = 0; i < 16; i++) CHECK_EQ(weft_cancel(t[i]), 0);
    for (int i = 0; i < 16; i++) {
        void *r;
        CHECK_EQ(weft_join(t[i], &r), 0);
        CHECK_EQ((intptr_t)r, -ECANCELED);
    }
}

static void *cancel_before_block(void *arg) {
    while (!weft_cancelled()) weft_yield();
    return (void *)(intptr_t)(weft_sleep)(1000000000);
}

TEST(cancel_before_blocking_call) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cancel_before_block, NULL, NULL), 0);
    CHECK_EQ(weft_cancel(t), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
}

/* cancel racing with a short sleep's expiry: the result is one or the other,
 * never a hang, and a cancelled vthread always reports cancelled after */
static void *short_sleep(void *arg) {
    int r = (weft_sleep)((int64_t)(intptr_t)arg);
    CHECK(r == 0 || r == -ECANCELED);
    if (r == -ECANCELED) CHECK(weft_cancelled());
    return (void *)(intptr_t)r;
}

TEST(cancel_vs_timeout_race) {
    int rounds = SCALE(5000), cancelled = 0;
    for (int i = 0; i < rounds; i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, short_sleep, (void *)(intptr_t)(i % 7 * 1000), NULL), 0);
        if (i % 3) weft_yield();
        CHECK_EQ(weft_cancel(t), 0);
        void *r;
        CHECK_EQ(weft_join(t, &r), 0);
        cancelled += (intptr_t)r == -ECANCELED;
    }
    CHECK(cancelled > 0);
}

/* join is a cancellation point and honours deadlines; the target stays
 * joinable after a failed join.  The target ends only after the first join
 * timed out (a fixed 30 ms could be over before the joiner even starts, on a
 * loaded machine). */
static atomic_int join_timed_out;
static void *slow(void *arg) {
    while (!atomic_load(&join_timed_out)) (weft_sleep)(1000000);
    return (void *)7;
}
static void *joiner(void *arg) {
    weft_thread *t = arg;
    int64_t old = weft_deadline_set(weft_now() + 1000000);
    CHECK_EQ(weft_join(t, NULL), -ETIMEDOUT);
    atomic_store(&join_timed_out, 1);
    weft_deadline_set(old);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)7);
    return NULL;
}

TEST(join_deadline_then_join_again) {
    weft_thread *t, *j;
    CHECK_EQ(weft_spawn(&t, slow, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&j, joiner, t, NULL), 0);
    CHECK_EQ(weft_join(j, NULL), 0);
}

static void *block_forever(void *arg) { return (void *)(intptr_t)(weft_sleep_until)(INT64_MAX); }
static void *cancelled_joiner(void *arg) { return (void *)(intptr_t)weft_join((weft_thread *)arg, NULL); }

TEST(cancel_a_joiner) {
    weft_thread *t, *j;
    CHECK_EQ(weft_spawn(&t, block_forever, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&j, cancelled_joiner, t, NULL), 0);
    usleep(5000);
    CHECK_EQ(weft_cancel(j), 0);
    void *r;
    CHECK_EQ(weft_join(j, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
    CHECK_EQ(weft_cancel(t), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
}

TEST(second_joiner_refused) {
    weft_thread *t, *j;
    CHECK_EQ(weft_spawn(&t, block_forever, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&j, cancelled_joiner, t, NULL), 0);
    while ((atomic_load(&weft__thread_of(t)->join_state) & 0xff) != 1) usleep(100); /* j is waiting */
    CHECK_EQ(weft_join(t, NULL), -EINVAL);
    CHECK_EQ(weft_detach(t), -EINVAL); /* someone joins it */
    CHECK_EQ(weft_cancel(t), 0);
    void *r;
    CHECK_EQ(weft_join(j, &r), 0);
    CHECK_EQ((intptr_t)r, 0);
}
