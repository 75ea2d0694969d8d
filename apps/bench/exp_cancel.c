/*
 * exp_cancel.c -- "cancel-storm": structured cancellation at scale.
 *
 * -n N vthreads (default 100,000) are forked as tasks in --scopes S scopes
 * (default 10,000), one owner vthread per scope.  The tasks block in five
 * ways, in turn: weft_sleep (an hour), weft_chan_recv on a rendezvous
 * channel nobody sends on, weft_mutex_lock on a mutex the main thread holds,
 * weft_future_get on a future nobody completes, and --sockets K of them
 * (default 1,000) in weft_read on one end of a socket pair with nothing to
 * read.  When every task is parked (stats: live == S + N + 1), the main
 * thread cancels every owner with weft_cancel, one after another; each
 * owner's weft_scope_join returns -ECANCELED and its weft_scope_close waits
 * for its tasks.  Measured: cancel_s, from the first weft_cancel until the
 * last owner is joined (every task has returned and every scope is closed).
 * Checked and reported: live vthreads afterwards (must be what it was
 * before), fds open afterwards vs before (socket pairs closed by the
 * experiment itself; nothing else may remain), how each task ended (all
 * must see -ECANCELED), RSS.  Memory leaks are LeakSanitizer's to find: the
 * experiment frees everything it made (run it from an ASan build).
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { WAIT_SLEEP, WAIT_CHAN, WAIT_MUTEX, WAIT_FUTURE, WAIT_KINDS, WAIT_READ = WAIT_KINDS };

static struct {
    long n, scopes, sockets, per_scope, stride;
    weft_chan *chan;
    weft_mutex mutex;
    weft_future *future;
    int (*pairs)[2];
    _Atomic long socket_next;
    _Atomic long parked_ok, ended_cancelled, ended_other;
    _Atomic long owners_cancelled;
} S;

static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static int64_t live_now(void) {
    weft_stats st;
    weft_stats_get(&st);
    return (int64_t)st.live;
}

/* A task: blocks one of the five ways until cancelled. */
static int blocked_task(void *arg, void **result) {
    (void)result;
    long k = (long)(intptr_t)arg;
    int r;
    char c;
    switch (k) {
    case WAIT_SLEEP: r = weft_sleep(3600LL * 1000000000); break;
    case WAIT_CHAN: r = weft_chan_recv(S.chan, &c); break;
    case WAIT_MUTEX:
        r = weft_mutex_lock(&S.mutex);
        if (r == 0) weft_mutex_unlock(&S.mutex); /* must not happen: main holds it */
        break;
    case WAIT_FUTURE: {
        void *v;
        r = weft_future_get(S.future, &v, 0);
        break;
    }
    default: { /* a socket read */
        long i = atomic_fetch_add(&S.socket_next, 1);
        r = (int)weft_read(S.pairs[i][0], &c, 1);
        break;
    }
    }
    if (r == -ECANCELED) atomic_fetch_add(&S.ended_cancelled, 1);
    else atomic_fetch_add(&S.ended_other, 1);
    return r;
}

static void *owner_main(void *arg) {
    long o = (long)(intptr_t)arg;
    weft_scope *s;
    int r = weft_scope_create(&s, WEFT_SCOPE_ALL, 0);
    if (r < 0) return (void *)(intptr_t)r;
    long first = o * S.per_scope;
    for (long j = 0; j < S.per_scope && first + j < S.n; j++) {
        long idx = first + j;
        /* the first `sockets` tasks (spread over the scopes) read sockets */
        long kind = S.stride && idx % S.stride == 0 && idx / S.stride < S.sockets ? WAIT_READ : idx % WAIT_KINDS;
        if (!weft_fork(s, blocked_task, (void *)(intptr_t)kind)) break;
    }
    r = weft_scope_join(s); /* -ECANCELED when the storm comes */
    weft_scope_close(s);
    return (void *)(intptr_t)r;
}

int exp_cancel_storm(const bench_opts *o, bench_report *rep) {
    memset(&S, 0, sizeof S);
    S.n = o->n > 0 ? o->n : 100000;
    S.scopes = o->scopes > 0 ? o->scopes : 10000;
    S.sockets = o->sockets >= 0 ? o->sockets : 1000;
    if (S.scopes > S.n) S.scopes = S.n;
    if (S.sockets > S.n) S.sockets = S.n;
    S.per_scope = (S.n + S.scopes - 1) / S.scopes;
    S.stride = S.sockets ? S.n / S.sockets : 0; /* every stride-th task reads a socket */
    weft_runtime_opts cfg = {.carriers = o->carriers};
    if (o->carriers) weft_init(&cfg);
    weft_io_backend(); /* starts the runtime: its own fds are not the experiment's */
    int fds0 = count_fds();
    for (int prev = -1; prev != fds0;) { /* carriers open their rings as they start */
        prev = fds0;
        sleep_ns_os(10 * 1000000);
        fds0 = count_fds();
    }
    int64_t live0 = live_now();

    (void)weft_chan_create(&S.chan, 1, 0); /* NULL when it fails: checked below */
    (void)weft_future_create(&S.future); /* NULL when it fails: checked below */
    weft_mutex_init(&S.mutex);
    S.pairs = calloc((size_t)(S.sockets ? S.sockets : 1), sizeof *S.pairs);
    if (!S.chan || !S.future || !S.pairs) {
        fprintf(stderr, "weft-bench: cancel-storm: out of memory\n");
        return -ENOMEM;
    }
    for (long i = 0; i < S.sockets; i++)
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, S.pairs[i]) < 0) {
            fprintf(stderr, "weft-bench: cancel-storm: socketpair %ld: %s\n", i, strerror(errno));
            return -errno;
        }
    weft_mutex_lock(&S.mutex); /* held by the main (platform) thread throughout */

    double t0 = now_s();
    weft_thread **owners = calloc((size_t)S.scopes, sizeof *owners);
    for (long i = 0; i < S.scopes; i++) {
        int r = weft_spawn(&owners[i], owner_main, (void *)(intptr_t)i, NULL);
        if (r < 0) {
            fprintf(stderr, "weft-bench: cancel-storm: spawn owner %ld: %s\n", i, strerror(-r));
            return r;
        }
    }
    /* everyone parked: live = owners + tasks (+ what was live before) */
    int64_t want = live0 + S.scopes + S.n;
    while (live_now() < want && now_s() - t0 < 120) sleep_ns_os(1000000);
    sleep_ns_os(50 * 1000000); /* the last ones reach their blocking call */
    double t_started = now_s();
    long long rss_parked = rss_bytes();

    /* the storm */
    double c0 = now_s();
    for (long i = 0; i < S.scopes; i++) weft_cancel(owners[i]);
    long joined_cancelled = 0;
    for (long i = 0; i < S.scopes; i++) {
        void *r;
        weft_join(owners[i], &r);
        joined_cancelled += (intptr_t)r == -ECANCELED;
    }
    double c1 = now_s();

    weft_mutex_unlock(&S.mutex);
    for (long i = 0; i < S.sockets; i++) {
        close(S.pairs[i][0]);
        close(S.pairs[i][1]);
    }
    int64_t live1 = live_now();
    free(owners);
    free(S.pairs);
    weft_chan_free(S.chan);
    weft_future_unref(S.future);
    weft_mutex_destroy(&S.mutex);
    int fds1 = count_fds();

    if (fds1 != fds0) { /* say what they are */
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char p[300], t[256];
            snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
            ssize_t k = readlink(p, t, sizeof t - 1);
            if (k > 0) fprintf(stderr, "# fd %s -> %.*s\n", e->d_name, (int)k, t);
        }
        if (d) closedir(d);
    }
    bench_result r;
    br_init(&r, "cancel-storm", "weft");
    int ok = live1 == live0 && fds1 == fds0 && atomic_load(&S.ended_cancelled) == S.n && joined_cancelled == S.scopes;
    br_set(&r, "status", "%s", ok ? "ok" : "leak");
    br_setl(&r, "n", S.n);
    br_setl(&r, "scopes", S.scopes);
    br_setl(&r, "sockets", S.sockets);
    br_setf(&r, "cancel_s", 4, c1 - c0);
    br_setf(&r, "start_s", 3, t_started - t0);
    br_setl(&r, "tasks_cancelled", atomic_load(&S.ended_cancelled));
    br_setl(&r, "tasks_other", atomic_load(&S.ended_other));
    br_setl(&r, "owners_cancelled", joined_cancelled);
    br_setl(&r, "live_before", live0);
    br_setl(&r, "live_after", live1);
    br_setl(&r, "fds_before", fds0);
    br_setl(&r, "fds_after", fds1);
    br_setf(&r, "rss_parked_mib", 1, (double)rss_parked / (1 << 20));
    br_setf(&r, "rss_after_mib", 1, (double)rss_bytes() / (1 << 20));
    report_add_weft(rep, &r);
    return 0;
}
