/* 11-parallel.c -- CPU-bound loops over the carriers: parallel_for,
 * parallel_reduce (partials combined in index order), and a body's error. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 1000000 };

static void fill(size_t i, void *ctx) {
    uint32_t *a = ctx;
    a[i] = (uint32_t)(i % 1000);
}

static void add(size_t i, void *acc, void *ctx) {
    const uint32_t *a = ctx;
    *(uint64_t *)acc += a[i];
}

static void combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(uint64_t *)into += *(const uint64_t *)from;
}

static void check_positive(size_t i, void *ctx) {
    const uint32_t *a = ctx;
    if (a[i] == 0) weft_parallel_fail(-ERANGE); /* the call returns the first error */
}

static int run(void *arg) {
    (void)arg;
    uint32_t *a = malloc(N * sizeof *a);
    if (!a) return -ENOMEM;
    /* grain 0: the runtime sizes the chunks (about 50 us of work each) */
    int r = weft_parallel_for(0, N, 0, fill, a);
    uint64_t sum = 0; /* the accumulator's value on entry takes part */
    if (r == 0) r = weft_parallel_reduce(0, N, 0, &sum, sizeof sum, NULL, add, combine, a);
    if (r == 0) printf("sum %llu\n", (unsigned long long)sum);
    if (r == 0) {
        int e = weft_parallel_for(0, N, 4096, check_positive, a);
        printf("check_positive: %s\n", strerror(-e));
    }
    free(a);
    return r;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "parallel: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
