/*
 * A program weft did not compile that uses glibc's thread API -- plain C
 * library, pthreads and C11 threads, no weft header -- for test_run, which
 * runs it natively and under weft-run (where every thread it creates is a
 * vthread: issue 27, Deliver 1 and 2) and expects the same output both
 * times.  One behaviour per mode; each prints only what glibc's own
 * threads make deterministic.
 *
 *   join      8 threads, each with its own __thread value, errno and gettid
 *             (the call and the raw system call alike),
 *             return a value pthread_join hands back; pthread_self and
 *             pthread_equal tell them apart; joining oneself is EDEADLK,
 *             joining a joined thread's id again ... is not asked (glibc
 *             may crash)
 *   detach    threads detached by their attributes and by pthread_detach
 *             (before and after they end) all run; joining a detached
 *             thread that still runs is EINVAL
 *   exit      pthread_exit's value, and cleanup handlers run innermost
 *             first, C11 thrd_create / thrd_join / thrd_exit, then main
 *             leaves by pthread_exit while a thread still runs: the
 *             process ends 0 once that thread has
 *   cancel    pthread_cancel of a thread parked in read(), in nanosleep and
 *             in pthread_testcancel after cancellation was re-enabled: each
 *             joins as PTHREAD_CANCELED with its cleanup handler run; one
 *             with cancellation disabled finishes its sleep
 *   names     pthread_setname_np on itself and on another thread, what
 *             pthread_getname_np reads back, ERANGE for 16 bytes or more
 *   attr      pthread_getattr_np's stack holds the caller's frame; a thread
 *             made with a 2 MiB stack can use 1.5 MiB of it
 *   keys      pthread_key_create's destructor runs once for each thread
 *             that set a value, on that thread, as it ends
 *   kill      pthread_kill: of itself, the handler runs on the caller before
 *             it returns; of a thread waiting in read() (handler without
 *             SA_RESTART), the read ends with EINTR and the handler ran on
 *             that thread; signal 0 probes a live thread
 *   sendfile  sendfile() of a 1 MiB file into a blocking socket whose other
 *             end a thread of its own reads: all of it arrives (under
 *             weft-run with one carrier, the kernel's sendfile would hold
 *             the carrier the reader needs)
 *   fork-thread  a thread forks; in the child that thread returns from its
 *             function, and the child exits 0 (glibc: its last thread ended)
 *   masks     signal masks are each thread's: inherited by a new thread,
 *             or its attributes' (pthread_attr_setsigmask_np), changed
 *             by it alone; a pthread_kill it blocks stays pending for it
 *             (sigpending) and its handler runs on it as it unblocks,
 *             before pthread_sigmask returns; sigwaitinfo takes a
 *             process-directed signal every thread blocks (SI_USER, no
 *             handler); sigtimedwait times out with EAGAIN; sigsuspend
 *             runs the handler on its caller and returns EINTR with the
 *             mask back; a SIGTERM whose action is the default, blocked
 *             everywhere, is taken by sigwait rather than killing the
 *             process, and sigaction still reports SIG_DFL; a SIGALRM
 *             from an interval timer is taken by sigwait; a fork child
 *             passes the mask on through exec
 *   spin      a thread computes (a loop on a flag, no call) until main,
 *             after a sleep and a read of a file, sets the flag: under
 *             weft-run on one carrier with no spares, only preemption lets
 *             main run again
 *   many N    N threads all alive at once (each waits for the last to be
 *             made), then all joined: "all N" or "stopped at K: ERR"
 *   vfork     a thread vforks as Python's subprocess does: every signal
 *             blocked around the call; the child resets each handler to
 *             SIG_DFL and unblocks, then execs this program again in mode
 *             hup-parent, which sends the parent SIGHUP (this program, not
 *             a shell: under a sanitizer weft-run's library runs only in
 *             instrumented binaries); the parent's handler still runs,
 *             each round (the child's sigactions are its own process's)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static __thread int tl_value;

/* ---- join ---- */

struct jarg {
    int i;
    pid_t tid;
    pthread_t self;
};

static void *join_body(void *p) {
    struct jarg *a = p;
    tl_value = a->i;
    errno = 100 + a->i;
    a->tid = gettid();
    if ((pid_t)syscall(SYS_gettid) != a->tid) a->tid = -1; /* (the raw call: CPython's get_native_id) */
    a->self = pthread_self();
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL); /* (parks: another thread runs meanwhile) */
    int ok = tl_value == a->i && errno == 100 + a->i && pthread_equal(a->self, pthread_self());
    return (void *)(intptr_t)(ok ? a->i * 10 : -1);
}

static int mode_join(void) {
    pthread_t t[8];
    struct jarg a[8];
    for (int i = 0; i < 8; i++) {
        a[i].i = i;
        if (pthread_create(&t[i], NULL, join_body, &a[i])) return 1;
    }
    int good = 0;
    for (int i = 0; i < 8; i++) {
        void *r = NULL;
        int e = pthread_join(t[i], &r);
        if (e == 0 && (intptr_t)r == i * 10 && pthread_equal(t[i], a[i].self)) good++;
    }
    int distinct = 1;
    for (int i = 0; i < 8; i++) {
        if (a[i].tid < 0 || a[i].tid == gettid() || pthread_equal(a[i].self, pthread_self())) distinct = 0;
        for (int j = 0; j < i; j++)
            if (a[i].tid == a[j].tid || pthread_equal(a[i].self, a[j].self)) distinct = 0;
    }
    printf("joined %d of 8 with their values; ids distinct %s; self-join %s\n", good, distinct ? "yes" : "no",
           strerror(pthread_join(pthread_self(), NULL)));
    return 0;
}

/* ---- detach ---- */

static pthread_mutex_t d_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t d_c = PTHREAD_COND_INITIALIZER;
static int d_ran, d_go;

static void *detach_body(void *p) {
    (void)p;
    pthread_mutex_lock(&d_m);
    d_ran++;
    pthread_cond_broadcast(&d_c);
    pthread_mutex_unlock(&d_m);
    return NULL;
}

static void *held_body(void *p) {
    (void)p;
    pthread_mutex_lock(&d_m);
    while (!d_go) pthread_cond_wait(&d_c, &d_m);
    d_ran++;
    pthread_cond_broadcast(&d_c);
    pthread_mutex_unlock(&d_m);
    return NULL;
}

static int mode_detach(void) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t, &at, detach_body, NULL)) return 1;
    pthread_attr_destroy(&at);
    for (int i = 0; i < 4; i++) { /* detached after they were made: some may have ended */
        if (pthread_create(&t, NULL, detach_body, NULL)) return 1;
        if (pthread_detach(t)) return 1;
    }
    pthread_t held;
    if (pthread_create(&held, NULL, held_body, NULL) || pthread_detach(held)) return 1;
    int e = pthread_join(held, NULL); /* still waiting for d_go: EINVAL */
    pthread_mutex_lock(&d_m);
    d_go = 1;
    pthread_cond_broadcast(&d_c);
    while (d_ran < 9) pthread_cond_wait(&d_c, &d_m);
    pthread_mutex_unlock(&d_m);
    printf("9 detached threads ran; join of a running detached thread: %s\n", strerror(e));
    return 0;
}

/* ---- exit ---- */

static void say(void *s) { printf("cleanup %s\n", (const char *)s); }

static int deep(int n) {
    if (n < 0) return 0;
    if (n == 0) pthread_exit((void *)(intptr_t)77);
    return deep(n - 1) + 1;
}

static void *exit_body(void *p) {
    (void)p;
    pthread_cleanup_push(say, "outer");
    pthread_cleanup_push(say, "inner");
    deep(5);
    pthread_cleanup_pop(0);
    pthread_cleanup_pop(0);
    return NULL;
}

static int c11_body(void *p) {
    if (p) thrd_exit(42);
    return 41;
}

static void *last_body(void *p) {
    (void)p;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    printf("the last thread ends after main left\n");
    fflush(stdout);
    return NULL;
}

static int mode_exit(void) {
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, NULL, exit_body, NULL)) return 1;
    pthread_join(t, &r);
    printf("pthread_exit value %ld\n", (long)(intptr_t)r);
    thrd_t c[2];
    int res[2] = {0, 0};
    thrd_create(&c[0], c11_body, NULL);
    thrd_create(&c[1], c11_body, (void *)1);
    thrd_join(c[0], &res[0]);
    thrd_join(c[1], &res[1]);
    printf("thrd results %d %d\n", res[0], res[1]);
    fflush(stdout);
    if (pthread_create(&t, NULL, last_body, NULL)) return 1;
    pthread_exit(NULL); /* the process goes on until the last thread ends, then exits 0 */
}

/* ---- cancel ---- */

static int c_pipe[2];

static void *cancel_read(void *p) {
    (void)p;
    char b;
    pthread_cleanup_push(say, "read");
    for (;;) (void)!read(c_pipe[0], &b, 1);
    pthread_cleanup_pop(0);
    return NULL;
}

static void *cancel_sleep(void *p) {
    (void)p;
    pthread_cleanup_push(say, "sleep");
    for (;;) sleep(100);
    pthread_cleanup_pop(0);
    return NULL;
}

static pthread_mutex_t c_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c_c = PTHREAD_COND_INITIALIZER;
static int c_stage;

static void *cancel_disabled(void *p) {
    (void)p;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&c_m);
    c_stage = 1;
    pthread_cond_broadcast(&c_c);
    while (c_stage < 2) pthread_cond_wait(&c_c, &c_m);
    pthread_mutex_unlock(&c_m);
    struct timespec ts = {0, 50 * 1000 * 1000};
    int s = nanosleep(&ts, NULL); /* cancelled meanwhile, disabled: sleeps it all */
    printf("disabled: the sleep returned %d\n", s);
    fflush(stdout);
    pthread_cleanup_push(say, "re-enabled");
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
    pthread_testcancel();
    pthread_cleanup_pop(0);
    return NULL;
}

static void nap_ms(int ms) {
    struct timespec ts = {0, ms * 1000L * 1000L};
    nanosleep(&ts, NULL);
}

static int mode_cancel(void) {
    if (pipe(c_pipe)) return 1;
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, NULL, cancel_read, NULL)) return 1;
    nap_ms(50);
    pthread_cancel(t);
    pthread_join(t, &r);
    fflush(stdout);
    printf("read: %s\n", r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
    if (pthread_create(&t, NULL, cancel_sleep, NULL)) return 1;
    nap_ms(50);
    pthread_cancel(t);
    pthread_join(t, &r);
    printf("sleep: %s\n", r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
    fflush(stdout);
    if (pthread_create(&t, NULL, cancel_disabled, NULL)) return 1;
    pthread_mutex_lock(&c_m);
    while (c_stage < 1) pthread_cond_wait(&c_c, &c_m);
    pthread_cancel(t);
    c_stage = 2;
    pthread_cond_broadcast(&c_c);
    pthread_mutex_unlock(&c_m);
    pthread_join(t, &r);
    printf("testcancel: %s\n", r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
    return 0;
}

/* ---- names ---- */

static pthread_mutex_t n_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t n_c = PTHREAD_COND_INITIALIZER;
static int n_stage;

static void *names_body(void *p) {
    (void)p;
    char own[16];
    pthread_setname_np(pthread_self(), "self-named");
    pthread_getname_np(pthread_self(), own, sizeof own);
    printf("a thread named itself \"%s\"\n", own);
    fflush(stdout);
    pthread_mutex_lock(&n_m);
    n_stage = 1;
    pthread_cond_broadcast(&n_c);
    while (n_stage < 2) pthread_cond_wait(&n_c, &n_m);
    pthread_mutex_unlock(&n_m);
    return NULL;
}

static int mode_names(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, names_body, NULL)) return 1;
    pthread_mutex_lock(&n_m);
    while (n_stage < 1) pthread_cond_wait(&n_c, &n_m);
    pthread_mutex_unlock(&n_m);
    char b[16];
    pthread_getname_np(t, b, sizeof b);
    printf("read by another: \"%s\"\n", b);
    int e1 = pthread_setname_np(t, "sixteen-bytes-x"); /* 15: fits */
    int e2 = pthread_setname_np(t, "seventeen-bytes-x");
    pthread_getname_np(t, b, sizeof b);
    char tiny[8];
    int e3 = pthread_getname_np(t, tiny, sizeof tiny);
    printf("renamed: %s, \"%s\"; too long: %s; small buffer: %s\n", strerror(e1), b, strerror(e2), strerror(e3));
    pthread_mutex_lock(&n_m);
    n_stage = 2;
    pthread_cond_broadcast(&n_c);
    pthread_mutex_unlock(&n_m);
    pthread_join(t, NULL);
    return 0;
}

/* ---- attr ---- */

static int holds(const pthread_attr_t *a, const void *p) {
    void *lo;
    size_t sz;
    pthread_attr_getstack(a, &lo, &sz);
    return (const char *)p >= (const char *)lo && (const char *)p < (const char *)lo + sz;
}

static void *attr_body(void *p) {
    (void)p;
    pthread_attr_t a;
    int local = 0;
    if (pthread_getattr_np(pthread_self(), &a)) return (void *)0;
    size_t sz = 0;
    pthread_attr_getstacksize(&a, &sz);
    int ok = holds(&a, &local) && sz >= (2u << 20);
    pthread_attr_destroy(&a);
    /* 1.5 MiB of it */
    volatile char big[1536 * 1024];
    big[0] = 1;
    big[sizeof big - 1] = 1;
    return (void *)(intptr_t)(ok && big[0] + big[sizeof big - 1] == 2);
}

static int mode_attr(void) {
    pthread_attr_t a;
    int local = 0;
    pthread_getattr_np(pthread_self(), &a);
    int main_ok = holds(&a, &local);
    pthread_attr_destroy(&a);
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 2u << 20);
    pthread_t t;
    void *r = NULL;
    if (pthread_create(&t, &a, attr_body, NULL)) return 1;
    pthread_attr_destroy(&a);
    pthread_join(t, &r);
    printf("main's stack holds its frame: %s; a 2 MiB thread's: %s\n", main_ok ? "yes" : "no", r ? "yes" : "no");
    return 0;
}

/* ---- keys ---- */

static pthread_key_t k_key;
static _Atomic int k_dtors, k_own;

static void k_dtor(void *v) {
    k_dtors++;
    if (v == (void *)pthread_self()) k_own++;
}

static void *keys_body(void *p) {
    if (p) pthread_setspecific(k_key, (void *)pthread_self());
    return NULL;
}

static int mode_keys(void) {
    pthread_key_create(&k_key, k_dtor);
    pthread_t t[10];
    for (int i = 0; i < 10; i++)
        if (pthread_create(&t[i], NULL, keys_body, (void *)(intptr_t)(i % 2))) return 1;
    for (int i = 0; i < 10; i++) pthread_join(t[i], NULL);
    printf("destructors ran %d times, %d on their own thread\n", (int)k_dtors, (int)k_own);
    return 0;
}

/* ---- kill ---- */

static pthread_t k_ran_on;
static volatile sig_atomic_t k_runs;
static void k_handler(int sig) {
    (void)sig;
    k_ran_on = pthread_self();
    k_runs++;
}

static void *kill_raiser(void *p) {
    raise(SIGUSR1); /* (glibc: gettid, then tgkill to it) */
    *(int *)p = pthread_equal(k_ran_on, pthread_self());
    return NULL;
}

static int k_pipe[2];
static _Atomic int k_read_done;
static _Atomic pid_t k_reader_tid;
static void *kill_reader(void *p) {
    k_reader_tid = gettid();
    char b;
    ssize_t r = read(k_pipe[0], &b, 1);
    int e = errno;
    *(int *)p = r < 0 && e == EINTR && pthread_equal(k_ran_on, pthread_self());
    k_read_done = 1;
    return NULL;
}

static int mode_kill(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = k_handler; /* (no SA_RESTART) */
    sigaction(SIGUSR1, &sa, NULL);
    pthread_kill(pthread_self(), SIGUSR1);
    int self_ok = k_runs == 1 && pthread_equal(k_ran_on, pthread_self());
    if (pipe(k_pipe)) return 1;
    int got = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, kill_reader, &got)) return 1;
    nap_ms(100); /* (it waits in read by now, natively and under weft) */
    int probe = pthread_kill(t, 0);
    /* (again until its read has ended: on a loaded machine the thread may
     * not have reached read when the first one came -- seen once, a hang) */
    int before = k_runs;
    for (int i = 0; i < 400 && !k_read_done; i++) {
        pthread_kill(t, SIGUSR1);
        nap_ms(50);
    }
    if (!k_read_done && write(k_pipe[1], "x", 1) != 1) return 1;
    pthread_join(t, NULL);
    k_runs = before + 1; /* (one of them counts) */
    int raised = 0;
    if (pthread_create(&t, NULL, kill_raiser, &raised)) return 1;
    pthread_join(t, NULL);
    /* the same by its tid: tgkill(2) */
    int by_tid = 0;
    k_read_done = 0;
    k_reader_tid = 0;
    if (pthread_create(&t, NULL, kill_reader, &by_tid)) return 1;
    while (!k_reader_tid) nap_ms(5);
    long probe_tid = syscall(SYS_tgkill, getpid(), (pid_t)k_reader_tid, 0);
    before = k_runs;
    for (int i = 0; i < 400 && !k_read_done; i++) {
        syscall(SYS_tgkill, getpid(), (pid_t)k_reader_tid, SIGUSR1);
        nap_ms(50);
    }
    if (!k_read_done && write(k_pipe[1], "x", 1) != 1) return 1;
    pthread_join(t, NULL);
    k_runs = before + 1;
    printf("self: handler on the caller %s; other: read EINTR with the handler on it %s; probe %d; "
           "raise in a thread: on it %s; runs %d; tgkill of its tid: probe %ld, read EINTR with the handler on "
           "it %s\n",
           self_ok ? "yes" : "no", got ? "yes" : "no", probe, raised ? "yes" : "no", (int)k_runs, probe_tid,
           by_tid ? "yes" : "no");
    return 0;
}

/* ---- sendfile ---- */

static int sf_sock[2];
static void *sf_reader(void *p) {
    char b[4096];
    long total = 0;
    ssize_t k;
    while ((k = read(sf_sock[1], b, sizeof b)) > 0) total += k;
    *(long *)p = total;
    return NULL;
}

static int mode_sendfile(void) {
    char path[] = "/tmp/weft-sendfile-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    unlink(path);
    static char chunk[65536];
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (char)(i * 7);
    for (int i = 0; i < 16; i++)
        if (write(fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) return 1;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sf_sock)) return 1;
    long got = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, sf_reader, &got)) return 1;
    off_t off = 0;
    long sent = 0;
    while (sent < 16 * 65536) {
        ssize_t k = sendfile(sf_sock[0], fd, &off, (size_t)(16 * 65536 - sent));
        if (k <= 0) break;
        sent += k;
    }
    close(sf_sock[0]);
    pthread_join(t, NULL);
    printf("sent %ld, offset %ld, read %ld\n", sent, (long)off, got);
    return 0;
}

/* ---- fork-thread ---- */

static void *fork_body(void *p) {
    pid_t c = fork();
    if (c == 0) {
        printf("child's thread returns");
        return NULL; /* the child's only thread: the child exits 0, stdout flushed */
    }
    int st = 0;
    waitpid(c, &st, 0);
    *(int *)p = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return NULL;
}

static int mode_fork_thread(void) {
    fflush(stdout);
    int status = -1;
    pthread_t t;
    if (pthread_create(&t, NULL, fork_body, &status)) return 1;
    pthread_join(t, NULL);
    printf("; the child exited %d\n", status);
    return 0;
}

/* ---- many ---- */

static pthread_mutex_t m_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t m_c = PTHREAD_COND_INITIALIZER;
static int m_open;

static void *many_body(void *p) {
    (void)p;
    pthread_mutex_lock(&m_m);
    while (!m_open) pthread_cond_wait(&m_c, &m_m);
    pthread_mutex_unlock(&m_m);
    return NULL;
}

static int mode_many(long n) {
    pthread_t *t = malloc((size_t)n * sizeof *t);
    if (!t) return 1;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 * 1024); /* (natively: as many as the kernel allows, not as memory does) */
    long k = 0;
    int e = 0;
    for (; k < n; k++)
        if ((e = pthread_create(&t[k], &a, many_body, NULL))) break;
    pthread_mutex_lock(&m_m);
    m_open = 1;
    pthread_cond_broadcast(&m_c);
    pthread_mutex_unlock(&m_m);
    for (long i = 0; i < k; i++) pthread_join(t[i], NULL);
    if (k == n) printf("all %ld\n", n);
    else printf("stopped at %ld: %s\n", k, strerror(e));
    free(t);
    return 0;
}

/* ---- churn ----
 * N threads in rounds of 1000: every other one naps 1 ms (its join waits),
 * the rest return at once (already gone when joined, often), every
 * fourth is made detached, and main joins the others, each handing back
 * its own index. */

static _Atomic long c_detached_done;

static void *churn_body(void *p) {
    long i = (long)(intptr_t)p;
    if (i & 1) nap_ms(1);
    if (i % 4 == 0) atomic_fetch_add(&c_detached_done, 1);
    return p;
}

static int mode_churn(long n) {
    enum { ROUND = 1000 };
    pthread_t t[ROUND];
    pthread_attr_t det;
    pthread_attr_init(&det);
    pthread_attr_setdetachstate(&det, PTHREAD_CREATE_DETACHED);
    long bad = 0, detached = 0;
    for (long base = 0; base < n; base += ROUND) {
        long m = n - base < ROUND ? n - base : ROUND;
        for (long k = 0; k < m; k++) {
            long i = base + k;
            int e = pthread_create(&t[k], i % 4 == 0 ? &det : NULL, churn_body, (void *)(intptr_t)i);
            if (e) {
                printf("pthread_create %ld: %s\n", i, strerror(e));
                return 1;
            }
            detached += i % 4 == 0;
        }
        for (long k = 0; k < m; k++) {
            long i = base + k;
            if (i % 4 == 0) continue;
            void *r = NULL;
            int e = pthread_join(t[k], &r);
            if (e || r != (void *)(intptr_t)i) bad++;
        }
    }
    while (atomic_load(&c_detached_done) < detached) nap_ms(1);
    printf("churn %ld: %ld joins wrong, detached all done\n", n, bad);
    return 0;
}

/* ---- cputime ----
 * A thread's CPU clock counts its own running only: main waits (naps)
 * while a thread computes until its own clock says 20 ms; main's clock
 * moves far less meanwhile (under weft-run both share one carrier, whose
 * kernel clock counted both: main's then moved as much as the spinner's). */

static _Atomic int ct_done;

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *ct_spin(void *p) {
    (void)p;
    double t0 = cpu_s();
    volatile unsigned long x = 0;
    while (cpu_s() - t0 < 0.020) x++;
    atomic_store(&ct_done, 1);
    return NULL;
}

static atomic_int hups;
static void on_hup(int sig) {
    (void)sig;
    atomic_fetch_add(&hups, 1);
}

static void *vfork_rounds(void *arg) {
    (void)arg;
    int rounds = 20, bad = 0;
    for (int k = 0; k < rounds; k++) {
        int before = atomic_load(&hups);
        sigset_t all, was;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &was);
        pid_t pid = vfork();
        if (pid == 0) {
            struct sigaction dfl;
            memset(&dfl, 0, sizeof dfl);
            dfl.sa_handler = SIG_DFL;
            for (int sig = 1; sig < NSIG; sig++) {
                struct sigaction cur;
                if (sigaction(sig, NULL, &cur) == 0 && cur.sa_handler != SIG_IGN && cur.sa_handler != SIG_DFL)
                    sigaction(sig, &dfl, NULL);
            }
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            char *argv[] = {"foreign_threads", "hup-parent", NULL};
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        pthread_sigmask(SIG_SETMASK, &was, NULL);
        int st = 0;
        pid_t w;
        while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) continue; /* (the handler has no SA_RESTART) */
        if (pid < 0 || w != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
        for (int i = 0; i < 5000 && atomic_load(&hups) == before; i++) usleep(1000);
        if (atomic_load(&hups) == before) bad++;
    }
    return (void *)(intptr_t)bad;
}

static int mode_vfork(void) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = on_hup;
    sigemptyset(&a.sa_mask);
    sigaction(SIGHUP, &a, NULL);
    pthread_t th;
    void *bad = NULL;
    if (pthread_create(&th, NULL, vfork_rounds, NULL) != 0 || pthread_join(th, &bad) != 0) return 1;
    intptr_t b = (intptr_t)bad;
    struct sigaction now;
    sigaction(SIGHUP, NULL, &now);
    printf("vfork: 20 children, %d rounds wrong, the handler %s\n", (int)b,
           now.sa_handler == on_hup ? "still the program's" : "lost");
    return 0;
}

static int mode_cputime(void) {
    double s0 = cpu_s();
    pthread_t t;
    if (pthread_create(&t, NULL, ct_spin, NULL)) return 1;
    while (!atomic_load(&ct_done)) nap_ms(1);
    double waited = cpu_s() - s0;
    pthread_join(t, NULL);
    printf("cputime: the spinner's clock reached 20 ms; main's moved %s\n",
           waited < 0.010 ? "less than 10 ms" : "as much");
    if (waited >= 0.010) fprintf(stderr, "main's clock moved %.1f ms\n", waited * 1e3);
    return 0;
}

/* ---- signal masks ---- */

static volatile sig_atomic_t m_runs;
static pthread_t m_on;
static void m_handler(int s) {
    (void)s;
    m_runs++;
    m_on = pthread_self();
}

static int m_blocked(int sig) {
    sigset_t cur;
    pthread_sigmask(SIG_SETMASK, NULL, &cur);
    return sigismember(&cur, sig);
}

static void m_set(int how, int sig) {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(how, &s, NULL);
}

struct m_child_r {
    int inherit, own;
};
static void *m_child(void *p) {
    struct m_child_r *r = p;
    r->inherit = m_blocked(SIGUSR1);
    m_set(SIG_BLOCK, SIGUSR2);
    nap_ms(20); /* (a vthread may come back on another carrier) */
    r->own = m_blocked(SIGUSR2) && m_blocked(SIGUSR1);
    return NULL;
}

static void *m_attr_child(void *p) {
    *(int *)p = m_blocked(SIGUSR1);
    return NULL;
}

static int m_pipe[2], m_go[2];
struct m_held_r {
    int pending, before, after_on_it;
};
static void *m_held(void *p) {
    struct m_held_r *r = p;
    m_set(SIG_BLOCK, SIGUSR2);
    char c;
    if (write(m_pipe[1], "r", 1) != 1 || read(m_go[0], &c, 1) != 1) return NULL; /* (sent meanwhile) */
    sigset_t pend;
    sigpending(&pend);
    r->pending = sigismember(&pend, SIGUSR2);
    r->before = m_runs;
    m_set(SIG_UNBLOCK, SIGUSR2);
    r->after_on_it = m_runs == r->before + 1 && pthread_equal(m_on, pthread_self());
    return NULL;
}

static void *m_kill_proc(void *p) {
    nap_ms(30);
    kill(getpid(), (int)(intptr_t)p);
    return NULL;
}

static pthread_t m_main;
static void *m_kill_main(void *p) {
    nap_ms(30);
    pthread_kill(m_main, (int)(intptr_t)p);
    return NULL;
}

static int mode_masks(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = m_handler;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    m_main = pthread_self();
    m_set(SIG_BLOCK, SIGUSR1);
    struct m_child_r cr = {0, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, m_child, &cr)) return 1;
    pthread_join(t, NULL);
    printf("inherited %d, its own change %d, not main's %d\n", cr.inherit, cr.own, !m_blocked(SIGUSR2));

    pthread_attr_t a;
    pthread_attr_init(&a);
    sigset_t none;
    sigemptyset(&none);
    pthread_attr_setsigmask_np(&a, &none);
    int ablocked = -1;
    if (pthread_create(&t, &a, m_attr_child, &ablocked)) return 1;
    pthread_join(t, NULL);
    pthread_attr_destroy(&a);
    printf("attribute mask: SIGUSR1 blocked %d\n", ablocked);

    if (pipe(m_pipe) || pipe(m_go)) return 1;
    struct m_held_r hr = {0, 0, 0};
    if (pthread_create(&t, NULL, m_held, &hr)) return 1;
    char c;
    if (read(m_pipe[0], &c, 1) != 1) return 1;
    pthread_kill(t, SIGUSR2);
    if (write(m_go[1], "g", 1) != 1) return 1;
    pthread_join(t, NULL);
    printf("blocked pthread_kill: pending %d, handler on it at unblock %d\n", hr.pending, hr.after_on_it);

    int runs = m_runs;
    if (pthread_create(&t, NULL, m_kill_proc, (void *)(intptr_t)SIGUSR1)) return 1;
    sigset_t w;
    sigemptyset(&w);
    sigaddset(&w, SIGUSR1);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int got = sigwaitinfo(&w, &si);
    pthread_join(t, NULL);
    printf("sigwaitinfo: %s, SI_USER %d, handler ran %d\n", got == SIGUSR1 ? "SIGUSR1" : "other",
           si.si_signo == SIGUSR1 && si.si_code == SI_USER && si.si_pid == getpid(), m_runs != runs);

    sigemptyset(&w);
    sigaddset(&w, SIGUSR2);
    struct timespec ts = {0, 20 * 1000 * 1000};
    int tw = sigtimedwait(&w, &si, &ts);
    printf("sigtimedwait: %d %s\n", tw, tw < 0 && errno == EAGAIN ? "EAGAIN" : "?");

    m_set(SIG_BLOCK, SIGUSR2);
    runs = m_runs;
    if (pthread_create(&t, NULL, m_kill_main, (void *)(intptr_t)SIGUSR2)) return 1;
    sigset_t sm;
    pthread_sigmask(SIG_SETMASK, NULL, &sm);
    sigdelset(&sm, SIGUSR2);
    int ss = sigsuspend(&sm);
    int eintr = ss == -1 && errno == EINTR;
    pthread_join(t, NULL);
    printf("sigsuspend: EINTR %d, handler on main %d, mask back %d\n", eintr,
           m_runs == runs + 1 && pthread_equal(m_on, m_main), m_blocked(SIGUSR2));

    m_set(SIG_BLOCK, SIGTERM);
    if (pthread_create(&t, NULL, m_kill_proc, (void *)(intptr_t)SIGTERM)) return 1;
    sigemptyset(&w);
    sigaddset(&w, SIGTERM);
    int sig = 0;
    int sw = sigwait(&w, &sig);
    pthread_join(t, NULL);
    struct sigaction o;
    sigaction(SIGTERM, NULL, &o);
    printf("default SIGTERM, blocked: sigwait %d %s, still SIG_DFL %d\n", sw, sig == SIGTERM ? "SIGTERM" : "?",
           !(o.sa_flags & SA_SIGINFO) && o.sa_handler == SIG_DFL);

    sigaction(SIGALRM, &sa, NULL);
    m_set(SIG_BLOCK, SIGALRM);
    runs = m_runs;
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    sigemptyset(&w);
    sigaddset(&w, SIGALRM);
    sw = sigwait(&w, &sig);
    printf("interval timer: sigwait %d %s, handler ran %d\n", sw, sig == SIGALRM ? "SIGALRM" : "?", m_runs != runs);

    /* a fork child inherits the mask, and passes it on through exec */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "foreign_threads", "masks-child", (char *)NULL);
        _exit(9);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

static int mode_masks_child(void) {
    printf("fork and exec: SIGTERM blocked %d, SIGUSR1 %d, SIGCHLD %d\n", m_blocked(SIGTERM), m_blocked(SIGUSR1),
           m_blocked(SIGCHLD));
    return 0;
}

/* ---- a thread that computes ---- */

static volatile int s_stop;
static volatile unsigned long s_turns;
static void *s_spinner(void *p) {
    (void)p;
    while (!s_stop) s_turns++;
    return NULL;
}

static int mode_spin(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, s_spinner, NULL)) return 1;
    while (!s_turns) sched_yield(); /* (it computes now) */
    nap_ms(30);
    char buf[64];
    FILE *f = fopen("/proc/self/stat", "r");
    int got = f && fgets(buf, sizeof buf, f) != NULL;
    if (f) fclose(f);
    s_stop = 1;
    pthread_join(t, NULL);
    printf("main ran while a thread computed: slept, read %s, joined it\n", got ? "yes" : "no");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "join")) return mode_join();
    if (!strcmp(mode, "detach")) return mode_detach();
    if (!strcmp(mode, "exit")) return mode_exit();
    if (!strcmp(mode, "cancel")) return mode_cancel();
    if (!strcmp(mode, "names")) return mode_names();
    if (!strcmp(mode, "attr")) return mode_attr();
    if (!strcmp(mode, "keys")) return mode_keys();
    if (!strcmp(mode, "kill")) return mode_kill();
    if (!strcmp(mode, "sendfile")) return mode_sendfile();
    if (!strcmp(mode, "fork-thread")) return mode_fork_thread();
    if (!strcmp(mode, "masks")) return mode_masks();
    if (!strcmp(mode, "masks-child")) return mode_masks_child();
    if (!strcmp(mode, "spin")) return mode_spin();
    if (!strcmp(mode, "many") && argc > 2) return mode_many(atol(argv[2]));
    if (!strcmp(mode, "churn") && argc > 2) return mode_churn(atol(argv[2]));
    if (!strcmp(mode, "cputime")) return mode_cputime();
    if (!strcmp(mode, "vfork")) return mode_vfork();
    if (!strcmp(mode, "hup-parent")) return kill(getppid(), SIGHUP) != 0;
    fprintf(stderr, "usage: foreign_threads join|detach|exit|cancel|names|attr|keys|kill|sendfile|fork-thread|"
                    "masks|spin|many N|churn N|cputime|vfork\n");
    return 2;
}
