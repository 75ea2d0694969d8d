/* fork() with the runtime running: the child gets a fresh runtime on its
 * next weft call and none of the parent's threads, rings or epoll sets;
 * handles from before the fork are refused; fork() from a vthread and
 * system() work.  Every child is waited for with a timeout, and its exit
 * status is the verdict.  The backend is whatever WEFT_IO says
 * (scripts/test.sh runs the suite on both). */
#include "harness.h"

#include <time.h>
#include "sched/sched.h" /* (a vthread's run state: wait until the parent's are parked) */

#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define FORK_UNDER_QEMU "a fork from a process with several threads aborts qemu-user 7.2 itself (its TCG: cpu_exec's cpu == current_cpu assertion)"

/* TSan (libtsan 12) cannot start threads in the child of a multi-threaded
 * fork: its registry still holds the parent's threads, and glibc gives a
 * new thread a vanished one's id ("dup thread with used id", exit 66).
 * Under TSan the children here check only what needs no thread. */
#define CHILD_THREADS (!TEST_TSAN)

#define MS 1000000LL

/* CLOCK_MONOTONIC: a child process takes real time, also when weft_now()
 * is the deterministic mode's virtual clock. */
static int64_t real_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Waits for pid up to `secs`; kills it and fails if it is still there. */
static int wait_child(pid_t pid, int secs) {
    int st = 0;
    int64_t until = real_now() + (int64_t)secs * 1000 * MS;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return st;
        CHECK(r == 0 || (r < 0 && errno == EINTR));
        if (real_now() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            fprintf(stderr, "child %d still running after %d s: killed\n", (int)pid, secs);
            CHECK(0);
        }
        weft_sleep(2 * MS); /* a vthread parks, a platform thread blocks */
    }
}

static void check_exited_0(int st) {
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        fprintf(stderr, "child: %s %d\n", WIFEXITED(st) ? "exit status" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* How many of this process's fds are anon inodes named `what`
 * ("[io_uring]", "[eventpoll]", "[eventfd]"). */
static int count_anon(const char *what) {
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[300], l[256];
        snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(p, l, sizeof l - 1);
        if (k <= 0) continue;
        l[k] = 0;
        if (strstr(l, what)) n++;
    }
    closedir(d);
    return n;
}

static void *ret_arg(void *a) { return a; }

static void *sleeper(void *a) {
    CHECK_EQ(weft_sleep(2 * MS), 0);
    return a;
}

static int rd_fd = -1;
static void *reader(void *a) {
    char buf[16] = {0};
    ssize_t n = weft_read(rd_fd, buf, sizeof buf - 1);
    CHECK_EQ(n, 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    return a;
}

static int wr_fd = -1;
static void *writer(void *a) {
    CHECK_EQ(weft_sleep(1 * MS), 0); /* the reader parks (or not): either way */
    CHECK_EQ(weft_write(wr_fd, "hello", 5), 5);
    return a;
}

/* Spawns and joins, sleeps, and moves bytes through a pipe between two
 * vthreads: the runtime works.  From the calling (platform) thread. */
static void exercise_runtime(void) {
    weft_thread *t[32];
    for (int i = 0; i < 32; i++) CHECK_EQ(weft_spawn(&t[i], i % 2 ? sleeper : ret_arg, (void *)(intptr_t)(i + 1), NULL), 0);
    for (int i = 0; i < 32; i++) {
        void *r = NULL;
        CHECK_EQ(weft_join(t[i], &r), 0);
        CHECK_EQ((intptr_t)r, i + 1);
    }
    CHECK_EQ(weft_sleep(1 * MS), 0);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    rd_fd = p[0];
    wr_fd = p[1];
    weft_thread *r, *w;
    CHECK_EQ(weft_spawn(&r, reader, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&w, writer, NULL, NULL), 0);
    CHECK_EQ(weft_join(r, NULL), 0);
    CHECK_EQ(weft_join(w, NULL), 0);
    CHECK_EQ(weft_close(p[0]), 0);
    CHECK_EQ(weft_close(p[1]), 0);
}

/* The parent's vthread t has parked (in its sleep, its read...): whatever
 * it did to get there, it is done. */
static void wait_parked(weft_thread *h) {
    weft_thread *t = weft__thread_of(h); /* (a handle carries a generation: sched.h) */
    while (atomic_load_explicit(&t->rstate, memory_order_relaxed) != WEFT__RS_PARKED) usleep(1000);
}

static void *long_sleeper(void *a) {
    CHECK_EQ(weft_sleep(3600 * 1000 * MS), -ECANCELED); /* until cancelled */
    return a;
}

/* parked in the parent across the fork: a read nobody answers until after */
static int parent_pipe[2];
static void *parent_reader(void *a) {
    char c = 0;
    CHECK_EQ(weft_read(parent_pipe[0], &c, 1), 1);
    CHECK_EQ(c, 'p');
    return a;
}

/* The common case: a program with a running runtime (vthreads parked in a
 * read, in sleeps) forks; the child uses weft -- spawn, join, sleep, I/O --
 * and exits through exit(), LeakSanitizer and all; the parent goes on. */
TEST(child_gets_a_fresh_runtime) {
    EMU_SKIP(FORK_UNDER_QEMU);
    DET_SKIP("forks while vthreads sleep: virtual sleeps are over by then");
    CHECK_EQ(pipe(parent_pipe), 0);
    weft_thread *pr, *sl[8];
    CHECK_EQ(weft_spawn(&pr, parent_reader, NULL, NULL), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_spawn(&sl[i], long_sleeper, NULL, NULL), 0);
    /* mid-operation, but not mid-malloc: ASan's allocator (libasan 12) is
     * not locked across fork, and a child forked while another thread was
     * inside it can hang in its own first malloc (README, "Sanitizers") */
    wait_parked(pr);
    for (int i = 0; i < 8; i++) wait_parked(sl[i]);
    int rings = count_anon("[io_uring]"), epolls = count_anon("[eventpoll]");
    CHECK(rings + epolls > 0); /* the runtime is up, with its pollers */
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        /* nothing of the parent's pollers is left open here */
        CHECK_EQ(count_anon("[io_uring]"), 0);
        CHECK_EQ(count_anon("[eventpoll]"), 0);
        CHECK_EQ(count_anon("[eventfd]"), 0);
        if (!CHILD_THREADS) exit(0);
        exercise_runtime();
        /* the parent's pipe is inherited like any fd: weft reads it here too */
        int p2[2];
        CHECK_EQ(pipe(p2), 0);
        CHECK_EQ(write(p2[1], "c", 1), 1);
        char c = 0;
        CHECK_EQ(weft_read(p2[0], &c, 1), 1);
        CHECK_EQ(c, 'c');
        close(p2[0]);
        close(p2[1]);
        weft_stats s;
        weft_stats_get(&s);
        CHECK_EQ(s.live, 0); /* the parent's 9 parked vthreads are not here */
        weft_shutdown();
        exit(0);
    }
    check_exited_0(wait_child(pid, 120));
    /* the parent's runtime is untouched: its parked reader still gets its byte */
    CHECK_EQ(write(parent_pipe[1], "p", 1), 1);
    CHECK_EQ(weft_join(pr, NULL), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_cancel(sl[i]), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_join(sl[i], NULL), 0);
    exercise_runtime();
    close(parent_pipe[0]);
    close(parent_pipe[1]);
}

/* Twice over: the child of a child (each starts its own runtime). */
TEST(grandchild_gets_a_fresh_runtime) {
    EMU_SKIP(FORK_UNDER_QEMU);
    if (!CHILD_THREADS) {
        printf("(not under TSan: see CHILD_THREADS)\n");
        return;
    }
    exercise_runtime();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        exercise_runtime();
        fflush(NULL);
        pid_t g = fork();
        CHECK(g >= 0);
        if (g == 0) {
            alarm(60);
            exercise_runtime();
            weft_shutdown();
            exit(0);
        }
        check_exited_0(wait_child(g, 100));
        exercise_runtime();
        weft_shutdown();
        exit(0);
    }
    check_exited_0(wait_child(pid, 120));
}

static void *park_forever(void *a) {
    weft_park(0);
    return a;
}

static int scope_task(void *arg, void **result) {
    weft_park(0); /* until the scope is shut down */
    return -ECANCELED;
}

/* Handles from before the fork name vthreads that are not in the child: a
 * clear error, never a wait for them. */
TEST(parent_handles_refused_in_child) {
    EMU_SKIP(FORK_UNDER_QEMU);
    weft_thread *done, *parked, *parked2;
    CHECK_EQ(weft_spawn(&done, ret_arg, (void *)1, NULL), 0);
    CHECK_EQ(weft_spawn(&parked, park_forever, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&parked2, park_forever, NULL, NULL), 0);
    weft_scope *s;
    CHECK_EQ(weft_scope_create(&s, WEFT_SCOPE_ALL, 0), 0);
    weft_task *task = weft_fork(s, scope_task, NULL);
    CHECK(task != NULL);
    wait_parked(parked);
    wait_parked(parked2);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        void *r = NULL;
        CHECK_EQ(weft_join(done, &r), -ECHILD);
        CHECK_EQ(weft_join(parked, &r), -ECHILD);
        CHECK_EQ(weft_cancel(parked), -ECHILD);
        CHECK_EQ(weft_unpark(parked), -ECHILD);
        CHECK_EQ(weft_detach(parked2), -ECHILD);
        CHECK_EQ(weft_scope_join(s), -ECHILD);
        CHECK(weft_fork(s, scope_task, NULL) == NULL);
        weft_scope_close(s); /* forgets it: does not wait for its task */
        if (!CHILD_THREADS) exit(0);
        /* and the child's own runtime works, scopes included */
        exercise_runtime();
        weft_scope *s2;
        CHECK_EQ(weft_scope_create(&s2, WEFT_SCOPE_ALL, 0), 0);
        CHECK(weft_fork(s2, scope_task, NULL) != NULL);
        weft_scope_shutdown(s2);
        CHECK_EQ(weft_scope_join(s2), -ECANCELED);
        weft_scope_close(s2);
        weft_shutdown();
        exit(0);
    }
    check_exited_0(wait_child(pid, 120));
    /* in the parent the same handles are as good as ever */
    void *r = NULL;
    CHECK_EQ(weft_join(done, &r), 0);
    CHECK_EQ((intptr_t)r, 1);
    CHECK_EQ(weft_unpark(parked), 0);
    CHECK_EQ(weft_join(parked, NULL), 0);
    CHECK_EQ(weft_unpark(parked2), 0);
    CHECK_EQ(weft_join(parked2, NULL), 0);
    weft_scope_shutdown(s);
    weft_scope_close(s);
}

/* fork() from a vthread: the child goes on as a platform thread on the
 * vthread's stack and must end with exit/_exit/exec. */
static int child_status;
static void *fork_in_vthread(void *arg) {
    int return_in_child = (int)(intptr_t)arg;
    int errp[2];
    CHECK_EQ(pipe(errp), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        dup2(errp[1], 2);
        close(errp[0]);
        if (return_in_child) return NULL; /* not allowed: stops with a message */
        CHECK(weft_self() == NULL); /* a platform thread now */
        if (!CHILD_THREADS) exit(0);
        exercise_runtime();
        weft_shutdown();
        exit(0);
    }
    close(errp[1]);
    child_status = wait_child(pid, 120);
    static char err[4096];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof err - 1 && (k = weft_read(errp[0], err + n, sizeof err - 1 - n)) > 0) n += (size_t)k;
    err[n] = 0;
    close(errp[0]);
    return err;
}

TEST(fork_from_vthread) {
    EMU_SKIP(FORK_UNDER_QEMU);
    weft_thread *t;
    char *err;
    CHECK_EQ(weft_spawn(&t, fork_in_vthread, (void *)0, NULL), 0);
    CHECK_EQ(weft_join(t, (void **)&err), 0);
    if (!(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0)) fprintf(stderr, "child stderr:\n%s\n", err);
    check_exited_0(child_status);
    exercise_runtime(); /* the parent's runtime goes on */
}

/* The same from a vthread with its own TLS (arch/tls.c): the child's only
 * thread runs on that block, and glibc's fork moves the block's thread
 * descriptor onto its list of running threads (seen: it crashed there
 * when the block's list links were left zero -- bash under weft-run). */
TEST(fork_from_an_own_tls_vthread) {
    EMU_SKIP(FORK_UNDER_QEMU);
    if (TEST_SANITIZED) SKIP("sanitizer build: own TLS is refused there (test_tls says why)");
    weft_thread *t;
    char *err;
    weft_thread_opts o = {.own_tls = 1};
    CHECK_EQ(weft_spawn(&t, fork_in_vthread, (void *)0, &o), 0);
    CHECK_EQ(weft_join(t, (void **)&err), 0);
    if (!(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0)) fprintf(stderr, "child stderr:\n%s\n", err);
    check_exited_0(child_status);
    exercise_runtime();
}

TEST(fork_from_vthread_child_returning_is_stopped) {
    weft_thread *t;
    char *err;
    CHECK_EQ(weft_spawn(&t, fork_in_vthread, (void *)1, NULL), 0);
    CHECK_EQ(weft_join(t, (void **)&err), 0);
    if (!strstr(err, "returned in a child process")) fprintf(stderr, "child stderr:\n%s\n", err);
    CHECK(WIFSIGNALED(child_status) && WTERMSIG(child_status) == SIGABRT);
    CHECK(strstr(err, "weft: a vthread's function returned in a child process") != NULL);
}

static void *run_system(void *arg) {
    return (void *)(intptr_t)system((const char *)arg);
}

/* system() (fork+exec+wait, or posix_spawn) from a platform thread, a
 * vthread and weft_blocking, with vthreads parked meanwhile. */
TEST(system_with_running_runtime) {
    weft_thread *parked;
    CHECK_EQ(weft_spawn(&parked, park_forever, NULL, NULL), 0);
    int st = system("exit 3");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 3);
    weft_thread *t;
    void *r;
    CHECK_EQ(weft_spawn(&t, run_system, "exit 4", NULL), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    st = (int)(intptr_t)r;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 4);
    r = NULL;
    CHECK_EQ(weft_blocking(run_system, "exit 5", &r), 0);
    st = (int)(intptr_t)r;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 5);
    /* a shell that itself uses nothing of weft, but inherits its fds */
    st = system("ls -l /proc/self/fd >/dev/null");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    exercise_runtime();
    CHECK_EQ(weft_unpark(parked), 0);
    CHECK_EQ(weft_join(parked, NULL), 0);
}

/* The child's runtime is configured as the parent's was, not with the
 * defaults; or as the child itself asks. */
TEST(child_runtime_configured_as_parents) {
    EMU_SKIP(FORK_UNDER_QEMU);
    DET_SKIP("configures 3 carriers and checks them");
    weft_runtime_opts cfg = {.carriers = 3, .io = WEFT_IO_EPOLL};
    CHECK_EQ(weft_init(&cfg), 0);
    exercise_runtime();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(60);
        if (!CHILD_THREADS) exit(0);
        exercise_runtime();
        weft_stats s;
        weft_stats_get(&s);
        CHECK_EQ(s.carriers, 3);
        CHECK_EQ(weft_io_backend(), WEFT_IO_EPOLL);
        weft_shutdown();
        weft_runtime_opts mine = {.carriers = 1}; /* after a shutdown: as asked */
        CHECK_EQ(weft_init(&mine), 0);
        weft_stats_get(&s);
        CHECK_EQ(s.carriers, 1);
        weft_shutdown();
        exit(0);
    }
    check_exited_0(wait_child(pid, 120));
}
