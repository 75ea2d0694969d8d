/* 12-groups.c -- a carrier group: a CPU-bound job on carriers of its own,
 * so that the default carriers stay free for latency-sensitive vthreads. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static void add(size_t i, void *acc, void *ctx) {
    (void)ctx;
    *(uint64_t *)acc += i;
}

static void combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(uint64_t *)into += *(const uint64_t *)from;
}

/* the batch job: runs in the group, and so do its parallel workers */
static void *batch(void *arg) {
    uint64_t *sum = arg;
    weft_group_stats gs;
    weft_group_stats_get(weft_group_self(), &gs);
    printf("batch job runs in group \"%s\" (%d carrier)\n", gs.name, gs.carriers);
    return (void *)(intptr_t)weft_parallel_reduce(0, 10000000, 0, sum, sizeof *sum, NULL, add, combine, NULL);
}

static int run(void *arg) {
    (void)arg;
    /* compute: its vthreads compute on purpose; the monitor reports no hog */
    weft_group_opts o = {.compute = 1};
    weft_group *g;
    int r = weft_group_create(&g, "batch", 1, &o);
    if (r < 0) return r; /* -EOPNOTSUPP in deterministic mode: one carrier runs all */
    uint64_t sum = 0;
    weft_thread *t;
    weft_thread_opts attr = {.name = "batch", .group = g};
    r = weft_spawn(&t, batch, &sum, &attr);
    if (r == 0) {
        /* meanwhile the default carriers serve this vthread as usual */
        for (int i = 0; i < 5 && r == 0; i++) r = weft_sleep(1000000);
        void *res;
        int j = weft_join(t, &res);
        if (r == 0) r = j < 0 ? j : (int)(intptr_t)res;
    }
    int c = weft_group_close(g); /* waits for its vthreads, stops its carriers */
    if (r == 0) r = c;
    if (r == 0) printf("sum %llu\n", (unsigned long long)sum);
    return r;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "groups: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
