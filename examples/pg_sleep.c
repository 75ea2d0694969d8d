/*
 * The virtual-threads article's trap on a real database (issue 11's first
 * acceptance line): 1,000 vthreads on 2 carriers each run
 * SELECT pg_sleep(0.1) through unmodified, blocking libpq, sharing a pool
 * of 200 connections bounded by a weft_sem.  With libc interposition on,
 * libpq's poll/recv park the vthread and the 1,000 queries take
 * 1,000 / 200 x 0.1 s = 0.5 s plus overhead; with it off every query holds
 * its carrier while it waits, the pinning monitor counts that
 * (weft_stats.pinned) and compensates.
 *
 *   pg_sleep [--hooks on|off] [-n QUERIES] [--pool CONNS] [--carriers N]
 *            [--sleep SECONDS] [CONNINFO]
 *
 * CONNINFO is libpq's ("host=/tmp/x port=5432 user=weft dbname=postgres");
 * without it libpq reads PGHOST, PGPORT, PGUSER... bench/pg.sh starts a
 * throwaway server and prints one:
 *
 *   dir=$(mktemp -d); conn=$(bench/pg.sh start "$dir"); build-release/pg_sleep "$conn"; bench/pg.sh stop "$dir"
 *
 * Output: one line, key=value:
 *   queries=1000 pool=200 carriers=2 hooks=on sleep_s=0.1 elapsed_s=0.53 limit_s=0.50 connect_s=0.21 pinned=0
 * elapsed_s runs from the first query's start to the last one's end
 * (connecting the pool is connect_s, before it); limit_s is what the pool
 * allows: ceil(queries / pool) x sleep.  Exit status 0 when every query
 * answered what it should, 1 otherwise, 2 for a bad command line.
 *
 * Hooks are switched with the environment (WEFT_HOOK=1 or 0, set before
 * weft_init), which is what a program that cannot be recompiled does too.
 */
#define _GNU_SOURCE
#include <weft.h>

#include <libpq-fe.h>

#include <errno.h>
#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
    weft_sem free_count;
    weft_mutex mu;
    PGconn **conns;
    int nfree;
    const char *conninfo;
    const char *sleep_s;
    atomic_long ok, failed;
} P;

static void *connect_one(void *arg) {
    long i = (long)(intptr_t)arg;
    PGconn *c = PQconnectdb(P.conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "pg_sleep: connection %ld: %s", i, PQerrorMessage(c));
        PQfinish(c);
        c = NULL;
    }
    P.conns[i] = c;
    return NULL;
}

static void *query_one(void *arg) {
    long i = (long)(intptr_t)arg;
    weft_sem_acquire(&P.free_count);
    weft_mutex_lock(&P.mu);
    PGconn *c = P.conns[--P.nfree];
    weft_mutex_unlock(&P.mu);

    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_sleep(%s), %ld", P.sleep_s, i);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 && atol(PQgetvalue(r, 0, 1)) == i) {
        atomic_fetch_add(&P.ok, 1);
    } else {
        if (atomic_fetch_add(&P.failed, 1) < 5) fprintf(stderr, "pg_sleep: query %ld: %s", i, PQerrorMessage(c));
    }
    PQclear(r);

    weft_mutex_lock(&P.mu);
    P.conns[P.nfree++] = c;
    weft_mutex_unlock(&P.mu);
    weft_sem_release(&P.free_count);
    return NULL;
}

/* Spawns n vthreads running fn(i) and joins them; 0 or -errno. */
static int run_all(long n, void *(*fn)(void *)) {
    weft_thread **t = calloc((size_t)n, sizeof *t);
    if (!t) return -ENOMEM;
    long spawned = 0;
    int r = 0;
    for (; spawned < n; spawned++)
        if ((r = weft_spawn(&t[spawned], fn, (void *)(intptr_t)spawned, NULL)) < 0) break;
    for (long i = 0; i < spawned; i++) weft_join(t[i], NULL);
    free(t);
    return r;
}

static void usage(FILE *f) {
    fprintf(f, "usage: pg_sleep [--hooks on|off] [-n QUERIES] [--pool CONNS] [--carriers N] [--sleep SECONDS] "
               "[CONNINFO]\n"
               "  defaults: --hooks on -n 1000 --pool 200 --carriers 2 --sleep 0.1; CONNINFO: libpq's PG* "
               "environment\n");
}

int main(int argc, char **argv) {
    long n = 1000, pool = 200;
    int carriers = 2, hooks = 1;
    P.sleep_s = "0.1";
    static const struct option opts[] = {{"hooks", 1, 0, 'k'},    {"pool", 1, 0, 'p'}, {"carriers", 1, 0, 'c'},
                                         {"sleep", 1, 0, 's'},    {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int o;
    while ((o = getopt_long(argc, argv, "n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'n': n = atol(optarg); break;
        case 'p': pool = atol(optarg); break;
        case 'c': carriers = atoi(optarg); break;
        case 's': P.sleep_s = optarg; break;
        case 'k':
            if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
                usage(stderr);
                return 2;
            }
            hooks = strcmp(optarg, "on") == 0;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    char *end;
    double sleep_s = strtod(P.sleep_s, &end);
    if (n < 1 || pool < 1 || carriers < 1 || *end || sleep_s < 0 || optind + 1 < argc) {
        usage(stderr);
        return 2;
    }
    P.conninfo = optind < argc ? argv[optind] : "";

    /* before weft_init, which reads it */
    setenv("WEFT_HOOK", hooks ? "1" : "0", 1);
    weft_runtime_opts cfg = {.carriers = carriers};
    int e = weft_init(&cfg);
    if (e < 0) {
        fprintf(stderr, "pg_sleep: weft_init: %s\n", strerror(-e));
        return 1;
    }
    P.conns = calloc((size_t)pool, sizeof *P.conns);
    if (!P.conns) return 1;
    weft_sem_init(&P.free_count, (unsigned)pool);
    weft_mutex_init(&P.mu);

    int64_t t0 = weft_now();
    e = run_all(pool, connect_one);
    int64_t t1 = weft_now();
    int bad = e < 0;
    for (long i = 0; i < pool; i++) bad |= P.conns[i] == NULL;
    if (bad) {
        fprintf(stderr, "pg_sleep: could not open %ld connections%s\n", pool, e < 0 ? " (spawn failed)" : "");
        return 1;
    }
    P.nfree = (int)pool;

    e = run_all(n, query_one);
    int64_t t2 = weft_now();
    weft_stats st;
    weft_stats_get(&st);
    double limit = (double)((n + pool - 1) / pool) * sleep_s;
    printf("queries=%ld pool=%ld carriers=%d hooks=%s sleep_s=%s elapsed_s=%.3f limit_s=%.2f connect_s=%.3f "
           "pinned=%llu ok=%ld failed=%ld\n",
           n, pool, carriers, hooks ? "on" : "off", P.sleep_s, (double)(t2 - t1) / 1e9, limit,
           (double)(t1 - t0) / 1e9, (unsigned long long)st.pinned, atomic_load(&P.ok), atomic_load(&P.failed));
    for (long i = 0; i < pool; i++) PQfinish(P.conns[i]);
    free(P.conns);
    weft_shutdown();
    return e == 0 && atomic_load(&P.ok) == n ? 0 : 1;
}
