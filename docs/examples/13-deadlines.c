/* 13-deadlines.c -- deadlines and cancellation: every blocking call
 * honours both, returns -ETIMEDOUT / -ECANCELED, and takes nothing. */
#include <weft.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const int64_t MS = 1000000;

static int wait_forever(void *arg, void **result) {
    (void)arg;
    (void)result;
    return weft_sleep_until(INT64_MAX); /* until cancelled */
}

static void *sleeper(void *arg) {
    (void)arg;
    int first = weft_sleep(3600 * 1000 * MS);
    int second = weft_sleep(1); /* cancellation is sticky */
    printf("cancelled sleeper: %s, then %s\n", strerror(-first), strerror(-second));
    return NULL;
}

static int run(void *arg) {
    (void)arg;
    weft_chan *c;
    int made = weft_chan_create(&c, sizeof(int), 1);
    if (made < 0) return made;

    /* a deadline for every blocking call of this vthread, restored after */
    int64_t prev = weft_deadline_set(weft_now() + 20 * MS);
    int v, r = weft_chan_recv(c, &v); /* nobody sends */
    weft_deadline_set(prev);
    printf("receive with a deadline: %s\n", strerror(-r));
    weft_chan_free(c);

    /* a scope's deadline applies to its tasks; join then says -ETIMEDOUT */
    weft_scope *s;
    if ((r = weft_scope_create(&s, WEFT_SCOPE_ALL, weft_now() + 20 * MS)) < 0) return r;
    weft_task *t = weft_fork(s, wait_forever, NULL);
    r = weft_scope_join(s);
    printf("scope with a deadline: %s\n", strerror(-r));
    weft_scope_close(s); /* the task has ended too */
    if (!t) return -ENOMEM;

    /* weft_cancel interrupts the call a vthread is blocked in */
    weft_thread *th;
    if ((r = weft_spawn(&th, sleeper, NULL, NULL)) < 0) return r;
    weft_sleep(5 * MS);
    weft_cancel(th);
    return weft_join(th, NULL);
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) fprintf(stderr, "deadlines: %s\n", strerror(-r));
    return r == 0 ? 0 : 1;
}
