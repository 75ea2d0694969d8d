/*
 * The monitor: rescues, stalls and spare carriers -- the scheduler's
 * thread that watches the carriers (internal.h has the carrier and the
 * runtime it reads; sched.c the queues it moves work between).
 *
 * The monitor (as Go's sysmon, for what a carrier leaves behind).  There is
 * no preemption: a vthread that computes holds its carrier.  What only that
 * carrier would run -- the vthread in its LIFO slot, its yield FIFO, the due
 * timers in its heap -- would wait for the whole computation while other
 * carriers sleep (nothing woke them: those are the cheap paths).  So the
 * runtime has a monitor thread (with one carrier too, unless stall
 * detection is off: pin_threshold_ns < 0), armed while any carrier is busy:
 * a carrier that leaves idle arms it if it is not armed (one load; a futex
 * wake only when the monitor had disarmed), and nothing on the switch, wake
 * or timer paths pays for it.  Armed, the monitor looks at every carrier
 * every `grace` (1 ms after it found something, doubling up to 10 ms --
 * or half the stall threshold, if that is less -- while it finds nothing).
 * A carrier that is not idle and has made no progress since the last look
 * -- no switch, and no slow turn of pick_local, which a vthread that yields
 * with nothing else to run still makes every SLOW_EVERY yields -- is
 * running one vthread's own code all along, and the monitor moves its
 * slot, its FIFO and its due timers' vthreads to the injection queue and
 * wakes an idle carrier (when some other carrier of its group takes shared
 * work: a configured one, or an active spare; for a retired spare, any).
 * With one carrier -- the default on a one-CPU machine -- or every carrier
 * busy, nobody takes it until a spare does ("Spares"): then it waits the
 * stall threshold, not the computation.  It
 * disarms and sleeps without a deadline once every carrier is idle (the
 * idle bits, a retired spare's dormant flag and mon_armed are a Dekker
 * pair: see monitor_main).  Cost: at most ~100 wake-ups a second of one
 * thread while any carrier is busy (at the default threshold), none while
 * all sleep; a stranded vthread waits one or two graces (about 20 ms at
 * most, measured up to 23 ms) instead of the whole computation.  A
 * sleeping carrier's deadline is its own heap's next timer only: a spinning
 * carrier fires other heaps' due timers, and the monitor those of a
 * carrier that computes.  A computing carrier's I/O completions stay
 * behind (a ring is reaped by its own carrier: io/uring.c), and vthreads
 * pinned to it can only wait for it.
 *
 * Stalls (weft.h, "The monitor").  A carrier that has made no progress for
 * pin_threshold_ns (default 20 ms) while running a vthread is a stall: the
 * observe layer (observe/monitor.c) tells pinned (blocked in the kernel)
 * from hog (computing) and finds the call site; here it is counted, kept on
 * the carrier for the dump (stall_*) and logged, once when it begins and
 * once when the carrier next makes progress.  Looking costs the monitor two
 * relaxed loads per carrier; a carrier seen without progress also costs
 * one read of its thread's CPU clock (a hog must have computed: a carrier
 * the kernel has not run for a while, on a loaded machine, is not one), and
 * the classification -- a /proc read, a stack walk -- is paid once per
 * stall.
 *
 * Spares (compensation, as Loom's ForkJoinPool compensates for a blocked
 * carrier and Go's sysmon hands a P off from a thread in a system call).
 * While carriers are stalled and runnable work waits behind them (in the
 * injection queue, or in a stalled carrier's deque, slot, FIFO or due
 * timers) with no carrier idle to take it, the monitor activates a spare
 * carrier, up to max_compensate at once (default 256, as Loom's), one
 * more per look while each stall has none, and moves that work to it in
 * the same look; as stalls end it retires as many at once (compensate).
 * "Stalled" here is measured from before the carrier's last progress (the
 * look before the one that saw it, mon_from), and the monitor looks again
 * exactly when that reaches the threshold: so work stranded behind the
 * only carrier runs within the threshold (plus the spare's wake-up), where
 * the stall event -- measured strictly, from the look that saw the
 * progress -- can come up to two looks later.  A spare may so be called
 * for by a computation of half the threshold; one is not called for by a
 * vthread that computes on purpose (WEFT__F_COMPUTE) until it is found
 * blocked.  At most max_compensate spares are ever made; at that bound,
 * with work still stranded, the monitor says so on stderr (at_bound) and
 * the work waits for a stall to end;
 * a retired one is reused first, unless it is stalled itself.  A spare is a full
 * carrier -- deque, mailbox, timer heap, poller (its own ring), stack
 * cache -- at an index past the configured ones in R.c, made on first need
 * by the monitor and kept until weft_shutdown.  Alternatives: a dedicated
 * "helper" thread that only drains the injection queue could not run what
 * it takes to completion (a vthread that parks needs a carrier's ring and
 * heap), and making and destroying carriers per stall would pay a thread
 * and a ring per stall and free a ring that a vthread's operation may
 * still be in flight on.  Active, a spare is any carrier: it steals, takes
 * the injection queue, sleeps in the idle set.  Retired (c->shared 0), it
 * takes nobody else's work -- no steals, no injection queue, no spinning
 * -- but runs what is its own: its deque (which others may still steal),
 * slot, FIFO, mailbox (a vthread pinned to a spare stays there), timers
 * and ring completions; then it sleeps in its poller outside the idle set
 * (dormant), where only wake_carrier (work pinned to it), its ring, its
 * next timer and the monitor's activation wake it: a retired spare costs
 * nothing.  A spare that was idle when retired is kicked, so that it
 * leaves the idle set where wakers count on it; one woken as a spinner
 * while retired passes the wake on (stop_spinning).  Growing: R.c has
 * WEFT__MAX_CARRIERS slots from the start, so it never moves under a
 * reader; a spare's slot is filled before its thread starts (its idle bit
 * leads others there), R.nall is published (release) once its thread has
 * its poller, and the thread runs only after that (c->go): everything that
 * iterates carriers -- stealing, idle masks, work_visible, counters, the
 * dump, shutdown -- reads R.nall (acquire) and sees every carrier a
 * vthread may have run on.  R.n stays the configured count: weft__spawn_on
 * and the io layer's per-carrier async dispatchers spread over those (a
 * vthread on a spare hands its async operations to carrier k mod R.n's
 * dispatcher); the io layer's poller tables are indexed by carrier up to
 * WEFT__MAX_CARRIERS and registered as each poller is made.
 *
 * Threads touching what: everything here runs on the monitor thread, but
 * weft__compute_end (a vthread that stops computing on purpose), the
 * monitor's own life (weft__mon_prepare/start/stop: weft_init and
 * weft_shutdown, runtime.c) and the yield FIFO's thief side, whose other
 * half -- the owner's gate -- is sched.c's gate_in/gate_out.  mon_* and
 * stall_* of a carrier are written here only; the carrier's own thread
 * writes its progress counters, read here racily.
 */
#include "internal.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MON_GRACE_MIN_NS 1000000  /* after a rescue: look again this soon */
#define MON_GRACE_MAX_NS 10000000 /* the longest a carrier holds what others could run, once armed */
#define MON_COMPUTE_NS 1000000   /* a WEFT__F_COMPUTE vthread that used this much CPU since the first look computes */

/* The yield FIFO's thief side (the owner's side: gate_in and gate_out in
 * sched.c, whose comment has the protocol). */
#ifdef WEFT_TSAN
static int yq_lock_thief(weft__carrier *v) {
    int z = 0;
    return atomic_compare_exchange_strong_explicit(&v->yq_lock, &z, 2, memory_order_acquire, memory_order_relaxed);
}
static void yq_unlock_thief(weft__carrier *v) { atomic_store_explicit(&v->yq_lock, 0, memory_order_release); }
#else
static int yq_lock_thief(weft__carrier *v) {
    atomic_store_explicit(&v->yq_thief, 1, memory_order_relaxed);
    syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    if (__atomic_load_n(&v->cur, __ATOMIC_ACQUIRE)) return 1;
    atomic_store_explicit(&v->yq_thief, 0, memory_order_release);
    return 0;
}
static void yq_unlock_thief(weft__carrier *v) { atomic_store_explicit(&v->yq_thief, 0, memory_order_release); }
#endif

/* The monitor: v's whole yield FIFO, if v is out of its scheduler. */
static weft_thread *yq_take(weft__carrier *v) {
#ifndef WEFT_TSAN
    if (!__atomic_load_n(&v->yq_head, __ATOMIC_RELAXED)) return NULL; /* a hint: nothing to take */
#endif
    if (!yq_lock_thief(v)) return NULL;
    weft_thread *h = v->yq_head;
    v->yq_head = v->yq_tail = NULL;
    yq_unlock_thief(v);
    return h;
}
/* Every carrier of every group (the groups' under weft__groups.mon_lock). */
static int any_busy(void) {
    for (int i = 0, n = nall(); i < n; i++)
        if (!carrier_resting(R.c[i])) return 1;
    int busy = 0;
    pthread_mutex_lock(&weft__groups.mon_lock); /* (the monitor's lock: see group.h) */
    for (weft_group *g = weft__groups.head; g && !busy; g = g->next)
        for (int i = 0; i < g->n && !busy; i++) busy = !carrier_resting(g->c[i]);
    pthread_mutex_unlock(&weft__groups.mon_lock);
    return busy;
}

/* Takes from carrier v, which has run one vthread since the last look,
 * what only v would run: its LIFO slot, its due timers, its yield FIFO.
 * They go to the injection queue (pinned ones to v's mailbox). */
static int rescue(weft__carrier *v, int64_t now) {
    int n = 0;
    if (atomic_load_explicit(&v->lifo, memory_order_relaxed)) {
        weft_thread *t = atomic_exchange_explicit(&v->lifo, NULL, memory_order_acq_rel);
        if (t) {
            weft__ready_elsewhere(t);
            n++;
        }
    }
    n += weft__fire_timers(NULL, &v->timers, now, 0);
    if (R.yq_stealable) {
        for (weft_thread *t = yq_take(v), *nx; t; t = nx) {
            nx = t->next;
            weft__ready_elsewhere(t);
            n++;
        }
    }
    return n;
}

/* ---- spares ---- */

/* Makes spare carrier R.c[nall], active (the monitor thread only): 0 or
 * -errno.  Published once its thread has its poller, before it runs. */
static int spare_make(void) {
    int k = nall();
    if (k >= WEFT__MAX_CARRIERS) return -EAGAIN;
    weft__carrier *c = weft__carrier_alloc(k);
    if (!c) return -ENOMEM;
    c->spare = 1;
    c->yq_private = R.yq_stealable;
    R.c[k] = c; /* before its thread: its idle bit leads others here */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    int e = pthread_create(&c->thread, &a, weft__carrier_main, c);
    pthread_attr_destroy(&a);
    if (e) {
        R.c[k] = NULL;
        weft__carrier_free(c);
        return -e;
    }
    char tn[16];
    snprintf(tn, sizeof tn, "weft-s%d", k % 10000);
    pthread_setname_np(c->thread, tn);
    while (!atomic_load(&c->ready)) futex(&c->ready, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
    if (c->start_err) {
        int r = c->start_err;
        pthread_join(c->thread, NULL);
        R.c[k] = NULL;
        weft__carrier_free(c);
        return r;
    }
    atomic_fetch_add(&R.nactive, 1);
    atomic_store_explicit(&R.nall, k + 1, memory_order_release);
    atomic_store(&c->go, 1);
    futex_wake(&c->go, 1);
    return 0;
}

/* A retired spare takes others' work again: it is woken to look. */
static void spare_activate(weft__carrier *c) {
    atomic_fetch_add(&R.nactive, 1);
    atomic_store(&c->shared, 1);
    atomic_store(&c->dormant, 0);
    weft__kick(c);
}

/* An active spare stops taking others' work; it finishes its own, then
 * sleeps outside the idle set (retired_sleep).  Woken, in case it sleeps
 * idle: it must leave the idle set, where a waker would count on it. */
static void spare_retire(weft__carrier *c) {
    atomic_store(&c->shared, 0);
    atomic_fetch_sub(&R.nactive, 1);
    weft__kick(c);
}

/* An idle carrier of the default group that takes shared work: a retired
 * spare may sit in the idle set for a moment (find_work), and counting it
 * (g0.nidle) kept a spare from being activated while nobody took the
 * stranded work. */
static int idle_taker(void) {
    for (int i = 0, n = nall(); i < n; i++)
        if (carrier_idle(R.c[i]) && atomic_load(&R.c[i]->shared)) return 1;
    return 0;
}

/* One spare more (activated, or made) or fewer, to match the carriers
 * that call for one (`need`: in a stall, or held for the threshold, see
 * mon_look): more only while they leave runnable work behind and no
 * carrier that could take it is idle, one a look; fewer as soon as they
 * move on, all at once (an active spare that is held itself counts, and
 * retires last).  So no spare is active once no stall is open, and the
 * monitor may disarm.  1 if a spare was activated or made. */
/* The bound reached: carriers stalled, work waiting, every spare it allows
 * busy.  Nothing more is done -- the waiting work runs when a stall ends --
 * but it is said, once a second at most while it lasts, as the stall lines
 * are: a program whose blocking calls hold more carriers than the bound
 * allows waits here for them, and would hang for good if what they wait
 * for is behind them.  (Go's sysmon adds threads up to 10,000 and then
 * stops the program; Loom's scheduler compensates up to 256 and then lets
 * the work wait.  weft lets it wait, and says so.) */
static int64_t bound_since; /* when the bound was first met, in the run of looks that meet it; 0 */
static void at_bound(int need, int active, int64_t now) {
    static int64_t said;
    if (!bound_since) bound_since = now;
    if (R.pin_log == WEFT__MONLOG_OFF || (said && now - said < 1000000000)) return;
    if (R.pin_log == WEFT__MONLOG_LONG && now - bound_since < MONLOG_LONG_NS) return;
    said = now;
    fprintf(stderr,
            "weft: %d carrier(s) stalled and all %d spare carriers busy (max_compensate): runnable vthreads wait "
            "until a stall ends; raise WEFT_MAX_COMPENSATE, or make the blocking calls park (WEFT_HOOK=1; WEFT_TRAP=1 for the C library's own)\n",
            need, active);
}

static int compensate(int need, int waiting, int64_t now) {
    int active = atomic_load(&R.nactive), n = nall();
    if (need > active && active < R.max_comp && waiting && !idle_taker()) {
        /* a retired spare, unless it is stalled itself (a vthread pinned
         * to it blocks it): then a new one, while there are fewer than
         * max_comp, else that one anyway (it helps once its stall ends) */
        weft__carrier *stalled_spare = NULL;
        for (int i = R.n; i < n; i++) {
            weft__carrier *c = R.c[i];
            if (atomic_load(&c->shared)) continue;
            if (!atomic_load(&c->stall) && !(c->mon_stuck && __atomic_load_n(&c->cur, __ATOMIC_ACQUIRE))) {
                spare_activate(c);
                return 1;
            }
            stalled_spare = c;
        }
        if (stalled_spare && n - R.n >= R.max_comp) {
            spare_activate(stalled_spare);
            return 1;
        }
        int r = spare_make();
        if (r < 0) {
            static _Atomic int told;
            if (!atomic_exchange(&told, 1))
                fprintf(stderr, "weft: cannot start a spare carrier to compensate for a stalled one: %s\n",
                        strerror(-r));
            return 0;
        }
        return 1;
    }
    if (need > active && waiting && !idle_taker()) at_bound(need, active, now);
    else bound_since = 0;
    for (; active > need; active--) {
        weft__carrier *pick = NULL;
        for (int i = n - 1; i >= R.n; i--) {
            weft__carrier *c = R.c[i];
            if (!atomic_load(&c->shared)) continue;
            if (!pick || (atomic_load(&pick->stall) && !atomic_load(&c->stall))) pick = c;
        }
        if (!pick) break;
        spare_retire(pick);
    }
    return 0;
}

/* ---- stalls ---- */

void weft__compute_end(weft_thread *self, uint32_t prev) {
    weft__carrier *c = weft__carrier_self();
    /* progress first, then the flag (x86's store order; a release store
     * elsewhere): a monitor that sees the flag gone then sees the progress,
     * and stall_begin drops what it probed (see progress's second read) */
    if (c) atomic_store_explicit(&c->slow_turn, atomic_load_explicit(&c->slow_turn, memory_order_relaxed) + 1,
                                 memory_order_release);
    __atomic_store_n(&self->flags, (self->flags & ~(uint32_t)WEFT__F_COMPUTE) | prev, __ATOMIC_RELEASE);
}

static uint64_t progress(weft__carrier *v) {
    /* switches, and the slow turns a lone yielder's picks make: a carrier
     * that does neither is running one vthread's own code all along */
    return atomic_load_explicit(&v->n_switches, memory_order_relaxed) +
           atomic_load_explicit(&v->slow_turn, memory_order_relaxed);
}

/* Carrier v's thread's CPU time, ns; -1 if unknown. */
static int64_t carrier_cpu(weft__carrier *v) {
    struct timespec ts;
    if (!v->cpuclk_ok || clock_gettime(v->cpuclk, &ts) != 0) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* v has run t without a switch since the look at v->mon_since, which is
 * threshold ago: classify, count, tell. */
static void stall_begin(weft__carrier *v, const weft_thread *t, uint64_t prog, int64_t now, int compute) {
    weft__stall_info info;
    int64_t cpu = v->mon_cpu0 >= 0 ? carrier_cpu(v) : -1;
    if (weft__stall_probe(v->tid, cpu >= 0 ? cpu - v->mon_cpu0 : -1, t, &info) < 0) return;
    if (compute && info.kind == WEFT__STALL_HOG) return; /* computing on purpose (mon_look) */
    uint64_t vid = ld64(&t->id);
    uint64_t nw[4];
    for (int i = 0; i < 4; i++) nw[i] = ld64(&t->name_words[i]);
    /* it may have moved on while we looked: then that was no stall (and
     * what we read may be another's) */
    if (progress(v) != prog || __atomic_load_n(&v->cur, __ATOMIC_ACQUIRE) != t) return;
    for (int i = 0; i < 4; i++) atomic_store_explicit(&v->stall_name[i], nw[i], memory_order_relaxed);
    for (int i = 0; i < WEFT__SITE_FRAMES; i++)
        atomic_store_explicit(&v->stall_site[i], info.site[i], memory_order_relaxed);
    char name[32];
    memcpy(name, nw, 32);
    name[31] = 0;
    atomic_store_explicit(&v->stall_sysno, info.sysno, memory_order_relaxed);
    atomic_store_explicit(&v->stall_since, v->mon_since, memory_order_relaxed);
    atomic_store_explicit(&v->stall_vid, vid, memory_order_relaxed);
    atomic_store_explicit(&v->stall, info.kind, memory_order_release);
    atomic_fetch_add(info.kind == WEFT__STALL_PINNED ? &R.n_pinned : &R.n_hogs, 1);
    v->stall_said = R.pin_log == WEFT__MONLOG_ALL;
    if (v->stall_said)
        weft__stall_log(1, info.kind, vid, name, v->index, info.sysno, now - v->mon_since, info.site);
}

/* The open stall's vthread name, as stall_begin published it. */
static void stall_name_read(weft__carrier *v, char name[32]) {
    uint64_t nw[4];
    for (int i = 0; i < 4; i++) nw[i] = atomic_load_explicit(&v->stall_name[i], memory_order_relaxed);
    memcpy(name, nw, 32);
    name[31] = 0;
}

/* WEFT__MONLOG_LONG: an open stall's first line, once it has lasted, from
 * what stall_begin published */
static void stall_said_late(weft__carrier *v, int64_t now) {
    int64_t since = atomic_load_explicit(&v->stall_since, memory_order_relaxed);
    if (v->stall_said || R.pin_log != WEFT__MONLOG_LONG || now - since < MONLOG_LONG_NS) return;
    v->stall_said = 1;
    uintptr_t site[WEFT__SITE_FRAMES];
    for (int i = 0; i < WEFT__SITE_FRAMES; i++) site[i] = atomic_load_explicit(&v->stall_site[i], memory_order_relaxed);
    char name[32];
    stall_name_read(v, name);
    weft__stall_log(1, atomic_load_explicit(&v->stall, memory_order_relaxed), atomic_load(&v->stall_vid), name,
                    v->index, atomic_load(&v->stall_sysno), now - since, site);
}

static void stall_end(weft__carrier *v, int64_t now) {
    int kind = atomic_exchange(&v->stall, WEFT__STALL_NONE);
    if (!kind || !v->stall_said) return;
    v->stall_said = 0;
    char name[32];
    stall_name_read(v, name);
    weft__stall_log(0, kind, atomic_load(&v->stall_vid), name, v->index, atomic_load(&v->stall_sysno),
                    now - atomic_load(&v->stall_since), NULL);
}

/* Runnable work that stalled carrier v holds back or that waits for any
 * carrier (a racy look: the next look corrects it). */
static int work_behind(weft__carrier *v, int64_t now) {
#ifdef WEFT_TSAN
    /* the FIFO is read under its gate's lock only there (yq_take): a
     * yielder behind the only carrier must call for a spare here too */
    int fifo = 0;
    if (R.yq_stealable && yq_lock_thief(v)) {
        fifo = v->yq_head != NULL;
        yq_unlock_thief(v);
    }
#else
    int fifo = R.yq_stealable && __atomic_load_n(&v->yq_head, __ATOMIC_RELAXED); /* a hint, as in yq_take */
#endif
    return weft__tfifo_len(&v->grp->inj) > 0 || weft__dq_size(&v->dq) > 0 ||
           atomic_load_explicit(&v->lifo, memory_order_relaxed) || fifo ||
           atomic_load_explicit(&v->timers.min, memory_order_relaxed) <= now;
}

/* What one look at the carriers found (mon_look adds to it). */
typedef struct mon_tally {
    int moved;    /* vthreads rescued */
    int stalled;  /* carriers in an open stall event */
    int need;     /* carriers that call for a spare: stalled, or held long enough to be (compensate) */
    int waiting;  /* runnable work waits behind one of those */
    int64_t next; /* look again by then (a carrier's threshold falls due) */
} mon_tally;

/* Another carrier of v's group takes shared work (v's rescued work is
 * for it): the group's shared carriers less v if v is one.  With one
 * carrier and no spare active there is nobody, and moving it would only
 * reorder it; a retired spare's is for the configured carriers. */
static int others_take(weft__carrier *v) {
    int k = nshared(v->grp);
    return (v->grp->dflt && !atomic_load_explicit(&v->shared, memory_order_relaxed)) ? k > 0 : k > 1;
}

/* ---- preemption -------------------------------------------------------------
 * A foreign vthread that computes holds its carrier, and with it what only
 * that carrier can do: its ring's completions (a read another vthread
 * parked in, seen: CPython's main waiting on a file while a pool thread
 * looped, for good), its timers, its LIFO slot.  For the program's own
 * threads (foreign, with their own TLS: hook/trap.c decides, at the
 * instruction it interrupts, whether it is the program's code and may
 * yield there), the kernel's answer is weft's: after WEFT__PREEMPT_NS
 * without a switch, with its CPU clock running (computing, not blocked in
 * the kernel: a signal would interrupt a system call), the monitor sends
 * the carrier's thread the preemption signal, once per look, as Go's
 * sysmon does.  weft's own vthreads are never preempted: they may hold
 * weft's state anywhere. */
const int weft__preempt_cookie = 0x77656674;

void weft__preempt_enable(int sig) { atomic_store(&R.preempt_sig, sig); }

static void preempt_look(weft__carrier *v, const weft_thread *t, int64_t now) {
    int sig = atomic_load_explicit(&R.preempt_sig, memory_order_relaxed);
    if (!sig || v->det || now - v->mon_since < WEFT__PREEMPT_NS) return;
    /* (a stale read of a reused slot costs one signal the handler ignores) */
    if (!atomic_load_explicit(&t->foreign, memory_order_relaxed) || !__atomic_load_n(&t->tls, __ATOMIC_RELAXED) ||
        (ld32(&t->flags) & WEFT__F_COMPUTE))
        return;
    int64_t cpu = carrier_cpu(v);
    if (cpu < 0 || v->mon_cpu0 < 0 || cpu - v->mon_cpu0 < (now - v->mon_since) / 4) return;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = sig;
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    si.si_value.sival_ptr = (void *)&weft__preempt_cookie;
    if (syscall(SYS_rt_tgsigqueueinfo, si.si_pid, v->tid, sig, &si) == 0) atomic_fetch_add(&R.n_preempt, 1);
}

/* The monitor's look at carrier v (see "The monitor" and "Stalls"). */
static void mon_look(weft__carrier *v, int64_t now, int fresh, mon_tally *m) {
    uint64_t prog = progress(v);
    int stuck = !fresh && prog == v->mon_seen && !carrier_resting(v);
    int64_t last = v->mon_last;
    v->mon_last = now;
    v->mon_stuck = stuck;
    if (!stuck) {
        if (atomic_load_explicit(&v->stall, memory_order_relaxed)) stall_end(v, now);
        /* progress since the look before: it was made after that one (a
         * fresh look's predecessor is long past: the carrier left idle
         * about when it woke us) */
        v->mon_from = fresh || prog == v->mon_seen || last == INT64_MIN ? now : last;
        v->mon_seen = prog;
        v->mon_since = now;
        v->mon_cpu0 = -1;
        return;
    }
    /* no switch since the last look: one vthread all along (or
     * the scheduler, between two) */
    if (R.pin_threshold >= 0) {
        const weft_thread *t = __atomic_load_n(&v->cur, __ATOMIC_ACQUIRE);
        int compute = 0;
        if (!atomic_load_explicit(&v->stall, memory_order_relaxed) && t) {
            /* the CPU it uses from here tells a hog from a thread
             * the kernel has not run (weft__stall_probe) */
            if (v->mon_cpu0 < 0) v->mon_cpu0 = carrier_cpu(v);
            /* a parallel worker (WEFT__F_COMPUTE, parallel.c) or a
             * vthread of a compute group (group.c) computes on purpose:
             * no hog event and no spare for it -- a spare would
             * oversubscribe the CPUs it uses -- and no probe while its
             * CPU clock runs; blocked in a system call it is pinned as
             * any vthread.  (A stale read of a reused slot costs at most
             * one look.) */
            compute = (ld32(&t->flags) & WEFT__F_COMPUTE) != 0 || v->grp->compute;
            if (now - v->mon_since >= R.pin_threshold) {
                int64_t cpu = compute ? carrier_cpu(v) : -1;
                if (!compute || cpu < 0 || v->mon_cpu0 < 0 || cpu - v->mon_cpu0 < MON_COMPUTE_NS)
                    stall_begin(v, t, prog, now, compute);
            } else if (v->mon_since + R.pin_threshold < m->next) {
                m->next = v->mon_since + R.pin_threshold;
            }
        }
        int stall = atomic_load_explicit(&v->stall, memory_order_relaxed) != 0;
        if (stall) {
            m->stalled++;
            stall_said_late(v, now);
        }
        /* A spare is called for once v may have held its vthread for the
         * threshold -- since mon_from, which is before its last progress
         * -- not only once the stall is proven (since mon_since, up to a
         * look later): so work behind the only carrier, or behind every
         * busy one, waits the threshold at most, not the threshold and
         * two looks.  The stall event itself keeps the strict measure. */
        int held = t && !compute && now - v->mon_from >= R.pin_threshold;
        if (!stall && t && !compute && !held && v->mon_from + R.pin_threshold < m->next)
            m->next = v->mon_from + R.pin_threshold;
        if (stall || held) {
            m->need++;
            if (work_behind(v, now)) m->waiting = 1;
        }
        if (t && !compute) preempt_look(v, t, now);
    }
    if (others_take(v)) m->moved += rescue(v, now);
}

static void *monitor_main(void *unused) {
    (void)unused;
    atomic_store(&R.mon_up, 1);
    futex_wake(&R.mon_up, 1);
    int64_t grace = MON_GRACE_MIN_NS;
    /* look often enough that a vthread holding its carrier past the
     * threshold is seen (two looks, half of it apart), and a stall's end
     * within about half of it: at the default threshold, the old bound */
    int64_t gmax = MON_GRACE_MAX_NS;
    if (R.pin_threshold >= 0 && R.pin_threshold / 2 < gmax)
        gmax = R.pin_threshold / 2 > MON_GRACE_MIN_NS ? R.pin_threshold / 2 : MON_GRACE_MIN_NS;
    int fresh = 1; /* mon_seen is stale (we slept without a deadline): record only */
    int last_stalled = 0;
    /* nothing to watch (weft__mon_start), only signals to deliver: no
     * looks, no preemption, no deadline -- it wakes for a kick and for the
     * stop alone (so the deterministic mode's order stays the seed's) */
    while (R.n == 1 && R.pin_threshold < 0) {
        uint32_t seq = atomic_load(&R.mon_word);
        if (atomic_load(&R.stop)) return NULL;
        if (atomic_load_explicit(&R.intr_pending, memory_order_relaxed)) weft__intr_deliver();
        futex_wait_until(&R.mon_word, seq, 0);
    }
    for (;;) {
        uint32_t seq = atomic_load(&R.mon_word);
        if (atomic_load(&R.stop)) break;
        if (atomic_load_explicit(&R.intr_pending, memory_order_relaxed)) weft__intr_deliver();
        pthread_mutex_lock(&R.mon_fork);
        int64_t now = weft_now();
        mon_tally m = {.next = INT64_MAX}, gm = {.next = INT64_MAX};
        int any_group_stall = 0;
        int n = nall();
        for (int i = 0; i < n; i++) mon_look(R.c[i], now, fresh, &m);
        /* the groups' carriers: their stalls are logged, their stranded
         * work moved within the group; spares are the default group's
         * only, so their stalls do not count for compensate */
        pthread_mutex_lock(&weft__groups.mon_lock);
        for (weft_group *g = weft__groups.head; g; g = g->next) {
            gm.stalled = 0;
            for (int i = 0; i < g->n; i++) mon_look(g->c[i], now, fresh, &gm);
            if (gm.stalled) any_group_stall = 1;
        }
        pthread_mutex_unlock(&weft__groups.mon_lock);
        fresh = 0;
        if (R.max_comp > 0 && compensate(m.need, m.waiting, now)) {
            /* a spare takes shared work now: what the held carriers
             * strand goes to it at once, not a look later (with one
             * carrier, mon_look moved nothing: nobody else took it) */
            n = nall();
            for (int i = 0; i < n; i++)
                if (R.c[i]->mon_stuck && others_take(R.c[i])) m.moved += rescue(R.c[i], now);
        }
        /* (rescue woke the groups it moved work to) */
        m.moved += gm.moved;
        if (m.moved || m.stalled + any_group_stall != last_stalled) grace = MON_GRACE_MIN_NS;
        else grace = grace * 2 < gmax ? grace * 2 : gmax;
        last_stalled = m.stalled + any_group_stall;
        int64_t until = now + grace;
        if (gm.next < m.next) m.next = gm.next;
        if (m.next > now && m.next < until) until = m.next;
        /* All resting -- but this look's tally may predate that: a stall
         * it counted (and the spare kept for it) can have ended since,
         * and a carrier that goes idle wakes nobody.  So not while a
         * spare is active or a stall open: the next look ends those,
         * then disarms. */
        if (!any_busy() && atomic_load(&R.nactive) == 0 && last_stalled == 0) {
            /* disarm, then look again: a carrier that leaves idle (seq_cst
             * RMW on its bit, or its dormant flag) and then reads
             * mon_armed (seq_cst, mon_need) either is seen busy here or
             * sees 0 there and wakes us */
            atomic_store(&R.mon_armed, 0);
            if (any_busy()) atomic_store(&R.mon_armed, 1);
            else until = 0, fresh = 1;
        }
        pthread_mutex_unlock(&R.mon_fork);
        futex_wait_until(&R.mon_word, seq, until);
    }
    return NULL;
}

/* membarrier(PRIVATE_EXPEDITED), registered once for the process (the
 * monitor's FIFO steal above, local.c's deleter): 1, or 0 where the kernel
 * has none.  Asked first by weft_init before it makes any thread or ring:
 * the kernel registers a process with one user of its memory at once, but
 * one with several waits for an RCU grace period (sync_runqueues_
 * membarrier_state) -- 12.5 ms a process here, most of weft-run's start
 * (seen: every exec under weft-run took 17 ms, /bin/true natively 1.2 ms).
 * A fork child keeps the registration (the kernel copies it with the
 * memory; an exec drops it, and this library with it). */
static int mb_ready;
static pthread_once_t mb_once = PTHREAD_ONCE_INIT;
static void mb_register(void) {
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    mb_ready = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
               syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}
int weft__membarrier_ready(void) {
    pthread_once(&mb_once, mb_register);
    return mb_ready;
}

/* Before the carriers start: may yields stay in a carrier's FIFO? */
void weft__mon_prepare(void) {
    atomic_store(&R.mon_word, 0);
    atomic_store(&R.mon_up, 0);
    R.mon_started = 0;
#ifdef WEFT_TSAN
    int stealable = 1; /* the gate is a real lock there */
#else
    int stealable = weft__membarrier_ready();
#endif
    R.yq_stealable = stealable;
    /* one carrier that no spare can ever join: nobody else could run what
     * it leaves behind; without membarrier the monitor cannot take a
     * FIFO, so yields go where any carrier can take them */
    int alone = R.n == 1 && R.max_comp == 0;
    for (int i = 0; i < R.n; i++) R.c[i]->yq_private = alone || stealable;
    atomic_store(&R.mon_armed, 1); /* carriers start busy: it looks first */
}

/* The monitor runs with several carriers (rescues), or to watch for
 * stalls; one carrier without stall detection has no use for it -- unless
 * a hooked program's signals are to be delivered (a vthread's hooked wait
 * interrupted, a process-directed signal routed): then it runs for those
 * only (monitor_main's first loop). */
int weft__mon_start(int interrupts) {
    if (R.n == 1 && R.pin_threshold < 0 && !interrupts) return 0;
    pthread_attr_t a;
    pthread_attr_init(&a);
    /* the probe's buffers, dladdr, a spare's start; libdw naming a pinned
     * call's site (observe/symbolize.c: 150 KiB and more).  Only touched
     * pages cost memory. */
    pthread_attr_setstacksize(&a, 2 * 1024 * 1024);
    int e = pthread_create(&R.mon_thread, &a, monitor_main, NULL);
    pthread_attr_destroy(&a);
    if (e) return -e;
    pthread_setname_np(R.mon_thread, "weft-monitor");
    R.mon_started = 1;
    /* weft_init returns once every thread of the runtime runs: whatever a
     * thread's start does in the C library (and a sanitizer's allocator)
     * is over by then -- a fork() right after weft_init catches none of
     * them mid-way (see "Fork") */
    while (!atomic_load(&R.mon_up)) futex(&R.mon_up, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
    return 0;
}

void weft__mon_stop(void) {
    if (!R.mon_started) return;
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
    pthread_join(R.mon_thread, NULL);
    R.mon_started = 0;
}
