/*
 * A small test harness in the spirit of libuv's: each TEST() registers
 * itself; `prog NAME...` runs those tests, each in a forked child with a
 * timeout (so a deadlock fails instead of hanging, and a crash fails only
 * that test); `prog` runs them all; `prog --list` lists them; `prog --inline
 * NAME` runs one in-process (for gdb); `prog --help` says all this and the
 * environment variables the tests read.  After the body the child shuts the runtime
 * down, so LeakSanitizer checks that shutdown frees everything.
 */
#ifndef WEFT_TEST_HARNESS_H
#define WEFT_TEST_HARNESS_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZED 1
#else
#define TEST_SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#else
#define TEST_TSAN 0
#endif
/* TSan counts every vthread (a fiber) against its 8128-thread limit. */
#define LIVE_CAP(n) (TEST_TSAN && (n) > 5000 ? 5000 : (n))
/* Stress sizes shrink under sanitizers (10x slower, more memory). */
#define SCALE(n) (TEST_SANITIZED ? ((n) / 10 > 0 ? (n) / 10 : 1) : (n))
/* Vthreads spawned one after another in a stress: TSan makes a fiber state
 * of about 785 KB for each (mmap, a memset that faults in every page,
 * munmap at its end: about 4 ms a fiber on a VM where a first touch costs
 * 21 us), so a TSan build spawns a hundredth -- the races are its concern,
 * the count the release build's (a fiftieth still cost 50-80 s a test, and
 * CI's 45 minutes). */
#define SPAWNS(n) (TEST_TSAN ? ((n) / 100 > 0 ? (n) / 100 : 1) : SCALE(n))

/* A test that cannot run here (a package it needs is missing) ends with
 * SKIP("why"): one line "skipped: why" and this exit status, which the
 * runner reports as "skip" and CTest as Skipped (SKIP_RETURN_CODE). */
#define TEST_SKIP_STATUS 77
#define SKIP(...)                                                                     \
    do {                                                                              \
        printf("skipped: ");                                                          \
        printf(__VA_ARGS__);                                                          \
        printf("\n");                                                                 \
        fflush(NULL);                                                                 \
        _exit(TEST_SKIP_STATUS);                                                      \
    } while (0)

/* A spin-wait's pause, on each architecture (a test that waits for
 * another thread without a switch). */
#if defined(__x86_64__)
#define CPU_RELAX() __asm__ volatile("pause")
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ volatile("yield")
#else
#define CPU_RELAX() __asm__ volatile("" ::: "memory")
#endif

/* Under an emulator (WEFT_TEST_EMULATOR, which cmake/toolchain-*.cmake
 * sets for every test ctest runs under qemu-user: issue 28), a test that
 * meets one of the emulator's own limits -- not weft's -- starts with
 * EMU_SKIP("why"): skipped there with the emulator named, run as ever
 * elsewhere. */
#define EMU_SKIP(why)                                                                 \
    do {                                                                              \
        const char *emu_ = getenv("WEFT_TEST_EMULATOR");                              \
        if (emu_ && *emu_) SKIP("under %s: %s", emu_, why);                           \
    } while (0)

/* Deterministic mode (WEFT_DETERMINISTIC=SEED: one carrier, virtual time,
 * a seeded order; weft.h).  A test that cannot mean anything there -- it
 * needs several carriers running at once, or real time passing (a platform
 * thread that sleeps for real while a vthread waits on the virtual clock,
 * a vthread that computes until a deadline, the monitor) -- starts with
 * DET_SKIP("why"): skipped in that mode, said so in one line; run as ever
 * otherwise.  scripts/test.sh runs the suite once in the mode. */
__attribute__((unused)) static int test_det_mode(void) {
    const char *e = getenv("WEFT_DETERMINISTIC");
    return e && *e;
}
#define DET_SKIP(why)                                                                 \
    do {                                                                              \
        if (test_det_mode()) SKIP("deterministic mode: %s", why);                     \
    } while (0)

/* A program is one file, or several (test_httpd: tests/apps/httpd/): then
 * every file but the one with main defines TEST_PART before this header,
 * and the list of tests and main are that one's. */
typedef struct test_entry { const char *name; void (*fn)(void); } test_entry;
#ifdef TEST_PART
extern test_entry test_list[256];
extern int test_count;
#else
test_entry test_list[256];
int test_count;
#endif

#define TEST(tname)                                                                   \
    static void test_##tname(void);                                                   \
    __attribute__((constructor)) static void test_reg_##tname(void) {                 \
        test_list[test_count].name = #tname;                                          \
        test_list[test_count++].fn = test_##tname;                                    \
    }                                                                                 \
    static void test_##tname(void)

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
            fflush(stderr);                                                           \
            _exit(1);                                                                 \
        }                                                                             \
    } while (0)

#define CHECK_EQ(a, b)                                                                \
    do {                                                                              \
        long long va_ = (long long)(a), vb_ = (long long)(b);                         \
        if (va_ != vb_) {                                                             \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n",      \
                    __FILE__, __LINE__, #a, #b, va_, vb_);                            \
            fflush(stderr);                                                           \
            _exit(1);                                                                 \
        }                                                                             \
    } while (0)

/* A vthread running fn(arg); the test fails if it cannot start. */
__attribute__((unused)) static weft_thread *go(void *(*fn)(void *), void *arg) {
    weft_thread *t;
    CHECK_EQ(weft_spawn(&t, fn, arg, NULL), 0);
    return t;
}

/* Joins t (the test fails if the join does); its result. */
__attribute__((unused)) static void *join(weft_thread *t) {
    void *r = NULL;
    CHECK_EQ(weft_join(t, &r), 0);
    return r;
}

/* What file fd holds, whole, NUL-terminated; closes fd.  The caller frees. */
__attribute__((unused)) static char *slurp_fd(int fd) {
    off_t len = lseek(fd, 0, SEEK_END);
    CHECK(len >= 0);
    char *d = malloc((size_t)len + 1);
    CHECK(d != NULL);
    CHECK(pread(fd, d, (size_t)len, 0) == len);
    d[len] = 0;
    close(fd);
    return d;
}

/* The thread dump (weft_dump, in format) once it shows every one of the
 * strings after format (a NULL ends them); the caller frees it.  A vthread
 * that has started is not yet parked where the test wants it, however long
 * the test sleeps first, on a loaded machine: the dump is taken again until
 * it shows the wait.  One that never shows is the harness's timeout, with
 * the missing string on stderr every few seconds. */
__attribute__((unused, sentinel)) static char *dump_showing(int format, ...) {
    for (long tries = 1;; tries++) {
        char path[] = "/tmp/weft-test-dump-XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        unlink(path);
        CHECK_EQ(weft_dump(fd, format), 0);
        char *d = slurp_fd(fd);
        const char *missing = NULL;
        va_list ap;
        va_start(ap, format);
        for (const char *n; !missing && (n = va_arg(ap, const char *));)
            if (!strstr(d, n)) missing = n;
        va_end(ap);
        if (!missing) return d;
        if (tries % 2000 == 0) fprintf(stderr, "the dump does not show '%s' yet:\n%s", missing, d);
        free(d);
        usleep(1000);
    }
}

/* A TCP socket listening on 127.0.0.1, on a port the kernel picks (*port). */
__attribute__((unused)) static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    CHECK_EQ(listen(fd, 4096), 0);
    socklen_t l = sizeof a;
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &l), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

#ifndef TEST_PART
static int test_skipped;

static int test_timeout_s(void) {
    const char *t = getenv("WEFT_TEST_TIMEOUT");
    int s = t ? atoi(t) : 0;
    return s > 0 ? s : (TEST_SANITIZED ? 240 : 90);
}

static int run_one(const test_entry *t) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        alarm((unsigned)test_timeout_s()); /* SIGALRM kills a hung test */
        t->fn();
        weft_shutdown();
        fflush(NULL);
        exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("ok     %s\n", t->name);
        return 0;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == TEST_SKIP_STATUS) {
        printf("skip   %s\n", t->name);
        test_skipped++;
        return 0;
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        printf("FAIL   %s: timed out after %d s\n", t->name, test_timeout_s());
    else if (WIFSIGNALED(st))
        printf("FAIL   %s: killed by signal %d\n", t->name, WTERMSIG(st));
    else
        printf("FAIL   %s: exit status %d\n", t->name, WEXITSTATUS(st));
    return 1;
}

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s                 run every test, each in a forked child with a timeout\n"
            "       %s NAME...         run these tests (CTest runs one at a time)\n"
            "       %s --list          list the tests\n"
            "       %s --inline NAME   run one test in this process (for gdb; no fork, no timeout)\n"
            "       %s --help          this text\n"
            "Exit status: 0 all passed (some maybe skipped), 77 every test asked for skipped, 1 a test failed, 2 a bad command line or an unknown test.\n"
            "Environment:\n"
            "  WEFT_TEST_TIMEOUT=S          seconds before a test is killed (default %d)\n"
            "  WEFT_IO=uring|epoll|auto     the I/O backend (test_io checks it got the one asked for)\n"
            "  WEFT_CARRIERS=N              carriers, for tests that do not set their own\n"
            "  WEFT_TEST_HOG_MS=MS          test_races: how long a hog computes (default 200)\n"
            "  WEFT_TEST_TRIALS=N           test_races: repetitions inside a test (scripts/stress.sh)\n"
            "  WEFT_TEST_VERBOSE=1          test_races: print how late each victim ran\n"
            "  WEFT_CHAN_BENCH_ROUNDS=N     test_chan bench_pingpong_figures: round trips\n"
            "  WEFT_TEST_DUMP_UNDER_TSAN=1  test_future: check the dump under TSan too\n"
            "  WEFT_TEST_MIGRATIONS=N       test_local: moves per vthread (default 10000; sanitizers less)\n"
            "  WEFT_DETERMINISTIC=SEED      deterministic mode: tests marked DET_SKIP are skipped\n"
            "  and the runtime's own (README): WEFT_STACK_SIZE, WEFT_STACK_GUARD, WEFT_BLOCKING_MAX, ...\n",
            prog, prog, prog, prog, prog, test_timeout_s());
}

static const test_entry *find_test(const char *name) {
    for (int i = 0; i < test_count; i++)
        if (strcmp(test_list[i].name, name) == 0) return &test_list[i];
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *prog = argv[0];
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout, prog);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        if (argc != 2) {
            fprintf(stderr, "%s: --list takes no arguments\n", prog);
            return 2;
        }
        for (int i = 0; i < test_count; i++) printf("%s\n", test_list[i].name);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--inline") == 0) {
        if (argc != 3) {
            fprintf(stderr, "%s: --inline takes one test name\n", prog);
            return 2;
        }
        const test_entry *t = find_test(argv[2]);
        if (!t) {
            fprintf(stderr, "%s: no test named %s (--list lists them)\n", prog, argv[2]);
            return 2;
        }
        t->fn();
        weft_shutdown();
        return 0;
    }
    /* every name must be known before anything runs */
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-') {
            fprintf(stderr, "%s: unknown option %s (--help lists them)\n", prog, argv[i]);
            return 2;
        }
        if (!find_test(argv[i])) {
            fprintf(stderr, "%s: no test named %s (--list lists them)\n", prog, argv[i]);
            return 2;
        }
    }
    int failed = 0, ran = 0;
    if (argc == 1) {
        for (int i = 0; i < test_count; i++, ran++) failed += run_one(&test_list[i]);
    } else {
        for (int i = 1; i < argc; i++, ran++) failed += run_one(find_test(argv[i]));
    }
    if (ran > 1 && test_skipped) printf("%d passed, %d skipped, %d failed\n", ran - failed - test_skipped, test_skipped, failed);
    else if (ran > 1) printf("%d passed, %d failed\n", ran - failed, failed);
    /* every test asked for skipped (CTest runs one at a time): the skip
     * status, so that CTest reports it Skipped, not Passed */
    return failed ? 1 : ran > 0 && test_skipped == ran ? TEST_SKIP_STATUS : 0;
}
#endif /* TEST_PART */

#endif
