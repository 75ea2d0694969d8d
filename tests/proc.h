/*
 * Helpers of the tests that drive other processes (test_httpd, test_console):
 * the real clock in milliseconds (a child runs on it even when the test
 * process runs deterministic mode's virtual one), a sleep of the calling
 * OS thread, and FAIL, which reports and _exits (a forked test process must
 * not run the parent's atexit handlers or flush its buffers twice).
 */
#ifndef WEFT_TEST_PROC_H
#define WEFT_TEST_PROC_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static inline int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

#define FAIL(...)                                                              \
    do {                                                                       \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
        fprintf(stderr, __VA_ARGS__);                                          \
        fprintf(stderr, "\n");                                                 \
        fflush(stderr);                                                        \
        _exit(1);                                                              \
    } while (0)

#endif
