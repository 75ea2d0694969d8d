/*
 * The one process launcher of weft's tests and weft-bench: start a program
 * with its arguments and environment, capture its output, wait for a line
 * it prints (with a deadline), stop it with a signal and reap it, and read
 * its /proc/PID files.  The tests start weft-httpd, weft-top and the
 * backends' servers with it; weft-bench its servers, its database, ab,
 * weft-load and the parallel peers.
 *
 * Who owns what: a launch is its caller's, on the caller's thread; the
 * child is the caller's child until launch_reap (or launch_stop) has
 * reaped it.  Nothing here is thread-safe or async-signal-safe, and
 * nothing here exits: errors come back as -errno (or NULL with errno), and
 * the caller decides whether they fail a test or end a benchmark.
 *
 * Between fork and exec the child does, in this order and only what its
 * options ask: an empty signal mask, stdin/stdout/stderr, the uid drop,
 * PR_SET_PDEATHSIG (after the uid drop, which clears it) with a check that
 * the parent is still there, chdir, RLIMIT_NOFILE, the environment, an
 * alarm; then execv.  A failed exec writes "WHO exec PATH: REASON" on the
 * child's stderr and exits 127 (126: a step before it failed).
 *
 * Time is CLOCK_MONOTONIC in milliseconds (launch_now_ms), so a test
 * process on deterministic mode's virtual clock still waits in real time.
 */
#ifndef WEFT_COMMON_LAUNCH_H
#define WEFT_COMMON_LAUNCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* What becomes of the child's stdin, stdout or stderr. */
enum {
    LAUNCH_INHERIT, /* ours */
    LAUNCH_PIPE,    /* stdout only: a pipe whose read end is launch.out */
    LAUNCH_NULL,    /* /dev/null */
    LAUNCH_FD,      /* the descriptor in in_fd / out_fd / err_fd */
    LAUNCH_TO_OUT,  /* stderr only: where stdout goes */
};

/* RLIMIT_NOFILE: raise the soft limit to the hard one. */
#define LAUNCH_NOFILE_MAX ((rlim_t)-1)

typedef struct launch_opts {
    int in, out, err;          /* LAUNCH_*; 0: inherit */
    int in_fd, out_fd, err_fd; /* with LAUNCH_FD */
    const char *const *env;    /* NULL-ended: "NAME=VALUE" sets, "NAME" unsets */
    int deathsig;              /* PR_SET_PDEATHSIG; 0: none */
    int unblock;               /* start with an empty signal mask */
    rlim_t nofile;             /* RLIMIT_NOFILE, soft and hard (LAUNCH_NOFILE_MAX); 0: ours */
    const char *dir;           /* chdir there; NULL: ours */
    int drop;                  /* when we are root and uid is not: become uid, gid */
    uid_t uid;
    gid_t gid;
    unsigned alarm_s;          /* an alarm the program inherits (it survives exec); 0: none */
    const char *who;           /* the exec failure's prefix ("weft-bench: "); NULL: none */
} launch_opts;

typedef struct launch {
    pid_t pid;
    int out;            /* stdout's read end with LAUNCH_PIPE, else -1 */
    int reaped, status; /* reaped: status is its wait status */
    struct rusage ru;   /* its resource use, once reaped */
    size_t len;         /* bytes in buf (launch_wait_line) */
    size_t pos;         /* where launch_wait_line looks next: past the last line it returned */
    char buf[8192];
} launch;

int64_t launch_now_ms(void);
/* Sleeps ms on the real clock (EINTR resumed). */
void launch_sleep_ms(int ms);

/* Starts argv[0] (a path) with argv; opts NULL: every default.  0, or
 * -errno (nothing started). */
int launch_start(launch *c, char *const argv[], const launch_opts *opts);

/* Reads c's stdout into c->buf until it holds a whole line containing has
 * (NULL: the first whole line), past the lines earlier calls returned.
 * Returns that line, NUL-terminated in c->buf; NULL with errno ETIMEDOUT (the deadline, in launch_now_ms's
 * time), EPIPE (end of file: the program closed its stdout or ended) or
 * ENOBUFS (c->buf full).  c->buf holds, NUL-terminated, what came. */
char *launch_wait_line(launch *c, const char *has, int64_t until_ms);

/* The port of a "listening on HOST:PORT" line (line starts there), or -1. */
int launch_listen_port(const char *line);

/* Reads c's stdout to its end or until the deadline into *text (malloc'd,
 * NUL-terminated, *len bytes; the caller frees).  0; -ETIMEDOUT at the
 * deadline; -ENOMEM (*text holds what fit).  The pipe is left open. */
int launch_read_all(launch *c, int64_t until_ms, char **text, size_t *len);

/* Reaps c, waiting up to ms (< 0: for as long as it takes).  1: reaped
 * (c->status, c->ru); 0: still running; -errno. */
int launch_reap(launch *c, int ms);

/* Sends sig, then reaps within ms; past that SIGKILL and reap.  1: it
 * ended within ms; 0: it had to be killed. */
int launch_stop(launch *c, int sig, int ms);

/* Closes the stdout pipe (if any). */
void launch_close(launch *c);

/* utime + stime of a process (all its threads, exited ones too), in clock
 * ticks, from /proc/PID/stat; -1 if it cannot be read. */
long long launch_proc_ticks(pid_t pid);

/* The number after "FIELD:" in /proc/PID/status (VmRSS, VmHWM: KiB), or -1. */
long launch_proc_status(pid_t pid, const char *field);

#endif
