/*
 * The blocking pool: platform threads for work that must block an OS
 * thread (weft_blocking; files on the epoll backend).
 *
 * Up to WEFT_BLOCKING_MAX (default 64) platform threads, started on
 * demand, leaving after 10 s idle; a FIFO of jobs under one mutex.  A job
 * never waits behind another while the pool may grow: a submission either
 * claims a waiting thread that no earlier submission has claimed, or
 * starts one, so jobs that wait for each other (a pipe's reader and its
 * writer) each have a thread.  weft_blocking and the epoll backend's file
 * operations (weft__pool_exec) use it.
 *
 * Ownership.  A job is on the caller's stack, a vthread parked on its
 * operation record (io.c's weft__iop_wait, uncancellable: a job in flight
 * cannot be taken back); the pool thread completes it like any operation
 * (weft__iop_complete) and then never touches it again.  The queue and the
 * counts are under P.lock; a thread is created outside it.
 *
 * Life.  weft_shutdown ends the pool twice (weft__io_drain before the
 * carriers stop, weft__io_stop after): the threads are told to leave and
 * waited for; a later runtime starts new ones on demand.
 *
 * Fork.  The pool's threads are not in a fork child and its queued jobs
 * are the parent's vthreads': the child forgets them (weft__pool_fork_child,
 * from io.c's weft__io_fork_child).  A pool thread whose job forked, and
 * that is the child when the job returns, has nobody to return to: it
 * stops with a message.
 */
#define _GNU_SOURCE
#include "io.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pool_job {
    void *(*fn)(void *);
    void *arg;
    void *result;
    weft__ioreq *rq;
    weft__iop op;
    struct pool_job *next;
} pool_job;

/* idle counts the waiting threads that no submission has claimed yet;
 * claimed, those a submission has signalled and counted on (taken off
 * idle by the submitter itself, under the lock).  A waiter that wakes
 * consumes a claim if there is one, else leaves idle itself, so idle +
 * claimed is always the number of waiters.  Two jobs submitted back to
 * back while one thread waits: the first claims it, the second finds idle
 * at 0 and starts a thread -- it does not queue behind the first job (which
 * may be waiting for it). */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pool_job *head, *tail;
    int threads, idle, claimed, max, stopping;
    pthread_cond_t gone;
    /* the spawner (weft__pool_call): threads it is to start, whether it runs */
    int spawn_want, spawner;
    pthread_t spawner_th;
    pthread_cond_t spawn_cond;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .gone = PTHREAD_COND_INITIALIZER,
       .spawn_cond = PTHREAD_COND_INITIALIZER};

static void *pool_main(void *unused) {
    pthread_mutex_lock(&P.lock);
    for (;;) {
        while (!P.head && !P.stopping) {
            P.idle++;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 10;
            int e = pthread_cond_timedwait(&P.cond, &P.lock, &ts);
            if (P.claimed > 0) P.claimed--;
            else P.idle--;
            if (e == ETIMEDOUT && !P.head) goto leave;
        }
        if (!P.head) break; /* stopping */
        pool_job *j = P.head;
        P.head = j->next;
        if (!P.head) P.tail = NULL;
        pthread_mutex_unlock(&P.lock);
        int res = 0;
        unsigned gen = weft__fork_gen();
        if (j->rq) res = (int)weft__sys_exec(j->rq); /* counts fit: ops ask for < 2 GiB */
        else j->result = j->fn(j->arg);
        if (weft__fork_gen() != gen) /* fn forked, and this is the child: nobody to return to */
            weft__fatal("a weft_blocking function that called fork() returned in the child; "
                        "the child of a fork inside weft_blocking must end with _exit, exit or exec");
        weft_thread *t = weft__iop_complete(&j->op, res); /* j is gone now */
        if (t) weft__ready(t);
        pthread_mutex_lock(&P.lock);
    }
leave:
    P.threads--;
    pthread_cond_broadcast(&P.gone);
    pthread_mutex_unlock(&P.lock);
    return NULL;
}

static int start_thread(void) {
    pthread_t th;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    int e = pthread_create(&th, &a, pool_main, NULL);
    pthread_attr_destroy(&a);
    if (e == 0) pthread_setname_np(th, "weft-blocking");
    return e;
}

/*
 * The spawner.  A submission from the system call trap's handler
 * (hook/trap.c, weft__pool_call) must not create a thread itself: the code
 * the trap interrupted may hold the C library's malloc locks -- seen: a
 * futex wait on malloc's list_lock, trapped while its new arena's mutex
 * was held, whose handler's pthread_create then waited on that very mutex
 * in calloc, for good; and an interposer the handler calls may submit
 * too (a pipe's read on the epoll backend, seen the same way).  So while
 * the spawner runs, every submission that needs one more thread counts it
 * in spawn_want, and this thread, started outside any handler
 * (weft__pool_spawner_start, when the trap goes on), creates it.  A
 * creation that fails is tried again every 10 ms, said once: the job waits
 * in the queue meanwhile (a thread that finishes takes it too).
 */
static void *spawner_main(void *unused) {
    int told = 0;
    pthread_mutex_lock(&P.lock);
    for (;;) {
        while (!P.spawn_want && !P.stopping) pthread_cond_wait(&P.spawn_cond, &P.lock);
        if (P.stopping) break;
        pthread_mutex_unlock(&P.lock);
        int e = start_thread();
        pthread_mutex_lock(&P.lock);
        if (e == 0) {
            P.spawn_want--;
            continue;
        }
        if (!told++)
            fprintf(stderr, "weft: the blocking pool cannot start a thread (%s): a trapped wait is queued until "
                            "one can\n", strerror(e));
        pthread_mutex_unlock(&P.lock);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&P.lock);
    }
    P.spawner = 0;
    pthread_mutex_unlock(&P.lock);
    return unused;
}

int weft__pool_spawner_start(void) {
    pthread_mutex_lock(&P.lock);
    int e = 0;
    if (!P.spawner) {
        e = pthread_create(&P.spawner_th, NULL, spawner_main, NULL);
        if (e == 0) {
            P.spawner = 1;
            pthread_setname_np(P.spawner_th, "weft-spawner");
        }
    }
    pthread_mutex_unlock(&P.lock);
    return -e;
}

static int pool_submit(pool_job *j, int nogrow) {
    pthread_mutex_lock(&P.lock);
    if (P.stopping) {
        pthread_mutex_unlock(&P.lock);
        return -ESHUTDOWN;
    }
    if (!P.max) {
        long m = 64; /* (read lazily, past weft_init: a bad value is told, and the default used) */
        if (weft__env_long("WEFT_BLOCKING_MAX", 1, INT_MAX, "a thread count (1 or more): using 64", &m) < 0) m = 64;
        P.max = (int)m;
    }
    j->next = NULL;
    if (P.tail) P.tail->next = j;
    else P.head = j;
    P.tail = j;
    int grow = 0;
    if (P.idle > 0) {
        P.idle--; /* this job's thread: no later submission counts on it */
        P.claimed++;
        pthread_cond_signal(&P.cond);
    } else if (P.threads < P.max) {
        P.threads++; /* counted now, started below */
        grow = 1;
        if ((nogrow || P.spawner) && P.spawner) { /* (the spawner, above: every growth while it runs) */
            P.spawn_want++;
            pthread_cond_signal(&P.spawn_cond);
            grow = 0;
        }
    }
    pthread_mutex_unlock(&P.lock);
    if (!grow) return 0;
    /* The thread is created outside the lock: pthread_create maps a stack
     * and clones (milliseconds on a loaded machine), and every other
     * carrier's submission would wait for it in the mutex -- a carrier
     * blocked in a futex, which the monitor reports as pinned (seen:
     * 200 getaddrinfo at once from hooked libpq connects). */
    int e = start_thread();
    if (e == 0) return 0;
    pthread_mutex_lock(&P.lock);
    P.threads--;
    pthread_cond_broadcast(&P.gone); /* pool_stop counts threads */
    if (P.threads == 0) { /* nobody will ever run it: take it back if still queued */
        for (pool_job **pp = &P.head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
            if (*pp != j) continue;
            *pp = j->next;
            if (P.tail == j) P.tail = prev;
            pthread_mutex_unlock(&P.lock);
            return -e;
        }
    }
    pthread_mutex_unlock(&P.lock);
    return 0;
}

static void pool_run(pool_job *j) {
    j->op.p = &weft__self()->parker;
    atomic_store_explicit(&j->op.done, 0, memory_order_relaxed);
}

static int blocking(void *(*fn)(void *), void *arg, void **result, int nogrow) {
    if (!fn) return -EINVAL;
    if (!weft_self()) {
        void *r = fn(arg);
        if (result) *result = r;
        return 0;
    }
    pool_job j = {.fn = fn, .arg = arg};
    pool_run(&j);
    int r = pool_submit(&j, nogrow);
    if (r < 0) return r;
    weft__iop_wait(&j.op, 0, NULL);
    if (result) *result = j.result;
    return 0;
}

int weft_blocking(void *(*fn)(void *), void *arg, void **result) { return blocking(fn, arg, result, 0); }

int weft__pool_call(void *(*fn)(void *), void *arg) { return blocking(fn, arg, NULL, 1); }

ssize_t weft__pool_exec(weft__ioreq *rq) {
    pool_job j = {.rq = rq};
    pool_run(&j);
    int r = pool_submit(&j, 0);
    if (r < 0) return r;
    /* a file operation in flight cannot be taken back: wait it out */
    int w = weft__iop_wait(&j.op, 0, NULL);
    (void)w;
    return j.op.res;
}

void weft__pool_stop(void) {
    pthread_mutex_lock(&P.lock);
    P.stopping = 1;
    pthread_cond_broadcast(&P.cond);
    pthread_cond_broadcast(&P.spawn_cond);
    int spawner = P.spawner;
    pthread_t sth = P.spawner_th;
    pthread_mutex_unlock(&P.lock);
    if (spawner) pthread_join(sth, NULL); /* (it may be starting one: counted in threads) */
    pthread_mutex_lock(&P.lock);
    P.threads -= P.spawn_want; /* counted, never started */
    P.spawn_want = 0;
    while (P.threads > 0) pthread_cond_wait(&P.gone, &P.lock);
    P.stopping = 0;
    P.idle = P.claimed = 0;
    pthread_mutex_unlock(&P.lock);
}

void weft__pool_fork_child(void) {
    /* the pool's threads are not here; its queued jobs are the parent's */
    P.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    P.cond = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    P.gone = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    P.spawn_cond = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    P.head = P.tail = NULL;
    P.threads = P.idle = P.claimed = P.stopping = 0;
    P.spawn_want = P.spawner = 0;
}
