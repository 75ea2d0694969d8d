/*
 * weft-top PID|SOCKET: the live console of a weft program, in a terminal.
 *
 * The program serves snapshots on a Unix socket (weft.h, "The live
 * console"; src/observe/console.c): started with WEFT_CONSOLE=PATH, or
 * WEFT_CONSOLE=1 for /tmp/weft-<uid>/<pid>.sock.  Given a PID, weft-top
 * reads WEFT_CONSOLE from /proc/PID/environ (a relative path is taken from
 * /proc/PID/cwd); when the environment says nothing (the program set
 * weft_runtime_opts.console itself) it tries the default path of that pid and
 * owner.  The environment first because it names any path the user chose;
 * the default path second because it needs nothing but the pid.  A PID
 * given is checked against the socket's peer (SO_PEERCRED): a socket
 * another process serves is refused.
 *
 * The screen: plain ANSI escapes, no curses (the alternate screen, the
 * cursor hidden, raw keys).  Each snapshot (one a second) is parsed
 * (apps/common/json.c) and drawn: the header (pid, program, uptime, carriers, I/O
 * backend, vthreads by state, totals and rates; where the program runs
 * foreign code, how many vthreads are foreign, have their own TLS or wait
 * in a trapped call, and the trapped calls' rate), one row per carrier (busy
 * %, runnable, switches, steals and parks per second, what it runs), the
 * vthreads grouped by call site (a wait inside a trapped call as "trapped
 * futex", at the program's frame that made it), scopes, executors and their queues,
 * pinned and hog events, and the slowest sleepers -- each section cut to
 * what the terminal's height leaves, saying how many rows it left out.
 * Rates are differences between consecutive snapshots over the console's
 * window_ns.  q (or Q, or Ctrl-C, SIGTERM) quits; the terminal is restored
 * however it ends (atexit and the signal path both restore it).
 *
 * --once prints one snapshot drawn as text (no escapes) and exits; --json
 * prints snapshots as the console sent them (one JSON object each, a line
 * apart), and with --once just one: for scripts.
 *
 * Why a console cannot be watched is said, not guessed: connect's EACCES
 * is a directory the user may not enter or a socket whose mode shuts him
 * out (both named, with owner and mode); a connection closed before a
 * snapshot is another user's console when the peer's uid (SO_PEERCRED)
 * says so; a full console says so in its first line ("weft-console full
 * N").  The header's peak and started are at least the vthreads listed
 * (the counters are read before the dump lists them); a call site with a
 * function but no file:line shows the function, as the dump's text does.
 *
 * Exit status: 0; 1 the console could not be reached or spoke nonsense
 * (the message says which); 2 a bad command line.
 */
#define _GNU_SOURCE
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

static const char *prog = "weft-top";
static const char *console_path = "?"; /* for messages */

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: %s [--once] [--json] PID|SOCKET\n"
            "  Shows a weft program's carriers, vthreads, scopes, executors, pinned events\n"
            "  and slowest sleepers, refreshed every second.  The program must serve its\n"
            "  console: run it with WEFT_CONSOLE=1 (socket /tmp/weft-UID/PID.sock) or\n"
            "  WEFT_CONSOLE=/path/to.sock.  q or Ctrl-C quits.\n"
            "  --once   print one snapshot as text and exit\n"
            "  --json   print the snapshots as JSON (with --once: one, then exit)\n"
            "  --help   this text\n",
            prog);
}

/* ---- finding and reading the socket ------------------------------------- */

/* WEFT_CONSOLE's value in /proc/PID/environ into out; 0, or -1 if absent
 * or unreadable (*why says which). */
static int environ_console(int pid, char *out, size_t cap, const char **why) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "no such process" : strerror(errno);
        return -1;
    }
    size_t cap2 = 1 << 16, n = 0;
    char *buf = malloc(cap2 + 1);
    if (!buf) die("out of memory");
    for (;;) {
        if (n == cap2) {
            cap2 *= 2;
            char *b2 = realloc(buf, cap2 + 1);
            if (!b2) die("out of memory");
            buf = b2;
        }
        ssize_t k = read(fd, buf + n, cap2 - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
    }
    close(fd);
    buf[n] = 0;
    int r = -1;
    *why = "its environment has no WEFT_CONSOLE";
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        if (!strncmp(buf + i, "WEFT_CONSOLE=", 13)) {
            snprintf(out, cap, "%s", buf + i + 13);
            r = 0;
        }
    }
    free(buf);
    return r;
}

/* The effective uid of process pid (from /proc/PID/status), or -1. */
static long proc_euid(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    long uid = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned r, e;
        if (sscanf(line, "Uid: %u %u", &r, &e) == 2) uid = e;
    }
    fclose(f);
    return uid;
}

/* The socket's path for a pid (see the top comment). */
static void socket_of_pid(int pid, char *out, size_t cap) {
    char v[2048];
    const char *why = NULL;
    int have = environ_console(pid, v, sizeof v, &why) == 0 && *v && strcmp(v, "0");
    if (!have && why && !strcmp(why, "no such process")) die("no process %d", pid);
    long uid = proc_euid(pid);
    if (have && strcmp(v, "1")) {
        if (v[0] == '/') snprintf(out, cap, "%s", v);
        else {
            char cwdl[64], cwd[2048];
            snprintf(cwdl, sizeof cwdl, "/proc/%d/cwd", pid);
            ssize_t k = readlink(cwdl, cwd, sizeof cwd - 1);
            if (k < 0) die("process %d: WEFT_CONSOLE=%s is relative and its directory is unreadable: %s", pid, v, strerror(errno));
            cwd[k] = 0;
            snprintf(out, cap, "%s/%s", cwd, v);
        }
        return;
    }
    if (uid < 0) die("no process %d", pid);
    snprintf(out, cap, "/tmp/weft-%ld/%d.sock", uid, pid);
    struct stat st;
    if (!have && stat(out, &st) < 0 && errno == EACCES)
        die("process %d runs as uid %ld and you are uid %u: its console's directory /tmp/weft-%ld is closed to "
            "you (permissions); a console serves only its owner and root",
            pid, uid, (unsigned)geteuid(), uid);
    if (!have && stat(out, &st) < 0)
        die("process %d serves no console (%s, and %s does not exist): start it with WEFT_CONSOLE=1, or pass the "
            "socket's path",
            pid, why ? why : "no WEFT_CONSOLE", out);
}

/* Why connect(2) said EACCES: the directory, or the socket's mode -- and
 * whose they are.  Dies with the answer. */
static void die_access(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    unsigned me = (unsigned)geteuid();
    struct stat ds, ss;
    if (faccessat(AT_FDCWD, dir, X_OK, AT_EACCESS) < 0 && errno == EACCES) {
        if (stat(dir, &ds) == 0)
            die("cannot reach %s: you (uid %u) may not enter its directory %s (uid %u's, mode %04o); a console "
                "serves only its owner and root",
                path, me, dir, (unsigned)ds.st_uid, (unsigned)(ds.st_mode & 07777));
        die("cannot reach %s: you (uid %u) may not enter its directory %s (permissions)", path, me, dir);
    }
    if (stat(path, &ss) == 0 && ss.st_uid != me)
        die("cannot connect to %s: it is uid %u's console (mode %04o) and you are uid %u; a console serves only its "
            "owner and root",
            path, (unsigned)ss.st_uid, (unsigned)(ss.st_mode & 07777), me);
    die("cannot connect to %s: permission denied (its mode does not let you, uid %u, write to it)", path, me);
}

static int connect_to(const char *path, int pid) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) die("%s: path too long for a Unix socket", path);
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        if (e == EACCES) die_access(path);
        die("cannot connect to %s: %s%s", path, strerror(e),
            e == ECONNREFUSED ? " (nobody serves it: the program has ended?)" : "");
    }
    if (pid > 0) {
        struct ucred cr;
        socklen_t l = sizeof cr;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && cr.pid != pid)
            die("%s is served by process %d, not %d: refused", path, (int)cr.pid, pid);
    }
    return fd;
}

/* The console closed the connection before a snapshot: why.  Another
 * user's console closes without a byte (it tells a stranger nothing);
 * a full one says so in its first line (rx_frame). */
static void die_closed(int fd, const char *path) {
    struct ucred cr;
    socklen_t l = sizeof cr;
    unsigned me = (unsigned)geteuid();
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && l == sizeof cr && cr.uid != me && me != 0)
        die("%s is the console of process %d, which runs as uid %u; you are uid %u, and a console serves only "
            "its owner and root: it closed the connection",
            path, (int)cr.pid, (unsigned)cr.uid, me);
    die("the console at %s closed the connection before sending a snapshot (its program is ending?)", path);
}

/* A snapshot being received: "weft-console 1 <bytes>\n", then the bytes. */
typedef struct rx {
    char *buf;
    size_t n, cap;
} rx;

/* Appends what fd has to r (one blocking read: called when poll said
 * so); *ended at the end of the stream. */
static void rx_more(rx *r, int fd, int *ended) {
    if (r->cap - r->n < 65536) {
        size_t cap = r->cap ? r->cap * 2 : 1 << 20;
        char *b = realloc(r->buf, cap);
        if (!b) die("out of memory");
        r->buf = b;
        r->cap = cap;
    }
    ssize_t k = read(fd, r->buf + r->n, r->cap - r->n);
    if (k < 0 && errno == EINTR) return;
    if (k < 0) die("reading the console: %s", strerror(errno));
    if (k == 0) *ended = 1;
    r->n += (size_t)k;
}

/* A whole frame at the start of r: its payload's offset and length. */
static int rx_frame(rx *r, size_t *off, size_t *len) {
    char *nl = memchr(r->buf, '\n', r->n < 64 ? r->n : 64);
    if (!nl) {
        if (r->n >= 64) die("the console sent something that is not a snapshot frame");
        return 0;
    }
    unsigned ver;
    unsigned long long bytes;
    int most;
    if (sscanf(r->buf, "weft-console full %d\n", &most) == 1)
        die("the console at %s is full: it serves %d clients at once, and none of them has left its snapshots "
            "unread long enough to lose its place; try again when one has quit",
            console_path, most);
    if (sscanf(r->buf, "weft-console %u %llu\n", &ver, &bytes) != 2)
        die("the console sent something that is not a snapshot frame");
    if (ver != 1) die("the console speaks version %u; this weft-top knows version 1", ver);
    size_t head = (size_t)(nl - r->buf) + 1;
    if (r->n - head < bytes) {
        /* room for the whole frame */
        if (r->cap < head + bytes + 65536) {
            char *b = realloc(r->buf, head + bytes + 65536);
            if (!b) die("out of memory");
            r->buf = b;
            r->cap = head + bytes + 65536;
        }
        return 0;
    }
    *off = head;
    *len = (size_t)bytes;
    return 1;
}

static void rx_consume(rx *r, size_t upto) {
    memmove(r->buf, r->buf + upto, r->n - upto);
    r->n -= upto;
}

/* ---- the terminal --------------------------------------------------------- */

static struct termios saved_tio;
static int tty_raw;
static int sigpipe_fd[2] = {-1, -1};

static void tty_restore(void) {
    if (!tty_raw) return;
    tty_raw = 0;
    const char *s = "\x1b[0m\x1b[?25h\x1b[?1049l";
    ssize_t w = write(1, s, strlen(s));
    (void)w;
    tcsetattr(0, TCSAFLUSH, &saved_tio);
}

static void on_signal(int sig) {
    char b = (char)sig;
    ssize_t w = write(sigpipe_fd[1], &b, 1);
    (void)w;
}

static void tty_setup(void) {
    if (tcgetattr(0, &saved_tio) < 0) die("standard input is not a terminal (use --once or --json)");
    struct termios t = saved_tio;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tcsetattr(0, TCSAFLUSH, &t);
    tty_raw = 1;
    atexit(tty_restore);
    const char *s = "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J";
    ssize_t w = write(1, s, strlen(s));
    (void)w;
}

static void term_size(int *rows, int *cols) {
    struct winsize ws;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    } else {
        *rows = 50;
        *cols = 132;
    }
}

/* ---- drawing ---------------------------------------------------------------- */

/* The screen as lines, each cut to the width; drawn in one write. */
typedef struct screen {
    char *buf;
    size_t n, cap;
    int rows, cols, used;
    int ansi;
} screen;

static void reserve(screen *s, size_t k) {
    while (s->cap - s->n < k) {
        s->cap = s->cap ? s->cap * 2 : 65536;
        s->buf = realloc(s->buf, s->cap);
        if (!s->buf) die("out of memory");
    }
}

__attribute__((format(printf, 2, 3))) static void line(screen *s, const char *fmt, ...) {
    if (s->used >= s->rows) return;
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (k > (int)sizeof tmp - 1) k = sizeof tmp - 1;
    if (k > s->cols) k = s->cols;
    reserve(s, (size_t)k + 16);
    /* on the terminal the line break goes before a row, not after: a
     * newline after the screen's last row would scroll the title row off
     * (seen at 120x30 and 160x50 once a section filled the screen) */
    if (s->ansi && s->used) {
        memcpy(s->buf + s->n, "\r\n", 2);
        s->n += 2;
    }
    memcpy(s->buf + s->n, tmp, (size_t)k);
    s->n += (size_t)k;
    if (s->ansi) {
        memcpy(s->buf + s->n, "\x1b[K", 3);
        s->n += 3;
    } else {
        s->buf[s->n++] = '\n';
    }
    s->used++;
}

/* Rows a section may take: what is left, less `reserve` for later ones. */
static int room(const screen *s, int reserve) {
    int r = s->rows - s->used - reserve;
    return r < 1 ? 1 : r;
}

static void fmt_dur(char *b, size_t cap, double ns) {
    double s = ns / 1e9;
    if (s < 0) s = 0;
    if (s < 60) snprintf(b, cap, "%.3f s", s);
    else if (s < 3600) snprintf(b, cap, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(b, cap, "%dh%02dm%02ds", (int)s / 3600, (int)s % 3600 / 60, (int)s % 60);
}

static void fmt_rate(char *b, size_t cap, double v) {
    if (v < 0) snprintf(b, cap, "-");
    else if (v >= 1e9) snprintf(b, cap, "%.1fG", v / 1e9);
    else if (v >= 1e6) snprintf(b, cap, "%.1fM", v / 1e6);
    else if (v >= 1e4) snprintf(b, cap, "%.1fk", v / 1e3);
    else snprintf(b, cap, "%.0f", v);
}

/* The previous snapshot's counters, for rates. */
#define MAXC 1024
typedef struct prevc {
    int have;
    double switches, steals, parks, trapped;
    double c_switches[MAXC], c_steals[MAXC], c_parks[MAXC];
    int c_have[MAXC];
} prevc;

typedef struct site {
    const char *site, *why;
    int count;
} site;

static int by_count(const void *a, const void *b) {
    const site *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    int c = strcmp(x->site, y->site);
    return c ? c : strcmp(x->why, y->why);
}

static int by_since(const void *a, const void *b) {
    double x = json_num(json_get(*(const json *const *)a, "since_ns"), 0);
    double y = json_num(json_get(*(const json *const *)b, "since_ns"), 0);
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Where vthread v's blocking call was made, as the dump's text says it:
 * "file:line (function)", or the function alone when the frame has no line
 * information (a release build's), else "(no call site)". */
static const char *site_label(const json *v, char *b, size_t cap) {
    const char *at = json_str(json_get(v, "site"), NULL), *fn = json_str(json_get(v, "site_function"), NULL);
    if (at && fn) snprintf(b, cap, "%s (%s)", at, fn);
    else if (at) snprintf(b, cap, "%s", at);
    else if (fn) snprintf(b, cap, "%s (no file:line)", fn);
    else snprintf(b, cap, "(no call site)");
    return b;
}

#define LABEL 256
#define WHY 40 /* "trapped " and a system call's name */

static void draw(screen *s, const json *root, prevc *pv) {
    const json *con = json_get(root, "weft_console"), *dump = json_get(root, "weft_dump");
    if (!con || !dump) die("the snapshot lacks weft_console or weft_dump");
    const json *st = json_get(con, "stats");
    double window = json_num(json_get(con, "window_ns"), 0);
    int rates = pv->have && window > 0;
    char up[32], b1[16], b2[16], b3[16];
    fmt_dur(up, sizeof up, json_num(json_get(con, "uptime_ns"), 0));
    /* vthreads by state, and parked ones by what they wait on */
    const json *vts = json_get(dump, "vthreads");
    int nrun = 0, nrunnable = 0, nparked = 0, nnew = 0, nother = 0, nown = 0, nforeign = 0, nintrap = 0;
    size_t nv = vts ? vts->n : 0;
    site *sites = calloc(nv + 1, sizeof *sites);
    const json **sleepers = calloc(nv + 1, sizeof *sleepers);
    char *labels = calloc(nv + 1, LABEL), *whybuf = calloc(nv + 1, WHY);
    if (!sites || !sleepers || !labels || !whybuf) die("out of memory");
    int nsites = 0, nsleep = 0;
    char whys[512] = "";
    struct { const char *why; int n; } wc[32];
    int nwc = 0;
    for (const json *v = vts ? vts->first : NULL; v; v = v->next) {
        const char *state = json_str(json_get(v, "state"), "?");
        if (!strcmp(state, "running")) nrun++;
        else if (!strcmp(state, "runnable")) nrunnable++;
        else if (!strcmp(state, "new")) nnew++;
        else if (!strcmp(state, "parked")) nparked++;
        else nother++;
        const char *why = json_str(json_get(v, "waiting_on"), strcmp(state, "parked") ? state : "?");
        const char *where = site_label(v, labels + (size_t)nsites * LABEL, LABEL);
        nown += json_get(v, "own_tls") != NULL;
        nforeign += json_get(v, "foreign") != NULL;
        /* a wait inside a call the system call trap made for the vthread:
         * the call is what it waits in ("trapped futex"), its site the
         * program's frame (the dump's) */
        const json *tr = json_get(v, "trapped");
        if (tr) {
            char *w = whybuf + (size_t)nsites * WHY;
            snprintf(w, WHY, "trapped %s", json_str(json_get(tr, "call"), "?"));
            why = w;
            nintrap++;
        }
        if (!strcmp(state, "parked")) {
            int i;
            for (i = 0; i < nwc && strcmp(wc[i].why, why); i++) {
            }
            if (i == nwc && nwc < 32) wc[nwc++] = (typeof(wc[0])){why, 0};
            if (i < nwc) wc[i].n++;
            if (!strcmp(why, "sleep")) sleepers[nsleep++] = v;
        }
        sites[nsites++] = (site){where, why, 1};
    }
    /* group by site: sort, then merge equal neighbours */
    qsort(sites, (size_t)nsites, sizeof *sites, by_count);
    int ng = 0;
    for (int i = 0; i < nsites; i++) {
        if (ng && !strcmp(sites[ng - 1].site, sites[i].site) && !strcmp(sites[ng - 1].why, sites[i].why))
            sites[ng - 1].count++;
        else
            sites[ng++] = sites[i];
    }
    qsort(sites, (size_t)ng, sizeof *sites, by_count);
    for (int i = 0; i < nwc; i++) {
        size_t l = strlen(whys);
        snprintf(whys + l, sizeof whys - l, "%s%d %s", i ? ", " : "", wc[i].n, wc[i].why);
    }

    double sw = json_num(json_get(st, "switches"), 0), stl = json_num(json_get(st, "steals"), 0),
           pk = json_num(json_get(st, "parks"), 0);
    if (s->ansi) line(s, "\x1b[7mweft-top\x1b[0m  pid %d  %s  uptime %s  carriers %.0f (+%.0f spares)  io %s",
                      (int)json_num(json_get(con, "pid"), 0), json_str(json_get(con, "program"), "?"), up,
                      json_num(json_get(st, "carriers"), 0), json_num(json_get(st, "spares"), 0),
                      json_str(json_get(con, "io"), "?"));
    else line(s, "weft-top  pid %d  %s  uptime %s  carriers %.0f (+%.0f spares)  io %s",
              (int)json_num(json_get(con, "pid"), 0), json_str(json_get(con, "program"), "?"), up,
              json_num(json_get(st, "carriers"), 0), json_num(json_get(st, "spares"), 0),
              json_str(json_get(con, "io"), "?"));
    /* the counters were read before the dump listed the vthreads, and more
     * may have started in between: the peak (and the started) are at least
     * what is listed */
    double started = json_num(json_get(st, "started"), 0), peak = json_num(json_get(st, "peak"), 0);
    if (started < (double)nv) started = (double)nv;
    if (peak < (double)nv) peak = (double)nv;
    line(s, "vthreads %zu: %d running, %d runnable, %d parked%s%s%s, %d new%s  (started %.0f, peak %.0f)", nv, nrun,
         nrunnable, nparked, nwc ? " (" : "", whys, nwc ? ")" : "", nnew, nother ? ", others" : "", started, peak);
    fmt_rate(b1, sizeof b1, rates ? (sw - pv->switches) * 1e9 / window : -1);
    fmt_rate(b2, sizeof b2, rates ? (stl - pv->steals) * 1e9 / window : -1);
    fmt_rate(b3, sizeof b3, rates ? (pk - pv->parks) * 1e9 / window : -1);
    line(s, "switches %.0f (%s/s)  steals %.0f (%s/s)  parks %.0f (%s/s)  injected %.0f  pinned events %.0f  hog events %.0f",
         sw, b1, stl, b2, pk, b3, json_num(json_get(con, "injected"), 0), json_num(json_get(st, "pinned"), 0),
         json_num(json_get(st, "hogs"), 0));
    pv->switches = sw;
    pv->steals = stl;
    pv->parks = pk;
    /* foreign code (weft-run, the system call trap, own TLS): said when
     * there is any */
    double trp = json_num(json_get(st, "trapped"), 0);
    if (nforeign || nown || trp > 0) {
        fmt_rate(b1, sizeof b1, rates ? (trp - pv->trapped) * 1e9 / window : -1);
        line(s, "foreign code: %d vthread%s foreign, %d with own TLS, %d parked in trapped calls; trapped calls "
                "%.0f (%s/s)",
             nforeign, nforeign == 1 ? "" : "s", nown, nintrap, trp, b1);
    }
    pv->trapped = trp;
    line(s, "%s", "");

    /* carriers: the console's counters joined to the dump's states */
    const json *cc = json_get(con, "carrier_counters"), *cs = json_get(dump, "carrier_states");
    line(s, "%sCARRIER GROUP STATE       BUSY%%  RUNNABLE  SWITCH/s   STEAL/s    PARK/s  RUNNING%s", s->ansi ? "\x1b[1m" : "",
         s->ansi ? "\x1b[0m" : "");
    int ncar = cc ? (int)cc->n : 0, shown = 0, maxrows = room(s, 14);
    for (const json *c = cc ? cc->first : NULL; c; c = c->next) {
        int idx = (int)json_num(json_get(c, "index"), -1);
        const json *state = NULL;
        for (const json *x = cs ? cs->first : NULL; x; x = x->next)
            if ((int)json_num(json_get(x, "index"), -2) == idx) state = x;
        double bsy = json_num(json_get(c, "busy_pct"), -1);
        char busy[16];
        if (bsy < 0) snprintf(busy, sizeof busy, "-");
        else snprintf(busy, sizeof busy, "%.1f", bsy);
        double csw = json_num(json_get(c, "switches"), 0), cst = json_num(json_get(c, "steals"), 0),
               cpk = json_num(json_get(c, "parks"), 0);
        int ok = idx >= 0 && idx < MAXC && rates && pv->c_have[idx];
        fmt_rate(b1, sizeof b1, ok ? (csw - pv->c_switches[idx]) * 1e9 / window : -1);
        fmt_rate(b2, sizeof b2, ok ? (cst - pv->c_steals[idx]) * 1e9 / window : -1);
        fmt_rate(b3, sizeof b3, ok ? (cpk - pv->c_parks[idx]) * 1e9 / window : -1);
        if (idx >= 0 && idx < MAXC) {
            pv->c_switches[idx] = csw;
            pv->c_steals[idx] = cst;
            pv->c_parks[idx] = cpk;
            pv->c_have[idx] = 1;
        }
        char running[64] = "";
        double rid = json_num(json_get(state, "running"), 0);
        if (rid > 0) snprintf(running, sizeof running, "#%.0f", rid);
        const char *sname = json_str(json_get(state, "state"), "?");
        char st2[16];
        snprintf(st2, sizeof st2, "%s%s", sname, json_get(c, "spare") && json_num(json_get(c, "spare"), 0) ? "*" : "");
        if (ncar <= maxrows || shown < maxrows - 1)
            line(s, "%7d %5.0f %-10s %6s %9.0f %9s %9s %9s  %s", idx, json_num(json_get(c, "group"), 0), st2, busy,
                 json_num(json_get(c, "runnable"), 0), b1, b2, b3, running);
        shown++;
    }
    if (ncar > maxrows) line(s, "  ... %d more carriers", ncar - (maxrows - 1));
    line(s, "%s", "");

    /* vthreads by call site */
    line(s, "%sVTHREADS BY CALL SITE%s", s->ansi ? "\x1b[1m" : "", s->ansi ? "\x1b[0m" : "");
    maxrows = room(s, 10);
    for (int i = 0; i < ng; i++) {
        if (i == maxrows - 1 && ng > maxrows) {
            line(s, "  ... %d more call sites", ng - i);
            break;
        }
        line(s, "%7d  %-16s %s", sites[i].count, sites[i].why, sites[i].site);
    }
    if (!ng) line(s, "  (no vthreads)");
    line(s, "%s", "");

    /* pinned and hog events: open ones from the carriers' states */
    int npin = 0;
    for (const json *x = cs ? cs->first : NULL; x; x = x->next) {
        const char *sn = json_str(json_get(x, "state"), "");
        if (strcmp(sn, "pinned") && strcmp(sn, "hog")) continue;
        char d[32];
        fmt_dur(d, sizeof d, json_num(json_get(x, "since_ns"), 0));
        if (!strcmp(sn, "pinned"))
            line(s, "PINNED  carrier %.0f in %s for %s by #%.0f \"%s\"", json_num(json_get(x, "index"), 0),
                 json_str(json_get(x, "syscall"), "?"), d, json_num(json_get(x, "vthread"), 0),
                 json_str(json_get(x, "name"), ""));
        else
            line(s, "HOG     carrier %.0f held for %s by #%.0f \"%s\"", json_num(json_get(x, "index"), 0), d,
                 json_num(json_get(x, "vthread"), 0), json_str(json_get(x, "name"), ""));
        npin++;
    }
    if (!npin) line(s, "pinned/hog: none now (%.0f pinned and %.0f hog events so far)", json_num(json_get(st, "pinned"), 0),
                    json_num(json_get(st, "hogs"), 0));

    /* scopes */
    const json *cont = json_get(dump, "containers");
    int nscopes = cont && cont->n ? (int)cont->n - 1 : 0;
    line(s, "%sSCOPES%s %d open", s->ansi ? "\x1b[1m" : "", s->ansi ? "\x1b[0m" : "", nscopes);
    maxrows = room(s, 8);
    int k = 0;
    for (const json *x = cont ? cont->first : NULL; x; x = x->next) {
        const char *name = json_str(json_get(x, "container"), "?");
        if (!strcmp(name, "root")) continue;
        if (k == 3 && nscopes > 4) {
            line(s, "  ... %d more scopes", nscopes - k);
            break;
        }
        (void)maxrows;
        const json *own = json_get(x, "owner");
        char owner[48];
        if (own && own->type == JSON_NUM) snprintf(owner, sizeof owner, "#%.0f", own->num);
        else snprintf(owner, sizeof owner, "%s", json_str(own, "?"));
        line(s, "  %s in %s, owner %s, %s, %s, %.0f tasks, %.0f running", name, json_str(json_get(x, "parent"), "?"),
             owner, json_str(json_get(x, "policy"), "?"), json_str(json_get(x, "state"), "?"),
             json_num(json_get(x, "tasks"), 0), json_num(json_get(x, "running"), 0));
        k++;
    }

    /* executors and their queues */
    const json *ex = json_get(dump, "executors");
    line(s, "%sEXECUTORS%s %zu", s->ansi ? "\x1b[1m" : "", s->ansi ? "\x1b[0m" : "", ex ? ex->n : (size_t)0);
    k = 0;
    for (const json *x = ex ? ex->first : NULL; x; x = x->next) {
        if (k == 3 && ex->n > 4) {
            line(s, "  ... %zu more executors", ex->n - (size_t)k);
            break;
        }
        line(s, "  %-24s queued %.0f (peak %.0f)  threads %.0f live (peak %.0f)  submitted %.0f  completed %.0f  rejected %.0f%s",
             json_str(json_get(x, "kind"), "?"), json_num(json_get(x, "queued"), 0),
             json_num(json_get(x, "queued_peak"), 0), json_num(json_get(x, "threads_live"), 0),
             json_num(json_get(x, "threads_peak"), 0), json_num(json_get(x, "submitted"), 0),
             json_num(json_get(x, "completed"), 0), json_num(json_get(x, "rejected"), 0),
             json_num(json_get(x, "shutdown"), 0) ? " (shut down)" : "");
        k++;
    }

    /* the slowest sleepers: asleep the longest */
    qsort(sleepers, (size_t)nsleep, sizeof *sleepers, by_since);
    line(s, "%sSLOWEST SLEEPERS%s %d asleep", s->ansi ? "\x1b[1m" : "", s->ansi ? "\x1b[0m" : "", nsleep);
    maxrows = room(s, 0);
    for (int i = 0; i < nsleep && i < maxrows; i++) {
        if (i == maxrows - 1 && nsleep > maxrows) { /* the man page's promise: say what was left out */
            line(s, "  ... %d more sleepers", nsleep - i);
            break;
        }
        const json *v = sleepers[i];
        char d1[32], d2[32], where[LABEL];
        fmt_dur(d1, sizeof d1, json_num(json_get(v, "since_ns"), 0));
        fmt_dur(d2, sizeof d2, json_num(json_get(v, "until_ns"), 0));
        line(s, "  #%-8.0f %-24s asleep %s, %s more  at %s", json_num(json_get(v, "id"), 0),
             json_str(json_get(v, "name"), ""), d1, d2, site_label(v, where, sizeof where));
    }
    pv->have = 1;
    free(labels);
    free(whybuf);
    free(sites);
    free(sleepers);
}

/* ---- main ------------------------------------------------------------------- */

int main(int argc, char **argv) {
    int once = 0, as_json = 0;
    const char *target = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--once")) once = 1;
        else if (!strcmp(argv[i], "--json")) as_json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "%s: unknown option %s\n", prog, argv[i]);
            usage(stderr);
            return 2;
        } else if (target) {
            fprintf(stderr, "%s: one PID or SOCKET, not two (%s, %s)\n", prog, target, argv[i]);
            return 2;
        } else target = argv[i];
    }
    if (!target) {
        usage(stderr);
        return 2;
    }
    char path[4096];
    int pid = 0;
    const char *q = target;
    while (*q && isdigit((unsigned char)*q)) q++;
    if (!*q) {
        pid = atoi(target);
        if (pid <= 0) die("%s is not a process id", target);
        socket_of_pid(pid, path, sizeof path);
    } else {
        snprintf(path, sizeof path, "%s", target);
    }
    signal(SIGPIPE, SIG_IGN);
    console_path = path;
    int fd = connect_to(path, pid);
    int ui = !once && !as_json;
    if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) < 0) die("pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGWINCH, &sa, NULL);
    if (ui) tty_setup();
    rx r = {0};
    prevc *pv = calloc(1, sizeof *pv);
    if (!pv) die("out of memory");
    screen scr = {0};
    int ended = 0, got = 0;
    for (;;) {
        struct pollfd pf[3] = {{.fd = fd, .events = POLLIN}, {.fd = sigpipe_fd[0], .events = POLLIN},
                               {.fd = 0, .events = POLLIN}};
        int n = poll(pf, ui ? 3 : 2, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("poll: %s", strerror(errno));
        if (pf[1].revents) {
            char sig = 0;
            int quit = 0;
            while (read(sigpipe_fd[0], &sig, 1) == 1)
                if (sig != SIGWINCH) quit = 1;
            if (quit) break;
        }
        if (ui && (pf[2].revents & POLLIN)) {
            char keys[64];
            ssize_t k = read(0, keys, sizeof keys);
            if (k > 0 && (memchr(keys, 'q', (size_t)k) || memchr(keys, 'Q', (size_t)k) || memchr(keys, 3, (size_t)k))) break;
        }
        if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        rx_more(&r, fd, &ended);
        size_t off, len;
        while (rx_frame(&r, &off, &len)) {
            got++;
            if (as_json) {
                fwrite(r.buf + off, 1, len, stdout);
                if (len && r.buf[off + len - 1] != '\n') fputc('\n', stdout);
                fflush(stdout);
            } else {
                const json *root;
                char err[160];
                json_doc *d = json_parse(r.buf + off, len, &root, err, sizeof err);
                if (!d) die("the console's snapshot does not parse: %s", err);
                scr.n = 0;
                scr.used = 0;
                scr.ansi = ui;
                term_size(&scr.rows, &scr.cols);
                if (!ui) scr.rows = 1 << 20, scr.cols = 1 << 10;
                if (ui) {
                    reserve(&scr, 3);
                    memcpy(scr.buf, "\x1b[H", 3);
                    scr.n = 3;
                }
                draw(&scr, root, pv);
                if (ui) {
                    reserve(&scr, 3);
                    memcpy(scr.buf + scr.n, "\x1b[J", 3);
                    scr.n += 3;
                }
                json_free(d);
                ssize_t w;
                for (size_t o = 0; o < scr.n; o += (size_t)w) {
                    w = write(1, scr.buf + o, scr.n - o);
                    if (w <= 0) {
                        if (w < 0 && errno == EINTR) { w = 0; continue; }
                        die("writing the screen: %s", strerror(errno));
                    }
                }
            }
            rx_consume(&r, off + len);
            if (once) goto done;
        }
        if (ended) {
            if (ui) tty_restore();
            if (!got) die_closed(fd, path);
            fprintf(stderr, "%s: the program has ended (its console closed)\n", prog);
            break;
        }
    }
done:
    if (ui) tty_restore();
    close(fd);
    free(r.buf);
    free(scr.buf);
    free(pv);
    return 0;
}
