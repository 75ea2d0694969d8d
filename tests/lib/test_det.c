/*
 * Deterministic mode (src/sched/det.c, tests/support/det.h): five classic races,
 * each written with weft's real API as real code would have it -- a
 * weft_yield or a blocking call where real code would do I/O or call out --
 * once with the bug and once fixed.  For each: some seed within NSEEDS
 * finds the bug, that seed replays it REPRO times out of REPRO, and the
 * fixed code passes every one of the NSEEDS seeds.  And: the same seed
 * gives the same trace, byte for byte; the mode's basics (one carrier,
 * virtual time, ids) hold; what waits on the outside (a pipe, the blocking
 * pool, completion handlers' operations in the kernel) is neither a
 * deadlock nor run past by the clock.
 */
#include "harness.h"
#include "det.h"

#include "weft/async.h"
#include "weft/chan.h"
#include "weft/exec.h"
#include "weft/future.h"
#include "weft/sync.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>

#define NSEEDS 1000
#define REPRO 100
#define MS 1000000LL

/* A race: the buggy body must fail under some seed within NSEEDS, fail
 * again under that seed REPRO times in a row, and the fixed body must pass
 * all NSEEDS.  Each run is a forked child with a runtime of its own, which
 * a sanitizer makes slow (TSan: about 55 ms a run, 110 s a race): there the
 * replays and the fixed body's seeds shrink to a tenth (SCALE) -- what
 * those builds check is the memory and the races of the runtime's code,
 * the same in every run; the search for the bug keeps every seed (it stops
 * at the first that fails). */
static void race(const char *name, det_body buggy, det_body fixed) {
    const int repro = SCALE(REPRO), fixed_seeds = SCALE(NSEEDS);
    uint64_t s = det_explore(name, buggy, NULL, NSEEDS);
    CHECK(s != 0);
    for (int i = 0; i < repro; i++) CHECK_EQ(det_run(buggy, NULL, s, NULL), DET_FAIL);
    printf("det: %s: seed %llu found it, replayed %d/%d\n", name, (unsigned long long)s, repro, repro);
    char fixed_name[64];
    snprintf(fixed_name, sizeof fixed_name, "%s (fixed)", name);
    CHECK_EQ(det_explore(fixed_name, fixed, NULL, (uint64_t)fixed_seeds), 0);
    printf("det: %s (fixed): %d/%d seeds passed\n", name, fixed_seeds, fixed_seeds);
}

/* go (spawn or fail): harness.h */

/* ---- 1. lost update: read, (a call that may switch), write, no lock ---- */

#define LU_WORKERS 3
#define LU_ROUNDS 4
static long lu_balance;
static weft_mutex lu_lock = WEFT_MUTEX_INIT;

static void *lu_deposit_buggy(void *arg) {
    (void)arg;
    for (int i = 0; i < LU_ROUNDS; i++) {
        long b = lu_balance;   /* read */
        weft_yield();          /* e.g. an audit log write */
        lu_balance = b + 10;   /* write: another deposit in between is lost */
    }
    return NULL;
}

static void *lu_deposit_fixed(void *arg) {
    (void)arg;
    for (int i = 0; i < LU_ROUNDS; i++) {
        weft_mutex_lock(&lu_lock);
        long b = lu_balance;
        weft_yield();
        lu_balance = b + 10;
        weft_mutex_unlock(&lu_lock);
    }
    return NULL;
}

static int lu_run(void *(*fn)(void *)) {
    lu_balance = 0;
    weft_thread *t[LU_WORKERS];
    for (int i = 0; i < LU_WORKERS; i++) t[i] = go(fn, NULL);
    for (int i = 0; i < LU_WORKERS; i++) weft_join(t[i], NULL);
    return lu_balance != 10L * LU_WORKERS * LU_ROUNDS;
}
static int lu_buggy(void *a) { (void)a; return lu_run(lu_deposit_buggy); }
static int lu_fixed(void *a) { (void)a; return lu_run(lu_deposit_fixed); }

TEST(race_lost_update) { race("lost update", lu_buggy, lu_fixed); }

/* ---- 2. check-then-act on a channel: "there is a job, so take it" ---- */

static weft_chan *ca_jobs;
static _Atomic int ca_starved; /* a consumer that saw a job and found none */

static void *ca_consumer_buggy(void *arg) {
    (void)arg;
    if (weft_chan_len(ca_jobs) > 0) {   /* check */
        weft_yield();                   /* e.g. it logs "taking a job" */
        int job;
        if (weft_chan_try_recv(ca_jobs, &job) != 0) atomic_fetch_add(&ca_starved, 1); /* act */
    }
    return NULL;
}

static void *ca_consumer_fixed(void *arg) {
    (void)arg;
    int job;
    if (weft_chan_try_recv(ca_jobs, &job) == 0) { /* check and act in one */
        weft_yield();
    }
    return NULL;
}

static int ca_run(void *(*fn)(void *)) {
    CHECK_EQ(weft_chan_create(&ca_jobs, sizeof(int), 4), 0);
    atomic_store(&ca_starved, 0);
    int job = 1;
    weft_thread *t[2];
    for (int i = 0; i < 2; i++) t[i] = go(fn, NULL);
    CHECK_EQ(weft_chan_send(ca_jobs, &job), 0); /* one job, two consumers */
    for (int i = 0; i < 2; i++) weft_join(t[i], NULL);
    weft_chan_free(ca_jobs);
    return atomic_load(&ca_starved) != 0;
}
static int ca_buggy(void *a) { (void)a; return ca_run(ca_consumer_buggy); }
static int ca_fixed(void *a) { (void)a; return ca_run(ca_consumer_fixed); }

TEST(race_check_then_act_channel) { race("check-then-act on a channel", ca_buggy, ca_fixed); }

/* ---- 3. missed wakeup: a flag tested outside the cond's mutex ---- */

static int mw_ready;
static weft_mutex mw_lock = WEFT_MUTEX_INIT;
static weft_cond mw_cond = WEFT_COND_INIT;

static void *mw_waiter_buggy(void *arg) {
    (void)arg;
    if (!mw_ready) {                    /* the flag, without the mutex */
        weft_yield();                   /* e.g. it records that it will wait */
        weft_mutex_lock(&mw_lock);
        /* a signal sent since the test is lost: this waits for the next */
        int r = weft_cond_wait_until(&mw_cond, &mw_lock, weft_now() + 1000 * MS);
        weft_mutex_unlock(&mw_lock);
        return (void *)(intptr_t)r;
    }
    return NULL;
}

static void *mw_setter_buggy(void *arg) {
    (void)arg;
    weft_yield(); /* it has work of its own first */
    mw_ready = 1;
    weft_cond_signal(&mw_cond);
    return NULL;
}

static void *mw_waiter_fixed(void *arg) {
    (void)arg;
    int r = 0;
    weft_mutex_lock(&mw_lock);
    while (!mw_ready && r == 0) {
        weft_yield();
        r = weft_cond_wait_until(&mw_cond, &mw_lock, weft_now() + 1000 * MS);
    }
    weft_mutex_unlock(&mw_lock);
    return (void *)(intptr_t)r;
}

static void *mw_setter_fixed(void *arg) {
    (void)arg;
    weft_yield();
    weft_mutex_lock(&mw_lock);
    mw_ready = 1;
    weft_cond_signal(&mw_cond);
    weft_mutex_unlock(&mw_lock);
    return NULL;
}

static int mw_run(void *(*waiter)(void *), void *(*setter)(void *)) {
    mw_ready = 0;
    weft_thread *w = go(waiter, NULL), *s = go(setter, NULL);
    void *r;
    weft_join(s, NULL);
    weft_join(w, &r);
    return (intptr_t)r == -ETIMEDOUT; /* it slept through the signal */
}
static int mw_buggy(void *a) { (void)a; return mw_run(mw_waiter_buggy, mw_setter_buggy); }
static int mw_fixed(void *a) { (void)a; return mw_run(mw_waiter_fixed, mw_setter_fixed); }

TEST(race_missed_wakeup) { race("missed wakeup", mw_buggy, mw_fixed); }

/* ---- 4. double close: two workers end, each closes the results channel ---- */

static weft_chan *dc_results;
static int dc_closed;
static _Atomic int dc_close_errors;

static void *dc_worker_buggy(void *arg) {
    int v = (int)(intptr_t)arg;
    weft_chan_send(dc_results, &v);
    if (!dc_closed) {            /* "the last one out closes" -- checked racily */
        weft_yield();            /* e.g. it flushes its own stats */
        dc_closed = 1;
        if (weft_chan_close(dc_results) != 0) atomic_fetch_add(&dc_close_errors, 1);
    }
    return NULL;
}

static weft_once_t dc_once = WEFT_ONCE_INIT;
static void dc_close_once(void) {
    if (weft_chan_close(dc_results) != 0) atomic_fetch_add(&dc_close_errors, 1);
}
static void *dc_worker_fixed(void *arg) {
    int v = (int)(intptr_t)arg;
    weft_chan_send(dc_results, &v);
    weft_yield();
    weft_once(&dc_once, dc_close_once);
    return NULL;
}

static int dc_run(void *(*fn)(void *)) {
    CHECK_EQ(weft_chan_create(&dc_results, sizeof(int), 4), 0);
    dc_closed = 0;
    atomic_store(&dc_close_errors, 0);
    weft_thread *t[2];
    for (int i = 0; i < 2; i++) t[i] = go(fn, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) weft_join(t[i], NULL);
    weft_chan_free(dc_results);
    return atomic_load(&dc_close_errors) != 0; /* -EPIPE: it was closed twice */
}
static int dc_buggy(void *a) { (void)a; return dc_run(dc_worker_buggy); }
static int dc_fixed(void *a) { (void)a; return dc_run(dc_worker_fixed); }

TEST(race_double_close) { race("double close", dc_buggy, dc_fixed); }

/* ---- 5. deadline race: a reply that lands as the caller gives up ----
 * The caller waits for a reply with a deadline; on time-out it hands the
 * reply buffer back to its pool.  The backend answers in about the same
 * time.  Buggy: the backend writes into the buffer whatever happened;
 * fixed: caller and backend settle who owns it with one CAS. */

enum { DL_PENDING, DL_ANSWERED, DL_ABANDONED };
static struct { _Atomic int state; int released; int written_after_release; int value; } dl;
static weft_sem dl_done;

static void *dl_backend_buggy(void *arg) {
    (void)arg;
    weft_sleep(10 * MS);            /* the backend's latency */
    if (dl.released) dl.written_after_release = 1;
    dl.value = 42;                  /* writes the reply: the buffer may be gone */
    atomic_store(&dl.state, DL_ANSWERED);
    weft_sem_release(&dl_done);
    return NULL;
}

static void *dl_backend_fixed(void *arg) {
    (void)arg;
    weft_sleep(10 * MS);
    int exp = DL_PENDING;
    if (atomic_compare_exchange_strong(&dl.state, &exp, DL_ANSWERED)) { /* the buffer is still ours */
        if (dl.released) dl.written_after_release = 1;
        dl.value = 42;
        weft_sem_release(&dl_done);
    }
    return NULL;
}

static int dl_caller(int fixed) {
    int r = weft_sem_acquire_until(&dl_done, weft_now() + 10 * MS); /* the same 10 ms */
    if (r == -ETIMEDOUT) {
        weft_yield(); /* e.g. it logs the time-out */
        if (fixed) {
            int exp = DL_PENDING;
            if (!atomic_compare_exchange_strong(&dl.state, &exp, DL_ABANDONED)) {
                weft_sem_acquire(&dl_done); /* answered meanwhile: take the reply after all */
                return 0;
            }
        }
        dl.released = 1; /* the buffer goes back to the pool */
    }
    return 0;
}

static int dl_run(void *(*backend)(void *), int fixed) {
    memset(&dl, 0, sizeof dl);
    CHECK_EQ(weft_sem_init(&dl_done, 0), 0);
    weft_thread *b = go(backend, NULL);
    dl_caller(fixed);
    weft_join(b, NULL);
    return dl.written_after_release;
}
static int dl_buggy(void *a) { (void)a; return dl_run(dl_backend_buggy, 0); }
static int dl_fixed(void *a) { (void)a; return dl_run(dl_backend_fixed, 1); }

TEST(race_deadline) { race("deadline race", dl_buggy, dl_fixed); }

/* ---- the same seed, the same trace ---- */

/* A body with some of everything: spawns, yields, a mutex, a channel,
 * a select, sleeps on the virtual clock. */
static weft_chan *mix_a, *mix_b;
static void *mix_worker(void *arg) {
    intptr_t k = (intptr_t)arg;
    for (int i = 0; i < 5; i++) {
        weft_mutex_lock(&lu_lock);
        lu_balance += k;
        weft_yield();
        weft_mutex_unlock(&lu_lock);
        int v = (int)k;
        weft_chan_send(k & 1 ? mix_a : mix_b, &v);
        weft_sleep((int64_t)(k + i) * MS);
    }
    return NULL;
}
static int mix_body(void *arg) {
    (void)arg;
    CHECK_EQ(weft_chan_create(&mix_a, sizeof(int), 2), 0);
    CHECK_EQ(weft_chan_create(&mix_b, sizeof(int), 2), 0);
    weft_thread *t[6];
    for (int i = 0; i < 6; i++) t[i] = go(mix_worker, (void *)(intptr_t)i);
    for (int got = 0; got < 30; got++) {
        int va, vb;
        weft_case cs[2] = {{.chan = mix_a, .op = WEFT_CASE_RECV, .msg = &va},
                           {.chan = mix_b, .op = WEFT_CASE_RECV, .msg = &vb}};
        CHECK(weft_select(cs, 2, 0) >= 0);
    }
    for (int i = 0; i < 6; i++) weft_join(t[i], NULL);
    weft_chan_free(mix_a);
    weft_chan_free(mix_b);
    return 0;
}

static char *read_file(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    return slurp_fd(fd);
}

TEST(same_seed_same_trace) {
    char p1[] = "/tmp/weft-det-trace-XXXXXX", p2[] = "/tmp/weft-det-trace-XXXXXX", p3[] = "/tmp/weft-det-trace-XXXXXX";
    int f1 = mkstemp(p1), f2 = mkstemp(p2), f3 = mkstemp(p3);
    CHECK(f1 >= 0 && f2 >= 0 && f3 >= 0);
    close(f1);
    close(f2);
    close(f3);
    CHECK_EQ(det_run(mix_body, NULL, 7, p1), DET_PASS);
    CHECK_EQ(det_run(mix_body, NULL, 7, p2), DET_PASS);
    CHECK_EQ(det_run(mix_body, NULL, 8, p3), DET_PASS);
    char *a = read_file(p1), *b = read_file(p2), *c = read_file(p3);
    CHECK(strlen(a) > 1000);
    CHECK(strstr(a, "pick t") != NULL);
    CHECK(strstr(a, "jump +") != NULL);
    CHECK_EQ(strcmp(a, b), 0); /* byte for byte */
    CHECK(strcmp(a, c) != 0);  /* and the seed matters */
    int lines = 0;
    for (const char *x = a; *x; x++) lines += *x == '\n';
    printf("det: seed 7 twice: identical traces (%zu bytes, %d lines); seed 8 differs\n", strlen(a), lines);
    free(a);
    free(b);
    free(c);
    unlink(p1);
    unlink(p2);
    unlink(p3);
}

/* ---- the mode's basics ---- */

static int basics_body(void *arg) {
    (void)arg;
    weft_stats s;
    weft_stats_get(&s);
    CHECK_EQ(s.carriers, 1);
    CHECK_EQ(weft_id(weft_self()), 1); /* the root: ids restart at 1 */
    int64_t t0 = weft_now();
    CHECK_EQ(t0 > 0, 1);
    struct timespec r0;
    clock_gettime(CLOCK_MONOTONIC, &r0);
    CHECK_EQ(weft_sleep(3600LL * 1000 * MS), 0); /* an hour, virtually */
    struct timespec r1;
    clock_gettime(CLOCK_MONOTONIC, &r1);
    CHECK(weft_now() - t0 >= 3600LL * 1000 * MS);
    CHECK(r1.tv_sec - r0.tv_sec < 5); /* and not for real */
    /* a deadline expires on the virtual clock too */
    weft_sem s0;
    weft_sem_init(&s0, 0);
    CHECK_EQ(weft_sem_acquire_until(&s0, weft_now() + 60LL * 1000 * MS), -ETIMEDOUT);
    return 0;
}

TEST(mode_basics) { CHECK_EQ(det_run(basics_body, NULL, 1, NULL), DET_PASS); }

TEST(config_errors) {
    weft_runtime_opts bad = {.deterministic = 7};
    CHECK_EQ(weft_init(&bad), -EINVAL);
    setenv("WEFT_DETERMINISTIC", "12x", 1);
    CHECK_EQ(weft_init(NULL), -EINVAL);
    unsetenv("WEFT_DETERMINISTIC");
    weft_runtime_opts notrace = {.deterministic = WEFT_DET_ON, .trace = "/nonexistent-dir/trace"};
    CHECK_EQ(weft_init(&notrace), -ENOENT);
    /* and after those, a good start */
    weft_runtime_opts ok = {.deterministic = WEFT_DET_ON, .deterministic_seed = 3};
    CHECK_EQ(weft_init(&ok), 0);
    weft_shutdown();
}

/* ---- a deadlock is reported, not idled on ---------------------------------- */

/* Runs body under `seed` in a child, as det_run does, with its stderr in
 * `err`; returns its wait status (a hang ends at DET_TIMEOUT_S: SIGALRM). */
static int det_run_capture(det_body body, void *arg, uint64_t seed, char *err, size_t n) {
    int ep[2];
    CHECK_EQ(pipe(ep), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(ep[1], 2);
        close(ep[0]);
        close(ep[1]);
        alarm(DET_TIMEOUT_S);
        weft_runtime_opts cfg = {.deterministic = WEFT_DET_ON, .deterministic_seed = seed};
        if (weft_init(&cfg) != 0) _exit(3);
        struct det_root_ r = {body, arg, 0};
        weft_thread *t;
        weft_thread_opts a = {.name = "det-root"};
        if (weft_spawn(&t, det_root_, &r, &a) != 0 || weft_join(t, NULL) != 0) _exit(3);
        weft_shutdown();
        _exit(r.result ? DET_FAIL : DET_PASS);
    }
    close(ep[1]);
    size_t k = 0;
    ssize_t m;
    while (k < n - 1 && (m = read(ep[0], err + k, n - 1 - k)) > 0) k += (size_t)m;
    err[k] = 0;
    char sink[4096];
    while (read(ep[0], sink, sizeof sink) > 0) {} /* the rest: the child must not block on it */
    close(ep[0]);
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    return st;
}

static weft_mutex lo_m[2];

static void *lo_locker(void *arg) {
    int first = (int)(intptr_t)arg;
    weft_mutex_lock(&lo_m[first]);
    weft_yield(); /* the other may take its first lock here */
    weft_mutex_lock(&lo_m[!first]);
    weft_mutex_unlock(&lo_m[!first]);
    weft_mutex_unlock(&lo_m[first]);
    return NULL;
}

/* Two vthreads taking two locks in opposite orders: some seeds deadlock. */
static int lock_order_body(void *arg) {
    (void)arg;
    weft_mutex_init(&lo_m[0]);
    weft_mutex_init(&lo_m[1]);
    weft_thread *a, *b;
    weft_thread_opts na = {.name = "locks-0-1"}, nb = {.name = "locks-1-0"};
    CHECK_EQ(weft_spawn(&a, lo_locker, (void *)0, &na), 0);
    CHECK_EQ(weft_spawn(&b, lo_locker, (void *)1, &nb), 0);
    CHECK_EQ(weft_join(a, NULL), 0);
    CHECK_EQ(weft_join(b, NULL), 0);
    return 0;
}

TEST(deadlock_is_reported_with_a_dump) {
    static char err[1 << 16];
    int deadlocked = 0, passed = 0;
    for (uint64_t seed = 1; seed <= 16 && !(deadlocked >= 2 && passed >= 1); seed++) {
        int st = det_run_capture(lock_order_body, NULL, seed, err, sizeof err);
        if (WIFEXITED(st) && WEXITSTATUS(st) == DET_PASS) {
            passed++;
            CHECK(strstr(err, "deadlock") == NULL);
            continue;
        }
        /* not a hang (SIGALRM) and not a pass: the report and the dump */
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 2)
            fprintf(stderr, "seed %llu: status %#x, stderr:\n%s\n", (unsigned long long)seed, st, err);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 2);
        CHECK(strstr(err, "weft: deadlock (deterministic mode, seed ") != NULL);
        CHECK(strstr(err, "weft thread dump") != NULL);
        CHECK(strstr(err, "locks-0-1") != NULL && strstr(err, "locks-1-0") != NULL);
        /* "parked on ... for X s": on the virtual clock, as the dump's now */
        CHECK(strstr(err, "parked on") != NULL);
        CHECK(strstr(err, "for -") == NULL);
        deadlocked++;
    }
    CHECK(deadlocked >= 1); /* (the seeds that deadlock are fixed: 6 and 7 among them) */
    CHECK(passed >= 1);
}

/* Not a deadlock: every vthread waits, no timer is pending, but what they
 * wait for comes from outside -- a pipe a platform thread writes after
 * longer than the deadlock's real-time grace, a blocking-pool job as slow. */
static int dl_pipe[2];

static void *late_writer(void *arg) {
    (void)arg;
    struct timespec ts = {1, 500 * 1000 * 1000}; /* past WEFT__DET_DEADLOCK_NS */
    nanosleep(&ts, NULL);
    CHECK_EQ(write(dl_pipe[1], "x", 1), 1);
    return NULL;
}

static void *slow_job(void *arg) {
    struct timespec ts = {1, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return arg;
}

static int outside_body(void *arg) {
    (void)arg;
    CHECK_EQ(pipe(dl_pipe), 0);
    pthread_t w;
    CHECK_EQ(pthread_create(&w, NULL, late_writer, NULL), 0);
    char c;
    CHECK_EQ(weft_read(dl_pipe[0], &c, 1), 1);
    pthread_join(w, NULL);
    void *r = NULL;
    CHECK_EQ(weft_blocking(slow_job, (void *)7, &r), 0);
    CHECK(r == (void *)7);
    return 0;
}

TEST(waiting_on_the_outside_is_no_deadlock) {
    static char err[1 << 14];
    int st = det_run_capture(outside_body, NULL, 1, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "status %#x, stderr:\n%s\n", st, err);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

/* The dump's "parked since" and its now are on one clock: the virtual one
 * (a real park time against the virtual now read "since -2437 s"). */
static weft_sem ps_sem;
static void *ps_waiter(void *arg) {
    (void)arg;
    weft_sem_acquire(&ps_sem);
    return NULL;
}

static int parked_since_body(void *arg) {
    (void)arg;
    weft_sem_init(&ps_sem, 0);
    weft_thread *t;
    weft_thread_opts a = {.name = "ps-waiter"};
    CHECK_EQ(weft_spawn(&t, ps_waiter, NULL, &a), 0);
    CHECK_EQ(weft_sleep(5 * MS), 0); /* it parks; 5 ms pass on the virtual clock */
    int fd = memfd_create("dump", MFD_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(weft_dump(fd, WEFT_DUMP_TEXT), 0);
    static char buf[1 << 16];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(n > 0);
    buf[n > 0 ? n : 0] = 0;
    close(fd);
    char *line = strstr(buf, "\"ps-waiter\" parked on");
    CHECK(line != NULL);
    char *since = line ? strstr(line, " for ") : NULL; /* "parked on semaphore for X s" */
    CHECK(since != NULL);
    double s = since ? atof(since + 5) : -1;
    if (s < 0.004 || s > 1.0) fprintf(stderr, "%.200s\n", line ? line : buf);
    CHECK(s >= 0.004); /* 5 ms of virtual time, to the dump's precision */
    CHECK(s < 1.0);
    weft_sem_release(&ps_sem);
    CHECK_EQ(weft_join(t, NULL), 0);
    return 0;
}

TEST(dump_parked_since_on_the_virtual_clock) { CHECK_EQ(det_run(parked_since_body, NULL, 1, NULL), DET_PASS); }

/* Nor is a vthread waiting for a task that a new pool thread runs for
 * longer than the grace. */
static void *slow_task(void *arg) {
    struct timespec ts = {1, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return arg;
}

static int pool_body(void *arg) {
    (void)arg;
    weft_executor *e;
    CHECK_EQ(weft_executor_create_fixed(&e, 1, 0, WEFT_REJECT_ABORT), 0);
    weft_future *f = weft_submit(e, slow_task, (void *)9);
    void *v = NULL;
    CHECK_EQ(weft_future_get(f, &v, 0), 0);
    CHECK(v == (void *)9);
    weft_future_unref(f);
    CHECK_EQ(weft_executor_close(e), 0);
    return 0;
}

TEST(waiting_on_a_pool_task_is_no_deadlock) {
    static char err[1 << 14];
    int st = det_run_capture(pool_body, NULL, 1, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "status %#x, stderr:\n%s\n", st, err);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}

/* Completion handlers wait for the kernel as vthreads do: a poll a handler
 * waits on, with a deadline a virtual second away, that the kernel answers
 * 1 ms (real) later -- a timerfd: no other process or thread has to run for
 * it -- gets its readiness, not -ETIMEDOUT.  The clock gives I/O in the
 * kernel WEFT__DET_IO_WAIT_NS (5 ms) before it jumps; a dispatcher's own
 * operations count (before, with no vthread in a read, the clock jumped to
 * the deadline at once: weft-httpd --model async's TLS handshakes with a
 * client in another process all timed out so, in a loaded CI run). */
static weft_sem hk_done;
static ssize_t hk_res;

static void hk_ready(ssize_t r, void *ctx) {
    (void)ctx;
    hk_res = r;
    weft_sem_release(&hk_done);
}

static int handler_kernel_body(void *arg) {
    (void)arg;
    weft_sem_init(&hk_done, 0);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    CHECK(tfd >= 0);
    for (int i = 0; i < 20; i++) {
        struct itimerspec its = {.it_value = {0, 1000 * 1000}};
        CHECK_EQ(timerfd_settime(tfd, 0, &its, NULL), 0);
        weft_async_opts o = {.deadline = weft_now() + 1000 * MS};
        CHECK_EQ(weft_poll_async(tfd, POLLIN, hk_ready, NULL, &o), 0);
        weft_sem_acquire(&hk_done); /* (a park, not I/O: only the dispatcher waits on the kernel) */
        if (hk_res != POLLIN) fprintf(stderr, "round %d: the poll's result %zd\n", i, hk_res);
        CHECK_EQ(hk_res, POLLIN);
        uint64_t ticks;
        CHECK_EQ(read(tfd, &ticks, sizeof ticks), (ssize_t)sizeof ticks);
    }
    close(tfd);
    return 0;
}

TEST(handlers_waiting_on_the_kernel_hold_the_clock) {
    static char err[1 << 14];
    int st = det_run_capture(handler_kernel_body, NULL, 1, err, sizeof err);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "status %#x, stderr:\n%s\n", st, err);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
}
