/*
 * The C library's own functions, for weft's internals: the ground floor.
 *
 * hook.c defines read, write, poll, close ... with default visibility, in
 * libweft and in libweft-hook.so, so that a program's calls (and those of
 * the libraries it links: libpq, libcurl, hiredis) reach weft first.  The
 * runtime's own calls of the same functions must not: a carrier's eventfd
 * read, the epoll backend's MSG_DONTWAIT attempt, weft_close's close(2) run
 * inside the very operations the hooks are built on, and a stack slot's
 * probe in arch must not reach up into io through weft_close.  So every
 * file of the library is compiled with this header in front of its first
 * line (src/prelude.h, forced with -include by CMakeLists.txt), and after
 * it a call read(...) in the library's source is a call through
 * weft__libc.read: the next definition after weft's in the lookup order --
 * the C library, or a sanitizer's interceptor in front of it
 * (dlsym(RTLD_NEXT), libc.c).
 *
 * This header and libc.c are the floor under every layer: any file may
 * include them, and they include nothing of weft's.  WEFT__HOOKED_FUNCS
 * below is the one list of the hooked functions: libc.c builds the table
 * and its resolver from it, and the suite's check
 * (scripts/lint-libc-calls.sh) reads it to fail any object of the
 * library, other than hook.c's, that still calls one of them directly.  A
 * name added to the list needs its line among the macros below too; the
 * check is what says so if it is forgotten.
 *
 * The macros are function-like, so only calls are redirected (a member
 * named read is left alone, `struct sigaction` stays a type, and a call
 * through one fails to compile rather than going astray).  sigaction is
 * here too: hook.c wraps the program's handlers (see "Signal handlers"
 * there), and the library's own handlers -- the overflow reporter, the
 * dump's -- are installed as they are.  The system headers that declare
 * these functions are included first, so that their declarations are
 * never rewritten.  The two files that name the functions themselves --
 * libc.c (the table) and hook.c (the definitions) -- are compiled with
 * WEFT__NO_LIBC_REWRITE and see no macros.
 *
 * The pointers start as resolvers: the first call through any of them
 * looks all of them up, so a call made before weft starts (or from another
 * library's constructor) works.
 */
#ifndef WEFT_LIBC_REAL_H
#define WEFT_LIBC_REAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <threads.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* (arch.h's WEFT_TSAN, which this floor cannot include) */
#if defined(__SANITIZE_THREAD__)
#define WEFT__LIBC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT__LIBC_TSAN 1
#endif
#endif

#if defined(__SANITIZE_ADDRESS__)
#define WEFT__LIBC_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT__LIBC_ASAN 1
#endif
#endif

/* X(return type, name, parameters, arguments): every interposed function */
#define WEFT__HOOKED_FUNCS(X)                                                                          \
    X(ssize_t, read, (int fd, void *buf, size_t n), (fd, buf, n))                                      \
    X(ssize_t, write, (int fd, const void *buf, size_t n), (fd, buf, n))                               \
    X(ssize_t, readv, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt))                      \
    X(ssize_t, writev, (int fd, const struct iovec *iov, int cnt), (fd, iov, cnt))                     \
    X(ssize_t, pread, (int fd, void *buf, size_t n, off_t off), (fd, buf, n, off))                     \
    X(ssize_t, pwrite, (int fd, const void *buf, size_t n, off_t off), (fd, buf, n, off))              \
    X(ssize_t, recv, (int fd, void *buf, size_t n, int flags), (fd, buf, n, flags))                    \
    X(ssize_t, send, (int fd, const void *buf, size_t n, int flags), (fd, buf, n, flags))              \
    X(ssize_t, recvfrom, (int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl), \
      (fd, buf, n, flags, sa, sl))                                                                     \
    X(ssize_t, sendto,                                                                                 \
      (int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl),         \
      (fd, buf, n, flags, sa, sl))                                                                     \
    X(ssize_t, recvmsg, (int fd, struct msghdr *m, int flags), (fd, m, flags))                         \
    X(ssize_t, sendmsg, (int fd, const struct msghdr *m, int flags), (fd, m, flags))                   \
    X(int, accept, (int fd, struct sockaddr *sa, socklen_t *sl), (fd, sa, sl))                         \
    X(int, accept4, (int fd, struct sockaddr *sa, socklen_t *sl, int flags), (fd, sa, sl, flags))      \
    X(int, connect, (int fd, const struct sockaddr *sa, socklen_t sl), (fd, sa, sl))                   \
    X(int, poll, (struct pollfd * fds, nfds_t n, int timeout), (fds, n, timeout))                      \
    X(int, ppoll, (struct pollfd * fds, nfds_t n, const struct timespec *ts, const sigset_t *m),       \
      (fds, n, ts, m))                                                                                 \
    X(int, select, (int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv), (n, r, w, e, tv))     \
    X(int, pselect,                                                                                    \
      (int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts, const sigset_t *m),          \
      (n, r, w, e, ts, m))                                                                             \
    X(int, epoll_wait, (int ep, struct epoll_event *ev, int max, int timeout), (ep, ev, max, timeout)) \
    X(int, epoll_pwait, (int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *m),     \
      (ep, ev, max, timeout, m))                                                                       \
    X(int, nanosleep, (const struct timespec *req, struct timespec *rem), (req, rem))                  \
    X(int, clock_nanosleep,                                                                            \
      (clockid_t clk, int flags, const struct timespec *req, struct timespec *rem),                    \
      (clk, flags, req, rem))                                                                          \
    X(int, usleep, (useconds_t us), (us))                                                              \
    X(unsigned, sleep, (unsigned s), (s))                                                              \
    X(int, pause, (void), ())                                                                          \
    X(int, sigsuspend, (const sigset_t *m), (m))                                                       \
    X(int, kill, (pid_t pid, int sig), (pid, sig))                                                     \
    X(int, fsync, (int fd), (fd))                                                                      \
    X(ssize_t, sendfile, (int out, int in, off_t *off, size_t n), (out, in, off, n))                    \
    X(int, fdatasync, (int fd), (fd))                                                                  \
    X(int, close, (int fd), (fd))                                                                      \
    X(int, getaddrinfo,                                                                                \
      (const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res),    \
      (node, service, hints, res))                                                                     \
    X(int, sigaction, (int sig, const struct sigaction *act, struct sigaction *old), (sig, act, old)) \
    WEFT__LOCK_FUNCS(X)                                                                                \
    WEFT__THREAD_FUNCS(X)

/* Thread creation and the calls that name a thread (hook/threads.c:
 * virtual pthreads), but in sanitizer builds: there a vthread cannot have
 * its own TLS, so threads.c is not built, and the sanitizer's own
 * pthread_create must see the threads weft makes. */
#if defined(WEFT__LIBC_TSAN) || defined(WEFT__LIBC_ASAN)
#define WEFT__THREAD_FUNCS(X)
#else
#define WEFT__THREAD_FUNCS(X)                                                                          \
    X(int, pthread_create, (pthread_t * th, const pthread_attr_t *a, void *(*fn)(void *), void *arg),  \
      (th, a, fn, arg))                                                                                \
    X(int, pthread_join, (pthread_t th, void **ret), (th, ret))                                        \
    X(int, pthread_detach, (pthread_t th), (th))                                                       \
    X(int, pthread_setname_np, (pthread_t th, const char *name), (th, name))                           \
    X(int, pthread_getattr_np, (pthread_t th, pthread_attr_t *a), (th, a))                             \
    X(int, pthread_getcpuclockid, (pthread_t th, clockid_t * clk), (th, clk))                           \
    X(pid_t, gettid, (void), ())                                                                       \
    X(int, pthread_sigmask, (int how, const sigset_t *set, sigset_t *old), (how, set, old))            \
    X(int, sigprocmask, (int how, const sigset_t *set, sigset_t *old), (how, set, old))                \
    X(int, sigpending, (sigset_t * set), (set))                                                        \
    X(int, sigwait, (const sigset_t *set, int *sig), (set, sig))                                       \
    X(int, sigwaitinfo, (const sigset_t *set, siginfo_t *info), (set, info))                           \
    X(int, sigtimedwait, (const sigset_t *set, siginfo_t *info, const struct timespec *ts),           \
      (set, info, ts))                                                                                 \
    X(int, sched_yield, (void), ())                                                                    \
    X(int, clock_gettime, (clockid_t clk, struct timespec *ts), (clk, ts))
#endif

/* The locks (hook/locks.c), in the list but in ThreadSanitizer builds:
 * TSan intercepts them itself, and a shared libweft sits behind its
 * interceptors in the lookup order -- weft's own lock calls, through the
 * table, would pass it by and its view of every weft lock would be lost
 * (a race reported on weft's own state, under its own mutex).  There the
 * lock interposers are not built and weft calls the locks directly. */
#ifdef WEFT__LIBC_TSAN
#define WEFT__LOCK_FUNCS(X)
#else
#define WEFT__LOCK_FUNCS(X) \
    X(int, pthread_mutex_lock, (pthread_mutex_t * m), (m))                                             \
    X(int, pthread_mutex_timedlock, (pthread_mutex_t * m, const struct timespec *t), (m, t))           \
    X(int, pthread_mutex_clocklock, (pthread_mutex_t * m, clockid_t k, const struct timespec *t),      \
      (m, k, t))                                                                                       \
    X(int, pthread_mutex_unlock, (pthread_mutex_t * m), (m))                                           \
    X(int, pthread_cond_wait, (pthread_cond_t * c, pthread_mutex_t *m), (c, m))                        \
    X(int, pthread_cond_timedwait, (pthread_cond_t * c, pthread_mutex_t *m, const struct timespec *t), \
      (c, m, t))                                                                                       \
    X(int, pthread_cond_clockwait,                                                                     \
      (pthread_cond_t * c, pthread_mutex_t *m, clockid_t k, const struct timespec *t), (c, m, k, t))   \
    X(int, pthread_cond_signal, (pthread_cond_t * c), (c))                                             \
    X(int, pthread_cond_broadcast, (pthread_cond_t * c), (c))                                          \
    X(int, mtx_lock, (mtx_t * m), (m))                                                                 \
    X(int, mtx_timedlock, (mtx_t *restrict m, const struct timespec *restrict t), (m, t))              \
    X(int, cnd_wait, (cnd_t * c, mtx_t *m), (c, m))                                                    \
    X(int, cnd_timedwait, (cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict t),   \
      (c, m, t))                                                                                       \
    X(int, sem_wait, (sem_t * s), (s))                                                                 \
    X(int, sem_timedwait, (sem_t *restrict s, const struct timespec *restrict t), (s, t))              \
    X(int, sem_clockwait, (sem_t *restrict s, clockid_t k, const struct timespec *restrict t), (s, k, t)) \
    X(int, sem_post, (sem_t * s), (s))                                                                 \
    X(int, pthread_rwlock_rdlock, (pthread_rwlock_t * l), (l))                                         \
    X(int, pthread_rwlock_wrlock, (pthread_rwlock_t * l), (l))                                         \
    X(int, pthread_rwlock_timedrdlock, (pthread_rwlock_t *restrict l, const struct timespec *restrict t), \
      (l, t))                                                                                          \
    X(int, pthread_rwlock_timedwrlock, (pthread_rwlock_t *restrict l, const struct timespec *restrict t), \
      (l, t))                                                                                          \
    X(int, pthread_rwlock_clockrdlock,                                                                 \
      (pthread_rwlock_t *restrict l, clockid_t k, const struct timespec *restrict t), (l, k, t))       \
    X(int, pthread_rwlock_clockwrlock,                                                                 \
      (pthread_rwlock_t *restrict l, clockid_t k, const struct timespec *restrict t), (l, k, t))       \
    X(int, pthread_rwlock_unlock, (pthread_rwlock_t * l), (l))
#endif

#define WEFT__REAL_PTR(ret, name, params, args) ret(*name) params;
typedef struct weft__libc_t {
    WEFT__HOOKED_FUNCS(WEFT__REAL_PTR)
} weft__libc_t;
#undef WEFT__REAL_PTR

/* libc.c; hidden in the library, and declared so: a call through it is a
 * load relative to the instruction pointer, not through the GOT */
#define WEFT__LIBC_HIDDEN __attribute__((visibility("hidden")))
extern WEFT__LIBC_HIDDEN weft__libc_t weft__libc;

/* The C library's longjmp, _longjmp, siglongjmp and __longjmp_chk (NULL:
 * not there), for hook.c's own definitions of them ("Leaving by a jump"
 * there); looked up with the table, at load, since a signal handler that
 * leaves by a jump must not call dlsym.  weft__libc_jumps_resolve looks
 * them up again (a jump before libc.c's constructor). */
enum { WEFT__J_LONGJMP, WEFT__J__LONGJMP, WEFT__J_SIGLONGJMP, WEFT__J_CHK, WEFT__J_N };
struct __jmp_buf_tag;
typedef void (*weft__jump_fn)(struct __jmp_buf_tag *, int);
extern WEFT__LIBC_HIDDEN weft__jump_fn weft__libc_jump[WEFT__J_N];
WEFT__LIBC_HIDDEN void weft__libc_jumps_resolve(void);

/* The descriptors weft made for itself (fds.c): set right after making
 * one (returns fd -- or, for 0, 1 or 2, the number >= 3 it was moved
 * to: use the result -- so a call can be wrapped; a negative fd is passed
 * through), cleared by weft__fd_close_own, which closes it; the
 * interposers of close and close_range leave the set ones alone. */
WEFT__LIBC_HIDDEN int weft__fd_own(int fd);
WEFT__LIBC_HIDDEN void weft__fd_disown(int fd);
WEFT__LIBC_HIDDEN int weft__fd_owned(int fd);
/* the lowest set number in [from, to], or -1 */
WEFT__LIBC_HIDDEN int weft__fd_next_owned(unsigned from, unsigned to);
/* clears fd's bit and closes it (0 or -1 with errno); fd < 0: nothing */
WEFT__LIBC_HIDDEN int weft__fd_close_own(int fd);

/*
 * The system call trap's selector (hook/trap.c).  A carrier whose runtime
 * traps the system calls its vthreads' foreign code makes (syscall user
 * dispatch) has a selector byte the kernel reads at every system call:
 * 1 (BLOCK) while a vthread runs code that is not weft's, and the call
 * traps; 0 (ALLOW) while weft's own code runs.  weft__sud_sel points at
 * the calling carrier's byte (NULL on any other thread, and on a carrier
 * of a runtime that does not trap).  The library's calls through the table
 * below are weft's own, whatever called into weft: WEFT__ALLOWED lets
 * each through untrapped and puts the byte back after it -- a load and a
 * branch where nothing traps.  The call cannot park (it is the C
 * library's), so the byte it puts back is the same carrier's.
 */
extern __thread __attribute__((tls_model("initial-exec"), visibility("hidden"))) unsigned char *weft__sud_sel;
/* system calls trapped so far, all carriers (__atomic; weft_stats.trapped) */
extern __attribute__((visibility("hidden"))) unsigned long long weft__sud_trapped;
static inline __attribute__((always_inline)) unsigned char weft__sud_allow(void) {
    unsigned char *s = weft__sud_sel, o = 0;
    if (s && (o = *s)) *(volatile unsigned char *)s = 0;
    return o;
}
static inline __attribute__((always_inline)) void weft__sud_restore(unsigned char o) {
    if (o) *(volatile unsigned char *)weft__sud_sel = o;
}
#define WEFT__ALLOWED(call)                                                                            \
    __extension__({                                                                                    \
        unsigned char weft_sud_o_ = weft__sud_allow();                                                 \
        __typeof__(call) weft_sud_r_ = (call);                                                         \
        weft__sud_restore(weft_sud_o_);                                                                \
        weft_sud_r_;                                                                                   \
    })

#ifndef WEFT__NO_LIBC_REWRITE /* libc.c and hook.c name the functions themselves */
#define read(...) WEFT__ALLOWED(weft__libc.read(__VA_ARGS__))
#define write(...) WEFT__ALLOWED(weft__libc.write(__VA_ARGS__))
#define readv(...) WEFT__ALLOWED(weft__libc.readv(__VA_ARGS__))
#define writev(...) WEFT__ALLOWED(weft__libc.writev(__VA_ARGS__))
#define pread(...) WEFT__ALLOWED(weft__libc.pread(__VA_ARGS__))
#define pwrite(...) WEFT__ALLOWED(weft__libc.pwrite(__VA_ARGS__))
#define recv(...) WEFT__ALLOWED(weft__libc.recv(__VA_ARGS__))
#define send(...) WEFT__ALLOWED(weft__libc.send(__VA_ARGS__))
#define recvfrom(...) WEFT__ALLOWED(weft__libc.recvfrom(__VA_ARGS__))
#define sendto(...) WEFT__ALLOWED(weft__libc.sendto(__VA_ARGS__))
#define recvmsg(...) WEFT__ALLOWED(weft__libc.recvmsg(__VA_ARGS__))
#define sendmsg(...) WEFT__ALLOWED(weft__libc.sendmsg(__VA_ARGS__))
#define accept(...) WEFT__ALLOWED(weft__libc.accept(__VA_ARGS__))
#define accept4(...) WEFT__ALLOWED(weft__libc.accept4(__VA_ARGS__))
#define connect(...) WEFT__ALLOWED(weft__libc.connect(__VA_ARGS__))
#define poll(...) WEFT__ALLOWED(weft__libc.poll(__VA_ARGS__))
#define ppoll(...) WEFT__ALLOWED(weft__libc.ppoll(__VA_ARGS__))
#define select(...) WEFT__ALLOWED(weft__libc.select(__VA_ARGS__))
#define pselect(...) WEFT__ALLOWED(weft__libc.pselect(__VA_ARGS__))
#define epoll_wait(...) WEFT__ALLOWED(weft__libc.epoll_wait(__VA_ARGS__))
#define epoll_pwait(...) WEFT__ALLOWED(weft__libc.epoll_pwait(__VA_ARGS__))
#define nanosleep(...) WEFT__ALLOWED(weft__libc.nanosleep(__VA_ARGS__))
#define clock_nanosleep(...) WEFT__ALLOWED(weft__libc.clock_nanosleep(__VA_ARGS__))
#define usleep(...) WEFT__ALLOWED(weft__libc.usleep(__VA_ARGS__))
#define sleep(...) WEFT__ALLOWED(weft__libc.sleep(__VA_ARGS__))
#define pause() WEFT__ALLOWED(weft__libc.pause())
#define sigsuspend(...) WEFT__ALLOWED(weft__libc.sigsuspend(__VA_ARGS__))
#define kill(...) WEFT__ALLOWED(weft__libc.kill(__VA_ARGS__))
#define fsync(...) WEFT__ALLOWED(weft__libc.fsync(__VA_ARGS__))
#define sendfile(...) WEFT__ALLOWED(weft__libc.sendfile(__VA_ARGS__))
#define fdatasync(...) WEFT__ALLOWED(weft__libc.fdatasync(__VA_ARGS__))
#define close(...) WEFT__ALLOWED(weft__libc.close(__VA_ARGS__))
#define getaddrinfo(...) WEFT__ALLOWED(weft__libc.getaddrinfo(__VA_ARGS__))
#define sigaction(...) WEFT__ALLOWED(weft__libc.sigaction(__VA_ARGS__))
#ifndef WEFT__LIBC_TSAN
#define pthread_mutex_lock(...) WEFT__ALLOWED(weft__libc.pthread_mutex_lock(__VA_ARGS__))
#define pthread_mutex_timedlock(...) WEFT__ALLOWED(weft__libc.pthread_mutex_timedlock(__VA_ARGS__))
#define pthread_mutex_clocklock(...) WEFT__ALLOWED(weft__libc.pthread_mutex_clocklock(__VA_ARGS__))
#define pthread_mutex_unlock(...) WEFT__ALLOWED(weft__libc.pthread_mutex_unlock(__VA_ARGS__))
#define pthread_cond_wait(...) WEFT__ALLOWED(weft__libc.pthread_cond_wait(__VA_ARGS__))
#define pthread_cond_timedwait(...) WEFT__ALLOWED(weft__libc.pthread_cond_timedwait(__VA_ARGS__))
#define pthread_cond_clockwait(...) WEFT__ALLOWED(weft__libc.pthread_cond_clockwait(__VA_ARGS__))
#define pthread_cond_signal(...) WEFT__ALLOWED(weft__libc.pthread_cond_signal(__VA_ARGS__))
#define pthread_cond_broadcast(...) WEFT__ALLOWED(weft__libc.pthread_cond_broadcast(__VA_ARGS__))
#define mtx_lock(...) WEFT__ALLOWED(weft__libc.mtx_lock(__VA_ARGS__))
#define mtx_timedlock(...) WEFT__ALLOWED(weft__libc.mtx_timedlock(__VA_ARGS__))
#define cnd_wait(...) WEFT__ALLOWED(weft__libc.cnd_wait(__VA_ARGS__))
#define cnd_timedwait(...) WEFT__ALLOWED(weft__libc.cnd_timedwait(__VA_ARGS__))
#define sem_wait(...) WEFT__ALLOWED(weft__libc.sem_wait(__VA_ARGS__))
#define sem_timedwait(...) WEFT__ALLOWED(weft__libc.sem_timedwait(__VA_ARGS__))
#define sem_clockwait(...) WEFT__ALLOWED(weft__libc.sem_clockwait(__VA_ARGS__))
#define sem_post(...) WEFT__ALLOWED(weft__libc.sem_post(__VA_ARGS__))
#define pthread_rwlock_rdlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_rdlock(__VA_ARGS__))
#define pthread_rwlock_wrlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_wrlock(__VA_ARGS__))
#define pthread_rwlock_timedrdlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_timedrdlock(__VA_ARGS__))
#define pthread_rwlock_timedwrlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_timedwrlock(__VA_ARGS__))
#define pthread_rwlock_clockrdlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_clockrdlock(__VA_ARGS__))
#define pthread_rwlock_clockwrlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_clockwrlock(__VA_ARGS__))
#define pthread_rwlock_unlock(...) WEFT__ALLOWED(weft__libc.pthread_rwlock_unlock(__VA_ARGS__))
#endif
#if !defined(WEFT__LIBC_TSAN) && !defined(WEFT__LIBC_ASAN)
#define pthread_create(...) WEFT__ALLOWED(weft__libc.pthread_create(__VA_ARGS__))
#define pthread_join(...) WEFT__ALLOWED(weft__libc.pthread_join(__VA_ARGS__))
#define pthread_detach(...) WEFT__ALLOWED(weft__libc.pthread_detach(__VA_ARGS__))
#define pthread_setname_np(...) WEFT__ALLOWED(weft__libc.pthread_setname_np(__VA_ARGS__))
#define pthread_getattr_np(...) WEFT__ALLOWED(weft__libc.pthread_getattr_np(__VA_ARGS__))
#define pthread_getcpuclockid(...) WEFT__ALLOWED(weft__libc.pthread_getcpuclockid(__VA_ARGS__))
#define gettid() WEFT__ALLOWED(weft__libc.gettid())
#define pthread_sigmask(...) WEFT__ALLOWED(weft__libc.pthread_sigmask(__VA_ARGS__))
#define sigprocmask(...) WEFT__ALLOWED(weft__libc.sigprocmask(__VA_ARGS__))
#define sigpending(...) WEFT__ALLOWED(weft__libc.sigpending(__VA_ARGS__))
#define sigwait(...) WEFT__ALLOWED(weft__libc.sigwait(__VA_ARGS__))
#define sigwaitinfo(...) WEFT__ALLOWED(weft__libc.sigwaitinfo(__VA_ARGS__))
#define sigtimedwait(...) WEFT__ALLOWED(weft__libc.sigtimedwait(__VA_ARGS__))
#define sched_yield() WEFT__ALLOWED(weft__libc.sched_yield())
#define clock_gettime(...) WEFT__ALLOWED(weft__libc.clock_gettime(__VA_ARGS__))
#endif
#endif

/*
 * A handler of weft's own that must run at once, under ThreadSanitizer
 * too.  TSan runs a handler late: when the thread that took the signal
 * next enters one of its interceptors -- and a carrier asleep in
 * io_uring_enter, or a platform thread in a futex wait (raw system calls
 * it does not see), may never do so.  So weft__sigaction_now installs such
 * a handler with the C library's own sigaction, behind TSan's back; the
 * handler is marked WEFT__SIGNAL_NOW (not instrumented: its entry hooks
 * would touch TSan's state from a signal that may have come in the middle
 * of TSan's own work) and writes with weft__signal_write (a raw system
 * call).  Without TSan they are sigaction, nothing and write.  The dump's
 * SIGQUIT (observe/dump.c) and weft_signal_notify's (sync/signal.c) use
 * them.
 */
#include <signal.h>
int weft__sigaction_now(int sig, const struct sigaction *sa, struct sigaction *old);
#ifdef WEFT__LIBC_TSAN
#include <sys/syscall.h>
#include <unistd.h>
#define WEFT__SIGNAL_NOW __attribute__((no_sanitize("thread")))
#define weft__signal_write(fd, b, n) syscall(SYS_write, (fd), (b), (n))
#else
#define WEFT__SIGNAL_NOW
#define weft__signal_write(fd, b, n) write((fd), (b), (n))
#endif

#endif /* WEFT_LIBC_REAL_H */
