/*
 * The article's million threads, as a C programmer writes them: plain
 * libc and pthreads, no weft header or library.  pthread_create N threads
 * (default 1,000,000), each nanosleep()s --sleep-ms (1000) and exits; main
 * joins them all.  Run natively it stops where the kernel does
 * (kernel.pid_max, RLIMIT_NPROC, memory): it then joins what it made and
 * says where it stopped.  Under weft-run every thread is a vthread
 * (issue 27).  One line, key=value:
 *   created joined stopped_by wall_s create_s peak_rss_kib rss_per_thread_b
 * (stopped_by: none, EAGAIN, ENOMEM or other -- pthread_create's error
 * where it stopped; rss per thread: the peak over the threads made, the
 * process's start included).
 *
 *   pthread_sleep [-n N] [--sleep-ms MS]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long sleep_ms = 1000;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *body(void *arg) {
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return arg;
}

int main(int argc, char **argv) {
    long n = 1000000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--sleep-ms") && i + 1 < argc) sleep_ms = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: pthread_sleep [-n N] [--sleep-ms MS]\n");
            return 2;
        }
    }
    if (n < 1 || sleep_ms < 0) {
        fprintf(stderr, "pthread_sleep: -n wants 1 or more, --sleep-ms 0 or more\n");
        return 2;
    }
    pthread_t *t = malloc((size_t)n * sizeof *t);
    if (!t) {
        fprintf(stderr, "pthread_sleep: no memory for %ld handles\n", n);
        return 1;
    }
    double t0 = now_s();
    long made = 0;
    int err = 0;
    for (; made < n; made++)
        if ((err = pthread_create(&t[made], NULL, body, NULL)) != 0) break;
    double t1 = now_s();
    long joined = 0;
    for (long i = 0; i < made; i++)
        if (pthread_join(t[i], NULL) == 0) joined++;
    double t2 = now_s();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("created=%ld joined=%ld stopped_by=%s wall_s=%.3f create_s=%.3f peak_rss_kib=%ld rss_per_thread_b=%.0f\n",
           made, joined, err == EAGAIN ? "EAGAIN" : err == ENOMEM ? "ENOMEM" : err ? "other" : "none", t2 - t0, t1 - t0, ru.ru_maxrss,
           made ? (double)ru.ru_maxrss * 1024.0 / (double)made : 0.0);
    free(t);
    return joined == made ? 0 : 1;
}
