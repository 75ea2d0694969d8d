/*
 * bench.h -- shared pieces of weft-bench: result records, the comparison
 * report, options, and small helpers for clocks, memory and /proc.
 *
 * See weft-bench.c for what each experiment measures.
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stddef.h>
#include <stdint.h>

/* The source tree (CMake defines it); the peer programs (Go, Java, C) and
 * their runners are in ../shared/peers beside it, unless $WEFT_PEERS says
 * otherwise. */
#ifndef WEFT_SOURCE_DIR
#define WEFT_SOURCE_DIR "."
#endif
#define WEFT_PEERS_DEFAULT WEFT_SOURCE_DIR "/../shared/peers"

/* ------------------------------------------------------------------------ */
/* Result records                                                            */
/* ------------------------------------------------------------------------ */

#define BR_MAX_KV 64 /* run.sh's median lines carry about 50 */
#define BR_KEY_LEN 32
#define BR_VAL_LEN 96

/*
 * One result: what one line "experiment=E peer=P key=value ..." holds, both
 * for weft's own results and for the peers' lines read back for the table.
 * Keys keep the order they were added in; setting a key again replaces it.
 */
typedef struct bench_result {
    int nkv;
    char key[BR_MAX_KV][BR_KEY_LEN];
    char val[BR_MAX_KV][BR_VAL_LEN];
} bench_result;

void br_init(bench_result *r, const char *experiment, const char *peer);
void br_set(bench_result *r, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void br_setl(bench_result *r, const char *key, long long v);
void br_setf(bench_result *r, const char *key, int decimals, double v);
/* The value of key, or NULL. */
const char *br_get(const bench_result *r, const char *key);
/* The leading number of key's value ("0.73[0.71..0.74]" gives 0.73); 0 if
 * the key is missing or does not start with a number. */
int br_num(const bench_result *r, const char *key, double *out);
/* Parses a peer line ("[SUMMARY ]experiment=E peer=P k=v ..."); 0 or -1. */
int br_parse(bench_result *r, const char *line);
/* Prints the record as one line on stdout and flushes it. */
void br_print(const bench_result *r);

/* ------------------------------------------------------------------------ */
/* The comparison report                                                     */
/* ------------------------------------------------------------------------ */

/*
 * Collects weft's results as the experiments produce them and the peer lines
 * given with --peer-line / --peer-file; report_print writes one table per
 * weft result, with the article's figures and the peers of the same
 * experiment next to weft's.
 */
typedef struct bench_report {
    bench_result *weft;
    int nweft, capweft;
    bench_result *peers;
    int npeers, cappeers;
} bench_report;

void report_init(bench_report *rep);
void report_free(bench_report *rep);
/* Prints r's line at once and keeps it for the table.  0 or -ENOMEM. */
int report_add_weft(bench_report *rep, const bench_result *r);
/* 0, -EINVAL for a line without experiment= and peer=, or -ENOMEM. */
int report_add_peer_line(bench_report *rep, const char *line);
/* Reads every line containing "experiment=" from path.  0 or -errno. */
int report_add_peer_file(bench_report *rep, const char *path);
void report_print(const bench_report *rep);

/* `weft-bench report DIR [--from FILE] [--only EXP,...]` (html_report.c):
 * argv[0] is "report".  0, 1 when it could not write the page, 2 for a
 * usage error. */
int bench_html_report_main(int argc, char **argv);

/* ------------------------------------------------------------------------ */
/* Options                                                                   */
/* ------------------------------------------------------------------------ */

/* sleep-tasks --executor: the hand-made ones (virtual: weft_spawn per task,
 * thread-per-task, pool:K) and weft's executors (weft/exec.h) */
enum sleep_executor { EXEC_VIRTUAL, EXEC_THREAD_PER_TASK, EXEC_POOL, EXEC_W_FIXED, EXEC_W_CACHED, EXEC_W_VIRTUAL };
enum spawner { SPAWN_FROM_VTHREAD, SPAWN_FROM_PLATFORM };

/* Which micro benchmarks to run (bit set). */
enum {
    MICRO_SWITCH = 1 << 0,
    MICRO_SPAWN_JOIN = 1 << 1,
    MICRO_PINGPONG = 1 << 2,
    MICRO_PINGPONG_CROSS = 1 << 3,
    MICRO_CHAN = 1 << 4,
    MICRO_CHAN_BUF = 1 << 5,
    MICRO_MUTEX = 1 << 6,
    MICRO_SELECT = 1 << 7,
    MICRO_HOOK = 1 << 8,
    MICRO_LOCAL = 1 << 9,
    MICRO_SWITCH_TLS = 1 << 10,
    MICRO_ALL = (1 << 11) - 1,
};

typedef struct bench_opts {
    long n;              /* -n: tasks (0 = the experiment's default) */
    int platform;        /* threads --platform */
    long sleep_ms;       /* sleep-tasks --sleep-ms */
    int executor;        /* sleep-tasks --executor (enum sleep_executor) */
    long pool_threads;   /* ... pool:N */
    int spawner;         /* --spawner (enum spawner) */
    int micro;           /* micro --only (MICRO_* bits) */
    long rounds;         /* micro --rounds (0 = each benchmark's default) */
    int carriers;        /* --carriers (0 = weft's default) */
    long stack_kib;      /* --stack-kib (0 = default: weft's, or 64 for pthreads) */
    double cap_s;        /* --cap-s (0 = the experiment's default) */
    const char *conc;    /* http-* --conc "C[:N] ..." (NULL = default) */
    const char *models;  /* http-* --models "virtual pool:200 ..." */
    int big;             /* http-delay --big */
    long scopes;         /* cancel-storm --scopes (0 = 10,000) */
    long sockets;        /* cancel-storm --sockets (-1 = 1,000) */
    const char *file_mode; /* file-write --mode (NULL = every mode) */
    long size;           /* file-write --size (0 = 5 bytes) */
    long db_pool;        /* http-db --db-pool (0 = 200) */
    const char *workload; /* parallel --workload (NULL = uniform,skewed) */
    const char *peers;   /* parallel --peers (NULL = all) */
    long max_iter;       /* parallel --max-iter (0 = 1000) */
    long omp_chunk;      /* parallel --omp-chunk (-1 = the default per workload) */
    long reps;           /* parallel --reps (0 = 3) */
} bench_opts;

/*
 * The experiments.  Each adds its results to rep (printing their lines) and
 * returns 0; EXP_LEAVE_NOW when threads it started are still running or
 * blocked (the caller prints the table and leaves with _exit, without
 * weft_shutdown); or a negative errno when it could not run at all (the
 * reason is on stderr).
 */
#define EXP_LEAVE_NOW 1
int exp_threads(const bench_opts *o, bench_report *rep);
int exp_sleep_tasks(const bench_opts *o, bench_report *rep);
int exp_micro(const bench_opts *o, bench_report *rep);
/* exp_sync.c: the sync layer's micro benchmarks (run by exp_micro) */
int micro_chan_pingpong(const bench_opts *o, bench_report *rep);
int micro_chan_buffered(const bench_opts *o, bench_report *rep);
int micro_mutex(const bench_opts *o, bench_report *rep);
int micro_select(const bench_opts *o, bench_report *rep);
/* exp_http.c: weft-httpd under ab, as the peers' http/run.sh measures */
int exp_http_delay(const bench_opts *o, bench_report *rep);
int exp_http_every10(const bench_opts *o, bench_report *rep);
/* ... and http-db: examples/http_db.c and the Java peers on a real PostgreSQL */
int exp_http_db(const bench_opts *o, bench_report *rep);
/* exp_cancel.c: 100,000 blocked vthreads in 10,000 scopes cancelled at once */
int exp_cancel_storm(const bench_opts *o, bench_report *rep);
/* exp_floor.c: the kernel's cost of N guarded, one-page stacks, nothing else */
int exp_page_floor(const bench_opts *o, bench_report *rep);
/* exp_file.c: file-write */
int exp_file_write(const bench_opts *o, bench_report *rep);
int exp_file_mode_known(const char *mode);
/* exp_parallel.c: weft_parallel_reduce vs pthreads, OpenMP, Java 17 streams */
int exp_parallel(const bench_opts *o, bench_report *rep);
/* exp_scope.c */
int exp_scope_memory(const bench_opts *o, bench_report *rep);

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);
/* Sleeps ns nanoseconds on the calling OS thread (restarts after EINTR). */
void sleep_ns_os(int64_t ns);
/* Resident set size of this process in bytes (from /proc/self/statm), or -1. */
long long rss_bytes(void);

/* CPU times and peak RSS from getrusage(RUSAGE_SELF). */
typedef struct cpu_usage {
    double user_s, sys_s;
    double maxrss_mib;
} cpu_usage;
void cpu_usage_get(cpu_usage *u);
/* Adds user_s and sys_s (after - before) to r. */
void br_set_cpu(bench_result *r, const cpu_usage *before, const cpu_usage *after);

/* Reads one integer from a /proc file, or returns -1. */
long long read_proc_ll(const char *path);
/* Lines of /proc/self/maps (the process's mappings), or -1. */
long count_maps(void);
/* Threads of this process ("Threads:" in /proc/self/status), or -1. */
long self_threads(void);
/* Threads on the whole system (4th field of /proc/loadavg), or -1. */
long system_threads(void);
/* Threads owned by the real uid of this process (sum over /proc/PID/status), or -1. */
long user_threads(void);

/* "-ENOMEM" style name for a negative errno, "EAGAIN" for a positive one. */
const char *errno_name(int e, char *buf, size_t len);

/* The number of carriers weft runs with under cfg_carriers (0 = default):
 * starts the runtime, reads weft_stats, shuts it down.  Negative errno on
 * failure. */
int weft_carriers_for(int cfg_carriers);

#endif
