/* 04-scope.c -- structured concurrency: tasks forked in a scope, joined by
 * policy; a failure cancels the rest; nothing outlives the scope. */
#include <weft.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int fetch_user(void *arg, void **result) {
    (void)arg;
    int r = weft_sleep(10 * 1000000); /* simulated I/O */
    if (r < 0) return r;              /* -ECANCELED: give up */
    *result = "alice";
    return 0;
}

static int fetch_balance(void *arg, void **result) {
    (void)arg;
    int r = weft_sleep(20 * 1000000);
    if (r < 0) return r;
    *result = (void *)(intptr_t)1250;
    return 0;
}

static int fetch_broken(void *arg, void **result) {
    (void)arg;
    (void)result;
    int r = weft_sleep(20 * 1000000);
    if (r < 0) return r;
    return -EIO; /* a failure: a negative errno */
}

static atomic_int slow_saw_cancel;

static int fetch_slow(void *arg, void **result) {
    (void)arg;
    (void)result;
    int r = weft_sleep(10LL * 1000000000); /* 10 s, unless cancelled */
    if (r == -ECANCELED) atomic_store(&slow_saw_cancel, 1);
    return r;
}

static int run(void *arg) {
    (void)arg;
    /* ALL: wait for every task; join returns the first failure or 0 */
    weft_scope *s;
    int r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0);
    if (r < 0) return r;
    weft_task *user = weft_fork(s, fetch_user, NULL);
    weft_task *bal = weft_fork(s, fetch_balance, NULL);
    if (!user || !bal) {
        weft_scope_close(s); /* cancels and waits for what was forked */
        return -ENOMEM;
    }
    r = weft_scope_join(s);
    if (r == 0)
        printf("ALL: %s has %ld coins\n", (const char *)weft_task_result(user),
               (long)(intptr_t)weft_task_result(bal));
    else
        printf("ALL: failed: %s\n", strerror(-r));
    weft_scope_close(s); /* frees the scope and its tasks */

    /* FAIL_FAST: the first failure cancels the other tasks */
    if ((r = weft_scope_create(&s, WEFT_SCOPE_FAIL_FAST, 0)) < 0) return r;
    if (!weft_fork(s, fetch_broken, NULL) || !weft_fork(s, fetch_slow, NULL)) {
        weft_scope_close(s);
        return -ENOMEM;
    }
    r = weft_scope_join(s); /* returns at the failure, not after 10 s */
    printf("FAIL_FAST: join returned %s\n", strerror(-r));
    weft_scope_close(s); /* waits until fetch_slow has returned */
    printf("FAIL_FAST: the slow task was cancelled: %s\n", atomic_load(&slow_saw_cancel) ? "yes" : "no");
    return 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    if (r < 0) {
        fprintf(stderr, "scope example: %s\n", strerror(-r));
        return 1;
    }
    return 0;
}
