/*
 * Handles used after the call that ended them (issue 23, item 2): a
 * vthread joined twice, joined after a detach, or named by a stale handle
 * whose stack a new vthread now runs on, is refused with -ESRCH and never
 * touches that new vthread; a scope, future, file or executor ended twice
 * stops the program with a message naming the call (or, under ASan, is
 * reported by ASan as the use after free it is).
 */
#include "harness.h"
#include "proc.h"
#include "sched/sched.h" /* weft__thread_of: a handle's descriptor; join_state, rstate */

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

static void *plus_one(void *arg) { return (void *)((intptr_t)arg + 1); }

static weft_thread *spawn(void *(*fn)(void *), void *arg) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, fn, arg, NULL), 0);
    return t;
}

/* Until t has finished and its carrier is done with it (join_state "done"). */
static void wait_done(weft_thread *t) {
    weft_thread *d = weft__thread_of(t);
    while ((atomic_load(&d->join_state) & 0xff) != 2) {
        if (weft_self()) weft_yield();
        else usleep(50);
    }
}

/* Runs fn(arg) in a vthread (the runtime's carrier caches reuse a stack at
 * once there: the next spawn gets the one just freed) and returns its result. */
static void *on_vthread(void *(*fn)(void *), void *arg) {
    weft_thread *t = spawn(fn, arg);
    void *r = (void *)-1;
    CHECK_EQ(weft_join(t, &r), 0);
    return r;
}

/* ---- vthread handles ---------------------------------------------------- */

/* Each round: a join, then every call with the joined handle refused, then
 * two spawns that must get two stacks and each return its own result.
 * Before the fix the second join returned 0 and put the stack on the free
 * list again: the next two spawns shared it, and the second SIGILLed. */
static void *join_twice_rounds(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        weft_thread *t = spawn(plus_one, (void *)(intptr_t)i);
        void *r = NULL;
        CHECK_EQ(weft_join(t, &r), 0);
        CHECK_EQ((intptr_t)r, i + 1);
        CHECK_EQ(weft_join(t, &r), -ESRCH);
        CHECK_EQ(weft_join(t, NULL), -ESRCH);
        CHECK_EQ(weft_detach(t), -ESRCH);
        CHECK_EQ(weft_cancel(t), -ESRCH);
        CHECK_EQ(weft_unpark(t), -ESRCH);
        CHECK_EQ(weft_id(t), 0);
        CHECK(strcmp(weft_name(t), "") == 0);
        weft_thread *a = spawn(plus_one, (void *)(intptr_t)(1000 + i));
        weft_thread *b = spawn(plus_one, (void *)(intptr_t)(2000 + i));
        CHECK(weft__thread_of(a) != weft__thread_of(b));
        void *ra = NULL, *rb = NULL;
        CHECK_EQ(weft_join(b, &rb), 0);
        CHECK_EQ(weft_join(a, &ra), 0);
        CHECK_EQ((intptr_t)ra, 1001 + i);
        CHECK_EQ((intptr_t)rb, 2001 + i);
        CHECK_EQ(weft_join(a, NULL), -ESRCH);
        CHECK_EQ(weft_join(b, NULL), -ESRCH);
    }
    return NULL;
}

TEST(join_twice_is_refused) {
    join_twice_rounds((void *)(intptr_t)20);          /* a platform thread joining */
    on_vthread(join_twice_rounds, (void *)(intptr_t)200); /* a vthread joining */
}

/* A stale handle whose stack the next spawn took: joining it must not reap
 * that vthread (before: it returned 0 with the new vthread's result, and
 * the new vthread's own join freed its stack a second time). */
static void *stale_reap_rounds(void *arg) {
    (void)arg;
    int reused = 0;
    for (int i = 0; i < 100; i++) {
        weft_thread *t = spawn(plus_one, (void *)(intptr_t)i);
        CHECK_EQ(weft_join(t, NULL), 0);
        weft_thread *u = spawn(plus_one, (void *)(intptr_t)(5000 + i));
        reused += weft__thread_of(u) == weft__thread_of(t);
        wait_done(u);
        void *r = NULL;
        CHECK_EQ(weft_join(t, &r), -ESRCH);
        CHECK(r == NULL);
        CHECK_EQ(weft_detach(t), -ESRCH);
        CHECK_EQ(weft_join(u, &r), 0);
        CHECK_EQ((intptr_t)r, 5001 + i);
        CHECK(u != t); /* the same descriptor, maybe, but another generation */
    }
    return (void *)(intptr_t)reused;
}

TEST(stale_handle_does_not_reap_the_next_vthread_on_its_stack) {
    int reused = (int)(intptr_t)on_vthread(stale_reap_rounds, NULL);
    printf("the next spawn took the joined vthread's stack in %d of 100 rounds\n", reused);
    CHECK(reused > 0); /* (else this test proved nothing) */
}

/* A stale handle must not cancel or unpark the vthread now on its stack. */
static atomic_int sc_release;
static void *sc_waiter(void *arg) {
    (void)arg;
    while (!atomic_load(&sc_release)) weft_park(0); /* (cancelled: returns at once; spins) */
    return (void *)(intptr_t)weft_cancelled();
}

static void *stale_cancel_rounds(void *arg) {
    (void)arg;
    int reused = 0;
    for (int i = 0; i < 50; i++) {
        atomic_store(&sc_release, 0);
        weft_thread *t = spawn(plus_one, NULL);
        CHECK_EQ(weft_join(t, NULL), 0);
        weft_thread *u = spawn(sc_waiter, NULL);
        reused += weft__thread_of(u) == weft__thread_of(t);
        CHECK_EQ(weft_cancel(t), -ESRCH);
        CHECK_EQ(weft_unpark(t), -ESRCH);
        atomic_store(&sc_release, 1);
        CHECK_EQ(weft_unpark(u), 0);
        void *r = (void *)-1;
        CHECK_EQ(weft_join(u, &r), 0);
        CHECK(r == NULL); /* never cancelled */
    }
    return (void *)(intptr_t)reused;
}

TEST(stale_handle_does_not_cancel_or_wake_the_next_vthread) {
    int reused = (int)(intptr_t)on_vthread(stale_cancel_rounds, NULL);
    CHECK(reused > 0);
}

/* Detach, then join: refused whether the vthread had finished (it was
 * freed by the detach: before the fix the join freed it again, returning
 * 0) or still runs (-EINVAL while it runs, -ESRCH once it has ended). */
static atomic_int dj_release;
static void *dj_wait(void *arg) {
    (void)arg;
    while (!atomic_load(&dj_release)) weft_sleep(100 * 1000);
    return NULL;
}

TEST(join_after_detach_is_refused) {
    for (int i = 0; i < 50; i++) {
        weft_thread *t = spawn(plus_one, NULL);
        wait_done(t);
        CHECK_EQ(weft_detach(t), 0); /* frees it */
        CHECK_EQ(weft_join(t, NULL), -ESRCH);
        CHECK_EQ(weft_detach(t), -ESRCH);
        CHECK_EQ(weft_cancel(t), -ESRCH);
    }
    atomic_store(&dj_release, 0);
    weft_thread *t = spawn(dj_wait, NULL);
    CHECK_EQ(weft_detach(t), 0);
    CHECK_EQ(weft_join(t, NULL), -EINVAL); /* detached, still running */
    CHECK_EQ(weft_detach(t), -EINVAL);
    weft_thread *d = weft__thread_of(t);
    atomic_store(&dj_release, 1);
    /* it frees itself as it ends: its handle goes stale then */
    while (weft_join(t, NULL) != -ESRCH) usleep(100);
    (void)d;
}

/* Two joiners of one vthread at once, many times: exactly one reaps it;
 * the other is told -ESRCH (it came after) or -EINVAL (the first waits). */
static weft_thread *rj_target;
static _Atomic int rj_res[2];
static atomic_int rj_go;
static void *rj_joiner(void *arg) {
    int me = (int)(intptr_t)arg;
    while (atomic_load(&rj_go) == 0) weft_yield();
    void *r = NULL;
    int x = weft_join(rj_target, &r);
    if (x == 0 && (intptr_t)r != 8) x = -9999; /* not its result */
    atomic_store(&rj_res[me], x);
    return NULL;
}

TEST(racing_joins_reap_once) {
    int rounds = SCALE(500), zero_both = 0, got_esrch = 0, got_einval = 0;
    for (int i = 0; i < rounds; i++) {
        rj_target = spawn(plus_one, (void *)(intptr_t)7);
        if (i % 2) wait_done(rj_target); /* half the rounds: finished before either joins */
        atomic_store(&rj_go, 0);
        weft_thread *a = spawn(rj_joiner, (void *)(intptr_t)0), *b = spawn(rj_joiner, (void *)(intptr_t)1);
        atomic_store(&rj_go, 1);
        CHECK_EQ(weft_join(a, NULL), 0);
        CHECK_EQ(weft_join(b, NULL), 0);
        int x = atomic_load(&rj_res[0]), y = atomic_load(&rj_res[1]);
        CHECK(x != -9999 && y != -9999);
        CHECK((x == 0) != (y == 0)); /* exactly one reaped it */
        int other = x == 0 ? y : x;
        if (other != -ESRCH && other != -EINVAL) fprintf(stderr, "round %d: joins gave %d and %d\n", i, x, y);
        CHECK(other == -ESRCH || other == -EINVAL);
        zero_both += x == 0 && y == 0;
        got_esrch += other == -ESRCH;
        got_einval += other == -EINVAL;
    }
    printf("%d rounds: the loser saw -ESRCH %d times, -EINVAL %d times\n", rounds, got_esrch, got_einval);
    CHECK_EQ(zero_both, 0);
}

/* weft_self is the handle weft_spawn gave; weft_id and weft_name read
 * through it while the vthread lives. */
static void *self_fn(void *arg) {
    weft_thread **out = arg;
    *out = weft_self();
    return NULL;
}

TEST(self_is_the_spawned_handle) {
    weft_thread *seen = NULL, *t;
    weft_thread_opts a = {.name = "selfie"};
    CHECK_EQ(weft_spawn(&t, self_fn, &seen, &a), 0);
    wait_done(t);
    CHECK(seen == t);
    CHECK(weft_id(t) > 0);
    CHECK(strcmp(weft_name(t), "selfie") == 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    CHECK_EQ(weft_id(t), 0);
}

/* ---- heap objects ended twice --------------------------------------------- */

/* The child must have been stopped at the second call: by weft's message
 * naming `call` and the child's function `site`, then abort -- or, under
 * ASan or TSan, by the sanitizer's heap-use-after-free report (the freed
 * memory stays poisoned: the check's own read is the use it reports). */
static void expect_stopped(void (*fn)(void *), const char *call, const char *what, const char *site) {
    int st;
    char *err = fork_stderr(fn, NULL, &st);
    char want[128];
    snprintf(want, sizeof want, "weft: %s(0x", call);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)what;
    (void)site;
    if (!strstr(err, "heap-use-after-free")) fprintf(stderr, "child's stderr:\n%s\n", err);
    CHECK(strstr(err, "heap-use-after-free") != NULL);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
#else
    if (!strstr(err, want) || !strstr(err, what) || !strstr(err, site)) fprintf(stderr, "child's stderr:\n%s\n", err);
    CHECK(strstr(err, want) != NULL);
    CHECK(strstr(err, what) != NULL);
    CHECK(strstr(err, "; called from ") != NULL);
    CHECK(strstr(err, site) != NULL);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
#endif
}

static int task_ok(void *arg, void **result) {
    (void)arg;
    *result = NULL;
    return 0;
}

__attribute__((noinline)) static void scope_twice(void *unused) {
    weft_scope *s;
    if (weft_scope_create(&s, WEFT_SCOPE_ALL, 0) != 0 || !weft_fork(s, task_ok, NULL) || weft_scope_join(s) != 0)
        _exit(3);
    weft_scope_close(s);
    weft_scope_close(s);
    _exit(4); /* not reached */
}

TEST(scope_closed_twice_stops_the_program) {
    expect_stopped(scope_twice, "weft_scope_close", "not an open scope", "scope_twice");
}

__attribute__((noinline)) static void future_twice(void *unused) {
    weft_future *f;
    if (weft_future_create(&f) != 0 || weft_future_complete(f, NULL) != 0) _exit(3);
    weft_future_unref(f);
    weft_future_unref(f);
    _exit(4);
}

TEST(future_unreferenced_twice_stops_the_program) {
    expect_stopped(future_twice, "weft_future_unref", "no reference left", "future_twice");
}

__attribute__((noinline)) static void file_twice(void *unused) {
    char path[] = "/tmp/weft-test-handles-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) _exit(3);
    close(fd);
    weft_file *f;
    if (weft_file_create(&f, path, WEFT_WRITE | WEFT_DELETE_ON_CLOSE, 0600, NULL) != 0 || weft_file_write(f, "x", 1, 0) != 1 || weft_file_close(f) != 0) _exit(3);
    weft_file_close(f);
    _exit(4);
}

TEST(file_closed_twice_stops_the_program) {
    expect_stopped(file_twice, "weft_file_close", "not an open file", "file_twice");
}

static void *exec_task(void *arg) { return arg; }

__attribute__((noinline)) static void executor_twice(void *unused) {
    weft_executor *e;
    if (weft_executor_create_fixed(&e, 2, 0, WEFT_REJECT_ABORT) != 0) _exit(3);
    weft_future *f = weft_submit(e, exec_task, NULL);
    if (!f || weft_future_get(f, NULL, 0) != 0) _exit(3);
    weft_future_unref(f);
    if (weft_executor_close(e) != 0) _exit(3);
    weft_executor_close(e);
    _exit(4);
}

TEST(executor_closed_twice_stops_the_program) {
    expect_stopped(executor_twice, "weft_executor_close", "not an open executor", "executor_twice");
}

/* A close while another close of the same file is under way: -EBADF
 * (docs/errors.md), and the first close still completes the file's
 * operations.  The first close is kept waiting by a write's completion
 * handler that the file's flusher runs itself (its executor's one thread
 * and one queue slot are taken: WEFT_REJECT_CALLER_RUNS) and that holds
 * until the test lets it go. */
static weft_file *cc_file;
static atomic_int cc_release, cc_held;
static _Atomic ssize_t cc_res = -1;
static void *cc_close(void *arg) {
    (void)arg;
    return (void *)(intptr_t)weft_file_close(cc_file);
}
static void *cc_block(void *arg) {
    (void)arg;
    while (!atomic_load(&cc_release)) weft_sleep(200 * 1000);
    return NULL;
}
static void cc_done(ssize_t res, void *ctx) {
    (void)ctx;
    atomic_store(&cc_res, res);
    atomic_store(&cc_held, 1);
    while (!atomic_load(&cc_release)) weft_sleep(200 * 1000);
}

TEST(file_close_during_a_close_is_ebadf) {
    char path[] = "/tmp/weft-test-handles-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    weft_executor *e;
    CHECK_EQ(weft_executor_create_fixed(&e, 1, 1, WEFT_REJECT_CALLER_RUNS), 0);
    weft_future *b1 = weft_submit(e, cc_block, NULL), *b2 = weft_submit(e, cc_block, NULL);
    CHECK(b1 && b2); /* one runs, one waits: the next is refused, and runs on its submitter */
    weft_file_opts o = {.executor = e};
    CHECK_EQ(weft_file_create(&cc_file, path, WEFT_WRITE | WEFT_DELETE_ON_CLOSE, 0600, &o), 0);
    weft_future *w = weft_file_write_async(cc_file, "abc", 3, 0, cc_done, NULL);
    CHECK(w != NULL);
    while (!atomic_load(&cc_held)) usleep(100); /* the flusher is in the handler */
    weft_thread *t = spawn(cc_close, NULL);
    /* parked in its wait for the flusher: closing is set */
    while (atomic_load(&weft__thread_of(t)->rstate) != WEFT__RS_PARKED) usleep(100);
    CHECK_EQ(weft_file_close(cc_file), -EBADF);
    CHECK_EQ(weft_file_close_now(cc_file), -EBADF);
    atomic_store(&cc_release, 1);
    void *r = (void *)-1;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, 0);
    CHECK_EQ(atomic_load(&cc_res), 3);
    void *count = NULL;
    CHECK_EQ(weft_future_get(w, &count, 0), 0);
    CHECK_EQ((intptr_t)count, 3);
    weft_future_unref(w);
    weft_future_unref(b1);
    weft_future_unref(b2);
    CHECK_EQ(weft_executor_close(e), 0);
    CHECK(access(path, F_OK) != 0); /* DELETE_ON_CLOSE: the first close finished the job */
}
