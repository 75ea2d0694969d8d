/*
 * Throwaway database servers for tests: a PostgreSQL cluster and a
 * redis-server, each in a temporary directory of its own under /tmp, on a
 * TCP port of its own on 127.0.0.1 and a Unix socket in that directory,
 * stopped and removed at the end.
 *
 *   backend_pg pg;
 *   if (backend_pg_start(&pg, 300) == -ENOENT) SKIP("...");   (the message is in pg.why)
 *   ... PQconnectdb(pg.conninfo) or pg.conninfo_tcp ...
 *   backend_pg_stop(&pg);
 *
 * Start these from the test's main thread, before any vthread runs: the
 * servers are this process's children (fork + exec), so that the test owns
 * their pids, sees them die (waitpid) and can stop them cleanly.
 *
 * Nothing is left behind, however the test ends.  A failed CHECK _exits
 * the test child, and the harness's alarm kills it with SIGALRM: neither
 * runs cleanup code.  So (1) each server gets PR_SET_PDEATHSIG (SIGQUIT for
 * the postmaster: an immediate shutdown that takes its backends along;
 * SIGKILL for redis), set after any change of uid, which would clear it;
 * and (2) a guardian process, forked once, holds the read end of a pipe
 * whose write end only the test process has: when the test process is
 * gone the pipe reads EOF, and the guardian signals every server still
 * registered with it, waits for them to go (SIGKILL after 10 s) and
 * removes their directories.  A normal stop unregisters the server first,
 * so the guardian never signals a pid that may have been reused.
 *
 * PostgreSQL refuses to run as root (initdb and postgres both check), and
 * CI runs as root.  Then the directory is given to the "postgres" system
 * user (the Debian package creates it; "nobody" otherwise) and the child
 * drops to that uid and gid with setgroups/setgid/setuid before exec.  No
 * runuser, su or sudo: nothing to configure, no PAM session, and the child
 * keeps being our child.  The test itself stays root and reaches the server
 * through TCP and through the socket in the directory.
 *
 * Binaries: initdb and postgres from the newest /usr/lib/postgresql/N/bin
 * (Debian keeps them off PATH), else from PATH; redis-server from PATH,
 * /usr/bin or /usr/sbin.  When one is missing, start returns -ENOENT with a
 * one-line reason ready for SKIP(); any other failure fails the test, with
 * the server's log on stderr.
 *
 * Settings for tests, not for data: fsync, synchronous_commit and
 * full_page_writes off, initdb --no-sync, shared_buffers 32MB, no redis
 * persistence.  Readiness: postgres writes "ready" into postmaster.pid once
 * it accepts connections (PostgreSQL 10+); redis answers PING with +PONG.
 * Neither check needs a client library, so this header links with none.
 */
#ifndef WEFT_TEST_BACKENDS_H
#define WEFT_TEST_BACKENDS_H

#include "harness.h"
#include "launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#define BACKEND_START_S (TEST_SANITIZED ? 120 : 60) /* a loaded machine: generous */

/* backend_ms, backend_sleep_ms: the real clock (launch.h) */
#define backend_ms launch_now_ms
#define backend_sleep_ms launch_sleep_ms

static int backend_rm_one(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    remove(p);
    return 0;
}

static void backend_rm_rf(const char *dir) {
    if (strncmp(dir, "/tmp/weft-", 10) == 0) nftw(dir, backend_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* Prints a file (a server's log) to stderr, indented. */
static void backend_print_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[512];
    fprintf(stderr, "--- %s:\n", path);
    while (fgets(line, sizeof line, f)) fprintf(stderr, "  %s", line);
    fclose(f);
}

/* ------------------------------------------------------------------------ */
/* the guardian                                                              */
/* ------------------------------------------------------------------------ */

static int backend_guard_fd = -1;

/* The guardian's loop: lines "add PID SIG DIR" and "del PID" until EOF; then
 * it stops what is still registered and removes the directories. */
static void backend_guardian(int in) {
    struct { pid_t pid; int sig; char dir[96]; } srv[16];
    int n = 0;
    static char buf[8192];
    size_t len = 0;
    for (;;) {
        ssize_t r = read(in, buf + len, sizeof buf - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
        buf[len] = 0;
        char *s = buf, *nl;
        while ((nl = strchr(s, '\n'))) {
            *nl = 0;
            int pid, sig;
            char dir[96];
            if (sscanf(s, "add %d %d %95s", &pid, &sig, dir) == 3 && n < 16) {
                srv[n].pid = pid, srv[n].sig = sig;
                snprintf(srv[n].dir, sizeof srv[n].dir, "%s", dir);
                n++;
            } else if (sscanf(s, "del %d", &pid) == 1 && pid > 0) {
                for (int i = 0; i < n; i++)
                    if (srv[i].pid == pid) srv[i] = srv[--n];
            }
            s = nl + 1;
        }
        len = strlen(s);
        memmove(buf, s, len);
    }
    /* pid 0 registers a directory alone (never kill(0, ...): our group) */
    for (int i = 0; i < n; i++)
        if (srv[i].pid > 0) kill(srv[i].pid, srv[i].sig);
    int64_t until = backend_ms() + 10000;
    for (int i = 0; i < n; i++) {
        if (srv[i].pid <= 0) continue;
        /* not our child: poll for it to be gone (reaped by its new parent) */
        while (kill(srv[i].pid, 0) == 0 && backend_ms() < until) backend_sleep_ms(20);
        if (kill(srv[i].pid, 0) == 0) kill(srv[i].pid, SIGKILL);
    }
    backend_sleep_ms(100);
    for (int i = 0; i < n; i++) backend_rm_rf(srv[i].dir);
    _exit(0);
}

static void backend_guard(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void backend_guard(const char *fmt, ...) {
    if (backend_guard_fd < 0) {
        int p[2];
        CHECK(pipe2(p, O_CLOEXEC) == 0);
        fflush(NULL);
        pid_t g = fork();
        CHECK(g >= 0);
        if (g == 0) {
            close(p[1]);
            int dn = open("/dev/null", O_RDWR);
            if (dn >= 0) dup2(dn, 0), dup2(dn, 1), dup2(dn, 2);
            signal(SIGINT, SIG_IGN); /* a Ctrl-C at the terminal is for the test */
            backend_guardian(p[0]);
        }
        close(p[0]);
        backend_guard_fd = p[1];
    }
    va_list ap;
    va_start(ap, fmt);
    vdprintf(backend_guard_fd, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* processes                                                                 */
/* ------------------------------------------------------------------------ */

static int backend_is_exec(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* name in PATH (then /usr/bin, /usr/sbin) into out; 0 or -ENOENT. */
static int backend_which(char *out, size_t len, const char *name) {
    const char *path = getenv("PATH");
    char all[4096];
    snprintf(all, sizeof all, "%s:/usr/bin:/usr/sbin", path ? path : "/usr/local/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(all, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, len, "%s/%s", d, name);
        if (backend_is_exec(out)) return 0;
    }
    return -ENOENT;
}

/* The uid and gid a server runs as: ours, or when we are root the postgres
 * user's (nobody's where there is none). */
static void backend_user(uid_t *uid, gid_t *gid) {
    *uid = getuid(), *gid = getgid();
    if (geteuid() != 0) return;
    struct passwd *pw = getpwnam("postgres");
    if (!pw) pw = getpwnam("nobody");
    CHECK(pw != NULL);
    *uid = pw->pw_uid, *gid = pw->pw_gid;
}

/* A free TCP port on 127.0.0.1 (the kernel's pick; free again when we
 * return, so a server may lose it to another: the callers retry). */
static int backend_free_port(void) {
    int port;
    close(listen_any(&port));
    return port;
}

/*
 * How a server starts (launch.h): stdin /dev/null, stdout and stderr
 * appended to logfd, as (uid, gid) when we are root, then pdeathsig, in
 * dir, as many fds as allowed (redis sizes maxclients by them), on the
 * real clock, with an empty signal mask.
 */
static void backend_opts(launch_opts *o, const char *dir, int logfd, uid_t uid, gid_t gid, int pdeathsig) {
    static const char *const env[] = {"WEFT_DETERMINISTIC", "WEFT_TRACE", NULL};
    *o = (launch_opts){.in = LAUNCH_NULL, .out = LAUNCH_FD, .out_fd = logfd, .err = LAUNCH_TO_OUT,
                       .drop = 1, .uid = uid, .gid = gid, .deathsig = pdeathsig, .dir = dir,
                       .nofile = LAUNCH_NOFILE_MAX, .env = env, .unblock = 1};
}

/* The log (appended to), owned by (uid, gid); its fd. */
static int backend_log(const char *log, uid_t uid, gid_t gid) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    CHECK(fd >= 0);
    if (fchown(fd, uid, gid) < 0) {
    }
    return fd;
}

/*
 * Starts argv as (uid, gid), in dir, stdout and stderr appended to log,
 * with pdeathsig; returns the pid.  When wait is set, waits for it and
 * returns its exit status instead.
 */
static int backend_run(char *const argv[], const char *dir, const char *log, uid_t uid, gid_t gid, int pdeathsig,
                       int wait) {
    int fd = backend_log(log, uid, gid);
    launch_opts o;
    backend_opts(&o, dir, fd, uid, gid, pdeathsig);
    launch l;
    CHECK_EQ(launch_start(&l, argv, &o), 0);
    close(fd);
    if (!wait) return l.pid;
    CHECK_EQ(launch_reap(&l, -1), 1);
    return l.status;
}

/* Sends sig, waits up to ms for pid (our child) to exit; SIGKILL after. */
static void backend_kill_wait(pid_t pid, int sig, int ms) {
    launch l = {.pid = pid};
    launch_stop(&l, sig, ms);
}

/* A temporary directory /tmp/weft-PREFIX-XXXXXX owned by (uid, gid). */
static void backend_mkdtemp(char *dir, size_t len, const char *prefix, uid_t uid, gid_t gid) {
    snprintf(dir, len, "/tmp/weft-%s-XXXXXX", prefix);
    CHECK(mkdtemp(dir) != NULL);
    CHECK(chown(dir, uid, gid) == 0);
}

/* ------------------------------------------------------------------------ */
/* PostgreSQL                                                                */
/* ------------------------------------------------------------------------ */

typedef struct backend_pg {
    pid_t pid;            /* the postmaster, our child */
    int port;             /* TCP, 127.0.0.1 */
    char dir[64];         /* /tmp/weft-pg-XXXXXX: data/, the socket, postgres.log */
    char conninfo[256];   /* through the Unix socket in dir */
    char conninfo_tcp[256];
    char why[256];        /* why it could not start (-ENOENT) */
} backend_pg;

/* The directory with initdb and postgres: the newest /usr/lib/postgresql/N/bin,
 * else the one in PATH that has both. */
static int backend_pg_bindir(char *out, size_t len) {
    int best = -1;
    DIR *d = opendir("/usr/lib/postgresql");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            int v = atoi(e->d_name);
            char p[300];
            snprintf(p, sizeof p, "/usr/lib/postgresql/%s/bin/postgres", e->d_name);
            if (v > best && backend_is_exec(p)) {
                snprintf(p, sizeof p, "/usr/lib/postgresql/%s/bin/initdb", e->d_name);
                if (backend_is_exec(p)) best = v;
            }
        }
        closedir(d);
    }
    if (best >= 0) {
        snprintf(out, len, "/usr/lib/postgresql/%d/bin", best);
        return 0;
    }
    char p[512];
    if (backend_which(p, sizeof p, "postgres") < 0) return -ENOENT;
    char *slash = strrchr(p, '/');
    *slash = 0;
    char q[600];
    snprintf(q, sizeof q, "%s/initdb", p);
    if (!backend_is_exec(q)) return -ENOENT;
    snprintf(out, len, "%s", p);
    return 0;
}

/* "ready" in postmaster.pid's 8th line: the postmaster accepts connections. */
static int backend_pg_ready(const backend_pg *pg) {
    char p[128], buf[1024];
    snprintf(p, sizeof p, "%s/data/postmaster.pid", pg->dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *l = buf;
    for (int i = 1; i < 8 && l; i++) {
        l = strchr(l, '\n');
        if (l) l++;
    }
    return l && strncmp(l, "ready", 5) == 0;
}

/*
 * initdb, then postgres with max_connections (and room for superuser
 * slots); returns 0 when it accepts connections, -ENOENT (pg->why says
 * what is missing) when PostgreSQL is not installed.  Database "postgres",
 * user "weft", trust authentication.
 */
__attribute__((unused)) static int backend_pg_start(backend_pg *pg, int max_connections) {
    memset(pg, 0, sizeof *pg);
    char bin[256];
    if (backend_pg_bindir(bin, sizeof bin) < 0) {
        snprintf(pg->why, sizeof pg->why,
                 "no PostgreSQL server (initdb, postgres) in /usr/lib/postgresql/*/bin or PATH "
                 "(apt-get install postgresql; scripts/deps.sh does)");
        return -ENOENT;
    }
    uid_t uid;
    gid_t gid;
    backend_user(&uid, &gid);
    backend_mkdtemp(pg->dir, sizeof pg->dir, "pg", uid, gid);
    backend_guard("add 0 0 %s\n", pg->dir); /* the directory goes, even if initdb hangs */

    char initdb[300], postgres[300], data[96], log[96];
    snprintf(initdb, sizeof initdb, "%s/initdb", bin);
    snprintf(postgres, sizeof postgres, "%s/postgres", bin);
    snprintf(data, sizeof data, "%s/data", pg->dir);
    snprintf(log, sizeof log, "%s/postgres.log", pg->dir);
    char *iargv[] = {initdb, "-D", data, "-U", "weft", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", NULL};
    int st = backend_run(iargv, pg->dir, log, uid, gid, SIGKILL, 1);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        backend_print_file(log);
        fprintf(stderr, "backends: initdb failed (status 0x%x)\n", st);
        _exit(1);
    }

    char maxc[32], sock[96];
    snprintf(maxc, sizeof maxc, "max_connections=%d", max_connections);
    snprintf(sock, sizeof sock, "%s", pg->dir);
    for (int attempt = 1;; attempt++) {
        pg->port = backend_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", pg->port);
        char *argv[] = {postgres, "-D", data, "-k", sock, "-p", port, "-h", "127.0.0.1",
                        "-c", maxc, "-c", "fsync=off", "-c", "synchronous_commit=off",
                        "-c", "full_page_writes=off", "-c", "shared_buffers=32MB",
                        "-c", "superuser_reserved_connections=3", "-c", "max_wal_senders=0",
                        "-c", "wal_level=minimal", "-c", "logging_collector=off",
                        "-c", "log_min_messages=warning", NULL};
        pg->pid = backend_run(argv, pg->dir, log, uid, gid, SIGQUIT, 0);
        backend_guard("add %d %d %s\n", (int)pg->pid, SIGQUIT, pg->dir);
        int64_t until = backend_ms() + BACKEND_START_S * 1000;
        int dead = 0;
        while (!backend_pg_ready(pg)) {
            if (waitpid(pg->pid, &st, WNOHANG) == pg->pid) {
                dead = 1;
                break;
            }
            if (backend_ms() > until) {
                backend_print_file(log);
                fprintf(stderr, "backends: postgres did not become ready within %d s\n", BACKEND_START_S);
                _exit(1);
            }
            backend_sleep_ms(20);
        }
        if (!dead) break;
        backend_guard("del %d\n", (int)pg->pid);
        if (attempt == 3) { /* the port taken from under it, three times: unlikely; say what happened */
            backend_print_file(log);
            fprintf(stderr, "backends: postgres exited during start (status 0x%x)\n", st);
            _exit(1);
        }
    }
    snprintf(pg->conninfo, sizeof pg->conninfo, "host=%s port=%d user=weft dbname=postgres connect_timeout=60",
             pg->dir, pg->port);
    snprintf(pg->conninfo_tcp, sizeof pg->conninfo_tcp,
             "host=127.0.0.1 port=%d user=weft dbname=postgres connect_timeout=60", pg->port);
    return 0;
}

/* A fast shutdown (SIGINT: disconnects clients, stops cleanly), then the
 * directory goes. */
__attribute__((unused)) static void backend_pg_stop(backend_pg *pg) {
    if (pg->pid > 0) {
        backend_guard("del %d\n", (int)pg->pid);
        backend_kill_wait(pg->pid, SIGINT, 30000);
        pg->pid = 0;
    }
    backend_rm_rf(pg->dir);
}

/* ------------------------------------------------------------------------ */
/* redis                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct backend_redis {
    pid_t pid;
    int port;
    char dir[64];    /* /tmp/weft-redis-XXXXXX */
    char sock[96];   /* dir/redis.sock */
    char why[256];
} backend_redis;

/* PING answered +PONG on port. */
static int backend_redis_ping(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    char buf[64] = {0};
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, "PING\r\n", 6) == 6 &&
             read(fd, buf, sizeof buf - 1) >= 5 && strncmp(buf, "+PONG", 5) == 0;
    close(fd);
    return ok;
}

/* redis-server without persistence; 0 when it answers PING, -ENOENT (why
 * says so) when redis is not installed. */
__attribute__((unused)) static int backend_redis_start(backend_redis *r) {
    memset(r, 0, sizeof *r);
    char bin[512];
    if (backend_which(bin, sizeof bin, "redis-server") < 0) {
        snprintf(r->why, sizeof r->why, "no redis-server in PATH (apt-get install redis-server; scripts/deps.sh does)");
        return -ENOENT;
    }
    uid_t uid = getuid();
    gid_t gid = getgid();
    backend_mkdtemp(r->dir, sizeof r->dir, "redis", uid, gid);
    backend_guard("add 0 0 %s\n", r->dir);
    snprintf(r->sock, sizeof r->sock, "%s/redis.sock", r->dir);
    char log[96];
    snprintf(log, sizeof log, "%s/redis.log", r->dir);
    for (int attempt = 1;; attempt++) {
        r->port = backend_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", r->port);
        char *argv[] = {bin, "--port", port, "--bind", "127.0.0.1", "--unixsocket", r->sock,
                        "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", r->dir,
                        "--daemonize", "no", "--protected-mode", "no", "--maxclients", "4000",
                        "--logfile", "", NULL};
        r->pid = backend_run(argv, r->dir, log, uid, gid, SIGKILL, 0);
        backend_guard("add %d %d %s\n", (int)r->pid, SIGKILL, r->dir);
        int64_t until = backend_ms() + BACKEND_START_S * 1000;
        int dead = 0, st = 0;
        while (!backend_redis_ping(r->port)) {
            if (waitpid(r->pid, &st, WNOHANG) == r->pid) {
                dead = 1;
                break;
            }
            if (backend_ms() > until) {
                backend_print_file(log);
                fprintf(stderr, "backends: redis-server did not answer PING within %d s\n", BACKEND_START_S);
                _exit(1);
            }
            backend_sleep_ms(20);
        }
        if (!dead) return 0;
        backend_guard("del %d\n", (int)r->pid);
        if (attempt == 3) {
            backend_print_file(log);
            fprintf(stderr, "backends: redis-server exited during start (status 0x%x)\n", st);
            _exit(1);
        }
    }
}

__attribute__((unused)) static void backend_redis_stop(backend_redis *r) {
    if (r->pid > 0) {
        backend_guard("del %d\n", (int)r->pid);
        backend_kill_wait(r->pid, SIGTERM, 10000);
        r->pid = 0;
    }
    backend_rm_rf(r->dir);
}

#endif
