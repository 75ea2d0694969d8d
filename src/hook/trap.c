/*
 * The system call trap: the blocking calls foreign code makes without the
 * PLT park too.
 *
 * Why.  The interposers (hook.c, locks.c) see a call only when it comes
 * through the PLT.  The C library makes most of its own system calls
 * directly: stdio's read and write (fgets, fread, fwrite, getline,
 * fflush), the waits of popen/pclose/system, and the futex waits of its
 * internal locks; so do libraries that make raw system calls.  Each of
 * those held its carrier until the kernel returned ("pinned"), and enough
 * of them deadlocked a program whose waits were for a vthread.
 *
 * How.  Linux's syscall user dispatch (prctl PR_SET_SYSCALL_USER_DISPATCH,
 * 5.11): a thread names a selector byte; at each of its system calls made
 * from outside one range of addresses, the kernel reads the byte, and
 * when it says BLOCK (1) the call is not made: SIGSYS is raised at the
 * instruction after the syscall, with the call's registers.  I chose it
 * over a seccomp filter: seccomp cannot tell weft's own calls from the
 * program's (both come from the C library's code), cannot be undone, and
 * is inherited by every thread the program makes; dispatch is per thread,
 * switched by a byte that weft owns, at the cost of one store per switch.
 *
 * The selector (one per carrier: weft__carrier.sud, named to the kernel
 * at the carrier's start; weft__sud_sel points at it on that thread):
 *  - 1 while a vthread runs the program's code: from its function's start
 *    (sched.c, vthread_start), after every interposer's return
 *    (TRAP_SCOPE, hook.h), after this handler's return;
 *  - 0 while weft's own code runs: inside the interposers and this
 *    handler, the sched context, every call the library makes through the
 *    table (libc/real.h's WEFT__ALLOWED: a carrier's eventfd, weft's own
 *    locks), and its own futex waits;
 *  - saved in the vthread at every switch and given back when it runs
 *    again (sched.c: switch_to, enter), so a vthread that parked inside
 *    weft's API called from the program's code comes back trapped, on
 *    whichever carrier.
 * weft's API called from the program runs with the selector the program
 * had (1): the few system calls it makes itself (mmap for a stack, a
 * ring's enter) trap and are made here as they are.  None of them is one
 * that parks (below), so this changes their cost, not what they do.
 *
 * The handler (SIGSYS, SA_SIGINFO | SA_NODEFER, on the vthread's own
 * stack, never an altstack): selector to 0, then by the call's number:
 *  - one an interposer stands for (hook.c, weft__hook_trapped: read,
 *    write, recvfrom, poll, nanosleep ...): that interposer's work, which
 *    parks the vthread if the call would block (and is the C library's
 *    call when it may not park: not a vthread, in a signal handler);
 *  - futex WAIT / WAIT_BITSET, private or shared: the value is checked
 *    here (EAGAIN if it moved), a few yields let a holder let go; else
 *    the carrier's ring makes the very same wait (IORING_OP_FUTEX_WAIT,
 *    io/io.h's weft__futex_wait) while the vthread parks, and where that
 *    cannot be (the epoll backend, a kernel before 6.7) a blocking-pool
 *    thread makes it.  The kernel's wait and not a parking lot keyed by
 *    address: the wake may come from any thread -- a carrier, the
 *    program's own pthread, weft's own code, another process on a shared
 *    futex -- and only the kernel sees all of them, so the wait has to be
 *    the kernel's.  (The pool's way cost two kernel threads' switches per
 *    contended wait and held a pool thread for it; seen: a
 *    thread-per-connection server's fclose contending for stdio's list
 *    lock.)  The pool is bounded (WEFT_BLOCKING_MAX, 64):
 *    past it the waits queue (a wake before the queued wait starts makes
 *    that wait return EAGAIN, which every futex user retries on: nothing
 *    is lost).  PI futexes (LOCK_PI ...) are made as they are;
 *  - wait4 without WNOHANG (pclose, system, waitpid): one try with
 *    WNOHANG, then the same proxy;
 *  - rt_sigprocmask and sigaltstack: the frame's uc_sigmask / uc_stack,
 *    which the rt_sigreturn that ends the handler puts in place (a mask
 *    set here directly would be undone by it).  SIGSYS itself is never
 *    blocked: the kernel kills a thread whose forced SIGSYS is blocked;
 *  - rt_sigreturn (the C library's restorer, ending a program's handler
 *    that interrupted its trapped code): made again from weft's restorer,
 *    which lies in the range the kernel lets through;
 *  - clone, clone3, fork: weft__sud_clone (arch) makes the call and
 *    sends the child straight back to the program's instruction with the
 *    program's registers.  A vfork is made as a vfork by weft__sud_vfork,
 *    which keeps this handler's frames (on the stack the child runs on)
 *    aside until the child has exec'd or exited (trapped_vfork).  A clone that
 *    shares memory without waiting for the child (a pthread_create) would
 *    race its child for the frame: it is made again at the program's own
 *    instruction with the selector 0 for that one call, and sud[1] arms
 *    the vthread again at its next interposer's return;
 *  - anything else: made here as it is (getpid, mmap, openat ...).
 * Then selector to 1, errno as it was, the result in rax.  The handler
 * returns through weft__sud_restorer (arch: sud_x86_64.S), whose
 * rt_sigreturn is the one call the range lets through.
 *
 * Whom it traps: only vthreads with their own TLS (arch/tls.c; the runtime
 * turns it on for every vthread when the trap is on, unless told not to,
 * and then keeps the trap off).  The C library knows the owner of its
 * internal recursive locks by the thread pointer -- stdio's list_all_lock,
 * which every fopen, fdopen and fclose takes, and each FILE's lock -- and
 * reads it before it waits.  On the carrier's TLS, a vthread that parked
 * in that wait and resumed on another carrier set the lock's owner to the
 * first carrier, where another vthread then took the lock "recursively",
 * and the two updated its count at once from two carriers (seen:
 * stdio_park getline hung about one run in ten, list_all_lock's count at
 * -1 and 64 blocking-pool threads waiting on it for good).  Before the
 * trap that wait held the carrier, so no other vthread ran on it.  A
 * vthread spawned with weft_thread_opts.own_tls = -1 is not trapped: its
 * calls are made as they are, as without the trap.
 *
 * Migration.  A vthread that parked in the handler may resume on another
 * carrier (one with its own TLS; the others are pinned for the call, as
 * in every interposer).  rt_sigreturn then restores the frame's altstack
 * and mask on the thread it runs on: the frame gets that carrier's own
 * before the return.
 *
 * Where it cannot work, said once on stderr and the runtime runs without
 * it: a kernel before 5.11 (EINVAL), a sanitizer build (ASan and TSan make
 * raw system calls from their own runtimes, which would trap into
 * instrumented code while they hold their own locks).  A program that
 * installs its own SIGSYS handler replaces this one: the next trapped
 * call then kills it or goes to the program's handler; the trap is for
 * programs that leave SIGSYS alone (seccomp users do not).
 */
#define _GNU_SOURCE
#include "../arch/arch.h"
#include "../io/io.h"
#include "../sched/sched.h"
#include "hook.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#ifndef SYS_USER_DISPATCH
#define SYS_USER_DISPATCH 2 /* si_code of a dispatch SIGSYS */
#endif

/* The handler reads and writes x86-64's registers in the signal frame, and
 * the restorer and clone are x86-64 assembly (arch/sud_x86_64.S): on
 * another architecture the trap says it is not there (weft__trap_start). */
#if defined(__x86_64__)
static _Atomic int trap_on;

/* The kernel's sigaction (glibc's puts its own restorer in). */
struct ksigaction {
    void (*handler)(int, siginfo_t *, void *);
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};
#define KSA_RESTORER 0x04000000UL

static long raw(long nr, const long a[6]) {
    long r = syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
    return r < 0 ? -errno : r;
}

/* ---- the proxied waits --------------------------------------------------- */

typedef struct proxy_job {
    long nr;
    long a[6];
    long ret;
} proxy_job;

static void *proxy_run(void *arg) {
    proxy_job *j = arg;
    j->ret = raw(j->nr, j->a);
    return NULL;
}

/* The call made by a blocking-pool thread while the vthread parks; as it
 * is where it cannot park.  Not pinned: the result comes back in rax, not
 * errno, and a vthread that waits for a lock of the C library's while it
 * holds another (malloc's arena mutex, seen) must be free to resume on any
 * carrier -- pinned, a carrier whose own code then wanted that arena would
 * wait for a vthread that only it could run. */
static long proxied(long nr, const long a[6]) {
    if (!weft__hook_here()) return raw(nr, a);
    proxy_job j = {.nr = nr};
    memcpy(j.a, a, sizeof j.a);
    int r = weft__pool_call(proxy_run, &j); /* (never a thread made here: pool.c's spawner) */
    return r < 0 ? raw(nr, a) : j.ret;
}

#define FUTEX_YIELDS 4

static long trapped_futex(const long a[6]) {
    int cmd = (int)a[1] & FUTEX_CMD_MASK;
    if (cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET) return raw(SYS_futex, a);
    const _Atomic uint32_t *u = (const _Atomic uint32_t *)a[0];
    if (!u || ((uintptr_t)u & 3)) return raw(SYS_futex, a); /* (the kernel's EFAULT / EINVAL) */
    if (atomic_load(u) != (uint32_t)a[2]) return -EAGAIN;
    /* the C library's locks are held for a moment (stdio's list of FILEs
     * while fclose walks it, seen contended by a thread-per-connection
     * server's threads): a few yields let a holder on this carrier, or
     * one about to let go, do so before a pool thread is woken for the
     * wait -- the value moved is the kernel's EAGAIN, which every futex
     * user retries on */
    if (!weft__hook_here()) return raw(SYS_futex, a);
    for (int i = 0; i < FUTEX_YIELDS; i++) {
        weft_yield();
        if (atomic_load(u) != (uint32_t)a[2]) return -EAGAIN;
    }
    /* the kernel's wait, made by the carrier's ring while the vthread
     * parks; where it cannot be (epoll, an older kernel), a pool thread's */
    int64_t deadline = 0;
    const struct timespec *ts = (const struct timespec *)a[3];
    if (ts) {
        if (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000L) return -EINVAL;
        int64_t t = ts->tv_sec > INT64_MAX / 2000000000 ? INT64_MAX / 2 : ts->tv_sec * 1000000000LL + ts->tv_nsec;
        if (cmd == FUTEX_WAIT) { /* relative, CLOCK_MONOTONIC */
            deadline = weft_now() + t;
        } else { /* absolute, on the clock the flag names */
            struct timespec now;
            clock_gettime((int)a[1] & FUTEX_CLOCK_REALTIME ? CLOCK_REALTIME : CLOCK_MONOTONIC, &now);
            deadline = weft_now() + (t - (now.tv_sec * 1000000000LL + now.tv_nsec));
        }
        if (deadline <= weft_now()) return -ETIMEDOUT;
    }
    uint32_t mask = cmd == FUTEX_WAIT_BITSET ? (uint32_t)a[5] : FUTEX_BITSET_MATCH_ANY;
    if (!mask) return -EINVAL;
    long r = weft__futex_wait((const uint32_t *)u, (uint32_t)a[2], mask, ((int)a[1] & FUTEX_PRIVATE_FLAG) != 0, deadline);
    if (r != -ENOSYS) return r;
    return proxied(SYS_futex, a);
}

static long trapped_wait4(const long a[6]) {
    if ((int)a[2] & WNOHANG || !weft__hook_here()) return raw(SYS_wait4, a);
    long b[6] = {a[0], a[1], a[2] | WNOHANG, a[3], 0, 0};
    long r = raw(SYS_wait4, b);
    if (r != 0) return r;
    return proxied(SYS_wait4, a);
}

/* ---- the signal state the frame restores -------------------------------- */

/* (the kernel's masks are 8 bytes -- a[3] says so -- not glibc's 128-byte
 * sigset_t: glibc's own callers pass 8-byte buffers (internal_sigset_t),
 * and the frame's uc_sigmask holds only 8 bytes that mean anything) */
static long trapped_sigmask(ucontext_t *uc, const long a[6]) {
    int how = (int)a[0];
    const uint64_t *set = (const uint64_t *)a[1];
    uint64_t *old = (uint64_t *)a[2];
    if ((size_t)a[3] != sizeof(uint64_t)) return -EINVAL;
    /* a vthread's own mask, not its carrier's (signals.c) */
    if (weft__vsig_on()) return weft__vsig_mask(how, set, old, 1);
    uint64_t cur, next;
    memcpy(&cur, &uc->uc_sigmask, sizeof cur);
    next = cur;
    if (set) {
        uint64_t s = *set; /* (may fault, as the kernel's copy may: a program's bug either way) */
        if (how == SIG_BLOCK) next |= s;
        else if (how == SIG_UNBLOCK) next &= ~s;
        else if (how == SIG_SETMASK) next = s;
        else return -EINVAL;
        /* never blocked: SIGKILL, SIGSTOP, and SIGSYS (the trap's own: see the top) */
        next &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)) | (1ULL << (SIGSYS - 1)));
    }
    if (old) *old = cur;
    memcpy(&uc->uc_sigmask, &next, sizeof next);
    return 0;
}

static long trapped_altstack(ucontext_t *uc, const long a[6]) {
    long r = raw(SYS_sigaltstack, a); /* on this thread, now; the frame then says the same */
    sigaltstack(NULL, &uc->uc_stack);
    return r;
}

/* ---- clone and its kin --------------------------------------------------- */

/* 1: made again at the program's instruction, untrapped (see the top). */
static int clone_again(unsigned long flags, unsigned long stack) {
    return (flags & CLONE_VM) && (!(flags & CLONE_VFORK) || !stack);
}

/* The bytes a vfork keeps of the stack below the program's stack pointer
 * (the signal frame with its xsave area, this handler's frames: a few
 * KiB), and the stack the call is made on. */
#define VFORK_SAVE (32 * 1024)
#define VFORK_ALT (4 * 1024)

/* A vfork, made as one (sud_x86_64.S, weft__sud_vfork, says how the
 * frames survive the child).  The child shares this thread's memory and
 * its TLS block, and goes back to the program's code -- say Python's
 * _posixsubprocess, which then closes and dup2s descriptors, sets its
 * mask and execs -- while the parent's kernel thread, this carrier, waits
 * for the exec or exit.  So for the call's length, in the block: no
 * carrier (weft__self() is NULL there: the child is no vthread and must
 * never park, submit to a ring or touch a queue), every interposer the
 * C library's (as in a handler) and sigaction the kernel's alone (the
 * tables of the program's handlers are the parent's), no selector, nothing acted on at an
 * interposer's return; and this thread's kernel mask is the vthread's
 * (signals.c's, or the frame's), which the child inherits as a kernel
 * child inherits its thread's.  The parent puts all that back.  Measured
 * before, as a fork: test_subprocess's test_leaking_fds_on_error (1,024
 * failed Popens) took 12 s under weft-run against 0.4 s natively -- the
 * fork copied the page tables of every mapping and then paid a
 * copy-on-write fault for each page either side wrote.  A fork again
 * where the buffer cannot be had. */
static long trapped_vfork(ucontext_t *uc) {
    const long long *g = (const long long *)uc->uc_mcontext.gregs;
    char *buf = malloc(VFORK_SAVE + VFORK_ALT);
    if (buf) {
        uint64_t m, old;
        if (weft__vsig_on()) (void)weft__vsig_mask(SIG_BLOCK, NULL, &m, 1);
        else memcpy(&m, &uc->uc_sigmask, sizeof m);
        m &= ~(1ULL << (SIGSYS - 1));
        int masked = syscall(SYS_rt_sigprocmask, SIG_SETMASK, &m, &old, sizeof m) == 0;
        unsigned char *sel = weft__sud_sel, act = weft__vpt_act;
        weft__sud_sel = NULL;
        weft__vpt_act = 0;
        weft__hook_vfork(1);
        weft__carrier *c = weft__carrier_hide();
        long r = weft__sud_vfork(g, buf, VFORK_SAVE, buf + VFORK_SAVE + VFORK_ALT);
        weft__carrier_show(c);
        weft__hook_vfork(0);
        weft__vpt_act = act;
        weft__sud_sel = sel;
        if (masked) syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, sizeof old);
        free(buf);
        if (r != -ENOMEM) return r;
    }
    const long f[6] = {SIGCHLD, 0, 0, 0, 0, 0};
    return weft__sud_clone(SYS_clone, f, g, 0);
}

static long trapped_clone(long nr, const long a[6], ucontext_t *uc, int *again) {
    const long long *g = (const long long *)uc->uc_mcontext.gregs;
    if (nr == SYS_fork) return weft__sud_clone(SYS_fork, a, g, 0);
    if (nr == SYS_vfork) return trapped_vfork(uc);
    unsigned long flags, stack;
    if (nr == SYS_clone3) {
        struct clone_args ca = {0};
        size_t n = (size_t)a[1] < sizeof ca ? (size_t)a[1] : sizeof ca;
        if (!a[0] || n < 64) return raw(nr, a); /* (the kernel's EFAULT / EINVAL) */
        memcpy(&ca, (const void *)a[0], n);
        flags = (unsigned long)ca.flags;
        stack = (unsigned long)ca.stack;
    } else {
        flags = (unsigned long)a[0];
        stack = (unsigned long)a[1];
    }
    if (clone_again(flags, stack)) {
        *again = 1;
        return 0;
    }
    return weft__sud_clone(nr, a, g, stack != 0);
}

/* ---- the handler ---------------------------------------------------------- */

__attribute__((unused)) static void on_sigsys(int sig, siginfo_t *si, void *ucv) {
    ucontext_t *uc = ucv;
    unsigned char *sel = weft__sud_sel;
    if (si->si_code != SYS_USER_DISPATCH || !sel) {
        /* not ours (a seccomp filter's): as if there were no handler */
        struct ksigaction dfl = {(void (*)(int, siginfo_t *, void *))(void (*)(void))SIG_DFL, 0, NULL, 0};
        syscall(SYS_rt_sigaction, sig, &dfl, NULL, 8);
        syscall(SYS_tgkill, getpid(), gettid(), SIGSYS); /* fatal on the way out, as it would have been */
        return;
    }
    sel[0] = 0;
    int saved_errno = errno;
    greg_t *g = uc->uc_mcontext.gregs;
    long nr = si->si_syscall;
    const long a[6] = {g[REG_RDI], g[REG_RSI], g[REG_RDX], g[REG_R10], g[REG_R8], g[REG_R9]};
    long r = 0;
    int again = 0, resume_at_restorer = 0;
    __atomic_fetch_add(&weft__sud_trapped, 1, __ATOMIC_RELAXED); /* (weft_stats.trapped) */
    /* what the dump and weft-top show of it (sched.h: foreign code): the
     * call, the program's syscall instruction (the address after it, as a
     * return address: what the symbolizer takes), the first argument; the
     * previous ones given back at the end (a program's handler that
     * interrupted a trapped call and traps itself nests) */
    weft_thread *me = weft__self();
    uint16_t prev_call = 0;
    const void *prev_pc = NULL;
    uint64_t prev_arg = 0;
    if (me) {
        prev_call = atomic_load_explicit(&me->trap_call, memory_order_relaxed);
        prev_pc = atomic_load_explicit(&me->trap_pc, memory_order_relaxed);
        prev_arg = atomic_load_explicit(&me->trap_arg, memory_order_relaxed);
        atomic_store_explicit(&me->trap_pc, (const void *)(uintptr_t)g[REG_RIP], memory_order_relaxed);
        atomic_store_explicit(&me->trap_arg, (uint64_t)a[0], memory_order_relaxed);
        atomic_store_explicit(&me->trap_call, (uint16_t)(nr + 1), memory_order_release);
        atomic_store_explicit(&me->trap_count, atomic_load_explicit(&me->trap_count, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    }
    switch (nr) {
    case SYS_rt_sigreturn: resume_at_restorer = 1; break;
    case SYS_rt_sigprocmask: r = trapped_sigmask(uc, a); break;
    case SYS_sigaltstack: r = trapped_altstack(uc, a); break;
    case SYS_clone:
    case SYS_clone3:
    case SYS_fork:
    case SYS_vfork: r = trapped_clone(nr, a, uc, &again); break;
    case SYS_futex: r = trapped_futex(a); break;
    case SYS_wait4: r = trapped_wait4(a); break;
    default:
        if (!weft__hook_trapped(nr, a, &r)) r = raw(nr, a);
    }
    if (me) {
        atomic_store_explicit(&me->trap_call, prev_call, memory_order_relaxed);
        atomic_store_explicit(&me->trap_pc, prev_pc, memory_order_relaxed);
        atomic_store_explicit(&me->trap_arg, prev_arg, memory_order_relaxed);
    }
    unsigned char *now = weft__sud_sel;
    if (now != sel) { /* resumed on another carrier: its altstack and mask */
        sigaltstack(NULL, &uc->uc_stack);
        uint64_t m;
        if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, NULL, &m, sizeof m) == 0) {
            m &= ~(1ULL << (SIGSYS - 1));
            memcpy(&uc->uc_sigmask, &m, sizeof m);
        }
    }
    if (resume_at_restorer) {
        g[REG_RIP] = (greg_t)(uintptr_t)weft__sud_restorer;
        now[0] = 1;
    } else if (again) {
        g[REG_RIP] -= 2; /* the syscall instruction: 0f 05 */
        g[REG_RAX] = nr;
        now[1] = 1; /* armed again at the next interposer's return */
    } else {
        g[REG_RAX] = r;
        now[0] = 1;
    }
    errno = saved_errno;
}

/* ---- preemption ------------------------------------------------------------
 *
 * The program's threads, under the trap, are preemptible as the kernel's
 * are: sched/spares.c's monitor sends SIGURG (Go's choice: rarely used,
 * ignored by default) to a carrier whose foreign own-TLS vthread has
 * computed without a switch for WEFT__PREEMPT_NS, and this handler yields
 * it (weft_yield, from inside the handler, as the trap parks from inside
 * its own) -- but only where it is the program's code that runs: the
 * selector armed (1: weft's own code, and the program's handlers, run
 * with it 0), no re-arm pending (sud[1]), the interrupted instruction
 * outside libweft's own text (weft's code between a switch and the
 * selector's store), and the vthread foreign with its own TLS (so its
 * errno, its locks' owners and glibc's state go with it to any carrier).
 * Where weft's own code runs instead (an interposer: a program that
 * spends its time in pthread_create, or in reads weft completes at once,
 * spends it there), the vthread's weft__vpt_act is marked, and the
 * interposer's return to the program's code (TRAP_SCOPE's end:
 * hook/threads.c's weft__vpt_cancel_point) yields -- seen: a main that
 * created a million threads held its carrier for all 19 s of it, the
 * signal landing in weft's code every time, and the threads it made
 * waited for the other carrier alone.  Anywhere else (a carrier between
 * vthreads, a vthread of weft's own) the signal is ignored; the monitor
 * tries again a look later.  What the program holds there -- a pthread mutex, malloc's
 * arena lock -- it holds as a preempted kernel thread would: another
 * vthread that wants it parks (the futex trap) until it runs again.  The
 * kernel's action for SIGURG is this handler for good: a program's
 * sigaction for it is kept by hook.c and run from here for a SIGURG that
 * is not the monitor's (weft__hook_dispatch).  SA_NODEFER, as SIGSYS:
 * the carrier's mask must not carry SIGURG blocked into the next vthread
 * it runs; SA_RESTART: a carrier the signal finds in a system call of
 * weft's own retries it. */
static uintptr_t text_lo, text_hi; /* libweft's code: [lo, hi) */

static int find_text(struct dl_phdr_info *info, size_t size, void *base) {
    (void)size;
    if ((void *)info->dlpi_addr != base) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (!text_lo || lo < text_lo) text_lo = lo;
        if (hi > text_hi) text_hi = hi;
    }
    return 1;
}

static void on_preempt(int sig, siginfo_t *si, void *ucv) {
    if (si->si_code != SI_QUEUE || si->si_value.sival_ptr != (void *)&weft__preempt_cookie) {
        int e = errno;
        weft__hook_dispatch(sig, si, ucv); /* the program's SIGURG */
        errno = e;
        return;
    }
    ucontext_t *uc = ucv;
    unsigned char *sel = weft__sud_sel;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    weft_thread *t = weft__self();
    if (!sel || !t || !t->tls || !atomic_load_explicit(&t->foreign, memory_order_relaxed)) return;
    if (sel[0] != 1 || sel[1] || (ip >= text_lo && ip < text_hi)) {
        /* weft's code runs: the next interposer's return yields */
        __atomic_fetch_or(&weft__vpt_act, WEFT__ACT_PREEMPT, __ATOMIC_RELAXED);
        return;
    }
    sel[0] = 0;
    int e = errno;
    weft__yield_polled();
    unsigned char *now = weft__sud_sel;
    if (now != sel) { /* resumed on another carrier: its altstack and mask (as on_sigsys) */
        sigaltstack(NULL, &uc->uc_stack);
        uint64_t m;
        if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, NULL, &m, sizeof m) == 0) {
            m &= ~(1ULL << (SIGSYS - 1));
            memcpy(&uc->uc_sigmask, &m, sizeof m);
        }
    }
    errno = e;
    now[0] = 1;
}

/* SIGURG becomes weft's (the program's action kept by hook.c); 0 or
 * -errno.  Off with WEFT_PREEMPT=0. */
__attribute__((unused)) static int preempt_start(void) { /* (a sanitizer build has no trap) */
    const char *v = getenv("WEFT_PREEMPT");
    if (v && !strcmp(v, "0")) return 0;
    Dl_info di;
    if (!dladdr((void *)on_preempt, &di) || !di.dli_fbase) return 0;
    dl_iterate_phdr(find_text, di.dli_fbase);
    if (!text_lo) return 0;
    struct ksigaction was;
    if (syscall(SYS_rt_sigaction, SIGURG, NULL, &was, 8) != 0) return -errno;
    struct sigaction w;
    memset(&w, 0, sizeof w);
    w.sa_sigaction = was.handler;
    w.sa_flags = (int)(was.flags & ~(unsigned long)KSA_RESTORER);
    memcpy(&w.sa_mask, &was.mask, sizeof was.mask);
    weft__hook_take_signal(SIGURG, &w);
    struct ksigaction sa = {on_preempt, SA_SIGINFO | SA_NODEFER | SA_RESTART | KSA_RESTORER, weft__sud_restorer, 0};
    if (syscall(SYS_rt_sigaction, SIGURG, &sa, NULL, 8) != 0) return -errno;
    weft__preempt_enable(SIGURG);
    return 0;
}

#endif /* __x86_64__ */

/* ---- on and off ----------------------------------------------------------- */

int weft__trap_start(int cfg_trap, int hooks_on) {
    long on = 0;
    if (cfg_trap) on = cfg_trap > 0;
    else {
        const char *v = getenv("WEFT_TRAP");
        on = v && *v && strcmp(v, "0") != 0;
    }
    if (!on) return 0;
    if (!hooks_on) {
        fprintf(stderr, "weft: the system call trap was asked for, but the hooks are off (WEFT_HOOK, "
                        "weft_runtime_opts.hook): it parks through them, so it stays off\n");
        return 0;
    }
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    fprintf(stderr, "weft: the system call trap was asked for, but a sanitizer build cannot have it (its runtime's "
                    "own system calls would trap): calls the C library makes itself hold their carriers\n");
    return 0;
#elif !defined(__x86_64__)
    /* Linux implements syscall user dispatch on x86 alone (other
     * architectures' entry code never consults the selector; the kernel
     * says so since 2026 with ARCH_SUPPORTS_SYSCALL_USER_DISPATCH, x86's
     * only), and a seccomp filter is no substitute ("How", above) */
    fprintf(stderr, "weft: the system call trap was asked for, but Linux's syscall user dispatch, which it rests on, "
                    "exists on x86-64 only: calls the C library makes itself hold their carriers\n");
    return 0;
#else
    /* the kernel's support, asked of this thread and given back */
    unsigned char probe = 0;
    int e = weft__sud_arm(&probe);
    if (e < 0) {
        fprintf(stderr, "weft: the system call trap was asked for, but this kernel refuses syscall user dispatch "
                        "(%s; Linux 5.11+): calls the C library makes itself hold their carriers\n",
                strerror(-e));
        return 0;
    }
    weft__sud_disarm();
    if ((e = weft__pool_spawner_start()) < 0) return e;
    struct ksigaction sa = {on_sigsys, SA_SIGINFO | SA_NODEFER | KSA_RESTORER, weft__sud_restorer, 0};
    if (syscall(SYS_rt_sigaction, SIGSYS, &sa, NULL, 8) != 0) return -errno;
    atomic_store(&trap_on, 1);
    if ((e = preempt_start()) < 0)
        fprintf(stderr, "weft: no preemption of the program's threads: SIGURG's action: %s\n", strerror(-e));
    return 1;
#endif
}

void weft__trap_stop(void) {
#if defined(__x86_64__)
    atomic_store(&trap_on, 0);
#endif
    weft__preempt_enable(0);
}
