/* Stacks: overflow is reported with the vthread's name (guard page or
 * canary), stacks are reused, memory above the high-water mark goes back. */
#include "harness.h"
#include "sched/sched.h"

#include <fcntl.h>
#include <stdatomic.h>

/* Runs fn in a child with `env` set; returns its stderr and how it died. */
static char *run_child(void (*fn)(void), const char *k1, const char *v1, const char *k2, const char *v2, int *status) {
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        if (k1) setenv(k1, v1, 1);
        if (k2) setenv(k2, v2, 1);
        fn();
        _exit(0);
    }
    close(pfd[1]);
    static char buf[16384];
    size_t n = 0;
    ssize_t r;
    while ((r = read(pfd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(pfd[0]);
    waitpid(pid, status, 0);
    return buf;
}

static int depth;
__attribute__((noinline)) static int recurse(int n) {
    volatile char pad[1024];
    pad[0] = (char)n;
    depth++;
    return recurse(n + 1) + pad[0];
}

static void *overflow_fn(void *arg) { return (void *)(intptr_t)recurse(0); }

static void overflow_child(void) {
    weft_attr a = {.name = "deep-recursion", .stack_size = 64 * 1024};
    weft_thread *t;
    if (weft_spawn(&t, overflow_fn, NULL, &a) != 0) _exit(3);
    weft_join(t, NULL);
    _exit(4); /* not reached: the overflow aborts */
}

static void check_overflow_report(const char *mode) {
    int st;
    char *err = run_child(overflow_child, "WEFT_STACK_GUARD", mode, NULL, NULL, &st);
    if (!strstr(err, "stack overflow") || !strstr(err, "deep-recursion"))
        fprintf(stderr, "child stderr (%s):\n%s\n", mode, err);
    CHECK(strstr(err, "weft: stack overflow in vthread") != NULL);
    CHECK(strstr(err, "\"deep-recursion\"") != NULL);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

TEST(overflow_reported_guard_default) { check_overflow_report("default"); }
TEST(overflow_reported_guard_mprotect) { check_overflow_report("mprotect"); }

/* Canary mode: no guard page; a vthread that ran past the bottom of its
 * stack (here: a little, into the unprotected guard area) is caught at its
 * next switch. */
__attribute__((noinline)) static void smash(size_t n) {
    volatile char big[n]; /* one contiguous block across the bottom of the stack */
    for (size_t i = 0; i < n; i++) big[i] = (char)i;
    (weft_sleep)(1000000); /* the switch checks the canary */
    (void)big[0];
}

__attribute__((noinline)) static void dig(const char *lo) {
    volatile char pad[256];
    for (int i = 0; i < 256; i++) pad[i] = (char)i;
    /* near the bottom, run 1 KiB past it (into the unprotected guard page) */
    if ((const char *)pad > lo + 2048) dig(lo);
    else smash((size_t)((const char *)pad - lo) + 1024);
    (void)pad[0];
}

static void *canary_fn(void *arg) {
    dig(weft_self()->stk.lo);
    return NULL;
}

static void canary_child(void) {
    weft_attr a = {.name = "canary-smasher", .stack_size = 64 * 1024};
    weft_thread *t;
    if (weft_spawn(&t, canary_fn, NULL, &a) != 0) _exit(3);
    weft_join(t, NULL);
    _exit(4);
}

TEST(overflow_reported_canary) {
    int st;
    char *err = run_child(canary_child, "WEFT_STACK_GUARD", "canary", NULL, NULL, &st);
    if (!strstr(err, "canary-smasher")) fprintf(stderr, "child status %#x, stderr:\n%s\n", st, err);
    CHECK(strstr(err, "stack overflow in vthread") != NULL);
    CHECK(strstr(err, "\"canary-smasher\"") != NULL);
    CHECK(strstr(err, "canary") != NULL);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

/* mprotect guards while the VMA budget lasts, then canaries, one notice. */
static void *noop(void *a) { return a; }
static void budget_child(void) {
    enum { N = 300 };
    weft_thread *t[N];
    for (int i = 0; i < N; i++)
        if (weft_spawn(&t[i], noop, NULL, NULL) != 0) _exit(3);
    for (int i = 0; i < N; i++)
        if (weft_join(t[i], NULL) != 0) _exit(5);
    if (weft__stacks_guard_mode() != WEFT__GUARD_MPROTECT) _exit(6);
    weft_shutdown();
    _exit(0);
}

TEST(vma_budget_then_canary_notice) {
    int st;
    char *err = run_child(budget_child, "WEFT_STACK_GUARD", "mprotect", "WEFT_STACK_VMA_BUDGET", "64", &st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    const char *n1 = strstr(err, "VMA budget");
    CHECK(n1 != NULL);
    CHECK(strstr(n1 + 1, "VMA budget") == NULL); /* once */
}

static void *trivial(void *a) { return NULL; }
static void *reuse_fn(void *arg) {
    for (int i = 0; i < SCALE(100000); i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, trivial, NULL, NULL), 0);
        CHECK_EQ(weft_join(t, NULL), 0);
    }
    return NULL;
}

TEST(stacks_are_reused) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, reuse_fn, NULL, NULL), 0);
    CHECK_EQ(weft_join(t, NULL), 0);
    weft_stats s;
    weft_stats_get(&s);
    CHECK(s.started > 100);
    CHECK(s.stacks <= 1024); /* carved in batches, never one per spawn */
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    CHECK(fscanf(f, "%ld %ld", &pages, &res) == 2);
    fclose(f);
    return res * 4;
}

static atomic_int hw_parked;
static void *hw_sleeper(void *a) {
    atomic_fetch_add(&hw_parked, 1);
    /* until cancelled: with a fixed sleep the first could end (and their
     * stacks serve later spawns) before the last is spawned */
    (weft_sleep_until)(INT64_MAX);
    return NULL;
}

TEST(memory_returned_above_high_water_mark) {
    if (TEST_SANITIZED) return; /* RSS under sanitizers says little */
    enum { N = 20000 };
    static weft_thread *t[N];
    long before = rss_kib();
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], hw_sleeper, NULL, NULL), 0);
    while (atomic_load(&hw_parked) < N) usleep(1000);
    long peak = rss_kib();
    printf("rss KiB: before %ld, %d parked %ld\n", before, N, peak);
    CHECK(peak - before >= N * 4 * 8 / 10); /* about a page each */
    /* one at a time, as sleepers that end by themselves are joined: the
     * stacks go back to the depot as this thread joins them, and the
     * carrier that ran the next one passes through idle afterwards and
     * returns the surplus (cancelling them all first would let every
     * carrier fall asleep before the joins fill the depot, and nothing
     * would return it) */
    for (int i = 0; i < N; i++) {
        CHECK_EQ(weft_cancel(t[i]), 0);
        CHECK_EQ(weft_join(t[i], NULL), 0);
    }
    /* idle carriers return the surplus in batches, when they get a CPU:
     * until most of it went back (never: the harness's timeout) */
    long after;
    while ((after = rss_kib()) - before > (peak - before) / 2) usleep(10000);
    printf("rss KiB after join %ld\n", after);
}

/* Out of address space: spawn fails with -ENOMEM, nothing breaks, and
 * spawning works again once vthreads end. */
#include <sys/resource.h>
static void *wait_cancel(void *a) {
    (weft_sleep_until)(INT64_MAX);
    return NULL;
}

static void enomem_child(void) {
    enum { MAX = 20000 };
    static weft_thread *t[MAX];
    weft_config cfg = {.carriers = 2};
    if (weft_init(&cfg) != 0) _exit(3);
    weft_thread *w;
    if (weft_spawn(&w, noop, NULL, NULL) != 0 || weft_join(w, NULL) != 0) _exit(4);
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0;
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(5);
    fclose(f);
    rl.rlim_cur = (rlim_t)pages * 4096 + (rlim_t)512 * 1024 * 1024;
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(6);
    int n = 0, r = 0;
    while (n < MAX && (r = weft_spawn(&t[n], wait_cancel, NULL, NULL)) == 0) n++;
    if (r != -ENOMEM || n == 0 || n == MAX) _exit(7);
    for (int i = 0; i < n; i++) weft_cancel(t[i]);
    for (int i = 0; i < n; i++)
        if (weft_join(t[i], NULL) != 0) _exit(8);
    if (weft_spawn(&w, noop, NULL, NULL) != 0 || weft_join(w, NULL) != 0) _exit(9);
    printf("spawned %d before -ENOMEM\n", n);
    weft_shutdown();
    _exit(0);
}

TEST(out_of_address_space_is_enomem) {
    if (TEST_SANITIZED) return; /* sanitizers reserve terabytes of shadow */
    int st;
    char *err = run_child(enomem_child, NULL, NULL, NULL, NULL, &st);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fprintf(stderr, "child: status %d, stderr:\n%s\n", st, err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
