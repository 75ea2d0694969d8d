/*
 * Virtual pthreads: a thread a program weft did not write creates --
 * pthread_create, C11 thrd_create, C++ std::thread (which calls
 * pthread_create) -- is a vthread with a TLS block of its own, so that a
 * thread-per-connection server, or CPython, scales as a weft program does
 * and its thread count is not the kernel's.
 *
 * When.  weft_runtime_opts.virtual_pthreads (1 on, -1 off), else
 * $WEFT_VIRTUAL_PTHREADS (1 on, 0 off), else on in libweft-hook.so
 * (weft-run --threads vthread, the default) and off in a program linked
 * with libweft; and only with the hooks on and where a vthread can have
 * its own TLS (arch/tls.c: glibc 2.35+ on x86-64, not a sanitizer build --
 * there the interposers are not built at all, as locks.c's are not under
 * TSan).  Off, each interposer is the C library's after a load and a
 * branch.  Before weft_init (a constructor's thread) and after
 * weft_shutdown, threads are the kernel's.
 *
 * The handle.  glibc's pthread_t is the address of the thread's
 * descriptor (struct pthread): on x86-64 its TCB, which is the thread
 * pointer (pthread_self() reads it from %fs); on aarch64 and riscv64 (TLS
 * variant I) it lies right below the thread pointer (weft__tls_handle and
 * weft__tls_tp_of convert).  The registry is keyed by the pthread_t.
 * A vthread with its own TLS has its own TCB (arch/tls.c), so
 * pthread_self and pthread_equal need nothing here, and every glibc
 * function that works on the calling thread's descriptor -- keys,
 * cleanup handlers, cancellation state, errno, locale -- works on the
 * vthread's.  What works on another thread's descriptor through the
 * kernel (join through the tid futex, pthread_kill, the name in
 * /proc/.../comm, getattr's stack) is done here, from a registry: a hash
 * from the pthread_t to a record (struct vpt) of the thread's
 * descriptor, its result, and whether it is detached, has ended or is
 * gone.  The creator takes the block first (arch/tls.c's pool), keeps the
 * record in the block's own user bytes (weft__tls_extra: no malloc, no
 * page of its own), links it, and only then spawns the vthread on that
 * block (sched.h's weft__spawn_tls) -- so the thread finds itself in the
 * registry from its first instruction.  The record is unlinked, and the
 * block with it goes back to the pool, by pthread_join, by
 * pthread_detach of a thread that is gone, or by a detached thread's
 * going: a pthread_t names no other thread while its own can still be
 * joined.
 *
 * What an ended thread keeps.  Its vthread is detached as weft sees it
 * (weft__spawn_tls makes it so, with no handle): as it ends, its stack and
 * descriptor go back at once, and only its block -- the pthread_t, the
 * record, its result -- waits for the join.  A program that starts a
 * million threads and joins them later (the article's) then holds a
 * million blocks, about 4.4 KiB each, but only as many stacks as run at
 * once; before, each ended thread held its stack's top page too, and its
 * first touch (5 us here) was a third of the cost of a thread.  The
 * thread's descriptor is valid until it is gone: the carrier's
 * weft__on_exit call (vpt_gone) clears it, under its shard's lock,
 * after the thread's key destructors ran and its block stopped being
 * anyone's thread pointer; every use of it is under that lock and checks
 * it.
 *
 * The stop frame.  pthread_exit and a cancellation unwind the thread's
 * stack (_Unwind_ForcedUnwind, running C++ destructors and
 * pthread_cleanup_push handlers) down to the buffer in the descriptor's
 * cleanup_jmp_buf -- start_thread's setjmp in a kernel thread glibc
 * made.  A vthread has no start_thread, so its body runs under our own:
 * body() sets a jump buffer and registers it as the thread's outermost
 * cancellation buffer with glibc's own __pthread_register_cancel (what the
 * pthread_cleanup_push macro calls), so glibc's unwinder stops there and
 * jumps back; the body then ends as the vthread's function returning.
 * pthread_exit's value is kept in the frame (a __thread pointer: the
 * vthread's own), since glibc's field for it is not published; a
 * cancellation's is PTHREAD_CANCELED.  A vthread that is not a virtual
 * pthread (a weft program's own, or one without its own TLS) has no such
 * frame: pthread_exit there stops the process with a message rather than
 * end a carrier.
 *
 * Cancellation.  Deferred only.  glibc's pthread_cancel sets bits in the
 * target's descriptor that every glibc cancellation point then acts on
 * -- and weft's own code, running on the vthread's TLS, passes such
 * points (the eventfd write that kicks another ring for an I/O cancel):
 * an unwind from there leaves an I/O operation in flight on a stack about
 * to be reused (seen: a ring completion for a stale operation, then a
 * SIGSEGV).  So the bits are never set from another thread.
 * pthread_cancel records the request in the record (vpt.cancel) and, if
 * the target's cancellation is enabled, marks it (sched.c, "Interrupts":
 * intr_sig = WEFT__INTR_CANCEL, kept until acted on), which ends a hooked
 * wait it is in (read, sleep, poll, accept ...) and refuses the next one.
 * The target acts on it itself, in the program's code: as the hooked
 * call returns (hook.h's TRAP_SCOPE, weft__vpt_cancel_point) and in
 * pthread_testcancel -- glibc's pthread_cancel on itself, then glibc's
 * pthread_testcancel, which unwinds it; from then on glibc's EXITING bit
 * keeps its cleanup handlers' calls from acting again.  Disabled when
 * asked, the request waits: pthread_setcancelstate(ENABLE) marks it
 * again.  Not acted on: the C library's cancellation points that are not
 * hooked (waitpid, open of a FIFO ...), and asynchronous cancellation
 * (glibc sends SIGCANCEL to a tid, and a vthread's is not the kernel's).
 *
 * Joining.  pthread_join waits for the record's `gone` in the parking
 * lot (sync/lot.h, keyed by the record: a vthread parks, a kernel thread
 * blocks), which vpt_gone sets and wakes; _tryjoin_np looks, and
 * _timedjoin_np and _clockjoin_np wait with a deadline.  A join is not a
 * cancellation point here, and a signal's handler does not end it (as
 * glibc's wait on the tid futex).  Errors are glibc's: EINVAL for a detached thread or one
 * another thread is joining, EDEADLK for oneself, ESRCH for one already
 * joined (which glibc cannot always tell: it may crash).
 *
 * What stays a kernel thread, with one line on stderr naming the reason,
 * once per reason (weft.h, "Virtual pthreads", lists them): attributes
 * asking for an explicit scheduling policy or priority, a CPU affinity,
 * or a stack the program provides (a signal mask in the attributes is
 * the vthread's own: signals.c).  A thread created before
 * the runtime starts or after it stops is the kernel's without a line.
 * The stack size asked for is honoured above the runtime's default stack
 * (256 KiB, $WEFT_STACK_SIZE); glibc's own default (RLIMIT_STACK, 8 MiB)
 * and anything below the runtime's default get the runtime's default.
 *
 * Threads: the registry is one mutex (the C library's, never parking: a
 * few loads and stores under it); a record's result is written by its
 * thread before it ends and read by the joiner after weft_join.
 */
#define _GNU_SOURCE
#include "hook.h"

#include "../arch/arch.h"
#include "../sched/sched.h"
#include "../sync/lot.h"
#include "weft/sync.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#if !defined(WEFT_ASAN) && !defined(WEFT_TSAN)

#define HOOK_API __attribute__((visibility("default"), noinline))

struct vpt {
    struct vpt *hnext;   /* the registry's chain */
    void *tp;            /* its pthread_t, the registry key (NULL: not linked yet); its
                          * thread pointer is weft__tls_tp_of(tp) ("The handle") */
    /* its descriptor: stored by the spawn before the thread can run,
     * valid until it is gone (NULL then, under the lock) */
    weft_thread *_Atomic t;
    void *(*fn)(void *);
    void *arg;
    void *result;
    char *stk_lo;        /* its stack once it is gone, for pthread_getattr_np */
    size_t stk_size;
    /* ended: its function has returned (stored by the thread, without the
     * lock: its descriptor stays valid until it is gone); gone: its
     * vthread has left the carrier and its block (weft__on_exit), which a
     * join waits for ("Joining") */
    uint8_t linked, detached, ended, joining;
    _Atomic uint8_t gone;
    _Atomic uint8_t cancel; /* pthread_cancel asked, not yet acted on ("Cancellation") */
    uint8_t has_mask;       /* its attributes gave it a signal mask: mask (the kernel's layout) */
    uint64_t mask;
};
_Static_assert(sizeof(struct vpt) <= WEFT__TLS_EXTRA, "a record fits its block's user bytes");

/* The registry: SHARDS hash tables, a record in the one its TCB's address
 * picks, each under its own lock -- every thread takes its shard's lock
 * four times in its life (link, gone, the join's look-up and unlink), from
 * every carrier at once: one lock for all made 200,000 futex calls for a
 * million threads, a carrier asleep in the kernel at each. */
#define SHARDS 64
struct shard {
    pthread_mutex_t lock;
    struct vpt **b;
    size_t nb, n;        /* buckets (a power of 2), records */
    unsigned char sud_o; /* the selector reg_lock's caller had (reg_lock) */
} __attribute__((aligned(64)));
static struct shard S[SHARDS];

static struct {
    _Atomic int on;
    size_t stack_dflt;
    _Atomic size_t n;  /* records, all shards */
    _Atomic long live; /* virtual pthreads not yet ended */
    weft_mutex all_m;  /* main waits here for the last (its pthread_exit) */
    weft_cond all_c;
    _Atomic int said;  /* reasons already said on stderr (bits) */
    struct vpt *_Atomic main; /* main's record (cleared under its shard's lock before it is unlinked) */
    void (*real_exit)(void *);
    int (*real_getname)(pthread_t, char *, size_t);
    int (*real_tryjoin)(pthread_t, void **);
    int (*real_timedjoin)(pthread_t, void **, const struct timespec *);
    int (*real_clockjoin)(pthread_t, void **, clockid_t, const struct timespec *);
    int (*real_cancel)(pthread_t);
    int (*real_kill)(pthread_t, int);
    void (*real_testcancel)(void);
    int (*real_setcancelstate)(int, int *);
    int (*real_thrd_create)(thrd_t *, thrd_start_t, void *);
    int (*real_thrd_join)(thrd_t, int *);
    int (*real_thrd_detach)(thrd_t);
    void (*real_thrd_exit)(int);
} V = {.all_m = WEFT_MUTEX_INIT, .all_c = WEFT_COND_INIT};

static inline struct shard *shard_of(const void *tp) {
    return &S[((uintptr_t)tp >> 6) * 0x9E3779B97F4A7C15ull >> 58];
}

/* A shard's lock: the C library's mutex itself (this file names the
 * functions, so a plain call would bind to locks.c's interposer).  Held,
 * the caller runs weft's code whoever called: the trap's selector is off
 * from before the lock is taken until after it is let go (kept in
 * sh->sud_o meanwhile: nothing under the lock parks, so the carrier stays
 * the same).  Else a vthread called from the program's code (pthread_join
 * looks its thread up before anything else) could be preempted inside
 * the C library's lock or unlock -- the preemption yields wherever the
 * program's selector is armed and the code is not weft's -- and leave the
 * lock held while every carrier waited for it in the kernel (seen: a
 * million joins, all carriers in vpt_gone). */
static inline void shard_lock(struct shard *sh) {
    unsigned char o = weft__sud_allow();
    weft__libc.pthread_mutex_lock(&sh->lock);
    sh->sud_o = o;
}
static inline void shard_unlock(struct shard *sh) {
    unsigned char o = sh->sud_o;
    weft__libc.pthread_mutex_unlock(&sh->lock);
    weft__sud_restore(o);
}
/* the lock of the shard of TCB tp */
static inline void reg_lock(const void *tp) { shard_lock(shard_of(tp)); }
static inline void reg_unlock(const void *tp) { shard_unlock(shard_of(tp)); }

/* the calling virtual pthread's stop frame (its own TLS block's copy) */
struct frame {
    void *result;
    int exited;
};
static WEFT_TLS struct frame *cur_frame;

static void resolve(void) {
    if (__atomic_load_n(&V.real_exit, __ATOMIC_ACQUIRE)) return;
    V.real_getname = (int (*)(pthread_t, char *, size_t))dlsym(RTLD_NEXT, "pthread_getname_np");
    V.real_tryjoin = (int (*)(pthread_t, void **))dlsym(RTLD_NEXT, "pthread_tryjoin_np");
    V.real_timedjoin = (int (*)(pthread_t, void **, const struct timespec *))dlsym(RTLD_NEXT, "pthread_timedjoin_np");
    V.real_clockjoin =
        (int (*)(pthread_t, void **, clockid_t, const struct timespec *))dlsym(RTLD_NEXT, "pthread_clockjoin_np");
    V.real_cancel = (int (*)(pthread_t))dlsym(RTLD_NEXT, "pthread_cancel");
    V.real_kill = (int (*)(pthread_t, int))dlsym(RTLD_NEXT, "pthread_kill");
    V.real_testcancel = (void (*)(void))dlsym(RTLD_NEXT, "pthread_testcancel");
    V.real_setcancelstate = (int (*)(int, int *))dlsym(RTLD_NEXT, "pthread_setcancelstate");
    V.real_thrd_create = (int (*)(thrd_t *, thrd_start_t, void *))dlsym(RTLD_NEXT, "thrd_create");
    V.real_thrd_join = (int (*)(thrd_t, int *))dlsym(RTLD_NEXT, "thrd_join");
    V.real_thrd_detach = (int (*)(thrd_t))dlsym(RTLD_NEXT, "thrd_detach");
    V.real_thrd_exit = (void (*)(int))dlsym(RTLD_NEXT, "thrd_exit");
    __atomic_store_n(&V.real_exit, (void (*)(void *))dlsym(RTLD_NEXT, "pthread_exit"), __ATOMIC_RELEASE);
}
__attribute__((constructor)) static void threads_load(void) { resolve(); }

static void grow(struct shard *sh);

/* weft__vpt_act's offset from a thread pointer (initial-exec TLS) */
static ptrdiff_t act_off;

/* fork: the registry's lock is not held across it (a child whose parent
 * forked while another thread held it would wait for good); the child
 * keeps the records -- its only thread is the one that forked -- and
 * makes kernel threads until its own runtime starts */
static void fork_prepare(void) {
    weft__vsig_fork_prepare();
    for (int i = 0; i < SHARDS; i++) weft__libc.pthread_mutex_lock(&S[i].lock);
}
static void fork_parent(void) {
    for (int i = 0; i < SHARDS; i++) weft__libc.pthread_mutex_unlock(&S[i].lock);
}
static void fork_child(void) {
    for (int i = 0; i < SHARDS; i++) pthread_mutex_init(&S[i].lock, NULL);
    weft__vsig_fork_child();
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) {
    for (int i = 0; i < SHARDS; i++) pthread_mutex_init(&S[i].lock, NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int weft__threads_start(int cfg, int hooks_on, size_t stack_dflt) {
    resolve();
    act_off = (char *)&weft__vpt_act - (char *)weft__tp_get();
    pthread_once(&atfork_once, atfork_register);
    int want = cfg > 0;
    if (!cfg) {
        const char *e = getenv("WEFT_VIRTUAL_PTHREADS");
        extern int weft__hook_preloaded;
        want = e && *e ? strcmp(e, "0") != 0 : weft__hook_preloaded;
    }
    if (want && !hooks_on) {
        fprintf(stderr, "weft: virtual pthreads need the hooks on (WEFT_HOOK=1): threads are the kernel's\n");
        want = 0;
    }
    if (want && weft__tls_probe() < 0) want = 0; /* (the probe said why) */
    if (want) { /* the registry's first tables, so that linking a record never finds none */
        int none = 0;
        for (int i = 0; i < SHARDS; i++) {
            shard_lock(&S[i]);
            if (!S[i].nb) grow(&S[i]);
            none |= !S[i].nb;
            shard_unlock(&S[i]);
        }
        if (none) {
            fprintf(stderr, "weft: no memory for the virtual pthreads' registry: threads are the kernel's\n");
            want = 0;
        }
    }
    V.stack_dflt = stack_dflt;
    atomic_store(&V.on, want);
    weft__vsig_start(want); /* (a vthread's signal mask, signals.c: with virtual pthreads) */
    return want;
}

void weft__threads_stop(void) {
    atomic_store(&V.on, 0);
    weft__vsig_start(0);
}

static inline int vpt_on(void) {
    return atomic_load_explicit(&V.on, memory_order_relaxed) && weft__hook_on() && weft__running();
}

/* ---- the registry ---------------------------------------------------------- */

static inline size_t slot_of(const void *tp, size_t nb) {
    return (size_t)(((uintptr_t)tp >> 6) * 0x9E3779B97F4A7C15ull >> 20) & (nb - 1);
}

/* (its shard's lock held) */
static struct vpt *find(const void *tp) {
    const struct shard *sh = shard_of(tp);
    if (!sh->nb) return NULL;
    for (struct vpt *v = sh->b[slot_of(tp, sh->nb)]; v; v = v->hnext)
        if (v->tp == tp) return v;
    return NULL;
}

/* (sh's lock held) */
static void grow(struct shard *sh) {
    size_t nb = sh->nb ? sh->nb * 2 : 64;
    struct vpt **b = calloc(nb, sizeof *b);
    if (!b) return; /* chains get longer; nothing is lost */
    for (size_t i = 0; i < sh->nb; i++)
        for (struct vpt *v = sh->b[i], *nx; v; v = nx) {
            nx = v->hnext;
            size_t k = slot_of(v->tp, nb);
            v->hnext = b[k];
            b[k] = v;
        }
    free(sh->b);
    sh->b = b;
    sh->nb = nb;
}

/* Links v under tp (its descriptor t, or NULL: the spawn stores it). */
static void link_vpt(struct vpt *v, void *tp, weft_thread *t) {
    if (t) atomic_store_explicit(&v->t, t, memory_order_relaxed);
    struct shard *sh = shard_of(tp);
    shard_lock(sh);
    if (!v->linked) {
        if (sh->n >= sh->nb) grow(sh);
        v->tp = tp;
        size_t k = slot_of(tp, sh->nb);
        v->hnext = sh->b[k];
        sh->b[k] = v;
        v->linked = 1;
        sh->n++;
        atomic_fetch_add_explicit(&V.n, 1, memory_order_relaxed);
    }
    shard_unlock(sh);
}

/* v's descriptor (the lock held): NULL before the spawn stored it, and
 * once it is gone */
static inline weft_thread *vt(const struct vpt *v) { return atomic_load_explicit(&v->t, memory_order_relaxed); }
static inline int ended(const struct vpt *v) { return __atomic_load_n(&v->ended, __ATOMIC_ACQUIRE); }

/* (its shard's lock held) */
static void unlink_vpt(struct vpt *v) {
    struct shard *sh = shard_of(v->tp);
    struct vpt **pp = &sh->b[slot_of(v->tp, sh->nb)];
    while (*pp && *pp != v) pp = &(*pp)->hnext;
    if (*pp) {
        *pp = v->hnext;
        sh->n--;
        atomic_fetch_sub_explicit(&V.n, 1, memory_order_relaxed);
    }
    v->linked = 0;
}

/* The virtual pthread th names, or NULL (a kernel thread: the C
 * library's); its shard's lock is held on return when it is not NULL
 * (reg_unlock(v->tp)). */
static struct vpt *lookup(pthread_t th) {
    if (!atomic_load_explicit(&V.on, memory_order_relaxed) && !atomic_load_explicit(&V.n, memory_order_relaxed))
        return NULL;
    reg_lock((void *)th);
    struct vpt *v = find((void *)th);
    if (!v) reg_unlock((void *)th);
    return v;
}

/* ---- the body -------------------------------------------------------------- */

/* Runs fn(arg) under a stop frame for pthread_exit and cancellation
 * ("The stop frame"); *unwound: left by one of them. */
static void *body(void *(*fn)(void *), void *arg, int *unwound) {
    struct frame f = {0, 0};
    __pthread_unwind_buf_t ub;
    struct frame *volatile saved = cur_frame;
    cur_frame = &f;
    /* (as pthread_cleanup_push does: a buffer without the signal mask's
     * room, which a save of 0 never touches) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-overflow"
    int left = __sigsetjmp((struct __jmp_buf_tag *)(void *)ub.__cancel_jmp_buf, 0);
#pragma GCC diagnostic pop
    void *res;
    if (!left) {
        __pthread_register_cancel(&ub);
        /* (the block's last thread may have left a stale buffer there:
         * nothing unwinds past this frame) */
        ub.__pad[0] = NULL;
        res = fn(arg);
        __pthread_unregister_cancel(&ub);
        *unwound = 0;
    } else {
        res = f.exited ? f.result : PTHREAD_CANCELED;
        *unwound = 1;
    }
    cur_frame = saved;
    return res;
}

/* Its function has returned (on the thread, its block still its own). */
static void vpt_end(struct vpt *v) {
    __atomic_store_n(&v->ended, 1, __ATOMIC_RELEASE);
    /* main may wait for the last (its pthread_exit) */
    if (atomic_fetch_sub(&V.live, 1) == 1) {
        weft_mutex_lock(&V.all_m);
        weft_cond_broadcast(&V.all_c);
        weft_mutex_unlock(&V.all_m);
    }
}

/* Gives back what a joined or detached virtual pthread held, unlinked:
 * its block (its pthread_t now names no thread), its record with it. */
static void vpt_free(struct vpt *v) { weft__tls_put(weft__tls_tp_of(v->tp)); }

/* Its vthread is gone (its carrier calls this: weft__on_exit): its stack
 * and descriptor go back now, its block once it is joined -- or now,
 * detached.  A joiner waiting is woken. */
static void vpt_gone(void *arg) {
    struct vpt *v = arg;
    reg_lock(v->tp);
    weft_thread *t = vt(v);
    v->stk_lo = t->stk.lo;
    v->stk_size = (size_t)((char *)t - t->stk.lo); /* (the descriptor sits at the top) */
    atomic_store_explicit(&v->t, NULL, memory_order_relaxed);
    int drop = v->detached;
    if (drop) unlink_vpt(v);
    else atomic_store(&v->gone, 1); /* (seq_cst: before the wake's look, as the lot asks) */
    reg_unlock(v->tp);
    if (drop) vpt_free(v);
    else weft__lot_wake(v, INT32_MAX); /* (its address only: a joiner may have freed it) */
}

static void *vpt_main(void *arg) {
    struct vpt *v = arg;
    weft_thread *me = weft__self();
    atomic_store_explicit(&me->foreign, 1, memory_order_relaxed);
    if (v->has_mask) atomic_store(&me->sig_mask, v->mask); /* (pthread_attr_setsigmask_np) */
    weft__on_exit(vpt_gone, v);
    int unwound;
    v->result = body(v->fn, v->arg, &unwound);
    /* it forked, and this is the child, whose only thread it was: the
     * child's last thread has ended, and glibc then exits 0 (atexit
     * handlers, stdio flushed) -- there is no carrier to end on */
    if (!weft__carrier_self()) exit(0);
    vpt_end(v);
    return NULL;
}

struct main_args {
    int (*fn)(int, char **, char **);
    int argc;
    char **argv, **envp;
};
static void *main_thunk(void *p) {
    struct main_args *a = p;
    return (void *)(intptr_t)a->fn(a->argc, a->argv, a->envp);
}

/* A program's main, on its vthread (hook/preload.c): under a stop frame
 * too, and registered, so that other threads may join or name it.  main
 * left by pthread_exit: the process goes on until the last virtual
 * pthread has ended, then exits 0 (glibc: the last thread's exit). */
int weft__threads_main(int (*main_fn)(int, char **, char **), int argc, char **argv, char **envp) {
    struct vpt *v = calloc(1, sizeof *v);
    if (v) {
        v->detached = 1;
        link_vpt(v, (void *)pthread_self(), weft__self());
        atomic_store(&V.main, v);
    }
    struct main_args a = {main_fn, argc, argv, envp};
    int unwound = 0;
    void *r = body(main_thunk, &a, &unwound);
    if (v) {
        reg_lock(v->tp);
        if (atomic_load(&V.main) == v) atomic_store(&V.main, NULL);
        if (v->linked) unlink_vpt(v);
        reg_unlock(v->tp);
        free(v);
    }
    if (!unwound) return (int)(intptr_t)r;
    weft_mutex_lock(&V.all_m);
    while (atomic_load(&V.live) > 0) weft_cond_wait(&V.all_c, &V.all_m);
    weft_mutex_unlock(&V.all_m);
    exit(0);
}

/* ---- creation ---------------------------------------------------------------- */

enum { WHY_SCHED = 1, WHY_AFFINITY = 2, WHY_STACK = 8 };

/* Why attr's thread cannot be a vthread (0: it can). */
static int kernel_only(const pthread_attr_t *attr) {
    int inh = PTHREAD_INHERIT_SCHED, pol = SCHED_OTHER;
    struct sched_param sp = {0};
    if (pthread_attr_getinheritsched(attr, &inh) == 0 && inh == PTHREAD_EXPLICIT_SCHED &&
        ((pthread_attr_getschedpolicy(attr, &pol) == 0 && pol != SCHED_OTHER) ||
         (pthread_attr_getschedparam(attr, &sp) == 0 && sp.sched_priority != 0)))
        return WHY_SCHED;
    cpu_set_t cs;
    if (pthread_attr_getaffinity_np(attr, sizeof cs, &cs) == 0 && CPU_COUNT(&cs) != CPU_SETSIZE) return WHY_AFFINITY;
    /* (no stack set: glibc answers its NULL top less the size) */
    void *sa = NULL;
    size_t ssz = 0;
    if (pthread_attr_getstack(attr, &sa, &ssz) == 0 && (uintptr_t)sa + ssz != 0) return WHY_STACK;
    return 0;
}

static void say_kernel(int why) {
    if (atomic_fetch_or(&V.said, why) & why) return;
    const char *r = why == WHY_SCHED      ? "an explicit scheduling policy or priority"
                    : why == WHY_AFFINITY ? "a CPU affinity"
                                          : "a stack the program provides";
    fprintf(stderr, "weft: a thread whose attributes set %s runs as a kernel thread, not a vthread "
                    "(said once)\n", r);
}

static int create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    int det = PTHREAD_CREATE_JOINABLE;
    size_t stack = 0;
    if (attr) {
        int why = kernel_only(attr);
        if (why) {
            say_kernel(why);
            return weft__libc.pthread_create(th, attr, fn, arg);
        }
        pthread_attr_getdetachstate(attr, &det);
        size_t sz = 0, dflt = 0;
        pthread_attr_t d;
        if (pthread_getattr_default_np(&d) == 0) {
            pthread_attr_getstacksize(&d, &dflt);
            pthread_attr_destroy(&d);
        }
        /* (its guard page and the descriptor's page on top: what the
         * program asked for is what its code gets) */
        if (pthread_attr_getstacksize(attr, &sz) == 0 && sz != dflt && sz > V.stack_dflt) stack = sz + 2 * 4096;
    }
    /* its block first: its record lives there, and its pthread_t is known
     * -- and linked -- before it can run */
    int reused;
    void *tp = weft__tls_get(&reused);
    if (!tp) return EAGAIN;
    struct vpt *v = weft__tls_extra(tp);
    memset(v, 0, sizeof *v);
    v->fn = fn;
    v->arg = arg;
    sigset_t ss; /* (PTHREAD_ATTR_NO_SIGMASK_NP: none; it then inherits its creator's) */
    if (attr && pthread_attr_getsigmask_np(attr, &ss) == 0) {
        memcpy(&v->mask, &ss, sizeof v->mask);
        v->mask &= ~(WEFT__SIGBIT(SIGKILL) | WEFT__SIGBIT(SIGSTOP) | WEFT__SIGBIT(32) | WEFT__SIGBIT(33));
        v->has_mask = 1;
    }
    void *h = weft__tls_handle(tp); /* its pthread_t */
    link_vpt(v, h, NULL);
    weft_thread_opts o = {.own_tls = 1, .stack_size = stack};
    atomic_fetch_add(&V.live, 1);
    /* (detached as weft sees it: "What an ended thread keeps") */
    int r = weft__spawn_tls(&v->t, vpt_main, v, &o, tp, reused);
    if (r < 0) {
        atomic_fetch_sub(&V.live, 1);
        reg_lock(v->tp);
        unlink_vpt(v);
        reg_unlock(v->tp);
        vpt_free(v);
        return r == -EINVAL ? EINVAL : EAGAIN;
    }
    *th = (pthread_t)h;
    if (det == PTHREAD_CREATE_DETACHED) pthread_detach((pthread_t)h);
    return 0;
}

HOOK_API int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    if (!vpt_on()) return weft__libc.pthread_create(th, attr, fn, arg);
    TRAP_SCOPE;
    return create(th, attr, fn, arg);
}

/* glibc's thrd_create calls its pthread_create directly, not through
 * the PLT: here too (its start function's int result travels as a
 * pointer, as glibc's does) */
HOOK_API int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg) {
    if (!vpt_on()) return V.real_thrd_create(thr, fn, arg);
    TRAP_SCOPE;
    int r = create((pthread_t *)thr, NULL, (void *(*)(void *))(void *)fn, arg);
    return r == 0 ? thrd_success : r == ENOMEM || r == EAGAIN ? thrd_nomem : thrd_error;
}

/* ---- join and detach ----------------------------------------------------------- */

static int still_running(const void *key, void *arg) {
    (void)arg;
    return !atomic_load(&((const struct vpt *)key)->gone);
}

/* Joins v (the lock held, and released here); deadline: 0 none, -1 a try. */
static int join_vpt(struct vpt *v, void **ret, int64_t deadline) {
    if (vt(v) && vt(v) == weft__self()) { /* (glibc's order: itself before detached) */
        reg_unlock(v->tp);
        return EDEADLK;
    }
    if (v->detached || v->joining) {
        reg_unlock(v->tp);
        return EINVAL;
    }
    if (deadline < 0 && !atomic_load_explicit(&v->gone, memory_order_relaxed)) {
        reg_unlock(v->tp);
        return EBUSY;
    }
    v->joining = 1;
    reg_unlock(v->tp);
    /* (a lot's wait is never cancelled or interrupted: as glibc's join
     * waits on the tid futex, a signal's handler runs and the wait goes on) */
    while (deadline >= 0 && !atomic_load(&v->gone)) {
        weft__lot_waiter lw;
        if (weft__lot_enter(&lw, v, still_running, NULL) != 0) continue;
        if (weft__lot_park(&lw, deadline, WEFT__WHY_JOIN, v) == -ETIMEDOUT && !atomic_load(&v->gone)) {
            reg_lock(v->tp);
            v->joining = 0;
            reg_unlock(v->tp);
            return ETIMEDOUT;
        }
    }
    reg_lock(v->tp);
    unlink_vpt(v);
    reg_unlock(v->tp);
    if (ret) *ret = v->result;
    vpt_free(v); /* (v with it) */
    return 0;
}

HOOK_API int pthread_join(pthread_t th, void **ret) {
    struct vpt *v = lookup(th);
    if (!v) return weft__libc.pthread_join(th, ret);
    TRAP_SCOPE;
    return join_vpt(v, ret, 0);
}

HOOK_API int pthread_tryjoin_np(pthread_t th, void **ret) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_tryjoin(th, ret);
    TRAP_SCOPE;
    return join_vpt(v, ret, -1);
}

static int64_t weft_deadline(clockid_t clk, const struct timespec *abs) {
    if (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L) return -EINVAL;
    struct timespec now;
    clock_gettime(clk, &now);
    int64_t left = (int64_t)(abs->tv_sec - now.tv_sec) * 1000000000 + (abs->tv_nsec - now.tv_nsec);
    return weft_now() + (left > 0 ? left : 1);
}

HOOK_API int pthread_clockjoin_np(pthread_t th, void **ret, clockid_t clk, const struct timespec *abs) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_clockjoin(th, ret, clk, abs);
    TRAP_SCOPE;
    int64_t dl = abs ? weft_deadline(clk, abs) : 0;
    if (dl < 0 || (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC)) {
        reg_unlock(v->tp);
        return EINVAL;
    }
    return join_vpt(v, ret, dl);
}

HOOK_API int pthread_timedjoin_np(pthread_t th, void **ret, const struct timespec *abs) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_timedjoin(th, ret, abs);
    reg_unlock(v->tp);
    return pthread_clockjoin_np(th, ret, CLOCK_REALTIME, abs);
}

HOOK_API int pthread_detach(pthread_t th) {
    struct vpt *v = lookup(th);
    if (!v) return weft__libc.pthread_detach(th);
    TRAP_SCOPE;
    if (v->detached || v->joining) {
        reg_unlock(v->tp);
        return EINVAL;
    }
    v->detached = 1;
    int drop = atomic_load_explicit(&v->gone, memory_order_relaxed);
    if (drop) unlink_vpt(v);
    reg_unlock(v->tp);
    if (drop) vpt_free(v);
    return 0;
}

HOOK_API int thrd_join(thrd_t thr, int *res) {
    void *p = NULL;
    struct vpt *v = lookup((pthread_t)thr);
    if (!v) return V.real_thrd_join(thr, res);
    reg_unlock(v->tp);
    int r = pthread_join((pthread_t)thr, &p);
    if (r) return thrd_error;
    if (res) *res = (int)(intptr_t)p;
    return thrd_success;
}

HOOK_API int thrd_detach(thrd_t thr) {
    struct vpt *v = lookup((pthread_t)thr);
    if (!v) return V.real_thrd_detach(thr);
    reg_unlock(v->tp);
    return pthread_detach((pthread_t)thr) ? thrd_error : thrd_success;
}

/* ---- exit and cancellation ------------------------------------------------------ */

HOOK_API void pthread_exit(void *ret) {
    weft_thread *self = weft__self();
    if (self) {
        struct frame *f = self->tls ? cur_frame : NULL;
        if (!f)
            weft__fatal("pthread_exit from a vthread that is not a thread the program created (a weft "
                        "vthread's function returns instead)");
        f->result = ret;
        f->exited = 1;
    }
    if (!V.real_exit) resolve();
    V.real_exit(ret);
    __builtin_unreachable();
}

HOOK_API _Noreturn void thrd_exit(int res) {
    if (weft__self()) pthread_exit((void *)(intptr_t)res);
    V.real_thrd_exit(res);
    __builtin_unreachable();
}

HOOK_API int pthread_cancel(pthread_t th) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_cancel(th);
    TRAP_SCOPE;
    if (!ended(v)) {
        atomic_store(&v->cancel, 1);
        /* (disabled: its pthread_setcancelstate marks it when it enables) */
        if (weft__tls_cancel_enabled(weft__tls_tp_of((void *)th))) weft__intr_cancel(vt(v));
    }
    reg_unlock(v->tp);
    return 0;
}

/* Acts on a cancellation asked of the calling virtual pthread, if its
 * state allows: glibc's own bits are set now, on the thread, and glibc's
 * pthread_testcancel unwinds it. */
static void act(void) {
    struct vpt *v = lookup(pthread_self());
    if (!v) return;
    int asked = atomic_load(&v->cancel);
    reg_unlock(v->tp);
    if (!asked || !weft__tls_cancel_enabled(weft__tp_get())) return;
    V.real_cancel(pthread_self());
    V.real_testcancel();
}

void weft__vpt_cancel_point(void) {
    unsigned char a = __atomic_exchange_n(&weft__vpt_act, 0, __ATOMIC_RELAXED);
    weft_thread *t = weft__self();
    if (!t) return;
    /* a preemption that came while weft's code ran (trap.c): taken here,
     * where the program's code resumes, as if it had come a moment later */
    if (a & WEFT__ACT_PREEMPT) {
        if (weft__hook_in_trap()) {
            __atomic_fetch_or(&weft__vpt_act, WEFT__ACT_PREEMPT, __ATOMIC_RELAXED);
        } else { /* (weft's code: untrapped, as on_preempt's yield) */
            unsigned char *sel = weft__sud_sel;
            int armed = sel && sel[0];
            if (sel) sel[0] = 0;
            weft__yield_polled();
            if (armed) weft__sud_sel[0] = 1; /* (this carrier's: it may have moved) */
        }
    }
    /* signals sent to it alone: raised here, on its own carrier, so that
     * their handlers run on it (a signal that also ended its wait: before
     * the call returns EINTR, as the kernel runs it) */
    if (atomic_load_explicit(&t->sig_pend, memory_order_relaxed)) weft__vsig_raise_pending(t);
    if (atomic_load_explicit(&t->intr_sig, memory_order_relaxed) != WEFT__INTR_CANCEL) return;
    if (weft__hook_in_trap()) { /* (not from inside the trap's handler: the next interposer's end) */
        __atomic_fetch_or(&weft__vpt_act, WEFT__ACT_LOOK, __ATOMIC_RELAXED);
        return;
    }
    atomic_store(&t->intr_sig, 0);
    act();
}

/* Gives sig to t (TCB tp; the registry's lock held): kept in its
 * sig_pend (routed: the process's, whose siginfo signals.c keeps), its
 * next hooked call told to look (its own block's weft__vpt_act:
 * initial-exec, the same offset from every thread pointer), and the wait
 * it is in ended if the signal would end it -- unless its mask blocks the
 * signal and no sigwait of its waits for it. */
static void hand_to(weft_thread *t, void *tp, int sig, int routed) {
    uint64_t b = WEFT__SIGBIT(sig);
    if (routed) atomic_fetch_or(&t->sig_routed, b);
    atomic_fetch_or(&t->sig_pend, b);
    if (atomic_load(&t->sig_mask) & b) {
        if (atomic_load(&t->sig_wait) & b) weft__intr_signal(t, sig, 0);
        return;
    }
    __atomic_fetch_or((unsigned char *)weft__tls_tp_of(tp) + act_off, WEFT__ACT_LOOK, __ATOMIC_RELEASE);
    weft__intr_signal(t, sig, weft__hook_sig_restart(sig));
}

/* (signals.c's router, on the monitor thread: hook.h) */
static int route_to(struct vpt *pick, int sig, int hand, int (*claim)(int)) {
    if (!hand || !claim(sig)) return 2;
    /* waiting in a hooked call a signal ends: it takes it now, as that
     * call returns; anywhere else (computing, or parked on a lock) it
     * would only at its next hooked call, so the router runs the handler
     * where it is (3) */
    weft_thread *t = vt(pick);
    if (!(atomic_load(&t->intr_seq) & 1)) return 3;
    hand_to(t, pick->tp, sig, 1);
    return 2;
}

/* (its shard's lock held) whether v may take b now */
static int takes(const struct vpt *v, uint64_t b) {
    weft_thread *t = vt(v);
    return v->linked && !ended(v) && t && !(atomic_load(&t->sig_mask) & b);
}

int weft__vpt_route(int sig, int hand, int (*claim)(int)) {
    uint64_t b = WEFT__SIGBIT(sig);
    /* a sigwait of any thread waiting for it */
    for (int i = 0; i < SHARDS; i++) {
        struct shard *sh = &S[i];
        shard_lock(sh);
        for (size_t k = 0; k < sh->nb; k++)
            for (struct vpt *v = sh->b[k]; v; v = v->hnext) {
                weft_thread *t = vt(v);
                if (!v->linked || ended(v) || !t) continue;
                if (atomic_load(&t->sig_wait) & b) { /* (seq_cst: the process's bit was set before) */
                    weft__intr_signal(t, sig, 0);
                    shard_unlock(sh);
                    return 1;
                }
            }
        shard_unlock(sh);
    }
    /* main first, as the kernel's first thread (its record is cleared
     * from V.main under its shard's lock before it is freed) */
    struct vpt *m = atomic_load(&V.main);
    if (m) {
        struct shard *sh = shard_of(m->tp);
        shard_lock(sh);
        if (atomic_load(&V.main) == m && takes(m, b)) {
            int r = route_to(m, sig, hand, claim);
            shard_unlock(sh);
            return r;
        }
        shard_unlock(sh);
    }
    /* else the first that does not block it */
    for (int i = 0; i < SHARDS; i++) {
        struct shard *sh = &S[i];
        shard_lock(sh);
        for (size_t k = 0; k < sh->nb; k++)
            for (struct vpt *v = sh->b[k]; v; v = v->hnext)
                if (takes(v, b)) {
                    int r = route_to(v, sig, hand, claim);
                    shard_unlock(sh);
                    return r;
                }
        shard_unlock(sh);
    }
    return 0;
}

/* A signal for one virtual pthread (pthread_kill): itself, raised now on
 * its carrier as the kernel would (kept, if its mask blocks it:
 * signals.c); another, kept in its sig_pend and raised as its next hooked
 * call returns, the call it waits in ended with EINTR where the handler
 * would end it (weft__intr_signal) -- or, if its mask blocks it, kept
 * until it unblocks it, a sigwait for it woken.  One that computes
 * without a hooked call gets it at its next one. */
HOOK_API int pthread_kill(pthread_t th, int sig) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_kill(th, sig);
    TRAP_SCOPE;
    weft_thread *t = ended(v) ? NULL : vt(v);
    void *tp = v->tp;
    if (!t || sig < 0 || sig > 64) {
        reg_unlock(v->tp);
        return t ? EINVAL : ESRCH;
    }
    if (sig == 0) {
        reg_unlock(v->tp);
        return 0;
    }
    if (t == weft__self()) {
        reg_unlock(v->tp);
        int r = weft__hook_raise_here(sig, SI_TKILL);
        return r < 0 ? -r : 0;
    }
    hand_to(t, tp, sig, 0);
    reg_unlock(v->tp);
    return 0;
}

/* sched_yield on a thread of the program yields its vthread: the
 * kernel's would give the carrier's CPU away and take it straight back,
 * while the threads the caller waits for -- a spin-wait with a yield,
 * waiting for another thread to move -- wait in that carrier's queue. */
HOOK_API int sched_yield(void) {
    if (!vpt_on() || !weft__hook_here()) return weft__libc.sched_yield();
    TRAP_SCOPE;
    weft_yield();
    return 0;
}

/* tgkill or tkill of a vthread's tid (the trap: hook.c), as pthread_kill
 * of its thread: 0 or -errno; 1: not a vthread's tid (the kernel's). */
long weft__vpt_tid_kill(long tid, int sig) {
    if (!weft__tls_tid_is_ours(tid)) return 1;
    void *tp = NULL;
    for (int i = 0; i < SHARDS && !tp; i++) {
        struct shard *sh = &S[i];
        shard_lock(sh);
        for (size_t k = 0; k < sh->nb && !tp; k++)
            for (struct vpt *v = sh->b[k]; v; v = v->hnext)
                if (v->linked && !ended(v) && vt(v) && weft__tls_tid_of(weft__tls_tp_of(v->tp)) == tid) {
                    tp = v->tp;
                    break;
                }
        shard_unlock(sh);
    }
    if (!tp) return -ESRCH;
    return -pthread_kill((pthread_t)tp, sig); /* (looked up again: it may have ended meanwhile) */
}

HOOK_API void pthread_testcancel(void) {
    if (weft__self() && atomic_load_explicit(&V.on, memory_order_relaxed)) act();
    V.real_testcancel();
}

HOOK_API int pthread_setcancelstate(int state, int *old) {
    int r = V.real_setcancelstate(state, old);
    weft_thread *t = weft__self();
    if (r || state != PTHREAD_CANCEL_ENABLE || !t || !t->tls) return r;
    /* enabled with a cancellation pending: the next hooked wait acts */
    struct vpt *v = lookup(pthread_self());
    if (!v) return r;
    if (atomic_load(&v->cancel)) weft__intr_cancel(t);
    reg_unlock(v->tp);
    return r;
}

/* ---- names, attributes, ids ------------------------------------------------------ */

HOOK_API int pthread_setname_np(pthread_t th, const char *name) {
    struct vpt *v = lookup(th);
    if (!v) return weft__libc.pthread_setname_np(th, name);
    if (strlen(name) > 15) {
        reg_unlock(v->tp);
        return ERANGE;
    }
    if (ended(v)) { /* (glibc: its /proc/self/task/TID/comm is gone) */
        reg_unlock(v->tp);
        return ENOENT;
    }
    char buf[32] = {0};
    memcpy(buf, name, strlen(name));
    uint64_t nw[4];
    memcpy(nw, buf, 32);
    for (int i = 0; i < 4; i++) atomic_store_explicit(&vt(v)->name_words[i], nw[i], memory_order_relaxed);
    reg_unlock(v->tp);
    return 0;
}

HOOK_API int pthread_getname_np(pthread_t th, char *buf, size_t len) {
    struct vpt *v = lookup(th);
    if (!v) return V.real_getname(th, buf, len);
    if (ended(v)) { /* (as setname) */
        reg_unlock(v->tp);
        return ENOENT;
    }
    char name[32];
    uint64_t nw[4];
    for (int i = 0; i < 4; i++) nw[i] = atomic_load_explicit(&vt(v)->name_words[i], memory_order_relaxed);
    reg_unlock(v->tp);
    memcpy(name, nw, 32);
    name[15] = 0; /* (the kernel's comm: 15 bytes) */
    size_t n = strlen(name);
    if (len < 16 || n >= len) return ERANGE;
    memcpy(buf, name, n + 1);
    return 0;
}

HOOK_API int pthread_getattr_np(pthread_t th, pthread_attr_t *attr) {
    struct vpt *v = lookup(th);
    if (!v) return weft__libc.pthread_getattr_np(th, attr);
    weft_thread *t = vt(v);
    char *lo = t ? t->stk.lo : v->stk_lo; /* (its last stack, once it is gone) */
    size_t size = t ? (size_t)((char *)t - lo) : v->stk_size;
    int det = v->detached;
    reg_unlock(v->tp);
    int r = pthread_attr_init(attr);
    if (r) return r;
    pthread_attr_setstack(attr, lo, size);
    pthread_attr_setguardsize(attr, (size_t)sysconf(_SC_PAGESIZE));
    pthread_attr_setdetachstate(attr, det ? PTHREAD_CREATE_DETACHED : PTHREAD_CREATE_JOINABLE);
    return 0;
}

/* A virtual pthread's CPU-time clock: its carrier's (the one it runs or
 * last ran on, when asked) -- weft keeps no CPU time per vthread, so it
 * counts what that carrier ran, the thread among it; glibc's answer, the
 * fake tid's clock, is one the kernel refuses (EINVAL at clock_gettime).
 * The kernel's encoding of a thread's clock: CPUCLOCK_SCHED, per thread. */
HOOK_API int pthread_getcpuclockid(pthread_t th, clockid_t *clk) {
    struct vpt *v = lookup(th);
    if (!v) return weft__libc.pthread_getcpuclockid(th, clk);
    int tid = ended(v) ? -1 : weft__carrier_tid_of(vt(v));
    reg_unlock(v->tp);
    if (tid <= 0) return ESRCH;
    *clk = (clockid_t)((~(unsigned)tid << 3) | 2 | 4);
    return 0;
}

/* A virtual pthread's own CPU clock, CLOCK_THREAD_CPUTIME_ID: the time it
 * has spent on a carrier (sched.h's weft__thread_cpu_ns).  The kernel's
 * answer is its carrier's thread's, which counts every vthread that ran
 * there and jumps when it resumes on another carrier (seen: CPython's
 * test_time.test_thread_time, 77 ms over a 100 ms sleep).  A carrier the
 * kernel does not run meanwhile is counted as running.  Every other clock
 * is the C library's (its vDSO: weft's own calls too, after a branch). */
HOOK_API int clock_gettime(clockid_t clk, struct timespec *ts) {
    if (__builtin_expect(clk == CLOCK_THREAD_CPUTIME_ID, 0)) {
        int64_t ns = weft__thread_cpu_ns();
        if (ns >= 0) {
            ts->tv_sec = (time_t)(ns / 1000000000);
            ts->tv_nsec = (long)(ns % 1000000000);
            return 0;
        }
    }
    return weft__libc.clock_gettime(clk, ts);
}

/* A vthread's kernel-unique id: its TCB's (arch/tls.c: 0x800000 + its id) */
HOOK_API pid_t gettid(void) {
    weft_thread *t = weft__self();
    if (t && t->tls) return weft__tls_tid();
    return weft__libc.gettid();
}

#else /* a sanitizer build: no own TLS, so no virtual pthreads (the top comment) */

int weft__threads_start(int cfg, int hooks_on, size_t stack) {
    (void)hooks_on, (void)stack;
    const char *e = getenv("WEFT_VIRTUAL_PTHREADS");
    if (cfg > 0 || (!cfg && e && *e && strcmp(e, "0") != 0))
        fprintf(stderr, "weft: virtual pthreads need a vthread's own TLS, which a sanitizer build does not have: "
                        "threads are the kernel's\n");
    return 0;
}
void weft__threads_stop(void) {}
int weft__threads_main(int (*main_fn)(int, char **, char **), int argc, char **argv, char **envp) {
    return main_fn(argc, argv, envp);
}
void weft__vpt_cancel_point(void) { weft__vpt_act = 0; }
long weft__vpt_tid_kill(long tid, int sig) {
    (void)tid, (void)sig;
    return 1;
}

#endif /* !WEFT_ASAN && !WEFT_TSAN */
