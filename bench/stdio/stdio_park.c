/*
 * Issue 26's stdio program: blocking code that weft did not write -- the C
 * library's stdio, popen -- run by many vthreads on few carriers, with
 * what it waits for done by another vthread.
 *
 * Each mode spawns N vthreads (default 1,000) on the runtime's carriers
 * (WEFT_CARRIERS, 2 by default here) and one more that does its part after
 * 300 ms:
 *   read     each reads one line from its own pipe with read(2) (the PLT
 *            hook; the reference for the others' wall time)
 *   fgets    the same through fdopen + fgets: stdio's own read
 *   read-socket  read(2) as in read, on a socket pair (getline's reference)
 *   getline  the same on a socket pair, through getline
 *   write    each write(2)s 256 KiB (four pipes' worth) into its own pipe;
 *            the other vthread drains them all after 300 ms (fwrite's
 *            reference)
 *   fwrite   the same through fdopen + fwrite + fflush
 *   popen    each popen()s "echo line", fgets, pclose (wait4); N/10 of them
 * Without the trap (WEFT_TRAP unset), stdio's calls hold their carriers:
 * fgets with 1,000 vthreads on 2 carriers never ends (the filler gets no
 * carrier) -- hence --timeout, after which the program says so and exits 3.
 *
 * Output, one line per mode:
 *   mode=fgets n=1000 ok=1000 wall_ms=312.4 pinned=0 trapped=2004
 * ok: vthreads whose line (or data) arrived whole; pinned: weft_stats'
 * pinned events during the mode; trapped: system calls the trap caught.
 * Exit status 0 when every mode had ok == n and pinned == 0.
 *
 *   stdio_park [--n N] [--timeout S] [mode ...]     (default: every mode)
 */
#define _GNU_SOURCE
#include <weft.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int n_threads = 1000;
static const char line[] = "the quick brown fox jumps over the lazy vthread\n";
#define CHUNK (256 * 1024)

typedef struct job {
    int rfd, wfd;
    int ok;
} job;

static job *jobs;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void *reader_read(void *arg) {
    job *j = arg;
    char buf[128];
    size_t got = 0;
    while (got < sizeof line - 1) {
        ssize_t r = read(j->rfd, buf + got, sizeof buf - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    j->ok = got == sizeof line - 1 && memcmp(buf, line, got) == 0;
    return NULL;
}

static void *reader_fgets(void *arg) {
    job *j = arg;
    FILE *f = fdopen(j->rfd, "r");
    if (!f) return NULL;
    char buf[128];
    j->ok = fgets(buf, sizeof buf, f) && strcmp(buf, line) == 0;
    fclose(f);
    j->rfd = -1;
    return NULL;
}

static void *reader_getline(void *arg) {
    job *j = arg;
    FILE *f = fdopen(j->rfd, "r");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t n = getline(&buf, &cap, f);
    j->ok = n == (ssize_t)sizeof line - 1 && strcmp(buf, line) == 0;
    free(buf);
    fclose(f);
    j->rfd = -1;
    return NULL;
}

static void *writer_fwrite(void *arg) {
    job *j = arg;
    FILE *f = fdopen(j->wfd, "w");
    if (!f) return NULL;
    static char data[CHUNK];
    memset(data, 'x', sizeof data);
    j->ok = fwrite(data, 1, sizeof data, f) == sizeof data && fflush(f) == 0;
    fclose(f);
    j->wfd = -1;
    return NULL;
}

static void *writer_write(void *arg) {
    job *j = arg;
    static char data[CHUNK];
    memset(data, 'x', sizeof data);
    size_t put = 0;
    while (put < sizeof data) {
        ssize_t w = write(j->wfd, data + put, sizeof data - put);
        if (w <= 0) break;
        put += (size_t)w;
    }
    j->ok = put == sizeof data;
    close(j->wfd);
    j->wfd = -1;
    return NULL;
}

static void *runner_popen(void *arg) {
    job *j = arg;
    FILE *p = popen("echo 'the quick brown fox jumps over the lazy vthread'", "r");
    if (!p) return NULL;
    char buf[128];
    int got = fgets(buf, sizeof buf, p) && strcmp(buf, line) == 0;
    j->ok = pclose(p) == 0 && got;
    return NULL;
}

/* the other vthread: after 300 ms, a line into every pipe (or drain them) */
static void *filler(void *arg) {
    int drain = *(int *)arg;
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int i = 0; i < n_threads; i++) {
        if (!drain) {
            if (write(jobs[i].wfd, line, sizeof line - 1) != (ssize_t)sizeof line - 1) perror("write");
            close(jobs[i].wfd);
            jobs[i].wfd = -1;
        }
    }
    if (drain) { /* every pipe to its end, in turn: each writer blocks until its pipe is read */
        static char buf[65536];
        for (int i = 0; i < n_threads; i++) {
            size_t total = 0;
            ssize_t r;
            while ((r = read(jobs[i].rfd, buf, sizeof buf)) > 0) total += (size_t)r;
            if (total != CHUNK) jobs[i].ok = 0;
        }
    }
    return NULL;
}

static int run_mode(const char *mode) {
    void *(*fn)(void *) = NULL;
    int sock = 0, drain = 0, fill = 1, n = n_threads;
    if (!strcmp(mode, "read")) fn = reader_read;
    else if (!strcmp(mode, "read-socket")) fn = reader_read, sock = 1;
    else if (!strcmp(mode, "fgets")) fn = reader_fgets;
    else if (!strcmp(mode, "getline")) fn = reader_getline, sock = 1;
    else if (!strcmp(mode, "write")) fn = writer_write, drain = 1;
    else if (!strcmp(mode, "fwrite")) fn = writer_fwrite, drain = 1;
    else if (!strcmp(mode, "popen")) fn = runner_popen, fill = 0, n = n_threads / 10 ? n_threads / 10 : 1;
    else {
        fprintf(stderr, "stdio_park: unknown mode '%s' (read, read-socket, fgets, getline, write, fwrite, popen)\n", mode);
        return 2;
    }
    int saved_n = n_threads;
    n_threads = n;
    jobs = calloc((size_t)n, sizeof *jobs);
    weft_thread **ts = calloc((size_t)n, sizeof *ts);
    if (!jobs || !ts) return 2;
    for (int i = 0; i < n; i++) {
        jobs[i].rfd = jobs[i].wfd = -1;
        if (!fill) continue;
        int fds[2];
        if ((sock ? socketpair(AF_UNIX, SOCK_STREAM, 0, fds) : pipe(fds)) != 0) {
            fprintf(stderr, "stdio_park: %s: %s (raise the fd limit: ulimit -n)\n", sock ? "socketpair" : "pipe",
                    strerror(errno));
            return 2;
        }
        jobs[i].rfd = fds[0];
        jobs[i].wfd = fds[1];
    }
    weft_stats s0, s1;
    weft_stats_get(&s0);
    double t0 = now_ms();
    for (int i = 0; i < n; i++)
        if (weft_spawn(&ts[i], fn, &jobs[i], NULL) != 0) return 2;
    weft_thread *f = NULL;
    if (fill && weft_spawn(&f, filler, &drain, NULL) != 0) return 2;
    for (int i = 0; i < n; i++) weft_join(ts[i], NULL);
    if (f) weft_join(f, NULL);
    double wall = now_ms() - t0;
    weft_stats_get(&s1);
    int ok = 0;
    for (int i = 0; i < n; i++) {
        ok += jobs[i].ok;
        if (jobs[i].rfd >= 0) close(jobs[i].rfd);
        if (jobs[i].wfd >= 0) close(jobs[i].wfd);
    }
    unsigned long long pinned = (unsigned long long)(s1.pinned - s0.pinned);
    printf("mode=%s n=%d ok=%d wall_ms=%.1f pinned=%llu trapped=%llu\n", mode, n, ok, wall, pinned,
           (unsigned long long)(s1.trapped - s0.trapped));
    fflush(stdout);
    free(jobs);
    free(ts);
    n_threads = saved_n;
    return ok == n && pinned == 0 ? 0 : 1;
}

typedef struct args {
    int argc;
    char **argv;
} args;

static int body(void *p) {
    args *a = p;
    static const char *all[] = {"read", "fgets", "read-socket", "getline", "write", "fwrite", "popen"};
    int rc = 0;
    if (a->argc == 0)
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) rc |= run_mode(all[i]);
    for (int i = 0; i < a->argc; i++) rc |= run_mode(a->argv[i]);
    return rc;
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "stdio_park: timed out (without the trap, stdio's calls hold the carriers)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

int main(int argc, char **argv) {
    int timeout = 60, i = 1;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout = atoi(argv[++i]);
        else break;
    }
    if (n_threads < 1) {
        fprintf(stderr, "stdio_park: --n takes a positive count\n");
        return 2;
    }
    signal(SIGALRM, on_alarm);
    alarm((unsigned)timeout);
    setenv("WEFT_HOOK", "1", 0);
    setenv("WEFT_MONITOR", "log", 0); /* every pinned event's line: what held a carrier */
    setenv("WEFT_CARRIERS", "2", 0);
    args a = {argc - i, argv + i};
    return weft_main(body, &a);
}
