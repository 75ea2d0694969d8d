/* Virtual threads: spawn, join, detach, yield, from vthreads and platform
 * threads; a million spawn/join; carrier migration and TLS. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static void *ret_arg(void *a) { return a; }

TEST(spawn_join_from_platform) {
    for (int i = 0; i < 100; i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, ret_arg, (void *)(intptr_t)(i + 1), NULL), 0);
        void *r = NULL;
        CHECK_EQ(weft_join(t, &r), 0);
        CHECK_EQ((intptr_t)r, i + 1);
    }
}

static void *spawn_children(void *arg) {
    int n = (int)(intptr_t)arg;
    weft_thread *ts[64];
    long sum = 0;
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&ts[i], ret_arg, (void *)(intptr_t)i, NULL), 0);
    for (int i = 0; i < n; i++) {
        void *r;
        CHECK_EQ(weft_join(ts[i], &r), 0);
        sum += (intptr_t)r;
    }
    return (void *)sum;
}

TEST(spawn_join_from_vthread) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, spawn_children, (void *)(intptr_t)64, NULL), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, 64 * 63 / 2);
}

static atomic_int detached_done;
static void *detached_fn(void *a) {
    weft_yield();
    atomic_fetch_add(&detached_done, 1);
    return a;
}

static atomic_int finished_flag;
static void *quick_fn(void *a) {
    atomic_store(&finished_flag, 1);
    return a;
}

TEST(detach) {
    /* detached while running: frees itself at the end */
    for (int i = 0; i < 500; i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, detached_fn, NULL, NULL), 0);
        CHECK_EQ(weft_detach(t), 0);
    }
    /* started detached */
    for (int i = 0; i < 500; i++) CHECK_EQ(weft_spawn(NULL, detached_fn, NULL, NULL), 0);
    /* detached after it finished: freed by weft_detach */
    for (int i = 0; i < 100; i++) {
        weft_thread *t;
        atomic_store(&finished_flag, 0);
        CHECK_EQ(weft_spawn(&t, quick_fn, NULL, NULL), 0);
        while (!atomic_load(&finished_flag)) usleep(50);
        usleep(100);
        CHECK_EQ(weft_detach(t), 0);
    }
    while (atomic_load(&detached_done) < 1000) (weft_sleep)(1000000);
    /* each counted itself before its end: until every end is counted too
     * (one that never ends, or leaks, is the harness's timeout) */
    weft_stats s;
    for (weft_stats_get(&s); s.live != 0; weft_stats_get(&s)) usleep(1000);
}

static void *self_fn(void *a) {
    weft_thread *me = weft_self();
    CHECK(me != NULL);
    CHECK(weft_id(me) > 0);
    CHECK(strcmp(weft_name(me), "worker-7") == 0);
    CHECK_EQ(weft_join(me, NULL), -EDEADLK);
    return me;
}

TEST(self_id_name) {
    CHECK(weft_self() == NULL);
    weft_thread_opts a = {.name = "worker-7"};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, self_fn, NULL, &a), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)t);
}

static atomic_long yield_turns;
static void *yielder(void *a) {
    for (int i = 0; i < 10000; i++) {
        atomic_fetch_add(&yield_turns, 1);
        CHECK_EQ(weft_yield(), 0);
    }
    return NULL;
}

TEST(yield_interleaves) {
    weft_thread *t[8];
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_spawn(&t[i], yielder, NULL, NULL), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&yield_turns), 80000);
    CHECK_EQ(weft_yield(), 0); /* platform thread: sched_yield */
}

static atomic_long counter;
static void *incr(void *a) {
    atomic_fetch_add(&counter, 1);
    return NULL;
}

static void *million(void *arg) {
    long n = (long)(intptr_t)arg;
    enum { BATCH = 1000 };
    weft_thread *ts[BATCH];
    for (long done = 0; done < n; done += BATCH) {
        for (int i = 0; i < BATCH; i++) CHECK_EQ(weft_spawn(&ts[i], incr, NULL, NULL), 0);
        for (int i = 0; i < BATCH; i++) CHECK_EQ(weft_join(ts[i], NULL), 0);
    }
    return NULL;
}

TEST(million_spawn_join) {
    long n = SPAWNS(1000000);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, million, (void *)(intptr_t)n, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(atomic_load(&counter), n);
    weft_stats s;
    weft_stats_get(&s);
    CHECK_EQ(s.live, 0);
    CHECK(s.started >= (uint64_t)n + 1);
}

static void *plat_spawner(void *arg) {
    for (int i = 0; i < 200; i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, ret_arg, arg, NULL), 0);
        void *r;
        CHECK_EQ(weft_join(t, &r), 0);
        CHECK(r == arg);
    }
    return NULL;
}

TEST(many_platform_threads_spawn_join) {
    pthread_t p[8];
    for (int i = 0; i < 8; i++) pthread_create(&p[i], NULL, plat_spawner, (void *)(intptr_t)(i + 1));
    for (int i = 0; i < 8; i++) pthread_join(p[i], NULL);
}

/* A vthread that migrates between carriers mid-function must see the
 * carrier it is on now, not one cached from before the switch (as Go's
 * RunGetgThreadSwitchTest checks).  Two helpers pinned to different carriers
 * take turns waking the target; a woken vthread runs on its waker's carrier,
 * so the target hops between carriers on every round. */
#include "sched/sched.h"

static weft_thread *helper[2], *target;
static pthread_t helper_os[2];
static int helper_idx[2];
static atomic_int poke[2], woke, stop_helpers, helper_up[2], hold_first;

static void *helper_fn(void *arg) {
    int i = (int)(intptr_t)arg;
    helper_os[i] = pthread_self();
    helper_idx[i] = weft__carrier_index(weft__carrier_self());
    atomic_store(&helper_up[i], 1);
    /* the first helper holds its carrier until the second has started, so
     * that the second starts on the other carrier */
    while (i == 0 && atomic_load(&hold_first)) {}
    while (!atomic_load(&stop_helpers)) {
        (weft_park)(weft_now() + 1000000);
        if (atomic_exchange(&poke[i], 0)) {
            atomic_store(&woke, 1);
            weft_unpark(target);
        }
    }
    return NULL;
}

static void *target_fn(void *arg) {
    int moves = 0;
    /* until 100 hops (about 400 rounds when the machine is quiet; a wake
     * can also find the target still running, or a thief take it, so on a
     * loaded machine it may take more) */
    for (int k = 0; k < 40000 && moves < 100; k++) {
        int i = k % 2;
        int before = weft__carrier_index(weft__carrier_self());
        atomic_store(&woke, 0);
        atomic_store(&poke[i], 1);
        weft_unpark(helper[i]);
        while (!atomic_load(&woke)) (weft_park)(0);
        int after = weft__carrier_index(weft__carrier_self());
        CHECK(after == 0 || after == 1);
        /* internal carrier state matches the OS thread we run on now */
        CHECK(pthread_equal(pthread_self(), helper_os[helper_idx[0] == after ? 0 : 1]));
        CHECK(weft_self() == target);
        moves += before != after;
    }
    return (void *)(intptr_t)moves;
}

TEST(migration_sees_current_carrier) {
    DET_SKIP("needs 2 carriers");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread_opts pin = {.pinned = 1};
    atomic_store(&hold_first, 1);
    CHECK_EQ(weft_spawn(&helper[0], helper_fn, (void *)0, &pin), 0);
    while (!atomic_load(&helper_up[0])) usleep(100);
    CHECK_EQ(weft_spawn(&helper[1], helper_fn, (void *)1, &pin), 0);
    while (!atomic_load(&helper_up[1])) usleep(100);
    atomic_store(&hold_first, 0);
    CHECK(helper_idx[0] != helper_idx[1]);
    CHECK_EQ(weft_spawn(&target, target_fn, NULL, NULL), 0);
    void *moves;
    CHECK_EQ(weft_join(target, &moves), 0);
    atomic_store(&stop_helpers, 1);
    for (int i = 0; i < 2; i++) {
        weft_unpark(helper[i]);
        CHECK_EQ(weft_join(helper[i], NULL), 0);
    }
    CHECK((intptr_t)moves >= 100); /* it really did hop between carriers */
}

TEST(init_twice_and_restart) {
    DET_SKIP("configures 3 carriers and checks them");
    weft_runtime_opts cfg = {.carriers = 3};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(weft_init(&cfg), -EALREADY);
    weft_stats s;
    weft_stats_get(&s);
    CHECK_EQ(s.carriers, 3);
    weft_shutdown();
    cfg.carriers = 1;
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, ret_arg, (void *)5, NULL), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)5);
    weft_shutdown();
    weft_runtime_opts bad = {.carriers = -1};
    CHECK_EQ(weft_init(&bad), -EINVAL);
}

/* weft_init(NULL) with $name=value: its result, and what it said on
 * stderr in said (the variable's name must be there). */
static int init_with_env(const char *name, const char *value, char *said, size_t n) {
    int p[2], saved = dup(2);
    CHECK(saved >= 0 && pipe(p) == 0);
    CHECK(dup2(p[1], 2) == 2);
    setenv(name, value, 1);
    int r = weft_init(NULL);
    unsetenv(name);
    CHECK(dup2(saved, 2) == 2);
    close(saved);
    close(p[1]);
    ssize_t k = read(p[0], said, n - 1); /* (a line: far less than a pipe holds) */
    said[k > 0 ? k : 0] = 0;
    close(p[0]);
    if (r == 0) weft_shutdown();
    return r;
}

/* A WEFT_* value that is not a number, or out of its range, fails
 * weft_init with -EINVAL and a line naming it -- not the default, quietly
 * (docs/errors.md).  The stack allocator's are read at its first start,
 * so they go first. */
TEST(bad_environment_fails_init) {
    DET_SKIP("WEFT_DETERMINISTIC fixes the carriers");
    static const char *bad[][2] = {
        {"WEFT_STACK_GUARD", "nope"},       {"WEFT_STACK_IDLE_MS", "-1"},
        {"WEFT_STACK_SIZE", "12q"},         {"WEFT_STACK_SIZE", "99999999999999999999999"},
        {"WEFT_STACK_SIZE", "0"},           {"WEFT_STACK_SIZE", "-4096"},
        {"WEFT_CARRIERS", "-3"},            {"WEFT_CARRIERS", "0"},
        {"WEFT_CARRIERS", "abc"},           {"WEFT_CARRIERS", "2x"},
        {"WEFT_CARRIERS", "1025"},          {"WEFT_PIN_THRESHOLD_MS", "20ms"},
        {"WEFT_MAX_COMPENSATE", "many"},    {"WEFT_SPIN_US", "-1"},
        {"WEFT_MONITOR", "loud"},           {"WEFT_IO", "uring2"},
    };
    char said[512];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int r = init_with_env(bad[i][0], bad[i][1], said, sizeof said);
        if (r != -EINVAL || !strstr(said, bad[i][0]))
            fprintf(stderr, "%s=%s: %d, said \"%s\"\n", bad[i][0], bad[i][1], r, said);
        CHECK_EQ(r, -EINVAL);
        CHECK(strstr(said, bad[i][0]) != NULL);
    }
    /* good values still work, and a config field wins over the variable */
    CHECK_EQ(init_with_env("WEFT_CARRIERS", "2", said, sizeof said), 0);
    setenv("WEFT_CARRIERS", "abc", 1);
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_stats st;
    weft_stats_get(&st);
    CHECK_EQ(st.carriers, 1);
    weft_shutdown();
    unsetenv("WEFT_CARRIERS");
}

/* A stack size that round_page would wrap to a small one is refused,
 * not served with a 64 KiB stack. */
TEST(huge_stack_size_is_refused) {
    weft_runtime_opts cfg = {.stack_size = SIZE_MAX - 100};
    CHECK_EQ(weft_init(&cfg), -ENOMEM);
    cfg.stack_size = SIZE_MAX / 2;
    CHECK_EQ(weft_init(&cfg), -ENOMEM);
    CHECK_EQ(weft_init(NULL), 0);
    weft_thread_opts a = {.stack_size = SIZE_MAX - 100};
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, ret_arg, NULL, &a), -ENOMEM);
    a.stack_size = SIZE_MAX - 4096 * 4;
    CHECK_EQ(weft_spawn(&t, ret_arg, NULL, &a), -ENOMEM);
    a.stack_size = 128 * 1024; /* and a sane one after them */
    CHECK_EQ(weft_spawn(&t, ret_arg, (void *)3, &a), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)3);
}

static int main_fn(void *arg) {
    CHECK(weft_self() != NULL);
    CHECK(strcmp(weft_name(weft_self()), "main") == 0);
    return 42;
}

TEST(weft_main_returns_result) { CHECK_EQ(weft_main(main_fn, NULL), 42); }

static atomic_int daemon_started;
static void *daemon_fn(void *a) {
    atomic_store(&daemon_started, 1);
    (weft_sleep_until)(INT64_MAX);
    return NULL;
}

TEST(shutdown_abandons_daemons_waits_for_others) {
    weft_thread_opts d = {.daemon = 1, .name = "daemon"};
    CHECK_EQ(weft_spawn(NULL, daemon_fn, NULL, &d), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, ret_arg, NULL, NULL), 0);
    CHECK_EQ(weft_detach(t), 0);
    while (!atomic_load(&daemon_started)) weft_yield();
    weft_shutdown(); /* must return although the daemon sleeps forever */
}

/* A platform thread wakes the last vthread, which ends, and weft_shutdown
 * begins at once: shutdown must not free the carriers while the waker is
 * still kicking one (a file channel's handler counting a latch down did,
 * TSan saw eventfd_write against the poller's close).  Repeated: the window
 * is a few instructions wide. */
static weft_latch sw_latch;
static void *sw_waiter(void *a) {
    (void)a;
    weft_latch_await(&sw_latch);
    return NULL;
}
static void *sw_waker(void *a) {
    (void)a;
    weft_latch_count_down(&sw_latch);
    return NULL;
}

TEST(shutdown_while_a_platform_thread_wakes) {
    int rounds = TEST_TSAN ? 100 : 300;
    for (int i = 0; i < rounds; i++) {
        CHECK_EQ(weft_latch_init(&sw_latch, 1), 0);
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, sw_waiter, NULL, NULL), 0);
        CHECK_EQ(weft_detach(t), 0);
        pthread_t p;
        CHECK_EQ(pthread_create(&p, NULL, sw_waker, NULL), 0);
        weft_shutdown(); /* waits for the waiter, which the waker releases */
        pthread_join(p, NULL);
    }
}

static atomic_int pinned_ok;
static void *pinned_fn(void *a) {
    pthread_t home = pthread_self();
    for (int i = 0; i < 200; i++) {
        (weft_sleep)(20000);
        CHECK(pthread_equal(home, pthread_self()));
        weft_yield();
        CHECK(pthread_equal(home, pthread_self()));
    }
    atomic_fetch_add(&pinned_ok, 1);
    return NULL;
}

TEST(pinned_stays_on_its_carrier) {
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread_opts a = {.pinned = 1};
    weft_thread *t[6];
    for (int i = 0; i < 6; i++) CHECK_EQ(weft_spawn(&t[i], pinned_fn, NULL, &a), 0);
    for (int i = 0; i < 6; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&pinned_ok), 6);
}

TEST(bad_arguments) {
    CHECK_EQ(weft_spawn(NULL, NULL, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_join(NULL, NULL), -EINVAL);
    CHECK_EQ(weft_detach(NULL), -EINVAL);
    CHECK_EQ(weft_cancel(NULL), -EINVAL);
    CHECK_EQ(weft_unpark(NULL), -EINVAL);
    CHECK_EQ(weft_id(NULL), 0);
}

static void *shutdown_from_vthread(void *a) {
    weft_shutdown(); /* refused: would wait for itself */
    return (void *)7;
}

TEST(shutdown_from_vthread_is_refused) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, shutdown_from_vthread, NULL, NULL), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)7);
    CHECK_EQ(weft_spawn(&t, ret_arg, (void *)1, NULL), 0); /* still running */
    CHECK_EQ(weft_join(t, NULL), 0);
}

/* Under TSan every vthread is a fiber, which TSan counts as a thread; past
 * ~8k it ends the process ("Thread limit exceeded. Dying.").  weft_spawn
 * answers -EAGAIN there instead, and works again once vthreads end. */
static void *park_until_unparked(void *a) {
    while (weft_park(0) != 0) {
    }
    return a;
}

TEST(tsan_thread_limit_is_eagain) {
#if !TEST_TSAN
    printf("(TSan builds only)\n");
#else
    enum { MAX = 9000 };
    static weft_thread *t[MAX];
    int n = 0, r = 0;
    while (n < MAX && (r = weft_spawn(&t[n], park_until_unparked, NULL, NULL)) == 0) n++;
    printf("%d vthreads live when weft_spawn said %d\n", n, r);
    CHECK_EQ(r, -EAGAIN);
    CHECK(n >= 7000);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_unpark(t[i]), 0);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    weft_thread *one;
    CHECK_EQ(weft_spawn(&one, ret_arg, (void *)3, NULL), 0);
    void *v;
    CHECK_EQ(weft_join(one, &v), 0);
    CHECK_EQ((intptr_t)v, 3);
#endif
}

/* ---- callee-saved registers across a migration ------------------------------ */

/* Every callee-saved register -- integer and floating-point -- and the FP
 * rounding mode are filled with values made from a seed around a call that
 * moves the vthread to the other carrier (weft_test_regs_call, in
 * tests/arch/regs_<arch>.S: the fill and check of arch.switch_cross, around
 * a call instead of a bare switch), and counted after: a migration must
 * bring back on another OS thread exactly what the ABI says a callee
 * keeps.  REGS_VTHREADS x REGS_MOVES, 1,000 x 100 by default (issue 28's
 * acceptance run: 10,000 x 1,000). */
long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed);
static atomic_long regs_bad, regs_moves;
static int regs_rounds;

static void move_to_other(void *arg) {
    (void)arg;
    int here = weft__carrier_index(weft__carrier_self());
    CHECK_EQ(weft__migrate(here == 0 ? 1 : 0), 0);
    if (weft__carrier_index(weft__carrier_self()) != here) atomic_fetch_add(&regs_moves, 1);
}

static void *regs_mover(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg;
    long bad = 0;
    for (int i = 0; i < regs_rounds; i++)
        bad += weft_test_regs_call(move_to_other, NULL, (id << 32) ^ ((uint64_t)i << 8) ^ 0x5bd1e995u);
    atomic_fetch_add(&regs_bad, bad);
    return NULL;
}

static int env_count(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && atoi(e) > 0 ? atoi(e) : dflt;
}

TEST(callee_saved_registers_survive_migrations) {
    DET_SKIP("moves vthreads between 2 carriers");
    int n = env_count("REGS_VTHREADS", 1000);
    regs_rounds = env_count("REGS_MOVES", 100);
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread **t = calloc((size_t)n, sizeof *t);
    CHECK(t != NULL);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&t[i], regs_mover, (void *)(uintptr_t)i, NULL), 0);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    free(t);
    printf("%d vthreads x %d moves: %ld between carriers, %ld registers changed\n", n, regs_rounds,
           atomic_load(&regs_moves), atomic_load(&regs_bad));
    CHECK_EQ(atomic_load(&regs_moves), (long)n * regs_rounds); /* every move was a real one */
    CHECK_EQ(atomic_load(&regs_bad), 0);
}
