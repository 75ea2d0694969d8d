/*
 * A vthread's signals: its own mask, sigwait, and where a signal sent to
 * the process goes -- the kernel's rules, kept for vthreads (issue 27,
 * Deliver 3 and 4).
 *
 * Why.  The kernel keeps a signal mask per OS thread, and a carrier runs
 * many vthreads.  Before, a program's pthread_sigmask changed its
 * carrier's mask (trap.c took the frame's uc_sigmask): the mask stayed on
 * the carrier when the vthread moved on, the next vthread there inherited
 * it, and the one that asked lost it.  sigwait blocked a carrier, and a
 * signal every thread of the program had blocked was taken by whichever
 * carrier did not (the kernel sees only carriers), ran its handler, or
 * killed the process where the program had meant to sigwait for it.
 *
 * The model.  Masks are virtual: a vthread's is weft_thread.sig_mask
 * (sched.h; the kernel's layout, WEFT__SIGBIT), inherited from the vthread
 * that spawns it, changed by pthread_sigmask and sigprocmask (interposers
 * here) and by the raw rt_sigprocmask the C library makes itself (trapped:
 * trap.c calls weft__vsig_mask).  The carriers' own masks stay what the
 * kernel gave them -- nothing of the program's -- so the kernel delivers
 * every signal to some OS thread of the process, and the trampolines
 * (hook.c, "Signal handlers") decide, before the program's handler runs,
 * whether it runs there (weft__vsig_here):
 *  - a synchronous fault (SIGSEGV ... with si_code > 0): always, as the
 *    kernel forces it;
 *  - sent to one thread (si_code SI_TKILL from our own process: raise,
 *    pthread_kill of a vthread, a handoff below): the vthread running
 *    there takes it unless it blocks it -- then it is kept for that
 *    vthread in its sig_pend until it unblocks it or sigwaits for it;
 *    on an OS thread that runs no vthread (a thread the program made as
 *    the kernel's), it runs there;
 *  - sent to the process: it runs where it landed when the vthread there
 *    (or, on an OS thread running none -- the process's first thread,
 *    waiting for main, is the kernel's first choice -- main's vthread)
 *    does not block it: what weft did before, and what the kernel does for
 *    a program that blocks nothing.  Else it is the process's, pending
 *    (S.pend, with its siginfo), and the monitor routes it
 *    (weft__vsig_route, through sched.c's weft__sig_route_hook): to a
 *    vthread whose sigwait waits for it (woken; it takes it), else to one
 *    that does not block it (main first; threads.c's registry) -- if that
 *    one waits in a hooked call a signal ends, handed to it in sig_pend
 *    with the wait interrupted as the kernel would (sched.c,
 *    "Interrupts") and raised on its carrier as the call returns; if it
 *    computes or waits on a lock, its handler runs at once on the
 *    monitor's own thread -- else it stays pending, for the first sigwait
 *    or unblock.
 * A signal kept for a vthread, or the process's, is raised on the
 * vthread's carrier (rt_tgsigqueueinfo to ourselves, with its siginfo) as
 * soon as the vthread unblocks it -- before the unblocking call returns,
 * as the kernel delivers it: from an interposer at once; from the trap
 * (its handler runs with nothing blocked) it is blocked on the carrier
 * for the rest of the handler and arrives as the frame's mask comes back.
 *
 * Default actions.  A signal whose action is SIG_DFL has no trampoline:
 * the kernel acts on it where it lands -- a SIGTERM a sigwait thread waits
 * for, with every thread blocking it, would kill the process.  So when a
 * vthread's mask first blocks a signal whose action is SIG_DFL (and not
 * ignored by default), hook.c installs a catcher for it
 * (weft__hook_catch_default): the same decisions, and where the signal is
 * to act, its default action -- ignore, stop (SIGSTOP: the process stops,
 * as the kernel's group stop), or terminate (SIG_DFL put back, the
 * signal raised unblocked on the thread: the process dies of it, with its
 * core).  sigaction reports SIG_DFL for it; exec clears it, as any.
 *
 * sigwait, sigwaitinfo, sigtimedwait (interposers, and the trapped
 * rt_sigtimedwait): a vthread takes a signal of the set kept for it, else
 * the process's; else publishes its set (sig_wait, seq_cst, then looks
 * again: the router publishes S.pend, then reads sig_wait) and parks in a
 * wait any signal ends (WEFT__INTR_ALWAYS), until the router or a
 * pthread_kill wakes it, a handler interrupts it (EINTR), or its timeout.
 * sigsuspend puts its mask in place for the wait, raises what that
 * unblocks, and puts the old one back before it returns.  sigpending adds
 * what is kept here to the kernel's answer.
 *
 * When.  Only with virtual pthreads (threads.c switches this on with
 * them: weft-run, not a sanitizer build); off, every interposer here is
 * the C library's after a load and a branch, and masks are the carriers'.
 *
 * Not covered: a handler's own mask (sa_mask) is the carrier's while it
 * runs, not the vthread's (a handler that asks sees the vthread's mask as
 * it was); a process-directed signal handed to a vthread that computes
 * without a hooked call waits for its next one or its preemption (the
 * kernel would interrupt it at once); a mask is carried across exec only
 * from a fork child (weft__vsig_fork_child), not from a vthread's own
 * execve nor into posix_spawn's child (the new program starts with the
 * carrier's, empty); signals
 * 32 and 33 are glibc's; siginfo of a signal kept for a vthread that was
 * sent to it alone is made up (SI_TKILL, our pid and uid).
 *
 * Threads: S.pend and a vthread's sig_pend are atomic sets; S.info[sig]
 * is written by the thread that takes a signal for the process, before it
 * publishes the bit (release), and read by the one that clears it; two of
 * one signal in between are one, as for the kernel's standard signals.
 */
#define _GNU_SOURCE
#include "hook.h"

#include "../sched/sched.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if !defined(WEFT_ASAN) && !defined(WEFT_TSAN)

#define HOOK_API __attribute__((visibility("default"), noinline))
#define BIT(sig) WEFT__SIGBIT(sig)

/* never in a vthread's mask: the kernel's two, and glibc's own (SIGCANCEL,
 * SIGSETXID), which its pthread_sigmask leaves out too */
#define NEVER (BIT(SIGKILL) | BIT(SIGSTOP) | BIT(32) | BIT(33))
/* the synchronous faults: run where they happen */
#define FAULTS (BIT(SIGSEGV) | BIT(SIGBUS) | BIT(SIGILL) | BIT(SIGFPE) | BIT(SIGTRAP))

static struct {
    _Atomic int on;
    _Atomic uint64_t pend; /* the process's, pending */
    siginfo_t info[65];    /* ... each one's siginfo */
} S;

int weft__vsig_on(void) { return atomic_load_explicit(&S.on, memory_order_relaxed) && weft__self() != NULL; }

/* ---- raising on the calling vthread's carrier --------------------------------- */

static void raise_info(int sig, const siginfo_t *si) {
    siginfo_t k;
    if (si) {
        k = *si;
    } else {
        memset(&k, 0, sizeof k);
        k.si_code = SI_TKILL;
        k.si_pid = getpid();
        k.si_uid = getuid();
    }
    k.si_signo = sig;
    unsigned char o = weft__sud_allow();
    syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), sig, &k);
    weft__sud_restore(o);
}

/* Takes from t what is pending for it in `set` -- its own first, then the
 * process's -- filling *info; the signal, or 0. */
static int take(weft_thread *t, uint64_t set, siginfo_t *info) {
    uint64_t p = atomic_load(&t->sig_pend) & set;
    while (p) {
        int sig = __builtin_ctzll(p) + 1;
        uint64_t b = BIT(sig);
        p &= ~b;
        if (!(atomic_fetch_and(&t->sig_pend, ~b) & b)) continue;
        int routed = (atomic_fetch_and(&t->sig_routed, ~b) & b) != 0;
        if (routed) {
            *info = S.info[sig];
        } else {
            memset(info, 0, sizeof *info);
            info->si_code = SI_TKILL;
            info->si_pid = getpid();
            info->si_uid = getuid();
        }
        info->si_signo = sig;
        return sig;
    }
    uint64_t q = atomic_load(&S.pend) & set;
    while (q) {
        int sig = __builtin_ctzll(q) + 1;
        uint64_t b = BIT(sig);
        q &= ~b;
        if (!(atomic_fetch_and(&S.pend, ~b) & b)) continue;
        *info = S.info[sig];
        info->si_signo = sig;
        return sig;
    }
    return 0;
}

/* Raises on the calling vthread t what is pending for it and in `set`
 * (now unblocked); the number raised.  blocked: raise them blocked on the
 * carrier (the trap's handler: they arrive as its frame's mask returns). */
static int raise_set(weft_thread *t, uint64_t set, int blocked) {
    int n = 0;
    siginfo_t si;
    int sig;
    while ((sig = take(t, set, &si)) != 0) {
        if (blocked) {
            uint64_t b = BIT(sig);
            unsigned char o = weft__sud_allow();
            syscall(SYS_rt_sigprocmask, SIG_BLOCK, &b, NULL, sizeof b);
            weft__sud_restore(o);
        }
        raise_info(sig, &si);
        n++;
    }
    return n;
}

void weft__vsig_raise_pending(weft_thread *t) {
    uint64_t m = atomic_load_explicit(&t->sig_mask, memory_order_relaxed);
    if (atomic_load_explicit(&t->sig_pend, memory_order_relaxed) & ~m) raise_set(t, ~m, 0);
}

/* ---- the mask ---------------------------------------------------------------- */

/* how, set and old in the kernel's layout (8 bytes); in_trap: called from
 * the trap's handler.  0 or -errno. */
int weft__vsig_mask(int how, const uint64_t *set, uint64_t *old, int in_trap) {
    weft_thread *t = weft__self();
    uint64_t cur = atomic_load_explicit(&t->sig_mask, memory_order_relaxed), next = cur;
    if (set) {
        uint64_t s = *set;
        if (how == SIG_BLOCK) next |= s;
        else if (how == SIG_UNBLOCK) next &= ~s;
        else if (how == SIG_SETMASK) next = s;
        else return -EINVAL;
        next &= ~NEVER;
    }
    if (old) *old = cur;
    if (!set || next == cur) return 0;
    atomic_store(&t->sig_mask, next); /* seq_cst: pairs with the router's look at the mask */
    if (next & ~cur) weft__hook_catch_default(next & ~cur);
    if (cur & ~next) raise_set(t, cur & ~next, in_trap);
    return 0;
}

static int sigset_op(int how, const sigset_t *set, sigset_t *old) {
    uint64_t s = 0, o = 0;
    if (set) memcpy(&s, set, sizeof s);
    int r = weft__vsig_mask(how, set ? &s : NULL, old ? &o : NULL, 0);
    if (r == 0 && old) {
        sigemptyset(old);
        memcpy(old, &o, sizeof o);
    }
    return r;
}

HOOK_API int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    if (!weft__vsig_on()) return weft__libc.pthread_sigmask(how, set, old);
    TRAP_SCOPE;
    return -sigset_op(how, set, old);
}

HOOK_API int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    if (!weft__vsig_on()) return weft__libc.sigprocmask(how, set, old);
    TRAP_SCOPE;
    int r = sigset_op(how, set, old);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return 0;
}

/* ---- where a signal runs ---------------------------------------------------------- */

/* (the monitor thread, raising a routed signal on itself: it runs there) */
static __thread int run_here;

int weft__vsig_here(int sig, const siginfo_t *si) {
    if (!atomic_load_explicit(&S.on, memory_order_relaxed) || sig <= 0 || sig > 64 || run_here) return 1;
    uint64_t b = BIT(sig);
    if ((b & FAULTS) && si && si->si_code > 0) return 1;
    weft_thread *t = weft__self();
    int directed = si && si->si_code == SI_TKILL && si->si_pid == getpid();
    if (directed) {
        if (!t || !(atomic_load_explicit(&t->sig_mask, memory_order_relaxed) & b)) return 1;
        atomic_fetch_or(&t->sig_pend, b); /* kept for it */
        return 0;
    }
    uint64_t m = t ? atomic_load_explicit(&t->sig_mask, memory_order_relaxed) & b : weft__intr_target_masks(b);
    if (!m) return 1;
    /* the process's: pending, and the monitor routes it */
    if (si) S.info[sig] = *si;
    else memset(&S.info[sig], 0, sizeof S.info[sig]);
    atomic_fetch_or(&S.pend, b); /* (seq_cst: after its siginfo) */
    weft__intr_kick();
    return 0;
}

static int claim(int sig) { return (atomic_fetch_and(&S.pend, ~BIT(sig)) & BIT(sig)) != 0; }

/* The monitor thread (sched.c's weft__intr_deliver): each signal pending
 * for the process goes where "The model" says. */
static void route(void) {
    uint64_t p = atomic_load(&S.pend);
    while (p) {
        int sig = __builtin_ctzll(p) + 1;
        p &= ~BIT(sig);
        int dfl = weft__hook_caught(sig);
        int r = weft__vpt_route(sig, !dfl, claim);
        if (r == 2 && dfl && claim(sig)) {
            weft__hook_default_action(sig);
        } else if (r == 3) {
            /* the thread it went to waits on a lock or computes: its
             * handler runs here, now, as the kernel would run it at once
             * (seen: asyncio's SIGCHLD, sent while the thread that forked
             * blocked every signal, waited for good on a thread parked in
             * a condition variable) */
            run_here = 1;
            raise_info(sig, &S.info[sig]); /* (it copies it at once) */
            run_here = 0;
        }
    }
}

void weft__vsig_start(int on) {
    if (on) atomic_store_explicit(&weft__sig_route_hook, route, memory_order_release);
    atomic_store(&S.on, on);
}

/* A fork child (threads.c's atfork handler, on the vthread that forked):
 * the process's pending signals are not its (the kernel clears them), nor
 * what the vthread kept for itself.  The child has one thread and no
 * carriers: its mask becomes the kernel's again -- the vthread's, put on
 * the OS thread it now is, so that what it blocked stays blocked, and an
 * exec from there passes it on as the kernel's fork and exec do. */
/* (the forking vthread's mask, kept by the prepare handler: in the child
 * the runtime's own handler has already made it a platform thread) */
static uint64_t fork_mask;
static int fork_from_vthread;

void weft__vsig_fork_prepare(void) {
    weft_thread *t = weft__self();
    fork_from_vthread = atomic_load(&S.on) && t;
    if (fork_from_vthread) fork_mask = atomic_load(&t->sig_mask) & ~(BIT(SIGSYS) | NEVER);
}

void weft__vsig_fork_child(void) {
    atomic_store(&S.pend, 0);
    if (fork_from_vthread) {
        unsigned char o = weft__sud_allow();
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &fork_mask, NULL, sizeof fork_mask);
        weft__sud_restore(o);
    }
    atomic_store(&S.on, 0);
}

/* ---- waiting for one ------------------------------------------------------------- */

/* The calling vthread waits for a signal of set until dl (weft's clock;
 * INT64_MAX: none): the signal, or -EAGAIN (timeout), -EINTR (a handler
 * of another ran), -ECANCELED. */
static int wait_set(uint64_t set, siginfo_t *info, int64_t dl) {
    weft_thread *t = weft__self();
    siginfo_t dummy;
    if (!info) info = &dummy;
    for (;;) {
        int sig = take(t, set, info);
        if (sig) return sig;
        atomic_store(&t->sig_wait, set); /* seq_cst: then look again (the router's pair) */
        sig = take(t, set, info);
        if (sig) {
            atomic_store(&t->sig_wait, 0);
            return sig;
        }
        if (weft_now() >= dl) {
            atomic_store(&t->sig_wait, 0);
            return -EAGAIN;
        }
        int r = weft__hook_sleep_until(dl, "sigwait");
        atomic_store(&t->sig_wait, 0);
        sig = take(t, set, info);
        if (sig) return sig;
        if (r == 0) return -EAGAIN;
        if (r != -EINTR) return r;
        /* ended by a signal: one of set (kept for it, or the process's,
         * taken above), or another's handler */
        if (!(atomic_load(&t->sig_pend) & set)) return -EINTR;
    }
}

static uint64_t set_of(const sigset_t *s) {
    uint64_t k = 0;
    memcpy(&k, s, sizeof k);
    return k & ~NEVER;
}

HOOK_API int sigwait(const sigset_t *set, int *sig) {
    if (!weft__vsig_on()) return weft__libc.sigwait(set, sig);
    TRAP_SCOPE;
    int r;
    do r = wait_set(set_of(set), NULL, INT64_MAX);
    while (r == -EINTR); /* (glibc's sigwait restarts) */
    if (r < 0) return -r;
    *sig = r;
    return 0;
}

HOOK_API int sigwaitinfo(const sigset_t *set, siginfo_t *info) {
    if (!weft__vsig_on()) return weft__libc.sigwaitinfo(set, info);
    TRAP_SCOPE;
    int r = wait_set(set_of(set), info, INT64_MAX);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return r;
}

/* -1 with errno or the signal; ts NULL: no timeout */
static int timedwait(uint64_t set, siginfo_t *info, const struct timespec *ts) {
    int64_t dl = INT64_MAX;
    if (ts) {
        if (ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L || ts->tv_sec < 0) {
            errno = EINVAL;
            return -1;
        }
        int64_t ns = ts->tv_sec > INT64_MAX / 2000000000 ? INT64_MAX / 2 : ts->tv_sec * 1000000000 + ts->tv_nsec;
        dl = weft_now() + ns;
    }
    int r = wait_set(set, info, dl);
    if (r < 0) {
        errno = -r;
        return -1;
    }
    return r;
}

HOOK_API int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *ts) {
    if (!weft__vsig_on()) return weft__libc.sigtimedwait(set, info, ts);
    TRAP_SCOPE;
    return timedwait(set_of(set), info, ts);
}

/* the trapped rt_sigtimedwait (its set in the kernel's layout): the
 * signal, or -errno */
long weft__vsig_trapped_wait(const long a[6]) {
    if ((size_t)a[3] != sizeof(uint64_t)) return -EINVAL;
    uint64_t k;
    memcpy(&k, (const void *)a[0], sizeof k);
    int r = timedwait(k & ~NEVER, (siginfo_t *)a[1], (const struct timespec *)a[2]);
    return r < 0 ? -errno : r;
}

/* sigsuspend on a vthread: mask m for the wait; -1 with EINTR as it
 * returns, once the handler it waited for has run. */
int weft__vsig_suspend(const sigset_t *m) {
    weft_thread *t = weft__self();
    uint64_t old = atomic_load_explicit(&t->sig_mask, memory_order_relaxed), k = set_of(m);
    weft__vsig_mask(SIG_SETMASK, &k, NULL, 0); /* (raises what it unblocks: handlers run) */
    uint64_t before = atomic_load(&t->sig_pend);
    if (!(before & ~k)) {
        int r = weft__hook_sleep_until(INT64_MAX, "sigsuspend");
        (void)r;
        raise_set(t, ~k, 0); /* what ended it, before the old mask returns */
    }
    weft__vsig_mask(SIG_SETMASK, &old, NULL, 0);
    errno = EINTR;
    return -1;
}

/* sigpending: the kernel's, and what is kept here */
static uint64_t kept(void) {
    weft_thread *t = weft__self();
    return atomic_load(&t->sig_pend) | (atomic_load(&S.pend) & atomic_load(&t->sig_mask));
}

HOOK_API int sigpending(sigset_t *set) {
    if (!weft__vsig_on()) return weft__libc.sigpending(set);
    TRAP_SCOPE;
    int r = weft__libc.sigpending(set);
    if (r < 0) return r;
    uint64_t k;
    memcpy(&k, set, sizeof k);
    k |= kept();
    memcpy(set, &k, sizeof k);
    return 0;
}

long weft__vsig_trapped_pending(const long a[6]) {
    if ((size_t)a[1] != sizeof(uint64_t)) return -EINVAL;
    unsigned char o = weft__sud_allow();
    long r = syscall(SYS_rt_sigpending, a[0], a[1]);
    long e = errno;
    weft__sud_restore(o);
    if (r < 0) return -e;
    uint64_t k;
    memcpy(&k, (void *)a[0], sizeof k);
    k |= kept();
    memcpy((void *)a[0], &k, sizeof k);
    return 0;
}

#else /* a sanitizer build: no virtual pthreads, so no virtual masks */

int weft__vsig_on(void) { return 0; }
int weft__vsig_here(int sig, const siginfo_t *si) {
    (void)sig, (void)si;
    return 1;
}
void weft__vsig_start(int on) { (void)on; }
void weft__vsig_fork_child(void) {}
void weft__vsig_fork_prepare(void) {}
long weft__vsig_trapped_wait(const long a[6]) {
    (void)a;
    return -ENOSYS;
}
long weft__vsig_trapped_pending(const long a[6]) {
    (void)a;
    return -ENOSYS;
}
int weft__vsig_mask(int how, const uint64_t *set, uint64_t *old, int in_trap) {
    (void)how, (void)set, (void)old, (void)in_trap;
    return -ENOSYS;
}
int weft__vsig_suspend(const sigset_t *m) {
    (void)m;
    errno = ENOSYS;
    return -1;
}
void weft__vsig_raise_pending(weft_thread *t) { (void)t; }

#endif
