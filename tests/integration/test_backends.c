/*
 * Real backends through unmodified client libraries (issue 11): libpq
 * against a throwaway PostgreSQL, hiredis against a throwaway redis-server,
 * libcurl's easy interface against weft-httpd -- each in its ordinary
 * *blocking* mode, called from 1,000 vthreads (SCALE: 100 under the
 * sanitizers) over 2 carriers, every result checked.
 *
 * None of these libraries knows weft: they call libc's connect, send, recv,
 * poll and close.  With libc interposition on (WEFT_HOOK=1, set here with
 * setenv before weft_init so that it needs no weft_runtime_opts field) those
 * calls park the vthread and the carrier runs others; without it each call
 * holds its carrier while it blocks, and the pinning monitor counts that
 * (weft_stats.pinned) and adds compensating carriers.  The tests check
 * what must hold either way -- every query and transfer completes with the
 * right answer -- and, with hooks on, that no pinned event the monitor
 * reports names a call of the client library's (check_pinned_lines: what
 * may remain on an overloaded machine is a carrier waiting on one of weft's
 * own short locks).  With hooks off the monitor must see libpq block.
 * Nothing here asserts a duration (a loaded CI machine must not fail
 * them).
 *
 * The servers: tests/support/backends.h (a temporary directory, own port and Unix
 * socket, stopped and removed at the end, also when a test fails or times
 * out).  A test skips, saying why, only when the client library was not
 * found at build time or the server is not installed; scripts/deps.sh
 * installs all of them, so in CI they run.
 */
#include "backends.h"

#include <stdatomic.h>
#include <sys/syscall.h>

#if HAVE_LIBPQ
#include <libpq-fe.h>
#endif
#if HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif
#if HAVE_LIBCURL
#include <curl/curl.h>
#endif

/* 2 carriers; hooks on or off through the environment (WEFT_HOOK), which
 * the runtime reads at weft_init; every pinned event on stderr
 * (WEFT_MONITOR=log: by default only those of a second), for
 * check_pinned_lines. */
static void runtime_start(int hooks) {
    CHECK_EQ(setenv("WEFT_HOOK", hooks ? "1" : "0", 1), 0);
    CHECK_EQ(setenv("WEFT_MONITOR", "log", 1), 0);
    weft_runtime_opts c = {.carriers = 2};
    CHECK_EQ(weft_init(&c), 0);
}

/* As many fds as the hard limit allows (1,000 connections, both ends when
 * the server is ours too); returns the soft limit now. */
static long raise_nofile(void) {
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    return rl.rlim_cur == RLIM_INFINITY ? 1L << 20 : (long)rl.rlim_cur;
}

/* Spawns n vthreads running fn(i) and joins them all. */
static void run_vthreads(long n, void *(*fn)(void *)) {
    weft_thread **t = calloc((size_t)n, sizeof *t);
    CHECK(t != NULL);
    for (long i = 0; i < n; i++) CHECK_EQ(weft_spawn(&t[i], fn, (void *)(intptr_t)i, NULL), 0);
    for (long i = 0; i < n; i++) CHECK_EQ(weft_join(t[i], NULL), 0);
    free(t);
}

static uint64_t pinned_now(void) {
    weft_stats s;
    weft_stats_get(&s);
    return s.pinned;
}

/* ------------------------------------------------------------------------ */
/* libpq                                                                     */
/* ------------------------------------------------------------------------ */

/* The monitor's lines (stderr) while a run goes on, in a file. */
__attribute__((unused)) static int stderr_to_file(int *saved) {
    char path[] = "/tmp/weft-test-stderr-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    fflush(stderr);
    *saved = dup(2);
    CHECK(*saved >= 0);
    CHECK_EQ(dup2(fd, 2), 2);
    return fd;
}

/* 1 when the pinned line names a system call that waits for another
 * party (a peer, a timer, a readiness): the calls the hooks make park.
 * Any other call -- socket(2), say -- pinned only because the kernel did
 * not run the thread for the threshold (seen once: "blocked in syscall 41
 * ... for 20 ms", the suite's release pass on a loaded 2-vCPU machine). */
__attribute__((unused)) static int pinned_in_a_waiting_call(const char *line) {
    static const long waiting[] = {
        SYS_read,     SYS_write,        SYS_readv,         SYS_writev,       SYS_pread64,  SYS_pwrite64,
        SYS_connect,  SYS_accept,       SYS_accept4,       SYS_recvfrom,     SYS_sendto,   SYS_recvmsg,
        SYS_sendmsg,  SYS_recvmmsg,     SYS_sendmmsg,      SYS_ppoll,        SYS_pselect6, SYS_epoll_pwait,
        SYS_nanosleep, SYS_clock_nanosleep,
#ifdef SYS_poll /* (x86-64's: aarch64 and riscv64 have only the p-forms above) */
        SYS_poll,     SYS_select,       SYS_epoll_wait,
#endif
    };
    const char *p = strstr(line, "syscall ");
    if (!p) return 1; /* (named, no number: count it) */
    long nr = strtol(p + 8, NULL, 10);
    for (size_t i = 0; i < sizeof waiting / sizeof waiting[0]; i++)
        if (waiting[i] == nr) return 1;
    return 0;
}

/* Puts stderr back and checks the pinned events reported meanwhile: with
 * hooks on, none may name a call of the client library's that waits --
 * each of those parks.  What may remain is a carrier waiting in one of
 * weft's own short critical sections (a futex) whose holder the kernel did
 * not run for the threshold, or a call that never waits which the kernel
 * did not finish in time: on an overloaded machine that happens, and it is
 * not the library's doing.  Returns the number of pinned lines. */
__attribute__((unused)) static int check_pinned_lines(int fd, int saved, int hooks) {
    fflush(stderr);
    CHECK_EQ(dup2(saved, 2), 2);
    close(saved);
    char *d = slurp_fd(fd);
    int lines = 0;
    for (char *line = d, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (!strstr(line, "weft: pinned:") || !strstr(line, " blocked in ")) continue;
        lines++;
        if (hooks && !strstr(line, " blocked in futex ") && pinned_in_a_waiting_call(line)) {
            fprintf(stderr, "a hooked client blocked its carrier: %s\n", line);
            CHECK(!"a foreign blocking call pinned a carrier with hooks on");
        }
        if (lines <= 3) fprintf(stderr, "%s\n", line);
    }
    free(d);
    return lines;
}

#if HAVE_LIBPQ

/* A pool of connections bounded by a weft_sem: what a server does with a
 * JDBC pool (HikariCP) or Tomcat's 200 threads. */
static struct {
    weft_sem free_count;
    weft_mutex mu;
    PGconn **conns;
    int nfree, size;
    const backend_pg *pg;
    const char *sleep_s; /* pg_sleep's argument */
    atomic_long done;
} pq;

static void *pq_connect_one(void *arg) {
    long i = (long)(intptr_t)arg;
    /* half through the Unix socket, half over TCP */
    PGconn *c = PQconnectdb(i % 2 ? pq.pg->conninfo_tcp : pq.pg->conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "connection %ld: %s", i, PQerrorMessage(c));
        _exit(1);
    }
    pq.conns[i] = c;
    return NULL;
}

static void pq_pool_open(const backend_pg *pg, int size) {
    pq.pg = pg;
    pq.size = size;
    pq.conns = calloc((size_t)size, sizeof *pq.conns);
    CHECK(pq.conns != NULL);
    CHECK_EQ(weft_sem_init(&pq.free_count, (unsigned)size), 0);
    CHECK_EQ(weft_mutex_init(&pq.mu), 0);
    run_vthreads(size, pq_connect_one); /* size connects at once */
    pq.nfree = size;
}

static void pq_pool_close(void) {
    CHECK_EQ(pq.nfree, pq.size);
    for (int i = 0; i < pq.size; i++) PQfinish(pq.conns[i]);
    free(pq.conns);
    weft_sem_destroy(&pq.free_count);
    weft_mutex_destroy(&pq.mu);
}

static PGconn *pq_get(void) {
    CHECK_EQ(weft_sem_acquire(&pq.free_count), 0);
    CHECK_EQ(weft_mutex_lock(&pq.mu), 0);
    PGconn *c = pq.conns[--pq.nfree];
    weft_mutex_unlock(&pq.mu);
    return c;
}

static void pq_put(PGconn *c) {
    CHECK_EQ(weft_mutex_lock(&pq.mu), 0);
    pq.conns[pq.nfree++] = c;
    weft_mutex_unlock(&pq.mu);
    CHECK_EQ(weft_sem_release(&pq.free_count), 0);
}

static void pq_fail(const char *what, long i, PGconn *c, PGresult *r) {
    fprintf(stderr, "vthread %ld: %s: %s %s", i, what, r ? PQresStatus(PQresultStatus(r)) : "", PQerrorMessage(c));
    _exit(1);
}

/* The article's handler: SELECT pg_sleep(S), i -- one row, (void, i). */
static void pq_sleep_query(PGconn *c, long i) {
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_sleep(%s), %ld", pq.sleep_s, i);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) != 2) pq_fail(sql, i, c, r);
    if (atol(PQgetvalue(r, 0, 1)) != i || PQgetlength(r, 0, 0) != 0) {
        fprintf(stderr, "vthread %ld: %s answered (%s, %s)\n", i, sql, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
        _exit(1);
    }
    PQclear(r);
}

/* A query whose answer is data to check, with parameters: k rows (g, a
 * string of g letters that depend on g and i), tens of KiB in all, so the
 * answer takes several reads. */
static void pq_data_query(PGconn *c, long i) {
    long k = 100 + i % 200;
    char p1[24], p2[24];
    snprintf(p1, sizeof p1, "%ld", i);
    snprintf(p2, sizeof p2, "%ld", k);
    const char *params[2] = {p1, p2};
    PGresult *r = PQexecParams(c, "SELECT g, repeat(chr(65 + (g + $1::int) % 26), g) FROM generate_series(1, $2::int) AS g",
                               2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != k || PQnfields(r) != 2) pq_fail("data query", i, c, r);
    for (long row = 0; row < k; row++) {
        long g = row + 1;
        CHECK_EQ(atol(PQgetvalue(r, (int)row, 0)), g);
        CHECK_EQ(PQgetlength(r, (int)row, 1), g);
        const char *s = PQgetvalue(r, (int)row, 1);
        char want = (char)('A' + (g + i) % 26);
        for (long j = 0; j < g; j++)
            if (s[j] != want) {
                fprintf(stderr, "vthread %ld: row %ld: '%.*s' is not %ld x '%c'\n", i, g, (int)g, s, g, want);
                _exit(1);
            }
    }
    PQclear(r);
}

static void *pq_worker(void *arg) {
    long i = (long)(intptr_t)arg;
    PGconn *c = pq_get();
    pq_sleep_query(c, i);
    pq_put(c);
    c = pq_get();
    pq_data_query(c, i);
    pq_put(c);
    atomic_fetch_add(&pq.done, 1);
    return NULL;
}

static void pq_run(int hooks, long n, int pool, const char *sleep_s) {
    backend_pg pg;
    if (backend_pg_start(&pg, pool + 20) == -ENOENT) SKIP("%s", pg.why);
    runtime_start(hooks);
    pq.sleep_s = sleep_s;
    int saved, fd = stderr_to_file(&saved);
    pq_pool_open(&pg, pool);
    run_vthreads(n, pq_worker);
    int lines = check_pinned_lines(fd, saved, hooks);
    CHECK_EQ(atomic_load(&pq.done), n);
    uint64_t pinned = pinned_now();
    printf("%ld vthreads, %d connections, hooks %s: every answer right; weft_stats.pinned = %llu "
           "(%d in weft's own locks)\n", n, pool, hooks ? "on" : "off", (unsigned long long)pinned,
           hooks ? lines : 0);
    /* hooks off: the carriers block in libpq's poll for 50 ms at a time;
     * the monitor sees it, names it and compensates */
    if (!hooks) CHECK(pinned > 0 && lines > 0);
    pq_pool_close();
    backend_pg_stop(&pg);
}

#endif /* HAVE_LIBPQ */

/* 1,000 vthreads, 200 connections bounded by a weft_sem; each vthread runs
 * SELECT pg_sleep(0.1), i and a data query, and checks both answers.  With
 * hooks on nothing may pin. */
TEST(libpq_blocking_1000_vthreads_pool_200_hooked) {
    DET_SKIP("a real PostgreSQL server answers in real time while libpq's hooked poll timeouts run on the virtual clock (flaky under load)");
#if HAVE_LIBPQ
    pq_run(1, SCALE(1000), SCALE(200), "0.1");
#else
    SKIP("built without libpq (apt-get install libpq-dev; scripts/deps.sh does)");
#endif
}

/* The same program with hooks off: libpq blocks its carrier in poll and
 * recv, yet every query completes (two carriers, and the spare carriers
 * the pinning monitor adds), and the monitor counts pinned events.
 * Smaller: the spares are bounded (2 x carriers), so a few sleeps run at
 * a time. */
TEST(libpq_blocking_hooks_off_completes) {
    DET_SKIP("checks the monitor's pinned events (no monitor in the mode)");
#if HAVE_LIBPQ
    pq_run(0, SCALE(200), SCALE(50), "0.05");
#else
    SKIP("built without libpq (apt-get install libpq-dev; scripts/deps.sh does)");
#endif
}

/* ------------------------------------------------------------------------ */
/* hiredis                                                                   */
/* ------------------------------------------------------------------------ */

#if HAVE_HIREDIS

static struct {
    weft_sem free_count;
    weft_mutex mu;
    redisContext **conns;
    int nfree, size;
    const backend_redis *srv;
    atomic_uchar *seen; /* INCR's answers: each of 1..n exactly once */
    long n;
    atomic_long done;
} rd;

#define RD_VALUE_MIN 3000 /* bytes: a value takes more than one small read */

static void *rd_connect_one(void *arg) {
    long i = (long)(intptr_t)arg;
    redisContext *c = i % 2 ? redisConnect("127.0.0.1", rd.srv->port) : redisConnectUnix(rd.srv->sock);
    if (!c || c->err) {
        fprintf(stderr, "redis connection %ld: %s\n", i, c ? c->errstr : "out of memory");
        _exit(1);
    }
    rd.conns[i] = c;
    return NULL;
}

static redisContext *rd_get(void) {
    CHECK_EQ(weft_sem_acquire(&rd.free_count), 0);
    CHECK_EQ(weft_mutex_lock(&rd.mu), 0);
    redisContext *c = rd.conns[--rd.nfree];
    weft_mutex_unlock(&rd.mu);
    return c;
}

static void rd_put(redisContext *c) {
    CHECK_EQ(weft_mutex_lock(&rd.mu), 0);
    rd.conns[rd.nfree++] = c;
    weft_mutex_unlock(&rd.mu);
    CHECK_EQ(weft_sem_release(&rd.free_count), 0);
}

static redisReply *rd_cmd(redisContext *c, long i, int type, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r || r->type != type) {
        fprintf(stderr, "vthread %ld: %s: %s (reply type %d, want %d)\n", i, fmt, r ? (r->str ? r->str : "") : c->errstr,
                r ? r->type : -1, type);
        _exit(1);
    }
    return r;
}

static void rd_value(char *v, size_t len, long i) {
    for (size_t j = 0; j < len; j++) v[j] = (char)('a' + (j * 7 + (size_t)i) % 26);
}

static void *rd_worker(void *arg) {
    long i = (long)(intptr_t)arg;
    size_t len = RD_VALUE_MIN + (size_t)(i % 1000);
    char key[32], *v = malloc(len), *want = malloc(len);
    CHECK(v && want);
    snprintf(key, sizeof key, "weft:key:%ld", i);
    rd_value(want, len, i);

    redisContext *c = rd_get();
    redisReply *r = rd_cmd(c, i, REDIS_REPLY_STATUS, "SET %s %b", key, want, len);
    CHECK(strcmp(r->str, "OK") == 0);
    freeReplyObject(r);
    rd_put(c);

    c = rd_get();
    r = rd_cmd(c, i, REDIS_REPLY_STRING, "GET %s", key);
    CHECK_EQ(r->len, len);
    CHECK(memcmp(r->str, want, len) == 0);
    freeReplyObject(r);
    r = rd_cmd(c, i, REDIS_REPLY_INTEGER, "INCR weft:counter");
    CHECK(r->integer >= 1 && r->integer <= rd.n);
    CHECK_EQ(atomic_exchange(&rd.seen[r->integer], 1), 0);
    freeReplyObject(r);
    rd_put(c);

    free(v);
    free(want);
    atomic_fetch_add(&rd.done, 1);
    return NULL;
}

#endif /* HAVE_HIREDIS */

/* 1,000 vthreads share 100 connections (half TCP, half the Unix socket):
 * SET a 3-4 KB value, GET it back, INCR one counter; every value comes back
 * whole and the counter's answers are 1..1000, each once. */
TEST(hiredis_blocking_1000_vthreads) {
#if HAVE_HIREDIS
    backend_redis srv;
    if (backend_redis_start(&srv) == -ENOENT) SKIP("%s", srv.why);
    runtime_start(1);
    rd.srv = &srv;
    rd.n = SCALE(1000);
    rd.size = SCALE(100);
    rd.seen = calloc((size_t)rd.n + 1, 1);
    rd.conns = calloc((size_t)rd.size, sizeof *rd.conns);
    CHECK(rd.seen && rd.conns);
    CHECK_EQ(weft_sem_init(&rd.free_count, (unsigned)rd.size), 0);
    CHECK_EQ(weft_mutex_init(&rd.mu), 0);
    run_vthreads(rd.size, rd_connect_one);
    rd.nfree = rd.size;

    int saved, fd = stderr_to_file(&saved);
    run_vthreads(rd.n, rd_worker);
    int lines = check_pinned_lines(fd, saved, 1);
    CHECK_EQ(atomic_load(&rd.done), rd.n);
    for (long v = 1; v <= rd.n; v++) CHECK_EQ(rd.seen[v], 1);
    /* what the server holds: the counter at n, n keys and the counter */
    redisReply *r = rd_cmd(rd.conns[0], -1, REDIS_REPLY_STRING, "GET weft:counter");
    CHECK_EQ(atol(r->str), rd.n);
    freeReplyObject(r);
    r = rd_cmd(rd.conns[0], -1, REDIS_REPLY_INTEGER, "DBSIZE");
    CHECK_EQ(r->integer, rd.n + 1);
    freeReplyObject(r);
    uint64_t pinned = pinned_now();
    printf("%ld vthreads, %d connections: every reply right; weft_stats.pinned = %llu (%d in weft's own locks)\n",
           rd.n, rd.size, (unsigned long long)pinned, lines);

    for (int i = 0; i < rd.size; i++) redisFree(rd.conns[i]);
    free(rd.conns);
    free(rd.seen);
    weft_sem_destroy(&rd.free_count);
    weft_mutex_destroy(&rd.mu);
    backend_redis_stop(&srv);
#else
    SKIP("built without hiredis (apt-get install libhiredis-dev; scripts/deps.sh does)");
#endif
}

/* ------------------------------------------------------------------------ */
/* libcurl                                                                   */
/* ------------------------------------------------------------------------ */

#if HAVE_LIBCURL && defined(WEFT_HTTPD_PATH)

#define CURL_SMALL "hello from weft-httpd, fetched by libcurl\n"
#define CURL_BIG_LEN (96 * 1024 + 13) /* several reads, an odd length */

static struct {
    int port;
    char *big;
    weft_sem slots; /* transfers at once: the fd limit's share */
    atomic_long done;
} cu;

typedef struct body {
    char *b;
    size_t len, cap;
} body;

static size_t cu_write(char *p, size_t size, size_t n, void *ud) {
    body *b = ud;
    size_t k = size * n;
    if (b->len + k > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + k) cap *= 2;
        char *nb = realloc(b->b, cap);
        if (!nb) return 0;
        b->b = nb, b->cap = cap;
    }
    memcpy(b->b + b->len, p, k);
    b->len += k;
    return k;
}

static void cu_get(CURL *e, long i, const char *path, const char *want, size_t want_len) {
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", cu.port, path);
    body b = {0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    CURLcode rc = curl_easy_perform(e);
    if (rc != CURLE_OK) {
        fprintf(stderr, "vthread %ld: GET %s: %s\n", i, url, curl_easy_strerror(rc));
        _exit(1);
    }
    long code = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    CHECK_EQ(code, 200);
    CHECK_EQ(b.len, want_len);
    CHECK(memcmp(b.b, want, want_len) == 0);
    free(b.b);
}

static void *cu_worker(void *arg) {
    long i = (long)(intptr_t)arg;
    CHECK_EQ(weft_sem_acquire(&cu.slots), 0);
    CURL *e = curl_easy_init();
    CHECK(e != NULL);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, cu_write);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L); /* a lost response fails instead of hanging */
    /* two requests on one handle: the second reuses the kept-alive connection */
    cu_get(e, i, i % 2 ? "/small.txt" : "/big.bin", i % 2 ? CURL_SMALL : cu.big, i % 2 ? strlen(CURL_SMALL) : CURL_BIG_LEN);
    cu_get(e, i, i % 2 ? "/big.bin" : "/small.txt", i % 2 ? cu.big : CURL_SMALL, i % 2 ? CURL_BIG_LEN : strlen(CURL_SMALL));
    curl_easy_cleanup(e);
    CHECK_EQ(weft_sem_release(&cu.slots), 0);
    atomic_fetch_add(&cu.done, 1);
    return NULL;
}

static void cu_file(const char *dir, const char *name, const char *data, size_t len) {
    char p[160];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(data, 1, len, f), len);
    CHECK_EQ(fclose(f), 0);
}

/* weft-httpd --port 0 on dir (a child, registered with the guardian, its
 * stderr in dir/httpd.log); its port from the "listening on HOST:PORT"
 * line on its stdout. */
static launch cu_srv;
static pid_t cu_server_start(const char *dir) {
    char root[128], log[128];
    snprintf(root, sizeof root, "%s/www", dir);
    snprintf(log, sizeof log, "%s/httpd.log", dir);
    char *argv[] = {WEFT_HTTPD_PATH, "--port", "0", "--root", root, "--quiet", NULL};
    int fd = backend_log(log, getuid(), getgid());
    launch_opts o;
    backend_opts(&o, dir, fd, getuid(), getgid(), SIGKILL);
    o.out = LAUNCH_PIPE, o.err = LAUNCH_FD, o.err_fd = fd;
    CHECK_EQ(launch_start(&cu_srv, argv, &o), 0);
    close(fd);
    pid_t pid = cu_srv.pid;
    backend_guard("add %d %d %s\n", (int)pid, SIGKILL, dir);
    const char *l = launch_wait_line(&cu_srv, "listening on ", backend_ms() + BACKEND_START_S * 1000);
    if (l) {
        cu.port = launch_listen_port(l);
        CHECK(cu.port > 0);
        return pid;
    }
    backend_print_file(log);
    fprintf(stderr, "weft-httpd did not start: %s\n", cu_srv.buf);
    _exit(1);
}

#endif /* HAVE_LIBCURL && WEFT_HTTPD_PATH */

/* 1,000 vthreads, each with its own easy handle, GET a small and a 96 KiB
 * file from weft-httpd (the second request on the kept-alive connection);
 * every status and body checked.  weft-httpd must then stop cleanly. */
TEST(curl_easy_1000_vthreads_against_httpd) {
#if HAVE_LIBCURL && defined(WEFT_HTTPD_PATH)
    long nofile = raise_nofile();
    long n = SCALE(1000);
    /* both ends of every connection are on this machine, one in weft-httpd */
    long slots = nofile - 200 < n ? nofile - 200 : n;
    CHECK(slots >= 16);
    uid_t uid = getuid();
    char dir[64];
    backend_mkdtemp(dir, sizeof dir, "curl", uid, getgid());
    backend_guard("add 0 0 %s\n", dir);
    char www[96];
    snprintf(www, sizeof www, "%s/www", dir);
    CHECK_EQ(mkdir(www, 0755), 0);
    cu.big = malloc(CURL_BIG_LEN);
    CHECK(cu.big != NULL);
    for (size_t j = 0; j < CURL_BIG_LEN; j++) cu.big[j] = (char)((j * 131u) ^ (j >> 9));
    cu_file(www, "small.txt", CURL_SMALL, strlen(CURL_SMALL));
    cu_file(www, "big.bin", cu.big, CURL_BIG_LEN);
    pid_t srv = cu_server_start(dir);
    CHECK_EQ(curl_global_init(CURL_GLOBAL_ALL), 0);

    runtime_start(1);
    CHECK_EQ(weft_sem_init(&cu.slots, (unsigned)slots), 0);
    int saved, fd = stderr_to_file(&saved);
    run_vthreads(n, cu_worker);
    int lines = check_pinned_lines(fd, saved, 1);
    CHECK_EQ(atomic_load(&cu.done), n);
    uint64_t pinned = pinned_now();
    printf("%ld vthreads (%ld transfers at once): every body right; weft_stats.pinned = %llu "
           "(%d in weft's own locks)\n", n, slots, (unsigned long long)pinned, lines);

    backend_guard("del %d\n", (int)srv);
    kill(srv, SIGTERM);
    CHECK_EQ(launch_reap(&cu_srv, -1), 1);
    launch_close(&cu_srv);
    int st = cu_srv.status;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char log[96];
        snprintf(log, sizeof log, "%s/httpd.log", dir);
        backend_print_file(log);
        fprintf(stderr, "weft-httpd ended with status 0x%x\n", st);
        _exit(1);
    }
    curl_global_cleanup();
    weft_sem_destroy(&cu.slots);
    free(cu.big);
    backend_rm_rf(dir);
#elif HAVE_LIBCURL
    SKIP("built without the weft-httpd target");
#else
    SKIP("built without libcurl (apt-get install libcurl4-openssl-dev; scripts/deps.sh does)");
#endif
}
