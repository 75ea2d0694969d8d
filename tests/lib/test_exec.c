/* executors: every kind runs each task exactly once, from both worlds;
 * the five rejection policies under overload (10,000 submitters); cancel
 * through the future (queued, running on a vthread, running on a pool
 * thread -- in a sleep and in a read); close waits, close_now cancels;
 * scheduled and periodic tasks; counters and the dump.  Nothing leaks (run
 * under ASan/LSan) and no task runs twice. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>

#define V(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))
#define MS 1000000LL

/* ---- helpers ---------------------------------------------------------------- */

/* A task's record: how often it ran, and where. */
typedef struct rec {
    atomic_int runs;
    atomic_int on_vthread;
    int id;
} rec;

static void *count_task(void *arg) {
    rec *r = arg;
    atomic_fetch_add(&r->runs, 1);
    if (weft_self()) atomic_fetch_add(&r->on_vthread, 1);
    return V(r->id + 1);
}

/* Executors the test needs: made, or the test fails here. */
static weft_executor *ex_virtual(void) {
    weft_executor *e = NULL;
    CHECK_EQ(weft_executor_create_virtual(&e), 0);
    return e;
}

static weft_executor *ex_fixed(int threads, size_t queue_capacity, weft_reject_policy policy) {
    weft_executor *e = NULL;
    CHECK_EQ(weft_executor_create_fixed(&e, threads, queue_capacity, policy), 0);
    return e;
}

static weft_executor *ex_cached(int max_threads, int64_t keep_alive_ns) {
    weft_executor *e = NULL;
    CHECK_EQ(weft_executor_create_cached(&e, max_threads, keep_alive_ns), 0);
    return e;
}

static weft_executor *ex_scheduled(int threads) {
    weft_executor *e = NULL;
    CHECK_EQ(weft_executor_create_scheduled(&e, threads), 0);
    return e;
}

static weft_executor_stats stats_of(weft_executor *e) {
    weft_executor_stats s;
    CHECK_EQ(weft_executor_stats_get(e, &s), 0);
    return s;
}

/* Submits n counting tasks to e from the calling thread, waits for each
 * future, checks its value and that each ran once. */
static void run_n(weft_executor *e, int n) {
    rec *recs = calloc((size_t)n, sizeof *recs);
    weft_future **fs = calloc((size_t)n, sizeof *fs);
    CHECK(recs && fs);
    for (int i = 0; i < n; i++) {
        recs[i].id = i;
        fs[i] = weft_submit(e, count_task, &recs[i]);
        CHECK(fs[i] != NULL);
    }
    for (int i = 0; i < n; i++) {
        void *v = NULL;
        CHECK_EQ(weft_future_get(fs[i], &v, 0), 0);
        CHECK_EQ(I(v), i + 1);
        weft_future_unref(fs[i]);
    }
    for (int i = 0; i < n; i++) CHECK_EQ(atomic_load(&recs[i].runs), 1);
    free(recs);
    free(fs);
}

typedef struct vargs {
    weft_executor *e;
    int n;
} vargs;

static void *run_n_fn(void *arg) {
    vargs *a = arg;
    run_n(a->e, a->n);
    return NULL;
}

/* run_n from `vthreads` vthreads and `plats` platform threads at once. */
static void run_from_both_worlds(weft_executor *e, int vthreads, int plats, int n) {
    weft_thread *vt[16];
    pthread_t pt[16];
    vargs a = {e, n};
    for (int i = 0; i < vthreads; i++) CHECK_EQ(weft_spawn(&vt[i], run_n_fn, &a, NULL), 0);
    for (int i = 0; i < plats; i++) CHECK_EQ(pthread_create(&pt[i], NULL, run_n_fn, &a), 0);
    for (int i = 0; i < vthreads; i++) CHECK_EQ(weft_join(vt[i], NULL), 0);
    for (int i = 0; i < plats; i++) CHECK_EQ(pthread_join(pt[i], NULL), 0);
}

/* ---- every kind runs every task once ------------------------------------------- */

TEST(fixed_runs_every_task_once) {
    for (int round = 0; round < 3; round++) {
        weft_executor *e = ex_fixed(4, 0, WEFT_REJECT_ABORT);
        CHECK(e != NULL);
        CHECK(strcmp(weft_executor_kind(e), "fixed:4") == 0);
        int n = SCALE(4000);
        run_from_both_worlds(e, 2, 2, n);
        weft_executor_stats s = stats_of(e);
        CHECK_EQ(s.submitted, 4 * n);
        CHECK_EQ(s.completed, 4 * n);
        CHECK_EQ(s.threads_started, 4);
        CHECK_EQ(s.threads_peak, 4);
        CHECK_EQ(s.rejected, 0);
        CHECK_EQ(s.queued, 0);
        CHECK(s.queued_peak >= 1);
        CHECK_EQ(weft_executor_close(e), 0);
    }
}

TEST(virtual_runs_each_task_on_its_own_vthread) {
    weft_executor *e = ex_virtual();
    CHECK(e != NULL);
    int n = SCALE(3000);
    rec *recs = calloc((size_t)n, sizeof *recs);
    weft_future **fs = calloc((size_t)n, sizeof *fs);
    for (int i = 0; i < n; i++) {
        recs[i].id = i;
        fs[i] = weft_submit(e, count_task, &recs[i]);
        CHECK(fs[i] != NULL);
    }
    for (int i = 0; i < n; i++) {
        void *v;
        CHECK_EQ(weft_future_get(fs[i], &v, 0), 0);
        CHECK_EQ(I(v), i + 1);
        CHECK_EQ(atomic_load(&recs[i].runs), 1);
        CHECK_EQ(atomic_load(&recs[i].on_vthread), 1);
        weft_future_unref(fs[i]);
    }
    CHECK_EQ(weft_executor_close(e), 0); /* waits for the vthreads to end */
    free(recs);
    free(fs);
}

TEST(virtual_from_both_worlds_and_counters) {
    weft_executor *e = ex_virtual();
    int n = SCALE(2000);
    run_from_both_worlds(e, 3, 2, n);
    weft_executor_stats s = stats_of(e);
    CHECK_EQ(s.submitted, 5 * n);
    CHECK_EQ(s.threads_started, 5 * n);
    CHECK_EQ(s.completed, 5 * n);
    CHECK(s.threads_peak >= 1 && s.threads_peak <= (uint64_t)(5 * n));
    CHECK_EQ(weft_executor_shutdown(e), 0);
    CHECK_EQ(weft_executor_await(e, 0), 0);
    s = stats_of(e);
    CHECK_EQ(s.threads_live, 0);
    CHECK_EQ(weft_executor_close(e), 0);
}

/* Each task waits until released, so that every thread a cached pool has
 * is busy and the next task needs a new one. */
static void *gate_task(void *arg) {
    weft_latch *l = arg;
    CHECK_EQ(weft_latch_await(l), 0);
    return V(7);
}

TEST(cached_grows_reuses_and_retires) {
    /* one at a time: one thread, reused */
    weft_executor *e = ex_cached(0, 30 * MS);
    CHECK(strcmp(weft_executor_kind(e), "cached") == 0);
    for (int i = 0; i < 50; i++) {
        rec r = {.id = i};
        weft_future *f = weft_submit(e, count_task, &r);
        void *v;
        CHECK_EQ(weft_future_get(f, &v, 0), 0);
        CHECK_EQ(I(v), i + 1);
        weft_future_unref(f);
        /* the thread must be idle again before the next submission finds it */
        while (stats_of(e).queued || atomic_load(&r.runs) != 1) usleep(100);
    }
    weft_executor_stats s = stats_of(e);
    CHECK(s.threads_started >= 1);
    /* all busy: a thread per task */
    weft_latch gate;
    weft_latch_init(&gate, 1);
    weft_future *fs[20];
    for (int i = 0; i < 20; i++) fs[i] = weft_submit(e, gate_task, &gate);
    s = stats_of(e);
    CHECK(s.threads_live >= 20);
    weft_latch_count_down(&gate);
    for (int i = 0; i < 20; i++) {
        CHECK_EQ(weft_future_get(fs[i], NULL, 0), 0);
        weft_future_unref(fs[i]);
    }
    /* idle past the keep-alive: every thread ends by itself */
    while (stats_of(e).threads_live) usleep(1000);
    CHECK_EQ(weft_executor_close(e), 0);

    /* at most max threads; the rest wait in the queue, none is rejected */
    e = ex_cached(3, 0);
    weft_latch_init(&gate, 1);
    for (int i = 0; i < 20; i++) fs[i] = weft_submit(e, gate_task, &gate);
    s = stats_of(e);
    CHECK_EQ(s.threads_live, 3);
    CHECK_EQ(s.queued, 17);
    weft_latch_count_down(&gate);
    for (int i = 0; i < 20; i++) {
        void *v;
        CHECK_EQ(weft_future_get(fs[i], &v, 0), 0);
        CHECK_EQ(I(v), 7);
        weft_future_unref(fs[i]);
    }
    s = stats_of(e);
    CHECK_EQ(s.threads_peak, 3);
    CHECK_EQ(s.rejected, 0);
    CHECK_EQ(weft_executor_close(e), 0);
}

/* A pool of many sleeping threads makes the kernel's futex hash fit them
 * (Linux >= 6.16 sizes a process's private hash for its CPUs: 16 buckets on
 * 2 CPUs, and every wake walked a bucket of hundreds of sleepers). */
TEST(cached_pool_grows_the_futex_hash) {
    enum { N = 300 };
    weft_executor *e = ex_cached(0, 0);
    weft_latch gate;
    weft_latch_init(&gate, 1);
    weft_future *fs[N];
    CHECK((fs[0] = weft_submit(e, gate_task, &gate)) != NULL);
    /* the process has threads now (carriers, one pool thread): the kernel
     * gave it its private hash, if it has them */
    int before = prctl(78 /* PR_FUTEX_HASH */, 2 /* GET_SLOTS */, 0, 0, 0);
    if (before <= 0) {
        printf("skipped: no private futex hash here (%s)\n", before < 0 ? strerror(errno) : "the global hash");
        weft_latch_count_down(&gate);
        CHECK_EQ(weft_future_get(fs[0], NULL, 0), 0);
        weft_future_unref(fs[0]);
        CHECK_EQ(weft_executor_close(e), 0);
        return;
    }
    for (int i = 1; i < N; i++) CHECK((fs[i] = weft_submit(e, gate_task, &gate)) != NULL);
    CHECK_EQ(stats_of(e).threads_live, N);
    int slots = prctl(78, 2, 0, 0, 0);
    CHECK(slots >= 2 * N);
    weft_latch_count_down(&gate);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(weft_future_get(fs[i], NULL, 0), 0);
        weft_future_unref(fs[i]);
    }
    CHECK_EQ(weft_executor_close(e), 0);
    CHECK_EQ(prctl(78, 2, 0, 0, 0), slots); /* only grows */
}

TEST(bad_arguments) {
    weft_executor *bad = (weft_executor *)1;
    CHECK_EQ(weft_executor_create_fixed(&bad, 0, 0, WEFT_REJECT_ABORT), -EINVAL);
    CHECK(bad == NULL);
    bad = (weft_executor *)1;
    CHECK_EQ(weft_executor_create_fixed(&bad, 1, 0, (weft_reject_policy)99), -EINVAL);
    CHECK(bad == NULL);
    bad = (weft_executor *)1;
    CHECK_EQ(weft_executor_create_cached(&bad, -1, 0), -EINVAL);
    CHECK(bad == NULL);
    bad = (weft_executor *)1;
    CHECK_EQ(weft_executor_create_scheduled(&bad, 0), -EINVAL);
    CHECK(bad == NULL);
    CHECK_EQ(weft_executor_create_virtual(NULL), -EINVAL);
    CHECK_EQ(weft_executor_create_fixed(NULL, 1, 0, WEFT_REJECT_ABORT), -EINVAL);
    CHECK_EQ(weft_executor_create_cached(NULL, 0, 0), -EINVAL);
    CHECK_EQ(weft_executor_create_scheduled(NULL, 1), -EINVAL);
    CHECK(weft_submit(NULL, count_task, NULL) == NULL);
    weft_executor *e = ex_fixed(1, 0, WEFT_REJECT_ABORT);
    CHECK(weft_submit(e, NULL, NULL) == NULL);
    CHECK(weft_schedule(e, count_task, NULL, 0) == NULL); /* not a scheduled executor */
    CHECK_EQ(weft_executor_await(e, 0), -EINVAL);          /* not shut down */
    CHECK_EQ(weft_executor_stats_get(NULL, NULL), -EINVAL);
    CHECK_EQ(weft_executor_close(e), 0);
    CHECK_EQ(weft_executor_close(NULL), -EINVAL);
    CHECK_EQ(weft_executor_shutdown(NULL), -EINVAL);
}

/* ---- rejection policies under overload ----------------------------------------- */

/* 10,000 submitter vthreads against fixed(2, queue 4): the tasks on pool
 * threads wait behind a gate until every submission has returned, so the
 * outcome is exact: 2 run at once, 4 wait, the rest meet the policy. */
enum { POOL = 2, CAP = 4 };

typedef struct overload {
    weft_executor *e;
    weft_latch gate;      /* opened after the last submission */
    weft_latch submitted; /* counts the submitters down */
    rec *recs;
    weft_future **fs;
    int n;
    int gate_on;
} overload;

static overload *OV;

static void *policy_task(void *arg) {
    rec *r = arg;
    atomic_fetch_add(&r->runs, 1);
    if (weft_self()) atomic_fetch_add(&r->on_vthread, 1); /* CALLER_RUNS: on the submitter */
    else if (OV->gate_on) CHECK_EQ(weft_latch_await(&OV->gate), 0);
    return V(r->id + 1);
}

static void *submitter(void *arg) {
    rec *r = arg;
    OV->fs[r->id] = weft_submit(OV->e, policy_task, r);
    CHECK(OV->fs[r->id] != NULL);
    weft_latch_count_down(&OV->submitted);
    return NULL;
}

/* Runs the overload against policy p; returns how many futures failed with
 * each error in *busy / *cancelled, checks the rest completed with their
 * value and that a task ran iff its future completed, once. */
static void overload_run(weft_reject_policy p, int gate_on, int *busy, int *cancelled, int *ok) {
    overload o = {0};
    OV = &o;
    o.n = LIVE_CAP(10000);
    o.gate_on = gate_on;
    o.e = ex_fixed(POOL, CAP, p);
    CHECK(o.e != NULL);
    o.recs = calloc((size_t)o.n, sizeof *o.recs);
    o.fs = calloc((size_t)o.n, sizeof *o.fs);
    weft_latch_init(&o.gate, 1);
    weft_latch_init(&o.submitted, (unsigned)o.n);
    weft_thread **ts = calloc((size_t)o.n, sizeof *ts);
    for (int i = 0; i < o.n; i++) {
        o.recs[i].id = i;
        CHECK_EQ(weft_spawn(&ts[i], submitter, &o.recs[i], NULL), 0);
    }
    CHECK_EQ(weft_latch_await(&o.submitted), 0);
    weft_latch_count_down(&o.gate);
    for (int i = 0; i < o.n; i++) CHECK_EQ(weft_join(ts[i], NULL), 0);
    *busy = *cancelled = *ok = 0;
    for (int i = 0; i < o.n; i++) {
        void *v = NULL;
        int r = weft_future_get(o.fs[i], &v, 0);
        int runs = atomic_load(&o.recs[i].runs);
        if (r == 0) {
            CHECK_EQ(I(v), i + 1);
            CHECK_EQ(runs, 1);
            (*ok)++;
        } else {
            CHECK_EQ(runs, 0);
            if (r == -EBUSY) (*busy)++;
            else if (r == -ECANCELED) (*cancelled)++;
            else CHECK_EQ(r, 0);
        }
        weft_future_unref(o.fs[i]);
    }
    weft_executor_stats s = stats_of(o.e);
    CHECK(s.queued_peak <= CAP);
    CHECK(s.threads_peak == POOL);
    CHECK_EQ(weft_executor_close(o.e), 0);
    int on_caller = 0;
    for (int i = 0; i < o.n; i++) on_caller += atomic_load(&o.recs[i].on_vthread);
    if (p == WEFT_REJECT_CALLER_RUNS) CHECK_EQ(s.rejected, on_caller);
    else CHECK_EQ(on_caller, 0);
    if (p == WEFT_REJECT_ABORT) CHECK_EQ(s.rejected, *busy);
    if (p == WEFT_REJECT_DISCARD || p == WEFT_REJECT_DISCARD_OLDEST) CHECK_EQ(s.rejected, *cancelled);
    free(ts);
    free(o.recs);
    free(o.fs);
    OV = NULL;
}

/* The overload against p, and the outcome it must have: how many ran,
 * were refused with -EBUSY, and dropped with -ECANCELED. */
static void overload_expect(weft_reject_policy p, int gate_on, int want_ok, int want_busy, int want_cancelled) {
    int busy, cancelled, ok;
    overload_run(p, gate_on, &busy, &cancelled, &ok);
    CHECK_EQ(ok, want_ok);
    CHECK_EQ(busy, want_busy);
    CHECK_EQ(cancelled, want_cancelled);
}

#define OVER (LIVE_CAP(10000) - POOL - CAP) /* what the gate leaves no room for */

/* the gate holds the pool's two threads and the queue's four slots */
TEST(reject_abort_under_overload) { overload_expect(WEFT_REJECT_ABORT, 1, POOL + CAP, OVER, 0); }
TEST(reject_discard_under_overload) { overload_expect(WEFT_REJECT_DISCARD, 1, POOL + CAP, 0, OVER); }
/* the two running ones and the last four queued run; every other was
 * pushed out of the queue by a newer one */
TEST(reject_discard_oldest_under_overload) { overload_expect(WEFT_REJECT_DISCARD_OLDEST, 1, POOL + CAP, 0, OVER); }
/* every one runs: six on the pool, the rest on their submitters */
TEST(reject_caller_runs_under_overload) { overload_expect(WEFT_REJECT_CALLER_RUNS, 1, LIVE_CAP(10000), 0, 0); }
/* no gate: the submitters wait for room, and all run */
TEST(reject_block_under_overload) { overload_expect(WEFT_REJECT_BLOCK, 0, LIVE_CAP(10000), 0, 0); }

typedef struct blocker {
    weft_executor *e;
    weft_latch *gate;
    int64_t deadline;
    weft_future *f;
} blocker;

static void *block_submit(void *arg) {
    blocker *b = arg;
    b->f = weft_submit_until(b->e, gate_task, b->gate, b->deadline);
    return NULL;
}

TEST(reject_block_deadline_and_cancel) {
    weft_latch gate;
    weft_latch_init(&gate, 1);
    weft_executor *e = ex_fixed(POOL, CAP, WEFT_REJECT_BLOCK);
    weft_future *fs[POOL + CAP];
    for (int i = 0; i < POOL + CAP; i++) CHECK((fs[i] = weft_submit(e, gate_task, &gate)) != NULL);
    /* full: a deadline ends the wait, the task is not queued */
    blocker b = {e, &gate, weft_now() + 50 * MS, NULL};
    block_submit(&b); /* from this platform thread */
    CHECK_EQ(weft_future_get(b.f, NULL, 0), -ETIMEDOUT);
    weft_future_unref(b.f);
    weft_thread *t;
    b.deadline = weft_now() + 50 * MS;
    CHECK_EQ(weft_spawn(&t, block_submit, &b, NULL), 0); /* and from a vthread */
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(weft_future_get(b.f, NULL, 0), -ETIMEDOUT);
    weft_future_unref(b.f);
    /* cancellation ends it too */
    b.deadline = 0;
    b.f = NULL;
    CHECK_EQ(weft_spawn(&t, block_submit, &b, NULL), 0);
    char *d = dump_showing(WEFT_DUMP_TEXT, "parked on executor", NULL);
    free(d);
    CHECK_EQ(weft_cancel(t), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(weft_future_get(b.f, NULL, 0), -ECANCELED);
    weft_future_unref(b.f);
    weft_executor_stats s = stats_of(e);
    CHECK_EQ(s.rejected, 3);
    CHECK_EQ(s.submitted, POOL + CAP);
    /* a waiting submitter gets in once there is room */
    b.deadline = 0;
    b.f = NULL;
    CHECK_EQ(weft_spawn(&t, block_submit, &b, NULL), 0);
    d = dump_showing(WEFT_DUMP_TEXT, "parked on executor", NULL);
    free(d);
    weft_latch_count_down(&gate);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(weft_future_get(b.f, NULL, 0), 0);
    weft_future_unref(b.f);
    for (int i = 0; i < POOL + CAP; i++) {
        CHECK_EQ(weft_future_get(fs[i], NULL, 0), 0);
        weft_future_unref(fs[i]);
    }
    CHECK_EQ(weft_executor_close(e), 0);
}

/* ---- cancellation through the future --------------------------------------------- */

typedef struct sleeper {
    atomic_int started, ended;
    int result;
    int cancelled_seen;
} sleeper;

static void *sleep_task(void *arg) {
    sleeper *s = arg;
    atomic_store(&s->started, 1);
    s->result = weft_sleep(3600 * 1000 * MS);
    s->cancelled_seen = weft_cancelled();
    atomic_store(&s->ended, 1);
    return V(1);
}

static void *cancelled_flag_task(void *arg) {
    (void)arg;
    return V(weft_cancelled() ? 2 : 1);
}

static void cancel_through_future(weft_executor *e) {
    for (int round = 0; round < 20; round++) {
        sleeper a = {0};
        weft_future *fa = weft_submit(e, sleep_task, &a);
        while (!atomic_load(&a.started)) usleep(100);
        /* a queued task (behind a on a one-thread pool) never runs */
        int virt = strcmp(weft_executor_kind(e), "virtual") == 0;
        rec r = {.id = 5};
        weft_future *fb = weft_submit(e, count_task, &r);
        int rc = weft_future_cancel(fb);
        if (virt) CHECK(rc == 0 || rc == -EALREADY); /* its own vthread may have run it already */
        else CHECK_EQ(rc, 0);
        CHECK_EQ(weft_future_get(fb, NULL, 0), rc == 0 ? -ECANCELED : 0);
        /* the running one is interrupted */
        CHECK_EQ(weft_future_cancel(fa), 0);
        CHECK_EQ(weft_future_get(fa, NULL, 0), -ECANCELED);
        while (!atomic_load(&a.ended)) usleep(100);
        CHECK_EQ(a.result, -ECANCELED);
        CHECK_EQ(a.cancelled_seen, 1);
        /* and the next task on that thread is not cancelled */
        weft_future *fc = weft_submit(e, cancelled_flag_task, NULL);
        void *v;
        CHECK_EQ(weft_future_get(fc, &v, 0), 0);
        CHECK_EQ(I(v), 1);
        weft_future_unref(fa);
        weft_future_unref(fb);
        weft_future_unref(fc);
        if (!virt) CHECK_EQ(atomic_load(&r.runs), 0);
    }
}

TEST(cancel_queued_and_running_fixed) {
    weft_executor *e = ex_fixed(1, 0, WEFT_REJECT_ABORT);
    cancel_through_future(e);
    weft_executor_stats s = stats_of(e);
    CHECK_EQ(s.cancelled, 20);
    CHECK_EQ(weft_executor_close(e), 0);
}

TEST(cancel_queued_and_running_virtual) {
    DET_SKIP("cancels a vthread task while it sleeps, after real time");
    weft_executor *e = ex_virtual();
    cancel_through_future(e);
    CHECK_EQ(weft_executor_close(e), 0);
}

TEST(cancel_running_cached) {
    weft_executor *e = ex_cached(1, 0);
    cancel_through_future(e);
    CHECK_EQ(weft_executor_close(e), 0);
}

/* A pool thread blocked in a read: the cancel reaches the system call. */
static void *read_task(void *arg) {
    int fd = *(int *)arg;
    char c;
    return V(weft_read(fd, &c, 1));
}

TEST(cancel_pool_thread_in_read) {
    weft_executor *e = ex_fixed(2, 0, WEFT_REJECT_ABORT);
    for (int round = 0; round < 10; round++) {
        int p[2];
        CHECK_EQ(pipe(p), 0);
        weft_future *f = weft_submit(e, read_task, &p[0]);
        usleep(2000); /* (whether it is in the read yet or not, the cancel must end it) */
        CHECK_EQ(weft_future_cancel(f), 0);
        CHECK_EQ(weft_future_get(f, NULL, 0), -ECANCELED);
        weft_future_unref(f);
        /* the thread is free again: a read with data returns it */
        CHECK_EQ(write(p[1], "x", 1), 1);
        f = weft_submit(e, read_task, &p[0]);
        void *v;
        CHECK_EQ(weft_future_get(f, &v, 0), 0);
        CHECK_EQ(I(v), 1);
        weft_future_unref(f);
        close(p[0]);
        close(p[1]);
    }
    CHECK_EQ(weft_executor_close(e), 0);
}

/* Cancels racing with completions: every future has one outcome, no task
 * runs twice, nothing leaks. */
static void *quick_task(void *arg) {
    rec *r = arg;
    atomic_fetch_add(&r->runs, 1);
    if (r->id % 3 == 0) weft_yield();
    return V(r->id + 1);
}

static void cancel_race(weft_executor *e) {
    int n = SCALE(5000);
    rec *recs = calloc((size_t)n, sizeof *recs);
    weft_future **fs = calloc((size_t)n, sizeof *fs);
    for (int i = 0; i < n; i++) {
        recs[i].id = i;
        fs[i] = weft_submit(e, quick_task, &recs[i]);
        if (i % 2) weft_future_cancel(fs[i]);
        if (i % 5 == 0) weft_future_unref(fs[i]), fs[i] = NULL; /* abandoned: still runs or is cancelled */
    }
    CHECK_EQ(weft_executor_shutdown(e), 0);
    CHECK_EQ(weft_executor_await(e, 0), 0);
    for (int i = 0; i < n; i++) {
        CHECK(atomic_load(&recs[i].runs) <= 1);
        if (!fs[i]) continue;
        void *v;
        int r = weft_future_get(fs[i], &v, 0);
        if (r == 0) CHECK_EQ(I(v), i + 1);
        else CHECK_EQ(r, -ECANCELED);
        if (i % 2 == 0) CHECK_EQ(r, 0);
        weft_future_unref(fs[i]);
    }
    weft_executor_stats s = stats_of(e);
    CHECK_EQ(s.completed + s.cancelled, n);
    CHECK_EQ(weft_executor_close(e), 0);
    free(recs);
    free(fs);
}

TEST(cancel_races_completion) {
    for (int round = 0; round < 5; round++) {
        cancel_race(ex_fixed(3, 0, WEFT_REJECT_ABORT));
        cancel_race(ex_virtual());
        cancel_race(ex_cached(4, 0));
    }
}

/* ---- close and close_now ------------------------------------------------------------ */

static void *slow_count(void *arg) {
    atomic_int *n = arg;
    weft_sleep(MS);
    atomic_fetch_add(n, 1);
    return NULL;
}

TEST(close_waits_for_every_task) {
    weft_executor *es[3] = {ex_fixed(2, 0, WEFT_REJECT_ABORT), ex_virtual(),
                            ex_cached(0, 0)};
    for (int k = 0; k < 3; k++) {
        atomic_int n = 0;
        for (int i = 0; i < 100; i++) weft_future_unref(weft_submit(es[k], slow_count, &n)); /* fire and forget */
        CHECK_EQ(weft_executor_close(es[k]), 0);
        CHECK_EQ(atomic_load(&n), 100);
    }
}

TEST(shutdown_refuses_new_tasks) {
    weft_executor *e = ex_fixed(1, 0, WEFT_REJECT_ABORT);
    CHECK_EQ(weft_executor_shutdown(e), 0);
    weft_future *f = weft_submit(e, count_task, &(rec){0});
    CHECK_EQ(weft_future_get(f, NULL, 0), -ESHUTDOWN);
    weft_future_unref(f);
    CHECK_EQ(weft_executor_await(e, 0), 0);
    CHECK_EQ(stats_of(e).rejected, 1);
    CHECK_EQ(weft_executor_close(e), 0);
}

static void close_now_cancels(weft_executor *e, int running, int queued) {
    sleeper *sl = calloc((size_t)(running + queued), sizeof *sl);
    weft_future **fs = calloc((size_t)(running + queued), sizeof *fs);
    for (int i = 0; i < running + queued; i++) fs[i] = weft_submit(e, sleep_task, &sl[i]);
    for (int i = 0; i < running; i++)
        while (!atomic_load(&sl[i].started)) usleep(100);
    int n = weft_executor_close_now(e);
    CHECK(n >= 0);
    if (queued) CHECK_EQ(n, queued);
    for (int i = 0; i < running + queued; i++) {
        CHECK_EQ(weft_future_get(fs[i], NULL, 0), i < running ? 0 : -ECANCELED);
        if (i < running) CHECK_EQ(sl[i].result, -ECANCELED);
        else CHECK_EQ(atomic_load(&sl[i].started), 0);
        weft_future_unref(fs[i]);
    }
    free(sl);
    free(fs);
}

TEST(close_now_cancels_queued_and_running) {
    DET_SKIP("cancels vthread tasks while they sleep, after real time");
    for (int round = 0; round < 5; round++) {
        close_now_cancels(ex_fixed(2, 0, WEFT_REJECT_ABORT), 2, 5);
        close_now_cancels(ex_cached(3, 0), 3, 4);
        close_now_cancels(ex_virtual(), 50, 0);
    }
}

/* A vthread cancelled in close: the rest is cancelled, close still waits. */
static void *closer(void *arg) { return V(weft_executor_close(arg)); }

TEST(close_cancelled_cancels_the_rest) {
    weft_executor *e = ex_fixed(1, 0, WEFT_REJECT_ABORT);
    sleeper a = {0};
    weft_future *f = weft_submit(e, sleep_task, &a);
    while (!atomic_load(&a.started)) usleep(100);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, closer, e, NULL), 0);
    char *d = dump_showing(WEFT_DUMP_TEXT, "parked on executor", NULL);
    free(d);
    CHECK_EQ(weft_cancel(t), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ(I(r), -ECANCELED);
    CHECK_EQ(a.result, -ECANCELED);
    CHECK_EQ(weft_future_get(f, NULL, 0), 0); /* it returned (after its sleep was cancelled) */
    weft_future_unref(f);
}

/* A task submits to its own executor and waits for the result. */
static weft_executor *nest_e;
static void *leaf(void *arg) { return V(I(arg) * 2); }
static void *parent_task(void *arg) {
    weft_future *f = weft_submit(nest_e, leaf, arg);
    void *v;
    CHECK_EQ(weft_future_get(f, &v, 0), 0);
    weft_future_unref(f);
    return v;
}

TEST(tasks_submit_to_their_executor) {
    weft_executor *es[2] = {ex_virtual(), ex_fixed(4, 0, WEFT_REJECT_ABORT)};
    for (int k = 0; k < 2; k++) {
        nest_e = es[k];
        weft_future *fs[2]; /* two parents on a four-thread pool: room for the leaves */
        for (int i = 0; i < 2; i++) fs[i] = weft_submit(nest_e, parent_task, V(i + 10));
        for (int i = 0; i < 2; i++) {
            void *v;
            CHECK_EQ(weft_future_get(fs[i], &v, 0), 0);
            CHECK_EQ(I(v), 2 * (i + 10));
            weft_future_unref(fs[i]);
        }
        CHECK_EQ(weft_executor_close(nest_e), 0);
    }
}

/* ---- scheduled ---------------------------------------------------------------------- */

static atomic_int order_pos;
static int order_seen[3];
static void *ordered(void *arg) {
    order_seen[atomic_fetch_add(&order_pos, 1)] = (int)I(arg);
    return arg;
}

TEST(scheduled_runs_after_delay_in_due_order) {
    weft_executor *e = ex_scheduled(1);
    CHECK(strcmp(weft_executor_kind(e), "scheduled:1") == 0);
    /* scheduled out of order; each one's due time lies in [lo, hi] */
    static const int delay_ms[3] = {30, 10, 20};
    int64_t lo[3], hi[3];
    weft_future *fs[3];
    for (int i = 0; i < 3; i++) {
        lo[i] = weft_now() + delay_ms[i] * MS;
        fs[i] = weft_schedule(e, ordered, V(i), delay_ms[i] * MS);
        hi[i] = weft_now() + delay_ms[i] * MS;
        CHECK(fs[i] != NULL);
    }
    for (int i = 0; i < 3; i++) {
        void *v;
        CHECK_EQ(weft_future_get(fs[i], &v, 0), 0);
        CHECK_EQ(I(v), i);
        CHECK(weft_now() >= lo[i]); /* not before its time (a lower bound) */
        weft_future_unref(fs[i]);
    }
    /* one thread: a task surely due before another ran before it (on a
     * quiet machine: 10, 20, 30; a stalled submitter only loosens this) */
    int pos[3];
    for (int k = 0; k < 3; k++) pos[order_seen[k]] = k;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (hi[a] < lo[b]) CHECK(pos[a] < pos[b]);
    /* weft_submit: delay 0 */
    rec r = {.id = 1};
    weft_future *f = weft_submit(e, count_task, &r);
    void *v;
    CHECK_EQ(weft_future_get(f, &v, 0), 0);
    CHECK_EQ(I(v), 2);
    weft_future_unref(f);
    CHECK_EQ(weft_executor_close(e), 0);
}

typedef struct ticker {
    atomic_int runs;
    int stop_at;
    int64_t last;
} ticker;

static void *tick(void *arg) {
    ticker *t = arg;
    int n = atomic_fetch_add(&t->runs, 1) + 1;
    t->last = weft_now();
    return n == t->stop_at ? V(n) : NULL;
}

TEST(scheduled_periodic_fixed_rate_and_delay) {
    weft_executor *e = ex_scheduled(2);
    for (int rate = 0; rate < 2; rate++) {
        ticker t = {.stop_at = 5};
        int64_t t0 = weft_now();
        weft_future *f = weft_schedule_every(e, tick, &t, 2 * MS, 3 * MS, rate);
        void *v;
        CHECK_EQ(weft_future_get(f, &v, 0), 0); /* returned non-NULL at its 5th run */
        CHECK_EQ(I(v), 5);
        CHECK_EQ(atomic_load(&t.runs), 5);
        CHECK(t.last - t0 >= 2 * MS + 4 * 3 * MS); /* 4 periods after the first run at least */
        weft_future_unref(f);
    }
    /* cancelling the future stops it */
    ticker t = {.stop_at = -1};
    weft_future *f = weft_schedule_every(e, tick, &t, 0, MS, 1);
    while (atomic_load(&t.runs) < 3) usleep(500);
    CHECK_EQ(weft_future_cancel(f), 0);
    weft_future_unref(f);
    /* shutdown stops periodic tasks but runs delayed one-shots */
    ticker t2 = {.stop_at = -1};
    weft_future *p = weft_schedule_every(e, tick, &t2, 0, MS, 0);
    rec r = {.id = 9};
    weft_future *once = weft_schedule(e, count_task, &r, 20 * MS);
    while (atomic_load(&t2.runs) < 2) usleep(500);
    CHECK_EQ(weft_executor_shutdown(e), 0);
    CHECK_EQ(weft_executor_await(e, 0), 0);
    CHECK_EQ(weft_future_get(p, NULL, 0), -ECANCELED);
    CHECK_EQ(weft_future_get(once, NULL, 0), 0);
    CHECK_EQ(atomic_load(&r.runs), 1);
    int after = atomic_load(&t.runs);
    CHECK_EQ(weft_executor_close(e), 0);
    CHECK_EQ(atomic_load(&t.runs), after); /* the cancelled one did not run again */
    weft_future_unref(p);
    weft_future_unref(once);
}

TEST(scheduled_close_now_cancels_delayed) {
    weft_executor *e = ex_scheduled(1);
    rec r = {0};
    weft_future *f = weft_schedule(e, count_task, &r, 3600 * 1000 * MS);
    weft_future *g = weft_schedule_every(e, count_task, &r, 3600 * 1000 * MS, MS, 0);
    CHECK_EQ(weft_executor_close_now(e), 1); /* the periodic one was taken off by the shutdown itself */
    CHECK_EQ(weft_future_get(f, NULL, 0), -ECANCELED);
    CHECK_EQ(weft_future_get(g, NULL, 0), -ECANCELED);
    CHECK_EQ(atomic_load(&r.runs), 0);
    weft_future_unref(f);
    weft_future_unref(g);
}

/* Times past the clock's range saturate (never) instead of wrapping into
 * the past (at once, and a periodic task again and again, starving the
 * pool); a delay <= 0 is now. */
TEST(scheduled_huge_times_saturate) {
    weft_executor *e = ex_scheduled(2);
    rec never = {.id = 1}, neg = {.id = 2}, most_neg = {.id = 3};
    ticker rate = {.stop_at = -1}, delay = {.stop_at = -1}, late = {.stop_at = -1}, witness = {.stop_at = 5};
    weft_future *f_never = weft_schedule(e, count_task, &never, INT64_MAX);
    weft_future *f_rate = weft_schedule_every(e, tick, &rate, 0, INT64_MAX, 1);
    weft_future *f_delay = weft_schedule_every(e, tick, &delay, 0, INT64_MAX, 0);
    weft_future *f_late = weft_schedule_every(e, tick, &late, INT64_MAX - 1, 1000, 1);
    weft_future *f_neg = weft_schedule(e, count_task, &neg, -5 * MS);
    weft_future *f_most_neg = weft_schedule(e, count_task, &most_neg, INT64_MIN);
    CHECK(f_never && f_rate && f_delay && f_late && f_neg && f_most_neg);
    CHECK(weft_schedule_every(e, tick, &witness, 0, 0, 1) == NULL);  /* a period must be positive */
    CHECK(weft_schedule_every(e, tick, &witness, 0, -MS, 0) == NULL);
    /* negative delays run now (bounded waits: a failure, not a hang) */
    void *v;
    CHECK_EQ(weft_future_get(f_neg, &v, weft_now() + 10000 * MS), 0);
    CHECK_EQ(I(v), 3);
    CHECK_EQ(weft_future_get(f_most_neg, &v, weft_now() + 10000 * MS), 0);
    CHECK_EQ(I(v), 4);
    /* a task due after the huge ones still gets a thread */
    weft_future *f_w = weft_schedule_every(e, tick, &witness, MS, MS, 1);
    CHECK_EQ(weft_future_get(f_w, &v, weft_now() + 10000 * MS), 0);
    CHECK_EQ(I(v), 5);
    /* the periodic ones due now ran once; their next run is never */
    for (int i = 0; i < 10000 && (atomic_load(&rate.runs) < 1 || atomic_load(&delay.runs) < 1); i++) usleep(1000);
    usleep(20 * 1000); /* a wrapped next run would be due now: room for it to show */
    CHECK_EQ(atomic_load(&rate.runs), 1);
    CHECK_EQ(atomic_load(&delay.runs), 1);
    CHECK_EQ(atomic_load(&late.runs), 0);
    CHECK_EQ(atomic_load(&never.runs), 0);
    /* close_now takes every one of them off */
    CHECK_EQ(weft_executor_close_now(e), 1); /* the one-shot; the periodic ones went with the shutdown */
    CHECK_EQ(weft_future_get(f_never, NULL, 0), -ECANCELED);
    CHECK_EQ(weft_future_get(f_rate, NULL, 0), -ECANCELED);
    CHECK_EQ(weft_future_get(f_delay, NULL, 0), -ECANCELED);
    CHECK_EQ(weft_future_get(f_late, NULL, 0), -ECANCELED);
    CHECK_EQ(atomic_load(&rate.runs), 1);
    weft_future *all[] = {f_never, f_rate, f_delay, f_late, f_neg, f_most_neg, f_w};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) weft_future_unref(all[i]);
}

/* A keep-alive past the clock's range is forever, not a deadline in the
 * past that ends an idle thread at once. */
TEST(cached_huge_keep_alive_keeps_threads) {
    weft_executor *e = ex_cached(0, INT64_MAX);
    rec r = {.id = 1};
    weft_future *f = weft_submit(e, count_task, &r);
    CHECK_EQ(weft_future_get(f, NULL, 0), 0);
    weft_future_unref(f);
    usleep(20 * 1000); /* an idle thread that timed out at once has left by now */
    weft_executor_stats s = stats_of(e);
    CHECK_EQ(s.threads_started, 1);
    CHECK_EQ(s.threads_live, 1);
    CHECK_EQ(weft_executor_close(e), 0);
}

/* ---- observe ------------------------------------------------------------------------- */

TEST(dump_shows_executors) {
    weft_executor *e = ex_fixed(3, 0, WEFT_REJECT_ABORT);
    weft_latch gate; /* three at once: three threads */
    weft_latch_init(&gate, 1);
    weft_future *fs[3];
    for (int i = 0; i < 3; i++) fs[i] = weft_submit(e, gate_task, &gate);
    weft_latch_count_down(&gate);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(weft_future_get(fs[i], NULL, 0), 0);
        weft_future_unref(fs[i]);
    }
    run_n(e, 17);
    char *d = dump_showing(WEFT_DUMP_TEXT, "executors:", "fixed:3: threads started 3, live 3, peak 3",
                           "submitted 20, completed 20", NULL);
    free(d);
    d = dump_showing(WEFT_DUMP_JSON, "\"executors\":[", "\"kind\":\"fixed:3\"", "\"threads_started\":3",
                     "\"completed\":20", NULL);
    free(d);
    CHECK_EQ(weft_executor_close(e), 0);
    /* gone from the dump once closed */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    CHECK_EQ(weft_dump(p[1], WEFT_DUMP_TEXT), 0);
    char buf[65536];
    ssize_t k = read(p[0], buf, sizeof buf - 1);
    CHECK(k > 0);
    buf[k] = 0;
    CHECK(strstr(buf, "fixed:3") == NULL);
    close(p[0]);
    close(p[1]);
}

