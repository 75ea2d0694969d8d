/* bench/parallel/work.c -- the workloads' bodies (see work.h). */
#include "work.h"

#include <math.h>

void par_sqrt_body(size_t i, void *acc, void *ctx) {
    (void)ctx;
    *(double *)acc += sqrt((double)i);
}

void par_sqrt_combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(double *)into += *(const double *)from;
}

void par_mandel_body(size_t row, void *acc, void *ctx) {
    const par_mandel *m = ctx;
    double xs = 3.0 / m->size, ys = 1.5 / m->size;
    double ci = (double)row * ys;
    uint64_t total = 0;
    for (int x = 0; x < m->size; x++) {
        double cr = -2.0 + x * xs, zr = 0, zi = 0;
        int k = 0;
        while (k < m->max_iter && zr * zr + zi * zi <= 4.0) {
            double t = zr * zr - zi * zi + cr;
            zi = 2 * zr * zi + ci;
            zr = t;
            k++;
        }
        total += (uint64_t)k;
    }
    *(uint64_t *)acc += total;
}

void par_u64_combine(void *into, const void *from, void *ctx) {
    (void)ctx;
    *(uint64_t *)into += *(const uint64_t *)from;
}

par_body_fn volatile par_work_uniform = par_sqrt_body;
par_body_fn volatile par_work_skewed = par_mandel_body;
