/*
 * Signals as an API (weft/signal.h; Go's os/signal.Notify).
 *
 * What.  weft_signal_notify(set) starts catching the signals in set;
 * weft_signal_wait(set, deadline) parks the calling thread until one of
 * them has arrived and returns its number; weft_signal_reset(set) gives
 * them back their default action.  Arrivals are counted, per signal, so
 * none is lost between waits (the kernel still merges two of one standard
 * signal that arrive before either is delivered, as it always does).
 *
 * How.  The handler (sigaction, SA_RESTART, every signal masked while it
 * runs) does only what is async-signal-safe: it adds one to pending[sig]
 * and writes 1 to an eventfd -- in whichever thread the kernel picked, a
 * carrier, the monitor, a platform thread of the program.  A daemon
 * vthread, the relay, reads the eventfd (weft_read: it parks) and
 * broadcasts a weft_cond under its mutex.  A waiter, under that mutex,
 * takes one pending arrival of a signal in its set (the lowest number
 * first) or waits on the cond with its deadline.  No wakeup is lost: an
 * arrival counted after a waiter looked is followed by the relay's
 * broadcast, which needs the mutex the waiter holds until it waits.
 *
 * Why not signalfd: it needs the signals blocked in every thread, the
 * carriers included, and so before the runtime starts -- a rule no library
 * call can keep for its caller (weft-httpd did exactly that by hand).  A
 * handler works whatever the masks, as Go's runtime does it.
 *
 * Refused (-EINVAL): SIGKILL and SIGSTOP (nobody catches them), and the
 * synchronous faults SIGSEGV, SIGBUS, SIGILL, SIGFPE, which mean the
 * faulting thread cannot go on (weft's own stack-overflow handler is
 * SIGSEGV's).  A signal blocked in every thread never arrives: notify does
 * not change masks.
 *
 * State is process-wide and made once: the eventfd and the relay on the
 * first notify (under `setup`), the counters static.  A fork child inherits
 * the handlers and the eventfd but not the relay (no vthread crosses a
 * fork): its waits return -ECHILD until it calls weft_signal_notify, which
 * starts a relay of its own (the eventfd is the parent's too: a wake the
 * other process's arrival caused finds nothing pending, and waits again).
 */
#define _GNU_SOURCE
#include "../sched/sched.h"

#include <weft.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define NSIGS 65 /* 1 .. 64 */

static struct {
    pthread_mutex_t setup; /* notify and reset, one at a time */
    int efd;
    _Atomic unsigned fork_gen; /* weft__fork_gen() when the relay started (written under setup) */
    _Atomic uint64_t relay_at; /* weft__runtime_generation() of the runtime it runs in (ditto) */
    _Atomic int relay_up;
    _Atomic unsigned pending[NSIGS];
    _Atomic uint64_t caught; /* bit sig: a handler of ours is installed */
    weft_mutex m;
    weft_cond c;
} S = {.setup = PTHREAD_MUTEX_INITIALIZER, .efd = -1, .m = WEFT_MUTEX_INIT, .c = WEFT_COND_INIT};

/* (installed with weft__sigaction_now: it runs at once under TSan too,
 * libc/real.h) */
WEFT__SIGNAL_NOW static void on_signal(int sig) {
    int saved = errno;
    if (sig > 0 && sig < NSIGS) atomic_fetch_add_explicit(&S.pending[sig], 1, memory_order_release);
    uint64_t one = 1;
    ssize_t r = weft__signal_write(S.efd, &one, sizeof one); /* EAGAIN: the counter is full, already readable */
    (void)r;
    errno = saved;
}

static void *relay(void *unused) {
    (void)unused;
    for (;;) {
        uint64_t v;
        ssize_t r = weft_read(S.efd, &v, sizeof v);
        if (r < 0 && r != -EAGAIN && r != -EINTR) { /* (the eventfd is gone: nothing more will come) */
            fprintf(stderr, "weft: signals: reading the eventfd failed (%s): weft_signal_wait waits for its deadline only\n",
                    strerror((int)-r));
            break;
        }
        weft_mutex_lock(&S.m);
        weft_cond_broadcast(&S.c);
        weft_mutex_unlock(&S.m);
    }
    return NULL;
}

/* The signals of set we may catch, as a bit mask; -EINVAL if set holds one
 * we refuse, or is NULL or empty. */
static int64_t mask_of(const sigset_t *set) {
    if (!set) return -EINVAL;
    uint64_t m = 0;
    for (int sig = 1; sig < NSIGS; sig++) {
        int in = sigismember(set, sig);
        if (in <= 0) continue;
        if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE)
            return -EINVAL;
        m |= 1ull << (sig - 1);
    }
    return m ? (int64_t)m : -EINVAL;
}

/* The eventfd and this runtime's relay (setup held).  A fork child makes
 * an eventfd of its own (else the parent's relay and its own would take
 * each other's wakes); a child, or a runtime started again after
 * weft_shutdown (which abandoned the daemon relay), starts a relay. */
static int relay_locked(void) {
    unsigned gen = weft__fork_gen();
    uint64_t at = weft__runtime_generation();
    if (atomic_load(&S.relay_up) && atomic_load(&S.fork_gen) == gen && atomic_load(&S.relay_at) == at) return 0;
    if (S.efd < 0 || (atomic_load(&S.relay_up) && atomic_load(&S.fork_gen) != gen)) {
        int fd = weft__fd_own(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (fd < 0) return -errno;
        int old = S.efd;
        S.efd = fd;
        weft__fd_close_own(old);
    }
    weft_thread_opts o = {.name = "signals", .daemon = 1};
    int r = weft_spawn(NULL, relay, NULL, &o);
    if (r < 0) return r;
    atomic_store(&S.fork_gen, gen);
    atomic_store(&S.relay_at, at);
    atomic_store(&S.relay_up, 1);
    return 0;
}

int weft_signal_notify(const sigset_t *set) {
    int64_t m = mask_of(set);
    if (m < 0) return (int)m;
    int r = weft__ensure_init();
    if (r < 0) return r;
    pthread_mutex_lock(&S.setup);
    if ((r = relay_locked()) < 0) goto out;
    for (int sig = 1; sig < NSIGS; sig++) {
        if (!((uint64_t)m & 1ull << (sig - 1))) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigfillset(&sa.sa_mask);
        if (weft__sigaction_now(sig, &sa, NULL) < 0) {
            r = -errno;
            goto out;
        }
        atomic_fetch_or(&S.caught, 1ull << (sig - 1));
    }
out:
    pthread_mutex_unlock(&S.setup);
    return r;
}

int weft_signal_reset(const sigset_t *set) {
    int64_t m = mask_of(set);
    if (m < 0) return (int)m;
    pthread_mutex_lock(&S.setup);
    int r = 0;
    for (int sig = 1; sig < NSIGS; sig++) {
        if (!((uint64_t)m & 1ull << (sig - 1)) || !(atomic_load(&S.caught) & 1ull << (sig - 1))) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_DFL;
        if (weft__sigaction_now(sig, &sa, NULL) < 0 && !r) r = -errno;
        atomic_fetch_and(&S.caught, ~(1ull << (sig - 1)));
        atomic_store(&S.pending[sig], 0); /* arrivals nobody took are dropped, as Go's Reset */
    }
    pthread_mutex_unlock(&S.setup);
    return r;
}

/* One pending arrival of a signal in m taken, lowest first; 0: none. */
static int take(uint64_t m) {
    for (int sig = 1; sig < NSIGS; sig++) {
        if (!(m & 1ull << (sig - 1))) continue;
        unsigned n = atomic_load_explicit(&S.pending[sig], memory_order_acquire);
        while (n && !atomic_compare_exchange_weak(&S.pending[sig], &n, n - 1)) {
        }
        if (n) return sig;
    }
    return 0;
}

int weft__signal_wait_at(const sigset_t *set, int64_t deadline_ns, const char *file, int line) {
    int64_t m = mask_of(set);
    if (m < 0) return (int)m;
    if (((uint64_t)m & atomic_load(&S.caught)) != (uint64_t)m) return -EINVAL; /* notify first */
    if (atomic_load(&S.fork_gen) != weft__fork_gen()) return -ECHILD;
    int r = weft__ensure_init();
    if (r < 0) return r;
    if (atomic_load(&S.relay_at) != weft__runtime_generation()) { /* the runtime was started again */
        pthread_mutex_lock(&S.setup);
        r = relay_locked();
        pthread_mutex_unlock(&S.setup);
        if (r < 0) return r;
    }
    r = weft__mutex_lock_at(&S.m, deadline_ns, file, line);
    if (r < 0) return r;
    int sig;
    while (!(sig = take((uint64_t)m))) {
        r = weft__cond_wait_at(&S.c, &S.m, deadline_ns, file, line);
        if (r < 0) break;
    }
    weft_mutex_unlock(&S.m);
    return sig ? sig : r;
}

int(weft_signal_wait)(const sigset_t *set, int64_t deadline_ns) {
    return weft__signal_wait_at(set, deadline_ns, NULL, 0);
}
