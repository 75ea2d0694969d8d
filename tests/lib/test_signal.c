/* Signals as an API (weft/signal.h, issue 25 item 3): SIGINT and SIGTERM
 * delivered to the process reach a vthread or a platform thread waiting in
 * weft_signal_wait; arrivals before the wait count; each arrival goes to
 * one waiter; deadlines, cancellation, refused signals, reset.  The suite
 * runs it on both backends (the relay reads an eventfd through the io
 * layer). */
#include "harness.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS 1000000LL

static sigset_t set_of(int a, int b) {
    sigset_t s;
    sigemptyset(&s);
    if (a) sigaddset(&s, a);
    if (b) sigaddset(&s, b);
    return s;
}

static void *waiter(void *arg) {
    sigset_t s = set_of(SIGINT, SIGTERM);
    (void)arg;
    return (void *)(intptr_t)weft_signal_wait(&s, 0);
}

TEST(sigint_and_sigterm_reach_a_waiting_vthread_and_a_platform_thread) {
    sigset_t s = set_of(SIGINT, SIGTERM);
    CHECK_EQ(weft_signal_notify(&s), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, waiter, NULL, NULL), 0);
    weft_sleep(5 * MS); /* (parked by now, mostly: either way it gets it) */
    CHECK_EQ(kill(getpid(), SIGTERM), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, SIGTERM);
    CHECK_EQ(kill(getpid(), SIGINT), 0);
    CHECK_EQ(weft_signal_wait(&s, 0), SIGINT); /* this test's own (platform) thread */
    /* nothing left over */
    CHECK_EQ(weft_signal_wait(&s, weft_now() + 5 * MS), -ETIMEDOUT);
}

TEST(an_arrival_before_the_wait_counts) {
    sigset_t s = set_of(SIGUSR1, 0);
    CHECK_EQ(weft_signal_notify(&s), 0);
    CHECK_EQ(raise(SIGUSR1), 0); /* handled at once, in this thread: counted */
    CHECK_EQ(weft_signal_wait(&s, weft_now() + 60000 * MS), SIGUSR1);
}

static atomic_int got;
static void *usr1_waiter(void *arg) {
    sigset_t s = set_of(SIGUSR1, 0);
    (void)arg;
    int r = weft_signal_wait(&s, 0);
    CHECK_EQ(r, SIGUSR1);
    atomic_fetch_add(&got, 1);
    return NULL;
}

TEST(each_arrival_goes_to_one_waiter) {
    enum { W = 8 };
    sigset_t s = set_of(SIGUSR1, 0);
    CHECK_EQ(weft_signal_notify(&s), 0);
    weft_thread *t[W];
    for (int i = 0; i < W; i++) CHECK_EQ(weft_spawn(&t[i], usr1_waiter, NULL, NULL), 0);
    for (int i = 1; i <= W; i++) {
        CHECK_EQ(kill(getpid(), SIGUSR1), 0);
        while (atomic_load(&got) < i) weft_sleep(MS); /* one at a time: the kernel merges two pending */
    }
    for (int i = 0; i < W; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(atomic_load(&got), W);
}

static void *cancelled_waiter(void *arg) {
    sigset_t s = set_of(SIGUSR2, 0);
    (void)arg;
    return (void *)(intptr_t)weft_signal_wait(&s, 0);
}

TEST(deadline_cancellation_and_bad_sets) {
    sigset_t s = set_of(SIGUSR2, 0);
    CHECK_EQ(weft_signal_wait(&s, 0), -EINVAL); /* not notified yet */
    CHECK_EQ(weft_signal_notify(&s), 0);
    CHECK_EQ(weft_signal_wait(&s, weft_now() + 5 * MS), -ETIMEDOUT);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cancelled_waiter, NULL, NULL), 0);
    weft_sleep(2 * MS);
    CHECK_EQ(weft_cancel(t), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, -ECANCELED);
    sigset_t empty = set_of(0, 0), kill9 = set_of(SIGKILL, 0), segv = set_of(SIGTERM, SIGSEGV);
    CHECK_EQ(weft_signal_notify(NULL), -EINVAL);
    CHECK_EQ(weft_signal_notify(&empty), -EINVAL);
    CHECK_EQ(weft_signal_notify(&kill9), -EINVAL);
    CHECK_EQ(weft_signal_notify(&segv), -EINVAL);
    CHECK_EQ(weft_signal_wait(NULL, 0), -EINVAL);
    CHECK_EQ(weft_signal_reset(&kill9), -EINVAL);
}

/* After reset the default action is back: SIGUSR1 ends the process. */
TEST(reset_gives_the_default_action_back) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        sigset_t s = set_of(SIGUSR1, 0);
        if (weft_signal_notify(&s) != 0) _exit(3);
        if (raise(SIGUSR1) != 0 || weft_signal_wait(&s, 0) != SIGUSR1) _exit(4);
        if (weft_signal_reset(&s) != 0) _exit(5);
        raise(SIGUSR1);
        _exit(6); /* not reached */
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st)) fprintf(stderr, "child exited %d\n", WEXITSTATUS(st));
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR1);
}

/* The runtime may start again after weft_shutdown (weft.h), which
 * abandons the relay (a daemon): the next wait or notify starts another. */
TEST(signals_after_the_runtime_starts_again) {
    sigset_t s = set_of(SIGUSR2, 0);
    CHECK_EQ(weft_signal_notify(&s), 0);
    CHECK_EQ(raise(SIGUSR2), 0);
    CHECK_EQ(weft_signal_wait(&s, weft_now() + 60000 * MS), SIGUSR2);
    weft_shutdown();
    CHECK_EQ(weft_init(NULL), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, cancelled_waiter, NULL, NULL), 0); /* waits for SIGUSR2 */
    weft_sleep(5 * MS);
    CHECK_EQ(kill(getpid(), SIGUSR2), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, SIGUSR2);
}
