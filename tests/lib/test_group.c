/*
 * Carrier groups (weft.h, "Carrier groups"; src/sched/group.c).
 *
 * Where a vthread runs is told by its carrier thread's name: the default
 * group's carriers are "weft-c<k>" (spares "weft-s<k>"), a group's
 * "weft-g<id>.<k>".  Every test that checks placement reads the name after
 * each switch point (yield, sleep, I/O, a wake-up from another group) and
 * counts the times it was wrong.  No test asserts a speed: the latency test
 * has one loose upper bound, far above what the scheduler gives and far
 * below what sharing the carrier with the hogs would cost.
 */
#include "harness.h"
#include "weft/chan.h"
#include "weft/exec.h"
#include "weft/future.h"
#include "weft/scope.h"
#include "weft/sync.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <time.h>

/* A group (below: a channel) the test needs: made, or the test fails here. */
static weft_group *group_new(const char *name, int carriers, const weft_group_opts *o) {
    weft_group *g = NULL;
    CHECK_EQ(weft_group_create(&g, name, carriers, o), 0);
    return g;
}

static weft_chan *chan_new(size_t elem_size, size_t capacity) {
    weft_chan *c = NULL;
    CHECK_EQ(weft_chan_create(&c, elem_size, capacity), 0);
    return c;
}

/* 1 if the calling thread is a carrier of g (NULL: the default group). */
static int on_group(weft_group *g) {
    char name[16] = "";
    prctl(PR_GET_NAME, name, 0, 0, 0);
    if (!g) return strncmp(name, "weft-c", 6) == 0 || strncmp(name, "weft-s", 6) == 0;
    weft_group_stats s;
    CHECK_EQ(weft_group_stats_get(g, &s), 0);
    char want[16];
    snprintf(want, sizeof want, "weft-g%u.", s.id % 1000);
    return strncmp(name, want, strlen(want)) == 0;
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- placement across every kind of switch ---------------------------------- */

static weft_group *GA, *GB;
static atomic_int wrong, rounds_done, lost_wakeups;
static atomic_int at_park[8]; /* A's vthread k is about to park for the i-th time: i + 1 */
static weft_thread *a_threads[8];
static int pipes[8][2];

#define CHECK_ON(g)                                                                              \
    do {                                                                                         \
        if (!on_group(g)) atomic_fetch_add(&wrong, 1);                                           \
    } while (0)

/* A's vthread k: yields, sleeps, parks (woken by B), reads a pipe (written
 * by B), checking its carrier after each. */
static void *a_main(void *arg) {
    int k = (int)(intptr_t)arg;
    int rounds = SCALE(200);
    for (int i = 0; i < rounds; i++) {
        CHECK_ON(GA);
        weft_yield();
        CHECK_ON(GA);
        weft_sleep(100 * 1000);
        CHECK_ON(GA);
        atomic_store(&at_park[k], i + 1);
        /* B unparks it (5 s: only a lost wake-up waits that long) */
        if (weft_park(weft_now() + 5000000000LL) == -ETIMEDOUT) atomic_fetch_add(&lost_wakeups, 1);
        CHECK_ON(GA);
        char b;
        CHECK_EQ(weft_read(pipes[k][0], &b, 1), 1); /* B writes it */
        CHECK_ON(GA);
        atomic_fetch_add(&rounds_done, 1);
    }
    return NULL;
}

/* B's vthread: unparks and feeds A's vthread k, checking its own carrier. */
static void *b_main(void *arg) {
    int k = (int)(intptr_t)arg;
    int rounds = SCALE(200);
    for (int i = 0; i < rounds; i++) {
        CHECK_ON(GB);
        weft_sleep(50 * 1000);
        /* in step with A (a permit does not count: two unparks before
         * one park would leave A's next park without a wake) */
        while (atomic_load(&at_park[k]) < i + 1) weft_sleep(20 * 1000);
        CHECK_EQ(weft_unpark(a_threads[k]), 0);
        CHECK_EQ(weft_write(pipes[k][1], "x", 1), 1);
        CHECK_ON(GB);
        weft_yield();
    }
    return NULL;
}

TEST(vthreads_run_only_on_their_groups_carriers) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    GA = group_new("alpha", 2, NULL);
    GB = group_new("beta", 1, NULL);
    CHECK(GA && GB);
    enum { K = 4 };
    weft_thread *bt[K];
    for (int k = 0; k < K; k++) {
        CHECK_EQ(pipe2(pipes[k], O_CLOEXEC), 0);
        weft_thread_opts a = {.name = "a", .group = GA};
        CHECK_EQ(weft_spawn(&a_threads[k], a_main, (void *)(intptr_t)k, &a), 0);
    }
    for (int k = 0; k < K; k++) {
        weft_thread_opts b = {.name = "b", .group = GB};
        CHECK_EQ(weft_spawn(&bt[k], b_main, (void *)(intptr_t)k, &b), 0);
    }
    for (int k = 0; k < K; k++) CHECK_EQ(weft_join(bt[k], NULL), 0);
    for (int k = 0; k < K; k++) CHECK_EQ(weft_join(a_threads[k], NULL), 0);
    CHECK_EQ(atomic_load(&rounds_done), K * SCALE(200));
    CHECK_EQ(atomic_load(&wrong), 0);
    CHECK_EQ(atomic_load(&lost_wakeups), 0);
    CHECK_EQ(weft_group_close(GA), 0);
    CHECK_EQ(weft_group_close(GB), 0);
    for (int k = 0; k < K; k++) close(pipes[k][0]), close(pipes[k][1]);
}

/* Ping-pong between groups and the default pool over channels, a mutex
 * contended by all three: every hand-off wakes a vthread of another group. */
static weft_chan *to_a, *to_b;
static weft_mutex mx = WEFT_MUTEX_INIT;
static long shared_count;

static void *pp_a(void *arg) {
    (void)arg;
    for (int i = 0; i < SCALE(3000); i++) {
        int v = i;
        CHECK_EQ(weft_chan_send(to_b, &v), 0);
        CHECK_EQ(weft_chan_recv(to_a, &v), 0);
        CHECK_EQ(v, i + 1);
        CHECK_ON(GA);
        weft_mutex_lock(&mx);
        shared_count++;
        weft_mutex_unlock(&mx);
        CHECK_ON(GA);
    }
    return NULL;
}

static void *pp_b(void *arg) {
    (void)arg;
    for (int i = 0; i < SCALE(3000); i++) {
        int v;
        CHECK_EQ(weft_chan_recv(to_b, &v), 0);
        CHECK_ON(GB);
        v++;
        CHECK_EQ(weft_chan_send(to_a, &v), 0);
        weft_mutex_lock(&mx);
        shared_count++;
        weft_mutex_unlock(&mx);
        CHECK_ON(GB);
    }
    return NULL;
}

static void *pp_default(void *arg) {
    (void)arg;
    for (int i = 0; i < SCALE(3000); i++) {
        weft_mutex_lock(&mx);
        shared_count++;
        weft_mutex_unlock(&mx);
        CHECK_ON(NULL);
        if (i % 16 == 0) weft_yield();
    }
    return NULL;
}

TEST(cross_group_handoffs_stay_in_group) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    for (int rep = 0; rep < 3; rep++) {
        GA = group_new("ping", 1 + rep % 2, NULL);
        GB = group_new("pong", 2, NULL);
        CHECK(GA && GB);
        to_a = chan_new(sizeof(int), rep); /* rendezvous, then buffered */
        to_b = chan_new(sizeof(int), rep);
        shared_count = 0;
        weft_thread *a, *b, *d[2];
        weft_thread_opts aa = {.name = "ping", .group = GA}, ba = {.name = "pong", .group = GB};
        CHECK_EQ(weft_spawn(&a, pp_a, NULL, &aa), 0);
        CHECK_EQ(weft_spawn(&b, pp_b, NULL, &ba), 0);
        for (int i = 0; i < 2; i++) CHECK_EQ(weft_spawn(&d[i], pp_default, NULL, NULL), 0);
        CHECK_EQ(weft_join(a, NULL), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        for (int i = 0; i < 2; i++) CHECK_EQ(weft_join(d[i], NULL), 0);
        CHECK_EQ(shared_count, 4L * SCALE(3000));
        CHECK_EQ(atomic_load(&wrong), 0);
        weft_chan_free(to_a);
        weft_chan_free(to_b);
        CHECK_EQ(weft_group_close(GA), 0);
        CHECK_EQ(weft_group_close(GB), 0);
    }
}

/* Unparked from platform threads and timers firing: the injection path. */
static void *sleeper_in_group(void *arg) {
    (void)arg;
    for (int i = 0; i < SCALE(300); i++) {
        weft_park(weft_now() + 2000000); /* a platform thread unparks it, or its deadline */
        CHECK_ON(GA);
    }
    return NULL;
}

TEST(platform_wakes_and_timers_fire_into_the_group) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    GA = group_new("sleepers", 2, NULL);
    CHECK(GA);
    weft_thread *t[4];
    for (int i = 0; i < 4; i++) {
        weft_thread_opts a = {.group = GA};
        CHECK_EQ(weft_spawn(&t[i], sleeper_in_group, NULL, &a), 0);
    }
    for (int i = 0; i < SCALE(300) * 2; i++) {
        for (int k = 0; k < 4; k++) weft_unpark(t[k]);
        usleep(200);
    }
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&wrong), 0);
    CHECK_EQ(weft_group_close(GA), 0);
}

/* ---- which group a spawn goes to ---------------------------------------------- */

static atomic_int child_in_group, child_in_default, fork_in_group;

static void *child_check(void *arg) {
    weft_group *want = arg;
    if (on_group(want)) atomic_fetch_add(want ? &child_in_group : &child_in_default, 1);
    if (weft_group_self() == (want ? want : weft_group_default()) && want)
        atomic_fetch_add(&child_in_group, 100);
    return NULL;
}

static int scope_task(void *arg, void **result) {
    (void)result;
    if (on_group(arg)) atomic_fetch_add(&fork_in_group, 1);
    return 0;
}

static void *parent_in_group(void *arg) {
    weft_group *g = arg;
    CHECK(weft_group_self() == g);
    weft_thread *c1, *c2;
    weft_thread_opts named = {.name = "child"}; /* no group: the parent's */
    CHECK_EQ(weft_spawn(&c1, child_check, g, &named), 0);
    weft_thread_opts back = {.name = "back", .group = weft_group_default()};
    CHECK_EQ(weft_spawn(&c2, child_check, NULL, &back), 0);
    CHECK_EQ(weft_join(c1, NULL), 0);
    CHECK_EQ(weft_join(c2, NULL), 0);
    weft_scope *s;
    CHECK_EQ(weft_scope_create(&s, WEFT_SCOPE_ALL, 0), 0);
    for (int i = 0; i < 3; i++) CHECK(weft_fork(s, scope_task, g) != NULL);
    CHECK_EQ(weft_scope_join(s), 0);
    weft_scope_close(s);
    return NULL;
}

TEST(children_inherit_the_group_default_is_explicit) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    CHECK(weft_group_self() == NULL); /* a platform thread */
    weft_group *g = group_new("parents", 1, NULL);
    CHECK(g);
    CHECK(weft_group_default() != NULL && weft_group_default() != g);
    weft_thread *p;
    weft_thread_opts a = {.group = g};
    CHECK_EQ(weft_spawn(&p, parent_in_group, g, &a), 0);
    CHECK_EQ(weft_join(p, NULL), 0);
    CHECK_EQ(atomic_load(&child_in_group), 101);
    CHECK_EQ(atomic_load(&child_in_default), 1);
    CHECK_EQ(atomic_load(&fork_in_group), 3);
    CHECK_EQ(weft_group_close(g), 0);
}

/* ---- a CPU-bound group does not hold a latency sleeper back -------------------- */

static atomic_int hogs_stop;
static atomic_long hog_work;

static void *hog(void *arg) {
    (void)arg;
    volatile double x = 0;
    while (!atomic_load(&hogs_stop)) {
        /* computes ~100 ms between yields: in a shared carrier a sleeper
         * would wait that long */
        int64_t until = weft_now() + 100 * 1000000LL;
        while (weft_now() < until)
            for (int i = 0; i < 1000; i++) x += i * 0.5;
        atomic_fetch_add(&hog_work, 1);
        weft_yield();
    }
    return NULL;
}

static int64_t late_ns[100];
static void *latency_sleeper(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        int64_t want = weft_now() + 2000000;
        weft_sleep_until(want);
        late_ns[i] = weft_now() - want;
        CHECK_ON(NULL);
    }
    return NULL;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

TEST(cpu_group_does_not_delay_latency_sleeper) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_group_opts o = {.compute = 1};
    weft_group *cpu = group_new("cpu", 1, &o);
    CHECK(cpu);
    weft_thread *h[3], *s;
    for (int i = 0; i < 3; i++) {
        weft_thread_opts a = {.name = "hog", .group = cpu};
        CHECK_EQ(weft_spawn(&h[i], hog, NULL, &a), 0);
    }
    while (atomic_load(&hog_work) < 1) nap_ms(1);
    CHECK_EQ(weft_spawn(&s, latency_sleeper, NULL, NULL), 0);
    CHECK_EQ(weft_join(s, NULL), 0);
    atomic_store(&hogs_stop, 1);
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_join(h[i], NULL), 0);
    /* 100 sleeps of 2 ms: the sleeper's carrier is its own; only the OS
     * shares the CPUs.  Sharing a carrier with the hogs (100 ms between
     * yields, three of them) would make most sleeps late by tens of ms.
     * Loose bounds on the median and the 90th percentile, for a loaded
     * machine (the worst sleep is the OS's: not asserted). */
    qsort(late_ns, 100, sizeof late_ns[0], cmp64);
    if (late_ns[50] >= 20 * 1000000L || late_ns[90] >= 60 * 1000000L)
        fprintf(stderr, "lateness: median %.1f ms, p90 %.1f ms, worst %.1f ms\n", late_ns[50] / 1e6,
                late_ns[90] / 1e6, late_ns[99] / 1e6);
    CHECK(late_ns[50] < 20 * 1000000L);
    CHECK(late_ns[90] < 60 * 1000000L);
    /* compute: no hog event for the group's vthreads */
    weft_stats st;
    weft_stats_get(&st);
    CHECK_EQ(st.hogs, 0);
    CHECK_EQ(weft_group_close(cpu), 0);
}

/* ---- close ------------------------------------------------------------------- */

static atomic_int slow_done;
static void *slow(void *arg) {
    weft_sleep((int64_t)(intptr_t)arg * 1000000);
    atomic_fetch_add(&slow_done, 1);
    return NULL;
}

static atomic_int close_returned;
static int close_result = 1;
static void *closer(void *arg) {
    close_result = weft_group_close(arg);
    atomic_store(&close_returned, 1);
    return NULL;
}

static void *close_self(void *arg) {
    CHECK_EQ(weft_group_close(arg), -EDEADLK);
    return NULL;
}

TEST(close_waits_for_vthreads_and_refuses_spawns) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_group *g = group_new("closing", 2, NULL);
    CHECK(g);
    weft_thread *t[6];
    for (int i = 0; i < 6; i++) {
        weft_thread_opts a = {.group = g, .daemon = i == 5};
        CHECK_EQ(weft_spawn(i < 3 ? &t[i] : NULL, slow, (void *)(intptr_t)(100 + 20 * i), &a), 0);
    }
    weft_thread *self_closer;
    weft_thread_opts ga = {.group = g};
    CHECK_EQ(weft_spawn(&self_closer, close_self, g, &ga), 0);
    CHECK_EQ(weft_join(self_closer, NULL), 0);
    pthread_t pt;
    CHECK_EQ(pthread_create(&pt, NULL, closer, g), 0);
    /* spawns are refused once the close began, while it waits */
    int r;
    for (;;) {
        weft_thread_opts a = {.group = g};
        r = weft_spawn(NULL, slow, (void *)(intptr_t)1, &a);
        if (r == -ESHUTDOWN) break;
        CHECK_EQ(r, 0);
        nap_ms(1);
    }
    CHECK(!atomic_load(&close_returned));
    CHECK_EQ(weft_group_close(g), -EBUSY); /* a second close while the first waits */
    pthread_join(pt, NULL);
    CHECK_EQ(close_result, 0);
    /* every vthread had finished: the daemon, the detached ones, the spawns that got in */
    CHECK(atomic_load(&slow_done) >= 6);
    int done_at_close = atomic_load(&slow_done);
    nap_ms(20);
    CHECK_EQ(atomic_load(&slow_done), done_at_close);
    /* finished but not joined before the close: still joinable after it */
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(weft_group_close(NULL), -EINVAL);
    CHECK_EQ(weft_group_close(weft_group_default()), -EINVAL);
}

static void *close_from_vthread(void *arg) {
    (void)arg;
    weft_group *g = group_new("vt-closed", 1, NULL);
    CHECK(g);
    weft_thread_opts a = {.group = g};
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_spawn(NULL, slow, (void *)(intptr_t)20, &a), 0);
    CHECK_EQ(weft_group_close(g), 0); /* parks this vthread */
    return NULL;
}

TEST(close_from_a_vthread_parks) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, close_from_vthread, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(atomic_load(&slow_done), 4);
}

/* ---- many groups: no leak, no stale carrier ---------------------------------- */

static void *brief(void *arg) {
    weft_group *g = arg;
    for (int i = 0; i < 3; i++) {
        weft_yield();
        weft_sleep(100 * 1000);
        if (!on_group(g)) atomic_fetch_add(&wrong, 1);
    }
    return NULL;
}

TEST(many_groups_created_and_closed) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_stats before;
    weft_stats_get(&before);
    int n = SCALE(200);
    for (int i = 0; i < n; i++) {
        weft_group *g = group_new(NULL, 1 + i % 3, NULL);
        CHECK(g);
        weft_thread *t[4];
        for (int k = 0; k < 4; k++) {
            weft_thread_opts a = {.group = g};
            CHECK_EQ(weft_spawn(&t[k], brief, g, &a), 0);
        }
        if (i % 2) /* joined before the close, or after it */
            for (int k = 0; k < 4; k++) CHECK_EQ(weft_join(t[k], NULL), 0);
        CHECK_EQ(weft_group_close(g), 0);
        if (!(i % 2))
            for (int k = 0; k < 4; k++) CHECK_EQ(weft_join(t[k], NULL), 0);
    }
    CHECK_EQ(atomic_load(&wrong), 0);
    weft_stats st;
    weft_stats_get(&st);
    /* closed groups' counts stay in the totals */
    CHECK(st.started - before.started >= (uint64_t)(4 * n));
    CHECK_EQ(st.live, 0);
}

/* ---- stats and dump ------------------------------------------------------------ */

static atomic_int stats_hold;
static void *stats_worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 50; i++) weft_yield();
    while (!atomic_load(&stats_hold)) weft_sleep(1000000);
    return NULL;
}

TEST(stats_and_dump_show_groups) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_group_opts o = {.compute = 1};
    weft_group *g = group_new("batchgrp", 2, &o);
    CHECK(g);
    weft_thread *t[3];
    for (int i = 0; i < 3; i++) {
        weft_thread_opts a = {.group = g, .name = "statsw"};
        CHECK_EQ(weft_spawn(&t[i], stats_worker, NULL, &a), 0);
    }
    weft_group_stats s;
    CHECK_EQ(weft_group_stats_get(g, &s), 0);
    CHECK_EQ(s.carriers, 2);
    CHECK_EQ(s.compute, 1);
    CHECK_EQ(s.started, 3);
    CHECK_EQ(s.live, 3);
    CHECK(s.id > 0);
    CHECK(strcmp(s.name, "batchgrp") == 0);
    weft_group_stats d;
    CHECK_EQ(weft_group_stats_get(NULL, &d), 0);
    CHECK_EQ(d.id, 0);
    CHECK_EQ(d.carriers, 2);
    CHECK(strcmp(d.name, "default") == 0);
    char line[96];
    snprintf(line, sizeof line, "group %u \"batchgrp\" (compute): 2 carriers", s.id);
    char role[32];
    snprintf(role, sizeof role, "(group %u)", s.id);
    char vline[48];
    snprintf(vline, sizeof vline, "\"statsw\" [group %u]", s.id);
    char *text = dump_showing(WEFT_DUMP_TEXT, "carrier groups:", "group 0 \"default\": 2 carriers", line, role,
                              "3 live, 3 started", vline, (char *)NULL);
    free(text);
    char vjson[48];
    snprintf(vjson, sizeof vjson, "\"name\":\"statsw\",\"state\"");
    char gjson[24];
    snprintf(gjson, sizeof gjson, "\"group\":%u", s.id);
    char *json = dump_showing(WEFT_DUMP_JSON, "\"groups\":[", "\"name\":\"batchgrp\"", "\"compute\":true",
                              "\"live\":3", vjson, gjson, (char *)NULL);
    free(json);
    atomic_store(&stats_hold, 1);
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(weft_group_stats_get(g, &s), 0);
    CHECK_EQ(s.live, 0);
    CHECK(s.switches >= 3); /* each ran (a yield with nothing else to run does not switch) */
    CHECK_EQ(weft_group_close(g), 0);
    text = dump_showing(WEFT_DUMP_TEXT, "carrier groups:", (char *)NULL);
    CHECK(strstr(text, "batchgrp") == NULL);
    free(text);
}

/* ---- the executor ---------------------------------------------------------------- */

static atomic_int exec_in_group;
static void *exec_task(void *arg) {
    if (on_group(arg)) atomic_fetch_add(&exec_in_group, 1);
    weft_sleep(100 * 1000);
    if (on_group(arg)) atomic_fetch_add(&exec_in_group, 1);
    return arg;
}

TEST(executor_group_runs_tasks_in_the_group) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_group *g = group_new("execgrp", 2, NULL);
    CHECK(g);
    weft_executor *e;
    CHECK_EQ(weft_executor_create_group(&e, g), 0);
    CHECK(strcmp(weft_executor_kind(e), "group:execgrp") == 0);
    enum { N = 100 };
    weft_future *f[N];
    for (int i = 0; i < N; i++) CHECK((f[i] = weft_submit(e, exec_task, g)) != NULL);
    for (int i = 0; i < N; i++) {
        void *v = NULL;
        CHECK_EQ(weft_future_get(f[i], &v, 0), 0);
        CHECK(v == g);
        weft_future_unref(f[i]);
    }
    CHECK_EQ(atomic_load(&exec_in_group), 2 * N);
    CHECK_EQ(weft_executor_close(e), 0);
    CHECK_EQ(weft_executor_create_group(NULL, g), -EINVAL);
    CHECK_EQ(weft_group_close(g), 0);
    e = (weft_executor *)1;
    CHECK_EQ(weft_executor_create_group(&e, NULL), -EINVAL);
    CHECK(e == NULL);
}

/* ---- bad arguments and limits ------------------------------------------------------- */

TEST(bad_arguments_and_limits) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_group *bad = (weft_group *)&bad;
    CHECK_EQ(weft_group_create(&bad, "x", 0, NULL), -EINVAL);
    CHECK(bad == NULL);
    CHECK_EQ(weft_group_create(&bad, "x", -3, NULL), -EINVAL);
    CHECK_EQ(weft_group_create(NULL, "x", 1, NULL), -EINVAL);
    /* more carriers than there are indices left: refused, nothing kept */
    CHECK_EQ(weft_group_create(&bad, "huge", 1024, NULL), -EAGAIN);
    CHECK_EQ(weft_group_create(&bad, "huger", 1 << 20, NULL), -EAGAIN);
    CHECK(bad == NULL);
    weft_group_stats s;
    CHECK_EQ(weft_group_stats_get(NULL, NULL), -EINVAL);
    CHECK_EQ(weft_group_stats_get(NULL, &s), 0);
    /* a long name is cut to 31 bytes */
    weft_group *g = group_new("a-name-that-is-longer-than-thirty-one-bytes", 1, NULL);
    CHECK(g);
    CHECK_EQ(weft_group_stats_get(g, &s), 0);
    CHECK_EQ(strlen(s.name), 31);
    CHECK_EQ(weft_group_close(g), 0);
    /* still works after the failures */
    g = group_new(NULL, 1, NULL);
    CHECK(g);
    CHECK_EQ(weft_group_stats_get(g, &s), 0);
    CHECK(strncmp(s.name, "group-", 6) == 0);
    CHECK_EQ(weft_group_close(g), 0);
}

/* weft_shutdown with groups open: waits for their non-daemon vthreads, then
 * closes them (the harness's shutdown after the body; LSan checks it freed
 * everything). */
TEST(shutdown_closes_open_groups) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_group *g = group_new("left-open", 2, NULL);
    CHECK(g);
    weft_thread_opts a = {.group = g};
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_spawn(NULL, slow, (void *)(intptr_t)30, &a), 0);
    weft_thread_opts d = {.group = g, .daemon = 1};
    CHECK_EQ(weft_spawn(NULL, slow, (void *)(intptr_t)100000, &d), 0); /* a daemon: abandoned */
    weft_shutdown();
    CHECK_EQ(atomic_load(&slow_done), 4);
}


/* Without the compute option a group's hog is reported as any other: the
 * compute test above is not vacuous. */
static atomic_int hog_once_stop;
static void *hog_once(void *arg) {
    (void)arg;
    volatile double x = 0;
    /* computes -- no system call, no lock: the probe must see it run --
     * until the test has seen the monitor report it, 20 s at most */
    int64_t until = weft_now() + 20000 * 1000000LL;
    while (!atomic_load(&hog_once_stop) && weft_now() < until)
        for (int i = 0; i < 1000; i++) x += i * 0.5;
    return NULL;
}

TEST(plain_group_hog_is_reported) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_group *g = group_new("plain", 1, NULL);
    CHECK(g);
    weft_thread *t;
    weft_thread_opts a = {.name = "grouphog", .group = g};
    CHECK_EQ(weft_spawn(&t, hog_once, NULL, &a), 0);
    weft_stats st;
    int64_t until = weft_now() + 20000 * 1000000LL;
    do {
        nap_ms(5);
        weft_stats_get(&st);
    } while (st.hogs == 0 && weft_now() < until);
    atomic_store(&hog_once_stop, 1);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK(st.hogs >= 1);
    CHECK_EQ(weft_group_close(g), 0);
}

/* A fork child does not have the parent's groups (nor their carriers): it
 * starts a fresh runtime and may make its own. */
TEST(fork_child_starts_without_groups) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_group *g = group_new("parent-only", 1, NULL);
    CHECK(g);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* (TSan cannot start threads in a multi-threaded fork's child:
         * test_fork.c, CHILD_THREADS) */
        if (TEST_TSAN) _exit(0);
        weft_group *cg;
        if (weft_group_create(&cg, "child", 1, NULL) != 0) _exit(10);
        weft_thread_opts a = {.group = cg};
        weft_thread *t;
        if (weft_spawn(&t, brief, cg, &a) != 0) _exit(11);
        if (weft_join(t, NULL) != 0) _exit(12);
        if (atomic_load(&wrong)) _exit(13);
        if (weft_group_close(cg) != 0) _exit(14);
        weft_shutdown();
        _exit(0);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    CHECK_EQ(weft_group_close(g), 0);
}

/* weft_parallel_for from a group's vthread: its helpers inherit the group,
 * so every body runs on the group's carriers (and as many workers as the
 * group has carriers). */
static weft_group *PG;
static atomic_int par_wrong, par_done;
static void par_body(size_t i, void *ctx) {
    (void)i, (void)ctx;
    if (!on_group(PG)) atomic_fetch_add(&par_wrong, 1);
    atomic_fetch_add(&par_done, 1);
}
static void *par_caller(void *arg) {
    (void)arg;
    CHECK_EQ(weft_parallel_for(0, 100000, 0, par_body, NULL), 0);
    return NULL;
}

TEST(parallel_for_stays_in_the_callers_group) {
    DET_SKIP("carrier groups: deterministic mode has one carrier (weft_group_create: -EOPNOTSUPP)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    PG = group_new("par", 2, NULL);
    CHECK(PG);
    weft_thread *t;
    weft_thread_opts a = {.group = PG};
    CHECK_EQ(weft_spawn(&t, par_caller, NULL, &a), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(atomic_load(&par_done), 100000);
    CHECK_EQ(atomic_load(&par_wrong), 0);
    CHECK_EQ(weft_group_close(PG), 0);
}
