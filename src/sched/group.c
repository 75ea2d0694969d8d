/*
 * Carrier groups (weft.h, "Carrier groups"): sets of carriers of their own,
 * so that a CPU-bound job cannot take the carriers latency-sensitive
 * vthreads need -- the pluggable schedulers of Loom, as far as a C
 * runtime with one scheduler design needs them: not another algorithm per
 * group, but another set of carriers per group, each scheduled as the
 * default pool is.
 *
 * What a group is.  A struct weft_group (group.h) holds what sched.c's
 * carrier loop used to keep once for the runtime: an injection queue, the
 * idle carriers' counts and mask, and the carriers.  Every carrier points
 * to its group (c->grp) and has an index in it (c->gidx, its idle bit);
 * every vthread points to its group (t->grp), set at spawn, never changed.
 * The default group is R.g0 (internal.h): the configured carriers and the
 * monitor's spares (its c is R.c, gidx the carrier index), so the default
 * pool runs exactly as before, with one pointer load more on the paths
 * that read the idle counts.
 *
 * Scheduling stays inside a group.  A carrier takes work from its own
 * deque, slot, mailbox and FIFO, then its group's injection queue, and
 * steals only from its group's carriers (steal_once loops over c->grp);
 * it spins and sleeps in its group's idle set; whoever makes work visible
 * to a group runs the Dekker-style check of sched.c's top comment on that
 * group's nspinning/nidle (wake_if_needed(g)), and a carrier that goes
 * idle looks once more at its group's queues (work_visible) after setting
 * its bit in its group's mask -- the same pair of fences, per group, so no
 * wake-up is lost inside a group and none is spent on another.
 *
 * Hand-offs.  Wherever a vthread is made runnable, the scheduler compares
 * its group with the group of the carrier doing it (enqueue_local,
 * weft__ready, spawn):
 *  - same group: as before (the LIFO slot, the deque);
 *  - another group, or no carrier (a platform thread, the monitor, the
 *    blocking pool): the vthread goes to its own group's injection queue
 *    and wake_if_needed(its group) wakes one of its carriers
 *    (enqueue_foreign).  So a vthread of group A woken by a vthread of
 *    group B (a weft_unpark, a mutex release, a channel send, a join),
 *    or by B's carrier for any reason, is queued to A's carriers and never
 *    runs on B's carrier: the cost is one lock and maybe one wake-up, as
 *    a platform thread's wake always paid.
 * Pinned vthreads go to their home carrier's mailbox, which is always a
 * carrier of their own group (they are pinned where they run).  I/O: a
 * vthread's operation is submitted on the ring (or epoll set) of the
 * carrier it runs on, a carrier of its group, and completed there; each
 * group carrier has its own poller as every carrier does.  Completions
 * delivered anywhere else (the io layer's blocking pool, the async
 * dispatchers, which run in the default group) wake through weft__ready or
 * the poller's batch, and take the hand-off above.  Timers: a vthread's
 * deadline sits in the heap of the carrier it parked on (its group's);
 * the heap is fired by that carrier, by a spinning carrier of the same
 * group, or by the monitor into the group's injection queue.
 *
 * The monitor looks at the groups' carriers as at the default ones: it
 * moves what a computing vthread strands (slot, FIFO, due timers) to the
 * injection queue of the carrier's group (a one-carrier group has nobody
 * to move it to, and keeps it), and reports stalls.  A group made with the
 * compute option reports no hog (its vthreads compute on purpose); a
 * pinned carrier (blocked in a system call) is still reported.  Spares are
 * the default group's only: a group is a fixed set of threads someone
 * sized on purpose, and compensating inside it would break exactly the
 * isolation it exists for (its spare would compete for the CPUs the
 * latency carriers need).  A group's stalls do not count for the default
 * group's compensation.  (With one default carrier and stall detection
 * off, pin_threshold_ns < 0, no monitor runs at all -- sched.c's
 * mon_start -- and a group's stranded work then waits for the computing
 * vthread to switch, as it would in the default pool.)
 *
 * Which group a spawn goes to: attr->group; else (NULL) the spawning
 * vthread's own group; from a platform thread, the default group.
 * Inheritance is what keeps a group's work in the group: a job spawned
 * into a CPU group that forks helpers (weft_fork in a scope, a
 * virtual executor's task, a plain weft_spawn with a name only) keeps them
 * there, as a vthread created by a thread of a custom Loom scheduler
 * inherits that scheduler.  weft_group_default() is there to hand work
 * back to the default pool explicitly.  The runtime's own helpers
 * (weft__spawn_on: the io layer's dispatchers) always go to the default
 * group's configured carriers.
 *
 * Carrier indices.  A carrier is known by its index to the io layer's
 * tables, the dump and the timer heaps (t->timer_heap): group carriers
 * take free indices from R.n + max_compensate up (the slots below are the
 * default carriers' and the spares'), at most WEFT__MAX_CARRIERS in all:
 * past that, -EAGAIN.  They are put in R.c at their index (for the timer
 * heap look-up), but outside the R.nall range, so nothing that iterates
 * the default pool sees them; what iterates every carrier -- the monitor,
 * the counters, the non-daemon count of weft_shutdown, the dump -- walks
 * the group list as well (under one of its locks: see below).
 *
 * Life.  weft_group_create allocates the group, starts its carriers (each
 * makes its poller on its own thread, as at weft_init; a failure stops
 * and frees those started) and links it into the list.  nlive counts the
 * group's vthreads spawned and not finished, hand-offs in flight
 * (enqueue_foreign) and one more for the group itself while it is open.
 * Whoever takes nlive to 0 is the last to touch the group and tells the
 * closer (weft__group_last_exit); nobody adds to a 0 (a spawn adds only to
 * a count above 0, and a hand-off's vthread is itself counted).  So
 * weft_group_close sets `closing` and drops the group's own count: if that
 * was the last, nothing else is inside the group and it goes at once;
 * otherwise it parks until the last one out says so (`drained`, under
 * g->lock), then takes the lock once (that one may still be unlocking it).
 * A spawn counts itself and then checks `closing` (both seq_cst): either
 * the close sees the spawn's count and waits for it, or the spawn sees
 * `closing` and gives its count back -- no vthread starts in a group whose
 * close saw it empty.  (The count's 0 is the only end of the group:
 * reading `closing` after taking nlive to 0, as this once did, let the
 * closer see the 0 and free the group under that read -- TSan caught a
 * hand-off from another group's carrier doing so.)  The closer then
 * unlinks the group, stops its carriers (g->stop, a kick, join) -- a
 * carrier still finishing that exit uses its group until then, so the
 * group is freed after the joins -- keeps their counters in the runtime's
 * totals, returns their cached stacks to the shared depot, frees their
 * pollers and releases their indices.  A vthread that has finished but
 * was not joined holds nothing of its group (its descriptor stays until
 * weft_join).
 *
 * Its carriers are made and ended at the end of this file
 * (weft__group_carriers_start and _stop): full carriers of sched.c's making
 * (weft__carrier_alloc, weft__carrier_main; internal.h has the struct),
 * each in R.c at its index as above.
 *
 * Threads touching what: the group's queue and idle fields as sched.c's
 * top comment says of the default ones; nlive by spawners and exiting
 * vthreads; closer under g->lock; the list changes under
 * weft__groups.mon_lock and .lock (in that order), the monitor walks it
 * under mon_lock (its look may take milliseconds: a stall's probe), the
 * counters, the dump and weft_shutdown's count under lock; ngroups, down
 * and R.gidx_used under lock.  Nothing that holds either takes another
 * scheduler lock but a group's injection queue, a mailbox or a timer
 * heap's.
 */
#include "internal.h"
#include "weft/exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

weft__group_list weft__groups = {.mon_lock = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER};
static _Atomic uint32_t next_gid = 1;

int weft_group_create(weft_group **out, const char *name, int carriers, const weft_group_opts *opts) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (carriers < 1 || carriers > WEFT__MAX_CARRIERS) return carriers < 1 ? -EINVAL : -EAGAIN;
    int r = weft__ensure_init();
    if (r < 0) return r;
    if (WEFT__DET_ON()) return -EOPNOTSUPP; /* one carrier, one seeded order (det.c): no group's carriers */
    weft_group *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    weft__tfifo_init(&g->inj);
    pthread_mutex_init(&g->lock, NULL);
    atomic_init(&g->nlive, 1); /* the group's own count ("Life") */
    g->n = carriers;
    g->compute = opts && opts->compute;
    g->id = atomic_fetch_add(&next_gid, 1);
    if (name) {
        strncpy(g->name, name, sizeof g->name - 1);
    } else {
        snprintf(g->name, sizeof g->name, "group-%u", g->id);
    }
    pthread_mutex_lock(&weft__groups.lock);
    int down = weft__groups.down;
    pthread_mutex_unlock(&weft__groups.lock);
    if (down) {
        r = -ESHUTDOWN;
        goto fail;
    }
    r = weft__group_carriers_start(g);
    if (r < 0) goto fail;
    pthread_mutex_lock(&weft__groups.mon_lock);
    pthread_mutex_lock(&weft__groups.lock);
    if (weft__groups.down) { /* weft_shutdown began meanwhile */
        pthread_mutex_unlock(&weft__groups.lock);
        pthread_mutex_unlock(&weft__groups.mon_lock);
        weft__group_carriers_stop(g);
        r = -ESHUTDOWN;
        goto fail;
    }
    g->next = weft__groups.head;
    weft__groups.head = g;
    weft__groups.ngroups++;
    pthread_mutex_unlock(&weft__groups.lock);
    pthread_mutex_unlock(&weft__groups.mon_lock);
    *out = g;
    return 0;
fail:
    weft__tfifo_fini(&g->inj);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return r;
}

/* Called by whoever took nlive to 0 (the last vthread's exit, a failed
 * spawn, a hand-off): the group is closing, its own count dropped.  Marks
 * it drained and wakes the closer, read under the lock, after it: the
 * park word's sequence makes a late wake harmless, and g is not touched
 * after the unlock (the closer takes the lock once before it frees g). */
void weft__group_last_exit(weft_group *g) {
    pthread_mutex_lock(&g->lock);
    g->drained = 1;
    weft__parker *p = g->closer;
    uint64_t tok = g->closer_token;
    g->closer = NULL;
    pthread_mutex_unlock(&g->lock);
    if (p) weft__unpark(p, tok, WEFT__PS_WOKEN);
}

/* Counts one more user of g (a spawn into it) unless its count is 0
 * already: 0 once the close dropped the group's own count and the last
 * one left.  Returns 0 when counted, -ESHUTDOWN when not. */
int weft__group_ref(weft_group *g) {
    int64_t n = atomic_load(&g->nlive);
    do {
        if (n <= 0) return -ESHUTDOWN;
    } while (!atomic_compare_exchange_weak(&g->nlive, &n, n + 1));
    return 0;
}

static void group_free(weft_group *g) {
    weft__tfifo_fini(&g->inj);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

/* Unlinks g (under weft__groups.lock); 0 if it was not in the list. */
static int group_unlink(weft_group *g) {
    for (weft_group **pp = &weft__groups.head; *pp; pp = &(*pp)->next) {
        if (*pp == g) {
            *pp = g->next;
            weft__groups.ngroups--;
            return 1;
        }
    }
    return 0;
}

int weft_group_close(weft_group *g) {
    if (!g || g->dflt) return -EINVAL;
    weft_thread *self = weft__self();
    if (self && self->grp == g) return -EDEADLK;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g->closing, &expect, 1)) {
        /* the first close takes this lock before it frees g: so this
         * call's look at g comes before the free (a call after it is a
         * use after free, as for any freed object) */
        pthread_mutex_lock(&g->lock);
        pthread_mutex_unlock(&g->lock);
        return -EBUSY;
    }
    /* drop the group's own count; wait for the last one out (see "Life") */
    if (atomic_fetch_sub(&g->nlive, 1) != 1) {
        for (;;) {
            weft__parker *p;
            uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_GENERIC);
            pthread_mutex_lock(&g->lock);
            if (g->drained) {
                pthread_mutex_unlock(&g->lock);
                weft__park_abort(p, tok);
                (void)weft__park_wait(p, tok, 0, WEFT__WHY_JOIN, g, __FILE__, __LINE__);
                break;
            }
            g->closer = p;
            g->closer_token = tok;
            pthread_mutex_unlock(&g->lock);
            (void)weft__park_wait(p, tok, 0, WEFT__WHY_JOIN, g, __FILE__, __LINE__);
            pthread_mutex_lock(&g->lock); /* the waker is out of it */
            g->closer = NULL;
            pthread_mutex_unlock(&g->lock);
        }
    }
    pthread_mutex_lock(&g->lock); /* (a late weft__group_last_exit or -EBUSY caller is out of g) */
    pthread_mutex_unlock(&g->lock);
    pthread_mutex_lock(&weft__groups.mon_lock); /* (the monitor is not looking at g after this) */
    pthread_mutex_lock(&weft__groups.lock);
    int linked = group_unlink(g);
    pthread_mutex_unlock(&weft__groups.lock);
    pthread_mutex_unlock(&weft__groups.mon_lock);
    if (linked) weft__group_carriers_stop(g);
    /* (not linked: weft_shutdown stopped it; it frees nothing it did not
     * unlink) */
    group_free(g);
    return 0;
}

void weft__groups_shutdown(void) {
    pthread_mutex_lock(&weft__groups.mon_lock);
    pthread_mutex_lock(&weft__groups.lock);
    weft__groups.down = 1;
    weft_group *list = weft__groups.head;
    weft__groups.head = NULL;
    weft__groups.ngroups = 0;
    pthread_mutex_unlock(&weft__groups.lock);
    pthread_mutex_unlock(&weft__groups.mon_lock);
    while (list) {
        weft_group *g = list;
        list = g->next;
        weft__group_carriers_stop(g);
        group_free(g);
    }
}

weft_group *weft_group_default(void) {
    if (weft__ensure_init() < 0) return NULL;
    return weft__group_default();
}

weft_group *weft_group_self(void) { return weft__group_self(); }

int weft_group_stats_get(weft_group *g, weft_group_stats *s) {
    if (!s) return -EINVAL;
    memset(s, 0, sizeof *s);
    if (!g) {
        if (!weft__running()) return 0;
        g = weft__group_default();
        s->carriers = weft__carriers();
    } else {
        s->carriers = g->n;
    }
    s->id = g->id;
    memcpy(s->name, g->name, sizeof s->name);
    s->compute = g->compute;
    if (!g->dflt) {
        /* (less the group's own count while it is open) */
        int64_t l = atomic_load(&g->nlive) - !atomic_load(&g->closing);
        s->live = l > 0 ? (uint64_t)l : 0;
        s->started = atomic_load_explicit(&g->started, memory_order_relaxed);
    }
    if (g->dflt && !weft__running()) return 0;
    weft__group_sum(g, &s->switches, &s->steals, &s->runnable);
    return 0;
}

/* For the dump: calls fn for the default group and every open group, with
 * its stats and carrier indices, under the groups' lock (fn must not call
 * into the scheduler's group functions). */
int weft__groups_each(void (*fn)(const weft_group_stats *s, const int *idx, int n, void *ctx), void *ctx) {
    if (!weft__running()) return 0;
    int idx[WEFT__MAX_CARRIERS];
    weft_group_stats s;
    int count = 0;
    weft_group_stats_get(NULL, &s);
    fn(&s, idx, weft__group_carrier_indices(weft__group_default(), idx, WEFT__MAX_CARRIERS), ctx);
    count++;
    pthread_mutex_lock(&weft__groups.lock);
    /* oldest first: the list is newest first */
    weft_group *order[64];
    int k = 0;
    for (weft_group *g = weft__groups.head; g; g = g->next) {
        if (k == 64) { /* many groups: newest first from here */
            weft_group_stats_get(g, &s);
            fn(&s, idx, weft__group_carrier_indices(g, idx, WEFT__MAX_CARRIERS), ctx);
            count++;
            continue;
        }
        order[k++] = g;
    }
    while (k-- > 0) {
        weft_group_stats_get(order[k], &s);
        fn(&s, idx, weft__group_carrier_indices(order[k], idx, WEFT__MAX_CARRIERS), ctx);
        count++;
    }
    pthread_mutex_unlock(&weft__groups.lock);
    return count;
}

/* ---- weft_executor_create_group: see src/exec/exec.c ---- */

/* ------------------------------------------------------------------------ */
/* a group's carriers (made and ended with the group)                       */
/* ------------------------------------------------------------------------ */

static void group_carriers_free(weft_group *g, int made) {
    pthread_mutex_lock(&weft__groups.lock);
    for (int i = 0; i < made; i++) {
        R.c[g->c[i]->index] = NULL;
        R.gidx_used[g->c[i]->index] = 0;
    }
    pthread_mutex_unlock(&weft__groups.lock);
    for (int i = 0; i < made; i++) weft__carrier_free(g->c[i]);
    free(g->c);
    free((void *)g->idle_mask);
    g->c = NULL;
    g->idle_mask = NULL;
}

int weft__group_carriers_start(weft_group *g) {
    int n = g->n, made = 0, started = 0, r = 0;
    g->c = calloc((size_t)n, sizeof *g->c);
    g->idle_mask = calloc((size_t)(n + 63) / 64, sizeof *g->idle_mask);
    if (!g->c || !g->idle_mask) {
        group_carriers_free(g, 0);
        return -ENOMEM;
    }
    /* Indices: past every slot the monitor's spares may take (R.n +
     * max_comp), so that both can grow independently; the io layer's
     * tables and the dump know a carrier by its index.  Taken under the
     * groups' lock (two groups made at once). */
    pthread_mutex_lock(&weft__groups.lock);
    int k = R.n + R.max_comp;
    for (; made < n; made++) {
        while (k < WEFT__MAX_CARRIERS && R.gidx_used[k]) k++;
        if (k >= WEFT__MAX_CARRIERS) { r = -EAGAIN; break; }
        weft__carrier *c = weft__carrier_alloc(k);
        if (!c) { r = -ENOMEM; break; }
        c->grp = g;
        c->gidx = made;
        /* one carrier alone: nobody else could run what its FIFO holds */
        c->yq_private = n == 1 || R.yq_stealable;
        atomic_store(&c->go, 1);
        g->c[made] = c;
        R.gidx_used[k] = 1;
        R.c[k] = c; /* (vthreads look up their timer heap's carrier by index) */
    }
    pthread_mutex_unlock(&weft__groups.lock);
    for (int i = 0; i < made && !r; i++) {
        weft__carrier *c = g->c[i];
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        int e = pthread_create(&c->thread, &a, weft__carrier_main, c);
        pthread_attr_destroy(&a);
        if (e) { r = -e; break; }
        started++;
        char tn[16];
        snprintf(tn, sizeof tn, "weft-g%u.%d", g->id % 1000, i % 100);
        pthread_setname_np(c->thread, tn);
        while (!atomic_load(&c->ready)) futex(&c->ready, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
        if (c->start_err) r = c->start_err;
    }
    /* a carrier starts busy, outside the idle set: if the monitor had
     * disarmed (every carrier idle), nothing would arm it before this one
     * first went idle -- and one that runs a vthread at once (spawned into
     * the group as it started) and computes never does.  Arm it, as
     * mon_prepare does for the first carriers. */
    if (!r) weft__mon_need();
    if (r) {
        atomic_store(&g->stop, 1);
        for (int i = 0; i < started; i++) weft__kick(g->c[i]);
        for (int i = 0; i < started; i++) pthread_join(g->c[i]->thread, NULL);
        group_carriers_free(g, made);
    }
    return r;
}

void weft__group_carriers_stop(weft_group *g) {
    atomic_store(&g->stop, 1);
    for (int i = 0; i < g->n; i++) weft__kick(g->c[i]);
    for (int i = 0; i < g->n; i++) pthread_join(g->c[i]->thread, NULL);
    for (int i = 0; i < g->n; i++) {
        weft__carrier *c = g->c[i];
        /* its counts stay in the totals (weft_stats_get, weft_shutdown's
         * count of non-daemon vthreads) */
        atomic_fetch_add(&R.gone_started, atomic_load(&c->n_started));
        atomic_fetch_add(&R.gone_finished, atomic_load(&c->n_finished));
        atomic_fetch_add(&R.gone_switches, atomic_load(&c->n_switches));
        atomic_fetch_add(&R.gone_steals, atomic_load(&c->n_steals));
        atomic_fetch_add(&R.gone_parks, atomic_load(&c->n_parks));
        atomic_fetch_add(&R.gone_nd_started, atomic_load(&c->nd_started));
        atomic_fetch_add(&R.gone_nd_finished, atomic_load(&c->nd_finished));
        /* its cached stacks go back to the shared depot */
        for (uint32_t j = 0; j < c->stacks.n; j++) weft__stack_put(NULL, c->stacks.s[j]);
        c->stacks.n = 0;
    }
    group_carriers_free(g, g->n);
}

void weft__group_sum(weft_group *g, uint64_t *switches, uint64_t *steals, uint64_t *runnable) {
    uint64_t sw = 0, st = 0;
    int64_t rn = weft__tfifo_len(&g->inj);
    for (int i = 0, n = gall(g); i < n; i++) {
        weft__carrier *c = g->c[i];
        sw += atomic_load_explicit(&c->n_switches, memory_order_relaxed);
        st += atomic_load_explicit(&c->n_steals, memory_order_relaxed);
        int64_t q = weft__dq_size(&c->dq);
        rn += (q > 0 ? q : 0) + weft__tfifo_len(&c->mbox) +
              (atomic_load_explicit(&c->lifo, memory_order_relaxed) ? 1 : 0);
    }
    *switches = sw;
    *steals = st;
    *runnable = rn > 0 ? (uint64_t)rn : 0;
}

int weft__group_carrier_indices(weft_group *g, int *idx, int cap) {
    int n = gall(g), k = 0;
    for (int i = 0; i < n && k < cap; i++) idx[k++] = g->c[i]->index;
    return k;
}
