/* Timers: sleep, deadlines, order, cancellation, many pending timers, and
 * idle carriers burning no CPU. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <dirent.h>

static void *sleeper_checked(void *arg) {
    int64_t ns = (int64_t)(intptr_t)arg;
    int64_t t0 = weft_now();
    CHECK_EQ((weft_sleep)(ns), 0);
    CHECK(weft_now() - t0 >= ns); /* never early */
    return NULL;
}

TEST(sleep_never_returns_early) {
    weft_thread *t[32];
    for (int i = 0; i < 32; i++) CHECK_EQ(weft_spawn(&t[i], sleeper_checked, (void *)(intptr_t)(i * 300000), NULL), 0);
    for (int i = 0; i < 32; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    /* platform thread */
    int64_t t0 = weft_now();
    CHECK_EQ(weft_sleep(2000000), 0);
    CHECK(weft_now() - t0 >= 2000000);
    CHECK_EQ(weft_sleep(0), 0);
    CHECK_EQ(weft_sleep(-5), 0);
}

/* A deadline in the past returns at once, as weft_sleep(ns <= 0) does --
 * negative and 0 too (0 is the epoch here, not "none") -- from a vthread
 * and from a platform thread; INT64_MAX still means until cancelled. */
static atomic_int past_done;
static void *past_sleeper(void *arg) {
    static const int64_t past[] = {-1, -5000000000LL, INT64_MIN, 0, 1};
    for (size_t i = 0; i < sizeof past / sizeof *past; i++) CHECK_EQ((weft_sleep_until)(past[i]), 0);
    CHECK_EQ((weft_sleep_until)(weft_now() - 1000), 0);
    atomic_store(&past_done, 1);
    return (void *)(intptr_t)weft_sleep_until(INT64_MAX); /* until the cancel below */
}

TEST(sleep_until_the_past_returns_at_once) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, past_sleeper, NULL, NULL), 0);
    /* bounded: a sleep that never returns fails here instead of hanging */
    for (int i = 0; i < 20000 && !atomic_load(&past_done); i++) usleep(500);
    CHECK(atomic_load(&past_done));
    weft_cancel(t);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
    /* a platform thread: the same */
    CHECK_EQ((weft_sleep_until)(-1), 0);
    CHECK_EQ((weft_sleep_until)(0), 0);
}

/* With one carrier, vthreads wake in deadline order.  The order says
 * something only if every sleeper was in the timer heap before the first
 * deadline: one whose deadline had passed when it called weft_sleep_until
 * returns at once, ahead of earlier deadlines still in the heap.  The
 * witness establishes it: it runs on the only carrier, so every sleeper that
 * has started is parked or done then, and none can be done before the first
 * deadline.  A round it cannot vouch for (spawns slower than the lead, on a
 * loaded machine) is run again with twice the lead. */
enum { ORDERED = 300 };
static atomic_int wake_seq, started, in_time;
static int woke_at[ORDERED];
static int64_t first_deadline;

static void *ordered_sleeper(void *arg) {
    int i = (int)(intptr_t)arg;
    /* a permutation of deadlines, 50 us apart */
    int slot = (i * 7919) % ORDERED;
    atomic_fetch_add(&started, 1);
    CHECK_EQ((weft_sleep_until)(first_deadline + (int64_t)slot * 50000), 0);
    woke_at[slot] = atomic_fetch_add(&wake_seq, 1);
    return NULL;
}

static void *order_witness(void *arg) {
    int all = atomic_load(&started) == ORDERED;
    atomic_store(&in_time, all && weft_now() < first_deadline);
    return NULL;
}

TEST(timer_order_one_carrier) {
    DET_SKIP("its witness must run after every sleeper started (spawn order); the seeded pick runs it anywhere");
    /* one carrier and no spare: a loaded machine can make the monitor
     * call one (a vthread held 20 ms), which takes due timers from the
     * carrier and runs them beside it (TSan, once) */
    weft_runtime_opts cfg = {.carriers = 1, .max_compensate = -1};
    CHECK_EQ(weft_init(&cfg), 0);
    int64_t lead = TEST_SANITIZED ? 400000000 : 50000000;
    int valid = 0, round = 0;
    for (; valid < 3; round++) {
        atomic_store(&wake_seq, 0);
        atomic_store(&started, 0);
        atomic_store(&in_time, 0);
        first_deadline = weft_now() + lead;
        weft_thread *t[ORDERED], *w;
        for (int i = 0; i < ORDERED; i++) CHECK_EQ(weft_spawn(&t[i], ordered_sleeper, (void *)(intptr_t)i, NULL), 0);
        CHECK_EQ(weft_spawn(&w, order_witness, NULL, NULL), 0);
        CHECK_EQ(weft_join(w, NULL), 0);
        for (int i = 0; i < ORDERED; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
        if (!atomic_load(&in_time)) {
            lead *= 2;
            continue;
        }
        for (int s = 0; s < ORDERED; s++) CHECK_EQ(woke_at[s], s);
        valid++;
    }
    printf("%d rounds in deadline order of %d (lead %lld ms at the end)\n", valid, round, (long long)(lead / 1000000));
}

static void *deadline_fn(void *arg) {
    int64_t old = weft_deadline_set(weft_now() + 3000000);
    CHECK_EQ(old, 0);
    /* our own deadline comes before the sleep's end */
    CHECK_EQ((weft_sleep)(1000000000), -ETIMEDOUT);
    /* a sleep that ends first succeeds (an hour: a stall between these two
     * lines cannot put the sleep's end after the deadline) */
    int64_t d = weft_deadline_set(weft_now() + 3600LL * 1000000000);
    CHECK(d != 0);
    CHECK_EQ((weft_sleep)(1000000), 0);
    CHECK_EQ(weft_deadline_set(0) != 0, 1);
    CHECK_EQ((weft_sleep)(1000000), 0);
    return NULL;
}

TEST(deadline_set_bounds_blocking_calls) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, deadline_fn, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    /* and on a platform thread */
    weft_deadline_set(weft_now() + 1000000);
    CHECK_EQ(weft_sleep(1000000000), -ETIMEDOUT);
    weft_deadline_set(0);
}

/* Many pending timers, then all cancelled: insert and remove at scale. */
static atomic_int parked_many;
static void *long_sleeper(void *arg) {
    atomic_fetch_add(&parked_many, 1);
    int r = (weft_sleep)(3600LL * 1000000000 + (int64_t)(intptr_t)arg * 1000);
    return (void *)(intptr_t)r;
}

TEST(many_pending_timers_cancelled) {
    DET_SKIP("a platform thread cancels sleeps after real time; virtual sleeps are over by then");
    int n = TEST_TSAN ? SPAWNS(200000) : SCALE(200000); /* (TSan: a fiber per spawn, harness.h) */
    weft_thread **t = malloc((size_t)n * sizeof *t);
    CHECK(t != NULL);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&t[i], long_sleeper, (void *)(intptr_t)(((long long)i * 7919) % n), NULL), 0);
    while (atomic_load(&parked_many) < n) usleep(1000);
    weft_stats s;
    weft_stats_get(&s);
    CHECK(s.live >= (uint64_t)n);
    /* cancel in an order unrelated to the heap's */
    for (int i = 0; i < n; i++) CHECK_EQ(weft_cancel(t[(int)(((long long)i * 104729) % n)]), 0);
    for (int i = 0; i < n; i++) {
        void *r;
        CHECK_EQ(weft_join(t[i], &r), 0);
        CHECK_EQ((intptr_t)r, -ECANCELED);
    }
    free(t);
    weft_stats_get(&s);
    CHECK_EQ(s.live, 0);
}

/* A short sleep racing with cancel, thousands of times, on both carriers. */
static void *racy_sleep(void *arg) {
    int r = (weft_sleep)((int64_t)(intptr_t)arg);
    CHECK(r == 0 || r == -ECANCELED);
    return (void *)(intptr_t)r;
}

TEST(timer_cancel_races) {
    DET_SKIP("cancels racing real-time expiries");
    int rounds = SCALE(20000), c = 0, e = 0;
    for (int i = 0; i < rounds; i += 4) {
        weft_thread *t[4];
        for (int k = 0; k < 4; k++) CHECK_EQ(weft_spawn(&t[k], racy_sleep, (void *)(intptr_t)((i + k) % 9 * 2000), NULL), 0);
        for (int k = 0; k < (i % 5); k++) weft_yield();
        usleep((useconds_t)(i % 11));
        for (int k = 0; k < 4; k++) CHECK_EQ(weft_cancel(t[k]), 0);
        for (int k = 0; k < 4; k++) {
            void *r;
            CHECK_EQ(weft_join(t[k], &r), 0);
            if ((intptr_t)r == 0) e++;
            else c++;
        }
    }
    printf("expired %d, cancelled %d\n", e, c);
    CHECK(c > 0);
}

/* While every vthread sleeps, the carriers sleep too. */
static atomic_int idle_started;
static void *idle_sleeper(void *arg) {
    atomic_fetch_add(&idle_started, 1);
    CHECK_EQ((weft_sleep_until)(*(int64_t *)arg), -ECANCELED);
    return NULL;
}

/* CPU time of the carrier threads alone (not the sanitizers' helpers). */
static double carrier_cpu_s(void) {
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *e;
    long ticks = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[256], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        if (strncmp(comm, "weft-c", 6) != 0) continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (!f) continue;
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        char *p = strrchr(buf, ')'); /* fields after the command name */
        long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &ut, &st) == 2)
            ticks += ut + st;
    }
    closedir(d);
    return (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* The timers are due in an hour (cancelled at the end): every 300 ms window
 * falls while all of them sleep, however slowly the spawns went.  The
 * carriers may still be finishing the burst's parks and stack work when the
 * first window opens on a loaded machine, so one quiet window of five is
 * enough; carriers that spin or poll are busy in every one. */
TEST(sleeping_vthreads_cost_no_cpu) {
    DET_SKIP("needs 2 carriers and an hour of real sleep");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    enum { N = 1000 };
    weft_thread *t[N];
    static int64_t wake_at;
    wake_at = weft_now() + 3600LL * 1000000000;
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], idle_sleeper, &wake_at, NULL), 0);
    while (atomic_load(&idle_started) < N) usleep(1000);
    weft_stats st;
    do { /* every one parked (the counters are read without synchronising) */
        usleep(1000);
        weft_stats_get(&st);
    } while (st.parks < N);
    double used = 0, wall = 0;
    for (int k = 0; k < 5; k++) {
        double c0 = carrier_cpu_s();
        int64_t w0 = weft_now();
        usleep(300000);
        used = carrier_cpu_s() - c0;
        wall = (weft_now() - w0) / 1e9;
        printf("cpu %.4f s over %.3f s wall with %d sleeping vthreads\n", used, wall, N);
        if (used < 0.25 * wall) break; /* two carriers spinning would be 2x wall */
    }
    CHECK(used < 0.25 * wall);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_cancel(t[i]), 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
}
