/*
 * The live console: a read-only snapshot of the runtime on a Unix socket,
 * for weft-top (weft.h, "The live console").
 *
 * Cost while nobody looks.  The console is one platform thread
 * ("weft-console") blocked in poll(2) on the listening socket and a stop
 * pipe, with no timeout while it has no client.  Nothing else exists: no
 * counter is added to the scheduler for it, no flag is tested on a switch,
 * park or wake path.  What a snapshot shows is read when it is taken, from
 * what the runtime keeps anyway: weft_dump (every vthread, carrier, group,
 * scope, executor), weft_stats, and each carrier's own counters and its
 * thread's CPU clock (weft__carrier_counters_get).  Busy % is the carrier
 * thread's CPU time over the window since the previous snapshot (its spin
 * while looking for work included, as top -H shows it; a carrier pinned in
 * a blocking system call uses no CPU and shows as such -- the dump's
 * carrier state says "pinned").  Rejected: an idle-time counter kept by
 * the carrier around its poller wait (two clock reads per sleep/wake pair
 * on every carrier, paid whether anyone looks or not).
 *
 * Protocol.  On connect the peer's credentials (SO_PEERCRED) are checked:
 * the process's effective uid and root are served, anyone else is closed
 * at once with nothing written.  A served client then gets, about once a
 * second for as long as it stays connected (the first within ~100 ms):
 *
 *     weft-console 1 <bytes>\n
 *     {"weft_console":{...}, "weft_dump":{...}}\n        (<bytes> bytes)
 *
 * The "weft_console" object holds the header (pid, uptime, weft_stats, the
 * I/O backend) and "carrier_counters" (per carrier: busy_pct, runnable,
 * switches, steals, parks, cumulative); "weft_dump" is weft_dump's JSON
 * object, unchanged.  Clients send nothing: whatever they send is read and
 * dropped, so no command exists that could change the runtime.
 *
 * Each client its own sender.  Client sockets are nonblocking, and each
 * client keeps its own place: the snapshot it is being sent (a reference
 * to it) and how far it got.  The thread sends to whoever's socket has
 * room (poll's POLLOUT) and never waits on one client, so one that reads
 * slowly or not at all costs the others nothing -- they get every
 * snapshot on time.  A client still taking one snapshot when the next is
 * due skips the new one (none is built while every client is still on an
 * older one); one that has not taken a whole snapshot within 2 s of its
 * start is dropped.  Rejected: a sender thread (or vthread) per
 * client -- 64 stacks and a hand-off for what one poll loop does, and the
 * snapshot would have to be shared across threads anyway; sequential
 * blocking sends with a timeout (the first design) -- N stuck clients
 * held every other for N times the timeout.
 *
 * Full.  At most CON_MAX_CLIENTS (64) clients.  A newcomer when all are
 * taken evicts the client that has left what it was sent unread longest,
 * if that is over 2 s -- a connection that never reads, which small
 * snapshots would otherwise keep for as long as its socket buffer takes
 * them.  When a client last read is known from its socket: nothing unread
 * in it at a snapshot (SIOCOUTQ), or room again in it once it was full
 * (POLLOUT that lets more be sent).  If every client reads, the
 * newcomer gets one line, "weft-console full <max>\n", and is closed, so
 * that weft-top can say why.  (Another uid gets no byte: nothing about the
 * process is told to a user it does not serve.)
 *
 * The log.  A refused connection (another uid, or a full console) is one
 * line on stderr, at most one a second: those refused in between are
 * counted and summed up in one line a second later ("N more connections
 * refused"), so a flood of connections cannot flood the program's stderr.
 *
 * Ownership and threads.  weft_init (under its lock, carriers running)
 * calls weft__console_start, which checks the path, binds, makes the
 * socket 0600 (before listen: until then a connect is refused, so the
 * umask's mode is never reachable), listens and starts the thread.
 * weft_shutdown calls weft__console_stop before the carriers stop: it
 * writes to the stop pipe, joins the thread, closes every socket and
 * unlinks the file -- only if it is still the one we made (same device and
 * inode).  C (below) is written by start/stop (the init lock serialises
 * them) and read by the thread between the two; the client table and the
 * snapshots are the thread's.  Each snapshot is built into a memfd of its
 * own and sent from there (kept while a client still takes it), so nothing
 * of the runtime (the dump takes the scopes' lock) is held while a client
 * reads slowly.
 *
 * Fork.  The child has no console thread: its atfork handler closes the
 * copies of the sockets and memfds it inherited (a client would otherwise never see
 * EOF) and forgets the path without unlinking it -- it is the parent's.
 * weft_init does not start a console in a fork child's inherited runtime.
 * A process that calls exit() without weft_shutdown removes the file in an
 * atexit handler; one that crashes leaves it, and the next start replaces
 * it (nobody listens on it any more).
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "observe.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <linux/sockios.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CON_MAX_CLIENTS 64
#define CON_PERIOD_NS 1000000000LL     /* a snapshot a second while clients stay */
#define CON_FIRST_NS 100000000LL       /* the first: a busy % over at least this */
#define CON_SEND_TIMEOUT_NS 2000000000LL /* a whole snapshot within this, or the client goes */
#define CON_STALL_NS 2000000000LL      /* unread this long: evicted for a newcomer when full */
#define CON_LOG_NS 1000000000LL        /* at most one line a second about refused connections */
#define CON_MAX_SNAPS 4 /* the newest, and older ones clients still take (each younger than the timeout) */

/* One snapshot: its frame line, and its body in a memfd. */
typedef struct snap {
    int fd;     /* the memfd, made once and reused; -1 not yet */
    int refs;   /* clients still taking it */
    size_t len; /* the body's bytes */
    int klen;   /* the frame line's */
    char line[48];
} snap;

/* One client, and how far it got in the snapshot it is being sent. */
typedef struct client {
    int fd;          /* nonblocking */
    int snap;        /* the index in C.snaps of what it is being sent; -1 none */
    size_t off;      /* bytes of that frame (line and body) sent */
    int64_t started; /* when that began */
    int64_t read_at; /* when its socket was last seen with nothing left unread */
} client;

static struct {
    int running;
    int lfd;
    int stop[2];
    pthread_t th;
    _Atomic int up;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    dev_t dev;
    ino_t ino;
    client clients[CON_MAX_CLIENTS]; /* the thread's (and the fork child's handler) */
    int nclients;
    snap snaps[CON_MAX_SNAPS];       /* the thread's (here: for the fork child to close) */
    int64_t *cpu[2];              /* the thread's samples (here: a fork child still reaches them) */
    /* the refusals' log: the last line's time, and those refused since */
    int64_t log_at;
    unsigned quiet_uid, quiet_full;
} C = {.lfd = -1, .stop = {-1, -1}};

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void con_closefd(int *fd) {
    weft__fd_close_own(*fd);
    *fd = -1;
}

/* ---- the path ------------------------------------------------------------ */

/* /tmp/weft-<uid>: made 0700, and refused unless it is a directory of
 * ours that nobody else can enter (another user could have made it first
 * to watch or replace our sockets). */
static int default_dir(char *dir, size_t cap) {
    uid_t me = geteuid();
    snprintf(dir, cap, "/tmp/weft-%u", (unsigned)me);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        int e = errno;
        fprintf(stderr, "weft: console: cannot make %s: %s\n", dir, strerror(e));
        return -e;
    }
    struct stat st;
    if (lstat(dir, &st) < 0) {
        int e = errno;
        fprintf(stderr, "weft: console: %s: %s\n", dir, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077)) {
        fprintf(stderr,
                "weft: console: %s is not a private directory of uid %u (a link, another owner, or open to "
                "others): refused\n",
                dir, (unsigned)me);
        return -EPERM;
    }
    return 0;
}

/* A chosen path's directory: not one where others could replace our
 * socket (writable by others and not sticky, or owned by another user). */
static int check_dir(const char *path) {
    char tmp[sizeof C.path];
    snprintf(tmp, sizeof tmp, "%s", path);
    const char *dir = dirname(tmp);
    struct stat st;
    if (stat(dir, &st) < 0) {
        int e = errno;
        fprintf(stderr, "weft: console: the directory of %s: %s\n", path, strerror(e));
        return -e;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "weft: console: %s is not a directory\n", dir);
        return -ENOTDIR;
    }
    if ((st.st_uid != geteuid() && st.st_uid != 0) || ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))) {
        fprintf(stderr,
                "weft: console: %s is owned by another user or writable by others without the sticky bit: "
                "refused for %s\n",
                dir, path);
        return -EPERM;
    }
    return 0;
}

/* What is at the path already: nothing; a socket nobody serves (a process
 * that died), removed; anything else is an error. */
static int clear_stale(const char *path) {
    struct stat st;
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) return 0;
        int e = errno;
        fprintf(stderr, "weft: console: %s: %s\n", path, strerror(e));
        return -e;
    }
    if (!S_ISSOCK(st.st_mode)) {
        fprintf(stderr, "weft: console: %s exists and is not a socket: not touched\n", path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return -errno;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, path, strlen(path) + 1);
    int r = connect(fd, (struct sockaddr *)&a, sizeof a);
    int e = r < 0 ? errno : 0;
    close(fd);
    if (r == 0 || e == EAGAIN) {
        fprintf(stderr, "weft: console: %s is served by a running process: choose another path\n", path);
        return -EADDRINUSE;
    }
    if (e != ECONNREFUSED || st.st_uid != geteuid()) {
        fprintf(stderr, "weft: console: %s is another user's socket (%s): not touched\n", path,
                e == ECONNREFUSED ? "stale" : strerror(e));
        return -EPERM;
    }
    if (unlink(path) < 0 && errno != ENOENT) {
        e = errno;
        fprintf(stderr, "weft: console: cannot remove the stale socket %s: %s\n", path, strerror(e));
        return -e;
    }
    return 0;
}

/* ---- snapshots ------------------------------------------------------------ */

typedef struct sample {
    int64_t t;       /* CLOCK_MONOTONIC: the CPU clocks are real time */
    int64_t *cpu;    /* per carrier index, -1 unknown */
} sample;

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int err;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) { b->err = -EINVAL; return; }
        if (b->p && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
        size_t cap = b->cap ? b->cap * 2 : 16384;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) { b->err = -ENOMEM; return; }
        b->p = q;
        b->cap = cap;
    }
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') sb_put(b, "\\%c", ch);
        else if (ch < 0x20) sb_put(b, "\\u%04x", ch);
        else sb_put(b, "%c", ch);
    }
    sb_put(b, "\"");
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Every carrier's CPU clock into *s (the start of a window). */
static void sample_take(sample *s) {
    s->t = mono_ns();
    for (int k = 0; k < WEFT__MAX_CARRIERS; k++) {
        weft__carrier_counters cc;
        s->cpu[k] = weft__carrier_counters_get(k, &cc) < 0 ? -1 : cc.cpu_ns;
    }
}

/* Takes every carrier's CPU clock into *s, and writes the header object
 * (with busy % over the window since *prev) into b. */
static void header(sbuf *b, sample *s, const sample *prev, int64_t started_at) {
    s->t = mono_ns();
    weft_stats st;
    weft_stats_get(&st);
    char comm[64] = "";
    int cfd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (cfd >= 0) {
        ssize_t k = read(cfd, comm, sizeof comm - 1);
        comm[k > 0 ? k : 0] = 0;
        comm[strcspn(comm, "\n")] = 0;
        close(cfd);
    }
    int64_t now = weft_now();
    sb_put(b, "{\"weft_console\":{\"version\":1,\"pid\":%d,\"uid\":%u,\"program\":", (int)getpid(),
           (unsigned)geteuid());
    sb_str(b, comm);
    sb_put(b,
           ",\"time_ns\":%" PRId64 ",\"uptime_ns\":%" PRId64 ",\"window_ns\":%" PRId64
           ",\"io\":\"%s\",\"injected\":%" PRId64 ",\n  \"stats\":{\"started\":%" PRIu64 ",\"live\":%" PRIu64
           ",\"peak\":%" PRIu64 ",\"switches\":%" PRIu64 ",\"steals\":%" PRIu64 ",\"parks\":%" PRIu64
           ",\"pinned\":%" PRIu64 ",\"hogs\":%" PRIu64 ",\"carriers\":%" PRIu64 ",\"spares\":%" PRIu64
           ",\"compensating\":%" PRIu64 ",\"stacks\":%" PRIu64 ",\"stack_bytes_reserved\":%" PRIu64
           ",\"trapped\":%" PRIu64 ",\"tls_blocks\":%" PRIu64 "},\n  \"carrier_counters\":[",
           now, now - started_at, prev->t ? s->t - prev->t : 0,
           weft_io_backend() == WEFT_IO_URING ? "io_uring" : "epoll", weft__injected(), st.started, st.live,
           st.peak, st.switches, st.steals, st.parks, st.pinned, st.hogs, st.carriers, st.spares,
           st.compensating, st.stacks, st.stack_bytes_reserved, st.trapped, st.tls_blocks);
    int first = 1;
    for (int k = 0; k < WEFT__MAX_CARRIERS; k++) {
        s->cpu[k] = -1;
        weft__carrier_counters cc;
        if (weft__carrier_counters_get(k, &cc) < 0) continue;
        s->cpu[k] = cc.cpu_ns;
        sb_put(b, "%s\n    {\"index\":%d,\"group\":%u,\"spare\":%s,\"active\":%s,\"tid\":%d,\"busy_pct\":", first ? "" : ",",
               cc.index, cc.group, cc.spare ? "true" : "false", cc.active ? "true" : "false", cc.tid);
        first = 0;
        /* A carrier that was not running when the window opened (a spare
         * the monitor started since, or a slot a retired spare left and a
         * new one took: its clock went back) spent all of its CPU clock
         * inside the window. Unknown (null): no window yet, or a carrier
         * whose thread has not started. */
        int64_t dt = prev->t ? s->t - prev->t : 0;
        if (dt > 0 && cc.cpu_ns >= 0) {
            int64_t from = prev->cpu[k] >= 0 && cc.cpu_ns >= prev->cpu[k] ? prev->cpu[k] : 0;
            double pct = 100.0 * (double)(cc.cpu_ns - from) / (double)dt;
            sb_put(b, "%.1f", pct > 100.0 ? 100.0 : pct);
        } else {
            sb_put(b, "null");
        }
        sb_put(b,
               ",\"cpu_ns\":%" PRId64 ",\"runnable\":%" PRId64 ",\"switches\":%" PRIu64 ",\"steals\":%" PRIu64
               ",\"parks\":%" PRIu64 ",\"started\":%" PRIu64 ",\"finished\":%" PRIu64 "}",
               cc.cpu_ns, cc.runnable, cc.switches, cc.steals, cc.parks, cc.started, cc.finished);
    }
    sb_put(b, "%s]},\n", first ? "" : "\n  ");
}

/* One snapshot into the memfd: the header, then weft_dump's object with
 * its opening brace turned into a space (one object holding both).
 * Returns its length, or -errno. */
static ssize_t build(int mfd, sample *s, const sample *prev, int64_t started_at) {
    if (ftruncate(mfd, 0) < 0 || lseek(mfd, 0, SEEK_SET) < 0) return -errno;
    sbuf b = {0};
    header(&b, s, prev, started_at);
    int r = b.err ? b.err : write_all(mfd, b.p, b.n);
    size_t at = b.n;
    free(b.p);
    if (r < 0) return r;
    r = weft_dump(mfd, WEFT_DUMP_JSON);
    if (r < 0) return r;
    char c0 = 0;
    if (pread(mfd, &c0, 1, (off_t)at) != 1 || c0 != '{') return -EPROTO;
    if (pwrite(mfd, " ", 1, (off_t)at) != 1) return -errno;
    off_t len = lseek(mfd, 0, SEEK_END);
    return len < 0 ? -errno : (ssize_t)len;
}

/* ---- clients --------------------------------------------------------------- */

static void unref(int k) {
    if (k >= 0) C.snaps[k].refs--;
}

static void drop_client(int i) {
    weft__fd_close_own(C.clients[i].fd);
    unref(C.clients[i].snap);
    C.clients[i] = C.clients[--C.nclients];
}

/* Sends what client c's socket takes now of the frame it is being sent
 * (never waiting): 0 when it took it all or has no room left for now,
 * -errno when the client must go. */
static int pump(client *c) {
    snap *sn = &C.snaps[c->snap];
    size_t k = (size_t)sn->klen, total = k + sn->len;
    char buf[65536];
    while (c->off < total) {
        const char *p;
        size_t n;
        if (c->off < k) {
            p = sn->line + c->off;
            n = k - c->off;
        } else {
            size_t want = total - c->off < sizeof buf ? total - c->off : sizeof buf;
            ssize_t got = pread(sn->fd, buf, want, (off_t)(c->off - k));
            if (got <= 0) return got < 0 ? -errno : -EIO;
            p = buf;
            n = (size_t)got;
        }
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0; /* poll says when there is room */
            return -errno;
        }
        c->off += (size_t)w;
    }
    unref(c->snap);
    c->snap = -1;
    return 0;
}

/* Has client c read everything sent to it?  Then it is reading: noted.
 * (So is room again in a socket that was full: see console_main.) */
static void note_read(client *c, int64_t now) {
    int q = 0;
    if (c->snap < 0 && ioctl(c->fd, SIOCOUTQ, &q) == 0 && q == 0) c->read_at = now;
}

/* The log of refused connections: one line, unless one was written less
 * than CON_LOG_NS ago -- then the refusal is counted, for log_summary. */
__attribute__((format(printf, 3, 4))) static void log_refused(int64_t now, int full, const char *fmt, ...) {
    if (C.log_at && now - C.log_at < CON_LOG_NS) {
        if (full) C.quiet_full++;
        else C.quiet_uid++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    C.log_at = now;
}

/* Those refused since the last line, in one line: once CON_LOG_NS has
 * passed since it (or now, with force: the console stops). */
static void log_summary(int64_t now, int force) {
    unsigned n = C.quiet_uid + C.quiet_full;
    if (!n || (!force && now - C.log_at < CON_LOG_NS)) return;
    fprintf(stderr,
            "weft: console: %u more connection%s refused since the last line (%u from other users, %u while "
            "full)\n",
            n, n == 1 ? "" : "s", C.quiet_uid, C.quiet_full);
    C.quiet_uid = C.quiet_full = 0;
    C.log_at = now;
}

/* A new connection: served if its peer is the process's uid or root, and
 * a place is free (or one is taken from a client that stopped reading). */
static int accept_one(int64_t now) {
    int fd = accept4(C.lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        /* out of descriptors or memory: the connection waits in the
         * backlog, and poll would say so again at once -- pause instead of
         * spinning */
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            struct timespec ts = {0, 100 * 1000000};
            nanosleep(&ts, NULL);
        }
        return 0;
    }
    struct ucred cr;
    socklen_t l = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || (cr.uid != geteuid() && cr.uid != 0)) {
        log_refused(now, 0,
                    "weft: console: refused a connection from uid %d (pid %d): only uid %u and root are served\n",
                    l == sizeof cr ? (int)cr.uid : -1, l == sizeof cr ? (int)cr.pid : -1, (unsigned)geteuid());
        close(fd);
        return 0;
    }
    if (C.nclients == CON_MAX_CLIENTS) {
        /* the one that has left what it was sent unread longest, if that
         * is long enough: it is not reading */
        int old = -1;
        for (int i = 0; i < C.nclients; i++) {
            note_read(&C.clients[i], now);
            if (now - C.clients[i].read_at > CON_STALL_NS && (old < 0 || C.clients[i].read_at < C.clients[old].read_at))
                old = i;
        }
        if (old >= 0) {
            drop_client(old);
        } else {
            /* every client reads (or has not had the time to show it
             * does not): this one is told why it is closed */
            char line[48];
            int k = snprintf(line, sizeof line, "weft-console full %d\n", CON_MAX_CLIENTS);
            ssize_t w = send(fd, line, (size_t)k, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)w;
            log_refused(now, 1,
                        "weft: console: %d clients, none idle for 2 s: refused a new one (pid %d)\n",
                        CON_MAX_CLIENTS, (int)cr.pid);
            close(fd);
            return 0;
        }
    }
    C.clients[C.nclients++] = (client){.fd = weft__fd_own(fd), .snap = -1, .read_at = now};
    return 1;
}

/* A snapshot is due: built into a free memfd and started to every client
 * not still taking an older one.  1, 0 when every client is still taking
 * an older one (nothing is built), or -errno (every client is dropped). */
static int tick(sample *s, const sample *prev, int64_t started_at) {
    int64_t now = mono_ns(), want = 0;
    for (int i = 0; i < C.nclients; i++) {
        note_read(&C.clients[i], now);
        want += C.clients[i].snap < 0;
    }
    if (!want) return 0;
    int k = 0;
    while (k < CON_MAX_SNAPS && C.snaps[k].refs) k++;
    if (k == CON_MAX_SNAPS) return 0; /* (cannot be: each is younger than the timeout) this one is skipped */
    snap *sn = &C.snaps[k];
    if (sn->fd < 0 && (sn->fd = weft__fd_own(memfd_create("weft-console", MFD_CLOEXEC))) < 0) return -errno;
    ssize_t len = build(sn->fd, s, prev, started_at);
    if (len < 0) return (int)len;
    sn->len = (size_t)len;
    sn->klen = snprintf(sn->line, sizeof sn->line, "weft-console 1 %zu\n", sn->len);
    now = mono_ns();
    for (int i = C.nclients - 1; i >= 0; i--) {
        client *c = &C.clients[i];
        if (c->snap >= 0) continue; /* still on the last one: it skips this one */
        c->snap = k;
        sn->refs++;
        c->off = 0;
        c->started = now;
        if (pump(c) < 0) drop_client(i);
    }
    return 1;
}

static int ms_until(int64_t t, int64_t now) {
    if (t <= now) return 0;
    int64_t ms = (t - now) / 1000000 + 1;
    return ms > 60000 ? 60000 : (int)ms;
}

static void *console_main(void *unused) {
    (void)unused;
    sample s[2] = {{0}, {0}};
    s[0].cpu = C.cpu[0] = malloc(WEFT__MAX_CARRIERS * sizeof(int64_t));
    s[1].cpu = C.cpu[1] = malloc(WEFT__MAX_CARRIERS * sizeof(int64_t));
    int cur = 0;
    int64_t started_at = weft__started_at();
    int64_t next_at = 0;
    int ok = s[0].cpu && s[1].cpu;
    if (!ok) fprintf(stderr, "weft: console: no memory for snapshots: every client will be closed\n");
    atomic_store(&C.up, 1);
    struct pollfd pf[2 + CON_MAX_CLIENTS];
    for (;;) {
        int n = 0;
        pf[n++] = (struct pollfd){.fd = C.stop[0], .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = C.lfd, .events = POLLIN};
        int timeout = -1; /* nobody connected, nothing to log: asleep until someone is */
        int64_t now = mono_ns();
        if (C.nclients) timeout = ms_until(next_at, now);
        for (int i = 0; i < C.nclients; i++) {
            client *c = &C.clients[i];
            pf[n++] = (struct pollfd){.fd = c->fd, .events = (short)(POLLIN | (c->snap >= 0 ? POLLOUT : 0))};
            if (c->snap >= 0) {
                int t = ms_until(c->started + CON_SEND_TIMEOUT_NS, now);
                if (t < timeout) timeout = t;
            }
        }
        if (C.quiet_uid + C.quiet_full) {
            int t = ms_until(C.log_at + CON_LOG_NS, now);
            if (timeout < 0 || t < timeout) timeout = t;
        }
        int r = poll(pf, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            fprintf(stderr, "weft: console: poll failed (%s): the console stops serving\n", strerror(errno));
            break;
        }
        if (r > 0 && pf[0].revents) break; /* weft__console_stop */
        /* bytes from clients are dropped: the console takes no commands;
         * room in a socket: more of its snapshot */
        for (int i = n - 1; r > 0 && i >= 2; i--) {
            if (!pf[i].revents) continue;
            client *c = &C.clients[i - 2];
            if (pf[i].revents & POLLIN) {
                char junk[512];
                ssize_t k = recv(c->fd, junk, sizeof junk, MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
                    drop_client(i - 2);
                    continue;
                }
            }
            if (pf[i].revents & (POLLERR | POLLNVAL)) drop_client(i - 2);
            else if (c->snap >= 0 && (pf[i].revents & (POLLOUT | POLLHUP))) {
                /* room again in a socket that was full: its peer reads */
                size_t was = c->off;
                if (pump(c) < 0) drop_client(i - 2);
                else if (c->off > was) c->read_at = mono_ns();
            }
        }
        now = mono_ns();
        /* a whole snapshot within the timeout, or the client goes */
        for (int i = C.nclients - 1; i >= 0; i--)
            if (C.clients[i].snap >= 0 && now - C.clients[i].started > CON_SEND_TIMEOUT_NS) drop_client(i);
        if (r > 0 && (pf[1].revents & POLLIN)) {
            int added = accept_one(now), had = C.nclients - 1; /* (had: the others) */
            if (added && !ok) drop_client(C.nclients - 1);
            else if (added) {
                if (!had || !s[cur ^ 1].t || now - s[cur ^ 1].t > 2 * CON_PERIOD_NS) {
                    /* no recent sample: take one now, show the first snapshot soon */
                    sample_take(&s[cur ^ 1]);
                    next_at = now + CON_FIRST_NS;
                } else {
                    int64_t soon = s[cur ^ 1].t + CON_FIRST_NS;
                    if (soon < next_at) next_at = soon > now ? soon : now;
                }
            }
        }
        if (C.nclients && mono_ns() >= next_at) {
            int e = tick(&s[cur], &s[cur ^ 1], started_at);
            if (e < 0) {
                fprintf(stderr, "weft: console: cannot build a snapshot: %s\n", strerror(-e));
                while (C.nclients) drop_client(C.nclients - 1);
            }
            if (e) cur ^= 1; /* (nothing built: the window goes on from the last sample) */
            next_at = mono_ns() + CON_PERIOD_NS;
        }
        log_summary(mono_ns(), 0);
    }
    log_summary(mono_ns(), 1);
    while (C.nclients) drop_client(C.nclients - 1);
    for (int k = 0; k < CON_MAX_SNAPS; k++) {
        int fd = C.snaps[k].fd;
        C.snaps[k] = (snap){.fd = -1};
        weft__fd_close_own(fd);
    }
    C.cpu[0] = C.cpu[1] = NULL;
    free(s[0].cpu);
    free(s[1].cpu);
    return NULL;
}

/* ---- start, stop, fork ------------------------------------------------------ */

static void console_fork_child(void) {
    if (!C.running) return;
    for (int i = 0; i < C.nclients; i++) weft__fd_close_own(C.clients[i].fd);
    C.nclients = 0;
    con_closefd(&C.lfd);
    con_closefd(&C.stop[0]);
    con_closefd(&C.stop[1]);
    for (int k = 0; k < CON_MAX_SNAPS; k++) {
        con_closefd(&C.snaps[k].fd);
        C.snaps[k].refs = 0;
    }
    C.running = 0; /* the path is the parent's: never unlinked here */
}

/* exit() without weft_shutdown (a server whose drain timed out): the file
 * goes all the same.  (A crash or _exit leaves it: the next start finds it
 * stale and replaces it.) */
static void console_atexit(void) {
    if (!C.running) return;
    struct stat st;
    if (lstat(C.path, &st) == 0 && st.st_dev == C.dev && st.st_ino == C.ino) unlink(C.path);
}

static void console_register_atfork(void) {
    pthread_atfork(NULL, NULL, console_fork_child);
    atexit(console_atexit);
}

int weft__console_start(const char *path) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, console_register_atfork);
    if (C.running) return 0;
    if (!path) path = getenv("WEFT_CONSOLE");
    if (!path || !*path || !strcmp(path, "0")) return 0;
    int r;
    char p[sizeof C.path];
    if (!strcmp(path, "1")) {
        char dir[64];
        r = default_dir(dir, sizeof dir);
        if (r < 0) return r;
        snprintf(p, sizeof p, "%s/%d.sock", dir, (int)getpid());
    } else {
        if (strlen(path) >= sizeof p) {
            fprintf(stderr, "weft: console: the path %s is longer than a Unix socket's %zu bytes\n", path,
                    sizeof p - 1);
            return -ENAMETOOLONG;
        }
        snprintf(p, sizeof p, "%s", path);
        r = check_dir(p);
        if (r < 0) return r;
    }
    r = clear_stale(p);
    if (r < 0) return r;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        r = -errno;
        goto fail0;
    }
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, p, strlen(p) + 1);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        r = -errno;
        goto fail1;
    }
    /* owner only, before anyone can connect (nobody can before listen) */
    struct stat st;
    if (chmod(p, 0600) < 0 || lstat(p, &st) < 0) {
        r = -errno;
        goto fail2;
    }
    if (listen(fd, CON_MAX_CLIENTS) < 0) {
        r = -errno;
        goto fail2;
    }
    if (pipe2(C.stop, O_CLOEXEC) < 0) {
        r = -errno;
        goto fail2;
    }
    C.lfd = weft__fd_own(fd);
    C.stop[0] = weft__fd_own(C.stop[0]);
    C.stop[1] = weft__fd_own(C.stop[1]);
    C.dev = st.st_dev;
    C.ino = st.st_ino;
    memcpy(C.path, p, sizeof p);
    C.nclients = 0;
    for (int k = 0; k < CON_MAX_SNAPS; k++) C.snaps[k] = (snap){.fd = -1};
    C.log_at = 0;
    C.quiet_uid = C.quiet_full = 0;
    atomic_store(&C.up, 0);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 * 1024);
    sigset_t all, prev;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &prev); /* the console takes no signals */
    int e = pthread_create(&C.th, &at, console_main, NULL);
    pthread_sigmask(SIG_SETMASK, &prev, NULL);
    pthread_attr_destroy(&at);
    if (e) {
        r = -e;
        con_closefd(&C.stop[0]);
        con_closefd(&C.stop[1]);
        C.lfd = -1;
        goto fail2;
    }
    pthread_setname_np(C.th, "weft-console");
    /* weft_init returns once its threads run (see mon_start in sched.c) */
    while (!atomic_load(&C.up)) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    C.running = 1;
    return 0;
fail2:
    unlink(p);
fail1:
    close(fd);
fail0:
    fprintf(stderr, "weft: console: cannot serve %s: %s\n", p, strerror(-r));
    return r;
}

void weft__console_stop(void) {
    if (!C.running) return;
    char b = 1;
    while (write(C.stop[1], &b, 1) < 0 && errno == EINTR) {
    }
    pthread_join(C.th, NULL);
    con_closefd(&C.lfd);
    con_closefd(&C.stop[0]);
    con_closefd(&C.stop[1]);
    /* our file only: not one someone put in its place */
    struct stat st;
    if (lstat(C.path, &st) == 0 && st.st_dev == C.dev && st.st_ino == C.ino) unlink(C.path);
    C.running = 0;
}
