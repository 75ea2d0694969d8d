/*
 * exp_floor.c -- "page-floor": what the kernel alone charges, on this machine
 * and at this moment, for N vthread stacks of the kind weft makes.
 *
 * Why: threads and sleep-tasks are bound by one fresh page per vthread.  A
 * vthread's stack needs its own guard (MADV_GUARD_INSTALL at the bottom of
 * its slot) and its own top page, populated (the page its stack starts on,
 * holding its descriptor).  No design with a guarded stack per vthread does
 * less kernel work than that.  This experiment does exactly that work and
 * nothing else, the way weft's allocator does it (slots of the default
 * size, 64 slots per process_madvise call for the guards and 64 for the
 * pages), on --carriers threads (default: online CPUs) sharing the slots,
 * so that a threads or sleep-tasks figure can be set against the floor of
 * the same sitting: on a VM the cost of a fresh page moves from day to day.
 *
 * Three passes, each on a fresh mapping unmapped afterwards (not timed):
 * guarded, pages alone, guarded again.  Reported: floor_s (guards + pages,
 * wall: the faster guarded pass), ns_per_slot, pages_only_s, first_pass_s
 * (the first pass can be far slower: memory the VM's host has not backed
 * yet), guards (1 if the kernel has MADV_GUARD_INSTALL; without it the
 * guarded passes are pages alone).  Measured here, the same -n moves by up
 * to 2x from one minute to the next: run it in the same sitting as the
 * figure it bounds.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define FLOOR_PAGE 4096ul
#define FLOOR_SLOT (256ul * 1024 + FLOOR_PAGE) /* weft's default slot: guard + 256 KiB */
#define FLOOR_BATCH 64

typedef struct floor_job {
    char *base;
    long first, count;
    int pidfd, guards;
    int err;
} floor_job;

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int advise(int pidfd, struct iovec *iov, int n, int advice) {
    if (pidfd >= 0 && syscall(SYS_process_madvise, pidfd, iov, (size_t)n, advice, 0u) >= 0) return 0;
    for (int i = 0; i < n; i++)
        if (madvise(iov[i].iov_base, iov[i].iov_len, advice) != 0) return -errno;
    return 0;
}

static void *floor_worker(void *arg) {
    floor_job *j = arg;
    struct iovec iov[FLOOR_BATCH];
    for (long i = j->first; i < j->first + j->count && !j->err; i += FLOOR_BATCH) {
        int k = 0;
        for (long s = i; s < j->first + j->count && k < FLOOR_BATCH; s++, k++) {
            iov[k].iov_base = j->base + (size_t)s * FLOOR_SLOT; /* the slot's guard page */
            iov[k].iov_len = FLOOR_PAGE;
        }
        if (j->guards && (j->err = advise(j->pidfd, iov, k, MADV_GUARD_INSTALL)) != 0) break;
        for (int q = 0; q < k; q++) iov[q].iov_base = (char *)iov[q].iov_base + FLOOR_SLOT - FLOOR_PAGE; /* top page */
        j->err = advise(j->pidfd, iov, k, MADV_POPULATE_WRITE);
    }
    return NULL;
}

/* One pass over n fresh slots on nt threads; the wall time, or < 0. */
static double floor_pass(long n, int nt, int pidfd, int guards, int *err) {
    size_t len = (size_t)n * FLOOR_SLOT;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        *err = -errno;
        return -1;
    }
    madvise(base, len, MADV_NOHUGEPAGE); /* as weft's slabs: one page per slot, not 2 MiB */
    floor_job jobs[64];
    pthread_t th[64];
    long per = n / nt, extra = n % nt, at = 0;
    double t0 = mono_s();
    int started = 0;
    for (int i = 0; i < nt; i++) {
        long cnt = per + (i < extra);
        jobs[i] = (floor_job){.base = base, .first = at, .count = cnt, .pidfd = pidfd, .guards = guards};
        at += cnt;
        if (pthread_create(&th[i], NULL, floor_worker, &jobs[i]) != 0) {
            floor_worker(&jobs[i]); /* no thread: do its share here */
            th[i] = 0;
        } else {
            started++;
        }
    }
    for (int i = 0; i < nt; i++)
        if (th[i]) pthread_join(th[i], NULL);
    double wall = mono_s() - t0;
    (void)started;
    munmap(base, len);
    for (int i = 0; i < nt; i++)
        if (jobs[i].err) {
            *err = jobs[i].err;
            return -1;
        }
    return wall;
}

int exp_page_floor(const bench_opts *o, bench_report *rep) {
    long n = o->n > 0 ? o->n : 100000;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = o->carriers > 0 ? o->carriers : (int)(ncpu > 0 ? ncpu : 1);
    if (nt > 64) nt = 64;
    int pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u);

    /* does this kernel have guard markers? (as weft's allocator probes) */
    int guards = 0;
    char *p = mmap(NULL, 2 * FLOOR_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
        guards = madvise(p, FLOOR_PAGE, MADV_GUARD_INSTALL) == 0;
        munmap(p, 2 * FLOOR_PAGE);
    }

    /* guarded, pages alone, guarded again: the first pass may get memory
     * the VM's host has not backed yet (first touch ~21 us a page here),
     * the others get what it freed */
    int err = 0;
    double first = floor_pass(n, nt, pidfd, guards, &err);
    double pages = first >= 0 ? floor_pass(n, nt, pidfd, 0, &err) : -1;
    double again = pages >= 0 ? floor_pass(n, nt, pidfd, guards, &err) : -1;
    double with = again >= 0 && again < first ? again : first;
    if (again < 0) with = -1;
    if (pidfd >= 0) close(pidfd);

    bench_result r;
    br_init(&r, "page-floor", "weft");
    if (with < 0 || pages < 0) {
        br_set(&r, "status", "error");
        br_set(&r, "err", "%s", strerror(-err));
        fprintf(stderr, "weft-bench page-floor: %s\n", strerror(-err));
    } else {
        br_set(&r, "status", "ok");
    }
    br_setl(&r, "n", n);
    if (with >= 0 && pages >= 0) {
        br_setf(&r, "floor_s", 3, with);
        br_setf(&r, "ns_per_slot", 0, with * 1e9 / (double)n);
        br_setf(&r, "pages_only_s", 3, pages);
        br_setf(&r, "first_pass_s", 3, first);
    }
    br_setl(&r, "threads", nt);
    br_setl(&r, "guards", guards);
    br_setl(&r, "slot_kib", (long long)(FLOOR_SLOT / 1024));
    report_add_weft(rep, &r);
    printf("\npage-floor: the kernel's work alone for %ld guarded stacks (a guard and one populated page "
           "each, 64 per call, %d threads): %.3f s, %.0f ns a slot; pages alone %.3f s\n",
           n, nt, with, with >= 0 ? with * 1e9 / (double)n : 0, pages);
    return 0;
}
