/*
 * exp_sync.c -- the micro benchmarks of the sync layer (part of "micro"):
 *
 *   chan-pingpong   1 carrier, two vthreads hand a value back and forth over
 *                   two channels --rounds times (2,000,000): ns_per_switch =
 *                   wall / (2 * rounds), as the Go peer (switch go-chan,
 *                   GOMAXPROCS=1, two unbuffered channels) counts.  Twice:
 *                   mode=rendezvous (capacity 0, Go's unbuffered) and
 *                   mode=buffered (capacity 1).
 *   mutex           G=1000 vthreads each lock a weft_mutex M=1000 times and
 *                   increment a shared counter (default carriers, like the Go
 *                   peer's default GOMAXPROCS): ns_per_op = wall / (G * M).
 *                   Peer: mutex go 1000 1000 (sync.Mutex).
 *   select          1 carrier: a sender puts --rounds values (1,000,000) on 4
 *                   rendezvous channels in turn; the receiver takes them with
 *                   weft_select over the 4: ns_per_op = wall / rounds.  Peer:
 *                   bench/go/select.go (the same with Go's select).
 */
#define _GNU_SOURCE
#include "bench.h"

#include <weft.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int init_carriers(int carriers) {
    weft_runtime_opts cfg = {.carriers = carriers};
    int r = weft_init(&cfg);
    if (r < 0) fprintf(stderr, "weft-bench: weft_init(carriers=%d): %s\n", carriers, strerror(-r));
    return r;
}

/* ---- channel ping-pong -------------------------------------------------- */

typedef struct cpp {
    weft_chan *ping, *pong;
    long rounds;
    int err;
} cpp;

static void *cpp_echo(void *arg) {
    cpp *p = arg;
    long v;
    for (long i = 0; i < p->rounds; i++) {
        int r = weft_chan_recv(p->ping, &v);
        if (r == 0) r = weft_chan_send(p->pong, &v);
        if (r < 0) {
            p->err = r;
            break;
        }
    }
    return NULL;
}

static void *cpp_drive(void *arg) {
    cpp *p = arg;
    long v;
    for (long i = 0; i < p->rounds; i++) {
        v = i;
        int r = weft_chan_send(p->ping, &v);
        if (r == 0) r = weft_chan_recv(p->pong, &v);
        if (r < 0 || v != i) {
            p->err = r < 0 ? r : -EPROTO;
            break;
        }
    }
    return NULL;
}

static int chan_pingpong(const bench_opts *o, bench_report *rep, size_t cap) {
    if (init_carriers(1) < 0) return -EINVAL;
    cpp p = {.rounds = o->rounds > 0 ? o->rounds : 2000000};
    if (weft_chan_create(&p.ping, sizeof(long), cap) < 0 || weft_chan_create(&p.pong, sizeof(long), cap) < 0)
        return -ENOMEM;
    weft_thread *a, *b;
    int64_t t0 = weft_now();
    if (weft_spawn(&b, cpp_echo, &p, NULL) < 0 || weft_spawn(&a, cpp_drive, &p, NULL) < 0) return -ENOMEM;
    weft_join(a, NULL);
    weft_join(b, NULL);
    int64_t t1 = weft_now();
    weft_chan_free(p.ping);
    weft_chan_free(p.pong);
    weft_shutdown();
    bench_result r;
    br_init(&r, "chan-pingpong", "weft");
    br_set(&r, "status", "%s", p.err ? "failed" : "ok");
    br_set(&r, "mode", "%s", cap ? "buffered" : "rendezvous");
    br_setl(&r, "capacity", (long long)cap);
    br_setl(&r, "rounds", p.rounds);
    br_setf(&r, "wall_s", 3, (double)(t1 - t0) / 1e9);
    br_setf(&r, "ns_per_switch", 1, (double)(t1 - t0) / (2.0 * (double)p.rounds));
    br_setl(&r, "carriers", 1);
    return report_add_weft(rep, &r);
}

int micro_chan_pingpong(const bench_opts *o, bench_report *rep) { return chan_pingpong(o, rep, 0); }
int micro_chan_buffered(const bench_opts *o, bench_report *rep) { return chan_pingpong(o, rep, 1); }

/* ---- contended mutex ---------------------------------------------------- */

static struct {
    weft_mutex mu;
    long counter;
    long m;
} MX = {.mu = WEFT_MUTEX_INIT};

static void *mutex_worker(void *arg) {
    (void)arg;
    for (long j = 0; j < MX.m; j++) {
        weft_mutex_lock(&MX.mu);
        MX.counter++;
        weft_mutex_unlock(&MX.mu);
    }
    return NULL;
}

int micro_mutex(const bench_opts *o, bench_report *rep) {
    if (init_carriers(o->carriers) < 0) return -EINVAL;
    long g = 1000; /* as the Go peer: mutex go 1000 1000 */
    MX.m = 1000;
    MX.counter = 0;
    weft_thread **t = calloc((size_t)g, sizeof *t);
    if (!t) return -ENOMEM;
    weft_stats s;
    weft_stats_get(&s);
    int64_t t0 = weft_now();
    for (long i = 0; i < g; i++)
        if (weft_spawn(&t[i], mutex_worker, NULL, NULL) < 0) return -ENOMEM;
    for (long i = 0; i < g; i++) weft_join(t[i], NULL);
    int64_t t1 = weft_now();
    free(t);
    weft_shutdown();
    bench_result r;
    br_init(&r, "mutex", "weft");
    br_set(&r, "status", "%s", MX.counter == g * MX.m ? "ok" : "wrong_count");
    br_setl(&r, "goroutines", g);
    br_setl(&r, "ops_each", MX.m);
    br_setl(&r, "counter", MX.counter);
    br_setf(&r, "wall_s", 4, (double)(t1 - t0) / 1e9);
    br_setf(&r, "ns_per_op", 1, (double)(t1 - t0) / (double)(g * MX.m));
    br_setl(&r, "carriers", (long long)s.carriers);
    return report_add_weft(rep, &r);
}

/* ---- select over 4 channels --------------------------------------------- */

typedef struct sel {
    weft_chan *c[4];
    long rounds;
    long sum;
    int err;
} sel;

static void *sel_sender(void *arg) {
    sel *s = arg;
    for (long i = 0; i < s->rounds; i++) {
        int r = weft_chan_send(s->c[i & 3], &i);
        if (r < 0) {
            s->err = r;
            break;
        }
    }
    return NULL;
}

static void *sel_receiver(void *arg) {
    sel *s = arg;
    long v[4];
    weft_case cs[4];
    for (int k = 0; k < 4; k++) cs[k] = (weft_case)WEFT_RECV(s->c[k], &v[k]);
    for (long i = 0; i < s->rounds; i++) {
        int k = weft_select(cs, 4, 0);
        if (k < 0) {
            s->err = k;
            break;
        }
        s->sum += v[k];
    }
    return NULL;
}

int micro_select(const bench_opts *o, bench_report *rep) {
    if (init_carriers(1) < 0) return -EINVAL;
    sel s = {.rounds = o->rounds > 0 ? o->rounds : 1000000};
    for (int k = 0; k < 4; k++)
        if (weft_chan_create(&s.c[k], sizeof(long), 0) < 0) return -ENOMEM;
    weft_thread *a, *b;
    int64_t t0 = weft_now();
    if (weft_spawn(&b, sel_receiver, &s, NULL) < 0 || weft_spawn(&a, sel_sender, &s, NULL) < 0) return -ENOMEM;
    weft_join(a, NULL);
    weft_join(b, NULL);
    int64_t t1 = weft_now();
    for (int k = 0; k < 4; k++) weft_chan_free(s.c[k]);
    weft_shutdown();
    long want = s.rounds * (s.rounds - 1) / 2;
    bench_result r;
    br_init(&r, "select", "weft");
    br_set(&r, "status", "%s", s.err ? "failed" : s.sum == want ? "ok" : "wrong_sum");
    br_setl(&r, "channels", 4);
    br_setl(&r, "rounds", s.rounds);
    br_setf(&r, "wall_s", 3, (double)(t1 - t0) / 1e9);
    br_setf(&r, "ns_per_op", 1, (double)(t1 - t0) / (double)s.rounds);
    br_setl(&r, "carriers", 1);
    return report_add_weft(rep, &r);
}
