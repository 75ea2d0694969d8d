/*
 * The scheduler: vthreads on N carrier threads.
 *
 * Shape.  Each carrier is an OS thread with a run queue (a Chase-Lev deque,
 * deque.h, used FIFO: the owner pushes at the bottom and takes from the top,
 * thieves take half from the top in one CAS), a LIFO slot for the vthread
 * woken last, a FIFO for vthreads that yielded (the yield FIFO), a mailbox for
 * vthreads pinned to it, and a timer heap (timer.h).  Work from platform
 * threads goes to one injection queue.  A carrier runs the scheduler loop on
 * its own OS stack (the "sched context"); vthreads run on their own stacks.
 *
 * Switching.  A vthread that blocks, yields or ends leaves an operation for
 * whoever runs next (c->pending_op) and switches directly to the next local
 * vthread if there is one -- one user-mode switch, which carries the carrier
 * pointer across so the resumed side need not look it up -- or else to the
 * sched context, which looks further (timers, other carriers, sleep).  Every
 * resume point first runs finish_pending(): the park's commit, the exit's
 * cleanup and a yield's push to a shared queue all happen after the old
 * stack has been left, so no other carrier can pick a vthread up while its
 * stack is still in use.  A yield to the yield FIFO needs no such care
 * (no other carrier takes from it while this one is in its scheduler: see
 * the monitor) and is the cheapest path: no atomic operation at all.  A
 * yield goes there while no carrier idles; when one does, the yielding
 * carrier's next yield spills the FIFO to the stealable deque and wakes a
 * sleeper.  Until then -- and for a carrier that never yields again -- the
 * monitor takes the FIFO from a carrier that has stopped switching.
 *
 * Parking (the primitive under every blocking call) is a protocol on one
 * atomic word per thread, described in sched.h: exactly one of wake,
 * timeout and cancel wins a park, by CAS; the winner resumes the thread if it
 * had already switched away.
 *
 * Waking idle carriers without lost wake-ups (after Go's proc.go).  Counts
 * nidle and nspinning, an idle bitmask, and a futex word per carrier:
 *  - whoever makes work visible to other carriers (a deque push, the
 *    injection queue, a displaced LIFO slot) then issues a full fence and
 *    reads nspinning and nidle; if nobody spins and someone sleeps, it wakes
 *    one sleeper and counts it as spinning (wake_one);
 *  - a carrier that finds nothing sets its idle bit and increments nidle
 *    (seq_cst) *before* a last look at every queue, and sleeps only if that
 *    look finds nothing.
 * By the fence on both sides, either the submitter sees the sleeper or the
 * sleeper sees the work.  A carrier that gives up spinning decrements
 * nspinning before its last look, for the same reason.  Spinning is bounded
 * (SPIN_NS, about twice what waking a sleeping carrier costs on a VM), and
 * at most half the busy carriers plus one spin, so idle CPUs sleep.
 * Each carrier adapts its bound to what spinning has been worth lately
 * (spin_budget): a spin that finds work within SPIN_PAYS_NS (about the CPU
 * time a sleep and a wake-up take) restores the full SPIN_NS; one that finds work
 * later, or none, halves the next, down to SPIN_PAYS_NS -- so work that
 * would have paid is always still caught.  A hand-off that comes back
 * within microseconds keeps the full spin; a server whose work arrives now
 * and then from a client on the same cores stops burning the CPU that
 * client needs.
 *
 * LIFO slot.  weft__ready() called by a vthread puts the woken vthread in its
 * own carrier's slot: it runs next, on a warm cache (message passing between
 * two vthreads stays on one carrier).  Filling an empty slot wakes nobody --
 * this carrier runs it soon, and a wake-up per message would cost a system
 * call and a spinning carrier per hand-off; a displaced occupant goes to the
 * deque and may wake a carrier.  The slot is capped (LIFO_CAP runs in a
 * row, then the deque goes first), spinning thieves take it after two
 * fruitless rounds, and if this carrier goes on computing instead of
 * switching, the monitor takes it.  The cap counts the mailbox as waiting
 * work too, and the slot goes before the mailbox: with libc hooks on, every
 * vthread woken from a hooked call is pinned (its mailbox), and when a burst
 * of those each handed something to a waiter (a pool's connection, by a
 * semaphore), mailbox-first ran the whole burst before any waiter --
 * http-db at C = 1000 measured 220-600 us from a connection's release to
 * its next query instead of 26 us, and 1 % less throughput than the
 * platform pool.  A child that ends queues its joiner FIFO
 * instead: there is no hand-off to keep warm, and a parent joining a batch
 * then finds the rest done.
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
 * carrier, up to max_compensate at once (default: 2 x the carriers), one
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
 * blocked.  At most max_compensate spares are ever made;
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
 * Idle carriers also do the stack allocator's background work
 * (weft__stacks_refill / _trim): carving stacks ahead during a spawn burst,
 * returning memory above the high-water mark afterwards.
 *
 * Fork.  A child process has one thread -- the one that called fork() --
 * and none of the carriers (spares included), the monitor or the blocking pool; whatever
 * those held (locks, half-updated queues) stays as the fork caught it.  So
 * the runtime is not carried into the child but abandoned there, and a
 * fresh one starts on the child's next weft call.  pthread_atfork
 * handlers, registered by the first weft_init: prepare keeps the io
 * layer's pollers from being freed mid-fork, idle carriers from carving
 * stacks and the monitor from looking (R.mon_fork: a look may probe a
 * stall, make a spare -- malloc; ASan's allocator, unlike glibc's, is not
 * locked across fork by libasan 12, and a child forked amid a malloc on
 * another thread can hang in its own); the child handler closes the
 * child's copies of the parent's rings, eventfds and epoll sets (the same
 * kernel objects as the parent's: the child must never submit to them),
 * reinitialises the locks, and forgets carriers, queues, timers and stacks
 * without freeing or unmapping them (a thread that is not there may have
 * been mid-update; weft__fork_keep keeps them reachable for LeakSanitizer,
 * and copy-on-write makes them cost nothing untouched).  Then R.up is 0 and
 * weft__ensure_init starts a new runtime when the child next needs one,
 * configured as the parent's was (its carriers and stack size as resolved,
 * its backend as asked for), unless the child calls weft_init itself.
 * The parent's vthreads do not exist in the child: every descriptor
 * carries the fork generation it was spawned in (R.fork_gen, bumped in the
 * child), and weft_join, _detach, _cancel and _unpark refuse a stale one
 * with -ECHILD, while weft__ready drops one (a sync object shared with the
 * parent may name a parent's vthread as its waiter: it must never run in
 * the child).  fork() from a vthread: the child's thread is the carrier's,
 * running on the vthread's stack; tls_carrier is cleared, so that thread
 * goes on as the child's platform thread (its weft calls block it, and
 * start the fresh runtime as any platform thread's would), on that stack,
 * which stays mapped.  It must end with exit/_exit/exec: returning from the
 * vthread's function has no carrier to return to, and stops with a message
 * (vthread_start).  A fork while another thread is in weft_init or
 * weft_shutdown is not supported (the child would see the runtime half
 * built or half freed); the prepare handler cannot wait for them, since
 * shutdown may be waiting for the very vthread that forks.
 *
 * Handles (sched.h, "handles").  A vthread's descriptor lives in its stack
 * slot, and a slot is reused at once (the carrier's cache is LIFO: the next
 * spawn gets the stack just freed), so a weft_thread * that is only the
 * descriptor's address cannot tell, after its weft_join, the slot's next
 * vthread from its own: a second join returned 0 and freed the slot again
 * (two spawns then shared one stack), and a stale handle joined, detached,
 * cancelled or unparked whatever vthread ran there next.  pthread leaves
 * this undefined (glibc's pthread_t is its descriptor's address, in a
 * cached stack, just the same); Go has no handles to goroutines; Java's
 * Thread is an object the collector keeps.  weft does what a handle table
 * with generations does, without the table: the slot keeps a 24-bit
 * generation (t->gen), free_thread bumps it, and the handle given to the
 * program (weft_spawn, weft_self) carries it in address bits that are
 * always 0.  Every call that takes a handle compares the two first -- a
 * load and a compare -- and refuses a stale one with -ESRCH (join, detach,
 * cancel, unpark; weft_id says 0).  What is detected: any use of a handle
 * after the join or detach that freed its vthread, or after a detached
 * vthread ended, whatever ran in the slot since -- unless the slot has
 * been freed a multiple of 2^24 - 1 times in between (generations skip 0)
 * or, zapped and populated again, drew the same generation (one chance in
 * 2^24).  A slot populated afresh starts at a generation spread from its
 * unique seq_base, not at 1.  Two joins of one vthread at once: the fast
 * path claims a finished vthread with a CAS (done -> reaped), the slow
 * path under join_lock, which also re-reads the generation (spawn's
 * release store of join_state pairs with the lock's acquire), and a
 * vthread that ends while a joiner waits is left to that joiner (a state
 * of its own, which the CAS does not take), so exactly one caller reaps
 * it and the other gets -ESRCH or -EINVAL.  The runtime
 * passes raw descriptors (generation 0) to the same calls internally; they
 * are not checked.  A handle from before a fork is still refused with
 * -ECHILD (its descriptor is readable in the child, and its generation
 * unchanged).  After weft_shutdown the slots are unmapped: a handle from
 * before is no longer anything.
 *
 * Deterministic mode (det.c, which has the design).  With weft__det_on the
 * runtime has one carrier and no monitor, and each decision point takes one
 * predictable branch to det.c: dq_push and weft__ready put the vthread in
 * det.c's run set (no deque, no LIFO slot), pick_local becomes pick_det (the
 * injection queue and the mailbox drained into the set, due timers on the
 * virtual clock fired, completions reaped, then the seeded pick), weft_yield
 * puts the yielder in the set before the pick, find_work becomes
 * find_work_det (no stealing or spinning; idle with timers pending, the
 * clock jumps), weft_now reads the virtual clock, and park_wait counts I/O
 * parks and has platform threads' timed waits ended by the carrier.
 *
 * Carrier groups (group.c has the essay).  Everything above about the
 * injection queue, the idle counts and mask, stealing and spinning holds
 * per group: those live in a struct weft_group (group.h), c->grp is the
 * carrier's and t->grp the vthread's, and the loops over "the carriers"
 * that serve scheduling (steal_once, work_visible, take_idle) run over
 * c->grp's.  The default group is R.g0: the configured carriers and the
 * spares, as before.  A vthread made runnable by a carrier of another
 * group, or by no carrier, goes to its own group's injection queue with a
 * wake-up there (enqueue_foreign): it never runs on another group's
 * carrier.  What iterates every carrier (the monitor, counters, the dump,
 * shutdown) walks the open groups too (group.h: which lock).
 *
 * Threads touching what: c->cur, pending_*, stacks and live_delta are owned
 * by c's OS thread; the yield FIFO too, but for the monitor, through its
 * gate (gate_in); the deque's bottom by c, its top by anyone; lifo,
 * mailbox, timers and wake_seq by anyone (atomics / locks).  Counters are
 * written by their carrier and read racily by weft_stats_get and the
 * monitor; mon_* are the monitor's; stall_* are written by the monitor and
 * read by the dump; shared by the monitor (and read by c); dormant by c
 * and by wake_carrier.  R.c[k] and R.nall are written by the monitor (a
 * spare) or weft_init, before anything reads them.
 */
#include "sched.h"
#include "group.h"
#include "deque.h"
#include "det.h"
#include "timer.h"
#include "../async/async_int.h" /* the runtime's life: the async layer stops first */

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>

#define LIFO_CAP 3
#define SPIN_NS 50000 /* how long an idle carrier looks for work before sleeping ($WEFT_SPIN_US) */
static int64_t spin_ns = SPIN_NS;
#define SPIN_PAYS_NS 3000 /* a spin that finds work this soon was worth it (the CPU a sleep and a
                           * wake-up cost); also the shortest spin */
#define SLOW_EVERY 61
#define STEAL_MAX 32
#define LIVE_FLUSH 32
#define ID_BLOCK 1024
#define ALTSTACK_SIZE (64 * 1024)

enum { OP_NONE = 0, OP_YIELD, OP_PARK, OP_EXIT };

struct weft__carrier {
    /* owned by the carrier's OS thread; the first cache line is all the
     * yield/switch path touches here */
    weft_thread *cur;
    weft_thread *pending;
    weft_thread *yq_head, *yq_tail; /* yielded vthreads: the owner's FIFO (see "The monitor") */
    _Atomic uint64_t n_switches;    /* (counter: read racily by stats and the monitor) */
    int pending_op;
    uint32_t slow_countdown;
    uint32_t lifo_streak;
    _Atomic uint32_t slow_turn;     /* (also the monitor's sign of life from a lone yielder) */
    _Atomic int yq_thief;           /* the monitor is taking the yield FIFO */
    uint8_t yq_private;             /* the FIFO may hold vthreads others could run (set at init) */
    uint8_t det;                    /* weft__det_on when the carrier was made: it cannot change
                                     * while carriers exist; the switch path tests it here, in the
                                     * line it reads anyway, not in a global */
    weft__window *win;              /* local.c: the window of the vthread it runs (its thread's) */
#ifdef WEFT_TSAN
    _Atomic int yq_lock;            /* the gate also as a lock: 1 owner in, 2 monitor */
#endif
    void *sched_sp;
    uint64_t rng;
    int index;
    weft_group *grp;     /* its group (group.c); it runs that group's vthreads only */
    int gidx;            /* its index in grp->c and grp's idle mask (the default group: index) */
    int spinning;
    _Atomic int shared;  /* takes others' work: steals, the injection queue (a retired spare: 0) */
    int64_t spin_budget; /* this carrier's next spin, ns (see the top comment) */
    uint64_t id_next, id_end;
    void *tsan_fiber;
    void *asan_fake;
    const void *asan_bottom;
    size_t asan_size;
    void *altstack;
    pthread_t thread;
    /* counters: written by the owner (relaxed), read by anyone */
    _Atomic uint64_t n_started, n_finished, n_steals, n_parks;
    _Atomic uint64_t nd_started, nd_finished; /* non-daemon */
    _Atomic int64_t live_delta;
    /* shared */
    _Alignas(WEFT__CACHELINE) _Atomic(weft_thread *) lifo;
    _Alignas(WEFT__CACHELINE) weft__deque dq;
    _Alignas(WEFT__CACHELINE) pthread_mutex_t mbox_lock;
    weft_thread *mbox_head, *mbox_tail;
    _Atomic int mbox_n;
    _Alignas(WEFT__CACHELINE) _Atomic uint32_t wake_seq;
    weft__poller *_Atomic poller;  /* set by the carrier at start; read by kickers */
    int start_err;                  /* the poller's creation failed: -errno */
    _Atomic int dormant;            /* a retired spare asleep: wake_carrier kicks it */
    _Alignas(WEFT__CACHELINE) weft__theap timers;
    /* the monitor's (see "The monitor"); stall_* also read by the dump */
    uint64_t mon_seen;              /* progress (switches + slow turns) at its last look */
    int64_t mon_since;              /* when it first saw mon_seen */
    int64_t mon_last;               /* its last look */
    int64_t mon_from;               /* the look before mon_since's: mon_seen was reached after it */
    int mon_stuck;                  /* its last look found no progress */
    int64_t mon_cpu0;               /* the thread's CPU time at the first look that saw no progress; -1 */
    clockid_t cpuclk;               /* the carrier thread's CPU clock */
    int cpuclk_ok;
    _Atomic int stall;              /* WEFT__STALL_*: an event is open */
    _Atomic long stall_sysno;
    _Atomic int64_t stall_since;
    _Atomic uint64_t stall_vid;
    _Atomic uint64_t stall_name[4];
    /* a pinned stall: its blocking call's site, as the monitor found and
     * named it ("fn+0x4f (file.c:12, module+0x1234) <- ..."), 511 bytes + NUL */
    _Atomic uint64_t stall_site[WEFT__SITE_WORDS];
    int spare;                      /* made by the monitor (index >= R.n) */
    int tid;                        /* the carrier's kernel thread id */
    _Atomic uint32_t ready;         /* a spare: its thread made its poller (start_err says how) */
    _Atomic uint32_t go;            /* a spare: published, may run */
    /* owner-only, large, cold: last */
    weft__stack_cache stacks;
};

static _Alignas(4096) struct {  /* page-aligned for the reason given at aligned_alloc below */
    pthread_mutex_t init_lock;
    _Atomic int up;            /* 1 while running */
    _Atomic uint32_t carriers_ready; /* carriers past their start (weft_init waits) */
    int n;                     /* carriers configured: R.c[0 .. n-1] */
    _Atomic int nall;          /* and the monitor's spares after them (grows; "Spares") */
    weft__carrier **c;         /* WEFT__MAX_CARRIERS slots, filled up to nall */
    /* the default group: the injection queue and the idle carriers of the
     * configured carriers and spares (group.h) */
    struct weft_group g0;
    _Atomic uint64_t idle_mask[WEFT__MAX_CARRIERS / 64]; /* g0's */
    /* what closed groups' carriers counted (weft__group_carriers_stop) */
    _Atomic uint64_t gone_started, gone_finished, gone_switches, gone_steals, gone_parks;
    _Atomic uint64_t gone_nd_started, gone_nd_finished;
    uint8_t gidx_used[WEFT__MAX_CARRIERS]; /* carrier indices taken by groups (weft__groups.lock) */
    _Atomic int stop;
    _Atomic uint64_t next_id;
    _Atomic int64_t live;
    _Atomic uint64_t peak;
    _Atomic uint64_t plat_started, plat_nd_started; /* spawned on platform threads */
    /* platform threads inside weft__ready now: the vthread they made
     * runnable may run, end and let weft_shutdown begin before they have
     * kicked a carrier; shutdown waits for this to be 0 before it frees
     * the carriers (a file channel's handler counting a latch down,
     * TSan: eventfd_write against the poller's close) */
    _Atomic int plat_waking;
    /* the monitor (see "The monitor" above) */
    _Alignas(WEFT__CACHELINE) _Atomic int mon_armed; /* read when a carrier leaves idle; written rarely */
    _Atomic uint32_t mon_word;                        /* its futex: bumped to wake it */
    _Atomic uint32_t mon_up;                          /* it runs (weft_init waits for it) */
    pthread_mutex_t mon_fork;                         /* held through each look; and by fork (see "Fork") */
    pthread_t mon_thread;
    int mon_started;
    int64_t pin_threshold;     /* ns; < 0: no stall detection */
    int max_comp;              /* spares active at once, at most; 0: none */
    int pin_log;               /* log lines on stderr */
    int yq_stealable;          /* the monitor may take a yield FIFO (membarrier, or TSan's lock) */
    _Atomic int nactive;       /* spares active now */
    _Atomic uint64_t n_pinned, n_hogs;
    struct sigaction old_segv;
    int segv_installed;
    uint16_t fork_gen;         /* forks since this process's ancestor first started weft ("Fork") */
    weft_runtime_opts started_with;  /* the running runtime's configuration (io: as asked) */
    int inherit_cfg;           /* a fork child: its lazy start uses started_with */
    int64_t started_at;        /* CLOCK_MONOTONIC ns at weft_init (the console's uptime) */
#ifdef WEFT_TSAN
    _Atomic int tsan_fibers;   /* vthreads' TSan fibers alive (see TSAN_FIBER_CAP) */
#endif
} R = {.init_lock = PTHREAD_MUTEX_INITIALIZER,
       .mon_fork = PTHREAD_MUTEX_INITIALIZER,
       .g0 = {.inj_lock = PTHREAD_MUTEX_INITIALIZER, .idle_mask = R.idle_mask, .dflt = 1, .name = "default"},
       .next_id = 1};

/* (sched.h: who may read it directly; exported for weft/local.h's inline
 * gets, which read it from an asm statement) */
WEFT_API WEFT_TLS weft__carrier *weft__tls_carrier;
#define tls_carrier weft__tls_carrier
_Static_assert(offsetof(struct weft__carrier, cur) == 0, "weft__carrier_cur and weft/local.h read the first field");
_Static_assert(offsetof(struct weft_thread, scoped) == WEFT__THREAD_SCOPED_OFF, "weft/local.h: fix the offset");
static WEFT_TLS weft__parker tls_parker;   /* a platform thread's park word */
/* a platform thread's cancellation (weft__pcancel_*: the executors' pool
 * threads; no other platform thread is ever cancelled) */
struct weft__pcancel {
    _Atomic int cancelled;
    _Atomic int efd;     /* eventfd written by a cancel, made on demand; -1 none */
    int enabled;
    weft__parker *parker;
};
static WEFT_TLS weft__pcancel tls_pc = {0, -1, 0, NULL};
static WEFT_TLS int64_t tls_deadline;      /* a platform thread's deadline */

/* ------------------------------------------------------------------------ */
/* small helpers                                                             */
/* ------------------------------------------------------------------------ */

__attribute__((noinline)) weft__carrier *weft__carrier_self(void) {
    weft__carrier *c = tls_carrier;
    __asm__ volatile("" : "+r"(c)); /* opaque: never cached across a switch */
    return c;
}

/* The same, inlined: only for a function that reads it once, before any
 * switch, and never uses it after one. */
static inline weft__carrier *carrier_here(void) { return tls_carrier; }

weft_thread *weft__self(void) {
    weft__carrier *c = weft__carrier_self();
    return c ? c->cur : NULL;
}


static inline void bump(_Atomic uint64_t *ctr) {
    atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* CLOCK_MONOTONIC whatever the mode (deterministic mode's real waits). */
static int64_t mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_now(void) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) return weft__det_now(); /* virtual time (det.c) */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A few milliseconds' resolution, a fraction of the cost: for the dump's
 * "parked since", on every park. */
static inline int64_t coarse_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts,
                  uint32_t val3) {
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, val3);
}

/* Waits while *addr == val, until deadline (absolute CLOCK_MONOTONIC ns;
 * 0 = none). */
static void futex_wait_until(_Atomic uint32_t *addr, uint32_t val, int64_t deadline) {
    if (deadline) {
        struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
        futex(addr, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, val, &ts, FUTEX_BITSET_MATCH_ANY);
    } else {
        futex(addr, FUTEX_WAIT_PRIVATE, val, NULL, 0);
    }
}

static void futex_wake(_Atomic uint32_t *addr, int n) { futex(addr, FUTEX_WAKE_PRIVATE, (uint32_t)n, NULL, 0); }

/* The futex hash.  Since Linux 6.16 a process gets a private futex hash
 * sized for its CPUs, not its threads: 16 buckets on a 2-CPU machine.
 * Every FUTEX_WAKE walks its bucket under the bucket's lock, so with 15,000
 * pool threads asleep (a cached executor running sleeping tasks) each wake
 * walks ~900 waiters and wakes took half the machine.  Pools that grow call
 * this with the platform threads they keep: the hash grows (only grows) to
 * twice that, a power of two, at most FH_MAX buckets (64 bytes each).  A
 * kernel without the private hash (PR_FUTEX_HASH unknown), or a process on
 * the global hash, is left alone. */
#define FH_PRCTL 78 /* PR_FUTEX_HASH */
#define FH_SET 1    /* PR_FUTEX_HASH_SET_SLOTS */
#define FH_GET 2    /* PR_FUTEX_HASH_GET_SLOTS */
#define FH_MAX (1L << 16)
static _Atomic long fh_slots;   /* buckets set (0: not yet looked; -1: leave alone) */
static pthread_mutex_t fh_lock = PTHREAD_MUTEX_INITIALIZER;

void weft__futex_hash_fit(long threads) {
    long cur = atomic_load_explicit(&fh_slots, memory_order_relaxed);
    if (cur < 0 || (cur && threads <= cur / 2) || (!cur && threads <= 8)) return;
    pthread_mutex_lock(&fh_lock);
    cur = atomic_load_explicit(&fh_slots, memory_order_relaxed);
    if (!cur) {
        int n = prctl(FH_PRCTL, FH_GET, 0, 0, 0);
        cur = n > 0 ? n : -1; /* 0: the global hash; -1: no private hash */
    }
    long want = 32;
    while (want < 2 * threads && want < FH_MAX) want <<= 1;
    if (cur > 0 && want > cur) cur = prctl(FH_PRCTL, FH_SET, want, 0, 0) == 0 ? want : -1;
    atomic_store_explicit(&fh_slots, cur, memory_order_relaxed);
    pthread_mutex_unlock(&fh_lock);
}

/* The low 32 bits of a park word, for futex (little-endian). */
static inline _Atomic uint32_t *word_lo(_Atomic uint64_t *w) { return (_Atomic uint32_t *)(void *)w; }

static void fmt_name(const weft_thread *t, char out[32]) {
    uint64_t w[4];
    for (int i = 0; i < 4; i++)
        w[i] = atomic_load_explicit(&((weft_thread *)t)->name_words[i], memory_order_relaxed);
    memcpy(out, w, 32);
    out[31] = 0;
}

void weft__fatal(const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    weft_thread *t = weft__self();
    char name[32] = "";
    if (t) fmt_name(t, name);
    if (t)
        fprintf(stderr, "weft: %s (vthread %llu \"%s\")\n", buf, (unsigned long long)t->id, name);
    else
        fprintf(stderr, "weft: %s\n", buf);
    abort();
}

void weft__misuse(const char *call, const void *obj, const char *what, const void *site) {
    char where[512] = "an unknown site";
    /* (the observe layer's symbolizer: file and line where the caller has them) */
    if (site && weft__symbolize((uintptr_t)site, where, sizeof where) < 0) snprintf(where, sizeof where, "%p", site);
    weft__fatal("%s(%p): %s; called from %s", call, obj, what, where);
}

int weft__carrier_index(const weft__carrier *c) { return c ? c->index : -1; }
int weft__carriers(void) { return R.n; }

/* Every carrier, spares included: R.c[0 .. all-1] are set (acquire: pairs
 * with the release that publishes a spare). */
static inline int nall(void) { return atomic_load_explicit(&R.nall, memory_order_acquire); }
int weft__carriers_all(void) { return nall(); }

/* Carriers of g that take shared work: the configured ones and the active
 * spares (the default group), or all of a group's. */
static inline int nshared(weft_group *g) {
    return g->dflt ? R.n + atomic_load_explicit(&R.nactive, memory_order_relaxed) : g->n;
}

/* g's carriers g->c[0 .. gall(g)-1]: spares included for the default group. */
static inline int gall(weft_group *g) { return g->dflt ? nall() : g->n; }

weft_group *weft__group_default(void) { return &R.g0; }

/* The carriers of the calling vthread's group; of the default group (the
 * configured ones) on a platform thread or a default-group vthread. */
int weft__carriers_here(void) {
    weft_group *g = weft__group_self();
    return g && !g->dflt ? g->n : R.n;
}

/* The group a vthread spawned now by the caller goes to when its attr
 * names none: the caller's own (a vthread), or the default one. */
weft_group *weft__group_self(void) {
    weft__carrier *c = weft__carrier_self();
    return c && c->cur ? c->cur->grp : NULL;
}

const weft_thread *weft__carrier_running(const weft__carrier *c) {
    return c ? (const weft_thread *)__atomic_load_n(&c->cur, __ATOMIC_RELAXED) : NULL;
}

unsigned weft__fork_gen(void) { return R.fork_gen; }

/* t belongs to the runtime of a process this one was forked from ("Fork") */
static inline int stale(const weft_thread *t) { return __builtin_expect(t->fork_gen != R.fork_gen, 0); }

/* The descriptor handle h names, or NULL when h is stale ("Handles"): a
 * load and a compare.  A handle without a generation (the runtime's own)
 * is taken as it is. */
static inline weft_thread *handle_get(const weft_thread *h) {
    weft_thread *t = weft__thread_of(h);
    uint64_t g = weft__handle_gen(h);
    if (__builtin_expect(g != atomic_load_explicit(&t->gen, memory_order_acquire), 0) && g) return NULL;
    return t;
}

/* ------------------------------------------------------------------------ */
/* idle carriers                                                             */
/* ------------------------------------------------------------------------ */

/* Idle bits are per group, at each carrier's gidx (group.h). */
static void set_idle_bit(weft_group *g, int k) {
    atomic_fetch_or(&g->idle_mask[k / 64], (uint64_t)1 << (k % 64));
}

/* Clears bit k of g; returns 1 if this call cleared it. */
static int clear_idle_bit(weft_group *g, int k) {
    uint64_t b = (uint64_t)1 << (k % 64);
    return (atomic_fetch_and(&g->idle_mask[k / 64], ~b) & b) != 0;
}

/* Takes one sleeping carrier of g off the idle set, or returns -1. */
static int take_idle(weft_group *g) {
    int words = (gall(g) + 63) / 64;
    for (int i = 0; i < words; i++) {
        uint64_t m = atomic_load(&g->idle_mask[i]);
        while (m) {
            int k = i * 64 + __builtin_ctzll(m);
            if (clear_idle_bit(g, k)) return k;
            m = atomic_load(&g->idle_mask[i]);
        }
    }
    return -1;
}

static void kick(weft__carrier *c) {
    atomic_fetch_add(&c->wake_seq, 1);
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_acquire);
    if (pl) weft__poller_kick(pl);
    else futex_wake(&c->wake_seq, 1);
}

/* Wakes one sleeping carrier of g as a spinner if nobody of g spins. */
static void wake_one(weft_group *g) {
    int zero = 0;
    if (atomic_load(&g->nspinning) != 0 || !atomic_compare_exchange_strong(&g->nspinning, &zero, 1))
        return;
    int k = take_idle(g);
    if (k < 0) {
        atomic_fetch_sub(&g->nspinning, 1);
        return;
    }
    atomic_fetch_sub(&g->nidle, 1);
    kick(g->c[k]);
}

/* A full barrier.  On x86 a locked add to the stack is one, and cheaper
 * than mfence (Linux's smp_mb does the same). */
static inline void full_fence(void) {
#if defined(WEFT_TSAN)
    /* TSan models neither fences nor inline asm: a seq_cst RMW it does */
    static _Atomic int tsan_fence;
    atomic_fetch_add_explicit(&tsan_fence, 0, memory_order_seq_cst);
#elif defined(__x86_64__)
    __asm__ volatile("lock orq $0, (%%rsp)" ::: "memory", "cc");
#else
    atomic_thread_fence(memory_order_seq_cst);
#endif
}

/* Called after making work visible to the other carriers of group g. */
static inline void wake_if_needed(weft_group *g) {
    full_fence();
    if (atomic_load_explicit(&g->nspinning, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&g->nidle, memory_order_relaxed) > 0)
        wake_one(g);
}

/* Wakes carrier c itself if it sleeps (pinned work arrived for it).  A
 * retired spare sleeps outside the idle set ("Spares"): its dormant flag
 * and its last look are the same Dekker pair as the idle bit's. */
static void wake_carrier(weft__carrier *c) {
    full_fence();
    weft_group *g = c->grp;
    if (atomic_load(&g->idle_mask[c->gidx / 64]) & ((uint64_t)1 << (c->gidx % 64))) {
        if (clear_idle_bit(g, c->gidx)) {
            atomic_fetch_sub(&g->nidle, 1);
            atomic_fetch_add(&g->nspinning, 1); /* it wakes up counted as spinning */
            kick(c);
        }
    } else if (__builtin_expect(atomic_load(&c->dormant), 0) && atomic_exchange(&c->dormant, 0)) {
        kick(c);
    }
}

/* The monitor is needed: this carrier leaves idle (see "The monitor").  One
 * load, and a system call only when the monitor sleeps without a deadline.
 * The caller has cleared its idle bit (seq_cst) first. */
static void mon_arm(void) {
    if (atomic_exchange(&R.mon_armed, 1)) return;
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
}

static inline void mon_need(void) {
    /* seq_cst: pairs with the monitor's disarm (a plain load on x86) */
    if (__builtin_expect(!atomic_load(&R.mon_armed), 0)) mon_arm();
}

/* ------------------------------------------------------------------------ */
/* queues                                                                    */
/* ------------------------------------------------------------------------ */

/* The injection queue of t's group. */
static void inject_push(weft_thread *t) {
    /* deterministic mode: only platform threads push here (det.c: grace) */
    if (__builtin_expect(WEFT__DET_ON(), 0)) weft__det_platform_active();
    weft_group *g = t->grp;
    t->next = NULL;
    pthread_mutex_lock(&g->inj_lock);
    if (g->inj_tail) g->inj_tail->next = t;
    else g->inj_head = t;
    g->inj_tail = t;
    atomic_fetch_add(&g->inj_n, 1);
    pthread_mutex_unlock(&g->inj_lock);
}

static weft_thread *inject_pop_locked(weft_group *g) {
    pthread_mutex_lock(&g->inj_lock);
    weft_thread *t = g->inj_head;
    if (t) {
        g->inj_head = t->next;
        if (!g->inj_head) g->inj_tail = NULL;
        atomic_fetch_sub(&g->inj_n, 1);
    }
    pthread_mutex_unlock(&g->inj_lock);
    return t;
}

/* The injection queue of carrier c's group: not for a retired spare (looked
 * at only when the queue is not empty: nothing more on the empty path). */
static inline weft_thread *inject_pop(weft__carrier *c) {
    weft_group *g = c->grp;
    if (atomic_load_explicit(&g->inj_n, memory_order_relaxed) <= 0) return NULL;
    if (__builtin_expect(!atomic_load_explicit(&c->shared, memory_order_relaxed), 0)) return NULL;
    return inject_pop_locked(g);
}

/* The hand-off between groups (group.c, "Hand-offs"): t, of another group
 * than the caller's carrier (or made runnable off any carrier), goes to its
 * own group's injection queue, and a carrier of that group is woken by the
 * same protocol as within a group. */
static void enqueue_foreign(weft_thread *t) {
    /* t's group, read before the push: once queued, t may run, end and its
     * slot be reused by a spawn.  And the group must outlive the wake-up
     * below: a hand-off in flight counts as one of its live vthreads, so
     * weft_group_close cannot free it meanwhile (the default group is
     * never freed) */
    weft_group *g = t->grp;
    if (!g->dflt) atomic_fetch_add(&g->nlive, 1);
    inject_push(t);
    wake_if_needed(g);
    if (!g->dflt && atomic_fetch_sub(&g->nlive, 1) == 1 && atomic_load(&g->closing)) weft__group_last_exit(g);
}

static void mbox_push(weft__carrier *c, weft_thread *t) {
    t->next = NULL;
    pthread_mutex_lock(&c->mbox_lock);
    if (c->mbox_tail) c->mbox_tail->next = t;
    else c->mbox_head = t;
    c->mbox_tail = t;
    atomic_fetch_add(&c->mbox_n, 1);
    pthread_mutex_unlock(&c->mbox_lock);
}

static weft_thread *mbox_pop_locked(weft__carrier *c) {
    pthread_mutex_lock(&c->mbox_lock);
    weft_thread *t = c->mbox_head;
    if (t) {
        c->mbox_head = t->next;
        if (!c->mbox_head) c->mbox_tail = NULL;
        atomic_fetch_sub(&c->mbox_n, 1);
    }
    pthread_mutex_unlock(&c->mbox_lock);
    return t;
}

static inline weft_thread *mbox_pop(weft__carrier *c) {
    if (atomic_load_explicit(&c->mbox_n, memory_order_relaxed) <= 0) return NULL;
    return mbox_pop_locked(c);
}

/* Queues t on c's deque; if the deque cannot grow (no memory), on the
 * injection queue instead, a linked list that needs none: out of memory
 * never loses a runnable vthread. */
static inline __attribute__((always_inline)) void dq_push(weft__carrier *c, weft_thread *t) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) { /* the one carrier's run set (det.c) */
        weft__det_push(t);
        return;
    }
    if (__builtin_expect(weft__dq_push(&c->dq, t) != 0, 0)) inject_push(t);
}

/* Queues t on carrier c, which is the caller's own carrier. */
/* A pinned vthread goes to its home carrier's mailbox (c: the caller's
 * carrier, or NULL).  Returns 0 for one that is not pinned (yet). */
static int enqueue_pinned(weft__carrier *c, weft_thread *t) {
    /* read before the push: once queued, t may run and end a hooked
     * call's pin (weft__pin_end clears home) */
    weft__carrier *home = t->home;
    if (!((t->flags & WEFT__F_PINNED) && home)) return 0;
    mbox_push(home, t);
    if (home != c) wake_carrier(home);
    return 1;
}

static void enqueue_local(weft__carrier *c, weft_thread *t) {
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    if (enqueue_pinned(c, t)) return;
    if (__builtin_expect(t->grp != c->grp, 0)) enqueue_foreign(t); /* never run on another group's carrier */
    else dq_push(c, t);
}

/* Queues t, whose park the caller ended, at the back of c's run queue. */
static void enqueue_fifo(weft__carrier *c, weft_thread *t) {
    int pinned = (t->flags & WEFT__F_PINNED) != 0; /* before t can run */
    enqueue_local(c, t);
    if (!pinned) wake_if_needed(c->grp);
}

void weft__ready(weft_thread *t) {
    if (stale(t)) return; /* a parent's vthread, woken in a fork child: it does not exist here */
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    weft__carrier *c = weft__carrier_self();
    if (!c) { /* a platform thread: counted until its wake-up is complete (plat_waking) */
        atomic_fetch_add(&R.plat_waking, 1);
        if (!enqueue_pinned(NULL, t)) enqueue_foreign(t);
        atomic_fetch_sub(&R.plat_waking, 1);
        return;
    }
    if (enqueue_pinned(c, t)) return;
    if (__builtin_expect(t->grp != c->grp, 0)) {
        enqueue_foreign(t); /* a platform thread's wake, or another group's */
        return;
    }
    if (__builtin_expect(WEFT__DET_ON(), 0)) { /* no LIFO slot: the seeded pick decides */
        weft__det_push(t);
        return;
    }
    if (c->cur) {
        weft_thread *old = atomic_exchange_explicit(&c->lifo, t, memory_order_acq_rel);
        if (!old) return; /* this carrier runs it soon (or the monitor moves it): wake nobody */
        dq_push(c, old);
    } else {
        dq_push(c, t);
    }
    wake_if_needed(c->grp);
}

/* ------------------------------------------------------------------------ */
/* timers                                                                    */
/* ------------------------------------------------------------------------ */

static int unpark_claim(weft__parker *p, uint64_t token, int state);

/* Makes t, whose park the caller ended, runnable from a thread that is no
 * carrier (the monitor): the injection queue, or its home's mailbox. */
static void enqueue_elsewhere(weft_thread *t) {
    atomic_store_explicit(&t->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed);
    if (!enqueue_pinned(NULL, t)) enqueue_foreign(t); /* its group's queue, and a wake-up there */
}

/* Fires the due timers of heap h; the vthreads whose park they end are
 * queued on the caller's carrier c so that the earliest deadline runs first
 * (c NULL: the monitor; on the injection queue).
 * block = 0: give up if another carrier holds the lock. */
static int fire_timers(weft__carrier *c, weft__theap *h, int64_t now, int block) {
    if (atomic_load_explicit(&h->min, memory_order_acquire) > now) return 0;
    if (block) pthread_mutex_lock(&h->lock);
    else if (pthread_mutex_trylock(&h->lock) != 0) return 0;
    weft_thread *batch[64];
    int n = 0, total = 0;
    weft__theap_ent e;
    for (;;) {
        if (n < 64 && weft__theap_pop_due(h, now, &e)) {
            /* a stale entry (its park ended otherwise) fails harmlessly */
            int r = unpark_claim(&e.t->parker, e.token, WEFT__PS_TIMEDOUT);
            if (r == 2) batch[n++] = e.t;
            else if (r == 0) atomic_fetch_sub_explicit(&h->dead, 1, memory_order_relaxed);
            continue;
        }
        /* in deadline order: the run queue is FIFO */
        for (int i = 0; i < n; i++) {
            if (c) enqueue_local(c, batch[i]);
            else enqueue_elsewhere(batch[i]);
        }
        total += n;
        if (n < 64) break;
        n = 0;
    }
    pthread_mutex_unlock(&h->lock);
    if (total && c) wake_if_needed(c->grp);
    return total;
}

/* ------------------------------------------------------------------------ */
/* picking work                                                              */
/* ------------------------------------------------------------------------ */

static inline weft_thread *yield_pop(weft__carrier *c);

/* Queues the vthreads whose I/O completed, in completion order. */
static int io_poll(weft__carrier *c, weft__poller *pl, int cheap) {
    weft_thread *batch[64];
    int total = 0, n;
    do {
        n = weft__poller_poll(pl, batch, 64, cheap);
        for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
        total += n;
    } while (n == 64);
    if (total) wake_if_needed(c->grp);
    return total;
}

/* The checks pick_local makes only every SLOW_EVERY picks: due timers, I/O
 * completions, and -- in turn -- the injection queue and the yield queue
 * first, so that neither starves behind a busy deque or LIFO slot.  61 as
 * Go's scheduler checks its global queue: a carrier that never runs dry
 * still looks every few microseconds, and a yield pays for the clock read
 * and the ring check a quarter as often as at 16 (switch 6.39 vs 6.65 ns,
 * same sitting).  A carrier that does run dry looks at once (find_work). */
static weft_thread *pick_slow(weft__carrier *c) {
    weft_thread *t = NULL;
    if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) != INT64_MAX)
        fire_timers(c, &c->timers, weft_now(), 1);
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
    if (pl) io_poll(c, pl, 1);
    uint32_t turn = atomic_load_explicit(&c->slow_turn, memory_order_relaxed) + 1;
    atomic_store_explicit(&c->slow_turn, turn, memory_order_relaxed);
    if (turn % 4 == 0) t = inject_pop(c);
    else if (turn % 4 == 2) t = yield_pop(c);
    return t;
}

static weft_thread *pick_det(weft__carrier *c);

/* pick_local without the deterministic-mode test, for callers that made it
 * already (weft_yield, find_work): the switch path pays for one test of
 * weft__det_on, not two (two atomic loads of the global were 7 of a
 * yield's ~93 instructions, callgrind on micro switch; now c->det, one
 * compare in the carrier's first line). */
static inline __attribute__((always_inline)) weft_thread *pick_local_rt(weft__carrier *c);

static inline __attribute__((always_inline)) weft_thread *pick_local(weft__carrier *c) {
    if (__builtin_expect(c->det, 0)) return pick_det(c);
    return pick_local_rt(c);
}

static inline __attribute__((always_inline)) weft_thread *pick_local_rt(weft__carrier *c) {
    weft_thread *t;
    if (__builtin_expect(--c->slow_countdown == 0, 0)) {
        c->slow_countdown = SLOW_EVERY;
        if ((t = pick_slow(c))) return t;
    }
    /* the LIFO slot first, unless it has run LIFO_CAP times in a row while
     * the mailbox or the deque waits (only this carrier fills its own slot,
     * so what we see here cannot change under us except by a thief
     * emptying it) */
    if (atomic_load_explicit(&c->lifo, memory_order_relaxed)) {
        if (c->lifo_streak < LIFO_CAP ||
            (weft__dq_size(&c->dq) <= 0 && atomic_load_explicit(&c->mbox_n, memory_order_relaxed) <= 0)) {
            t = atomic_exchange_explicit(&c->lifo, NULL, memory_order_acq_rel);
            if (t) {
                c->lifo_streak++;
                return t;
            }
        }
    }
    if (c->lifo_streak) c->lifo_streak = 0;
    if ((t = mbox_pop(c))) return t;
    if ((t = weft__dq_take(&c->dq))) return t;
    if ((t = yield_pop(c))) return t;
    return inject_pop(c);
}

static uint32_t rnd(weft__carrier *c) {
    uint64_t x = c->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c->rng = x;
    return (uint32_t)(x >> 32);
}

/* One pass over the other carriers from a random start. */
static weft_thread *steal_once(weft__carrier *c, int take_lifo, int64_t now) {
    weft_group *g = c->grp; /* its own group's carriers only */
    int n = gall(g);
    if (n <= 1) return NULL;
    uint32_t start = rnd(c) % (uint32_t)n;
    for (int i = 0; i < n; i++) {
        weft__carrier *v = g->c[(start + (uint32_t)i) % (uint32_t)n];
        if (v == c) continue;
        for (int tries = 0; tries < 4; tries++) {
            void *batch[STEAL_MAX];
            int k = weft__dq_steal_half(&v->dq, batch, STEAL_MAX);
            if (k == 0) break;
            if (k > 0) {
                /* run the first, queue the rest here */
                for (int j = 1; j < k; j++) dq_push(c, batch[j]);
                atomic_store_explicit(&c->n_steals, atomic_load_explicit(&c->n_steals, memory_order_relaxed) + (uint64_t)k,
                                      memory_order_relaxed);
                return batch[0];
            }
        }
        if (take_lifo && atomic_load_explicit(&v->lifo, memory_order_relaxed)) {
            weft_thread *t = atomic_exchange_explicit(&v->lifo, NULL, memory_order_acq_rel);
            if (t) {
                bump(&c->n_steals);
                return t;
            }
        }
        /* a busy carrier's overdue timers */
        if (now && fire_timers(c, &v->timers, now, 0)) {
            weft_thread *t = weft__dq_take(&c->dq);
            if (t) return t;
        }
    }
    return NULL;
}

static int work_visible(weft__carrier *c) {
    weft_group *g = c->grp;
    if (atomic_load(&g->inj_n) > 0 || atomic_load(&c->mbox_n) > 0) return 1;
    for (int i = 0, n = gall(g); i < n; i++) {
        weft__carrier *v = g->c[i];
        if (weft__dq_size(&v->dq) > 0 || atomic_load(&v->lifo)) return 1;
    }
    return atomic_load(&c->timers.min) <= weft_now();
}

static void stop_spinning(weft__carrier *c) {
    if (!c->spinning) return;
    c->spinning = 0;
    /* the last spinner to find work makes sure another looks for more */
    if (atomic_fetch_sub(&c->grp->nspinning, 1) == 1) wake_if_needed(c->grp);
}

static void flush_live(weft__carrier *c);
static void retired_sleep(weft__carrier *c, weft__poller *pl);
static int64_t nondaemon_live(void);

/* ---- deterministic mode (det.c has the design) ----------------------------
 * The one carrier's decision: what arrived from outside (the injection
 * queue, the mailbox: platform threads, the blocking pool) and what is due
 * (timers on the virtual clock, reaped I/O completions) joins the run set,
 * then det.c draws the next vthread from it. */
static weft_thread *pick_det(weft__carrier *c) {
    weft_thread *t;
    while ((t = inject_pop(c)) || (t = mbox_pop(c))) {
        weft__det_note_inject(t);
        weft__det_push(t);
    }
    int64_t now = weft__det_now();
    if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) <= now) fire_timers(c, &c->timers, now, 1);
    weft__det_pwait_fire(now); /* platform threads' timed waits */
    weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
    if (pl) io_poll(c, pl, 1);
    return weft__det_pick();
}

/* find_work in deterministic mode: no stealing or spinning (one carrier);
 * nothing runnable and timers pending: the clock jumps to the first, after
 * outstanding I/O had WEFT__DET_IO_WAIT_NS of real time to complete;
 * nothing at all: sleep in the poller (or on the futex) as find_work does,
 * until a platform thread, the blocking pool or the kernel hands work in. */
static weft_thread *find_work_det(weft__carrier *c) {
    weft_group *g = c->grp; /* the default group: the mode has no other */
    for (;;) {
        if (atomic_load_explicit(&R.stop, memory_order_acquire)) return NULL;
        weft_thread *t = pick_det(c);
        if (t) return t;
        weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
        if (pl && io_poll(c, pl, 0)) continue;
        int64_t min = atomic_load(&c->timers.min), pmin = weft__det_pwait_min();
        if (pmin < min) min = pmin;
        int waited = 0;
        int64_t hold = min != INT64_MAX ? weft__det_hold_ns() : 0;
        /* nothing runnable, no timer, nothing outside that could wake a
         * vthread, for WEFT__DET_DEADLOCK_NS of real time: a deadlock,
         * reported (det.c) rather than idled on forever */
        int64_t stuck = weft__det_deadlock_in(min);
        if (stuck == 0) {
            /* only if some vthread waits: a runtime with none (a program
             * between two of its own) or only daemons idles as ever */
            if (!work_visible(c) && nondaemon_live() > 0) weft__det_deadlock();
            stuck = INT64_MAX;
        }
        if (min != INT64_MAX && !hold) {
            weft__det_jump(min);
            continue;
        }
        /* the stack allocator's background work, as find_work does it (on
         * the real clock: memory, not scheduling) */
        if (weft__stacks_refill() > 0) continue;
        if (weft__stacks_trim() || weft__stacks_idle_trim(&c->stacks)) continue;
        /* go idle: publish, then look once more (as find_work) */
        flush_live(c);
        uint32_t seq = atomic_load(&c->wake_seq);
        set_idle_bit(g, c->gidx);
        atomic_fetch_add(&g->nidle, 1);
        if (!work_visible(c) && !atomic_load(&R.stop)) {
            /* a bounded real wait if a jump is due after it, or the
             * stacks' idle trim (real time) */
            int64_t wait = min != INT64_MAX ? hold : stuck;
            int64_t trim = weft__stacks_trim_due(&c->stacks);
            if (trim != INT64_MAX) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                int64_t left = trim - ((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
                if (left < wait) wait = left > 0 ? left : 0;
            }
            int64_t vdl = wait != INT64_MAX ? weft__det_now() + (wait ? wait : 1) : 0;
            if (pl) {
                weft_thread *batch[64];
                int n = weft__poller_wait(pl, vdl, batch, 64); /* (its timeout: vdl - weft_now()) */
                for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
                waited = n == 0 && atomic_load(&c->wake_seq) == seq; /* not kicked */
            } else {
                futex_wait_until(&c->wake_seq, seq, weft__det_real_deadline(vdl));
                waited = atomic_load(&c->wake_seq) == seq;
            }
        }
        if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
        else atomic_fetch_sub(&g->nspinning, 1); /* a waker counted us as spinning: we do not spin */
        if (waited && min != INT64_MAX && !atomic_load_explicit(&g->inj_n, memory_order_relaxed)) {
            weft__det_waited();
            weft__det_jump(min); /* the I/O did not come in time: virtual time goes on */
        }
    }
}

/* The sched context's search; returns NULL only when stopping. */
static weft_thread *find_work(weft__carrier *c) {
    if (__builtin_expect(WEFT__DET_ON(), 0)) return find_work_det(c);
    weft_group *g = c->grp; /* the idle protocol below is g's */
    for (;;) {
        if (atomic_load_explicit(&R.stop, memory_order_acquire) ||
            atomic_load_explicit(&g->stop, memory_order_acquire))
            return NULL;
        weft_thread *t = pick_local_rt(c); /* (det: find_work_det, above) */
        if (t) { stop_spinning(c); return t; }
        int64_t now = 0;
        if (atomic_load_explicit(&c->timers.min, memory_order_relaxed) != INT64_MAX) {
            now = weft_now();
            if (fire_timers(c, &c->timers, now, 1)) continue;
        }
        weft__poller *pl = atomic_load_explicit(&c->poller, memory_order_relaxed);
        if (pl && io_poll(c, pl, 0)) continue;
        if (__builtin_expect(!atomic_load_explicit(&c->shared, memory_order_acquire), 0)) {
            /* a retired spare: nothing of its own left; it takes no one
             * else's work ("Spares") and passes on a wake-up meant for a
             * carrier that would */
            stop_spinning(c);
            retired_sleep(c, pl);
            continue;
        }
        /* Runnable vthreads elsewhere come first: a spawn burst's children
         * must start (and, say, begin their sleep) without waiting for the
         * spawner to finish.  Then, if that burst is outrunning the stack
         * supply, help make stacks. */
        if ((t = steal_once(c, 0, now))) {
            stop_spinning(c);
            return t;
        }
        if (weft__stacks_refill() > 0) continue;
        if (!c->spinning) {
            int sp = atomic_load(&g->nspinning);
            if (2 * sp <= nshared(g) - atomic_load(&g->nidle)) { /* at most half the busy ones, and one at least */
                c->spinning = 1;
                atomic_fetch_add(&g->nspinning, 1);
            }
        }
        if (c->spinning) {
            /* Spin (up to SPIN_NS, as spin_budget says) before sleeping: on
             * this kind of VM waking a sleeping carrier costs tens of
             * microseconds, so a hand-off that comes back within that time
             * is far cheaper caught spinning. */
            int64_t budget = c->spin_budget > spin_ns || c->spin_budget <= 0 ? spin_ns : c->spin_budget;
            int64_t start = weft_now(), until = start + budget, last = start;
            for (int r = 0;; r++) {
                t = steal_once(c, r >= 2, (r & 7) == 0 ? (last = weft_now()) : 0);
                if (!t && pl && (r & 7) == 4) io_poll(c, pl, 1);
                if (!t) t = pick_local_rt(c);
                if (t) break;
                for (int k = 0; k < 16; k++) weft__cpu_relax();
                if ((r & 7) == 7 &&
                    ((last = weft_now()) >= until || atomic_load_explicit(&R.stop, memory_order_relaxed) ||
                     atomic_load_explicit(&g->stop, memory_order_relaxed) ||
                     !atomic_load_explicit(&c->shared, memory_order_relaxed)))
                    break;
            }
            if (t && last - start <= SPIN_PAYS_NS) { /* (last: the loop's latest clock read) */
                c->spin_budget = spin_ns;
            } else {
                int64_t half = budget / 2;
                c->spin_budget = half > SPIN_PAYS_NS ? half : SPIN_PAYS_NS;
            }
            if (t) { stop_spinning(c); return t; }
        }
        /* Memory above the stack cache's high-water mark goes back in a lull:
         * only when every other carrier sleeps too, since each batch's TLB
         * shootdown interrupts the carriers still running (a group's
         * carrier: its group's and the default group's; other groups'
         * are not looked at).  After an idle
         * period the deep pages of the stacks kept hot go back as well. */
        if (atomic_load_explicit(&g->nidle, memory_order_relaxed) >= nshared(g) - 1 &&
            (g->dflt || atomic_load_explicit(&R.g0.nidle, memory_order_relaxed) >= nshared(&R.g0)) &&
            (weft__stacks_trim() || weft__stacks_idle_trim(&c->stacks)))
            continue;
        /* go idle: publish, then look once more */
        flush_live(c);
        uint32_t seq = atomic_load(&c->wake_seq);
        set_idle_bit(g, c->gidx);
        atomic_fetch_add(&g->nidle, 1);
        if (c->spinning) {
            c->spinning = 0;
            atomic_fetch_sub(&g->nspinning, 1);
        }
        /* A spare retired since the loop's top looked (its kick may have
         * been taken by the spin's polls) sleeps outside the idle set: in
         * it, it would count as a carrier ready for work -- keeping the
         * monitor from activating a spare -- while it takes none.  And a
         * wake-up it absorbed as a spinner (a submitter saw nspinning and
         * woke nobody) is passed on: its last look does not cover the
         * injection queue, which it no longer takes. */
        if (__builtin_expect(!atomic_load(&c->shared), 0)) {
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1; /* a waker counted us as spinning: passed on at the top */
            wake_if_needed(g);
            mon_need();
            continue;
        }
        if (work_visible(c) || atomic_load(&R.stop) || atomic_load(&g->stop)) {
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1; /* a waker counted us as spinning */
            mon_need(); /* busy again (the monitor may have seen us idle) */
            continue;
        }
        int64_t min = atomic_load(&c->timers.min);
        /* wake for the idle trim when it falls due (not when it is due
         * already: then the other carriers are busy, and it waits for the
         * next lull) */
        int64_t trim = weft__stacks_trim_due(&c->stacks);
        if (trim < min && trim > weft_now()) min = trim;
        if (pl) {
            /* asleep in the poller: a completion, a kick (its eventfd) or
             * the next timer ends it */
            weft_thread *batch[64];
            int n = weft__poller_wait(pl, min == INT64_MAX ? 0 : min, batch, 64);
            if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
            else c->spinning = 1;
            mon_need();
            for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
            if (n) wake_if_needed(g);
            continue;
        }
        futex_wait_until(&c->wake_seq, seq, min == INT64_MAX ? 0 : min);
        if (clear_idle_bit(g, c->gidx)) atomic_fetch_sub(&g->nidle, 1);
        else c->spinning = 1;
        mon_need();
    }
}

/* ------------------------------------------------------------------------ */
/* the monitor                                                               */
/* ------------------------------------------------------------------------ */

#define MON_GRACE_MIN_NS 1000000  /* after a rescue: look again this soon */
#define MON_GRACE_MAX_NS 10000000 /* the longest a carrier holds what others could run, once armed */
#define MON_COMPUTE_NS 1000000   /* a WEFT__F_COMPUTE vthread that used this much CPU since the first look computes */
#define PIN_THRESHOLD_NS 20000000 /* a vthread holding its carrier this long is a stall (default) */

static weft_thread *yq_take(weft__carrier *v);
static int yq_lock_thief(weft__carrier *v);
static void yq_unlock_thief(weft__carrier *v);

static int carrier_idle(weft__carrier *v) {
    weft_group *g = v->grp;
    return (atomic_load(&g->idle_mask[v->gidx / 64]) >> (v->gidx % 64)) & 1; /* seq_cst: see monitor_main */
}

/* Asleep, owing the monitor nothing: idle, or a retired spare asleep. */
static int carrier_resting(weft__carrier *v) {
    return carrier_idle(v) || atomic_load(&v->dormant); /* seq_cst: see monitor_main */
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
            enqueue_elsewhere(t);
            n++;
        }
    }
    n += fire_timers(NULL, &v->timers, now, 0);
    if (R.yq_stealable) {
        for (weft_thread *t = yq_take(v), *nx; t; t = nx) {
            nx = t->next;
            enqueue_elsewhere(t);
            n++;
        }
    }
    return n;
}

/* ---- spares ---- */

static weft__carrier *carrier_alloc(int i);
static void carrier_free(weft__carrier *c);
static void *carrier_main(void *arg);

/* Makes spare carrier R.c[nall], active (the monitor thread only): 0 or
 * -errno.  Published once its thread has its poller, before it runs. */
static int spare_make(void) {
    int k = nall();
    if (k >= WEFT__MAX_CARRIERS) return -EAGAIN;
    weft__carrier *c = carrier_alloc(k);
    if (!c) return -ENOMEM;
    c->spare = 1;
    c->yq_private = R.yq_stealable;
    R.c[k] = c; /* before its thread: its idle bit leads others here */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 256 * 1024);
    int e = pthread_create(&c->thread, &a, carrier_main, c);
    pthread_attr_destroy(&a);
    if (e) {
        R.c[k] = NULL;
        carrier_free(c);
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
        carrier_free(c);
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
    kick(c);
}

/* An active spare stops taking others' work; it finishes its own, then
 * sleeps outside the idle set (retired_sleep).  Woken, in case it sleeps
 * idle: it must leave the idle set, where a waker would count on it. */
static void spare_retire(weft__carrier *c) {
    atomic_store(&c->shared, 0);
    atomic_fetch_sub(&R.nactive, 1);
    kick(c);
}

/* What a retired spare still owes: its own queues, its due timers. */
static int own_work(weft__carrier *c) {
    return atomic_load(&c->mbox_n) > 0 || weft__dq_size(&c->dq) > 0 || atomic_load(&c->lifo) || c->yq_head ||
           atomic_load(&c->timers.min) <= weft_now();
}

/* A retired spare with nothing of its own to run sleeps in its poller (its
 * ring's completions, its next timer, a kick), outside the idle set: only
 * wake_carrier (work pinned to it) and the monitor (activating it) wake
 * it.  dormant and its last look are a Dekker pair with wake_carrier's
 * fence and with the monitor's disarm (any_busy). */
static void retired_sleep(weft__carrier *c, weft__poller *pl) {
    flush_live(c);
    /* its cached stacks to the depot: only idle shared carriers return
     * stack memory, and a retired spare may sleep until shutdown (a burst
     * it helped with left up to WEFT__STACK_CACHE_CAP stacks here, whole) */
    weft__stacks_cache_flush(&c->stacks);
    uint32_t seq = atomic_load(&c->wake_seq);
    atomic_store(&c->dormant, 1);
    if (own_work(c) || atomic_load(&c->shared) || atomic_load(&R.stop)) {
        atomic_store(&c->dormant, 0);
        mon_need();
        return;
    }
    int64_t min = atomic_load(&c->timers.min);
    if (pl) {
        weft_thread *batch[64];
        int n = weft__poller_wait(pl, min == INT64_MAX ? 0 : min, batch, 64);
        atomic_store(&c->dormant, 0);
        mon_need();
        for (int i = 0; i < n; i++) enqueue_local(c, batch[i]);
        if (n) wake_if_needed(c->grp);
        return;
    }
    futex_wait_until(&c->wake_seq, seq, min == INT64_MAX ? 0 : min);
    atomic_store(&c->dormant, 0);
    mon_need();
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
static int compensate(int need, int waiting) {
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

/* A word of a vthread's descriptor that another carrier runs: it may end
 * and its slot be reused by a spawn while we read (the caller checks it
 * still runs after reading, and drops what it read otherwise), so
 * ThreadSanitizer is told to forget these reads, as the dump's are. */
#ifdef WEFT_TSAN
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
static uint64_t ld64(const void *p) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    uint64_t v = __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    return v;
}
static uint32_t ld32(const void *p) {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    uint32_t v = __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    return v;
}
#else
static uint64_t ld64(const void *p) { return __atomic_load_n((const uint64_t *)p, __ATOMIC_RELAXED); }
static uint32_t ld32(const void *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_RELAXED); }
#endif

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
    uint64_t sw[WEFT__SITE_WORDS];
    info.site[sizeof info.site - 1] = 0;
    memcpy(sw, info.site, sizeof sw);
    for (int i = 0; i < WEFT__SITE_WORDS; i++) atomic_store_explicit(&v->stall_site[i], sw[i], memory_order_relaxed);
    char name[32];
    memcpy(name, nw, 32);
    name[31] = 0;
    atomic_store_explicit(&v->stall_sysno, info.sysno, memory_order_relaxed);
    atomic_store_explicit(&v->stall_since, v->mon_since, memory_order_relaxed);
    atomic_store_explicit(&v->stall_vid, vid, memory_order_relaxed);
    atomic_store_explicit(&v->stall, info.kind, memory_order_release);
    atomic_fetch_add(info.kind == WEFT__STALL_PINNED ? &R.n_pinned : &R.n_hogs, 1);
    if (R.pin_log)
        weft__stall_log(1, info.kind, vid, name, v->index, info.sysno, now - v->mon_since, info.site);
}

static void stall_end(weft__carrier *v, int64_t now) {
    int kind = atomic_exchange(&v->stall, WEFT__STALL_NONE);
    if (!kind || !R.pin_log) return;
    uint64_t nw[4];
    for (int i = 0; i < 4; i++) nw[i] = atomic_load_explicit(&v->stall_name[i], memory_order_relaxed);
    char name[32];
    memcpy(name, nw, 32);
    name[31] = 0;
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
    return atomic_load_explicit(&v->grp->inj_n, memory_order_relaxed) > 0 || weft__dq_size(&v->dq) > 0 ||
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
        if (stall) m->stalled++;
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
    for (;;) {
        uint32_t seq = atomic_load(&R.mon_word);
        if (atomic_load(&R.stop)) break;
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
        if (R.max_comp > 0 && compensate(m.need, m.waiting)) {
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

/* Before the carriers start: may yields stay in a carrier's FIFO? */
static void mon_prepare(void) {
    atomic_store(&R.mon_word, 0);
    atomic_store(&R.mon_up, 0);
    R.mon_started = 0;
#ifdef WEFT_TSAN
    int stealable = 1; /* the gate is a real lock there */
#else
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    int stealable = q > 0 && (q & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
                    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
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
 * stalls; one carrier without stall detection has no use for it. */
static int mon_start(void) {
    if (R.n == 1 && R.pin_threshold < 0) return 0;
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

static void mon_stop(void) {
    if (!R.mon_started) return;
    atomic_fetch_add(&R.mon_word, 1);
    futex_wake(&R.mon_word, 1);
    pthread_join(R.mon_thread, NULL);
    R.mon_started = 0;
}

/* ------------------------------------------------------------------------ */
/* switching                                                                 */
/* ------------------------------------------------------------------------ */

static void exit_finish(weft__carrier *c, weft_thread *t);

/*
 * A yielded vthread goes to the carrier's private FIFO: no atomic operation
 * on the yield path.  Private means thieves cannot see it, so as soon as
 * some carrier idles, the whole private queue moves to the deque (where it
 * can be stolen) and a sleeper is woken.  Pinned vthreads can always stay.
 */
static inline void yq_append(weft__carrier *c, weft_thread *t) {
    t->next = NULL; /* (rstate stays RUNNABLE: see the dump's note on it) */
    if (c->yq_tail) c->yq_tail->next = t;
    else c->yq_head = t;
    c->yq_tail = t;
}

static void yield_enqueue(weft__carrier *c, weft_thread *t) {
    yq_append(c, t);
    if (!c->yq_private || atomic_load_explicit(&c->grp->nidle, memory_order_relaxed) > 0) {
        weft_thread *keep = NULL, *keep_tail = NULL;
        for (weft_thread *x = c->yq_head, *nx; x; x = nx) {
            nx = x->next;
            if (x->flags & WEFT__F_PINNED) {
                x->next = NULL;
                if (keep_tail) keep_tail->next = x;
                else keep = x;
                keep_tail = x;
            } else {
                dq_push(c, x);
            }
        }
        c->yq_head = keep;
        c->yq_tail = keep_tail;
        wake_if_needed(c->grp);
    }
}

/*
 * The yield FIFO's gate (see "The monitor").  The owner carrier is "in"
 * from the moment a vthread enters the scheduler (a yield, a park, an exit)
 * until the next vthread, already on its own stack, is about to run its own
 * code (resumed(), after finish_pending), and touches its FIFO only while
 * in.  Out therefore also means that every vthread in the FIFO has left its
 * stack (a yield queues itself there before its switch).  In is told by
 * c->cur: NULL while in (as in the sched context), the vthread while its
 * own code runs.  So stepping in costs one store and a load of the
 * monitor's flag, and stepping out is the store of c->cur that a switch
 * makes anyway: no fence.  (c->pending names the vthread that stepped in,
 * for the stack overflow handler.)  The monitor takes a busy carrier's
 * FIFO only while the carrier is out, and pays for both sides with
 * membarrier(2), which runs a full barrier on every CPU running the
 * process (an asymmetric Dekker): after it, either the monitor sees c->cur
 * NULL, or the owner, stepping in later, sees the monitor's flag and waits
 * for it.  TSan models no such barrier: its builds also hold a real lock
 * (yq_lock) while in.
 */
#ifndef WEFT_TSAN
__attribute__((noinline)) static void yq_wait_thief(weft__carrier *c) {
    while (atomic_load_explicit(&c->yq_thief, memory_order_acquire)) weft__cpu_relax();
}
#endif
static inline __attribute__((always_inline)) void gate_in(weft__carrier *c, weft_thread *self) {
    c->pending = self;
    __atomic_store_n(&c->cur, (weft_thread *)NULL, __ATOMIC_RELAXED);
    /* its vthread-locals leave the carrier's window (local.c) */
    if (__builtin_expect(self->locals != NULL, 0)) weft__locals_leave(c->win, self);
#ifdef WEFT_TSAN
    for (int z = 0; !atomic_compare_exchange_weak_explicit(&c->yq_lock, &z, 1, memory_order_acquire,
                                                         memory_order_relaxed);
         z = 0)
        weft__cpu_relax();
#else
    atomic_signal_fence(memory_order_seq_cst); /* the CPU's order: the thief's membarrier */
    if (__builtin_expect(atomic_load_explicit(&c->yq_thief, memory_order_relaxed), 0)) yq_wait_thief(c);
#endif
}
/* t's code runs on c from here (release: the FIFO's writes before it) */
static inline __attribute__((always_inline)) void gate_out(weft__carrier *c, weft_thread *t) {
#ifdef WEFT_TSAN
    atomic_store_explicit(&c->yq_lock, 0, memory_order_release);
#endif
    __atomic_store_n(&c->cur, t, __ATOMIC_RELEASE);
    /* its vthread-locals into the carrier's window (local.c) */
    if (__builtin_expect(t->locals != NULL, 0)) weft__locals_enter(c->win, t);
}
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

static inline weft_thread *yield_pop(weft__carrier *c) {
    weft_thread *t = c->yq_head;
    if (t) {
        c->yq_head = t->next;
        if (!c->yq_head) c->yq_tail = NULL;
    }
    return t;
}

/* Called in the scheduler (the gate in), after the old stack was left. */
static void finish_pending(weft__carrier *c) {
    int op = c->pending_op;
    if (op == OP_NONE) return;
    weft_thread *t = c->pending;
    c->pending_op = OP_NONE;
    c->pending = NULL;
    switch (op) {
    case OP_YIELD:
        yield_enqueue(c, t);
        break;
    case OP_PARK: {
        uint64_t tok = t->park_token;
        uint64_t parked = (tok & ~(uint64_t)0xF) | WEFT__PS_WAIT_PARKED;
        atomic_store_explicit(&t->rstate, WEFT__RS_PARKED, memory_order_relaxed);
        if (!atomic_compare_exchange_strong(&t->parker.word, &tok, parked))
            enqueue_local(c, t); /* ended before we got here: run it again */
        break;
    }
    case OP_EXIT:
        exit_finish(c, t);
        break;
    }
}

static inline void check_canary(weft_thread *t) {
    if (__builtin_expect(t->stk.guard == WEFT__GUARD_CANARY, 0) &&
        *(volatile uint64_t *)t->stk.lo != WEFT__CANARY) {
        char name[32];
        fmt_name(t, name);
        fprintf(stderr, "weft: stack overflow in vthread %llu \"%s\" (stack %zu KiB): canary smashed\n",
                (unsigned long long)t->id, name, t->stk.size / 1024);
        abort();
    }
}

/* Sets up `next` to run on c; called just before switching to it. */
static inline void enter(weft__carrier *c, weft_thread *next) {
    /* a relaxed atomic store (a plain mov): weft_dump reads it from other
     * threads.  c->cur is set by next itself, once on its stack (resumed) */
    __atomic_store_n(&next->carrier, c, __ATOMIC_RELAXED);
    bump(&c->n_switches);
}

/* Called by every vthread right after it is switched back in; c is the
 * carrier that switched to it (the switch's arg). */
static inline void resumed(weft_thread *self, weft__carrier *c) {
#ifdef WEFT_ASAN
    __sanitizer_finish_switch_fiber(self->asan_fake, NULL, NULL);
#endif
    (void)self;
    if (c->pending_op != OP_NONE) finish_pending(c); /* a private-queue yield leaves none */
    gate_out(c, self); /* our own code runs from here */
}

/* Switches from vthread self to next (NULL: the sched context), leaving
 * `op` for the next context to finish.  Returns when self is resumed. */
static inline __attribute__((always_inline)) void switch_to(weft__carrier *c, weft_thread *self, weft_thread *next, int op) {
    check_canary(self);
    c->pending_op = op; /* (c->pending = self: gate_in) */
    void *to_sp;
#ifdef WEFT_ASAN
    const void *bottom;
    size_t size;
#endif
    if (next) {
        enter(c, next);
        to_sp = next->sp;
#ifdef WEFT_ASAN
        bottom = next->stk.lo;
        size = next->stk.size;
#endif
#ifdef WEFT_TSAN
        __tsan_switch_to_fiber(next->tsan_fiber, 0);
#endif
    } else { /* (c->cur is NULL: gate_in) */
        to_sp = c->sched_sp;
#ifdef WEFT_ASAN
        bottom = c->asan_bottom;
        size = c->asan_size;
#endif
#ifdef WEFT_TSAN
        __tsan_switch_to_fiber(c->tsan_fiber, 0);
#endif
    }
#ifdef WEFT_ASAN
    __sanitizer_start_switch_fiber(op == OP_EXIT ? NULL : &self->asan_fake, bottom, size);
#endif
    c = weft__ctx_switch(&self->sp, to_sp, c);
    resumed(self, c);
}

/* Leaves the CPU to park or exit: runs the next local vthread, or the
 * sched context when there is none. */
static void switch_out(weft__carrier *c, weft_thread *self, int op) {
    gate_in(c, self);
    switch_to(c, self, pick_local(c), op);
}

/* Runs t from the sched context of c until it switches back there. */
static void run_from_sched(weft__carrier *c, weft_thread *t) {
    enter(c, t);
#ifdef WEFT_ASAN
    __sanitizer_start_switch_fiber(&c->asan_fake, t->stk.lo, t->stk.size);
#endif
#ifdef WEFT_TSAN
    __tsan_switch_to_fiber(t->tsan_fiber, 0);
#endif
    weft__ctx_switch(&c->sched_sp, t->sp, c);
#ifdef WEFT_ASAN
    __sanitizer_finish_switch_fiber(c->asan_fake, NULL, NULL);
#endif
    finish_pending(c);
}

/* ------------------------------------------------------------------------ */
/* parking                                                                   */
/* ------------------------------------------------------------------------ */

/* Publishes the next park of p (seq + 1, kind, WAIT_RUN) and returns it. */
static uint64_t publish_park(weft_thread *self, weft__parker *p, int kind) {
    if (!self) kind |= WEFT__PK_PLATFORM;
    uint64_t w = atomic_load_explicit(&p->word, memory_order_relaxed);
    uint64_t tok = (((w >> 8) + 1) << 8) | ((uint64_t)kind << 4) | WEFT__PS_WAIT_RUN;
    atomic_store(&p->word, tok); /* seq_cst: pairs with weft_cancel */
    if (self) self->park_token = tok;
    return tok;
}

uint64_t weft__park_begin_nocancel(weft__parker **pp, int kind) {
    weft_thread *self = weft__self();
    *pp = self ? &self->parker : &tls_parker;
    return publish_park(self, *pp, kind | WEFT__PK_NOCANCEL);
}

uint64_t weft__park_begin(weft__parker **pp, int kind) {
    weft_thread *self = weft__self();
    weft__parker *p;
    if (self) {
        p = &self->parker;
        if (atomic_load_explicit(&self->cancelled, memory_order_relaxed)) return 0;
    } else {
        p = &tls_parker;
        if (atomic_load_explicit(&tls_pc.cancelled, memory_order_relaxed)) return 0;
    }
    *pp = p;
    uint64_t tok = publish_park(self, p, kind);
    if (self ? atomic_load(&self->cancelled) : atomic_load(&tls_pc.cancelled)) {
        uint64_t e = tok;
        atomic_compare_exchange_strong(&p->word, &e, (tok & ~(uint64_t)0xF) | WEFT__PS_CANCELLED);
        return 0;
    }
    return tok;
}

/* Ends park `token` with `state` if it still waits.  Returns 0 if it had
 * already ended, 1 if this call ended it before the thread switched away
 * (nothing more to do), 2 if the thread is parked and the caller must make
 * it runnable.  A platform thread is woken here. */
static int unpark_claim(weft__parker *p, uint64_t token, int state) {
    uint64_t cur = atomic_load(&p->word);
    for (;;) {
        if (!WEFT__PW_SAME_PARK(cur, token)) return 0;
        unsigned st = WEFT__PW_STATE(cur);
        if (st != WEFT__PS_WAIT_RUN && st != WEFT__PS_WAIT_PARKED) return 0;
        uint64_t to = (cur & ~(uint64_t)0xF) | (uint64_t)state;
        if (atomic_compare_exchange_weak(&p->word, &cur, to)) {
            /* p is not read past this point unless st was WAIT_PARKED */
            if (WEFT__PW_PLATFORM(cur)) {
                futex_wake(word_lo(&p->word), INT_MAX);
                if (__builtin_expect(WEFT__DET_ON(), 0)) weft__det_platform_active(); /* (det.c: grace) */
                return 1;
            }
            return st == WEFT__PS_WAIT_PARKED ? 2 : 1;
        }
    }
}

int weft__unpark_kind(weft__parker *p, int kind) {
    uint64_t w = atomic_load(&p->word);
    unsigned st = WEFT__PW_STATE(w);
    if (WEFT__PW_KIND(w) != (unsigned)kind || (st != WEFT__PS_WAIT_RUN && st != WEFT__PS_WAIT_PARKED)) return 0;
    return unpark_claim(p, w, WEFT__PS_WOKEN);
}

int weft__park_abort(weft__parker *p, uint64_t token) {
    uint64_t e = token; /* still WAIT_RUN: we have not switched away */
    return atomic_compare_exchange_strong(&p->word, &e, (token & ~(uint64_t)0xF) | WEFT__PS_WOKEN);
}

weft__poller *weft__poller_self(void) {
    weft__carrier *c = tls_carrier;
    return c ? atomic_load_explicit(&c->poller, memory_order_relaxed) : NULL;
}

int weft__unpark(weft__parker *p, uint64_t token, int state) {
    int r = unpark_claim(p, token, state);
    if (r == 2) weft__ready(p->vt);
    return r != 0;
}

static int outcome(uint64_t w) {
    switch (WEFT__PW_STATE(w)) {
    case WEFT__PS_TIMEDOUT: return -ETIMEDOUT;
    case WEFT__PS_CANCELLED: return -ECANCELED;
    default: return 0;
    }
}

int64_t weft__effective_deadline(int64_t d) {
    weft_thread *self = weft__self();
    int64_t own = self ? self->deadline : tls_deadline;
    if (own && (!d || own < d)) d = own;
    if (self && self->scope_deadline && (!d || self->scope_deadline < d)) d = self->scope_deadline;
    return d;
}

int weft__park_wait(weft__parker *p, uint64_t token, int64_t deadline, int why,
                    const void *obj, const char *file, int line) {
    if (!WEFT__PW_NOCANCEL(token)) deadline = weft__effective_deadline(deadline);
    if (deadline == INT64_MAX) deadline = 0;
    weft_thread *self = p->vt;
    if (!self) {
        /* platform thread: sleep on the word itself (deterministic mode:
         * for real, the virtual deadline made a real one, det.c) */
        weft__det_pwait dw = {.p = p, .token = token, .deadline = deadline};
        int det = __builtin_expect(WEFT__DET_ON(), 0) && deadline, real = 0;
        int64_t until = deadline; /* (on the clock the loop reads) */
        if (det && !atomic_load(&R.up)) {
            /* no carrier to run the virtual clock (a channel used before
             * the runtime starts): the wait is real */
            det = 0;
            real = 1;
            until = weft__det_real_deadline(deadline);
        }
        if (__builtin_expect(WEFT__DET_ON(), 0) && atomic_load(&R.up)) {
            /* the carrier times it out on the virtual clock, and may hold
             * the clock for us while we are active (det.c): registered
             * first, then "parked", then a kick (the jump may be due) */
            if (det) weft__det_pwait_add(&dw);
            int was = weft__det_platform_parks();
            uint64_t w = atomic_load(&p->word);
            if (!WEFT__PW_SAME_PARK(w, token) || WEFT__PW_STATE(w) != WEFT__PS_WAIT_RUN)
                weft__det_platform_active(); /* ended already: we go on at once */
            else if (was || det)
                kick(R.c[0]);
        }
        for (;;) {
            uint64_t w = atomic_load(&p->word);
            if (!WEFT__PW_SAME_PARK(w, token) || WEFT__PW_STATE(w) != WEFT__PS_WAIT_RUN) break;
            if (until && (real ? mono_now() : weft_now()) >= until) {
                if (real) weft__det_clock_reach(deadline); /* the clock nobody else runs */
                /* end it ourselves, without weft__unpark's futex wake: only
                 * this thread sleeps on its word (a wake walks the futex
                 * hash bucket, which 10,000 sleeping pool threads make
                 * long) */
                atomic_compare_exchange_strong(&p->word, &w, (w & ~(uint64_t)0xF) | WEFT__PS_TIMEDOUT);
                continue;
            }
            futex_wait_until(word_lo(&p->word), (uint32_t)w, det ? 0 : until);
        }
        if (det) weft__det_pwait_del(&dw);
        return outcome(atomic_load(&p->word));
    }
    if (deadline && deadline <= weft_now()) {
        weft__unpark(p, token, WEFT__PS_TIMEDOUT);
        return outcome(atomic_load(&p->word));
    }
    weft__carrier *c = weft__carrier_self();
    weft__theap *h = NULL;
    if (deadline) {
        h = &c->timers;
        self->timer_heap = c->index;
        pthread_mutex_lock(&h->lock);
        int r = weft__theap_insert(h, deadline, self, token);
        pthread_mutex_unlock(&h->lock);
        if (r < 0) {
            /* cannot time out: end the park ourselves */
            if (weft__unpark(p, token, WEFT__PS_WOKEN)) return r;
            return outcome(atomic_load(&p->word));
        }
    }
    __atomic_store_n(&self->why, (uint8_t)why, __ATOMIC_RELAXED); /* read by weft_dump */
    atomic_store_explicit(&self->block_file, file, memory_order_relaxed);
    atomic_store_explicit(&self->block_line, line, memory_order_relaxed);
    atomic_store_explicit(&self->block_obj, obj, memory_order_relaxed);
    /* (on weft_now's clock, as block_until and the dump's now: the virtual
     * one in deterministic mode) */
    atomic_store_explicit(&self->block_since, __builtin_expect(WEFT__DET_ON(), 0) ? weft__det_now() : coarse_now(),
                          memory_order_relaxed);
    atomic_store_explicit(&self->block_until, deadline, memory_order_relaxed);
    bump(&c->n_parks);
    /* deterministic mode: an operation the kernel or the pool completes
     * (io.c parks on it with its op as obj) holds back the clock's jump;
     * that and an async dispatcher's park (operations of its may be in the
     * kernel) rule a deadlock out */
    int det_io = __builtin_expect(WEFT__DET_ON(), 0) && ((why == WEFT__WHY_IO && obj) || why == WEFT__WHY_ASYNC);
    int det_hold = why == WEFT__WHY_IO;
    if (det_io) weft__det_io_begin(det_hold);
    while (atomic_load(&p->word) == token) switch_out(weft__carrier_self(), self, OP_PARK);
    if (det_io) weft__det_io_end(det_hold);
    if (h && WEFT__PW_STATE(atomic_load(&p->word)) != WEFT__PS_TIMEDOUT) {
        /* ended otherwise: its heap entry is dead (counted, dropped later) */
        atomic_fetch_add_explicit(&R.c[self->timer_heap]->timers.dead, 1, memory_order_relaxed);
    }
    __atomic_store_n(&self->why, (uint8_t)WEFT__WHY_NONE, __ATOMIC_RELAXED);
    atomic_store_explicit(&self->block_file, NULL, memory_order_relaxed);
    return outcome(atomic_load(&p->word));
}

/* Moves the calling vthread to carrier k (sched.h).  A park that has ended
 * before the switch (WOKEN written by the vthread itself: nobody else knows
 * the token, and a NOCANCEL park is left alone by weft_cancel) makes
 * finish_pending queue it at once -- and a pinned vthread goes to its
 * home's mailbox: home is k for the length of the move. */
int weft__migrate(int k) {
    weft__carrier *c = weft__carrier_self();
    weft_thread *self = c ? c->cur : NULL;
    if (!self) return -EPERM;
    if (k < 0 || k >= nall() || !R.c[k] || R.c[k]->grp != self->grp || (self->flags & WEFT__F_PINNED))
        return -EINVAL;
    if (R.c[k] == c) return 0;
    self->home = R.c[k];
    self->flags |= WEFT__F_PINNED;
    uint64_t tok = publish_park(self, &self->parker, WEFT__PK_GENERIC | WEFT__PK_NOCANCEL);
    atomic_store(&self->parker.word, (tok & ~(uint64_t)0xF) | WEFT__PS_WOKEN);
    switch_out(c, self, OP_PARK);
    self->flags &= ~(uint32_t)WEFT__F_PINNED;
    self->home = NULL;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* vthreads                                                                  */
/* ------------------------------------------------------------------------ */

static void join_lock(weft_thread *t);
static void join_unlock(weft_thread *t);
#define JOIN_LOCK 0x100

static void vthread_start(void *arg, void *carrier) {
    weft_thread *self = arg;
    /* pinned: to the carrier it first runs on -- unless weft__spawn_on
     * chose it, and its spawner may still be reading home (enqueue_pinned) */
    if ((self->flags & WEFT__F_PINNED) && !self->home) self->home = carrier;
    atomic_store_explicit(&self->rstate, WEFT__RS_RUNNABLE, memory_order_relaxed); /* no longer new */
    resumed(self, carrier);
    self->result = self->fn(self->arg);
    /* its locals' destructors, on the vthread itself (they may block), before
     * anyone's join can return (local.c) */
    if (self->locals) weft__locals_end(self);
    weft__carrier *c = weft__carrier_self();
    if (__builtin_expect(!c, 0)) /* fn forked and this is the child: no carrier to end on ("Fork") */
        weft__fatal("a vthread's function returned in a child process it forked; the child of a "
                    "fork() from a vthread must end with _exit, exit or exec");
    switch_out(c, self, OP_EXIT);
    __builtin_unreachable();
}

static void flush_live(weft__carrier *c) {
    int64_t d = atomic_load_explicit(&c->live_delta, memory_order_relaxed);
    if (!d) return;
    atomic_store_explicit(&c->live_delta, 0, memory_order_relaxed);
    int64_t live = atomic_fetch_add(&R.live, d) + d;
    uint64_t pk = atomic_load(&R.peak);
    while (live > 0 && (uint64_t)live > pk && !atomic_compare_exchange_weak(&R.peak, &pk, (uint64_t)live)) {
    }
}

static inline void live_add(weft__carrier *c, int64_t d) {
    if (!c) {
        int64_t live = atomic_fetch_add(&R.live, d) + d;
        uint64_t pk = atomic_load(&R.peak);
        while (live > 0 && (uint64_t)live > pk && !atomic_compare_exchange_weak(&R.peak, &pk, (uint64_t)live)) {
        }
        return;
    }
    int64_t v = atomic_load_explicit(&c->live_delta, memory_order_relaxed) + d;
    atomic_store_explicit(&c->live_delta, v, memory_order_relaxed);
    if (v >= LIVE_FLUSH || v <= -LIVE_FLUSH) flush_live(c);
}

/*
 * TSan gives every vthread a fiber, and a fiber is a thread to it: past
 * 8128 threads in all it prints "Thread limit exceeded. Dying." and ends
 * the process.  So a TSan build refuses a spawn with -EAGAIN (and says so
 * once) while TSAN_FIBER_CAP fibers live, leaving the rest for OS threads:
 * carriers, the monitor, the blocking pool, the program's own.
 */
#ifdef WEFT_TSAN
#define TSAN_FIBER_CAP 7500
static int tsan_fiber_reserve(void) {
    if (atomic_fetch_add(&R.tsan_fibers, 1) < TSAN_FIBER_CAP) return 0;
    atomic_fetch_sub(&R.tsan_fibers, 1);
    static _Atomic int told;
    if (!atomic_exchange(&told, 1))
        fprintf(stderr, "weft: ThreadSanitizer counts each vthread as a thread and allows about 8k: "
                        "weft_spawn returns -EAGAIN while %d vthreads live (TSan builds only)\n", TSAN_FIBER_CAP);
    return -EAGAIN;
}
static void tsan_fiber_drop(weft_thread *t) {
    if (!t->tsan_fiber) return;
    __tsan_destroy_fiber(t->tsan_fiber);
    t->tsan_fiber = NULL;
    atomic_fetch_sub(&R.tsan_fibers, 1);
}
#endif

static inline __attribute__((always_inline)) void free_thread(weft__carrier *c, weft_thread *t) {
#ifdef WEFT_TSAN
    tsan_fiber_drop(t);
#endif
    /* every handle of t is stale from here on ("Handles") */
    atomic_store_explicit(&t->gen, weft__gen_next(atomic_load_explicit(&t->gen, memory_order_relaxed)),
                          memory_order_release);
    atomic_store_explicit(&t->rstate, WEFT__RS_FREE, memory_order_release);
    if (!c || !weft__stack_put_cached(&c->stacks, &t->stk)) weft__stack_put(c ? &c->stacks : NULL, &t->stk);
}

static void exit_finish(weft__carrier *c, weft_thread *t) {
    weft__stack_done(&t->stk, t->sp); /* (ASan: its last frames' poison; before t can be reused) */
    bump(&c->n_finished);
    if (!(t->flags & WEFT__F_DAEMON)) bump(&c->nd_finished);
    live_add(c, -1);
    /* its group's last vthread: wake weft_group_close (which stops this
     * carrier only after it has left this function; nothing here touches
     * the group after this) */
    weft_group *g = t->grp;
    if (!g->dflt && atomic_fetch_sub(&g->nlive, 1) == 1 && atomic_load(&g->closing)) weft__group_last_exit(g);
#ifdef WEFT_TSAN
    tsan_fiber_drop(t);
#endif
    atomic_store_explicit(&t->rstate, WEFT__RS_DONE, memory_order_relaxed);
    int st = atomic_load_explicit(&t->join_state, memory_order_relaxed);
    if (st == 3) { /* detached (and nobody holds the lock) */
        free_thread(c, t);
        return;
    }
    /* nobody waits yet: publish "done" -- our last touch of t */
    if (st == 0 && atomic_compare_exchange_strong_explicit(&t->join_state, &st, 2, memory_order_release,
                                                           memory_order_relaxed))
        return;
    join_lock(t);
    st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st == 3) { /* detached */
        join_unlock(t);
        free_thread(c, t);
        return;
    }
    /* done; with a joiner waiting, done for that joiner to reap (5), which
     * nobody else may then claim */
    atomic_store_explicit(&t->join_state, (st == 1 ? 5 : 2) | JOIN_LOCK, memory_order_relaxed);
    /* The joiner goes to the back of the run queue, not the LIFO slot: the
     * child is gone, so there is no hand-off to keep warm, and a parent
     * joining a batch of children then finds most of them done. */
    if (st == 1 && unpark_claim(t->joiner, t->joiner_token, WEFT__PS_WOKEN) == 2)
        enqueue_fifo(c, t->joiner->vt);
    join_unlock(t);
}

/* join_state: 0 running, 1 a joiner waits, 2 done, 3 detached, 4 reaped
 * (a join or detach has claimed the finished vthread and frees it), 5 done
 * while a joiner waited (that joiner's to reap: others are refused as in
 * 1, even before it has woken); its transitions and the joiner fields are
 * under a tiny spinlock kept in the high bit so that a joiner's parker is
 * never woken after it returned.  Done -> reaped is also taken by a CAS
 * without the lock (weft_join's fast path): exactly one of two callers
 * racing to reap t wins. */
static void join_lock(weft_thread *t) {
    for (int spins = 0;; spins++) {
        int v = atomic_load_explicit(&t->join_state, memory_order_relaxed);
        if (!(v & JOIN_LOCK) &&
            atomic_compare_exchange_weak_explicit(&t->join_state, &v, v | JOIN_LOCK,
                                                  memory_order_acquire, memory_order_relaxed))
            return;
        if (spins > 100) sched_yield();
        else weft__cpu_relax();
    }
}
static void join_unlock(weft_thread *t) {
    atomic_fetch_and_explicit(&t->join_state, ~JOIN_LOCK, memory_order_release);
}

static int spawn_impl(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr, int on);

int weft_spawn(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr) {
    return spawn_impl(out, fn, arg, attr, -1);
}

int weft__spawn_on(int k, weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr) {
    if (k < 0) return -EINVAL;
    return spawn_impl(out, fn, arg, attr, k);
}

/* A generation for a freshly populated slot (seq_base: unique to this
 * population): spread over the 24 bits, never 0, laid out as a handle's
 * bits.  Also checks, once per population, that t's address leaves those
 * bits free. */
__attribute__((noinline)) static uint64_t fresh_gen(weft_thread *t, uint64_t seq_base) {
    if ((uintptr_t)t & ~(uintptr_t)WEFT__HANDLE_ADDR)
        weft__fatal("a vthread descriptor at %p: not 256-byte aligned below 2^48, so its handle cannot "
                    "carry a generation", (void *)t);
    uint32_t g = (uint32_t)((seq_base >> 32) * 0x9e3779b1u) & 0xffffffu;
    g = g ? g : 1;
    uint64_t bits = (uint64_t)(g >> 8) << 48 | (g & 0xff);
    atomic_store_explicit(&t->gen, bits, memory_order_relaxed);
    return bits;
}

/* on >= 0: pinned to carrier on (weft__spawn_on) */
static int spawn_impl(weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr, int on) {
    if (!fn) return -EINVAL;
    int r = weft__ensure_init();
    if (r < 0) return r;
#ifdef WEFT_TSAN
    if ((r = tsan_fiber_reserve()) < 0) return r;
#endif
    weft__carrier *c = carrier_here(); /* no switch in here */
    /* its group (group.c, "Which group"): the attr's; else the spawning
     * vthread's own; the runtime's helpers (weft__spawn_on) the default */
    weft_group *g;
    if (__builtin_expect(on < 0 && !(attr && attr->group) && c && c->cur, 1)) g = c->cur->grp;
    else g = on < 0 && attr && attr->group ? attr->group : &R.g0;
    const int own = !g->dflt; /* (read once: the atomics below would make the compiler read it again) */
    if (own) {
        /* counted before the check: weft_group_close sets closing, then
         * waits for nlive 0 (both seq_cst): one of the two sees the other */
        atomic_fetch_add(&g->nlive, 1);
        if (atomic_load(&g->closing)) {
            r = -ESHUTDOWN;
            goto unref;
        }
    }
    size_t size = attr ? attr->stack_size : 0;
    weft__stack *s = c && !size ? weft__stack_get_cached(&c->stacks) : NULL;
    if (!s && !(s = weft__stack_get(c ? &c->stacks : NULL, size))) {
        r = -ENOMEM;
        goto unref;
    }
    weft_thread *t = (weft_thread *)s;
    /* a freshly populated slot starts its park sequence from seq_base, and
     * its handles' generation from a value drawn from it ("Handles": its
     * descriptor may have been zeroed since a stale handle was given out) */
    uint64_t w = s->seq_base ? s->seq_base << 8 : atomic_load_explicit(&t->parker.word, memory_order_relaxed) & ~(uint64_t)0xFF;
    uint64_t gen = atomic_load_explicit(&t->gen, memory_order_relaxed);
    /* (0 only in a slot's first descriptor since its memory was mapped or
     * zapped: a fresh population) */
    if (__builtin_expect(gen == 0, 0)) gen = fresh_gen(t, s->seq_base);
    s->seq_base = 0;
    atomic_store_explicit(&t->parker.word, w, memory_order_relaxed);
    t->parker.vt = t;
    /* the stack starts right below the descriptor, whose place within its
     * page differs between neighbouring slots (stack.c's colour): two
     * vthreads switching on one carrier do not push and pop at the same page
     * offsets (4K store-to-load aliasing) */
    t->sp = weft__ctx_make((char *)t, vthread_start, t);
    t->next = NULL;
    __atomic_store_n(&t->carrier, (weft__carrier *)NULL, __ATOMIC_RELAXED);
    t->home = NULL;
    t->grp = g;
    __atomic_store_n(&t->grp_id, g->id, __ATOMIC_RELAXED); /* (read racily by weft_dump) */
    if (own) atomic_fetch_add_explicit(&g->started, 1, memory_order_relaxed);
    t->flags = (attr && attr->daemon ? WEFT__F_DAEMON : 0) | (attr && attr->pinned ? WEFT__F_PINNED : 0);
    __atomic_store_n(&t->why, (uint8_t)WEFT__WHY_NONE, __ATOMIC_RELAXED);
    t->park_token = 0;
    t->timer_heap = -1;
    atomic_store_explicit(&t->permit, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cancelled, 0, memory_order_relaxed);
    t->fork_gen = R.fork_gen;
    t->deadline = 0;
    atomic_store_explicit(&t->task, NULL, memory_order_relaxed);
    t->scopes = NULL;
    t->scope_deadline = 0;
    t->par = NULL;
    t->locals = NULL;  /* local.c: nothing set; bindings are not inherited by a spawn */
    t->scoped = NULL;
    atomic_store_explicit(&t->scoped_n, 0, memory_order_relaxed);
    t->fn = fn;
    t->arg = arg;
    t->result = NULL;
    /* (release: a late caller racing to reap the slot's last vthread, which
     * takes join_lock and reads this, then sees the generation it bumped) */
    atomic_store_explicit(&t->join_state, out ? 0 : 3, memory_order_release);
    t->joiner = NULL;
    atomic_store_explicit(&t->block_file, NULL, memory_order_relaxed);
    atomic_store_explicit(&t->block_pc, NULL, memory_order_relaxed); /* (the slot's last owner's) */
    if (attr && attr->name) {
        char name[32] = {0};
        strncpy(name, attr->name, 31);
        uint64_t nw[4];
        memcpy(nw, name, 32);
        for (int i = 0; i < 4; i++) atomic_store_explicit(&t->name_words[i], nw[i], memory_order_relaxed);
    } else {
        atomic_store_explicit(&t->name_words[0], 0, memory_order_relaxed); /* "" */
    }
    t->asan_fake = NULL;
#ifdef WEFT_TSAN
    t->tsan_fiber = __tsan_create_fiber(0);
    if (attr && attr->name) __tsan_set_fiber_name(t->tsan_fiber, attr->name);
#else
    t->tsan_fiber = NULL;
#endif
    if (c) {
        if (c->id_next == c->id_end) {
            c->id_next = atomic_fetch_add(&R.next_id, ID_BLOCK);
            c->id_end = c->id_next + ID_BLOCK;
        }
        t->id = c->id_next++;
        bump(&c->n_started);
        if (!(t->flags & WEFT__F_DAEMON)) bump(&c->nd_started);
        live_add(c, 1);
    } else {
        t->id = atomic_fetch_add(&R.next_id, 1);
        atomic_fetch_add(&R.plat_started, 1);
        if (!(t->flags & WEFT__F_DAEMON)) atomic_fetch_add(&R.plat_nd_started, 1);
        live_add(NULL, 1);
    }
    atomic_store_explicit(&t->rstate, WEFT__RS_NEW, memory_order_release);
    /* the program's handle carries the generation; the runtime's own
     * (weft__spawn_on) is the descriptor */
    if (out) *out = (weft_thread *)((uintptr_t)t | (on < 0 ? (uintptr_t)gen : 0));
    if (on >= 0) {
        t->home = R.c[on % R.n];
        t->flags |= WEFT__F_PINNED;
        enqueue_pinned(c, t);
    } else if (c && c->grp == g) {
        dq_push(c, t);
        wake_if_needed(g);
    } else if (!c) { /* from a platform thread: as weft__ready's (plat_waking) */
        atomic_fetch_add(&R.plat_waking, 1);
        enqueue_foreign(t);
        atomic_fetch_sub(&R.plat_waking, 1);
    } else {
        enqueue_foreign(t); /* into another group */
    }
    return 0;
unref:
#ifdef WEFT_TSAN
    atomic_fetch_sub(&R.tsan_fibers, 1);
#endif
    if (own && atomic_fetch_sub(&g->nlive, 1) == 1 && atomic_load(&g->closing)) weft__group_last_exit(g);
    return r;
}

static int join_wait(weft_thread *t, uint64_t g, void **result, const char *file, int line, int nocancel);

/* Frees t for its reaper (join_state reaped), after taking its result. */
static inline int reap(weft__carrier *c, weft_thread *t, void **result) {
    /* t->result was written before exit_finish published "done" */
    if (result) *result = t->result;
    free_thread(c, t);
    return 0;
}

/* weft_join and the runtime's uncancellable join.  The fast path, for a
 * vthread that has finished: the handle's check (a load and a compare)
 * and one CAS that claims it. */
static inline int join_k(weft_thread *h, void **result, const char *file, int line, int nocancel) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH; /* joined already, or detached and ended ("Handles") */
    if (stale(t)) return -ECHILD;
    weft__carrier *c = carrier_here();
    if (c && t == c->cur) return -EDEADLK;
    int st = 2;
    if (atomic_compare_exchange_strong_explicit(&t->join_state, &st, 4, memory_order_acquire, memory_order_relaxed))
        return reap(c, t, result); /* finished, and exit_finish is done with it */
    return join_wait(t, weft__handle_gen(h), result, file, line, nocancel);
}

int weft__join_nocancel(weft_thread *t, void **result) { return join_k(t, result, NULL, 0, 1); }

int weft__join_at(weft_thread *t, void **result, const char *file, int line) {
    return join_k(t, result, file, line, 0);
}

/* join_lock(t) for a caller holding a handle of generation g (0: the
 * runtime's own): 1 when t is still that handle's vthread, else 0 with the
 * lock released (another caller reaped it, and its slot may be in use
 * again: the spawn's release store of join_state, read by our lock's
 * acquire, makes the bumped generation visible). */
static int join_lock_handle(weft_thread *t, uint64_t g) {
    join_lock(t);
    if (!g || atomic_load_explicit(&t->gen, memory_order_relaxed) == g) return 1;
    join_unlock(t);
    return 0;
}

/* weft_join's slow path, out of line so that the fast one stays small. */
__attribute__((noinline)) static int join_wait(weft_thread *t, uint64_t g, void **result, const char *file,
                                              int line, int nocancel) {
    int st;
    weft__parker *p;
    uint64_t tok = nocancel ? weft__park_begin_nocancel(&p, WEFT__PK_GENERIC) : weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    if (!join_lock_handle(t, g)) {
        weft__unpark(p, tok, WEFT__PS_WOKEN);
        return -ESRCH;
    }
    st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st != 0 && st != 2) { /* another joins it (1, 5), it is detached (-EINVAL), or it was just reaped */
        join_unlock(t);
        weft__unpark(p, tok, WEFT__PS_WOKEN);
        return st == 4 ? -ESRCH : -EINVAL;
    }
    int r = 0;
    if (st == 0) {
        t->joiner = p;
        t->joiner_token = tok;
        atomic_store_explicit(&t->join_state, 1 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        r = weft__park_wait(p, tok, 0, WEFT__WHY_JOIN, t, file, line);
        join_lock(t);
        st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
        if (st != 5) { /* gave up (cancelled / timed out) before t ended: withdraw */
            atomic_store_explicit(&t->join_state, 0 | JOIN_LOCK, memory_order_relaxed);
            join_unlock(t);
            return r < 0 ? r : -EINTR;
        }
    } else {
        weft__unpark(p, tok, WEFT__PS_WOKEN);
    }
    atomic_store_explicit(&t->join_state, 4 | JOIN_LOCK, memory_order_relaxed);
    join_unlock(t);
    return reap(weft__carrier_self(), t, result);
}

int (weft_join)(weft_thread *t, void **result) { return weft__join_at(t, result, NULL, 0); }

int weft_detach(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    if (!join_lock_handle(t, weft__handle_gen(h))) return -ESRCH;
    int st = atomic_load_explicit(&t->join_state, memory_order_relaxed) & ~JOIN_LOCK;
    if (st == 0) {
        atomic_store_explicit(&t->join_state, 3 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        return 0;
    }
    if (st == 2) {
        atomic_store_explicit(&t->join_state, 4 | JOIN_LOCK, memory_order_relaxed);
        join_unlock(t);
        free_thread(weft__carrier_self(), t);
        return 0;
    }
    join_unlock(t);
    return st == 4 ? -ESRCH : -EINVAL; /* reaped just now; joined by another, or detached already */
}

weft_thread *weft_self(void) { return weft__handle(weft__self()); }

/* A pin for the length of a hooked call (sched.h).  flags and home are
 * written by the vthread itself, before it parks: a waker reads them after
 * its CAS on the park word won, which orders them (enqueue_pinned). */
int weft__pin_begin(void) {
    weft_thread *self = weft__self();
    if (!self || (self->flags & WEFT__F_PINNED)) return 0;
    self->home = self->carrier;
    self->flags |= WEFT__F_PINNED;
    return 1;
}

void weft__pin_end(int pinned_here) {
    if (!pinned_here) return;
    weft_thread *self = weft__self();
    self->flags &= ~(uint32_t)WEFT__F_PINNED;
    self->home = NULL;
}
uint64_t weft_id(const weft_thread *h) {
    const weft_thread *t = h ? handle_get(h) : NULL;
    return t ? t->id : 0;
}

const char *weft_name(const weft_thread *h) {
    const weft_thread *t = h ? handle_get(h) : NULL;
    return t ? (const char *)(const void *)t->name_words : "";
}

int weft_set_name(const char *name) {
    weft_thread *self = weft__self();
    if (!self) return -EPERM;
    char buf[32] = {0};
    if (name) strncpy(buf, name, 31);
    uint64_t nw[4];
    memcpy(nw, buf, 32);
    /* word by word: a dump reading meanwhile sees a mix of old and new,
     * never an unterminated string (the last byte stays 0) */
    for (int i = 0; i < 4; i++) atomic_store_explicit(&self->name_words[i], nw[i], memory_order_relaxed);
    return 0;
}

int weft_yield(void) {
    weft__carrier *c = carrier_here();
    weft_thread *self = c ? c->cur : NULL;
    if (!self) {
        sched_yield();
        return 0;
    }
    gate_in(c, self);
    if (__builtin_expect(c->det, 0)) {
        /* the yielder is a candidate too: it joins the run set first, and
         * stays there (as in the yield FIFO) while another runs */
        weft__det_push(self);
        weft_thread *next = pick_det(c);
        if (next == self) gate_out(c, self);
        else switch_to(c, self, next, OP_NONE);
        return 0;
    }
    weft_thread *next = pick_local_rt(c); /* (det: above) */
    if (!next) { /* nothing else to run here */
        gate_out(c, self);
        return 0;
    }
    if ((self->flags & WEFT__F_PINNED) ||
        (c->yq_private && atomic_load_explicit(&c->grp->nidle, memory_order_relaxed) == 0)) {
        /* the yield FIFO: only this carrier (and the monitor, through the
         * gate) touches it, so self can be queued before the switch, with
         * no pending work after it */
        yq_append(c, self);
        switch_to(c, self, next, OP_NONE);
    } else {
        switch_to(c, self, next, OP_YIELD); /* to the deque, after the switch */
    }
    return 0;
}

int64_t weft__sleep_deadline(int64_t ns) {
    if (ns <= 0) return weft_now();
    int64_t now = weft_now();
    return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}

int weft__sleep_until_at(int64_t deadline, const char *file, int line) {
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
    if (!tok) return -ECANCELED;
    int64_t own = weft__effective_deadline(0);
    int r;
    /* a deadline in the past returns at once, as weft_sleep(ns <= 0): 0
     * and below too, which are park_wait's "none" or would be sleeps
     * until cancelled (1 is as past, and a deadline to it) */
    if (deadline <= 0) deadline = 1;
    if (deadline != INT64_MAX && (!own || deadline <= own)) {
        /* our own sleep time comes first: its expiry is success */
        r = weft__park_wait(p, tok, deadline, WEFT__WHY_SLEEP, NULL, file, line);
        if (r == -ETIMEDOUT) r = 0;
    } else {
        r = weft__park_wait(p, tok, 0, WEFT__WHY_SLEEP, NULL, file, line);
    }
    return r;
}

int (weft_sleep_until)(int64_t deadline) { return weft__sleep_until_at(deadline, NULL, 0); }
int (weft_sleep)(int64_t ns) { return weft__sleep_until_at(weft__sleep_deadline(ns), NULL, 0); }

int64_t weft_deadline_set(int64_t d) {
    weft_thread *self = weft__self();
    int64_t *slot = self ? &self->deadline : &tls_deadline;
    int64_t old = *slot;
    *slot = d < 0 ? 0 : d;
    return old;
}

void (*_Atomic weft__cancel_hook)(weft_thread *t);

void weft__cancel_one(weft_thread *t) {
    atomic_store(&t->cancelled, 1); /* seq_cst: pairs with weft__park_begin */
    uint64_t w = atomic_load(&t->parker.word);
    unsigned st = WEFT__PW_STATE(w);
    if ((st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED) && !WEFT__PW_NOCANCEL(w))
        weft__unpark(&t->parker, w, WEFT__PS_CANCELLED);
}

int weft_cancel(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    weft__cancel_one(t);
    void (*hook)(weft_thread *) = atomic_load_explicit(&weft__cancel_hook, memory_order_acquire);
    if (hook) hook(t);
    return 0;
}

static WEFT_TLS void *tls_scopes;
void **weft__platform_scopes(void) { return &tls_scopes; }

int weft_cancelled(void) {
    weft_thread *self = weft__self();
    return self ? atomic_load(&self->cancelled) : atomic_load(&tls_pc.cancelled);
}

/* ---- cancelling a platform thread ------------------------------------------
 * As weft__cancel_one for a vthread: the flag (seq_cst, pairing with
 * weft__park_begin's second look), then the current park, if cancellable,
 * ends with CANCELLED.  A blocking system call that waits in ppoll (the io
 * layer's platform path) also watches the eventfd, which the cancel writes.
 * The eventfd is published before its owner looks at the flag again, so one
 * of the two always sees the other. */
weft__pcancel *weft__pcancel_enable(void) {
    tls_pc.enabled = 1;
    tls_pc.parker = &tls_parker;
    return &tls_pc;
}

void weft__pcancel_fire(weft__pcancel *h) {
    atomic_store(&h->cancelled, 1);
    uint64_t w = atomic_load(&h->parker->word);
    unsigned st = WEFT__PW_STATE(w);
    if ((st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED) && !WEFT__PW_NOCANCEL(w))
        weft__unpark(h->parker, w, WEFT__PS_CANCELLED);
    int fd = atomic_load(&h->efd);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t r = write(fd, &one, sizeof one); /* EAGAIN: already readable */
        (void)r;
    }
}

void weft__pcancel_clear(void) {
    atomic_store(&tls_pc.cancelled, 0);
    int fd = atomic_load_explicit(&tls_pc.efd, memory_order_relaxed);
    if (fd >= 0) {
        uint64_t v;
        ssize_t r = read(fd, &v, sizeof v); /* EAGAIN: was not written */
        (void)r;
    }
}

int weft__pcancel_fd(void) {
    if (!tls_pc.enabled) return -1;
    int fd = atomic_load_explicit(&tls_pc.efd, memory_order_relaxed);
    if (fd < 0) {
        fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (fd < 0) return -1; /* out of descriptors: calls are not interruptible, no worse */
        atomic_store(&tls_pc.efd, fd);
    }
    return fd;
}

void weft__pcancel_disable(void) {
    int fd = atomic_exchange(&tls_pc.efd, -1);
    if (fd >= 0) close(fd);
    atomic_store(&tls_pc.cancelled, 0);
    tls_pc.enabled = 0;
}

int weft__park_at(int64_t deadline, const char *file, int line) {
    weft_thread *self = weft__self();
    if (self && atomic_exchange(&self->permit, 0)) return 0;
    weft__parker *p;
    uint64_t tok = weft__park_begin(&p, WEFT__PK_PERMIT);
    if (!tok) return -ECANCELED;
    if (self && atomic_exchange(&self->permit, 0)) { /* seq_cst: pairs with unpark */
        if (weft__unpark(p, tok, WEFT__PS_WOKEN)) return 0;
    }
    int r = weft__park_wait(p, tok, deadline, WEFT__WHY_PARK, NULL, file, line);
    if (self) atomic_store(&self->permit, 0);
    return r;
}

int (weft_park)(int64_t deadline) { return weft__park_at(deadline, NULL, 0); }

int weft_unpark(weft_thread *h) {
    if (!h) return -EINVAL;
    weft_thread *t = handle_get(h);
    if (!t) return -ESRCH;
    if (stale(t)) return -ECHILD;
    atomic_store(&t->permit, 1);
    uint64_t w = atomic_load(&t->parker.word);
    unsigned st = WEFT__PW_STATE(w);
    if (WEFT__PW_KIND(w) == WEFT__PK_PERMIT && (st == WEFT__PS_WAIT_RUN || st == WEFT__PS_WAIT_PARKED))
        weft__unpark(&t->parker, w, WEFT__PS_WOKEN);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* carriers and the runtime's life                                          */
/* ------------------------------------------------------------------------ */

static void segv_handler(int sig, siginfo_t *si, void *uctx);

static void *carrier_main(void *arg) {
    weft__carrier *c = arg;
    tls_carrier = c;
    stack_t ss = {.ss_sp = c->altstack, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
    sigaltstack(&ss, NULL);
#ifdef WEFT_TSAN
    c->tsan_fiber = __tsan_get_current_fiber();
#endif
#ifdef WEFT_ASAN
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        void *addr;
        size_t size;
        pthread_attr_getstack(&a, &addr, &size);
        c->asan_bottom = addr;
        c->asan_size = size;
        pthread_attr_destroy(&a);
    }
#endif
    /* the ring's single issuer is this thread: it makes the poller; weft_init
     * waits for every carrier's, and fails if one cannot have it */
    int perr = 0;
    c->tid = (int)syscall(SYS_gettid); /* the monitor reads /proc/self/task/<tid> */
    c->cpuclk_ok = pthread_getcpuclockid(pthread_self(), &c->cpuclk) == 0; /* and this clock */
    /* the window its vthreads' locals are read from (local.c): a carrier
     * without one cannot run a vthread that has locals, so it fails too */
    c->win = weft__window_carrier_attach();
    if (!c->win) perr = -ENOMEM;
    else atomic_store_explicit(&c->poller, weft__poller_new(c->index, &perr), memory_order_release);
    c->start_err = perr;
    atomic_fetch_add(&R.carriers_ready, 1);
    futex_wake(&R.carriers_ready, INT_MAX);
    atomic_store(&c->ready, 1); /* (a spare's maker waits on this one) */
    futex_wake(&c->ready, 1);
    if (perr) {
        weft__window_carrier_detach(c->win);
        c->win = NULL;
        ss.ss_flags = SS_DISABLE; /* our altstack is ours to free, not the thread library's */
        sigaltstack(&ss, NULL);
        tls_carrier = NULL;
        return NULL;
    }
    /* a spare runs once published (R.nall): every carrier its vthreads'
     * counters live on is one the others iterate */
    while (!atomic_load(&c->go)) futex(&c->go, FUTEX_WAIT_PRIVATE, 0, NULL, 0);
    for (;;) {
        weft_thread *t = find_work(c);
        if (!t) break;
        run_from_sched(c, t);
    }
    flush_live(c);
    weft__window_carrier_detach(c->win);
    c->win = NULL;
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, NULL);
    tls_carrier = NULL;
    return NULL;
}

weft__window *weft__carrier_window(const weft__carrier *c) { return c ? c->win : NULL; }

/* $WEFT_STACK_SIZE: bytes, or with a k or m suffix; 1 with *out set, 0
 * when unset, -EINVAL (one line on stderr, as weft__env_long) otherwise. */
static int env_size(const char *name, size_t *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 0;
    if (shift) end++;
    if (errno || *end || end == v || v[0] == '-' || x == 0 || x > (SIZE_MAX >> shift)) {
        fprintf(stderr, "weft: %s=%s is not a size (bytes, or with k or m)\n", name, v);
        return -EINVAL;
    }
    *out = (size_t)x << shift;
    return 1;
}

/* A carrier's memory, for index i (its thread is started apart). */
static weft__carrier *carrier_alloc(int i) {
    /* Page-aligned: the hot fields at the start of a page can never sit
     * at the page offsets where vthreads' top frames and descriptors
     * live (the upper part of a page), so the switch path's loads from
     * the carrier are never stalled by 4K aliasing with stack stores. */
    weft__carrier *c = aligned_alloc(4096, (sizeof *c + 4095) & ~(size_t)4095);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->index = i;
    c->grp = &R.g0; /* (a group's carrier: weft__group_carriers_start sets both) */
    c->gidx = i;
    c->slow_countdown = SLOW_EVERY;
    c->det = WEFT__DET_ON() != 0;
    atomic_init(&c->shared, 1);
    c->mon_seen = UINT64_MAX; /* the monitor's first look at it only records */
    c->mon_last = INT64_MIN;
    c->mon_cpu0 = -1;
#ifdef WEFT_TSAN
    atomic_init(&c->yq_lock, 1); /* in the scheduler until a vthread runs */
#endif
    c->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) | 1;
    c->altstack = malloc(ALTSTACK_SIZE);
    if (!c->altstack || weft__dq_init(&c->dq, 256) != 0) {
        free(c->altstack);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mbox_lock, NULL);
    weft__theap_init(&c->timers);
    return c;
}

/* Freed after the carrier's thread ended (or never started): nobody can
 * kick it. */
static void carrier_free(weft__carrier *c) {
    weft__poller *pl = atomic_load(&c->poller);
    if (pl) weft__poller_free(pl);
    weft__dq_fini(&c->dq);
    weft__theap_fini(&c->timers);
    pthread_mutex_destroy(&c->mbox_lock);
    free(c->altstack);
    free(c);
}

static void free_carriers(int n) {
    for (int i = 0; i < n; i++)
        if (R.c[i]) carrier_free(R.c[i]);
    free(R.c);
    R.c = NULL;
    R.n = 0;
    atomic_store(&R.nall, 0);
    atomic_store(&R.nactive, 0);
}

/* ---- fork (see "Fork" at the top) ---- */

static void fork_prepare(void) {
    /* first: a look may make a spare, whose poller the io layer's lock
     * (taken next) would hold up */
    pthread_mutex_lock(&R.mon_fork);
    weft__io_fork_prepare();
    weft__stacks_fork_prepare();
}
static void fork_parent(void) {
    weft__stacks_fork_parent();
    weft__io_fork_parent();
    pthread_mutex_unlock(&R.mon_fork);
}

static void fork_child(void) {
    R.fork_gen++;
    atomic_store(&fh_slots, 0); /* the child's futex hash is a new, default one */
    /* the parent's platform threads mid-wake-up (a spawn whose vthread
     * forked before its spawner had returned) are not in the child */
    atomic_store(&R.plat_waking, 0);
    /* a vthread that forked goes on as the child's platform thread */
    tls_carrier = NULL;
    R.init_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    R.mon_fork = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    R.g0.inj_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__groups.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__groups.mon_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    weft__fork_keep(weft__groups.head); /* the groups, their carriers (in R.c) */
    weft__groups.head = NULL;
    weft__groups.ngroups = 0;
    memset(R.gidx_used, 0, sizeof R.gidx_used);
    weft__io_fork_child();
    weft__async_fork_child();
    weft__stacks_fork_child();
    weft__det_fork_child();
    weft__fork_keep(R.c); /* the carriers, their queues, heaps and caches */
    R.c = NULL;
    R.n = 0;
    atomic_store(&R.nall, 0);
    atomic_store(&R.nactive, 0);
    R.g0.inj_head = R.g0.inj_tail = NULL;
    atomic_store(&R.g0.inj_n, 0);
    R.g0.c = NULL;
    R.mon_started = 0;
    atomic_store(&R.stop, 0);
    if (atomic_load(&R.up)) R.inherit_cfg = 1;
    atomic_store(&R.up, 0);
}

static void register_atfork(void) {
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        fprintf(stderr, "weft: pthread_atfork failed: a child process forked while weft runs cannot use it\n");
}

/* weft_init, or (lazy) the start a weft call makes when none runs: in a
 * fork child that one is configured as the parent's was ("Fork"), decided
 * under the lock (several threads may start it at once). */
static int init_runtime(const weft_runtime_opts *cfg, int lazy) {
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&R.init_lock);
    if (atomic_load(&R.up)) {
        pthread_mutex_unlock(&R.init_lock);
        return -EALREADY;
    }
    weft_runtime_opts inherited;
    if (lazy && R.inherit_cfg) {
        inherited = R.started_with;
        cfg = &inherited;
    }
    /* deterministic mode (det.c): one carrier, no monitor, no spares */
    uint64_t det_seed = 0;
    const char *det_trace = NULL;
    int det = weft__det_resolve(cfg, &det_seed, &det_trace);
    if (det < 0) {
        pthread_mutex_unlock(&R.init_lock);
        return det;
    }
    if (lazy && R.inherit_cfg) det_trace = NULL; /* a fork child: the trace is the parent's */
    /* The environment, where cfg leaves a field 0: a value that is not a
     * number, or out of its range, fails weft_init with -EINVAL and a line
     * naming it (weft__env_long), as $WEFT_DETERMINISTIC's does -- a
     * typo must not quietly run the default. */
    long nl = sysconf(_SC_NPROCESSORS_ONLN), ms = 0, maxc = 0, spin_us = SPIN_NS / 1000, pin_log = 1;
    if (nl < 1) nl = 1;
    if (nl > WEFT__MAX_CARRIERS) nl = WEFT__MAX_CARRIERS;
    size_t stack = 256 * 1024;
    int bad = 0, maxc_env = 0;
    if (det) nl = 1;
    else if (cfg && cfg->carriers) nl = cfg->carriers;
    else bad |= weft__env_long("WEFT_CARRIERS", 1, WEFT__MAX_CARRIERS, "a carrier count (1 to 1024)", &nl) < 0;
    if (cfg && cfg->stack_size) stack = cfg->stack_size;
    else bad |= env_size("WEFT_STACK_SIZE", &stack) < 0;
    if (!(cfg && cfg->pin_threshold_ns))
        bad |= weft__env_long("WEFT_PIN_THRESHOLD_MS", LONG_MIN, INT64_MAX / 1000000,
                              "a threshold in ms (negative: off)", &ms) < 0;
    if (cfg && cfg->max_compensate) maxc = cfg->max_compensate, maxc_env = 1;
    else if ((maxc_env = weft__env_long("WEFT_MAX_COMPENSATE", LONG_MIN, LONG_MAX,
                                        "a number of spare carriers (0 or less: none)", &maxc)) < 0)
        bad = 1;
    bad |= weft__env_long("WEFT_SPIN_US", 0, INT64_MAX / 1000, "a spin in us (0 or more)", &spin_us) < 0;
    bad |= weft__env_long("WEFT_PIN_LOG", LONG_MIN, LONG_MAX, "an integer (0: off)", &pin_log) < 0;
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    if (stack < 1024 * 1024) stack = 1024 * 1024; /* sanitizers need deeper stacks */
#endif
    if (bad || nl < 1 || nl > WEFT__MAX_CARRIERS || (cfg && cfg->carriers < 0 && !det)) {
        pthread_mutex_unlock(&R.init_lock);
        return -EINVAL;
    }
    int n = (int)nl;
    /* the monitor's stall threshold and bound (weft.h, "The monitor") */
    int64_t thr = cfg && cfg->pin_threshold_ns ? cfg->pin_threshold_ns : 0;
    if (!thr) thr = ms < 0 ? -1 : ms > 0 ? (int64_t)ms * 1000000 : PIN_THRESHOLD_NS;
    if (thr < 0 || det) thr = -1;
    if (!maxc_env) maxc = 2L * n;
    if (maxc < 0 || det) maxc = 0;
    if (maxc > WEFT__MAX_CARRIERS - n) maxc = WEFT__MAX_CARRIERS - n;
    spin_ns = (int64_t)spin_us * 1000;
    if (!det) atomic_store_explicit(&weft__det_on, 0, memory_order_relaxed); /* (on since load with $WEFT_DETERMINISTIC: cfg said off) */
    int r = det ? weft__det_start(det_seed, det_trace) : 0;
    if (r < 0) goto fail0;
    if (det) atomic_store(&R.next_id, 1); /* ids are part of the replay */
    r = weft__io_start(cfg ? cfg->io : 0);
    if (r < 0) goto faildet;
    r = weft__stacks_init(stack);
    if (r < 0) goto failio;
    /* every slot a spare may take: R.c never moves while carriers read it */
    R.c = calloc(WEFT__MAX_CARRIERS, sizeof *R.c);
    if (!R.c) { r = -ENOMEM; goto fail1; }
    R.n = n;
    for (int i = 0; i < n; i++) {
        weft__carrier *c = carrier_alloc(i);
        if (!c) { r = -ENOMEM; goto fail2; }
        c->go = 1;
        R.c[i] = c;
    }
    atomic_store(&R.nall, n);
    atomic_store(&R.nactive, 0);
    atomic_store(&R.n_pinned, 0);
    atomic_store(&R.n_hogs, 0);
    R.pin_threshold = thr;
    R.max_comp = thr < 0 ? 0 : maxc;
    R.pin_log = pin_log != 0;
    atomic_store(&R.stop, 0);
    atomic_store(&R.g0.nidle, 0);
    atomic_store(&R.g0.nspinning, 0);
    R.g0.c = R.c;
    R.g0.n = n;
    atomic_store(&R.gone_started, 0);
    atomic_store(&R.gone_finished, 0);
    atomic_store(&R.gone_switches, 0);
    atomic_store(&R.gone_steals, 0);
    atomic_store(&R.gone_parks, 0);
    atomic_store(&R.gone_nd_started, 0);
    atomic_store(&R.gone_nd_finished, 0);
    pthread_mutex_lock(&weft__groups.lock);
    weft__groups.down = 0;
    pthread_mutex_unlock(&weft__groups.lock);
    for (size_t i = 0; i < WEFT__MAX_CARRIERS / 64; i++) atomic_store(&R.idle_mask[i], 0);
    atomic_store(&R.live, 0);
    atomic_store(&R.peak, 0);
    atomic_store(&R.plat_started, 0);
    atomic_store(&R.plat_nd_started, 0);
    if (!R.segv_installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if (sigaction(SIGSEGV, &sa, &R.old_segv) == 0) R.segv_installed = 1;
    }
    mon_prepare();
    int started = 0;
    atomic_store(&R.carriers_ready, 0);
    for (int i = 0; i < n; i++) {
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setstacksize(&a, 256 * 1024);
        int e = pthread_create(&R.c[i]->thread, &a, carrier_main, R.c[i]);
        pthread_attr_destroy(&a);
        if (e) { r = -e; break; }
        char tn[16];
        snprintf(tn, sizeof tn, "weft-c%d", i);
        pthread_setname_np(R.c[i]->thread, tn); /* visible in top, perf, gdb */
        started++;
    }
    /* every carrier has its poller before weft_init returns: an fd table
     * filled by the program later cannot take a carrier's rings away */
    for (;;) {
        uint32_t k = atomic_load(&R.carriers_ready);
        if ((int)k >= started) break;
        struct timespec ts = {0, 5 * 1000000};
        futex(&R.carriers_ready, FUTEX_WAIT_PRIVATE, k, &ts, 0);
    }
    for (int i = 0; i < started && r == 0; i++) {
        if (R.c[i]->start_err) {
            r = R.c[i]->start_err;
            fprintf(stderr, "weft: carrier %d cannot start its I/O poller: %s\n", i, strerror(-r));
        }
    }
    /* the live console (observe/console.c): a fork child has none -- the
     * socket is its parent's ("Fork") */
    R.started_at = weft_now();
    if (started == n && r == 0 && !(lazy && R.inherit_cfg)) r = weft__console_start(cfg ? cfg->console : NULL);
    if (started == n && r == 0) {
        r = mon_start();
        if (r < 0) fprintf(stderr, "weft: cannot start the monitor thread: %s\n", strerror(-r));
    }
    if (started < n || r < 0) {
        weft__console_stop();
        atomic_store(&R.stop, 1);
        for (int i = 0; i < started; i++) kick(R.c[i]);
        for (int i = 0; i < started; i++) pthread_join(R.c[i]->thread, NULL);
        goto fail2;
    }
    R.started_with = (weft_runtime_opts){.carriers = n, .stack_size = stack, .io = cfg ? cfg->io : 0,
                                   .hook = cfg ? cfg->hook : 0,
                                   .pin_threshold_ns = thr, .max_compensate = maxc ? (int)maxc : -1,
                                   .deterministic = det ? WEFT_DET_ON : WEFT_DET_OFF,
                                   .deterministic_seed = det_seed};
    weft__hook_start(cfg ? cfg->hook : 0);
    R.inherit_cfg = 0;
    atomic_store(&R.up, 1);
    pthread_mutex_unlock(&R.init_lock);
    weft__dump_env();
    return 0;
fail2:
    free_carriers(n);
fail1:
    weft__stacks_fini();
failio:
    weft__io_stop();
faildet:
    weft__det_stop();
fail0:
    pthread_mutex_unlock(&R.init_lock);
    return r;
}

int weft_init(const weft_runtime_opts *cfg) { return init_runtime(cfg, 0); }

int weft__running(void) { return atomic_load_explicit(&R.up, memory_order_acquire); }

int weft__ensure_init(void) {
    if (__builtin_expect(atomic_load_explicit(&R.up, memory_order_acquire), 1)) return 0;
    /* a fork child starts what its parent ran, backend included ("Fork") */
    int r = init_runtime(NULL, 1);
    return r == -EALREADY ? 0 : r;
}

/* Non-daemon vthreads not yet finished.  Finished counts are read before
 * started ones: a finish implies its start, so this never undercounts. */
static int64_t nondaemon_live(void) {
    uint64_t fin = 0, st = 0;
    /* (a spare published between the two loops: its starts count, and no
     * finish without its start) */
    /* (groups: under their lock, so that none closes between the loops;
     * a closed one's counts are in gone_*) */
    pthread_mutex_lock(&weft__groups.lock);
    fin += atomic_load(&R.gone_nd_finished);
    for (int i = 0; i < nall(); i++) fin += atomic_load(&R.c[i]->nd_finished);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) fin += atomic_load(&g->c[i]->nd_finished);
    for (int i = 0; i < nall(); i++) st += atomic_load(&R.c[i]->nd_started);
    for (weft_group *g = weft__groups.head; g; g = g->next)
        for (int i = 0; i < g->n; i++) st += atomic_load(&g->c[i]->nd_started);
    st += atomic_load(&R.gone_nd_started);
    pthread_mutex_unlock(&weft__groups.lock);
    st += atomic_load(&R.plat_nd_started);
    return (int64_t)(st - fin);
}

#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
/* A daemon abandoned at shutdown leaves its frames' poison on its stack,
 * and ASan keeps a shadow across munmap: clean it (arch/stack.c, "ASan");
 * under TSan it holds a fiber, one of the ~8k threads TSan allows. */
static void clean_abandoned(weft__stack *s, void *unused) {
    weft_thread *t = (weft_thread *)s;
    if (atomic_load_explicit(&t->rstate, memory_order_relaxed) == WEFT__RS_FREE) return;
    weft__stack_done(s, t->sp);
#ifdef WEFT_TSAN
    tsan_fiber_drop(t);
#endif
}
#endif

static void abandon_locals(weft__stack *s, void *unused) {
    (void)unused;
    weft_thread *t = (weft_thread *)s;
    if (atomic_load_explicit(&t->rstate, memory_order_relaxed) != WEFT__RS_FREE && t->locals)
        weft__locals_abandon(t);
}

void weft_shutdown(void) {
    if (weft__carrier_self()) { /* it would wait for itself: refuse, loudly */
        fprintf(stderr, "weft: weft_shutdown called from a vthread: ignored (call it from a platform thread)\n");
        return;
    }
    pthread_mutex_lock(&R.init_lock);
    if (!atomic_load(&R.up)) {
        pthread_mutex_unlock(&R.init_lock);
        return;
    }
    while (nondaemon_live() > 0) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    /* a platform thread that woke the last of them may still be kicking a
     * carrier (plat_waking); a few microseconds at most */
    while (atomic_load(&R.plat_waking) > 0) sched_yield();
    weft__hook_stop(); /* the vthreads left are daemons: abandoned */
    weft__console_stop(); /* its snapshots read the carriers: it ends first */
    /* the blocking pool's threads wake vthreads: they end before carriers do */
    weft__io_drain();
    atomic_store(&R.stop, 1);
    mon_stop(); /* no spare is made after this: nall is final */
    weft__groups_shutdown(); /* (their carriers see R.stop too) */
    int n = nall();
    for (int i = 0; i < n; i++) kick(R.c[i]);
    for (int i = 0; i < n; i++) pthread_join(R.c[i]->thread, NULL);
    atomic_store(&R.up, 0);
    R.g0.inj_head = R.g0.inj_tail = NULL;
    atomic_store(&R.g0.inj_n, 0);
    free_carriers(n);
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    weft__stacks_walk(clean_abandoned, NULL);
#endif
    /* daemons abandoned with local storage: freed, destructors not run */
    if (atomic_load(&weft__locals_live) > 0) weft__stacks_walk(abandon_locals, NULL);
    weft__stacks_fini();
    weft__async_stop(); /* what is left of the asynchronous operations, before io's state goes */
    weft__io_stop();
    weft__det_stop();
    pthread_mutex_unlock(&R.init_lock);
}

struct main_arg {
    int (*fn)(void *);
    void *arg;
    int result;
};

static void *main_tramp(void *p) {
    struct main_arg *m = p;
    m->result = m->fn(m->arg);
    return NULL;
}

int weft_main(int (*fn)(void *), void *arg) {
    int r = weft__ensure_init();
    if (r < 0) return r;
    struct main_arg m = {fn, arg, 0};
    weft_thread *t;
    weft_thread_opts a = {.name = "main"};
    r = weft_spawn(&t, main_tramp, &m, &a);
    if (r < 0) return r;
    r = (weft_join)(t, NULL);
    weft_shutdown();
    return r < 0 ? r : m.result;
}

/* ------------------------------------------------------------------------ */
/* stack overflow                                                            */
/* ------------------------------------------------------------------------ */

static size_t put_str(char *b, size_t at, size_t cap, const char *s) {
    while (*s && at + 1 < cap) b[at++] = *s++;
    return at;
}

static size_t put_u(char *b, size_t at, size_t cap, unsigned long long v, int base) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = "0123456789abcdef"[v % (unsigned)base]; v /= (unsigned)base; } while (v);
    while (n && at + 1 < cap) b[at++] = tmp[--n];
    return at;
}

static void segv_handler(int sig, siginfo_t *si, void *uctx) {
    weft__carrier *c = tls_carrier;
    /* c->cur is NULL while the scheduler runs on a vthread's stack: the
     * vthread is c->pending then */
    weft_thread *t = c ? (c->cur ? c->cur : c->pending) : NULL;
    if (t && weft__stack_guard_hit(&t->stk, si->si_addr)) {
        char b[256], name[32];
        fmt_name(t, name);
        size_t n = 0;
        n = put_str(b, n, sizeof b, "weft: stack overflow in vthread ");
        n = put_u(b, n, sizeof b, t->id, 10);
        n = put_str(b, n, sizeof b, " \"");
        n = put_str(b, n, sizeof b, name);
        n = put_str(b, n, sizeof b, "\" (stack ");
        n = put_u(b, n, sizeof b, t->stk.size / 1024, 10);
        n = put_str(b, n, sizeof b, " KiB, fault at 0x");
        n = put_u(b, n, sizeof b, (uintptr_t)si->si_addr, 16);
        n = put_str(b, n, sizeof b, ")\n");
        ssize_t w = write(2, b, n);
        (void)w;
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    /* not ours: hand it on */
    if ((R.old_segv.sa_flags & SA_SIGINFO) && R.old_segv.sa_sigaction) {
        R.old_segv.sa_sigaction(sig, si, uctx);
        return;
    }
    if (R.old_segv.sa_handler != SIG_DFL && R.old_segv.sa_handler != SIG_IGN && R.old_segv.sa_handler) {
        R.old_segv.sa_handler(sig);
        return;
    }
    signal(SIGSEGV, SIG_DFL); /* the fault repeats and kills us as usual */
}

/* carrier groups (the life of a group: group.c)                            */
/* ------------------------------------------------------------------------ */

static void group_carriers_free(weft_group *g, int made) {
    pthread_mutex_lock(&weft__groups.lock);
    for (int i = 0; i < made; i++) {
        R.c[g->c[i]->index] = NULL;
        R.gidx_used[g->c[i]->index] = 0;
    }
    pthread_mutex_unlock(&weft__groups.lock);
    for (int i = 0; i < made; i++) carrier_free(g->c[i]);
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
        weft__carrier *c = carrier_alloc(k);
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
        int e = pthread_create(&c->thread, &a, carrier_main, c);
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
    if (!r) mon_need();
    if (r) {
        atomic_store(&g->stop, 1);
        for (int i = 0; i < started; i++) kick(g->c[i]);
        for (int i = 0; i < started; i++) pthread_join(g->c[i]->thread, NULL);
        group_carriers_free(g, made);
    }
    return r;
}

void weft__group_carriers_stop(weft_group *g) {
    atomic_store(&g->stop, 1);
    for (int i = 0; i < g->n; i++) kick(g->c[i]);
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
    int64_t rn = atomic_load_explicit(&g->inj_n, memory_order_relaxed);
    for (int i = 0, n = gall(g); i < n; i++) {
        weft__carrier *c = g->c[i];
        sw += atomic_load_explicit(&c->n_switches, memory_order_relaxed);
        st += atomic_load_explicit(&c->n_steals, memory_order_relaxed);
        int64_t q = weft__dq_size(&c->dq);
        rn += (q > 0 ? q : 0) + atomic_load_explicit(&c->mbox_n, memory_order_relaxed) +
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

/* ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------ */
/* counters                                                                  */
/* ------------------------------------------------------------------------ */

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
        uint64_t sw[WEFT__SITE_WORDS];
        for (int i = 0; i < WEFT__SITE_WORDS; i++) sw[i] = atomic_load_explicit(&c->stall_site[i], memory_order_relaxed);
        memcpy(v->site, sw, sizeof v->site);
        v->site[sizeof v->site - 1] = 0;
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
    o->runnable = (q > 0 ? q : 0) + atomic_load_explicit(&c->mbox_n, memory_order_relaxed) +
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

int64_t weft__injected(void) { return atomic_load_explicit(&R.g0.inj_n, memory_order_relaxed); }

int64_t weft__started_at(void) { return R.started_at; }

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
