/*
 * tests/api/compat.c -- the names of ../shared/DESIGN.md (the API contract
 * tests are written against) that weft 0.1 renamed still compile and work
 * with their old shape: weft.h's compatibility section.  Built with
 * WEFT_ALLOW_DEPRECATED (no deprecation warnings) and -Werror; registered
 * by cmake/lint-api.cmake as api.compat_design_names.  Runs on the main
 * platform thread (every call works there) plus the vthreads its calls
 * start.
 * WEFT-COMPAT-FILE: scripts/api-rename.sh leaves this file alone.
 */
#include "weft.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static void *echo(void *arg) {
    return arg;
}

static int task_seven(void *arg, void **result) {
    (void)arg;
    *result = (void *)(intptr_t)7;
    return 0;
}

int main(void) {
    /* weft_config, weft_attr: the same structs as weft_runtime_opts, weft_thread_opts */
    weft_config cfg = {.carriers = 2};
    weft_runtime_opts *as_new = &cfg;
    EXPECT(weft_init(as_new) == 0);
    weft_attr a = {.name = "compat"};
    weft_thread *t;
    void *res = NULL;
    EXPECT(weft_spawn(&t, echo, (void *)(intptr_t)7, &a) == 0);
    EXPECT(weft_join(t, &res) == 0 && res == (void *)(intptr_t)7);

    /* weft_mutex_trylock */
    weft_mutex m = WEFT_MUTEX_INIT;
    EXPECT(weft_mutex_trylock(&m) == 0);
    EXPECT(weft_mutex_trylock(&m) == -EBUSY);
    EXPECT(weft_mutex_unlock(&m) == 0);

    /* weft_chan_new: the channel, or NULL with errno set (issue 25: it was 0) */
    weft_chan *c = weft_chan_new(sizeof(int), 1);
    int v = 5, w = 0;
    EXPECT(c != NULL);
    EXPECT(weft_chan_send(c, &v) == 0 && weft_chan_recv(c, &w) == 0 && w == 5);
    weft_chan_free(c);
    errno = 0;
    EXPECT(weft_chan_new(SIZE_MAX, 2) == NULL && errno == EINVAL);
    errno = 0;
    EXPECT(weft_chan_new(1, SIZE_MAX) == NULL && errno != 0);

    /* weft_file_open: the file, or NULL with errno set */
    char path[] = "/tmp/weft-compat-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    close(fd);
    weft_file *f = weft_file_open(path, WEFT_WRITE | WEFT_DELETE_ON_CLOSE, 0600, NULL);
    EXPECT(f != NULL);
    EXPECT(weft_file_write(f, "x", 1, 0) == 1 && weft_file_close(f) == 0);
    errno = 0;
    EXPECT(weft_file_open(path, WEFT_READ, 0, NULL) == NULL && errno == ENOENT); /* deleted on close */
    errno = 0;
    EXPECT(weft_file_open(path, 0, 0, NULL) == NULL && errno == EINVAL);

    /* weft_group_new: the group, or NULL with errno set */
    errno = 0;
    EXPECT(weft_group_new("bad", 0) == NULL && errno == EINVAL);
    errno = 0;
    weft_group *g = weft_group_new("compat", 1);
    int groups = g != NULL;
    if (g) {
        EXPECT(weft_group_close(g) == 0);
    } else {
        EXPECT(errno == EOPNOTSUPP && getenv("WEFT_DETERMINISTIC")); /* one carrier runs all */
    }
    /* weft_future_new: the future, or NULL (errno not used) */
    weft_future *fu = weft_future_new();
    EXPECT(fu != NULL);
    EXPECT(weft_future_complete(fu, (void *)(intptr_t)9) == 0);
    EXPECT(weft_future_get(fu, &res, 0) == 0 && res == (void *)(intptr_t)9);
    weft_future_unref(fu);

    /* weft_scope_open: the scope, or NULL with errno set for a bad policy or deadline */
    weft_scope *s = weft_scope_open(WEFT_SCOPE_ALL, 0);
    EXPECT(s != NULL);
    weft_task *tk = weft_fork(s, task_seven, NULL);
    EXPECT(tk != NULL);
    EXPECT(weft_scope_join(s) == 0 && weft_task_result(tk) == (void *)(intptr_t)7);
    weft_scope_close(s);
    errno = 0;
    EXPECT(weft_scope_open((weft_scope_policy)7, 0) == NULL && errno == EINVAL);
    errno = 0;
    EXPECT(weft_scope_open(WEFT_SCOPE_ALL, -1) == NULL && errno == EINVAL);

    /* the executors: each kind runs a task; NULL with errno set for a bad argument */
    weft_executor *ex[4] = {weft_executor_virtual(), weft_executor_fixed(1, 0, WEFT_REJECT_ABORT),
                            weft_executor_cached(0, 0), weft_executor_scheduled(1)};
    for (int i = 0; i < 4; i++) {
        EXPECT(ex[i] != NULL);
        weft_future *r = weft_submit(ex[i], echo, (void *)(intptr_t)i);
        EXPECT(r != NULL && weft_future_get(r, &res, 0) == 0 && res == (void *)(intptr_t)i);
        weft_future_unref(r);
        EXPECT(weft_executor_close(ex[i]) == 0);
    }
    errno = 0;
    EXPECT(weft_executor_fixed(0, 0, WEFT_REJECT_ABORT) == NULL && errno == EINVAL);
    errno = 0;
    EXPECT(weft_executor_cached(-1, 0) == NULL && errno == EINVAL);
    errno = 0;
    EXPECT(weft_executor_scheduled(0) == NULL && errno == EINVAL);
    errno = 0;
    EXPECT(weft_executor_group(NULL) == NULL && errno == EINVAL);
    if (groups) {
        /* weft_executor_group: a virtual executor in group g */
        EXPECT(weft_group_create(&g, "compat-ex", 1, NULL) == 0);
        weft_executor *ge = weft_executor_group(g);
        EXPECT(ge != NULL);
        weft_future *r = weft_submit(ge, echo, (void *)(intptr_t)3);
        EXPECT(r != NULL && weft_future_get(r, &res, 0) == 0 && res == (void *)(intptr_t)3);
        weft_future_unref(r);
        EXPECT(weft_executor_close(ge) == 0);
        EXPECT(weft_group_close(g) == 0);
    }

    weft_shutdown();
    printf("ok: DESIGN.md's renamed names work\n");
    return 0;
}
