/*
 * tests/api/bad_input.c -- every public call that can fail says why (issue
 * 25): one table, a row per bad input, each with the -errno it must return
 * (docs/errors.md).  Registered by cmake/lint-api.cmake as api.bad_input.
 *
 * The table is complete by construction: the test reads the installed
 * headers (WEFT_INCLUDE_DIR) and every WEFT_API call that returns an int, a
 * ssize_t or an off_t must have a row here, or stand in NO_BAD_INPUT with
 * the reason it has none (no argument that can be wrong); the weft__*_at
 * forms behind the call-site macros are covered by their macros' rows.  A call added to
 * a header without a row fails the test.  The pointer-returning calls (NULL
 * and errno) have theirs in future.pointer_calls_set_errno_on_null; uses
 * after free stop the program by design (errors.md, "Misuse") and are
 * tested where each object is.
 *
 * Every row runs on a vthread with the runtime started, except the few that
 * concern starting it.  Nothing here blocks: a bad argument is refused
 * before any wait.
 */
#define _GNU_SOURCE
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef WEFT_INCLUDE_DIR
#error "WEFT_INCLUDE_DIR: the headers whose calls the table must cover"
#endif

/* the calls seen in rows, for the coverage check */
static char seen[512][64];
static int nseen, failures, rows;

static void note_call(const char *expr) {
    char name[64];
    size_t n = strcspn(expr, "( ");
    if (n >= sizeof name) n = sizeof name - 1;
    memcpy(name, expr, n);
    name[n] = 0;
    for (int i = 0; i < nseen; i++)
        if (!strcmp(seen[i], name)) return;
    if (nseen < 512) snprintf(seen[nseen++], sizeof seen[0], "%s", name);
}

static void row(const char *expr, long long got, long long want, int line) {
    rows++;
    note_call(expr);
    if (got != want) {
        fprintf(stderr, "bad_input.c:%d: %s returned %lld (%s), want %lld (%s)\n", line, expr, got,
                got < 0 ? strerror((int)-got) : "not an error", want, want < 0 ? strerror((int)-want) : "-");
        failures++;
    }
}

/* ROW(call, -EXXX): the call, as written, must return that. */
#define ROW(call, want) row(#call, (long long)(call), (long long)(want), __LINE__)

/* Calls with no argument that can be wrong: no row, and why. */
static const char *const NO_BAD_INPUT[][2] = {
    {"weft_shutdown", "void"},
    {"weft_hook_active", "no argument; returns 0 or 1"},
    {"weft_yield", "no argument; returns 0 or -ECANCELED"},
    {"weft_now", "no argument"},
    {"weft_sleep", "any ns is a time: <= 0 returns at once"},
    {"weft_sleep_until", "any deadline is a time: a past one returns at once"},
    {"weft_deadline_set", "any deadline is a time (0: none); returns the old one"},
    {"weft_cancelled", "no argument"},
    {"weft_park", "any deadline is a time (0: none)"},
    {"weft_io_backend", "no argument"},
    {"weft_future_done", "a predicate (1 or 0): NULL reads as not done; a negative value would read as true"},
};

static void handler(ssize_t r, void *ctx) {
    (void)r;
    (void)ctx;
}
static void *nothing(void *a) { return a; }
static int task_fn(void *a, void **r) {
    *r = a;
    return 0;
}
static void body(size_t i, void *ctx) {
    (void)i;
    (void)ctx;
}
static void rbody(size_t i, void *acc, void *ctx) {
    (void)i;
    (void)acc;
    (void)ctx;
}
static void rinit(void *acc, void *ctx) {
    (void)acc;
    (void)ctx;
}
static void rcombine(void *into, const void *from, void *ctx) {
    (void)into;
    (void)from;
    (void)ctx;
}
static void once_fn(void) {}
static int scoped_fn(void *a) {
    (void)a;
    return 0;
}

static int run(void *arg) {
    (void)arg;
    char buf[16];
    struct iovec iov = {buf, sizeof buf};
    struct sockaddr_storage sa;
    socklen_t salen = sizeof sa;
    int64_t later = weft_now() + 1000000000;

    /* ---- weft.h: vthreads ---- */
    weft_thread *t = NULL;
    weft_thread_opts huge = {.stack_size = SIZE_MAX / 2};
    ROW(weft_spawn(&t, NULL, NULL, NULL), -EINVAL);
    ROW(weft_spawn(&t, nothing, NULL, &huge), -ENOMEM); /* no address space for it */
    ROW(weft_join(NULL, NULL), -EINVAL);
    ROW(weft_detach(NULL), -EINVAL);
    ROW(weft_set_name("x"), 0); /* (NULL: no name -- not an error) */
    ROW(weft_cancel(NULL), -EINVAL);
    ROW(weft_unpark(NULL), -EINVAL);
    ROW(weft_shield_begin(NULL, 0), -EINVAL);
    ROW(weft_shield_end(NULL), -EINVAL);
    ROW(weft_blocking(NULL, NULL, NULL), -EINVAL);

    /* ---- weft.h: carrier groups ---- */
    weft_group *g = NULL;
    ROW(weft_group_create(NULL, "g", 1, NULL), -EINVAL);
    ROW(weft_group_create(&g, "g", 0, NULL), -EINVAL);
    ROW(weft_group_create(&g, "g", -1, NULL), -EINVAL);
    ROW(weft_group_close(NULL), -EINVAL);
    ROW(weft_group_close(weft_group_default()), -EINVAL);
    ROW(weft_group_stats_get(NULL, NULL), -EINVAL); /* (g NULL: the default group) */
    ROW(weft_group_stats_get(weft_group_default(), NULL), -EINVAL);

    /* ---- weft.h: blocking-style I/O on a descriptor that is not open ---- */
    ROW(weft_read(-1, buf, 1), -EBADF);
    ROW(weft_write(-1, buf, 1), -EBADF);
    ROW(weft_write_all(-1, buf, 1), -EBADF);
    ROW(weft_pread(-1, buf, 1, 0), -EBADF);
    ROW(weft_pwrite(-1, buf, 1, 0), -EBADF);
    ROW(weft_preadv(-1, &iov, 1, 0), -EBADF);
    ROW(weft_pwritev(-1, &iov, 1, 0), -EBADF);
    ROW(weft_readv(-1, &iov, 1), -EBADF);
    ROW(weft_writev(-1, &iov, 1), -EBADF);
    ROW(weft_recv(-1, buf, 1, 0), -EBADF);
    ROW(weft_send(-1, buf, 1, 0), -EBADF);
    ROW(weft_accept(-1, (struct sockaddr *)&sa, &salen, 0), -EBADF);
    ROW(weft_connect(-1, (struct sockaddr *)&sa, sizeof(struct sockaddr_in)), -EBADF);
    off_t off = 0;
    ROW(weft_sendfile(-1, -1, &off, 1), -EBADF);
    ROW(weft_poll(-1, POLLIN, 0), -EBADF);
    ROW(weft_close(-1), -EBADF);
    ROW(weft_fsync(-1), -EBADF);
    ROW(weft_fdatasync(-1), -EBADF);
    ROW(weft_read_until(-1, buf, 1, later), -EBADF);
    ROW(weft_write_until(-1, buf, 1, later), -EBADF);
    ROW(weft_write_all_until(-1, buf, 1, later), -EBADF);
    ROW(weft_recv_until(-1, buf, 1, 0, later), -EBADF);
    ROW(weft_send_until(-1, buf, 1, 0, later), -EBADF);
    ROW(weft_accept_until(-1, (struct sockaddr *)&sa, &salen, 0, later), -EBADF);
    ROW(weft_connect_until(-1, (struct sockaddr *)&sa, sizeof(struct sockaddr_in), later), -EBADF);
    ROW(weft_sendfile_until(-1, -1, &off, 1, later), -EBADF);
    /* ... and arguments that are wrong whatever the descriptor */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 1;
    ROW(weft_readv(sv[0], NULL, -1), -EINVAL);
    ROW(weft_writev(sv[1], &iov, -1), -EINVAL);
    ROW(weft_sendfile(sv[1], sv[0], NULL, 1), -EINVAL);

    /* ---- weft.h: observability ---- */
    ROW(weft_dump(-1, WEFT_DUMP_TEXT), -EBADF);
    ROW(weft_dump(sv[1], 7), -EINVAL);
    ROW(weft_dump_on_signal(SIGKILL, 2, WEFT_DUMP_TEXT), -EINVAL);
    ROW(weft_dump_on_signal(SIGQUIT, 2, 7), -EINVAL);

    /* ---- weft/async.h ---- */
    ROW(weft_accept_async(sv[0], 0, NULL, NULL, NULL), -EINVAL);
    ROW(weft_recv_async(sv[0], NULL, 1, 0, handler, NULL, NULL), -EINVAL);
    ROW(weft_send_async(sv[1], NULL, 1, 0, handler, NULL, NULL), -EINVAL);
    ROW(weft_poll_async(sv[0], 0, handler, NULL, NULL), -EINVAL);
    ROW(weft_timer_async(later, NULL, NULL, NULL), -EINVAL);
    ROW(weft_recv_async(-1, buf, 1, 0, handler, NULL, NULL), -EBADF);

    /* ---- weft/chan.h ---- */
    weft_chan *c = NULL;
    int m = 0;
    weft_case cs = {0};
    ROW(weft_chan_create(NULL, sizeof(int), 1), -EINVAL);
    ROW(weft_chan_create(&c, SIZE_MAX, 2), -EINVAL);
    ROW(weft_chan_send(NULL, &m), -EINVAL);
    ROW(weft_chan_recv(NULL, &m), -EINVAL);
    ROW(weft_chan_send_until(NULL, &m, later), -EINVAL);
    ROW(weft_chan_recv_until(NULL, &m, later), -EINVAL);
    ROW(weft_chan_try_send(NULL, &m), -EINVAL);
    ROW(weft_chan_try_recv(NULL, &m), -EINVAL);
    ROW(weft_chan_close(NULL), -EINVAL);
    ROW(weft_select(NULL, 1, later), -EINVAL);
    ROW(weft_try_select(NULL, 1), -EINVAL);
    cs.op = 99;
    if (weft_chan_create(&c, sizeof(int), 1) != 0) return 1;
    cs.chan = c;
    cs.msg = &m;
    ROW(weft_try_select(&cs, 1), -EINVAL);
    ROW(weft_chan_try_send(c, NULL), -EINVAL); /* NULL only when elem_size is 0 */
    weft_chan_free(c);

    /* ---- weft/exec.h ---- */
    weft_executor *e = NULL;
    weft_executor_stats es;
    ROW(weft_executor_create_virtual(NULL), -EINVAL);
    ROW(weft_executor_create_fixed(NULL, 1, 0, WEFT_REJECT_ABORT), -EINVAL);
    ROW(weft_executor_create_fixed(&e, 0, 0, WEFT_REJECT_ABORT), -EINVAL);
    ROW(weft_executor_create_fixed(&e, 1, 0, (weft_reject_policy)99), -EINVAL);
    ROW(weft_executor_create_cached(&e, -1, 0), -EINVAL); /* (0: no limit) */
    ROW(weft_executor_create_scheduled(&e, 0), -EINVAL);
    ROW(weft_executor_create_group(&e, NULL), -EINVAL);
    ROW(weft_executor_shutdown(NULL), -EINVAL);
    ROW(weft_executor_await(NULL, later), -EINVAL);
    ROW(weft_executor_close(NULL), -EINVAL);
    ROW(weft_executor_close_now(NULL), -EINVAL);
    ROW(weft_executor_stats_get(NULL, &es), -EINVAL);

    /* ---- weft/file.h ---- */
    weft_file *f = NULL;
    ROW(weft_file_create(NULL, "/tmp/x", WEFT_READ, 0, NULL), -EINVAL);
    ROW(weft_file_create(&f, NULL, WEFT_READ, 0, NULL), -EINVAL);
    ROW(weft_file_create(&f, "/tmp/x", 0, 0, NULL), -EINVAL);           /* no READ or WRITE */
    ROW(weft_file_create(&f, "/tmp/x", WEFT_READ | (1 << 20), 0, NULL), -EINVAL); /* an unknown flag */
    ROW(weft_file_create(&f, "/nonexistent-weft-dir/x", WEFT_READ, 0, NULL), -ENOENT);
    ROW(weft_file_write(NULL, buf, 1, 0), -EINVAL);
    ROW(weft_file_read(NULL, buf, 1, 0), -EINVAL);
    ROW(weft_file_force(NULL, 0), -EINVAL);
    ROW(weft_file_size(NULL), -EINVAL);
    ROW(weft_file_truncate(NULL, 0), -EINVAL);
    ROW(weft_file_lock(NULL, 0, 1, 0, later), -EINVAL);
    ROW(weft_file_try_lock(NULL, 0, 1, 0), -EINVAL);
    ROW(weft_file_unlock(NULL, 0, 1), -EINVAL);
    ROW(weft_file_close(NULL), -EINVAL);
    ROW(weft_file_close_now(NULL), -EINVAL);
    char path[] = "/tmp/weft-bad-input-XXXXXX";
    int tfd = mkstemp(path);
    if (tfd < 0) return 1;
    close(tfd);
    if (weft_file_create(&f, path, WEFT_READ | WEFT_WRITE, 0, NULL) != 0) return 1;
    unlink(path);
    ROW(weft_file_write(f, buf, 1, -1), -EINVAL);
    ROW(weft_file_read(f, buf, 1, -1), -EINVAL);
    ROW(weft_file_truncate(f, -1), -EINVAL);
    ROW(weft_file_lock(f, -1, 1, 0, later), -EINVAL);
    ROW(weft_file_try_lock(f, 0, -1, 0), -EINVAL);
    ROW(weft_file_unlock(f, -1, 1), -EINVAL);
    if (weft_file_close(f) != 0) return 1;

    /* ---- weft/future.h ---- */
    weft_future *fu = NULL;
    void *v;
    ROW(weft_future_create(NULL), -EINVAL);
    ROW(weft_future_complete(NULL, NULL), -EINVAL);
    ROW(weft_future_fail(NULL, EIO), -EINVAL);
    ROW(weft_future_cancel(NULL), -EINVAL);
    ROW(weft_future_get(NULL, &v, later), -EINVAL);
    if (weft_future_create(&fu) != 0) return 1;
    ROW(weft_future_fail(fu, 0), -EINVAL);
    weft_future_unref(fu);

    /* ---- weft/local.h ---- */
    weft_scoped_key sk = WEFT_SCOPED_KEY("k");
    weft_binding b = {&sk, NULL};
    ROW(weft_local_key_create(NULL, NULL), -EINVAL);
    ROW(weft_local_key_delete((weft_local_key)0xdead), -EINVAL);
    ROW(weft_local_set((weft_local_key)0xdead, NULL), -EINVAL);
    ROW(weft_scoped_run(NULL, 1, scoped_fn, NULL), -EINVAL);
    ROW(weft_scoped_run(&b, 1, NULL, NULL), -EINVAL);
    ROW(weft_scoped_get(NULL, &v), -EINVAL);
    ROW(weft_scoped_get(&sk, &v), -ENOENT); /* not bound here (value NULL is allowed) */

    /* ---- weft/parallel.h ---- */
    long acc = 0;
    ROW(weft_parallel_for(5, 1, 1, body, NULL), -EINVAL);
    ROW(weft_parallel_for(0, 5, 1, NULL, NULL), -EINVAL);
    ROW(weft_parallel_reduce(0, 5, 1, NULL, sizeof acc, rinit, rbody, rcombine, NULL), -EINVAL);
    ROW(weft_parallel_reduce(0, 5, 1, &acc, 0, rinit, rbody, rcombine, NULL), -EINVAL);
    ROW(weft_parallel_reduce(0, 5, 1, &acc, sizeof acc, rinit, rbody, NULL, NULL), -EINVAL);
    ROW(weft_parallel_fail(-EIO), -EINVAL); /* not in a body */
    ROW(weft_parallel_fail(5), -EINVAL);

    /* ---- weft/scope.h ---- */
    weft_scope *s = NULL;
    ROW(weft_scope_create(NULL, WEFT_SCOPE_ALL, 0), -EINVAL);
    ROW(weft_scope_create(&s, (weft_scope_policy)7, 0), -EINVAL);
    ROW(weft_fork_released(NULL, task_fn, NULL), -EINVAL);
    ROW(weft_scope_join(NULL), -EINVAL);
    ROW(weft_task_state(NULL), -EINVAL);
    ROW(weft_task_error(NULL), -EINVAL);
    if (weft_scope_create(&s, WEFT_SCOPE_ALL, 0) != 0) return 1;
    ROW(weft_fork_released(s, NULL, NULL), -EINVAL);
    weft_scope_close(s);

    /* ---- weft/signal.h ---- */
    sigset_t kill_set;
    sigemptyset(&kill_set);
    sigaddset(&kill_set, SIGKILL);
    ROW(weft_signal_notify(NULL), -EINVAL);
    ROW(weft_signal_notify(&kill_set), -EINVAL);
    ROW(weft_signal_wait(NULL, later), -EINVAL);
    ROW(weft_signal_reset(NULL), -EINVAL);

    /* ---- weft/sync.h ---- */
    weft_latch l;
    ROW(weft_mutex_init(NULL), -EINVAL);
    ROW(weft_mutex_lock(NULL), -EINVAL);
    ROW(weft_mutex_lock_until(NULL, later), -EINVAL);
    ROW(weft_mutex_try_lock(NULL), -EINVAL);
    ROW(weft_mutex_unlock(NULL), -EINVAL);
    ROW(weft_mutex_destroy(NULL), -EINVAL);
    ROW(weft_cond_init(NULL), -EINVAL);
    ROW(weft_cond_wait(NULL, NULL), -EINVAL);
    ROW(weft_cond_wait_until(NULL, NULL, later), -EINVAL);
    ROW(weft_cond_signal(NULL), -EINVAL);
    ROW(weft_cond_broadcast(NULL), -EINVAL);
    ROW(weft_cond_destroy(NULL), -EINVAL);
    ROW(weft_sem_init(NULL, 1), -EINVAL);
    ROW(weft_sem_acquire(NULL), -EINVAL);
    ROW(weft_sem_acquire_until(NULL, later), -EINVAL);
    ROW(weft_sem_try_acquire(NULL), -EINVAL);
    ROW(weft_sem_release(NULL), -EINVAL);
    ROW(weft_sem_destroy(NULL), -EINVAL);
    ROW(weft_rwlock_init(NULL), -EINVAL);
    ROW(weft_rwlock_rdlock(NULL), -EINVAL);
    ROW(weft_rwlock_wrlock(NULL), -EINVAL);
    ROW(weft_rwlock_rdlock_until(NULL, later), -EINVAL);
    ROW(weft_rwlock_wrlock_until(NULL, later), -EINVAL);
    ROW(weft_rwlock_try_rdlock(NULL), -EINVAL);
    ROW(weft_rwlock_try_wrlock(NULL), -EINVAL);
    ROW(weft_rwlock_unlock(NULL), -EINVAL);
    ROW(weft_rwlock_destroy(NULL), -EINVAL);
    ROW(weft_latch_init(NULL, 1), -EINVAL);
    ROW(weft_latch_count_down(NULL), -EINVAL);
    ROW(weft_latch_add(NULL, 1), -EINVAL);
    ROW(weft_latch_await(NULL), -EINVAL);
    ROW(weft_latch_await_until(NULL, later), -EINVAL);
    ROW(weft_latch_destroy(NULL), -EINVAL);
    ROW(weft_once(NULL, once_fn), -EINVAL);
    if (weft_latch_init(&l, 0) != 0) return 1;
    ROW(weft_latch_count_down(&l), -EINVAL); /* below zero */
    ROW(weft_latch_add(&l, 1), 0);
    ROW(weft_latch_add(&l, UINT32_MAX), -EOVERFLOW); /* past UINT_MAX */
    weft_latch_destroy(&l);

    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* Every WEFT_API call of the headers returning int, ssize_t or off_t: a
 * row, or a reason in NO_BAD_INPUT. */
static int coverage(void) {
    static const char *const headers[] = {"weft.h",        "weft/async.h",  "weft/chan.h",  "weft/exec.h",
                                          "weft/file.h",   "weft/future.h", "weft/local.h", "weft/parallel.h",
                                          "weft/scope.h",  "weft/signal.h", "weft/sync.h"};
    regex_t re;
    if (regcomp(&re, "^WEFT_API (int|ssize_t|off_t) (weft_[a-z0-9_]+)\\(", REG_EXTENDED) != 0) return 1;
    int missing = 0, calls = 0;
    for (size_t h = 0; h < sizeof headers / sizeof headers[0]; h++) {
        char path[512], line[1024];
        snprintf(path, sizeof path, "%s/%s", WEFT_INCLUDE_DIR, headers[h]);
        FILE *fp = fopen(path, "r");
        if (!fp) {
            fprintf(stderr, "bad_input: cannot read %s: %s\n", path, strerror(errno));
            return 1;
        }
        while (fgets(line, sizeof line, fp)) {
            regmatch_t mt[3];
            if (regexec(&re, line, 3, mt, 0) != 0) continue;
            if (!strncmp(line + mt[2].rm_so, "weft__", 6)) continue; /* behind a macro with a row */
            char name[64];
            int n = (int)(mt[2].rm_eo - mt[2].rm_so);
            snprintf(name, sizeof name, "%.*s", n, line + mt[2].rm_so);
            calls++;
            int found = 0;
            for (int i = 0; i < nseen && !found; i++) found = !strcmp(seen[i], name);
            for (size_t i = 0; i < sizeof NO_BAD_INPUT / sizeof NO_BAD_INPUT[0] && !found; i++)
                found = !strcmp(NO_BAD_INPUT[i][0], name);
            if (!found) {
                fprintf(stderr, "bad_input: %s (%s) has no row and no reason in NO_BAD_INPUT\n", name, headers[h]);
                missing++;
            }
        }
        fclose(fp);
    }
    regfree(&re);
    printf("bad_input: %d calls in the headers, %d rows; %d without a row\n", calls, rows, missing);
    return missing != 0 || calls < 100;
}

int main(void) {
    /* starting the runtime: bad options are refused, and it still starts */
    ROW(weft_init(&(weft_runtime_opts){.carriers = -1}), -EINVAL);
    ROW(weft_init(&(weft_runtime_opts){.io = 99}), -EINVAL);
    ROW(weft_main(NULL, NULL), -EINVAL);
    int r = weft_main(run, NULL);
    if (r != 0) {
        fprintf(stderr, "bad_input: the table's vthread returned %d\n", r);
        failures++;
    }
    weft_shutdown();
    int cov = coverage();
    if (failures) fprintf(stderr, "bad_input: %d of %d rows wrong\n", failures, rows);
    return failures || cov ? 1 : 0;
}
