/* Locks weft did not write park (hook/locks.c): with the hooks on, a
 * vthread waiting for a pthread mutex or condition variable, or a C11
 * mtx_t / cnd_t, parks instead of holding its carrier in futex(2); wakes
 * cross between vthreads and kernel threads both ways; timed waits time
 * out; an error-checking or recursive mutex answers as the C library's.
 * (Not a white-box test: the program's pthread calls must reach the
 * interposers, which the library's prelude would route around.) */
#include "harness.h"

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer builds do not build the lock interposers (libc/real.h):
 * TSan intercepts these functions itself, ahead of a shared libweft. */
static void no_tsan(void) {
    if (TEST_TSAN) SKIP("ThreadSanitizer build: the lock interposers are not built (TSan intercepts the locks itself)");
}

/* The runtime with the hooks on and no monitor: no stall is compensated,
 * so a waiter that held its carrier in futex(2) instead of parking would
 * hold it for good -- with one carrier nothing else would run, and the
 * test would time out.  That, not a count of the monitor's pinned events
 * (a loaded machine makes those: a thread preempted inside a lock's few
 * instructions), is what these tests stand on. */
static void start(int carriers, int own_tls) {
    no_tsan();
    weft_runtime_opts cfg = {.carriers = carriers, .hook = WEFT_HOOK_ON, .own_tls = own_tls ? 1 : 0,
                             .pin_threshold_ns = -1};
    CHECK_EQ(weft_init(&cfg), 0);
}

static struct timespec abs_in(clockid_t clk, long ms) {
    struct timespec t;
    clock_gettime(clk, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* ---- one carrier: a holder sleeps with the mutex, 100 wait, one more runs - */

static pthread_mutex_t mx = PTHREAD_MUTEX_INITIALIZER;
static atomic_int holding, ran_while_held, waiters_tried, waiters_done, bystander_stop, round_waiters;

/* Holds the mutex across a sleep -- and then until every waiter has tried
 * to take it and the bystander has run meanwhile: with one carrier that
 * happens only if the waiters park (a waiter in futex(2) would hold the
 * carrier, and the test would time out), whatever the machine's load. */
static void *holder(void *arg) {
    int ms = (int)(intptr_t)arg;
    CHECK_EQ(pthread_mutex_lock(&mx), 0);
    atomic_store(&holding, 1);
    usleep((useconds_t)ms * 1000); /* hooked: parks, the mutex held */
    while (atomic_load(&waiters_tried) < atomic_load(&round_waiters) || !atomic_load(&ran_while_held)) usleep(1000);
    atomic_store(&holding, 0);
    CHECK_EQ(pthread_mutex_unlock(&mx), 0);
    return NULL;
}
static void *waiter(void *arg) {
    (void)arg;
    atomic_fetch_add(&waiters_tried, 1);
    CHECK_EQ(pthread_mutex_lock(&mx), 0);
    CHECK(!atomic_load(&holding));
    CHECK_EQ(pthread_mutex_unlock(&mx), 0);
    atomic_fetch_add(&waiters_done, 1);
    return NULL;
}
static void *bystander(void *arg) {
    (void)arg;
    while (!atomic_load(&bystander_stop)) {
        if (atomic_load(&holding)) atomic_store(&ran_while_held, 1);
        weft_yield();
    }
    return NULL;
}

static void one_round(int waiters, int ms) {
    weft_thread *h, *b, *w[100];
    atomic_store(&ran_while_held, 0);
    atomic_store(&waiters_tried, 0);
    atomic_store(&round_waiters, waiters);
    atomic_store(&waiters_done, 0);
    atomic_store(&bystander_stop, 0);
    CHECK_EQ(weft_spawn(&h, holder, (void *)(intptr_t)ms, NULL), 0);
    while (!atomic_load(&holding)) weft_yield();
    for (int i = 0; i < waiters; i++) CHECK_EQ(weft_spawn(&w[i], waiter, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&b, bystander, NULL, NULL), 0);
    join(h);
    for (int i = 0; i < waiters; i++) join(w[i]);
    atomic_store(&bystander_stop, 1);
    join(b);
    CHECK_EQ(atomic_load(&waiters_done), waiters);
}

static void *rounds_body(void *arg) {
    int n = (int)(intptr_t)arg;
    one_round(100, 50);
    for (int i = 0; i < n; i++) one_round(10, 1);
    return NULL;
}

TEST(pthread_mutex_waiters_park_on_one_carrier) {
    start(1, 0);
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, rounds_body, (void *)(intptr_t)SCALE(1000), NULL), 0);
    join(t);
}

/* ---- vthreads and kernel threads share a mutex and condition variables ---- */

#define QCAP 64
static struct {
    pthread_mutex_t m;
    pthread_cond_t not_empty, not_full;
    long q[QCAP];
    int head, n;
    long produced, consumed, total;
} pc = {.m = PTHREAD_MUTEX_INITIALIZER, .not_empty = PTHREAD_COND_INITIALIZER, .not_full = PTHREAD_COND_INITIALIZER};
static _Atomic unsigned char *seen;

/* Produces items [from, to). */
static void produce(long from, long to) {
    for (long i = from; i < to; i++) {
        CHECK_EQ(pthread_mutex_lock(&pc.m), 0);
        while (pc.n == QCAP) CHECK_EQ(pthread_cond_wait(&pc.not_full, &pc.m), 0);
        pc.q[(pc.head + pc.n++) % QCAP] = i;
        pc.produced++;
        CHECK_EQ(pthread_cond_signal(&pc.not_empty), 0);
        CHECK_EQ(pthread_mutex_unlock(&pc.m), 0);
    }
}
/* Consumes until every item is: how many it took. */
static long consume(void) {
    long mine = 0;
    CHECK_EQ(pthread_mutex_lock(&pc.m), 0);
    for (;;) {
        while (pc.n == 0 && pc.consumed < pc.total) CHECK_EQ(pthread_cond_wait(&pc.not_empty, &pc.m), 0);
        if (pc.n == 0) break; /* all consumed */
        long it = pc.q[pc.head];
        pc.head = (pc.head + 1) % QCAP;
        pc.n--;
        if (++pc.consumed == pc.total) CHECK_EQ(pthread_cond_broadcast(&pc.not_empty), 0);
        CHECK_EQ(pthread_cond_signal(&pc.not_full), 0);
        CHECK_EQ(pthread_mutex_unlock(&pc.m), 0);
        atomic_fetch_add(&seen[it], 1);
        mine++;
        CHECK_EQ(pthread_mutex_lock(&pc.m), 0);
    }
    CHECK_EQ(pthread_mutex_unlock(&pc.m), 0);
    return mine;
}

typedef struct {
    long from, to; /* producer: its items; a consumer has from == to */
} role;
static void *vt_role(void *arg) {
    role *r = arg;
    if (r->from < r->to) produce(r->from, r->to);
    else consume();
    return NULL;
}
static void *kt_role(void *arg) { return vt_role(arg); }

TEST(vthreads_and_kernel_threads_share_a_pthread_mutex_and_cond) {
    DET_SKIP("kernel threads wait in real time");
    no_tsan();
    /* the monitor on (its pinned events are the figure printed below); the
     * tests above show that the waits park */
    weft_runtime_opts cfg = {.carriers = 2, .hook = WEFT_HOOK_ON};
    CHECK_EQ(weft_init(&cfg), 0);
    long total = SCALE(1000000);
    int nvt = LIVE_CAP(1000);
    pc.total = total;
    seen = calloc((size_t)total, 1);
    CHECK(seen != NULL);
    /* producers: 2 kernel threads with half the items, 500 vthreads the
     * rest; consumers: 2 kernel threads and 500 vthreads */
    int nkt = 4, nvp = nvt / 2;
    role *kr = calloc((size_t)nkt, sizeof *kr), *vr = calloc((size_t)nvt, sizeof *vr);
    long half = total / 2, per = (total - half) / nvp;
    kr[0] = (role){0, half / 2};
    kr[1] = (role){half / 2, half};
    for (int i = 0; i < nvp; i++) vr[i] = (role){half + i * per, i == nvp - 1 ? total : half + (i + 1) * per};
    pthread_t kt[4];
    weft_thread **vt = calloc((size_t)nvt, sizeof *vt);
    for (int i = 0; i < nvt; i++) CHECK_EQ(weft_spawn(&vt[i], vt_role, &vr[i], NULL), 0);
    for (int i = 0; i < nkt; i++) CHECK_EQ(pthread_create(&kt[i], NULL, kt_role, &kr[i]), 0);
    for (int i = 0; i < nkt; i++) CHECK_EQ(pthread_join(kt[i], NULL), 0);
    for (int i = 0; i < nvt; i++) join(vt[i]);
    CHECK_EQ(pc.produced, total);
    CHECK_EQ(pc.consumed, total);
    for (long i = 0; i < total; i++) CHECK_EQ(seen[i], 1); /* each exactly once */
    weft_stats s;
    weft_stats_get(&s);
    printf("%ld items, %d vthreads and %d kernel threads: %lu pinned events\n", total, nvt, nkt,
           (unsigned long)s.pinned);
    free(seen);
    free(kr);
    free(vr);
    free(vt);
}

/* ---- timed waits ------------------------------------------------------------ */

static pthread_mutex_t tmx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tcv = PTHREAD_COND_INITIALIZER, tcv_mono;
static atomic_int t_step;

static void *t_holder(void *arg) {
    (void)arg;
    CHECK_EQ(pthread_mutex_lock(&tmx), 0);
    atomic_store(&t_step, 1);
    while (atomic_load(&t_step) < 2) weft_sleep(1000000);
    CHECK_EQ(pthread_mutex_unlock(&tmx), 0);
    return NULL;
}

static void *t_other(void *arg) {
    (void)arg;
    while (atomic_load(&t_step) < 1) weft_yield();
    struct timespec t = abs_in(CLOCK_REALTIME, 20);
    CHECK_EQ(pthread_mutex_timedlock(&tmx, &t), ETIMEDOUT);
    t = abs_in(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_mutex_clocklock(&tmx, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    struct timespec bad = {0, 2000000000L};
    CHECK_EQ(pthread_mutex_timedlock(&tmx, &bad), EINVAL);
    atomic_store(&t_step, 2);
    t = abs_in(CLOCK_REALTIME, 5000);
    CHECK_EQ(pthread_mutex_timedlock(&tmx, &t), 0); /* the holder lets go */
    /* condition variables time out with the mutex held again */
    t = abs_in(CLOCK_REALTIME, 20);
    CHECK_EQ(pthread_cond_timedwait(&tcv, &tmx, &t), ETIMEDOUT);
    t = abs_in(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_cond_timedwait(&tcv_mono, &tmx, &t), ETIMEDOUT); /* its clock: the attribute's */
    t = abs_in(CLOCK_MONOTONIC, 20);
    CHECK_EQ(pthread_cond_clockwait(&tcv, &tmx, CLOCK_MONOTONIC, &t), ETIMEDOUT);
    CHECK_EQ(pthread_mutex_trylock(&tmx), EBUSY); /* held: by this vthread */
    CHECK_EQ(pthread_mutex_unlock(&tmx), 0);
    return NULL;
}

TEST(timed_locks_and_waits_time_out_holding_the_mutex) {
    start(1, 0);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    CHECK_EQ(pthread_cond_init(&tcv_mono, &a), 0);
    weft_thread *h, *o;
    CHECK_EQ(weft_spawn(&h, t_holder, NULL, NULL), 0);
    CHECK_EQ(weft_spawn(&o, t_other, NULL, NULL), 0);
    join(h);
    join(o);
    CHECK_EQ(pthread_cond_destroy(&tcv_mono), 0);
    CHECK_EQ(pthread_cond_destroy(&tcv), 0);
}

/* ---- owners: error-checking and recursive, with own TLS --------------------- */

static pthread_mutex_t rec, chk;
static atomic_int inside, overlaps;

static void *rec_user(void *arg) {
    int rounds = (int)(intptr_t)arg;
    for (int i = 0; i < rounds; i++) {
        CHECK_EQ(pthread_mutex_lock(&rec), 0);
        CHECK_EQ(pthread_mutex_lock(&rec), 0);
        if (atomic_fetch_add(&inside, 1) != 0) atomic_fetch_add(&overlaps, 1);
        if (i % 2) weft_yield();
        else usleep(100); /* hooked: parks inside */
        atomic_fetch_sub(&inside, 1);
        CHECK_EQ(pthread_mutex_unlock(&rec), 0);
        CHECK_EQ(pthread_mutex_unlock(&rec), 0);
    }
    return NULL;
}

static void *chk_user(void *arg) {
    (void)arg;
    CHECK_EQ(pthread_mutex_lock(&chk), 0);
    CHECK_EQ(pthread_mutex_lock(&chk), EDEADLK); /* its own: told at once */
    weft_yield();
    CHECK_EQ(pthread_mutex_unlock(&chk), 0);
    return NULL;
}

TEST(recursive_mutex_parks_its_waiters_with_one_owner) {
    if (TEST_SANITIZED) SKIP("sanitizer build: own TLS (the owner's identity) is refused there");
    start(1, 1); /* every vthread its own TLS: the owner is the vthread */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    CHECK_EQ(pthread_mutex_init(&rec, &a), 0);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
    CHECK_EQ(pthread_mutex_init(&chk, &a), 0);
    weft_thread *t[100], *c[10];
    for (int i = 0; i < 100; i++) CHECK_EQ(weft_spawn(&t[i], rec_user, (void *)(intptr_t)(SCALE(10000) / 100), NULL), 0);
    for (int i = 0; i < 10; i++) CHECK_EQ(weft_spawn(&c[i], chk_user, NULL, NULL), 0);
    for (int i = 0; i < 100; i++) join(t[i]);
    for (int i = 0; i < 10; i++) join(c[i]);
    CHECK_EQ(atomic_load(&overlaps), 0);
}

/* ---- C11 ------------------------------------------------------------------ */

static mtx_t cm;
static cnd_t cc;
static int c11_box = -1, c11_sum;

static void *c11_producer(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(mtx_lock(&cm), thrd_success);
        while (c11_box >= 0) CHECK_EQ(cnd_wait(&cc, &cm), thrd_success);
        c11_box = i;
        CHECK_EQ(cnd_broadcast(&cc), thrd_success);
        CHECK_EQ(mtx_unlock(&cm), thrd_success);
    }
    return NULL;
}
static void *c11_consumer(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(mtx_lock(&cm), thrd_success);
        while (c11_box < 0) CHECK_EQ(cnd_wait(&cc, &cm), thrd_success);
        c11_sum += c11_box;
        c11_box = -1;
        CHECK_EQ(cnd_signal(&cc), thrd_success);
        CHECK_EQ(mtx_unlock(&cm), thrd_success);
    }
    struct timespec t = abs_in(CLOCK_REALTIME, 10);
    CHECK_EQ(mtx_lock(&cm), thrd_success);
    CHECK_EQ(cnd_timedwait(&cc, &cm, &t), thrd_timedout);
    CHECK_EQ(mtx_unlock(&cm), thrd_success);
    return NULL;
}

TEST(c11_mtx_and_cnd_park) {
    start(1, 0);
    CHECK_EQ(mtx_init(&cm, mtx_plain), thrd_success);
    CHECK_EQ(cnd_init(&cc), thrd_success);
    int n = SCALE(10000);
    weft_thread *p, *c;
    CHECK_EQ(weft_spawn(&c, c11_consumer, (void *)(intptr_t)n, NULL), 0);
    CHECK_EQ(weft_spawn(&p, c11_producer, (void *)(intptr_t)n, NULL), 0);
    join(p);
    join(c);
    CHECK_EQ(c11_sum, n * (n - 1) / 2);
    cnd_destroy(&cc);
    mtx_destroy(&cm);
}

/* ---- semaphores and rwlocks ------------------------------------------------ */

static sem_t sem;
static atomic_int sem_got, sem_tried, sem_seen;
static void *sem_taker(void *arg) {
    int n = (int)(intptr_t)arg;
    atomic_fetch_add(&sem_tried, 1);
    for (int i = 0; i < n; i++) {
        CHECK_EQ(sem_wait(&sem), 0);
        atomic_fetch_add(&sem_got, 1);
    }
    return NULL;
}
static void *sem_timed(void *arg) { /* every post taken: a timed wait times out */
    (void)arg;
    struct timespec t = abs_in(CLOCK_REALTIME, 10);
    errno = 0;
    CHECK_EQ(sem_timedwait(&sem, &t), -1);
    CHECK_EQ(errno, ETIMEDOUT);
    return NULL;
}
/* runs on the one carrier only if the takers that wait there park */
static void *sem_bystander(void *arg) {
    int takers = (int)(intptr_t)arg;
    while (atomic_load(&sem_tried) < takers) weft_yield();
    atomic_store(&sem_seen, 1);
    return NULL;
}
static void *sem_kt_poster(void *arg) {
    int n = (int)(intptr_t)arg;
    while (!atomic_load(&sem_seen)) usleep(100); /* (a kernel thread: a real sleep) */
    for (int i = 0; i < n; i++) {
        CHECK_EQ(sem_post(&sem), 0);
        if (i % 64 == 0) usleep(100); /* (a kernel thread: really sleeps) so takers wait */
    }
    return NULL;
}

TEST(sem_wait_parks_and_a_kernel_threads_post_wakes_it) {
    DET_SKIP("a kernel thread posts in real time");
    start(1, 0);
    CHECK_EQ(sem_init(&sem, 0, 0), 0);
    int takers = 50, each = SCALE(200);
    weft_thread *t[50];
    for (int i = 0; i < takers; i++) CHECK_EQ(weft_spawn(&t[i], sem_taker, (void *)(intptr_t)each, NULL), 0);
    weft_thread *b;
    CHECK_EQ(weft_spawn(&b, sem_bystander, (void *)(intptr_t)takers, NULL), 0);
    pthread_t kt;
    CHECK_EQ(pthread_create(&kt, NULL, sem_kt_poster, (void *)(intptr_t)(takers * each)), 0);
    CHECK_EQ(pthread_join(kt, NULL), 0);
    for (int i = 0; i < takers; i++) join(t[i]);
    join(b);
    CHECK_EQ(atomic_load(&sem_got), takers * each);
    join(go(sem_timed, NULL));
    CHECK_EQ(sem_destroy(&sem), 0);
}

static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int readers_in, writer_in, rw_bad;
static void *rw_writer(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(pthread_rwlock_wrlock(&rw), 0);
        if (atomic_fetch_add(&writer_in, 1) != 0 || atomic_load(&readers_in) != 0) atomic_fetch_add(&rw_bad, 1);
        usleep(200); /* parks holding it */
        atomic_fetch_sub(&writer_in, 1);
        CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
        weft_yield();
    }
    return NULL;
}
static void *rw_reader(void *arg) {
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        CHECK_EQ(pthread_rwlock_rdlock(&rw), 0);
        atomic_fetch_add(&readers_in, 1);
        if (atomic_load(&writer_in) != 0) atomic_fetch_add(&rw_bad, 1);
        weft_yield(); /* others read meanwhile */
        atomic_fetch_sub(&readers_in, 1);
        CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
    }
    struct timespec t = abs_in(CLOCK_REALTIME, 10);
    CHECK_EQ(pthread_rwlock_rdlock(&rw), 0);
    CHECK_EQ(pthread_rwlock_timedwrlock(&rw, &t), ETIMEDOUT); /* itself a reader */
    CHECK_EQ(pthread_rwlock_unlock(&rw), 0);
    return NULL;
}

TEST(rwlock_readers_and_writers_park_on_one_carrier) {
    start(1, 0);
    weft_thread *w[4], *r[40];
    int n = SCALE(100);
    for (int i = 0; i < 4; i++) CHECK_EQ(weft_spawn(&w[i], rw_writer, (void *)(intptr_t)n, NULL), 0);
    for (int i = 0; i < 40; i++) CHECK_EQ(weft_spawn(&r[i], rw_reader, (void *)(intptr_t)n, NULL), 0);
    for (int i = 0; i < 4; i++) join(w[i]);
    for (int i = 0; i < 40; i++) join(r[i]);
    CHECK_EQ(atomic_load(&rw_bad), 0);
}

/* ---- the dump names the wait -------------------------------------------- */

static void *dump_waiter(void *arg) {
    (void)arg;
    CHECK_EQ(pthread_mutex_lock(&mx), 0);
    CHECK_EQ(pthread_mutex_unlock(&mx), 0);
    return NULL;
}

TEST(the_dump_shows_a_vthread_parked_in_pthread_mutex_lock) {
    start(1, 0);
    CHECK_EQ(pthread_mutex_lock(&mx), 0); /* this platform thread holds it */
    weft_thread *t;
    weft_thread_opts o = {.name = "in-lock"};
    CHECK_EQ(weft_spawn(&t, dump_waiter, NULL, &o), 0);
    char *d = dump_showing(WEFT_DUMP_TEXT, "\"in-lock\" parked on pthread mutex", "in pthread_mutex_lock at", NULL);
    char *line = strstr(d, "\"in-lock\"");
    printf("%.*s\n", (int)strcspn(line, "\n"), line);
    free(d);
    CHECK_EQ(pthread_mutex_unlock(&mx), 0); /* a platform thread's unlock wakes the vthread */
    join(t);
}

/* ---- hooks off: the C library's own, untouched ------------------------------ */

static void *kt_counter(void *arg) {
    long *n = arg;
    for (int i = 0; i < 100000; i++) {
        CHECK_EQ(pthread_mutex_lock(&mx), 0);
        (*n)++;
        CHECK_EQ(pthread_mutex_unlock(&mx), 0);
    }
    return NULL;
}

TEST(with_hooks_off_the_c_library_locks_as_ever) {
    weft_runtime_opts cfg = {.carriers = 1, .hook = WEFT_HOOK_OFF};
    CHECK_EQ(weft_init(&cfg), 0);
    long n = 0;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_create(&t[i], NULL, kt_counter, &n), 0);
    for (int i = 0; i < 4; i++) CHECK_EQ(pthread_join(t[i], NULL), 0);
    CHECK_EQ(n, 400000);
}
