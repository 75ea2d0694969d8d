/* 06-mutex-cond.c -- a bounded buffer built from a mutex and two
 * condition variables; waiting parks the vthread, not the carrier. */
#include <weft.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum { CAP = 4, PRODUCERS = 3, CONSUMERS = 2, PER_PRODUCER = 100 };

static struct {
    weft_mutex lock;
    weft_cond not_full, not_empty;
    int buf[CAP], head, count;
    int producers_left; /* consumers stop when 0 and the buffer is empty */
    long consumed, sum;
} q = {WEFT_MUTEX_INIT, WEFT_COND_INIT, WEFT_COND_INIT, {0}, 0, 0, PRODUCERS, 0, 0};

static void *producer(void *arg) {
    (void)arg;
    for (int i = 1; i <= PER_PRODUCER; i++) {
        if (weft_mutex_lock(&q.lock) < 0) return NULL; /* cancelled */
        while (q.count == CAP) weft_cond_wait(&q.not_full, &q.lock); /* re-check: wakeups may be spurious */
        q.buf[(q.head + q.count++) % CAP] = i;
        weft_cond_signal(&q.not_empty);
        weft_mutex_unlock(&q.lock);
    }
    weft_mutex_lock(&q.lock);
    if (--q.producers_left == 0) weft_cond_broadcast(&q.not_empty); /* wake every consumer */
    weft_mutex_unlock(&q.lock);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (;;) {
        if (weft_mutex_lock(&q.lock) < 0) return NULL;
        while (q.count == 0 && q.producers_left > 0) weft_cond_wait(&q.not_empty, &q.lock);
        if (q.count == 0) { /* drained, and no producer left */
            weft_mutex_unlock(&q.lock);
            return NULL;
        }
        int v = q.buf[q.head];
        q.head = (q.head + 1) % CAP;
        q.count--;
        q.consumed++;
        q.sum += v;
        weft_cond_signal(&q.not_full);
        weft_mutex_unlock(&q.lock);
    }
}

static int run(void *arg) {
    (void)arg;
    weft_thread *t[PRODUCERS + CONSUMERS];
    int n = 0, r = 0;
    for (; n < PRODUCERS + CONSUMERS; n++) {
        r = weft_spawn(&t[n], n < PRODUCERS ? producer : consumer, NULL, NULL);
        if (r < 0) {
            fprintf(stderr, "weft_spawn: %s\n", strerror(-r));
            break;
        }
    }
    if (n < PRODUCERS) { /* producers that never started will not count down */
        weft_mutex_lock(&q.lock);
        q.producers_left -= PRODUCERS - n;
        weft_cond_broadcast(&q.not_empty);
        weft_mutex_unlock(&q.lock);
    }
    for (int i = 0; i < n; i++) weft_join(t[i], NULL);
    if (r < 0) return r;
    printf("consumed %ld items, sum %ld\n", q.consumed, q.sum);
    /* destroy says -EBUSY if something still held or waited on them */
    if (weft_mutex_destroy(&q.lock) != 0 || weft_cond_destroy(&q.not_full) != 0 ||
        weft_cond_destroy(&q.not_empty) != 0)
        return -EBUSY;
    return 0;
}

int main(void) {
    return weft_main(run, NULL) == 0 ? 0 : 1;
}
