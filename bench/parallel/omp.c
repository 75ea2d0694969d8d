/*
 * bench/parallel/omp.c -- the OpenMP peer of `weft-bench parallel`:
 *
 *   weft-par-omp uniform|skewed N THREADS REPS [CHUNK [MAX_ITER]]
 *
 * uniform: the sum of sqrt(i) for i in [0, N); skewed: an N x N Mandelbrot
 * (the upper half of the set: work.h)
 * (MAX_ITER iterations at most, default 1000), a row per index.  Both as
 * `#pragma omp parallel for schedule(dynamic, CHUNK) reduction(+:acc)`
 * over the bodies of work.c, called through a function pointer per index
 * as weft calls them (work.h, "Fairness").  CHUNK 0: OpenMP's default
 * (dynamic with chunk 1); default CHUNK: 16384 for uniform, 1 for skewed.
 * One warm-up run (the team's threads start), then REPS measured ones;
 * prints one line
 *   experiment=parallel workload=W peer=openmp status=ok threads=T n=N
 *   reps=R chunk=C wall_s=MEDIAN wall_min_s=MIN check=VALUE
 * Built by CMake with -fopenmp, beside weft-bench (apps/bench/).
 */
#define _GNU_SOURCE
#include "work.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void usage(void) {
    fprintf(stderr, "usage: weft-par-omp uniform|skewed N THREADS REPS [CHUNK [MAX_ITER]]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 7) usage();
    int uniform = strcmp(argv[1], "uniform") == 0;
    if (!uniform && strcmp(argv[1], "skewed") != 0) usage();
    long n = atol(argv[2]);
    int threads = atoi(argv[3]), reps = atoi(argv[4]);
    long chunk = argc > 5 ? atol(argv[5]) : (uniform ? PAR_OMP_UNIFORM_CHUNK : 1);
    int max_iter = argc > 6 ? atoi(argv[6]) : PAR_MANDEL_ITER;
    if (n < 1 || threads < 1 || reps < 1 || chunk < 0 || max_iter < 1 || (!uniform && n > 1 << 20)) usage();
    omp_set_num_threads(threads);
    omp_set_schedule(omp_sched_dynamic, (int)chunk); /* 0: the default chunk */
    par_mandel m = {.size = (int)n, .max_iter = max_iter};
    double *wall = calloc((size_t)reps, sizeof *wall);
    if (!wall) return 1;
    double dcheck = 0;
    unsigned long long ucheck = 0;
    for (int r = -1; r < reps; r++) {
        double t0 = now_s();
        if (uniform) {
            par_body_fn f = par_work_uniform;
            double sum = 0;
#pragma omp parallel for schedule(runtime) reduction(+ : sum)
            for (long i = 0; i < n; i++) f((size_t)i, &sum, NULL);
            dcheck = sum;
        } else {
            par_body_fn f = par_work_skewed;
            uint64_t total = 0;
#pragma omp parallel for schedule(runtime) reduction(+ : total)
            for (long i = 0; i < n; i++) f((size_t)i, &total, &m);
            ucheck = total;
        }
        double dt = now_s() - t0;
        if (r >= 0) wall[r] = dt;
    }
    qsort(wall, (size_t)reps, sizeof *wall, cmp_double);
    char check[64];
    if (uniform) snprintf(check, sizeof check, "%.10e", dcheck);
    else snprintf(check, sizeof check, "%llu", ucheck);
    printf("experiment=parallel workload=%s peer=openmp status=ok threads=%d n=%ld", argv[1], threads, n);
    if (!uniform) printf(" max_iter=%d", max_iter);
    printf(" reps=%d chunk=%ld wall_s=%.4f wall_min_s=%.4f check=%s\n", reps, chunk, wall[reps / 2], wall[0], check);
    free(wall);
    return 0;
}
