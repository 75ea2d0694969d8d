/* 07-futures.c -- futures: filled once, by any thread; then, all; errors
 * travel as -errno. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* completes the future it is given after a little work */
static void *answer_later(void *arg) {
    weft_future *f = arg;
    weft_sleep(5 * 1000000);
    weft_future_complete(f, (void *)(intptr_t)21);
    return NULL;
}

static void *twice(void *v, void *ctx) {
    (void)ctx;
    return (void *)(2 * (intptr_t)v);
}

static int run(void *arg) {
    (void)arg;
    int r;
    void *v;

    /* a future filled by another vthread; a dependent made with then */
    weft_future *f;
    if ((r = weft_future_create(&f)) < 0) return r;
    weft_future *g = weft_future_then(f, twice, NULL);
    weft_thread *t;
    if (!g || (r = weft_spawn(&t, answer_later, f, NULL)) < 0) {
        weft_future_unref(g);
        weft_future_unref(f); /* a pending future freed: its dependents fail with ECANCELED */
        return g ? r : -ENOMEM;
    }
    r = weft_future_get(g, &v, 0); /* parks until g is filled */
    weft_join(t, NULL);
    if (r < 0) return r;
    printf("then: %ld\n", (long)(intptr_t)v);
    weft_future_unref(g);
    weft_future_unref(f);

    /* all: completes when every input has, or fails with the first failure */
    weft_future *in[3];
    for (int i = 0; i < 3; i++) {
        if ((r = weft_future_create(&in[i])) < 0) {
            while (i-- > 0) weft_future_unref(in[i]);
            return r;
        }
    }
    weft_future *all = weft_future_all(in, 3);
    if (!all) {
        for (int i = 0; i < 3; i++) weft_future_unref(in[i]);
        return -ENOMEM;
    }
    for (int i = 0; i < 3; i++) weft_future_complete(in[i], (void *)(intptr_t)(i + 1));
    r = weft_future_get(all, NULL, weft_now() + 1000000000LL); /* with a deadline */
    long total = 0;
    for (int i = 0; i < 3 && r == 0; i++) {
        weft_future_get(in[i], &v, 0); /* already filled: returns at once */
        total += (intptr_t)v;
    }
    printf("all: %s, total %ld\n", r == 0 ? "completed" : strerror(-r), total);
    weft_future_unref(all);

    /* a failure: the getter receives -err */
    weft_future *h;
    if ((r = weft_future_create(&h)) < 0) return r;
    weft_future_fail(h, EIO);
    printf("failed future: %s\n", strerror(-weft_future_get(h, NULL, 0)));
    printf("second complete: %s\n", strerror(-weft_future_complete(h, NULL))); /* the first fill wins */
    weft_future_unref(h);
    for (int i = 0; i < 3; i++) weft_future_unref(in[i]);
    return 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "futures: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
