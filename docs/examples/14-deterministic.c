/* 14-deterministic.c -- deterministic mode: one carrier, seeded choices,
 * virtual time.  The same seed replays the same interleaving. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { WORKERS = 4, STEPS = 3 };

static char order[WORKERS * STEPS + 1]; /* who ran when: "abcab..." */
static int pos;

static void *worker(void *arg) {
    char me = (char)(intptr_t)arg;
    for (int i = 0; i < STEPS; i++) {
        order[pos++] = me; /* one carrier: no data race here */
        weft_yield();      /* a decision point: the seed picks who runs next */
    }
    return NULL;
}

static int body(void *arg) {
    (void)arg;
    weft_thread *t[WORKERS];
    int n = 0, r = 0;
    for (; n < WORKERS; n++)
        if ((r = weft_spawn(&t[n], worker, (void *)(intptr_t)('a' + n), NULL)) < 0) break;
    for (int i = 0; i < n; i++) weft_join(t[i], NULL);
    /* virtual time: an hour's sleep returns at once, and the clock says so */
    int64_t before = weft_now();
    if (r == 0) r = weft_sleep(3600LL * 1000000000);
    if (r == 0 && weft_now() - before < 3600LL * 1000000000) r = -EPROTO;
    return r;
}

/* one deterministic run with `seed`; the interleaving goes to out */
static int run_with_seed(uint64_t seed, char *out) {
    pos = 0;
    memset(order, 0, sizeof order);
    weft_runtime_opts cfg = {.deterministic = WEFT_DET_ON, .deterministic_seed = seed};
    int r = weft_init(&cfg);
    if (r < 0) return r;
    r = weft_main(body, NULL); /* shuts the runtime down: the next run starts afresh */
    memcpy(out, order, sizeof order);
    return r;
}

int main(void) {
    char first[sizeof order], second[sizeof order];
    int r = run_with_seed(42, first);
    if (r == 0) r = run_with_seed(42, second);
    if (r < 0) {
        fprintf(stderr, "deterministic: %s\n", strerror(-r));
        return 1;
    }
    printf("%zu steps ran, an hour of virtual time passed\n", strlen(first));
    printf("same seed, same interleaving: %s\n", strcmp(first, second) == 0 ? "yes" : "no");
    return 0;
}
