/*
 * weft-httpd --workers N: a supervisor process and N worker processes that
 * share the port.
 *
 * Who is who.  The supervisor is the process the user started.  It parses
 * the options and checks the docroot as a single server would, opens the
 * listening sockets, then never starts the weft runtime: it is one plain
 * thread that forks, execs, waits and forwards signals.  Each worker is
 * this same binary exec'd again (so a SIGHUP runs the binary now at that
 * path: an upgraded package takes effect) with the user's options and
 * `--worker LISTEN_FD,READY_FD,SLOT[,TLS_FD]` (TLS_FD: the slot's --tls-port socket), and is a whole single server with
 * its own runtime and carriers (--carriers 1 each unless given).
 *
 * The sockets.  One listening socket per worker slot, every one bound to
 * the same address with SO_REUSEPORT, so the kernel spreads new
 * connections over the slots by their addresses' hash.  The supervisor
 * opens them all and holds them for its whole life; a worker inherits its
 * slot's socket.  That is what makes restarts lose nothing: a connection
 * the kernel queued on a slot's socket stays queued while that slot's
 * worker is replaced or restarted -- the socket is never closed, so the
 * kernel never resets what is in its accept queue (closing one
 * SO_REUSEPORT listener does, unless net.ipv4.tcp_migrate_req is set).
 * During a replacement the old and the new worker accept from the same
 * socket at once, until the old one drains.  (Port 0: the first socket's
 * port, then the others bind that one.)
 *
 * Readiness.  Each worker gets the write end of a pipe (READY_FD) and
 * writes one byte once its runtime runs and it takes connections; EOF
 * first means it failed (it said why on stderr).  The supervisor prints
 * "listening on HOST:PORT" once every first worker is ready.  A first
 * worker that fails to start fails the whole start (exit 1): that is a
 * configuration error, not something a restart would fix.
 *
 * Deaths and restarts.  A worker that exits while it is neither being
 * replaced nor stopped is restarted on its slot at once, and the
 * supervisor says so on stderr (always, --quiet or not).  One that died
 * within a second of its start is restarted after a pause that doubles
 * (0.1 s to 5 s) while it keeps doing so, so a worker that cannot run does
 * not spin the machine; its slot's connections wait in the queue.  The
 * connections a dead worker had accepted are lost with it; those queued
 * are not.
 *
 * SIGHUP replaces the workers one slot at a time: a new worker starts on
 * the slot's socket; once it is ready the old one gets SIGTERM (its
 * graceful drain: it stops accepting, answers what it received, closes
 * idle connections) and, once it is gone, the next slot follows.  A new
 * worker that fails to start leaves the old one serving and ends the
 * round, saying so.  A SIGHUP during a round starts another round after
 * it.
 *
 * SIGTERM and SIGINT are forwarded as SIGTERM to every worker (a second
 * one again: the workers' "stop at once") -- with --drain-notice S, S
 * seconds after SIGUSR2, which makes the workers answer /healthz 503 while
 * they go on serving (a worker leaves the notice to the supervisor: a
 * replaced worker drains at once, its replacement answering /healthz
 * 200 on the same socket); the supervisor exits when all
 * are gone: 0 if every worker exited 0, 3 if one cut connections (its
 * status 3), 1 otherwise.  SIGQUIT is forwarded (each worker writes its
 * thread dump).  Workers run in a process group of their own, so a
 * terminal's Ctrl-C reaches the supervisor alone and each worker sees one
 * signal, not two; PR_SET_PDEATHSIG gives them SIGTERM if the supervisor
 * dies.
 *
 * Threads: one (the supervisor's), waiting in poll on a signalfd and the
 * starting workers' pipes.  Nothing here is shared.
 */

#define _GNU_SOURCE
#include "httpd_int.h"

#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>

#define MAX_WORKERS 256
#define START_TIMEOUT_MS 30000

typedef struct wslot {
    int lfd;                 /* its listening socket, the supervisor's for its life */
    int tfd;                 /* and --tls-port's, -1 none */
    pid_t cur;               /* the worker serving it (or starting: cur_ready 0), 0 none */
    int cur_ready;
    pid_t next;              /* a replacement starting (SIGHUP), 0 none */
    pid_t old;               /* the replaced one, draining, 0 none */
    int rfd;                 /* the ready pipe of whichever is starting (cur or next), -1 none */
    int64_t started_ms;      /* when cur (or next) started */
    int quick;               /* deaths within a second of the start, in a row */
    int64_t restart_ms;      /* when to start cur again (after a quick death), 0 none */
} wslot;

static struct {
    wslot s[MAX_WORKERS];
    int n;
    char exe[PATH_MAX];
    char **argv; /* the user's arguments (argv[1..]) */
    int argc;
    int stopping, failed_start;
    int roll_slot;   /* the slot a SIGHUP round is at, -1 none */
    int roll_again;  /* a SIGHUP came during the round */
    int64_t notice_end_ms; /* --drain-notice: when the stop's notice ends (SIGTERM to all), 0 none */
    int worst;       /* the exit status so far: 0, 3, or 1 */
    int keyfd;       /* HTTPS: the workers' shared ticket key (tls.c), -1 none */
} W = {.roll_slot = -1, .keyfd = -1};

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void how_it_ended(int st, char *out, size_t n) {
    if (WIFEXITED(st)) snprintf(out, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(out, n, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else snprintf(out, n, "ended (status 0x%x)", st);
}

/* Starts a worker on slot i; its pid, and *rfd the ready pipe's read end.
 * -1 when it cannot even be forked (said why). */
static pid_t spawn_worker(int i, int *rfd) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        fprintf(stderr, "weft-httpd: worker %d: pipe: %s\n", i, strerror(errno));
        return -1;
    }
    char spec[64];
    if (W.keyfd >= 0) snprintf(spec, sizeof spec, "%d,%d,%d,%d,%d", W.s[i].lfd, p[1], i, W.s[i].tfd, W.keyfd);
    else snprintf(spec, sizeof spec, "%d,%d,%d", W.s[i].lfd, p[1], i);
    /* argv: exe, the user's arguments, --worker spec */
    char **av = calloc((size_t)W.argc + 4, sizeof *av);
    if (!av) {
        close(p[0]);
        close(p[1]);
        fprintf(stderr, "weft-httpd: worker %d: out of memory\n", i);
        return -1;
    }
    int k = 0;
    av[k++] = W.exe;
    for (int j = 0; j < W.argc; j++) av[k++] = W.argv[j];
    av[k++] = "--worker";
    av[k++] = spec;
    av[k] = NULL;
    pid_t me = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* the child: its own process group, SIGTERM if the supervisor goes,
         * the signal mask and dispositions a fresh process has, and the two
         * descriptors kept across the exec */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != me) _exit(1); /* the supervisor is already gone (reparented) */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        fcntl(W.s[i].lfd, F_SETFD, 0);
        if (W.s[i].tfd >= 0) fcntl(W.s[i].tfd, F_SETFD, 0);
        if (W.keyfd >= 0) fcntl(W.keyfd, F_SETFD, 0);
        fcntl(p[1], F_SETFD, 0);
        execv(W.exe, av);
        fprintf(stderr, "weft-httpd: worker %d: cannot run %s: %s\n", i, W.exe, strerror(errno));
        _exit(1);
    }
    int e = errno;
    free(av);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        fprintf(stderr, "weft-httpd: worker %d: fork: %s\n", i, strerror(e));
        return -1;
    }
    *rfd = p[0];
    W.s[i].started_ms = mono_ms();
    return pid;
}

static void start_cur(int i) {
    wslot *s = &W.s[i];
    s->restart_ms = 0;
    s->cur_ready = 0;
    s->cur = spawn_worker(i, &s->rfd);
    if (s->cur < 0) { /* fork failed: try again after a pause */
        s->cur = 0;
        s->rfd = -1;
        s->restart_ms = mono_ms() + 1000;
    }
}

static void close_rfd(wslot *s) {
    if (s->rfd >= 0) close(s->rfd);
    s->rfd = -1;
}

static void signal_all(int sig) {
    for (int i = 0; i < W.n; i++) {
        if (W.s[i].cur > 0) kill(W.s[i].cur, sig);
        if (W.s[i].next > 0) kill(W.s[i].next, sig);
        if (W.s[i].old > 0) kill(W.s[i].old, sig);
    }
}

static int alive(void) {
    int n = 0;
    for (int i = 0; i < W.n; i++) n += (W.s[i].cur > 0) + (W.s[i].next > 0) + (W.s[i].old > 0);
    return n;
}

/* The SIGHUP round: start the replacement of the slot it is at. */
static void roll_step(void) {
    while (W.roll_slot >= 0 && W.roll_slot < W.n) {
        wslot *s = &W.s[W.roll_slot];
        if (s->next || s->old) return; /* under way */
        if (!s->cur || !s->cur_ready) { /* nothing serving here to replace: (re)start is under way */
            W.roll_slot++;
            continue;
        }
        s->next = spawn_worker(W.roll_slot, &s->rfd);
        if (s->next < 0) {
            s->next = 0;
            fprintf(stderr, "weft-httpd: SIGHUP: worker %d not replaced; the round ends\n", W.roll_slot);
            W.roll_slot = -1;
        }
        return;
    }
    if (W.roll_slot >= W.n) {
        if (!O.quiet) fprintf(stderr, "weft-httpd: SIGHUP: %d worker(s) replaced\n", W.n);
        W.roll_slot = -1;
        if (W.roll_again) {
            W.roll_again = 0;
            W.roll_slot = 0;
            roll_step();
        }
    }
}

/* A ready byte (or EOF) on slot i's pipe. */
static void on_ready(int i) {
    wslot *s = &W.s[i];
    char b;
    ssize_t r;
    do r = read(s->rfd, &b, 1);
    while (r < 0 && errno == EINTR);
    close_rfd(s);
    if (r != 1) return; /* failed: its exit tells the rest */
    if (s->next) { /* a replacement is up: the old one drains */
        s->old = s->cur;
        s->cur = s->next;
        s->cur_ready = 1;
        s->next = 0;
        s->started_ms = mono_ms();
        if (!O.quiet) fprintf(stderr, "weft-httpd: worker %d: pid %d replaces pid %d\n", i, (int)s->cur, (int)s->old);
        if (s->old) kill(s->old, SIGTERM);
        else if (W.roll_slot == i) W.roll_slot++; /* (the old one had died meanwhile) */
    } else {
        s->cur_ready = 1;
    }
}

/* Reaps what exited and decides what follows. */
static void reap(void) {
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0) return;
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        char how[96];
        how_it_ended(st, how, sizeof how);
        for (int i = 0; i < W.n; i++) {
            wslot *s = &W.s[i];
            if (pid == s->old) { /* replaced and drained */
                s->old = 0;
                if (code == EXIT_CUT && !O.quiet)
                    fprintf(stderr, "weft-httpd: worker %d (pid %d), replaced, cut connections at its drain\n", i, (int)pid);
                if (W.roll_slot == i) W.roll_slot++;
                break;
            }
            if (pid == s->next) { /* the replacement failed before it was ready */
                s->next = 0;
                close_rfd(s);
                fprintf(stderr, "weft-httpd: worker %d: the new one (pid %d) %s before it was ready; the old one goes on serving\n",
                        i, (int)pid, how);
                W.roll_slot = -1;
                W.roll_again = 0;
                break;
            }
            if (pid != s->cur) continue;
            int was_ready = s->cur_ready;
            s->cur = 0;
            s->cur_ready = 0;
            if (s->next && !W.stopping) { /* its replacement is starting: it takes over */
                fprintf(stderr, "weft-httpd: worker %d (pid %d) %s; its replacement takes over\n", i, (int)pid, how);
                break;
            }
            close_rfd(s);
            if (W.stopping) {
                if (code == EXIT_CUT) W.worst = W.worst ? W.worst : EXIT_CUT;
                else if (code != 0) W.worst = 1;
                break;
            }
            if (!was_ready && W.failed_start >= 0) { /* a first worker: a configuration error */
                fprintf(stderr, "weft-httpd: worker %d (pid %d) %s before it was ready\n", i, (int)pid, how);
                W.failed_start = 1;
                break;
            }
            int64_t now = mono_ms();
            int quick = now - s->started_ms < 1000;
            s->quick = quick ? s->quick + 1 : 0;
            int64_t pause = 0;
            if (s->quick) {
                pause = 100LL << (s->quick < 6 ? s->quick - 1 : 6);
                if (pause > 5000) pause = 5000;
            }
            fprintf(stderr, "weft-httpd: worker %d (pid %d) %s; starting another%s\n", i, (int)pid, how,
                    pause ? " after a pause" : "");
            if (pause) s->restart_ms = now + pause;
            else start_cur(i);
            break;
        }
    }
}

/* One or the other slot's listening socket on *port (--port's or
 * --tls-port's), bound to the same address. */
static int open_slot_listener(const char **port, char got[8]) {
    int fd = open_listener(*port, 1);
    if (fd < 0) return -1;
    if (!strcmp(*port, "0")) { /* the others take the port the first one got */
        char host[INET6_ADDRSTRLEN];
        int pn;
        listen_addr(fd, host, sizeof host, &pn);
        snprintf(got, 8, "%d", pn);
        *port = got;
    }
    return fd;
}

int supervise(int argc, char **argv) {
    W.n = O.workers;
    W.argc = argc - 1;
    W.argv = argv + 1;
    W.failed_start = 0;
    ssize_t en = readlink("/proc/self/exe", W.exe, sizeof W.exe - 1);
    if (en <= 0 || (size_t)en >= sizeof W.exe - 1) {
        fprintf(stderr, "weft-httpd: --workers: cannot find this program's path: %s\n", strerror(errno));
        return 1;
    }
    W.exe[en] = 0;
    if (O.tls_cert && (W.keyfd = tls_ticket_keys_make()) < 0) {
        fprintf(stderr, "weft-httpd: --workers: cannot make the workers' ticket key: %s\n", strerror(-W.keyfd));
        return 1;
    }
    for (int i = 0; i < W.n; i++) {
        static char port[8], tls_port[8];
        W.s[i].rfd = W.s[i].tfd = -1;
        W.s[i].lfd = open_slot_listener(&O.port, port);
        if (W.s[i].lfd < 0) return 1;
        if (O.tls_port && (W.s[i].tfd = open_slot_listener(&O.tls_port, tls_port)) < 0) return 1;
    }
    /* the signals we wait for, read from a signalfd */
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGCHLD);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    sigaddset(&ss, SIGHUP);
    sigaddset(&ss, SIGQUIT);
    sigprocmask(SIG_BLOCK, &ss, NULL);
    int sfd = signalfd(-1, &ss, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "weft-httpd: --workers: signalfd: %s\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < W.n; i++) {
        start_cur(i);
        if (!W.s[i].cur) {
            W.stopping = 1;
            signal_all(SIGTERM);
            W.failed_start = 1;
            break;
        }
    }
    int announced = 0, signals_seen = 0;
    struct pollfd pf[MAX_WORKERS + 1];
    int who[MAX_WORKERS + 1];
    for (;;) {
        if (W.failed_start == 1 && !W.stopping) {
            W.stopping = 1;
            signal_all(SIGTERM);
        }
        if (W.stopping && !alive()) break;
        if (!announced && !W.stopping) {
            int ready = 0;
            for (int i = 0; i < W.n; i++) ready += W.s[i].cur_ready;
            if (ready == W.n) {
                announced = 1;
                W.failed_start = -1; /* from now on a worker that dies is restarted */
                char host[INET6_ADDRSTRLEN];
                int port;
                listen_addr(W.s[0].lfd, host, sizeof host, &port);
                /* (--tls-cert without --tls-port: the one port is HTTPS) */
                printf("listening on %s:%d%s\n", host, port, O.tls_cert && !O.tls_port ? " (https)" : "");
                if (W.s[0].tfd >= 0) {
                    listen_addr(W.s[0].tfd, host, sizeof host, &port);
                    printf("listening on %s:%d (https)\n", host, port);
                }
                fflush(stdout);
                if (!O.quiet) fprintf(stderr, "weft-httpd: %d worker processes (SO_REUSEPORT)\n", W.n);
            }
        }
        int n = 0, timeout = -1;
        int64_t now = mono_ms();
        pf[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
        who[n++] = -1;
        for (int i = 0; i < W.n; i++) {
            wslot *s = &W.s[i];
            if (s->rfd >= 0) {
                pf[n] = (struct pollfd){.fd = s->rfd, .events = POLLIN};
                who[n++] = i;
                int64_t left = s->started_ms + START_TIMEOUT_MS - now;
                if (left <= 0) { /* never ready: kill it; its exit says the rest */
                    fprintf(stderr, "weft-httpd: worker %d not ready after %d s: killed\n", i, START_TIMEOUT_MS / 1000);
                    kill(s->next ? s->next : s->cur, SIGKILL);
                    close_rfd(s);
                    n--;
                    continue;
                }
                if (timeout < 0 || left < timeout) timeout = (int)left;
            }
            if (s->restart_ms && !W.stopping) {
                int64_t left = s->restart_ms - now;
                if (left <= 0) {
                    start_cur(i);
                    left = s->rfd >= 0 ? 0 : 1000;
                    if (s->rfd >= 0) {
                        pf[n] = (struct pollfd){.fd = s->rfd, .events = POLLIN};
                        who[n++] = i;
                    }
                }
                if (left > 0 && (timeout < 0 || left < timeout)) timeout = (int)left;
            }
        }
        if (W.notice_end_ms) {
            int64_t left = W.notice_end_ms - now;
            if (left <= 0) {
                W.notice_end_ms = 0;
                W.stopping = 1;
                if (!O.quiet) fprintf(stderr, "weft-httpd: the notice is over: stopping %d worker(s)\n", alive());
                signal_all(SIGTERM);
                continue;
            }
            if (timeout < 0 || left < timeout) timeout = (int)left;
        }
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "weft-httpd: --workers: poll: %s\n", strerror(errno));
            W.stopping = 1;
            signal_all(SIGTERM);
            continue;
        }
        for (int k = 1; r > 0 && k < n; k++)
            if (pf[k].revents && W.s[who[k]].rfd == pf[k].fd) on_ready(who[k]);
        if (r > 0 && pf[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD) continue; /* reaped below */
                if (sig == SIGQUIT) {
                    signal_all(SIGQUIT);
                } else if (sig == SIGHUP) {
                    if (W.stopping || !announced || W.notice_end_ms) continue;
                    if (!O.quiet) fprintf(stderr, "weft-httpd: SIGHUP: replacing %d worker(s), one at a time\n", W.n);
                    if (W.roll_slot >= 0) W.roll_again = 1;
                    else W.roll_slot = 0;
                } else { /* SIGTERM, SIGINT */
                    signals_seen++;
                    W.roll_slot = -1;
                    if (signals_seen == 1 && O.drain_notice > 0 && announced) {
                        /* the notice: /healthz 503 from every worker, the drain after it */
                        if (!O.quiet)
                            fprintf(stderr, "weft-httpd: %s: /healthz answers 503 for %.3g s, then %d worker(s) drain\n",
                                    strsignal(sig), (double)O.drain_notice / NS, alive());
                        W.notice_end_ms = mono_ms() + O.drain_notice / 1000000;
                        /* to the ready ones only: one still starting has not asked for
                         * SIGUSR2 yet, and its default action would kill it */
                        for (int i = 0; i < W.n; i++)
                            if (W.s[i].cur > 0 && W.s[i].cur_ready) kill(W.s[i].cur, SIGUSR2);
                        continue;
                    }
                    if (!O.quiet)
                        fprintf(stderr, "weft-httpd: %s%s: stopping %d worker(s)\n", strsignal(sig),
                                signals_seen > 1 ? " again" : "", alive());
                    W.notice_end_ms = 0;
                    W.stopping = 1;
                    signal_all(SIGTERM);
                }
            }
        }
        reap();
        if (!W.stopping) roll_step();
    }
    close(sfd);
    for (int i = 0; i < W.n; i++) {
        close(W.s[i].lfd);
        if (W.s[i].tfd >= 0) close(W.s[i].tfd);
    }
    if (W.keyfd >= 0) close(W.keyfd);
    if (W.failed_start == 1) return 1;
    if (!O.quiet) fprintf(stderr, "weft-httpd: stopped\n");
    return W.worst;
}
