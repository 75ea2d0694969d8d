/*
 * exp_file.c -- "file-write": the NIO.2 article's harness.  A writer puts
 * --size (5: "Hello") bytes at a time into a file under /tmp as fast as it
 * can; the main thread reads the count of completed writes once a second:
 * 2 warm-up intervals, then 5 measured ones: ops_s_mean and ops_s_stddev
 * (sample, n-1) over the 5, as the peers in ../shared/peers/runtime/
 * file-write count.  threads_peak: the process's threads (/proc/self/task),
 * sampled each interval -- io_uring's io-wq workers included; threads_peak_by:
 * each kind's peak (carriers, monitor, executor pool, io-wq, other = the
 * harness's main thread and its write(2) pthread).
 *
 * Modes (--mode, default all of them, one line each):
 *   write             write(2) to an O_APPEND file from one pthread (the
 *                     c-write peer, in this process);
 *   blocking-1        weft_file_write at i*size from one vthread;
 *   blocking-100      the same from 100 vthreads (positions from a shared
 *                     counter);
 *   async-futures     weft_file_write_async at i*size from one vthread, each
 *                     future awaited 4,096 writes later (completions are
 *                     counted);
 *   async-handlers    the same with a completion handler that counts, on the
 *                     file's default executor (5 threads, queue 2,500,
 *                     caller-runs: the article's pool); futures dropped.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { M_WRITE, M_BLOCKING_1, M_BLOCKING_100, M_ASYNC_FUTURES, M_ASYNC_HANDLERS, M_COUNT };
static const char *const MODE_NAMES[M_COUNT] = {"write", "blocking-1", "blocking-100", "async-futures",
                                                "async-handlers"};

typedef struct fw {
    int mode;
    size_t size;
    char *buf;
    int fd;
    weft_file *f;
    _Atomic long ops;
    _Atomic long next_pos; /* blocking-100: the next record */
    _Atomic int stop;
    int err;
} fw;

static void fail(fw *w, long r) {
    if (!w->err) w->err = (int)r;
    atomic_store(&w->stop, 1);
}

static void *write_worker(void *arg) {
    fw *w = arg;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        if (write(w->fd, w->buf, w->size) != (ssize_t)w->size) {
            fail(w, -errno);
            break;
        }
        atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
    }
    return NULL;
}

static void *blocking_worker(void *arg) {
    fw *w = arg;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        long i = atomic_fetch_add_explicit(&w->next_pos, 1, memory_order_relaxed);
        ssize_t r = weft_file_write(w->f, w->buf, w->size, (off_t)i * (off_t)w->size);
        if (r < 0) {
            fail(w, r);
            break;
        }
        atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
    }
    return NULL;
}

enum { WINDOW = 4096 };

static void *futures_worker(void *arg) {
    fw *w = arg;
    weft_future **ring = calloc(WINDOW, sizeof *ring);
    long i = 0;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        weft_future **slot = &ring[i % WINDOW];
        if (*slot) { /* the write WINDOW back: count it when done */
            int r = weft_future_get(*slot, NULL, 0);
            weft_future_unref(*slot);
            if (r < 0) {
                fail(w, r);
                break;
            }
            atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
        }
        *slot = weft_file_write_async(w->f, w->buf, w->size, (off_t)i * (off_t)w->size, NULL, NULL);
        if (!*slot) {
            fail(w, -ENOMEM);
            break;
        }
        i++;
    }
    for (int k = 0; k < WINDOW; k++) weft_future_unref(ring[k]);
    free(ring);
    return NULL;
}

static void count_done(ssize_t res, void *ctx) {
    fw *w = ctx;
    if (res < 0) fail(w, res);
    else atomic_fetch_add_explicit(&w->ops, 1, memory_order_relaxed);
}

static void *handlers_worker(void *arg) {
    fw *w = arg;
    long i = 0;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        weft_future *u = weft_file_write_async(w->f, w->buf, w->size, (off_t)i * (off_t)w->size, count_done, w);
        if (!u) {
            fail(w, -ENOMEM);
            break;
        }
        weft_future_unref(u);
        i++;
    }
    return NULL;
}

/* The process's threads by kind, from /proc/self/task/N/comm: the
 * runtime's (weft-c* carriers, weft-monitor), the executors' pools
 * (weft-pool-*), io_uring's io-wq workers (iou-wrk-*: kernel threads that
 * count in the process) and the rest (the harness's own). */
enum { TK_CARRIER, TK_MONITOR, TK_POOL, TK_IOWQ, TK_OTHER, TK_COUNT };
static const char *const TK_NAMES[TK_COUNT] = {"carriers", "monitor", "pool", "iowq", "other"};

static long threads_now(long by_kind[TK_COUNT]) {
    for (int k = 0; k < TK_COUNT; k++) by_kind[k] = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[64], comm[32] = "";
        snprintf(p, sizeof p, "/proc/self/task/%.20s/comm", e->d_name);
        FILE *f = fopen(p, "re");
        if (!f) continue; /* gone meanwhile */
        if (!fgets(comm, sizeof comm, f)) comm[0] = 0;
        fclose(f);
        int k = !strncmp(comm, "weft-c", 6)         ? TK_CARRIER
                : !strncmp(comm, "weft-monitor", 12) ? TK_MONITOR
                : !strncmp(comm, "weft-pool", 9)     ? TK_POOL
                : !strncmp(comm, "iou-wrk", 7)       ? TK_IOWQ
                                                     : TK_OTHER;
        by_kind[k]++;
        n++;
    }
    closedir(d);
    return n;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int run_mode(int mode, size_t size, bench_report *rep) {
    static fw w; /* workers may outlive a failed run's return */
    memset(&w, 0, sizeof w);
    w.mode = mode;
    w.size = size;
    w.buf = malloc(size);
    for (size_t k = 0; k < size; k++) w.buf[k] = "Hello"[k % 5];
    char path[64];
    snprintf(path, sizeof path, "/tmp/weft-bench-file-write-%d.dat", (int)getpid());
    int nwork = mode == M_BLOCKING_100 ? 100 : 1;
    pthread_t pt;
    weft_thread *vt[100];
    if (mode == M_WRITE) {
        w.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
        if (w.fd < 0) return -errno;
        if (pthread_create(&pt, NULL, write_worker, &w)) return -EAGAIN;
    } else {
        int opened = weft_file_create(&w.f, path, WEFT_WRITE | WEFT_CREATE | WEFT_TRUNCATE, 0644, NULL);
        if (opened < 0) return opened;
        void *(*fn)(void *) = mode == M_ASYNC_FUTURES    ? futures_worker
                              : mode == M_ASYNC_HANDLERS ? handlers_worker
                                                         : blocking_worker;
        for (int k = 0; k < nwork; k++) {
            int r = weft_spawn(&vt[k], fn, &w, NULL);
            if (r < 0) return r;
        }
    }
    enum { WARMUP = 2, MEASURED = 5 };
    double rate[WARMUP + MEASURED], t0 = mono_s(), tp = t0;
    /* sampled at the end of each interval only: a thread just created
     * carries its creator's name until it names itself */
    long cp = 0, kind_now[TK_COUNT], kind_peak[TK_COUNT] = {0}, tpeak = 0;
    for (int k = 0; k < WARMUP + MEASURED; k++) {
        double due = t0 + k + 1;
        struct timespec ts = {(time_t)due, (long)((due - (double)(time_t)due) * 1e9)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
        }
        double tn = mono_s();
        long c = atomic_load(&w.ops);
        rate[k] = (double)(c - cp) / (tn - tp);
        tp = tn;
        cp = c;
        long th = threads_now(kind_now);
        if (th > tpeak) tpeak = th;
        for (int t = 0; t < TK_COUNT; t++)
            if (kind_now[t] > kind_peak[t]) kind_peak[t] = kind_now[t];
    }
    atomic_store(&w.stop, 1);
    if (mode == M_WRITE) {
        pthread_join(pt, NULL);
        close(w.fd);
    } else {
        for (int k = 0; k < nwork; k++) weft_join(vt[k], NULL);
        weft_file_close(w.f); /* the writes still in flight complete first */
    }
    unlink(path);
    double sum = 0, sq = 0;
    for (int k = WARMUP; k < WARMUP + MEASURED; k++) sum += rate[k];
    double mean = sum / MEASURED;
    for (int k = WARMUP; k < WARMUP + MEASURED; k++) sq += (rate[k] - mean) * (rate[k] - mean);
    bench_result res;
    br_init(&res, "file-write", "weft");
    br_set(&res, "status", "%s", w.err ? "failed" : "ok");
    br_set(&res, "mode", "%s", MODE_NAMES[mode]);
    br_setl(&res, "size", (long long)size);
    br_set(&res, "ops_s_mean", "%.0f", mean);
    br_set(&res, "ops_s_stddev", "%.0f", sqrt(sq / (MEASURED - 1)));
    char iv[160];
    int at = 0;
    for (int k = WARMUP; k < WARMUP + MEASURED; k++) at += snprintf(iv + at, sizeof iv - (size_t)at, "%s%.0f", k > WARMUP ? "," : "", rate[k]);
    br_set(&res, "intervals", "%s", iv);
    br_set(&res, "warmup", "%.0f,%.0f", rate[0], rate[1]);
    br_setl(&res, "total_ops", cp);
    br_setl(&res, "threads_peak", tpeak);
    char by[128];
    at = 0;
    for (int t = 0; t < TK_COUNT; t++) at += snprintf(by + at, sizeof by - (size_t)at, "%s%s:%ld", t ? "," : "", TK_NAMES[t], kind_peak[t]);
    br_set(&res, "threads_peak_by", "%s", by);
    if (w.err) {
        char e[32];
        br_set(&res, "error", "%s", errno_name(w.err, e, sizeof e));
    }
    free(w.buf);
    return report_add_weft(rep, &res);
}

int exp_file_write(const bench_opts *o, bench_report *rep) {
    weft_runtime_opts cfg = {.carriers = o->carriers};
    int r = weft_init(&cfg);
    if (r < 0) {
        fprintf(stderr, "weft-bench: weft_init: %s\n", strerror(-r));
        return r;
    }
    size_t size = o->size > 0 ? (size_t)o->size : 5;
    for (int m = 0; m < M_COUNT; m++) {
        if (o->file_mode && strcmp(o->file_mode, MODE_NAMES[m]) != 0) continue;
        r = run_mode(m, size, rep);
        if (r < 0) {
            fprintf(stderr, "weft-bench: file-write %s: %s\n", MODE_NAMES[m], strerror(-r));
            return r;
        }
    }
    return 0;
}

int exp_file_mode_known(const char *m) {
    for (int k = 0; k < M_COUNT; k++)
        if (strcmp(m, MODE_NAMES[k]) == 0) return 1;
    return 0;
}
