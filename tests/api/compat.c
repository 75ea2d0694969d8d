/*
 * tests/api/compat.c -- the names of ../shared/DESIGN.md (the API contract
 * tests are written against) that weft 0.1 renamed still compile and work
 * with their old shape: weft.h's compatibility section.  Built with
 * WEFT_ALLOW_DEPRECATED (no deprecation warnings) and -Werror; registered
 * by cmake/lint-api.cmake as api.compat_design_names.  Runs on the main
 * platform thread (every call works there) plus one vthread.
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

    /* weft_chan_new: the channel, or NULL (errno not used) */
    weft_chan *c = weft_chan_new(sizeof(int), 1);
    int v = 5, w = 0;
    EXPECT(c != NULL);
    EXPECT(weft_chan_send(c, &v) == 0 && weft_chan_recv(c, &w) == 0 && w == 5);
    weft_chan_free(c);
    EXPECT(weft_chan_new(SIZE_MAX, 2) == NULL);

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
    if (g) {
        EXPECT(weft_group_close(g) == 0);
    } else {
        EXPECT(errno == EOPNOTSUPP && getenv("WEFT_DETERMINISTIC")); /* one carrier runs all */
    }
    weft_shutdown();
    printf("ok: DESIGN.md's renamed names work\n");
    return 0;
}
