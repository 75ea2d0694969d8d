/*
 * Helpers of the tests that drive other processes (test_httpd, test_console,
 * test_handles, test_stack; the processes themselves start with launch.h):
 * the real clock in milliseconds (a child runs on it even when the test
 * process runs deterministic mode's virtual one), a sleep of the calling
 * OS thread, FAIL, which reports and _exits (a forked
 * test process must not run the parent's atexit handlers or flush its
 * buffers twice), and fork_stderr, which runs a function in a forked child
 * and hands back what it said on stderr and how it ended.
 */
#ifndef WEFT_TEST_PROC_H
#define WEFT_TEST_PROC_H

#include "launch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* (launch.h's clock, under the tests' names) */
static inline int64_t now_ms(void) { return launch_now_ms(); }
static inline void sleep_ms(int ms) { launch_sleep_ms(ms); }

/* The arguments in ap (NULL-ended) into argv from argv[n] on, while n <
 * limit, then the NULL; returns n.  argv has limit + 1 slots at least. */
static inline int argv_add(const char **argv, int n, int limit, va_list ap) {
    const char *a;
    while ((a = va_arg(ap, const char *)) != NULL && n < limit) argv[n++] = a;
    argv[n] = NULL;
    return n;
}

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        fflush(stderr);                                                        \
        _exit(1);                                                              \
    } while (0)

/* Runs fn(arg) in a forked child whose stderr goes into a pipe; the child
 * _exits 0 when fn returns.  Returns what it wrote (at most 64 KiB,
 * NUL-terminated, in a buffer the next call reuses) and puts its wait
 * status in *status. */
static inline char *fork_stderr(void (*fn)(void *), void *arg, int *status) {
    static char buf[65536];
    int pfd[2];
    if (pipe(pfd) < 0) FAIL("pipe: %s", strerror(errno));
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        fn(arg);
        _exit(0);
    }
    close(pfd[1]);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(pfd[0], buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
        if (n == sizeof buf - 1) break;
    }
    buf[n] = 0;
    close(pfd[0]);
    while (waitpid(pid, status, 0) < 0)
        if (errno != EINTR) FAIL("waitpid: %s", strerror(errno));
    return buf;
}

#endif
