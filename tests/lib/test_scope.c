/* Structured concurrency: the three policies, deadlines, nesting,
 * cancellation through owners (transitively), close, the article's
 * handleOrder, races, and the dump's tree. */
#include "harness.h"
#include "proc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#define HANDLE_ORDER_NO_MAIN
#include "../../examples/handle_order.c"

#define MS 1000000LL
/* Longer than any test may run (the harness's timeout): a task that sleeps
 * this long ends early only if something cancels it or a deadline ends it,
 * however slow the machine. */
#define FOREVER_MS (3600 * 1000LL)

/* A scope the test needs: opened, or the test fails here. */
static weft_scope *scope_new(weft_scope_policy policy, int64_t deadline_ns) {
    weft_scope *s = NULL;
    CHECK_EQ(weft_scope_create(&s, policy, deadline_ns), 0);
    return s;
}

static int64_t live_now(void) {
    weft_stats s;
    weft_stats_get(&s);
    return (int64_t)s.live;
}

/* A task that sleeps ms (from arg: ms * 1000 + code), then returns code
 * (0: success with result = ms). */
static int sleeper(void *arg, void **result) {
    intptr_t a = (intptr_t)arg;
    int64_t ms = a / 1000;
    int code = (int)(a % 1000);
    int r = weft_sleep(ms * MS);
    if (r < 0) return r;
    if (code) return -code;
    *result = (void *)(intptr_t)ms;
    return 0;
}
#define TASK(ms, code) ((void *)(intptr_t)((ms) * 1000 + (code)))

TEST(all_waits_for_every_task) {
    /* t0 before the forks: c's 60 ms sleep starts after it, so a join that
     * waited for c cannot return sooner (read after the forks, t0 could be
     * later than the start of c's sleep) */
    int64_t t0 = weft_now();
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    CHECK(s);
    weft_task *a = weft_fork(s, sleeper, TASK(30, 0));
    weft_task *b = weft_fork(s, sleeper, TASK(10, EIO)); /* fails first */
    weft_task *c = weft_fork(s, sleeper, TASK(60, 0));
    CHECK_EQ(weft_scope_join(s), -EIO);
    CHECK(weft_now() - t0 >= 60 * MS); /* ALL does not stop at a failure */
    CHECK_EQ(weft_task_state(a), WEFT_TASK_SUCCEEDED);
    CHECK_EQ((intptr_t)weft_task_result(a), 30);
    CHECK_EQ(weft_task_state(b), WEFT_TASK_FAILED);
    CHECK_EQ(weft_task_error(b), -EIO);
    CHECK_EQ(weft_task_state(c), WEFT_TASK_SUCCEEDED);
    CHECK_EQ(weft_scope_join(s), -EIO); /* again: same answer */
    weft_scope_close(s);
    /* all succeed */
    s = scope_new(WEFT_SCOPE_ALL, 0);
    for (int i = 0; i < 10; i++) CHECK(weft_fork(s, sleeper, TASK(i, 0)));
    CHECK_EQ(weft_scope_join(s), 0);
    weft_scope_close(s);
    /* an empty scope joins at once */
    s = scope_new(WEFT_SCOPE_ALL, 0);
    CHECK_EQ(weft_scope_join(s), 0);
    weft_scope_close(s);
}

TEST(fail_fast_cancels_the_rest) {
    int64_t base = live_now();
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_task *slow = weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_task *bad = weft_fork(s, sleeper, TASK(20, EPROTO));
    weft_task *slow2 = weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    CHECK_EQ(weft_scope_join(s), -EPROTO);
    /* only a cancellation ends the others' sleeps (without one, this waits
     * until the harness's timeout fails the test) */
    while (weft_task_state(slow) == WEFT_TASK_RUNNING || weft_task_state(slow2) == WEFT_TASK_RUNNING) weft_sleep(MS);
    CHECK_EQ(weft_task_state(slow), WEFT_TASK_CANCELLED);
    CHECK_EQ(weft_task_state(slow2), WEFT_TASK_CANCELLED);
    CHECK_EQ(weft_task_state(bad), WEFT_TASK_FAILED);
    weft_scope_close(s); /* waits for the cancelled ones */
    CHECK_EQ(live_now(), base);
}

TEST(fail_fast_task_states_after_close) {
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_task *slow = weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_task *bad = weft_fork(s, sleeper, TASK(5, EPROTO));
    CHECK_EQ(weft_scope_join(s), -EPROTO);
    /* states are final once no task runs (a second join would return at
     * once: the scope is shut down): wait for the cancelled one to end */
    while (weft_task_state(slow) == WEFT_TASK_RUNNING) weft_sleep(MS);
    CHECK_EQ(weft_task_state(slow), WEFT_TASK_CANCELLED);
    CHECK_EQ(weft_task_error(slow), -ECANCELED);
    CHECK_EQ(weft_task_state(bad), WEFT_TASK_FAILED);
    /* forking into a shut-down scope: a task that never runs */
    weft_task *late = weft_fork(s, sleeper, TASK(1, 0));
    CHECK(late);
    CHECK_EQ(weft_task_state(late), WEFT_TASK_CANCELLED);
    weft_scope_close(s);
}

/* Fails with -EIO once the task in first_to_fail has failed: which failure
 * comes first is then the test's doing, not two timers' (on a loaded
 * machine a 5 ms and a 20 ms sleep can end in either order). */
static weft_task *_Atomic first_to_fail;

static int fail_second(void *arg, void **result) {
    weft_task *t;
    /* a task's state is set after its scope recorded its outcome */
    while (!(t = atomic_load(&first_to_fail)) || weft_task_state(t) == WEFT_TASK_RUNNING) weft_sleep(MS);
    return -EIO;
}

TEST(first_success_wins_and_cancels) {
    weft_scope *s = scope_new(WEFT_SCOPE_FIRST_SUCCESS, 0);
    weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_fork(s, sleeper, TASK(5, EIO));
    weft_task *win = weft_fork(s, sleeper, TASK(30, 0));
    weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    CHECK_EQ(weft_scope_join(s), 0);
    CHECK_EQ((intptr_t)weft_scope_result(s), 30);
    CHECK_EQ(weft_task_state(win), WEFT_TASK_SUCCEEDED);
    weft_scope_close(s);
    /* every task fails: the first failure */
    s = scope_new(WEFT_SCOPE_FIRST_SUCCESS, 0);
    atomic_store(&first_to_fail, NULL);
    weft_fork(s, fail_second, NULL);
    atomic_store(&first_to_fail, weft_fork(s, sleeper, TASK(5, ENOENT)));
    CHECK_EQ(weft_scope_join(s), -ENOENT);
    CHECK(weft_scope_result(s) == NULL);
    weft_scope_close(s);
}

static atomic_int seen_timeout;

static int slow_task(void *arg, void **result) {
    int r = weft_sleep(FOREVER_MS * MS);
    /* the scope's deadline reaches the task either as its own call's
     * timeout or, if the join's timer fired first, as the shutdown's
     * cancellation: both are the deadline's doing */
    if (r == -ETIMEDOUT || r == -ECANCELED) atomic_fetch_add(&seen_timeout, 1);
    return r;
}

TEST(scope_deadline) {
    atomic_store(&seen_timeout, 0);
    int64_t t0 = weft_now();
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, t0 + 50 * MS);
    for (int i = 0; i < 5; i++) weft_fork(s, slow_task, NULL);
    CHECK_EQ(weft_scope_join(s), -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 50 * MS); /* t0 was read before the deadline was set */
    weft_scope_close(s);
    /* every task's blocking call (an hour's sleep) was ended by the scope's
     * deadline */
    CHECK_EQ(atomic_load(&seen_timeout), 5);
}

/* Three levels: the outer owner's cancellation reaches the innermost tasks. */
static atomic_int inner_cancelled;

static int leaf(void *arg, void **result) {
    int r = weft_sleep(FOREVER_MS * MS);
    if (r == -ECANCELED) atomic_fetch_add(&inner_cancelled, 1);
    return r;
}

static int middle(void *arg, void **result) {
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    for (int i = 0; i < 3; i++) weft_fork(s, leaf, NULL);
    int r = weft_scope_join(s);
    weft_scope_close(s);
    return r;
}

static void *outer_owner(void *arg) {
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    for (int i = 0; i < 3; i++) weft_fork(s, middle, NULL);
    int r = weft_scope_join(s);
    weft_scope_close(s);
    return (void *)(intptr_t)r;
}

TEST(cancel_owner_cancels_transitively) {
    DET_SKIP("a platform thread cancels sleepers after a sleep of its own: it races the virtual clock on a loaded machine");
    int64_t base = live_now();
    atomic_store(&inner_cancelled, 0);
    weft_thread *o;
    CHECK_EQ(weft_spawn(&o, outer_owner, NULL, NULL), 0);
    while (live_now() < base + 1 + 3 + 9) weft_sleep(MS); /* everyone started */
    weft_sleep(10 * MS);
    CHECK_EQ(weft_cancel(o), 0);
    void *r;
    CHECK_EQ(weft_join(o, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
    CHECK_EQ(atomic_load(&inner_cancelled), 9);
    CHECK_EQ(live_now(), base);
}

/* Nested deadline: the inner scope cannot outlive the outer's deadline.  It
 * asks for an hour and its task sleeps an hour: if neither the inherited
 * deadline nor the outer scope's shutdown reached it, the harness's timeout
 * would fail the test. */
static int nested_deadline_task(void *arg, void **result) {
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, weft_now() + FOREVER_MS * MS);
    weft_fork(s, slow_task, NULL);
    int r = weft_scope_join(s);
    weft_scope_close(s);
    return r;
}

TEST(nested_scope_inherits_deadline) {
    int64_t t0 = weft_now();
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, t0 + 40 * MS);
    weft_task *t = weft_fork(s, nested_deadline_task, NULL);
    int r = weft_scope_join(s);
    CHECK(r == -ETIMEDOUT);
    CHECK(weft_now() - t0 >= 40 * MS);
    /* tasks are valid until close; a shut-down one settles soon after */
    while (weft_task_state(t) == WEFT_TASK_RUNNING) weft_sleep(MS);
    CHECK(weft_task_state(t) != WEFT_TASK_SUCCEEDED);
    weft_scope_close(s);
}

TEST(close_without_join_cancels_and_waits) {
    int64_t base = live_now();
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    for (int i = 0; i < 100; i++) weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_scope_close(s);
    CHECK_EQ(live_now(), base);
}

/* The owner is cancelled before it joins: join says so, tasks cancelled. */
static void *owner_cancelled_early(void *arg) {
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_task *a = weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_task *b = weft_fork(s, sleeper, TASK(FOREVER_MS, 0));
    weft_cancel(weft_self());
    int r = weft_scope_join(s);
    /* (weft_sleep would return at once: this thread is cancelled; however
     * many yields the tasks need to end, on a loaded machine) */
    while (weft_task_state(a) == WEFT_TASK_RUNNING || weft_task_state(b) == WEFT_TASK_RUNNING) weft_yield();
    CHECK_EQ(weft_task_state(a), WEFT_TASK_CANCELLED);
    CHECK_EQ(weft_task_state(b), WEFT_TASK_CANCELLED);
    weft_scope_close(s);
    return (void *)(intptr_t)r;
}

TEST(owner_cancelled_before_join) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, owner_cancelled_early, NULL, NULL), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
}

TEST(platform_thread_owner) {
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_task *a = weft_fork(s, sleeper, TASK(10, 0));
    weft_task *b = weft_fork(s, sleeper, TASK(20, 0));
    CHECK_EQ(weft_scope_join(s), 0);
    CHECK_EQ((intptr_t)weft_task_result(a) + (intptr_t)weft_task_result(b), 30);
    weft_scope_close(s);
    s = scope_new(WEFT_SCOPE_ALL, weft_now() + 20 * MS);
    weft_fork(s, slow_task, NULL);
    CHECK_EQ(weft_scope_join(s), -ETIMEDOUT);
    weft_scope_close(s);
}

TEST(bad_arguments) {
    weft_scope *s = (weft_scope *)1;
    CHECK_EQ(weft_scope_create(&s, (weft_scope_policy)7, 0), -EINVAL);
    CHECK(s == NULL);
    s = (weft_scope *)1;
    CHECK_EQ(weft_scope_create(&s, WEFT_SCOPE_ALL, -1), -EINVAL);
    CHECK(s == NULL);
    CHECK_EQ(weft_scope_create(NULL, WEFT_SCOPE_ALL, 0), -EINVAL);
    CHECK(weft_fork(NULL, sleeper, NULL) == NULL);
    s = scope_new(WEFT_SCOPE_ALL, 0);
    CHECK(weft_fork(s, NULL, NULL) == NULL);
    CHECK_EQ(weft_scope_join(NULL), -EINVAL);
    CHECK_EQ(weft_task_state(NULL), -EINVAL);
    weft_scope_close(s);
    weft_scope_close(NULL);
}

/* ---- the article's handleOrder ----------------------------------------- */

static order ho;
static void *run_handle_order(void *arg) { return (void *)(intptr_t)handle_order(&ho); }

static int handle_order_case(int fail_inv, int fail_ord, int cancel_owner) {
    memset(&ho, 0, sizeof ho);
    ho.id = 3;
    ho.inventory_ms = FOREVER_MS; /* only a cancellation ends it */
    ho.order_ms = FOREVER_MS;
    ho.fail_inventory = fail_inv;
    ho.fail_order = fail_ord;
    if (!fail_inv && !fail_ord && !cancel_owner) ho.inventory_ms = ho.order_ms = 10;
    int64_t base = live_now();
    weft_thread *h;
    CHECK_EQ(weft_spawn(&h, run_handle_order, NULL, NULL), 0);
    if (cancel_owner) {
        /* both tasks forked first: an owner cancelled before it opened its
         * scope would open it shut down, and its tasks would never run */
        while (live_now() < base + 3) weft_sleep(MS);
        weft_cancel(h);
    }
    void *r;
    CHECK_EQ(weft_join(h, &r), 0);
    CHECK_EQ(live_now(), base); /* nothing leaked */
    return (int)(intptr_t)r;
}

TEST(handle_order_both_succeed) {
    CHECK_EQ(handle_order_case(0, 0, 0), 0);
    CHECK(ho.inventory_done && ho.order_done);
}

TEST(handle_order_inventory_fails_order_cancelled) {
    CHECK_EQ(handle_order_case(20, 0, 0), -EIO);
    CHECK(!ho.order_done && ho.order_cancelled); /* an hour's update, cancelled */
}

TEST(handle_order_order_fails_inventory_cancelled) {
    CHECK_EQ(handle_order_case(0, 20, 0), -EPROTO);
    CHECK(!ho.inventory_done && ho.inventory_cancelled);
}

TEST(handle_order_owner_cancelled_both_cancelled) {
    CHECK_EQ(handle_order_case(0, 0, 1), -ECANCELED);
    CHECK(ho.inventory_cancelled && ho.order_cancelled);
    CHECK(!ho.inventory_done && !ho.order_done);
}

/* ---- stress and races --------------------------------------------------- */

static int quick(void *arg, void **result) {
    intptr_t k = (intptr_t)arg;
    if (k % 3 == 0) weft_yield();
    if (k % 5 == 0) weft_sleep((k % 7) * 100000);
    return k % 11 == 0 ? -EIO : 0;
}

static void *scope_worker(void *arg) {
    intptr_t seed = (intptr_t)arg;
    for (int round = 0; round < 20; round++) {
        weft_scope *s = scope_new((weft_scope_policy)((seed + round) % 3), 0);
        for (int i = 0; i < 10; i++) weft_fork(s, quick, (void *)(intptr_t)(seed * 31 + round * 7 + i));
        int r = weft_scope_join(s);
        CHECK(r == 0 || r == -EIO);
        weft_scope_close(s);
    }
    return NULL;
}

TEST(many_scopes_stress) {
    int64_t base = live_now();
    int n = SCALE(200);
    weft_thread **t = calloc((size_t)n, sizeof *t);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&t[i], scope_worker, (void *)(intptr_t)i, NULL), 0);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    free(t);
    CHECK_EQ(live_now(), base);
}

/* The owner's cancellation racing its tasks' completion, many times. */
static void *racing_owner(void *arg) {
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    for (int i = 0; i < 4; i++) weft_fork(s, quick, (void *)(intptr_t)(i + 1));
    int r = weft_scope_join(s);
    CHECK(r == 0 || r == -ECANCELED || r == -EIO);
    weft_scope_close(s);
    return NULL;
}

TEST(cancel_vs_completion_races) {
    int64_t base = live_now();
    int n = SCALE(3000);
    for (int i = 0; i < n; i++) {
        weft_thread *o;
        CHECK_EQ(weft_spawn(&o, racing_owner, NULL, NULL), 0);
        if (i % 2) weft_yield();
        if (i % 3 == 0) weft_sleep(i % 5 * 10000);
        weft_cancel(o);
        CHECK_EQ(weft_join(o, NULL), 0);
    }
    CHECK_EQ(live_now(), base);
}

/* ---- the dump shows the tree -------------------------------------------- */

static int dump_leaf(void *arg, void **result) { return weft_sleep(FOREVER_MS * MS); }

static int dump_middle(void *arg, void **result) {
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    weft_fork(s, dump_leaf, NULL);
    int r = weft_scope_join(s);
    weft_scope_close(s);
    return r;
}

TEST(json_dump_shows_scope_tree) {
    DET_SKIP("polls the dump in real time while an hour's sleep is the only timer: the clock jumps past it");
    int64_t base = live_now();
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_fork(s, dump_middle, NULL);
    while (live_now() < base + 2) weft_sleep(MS); /* the middle task and its leaf */
    /* two scope containers, the inner one's parent the outer one, and a
     * sleeping task inside the inner one: once both tasks are parked */
    char *buf = dump_showing(WEFT_DUMP_JSON, "\"containers\"", "\"policy\":\"FAIL_FAST\"", "\"policy\":\"ALL\"",
                             "\"waiting_on\":\"sleep\"", "\"waiting_on\":\"scope\"", NULL);
    free(buf);
    weft_scope_close(s);
}

/* scope.h: after a FAIL_FAST or FIRST_SUCCESS join, a cancelled task that
 * computes (no cancellation point) still reads RUNNING; close waits for it.
 * Nothing here is timed: each step waits for an event. */
static atomic_int spin_release, spin_saw_cancel, spin_finished;

static int computing(void *arg, void **result) {
    /* a compute loop: weft_yield lets the other tasks run on one carrier,
     * but is no cancellation point */
    while (!atomic_load(&spin_release)) {
        if (weft_cancelled()) atomic_store(&spin_saw_cancel, 1);
        weft_yield();
    }
    atomic_store(&spin_finished, 1);
    return weft_cancelled() ? -ECANCELED : 0;
}

static int fails_at_once(void *arg, void **result) { return -EIO; }
static int succeeds_at_once(void *arg, void **result) {
    *result = (void *)7;
    return 0;
}

static void cancelled_still_running_after_join(weft_scope_policy policy) {
    atomic_store(&spin_release, 0);
    atomic_store(&spin_saw_cancel, 0);
    atomic_store(&spin_finished, 0);
    weft_scope *s = scope_new(policy, 0);
    CHECK(s);
    weft_task *busy = weft_fork(s, computing, NULL); /* forked first: it runs whatever happens next */
    weft_task *quick = weft_fork(s, policy == WEFT_SCOPE_FAIL_FAST ? fails_at_once : succeeds_at_once, NULL);
    CHECK(busy && quick);
    if (policy == WEFT_SCOPE_FAIL_FAST) {
        CHECK_EQ(weft_scope_join(s), -EIO);
        CHECK_EQ(weft_task_state(quick), WEFT_TASK_FAILED);
    } else {
        CHECK_EQ(weft_scope_join(s), 0);
        CHECK_EQ((intptr_t)weft_scope_result(s), 7);
        CHECK_EQ(weft_task_state(quick), WEFT_TASK_SUCCEEDED);
    }
    /* join returned: the other task is cancelled... */
    while (!atomic_load(&spin_saw_cancel)) weft_sleep(1 * MS);
    /* ...and still running, and says so */
    CHECK_EQ(weft_task_state(busy), WEFT_TASK_RUNNING);
    CHECK_EQ(atomic_load(&spin_finished), 0);
    atomic_store(&spin_release, 1);
    weft_scope_close(s); /* waits for it */
    CHECK_EQ(atomic_load(&spin_finished), 1);
}

TEST(fail_fast_join_leaves_cancelled_running_until_close) {
    cancelled_still_running_after_join(WEFT_SCOPE_FAIL_FAST);
}

TEST(first_success_join_leaves_cancelled_running_until_close) {
    cancelled_still_running_after_join(WEFT_SCOPE_FIRST_SUCCESS);
}

/* ---- a long-lived scope holds only its live tasks ------------------------ */

static int instant(void *arg, void **result) {
    *result = arg;
    return 0;
}

static int vmas_now(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

/* One scope stays open while `total` short tasks go through it in batches
 * of BATCH (joined between batches: ALL's join may be called again).  how:
 * 0 handles released as the batch ends, 1 no handle (weft_fork_released),
 * 2 handles kept until close.  After the first batch the stacks carved, the
 * live vthreads and the VMAs must stay within a constant of what a batch
 * needs, whatever the total: before issue 25 each finished task kept its
 * stack and descriptor until close (a million: 26 GB of address space). */
enum { BATCH = 1000 };
static void open_scope_bounded(long total, int how) {
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    weft_task **kept = how == 2 ? calloc((size_t)total, sizeof *kept) : NULL;
    weft_task *batch[BATCH];
    CHECK(how != 2 || kept);
    int64_t live0 = live_now();
    uint64_t stacks1 = 0;
    int vmas1 = 0;
    for (long done = 0; done < total; done += BATCH) {
        for (int k = 0; k < BATCH; k++) {
            void *arg = (void *)(intptr_t)(done + k);
            if (how == 1) {
                CHECK_EQ(weft_fork_released(s, instant, arg), 0);
            } else {
                batch[k] = weft_fork(s, instant, arg);
                CHECK(batch[k] != NULL);
                if (kept) kept[done + k] = batch[k];
            }
        }
        CHECK_EQ(weft_scope_join(s), 0);
        if (how == 0)
            for (int k = 0; k < BATCH; k++) {
                CHECK_EQ(weft_task_state(batch[k]), WEFT_TASK_SUCCEEDED);
                CHECK_EQ((intptr_t)weft_task_result(batch[k]), done + k);
                weft_task_release(batch[k]);
            }
        /* join returned: every task of the batch has ended, vthread and all */
        CHECK_EQ(live_now(), live0);
        weft_stats st;
        weft_stats_get(&st);
        if (done == 0) {
            stacks1 = st.stacks;
            vmas1 = vmas_now();
        } else if (done % (100 * BATCH) == 0 || done + BATCH >= total) {
            /* stacks: a constant, not a count of tasks.  Slots are carved
             * only when the depot and the cold list are empty (a spawn:
             * then the free ones are all in caches) or by a refill, which
             * stops at the depot's high-water mark, so at most: the live
             * vthreads (a batch, this one, daemons), the depot's mark
             * (stack.c: DEPOT_HOT 4096, plus a refill batch), and per
             * cache (a carrier's or a spare's) WEFT__STACK_CACHE_CAP 512
             * plus a batch being carved (64).  Before the fix a refill
             * carved new slots while zapped ones waited: CI saw 7,552
             * after 101,000 tasks, 1,216 after the first */
            uint64_t caches = st.carriers + st.spares;
            uint64_t bound = BATCH + 64 + 4096 + 64 + caches * (512 + 64);
            if (st.stacks > bound)
                fprintf(stderr, "%llu stacks after %ld tasks (bound %llu; %llu after the first batch)\n",
                        (unsigned long long)st.stacks, done + BATCH, (unsigned long long)bound,
                        (unsigned long long)stacks1);
            CHECK(st.stacks <= bound);
            /* VMAs: the old design mapped a slab per 256 tasks.  TSan's
             * own mappings grow with its per-fiber state and the heap, so
             * only the stack count above holds there */
            int v = TEST_TSAN ? vmas1 : vmas_now();
            if (v > vmas1 + 64) fprintf(stderr, "%d VMAs after %ld tasks, %d after the first batch\n", v, done + BATCH, vmas1);
            CHECK(v <= vmas1 + 64);
        }
    }
    if (kept) {
        for (long i = 0; i < total; i += total / 97 + 1) {
            CHECK_EQ(weft_task_state(kept[i]), WEFT_TASK_SUCCEEDED);
            CHECK_EQ((intptr_t)weft_task_result(kept[i]), i);
        }
    }
    weft_scope_close(s); /* frees the kept records */
    free(kept);
}

TEST(open_scope_million_released_handles_bounded) { open_scope_bounded(SPAWNS(1000000), 0); }
TEST(open_scope_million_without_handles_bounded) { open_scope_bounded(SPAWNS(1000000), 1); }
TEST(open_scope_kept_handles_hold_records_only) { open_scope_bounded(SPAWNS(200000), 2); }

/* A released task goes on, and the policy still sees its outcome. */
TEST(released_tasks_still_answer_the_policy) {
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    weft_task *bad = weft_fork(s, sleeper, TASK(5, EPROTO));
    CHECK(bad);
    weft_task_release(bad); /* before it finishes */
    CHECK_EQ(weft_fork_released(s, sleeper, TASK(FOREVER_MS, 0)), 0);
    CHECK_EQ(weft_scope_join(s), -EPROTO); /* and the forever one was cancelled */
    weft_scope_close(s);

    s = scope_new(WEFT_SCOPE_FIRST_SUCCESS, 0);
    CHECK_EQ(weft_fork_released(s, sleeper, TASK(FOREVER_MS, 0)), 0);
    CHECK_EQ(weft_fork_released(s, sleeper, TASK(3, 0)), 0);
    CHECK_EQ(weft_scope_join(s), 0);
    CHECK_EQ((intptr_t)weft_scope_result(s), 3); /* the winner's result outlives its record */
    weft_scope_close(s);

    /* released after it finished: freed at once (ASan: no leak, no reuse) */
    s = scope_new(WEFT_SCOPE_ALL, 0);
    weft_task *t = weft_fork(s, instant, (void *)9);
    CHECK_EQ(weft_scope_join(s), 0);
    CHECK_EQ((intptr_t)weft_task_result(t), 9);
    weft_task_release(t);
    weft_task_release(NULL);
    /* a shut-down scope: a released fork says it will not run */
    weft_scope_shutdown(s);
    CHECK_EQ(weft_fork_released(s, instant, NULL), -ECANCELED);
    t = weft_fork(s, instant, NULL);
    CHECK_EQ(weft_task_state(t), WEFT_TASK_CANCELLED);
    weft_scope_close(s);

    CHECK_EQ(weft_fork_released(NULL, instant, NULL), -EINVAL);
    s = scope_new(WEFT_SCOPE_ALL, 0);
    CHECK_EQ(weft_fork_released(s, NULL, NULL), -EINVAL);
    errno = 0;
    CHECK(weft_fork(s, NULL, NULL) == NULL);
    CHECK_EQ(errno, EINVAL);
    weft_scope_close(s);
}

/* Releases racing completions and cancellations, many times. */
static int yielder(void *arg, void **result) {
    for (intptr_t i = 0; i < (intptr_t)arg % 4; i++)
        if (weft_yield() < 0) return -ECANCELED;
    return (intptr_t)arg % 5 == 0 ? -EIO : 0;
}

static void *releasing_owner(void *arg) {
    intptr_t seed = (intptr_t)arg;
    weft_scope *s = scope_new((weft_scope_policy)(seed % 3), 0);
    weft_task *t[8];
    for (int i = 0; i < 8; i++) t[i] = weft_fork(s, yielder, (void *)(intptr_t)(seed + i));
    for (int i = 0; i < 8; i += 2) weft_task_release(t[i]); /* some while they run */
    if (seed % 4 == 0) weft_scope_shutdown(s);
    for (int i = 0; i < 4; i++) {
        int r = weft_fork_released(s, yielder, (void *)(intptr_t)(seed * 3 + i));
        CHECK(r == 0 || r == -ECANCELED); /* shut down, by us or by the owner's cancellation */
    }
    weft_scope_join(s);
    for (int i = 1; i < 8; i += 2) {
        int st = weft_task_state(t[i]);
        CHECK(st >= WEFT_TASK_RUNNING && st <= WEFT_TASK_CANCELLED);
        if (seed % 2) weft_task_release(t[i]);
    }
    weft_scope_close(s);
    return NULL;
}

TEST(release_vs_completion_races) {
    int64_t base = live_now();
    int n = SCALE(2000);
    for (int i = 0; i < n; i += 4) {
        weft_thread *o[4];
        for (int k = 0; k < 4; k++) CHECK_EQ(weft_spawn(&o[k], releasing_owner, (void *)(intptr_t)(i + k), NULL), 0);
        if (i % 8 == 0) weft_cancel(o[i / 4 % 4]);
        for (int k = 0; k < 4; k++) CHECK_EQ(weft_join(o[k], NULL), 0);
    }
    CHECK_EQ(live_now(), base);
}

/* The dump lists a scope's live tasks, released ones too, and its count of
 * forks. */
TEST(dump_lists_released_live_tasks) {
    DET_SKIP("polls the dump in real time while an hour's sleep is the only timer: the clock jumps past it");
    int64_t base = live_now();
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    for (int i = 0; i < 3; i++) CHECK_EQ(weft_fork_released(s, sleeper, TASK(FOREVER_MS, 0)), 0);
    for (int i = 0; i < 5; i++) CHECK_EQ(weft_fork_released(s, instant, NULL), 0);
    while (live_now() > base + 3) weft_sleep(MS);
    char *buf = dump_showing(WEFT_DUMP_JSON, "\"tasks\":8,\"running\":3", NULL);
    /* the scope's "threads" names three vthreads */
    const char *th = strstr(buf, "\"tasks\":8,\"running\":3");
    CHECK(th != NULL);
    th = strstr(th, "\"threads\":[");
    CHECK(th != NULL);
    int commas = 0;
    for (const char *p = th + 11; *p && *p != ']'; p++) commas += *p == ',';
    CHECK_EQ(commas, 2);
    free(buf);
    weft_scope_close(s);
}

/* The guide's socket server (docs/examples/09-sockets.c: an acceptor, a
 * task per connection in one scope, forked with weft_fork_released) driven
 * through 20,000 connect-then-close cycles, 50 clients at a time, returns
 * to within 2x of its idle RSS -- before issue 25 every connection ever
 * served kept its task's stack in the scope (the chat server: 173,832 kB
 * after 20,000 cycles, still 166,960 kB idle).  The stacks the burst made
 * go back after a lull ($WEFT_STACK_IDLE_MS, 300 ms here; stack.c).  RSS
 * only without sanitizers (their shadow and quarantine are theirs); the
 * scope's and the runtime's counts in every build. */
enum { SRV_CYCLES = 20000, SRV_CLIENTS = 50 };
static int srv_echo(void *arg, void **result) {
    (void)result;
    int fd = (int)(intptr_t)arg;
    char buf[64];
    ssize_t n;
    while ((n = weft_recv(fd, buf, sizeof buf, 0)) > 0)
        if ((n = weft_write_all(fd, buf, (size_t)n)) < 0) break;
    weft_close(fd);
    return n < 0 ? (int)n : 0;
}
static atomic_long srv_forked;
static void *srv_accept(void *arg) {
    int lfd = (int)(intptr_t)arg;
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    for (;;) {
        int fd = weft_accept(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) break; /* the test closed the listener */
        CHECK_EQ(weft_fork_released(s, srv_echo, (void *)(intptr_t)fd), 0);
        atomic_fetch_add(&srv_forked, 1);
    }
    int r = weft_scope_join(s);
    weft_scope_close(s);
    return (void *)(intptr_t)r;
}
static struct sockaddr_in srv_addr;
static void *srv_client(void *arg) {
    long cycles = (long)(intptr_t)arg;
    for (long i = 0; i < cycles; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        CHECK(fd >= 0);
        CHECK_EQ(weft_connect(fd, (const struct sockaddr *)&srv_addr, sizeof srv_addr), 0);
        CHECK_EQ(weft_write_all(fd, "hello\n", 6), 6);
        char back[6];
        size_t got = 0;
        while (got < sizeof back) {
            ssize_t n = weft_recv(fd, back + got, sizeof back - got, 0);
            CHECK(n > 0);
            got += (size_t)n;
        }
        CHECK(memcmp(back, "hello\n", 6) == 0);
        weft_close(fd);
    }
    return NULL;
}
static void srv_round(long cycles) {
    weft_thread *c[SRV_CLIENTS];
    for (int i = 0; i < SRV_CLIENTS; i++)
        CHECK_EQ(weft_spawn(&c[i], srv_client, (void *)(intptr_t)(cycles / SRV_CLIENTS), NULL), 0);
    for (int i = 0; i < SRV_CLIENTS; i++) CHECK_EQ(weft_join(c[i], NULL), 0);
}
static long rss_kib_now(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    CHECK(f && fscanf(f, "%ld %ld", &pages, &res) == 2);
    fclose(f);
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}
TEST(socket_server_returns_to_idle_rss) {
    DET_SKIP("waits in real time for the stacks' lull (stack.c) while the virtual clock jumps");
    setenv("WEFT_STACK_IDLE_MS", "300", 1); /* (before the runtime starts: this test's own process) */
    /* no spare carriers: on a loaded machine the monitor saw a vthread
     * compute 20 ms, made two spares, and their threads' stacks and malloc
     * arenas (never given back) were the RSS over the bound: 9060 kB
     * against an idle 3216 (the suite's epoll pass); this test is about the
     * stacks' memory */
    setenv("WEFT_PIN_THRESHOLD_MS", "-1", 1);
    srv_addr = (struct sockaddr_in){.sin_family = AF_INET};
    srv_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof srv_addr;
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(lfd >= 0);
    CHECK(bind(lfd, (struct sockaddr *)&srv_addr, sizeof srv_addr) == 0);
    CHECK(listen(lfd, 256) == 0);
    CHECK(getsockname(lfd, (struct sockaddr *)&srv_addr, &alen) == 0);
    int64_t live0 = live_now();
    weft_thread *acc;
    CHECK_EQ(weft_spawn(&acc, srv_accept, (void *)(intptr_t)lfd, NULL), 0);
    srv_round(SRV_CLIENTS * 4); /* warm: the code's pages, the first stacks */
    weft_sleep(500 * MS);       /* a lull: what the warm-up carved goes back */
    long idle = rss_kib_now();
    long cycles = SCALE(SRV_CYCLES);
    srv_round(cycles);
    long after = rss_kib_now();
    /* every connection forked (the acceptor counts after the fork, and a
     * client can see its echo first) and every task ended: the acceptor
     * alone is left */
    long want = SRV_CLIENTS * 4 + cycles / SRV_CLIENTS * SRV_CLIENTS;
    int64_t until = weft_now() + 30000 * MS;
    while ((atomic_load(&srv_forked) < want || live_now() > live0 + 1) && weft_now() < until) weft_sleep(MS);
    CHECK_EQ(atomic_load(&srv_forked), want);
    CHECK_EQ(live_now(), live0 + 1);
    long now = after;
    if (!TEST_SANITIZED) {
        while ((now = rss_kib_now()) > 2 * idle && weft_now() < until) weft_sleep(10 * MS);
        if (now > 2 * idle)
            fprintf(stderr, "RSS idle %ld kB, after %ld cycles %ld kB, 30 s later %ld kB\n", idle, cycles, after, now);
        CHECK(now <= 2 * idle);
    }
    if (getenv("WEFT_TEST_SHOW")) fprintf(stderr, "RSS idle %ld kB, after %ld kB, then %ld kB\n", idle, after, now);
    weft_close(lfd); /* ends the accept */
    void *r;
    CHECK_EQ(weft_join(acc, &r), 0);
    CHECK_EQ((intptr_t)r, 0);
}

/* A scope left open by the function that opened it stops the program with
 * the scope named and a dump, instead of weft_shutdown waiting forever for
 * its tasks (issue 25 item 4). */
static atomic_int forever_started;
static int forever(void *arg, void **result) {
    (void)arg;
    (void)result;
    atomic_store(&forever_started, 1);
    return weft_sleep(FOREVER_MS * MS);
}
static void *leaky(void *arg) {
    (void)arg;
    weft_set_name("leaky");
    weft_scope *s = scope_new(WEFT_SCOPE_ALL, 0);
    CHECK(weft_fork(s, forever, NULL) != NULL);
    while (!atomic_load(&forever_started)) weft_sleep(MS); /* (so that the line names its vthread) */
    return NULL; /* no weft_scope_close */
}
static void leaky_vthread_child(void *unused) {
    (void)unused;
    weft_thread *t;
    if (weft_spawn(&t, leaky, NULL, NULL) != 0) _exit(3);
    weft_join(t, NULL);
    weft_shutdown();
    _exit(4); /* not reached */
}
static void leaky_platform_child(void *unused) {
    (void)unused;
    weft_scope *s = scope_new(WEFT_SCOPE_FAIL_FAST, 0);
    if (!weft_fork(s, forever, NULL)) _exit(3);
    while (!atomic_load(&forever_started)) weft_sleep(MS);
    weft_shutdown();
    _exit(4); /* not reached */
}
static void expect_left_open(void (*fn)(void *), const char *who, const char *policy) {
    int st;
    char *err = fork_stderr(fn, NULL, &st);
    if (!strstr(err, who) || !strstr(err, policy) || !strstr(err, "weft thread dump"))
        fprintf(stderr, "child's stderr:\n%s\n", err);
    CHECK(strstr(err, who) != NULL);
    CHECK(strstr(err, "with a scope still open") != NULL);
    CHECK(strstr(err, policy) != NULL); /* "(ALL), 1 task forked, 1 running: vthreads #N" */
    if (!strstr(err, "1 task forked, 1 running: vthreads #")) fprintf(stderr, "child's stderr:\n%s\n", err);
    CHECK(strstr(err, "1 task forked, 1 running: vthreads #") != NULL);
    CHECK(strstr(err, "weft thread dump") != NULL);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}
TEST(vthread_returning_with_its_scope_open_stops_with_a_dump) {
    expect_left_open(leaky_vthread_child, "\"leaky\" returned with a scope still open", "(ALL)");
}
TEST(shutdown_with_a_scope_open_stops_with_a_dump) {
    expect_left_open(leaky_platform_child, "weft_shutdown was called with a scope still open", "(FAIL_FAST)");
}
