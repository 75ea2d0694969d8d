/*
 * exp_scope.c -- "scope-memory": what one long-lived scope holds after -n N
 * short tasks (default 1,000,000) went through it, against the same tasks
 * spawned detached -- the memory a server pays for running a task per
 * connection in one scope for months (issue 25).
 *
 * Modes, each in a process of its own (this program again, with
 * WEFT_BENCH_SCOPE_MODE set: a mode's RSS must not inherit another's
 * stacks, caches or heap):
 *   detached  weft_spawn(NULL, ...): the floor -- nothing is kept;
 *   released  weft_fork_released into one open scope: no handle;
 *   kept      weft_fork into one open scope, every handle kept to the end
 *             (the record each holds: 72 bytes).
 * Each forks in batches of 1,000 and waits for the batch (a latch for the
 * detached ones, the scope's join for the others: ALL's join may be called
 * again), so at most a batch lives at once whatever N is.  Measured in the
 * child: RSS (statm) and VmSize after the last batch, with the scope still
 * open, and the tasks per second.  The weft lines carry the acceptance's
 * bounds: released RSS <= 1.5x detached, kept RSS <= 1.5x detached + 128 B
 * a task ("ok" or "over").
 */
#define _GNU_SOURCE
#include "bench.h"
#include "launch.h"

#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 1000 };
static const char *const MODES[] = {"detached", "released", "kept"};

static weft_latch batch_done;

static void *detached_task(void *arg) {
    (void)arg;
    weft_latch_count_down(&batch_done);
    return NULL;
}

static int scope_task(void *arg, void **result) {
    *result = arg;
    return 0;
}

static long vm_size_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = -1;
    if (f) {
        if (fscanf(f, "%ld", &pages) != 1) pages = -1;
        fclose(f);
    }
    return pages < 0 ? -1 : pages * 4;
}

/* The child: one mode, one line on stdout ("rss_kib=R vm_kib=V tasks_s=T"). */
static int child(const char *mode, long n) {
    int m = !strcmp(mode, "detached") ? 0 : !strcmp(mode, "released") ? 1 : !strcmp(mode, "kept") ? 2 : -1;
    if (m < 0) return -EINVAL;
    weft_scope *s = NULL;
    weft_task **kept = NULL;
    if (m > 0) {
        int r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0);
        if (r < 0) return r;
    }
    if (m == 2 && !(kept = calloc((size_t)n, sizeof *kept))) return -ENOMEM;
    double t0 = now_s();
    for (long done = 0; done < n; done += BATCH) {
        long k = n - done < BATCH ? n - done : BATCH;
        if (m == 0) {
            weft_latch_init(&batch_done, (unsigned)k);
            for (long i = 0; i < k; i++) {
                int r = weft_spawn(NULL, detached_task, NULL, NULL);
                if (r < 0) return r;
            }
            weft_latch_await(&batch_done);
            weft_latch_destroy(&batch_done);
        } else {
            for (long i = 0; i < k; i++) {
                void *arg = (void *)(intptr_t)(done + i);
                if (m == 1) {
                    int r = weft_fork_released(s, scope_task, arg);
                    if (r < 0) return r;
                } else if (!(kept[done + i] = weft_fork(s, scope_task, arg))) {
                    return -errno;
                }
            }
            int r = weft_scope_join(s);
            if (r < 0) return r;
        }
    }
    double dt = now_s() - t0;
    /* measured with the scope open and every handle still held */
    printf("rss_kib=%lld vm_kib=%ld tasks_s=%.0f\n", rss_bytes() / 1024, vm_size_kib(), (double)n / dt);
    fflush(stdout);
    if (m == 2)
        for (long i = 0; i < n; i += n / 97 + 1)
            if (weft_task_state(kept[i]) != WEFT_TASK_SUCCEEDED || (intptr_t)weft_task_result(kept[i]) != i)
                return -EPROTO;
    if (s) weft_scope_close(s);
    free(kept);
    return 0;
}

int exp_scope_memory(const bench_opts *o, bench_report *rep) {
    long n = o->n > 0 ? o->n : 1000000;
    const char *mode = getenv("WEFT_BENCH_SCOPE_MODE");
    if (mode) { /* the child */
        int r = child(mode, n);
        if (r < 0) fprintf(stderr, "weft-bench: scope-memory %s: %s\n", mode, strerror(-r));
        return r;
    }
    char nbuf[32];
    snprintf(nbuf, sizeof nbuf, "%ld", n);
    double rss[3] = {0}, vm[3] = {0}, rate[3] = {0};
    int ok[3] = {0};
    for (int m = 0; m < 3; m++) {
        char env[64];
        snprintf(env, sizeof env, "WEFT_BENCH_SCOPE_MODE=%s", MODES[m]);
        const char *envv[] = {env, NULL};
        char *argv[] = {(char *)"/proc/self/exe", (char *)"scope-memory", (char *)"-n", nbuf, NULL};
        launch l;
        launch_opts lo = {.out = LAUNCH_PIPE, .env = envv, .deathsig = 9, .who = "weft-bench: "};
        int r = launch_start(&l, argv, &lo);
        if (r < 0) {
            fprintf(stderr, "weft-bench: scope-memory: cannot start a child: %s\n", strerror(-r));
            return r;
        }
        char *text = NULL;
        size_t len = 0;
        launch_read_all(&l, launch_now_ms() + 600000, &text, &len);
        launch_reap(&l, 10000);
        long long rk = -1, vk = -1;
        double ts = 0;
        const char *line = text ? strstr(text, "rss_kib=") : NULL; /* (after the "# machine" line) */
        ok[m] = line && sscanf(line, "rss_kib=%lld vm_kib=%lld tasks_s=%lf", &rk, &vk, &ts) == 3 &&
                l.reaped && WIFEXITED(l.status) && WEXITSTATUS(l.status) == 0;
        rss[m] = (double)rk;
        vm[m] = (double)vk;
        rate[m] = ts;
        free(text);
        launch_close(&l);
    }
    for (int m = 0; m < 3; m++) {
        bench_result r;
        br_init(&r, "scope-memory", "weft");
        br_set(&r, "mode", "%s", MODES[m]);
        br_setl(&r, "n", n);
        if (!ok[m] || !ok[0]) {
            br_set(&r, "status", "%s", "error");
            report_add_weft(rep, &r);
            continue;
        }
        br_setf(&r, "rss_mib", 1, rss[m] / 1024);
        br_setf(&r, "vm_mib", 1, vm[m] / 1024);
        br_setf(&r, "tasks_s", 0, rate[m]);
        if (m > 0) {
            /* the bound, in KiB: 1.5x detached (+ 128 B a task with handles kept) */
            double bound = 1.5 * rss[0] + (m == 2 ? 128.0 * (double)n / 1024 : 0);
            br_setf(&r, "rss_x_detached", 2, rss[m] / rss[0]);
            br_setf(&r, "bound_mib", 1, bound / 1024);
            br_set(&r, "status", "%s", rss[m] <= bound ? "ok" : "over");
        } else {
            br_set(&r, "status", "%s", "ok");
        }
        report_add_weft(rep, &r);
    }
    return ok[0] && ok[1] && ok[2] ? 0 : -EIO;
}
