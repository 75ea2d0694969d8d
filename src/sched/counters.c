/*
 * The scheduler's counters and carrier views, for the observe layer
 * (stats.c's weft_stats_get, the dump, the console, weft-top).
 *
 * Each carrier counts what it does in its own fields (internal.h: written
 * by the carrier's thread, relaxed, never on a shared line), so nothing on
 * the spawn or switch path pays for a shared counter; here they are summed
 * on demand, racily: a sum is a snapshot that may be a few events stale,
 * never torn.  Finishes are read before starts, so a live count is never
 * negative.  The groups' carriers are read under weft__groups.lock (a group
 * may close meanwhile: what a closed group counted is in R.gone_*, added
 * by weft__group_carriers_stop), the spares through R.nall (acquire), and
 * a stall's fields as the monitor published them (spares.c: stall_begin's
 * release store of stall).  Nothing here writes what another thread reads.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

/* Adds carrier c's counters to s (started: its starts only); returns its live delta. */
static int64_t sum_carrier(weft__counters *s, weft__carrier *c, int started) {
    if (started) {
        s->started += atomic_load_explicit(&c->n_started, memory_order_relaxed);
        return 0;
    }
    s->finished += atomic_load_explicit(&c->n_finished, memory_order_relaxed);
    s->switches += atomic_load_explicit(&c->n_switches, memory_order_relaxed);
    s->steals += atomic_load_explicit(&c->n_steals, memory_order_relaxed);
    s->parks += atomic_load_explicit(&c->n_parks, memory_order_relaxed);
    return atomic_load_explicit(&c->live_delta, memory_order_relaxed);
}

void weft__counters_sum(weft__counters *s, uint64_t *peak, uint64_t *ncarriers) {
    memset(s, 0, sizeof *s);
    int64_t live = atomic_load(&R.live);
    int n = nall();
    pthread_mutex_lock(&weft__groups.lock); /* the groups' carriers, and what closed ones counted */
    s->finished += atomic_load(&R.gone_finished);
    s->switches += atomic_load(&R.gone_switches);
    s->steals += atomic_load(&R.gone_steals);
    s->parks += atomic_load(&R.gone_parks);
    for (int i = 0; i < n; i++) live += sum_carrier(s, R.c[i], 0);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) live += sum_carrier(s, g->c[i], 0);
    /* started after finished: a finish implies its start */
    for (int i = 0; i < n; i++) sum_carrier(s, R.c[i], 1);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) sum_carrier(s, g->c[i], 1);
    s->started += atomic_load(&R.gone_started);
    pthread_mutex_unlock(&weft__groups.lock);
    s->started += atomic_load(&R.plat_started);
    s->pinned = atomic_load(&R.n_pinned);
    s->hogs = atomic_load(&R.n_hogs);
    s->spares = (uint64_t)(n - R.n);
    s->compensating = (uint64_t)atomic_load(&R.nactive);
    uint64_t pk = atomic_load(&R.peak);
    if (live > 0 && (uint64_t)live > pk) pk = (uint64_t)live;
    *peak = pk;
    *ncarriers = (uint64_t)R.n;
}

static void carrier_view_fill(weft__carrier *c, weft__carrier_view *v) {
    v->index = c->index;
    v->spare = c->spare;
    v->group = c->grp->id;
    v->active = atomic_load(&c->shared);
    v->idle = carrier_idle(c) || atomic_load(&c->dormant);
    const weft_thread *t = __atomic_load_n(&c->cur, __ATOMIC_ACQUIRE);
    v->running = t ? ld64(&t->id) : 0;
    v->stall = atomic_load_explicit(&c->stall, memory_order_acquire);
    if (v->stall) {
        v->sysno = atomic_load(&c->stall_sysno);
        v->since = atomic_load(&c->stall_since);
        v->vid = atomic_load(&c->stall_vid);
        uint64_t nw[4];
        for (int i = 0; i < 4; i++) nw[i] = atomic_load_explicit(&c->stall_name[i], memory_order_relaxed);
        memcpy(v->vname, nw, 32);
        v->vname[31] = 0;
        for (int i = 0; i < WEFT__SITE_FRAMES; i++)
            v->site[i] = atomic_load_explicit(&c->stall_site[i], memory_order_relaxed);
    }
}

static void carrier_counters_fill(weft__carrier *c, weft__carrier_counters *o) {
    o->index = c->index;
    o->group = c->grp->id;
    o->spare = c->spare;
    o->active = atomic_load_explicit(&c->shared, memory_order_relaxed);
    o->switches = atomic_load_explicit(&c->n_switches, memory_order_relaxed);
    o->steals = atomic_load_explicit(&c->n_steals, memory_order_relaxed);
    o->parks = atomic_load_explicit(&c->n_parks, memory_order_relaxed);
    o->started = atomic_load_explicit(&c->n_started, memory_order_relaxed);
    o->finished = atomic_load_explicit(&c->n_finished, memory_order_relaxed);
    int64_t q = weft__dq_size(&c->dq);
    o->runnable = (q > 0 ? q : 0) + weft__tfifo_len(&c->mbox) +
                  (atomic_load_explicit(&c->lifo, memory_order_relaxed) != NULL);
    o->cpu_ns = -1;
    o->tid = 0;
    /* tid and the CPU clock are the carrier thread's first writes, before
     * it publishes ready (release) */
    if (atomic_load_explicit(&c->ready, memory_order_acquire)) {
        o->tid = c->tid;
        struct timespec ts;
        if (c->cpuclk_ok && clock_gettime(c->cpuclk, &ts) == 0)
            o->cpu_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }
}

int weft__carrier_counters_get(int k, weft__carrier_counters *o) {
    memset(o, 0, sizeof *o);
    if (k < 0 || k >= WEFT__MAX_CARRIERS) return -ENOENT;
    if (k < nall()) {
        carrier_counters_fill(R.c[k], o);
        return 0;
    }
    int r = -ENOENT;
    pthread_mutex_lock(&weft__groups.lock); /* (as weft__carrier_view_get) */
    if (R.gidx_used[k] && R.c[k]) {
        carrier_counters_fill(R.c[k], o);
        r = 0;
    }
    pthread_mutex_unlock(&weft__groups.lock);
    return r;
}

int64_t weft__injected(void) { return weft__tfifo_len(&R.g0.inj); }

int64_t weft__started_at(void) { return R.started_at; }
uint64_t weft__runtime_generation(void) { return R.generation; }

int weft__carrier_view_get(int k, weft__carrier_view *v) {
    memset(v, 0, sizeof *v);
    if (k < 0 || k >= WEFT__MAX_CARRIERS) return -ENOENT;
    if (k < nall()) {
        carrier_view_fill(R.c[k], v);
        return 0;
    }
    /* a group's carrier (its group may close meanwhile: under the lock) */
    int r = -ENOENT;
    pthread_mutex_lock(&weft__groups.lock);
    if (R.gidx_used[k] && R.c[k]) {
        carrier_view_fill(R.c[k], v);
        r = 0;
    }
    pthread_mutex_unlock(&weft__groups.lock);
    return r;
}
