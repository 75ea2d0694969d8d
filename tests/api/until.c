/*
 * tests/api/until.c -- the per-call deadlines of the fd calls
 * (weft_recv_until & co., weft.h "Blocking-style I/O"): the earlier of the
 * call's deadline and the thread's own applies, and the thread's deadline
 * is left as it was.  Registered by cmake/lint-api.cmake as api.io_until.
 */
#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

#define MS 1000000LL

static int run(void *arg) {
    (void)arg;
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    char b[8];

    /* no thread deadline: the call's own ends it, and none is left behind */
    int64_t t0 = weft_now();
    EXPECT(weft_recv_until(sv[0], b, sizeof b, 0, t0 + 20 * MS) == -ETIMEDOUT);
    EXPECT(weft_now() - t0 >= 20 * MS);
    EXPECT(weft_deadline_set(0) == 0);

    /* a later thread deadline: the call's (earlier) one applies; the
     * thread's is restored */
    int64_t outer = weft_now() + 10000 * MS;
    weft_deadline_set(outer);
    t0 = weft_now();
    EXPECT(weft_read_until(sv[0], b, sizeof b, t0 + 20 * MS) == -ETIMEDOUT);
    EXPECT(weft_now() - t0 < 5000 * MS);
    EXPECT(weft_deadline_set(0) == outer);

    /* an earlier thread deadline wins over a later per-call one */
    outer = weft_now() + 20 * MS;
    weft_deadline_set(outer);
    t0 = weft_now();
    EXPECT(weft_recv_until(sv[0], b, sizeof b, 0, t0 + 10000 * MS) == -ETIMEDOUT);
    EXPECT(weft_now() - t0 < 5000 * MS);
    EXPECT(weft_deadline_set(0) == outer);

    /* 0: no per-call deadline; data there: the call returns it */
    EXPECT(weft_send_until(sv[1], "hi", 2, 0, weft_now() + 1000 * MS) == 2);
    EXPECT(weft_recv_until(sv[0], b, sizeof b, 0, 0) == 2);
    EXPECT(weft_deadline_set(0) == 0);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

int main(void) {
    int r = weft_main(run, NULL);
    EXPECT(r == 0);
    printf("ok: per-call deadlines\n");
    return 0;
}
