/*
 * sched layer internals: vthread descriptors, carriers, the park primitive
 * and timers.  Included by the layers below it (io, sync, observe ...).
 */
#ifndef WEFT_SCHED_H
#define WEFT_SCHED_H

#define _GNU_SOURCE
#include "weft.h"
#include "../arch/arch.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>

#define WEFT__CACHELINE 64
#define WEFT__MAX_CARRIERS 1024
#define WEFT__DEFAULT_SPARES 256 /* max_compensate's default (runtime.c) */

/* ---- the park word ------------------------------------------------------
 *
 * Every thread (vthread or platform thread) has one park word:
 *   bits 0-3   state   (IDLE, WAIT_RUN, WAIT_PARKED, WOKEN, TIMEDOUT, CANCELLED)
 *   bits 4-7   kind    (what is parking: generic or weft_park's permit,
 *                       plus WEFT__PK_PLATFORM for a platform thread)
 *   bits 8-63  seq     (one per park, never reused in a slot)
 * A park begins with the word at (seq, kind, WAIT_RUN): its "token".  The
 * thread switches away and the next context moves the word to WAIT_PARKED.
 * Whoever wants to end the park -- a waker, the timer, a canceller -- CASes
 * the word from WAIT_RUN or WAIT_PARKED of the same seq to the outcome.
 * Exactly one CAS succeeds, so exactly one of wake / timeout / cancel wins.
 * A winner that moved it from WAIT_PARKED owns the resumption and makes the
 * thread runnable; one that moved it from WAIT_RUN leaves that to the thread,
 * which has not switched away yet and will see the outcome.
 * A waker reads nothing of the parker but the word after its CAS won from
 * WAIT_RUN: the thread may already have seen the outcome, returned, exited
 * and had its slot reused by a spawn.  That is why a platform park is marked
 * in the word (the waker must futex-wake it) rather than told by p->vt.
 */
enum {
    WEFT__PS_IDLE = 0,
    WEFT__PS_WAIT_RUN = 1,
    WEFT__PS_WAIT_PARKED = 2,
    WEFT__PS_WOKEN = 3,
    WEFT__PS_TIMEDOUT = 4,
    WEFT__PS_CANCELLED = 5,
};
/* kind: a value in bits 4-5, flags in bits 6-7.  An IO park is ended by
 * its operation's completion whatever its seq (the io layer's loop absorbs
 * a stale one); a NOCANCEL park ignores weft_cancel and deadlines (the wait
 * for a cancelled operation's completion). */
enum { WEFT__PK_GENERIC = 0, WEFT__PK_PERMIT = 1, WEFT__PK_IO = 2,
       WEFT__PK_LOOP = 3, /* an async dispatcher waiting for work (async/async.c) */
       WEFT__PK_NOCANCEL = 4, WEFT__PK_PLATFORM = 8 };
#define WEFT__PW_KIND(w) ((unsigned)(((w) >> 4) & 0x3))
#define WEFT__PW_NOCANCEL(w) (((w) >> 4) & WEFT__PK_NOCANCEL)
#define WEFT__PW_PLATFORM(w) (((w) >> 4) & WEFT__PK_PLATFORM)

#define WEFT__PW_STATE(w) ((unsigned)((w) & 0xF))
#define WEFT__PW_SAME_PARK(a, b) (((a) >> 4) == ((b) >> 4))

/* Why a thread is blocked: shown by the dump. */
enum {
    WEFT__WHY_NONE = 0,
    WEFT__WHY_SLEEP,
    WEFT__WHY_JOIN,
    WEFT__WHY_PARK,
    WEFT__WHY_IO,
    WEFT__WHY_MUTEX,
    WEFT__WHY_COND,
    WEFT__WHY_SEM,
    WEFT__WHY_RWLOCK,
    WEFT__WHY_LATCH,
    WEFT__WHY_ONCE,
    WEFT__WHY_CHAN_SEND,
    WEFT__WHY_CHAN_RECV,
    WEFT__WHY_SELECT,
    WEFT__WHY_FUTURE,
    WEFT__WHY_SCOPE,
    WEFT__WHY_BLOCKING,
    WEFT__WHY_EXECUTOR,
    WEFT__WHY_ASYNC, /* a dispatcher of completion handlers, idle */
    WEFT__WHY_PMUTEX, /* a lock weft did not write: pthread_mutex_lock, mtx_lock (hook/locks.c) */
    WEFT__WHY_PCOND,  /* ... pthread_cond_wait, cnd_wait */
    WEFT__WHY_PSEM,   /* ... sem_wait */
    WEFT__WHY_PRWLOCK, /* ... pthread_rwlock_rdlock, _wrlock */
    WEFT__WHY_COUNT
};

/* What the dump reports a vthread is doing.  "Running" is not stored (the
 * switch path would pay a store per switch): a RUNNABLE vthread is running
 * when its carrier's current vthread is itself. */
enum {
    WEFT__RS_FREE = 0,   /* slot not in use */
    WEFT__RS_NEW,        /* spawned, never ran */
    WEFT__RS_RUNNABLE,   /* queued, or running (see above) */
    WEFT__RS_PARKED,
    WEFT__RS_DONE,       /* finished, not yet joined */
};

typedef struct weft__carrier weft__carrier;

/* A parker: the park word and its vthread (NULL for a platform thread,
 * which sleeps on the word with futex). */
typedef struct weft__parker {
    _Atomic uint64_t word;
    weft_thread *vt;
} weft__parker;

/* flags */
enum {
    WEFT__F_DAEMON = 1,
    WEFT__F_PINNED = 2,
    WEFT__F_DETACHED = 4,  /* set under join_lock */
    /* computes on purpose (a parallel worker, parallel.c): the monitor
     * neither reports it as a hog nor adds a spare carrier for it while it
     * computes, but still moves what its carrier leaves stranded, and
     * reports it pinned if it blocks in a foreign system call.  Set and
     * cleared by the vthread itself; read racily by the monitor. */
    WEFT__F_COMPUTE = 8,
};

/*
 * A vthread.  Lives in the top WEFT__STACK_TOP bytes of its own stack, so
 * it shares the stack's first page.  Fields are grouped by who writes them.
 */
struct weft_thread {
    weft__stack stk;                 /* arch's slot head (first) */
    /* scheduler: written by the carrier running it */
    void *sp;                        /* saved stack pointer while off-CPU */
    weft_thread *next;               /* injection queue / mailbox link */
    weft__carrier *carrier;          /* carrier it runs or last ran on */
    weft__carrier *home;             /* pinned: the only carrier it runs on */
    weft_group *grp;                 /* its carrier group: it runs on that group's carriers only */
    uint32_t grp_id;                 /* its id, for the dump (grp may be freed once t has finished) */
    uint32_t flags;
    _Atomic uint8_t rstate;          /* WEFT__RS_*, for the dump */
    uint8_t why;                     /* WEFT__WHY_* of the current block */
    uint16_t fork_gen;               /* the process's fork generation at spawn (runtime/runtime.c, "Fork") */
    /* park */
    weft__parker parker;
    uint64_t park_token;             /* the current park's token */
    int32_t timer_heap;              /* carrier whose heap holds this park's deadline, or -1 */
    _Atomic int permit;              /* weft_park / weft_unpark */
    _Atomic int cancelled;
    int64_t deadline;                /* weft_deadline_set */
    /* life */
    void *(*fn)(void *);
    void *arg;
    void *result;
    uint64_t id;
    _Atomic int join_state;          /* 0 running, 1 joiner waiting, 2 done ... (sched.c, join_lock) */
    struct weft__parker *joiner;     /* valid while join_state == 1 */
    uint64_t joiner_token;
    /* dump: written by the vthread itself, read racily by weft_dump */
    _Atomic(const char *) block_file;
    _Atomic int block_line;
    _Atomic int64_t block_since;
    _Atomic int64_t block_until;
    _Atomic(const void *) block_obj;
    _Atomic uint64_t name_words[4];  /* name, 31 bytes + NUL */
    /* scopes (src/scope): the task this vthread runs for, the innermost
     * scope it owns (a chain through the scopes), its scopes' deadline */
    _Atomic(void *) task;
    void *scopes;
    int64_t scope_deadline;
    /* parallel.c: the parallel worker this vthread runs bodies for (the
     * innermost, when nested), or NULL; the vthread's own */
    void *par;
    /* local.c: the vthread's local storage (NULL until it sets a value;
     * freed as it ends; copied into its carrier's window while it runs),
     * the innermost scoped-value frame it sees (on a
     * binder's stack: its own, or its scope's opener's) and how many keys
     * that frame binds (for the dump: written by the vthread, read racily) */
    struct weft__locals *locals;
    const struct weft__sframe *scoped;
    _Atomic uint32_t scoped_n;
    /* tooling */
    void *tsan_fiber;
    void *asan_fake;
    /* dump: the io layer's calls (io.c, exec): the call's return address
     * into its caller, its fd and operation (IOR_*); valid while why is IO.
     * (Last: weft/local.h reads locals and scoped at fixed offsets.) */
    _Atomic(const void *) block_pc;
    _Atomic int32_t block_fd;
    _Atomic uint8_t block_op;
    /* handles (below): the slot's generation, kept across its reuse and
     * bumped as the descriptor is freed, as the bits a handle adds to the
     * descriptor's address.  Written by whoever frees it, read by any
     * thread holding a handle. */
    _Atomic uint64_t gen;
    /* scopes (src/scope): the id of the scope this vthread runs a task for
     * (0: none), for the dump (written by the vthread as it starts, read
     * racily); and what its carrier calls once it has ended (weft__on_exit) */
    _Atomic uint64_t task_scope;
    void (*exit_fn)(void *);
    void *exit_arg;
    /* weft_shield_begin: its cancellation does not interrupt it (written by
     * the vthread, read by weft__cancel_one) */
    _Atomic int shielded;
    /* own TLS (weft_thread_opts.own_tls; arch/tls.c): its TLS block and
     * TCB, the thread pointer while it runs (NULL: its carrier's), and
     * whether the block served a vthread before (weft__tls_start), and
     * whether the block is its spawner's (weft__spawn_tls: not given
     * back with the descriptor) */
    void *tls;
    uint8_t tls_reused, tls_kept;
    /* an own-TLS vthread's CPU clock (weft__thread_cpu_ns): the time it
     * has spent on a carrier before its last switch in, and when that
     * was (CLOCK_MONOTONIC, ns) -- written at its switches, read by itself */
    int64_t cpu_ns, cpu_since;
    uint16_t sud;                    /* its carrier's sud[] while it is off-CPU (internal.h) */
    /* foreign code (for the dump and weft-top; written by the vthread,
     * read racily): 1 if libweft-hook.so started it to run a program weft
     * did not compile (hook/preload.c: main); the system call the trap is
     * making for it now (hook/trap.c: its number + 1, 0 none), the
     * program's syscall instruction and first argument (a futex's address,
     * an fd, a pid); and how many of its calls have trapped */
    _Atomic uint8_t foreign;
    _Atomic uint16_t trap_call;
    _Atomic(const void *) trap_pc;
    _Atomic uint64_t trap_arg;
    _Atomic uint64_t trap_count;
    /* a signal interrupting a hooked call (sched.c, "Interrupts"): odd
     * while the vthread is inside a wait a handler may interrupt, of kind
     * intr_kind (WEFT__INTR_*; both written by the vthread); intr_sig: the
     * signal that did (written by the monitor, taken by the vthread) */
    _Atomic uint32_t intr_seq;
    _Atomic uint8_t intr_kind;
    _Atomic uint8_t intr_sig;
    /* Its signals (hook/signals.c), each a set in the kernel's layout
     * (WEFT__SIGBIT): sig_pend, those sent to it alone (pthread_kill,
     * raise, a process-directed one handed to it), raised on its own
     * carrier as its next hooked call returns -- or kept while its mask
     * blocks them; sig_routed, those of sig_pend that came to the process
     * (their siginfo is the process's: signals.c); sig_mask, its signal
     * mask (virtual: its carrier's stays the kernel's), inherited from
     * the vthread that spawns it; sig_wait, the set a sigwait of its waits
     * for (0: none) */
    _Atomic uint64_t sig_pend;
    _Atomic uint64_t sig_routed;
    _Atomic uint64_t sig_mask;
    _Atomic uint64_t sig_wait;
};

#define WEFT__SIGBIT(sig) (1ULL << ((sig) - 1))

_Static_assert(sizeof(struct weft_thread) <= WEFT__STACK_TOP, "descriptor must fit the top area");

/* ---- handles ------------------------------------------------------------
 *
 * A weft_thread * given to the program (weft_spawn, weft_self) is not the
 * descriptor's address alone: it carries the descriptor's generation, a
 * 24-bit count kept in the slot and bumped each time the descriptor is
 * freed (sched.c, "Handles"), in bits an address never uses -- the 16 above
 * bit 47 (user addresses are below 2^47 on x86-64 and 2^48 on aarch64 unless
 * asked for higher) and the 8 low ones (a descriptor is 256-byte aligned:
 * stack.c's head_of).  A handle whose generation is not its descriptor's
 * is stale -- joined, detached and ended, its slot free or another
 * vthread's -- and the calls that take one refuse it.  Generation 0 is
 * never given out: a handle without one is the runtime's own (raw
 * descriptor pointers passed to the public calls internally), not
 * checked.  weft__thread_of gives the descriptor of either kind.
 *
 * The descriptor keeps its generation already laid out as those bits
 * (t->gen: the generation's low 8 bits in bits 0-7, its high 16 in bits
 * 48-63), so that making a handle is an OR and checking one a mask and a
 * compare. */
#define WEFT__HANDLE_ADDR 0x0000ffffffffff00ull
static inline weft_thread *weft__thread_of(const weft_thread *h) {
    return (weft_thread *)((uintptr_t)h & (uintptr_t)WEFT__HANDLE_ADDR);
}
/* The generation bits of handle h (0: the runtime's own, unchecked). */
static inline uint64_t weft__handle_gen(const weft_thread *h) {
    return (uint64_t)(uintptr_t)h & ~(uint64_t)WEFT__HANDLE_ADDR;
}
static inline weft_thread *weft__handle(weft_thread *t) {
    if (!t) return NULL;
    return (weft_thread *)((uintptr_t)t | (uintptr_t)atomic_load_explicit(&t->gen, memory_order_relaxed));
}
/* The next generation after g, in the same layout; never 0. */
static inline uint64_t weft__gen_next(uint64_t g) {
    uint64_t n = g + 1;                                     /* the low 8 bits */
    if (__builtin_expect(n & 0x100, 0)) n += (UINT64_C(1) << 48) - 0x100; /* carry to bit 48 */
    return n ? n : 1;                                       /* (2^64 wraps: skip 0) */
}

/* ---- carrier-local state ------------------------------------------------ */

/* initial-exec: a plain %fs-relative access even in the shared library (the
 * default model there calls __tls_get_addr on every read) */
#define WEFT_TLS __thread __attribute__((tls_model("initial-exec")))

/* The calling OS thread's carrier (NULL: a platform thread).  Read it
 * directly only in a function that cannot switch (no park, no yield, no
 * call that may make one) between the read and the last use: the compiler
 * may keep a TLS address across a call, and after a park the vthread may
 * be on another carrier.  Anywhere else: weft__carrier_self(). */
extern WEFT_API WEFT_TLS weft__carrier *weft__tls_carrier;
extern WEFT_API WEFT_TLS void *const *weft__tls_window; /* local.c */
/* A carrier's first field is the vthread it runs (sched.c asserts it), so
 * that the fast paths of local.c read it without the carrier's layout. */
static inline weft_thread *weft__carrier_cur(const weft__carrier *c) { return *(weft_thread *const *)c; }

/* Reads the carrier of the calling OS thread.  Not inlined and not pure, so
 * the compiler cannot keep its result (or the TLS address) across a switch:
 * after any park a vthread may be on another carrier. */
weft__carrier *weft__carrier_self(void);

/* The calling vthread, or NULL. */
weft_thread *weft__self(void);
/* hook/trap.c's vfork: the child, which shares the calling vthread's TLS
 * block, must see no carrier there (weft__self NULL: a thread weft does
 * not run); hide returns what show puts back in the parent.  Nothing may
 * switch in between. */
weft__carrier *weft__carrier_hide(void);
void weft__carrier_show(weft__carrier *c);

/* The kernel thread id of the carrier t runs or last ran on; -1: none
 * yet (a racy read, for a clock: hook/threads.c). */
int weft__carrier_tid_of(const weft_thread *t);
/* The calling vthread's CPU time, ns, if it has its own TLS (a thread of
 * the program under weft-run: hook/threads.c's CLOCK_THREAD_CPUTIME_ID):
 * the time it has spent on a carrier, its carrier's CPU clock being
 * every vthread's that ran there; -1 elsewhere. */
int64_t weft__thread_cpu_ns(void);

/* ---- interrupts (sched.c, "Interrupts") ----------------------------------- */

/* What a signal handler does to a hooked call it interrupts: RESTART
 * calls go on where the handler had SA_RESTART (read, write, recv, send,
 * accept on a pipe or socket); ALWAYS calls end with EINTR whatever the
 * flags (sleeps, poll, select, epoll_wait), as signal(7) lists them. */
enum { WEFT__INTR_NONE = 0, WEFT__INTR_RESTART = 1, WEFT__INTR_ALWAYS = 2 };

/* The calling vthread t (NULL: nothing) enters / leaves a wait of kind a
 * handler may interrupt.  end returns the signal that interrupted it (0:
 * none); the wait then ended -ECANCELED, which the caller reports as
 * EINTR unless the vthread is cancelled itself. */
static inline void weft__intr_begin(weft_thread *t, int kind) {
    if (!t) return;
    atomic_store_explicit(&t->intr_kind, (uint8_t)kind, memory_order_relaxed);
    atomic_store(&t->intr_seq, atomic_load_explicit(&t->intr_seq, memory_order_relaxed) + 1); /* odd */
}
/* intr_sig's value for a pthread_cancel of a virtual pthread
 * (hook/threads.c): kept until the hook's EINTR return acts on it */
#define WEFT__INTR_CANCEL 0xFF
static inline int weft__intr_end(weft_thread *t) {
    if (!t) return 0;
    atomic_store(&t->intr_seq, atomic_load_explicit(&t->intr_seq, memory_order_relaxed) + 1); /* even */
    int s = atomic_exchange(&t->intr_sig, 0);
    if (__builtin_expect(s == WEFT__INTR_CANCEL, 0)) atomic_store(&t->intr_sig, (uint8_t)s); /* (kept) */
    return s;
}

/* From a signal handler (async-signal-safe): the program's handler for
 * sig has run; restart: it has SA_RESTART.  The monitor then interrupts
 * the target's hooked wait, if it is in one of a kind the flags end. */
void weft__intr_post(int sig, int restart);

/* Preemption of foreign code (hook/trap.c, "Preemption"): from now on the
 * monitor sends sig, with &weft__preempt_cookie as its sival_ptr (si_code
 * SI_QUEUE), to the OS thread of a carrier whose vthread -- the program's
 * (foreign), with its own TLS -- has computed for WEFT__PREEMPT_NS without
 * a switch; the handler decides whether it may yield there.  0: never. */
#define WEFT__PREEMPT_NS 10000000
void weft__preempt_enable(int sig);
extern const int weft__preempt_cookie;

/* From a signal handler (async-signal-safe): wakes the monitor to call
 * weft__sig_route_hook (hook/signals.c: a process-directed signal that no
 * thread could take where it landed). */
void weft__intr_kick(void);
extern void (*_Atomic weft__sig_route_hook)(void);

/* Whether the vthread process-directed signals interrupt (below) blocks
 * any of set (WEFT__SIGBIT); 0 when there is none. */
uint64_t weft__intr_target_masks(uint64_t set);

/* The vthread a process-directed signal interrupts: the kernel's choice
 * for a program that blocks nothing is its first thread (hook/preload.c
 * sets its foreign main); NULL: none (weft's own programs). */
void weft__intr_target_set(weft_thread *t);

/* Marks t cancelled by pthread_cancel (WEFT__INTR_CANCEL) and ends the
 * hooked wait it is in, if any; a hooked wait it begins later is refused
 * at once, until the mark is acted on (hook/threads.c). */
void weft__intr_cancel(weft_thread *t);

/* Signal sig was sent to t alone (restart: its handler has SA_RESTART):
 * ends the hooked wait t is in, if the kind of wait is one such a handler
 * ends (sched.c, "Interrupts"). */
void weft__intr_signal(weft_thread *t, int sig, int restart);

/* ---- park primitive ----------------------------------------------------- */

/*
 * Begins a park of the calling thread: returns the token, or 0 when the
 * caller is cancelled (no park begun; return -ECANCELED).  Between begin and
 * wait the caller publishes (parker, token) wherever a waker will find it.
 */
uint64_t weft__park_begin(weft__parker **p, int kind);

/* As weft__park_begin for a vthread or platform thread, with kind
 * WEFT__PK_NOCANCEL added: never refused, never cancelled, and no deadline
 * applies but the one given to weft__park_wait. */
uint64_t weft__park_begin_nocancel(weft__parker **p, int kind);

/* Ends the caller's own park `token` before waiting (the thing it waited for
 * turned out to be there already).  Returns 1 if it won; 0 if someone else
 * ended it first (the caller must then still call weft__park_wait, which
 * returns at once, to consume the wake). */
int weft__park_abort(weft__parker *p, uint64_t token);

/*
 * Blocks until the park ends: returns 0 (woken), -ETIMEDOUT (the earlier of
 * deadline and the caller's own deadline passed; 0 = none) or -ECANCELED.
 * `why`/`obj`/`file`/`line` describe the wait for the dump.
 */
int weft__park_wait(weft__parker *p, uint64_t token, int64_t deadline, int why,
                    const void *obj, const char *file, int line);

/* Ends park `token` of p with `state` (WOKEN, TIMEDOUT, CANCELLED) if it is
 * still waiting; returns 1 if this call won, 0 if the park had already ended. */
int weft__unpark(weft__parker *p, uint64_t token, int state);

/* Makes vthread t runnable (t was parked, and the caller won its park). */
void weft__ready(weft_thread *t);

/* Cancels t without running the cancel hook (the scope layer, which holds
 * its own locks when it cancels a tree of vthreads). */
void weft__cancel_one(weft_thread *t);
/* Set by the scope layer: weft_cancel(t) calls it after cancelling t, so
 * that the scopes t owns are cancelled too. */
extern void (*_Atomic weft__cancel_hook)(weft_thread *t);
/* Cancelling a platform thread (the executors' pool threads).  _enable
 * makes the calling platform thread cancellable and returns its handle,
 * valid until the thread calls _disable; _fire (any thread, while the
 * handle is valid) cancels it as weft_cancel does a vthread: its blocking
 * weft calls return -ECANCELED and weft_cancelled() says 1, until it calls
 * _clear.  _fd is an eventfd that a cancel makes readable, made on first
 * use, for the io layer's blocking system calls (-1: not enabled, or no fd
 * could be made). */
typedef struct weft__pcancel weft__pcancel;
/* weft_spawn pinned to carrier k (mod the carriers): it runs only there. */
int weft__spawn_on(int k, weft_thread **out, void *(*fn)(void *), void *arg, const weft_thread_opts *attr);
/* weft_spawn of a detached vthread (no handle) with its own TLS, on tls:
 * a block its caller got from weft__tls_get (reused: as that call said)
 * and keeps -- the block is not given back with the vthread's descriptor;
 * the caller gives it back (weft__tls_put) once the vthread has ended:
 * from the vthread's weft__on_exit call on, the block is no one's thread
 * pointer.  *desc gets the descriptor before the vthread can run; it is
 * valid until that weft__on_exit call returns.  (hook/threads.c: a
 * pthread_t is its block's address, which must name no other thread
 * until it is joined, while the vthread's stack goes back as it ends.) */
int weft__spawn_tls(weft_thread *_Atomic *desc, void *(*fn)(void *), void *arg, const weft_thread_opts *attr,
                    void *tls, int reused);
/* The number of carriers the runtime was configured with: indices
 * 0 .. weft__carriers()-1.  Spare carriers that the monitor adds to
 * compensate for stalls have higher indices (weft__carriers_all); code that
 * spreads work over "the carriers" uses this count. */
int weft__carriers(void);
/* membarrier(PRIVATE_EXPEDITED) registered for the process: 1, or 0 where
 * the kernel has none (spares.c; asked first while the process has one
 * thread, where the kernel registers it without an RCU grace period) */
int weft__membarrier_ready(void);
/* A preemption's yield (hook/trap.c): as weft_yield, but the carrier first
 * submits its queued I/O and takes its completions and due timers, which
 * pick_local looks at only every SLOW_EVERY picks -- what a computing
 * vthread holds back is mostly there.  0. */
int weft__yield_polled(void);
/* Moves the calling vthread to carrier k of its own group (index as
 * weft__carrier_index): it switches out and resumes there.  Returns 0
 * (also when it is on k already), -EPERM on a platform thread, -EINVAL
 * for a bad k or a pinned vthread.  For tests that need a migration on
 * demand (tests/test_local.c: locals across 10,000 moves). */
int weft__migrate(int k);
/* The carriers of the calling vthread's carrier group (group.c); on a
 * platform thread, or in the default group, weft__carriers(). */
int weft__carriers_here(void);

/* A spin-wait's pause (one copy for the scheduler, sync and parallel.c). */
static inline void weft__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#elif defined(__riscv)
    __asm__ __volatile__(".4byte 0x0100000f" ::: "memory"); /* pause (Zihintpause; a fence hint elsewhere) */
#else
    __asm__ volatile("" ::: "memory");
#endif
}
/* The calling vthread self stops computing on purpose: counts as progress
 * on its carrier, then sets WEFT__F_COMPUTE back to `prev` (0 or the flag),
 * so that the monitor does not charge what it computed under the flag to
 * what follows (a late look would otherwise see the flag gone and the CPU
 * spent: a hog). */
void weft__compute_end(weft_thread *self, uint32_t prev);

/* A pool that keeps `threads` platform threads: grows the process's futex
 * hash to suit (see sched.c). */
void weft__futex_hash_fit(long threads);

weft__pcancel *weft__pcancel_enable(void);
void weft__pcancel_fire(weft__pcancel *h);
void weft__pcancel_clear(void);
int weft__pcancel_fd(void);
void weft__pcancel_disable(void);
/* weft_join that neither cancellation nor deadlines interrupt (a scope's
 * close must outwait its tasks). */
int weft__join_nocancel(weft_thread *t, void **result);
/* The calling platform thread's innermost owned scope (the scope layer's). */
void **weft__platform_scopes(void);

/* Ends the current park of p if it is of kind `kind` (flags ignored) and
 * still waiting, with WOKEN.  Returns 0 (nothing to end), 1 (ended; nothing
 * more to do) or 2: the vthread p->vt had switched away and the caller must
 * make it runnable (weft__ready, or hand it to the scheduler's poll). */
int weft__unpark_kind(weft__parker *p, int kind);

/* ---- vthread-local storage and scoped values (local.c) -------------------
 *
 * A scoped-value frame (weft__sframe, laid out in weft/local.h for the
 * inline gets): the bindings one weft_scoped_run made, on its caller's
 * stack for the extent of the call, linked to the frame that was innermost
 * when it began.  Immutable while linked.  A thread sees the
 * chain from its innermost frame (weft_thread.scoped; a platform thread's
 * own in local.c); a scope's forks and a parallel loop's helpers see their
 * opener's, captured at open (the opener's frame outlives them: scope.c,
 * "Scoped values"). */
/* The calling thread's innermost frame (NULL: none). */
const weft__sframe *weft__scoped_current(void);
/* Makes f the calling vthread's chain (a scope's fork, a parallel helper:
 * before it runs any user code). */
void weft__scoped_adopt(const weft__sframe *f);
static inline uint32_t weft__sframe_total(const weft__sframe *f) { return f ? f->total : 0; }
/* Set by the scope layer: weft_scoped_run calls it as fn returns, before
 * frame f goes, to close the scopes opened inside f and left open. */
extern void (*_Atomic weft__scoped_exit_hook)(const weft__sframe *f);
/* A vthread ends (vthread_start, on the vthread, after fn returned):
 * runs its locals' destructors, then frees its storage. */
void weft__locals_end(weft_thread *self);

/* The calling vthread's last act: once it has ended -- its function
 * returned, its locals' destructors ran, its stack is released and it no
 * longer counts as live -- its carrier calls fn(arg), outside any vthread
 * (it must not block: a mutex held for a few instructions at most).  One
 * per vthread; the scope layer's tasks use it to say "ended" only when
 * nothing of them is left (scope.c, "Completion"). */
void weft__on_exit(void (*fn)(void *), void *arg);


/* 1 inside a weft_shield_begin region of the calling thread (the scope
 * layer: a scope opened there is shielded too). */
int weft__shielded(void);

/* t's name, for messages (NUL-terminated, 31 bytes at most). */
void weft__thread_name(const weft_thread *t, char out[32]);

/* A vthread (not a scope's task: task_main closes those) whose function
 * returned with scopes it opened still open: the scope layer's hook names
 * them and stops the program (scope.c, "Left open"); sched calls it as the
 * function returns. */
extern void (*_Atomic weft__scopes_left_hook)(weft_thread *t);

/* Writes a thread dump to stderr before a fatal stop: the observe layer's
 * weft_dump, set by the runtime as it starts (NULL before). */
extern void (*_Atomic weft__fatal_dump_hook)(void);
/* weft_shutdown, after the carriers stopped: frees the storage of the
 * daemons it abandons (their destructors do not run). */
void weft__locals_abandon(weft_thread *t);
/* vthreads holding local storage now (weft_shutdown walks the stacks only
 * when some do). */
extern _Atomic long weft__locals_live;
/* A carrier's window (local.c: what the inline weft_local_get reads): made
 * and attached to its OS thread by the carrier's thread as it starts
 * (NULL: no memory, and the carrier fails to start), dropped as it ends
 * (detach takes NULL). */
typedef struct weft__window weft__window;
weft__window *weft__window_carrier_attach(void);
void weft__window_carrier_detach(weft__window *w);
/* Vthread t, whose locals are not NULL, starts (enter) or stops (leave)
 * running on the carrier whose window is w: its values are copied in or
 * cleared (the scheduler's gate_out and gate_in). */
void weft__locals_enter(weft__window *w, weft_thread *t);
void weft__locals_leave(weft__window *w, const weft_thread *t);
/* Carrier c's window (sched.c). */
weft__window *weft__carrier_window(const weft__carrier *c);

/* ---- the poller (implemented by the io layer, src/io) ---------------------
 *
 * Every carrier may own a poller: an io_uring ring or an epoll set, plus the
 * means to wake the carrier from another thread.  An idle carrier sleeps in
 * weft__poller_wait instead of on its futex, so that I/O completions, timers
 * and kicks all wake it.  All but _kick are called on the carrier's own OS
 * thread only.
 */
typedef struct weft__poller weft__poller;
/* carrier thread at start; NULL and *err (-errno) if it cannot have one,
 * NULL and *err 0 when there is no I/O backend */
weft__poller *weft__poller_new(int index, int *err);
void weft__poller_free(weft__poller *p);      /* carrier thread at exit */
/* Submits what is queued and collects completions without blocking: the
 * vthreads it makes runnable go to out (at most max); returns their count.
 * cheap != 0: called from the switch path's periodic check, skip anything
 * that costs a system call unless it is overdue. */
int weft__poller_poll(weft__poller *p, weft_thread **out, int max, int cheap);
/* Sleeps until a completion, a kick or deadline (0: none); then as _poll. */
int weft__poller_wait(weft__poller *p, int64_t deadline, weft_thread **out, int max);
void weft__poller_kick(weft__poller *p);      /* any thread */
/* The calling carrier's poller (NULL on a platform thread or without io). */
weft__poller *weft__poller_self(void);

/* ---- runtime ------------------------------------------------------------ */

int weft__ensure_init(void);
/* How many forks separate this process from the one the runtime was first
 * started in, modulo 2^16 (runtime/runtime.c, "Fork"): an object stamped with another
 * value belongs to an ancestor's runtime, which does not exist here. */
unsigned weft__fork_gen(void);
int weft__running(void); /* 1 between weft_init and weft_shutdown */
int64_t weft__effective_deadline(int64_t d);
void weft__fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* ---- heap objects that their last close frees ----------------------------
 *
 * A scope, a future, a file channel and an executor are malloc'd, and the
 * call that ends each (weft_scope_close, the last weft_future_unref,
 * weft_file_close, weft_executor_close) frees it, so a second such call
 * is a use after free whatever the runtime does.  What it does: each
 * object keeps a word, `magic`, that holds its kind's value while it lives
 * and WEFT__MAGIC_DEAD from just before the free; the ending calls check
 * it first and stop the program with weft__misuse, which names the call,
 * the object and the caller's code address, rather than free twice (a
 * heap corrupted silently, or glibc's abort far from the cause).  The word
 * sits at least 32 bytes into the object and not in its last 8, where
 * glibc's free keeps its own links (tcache, bins, the next chunk's size
 * field), so it still reads DEAD until the memory is handed out again;
 * then it holds whatever the new owner wrote -- not the kind's value,
 * unless the new owner is an object of the same kind, the one case not
 * caught.  Under ASan the freed memory stays poisoned (its quarantine), so
 * the check's own read is reported as a heap-use-after-free with both
 * stacks: the sanitizer's report is the better one.  Two ending calls
 * racing each other on one object are not caught reliably. */
enum {
    WEFT__MAGIC_SCOPE = 0x53636f70,  /* "Scop" */
    WEFT__MAGIC_TASK = 0x5461736b,   /* "Task" */
    WEFT__MAGIC_FUTURE = 0x46757475, /* "Futu" */
    WEFT__MAGIC_FILE = 0x46696c65,   /* "File" */
    WEFT__MAGIC_EXEC = 0x45786563,   /* "Exec" */
    WEFT__MAGIC_DEAD = 0x64656164,   /* "dead" */
};
/* Stops the program: "weft: <call>(<obj>): <what>; called from <site>". */
void weft__misuse(const char *call, const void *obj, const char *what, const void *site)
    __attribute__((noreturn, cold));
/* In a public function: obj must be a live object of kind `want`.  (Both
 * accesses volatile: a compiler drops a store to memory that is about to
 * be freed, and the read is of memory it may think dead.) */
#define WEFT__CHECK_LIVE(obj, want, call, what)                                           \
    do {                                                                                  \
        if (__builtin_expect(*(volatile uint32_t *)&(obj)->magic != (uint32_t)(want), 0)) \
            weft__misuse((call), (obj), (what), __builtin_return_address(0));             \
    } while (0)
/* Just before obj is freed. */
#define WEFT__KILL(obj) (*(volatile uint32_t *)&(obj)->magic = WEFT__MAGIC_DEAD)

/* For the observe layer. */
typedef struct weft__counters {
    uint64_t started, finished, switches, steals, parks;
    uint64_t pinned, hogs;          /* the monitor's events */
    uint64_t spares, compensating;  /* spare carriers made; active now */
} weft__counters;
void weft__counters_sum(weft__counters *c, uint64_t *peak, uint64_t *ncarriers);

/* ---- the monitor's stalls (spares.c: "The monitor"; observe/monitor.c) ----
 *
 * A stall: a carrier whose vthread has held it past the threshold.  PINNED:
 * its OS thread is blocked in the kernel (a system call weft does not own);
 * HOG: it computes.  The scheduler's monitor notices them; the observe
 * layer tells which it is, where the vthread is, and writes the log line. */
enum { WEFT__STALL_NONE = 0, WEFT__STALL_PINNED = 1, WEFT__STALL_HOG = 2 };

/* A pinned stall's site: the return addresses of the blocking call's site
 * and its callers, innermost first, 0 after the last (all 0: not found).
 * Kept as addresses and named only when a line or a dump shows them
 * (weft__stall_site_name): naming loads libdw and reads DWARF (some 12 MB
 * of a server's RSS, kept for the process's life), which a stall that
 * nobody is told of must not cost. */
#define WEFT__SITE_FRAMES 4
/* What the observe layer found out about a stall (weft__stall_probe). */
typedef struct weft__stall_info {
    int kind;          /* WEFT__STALL_PINNED or _HOG */
    long sysno;        /* pinned: the system call's number; -1 blocked outside one, -2 unknown */
    uintptr_t site[WEFT__SITE_FRAMES]; /* pinned: the site (above) */
} weft__stall_info;

/* Classifies carrier thread `tid`, which has been running vthread t
 * without a switch, and for a pinned one walks t's stack to the blocking
 * call's site.  cpu_ns: the CPU time the thread has used during the stall
 * so far (-1: unknown).  The monitor thread only; t is read racily (it may
 * be running).  Returns 0, or -1 when it is neither yet: runnable but not
 * run by the kernel (a loaded machine), which no spare would help. */
int weft__stall_probe(int tid, int64_t cpu_ns, const weft_thread *t, weft__stall_info *out);
/* Names a code address into buf (cap bytes), snprintf-style: the
 * default gives "fn+0x4f (/path/module+0x1234)" from dladdr; a symbolizer
 * that knows file:line (libdw) may be put in its place before weft_init. */
typedef int (*weft__symbolizer)(uintptr_t pc, char *buf, size_t cap);
extern weft__symbolizer weft__symbolize;
/* The name of system call `nr` on this architecture ("nanosleep"), or NULL. */
const char *weft__syscall_name(long nr);
/* Names a stall's site into out (cap bytes): "fn+0x4f (file.c:12,
 * /path/module+0x1234) <- ..."; "" when it has none. */
void weft__stall_site_name(const uintptr_t site[WEFT__SITE_FRAMES], char *out, size_t cap);
/* Writes the monitor's line for a stall (begin: 1 when it is first
 * reported, 0 when it ends; held_ns: how long so far; site: a pinned
 * one's, or NULL) to stderr, in one write. */
void weft__stall_log(int begin, int kind, uint64_t vid, const char *vname, int carrier, long sysno,
                     int64_t held_ns, const uintptr_t *site);

/* A carrier as the dump shows it (racy snapshot). */
typedef struct weft__carrier_view {
    int index;
    int spare;          /* made by the monitor to compensate */
    unsigned group;     /* its carrier group's id (0: the default group) */
    int active;         /* takes work from the others (base carriers: always) */
    int idle;           /* asleep with nothing to do (a retired spare: asleep, retired) */
    uint64_t running;   /* id of the vthread running on it, 0 if none */
    int stall;          /* WEFT__STALL_*: an open stall */
    long sysno;         /* pinned: as weft__stall_info */
    int64_t since;      /* stall: CLOCK_MONOTONIC ns it began (about: the monitor's look) */
    uint64_t vid;       /* stall: the vthread */
    char vname[32];
    uintptr_t site[WEFT__SITE_FRAMES]; /* stall: the monitor's site of the blocking call (all 0 if none: a hog) */
} weft__carrier_view;
/* Fills *v for carrier k (0 <= k < weft__carriers_all(), or a group's
 * carrier index: weft__group_view); -ENOENT past the last, or for an
 * index no carrier has. */
int weft__carrier_view_get(int k, weft__carrier_view *v);
/* A carrier's own counters, for the live console (observe/console.c):
 * cumulative, each written only by the carrier itself, read racily.  The
 * console reads them about once a second while a client is connected;
 * nothing on the carrier's paths pays for them beyond what it counted
 * already.  runnable: its deque, mailbox and LIFO slot (not its private
 * yield FIFO, which only it may walk).  cpu_ns: its thread's CPU time
 * (clock_gettime of the thread's CPU clock: one system call), -1 when
 * unknown. */
typedef struct weft__carrier_counters {
    int index;
    int tid;
    unsigned group;
    int spare, active;
    uint64_t switches, steals, parks, started, finished;
    int64_t runnable;
    int64_t cpu_ns;
} weft__carrier_counters;
/* As weft__carrier_view_get, for the counters. */
int weft__carrier_counters_get(int k, weft__carrier_counters *out);
/* Vthreads waiting in the default group's injection queue (racy). */
int64_t weft__injected(void);
/* CLOCK_MONOTONIC ns when the running runtime started (weft_init). */
int64_t weft__started_at(void);
/* Which start of the runtime this is (1, 2 ... : it may be started again
 * after weft_shutdown); what a layer keeps per runtime compares it. */
uint64_t weft__runtime_generation(void);

/* The dump's view of the groups: fn is called for the default group and
 * each open one, with its stats and its carriers' indices (group.c). */
int weft__groups_each(void (*fn)(const weft_group_stats *s, const int *idx, int n, void *ctx), void *ctx);
/* All carriers, spares included (weft__carriers: the configured ones). */
int weft__carriers_all(void);
int weft__carrier_index(const weft__carrier *c);
const weft_thread *weft__carrier_running(const weft__carrier *c); /* racy read */

/* ---- libc interposition (src/hook) -------------------------------------- */

/* The calling vthread resumes on its current carrier after every park
 * until weft__pin_end(the returned value): hook.c, around a hooked call
 * that may park (errno's address must not change under foreign code).
 * A vthread with its own TLS is not pinned (0): its errno goes with it. */
int weft__pin_begin(void);
void weft__pin_end(int pinned_here);

#endif /* WEFT_SCHED_H */
