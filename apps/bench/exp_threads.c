/*
 * exp_threads.c -- "threads": how many threads that block forever one
 * process can create, how fast, and what each costs in resident memory.
 *
 * virtual (default): weft_spawn daemon vthreads that each park in
 *   weft_sleep_until(INT64_MAX), until N exist or weft_spawn fails.
 * --platform: pthreads with 64 KiB stacks (--stack-kib) that each wait on a
 *   condition variable that is never signalled, until N exist or
 *   pthread_create fails; on failure, the limit that was most likely hit
 *   (kernel.pid_max, kernel.threads-max, vm.max_map_count, RLIMIT_NPROC) is
 *   named on the line (limit=) and in a sentence on stderr.
 *
 * create_s runs from the first spawn until every thread has reached its
 * blocking call: each increments an atomic counter just before blocking, and
 * the main thread waits until the counter equals the number created.
 * rss_per_task_b = (RSS ~10 ms after that - RSS before the first spawn) / created,
 * RSS from /proc/self/statm.  Then the process leaves with _exit: tearing down
 * a million threads is not what is measured.
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
#include <sys/resource.h>

#define THREADS_DEFAULT_N 1000000L
#define THREADS_DEFAULT_CAP_S 60.0
#define SETTLE_NS (10 * 1000 * 1000) /* wait before the second RSS sample */

/* What a creation run found, common to both kinds. */
typedef struct park_run {
    long n;              /* asked for */
    double cap_s;
    _Atomic long parked; /* threads that reached their blocking call */
    _Atomic long woken;  /* threads whose "forever" ended (must stay 0) */
    long created;
    int stop_err;        /* 0, or the error that stopped creation (-errno for weft) */
    int timed_out;       /* creation or the wait for parking ran past cap_s */
    double t0;           /* first spawn */
    double t_parked;     /* all created threads parked (or gave up waiting) */
    long long rss0, rss1;
} park_run;

/* Waits until every created thread has parked or the cap has passed. */
static void wait_parked(park_run *pr) {
    while (atomic_load(&pr->parked) < pr->created) {
        if (now_s() - pr->t0 > pr->cap_s) {
            pr->timed_out = 1;
            break;
        }
        sleep_ns_os(50 * 1000);
    }
    pr->t_parked = now_s();
}

static void put_common(bench_result *r, const park_run *pr, const char *executor) {
    char e[32];
    const char *status = pr->timed_out ? "timeout" : pr->created < pr->n ? "failed" : "ok";
    br_set(r, "status", "%s", status);
    br_setl(r, "n", pr->n);
    br_setl(r, "created", pr->created);
    double d = pr->t_parked - pr->t0;
    long long delta = pr->rss1 - pr->rss0;
    br_setf(r, "create_s", 3, d);
    br_setf(r, "ns_per_task", 0, pr->created ? d * 1e9 / (double)pr->created : 0.0);
    br_setl(r, "rss_per_task_b", pr->created ? delta / pr->created : 0);
    br_setf(r, "rss_delta_mib", 1, (double)delta / 1048576.0);
    br_set(r, "stopped_by", "%s", pr->stop_err ? errno_name(pr->stop_err, e, sizeof e) : pr->timed_out ? "cap" : "none");
    br_set(r, "executor", "%s", executor);
    br_setl(r, "parked", atomic_load(&pr->parked));
}

/* ------------------------------------------------------------------------ */
/* virtual threads                                                           */
/* ------------------------------------------------------------------------ */

static void *vt_parker(void *arg) {
    park_run *pr = arg;
    atomic_fetch_add_explicit(&pr->parked, 1, memory_order_relaxed);
    int r = weft_sleep_until(INT64_MAX);
    atomic_fetch_add(&pr->woken, 1); /* never signalled, never cancelled */
    return (void *)(intptr_t)r;
}

/* The spawn loop; runs on a vthread or on the main thread (--spawner). */
static void spawn_parkers(park_run *pr) {
    weft_thread_opts attr = {.daemon = 1};
    pr->t0 = now_s();
    while (pr->created < pr->n) {
        int r = weft_spawn(NULL, vt_parker, pr, &attr);
        if (r < 0) {
            pr->stop_err = r;
            break;
        }
        pr->created++;
        if ((pr->created & 1023) == 0 && now_s() - pr->t0 > pr->cap_s) {
            pr->timed_out = 1;
            break;
        }
    }
}

static void *spawner_main(void *arg) {
    spawn_parkers(arg);
    return NULL;
}

static int threads_virtual(const bench_opts *o, bench_report *rep, park_run *pr) {
    weft_runtime_opts cfg = {.carriers = o->carriers, .stack_size = (size_t)o->stack_kib * 1024};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-bench: weft_init: %s\n", strerror(-r));
        return r;
    }
    weft_stats st0;
    weft_stats_get(&st0);
    pr->rss0 = rss_bytes();
    if (o->spawner == SPAWN_FROM_VTHREAD) {
        weft_thread *sp;
        weft_thread_opts a = {.name = "spawner"};
        r = weft_spawn(&sp, spawner_main, pr, &a);
        if (r < 0) {
            fprintf(stderr, "weft-bench: weft_spawn (spawner): %s\n", strerror(-r));
            return r;
        }
        r = weft_join(sp, NULL);
        if (r < 0) {
            fprintf(stderr, "weft-bench: weft_join (spawner): %s\n", strerror(-r));
            return r;
        }
    } else {
        spawn_parkers(pr);
    }
    wait_parked(pr);
    sleep_ns_os(SETTLE_NS);
    pr->rss1 = rss_bytes();

    weft_stats st;
    weft_stats_get(&st);
    bench_result res;
    br_init(&res, "threads", "weft");
    put_common(&res, pr, "virtual");
    br_setl(&res, "carriers", (long long)st.carriers);
    br_set(&res, "spawner", "%s", o->spawner == SPAWN_FROM_VTHREAD ? "vthread" : "platform");
    br_setf(&res, "stack_reserved_gib", 1, (double)st.stack_bytes_reserved / (1 << 30));
    br_setl(&res, "live", (long long)st.live);
    if (atomic_load(&pr->woken)) {
        br_setl(&res, "woken", atomic_load(&pr->woken));
        fprintf(stderr, "weft-bench: BUG? %ld vthreads returned from weft_sleep_until(INT64_MAX)\n",
                atomic_load(&pr->woken));
    }
    cpu_usage u;
    cpu_usage_get(&u);
    br_setf(&res, "peak_rss_mib", 1, u.maxrss_mib);
    if (pr->stop_err)
        fprintf(stderr, "weft-bench: weft_spawn failed with %s after %ld vthreads (%.1f GiB of stack address space reserved)\n",
                strerror(-pr->stop_err), pr->created, (double)st.stack_bytes_reserved / (1 << 30));
    return report_add_weft(rep, &res);
}

/* ------------------------------------------------------------------------ */
/* platform threads                                                          */
/* ------------------------------------------------------------------------ */

typedef struct pt_park {
    park_run *pr;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* never signalled */
} pt_park;

static void *pt_parker(void *arg) {
    pt_park *pp = arg;
    pthread_mutex_lock(&pp->mu);
    atomic_fetch_add_explicit(&pp->pr->parked, 1, memory_order_relaxed);
    for (;;) pthread_cond_wait(&pp->cv, &pp->mu);
    return NULL;
}

/* The system limits on threads, read when pthread_create fails. */
typedef struct thread_limits {
    long long pid_max, threads_max, max_map_count, nproc_limit;
    long sys_threads, user_threads, self_threads, maps;
} thread_limits;

static void read_limits(thread_limits *l) {
    l->pid_max = read_proc_ll("/proc/sys/kernel/pid_max");
    l->threads_max = read_proc_ll("/proc/sys/kernel/threads-max");
    l->max_map_count = read_proc_ll("/proc/sys/vm/max_map_count");
    struct rlimit rl;
    l->nproc_limit = getrlimit(RLIMIT_NPROC, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long long)rl.rlim_cur : -1;
    l->sys_threads = system_threads();
    l->user_threads = user_threads();
    l->self_threads = self_threads();
    l->maps = count_maps();
}

/*
 * Names the limit that is nearest to being used up: the largest used/limit
 * ratio.  The kernel reserves pids below 300 (RESERVED_PIDS), so pid_max
 * allows about pid_max - 300 tasks on the whole system.
 */
static const char *likely_limit(const thread_limits *l, long long *value, double *ratio) {
    struct { const char *name; double used, limit; long long shown; } c[] = {
        {"pid_max", (double)l->sys_threads, (double)(l->pid_max - 300), l->pid_max},
        {"threads-max", (double)l->sys_threads, (double)l->threads_max, l->threads_max},
        {"max_map_count", (double)l->maps, (double)l->max_map_count, l->max_map_count},
        {"RLIMIT_NPROC", (double)l->user_threads, (double)l->nproc_limit, l->nproc_limit},
    };
    const char *best = "unknown";
    double br = 0;
    *value = -1;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        if (c[i].used < 0 || c[i].limit <= 0) continue;
        double q = c[i].used / c[i].limit;
        if (q > br) {
            br = q;
            best = c[i].name;
            *value = c[i].shown;
        }
    }
    *ratio = br;
    return br >= 0.95 ? best : "unknown";
}

static void explain_limit(const char *name, const thread_limits *l, const park_run *pr) {
    char e[32];
    fprintf(stderr, "weft-bench: pthread_create failed with %s after %ld threads. ",
            errno_name(pr->stop_err, e, sizeof e), pr->created);
    if (strcmp(name, "pid_max") == 0)
        fprintf(stderr, "The system runs %ld tasks and kernel.pid_max is %lld (pids below 300 are reserved): "
                "no pid is left. Raise /proc/sys/kernel/pid_max to go further.\n", l->sys_threads, l->pid_max);
    else if (strcmp(name, "threads-max") == 0)
        fprintf(stderr, "The system runs %ld tasks and kernel.threads-max is %lld. "
                "Raise /proc/sys/kernel/threads-max to go further.\n", l->sys_threads, l->threads_max);
    else if (strcmp(name, "max_map_count") == 0)
        fprintf(stderr, "The process has %ld mappings and vm.max_map_count is %lld (each thread stack and its "
                "guard page take 2). Raise /proc/sys/vm/max_map_count to go further.\n", l->maps, l->max_map_count);
    else if (strcmp(name, "RLIMIT_NPROC") == 0)
        fprintf(stderr, "This user runs %ld threads and RLIMIT_NPROC (ulimit -u) is %lld. "
                "Raise ulimit -u to go further.\n", l->user_threads, l->nproc_limit);
    else
        fprintf(stderr, "No thread limit is near: system tasks %ld (pid_max %lld, threads-max %lld), "
                "maps %ld (max_map_count %lld), user threads %ld (RLIMIT_NPROC %lld); probably memory.\n",
                l->sys_threads, l->pid_max, l->threads_max, l->maps, l->max_map_count, l->user_threads,
                l->nproc_limit);
}

static int threads_platform(const bench_opts *o, bench_report *rep, park_run *pr) {
    long stack_kib = o->stack_kib ? o->stack_kib : 64;
    static pt_park pp; /* static: the parked threads use it until _exit */
    pp.pr = pr;
    pthread_attr_t attr;
    int e;
    if ((e = pthread_mutex_init(&pp.mu, NULL)) || (e = pthread_cond_init(&pp.cv, NULL)) ||
        (e = pthread_attr_init(&attr)) || (e = pthread_attr_setstacksize(&attr, (size_t)stack_kib * 1024)) ||
        (e = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED))) {
        fprintf(stderr, "weft-bench: pthread setup: %s\n", strerror(e));
        return -e;
    }
    pr->rss0 = rss_bytes();
    pr->t0 = now_s();
    while (pr->created < pr->n) {
        pthread_t t;
        e = pthread_create(&t, &attr, pt_parker, &pp);
        if (e != 0) {
            pr->stop_err = e;
            break;
        }
        pr->created++;
        if ((pr->created & 1023) == 0 && now_s() - pr->t0 > pr->cap_s) {
            pr->timed_out = 1;
            break;
        }
    }
    thread_limits lim = {0};
    if (pr->stop_err) read_limits(&lim); /* at the failure, before anything changes */
    wait_parked(pr);
    sleep_ns_os(SETTLE_NS);
    pr->rss1 = rss_bytes();
    pthread_attr_destroy(&attr);

    bench_result res;
    br_init(&res, "threads", "weft");
    put_common(&res, pr, "platform");
    br_setl(&res, "stack_kib", stack_kib);
    if (pr->stop_err) {
        long long value;
        double ratio;
        const char *name = likely_limit(&lim, &value, &ratio);
        if (strcmp(name, "unknown") == 0) br_set(&res, "limit", "unknown");
        else br_set(&res, "limit", "%s(%lld)", name, value);
        br_setl(&res, "sys_threads", lim.sys_threads);
        br_setl(&res, "pid_max", lim.pid_max);
        br_setl(&res, "threads_max", lim.threads_max);
        br_setl(&res, "maps", lim.maps);
        br_setl(&res, "max_map_count", lim.max_map_count);
        br_setl(&res, "user_threads", lim.user_threads);
        br_setl(&res, "nproc_limit", lim.nproc_limit);
        explain_limit(name, &lim, pr);
    }
    cpu_usage u;
    cpu_usage_get(&u);
    br_setf(&res, "peak_rss_mib", 1, u.maxrss_mib);
    return report_add_weft(rep, &res);
}

int exp_threads(const bench_opts *o, bench_report *rep) {
    /* static: the parked threads keep using it until the process is gone */
    static park_run pr;
    pr.n = o->n ? o->n : THREADS_DEFAULT_N;
    pr.cap_s = o->cap_s > 0 ? o->cap_s : THREADS_DEFAULT_CAP_S;
    int r = o->platform ? threads_platform(o, rep, &pr) : threads_virtual(o, rep, &pr);
    /* the threads stay blocked: the caller leaves with _exit */
    return r < 0 ? r : EXP_LEAVE_NOW;
}
