/*
 * The context switch alone (src/arch/switch_<arch>.S and ctx.c's
 * weft__ctx_make), built for each architecture weft has a switch for and
 * run natively or under qemu-user by tests/arch/cross.sh (issue 28).
 *
 * What it checks.  K contexts, each on a stack of its own, and a
 * scheduler that switches into each of them in turn, PASSES times.  Around
 * every switch, on both sides, weft_test_regs_call (regs_<arch>.S) fills
 * every callee-saved register -- integer and floating-point -- and the FP
 * rounding mode with values made from a seed (the context, the pass, the
 * side), switches, and once switched back counts the registers that no
 * longer hold them.  Each pass runs on one of two OS threads, taking
 * turns, so every context resumes on another thread than it left: a
 * vthread's migration between carriers.  The switch must keep exactly
 * what the ABI says a callee keeps, and nothing may tie a context to the
 * thread that ran it.
 *
 * Exit 0 and one line with the counts when nothing changed; 1 with the
 * mismatches counted otherwise.  Plain C11 and pthreads, nothing of the
 * rest of weft: the switch is linked in from src/arch.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void *weft__ctx_make(void *hi, void (*entry)(void *, void *), void *arg);
void *weft__ctx_switch(void **save_sp, void *to_sp, void *arg);
long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed);

/* The fill and check of regs_<arch>.S around a switch: a plain C call in
 * between keeps every callee-saved register, as the ABI says. */
struct sw { void **save; void *to; };
static void do_switch(void *p) {
    struct sw *a = p;
    weft__ctx_switch(a->save, a->to, NULL);
}
static long weft_test_regs_switch(void **save, void *to, uint64_t seed) {
    struct sw a = {save, to};
    return weft_test_regs_call(do_switch, &a, seed);
}

/* 10,000 contexts x 1,000 passes (issue 28's acceptance); `switch_regs K`
 * runs K contexts instead */
enum { K_MAX = 10000, PASSES = 1000, STACK = 16 << 10 };
static int K = K_MAX;

typedef struct ctx {
    void *sp;
    int id;
    long bad;
    int done;
} ctx;

static ctx cs[K_MAX];
static void *sched_sp; /* the scheduler, on whichever thread runs the pass */
static long sched_bad;

static uint64_t seed_of(int id, int pass, int side) {
    return ((uint64_t)id << 40) ^ ((uint64_t)pass << 8) ^ ((uint64_t)side * 0x9e3779b97f4a7c15ull);
}

static void entry(void *arg, void *switch_arg) {
    (void)switch_arg;
    ctx *c = arg;
    for (int p = 0; p < PASSES; p++) c->bad += weft_test_regs_switch(&c->sp, sched_sp, seed_of(c->id, p, 1));
    c->done = 1;
    weft__ctx_switch(&c->sp, sched_sp, NULL);
    abort(); /* never resumed */
}

/* One pass: each context once. */
static void pass(int p) {
    for (int i = 0; i < K; i++) sched_bad += weft_test_regs_switch(&sched_sp, cs[i].sp, seed_of(i, p, 0));
}

/* Two threads take turns: pass p runs on thread p % 2. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int turn;

static void *runner(void *arg) {
    int me = (int)(intptr_t)arg;
    for (int p = me; p <= PASSES; p += 2) {
        pthread_mutex_lock(&mu);
        while (turn != p) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        pass(p);
        pthread_mutex_lock(&mu);
        turn = p + 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        K = atoi(argv[1]);
        if (K < 1 || K > K_MAX) {
            fprintf(stderr, "switch_regs: K must be 1..%d\n", K_MAX);
            return 2;
        }
    }
    for (int i = 0; i < K; i++) {
        char *stack = malloc(STACK);
        if (!stack) return 2;
        cs[i].id = i;
        cs[i].sp = weft__ctx_make(stack + STACK, entry, &cs[i]);
    }
    pthread_t t[2];
    for (int k = 0; k < 2; k++)
        if (pthread_create(&t[k], NULL, runner, (void *)(intptr_t)k) != 0) return 2;
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    long bad = sched_bad;
    int done = 0;
    for (int i = 0; i < K; i++) bad += cs[i].bad, done += cs[i].done;
#if defined(__x86_64__)
    const char *arch = "x86_64";
#elif defined(__aarch64__)
    const char *arch = "aarch64";
#elif defined(__riscv)
    const char *arch = "riscv64";
#else
    const char *arch = "?";
#endif
    printf("switch_regs arch=%s contexts=%d passes=%d switches=%ld finished=%d mismatches=%ld\n", arch, K, PASSES,
           2L * K * (PASSES + 1), done, bad);
    return bad == 0 && done == K ? 0 : 1;
}
