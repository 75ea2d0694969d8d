/* Own TLS for vthreads (weft_thread_opts.own_tls, arch/tls.c): __thread,
 * errno, pthread_self, pthread keys, locks' owners, stdio's lock and the
 * stack-protector canary are the vthread's wherever it runs; a block that
 * served one vthread starts the next one fresh; raise and abort still
 * reach the process; sanitizer builds refuse it with -ENOTSUP.  The
 * control (no own TLS) shows the hazard it removes. */
#include "harness.h"

#include "arch/arch.h"   /* weft__tls_blocks: a block reused, not made */
#include "sched/sched.h" /* weft__migrate, weft__carrier_index: moving on demand */

#include <fcntl.h>
#include <locale.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* Sanitizer builds: ASan and TSan keep their per-thread state in TLS, so a
 * vthread cannot have a block of its own there (weft.h). */
#define NEED_OWN_TLS()                                                                                   \
    do {                                                                                                 \
        if (TEST_SANITIZED)                                                                              \
            SKIP("sanitizer build: ASan/TSan keep their per-thread state in TLS, own TLS is refused " \
                 "(-ENOTSUP; tls.own_tls_is_refused_in_sanitizer_builds checks that)");                  \
    } while (0)

static const weft_thread_opts OWN = {.own_tls = 1};
static const weft_thread_opts NOT_OWN = {.own_tls = -1};

static int carrier_now(void) { return weft__carrier_index(weft__carrier_self()); }

/* ---- __thread and errno follow the vthread --------------------------------- */

static __thread long tl_counter;
static atomic_long mig_wrong, mig_moves;
static int mig_rounds;

static void *migrator(void *arg) {
    long id = (long)(intptr_t)arg;
    pthread_t me = pthread_self();
    for (int i = 0; i < mig_rounds; i++) {
        tl_counter = id * 1000003 + i;
        errno = (int)((id + i) % 4000) + 1;
        int here = carrier_now();
        CHECK_EQ(weft__migrate(here == 0 ? 1 : 0), 0);
        int now = carrier_now();
        /* right after the move: the thread-local, errno, pthread_self */
        if (tl_counter != id * 1000003 + i || errno != (int)((id + i) % 4000) + 1 || !pthread_equal(me, pthread_self()))
            atomic_fetch_add(&mig_wrong, 1);
        if (now != here) atomic_fetch_add(&mig_moves, 1);
    }
    return NULL;
}

static long run_migrators(int n, int rounds, const weft_thread_opts *o) {
    mig_rounds = rounds;
    atomic_store(&mig_wrong, 0);
    atomic_store(&mig_moves, 0);
    weft_thread **t = calloc((size_t)n, sizeof *t);
    CHECK(t != NULL);
    for (int i = 0; i < n; i++) CHECK_EQ(weft_spawn(&t[i], migrator, (void *)(intptr_t)i, o), 0);
    for (int i = 0; i < n; i++) join(t[i]);
    free(t);
    CHECK_EQ(atomic_load(&mig_moves), (long)n * rounds); /* every move was a real one */
    printf("%d vthreads x %d moves, own TLS %s: %ld wrong reads\n", n, rounds, o->own_tls > 0 ? "yes" : "no",
           atomic_load(&mig_wrong));
    return atomic_load(&mig_wrong);
}

/* The sizes: 1,000 x 200, or $TLS_VTHREADS x $TLS_MOVES (issue 26's
 * acceptance run: 10,000 x 1,000, with WEFT_TEST_TIMEOUT to match). */
static int env_int(const char *name, int dflt) {
    const char *e = getenv(name);
    return e && atoi(e) > 0 ? atoi(e) : dflt;
}

TEST(thread_local_and_errno_are_the_vthreads_across_migrations) {
    NEED_OWN_TLS();
    DET_SKIP("moves vthreads between 2 carriers");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(run_migrators(env_int("TLS_VTHREADS", SCALE(1000)), env_int("TLS_MOVES", 200), &OWN), 0);
}

/* The control: without its own TLS a vthread's __thread is its carrier's,
 * which the other vthreads on it write between its switches. */
TEST(without_own_tls_a_thread_local_is_the_carriers) {
    DET_SKIP("moves vthreads between 2 carriers");
    if (TEST_TSAN) SKIP("ThreadSanitizer build: the shared thread-local is the race it reports (the hazard shown)");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK(run_migrators(env_int("TLS_VTHREADS", 200), env_int("TLS_MOVES", 200), &NOT_OWN) > 0);
}

/* ---- lock owners: recursive, error-checking, stdio's ---------------------- */

static pthread_mutex_t rec_mx, chk_mx;
static atomic_int step;

static void wait_step(int s) {
    while (atomic_load(&step) < s) weft_yield();
}

static void *owner_a(void *arg) {
    (void)arg;
    CHECK_EQ(pthread_mutex_lock(&rec_mx), 0);
    CHECK_EQ(pthread_mutex_lock(&rec_mx), 0); /* its own: it enters again */
    CHECK_EQ(pthread_mutex_lock(&chk_mx), 0);
    CHECK_EQ(pthread_mutex_lock(&chk_mx), EDEADLK); /* the real owner is told */
    flockfile(stdout); /* stdio's lock: its owner is THREAD_SELF */
    atomic_store(&step, 1);
    wait_step(2); /* b tries them, on this carrier */
    CHECK_EQ(pthread_mutex_unlock(&chk_mx), 0);
    CHECK_EQ(pthread_mutex_unlock(&rec_mx), 0);
    CHECK_EQ(pthread_mutex_unlock(&rec_mx), 0);
    funlockfile(stdout);
    atomic_store(&step, 3);
    return NULL;
}

static void *owner_b(void *arg) {
    (void)arg;
    wait_step(1);
    /* the same carrier thread, another vthread: none of them is its */
    CHECK_EQ(pthread_mutex_trylock(&rec_mx), EBUSY);
    CHECK_EQ(pthread_mutex_trylock(&chk_mx), EBUSY);
    CHECK_EQ(pthread_mutex_unlock(&chk_mx), EPERM);
    CHECK_EQ(pthread_mutex_unlock(&rec_mx), EPERM);
    CHECK(ftrylockfile(stdout) != 0);
    atomic_store(&step, 2);
    wait_step(3);
    CHECK_EQ(pthread_mutex_trylock(&rec_mx), 0);
    CHECK_EQ(pthread_mutex_unlock(&rec_mx), 0);
    CHECK_EQ(ftrylockfile(stdout), 0);
    funlockfile(stdout);
    return NULL;
}

static void init_mutexes(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    CHECK_EQ(pthread_mutex_init(&rec_mx, &a), 0);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    CHECK_EQ(pthread_mutex_init(&chk_mx, &a), 0);
    pthread_mutexattr_destroy(&a);
}

TEST(recursive_errorcheck_and_stdio_locks_know_their_vthread) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    init_mutexes();
    weft_thread *a, *b;
    CHECK_EQ(weft_spawn(&a, owner_a, NULL, &OWN), 0);
    CHECK_EQ(weft_spawn(&b, owner_b, NULL, &OWN), 0);
    join(a);
    join(b);
}

/* 100 vthreads on one carrier share a recursive mutex; a holder enters it
 * twice and parks inside (a yield, a sleep).  Waiting is a trylock and a
 * yield: a contended pthread_mutex_lock would block the carrier (futex
 * parking is not there yet: weft.h, "Own TLS"). */
static atomic_int inside, overlaps;
static void *rec_user(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        while (pthread_mutex_trylock(&rec_mx) == EBUSY) weft_yield();
        CHECK_EQ(pthread_mutex_lock(&rec_mx), 0);
        if (atomic_fetch_add(&inside, 1) != 0) atomic_fetch_add(&overlaps, 1);
        if (i % 2) weft_yield();
        else weft_sleep(1000);
        atomic_fetch_sub(&inside, 1);
        CHECK_EQ(pthread_mutex_unlock(&rec_mx), 0);
        CHECK_EQ(pthread_mutex_unlock(&rec_mx), 0);
        weft_yield();
    }
    return NULL;
}

TEST(recursive_mutex_held_across_parks_has_one_owner) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    init_mutexes();
    weft_thread *t[100];
    int rounds = SCALE(10000) / 100;
    for (int i = 0; i < 100; i++) CHECK_EQ(weft_spawn(&t[i], rec_user, (void *)(intptr_t)rounds, &OWN), 0);
    for (int i = 0; i < 100; i++) join(t[i]);
    CHECK_EQ(atomic_load(&overlaps), 0);
}

/* ---- pthread_self, keys, thread_local destructors ------------------------- */

static pthread_key_t key_d;
static atomic_int dtor_calls, dtor_wrong, atexit_calls;
static void key_dtor(void *v) {
    /* on the vthread itself, which may still block */
    if (!weft_self() || (intptr_t)v != (intptr_t)weft_id(weft_self())) atomic_fetch_add(&dtor_wrong, 1);
    weft_yield();
    atomic_fetch_add(&dtor_calls, 1);
}
static void tl_atexit(void *obj) {
    if ((intptr_t)obj != (intptr_t)weft_id(weft_self())) atomic_fetch_add(&dtor_wrong, 1);
    atomic_fetch_add(&atexit_calls, 1);
}
extern int __cxa_thread_atexit_impl(void (*fn)(void *), void *obj, void *dso);
extern void *__dso_handle;

static pthread_t selves[2][8];
static atomic_int started;
/* until n vthreads have started: alive at once, none has given its block back */
static void all_started(int n) {
    atomic_fetch_add(&started, 1);
    while (atomic_load(&started) < n) weft_yield();
}
static void *keyed(void *arg) {
    int slot = (int)(intptr_t)arg;
    intptr_t id = (intptr_t)weft_id(weft_self());
    CHECK(pthread_getspecific(key_d) == NULL);
    CHECK_EQ(pthread_setspecific(key_d, (void *)id), 0);
    /* a C++ thread_local's destructor, as g++ registers it */
    CHECK_EQ(__cxa_thread_atexit_impl(tl_atexit, (void *)id, &__dso_handle), 0);
    selves[0][slot] = pthread_self();
    all_started(8);
    for (int i = 0; i < 50; i++) {
        weft_yield();
        CHECK((intptr_t)pthread_getspecific(key_d) == id);
    }
    selves[1][slot] = pthread_self();
    return NULL;
}

TEST(pthread_self_keys_and_their_destructors_are_the_vthreads) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(pthread_key_create(&key_d, key_dtor), 0);
    weft_thread *t[8];
    for (int i = 0; i < 8; i++) CHECK_EQ(weft_spawn(&t[i], keyed, (void *)(intptr_t)i, &OWN), 0);
    for (int i = 0; i < 8; i++) join(t[i]);
    CHECK_EQ(atomic_load(&dtor_calls), 8);
    CHECK_EQ(atomic_load(&atexit_calls), 8);
    CHECK_EQ(atomic_load(&dtor_wrong), 0);
    for (int i = 0; i < 8; i++) {
        CHECK(pthread_equal(selves[0][i], selves[1][i]));
        CHECK(!pthread_equal(selves[0][i], pthread_self()));
        for (int j = 0; j < i; j++) CHECK(!pthread_equal(selves[0][i], selves[0][j]));
    }
    CHECK_EQ(pthread_kill(selves[0][0], 0), ESRCH); /* no kernel thread by that name */
    pthread_key_delete(key_d);
}

/* ---- a reused block starts fresh ------------------------------------------ */

static __thread int tl_seven = 7;
static __thread char tl_zero[64];
static pthread_key_t key_plain; /* no destructor */
static atomic_int fresh_wrong;

static void *dirty(void *arg) {
    (void)arg;
    if (tl_seven != 7 || tl_zero[10] != 0 || errno != 0 || pthread_getspecific(key_plain) != NULL ||
        uselocale((locale_t)0) != LC_GLOBAL_LOCALE)
        atomic_fetch_add(&fresh_wrong, 1);
    tl_seven = 8;
    tl_zero[10] = 'x';
    errno = EIO;
    CHECK_EQ(pthread_setspecific(key_plain, (void *)1), 0);
    locale_t l = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    CHECK(l != (locale_t)0);
    uselocale(l);
    weft_yield();
    uselocale(LC_GLOBAL_LOCALE); /* (freed below: the vthread's own locale is its business) */
    freelocale(l);
    uselocale(newlocale(LC_ALL_MASK, "C", (locale_t)0)); /* left set: weft sets the global one back */
    return NULL;
}

TEST(a_reused_block_starts_the_next_vthread_fresh) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    CHECK_EQ(pthread_key_create(&key_plain, NULL), 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, dirty, NULL, &OWN), 0);
    join(t);
    size_t made = weft__tls_blocks();
    for (int i = 0; i < 20; i++) { /* one at a time: each takes the block the last gave back */
        CHECK_EQ(weft_spawn(&t, dirty, NULL, &OWN), 0);
        join(t);
    }
    CHECK_EQ(weft__tls_blocks(), made);
    CHECK_EQ(atomic_load(&fresh_wrong), 0);
    pthread_key_delete(key_plain);
}

/* ---- the runtime's default, and opting out -------------------------------- */

static pthread_t seen[4];
static void *who(void *arg) {
    seen[(intptr_t)arg] = pthread_self();
    all_started(4);
    CHECK(pthread_equal(seen[(intptr_t)arg], pthread_self()));
    return NULL;
}

TEST(runtime_default_gives_every_vthread_its_own_and_attr_opts_out) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1, .own_tls = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t[4];
    CHECK_EQ(weft_spawn(&t[0], who, (void *)0, NULL), 0);
    CHECK_EQ(weft_spawn(&t[1], who, (void *)1, NULL), 0);
    CHECK_EQ(weft_spawn(&t[2], who, (void *)2, &NOT_OWN), 0);
    CHECK_EQ(weft_spawn(&t[3], who, (void *)3, &NOT_OWN), 0);
    for (int i = 0; i < 4; i++) join(t[i]);
    CHECK(!pthread_equal(seen[0], seen[1]));                               /* each its own */
    CHECK(pthread_equal(seen[2], seen[3]));                                /* both the one carrier's */
    CHECK(!pthread_equal(seen[0], seen[2]) && !pthread_equal(seen[1], seen[2]));
}

/* ---- signals reach the process -------------------------------------------- */

static volatile sig_atomic_t got_usr1;
static void on_usr1(int s) {
    (void)s;
    got_usr1 = 1;
}
static void *raiser(void *arg) {
    (void)arg;
    signal(SIGUSR1, on_usr1);
    CHECK_EQ(raise(SIGUSR1), 0); /* glibc asks the kernel for the real tid */
    CHECK(got_usr1);
    weft_yield();
    abort();
}

TEST(raise_and_abort_reach_the_thread_that_runs_them) {
    NEED_OWN_TLS();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        weft_runtime_opts cfg = {.carriers = 1};
        if (weft_init(&cfg) != 0) _exit(3);
        weft_thread *t;
        if (weft_spawn(&t, raiser, NULL, &OWN) != 0) _exit(4);
        weft_join(t, NULL);
        _exit(5);
    }
    int st;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGABRT);
}

/* ---- malloc and stdio, many vthreads, two carriers ------------------------ */

static void *allocator(void *arg) {
    (void)arg;
    void *p[16];
    char line[64];
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < 16; i++) CHECK((p[i] = malloc((size_t)(16 << (i % 8)))) != NULL);
        snprintf(line, sizeof line, "%d %s %.2f", r, "x", 1.5);
        CHECK(strcmp(line + strlen(line) - 6, "x 1.50") == 0);
        CHECK_EQ(weft__migrate(carrier_now() == 0 ? 1 : 0), 0); /* freed by the other carrier's thread */
        for (int i = 0; i < 16; i++) free(p[i]);
    }
    return NULL;
}

TEST(malloc_and_stdio_across_carriers) {
    NEED_OWN_TLS();
    DET_SKIP("moves vthreads between 2 carriers");
    weft_runtime_opts cfg = {.carriers = 2};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t[200];
    for (int i = 0; i < 200; i++) CHECK_EQ(weft_spawn(&t[i], allocator, NULL, &OWN), 0);
    for (int i = 0; i < 200; i++) join(t[i]);
}

/* ---- hooked calls: errno without the pin --------------------------------- */

/* A hooked call that parks pins a vthread to its carrier so that errno's
 * address holds (hook.c, "errno"); a vthread with its own TLS is not
 * pinned -- its errno is in its block -- and still reads the right one. */
static atomic_int hk_wrong;
static void *hooked(void *arg) {
    int fd = (int)(intptr_t)arg;
    for (int i = 0; i < 20; i++) {
        errno = 1000 + i;
        usleep(200); /* hooked: parks */
        if (errno != 1000 + i) atomic_fetch_add(&hk_wrong, 1);
        char c;
        if (read(fd, &c, 1) != -1 || errno != EAGAIN) atomic_fetch_add(&hk_wrong, 1); /* hooked, fails */
        CHECK_EQ(weft__migrate(carrier_now() == 0 ? 1 : 0), 0);
        if (errno != EAGAIN) atomic_fetch_add(&hk_wrong, 1);
    }
    return NULL;
}

TEST(hooked_calls_keep_errno_without_pinning) {
    NEED_OWN_TLS();
    DET_SKIP("moves vthreads between 2 carriers");
    weft_runtime_opts cfg = {.carriers = 2, .hook = WEFT_HOOK_ON};
    CHECK_EQ(weft_init(&cfg), 0);
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    weft_thread *t[100];
    for (int i = 0; i < 100; i++) CHECK_EQ(weft_spawn(&t[i], hooked, (void *)(intptr_t)p[0], &OWN), 0);
    for (int i = 0; i < 100; i++) join(t[i]);
    CHECK_EQ(atomic_load(&hk_wrong), 0);
    close(p[0]);
    close(p[1]);
}

/* ---- the dump says which vthreads have their own TLS ---------------------- */

static atomic_int dump_done;
static void *parked_own(void *arg) {
    (void)arg;
    while (!atomic_load(&dump_done)) weft_sleep(1000000);
    return NULL;
}

TEST(the_dump_shows_own_tls) {
    NEED_OWN_TLS();
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *a, *b;
    weft_thread_opts oa = {.name = "with-own", .own_tls = 1}, ob = {.name = "without", .own_tls = -1};
    CHECK_EQ(weft_spawn(&a, parked_own, NULL, &oa), 0);
    CHECK_EQ(weft_spawn(&b, parked_own, NULL, &ob), 0);
    char *d = dump_showing(WEFT_DUMP_TEXT, "\"with-own\" [own TLS] sleeping", "\"without\" sleeping", NULL);
    free(d);
    d = dump_showing(WEFT_DUMP_JSON, "\"own_tls\":true", NULL);
    char *first = strstr(d, "\"own_tls\":true");
    CHECK(strstr(first + 1, "\"own_tls\":true") == NULL); /* only the one */
    free(d);
    atomic_store(&dump_done, 1);
    join(a);
    join(b);
}

/* ---- where it cannot work --------------------------------------------------- */

TEST(own_tls_is_refused_in_sanitizer_builds) {
    weft_runtime_opts cfg = {.carriers = 1};
    CHECK_EQ(weft_init(&cfg), 0);
    weft_thread *t;
    atomic_store(&started, 3); /* who() waits for none */
    int r = weft_spawn(&t, who, (void *)0, &OWN);
    if (TEST_SANITIZED) {
        CHECK_EQ(r, -ENOTSUP);
    } else {
        CHECK_EQ(r, 0);
        join(t);
    }
}


/* ---- a program linked with libweft opts its own pthreads in --------------- */

/* weft_runtime_opts.virtual_pthreads (WEFT_VIRTUAL_PTHREADS=1), with the
 * hooks on: pthread_create from the program -- here from a platform
 * thread, as a library that makes threads inside would -- gives vthreads
 * with their own TLS, joined with pthread_join; off, the same calls make
 * kernel threads. */
static __thread int vp_tl;
static void *vp_body(void *arg) {
    vp_tl = (int)(intptr_t)arg;
    weft_sleep(1000000); /* (parks, when it is a vthread) */
    return (void *)(intptr_t)((weft_self() != NULL) * 1000 + vp_tl);
}

static int vp_round(int on) {
    weft_runtime_opts o = {.carriers = 2, .hook = WEFT_HOOK_ON, .virtual_pthreads = on ? 1 : -1};
    CHECK_EQ(weft_init(&o), 0);
    pthread_t t[8];
    /* ((name): the program's call, not the library's -- sched.h brings
     * libc/real.h's rewrite of weft's own calls to the C library's) */
    for (int i = 0; i < 8; i++) CHECK_EQ((pthread_create)(&t[i], NULL, vp_body, (void *)(intptr_t)i), 0);
    int vthreads = 0;
    for (int i = 0; i < 8; i++) {
        void *r = NULL;
        CHECK_EQ((pthread_join)(t[i], &r), 0);
        CHECK_EQ((intptr_t)r % 1000, i);
        vthreads += (intptr_t)r >= 1000;
    }
    weft_shutdown();
    return vthreads;
}

TEST(a_program_linked_with_weft_opts_its_pthreads_in) {
    NEED_OWN_TLS();
    DET_SKIP("starts its own runtimes");
    CHECK_EQ(vp_round(1), 8);
    CHECK_EQ(vp_round(0), 0);
}
