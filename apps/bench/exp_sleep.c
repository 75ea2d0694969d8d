/*
 * exp_sleep.c -- "sleep-tasks": N tasks that each sleep --sleep-ms (1000),
 * all waited for, on one of three executors:
 *
 *   virtual          one detached vthread per task (weft_spawn + weft_sleep);
 *                    the last task to finish unparks the spawner, which
 *                    waits like Go's WaitGroup.Wait (what the peers do:
 *                    WaitGroup, executor close).  WEFT_BENCH_JOIN=1 instead
 *                    keeps every handle and joins them one by one.
 *   thread-per-task  one detached pthread per task (64 KiB stacks) that
 *                    nanosleeps; when pthread_create fails with EAGAIN the
 *                    loop backs off 1 ms and retries (create_retries=).
 *   pool:K           K pthreads take tasks from a mutex + condvar queue and
 *                    nanosleep; all N tasks are submitted up front.
 *
 * and on weft's executors (weft/exec.h), as the Loom article's harness
 * has them -- every task submitted from the main thread, then shutdown and
 * await (Java's close):
 *
 *   fixed:K           weft_executor_create_fixed(K, unbounded queue)
 *                     (newFixedThreadPool: 100,000 one-second tasks on K=200
 *                     take 500 s; give -n smaller);
 *   cached            weft_executor_create_cached(no limit, 60 s)
 *                     (newCachedThreadPool: a thread per waiting task);
 *   virtual-executor  weft_executor_create_virtual()
 *                     (newVirtualThreadPerTaskExecutor).
 *
 * wall_s runs from the first spawn (for a pool: from starting its threads)
 * until the last task is done; spawn_s until the last task was handed over.
 * user_s, sys_s and peak_rss_mib come from getrusage.  The run is capped at
 * --cap-s (120 s): status=timeout with the number completed, and the process
 * then leaves with _exit, as tasks are still running.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SLEEP_DEFAULT_N 100000L
#define SLEEP_DEFAULT_MS 1000L
#define SLEEP_DEFAULT_CAP_S 120.0
#define PT_STACK_KIB 64L

typedef struct sleep_run {
    long n;
    int64_t sleep_ns;
    double cap_s;
    _Atomic long completed;
    _Atomic long sleep_errors; /* weft_sleep returned < 0 (must stay 0) */
    long spawned;              /* tasks handed to the executor */
    long create_retries;       /* thread-per-task: EAGAIN back-offs */
    int stop_err;              /* error that stopped spawning (-errno for weft) */
    int join_err;              /* virtual: an unexpected weft_join error */
    int timed_out;
    double t0, t_spawned, t1;
} sleep_run;

static int over_cap(const sleep_run *s) { return now_s() - s->t0 > s->cap_s; }

/* Absolute CLOCK_REALTIME time at which the cap passes (for condvars). */
static struct timespec cap_abstime(const sleep_run *s) {
    double left = s->cap_s - (now_s() - s->t0);
    if (left < 0) left = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(left * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    return ts;
}

static void nanosleep_full(int64_t ns) { sleep_ns_os(ns); }

/* ------------------------------------------------------------------------ */
/* virtual                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct vt_job {
    sleep_run *s;
    weft_thread **h;        /* join mode only */
    _Atomic long remaining; /* count mode: tasks not yet done */
    weft_thread *waiter;    /* count mode: the spawner, unparked by the last */
} vt_job;

static void *vt_sleeper(void *arg) {
    vt_job *j = arg;
    sleep_run *s = j->s;
    int r = weft_sleep(s->sleep_ns);
    if (r < 0) atomic_fetch_add(&s->sleep_errors, 1);
    else atomic_fetch_add_explicit(&s->completed, 1, memory_order_relaxed);
    if (!j->h && atomic_fetch_sub(&j->remaining, 1) == 1) weft_unpark(j->waiter);
    return NULL;
}

/* Spawns and joins every task; runs on a vthread or the main thread. */
static void vt_spawn_join(vt_job *j) {
    sleep_run *s = j->s;
    j->waiter = weft_self();
    atomic_store(&j->remaining, s->n);
    s->t0 = now_s();
    while (s->spawned < s->n) {
        int r = weft_spawn(j->h ? &j->h[s->spawned] : NULL, vt_sleeper, j, NULL);
        if (r < 0) {
            s->stop_err = r;
            break;
        }
        s->spawned++;
        if ((s->spawned & 1023) == 0 && over_cap(s)) break;
    }
    s->t_spawned = now_s();
    double left = s->cap_s - (s->t_spawned - s->t0);
    int64_t old = weft_deadline_set(weft_now() + (int64_t)((left > 0 ? left : 0) * 1e9) + 1);
    if (!j->h) {
        /* count mode: tasks never spawned will not count down */
        atomic_fetch_sub(&j->remaining, s->n - s->spawned);
        int64_t cap_at = weft_now() + (int64_t)((left > 0 ? left : 0) * 1e9);
        while (atomic_load(&j->remaining) > 0) {
            if (weft_now() >= cap_at) {
                s->timed_out = 1;
                break;
            }
            /* weft_park may return early (permit semantics): re-check; a
             * platform-thread spawner cannot be unparked, so it polls */
            (void)weft_park(j->waiter ? cap_at : weft_now() + 1000000);
        }
    }
    for (long i = 0; j->h && i < s->spawned; i++) {
        int r = weft_join(j->h[i], NULL);
        if (r == -ETIMEDOUT) {
            s->timed_out = 1;
            break;
        }
        if (r < 0) {
            s->join_err = r;
            break;
        }
    }
    (void)weft_deadline_set(old);
    s->t1 = now_s();
    if (s->spawned < s->n && !s->stop_err) s->timed_out = 1;
}

static void *vt_driver(void *arg) {
    vt_spawn_join(arg);
    return NULL;
}

/* weft_init with the run's carriers and stack size; says why on failure. */
static int init_runtime(const bench_opts *o) {
    weft_runtime_opts cfg = {.carriers = o->carriers, .stack_size = (size_t)o->stack_kib * 1024};
    int r = weft_init(&cfg);
    if (r < 0) fprintf(stderr, "weft-bench: weft_init: %s\n", strerror(-r));
    return r;
}

static int sleep_virtual(const bench_opts *o, sleep_run *s, bench_result *res) {
    int r = init_runtime(o);
    if (r < 0) return r;
    int join_mode = getenv("WEFT_BENCH_JOIN") != NULL;
    vt_job j = {.s = s, .h = join_mode ? malloc((size_t)s->n * sizeof(weft_thread *)) : NULL};
    if (join_mode && !j.h) {
        fprintf(stderr, "weft-bench: out of memory for %ld handles\n", s->n);
        return -ENOMEM;
    }
    if (o->spawner == SPAWN_FROM_VTHREAD) {
        weft_thread *d;
        weft_thread_opts a = {.name = "driver"};
        r = weft_spawn(&d, vt_driver, &j, &a);
        if (r < 0) {
            fprintf(stderr, "weft-bench: weft_spawn (driver): %s\n", strerror(-r));
            free(j.h);
            return r;
        }
        r = weft_join(d, NULL);
        if (r < 0) {
            fprintf(stderr, "weft-bench: weft_join (driver): %s\n", strerror(-r));
            return r;
        }
    } else {
        vt_spawn_join(&j);
    }
    weft_stats st;
    weft_stats_get(&st);
    br_setl(res, "carriers", (long long)st.carriers);
    br_set(res, "spawner", "%s", o->spawner == SPAWN_FROM_VTHREAD ? "vthread" : "platform");
    br_set(res, "wait", "%s", join_mode ? "join" : "count");
    if (atomic_load(&s->sleep_errors)) {
        br_setl(res, "sleep_errors", atomic_load(&s->sleep_errors));
        fprintf(stderr, "weft-bench: BUG? weft_sleep failed in %ld tasks\n", atomic_load(&s->sleep_errors));
    }
    if (s->join_err) {
        char e[32];
        br_set(res, "join_err", "%s", errno_name(s->join_err, e, sizeof e));
        fprintf(stderr, "weft-bench: weft_join failed: %s\n", strerror(-s->join_err));
    }
    if (!s->timed_out && !s->join_err) {
        free(j.h);
        weft_shutdown(); /* every task has been joined: nothing to wait for */
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* platform threads: shared completion count                                 */
/* ------------------------------------------------------------------------ */

typedef struct pt_done {
    sleep_run *s;
    pthread_mutex_t mu;
    pthread_cond_t all_done; /* completed reached target */
    long target;             /* tasks to wait for; n until spawning ends */
    long completed;          /* under mu; mirrored in s->completed */
} pt_done;

static void pt_task_done(pt_done *d) {
    pthread_mutex_lock(&d->mu);
    d->completed++;
    atomic_store_explicit(&d->s->completed, d->completed, memory_order_relaxed);
    if (d->completed >= d->target) pthread_cond_signal(&d->all_done);
    pthread_mutex_unlock(&d->mu);
}

/* Waits until every spawned task is done or the cap passes. */
static void pt_wait_all(pt_done *d) {
    sleep_run *s = d->s;
    struct timespec dl = cap_abstime(s);
    pthread_mutex_lock(&d->mu);
    d->target = s->spawned;
    while (d->completed < d->target) {
        int e = pthread_cond_timedwait(&d->all_done, &d->mu, &dl);
        if (e == ETIMEDOUT) {
            s->timed_out = 1;
            break;
        }
    }
    pthread_mutex_unlock(&d->mu);
    s->t1 = now_s();
    if (s->spawned < s->n && !s->stop_err) s->timed_out = 1;
}

static int pt_done_init(pt_done *d, sleep_run *s) {
    d->s = s;
    d->target = s->n;
    d->completed = 0;
    int e = pthread_mutex_init(&d->mu, NULL);
    if (!e) e = pthread_cond_init(&d->all_done, NULL);
    if (e) fprintf(stderr, "weft-bench: pthread setup: %s\n", strerror(e));
    return -e;
}

static int pt_attr(pthread_attr_t *a, int detached) {
    int e = pthread_attr_init(a);
    if (!e) e = pthread_attr_setstacksize(a, (size_t)PT_STACK_KIB * 1024);
    if (!e && detached) e = pthread_attr_setdetachstate(a, PTHREAD_CREATE_DETACHED);
    if (e) fprintf(stderr, "weft-bench: pthread attributes: %s\n", strerror(e));
    return -e;
}

/* ------------------------------------------------------------------------ */
/* thread-per-task                                                           */
/* ------------------------------------------------------------------------ */

static void *tpt_task(void *arg) {
    pt_done *d = arg;
    nanosleep_full(d->s->sleep_ns);
    pt_task_done(d);
    return NULL;
}

static int sleep_thread_per_task(sleep_run *s, bench_result *res) {
    static pt_done d; /* static: detached threads may outlive this call */
    pthread_attr_t attr;
    int r = pt_done_init(&d, s);
    if (r < 0 || (r = pt_attr(&attr, 1)) < 0) return r;
    s->t0 = now_s();
    while (s->spawned < s->n) {
        pthread_t t;
        int e = pthread_create(&t, &attr, tpt_task, &d);
        if (e == 0) {
            s->spawned++;
            continue;
        }
        if (e != EAGAIN) {
            s->stop_err = e;
            break;
        }
        if (over_cap(s)) break;
        s->create_retries++;
        sleep_ns_os(1000 * 1000);
    }
    s->t_spawned = now_s();
    pthread_attr_destroy(&attr);
    pt_wait_all(&d);
    br_setl(res, "stack_kib", PT_STACK_KIB);
    br_setl(res, "create_retries", s->create_retries);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* pool:K                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct pool {
    pt_done done;
    pthread_mutex_t mu;
    pthread_cond_t nonempty;
    int64_t *q;    /* task i sleeps q[i] ns */
    long head, tail;
    int closed;
} pool;

static void *pool_worker(void *arg) {
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (p->head == p->tail && !p->closed) pthread_cond_wait(&p->nonempty, &p->mu);
        if (p->head == p->tail) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        int64_t ns = p->q[p->head++];
        pthread_mutex_unlock(&p->mu);
        nanosleep_full(ns);
        pt_task_done(&p->done);
    }
}

static int sleep_pool(const bench_opts *o, sleep_run *s, bench_result *res) {
    static pool p; /* static: workers may outlive this call (timeout) */
    long k = o->pool_threads;
    int r = pt_done_init(&p.done, s);
    if (r < 0) return r;
    int e = pthread_mutex_init(&p.mu, NULL);
    if (!e) e = pthread_cond_init(&p.nonempty, NULL);
    if (e) {
        fprintf(stderr, "weft-bench: pthread setup: %s\n", strerror(e));
        return -e;
    }
    pthread_attr_t attr;
    if ((r = pt_attr(&attr, 0)) < 0) return r;
    pthread_t *w = calloc((size_t)k, sizeof *w);
    p.q = malloc((size_t)s->n * sizeof *p.q);
    if (!w || !p.q) {
        free(w);
        free(p.q);
        pthread_attr_destroy(&attr);
        fprintf(stderr, "weft-bench: out of memory for the pool\n");
        return -ENOMEM;
    }
    s->t0 = now_s();
    long started = 0;
    for (; started < k; started++) {
        e = pthread_create(&w[started], &attr, pool_worker, &p);
        if (e) {
            s->stop_err = e;
            break;
        }
    }
    pthread_attr_destroy(&attr);
    if (started > 0) {
        for (long i = 0; i < s->n; i++) {
            pthread_mutex_lock(&p.mu);
            p.q[p.tail++] = s->sleep_ns;
            pthread_cond_signal(&p.nonempty);
            pthread_mutex_unlock(&p.mu);
            s->spawned++;
        }
    }
    s->t_spawned = now_s();
    pt_wait_all(&p.done);
    br_setl(res, "pool_threads", started);
    br_setl(res, "stack_kib", PT_STACK_KIB);
    if (s->timed_out) return 0; /* workers still busy: the process leaves with _exit */
    pthread_mutex_lock(&p.mu);
    p.closed = 1;
    pthread_cond_broadcast(&p.nonempty);
    pthread_mutex_unlock(&p.mu);
    for (long i = 0; i < started; i++) {
        e = pthread_join(w[i], NULL);
        if (e) fprintf(stderr, "weft-bench: pthread_join (pool worker): %s\n", strerror(e));
    }
    free(w);
    free(p.q);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* weft's executors                                                          */
/* ------------------------------------------------------------------------ */

static void *ex_sleeper(void *arg) {
    sleep_run *s = arg;
    int r = weft_sleep(s->sleep_ns); /* parks a vthread, blocks a pool thread */
    if (r < 0) atomic_fetch_add(&s->sleep_errors, 1);
    else atomic_fetch_add_explicit(&s->completed, 1, memory_order_relaxed);
    return NULL;
}

typedef struct ex_job {
    sleep_run *s;
    weft_executor *e;
    int r; /* weft_executor_await's */
} ex_job;

/* Submits every task, then shuts the executor down and awaits it. */
static void *ex_submit_all(void *arg) {
    ex_job *j = arg;
    sleep_run *s = j->s;
    s->t0 = now_s();
    while (s->spawned < s->n) {
        weft_future *f = weft_submit(j->e, ex_sleeper, s);
        if (!f) {
            s->stop_err = -ENOMEM;
            break;
        }
        if (weft_future_done(f)) { /* refused (a task that ran already cannot be: it sleeps) */
            int fr = weft_future_get(f, NULL, 0);
            if (fr < 0) {
                s->stop_err = fr;
                weft_future_unref(f);
                break;
            }
        }
        weft_future_unref(f); /* the task runs on without it */
        s->spawned++;
        if ((s->spawned & 1023) == 0 && over_cap(s)) break;
    }
    s->t_spawned = now_s();
    weft_executor_shutdown(j->e);
    double left = s->cap_s - (s->t_spawned - s->t0);
    j->r = weft_executor_await(j->e, weft_now() + (int64_t)((left > 0 ? left : 0) * 1e9));
    return NULL;
}

static int sleep_executor(const bench_opts *o, sleep_run *s, bench_result *res) {
    int r = init_runtime(o);
    if (r < 0) return r;
    weft_executor *e;
    r = o->executor == EXEC_W_FIXED    ? weft_executor_create_fixed(&e, (int)o->pool_threads, 0, WEFT_REJECT_ABORT)
        : o->executor == EXEC_W_CACHED ? weft_executor_create_cached(&e, 0, 0)
                                       : weft_executor_create_virtual(&e);
    if (r < 0) {
        fprintf(stderr, "weft-bench: cannot make the executor: %s\n", strerror(-r));
        return r;
    }
    ex_job j = {.s = s, .e = e};
    if (o->spawner == SPAWN_FROM_VTHREAD) { /* as the virtual executor's peers: submit from a vthread */
        weft_thread *d;
        weft_thread_opts a = {.name = "driver"};
        r = weft_spawn(&d, ex_submit_all, &j, &a);
        if (r == 0) r = weft_join(d, NULL);
        if (r < 0) {
            fprintf(stderr, "weft-bench: driver vthread: %s\n", strerror(-r));
            return r;
        }
    } else {
        ex_submit_all(&j);
    }
    s->t1 = now_s();
    if (j.r == -ETIMEDOUT || (s->spawned < s->n && !s->stop_err)) s->timed_out = 1;
    weft_executor_stats st;
    weft_executor_stats_get(e, &st);
    br_set(res, "spawner", "%s", o->spawner == SPAWN_FROM_VTHREAD ? "vthread" : "platform");
    br_setl(res, "threads_started", (long long)st.threads_started);
    br_setl(res, "threads_peak", (long long)st.threads_peak);
    br_setl(res, "queued_peak", (long long)st.queued_peak);
    if (atomic_load(&s->sleep_errors)) {
        br_setl(res, "sleep_errors", atomic_load(&s->sleep_errors));
        fprintf(stderr, "weft-bench: BUG? weft_sleep failed in %ld tasks\n", atomic_load(&s->sleep_errors));
    }
    if (!s->timed_out) {
        weft_executor_close(e);
        weft_shutdown();
    }
    return 0;
}

/* ------------------------------------------------------------------------ */

int exp_sleep_tasks(const bench_opts *o, bench_report *rep) {
    static sleep_run s; /* static: tasks still running at a timeout use it */
    s.n = o->n ? o->n : SLEEP_DEFAULT_N;
    long ms = o->sleep_ms >= 0 ? o->sleep_ms : SLEEP_DEFAULT_MS;
    s.sleep_ns = (int64_t)ms * 1000000;
    s.cap_s = o->cap_s > 0 ? o->cap_s : SLEEP_DEFAULT_CAP_S;

    bench_result res;
    br_init(&res, "sleep-tasks", "weft");
    /* the main keys first, in the peers' order; filled in below */
    static const char *const order[] = {"status", "n", "completed", "wall_s", "spawn_s", "user_s",
                                        "sys_s", "peak_rss_mib", "executor", "sleep_ms"};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) br_set(&res, order[i], "-");
    char executor[32];
    if (o->executor == EXEC_POOL) snprintf(executor, sizeof executor, "pool:%ld", o->pool_threads);
    else if (o->executor == EXEC_W_FIXED) snprintf(executor, sizeof executor, "fixed:%ld", o->pool_threads);
    else if (o->executor == EXEC_W_CACHED) snprintf(executor, sizeof executor, "cached");
    else if (o->executor == EXEC_W_VIRTUAL) snprintf(executor, sizeof executor, "virtual-executor");
    else snprintf(executor, sizeof executor, "%s", o->executor == EXEC_VIRTUAL ? "virtual" : "thread-per-task");
    br_set(&res, "executor", "%s", executor);
    br_setl(&res, "n", s.n);

    cpu_usage u0, u1;
    cpu_usage_get(&u0);
    int r;
    switch (o->executor) {
    case EXEC_VIRTUAL: r = sleep_virtual(o, &s, &res); break;
    case EXEC_THREAD_PER_TASK: r = sleep_thread_per_task(&s, &res); break;
    case EXEC_W_FIXED:
    case EXEC_W_CACHED:
    case EXEC_W_VIRTUAL: r = sleep_executor(o, &s, &res); break;
    default: r = sleep_pool(o, &s, &res); break;
    }
    if (r < 0) return r;
    cpu_usage_get(&u1);

    long done = atomic_load(&s.completed);
    const char *status = s.timed_out ? "timeout" : (s.stop_err || s.join_err) ? "failed" : done == s.n ? "ok" : "failed";
    br_set(&res, "status", "%s", status);
    br_setl(&res, "completed", done);
    br_setf(&res, "wall_s", 3, s.t1 - s.t0);
    br_setf(&res, "spawn_s", 3, s.t_spawned - s.t0);
    br_set_cpu(&res, &u0, &u1);
    br_setf(&res, "peak_rss_mib", 1, u1.maxrss_mib);
    br_setl(&res, "sleep_ms", ms);
    if (s.stop_err) {
        char e[32];
        br_set(&res, "stopped_by", "%s", errno_name(s.stop_err, e, sizeof e));
        fprintf(stderr, "weft-bench: spawning stopped after %ld tasks: %s\n", s.spawned,
                strerror(s.stop_err < 0 ? -s.stop_err : s.stop_err));
    }
    r = report_add_weft(rep, &res);
    if (r < 0) return r;
    /* tasks still running (or a handle we could not join): leave at once */
    return s.timed_out || s.join_err ? EXP_LEAVE_NOW : 0;
}
