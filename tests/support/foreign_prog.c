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
 *   fstat-all     the descriptors fstat finds open, every number up to the
 *                 limit (CPython's fd_status.py): the program's own only
 *   alarm-read    SIGALRM's handler (no SA_RESTART) comes 100 ms into a
 *                 read of an empty pipe: the read ends with EINTR
 *   alarm-read-restart  the same with SA_RESTART: the read goes on, and
 *                 returns what a thread of its own writes at 400 ms
 *   alarm-sleep   SA_RESTART, 100 ms into a 5 s nanosleep: EINTR all the
 *                 same, with the time left
 *   alarm-poll    SA_RESTART, 100 ms into a 5 s poll of an empty pipe: EINTR
 *   alarm-select  the same with select, and whether its set is as passed
 *   alarm-pause   SA_RESTART, then pause(): -1 EINTR once the handler ran
 *   alarm-sigsuspend  the same with sigsuspend(empty set)
 * each prints what the call returned, its errno's name and how many times
 * the handler ran.
 *   kill-self     200 times kill(getpid(), SIGUSR1): how many times the
 *                 handler had run, on the calling thread (pthread_self), by
 *                 the time kill returned, and with si_code SI_USER
 *
 * Output on stdout; "survived" where the kernel would not have let it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/time.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile sig_atomic_t alarms;
static void on_alarm(int sig) {
    (void)sig;
    alarms++;
}

/* SIGALRM's handler, with or without SA_RESTART, and the alarm in 100 ms */
static void alarm_in_100ms(int restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 100 * 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static const char *err_name(int e) { return e == EINTR ? "EINTR" : e == 0 ? "0" : strerror(e); }

static pthread_t usr1_self;
static volatile sig_atomic_t usr1_runs, usr1_user;
static void on_usr1(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    usr1_self = pthread_self();
    usr1_runs++;
    usr1_user += si->si_code == SI_USER && si->si_pid == getpid();
}

static int late_pipe[2];
static void *write_late(void *later) {
    struct timespec ts = {0, later ? 400 * 1000 * 1000 : 100 * 1000 * 1000};
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
    if (!strcmp(mode, "fstat-all")) {
        struct stat st;
        for (int fd = 0, n = getdtablesize(), first = 1; fd < n; fd++)
            if (fstat(fd, &st) == 0) printf(first ? "%d" : ",%d", fd), first = 0;
        printf("\n");
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
    if (!strcmp(mode, "kill-self")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_usr1;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, NULL);
        int here = 0;
        for (int i = 0; i < 200; i++) {
            int before = usr1_runs;
            kill(getpid(), SIGUSR1);
            here += usr1_runs == before + 1 && pthread_equal(usr1_self, pthread_self());
        }
        printf("handler on the calling thread before kill returned: %d of 200; SI_USER %d\n", here, (int)usr1_user);
        return 0;
    }
    if (!strncmp(mode, "alarm-", 6)) {
        const char *what = mode + 6;
        int restart = strcmp(what, "read") != 0;
        if (pipe(late_pipe) != 0) {
            perror("pipe");
            return 2;
        }
        pthread_t th;
        int writer = !strcmp(what, "read-restart");
        if (writer && pthread_create(&th, NULL, write_late, (void *)1) != 0) return 2;
        alarm_in_100ms(restart);
        long r;
        char extra[64] = "";
        errno = 0;
        if (!strcmp(what, "read") || !strcmp(what, "read-restart")) {
            char b[8];
            r = read(late_pipe[0], b, sizeof b);
        } else if (!strcmp(what, "sleep")) {
            struct timespec ts = {5, 0}, rem = {0, 0};
            r = nanosleep(&ts, &rem);
            if (r < 0 && (rem.tv_sec > 5 || rem.tv_sec < 3)) printf("time left %lld s: wrong\n", (long long)rem.tv_sec);
        } else if (!strcmp(what, "poll")) {
            struct pollfd pf = {.fd = late_pipe[0], .events = POLLIN};
            r = poll(&pf, 1, 5000);
        } else if (!strcmp(what, "select")) {
            fd_set rs;
            FD_ZERO(&rs);
            FD_SET(late_pipe[0], &rs);
            struct timeval tv = {5, 0};
            r = select(late_pipe[0] + 1, &rs, NULL, NULL, &tv);
            /* the kernel leaves the sets as passed when it fails: a
             * program may call again with them (CPython's select does) */
            if (r < 0) snprintf(extra, sizeof extra, ", its set as passed %d", FD_ISSET(late_pipe[0], &rs) ? 1 : 0);
        } else if (!strcmp(what, "pause")) {
            r = pause();
        } else if (!strcmp(what, "sigsuspend")) {
            sigset_t none;
            sigemptyset(&none);
            r = sigsuspend(&none);
        } else {
            fprintf(stderr, "foreign_prog: unknown mode '%s'\n", mode);
            return 2;
        }
        int e = errno;
        if (writer) pthread_join(th, NULL);
        printf("%s returned %ld errno %s, handler ran %d%s\n", what, r, r < 0 ? err_name(e) : "0", (int)alarms, extra);
        return 0;
    }
    fprintf(stderr, "foreign_prog: unknown mode '%s'\n", mode);
    return 2;
}
