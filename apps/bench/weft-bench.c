/*
 * weft-bench -- the benchmark program of weft: reproduces the figures of the
 * articles weft is built from (see /work/shared/seeds/README.md) and puts
 * them next to the peer programs' (Go, Java, C; ../shared/peers/runtime
 * beside the source tree).
 *
 *   weft-bench EXPERIMENT [options]      (weft-bench --help)
 *
 * Experiments (only weft's public API, weft.h):
 *
 *   threads      How many threads that block forever can one process create,
 *                how fast, at what memory cost?  Daemon vthreads that each
 *                park in weft_sleep_until(INT64_MAX) (--platform: pthreads
 *                with 64 KiB stacks waiting on a condvar), until -n
 *                (1,000,000) exist or creation fails.  create_s: first spawn
 *                until every thread has reached its blocking call;
 *                rss_per_task_b: growth of VmRSS per thread.  On a failure,
 *                stopped_by= names the error and, for pthreads, limit= the
 *                system limit that was hit.  Article: platform threads
 *                crashed at 32,539; 14,625,956 virtual threads on 64 GB.
 *                Peers: park-many.
 *   sleep-tasks  -n (100,000) tasks that each sleep --sleep-ms (1000), all
 *                waited for, on --executor virtual (one vthread per task),
 *                thread-per-task (one pthread each) or pool:K (K pthreads
 *                and a queue), or on weft's executors as the article has
 *                them: fixed:K (weft_executor_create_fixed), cached
 *                (weft_executor_create_cached), virtual-executor
 *                (weft_executor_create_virtual).  wall_s, user_s, sys_s,
 *                peak_rss_mib; for weft's executors also threads_started,
 *                threads_peak and queued_peak.
 *                Article: thread-per-task 18.77 s, cached pool 11.52 s,
 *                virtual threads 2.62 s.  Peers: sleep-tasks.
 *   micro        switch (weft_yield between two vthreads on one carrier),
 *                switch-tls (the same with their own TLS blocks),
 *                spawn-join (spawn and join trivial vthreads, 1000 at a
 *                time), pingpong (weft_park/weft_unpark hand-off) and
 *                pingpong-cross (the same, pinned to two carriers).  Each
 *                runs in a runtime of its own.  Peers: switch, spawn-join.
 *   http-delay   weft-httpd (a separate process) where every request sleeps
 *                100 ms, under ab -r without keep-alive at each --conc point
 *                (C:N; default 50..1000 with 3000 requests, and 1000:20000),
 *                per --models (virtual, pool:200); --big adds C=10,000 with
 *                100,000 requests through weft-load.  rps, pct_of_limit
 *                (Little's law: C / 0.1 s), pct_of_ab_ceiling (ab sends
 *                its first request alone: n requests need 1 + ceil((n-1)/C)
 *                delays whatever the server), mean_ms, p95_ms, failed,
 *                cpu_us_per_req (the server's).  Article: req/s virtual
 *                455..5071, platform (200 threads) 467..1755.  Peers:
 *                delay100 (../shared/peers/http/run.sh).
 *   http-every10 the same with every 10th request sleeping 2 s, ab -r -c 100
 *                -n 10000, models virtual, thread, pool:200.  Article:
 *                491.98 req/s (limit 500).  Peers: delay2s-every10.
 *   parallel     CPU-bound work (issue 12): weft_parallel_reduce against K
 *                pthreads with a static split, OpenMP schedule(dynamic)
 *                (weft-par-omp, bench/parallel/omp.c) and Java 17 parallel
 *                streams (bench/parallel/peer.sh) on a uniform workload (sum
 *                of sqrt(i), i < 10^9) and a skewed one (a 4096 x 4096
 *                Mandelbrot, a row per index), same run (exp_parallel.c);
 *                and the mixed run: weft-httpd's HTTP p99 with a CPU job in
 *                the same process, none / shared pool / own 1-carrier group
 *                (bench/mixed.sh).
 *   http-db      http-delay with a real database (issue 11): every GET /db
 *                runs SELECT pg_sleep(0.1) through blocking libpq
 *                (examples/http_db.c, models virtual and pool:200) or JDBC
 *                (bench/http-db/, java25-virtual and java17-pool200) on a
 *                pool of --db-pool (200) connections; PostgreSQL started by
 *                bench/pg.sh for the run.  The same keys as http-delay.
 *
 *   report       weft-bench report DIR [--from FILE] [--only EXP,...]: every
 *                experiment through bench/compare.sh (or the lines saved in
 *                FILE), drawn into DIR/report.html (html_report.c).
 *
 * Output: first a "# machine ..." line, then for every result ONE line
 *   experiment=E peer=weft status=ok key=value ...
 * in the form run.sh prints for the peers, then a table per result with the
 * article's figures and the peers' lines given with --peer-line / --peer-file
 * (bench/compare.sh runs the peers and passes their lines).
 *
 * Exit status: 0 when the experiments ran (whatever their status= says), 1
 * when one could not run, 2 for a usage error.  When threads are left running
 * (threads, or a run that hit its cap) the process leaves with _exit after
 * printing everything.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

enum {
    X_THREADS = 1, X_SLEEP = 2, X_MICRO = 4, X_HTTP_DELAY = 8, X_HTTP_EVERY10 = 16, X_CANCEL = 32, X_FLOOR = 64,
    X_FILE = 128, X_HTTP_DB = 256, X_PARALLEL = 512, X_SCOPE = 1024, X_ALL = 2047
};
enum { X_HTTP = X_HTTP_DELAY | X_HTTP_EVERY10 | X_HTTP_DB };

static const struct experiment {
    const char *name;
    int bit;
    int (*run)(const bench_opts *, bench_report *);
} EXPERIMENTS[] = {
    {"threads", X_THREADS, exp_threads},
    {"sleep-tasks", X_SLEEP, exp_sleep_tasks},
    {"micro", X_MICRO, exp_micro},
    {"http-delay", X_HTTP_DELAY, exp_http_delay},
    {"http-every10", X_HTTP_EVERY10, exp_http_every10},
    {"http-db", X_HTTP_DB, exp_http_db},
    {"cancel-storm", X_CANCEL, exp_cancel_storm},
    {"page-floor", X_FLOOR, exp_page_floor},
    {"file-write", X_FILE, exp_file_write},
    {"parallel", X_PARALLEL, exp_parallel},
    {"scope-memory", X_SCOPE, exp_scope_memory},
};

enum {
    OPT_PLATFORM = 256, OPT_SLEEP_MS, OPT_EXECUTOR, OPT_SPAWNER, OPT_ONLY, OPT_ROUNDS,
    OPT_CARRIERS, OPT_STACK_KIB, OPT_CAP_S, OPT_PEER_LINE, OPT_PEER_FILE,
    OPT_REQUESTS, OPT_CONC, OPT_MODELS, OPT_BIG, OPT_SCOPES, OPT_SOCKETS, OPT_MODE, OPT_SIZE, OPT_DB_POOL,
    OPT_WORKLOAD, OPT_PEERS, OPT_MAX_ITER, OPT_OMP_CHUNK, OPT_REPS,
};

static const struct option LONG_OPTS[] = {
    {"platform", no_argument, NULL, OPT_PLATFORM},
    {"sleep-ms", required_argument, NULL, OPT_SLEEP_MS},
    {"executor", required_argument, NULL, OPT_EXECUTOR},
    {"spawner", required_argument, NULL, OPT_SPAWNER},
    {"only", required_argument, NULL, OPT_ONLY},
    {"rounds", required_argument, NULL, OPT_ROUNDS},
    {"carriers", required_argument, NULL, OPT_CARRIERS},
    {"stack-kib", required_argument, NULL, OPT_STACK_KIB},
    {"cap-s", required_argument, NULL, OPT_CAP_S},
    {"peer-line", required_argument, NULL, OPT_PEER_LINE},
    {"peer-file", required_argument, NULL, OPT_PEER_FILE},
    {"requests", required_argument, NULL, OPT_REQUESTS},
    {"conc", required_argument, NULL, OPT_CONC},
    {"models", required_argument, NULL, OPT_MODELS},
    {"big", no_argument, NULL, OPT_BIG},
    {"scopes", required_argument, NULL, OPT_SCOPES},
    {"sockets", required_argument, NULL, OPT_SOCKETS},
    {"mode", required_argument, NULL, OPT_MODE},
    {"size", required_argument, NULL, OPT_SIZE},
    {"db-pool", required_argument, NULL, OPT_DB_POOL},
    {"workload", required_argument, NULL, OPT_WORKLOAD},
    {"peers", required_argument, NULL, OPT_PEERS},
    {"max-iter", required_argument, NULL, OPT_MAX_ITER},
    {"omp-chunk", required_argument, NULL, OPT_OMP_CHUNK},
    {"reps", required_argument, NULL, OPT_REPS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Which experiments accept each option. */
static int option_scope(int opt) {
    switch (opt) {
    case 'n': return X_ALL;
    case OPT_PLATFORM: return X_THREADS;
    case OPT_SLEEP_MS: case OPT_EXECUTOR: return X_SLEEP;
    case OPT_SPAWNER: case OPT_STACK_KIB: return X_THREADS | X_SLEEP;
    case OPT_ONLY: case OPT_ROUNDS: return X_MICRO;
    case OPT_REQUESTS: case OPT_CONC: case OPT_MODELS: return X_HTTP;
    case OPT_BIG: return X_HTTP_DELAY;
    case OPT_DB_POOL: return X_HTTP_DB;
    case OPT_SCOPES: case OPT_SOCKETS: return X_CANCEL;
    case OPT_MODE: return X_FILE;
    case OPT_SIZE: return X_FILE | X_PARALLEL;
    case OPT_WORKLOAD: case OPT_PEERS: case OPT_MAX_ITER: case OPT_OMP_CHUNK: case OPT_REPS: return X_PARALLEL;
    default: return X_ALL;
    }
}

/* "-n" or "--name" of an option, for messages. */
static const char *opt_name(int c) {
    if (c == 'n') return "-n";
    for (const struct option *lo = LONG_OPTS; lo->name; lo++)
        if (lo->val == c) return lo->name;
    return "?";
}

static void usage(FILE *f) {
    fputs("usage: weft-bench EXPERIMENT [options]\n"
          "\n"
          "  threads      [--platform] [-n N=1000000] [--stack-kib K] [--spawner vthread|platform]\n"
          "               vthreads (or pthreads) that block forever, until N or creation fails:\n"
          "               create_s, ns_per_task, rss_per_task_b, stopped_by=, limit= (pthreads)\n"
          "  file-write   [--mode write|blocking-1|blocking-100|async-futures|async-handlers] [--size 5]\n"
          "               writes of --size bytes as fast as they go, 2 warm-up + 5 measured 1-s\n"
          "               intervals: ops_s_mean, ops_s_stddev, threads_peak (each mode, or --mode)\n"
          "  sleep-tasks  [-n N=100000] [--sleep-ms 1000] [--executor virtual|thread-per-task|pool:K|\n"
          "               fixed:K|cached|virtual-executor]  (the last three: weft's executors)\n"
          "               [--stack-kib K] [--spawner vthread|platform]\n"
          "               N tasks that each sleep, all waited for: wall_s, user_s, sys_s, peak_rss_mib\n"
          "  micro        [--only switch|switch-tls|spawn-join|pingpong|pingpong-cross|chan-pingpong|\n"
          "               chan-buffered|mutex|select|hook|local[,...]] [--rounds R] [-n N]\n"
          "               switch: 2 vthreads yield R (5000000) times each on 1 carrier;\n"
          "               switch-tls: the same, each with its own TLS (ns_over_switch, fs_base,\n"
          "               ns_fs_write: one fs-base write alone, the least it can add);\n"
          "               spawn-join: N (1000000) trivial vthreads, joined 1000 at a time, 2 rounds;\n"
          "               pingpong: park/unpark hand-off, R (2000000) round trips;\n"
          "               pingpong-cross: the same pinned to 2 carriers, R (100000) round trips;\n"
          "               chan-pingpong / chan-buffered: 2 vthreads, 2 channels of capacity 0 / 1,\n"
          "               R (2000000) round trips, 1 carrier (ns_per_switch, as Go's go-chan);\n"
          "               mutex: 1000 vthreads x 1000 lock/increment/unlock (ns_per_op);\n"
          "               select: R (1000000) values over 4 channels taken by weft_select;\n"
          "               hook: a 1-byte pipe write+read, R (1000000) times on a vthread, as\n"
          "               syscall(2), with libc hooks off, on, weft_write/weft_read, trapped\n"
          "               (the system call trap), and trap-floor (a bare trap: the kernel's part)\n"
          "               local: ns per get, R (50000000) gets each on one vthread, in one run:\n"
          "               weft_local_get, weft_scoped_get (binding 3 levels up),\n"
          "               pthread_getspecific, a __thread read\n"
          "  http-delay   [--conc \"C[:N] ...\"] [--requests N=3000] [--models \"virtual async pool:200\"] [--big]\n"
          "               weft-httpd --delay-ms 100 (every request sleeps 100 ms) under ab -r (no\n"
          "               keep-alive), one server per model, warmed up with ab -n 1000 -c 100; default\n"
          "               points \"50 150 300 500 1000 1000:20000\" (C alone: N = --requests);\n"
          "               --big adds 10000:100000 through weft-load (points with C >= 10000 use it).\n"
          "               rps, limit_rps (C / 0.1 s), pct_of_limit, ab_ceiling_rps and\n"
          "               pct_of_ab_ceiling (ab sends its first request alone, so n requests take\n"
          "               1 + ceil((n-1)/C) delays at best), mean_ms, p95_ms, failed,\n"
          "               cpu_us_per_req (server CPU / request); tables with the third article's\n"
          "               figures and the peers' delay100 lines.  Models: weft-httpd's (virtual,\n"
          "               thread, pool:N, async), and tpc / tpc-weft-run: bench/tpc's server, a\n"
          "               pthread per connection in plain C, natively / under weft-run\n"
          "  cancel-storm [-n N=100000] [--scopes S=10000] [--sockets K=1000]\n"
          "               N vthreads forked in S scopes, blocked in sleep, channel receive, mutex\n"
          "               lock, future get and (K of them) socket read, all cancelled at once\n"
          "               through their owners: cancel_s, live and fds before/after\n"
          "  scope-memory [-n N=1000000]\n"
          "               N short tasks through one open scope, in batches of 1,000, each mode in a\n"
          "               process of its own: detached spawns, weft_fork_released, weft_fork with\n"
          "               every handle kept: rss_mib, vm_mib, tasks_s, rss_x_detached, and the bound\n"
          "               (1.5x detached, + 128 B a task when kept): status ok or over\n"
          "  page-floor   [-n N=100000] [--carriers T=CPUs]\n"
          "               the kernel's work alone for N stacks as weft makes them (a guard and one\n"
          "               populated page a slot, 64 a call, T threads): floor_s, ns_per_slot,\n"
          "               pages_only_s -- the bound under threads and sleep-tasks, this sitting\n"
          "  http-every10 [--conc \"C[:N]\"=100] [--requests N=10000] [--models \"virtual thread pool:200 async\"]\n"
          "               weft-httpd --delay-ms 2000 --delay-every 10 under ab -r -c 100 -n 10000;\n"
          "               table with the first article's 491.98 req/s, the limit (500) and the\n"
          "               peers' delay2s-every10 lines\n"
          "  http-db      [--conc \"C[:N] ...\"] [--requests N=3000] [--db-pool P=200]\n"
          "               [--models \"virtual pool:200 java25-virtual java17-pool200\"]\n"
          "               http-delay with a real database: GET /db runs SELECT pg_sleep(0.1) through\n"
          "               blocking libpq (examples/http_db.c; weft models virtual -- libc hooks on --\n"
          "               and pool:N) or JDBC (bench/http-db/HttpDb.java: java25-virtual,\n"
          "               java17-pool200, java25-pool200) on P pooled connections, under ab -r at\n"
          "               \"50 150 300 500 1000\"; PostgreSQL started by bench/pg.sh (max_connections\n"
          "               P + 50) and stopped at the end; the same line keys as http-delay, with\n"
          "               min(C, P) in place of C in limit_rps and ab_ceiling_rps\n"
          "               (http-*: weft-httpd from $WEFT_HTTPD or ../httpd/ beside weft-bench, weft-load\n"
          "               from $WEFT_LOAD or ../load/; docroot $WEFT_DOCROOT, else the peers'\n"
          "               http/docroot ($WEFT_PEERS, default " WEFT_PEERS_DEFAULT "),\n"
          "               else the source tree's www/; ab from PATH;\n"
          "               QUIET_WAIT_S=10: wait at most this long for a quiet host before each load;\n"
          "               --carriers goes to weft-httpd; --cap-s bounds each load, default 300)\n"
          "  parallel     [--workload uniform,skewed,mixed] [-n N=1000000000] [--size S=4096] [--max-iter I=1000]\n"
          "               [--peers \"weft pthreads openmp java17-streams\"] [--reps R=3] [--omp-chunk C]\n"
          "               CPU-bound work over K = --carriers (default CPUs) cores, in one run:\n"
          "               uniform: sum of sqrt(i), i < N; skewed: an S x S Mandelbrot (upper half), a row per\n"
          "               index.  weft_parallel_reduce (on uniform also at 1 and 2 carriers), K\n"
          "               pthreads with equal static pieces, OpenMP schedule(dynamic, C) (weft-par-omp\n"
          "               beside weft-bench; C: 16384 uniform, 1 skewed), Java 17 parallel streams\n"
          "               (bench/parallel/peer.sh); every C body through a function pointer per\n"
          "               index.  One warm-up, R measured: wall_s (median), wall_min_s, check;\n"
          "               then \"# speed\" lines (peer wall_s / weft wall_s) and \"# scaling\"\n"
          "               (2 vs 1 carrier); a peer that cannot run here is skipped (# skipped).\n"
          "               mixed: weft-httpd --delay-ms 10 under weft-load -c 300 -k, --cap-s S (20)\n"
          "               each, with no CPU job, --cpu-job shared and --cpu-job group (bench/mixed.sh;\n"
          "               --carriers K, default 2, is the server's default group): \"# mixed\" p99s\n"
          "  report DIR [--from FILE] [--only EXP[,EXP...]]\n"
          "               DIR/report.html: every experiment drawn against its peers and the articles'\n"
          "               figures (inline SVG, no script; prints), the machine facts and the commands;\n"
          "               runs each experiment through bench/compare.sh into DIR/lines.txt (long), or\n"
          "               draws the lines saved in FILE (html_report.c)\n"
          "\n"
          "common options:\n"
          "  --carriers K        weft carriers (default: $WEFT_CARRIERS, else the CPUs; switch uses 1)\n"
          "  --cap-s S           give up after S seconds (threads 60, sleep-tasks 120, micro 120 each,\n"
          "                      http-* 300 per load)\n"
          "  --peer-line LINE    a peer's result line, as run.sh prints it (repeatable)\n"
          "  --peer-file FILE    the lines containing \"experiment=\" in FILE (not # comments)\n"
          "  -h, --help          this text\n"
          "\n"
          "--stack-kib: vthread stack reserve (default weft's, 256 KiB), or pthread stacks in\n"
          "threads --platform (default 64).  --spawner: where the spawn loop runs (default vthread).\n"
          "Prints one line \"experiment=E peer=weft key=value ...\" per result, then a table with\n"
          "the article's figures and the peers' (ratio weft/peer).\n",
          f);
}

static int parse_long(const char *s, long min, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min) return -1;
    *out = v;
    return 0;
}

static int parse_only(const char *arg, int *bits) {
    static const struct { const char *name; int bit; } names[] = {
        {"switch", MICRO_SWITCH}, {"spawn-join", MICRO_SPAWN_JOIN},
        {"pingpong", MICRO_PINGPONG}, {"pingpong-cross", MICRO_PINGPONG_CROSS},
        {"chan-pingpong", MICRO_CHAN}, {"chan-buffered", MICRO_CHAN_BUF},
        {"mutex", MICRO_MUTEX}, {"select", MICRO_SELECT}, {"hook", MICRO_HOOK},
        {"local", MICRO_LOCAL}, {"switch-tls", MICRO_SWITCH_TLS},
    };
    char buf[256];
    snprintf(buf, sizeof buf, "%s", arg);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strcmp(t, names[i].name) == 0) break;
        if (i == sizeof names / sizeof names[0]) return -1;
        *bits |= names[i].bit;
    }
    return 0;
}

static int parse_executor(const char *arg, bench_opts *o) {
    if (strcmp(arg, "virtual") == 0) o->executor = EXEC_VIRTUAL;
    else if (strcmp(arg, "thread-per-task") == 0) o->executor = EXEC_THREAD_PER_TASK;
    else if (strncmp(arg, "pool:", 5) == 0 && parse_long(arg + 5, 1, &o->pool_threads) == 0) o->executor = EXEC_POOL;
    else if (strncmp(arg, "fixed:", 6) == 0 && parse_long(arg + 6, 1, &o->pool_threads) == 0) o->executor = EXEC_W_FIXED;
    else if (strcmp(arg, "cached") == 0) o->executor = EXEC_W_CACHED;
    else if (strcmp(arg, "virtual-executor") == 0) o->executor = EXEC_W_VIRTUAL;
    else return -1;
    return 0;
}

/* Whether /proc/cpuinfo describes a CPU of another architecture than the
 * one this binary was built for -- qemu-user passes the host's file
 * through (Debian 12's 7.2 does for aarch64 and riscv64) -- and if so,
 * the line that shows it in why[].  Each architecture's kernel writes
 * lines no other's does: "CPU implementer" (arm64), "isa" (riscv),
 * "vendor_id" (x86).  Issue 28: under emulation the figures are qemu's,
 * and a run is a smoke check only. */
static int emulated(char *why, size_t len) {
#if defined(__x86_64__)
    const char *own = "vendor_id";
#elif defined(__aarch64__)
    const char *own = "CPU implementer";
#elif defined(__riscv)
    const char *own = "isa";
#else
    return 0;
#endif
    static const char *const any[] = {"vendor_id", "CPU implementer", "isa", "model name"};
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[256];
    int mine = 0;
    why[0] = 0;
    while (fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\t:");
        if (strncmp(line, own, n) == 0 && own[n] == 0) mine = 1;
        for (size_t i = 0; i < sizeof any / sizeof any[0] && !why[0]; i++)
            if (strncmp(line, any[i], n) == 0 && any[i][n] == 0 && strcmp(any[i], own) != 0) {
                line[strcspn(line, "\n")] = 0;
                for (char *r = line, *w = line;; r++) /* "vendor_id\t: X" -> "vendor_id: X" */
                    if (*r != '\t' && !(*w++ = *r)) break;
                snprintf(why, len, "%.*s", (int)(len - 1), line);
            }
    }
    fclose(f);
    return !mine && why[0];
}

static void print_machine(int carriers) {
    struct utsname u;
    int have_u = uname(&u) == 0;
    const char *kernel = have_u ? u.release : "unknown";
    char date[32] = "unknown";
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("# machine nproc=%ld kernel=%s weft_carriers=", sysconf(_SC_NPROCESSORS_ONLN), kernel);
    if (carriers > 0) printf("%d", carriers);
    else printf("unknown(%s)", strerror(-carriers));
    printf(" weft_version=%d.%d.%d date=%s\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, date);
    char why[160];
    if (emulated(why, sizeof why)) {
        printf("# emulated: this %s build runs on another architecture's CPU (/proc/cpuinfo: \"%s\"): the "
               "figures are an emulator's (qemu-user), not speeds -- a smoke check only\n",
               have_u ? u.machine : "?", why);
        fprintf(stderr, "weft-bench: emulated (/proc/cpuinfo shows another architecture's CPU): the figures "
                        "are not speeds\n");
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "report") == 0) return bench_html_report_main(argc - 1, argv + 1);
    const struct experiment *x = NULL;
    for (size_t i = 0; i < sizeof EXPERIMENTS / sizeof EXPERIMENTS[0]; i++)
        if (strcmp(argv[1], EXPERIMENTS[i].name) == 0) x = &EXPERIMENTS[i];
    if (!x) {
        fprintf(stderr, "weft-bench: unknown experiment '%s' (threads, sleep-tasks, micro, http-delay, http-every10, http-db, cancel-storm, page-floor, file-write, parallel, scope-memory, or report; see --help)\n", argv[1]);
        return 2;
    }

    bench_opts o = {.sleep_ms = -1, .executor = EXEC_VIRTUAL, .spawner = SPAWN_FROM_VTHREAD, .sockets = -1,
                    .omp_chunk = -1};
    bench_report rep;
    report_init(&rep);
    int micro_bits = 0, c;
    long v;
    /* getopt_long permutes from argv[1] on: skip the experiment's name */
    while ((c = getopt_long(argc - 1, argv + 1, "n:h", LONG_OPTS, NULL)) != -1) {
        if (c == '?') goto usage_error;
        if (!(option_scope(c) & x->bit)) {
            fprintf(stderr, "weft-bench: %s does not take option %s%s\n", x->name, c == 'n' ? "" : "--", opt_name(c));
            goto usage_error;
        }
        int bad = 0;
        switch (c) {
        case 'h': usage(stdout); report_free(&rep); return 0;
        case 'n': case OPT_REQUESTS: bad = parse_long(optarg, 1, &o.n); break;
        case OPT_CONC: o.conc = optarg; break;
        case OPT_MODELS: o.models = optarg; break;
        case OPT_BIG: o.big = 1; break;
        case OPT_SCOPES: bad = parse_long(optarg, 1, &v); o.scopes = v; break;
        case OPT_SOCKETS: bad = parse_long(optarg, 0, &v); o.sockets = v; break;
        case OPT_MODE: o.file_mode = optarg; bad = !exp_file_mode_known(optarg); break;
        case OPT_SIZE: bad = parse_long(optarg, 1, &o.size); break;
        case OPT_DB_POOL: bad = parse_long(optarg, 1, &o.db_pool); break;
        case OPT_WORKLOAD:
            o.workload = optarg;
            bad = !strstr(optarg, "uniform") && !strstr(optarg, "skewed") && !strstr(optarg, "mixed");
            break;
        case OPT_PEERS: o.peers = optarg; break;
        case OPT_MAX_ITER: bad = parse_long(optarg, 1, &o.max_iter); break;
        case OPT_OMP_CHUNK: bad = parse_long(optarg, 0, &o.omp_chunk); break;
        case OPT_REPS: bad = parse_long(optarg, 1, &o.reps); break;
        case OPT_PLATFORM: o.platform = 1; break;
        case OPT_SLEEP_MS: bad = parse_long(optarg, 0, &o.sleep_ms); break;
        case OPT_EXECUTOR: bad = parse_executor(optarg, &o); break;
        case OPT_SPAWNER:
            if (strcmp(optarg, "vthread") == 0) o.spawner = SPAWN_FROM_VTHREAD;
            else if (strcmp(optarg, "platform") == 0) o.spawner = SPAWN_FROM_PLATFORM;
            else bad = 1;
            break;
        case OPT_ONLY: bad = parse_only(optarg, &micro_bits); break;
        case OPT_ROUNDS: bad = parse_long(optarg, 1, &o.rounds); break;
        case OPT_CARRIERS: bad = parse_long(optarg, 1, &v); o.carriers = (int)v; break;
        case OPT_STACK_KIB: bad = parse_long(optarg, 16, &o.stack_kib); break;
        case OPT_CAP_S: {
            char *end;
            o.cap_s = strtod(optarg, &end);
            bad = end == optarg || *end || o.cap_s <= 0;
            break;
        }
        case OPT_PEER_LINE:
            if ((bad = report_add_peer_line(&rep, optarg)) == -EINVAL)
                fprintf(stderr, "weft-bench: --peer-line needs experiment= and peer=: %s\n", optarg);
            break;
        case OPT_PEER_FILE:
            if ((bad = report_add_peer_file(&rep, optarg)) < 0)
                fprintf(stderr, "weft-bench: --peer-file %s: %s\n", optarg, strerror(-bad));
            break;
        }
        if (bad) {
            if (c != OPT_PEER_LINE && c != OPT_PEER_FILE)
                fprintf(stderr, "weft-bench: bad value '%s' for %s%s\n", optarg, c == 'n' ? "" : "--", opt_name(c));
            goto usage_error;
        }
    }
    if (optind + 1 < argc) {
        fprintf(stderr, "weft-bench: unexpected argument '%s'\n", argv[optind + 1]);
        goto usage_error;
    }
    o.micro = micro_bits ? micro_bits : MICRO_ALL;

    print_machine(weft_carriers_for(o.carriers));
    int r = x->run(&o, &rep);
    if (r < 0) { /* the reason is on stderr; scripts still get a line */
        bench_result err;
        char e[32];
        br_init(&err, x->name, "weft");
        br_set(&err, "status", "error");
        br_set(&err, "err", "%s", errno_name(r, e, sizeof e));
        br_print(&err);
    }
    report_print(&rep);
    fflush(stdout);
    fflush(stderr);
    if (r == EXP_LEAVE_NOW) _exit(0); /* threads are still running: leave without waiting */
    report_free(&rep);
    return r < 0 ? 1 : 0;

usage_error:
    report_free(&rep);
    fprintf(stderr, "(weft-bench --help)\n");
    return 2;
}
