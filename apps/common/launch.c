/*
 * The process launcher (launch.h): fork and execv with the options applied
 * in the child, a line reader over the stdout pipe (poll with the time
 * left, the bytes kept in the launch so that the caller can show them), a
 * reaper that polls waitpid with WNOHANG every 5 ms up to a deadline
 * (wait4: the child's rusage comes with it), and the /proc readers.
 */
#define _GNU_SOURCE
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t launch_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void launch_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* fd onto target in the child: LAUNCH_NULL opens /dev/null. */
static int child_fd(int how, int fd, int target) {
    if (how == LAUNCH_NULL) {
        fd = open("/dev/null", target ? O_WRONLY : O_RDONLY);
        if (fd < 0) return -1;
    }
    return dup2(fd, target) < 0 ? -1 : 0;
}

/* The child's side: never returns. */
static void child(char *const argv[], const launch_opts *o, int pipe_w, pid_t parent) {
    if (o->unblock) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
    }
    if ((o->in == LAUNCH_NULL || o->in == LAUNCH_FD) && child_fd(o->in, o->in_fd, 0) < 0) _exit(126);
    if (o->out == LAUNCH_PIPE && dup2(pipe_w, 1) < 0) _exit(126);
    if ((o->out == LAUNCH_NULL || o->out == LAUNCH_FD) && child_fd(o->out, o->out_fd, 1) < 0) _exit(126);
    if (o->err == LAUNCH_TO_OUT && dup2(1, 2) < 0) _exit(126);
    if ((o->err == LAUNCH_NULL || o->err == LAUNCH_FD) && child_fd(o->err, o->err_fd, 2) < 0) _exit(126);
    if (o->drop && geteuid() == 0 && o->uid != 0) {
        if (setgroups(0, NULL) < 0 || setgid(o->gid) < 0 || setuid(o->uid) < 0) {
            dprintf(2, "drop to uid %d: %s\n", (int)o->uid, strerror(errno));
            _exit(126);
        }
    }
    /* after the uid change, which clears it */
    if (o->deathsig) {
        prctl(PR_SET_PDEATHSIG, o->deathsig);
        if (getppid() != parent) _exit(127); /* the parent died before it was set */
    }
    if (o->dir && chdir(o->dir) < 0) _exit(126);
    if (o->nofile == LAUNCH_NOFILE_MAX) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    } else if (o->nofile) {
        struct rlimit rl = {o->nofile, o->nofile};
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    for (const char *const *e = o->env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) {
            unsetenv(*e);
            continue;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        setenv(name, eq + 1, 1);
    }
    if (o->alarm_s) alarm(o->alarm_s);
    execv(argv[0], argv);
    dprintf(2, "%sexec %s: %s\n", o->who ? o->who : "", argv[0], strerror(errno));
    _exit(127);
}

int launch_start(launch *c, char *const argv[], const launch_opts *opts) {
    static const launch_opts none;
    const launch_opts *o = opts ? opts : &none;
    c->pid = 0;
    c->out = -1;
    c->reaped = c->status = 0;
    memset(&c->ru, 0, sizeof c->ru);
    c->len = c->pos = 0;
    c->buf[0] = '\0';
    int p[2] = {-1, -1};
    if (o->out == LAUNCH_PIPE && pipe2(p, O_CLOEXEC) < 0) return -errno;
    pid_t parent = getpid();
    fflush(NULL); /* (our buffers are not the child's to write) */
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        if (p[0] >= 0) close(p[0]), close(p[1]);
        return -e;
    }
    if (pid == 0) child(argv, o, p[1], parent);
    if (p[1] >= 0) close(p[1]);
    c->pid = pid;
    c->out = p[0];
    return 0;
}

/* The first whole line in c->buf from c->pos on containing has (NULL:
 * any), or NULL; the next search starts after it. */
static char *find_line(launch *c, const char *has) {
    char *from = c->buf + c->pos;
    char *l = has ? strstr(from, has) : from;
    if (!l) return NULL;
    char *nl = strchr(l, '\n');
    if (!nl) return NULL;
    *nl = '\0';
    c->pos = (size_t)(nl + 1 - c->buf);
    return l;
}

char *launch_wait_line(launch *c, const char *has, int64_t until_ms) {
    for (;;) {
        char *l = find_line(c, has);
        if (l) return l;
        if (c->len >= sizeof c->buf - 1) {
            errno = ENOBUFS;
            return NULL;
        }
        int64_t left = until_ms - launch_now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return NULL;
        }
        struct pollfd pf = {.fd = c->out, .events = POLLIN};
        if (poll(&pf, 1, left > 100 ? 100 : (int)left) <= 0) continue;
        ssize_t k = read(c->out, c->buf + c->len, sizeof c->buf - 1 - c->len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            errno = EPIPE;
            return NULL;
        }
        c->len += (size_t)k;
        c->buf[c->len] = '\0';
    }
}

int launch_listen_port(const char *line) {
    if (strncmp(line, "listening on ", 13) != 0) return -1;
    const char *colon = strrchr(line, ':');
    if (!colon) return -1;
    int port = atoi(colon + 1);
    return port > 0 && port <= 65535 ? port : -1;
}

int launch_read_all(launch *c, int64_t until_ms, char **text, size_t *len) {
    size_t cap = 8192;
    *len = 0;
    *text = malloc(cap);
    if (!*text) return -ENOMEM;
    (*text)[0] = '\0';
    for (;;) {
        int64_t left = until_ms - launch_now_ms();
        if (left <= 0) return -ETIMEDOUT;
        struct pollfd pf = {.fd = c->out, .events = POLLIN};
        int pr = poll(&pf, 1, left > 1000 ? 1000 : (int)left + 1);
        if (pr < 0 && errno != EINTR) return 0;
        if (pr <= 0) continue;
        if (*len + 4096 + 1 > cap) {
            char *t = realloc(*text, cap * 2);
            if (!t) return -ENOMEM;
            *text = t;
            cap *= 2;
        }
        ssize_t r = read(c->out, *text + *len, cap - *len - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        *len += (size_t)r;
        (*text)[*len] = '\0';
    }
}

int launch_reap(launch *c, int ms) {
    if (c->reaped) return 1;
    int64_t until = launch_now_ms() + ms;
    for (;;) {
        pid_t r = wait4(c->pid, &c->status, ms < 0 ? 0 : WNOHANG, &c->ru);
        if (r == c->pid) {
            c->reaped = 1;
            return 1;
        }
        if (r < 0 && errno != EINTR) return -errno;
        if (r == 0) {
            if (launch_now_ms() >= until) return 0;
            launch_sleep_ms(5);
        }
    }
}

int launch_stop(launch *c, int sig, int ms) {
    if (c->reaped) return 1;
    kill(c->pid, sig);
    if (launch_reap(c, ms) == 1) return 1;
    kill(c->pid, SIGKILL);
    launch_reap(c, -1);
    return 0;
}

void launch_close(launch *c) {
    if (c->out >= 0) close(c->out);
    c->out = -1;
}

long long launch_proc_ticks(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    /* after "comm)", which may hold anything: state ppid pgrp session tty
     * tpgid flags minflt cminflt majflt cmajflt utime stime */
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    return (long long)(ut + st);
}

long launch_proc_status(pid_t pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    size_t fl = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, fl) && line[fl] == ':') v = strtol(line + fl + 1, NULL, 10);
    fclose(f);
    return v;
}
