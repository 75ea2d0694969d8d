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
 *   close-range   close_range(3, ~0U, 0), then sleeps, and reads a pipe that
 *                 a thread of its own writes to 100 ms later: "ok" if all of
 *                 it worked
 *   close-loop    the same after close() on every number from 3 to the
 *                 descriptor limit
 *
 * Output on stdout; "survived" where the kernel would not have let it.
 */
#define _GNU_SOURCE
#include <pthread.h>
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

static int late_pipe[2];
static void *write_late(void *unused) {
    (void)unused;
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    if (write(late_pipe[1], "abc", 3) != 3) perror("write");
    return NULL;
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
    if (!strcmp(mode, "close-range") || !strcmp(mode, "close-loop")) {
        if (mode[6] == 'r') {
            if (close_range(3, ~0U, 0) != 0) {
                perror("close_range");
                return 2;
            }
        } else {
            for (int fd = 3, n = getdtablesize(); fd < n; fd++) close(fd);
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        char b[4] = {0};
        pthread_t th;
        if (pipe(late_pipe) != 0 || pthread_create(&th, NULL, write_late, NULL) != 0) {
            perror("pipe");
            return 2;
        }
        ssize_t n = read(late_pipe[0], b, 3); /* empty for 100 ms: it waits */
        pthread_join(th, NULL);
        nanosleep(&ts, NULL);
        printf("%s\n", n == 3 && strcmp(b, "abc") == 0 ? "ok" : "wrong");
        return 0;
    }
    fprintf(stderr, "foreign_prog: unknown mode '%s'\n", mode);
    return 2;
}
