/* 02-vthreads.c -- spawning and joining vthreads from a platform thread. */
#include <weft.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { N = 1000 };

static void *square(void *arg) {
    intptr_t i = (intptr_t)arg;
    return (void *)(i * i); /* a vthread's result is a void * */
}

int main(void) {
    static weft_thread *t[N];
    weft_thread_opts attr = {.name = "square"}; /* shown by weft_dump */
    int spawned = 0, r = 0;
    for (; spawned < N; spawned++) {
        r = weft_spawn(&t[spawned], square, (void *)(intptr_t)spawned, &attr);
        if (r < 0) {
            fprintf(stderr, "weft_spawn: %s\n", strerror(-r));
            break; /* join the ones that started, then fail */
        }
    }
    long long sum = 0;
    for (int i = 0; i < spawned; i++) {
        void *v;
        int j = weft_join(t[i], &v); /* blocks this platform thread */
        if (j < 0) {
            fprintf(stderr, "weft_join: %s\n", strerror(-j));
            r = j;
            continue;
        }
        sum += (intptr_t)v;
    }
    weft_shutdown();
    if (r < 0) return 1;
    printf("%d vthreads, sum of squares %lld\n", spawned, sum);
    return 0;
}
