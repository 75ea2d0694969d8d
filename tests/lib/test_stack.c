/* Stacks: overflow is reported with the vthread's name (guard page or
 * canary), stacks are reused, memory above the high-water mark goes back. */
#include "harness.h"
#include "proc.h"
#include "sched/sched.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdatomic.h>

/* Runs fn in a child with up to two environment variables set (k1=v1,
 * k2=v2; NULL: none); returns its stderr and how it died (fork_stderr). */
struct env_child {
    void (*fn)(void);
    const char *k1, *v1, *k2, *v2;
};

static void env_child_run(void *arg) {
    const struct env_child *c = arg;
    if (c->k1) setenv(c->k1, c->v1, 1);
    if (c->k2) setenv(c->k2, c->v2, 1);
    c->fn();
}

static char *run_child(void (*fn)(void), const char *k1, const char *v1, const char *k2, const char *v2, int *status) {
    struct env_child c = {fn, k1, v1, k2, v2};
    return fork_stderr(env_child_run, &c, status);
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
    weft_thread_opts a = {.name = "deep-recursion", .stack_size = 64 * 1024};
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
    dig(weft__self()->stk.lo);
    return NULL;
}

static void canary_child(void) {
    weft_thread_opts a = {.name = "canary-smasher", .stack_size = 64 * 1024};
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

/* A burst of spawns that all stay alive: idle carriers carve stacks ahead
 * of it (stack.c, weft__stacks_refill), each with its top page resident,
 * but only in proportion -- an eighth of those in use, at least two
 * batches -- not a flat DEPOT_HOT (4,096) whatever the burst: 1,000
 * sleeping Python threads under weft-run had 3,096 stacks carved ahead,
 * 12 KiB of RSS a thread.  The bound: the live vthreads, their eighth,
 * the two batches, a refill batch in flight and a carve's batch, and per
 * cache (a carrier's or a spare's) WEFT__STACK_CACHE_CAP 512 plus a batch. */
TEST(a_burst_carves_ahead_in_proportion) {
    enum { N = 1000 };
    static weft_thread *t[N];
    atomic_store(&hw_parked, 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], hw_sleeper, NULL, NULL), 0);
    while (atomic_load(&hw_parked) < N) usleep(1000);
    usleep(100 * 1000); /* idle carriers refill now, if they would */
    weft_stats st;
    weft_stats_get(&st);
    uint64_t caches = st.carriers + st.spares;
    uint64_t bound = N + N / 8 + 2 * 64 + 64 + 64 + caches * (512 + 64);
    printf("%d live: %llu stacks carved (bound %llu)\n", N, (unsigned long long)st.stacks, (unsigned long long)bound);
    CHECK(st.stacks <= bound);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_cancel(t[i]), 0);
    for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
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
    weft_runtime_opts cfg = {.carriers = 2};
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

/* ---- ASan: stacks are unpoisoned by what was used, and never stale ------- */

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>

/* The runtime's calls to ASan's unpoison, counted: this definition in the
 * executable takes them (the library is linked in statically) and hands
 * them on to ASan's own. */
static _Atomic uint64_t unpoisoned_bytes, unpoison_calls;
void __asan_unpoison_memory_region(void const volatile *addr, size_t size) {
    static void (*real)(void const volatile *, size_t);
    if (!real) real = (void (*)(void const volatile *, size_t))dlsym(RTLD_NEXT, "__asan_unpoison_memory_region");
    atomic_fetch_add(&unpoisoned_bytes, size);
    atomic_fetch_add(&unpoison_calls, 1);
    real(addr, size);
}
#endif

static void *spawn_join_many(void *arg) {
    for (int i = 0; i < (int)(intptr_t)arg; i++) {
        weft_thread *t;
        CHECK_EQ(weft_spawn(&t, noop, NULL, NULL), 0);
        CHECK_EQ(weft_join(t, NULL), 0);
    }
    return NULL;
}

/* A spawn on a reused stack unpoisons what the last owner's frames left
 * (a few hundred bytes), not the whole 1 MiB stack: that made 10k spawns
 * cost 0.2 s instead of 0.01 under ASan, and 10k fresh stacks 1.3 GB of
 * resident shadow. */
TEST(asan_unpoisons_only_what_frames_left) {
#if !defined(__SANITIZE_ADDRESS__)
    printf("(ASan builds only)\n");
#else
    enum { N = 1000 };
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, spawn_join_many, (void *)(intptr_t)100, NULL), 0); /* warm: stacks made */
    CHECK_EQ(weft_join(t, NULL), 0);
    spawn_join_many((void *)(intptr_t)100);
    uint64_t b0 = atomic_load(&unpoisoned_bytes), c0 = atomic_load(&unpoison_calls);
    CHECK_EQ(weft_spawn(&t, spawn_join_many, (void *)(intptr_t)N, NULL), 0); /* from a vthread */
    CHECK_EQ(weft_join(t, NULL), 0);
    spawn_join_many((void *)(intptr_t)N); /* from a platform thread */
    uint64_t bytes = atomic_load(&unpoisoned_bytes) - b0, calls = atomic_load(&unpoison_calls) - c0;
    printf("%llu bytes unpoisoned in %llu calls for %d spawns\n", (unsigned long long)bytes,
           (unsigned long long)calls, 2 * N + 1);
    CHECK(calls >= 2 * N);                 /* every stack is cleaned once... */
    CHECK(bytes / (2 * N + 1) <= 8 * 1024); /* ...by what was used, not 1 MiB */
#endif
}

/* No false positive on a stack whose last owner left poisoned frames:
 * vthreads that ended with deep stacks of redzoned frames, one that left
 * deep frames by longjmp, and daemons abandoned deep at shutdown, whose
 * addresses the next runtime's stacks are likely to get again (ASan keeps
 * a shadow across munmap).  The successors write and read all over. */
__attribute__((noinline)) static int deep(int n, jmp_buf *out) {
    volatile char frame[700]; /* redzones on both sides under ASan */
    for (size_t i = 0; i < sizeof frame; i += 64) frame[i] = (char)n;
    if (n == 0) {
        if (out) longjmp(*out, 1);
        return frame[0];
    }
    return deep(n - 1, out) + frame[64];
}

/* The stack a vthread runs on: [lo, top). */
typedef struct { char *lo, *top; } stack_range;
static stack_range range_of_self(void) {
    weft_thread *t = weft__self();
    return (stack_range){t->stk.lo, (char *)t};
}

/* Is any byte of r poisoned?  (ASan build: a region check on the shadow.) */
static int poisoned(stack_range r) {
#if defined(__SANITIZE_ADDRESS__)
    void *__asan_region_is_poisoned(void *beg, size_t size);
    return __asan_region_is_poisoned(r.lo, (size_t)(r.top - r.lo)) != NULL;
#else
    (void)r;
    return 0;
#endif
}

static atomic_int deep_parked;
static stack_range daemon_range[64];
static void *deep_then_park(void *arg) {
    volatile char frame[700];
    frame[0] = 1;
    intptr_t a = (intptr_t)arg;
    if (a >= 1000) {
        deep_then_park((void *)(a - 1000));
    } else {
        daemon_range[a] = range_of_self();
        atomic_fetch_add(&deep_parked, 1);
        weft_park(0); /* abandoned here at shutdown: daemon */
    }
    return (void *)(intptr_t)frame[0];
}

static stack_range user_range[64];
static void *deep_user(void *arg) {
    int n = (int)(intptr_t)arg % 1000, k = (int)(intptr_t)arg / 1000;
    user_range[k] = range_of_self();
    if (k % 2) { /* leave the frames by longjmp */
        jmp_buf jb;
        if (!setjmp(jb)) deep(n, &jb);
        return NULL;
    }
    CHECK_EQ(deep(n, NULL), n * (n + 1) / 2);
    return NULL;
}

TEST(asan_reused_stacks_have_no_stale_poison) {
    enum { N = 64, DEPTH = 100 }; /* ~100 KiB of frames (more with redzones) */
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t[N];
    /* ended after deep frames that returned, or that were left by longjmp:
     * each stack is clean as soon as its vthread is done */
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], deep_user, (void *)(intptr_t)(i * 1000 + DEPTH), NULL), 0);
        for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
        for (int i = 0; i < N; i++) CHECK(!poisoned(user_range[i]));
    }
    /* daemons abandoned deep in their stacks at shutdown: clean once the
     * runtime is gone (the next mapping there would inherit the shadow) */
    weft_thread_opts daemon = {.daemon = 1};
    for (int i = 0; i < N; i++)
        CHECK_EQ(weft_spawn(NULL, deep_then_park, (void *)(intptr_t)(DEPTH * 1000 + i), &daemon), 0);
    while (atomic_load(&deep_parked) < N) usleep(1000);
    weft_shutdown();
    for (int i = 0; i < N; i++) CHECK(!poisoned(daemon_range[i]));
    /* and a new runtime, probably on some of the same addresses, runs deep */
    CHECK_EQ(weft_init(&cfg), 0);
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) CHECK_EQ(weft_spawn(&t[i], deep_user, (void *)(intptr_t)(i * 1000 + DEPTH), NULL), 0);
        for (int i = 0; i < N; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    }
}
