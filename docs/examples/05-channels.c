/* 05-channels.c -- channels and select: a producer, four workers and a
 * collector, Go style; close says "no more"; select waits on several. */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum { WORKERS = 4, ITEMS = 100 };

typedef struct pipeline {
    weft_chan *jobs;        /* int: numbers to square, buffered (8) */
    weft_chan *even, *odd;  /* long: squares, rendezvous (capacity 0) */
} pipeline;

static void *produce(void *arg) {
    pipeline *p = arg;
    for (int i = 1; i <= ITEMS; i++)
        if (weft_chan_send(p->jobs, &i) < 0) break; /* waits while the buffer is full */
    weft_chan_close(p->jobs); /* receivers drain what is buffered, then get -EPIPE */
    return NULL;
}

static void *work(void *arg) {
    pipeline *p = arg;
    int n;
    while (weft_chan_recv(p->jobs, &n) == 0) {
        long sq = (long)n * n;
        if (weft_chan_send(n % 2 ? p->odd : p->even, &sq) < 0) break;
    }
    return NULL;
}

static int run(void *arg) {
    (void)arg;
    pipeline p = {0};
    weft_thread *prod = NULL, *w[WORKERS];
    int r, nw = 0;
    if ((r = weft_chan_create(&p.jobs, sizeof(int), 8)) < 0 || (r = weft_chan_create(&p.even, sizeof(long), 0)) < 0 ||
        (r = weft_chan_create(&p.odd, sizeof(long), 0)) < 0)
        goto out;
    if ((r = weft_spawn(&prod, produce, &p, NULL)) < 0) goto out;
    for (; nw < WORKERS; nw++)
        if ((r = weft_spawn(&w[nw], work, &p, NULL)) < 0) goto out;

    long sum[2] = {0, 0};
    int got[2] = {0, 0};
    while (got[0] + got[1] < ITEMS) {
        long sq;
        /* whichever channel has a sender first; at random if both do */
        weft_case cs[] = {WEFT_RECV(p.even, &sq), WEFT_RECV(p.odd, &sq)};
        int i = weft_select(cs, 2, weft_now() + 5LL * 1000000000);
        if (i < 0) { /* -ETIMEDOUT or -ECANCELED */
            r = i;
            goto out;
        }
        sum[i] += sq;
        got[i]++;
    }
    printf("%d even squares, sum %ld\n", got[0], sum[0]);
    printf("%d odd squares, sum %ld\n", got[1], sum[1]);

    /* a select with no case waits for its deadline (Go's empty select) */
    r = weft_select(NULL, 0, weft_now() + 1000000);
    printf("empty select: %s\n", strerror(-r));
    r = 0;
out:
    if (r < 0) fprintf(stderr, "channels: %s\n", strerror(-r));
    /* closing wakes anyone still blocked on a channel with -EPIPE */
    if (p.jobs) weft_chan_close(p.jobs);
    if (p.even) weft_chan_close(p.even);
    if (p.odd) weft_chan_close(p.odd);
    if (prod) weft_join(prod, NULL);
    for (int i = 0; i < nw; i++) weft_join(w[i], NULL);
    weft_chan_free(p.jobs);
    weft_chan_free(p.even);
    weft_chan_free(p.odd);
    return r;
}

int main(void) {
    return weft_main(run, NULL) == 0 ? 0 : 1;
}
