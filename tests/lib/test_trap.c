/* The system call trap (hook/trap.c): system calls that the C library
 * makes on its own -- stdio's read and write, popen's and system's waits,
 * its internal locks' futex waits -- and raw syscall(2)s park their
 * vthread, with weft_runtime_opts.trap and the hooks on.
 *
 * The tests run on one carrier without the monitor (pin_threshold_ns -1):
 * a call that held its carrier instead of parking would hold the only one
 * for good, the vthread it waits for would never run, and the test would
 * time out.  That structure, not a count of pinned events or a duration,
 * is what each stands on.  (Not a white-box test: the program's calls must
 * reach the C library and the interposers as a program's do.) */
#include "harness.h"

#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/futex.h>
#include <unistd.h>


static void no_sanitizer(void) {
    if (TEST_SANITIZED)
        SKIP("sanitizer build: the trap is refused there (the sanitizer runtime's own system calls would trap)");
}

static unsigned long long trapped(void) {
    weft_stats s;
    weft_stats_get(&s);
    return (unsigned long long)s.trapped;
}

static void *probe_body(void *arg) {
    (void)arg;
    unsigned long long t0 = trapped();
    CHECK_EQ(syscall(SYS_getppid), (long)getppid()); /* (getppid: the PLT's, libc's own wrapper: trapped too) */
    return (void *)(uintptr_t)(trapped() > t0);
}

/* The runtime: one carrier (or n), the hooks and the trap on, no monitor. */
static void start_n(int carriers, int own_tls) {
    no_sanitizer();
    weft_runtime_opts cfg = {.carriers = carriers, .hook = WEFT_HOOK_ON, .trap = 1, .own_tls = own_tls ? 1 : 0,
                             .pin_threshold_ns = -1};
    CHECK_EQ(weft_init(&cfg), 0);
    if (!join(go(probe_body, NULL))) SKIP("this kernel has no syscall user dispatch (Linux 5.11+)");
}
static void start(void) { start_n(1, 0); }

/* ---- stdio on pipes and sockets -------------------------------------------- */

static const char line[] = "a line that stdio reads with its own read(2)\n";
#define NREAD 50
static int rfd[NREAD], wfd[NREAD];
static atomic_int readers_in, lines_ok;

static void *fgets_reader(void *arg) {
    int i = (int)(intptr_t)arg;
    FILE *f = fdopen(rfd[i], "r");
    CHECK(f != NULL);
    char buf[128];
    atomic_fetch_add(&readers_in, 1);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    CHECK_EQ(strcmp(buf, line), 0);
    atomic_fetch_add(&lines_ok, 1);
    fclose(f);
    return NULL;
}
static void *getline_reader(void *arg) {
    int i = (int)(intptr_t)arg;
    FILE *f = fdopen(rfd[i], "r");
    CHECK(f != NULL);
    char *buf = NULL;
    size_t cap = 0;
    atomic_fetch_add(&readers_in, 1);
    CHECK_EQ(getline(&buf, &cap, f), (ssize_t)strlen(line));
    CHECK_EQ(strcmp(buf, line), 0);
    atomic_fetch_add(&lines_ok, 1);
    free(buf);
    fclose(f);
    return NULL;
}
/* Fills every pipe once every reader is in its read: on one carrier, only
 * if those reads parked. */
static void *filler(void *arg) {
    (void)arg;
    while (atomic_load(&readers_in) < NREAD) weft_yield();
    for (int i = 0; i < NREAD; i++) {
        CHECK_EQ(write(wfd[i], line, strlen(line)), (ssize_t)strlen(line));
        CHECK_EQ(close(wfd[i]), 0);
    }
    return NULL;
}

static void readers_round(void *(*reader)(void *), int sockets) {
    atomic_store(&readers_in, 0);
    atomic_store(&lines_ok, 0);
    for (int i = 0; i < NREAD; i++) {
        int fds[2];
        CHECK_EQ(sockets ? socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) : pipe2(fds, O_CLOEXEC), 0);
        rfd[i] = fds[0];
        wfd[i] = fds[1];
    }
    weft_thread *r[NREAD];
    for (int i = 0; i < NREAD; i++) r[i] = go(reader, (void *)(intptr_t)i);
    weft_thread *f = go(filler, NULL);
    for (int i = 0; i < NREAD; i++) join(r[i]);
    join(f);
    CHECK_EQ(atomic_load(&lines_ok), NREAD);
}

static void *fgets_rounds(void *arg) {
    int n = (int)(intptr_t)arg;
    unsigned long long t0 = trapped();
    for (int k = 0; k < n; k++) readers_round(fgets_reader, 0);
    CHECK(trapped() > t0); /* stdio's reads came through the trap */
    return NULL;
}

TEST(fgets_on_pipes_parks_on_one_carrier) {
    start();
    join(go(fgets_rounds, (void *)(intptr_t)20));
}

static void *getline_rounds(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int k = 0; k < n; k++) readers_round(getline_reader, 1);
    return NULL;
}

TEST(getline_on_sockets_parks_on_one_carrier) {
    start();
    join(go(getline_rounds, (void *)(intptr_t)10));
}

/* fwrite into a full pipe: the writer's fflush parks until the drainer --
 * on the same carrier -- reads it all. */
#define BIG (256 * 1024)
static atomic_int writing;
static void *big_writer(void *arg) {
    FILE *f = fdopen((int)(intptr_t)arg, "w");
    CHECK(f != NULL);
    static char data[BIG];
    memset(data, 'w', sizeof data);
    atomic_store(&writing, 1);
    CHECK_EQ(fwrite(data, 1, sizeof data, f), sizeof data);
    CHECK_EQ(fflush(f), 0);
    CHECK_EQ(fclose(f), 0);
    return NULL;
}
static void *fwrite_body(void *arg) {
    (void)arg;
    for (int k = 0; k < 5; k++) {
        int p[2];
        CHECK_EQ(pipe2(p, O_CLOEXEC), 0);
        atomic_store(&writing, 0);
        weft_thread *w = go(big_writer, (void *)(intptr_t)p[1]);
        while (!atomic_load(&writing)) weft_yield();
        weft_yield(); /* (the writer fills the pipe and parks: or nothing here runs) */
        static char buf[65536];
        size_t total = 0;
        ssize_t r;
        while ((r = read(p[0], buf, sizeof buf)) > 0) total += (size_t)r;
        CHECK_EQ(total, (size_t)BIG);
        close(p[0]);
        join(w);
    }
    return NULL;
}

TEST(fwrite_to_a_full_pipe_parks_on_one_carrier) {
    start();
    join(go(fwrite_body, NULL));
}

/* ---- popen, system: a child made from a trapped vthread, and its wait ----- */

static char flag_path[64];
static void *flag_maker(void *arg) {
    (void)arg;
    usleep(1000); /* (hooked: parks) after the waiter is in its wait, or not: either way it must run */
    FILE *f = fopen(flag_path, "w");
    CHECK(f != NULL);
    CHECK_EQ(fclose(f), 0);
    return NULL;
}
static void *popen_system_body(void *arg) {
    (void)arg;
    for (int k = 0; k < 5; k++) {
        /* popen + fgets + pclose: the child echoes a line */
        FILE *p = popen("echo from-the-child", "r");
        CHECK(p != NULL);
        char buf[64];
        CHECK(fgets(buf, sizeof buf, p) != NULL);
        CHECK_EQ(strcmp(buf, "from-the-child\n"), 0);
        CHECK_EQ(pclose(p), 0);
        /* system(): its child waits for a file that a vthread on this same
         * carrier makes -- which runs only if system's wait parked */
        snprintf(flag_path, sizeof flag_path, "/tmp/weft-test-trap-%d-%d", (int)getpid(), k);
        unlink(flag_path);
        weft_thread *m = go(flag_maker, NULL);
        char cmd[160];
        snprintf(cmd, sizeof cmd, "while [ ! -e %s ]; do sleep 0.01; done; exit 3", flag_path);
        int st = system(cmd);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 3);
        join(m);
        unlink(flag_path);
    }
    return NULL;
}

TEST(popen_and_system_park_their_waits) {
    start();
    join(go(popen_system_body, NULL));
}

/* fork and vfork from a trapped vthread: the child comes back to the
 * program's code, at the call, with the program's registers. */
static void *fork_body(void *arg) {
    (void)arg;
    for (int k = 0; k < 3; k++) {
        volatile int local = 40 + k;
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(local + 1);
        int st;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 41 + k);
        pid = vfork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(7);
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 7);
        CHECK_EQ(local, 40 + k); /* (the frames below the call came back) */
        char *argv[] = {"sh", "-c", "exit 5", NULL};
        CHECK_EQ(posix_spawnp(&pid, "sh", NULL, NULL, argv, environ), 0);
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK_EQ(WEXITSTATUS(st), 5);
    }
    return NULL;
}

TEST(fork_vfork_and_posix_spawn_from_a_trapped_vthread) {
    start();
    join(go(fork_body, NULL));
}

/* A vfork is the kernel's (trap.c, trapped_vfork): the child shares the
 * parent's memory until it execs, runs on the parent's stack over the
 * trap's own frames, and its calls -- close, dup2, sigprocmask, execve --
 * are the C library's, never a vthread's; the parent comes back with its
 * frames, its descriptors and its mask as they were.  Repeated: each round
 * puts the child's frames where the handler's were. */
static volatile int vfork_shared;
static void *vfork_body(void *arg) {
    (void)arg;
    int p[2];
    CHECK_EQ(pipe(p), 0);
    sigset_t blocked, was;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGUSR2);
    CHECK_EQ(pthread_sigmask(SIG_BLOCK, &blocked, &was), 0);
    for (int k = 0; k < SCALE(200); k++) {
        volatile unsigned long canary[16];
        for (int i = 0; i < 16; i++) canary[i] = 0x5eed0000ul + (unsigned long)(k * 16 + i);
        vfork_shared = 0;
        pid_t pid = vfork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* the child: the mask it inherits is the vthread's */
            sigset_t m;
            if (sigprocmask(SIG_SETMASK, NULL, &m) != 0 || !sigismember(&m, SIGUSR2)) _exit(90);
            vfork_shared = k + 1; /* seen by the parent: one memory */
            if (dup2(p[1], 1) != 1) _exit(91);
            close(p[0]);
            char *argv[] = {"sh", "-c", k % 2 ? "printf x; exit 9" : "exit 9", NULL};
            execv("/bin/sh", argv);
            _exit(92);
        }
        int st;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        CHECK_EQ(WEXITSTATUS(st), 9);
        CHECK_EQ(vfork_shared, k + 1);
        for (int i = 0; i < 16; i++) CHECK_EQ(canary[i], 0x5eed0000ul + (unsigned long)(k * 16 + i));
        if (k % 2) {
            char c = 0;
            CHECK_EQ(read(p[0], &c, 1), 1);
            CHECK_EQ(c, 'x');
        }
    }
    sigset_t now;
    CHECK_EQ(pthread_sigmask(SIG_SETMASK, &was, &now), 0);
    CHECK(sigismember(&now, SIGUSR2));
    close(p[0]);
    close(p[1]);
    return NULL;
}

TEST(a_vfork_child_shares_memory_and_leaves_the_parents_frames_whole) {
    start();
    join(go(vfork_body, NULL));
    join(go(vfork_body, NULL));
}

/* ---- futex: raw waits and the C library's internal locks ------------------- */

static _Atomic uint32_t word;
static atomic_int bystander_ran;
static void *futex_waiter(void *arg) {
    (void)arg;
    while (atomic_load(&word) == 0) {
        long r = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        CHECK(r == 0 || errno == EAGAIN || errno == EINTR);
    }
    return NULL;
}
static void *futex_bystander(void *arg) {
    (void)arg;
    atomic_store(&bystander_ran, 1);
    return NULL;
}
/* A kernel thread: wakes the word once the bystander -- on the waiter's one
 * carrier -- has run. */
static void *futex_waker(void *arg) {
    (void)arg;
    while (!atomic_load(&bystander_ran)) usleep(100);
    atomic_store(&word, 1);
    syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    return NULL;
}

TEST(a_raw_futex_wait_parks_and_a_kernel_thread_wakes_it) {
    DET_SKIP("a kernel thread wakes in real time");
    start();
    for (int k = 0; k < SCALE(50); k++) {
        atomic_store(&word, 0);
        atomic_store(&bystander_ran, 0);
        weft_thread *w = go(futex_waiter, NULL);
        weft_yield();
        weft_thread *b = go(futex_bystander, NULL);
        pthread_t kt;
        CHECK_EQ(pthread_create(&kt, NULL, futex_waker, NULL), 0);
        join(w);
        join(b);
        CHECK_EQ(pthread_join(kt, NULL), 0);
    }
}

/* A FILE's lock, held by one vthread across a sleep, wanted by another on
 * the same carrier: stdio's internal lock waits in futex(2), which the
 * trap parks.  With own TLS, so that the two are two owners to stdio. */
static FILE *shared;
static atomic_int holder_in, taker_done;
static void *file_holder(void *arg) {
    (void)arg;
    flockfile(shared);
    atomic_store(&holder_in, 1);
    while (!atomic_load(&bystander_ran)) usleep(1000); /* (parks: the taker is in its wait meanwhile, or about to be) */
    CHECK(fputs("holder\n", shared) >= 0);
    funlockfile(shared);
    return NULL;
}
static void *file_taker(void *arg) {
    (void)arg;
    CHECK(fputs("taker\n", shared) >= 0); /* waits for the holder's lock */
    atomic_store(&taker_done, 1);
    return NULL;
}

TEST(a_stdio_lock_wait_parks_with_own_tls) {
    start_n(1, 1);
    shared = tmpfile();
    CHECK(shared != NULL);
    for (int k = 0; k < SCALE(50); k++) {
        atomic_store(&holder_in, 0);
        atomic_store(&taker_done, 0);
        atomic_store(&bystander_ran, 0);
        weft_thread *h = go(file_holder, NULL);
        while (!atomic_load(&holder_in)) weft_yield();
        weft_thread *t = go(file_taker, NULL);
        weft_yield();
        weft_thread *b = go(futex_bystander, NULL);
        join(h);
        join(t);
        join(b);
        CHECK_EQ(atomic_load(&taker_done), 1);
    }
    fclose(shared);
}

/* ---- the signal state the trap keeps --------------------------------------- */

static void *mask_body(void *arg) {
    (void)arg;
    uint64_t set = 1ULL << (SIGUSR1 - 1) | 1ULL << (SIGSYS - 1), old = 0, cur = 0;
    /* raw: the trap takes it to the frame the handler returns through */
    CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, &old, sizeof set), 0);
    CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &cur, sizeof cur), 0);
    CHECK(cur & (1ULL << (SIGUSR1 - 1)));     /* took effect */
    CHECK(!(cur & (1ULL << (SIGSYS - 1))));   /* SIGSYS never blocked: the trap's own */
    CHECK_EQ(syscall(SYS_getppid), (long)getppid()); /* and the trap still works */
    sigset_t ss;
    CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &ss), 0);
    CHECK_EQ(sigismember(&ss, SIGUSR1), 1);
    CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old), 0);
    CHECK_EQ(pthread_sigmask(SIG_SETMASK, NULL, &ss), 0);
    CHECK_EQ(sigismember(&ss, SIGUSR1), 0);
    /* a bad size is the kernel's EINVAL */
    errno = 0;
    CHECK_EQ(syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, (size_t)3), -1L);
    CHECK_EQ(errno, EINVAL);
    /* results and errno of a trapped call, as the kernel's */
    errno = 0;
    CHECK_EQ(syscall(SYS_read, -1, NULL, 0), -1L);
    CHECK_EQ(errno, EBADF);
    return NULL;
}

TEST(signal_masks_and_errors_through_the_trap) {
    start();
    join(go(mask_body, NULL));
}

/* A program's handler that interrupts the program's own (trapped) code:
 * its return -- the C library's rt_sigreturn, trapped -- gets back. */
static atomic_int handled;
static void on_usr1(int sig) {
    (void)sig;
    atomic_fetch_add(&handled, 1);
}
static atomic_long carrier_tid;
/* The calling kernel thread's tid: a raw gettid on a vthread with its own
 * TLS answers the vthread's own, which the kernel does not know (hook.c's
 * trap, as gettid(3)); /proc/thread-self is the kernel's answer. */
static long kernel_tid(void) {
    char buf[64];
    ssize_t n = readlink("/proc/thread-self", buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char *t = strstr(buf, "/task/");
    return t ? atol(t + 6) : -1;
}
static void *spinner(void *arg) {
    (void)arg;
    atomic_store(&carrier_tid, kernel_tid());
    while (atomic_load(&handled) < 3) CPU_RELAX(); /* the program's code: trapped */
    CHECK_EQ(syscall(SYS_getppid), (long)getppid());
    return NULL;
}
static void *signaller(void *arg) {
    (void)arg;
    while (!atomic_load(&carrier_tid)) usleep(100);
    for (int i = 0; i < 3; i++) {
        int before = atomic_load(&handled);
        CHECK_EQ(syscall(SYS_tgkill, getpid(), (pid_t)atomic_load(&carrier_tid), SIGUSR1), 0);
        while (atomic_load(&handled) == before) usleep(100);
    }
    return NULL;
}

TEST(a_handler_that_interrupts_trapped_code_returns_to_it) {
    DET_SKIP("a kernel thread signals in real time");
    start();
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    CHECK_EQ(sigaction(SIGUSR1, &sa, NULL), 0);
    weft_thread *s = go(spinner, NULL);
    pthread_t kt;
    CHECK_EQ(pthread_create(&kt, NULL, signaller, NULL), 0);
    join(s);
    CHECK_EQ(pthread_join(kt, NULL), 0);
}

/* pthread_create from a trapped vthread: its clone is made again at the
 * program's instruction, untrapped for that call; the trap is armed again
 * at the vthread's next hooked call. */
static void *kt_noop(void *arg) { return arg; }
static void *create_body(void *arg) {
    (void)arg;
    for (int k = 0; k < 5; k++) {
        pthread_t t;
        void *r = NULL;
        CHECK_EQ(pthread_create(&t, NULL, kt_noop, (void *)(intptr_t)(k + 1)), 0);
        CHECK_EQ(pthread_join(t, &r), 0);
        CHECK_EQ((intptr_t)r, k + 1);
        usleep(1); /* a hooked call: armed again on its way out */
        unsigned long long t0 = trapped();
        CHECK_EQ(syscall(SYS_getppid), (long)getppid());
        CHECK(trapped() > t0);
    }
    return NULL;
}

TEST(pthread_create_from_a_trapped_vthread_and_the_trap_after) {
    start();
    join(go(create_body, NULL));
}

/* ---- many vthreads, two carriers -------------------------------------------- */

TEST(fgets_stress_on_two_carriers) {
    start_n(2, 0);
    join(go(fgets_rounds, (void *)(intptr_t)SCALE(200)));
}

/* fopen and fclose take the C library's list_all_lock, a recursive lock
 * that knows its owner by the thread pointer; contended, its futex wait
 * traps and parks.  Many vthreads opening and closing on two carriers: a
 * vthread that resumed on the other carrier after that wait once made the
 * lock's owner the carrier it left, another vthread there entered it
 * "recursively", and its count, updated from both carriers at once, went
 * to -1 -- every later fopen waited for good (stdio_park getline hung one
 * run in ten).  With the trap, vthreads have their own TLS, the owner is
 * the vthread, and this ends. */
static atomic_long opens_ok;
static void *open_close_body(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        FILE *f = fopen("/dev/null", "w");
        CHECK(f != NULL);
        CHECK(fputs("x", f) >= 0);
        CHECK_EQ(fclose(f), 0);
        atomic_fetch_add(&opens_ok, 1);
        if (i % 8 == 0) weft_yield();
    }
    return NULL;
}

TEST(fopen_fclose_from_many_vthreads_on_two_carriers) {
    start_n(2, 0);
    enum { V = 200 };
    int n = SCALE(100);
    atomic_store(&opens_ok, 0);
    weft_thread *t[V];
    for (int i = 0; i < V; i++) t[i] = go(open_close_body, (void *)(intptr_t)n);
    for (int i = 0; i < V; i++) join(t[i]);
    CHECK_EQ(atomic_load(&opens_ok), (long)V * n);
}

/* Whom the trap traps: with it on, vthreads have their own TLS by
 * default and their calls trap; one spawned without (own_tls -1) runs as
 * without the trap; and with own TLS turned off for all the trap stays
 * off (one line on stderr says why). */
static void *tls_and_trapped_body(void *arg) {
    (void)arg;
    static __thread int mine;
    mine = 1;
    unsigned long long t0 = trapped();
    CHECK_EQ(syscall(SYS_getppid), (long)getppid());
    return (void *)(uintptr_t)(trapped() > t0);
}

TEST(the_trap_traps_only_vthreads_with_their_own_tls) {
    start();
    weft_thread *t;
    void *r;
    CHECK_EQ(weft_spawn(&t, tls_and_trapped_body, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == (void *)1); /* the runtime's default: own TLS, trapped */
    weft_thread_opts no = {.own_tls = -1};
    CHECK_EQ(weft_spawn(&t, tls_and_trapped_body, NULL, &no), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == NULL); /* the carrier's TLS: not trapped */
    weft_shutdown();
    weft_runtime_opts off = {.carriers = 1, .hook = WEFT_HOOK_ON, .trap = 1, .own_tls = -1};
    CHECK_EQ(weft_init(&off), 0);
    CHECK_EQ(weft_spawn(&t, tls_and_trapped_body, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK(r == NULL);
}

/* ---- where it is off ----------------------------------------------------------- */

static void *untrapped_body(void *arg) {
    (void)arg;
    unsigned long long t0 = trapped();
    CHECK_EQ(syscall(SYS_getppid), (long)getppid());
    CHECK_EQ(trapped(), t0);
    return NULL;
}

/* ---- the dump names a trapped wait ------------------------------------------ */

static _Atomic uint32_t dump_word;
static void *dump_futex_waiter(void *arg) {
    (void)arg;
    while (atomic_load(&dump_word) == 0) syscall(SYS_futex, &dump_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    return NULL;
}

/* A vthread parked in a trapped futex wait: the dump says so, with the
 * word's address and the instruction the call came from, in text and in
 * JSON (what weft-top reads); and counts the vthread's trapped calls. */
TEST(the_dump_shows_a_trapped_futex_wait) {
    DET_SKIP("a platform thread wakes in real time");
    start();
    weft_thread *t;
    weft_thread_opts o = {.name = "in-futex"};
    CHECK_EQ(weft_spawn(&t, dump_futex_waiter, NULL, &o), 0);
    char text[96], json[96];
    snprintf(text, sizeof text, "in trapped futex (futex 0x%" PRIxPTR ", from ", (uintptr_t)&dump_word);
    snprintf(json, sizeof json, "\"trapped\":{\"call\":\"futex\",\"nr\":%d,\"futex\":\"0x%" PRIxPTR "\"",
             (int)SYS_futex, (uintptr_t)&dump_word);
    /* the site: the program's frame, past the C library's syscall() */
    char *d = dump_showing(WEFT_DUMP_TEXT, "\"in-futex\" [own TLS] [1 trapped call] parked on blocking", text,
                           "test_trap.c", "(dump_futex_waiter)", NULL);
    char *l = strstr(d, "\"in-futex\"");
    printf("%.*s\n", (int)strcspn(l, "\n"), l);
    CHECK(strstr(d, "1 vthread parked on blocking in trapped futex at ") != NULL); /* its group */
    free(d);
    d = dump_showing(WEFT_DUMP_JSON, json, "\"trapped_calls\":1", NULL);
    free(d);
    atomic_store(&dump_word, 1); /* a platform thread's wake */
    syscall(SYS_futex, &dump_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    join(t);
}

/* With the trap on, the rest of the runtime starts as ever: the console
 * (its socket is there) and the monitor (it sees a vthread that computes
 * and holds its carrier: a hog event).  weft_init's "on" from the trap's
 * start once kept both from starting. */
static atomic_int hog_seen;
static void *hog_body(void *arg) {
    (void)arg;
    weft_stats s;
    do weft_stats_get(&s);
    while (s.hogs == 0); /* computes, never switching, until the monitor has seen it */
    atomic_store(&hog_seen, 1);
    return NULL;
}

TEST(the_console_and_the_monitor_run_with_the_trap) {
    DET_SKIP("deterministic mode has no monitor");
    no_sanitizer();
    char sock[64];
    snprintf(sock, sizeof sock, "/tmp/weft-test-trap-%d.sock", (int)getpid());
    unlink(sock);
    weft_runtime_opts cfg = {.carriers = 1, .hook = WEFT_HOOK_ON, .trap = 1, .console = sock};
    CHECK_EQ(weft_init(&cfg), 0);
    if (!join(go(probe_body, NULL))) SKIP("this kernel has no syscall user dispatch (Linux 5.11+)");
    struct stat st;
    CHECK_EQ(stat(sock, &st), 0);
    CHECK(S_ISSOCK(st.st_mode));
    join(go(hog_body, NULL)); /* (the test's timeout fails it if no monitor ever looks) */
    CHECK(atomic_load(&hog_seen));
}

TEST(the_trap_stays_off_without_the_hooks_and_by_default) {
    weft_runtime_opts cfg = {.carriers = 1, .hook = WEFT_HOOK_OFF, .trap = 1};
    CHECK_EQ(weft_init(&cfg), 0); /* (one line on stderr says why it is off) */
    join(go(untrapped_body, NULL));
    weft_shutdown();
    unsetenv("WEFT_TRAP");
    weft_runtime_opts dflt = {.carriers = 1, .hook = WEFT_HOOK_ON};
    CHECK_EQ(weft_init(&dflt), 0);
    join(go(untrapped_body, NULL));
}

TEST(the_trap_is_refused_in_sanitizer_builds) {
    if (!TEST_SANITIZED) SKIP("not a sanitizer build: the trap is there");
    weft_runtime_opts cfg = {.carriers = 1, .hook = WEFT_HOOK_ON, .trap = 1};
    CHECK_EQ(weft_init(&cfg), 0); /* (one line on stderr says why it is off) */
    join(go(untrapped_body, NULL));
}
