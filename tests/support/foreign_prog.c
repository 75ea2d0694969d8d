/*
 * A program weft did not compile -- plain C library and pthreads, no weft
 * header -- for test_run, which runs it natively and under weft-run and
 * expects the kernel's behaviour both times (issue 27: "Unmodified programs
 * see the kernel's behaviour").  One behaviour per mode:
 *
 *   segv-raise    raise(SIGSEGV) with no handler: the process dies of it
 *   segv-kill     kill(getpid(), SIGSEGV): the same, process-directed
 *   segv-ignored  SIGSEGV ignored, then raised: nothing happens, exit 0
 *   fork-return   fork; the child printf()s without a newline (stdout a
 *                 pipe: buffered) and returns 7 from main; the parent waits
 *                 and says how the child ended
 *   quiet         computes for 300 ms without a call, sleeps 100 ms through
 *                 the raw system call, then writes "done" on stderr: the
 *                 only thing there
 *
 * Output on stdout; "survived" where the kernel would not have let it.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "segv-raise")) {
        raise(SIGSEGV);
        puts("survived");
        return 0;
    }
    if (!strcmp(mode, "segv-kill")) {
        kill(getpid(), SIGSEGV);
        struct timespec ts = {0, 200 * 1000 * 1000}; /* (delivery to some thread: let it come) */
        nanosleep(&ts, NULL);
        puts("survived");
        return 0;
    }
    if (!strcmp(mode, "segv-ignored")) {
        signal(SIGSEGV, SIG_IGN);
        raise(SIGSEGV);
        puts("ignored");
        return 0;
    }
    if (!strcmp(mode, "fork-return")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            printf("child buffered;");
            return 7;
        }
        int st;
        if (waitpid(pid, &st, 0) != pid) {
            perror("waitpid");
            return 2;
        }
        if (WIFEXITED(st)) printf("child exited %d\n", WEXITSTATUS(st));
        else if (WIFSIGNALED(st)) printf("child killed by signal %d\n", WTERMSIG(st));
        return 0;
    }
    if (!strcmp(mode, "quiet")) {
        volatile unsigned long x = 0;
        double t0 = now_s();
        while (now_s() - t0 < 0.3) x += 1;
        struct timespec ts = {0, 100 * 1000 * 1000};
        syscall(SYS_nanosleep, &ts, NULL);
        fputs("done\n", stderr);
        return 0;
    }
    fprintf(stderr, "foreign_prog: unknown mode '%s'\n", mode);
    return 2;
}
