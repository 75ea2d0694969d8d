/* 08-executors.c -- executors: submit a task, get a future; a virtual
 * executor, a bounded pool of platform threads, and a scheduled one. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void *cube(void *arg) {
    intptr_t i = (intptr_t)arg;
    return (void *)(i * i * i);
}

static int ticks;
static void *tick(void *arg) {
    (void)arg;
    /* a periodic task runs until it returns non-NULL */
    return ++ticks == 3 ? (void *)"done" : NULL;
}

/* submits n tasks to e, adds up their results; 0 or -errno */
static int sum_cubes(weft_executor *e, int n, long *sum) {
    weft_future *f[64];
    int r = 0;
    *sum = 0;
    for (int i = 0; i < n; i++) {
        f[i] = weft_submit(e, cube, (void *)(intptr_t)i);
        if (!f[i]) { /* NULL only for a bad argument or no memory */
            while (i-- > 0) weft_future_unref(f[i]);
            return -ENOMEM;
        }
    }
    for (int i = 0; i < n; i++) {
        void *v;
        int g = weft_future_get(f[i], &v, 0); /* a refused task's future has failed */
        if (g < 0 && r == 0) r = g;
        if (g == 0) *sum += (intptr_t)v;
        weft_future_unref(f[i]);
    }
    return r;
}

static int run(void *arg) {
    (void)arg;
    long sum;
    int r;

    /* a new vthread per task */
    weft_executor *virt;
    if ((r = weft_executor_create_virtual(&virt)) < 0) return r;
    r = sum_cubes(virt, 64, &sum);
    weft_executor_close(virt); /* waits for every task, frees the executor */
    if (r < 0) return r;
    printf("virtual: sum of cubes %ld\n", sum);

    /* 2 platform threads, a queue of 4; a full queue makes the submitter
     * run the task itself (CALLER_RUNS), so nothing is refused */
    weft_executor *pool;
    if ((r = weft_executor_create_fixed(&pool, 2, 4, WEFT_REJECT_CALLER_RUNS)) < 0) return r;
    r = sum_cubes(pool, 64, &sum);
    if (r == 0) printf("%s: sum of cubes %ld\n", weft_executor_kind(pool), sum); /* "fixed:2" */
    weft_executor_close(pool);
    if (r < 0) return r;

    /* a scheduled executor: once after 10 ms, and every 5 ms until done */
    weft_executor *sched;
    if ((r = weft_executor_create_scheduled(&sched, 1)) < 0) return r;
    weft_future *once = weft_schedule(sched, cube, (void *)(intptr_t)3, 10 * 1000000);
    weft_future *every = weft_schedule_every(sched, tick, NULL, 0, 5 * 1000000, 1);
    void *a = NULL, *b = NULL;
    r = -ENOMEM;
    if (once && every && (r = weft_future_get(once, &a, 0)) == 0) r = weft_future_get(every, &b, 0);
    weft_future_unref(once);
    weft_future_unref(every);
    weft_executor_close(sched);
    if (r < 0) return r;
    printf("scheduled: %ld, then %d ticks and \"%s\"\n", (long)(intptr_t)a, ticks, (const char *)b);
    return 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "executors: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
