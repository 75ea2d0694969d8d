/*
 * Running a test body under deterministic mode (include/weft.h,
 * "Deterministic mode"; src/sched/det.c): many seeds to find a race, one
 * seed to replay it.
 *
 *   int body(void *arg);      runs as the root vthread; 0: passed, else failed
 *                             (a CHECK that fails inside counts as a failure too)
 *   det_run(body, arg, seed, trace)
 *       runs body once in a forked child whose runtime is deterministic with
 *       `seed` (trace: a WEFT_TRACE file, or NULL); returns DET_PASS,
 *       DET_FAIL (the body said so, or exited non-zero: a deadlock, which
 *       the runtime reports with a dump and exit status 2), or DET_CRASH
 *       (a signal, or DET_TIMEOUT_S seconds of real time).
 *   det_explore(name, body, arg, nseeds)
 *       det_run under seeds 1..nseeds, stopping at the first that fails:
 *       prints "det: NAME fails with seed S" and how to replay it, and
 *       returns S; 0 when every seed passed.
 *
 * Replaying: det_run(body, arg, S, "trace.txt") in the test, or by hand
 * WEFT_DETERMINISTIC=S WEFT_TRACE=trace.txt on a program whose platform
 * thread spawns one root vthread (weft_main).  One child per seed: each run
 * starts from a fresh process (ids, the clock, allocator state), a hang
 * kills only its child, and the caller needs no runtime of its own (it must
 * not have one running: a fork child does not inherit it).
 */
#ifndef WEFT_TEST_DET_H
#define WEFT_TEST_DET_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft.h"

enum { DET_PASS = 0, DET_FAIL = 1, DET_CRASH = 2 };
#ifndef DET_TIMEOUT_S
#define DET_TIMEOUT_S 20
#endif

typedef int (*det_body)(void *arg);

struct det_root_ { det_body body; void *arg; int result; };

static void *det_root_(void *p) {
    struct det_root_ *r = p;
    r->result = r->body(r->arg);
    return NULL;
}

__attribute__((unused)) static int det_run(det_body body, void *arg, uint64_t seed, const char *trace) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return DET_CRASH;
    if (pid == 0) {
        alarm(DET_TIMEOUT_S);
        weft_runtime_opts cfg = {.deterministic = WEFT_DET_ON, .deterministic_seed = seed, .trace = trace};
        if (weft_init(&cfg) != 0) _exit(3);
        struct det_root_ r = {body, arg, 0};
        weft_thread *t;
        weft_thread_opts a = {.name = "det-root"};
        if (weft_spawn(&t, det_root_, &r, &a) != 0 || weft_join(t, NULL) != 0) _exit(3);
        weft_shutdown();
        fflush(NULL);
        _exit(r.result ? DET_FAIL : DET_PASS);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {}
    if (WIFEXITED(st)) return WEXITSTATUS(st) == 0 ? DET_PASS : WEXITSTATUS(st) == 3 ? DET_CRASH : DET_FAIL;
    return DET_CRASH;
}

__attribute__((unused)) static uint64_t det_explore(const char *name, det_body body, void *arg, uint64_t nseeds) {
    for (uint64_t s = 1; s <= nseeds; s++) {
        int r = det_run(body, arg, s, NULL);
        if (r != DET_PASS) {
            printf("det: %s fails with seed %llu (%s); replay: det_run(body, arg, %llu, trace) "
                   "or WEFT_DETERMINISTIC=%llu WEFT_TRACE=FILE\n",
                   name, (unsigned long long)s, r == DET_FAIL ? "failed" : "crashed or hung",
                   (unsigned long long)s, (unsigned long long)s);
            return s;
        }
    }
    return 0;
}

#endif
