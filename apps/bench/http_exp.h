/*
 * The HTTP experiments' own header (exp_http.c, http_run.c, http_tables.c;
 * exp_http.c's essay says what they measure and how): the experiments,
 * the points, the programs, the processes they run and the calls between
 * the three files.  weft-bench's other experiments do not include it.
 */
#ifndef WEFT_BENCH_HTTP_EXP_H
#define WEFT_BENCH_HTTP_EXP_H

#include "bench.h"
#include "launch.h"

#include <stddef.h>
#include <string.h>
#include <sys/resource.h>

#define MAX_POINTS 32
#define MAX_MODELS 8
#define MAX_PEERS 10
#define PATH_LEN 4096
#define WEFT_LOAD_MIN_CONC 10000 /* from here on the load is weft-load's */
#define DEFAULT_CAP_S 300.0      /* one load at most, without --cap-s */

/* ------------------------------------------------------------------------ */
/* the experiments (exp_http.c defines them)                                */
/* ------------------------------------------------------------------------ */

typedef struct http_exp {
    const char *name;     /* weft-bench's experiment */
    const char *peer_exp; /* run.sh's */
    long delay_ms, every;
    const char *conc, *models; /* defaults */
    long n;
    const char *path; /* what the load requests */
    int db;           /* http-db: examples/http_db.c and the Java peers on PostgreSQL */
} http_exp;

extern const http_exp HTTP_DELAY, HTTP_EVERY10, HTTP_DB;

/* A Java peer of http-db (bench/http-db/peer.sh), not a weft model. */
static inline int is_java(const char *model) { return strncmp(model, "java", 4) == 0; }

typedef struct point {
    long c, n;
} point;

/* ---- http_run.c: the programs, the server, the database, the load's process ---- */

typedef struct progs {
    char httpd[PATH_LEN], load[PATH_LEN], ab[PATH_LEN], root[PATH_LEN];
    int have_load;
    /* http-db: the server (examples/http_db.c), the Java peers' driver,
     * PostgreSQL's conninfo and the pool size */
    char http_db[PATH_LEN], peer_sh[PATH_LEN], conninfo[256];
    long db_pool;
    /* models tpc and tpc-weft-run: bench/tpc's server, and weft-run */
    char tpc[PATH_LEN], weft_run[PATH_LEN];
} progs;

/* $env, else REL relative to this executable's directory; 0 or -errno. */
int find_prog(char out[PATH_LEN], const char *env, const char *rel);
int find_in_path(char out[PATH_LEN], const char *name);
/* $WEFT_DOCROOT, the peers' docroot, the source tree's www/: the first with hello.html. */
int find_docroot(char out[PATH_LEN]);

typedef struct run_out {
    char *text;
    size_t len;
    int status, timed_out;
    struct rusage ru;
} run_out;

/* Runs argv to its end (SIGKILL after cap_s), collecting stdout+stderr. */
int run_capture(char *const argv[], double cap_s, run_out *ro);

typedef struct host_ticks {
    long long busy, total;
} host_ticks;

void host_ticks_get(host_ticks *h);
/* Waits until the host is below 25 % busy over half a second, at most
 * $QUIET_WAIT_S (10) seconds. */
void quiet_wait(void);

typedef struct server {
    launch l; /* the process: l.pid; l.reaped, l.status once it ended */
    int port;
    int java; /* a JVM: SIGTERM ends it with status 143 */
} server;

/* Starts weft-httpd; 0, or -errno with the reason on stderr. */
int server_start(server *s, const progs *pg, const http_exp *x, const char *model, int carriers);
/* 1 if the server has ended (reaped: s->l.status), without waiting. */
int server_ended(server *s);
/* Stops the server: SIGTERM, then SIGKILL after 20 s; reports an unclean end. */
void server_stop(server *s);
void describe_status(char *out, size_t len, int st);

/*
 * bench/pg.sh run DIR in a temporary directory: it starts PostgreSQL, prints
 * "ready CONNINFO" and stays until SIGTERM, then stops the server and
 * removes DIR.  It gets SIGTERM as its parent-death signal too, so a
 * weft-bench that dies leaves no database behind.  Its output pipe stays
 * open until it has ended (a closed pipe would kill it with SIGPIPE before
 * its cleanup).
 */
typedef struct database {
    launch l; /* l.pid 0: none */
    char dir[64];
} database;

int db_start(database *db, long pool, char *conninfo, size_t len);
void db_stop(database *db);

/* ---- exp_http.c: a point's figures ---- */

/* "weft-virtual", "weft-pool200"; a Java peer of http-db keeps its name */
void peer_name(char *out, size_t len, const char *model);
/* C / the delay (Little's law; http-db: min(C, pool)) */
double limit_rps(const http_exp *x, long c, long pool);
/* what ab itself lets a server reach (0 where it does not apply) */
double ab_ceiling_rps(const http_exp *x, const point *p, long pool);

/* ---- http_tables.c: the tables printed after the lines ---- */

void print_delay_tables(const bench_report *rep, const http_exp *x, long pool, const point *ran, int nran,
                        char models[][32], int nmodels);
void print_every10_table(const bench_report *rep, const http_exp *x, const point *ran, int nran,
                         char models[][32], int nmodels);

#endif
