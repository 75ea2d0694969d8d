/* 03-sleep-join.c -- sleeping vthreads hold no carrier; a vthread joins
 * others; a detached vthread frees itself. */
#include <weft.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { N = 1000 };
static atomic_int woke;

static void *sleeper(void *arg) {
    int64_t ms = (intptr_t)arg;
    int r = weft_sleep(ms * 1000000); /* parks: the carrier runs other vthreads */
    if (r == 0) atomic_fetch_add(&woke, 1);
    return (void *)(intptr_t)r;
}

static int run(void *arg) {
    (void)arg;
    static weft_thread *t[N];
    int spawned = 0, failed = 0;
    /* 1000 sleepers of 100 ms each: they all sleep at the same time, so
     * this takes about 100 ms, not 100 s, even on one carrier */
    for (; spawned < N; spawned++) {
        int r = weft_spawn(&t[spawned], sleeper, (void *)(intptr_t)100, NULL);
        if (r < 0) {
            fprintf(stderr, "weft_spawn: %s\n", strerror(-r));
            failed = 1;
            break;
        }
    }
    for (int i = 0; i < spawned; i++) {
        void *res;
        int r = weft_join(t[i], &res); /* parks this vthread until t[i] ends */
        if (r < 0 || res != NULL) failed = 1;
    }
    printf("%d sleepers woke\n", atomic_load(&woke));

    /* a detached vthread: nobody joins it; weft_shutdown (inside
     * weft_main) still waits for it, because it is not a daemon */
    weft_thread *d;
    int r = weft_spawn(&d, sleeper, (void *)(intptr_t)10, NULL);
    if (r == 0) r = weft_detach(d);
    if (r < 0) {
        fprintf(stderr, "detached sleeper: %s\n", strerror(-r));
        failed = 1;
    }
    return failed;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "weft_main: %s\n", strerror(-r));
    printf("after shutdown: %d sleepers woke\n", atomic_load(&woke));
    return r == 0 ? 0 : 1;
}
