/*
 * bench/parallel/work.h -- the two workloads of `weft-bench parallel`, as
 * bodies that every C variant calls the same way: weft (weft_parallel_reduce),
 * the pthreads split (apps/bench/exp_parallel.c) and OpenMP
 * (bench/parallel/omp.c).  work.c is compiled once, into an object library
 * linked into both programs: the same machine code for every C peer.
 *
 * Fairness.  weft's API calls a body per index through a function pointer,
 * so the other C variants do too: they read the body from a volatile
 * pointer (par_work_uniform / par_work_skewed below) and call it per index,
 * with a per-thread accumulator passed by address, exactly as weft's
 * workers do.  No variant can inline, vectorise or hoist the body
 * differently from another.  The Java peer (Par.java) is what Java users
 * write (a lambda the JIT inlines): that is its fair form.
 */
#ifndef WEFT_BENCH_PARALLEL_WORK_H
#define WEFT_BENCH_PARALLEL_WORK_H

#include <stddef.h>
#include <stdint.h>

/* uniform: acc is a double; adds sqrt(i) */
void par_sqrt_body(size_t i, void *acc, void *ctx);
void par_sqrt_combine(void *into, const void *from, void *ctx);

/* skewed: one row of a size x size Mandelbrot of [-2, 1] x [0, 1.5] (the
 * upper half of the set, row 0 on the real axis: the rows near it cost up
 * to ~100x the last ones, so equal static pieces are unequal work -- the
 * whole set, symmetric about the axis, would be balanced for 2 threads);
 * ctx: par_mandel; acc is a uint64_t; adds the row's iteration count */
typedef struct par_mandel {
    int size;
    int max_iter;
} par_mandel;
void par_mandel_body(size_t row, void *acc, void *ctx);
void par_u64_combine(void *into, const void *from, void *ctx);

typedef void (*par_body_fn)(size_t i, void *acc, void *ctx);
/* The bodies as the C variants call them (volatile: no devirtualisation). */
extern par_body_fn volatile par_work_uniform;
extern par_body_fn volatile par_work_skewed;

/* Defaults, as issue 12 has them. */
#define PAR_UNIFORM_N 1000000000L
#define PAR_MANDEL_SIZE 4096
#define PAR_MANDEL_ITER 1000
/* OpenMP's dynamic chunk on the uniform workload: about 50 us of work, as
 * weft's adaptive chunks (dynamic,1 would make OpenMP pay a shared atomic
 * per index); rows of the skewed one go one at a time */
#define PAR_OMP_UNIFORM_CHUNK 16384

#endif
