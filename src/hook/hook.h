/*
 * The hook layer's entry points for the runtime (runtime/runtime.c).  The
 * interposers themselves (hook.c, locks.c) are reached by the dynamic
 * linker, not by a declaration; the C library's own functions are in libc/real.h.
 */
#ifndef WEFT_HOOK_H
#define WEFT_HOOK_H

#include <signal.h>
#include <stdint.h>

struct weft_thread;

/* weft_init: switch the hooks on or off for this runtime (cfg->hook); and
 * weft_shutdown: off */
void weft__hook_start(int cfg_hook);
void weft__hook_stop(void);
/* what weft__hook_start(cfg_hook) will decide: 1 on, 0 off */
int weft__hook_wanted(int cfg_hook);

/* For the interposers of locks.c: the hooks are on and the caller is a
 * vthread, not in a signal handler (a call may park); the hooks are on and
 * the caller not in a handler (any thread). */
int weft__hook_here(void);
int weft__hook_on(void);

/* Virtual pthreads (threads.c): switched on for a runtime by weft_init
 * (cfg->virtual_pthreads; hooks_on: the hooks' decision; stack: the
 * runtime's default stack size), off at weft_shutdown.  Returns 1 on, 0
 * off. */
int weft__threads_start(int cfg, int hooks_on, size_t stack);
void weft__threads_stop(void);
/* preload.c: runs the program's main as a virtual pthread's body (a
 * stop frame for pthread_exit; registered for join and names) */
int weft__threads_main(int (*main_fn)(int, char **, char **), int argc, char **argv, char **envp);
/* TRAP_SCOPE's end, where weft__vpt_act is set: signals sent to the
 * vthread alone are raised, and a pthread_cancel that ended the call's
 * wait is acted on (glibc's pthread_testcancel) */
void weft__vpt_cancel_point(void);
/* hook.c: raises sig on the calling thread (on a vthread: its carrier,
 * before this returns), with si_code code (SI_USER, SI_TKILL); 0 or
 * -errno */
int weft__hook_raise_here(int sig, int code);
/* hook.c: a vfork child runs on this thread's TLS block (trap.c), from
 * on 1 to on 0: every interposer the C library's, as in a signal handler,
 * and its sigactions its own, weft's tables untouched */
void weft__hook_vfork(int on);
/* hook.c: the calling thread is inside the trap's handler */
int weft__hook_in_trap(void);
/* hook.c: the program's handler for sig has SA_RESTART */
int weft__hook_sig_restart(int sig);

/* A vthread's signals (signals.c): on with virtual pthreads
 * (weft__vsig_start, from threads.c); weft__vsig_on: on, and the caller a
 * vthread. */
void weft__vsig_start(int on);
int weft__vsig_on(void);
/* its mask: how, *set, *old in the kernel's layout; in_trap: from the
 * trap's handler; 0 or -errno */
int weft__vsig_mask(int how, const uint64_t *set, uint64_t *old, int in_trap);
/* the trampolines' question: does sig (siginfo si) run on this thread
 * now?  0: kept for a vthread or the process */
int weft__vsig_here(int sig, const siginfo_t *si);
/* raises on t (the caller) what is kept for it and it no longer blocks */
void weft__vsig_raise_pending(struct weft_thread *t);
int weft__vsig_suspend(const sigset_t *m);
long weft__vsig_trapped_wait(const long a[6]);
long weft__vsig_trapped_pending(const long a[6]);
void weft__vsig_fork_prepare(void);
void weft__vsig_fork_child(void);
/* threads.c: where a process-directed signal goes (signals.c, "The
 * model"): 1 a sigwait waiting for it was woken; 2 a vthread that does not
 * block it -- given it if hand (taken from the process's with claim) --
 * or 3, taken, but that vthread is in no wait a signal ends: the caller
 * runs it; 0 every vthread blocks it */
int weft__vpt_route(int sig, int hand, int (*claim)(int sig));
/* threads.c: tgkill/tkill of tid, a vthread's: as pthread_kill of it (0
 * or -errno); 1: not one of weft's tids */
long weft__vpt_tid_kill(long tid, int sig);
/* hook.c: the parks of sleep (-EINTR when a handler ends them), a SIG_DFL
 * signal's catcher (signals.c, "Default actions") */
int weft__hook_sleep_until(int64_t dl, const char *what);
void weft__hook_catch_default(uint64_t set);
int weft__hook_caught(int sig);
void weft__hook_default_action(int sig);

/* hook.c: signal sig is weft's from now on (trap.c's preemption): was,
 * the kernel's action until now, is kept as the program's, and
 * weft__hook_dispatch runs that action for a sig that is not weft's */
void weft__hook_take_signal(int sig, const struct sigaction *was);
void weft__hook_dispatch(int sig, siginfo_t *si, void *uc);

/* The system call trap (trap.c): switched on for a runtime by weft_init
 * (cfg->trap), after the hooks; 1 on, 0 off (asked to be off, or the
 * kernel or build cannot: said on stderr), -errno.  Off again at
 * weft_shutdown. */
int weft__trap_start(int cfg_trap, int hooks_on);
void weft__trap_stop(void);
/* hook.c: a trapped system call nr that one of its interposers stands
 * for, made through that interposer: 1 and *ret (a result or -errno), or
 * 0 (not one of them: the caller makes it as it is). */
int weft__hook_trapped(long nr, const long a[6], long *ret);

/* An interposer runs weft's code: its system calls are not trapped
 * (trap.c's selector, libc/real.h); on the way out the program's code
 * traps again -- and a vthread whose trap was let off for one call
 * (trap.c: sud[1]) is armed again here. */
extern __thread __attribute__((tls_model("initial-exec"), visibility("hidden"))) unsigned char weft__vpt_act;
/* its bits: look at what is kept for the thread (signals, a cancel); a
 * preemption that found weft's own code running (trap.c) yields here */
#define WEFT__ACT_LOOK 1
#define WEFT__ACT_PREEMPT 2
static inline void weft__trap_scope_end(unsigned char *o) {
    unsigned char *s = weft__sud_sel;
    if (s) {
        if (*o) s[0] = 1;
        else if (__builtin_expect(s[1], 0)) s[1] = 0, s[0] = 1;
    }
    /* a pthread_cancel ended this call's wait: acted on as it returns,
     * once what it allocated is freed (threads.c, "Cancellation") */
    if (__builtin_expect(__atomic_load_n(&weft__vpt_act, __ATOMIC_RELAXED), 0)) weft__vpt_cancel_point();
}
#define TRAP_SCOPE unsigned char weft_trap_o_ __attribute__((cleanup(weft__trap_scope_end))) = weft__sud_allow()

#endif /* WEFT_HOOK_H */
