/*
 * Locks weft did not write park their vthread: pthread mutexes and
 * condition variables, C11 mtx_t and cnd_t (and so C++'s std::mutex and
 * std::condition_variable, which call the pthread ones).
 *
 * What.  pthread_mutex_lock, _timedlock, _clocklock and _unlock;
 * pthread_cond_wait, _timedwait, _clockwait, _signal and _broadcast;
 * mtx_lock, mtx_timedlock, mtx_unlock, cnd_wait, cnd_timedwait,
 * cnd_signal and cnd_broadcast; sem_wait, sem_timedwait, sem_clockwait and
 * sem_post; pthread_rwlock_rdlock, _wrlock, their timed and clock forms,
 * and _unlock -- defined here, with default visibility,
 * in front of the C library's, as hook.c's are (its top comment: how a
 * program's calls reach them, the table of the C library's own in
 * libc/real.h).  With the hooks off each is the C library's after a load
 * and a branch.
 *
 * A mutex.  Hooks on and the caller a vthread: the C library's trylock,
 * a short spin, then a wait in the parking lot (sync/lot.h) keyed by the
 * mutex's address, unless a trylock made after it queued takes the mutex;
 * woken, it tries again (a woken waiter may lose to a newcomer, as with
 * glibc's own mutex).  The owner, the count of a recursive mutex, the
 * errors are the C library's own: trylock took it.  An error-checking
 * mutex the caller already holds answers EDEADLK when the vthread has its
 * own TLS (weft.h, "Own TLS"): the owner glibc records is then the
 * vthread.  Without, it is the carrier, which other vthreads share: a
 * relock then waits, rather than tell another vthread's wait EDEADLK.  Every unlock, by any thread, with hooks on,
 * wakes one waiter of that address after the C library's unlock (only a
 * vthread waits there, and weft_shutdown turns the hooks off once the
 * last one that is not a daemon has ended); the C library's unlock itself
 * wakes the kernel threads that wait in futex(2), as ever.  A platform
 * thread's lock is the C library's: it waits in the kernel, and the
 * unlocks here reach it.  PI, priority-protected, robust and
 * process-shared mutexes are the C library's for every caller: their
 * owner is the kernel's business, or another process's.
 *
 * A condition variable.  Hooks on, every caller -- vthread or platform
 * thread -- waits here, in the lot keyed by the variable's address: its
 * record is queued before the mutex is released (so a signal made under
 * the mutex after that finds it), then it parks (a platform thread sleeps
 * on its park word), then takes the mutex again as above.  Platform
 * threads wait here too because glibc's own pthread_cond_wait releases the
 * mutex inside the C library, past these unlocks: a vthread waiting for
 * that mutex would never hear of it.  pthread_cond_signal and _broadcast
 * wake one or all of the lot's waiters -- hooks on or not, so that one
 * that began its wait before weft_shutdown turned them off still hears
 * it -- and call the C library's too, for
 * a thread that began a wait in it before the hooks went on (with none
 * there it reads one word).  A wake may so reach two waiters: POSIX allows
 * such spurious wake-ups, and code waits in a loop for them.  A
 * process-shared condition variable is the C library's (its waiters may
 * be in another process).  The variable's own words are never written
 * here: pthread_cond_destroy finds it as it was initialised.  Its clock
 * (pthread_condattr_setclock) is read from glibc's __wrefs word, bit 1.
 *
 * ThreadSanitizer builds leave all this out (libc/real.h, WEFT__LOCK_FUNCS):
 * TSan intercepts these functions itself, ahead of a shared libweft.
 *
 * What it does not do.  A wait here is not a cancellation point for
 * pthread_cancel, and weft_cancel does not end it (a lock cannot fail
 * with ECANCELED): a cancelled vthread's deadline, if any, does.  glibc's
 * internal locks (stdio's, malloc's) and barriers still wait in futex(2)
 * (issue 26).  Semaphores and rwlocks wait as a mutex does, with their
 * try as the lot's `still` (below); a process-shared one (sem_open's,
 * pshared) is the C library's.  Hooks turned on while a platform
 * thread waits in the C library's condition variable: its signal still
 * reaches it (above); one waiting in glibc's mutex is woken by glibc.
 */
#define _GNU_SOURCE
#include "hook.h"

#include "../arch/arch.h"
#include "../sched/sched.h"
#include "../sync/lot.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <threads.h>
#include <time.h>

/* ThreadSanitizer builds: not built (libc/real.h says why); the locks are
 * the C library's, through TSan's interceptors, and block as ever */
#ifndef WEFT_TSAN

#define HOOK_API __attribute__((visibility("default"), noinline))

/* glibc's mutex kinds (nptl's pthreadP.h): the type in the low 2 bits */
#define KIND_TYPE_MASK 3
#define KIND_ROBUST 16
#define KIND_PI 32
#define KIND_PP 64
#define KIND_PSHARED 128
/* glibc's __wrefs word of a condition variable */
#define WREFS_PSHARED 1
#define WREFS_MONOTONIC 2

#define SPINS 64

/* The calling vthread has its own TLS: the owner glibc records is it, not
 * its carrier (without, a "self-deadlock" may be another vthread's hold on
 * the same carrier: that one waits, it is not told EDEADLK). */
static int own_tls(void) {
    weft_thread *t = weft__self();
    return t && t->tls;
}

static int mutex_kind(const pthread_mutex_t *m) { return __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED); }

static int still_locked(const void *key, void *arg) {
    (void)arg;
    return __atomic_load_n(&((const pthread_mutex_t *)key)->__data.__lock, __ATOMIC_RELAXED) != 0;
}

/* The weft deadline (weft_now's clock) for an absolute time on clk; 0 for
 * none; -EINVAL for a bad timespec or clock. */
static int64_t deadline_of(clockid_t clk, const struct timespec *abs) {
    if (!abs) return 0;
    if (abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000L) return -EINVAL;
    if (clk != CLOCK_REALTIME && clk != CLOCK_MONOTONIC) return -EINVAL;
    struct timespec now;
    clock_gettime(clk, &now);
    int64_t left = (int64_t)(abs->tv_sec - now.tv_sec) * 1000000000 + (abs->tv_nsec - now.tv_nsec);
    int64_t t = weft_now();
    if (left <= 0) return t > 0 ? t : 1; /* past: one try, then ETIMEDOUT */
    return left > INT64_MAX - t ? 0 : t + left;
}

/* Every wait here has one shape: the C library's try, a short spin, then a
 * lot wait whose `still` is the try itself, made after the record is
 * queued (lot.h): taken there, the wait is over. */
typedef int (*try_fn)(void *obj); /* 0, busy, or another error */
struct attempt {
    try_fn try;
    int busy, got, err;
};
static int still_busy(const void *key, void *arg) {
    struct attempt *a = arg;
    int r = a->try((void *)key);
    if (r == a->busy) return 1;
    a->got = 1;
    a->err = r;
    return 0;
}

static int lot_acquire(void *obj, try_fn try, int busy, clockid_t clk, const struct timespec *abs, int why) {
    int64_t deadline = -1;
    for (int spins = 0;;) {
        int r = try(obj);
        if (r != busy) return r;
        if (spins++ < SPINS) {
            weft__cpu_relax();
            continue;
        }
        if (deadline < 0 && (deadline = deadline_of(clk, abs)) < 0) return EINVAL;
        struct attempt a = {try, busy, 0, 0};
        weft__lot_waiter lw;
        if (weft__lot_enter(&lw, obj, still_busy, &a) != 0) {
            if (a.got) return a.err;
        } else if (weft__lot_park(&lw, deadline, why, obj) == -ETIMEDOUT) {
            r = try(obj); /* a last try */
            return r == busy ? ETIMEDOUT : r;
        }
        spins = 0;
    }
}

static int mutex_try(void *m) { return pthread_mutex_trylock(m); }

/* A vthread's lock of m (hooks on, a kind the lot serves), until abs on
 * clk (NULL: none): 0, ETIMEDOUT, EDEADLK, or the C library's error. */
static int vt_lock(pthread_mutex_t *m, clockid_t clk, const struct timespec *abs) {
    int r = pthread_mutex_trylock(m);
    if (r != EBUSY) return r;
    /* its own (it stays so while we wait): told at once, with own TLS */
    if ((mutex_kind(m) & KIND_TYPE_MASK) == PTHREAD_MUTEX_ERRORCHECK && own_tls() &&
        __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED) == weft__tls_tid())
        return EDEADLK;
    return lot_acquire(m, mutex_try, EBUSY, clk, abs, WEFT__WHY_PMUTEX);
}

/* Whether the lot serves this caller's lock of m. */
static int lot_lock(const pthread_mutex_t *m) {
    return weft__hook_here() && !(mutex_kind(m) & (KIND_ROBUST | KIND_PI | KIND_PP | KIND_PSHARED));
}

HOOK_API int pthread_mutex_lock(pthread_mutex_t *m) {
    TRAP_SCOPE;
    if (!lot_lock(m)) return weft__libc.pthread_mutex_lock(m);
    return vt_lock(m, CLOCK_REALTIME, NULL);
}

HOOK_API int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abs) {
    TRAP_SCOPE;
    if (!lot_lock(m)) return weft__libc.pthread_mutex_timedlock(m, abs);
    return vt_lock(m, CLOCK_REALTIME, abs);
}

HOOK_API int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk, const struct timespec *abs) {
    TRAP_SCOPE;
    if (!lot_lock(m)) return weft__libc.pthread_mutex_clocklock(m, clk, abs);
    return vt_lock(m, clk, abs);
}

HOOK_API int pthread_mutex_unlock(pthread_mutex_t *m) {
    TRAP_SCOPE;
    int r = weft__libc.pthread_mutex_unlock(m);
    /* a recursive mutex still held, or taken again at once: its holder's
     * unlock wakes (lot.h: the wake's fence and look come after the store) */
    if (r == 0 && weft__hook_on() && !still_locked(m, NULL)) weft__lot_wake(m, 1);
    return r;
}

/* ---- condition variables ------------------------------------------------- */

static unsigned cond_wrefs(const pthread_cond_t *c) { return __atomic_load_n(&c->__data.__wrefs, __ATOMIC_RELAXED); }

/* A wait on c in the lot, m released meanwhile; 0, ETIMEDOUT, or the
 * unlock's error (m not held: EPERM for an error-checking mutex). */
static int lot_cond_wait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *abs) {
    int64_t deadline = deadline_of(clk, abs);
    if (deadline < 0) return EINVAL;
    weft__lot_waiter lw;
    (void)weft__lot_enter(&lw, c, NULL, NULL); /* queued before m is let go */
    int r = pthread_mutex_unlock(m);             /* (this file's: it wakes m's waiters) */
    if (r != 0) {
        weft__lot_leave(&lw);
        return r;
    }
    r = weft__lot_park(&lw, deadline, WEFT__WHY_PCOND, c);
    int e = pthread_mutex_lock(m);
    if (e != 0) return e;
    return r == -ETIMEDOUT ? ETIMEDOUT : 0;
}

/* Whether the lot serves a wait on c. */
static int lot_cond(const pthread_cond_t *c) { return weft__hook_on() && !(cond_wrefs(c) & WREFS_PSHARED); }

static clockid_t cond_clock(const pthread_cond_t *c) {
    return (cond_wrefs(c) & WREFS_MONOTONIC) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
}

HOOK_API int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    TRAP_SCOPE;
    if (!lot_cond(c)) return weft__libc.pthread_cond_wait(c, m);
    return lot_cond_wait(c, m, CLOCK_REALTIME, NULL);
}

HOOK_API int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *abs) {
    TRAP_SCOPE;
    if (!lot_cond(c)) return weft__libc.pthread_cond_timedwait(c, m, abs);
    return lot_cond_wait(c, m, cond_clock(c), abs);
}

HOOK_API int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk, const struct timespec *abs) {
    TRAP_SCOPE;
    if (!lot_cond(c)) return weft__libc.pthread_cond_clockwait(c, m, clk, abs);
    return lot_cond_wait(c, m, clk, abs);
}

/* The lot's waiters of c are woken whether the hooks are on or not: a
 * platform thread that began its wait here before weft_shutdown turned
 * them off still hears the signal (with none queued: a fence and a load). */
HOOK_API int pthread_cond_signal(pthread_cond_t *c) {
    if (!(cond_wrefs(c) & WREFS_PSHARED)) weft__lot_wake(c, 1);
    return weft__libc.pthread_cond_signal(c);
}

HOOK_API int pthread_cond_broadcast(pthread_cond_t *c) {
    TRAP_SCOPE;
    if (!(cond_wrefs(c) & WREFS_PSHARED)) weft__lot_wake(c, INT_MAX);
    return weft__libc.pthread_cond_broadcast(c);
}

/* ---- semaphores and rwlocks ------------------------------------------------ */

/* glibc's sem_t (its new_sem: a 64-bit value+waiters word, then `private`:
 * its FUTEX_PRIVATE, 0, for a semaphore of one process; FUTEX_SHARED, 128,
 * for a process-shared one -- read off sem_init(&s, 0 / 1, 0) on glibc
 * 2.36; the test that shows a wait parks fails on a mistake here) */
static int sem_private(const sem_t *s) { return __atomic_load_n(&((const int *)(const void *)s)[2], __ATOMIC_RELAXED) == 0; }
static int sem_try(void *s) { return sem_trywait(s) == 0 ? 0 : errno; }

static int lot_sem(const sem_t *s) { return weft__hook_here() && sem_private(s); }
static int sem_result(int r) {
    if (r == 0) return 0;
    errno = r;
    return -1;
}

HOOK_API int sem_wait(sem_t *s) {
    TRAP_SCOPE;
    if (!lot_sem(s)) return weft__libc.sem_wait(s);
    return sem_result(lot_acquire(s, sem_try, EAGAIN, CLOCK_REALTIME, NULL, WEFT__WHY_PSEM));
}

HOOK_API int sem_timedwait(sem_t *restrict s, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_sem(s)) return weft__libc.sem_timedwait(s, abs);
    return sem_result(lot_acquire(s, sem_try, EAGAIN, CLOCK_REALTIME, abs, WEFT__WHY_PSEM));
}

HOOK_API int sem_clockwait(sem_t *restrict s, clockid_t clk, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_sem(s)) return weft__libc.sem_clockwait(s, clk, abs);
    return sem_result(lot_acquire(s, sem_try, EAGAIN, clk, abs, WEFT__WHY_PSEM));
}

/* A post wakes one of the lot's waiters whatever the hooks say (as a
 * condition variable's signal). */
HOOK_API int sem_post(sem_t *s) {
    TRAP_SCOPE;
    int r = weft__libc.sem_post(s);
    if (r == 0 && sem_private(s)) weft__lot_wake(s, 1);
    return r;
}

/* rwlocks: glibc's __shared marks a process-shared one; __cur_writer its
 * writer's tid (the owner question of the mutexes above: told only with
 * own TLS) */
static int rw_try_rd(void *rw) { return pthread_rwlock_tryrdlock(rw); }
static int rw_try_wr(void *rw) { return pthread_rwlock_trywrlock(rw); }

static int lot_rw(const pthread_rwlock_t *rw) {
    return weft__hook_here() && !__atomic_load_n(&rw->__data.__shared, __ATOMIC_RELAXED);
}
static int rw_lock(pthread_rwlock_t *rw, int wr, clockid_t clk, const struct timespec *abs) {
    if (own_tls() && __atomic_load_n(&rw->__data.__cur_writer, __ATOMIC_RELAXED) == weft__tls_tid()) return EDEADLK;
    return lot_acquire(rw, wr ? rw_try_wr : rw_try_rd, EBUSY, clk, abs, WEFT__WHY_PRWLOCK);
}

HOOK_API int pthread_rwlock_rdlock(pthread_rwlock_t *rw) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_rdlock(rw);
    return rw_lock(rw, 0, CLOCK_REALTIME, NULL);
}
HOOK_API int pthread_rwlock_wrlock(pthread_rwlock_t *rw) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_wrlock(rw);
    return rw_lock(rw, 1, CLOCK_REALTIME, NULL);
}
HOOK_API int pthread_rwlock_timedrdlock(pthread_rwlock_t *restrict rw, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_timedrdlock(rw, abs);
    return rw_lock(rw, 0, CLOCK_REALTIME, abs);
}
HOOK_API int pthread_rwlock_timedwrlock(pthread_rwlock_t *restrict rw, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_timedwrlock(rw, abs);
    return rw_lock(rw, 1, CLOCK_REALTIME, abs);
}
HOOK_API int pthread_rwlock_clockrdlock(pthread_rwlock_t *restrict rw, clockid_t clk, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_clockrdlock(rw, clk, abs);
    return rw_lock(rw, 0, clk, abs);
}
HOOK_API int pthread_rwlock_clockwrlock(pthread_rwlock_t *restrict rw, clockid_t clk, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    if (!lot_rw(rw)) return weft__libc.pthread_rwlock_clockwrlock(rw, clk, abs);
    return rw_lock(rw, 1, clk, abs);
}

/* Every waiter of the lock is woken (readers may all go in; the rest wait
 * again): with hooks on, as for a mutex. */
HOOK_API int pthread_rwlock_unlock(pthread_rwlock_t *rw) {
    TRAP_SCOPE;
    int r = weft__libc.pthread_rwlock_unlock(rw);
    if (r == 0 && weft__hook_on() && !__atomic_load_n(&rw->__data.__shared, __ATOMIC_RELAXED))
        weft__lot_wake(rw, INT_MAX);
    return r;
}

/* ---- C11 ------------------------------------------------------------------ *
 * glibc's mtx_t and cnd_t are its pthread_mutex_t and pthread_cond_t (the
 * same size and words: its mtx_lock calls __pthread_mutex_lock); their
 * functions call the pthread ones inside the C library, past the
 * definitions above, so they are defined here too, as the pthread ones. */

_Static_assert(sizeof(mtx_t) == sizeof(pthread_mutex_t), "glibc's mtx_t is its pthread_mutex_t");
_Static_assert(sizeof(cnd_t) == sizeof(pthread_cond_t), "glibc's cnd_t is its pthread_cond_t");

static int thrd_of(int e) {
    switch (e) {
    case 0: return thrd_success;
    case ETIMEDOUT: return thrd_timedout;
    case EBUSY: return thrd_busy;
    case ENOMEM: return thrd_nomem;
    default: return thrd_error;
    }
}

HOOK_API int mtx_lock(mtx_t *m) {
    TRAP_SCOPE;
    pthread_mutex_t *pm = (pthread_mutex_t *)(void *)m;
    if (!lot_lock(pm)) return weft__libc.mtx_lock(m);
    return thrd_of(vt_lock(pm, CLOCK_REALTIME, NULL));
}

HOOK_API int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    pthread_mutex_t *pm = (pthread_mutex_t *)(void *)m;
    if (!lot_lock(pm)) return weft__libc.mtx_timedlock(m, abs);
    return thrd_of(vt_lock(pm, CLOCK_REALTIME, abs)); /* TIME_UTC: the real-time clock */
}

HOOK_API int mtx_unlock(mtx_t *m) { return thrd_of(pthread_mutex_unlock((pthread_mutex_t *)(void *)m)); }

HOOK_API int cnd_wait(cnd_t *c, mtx_t *m) {
    TRAP_SCOPE;
    pthread_cond_t *pc = (pthread_cond_t *)(void *)c;
    if (!lot_cond(pc)) return weft__libc.cnd_wait(c, m);
    return thrd_of(lot_cond_wait(pc, (pthread_mutex_t *)(void *)m, CLOCK_REALTIME, NULL));
}

HOOK_API int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict abs) {
    TRAP_SCOPE;
    pthread_cond_t *pc = (pthread_cond_t *)(void *)c;
    if (!lot_cond(pc)) return weft__libc.cnd_timedwait(c, m, abs);
    return thrd_of(lot_cond_wait(pc, (pthread_mutex_t *)(void *)m, CLOCK_REALTIME, abs));
}

HOOK_API int cnd_signal(cnd_t *c) { return thrd_of(pthread_cond_signal((pthread_cond_t *)(void *)c)); }

HOOK_API int cnd_broadcast(cnd_t *c) { return thrd_of(pthread_cond_broadcast((pthread_cond_t *)(void *)c)); }

#endif /* !WEFT_TSAN */
