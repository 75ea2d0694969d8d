/*
 * libc interposition: blocking code weft did not write parks its vthread.
 *
 * What.  read, write, readv, writev, pread, pwrite, recv, send, recvfrom,
 * sendto, recvmsg, sendmsg, accept, accept4, connect, poll, ppoll, select,
 * pselect, epoll_wait, epoll_pwait, nanosleep, clock_nanosleep, usleep,
 * sleep, fsync, fdatasync, close and getaddrinfo (and the names a build may
 * call some of them by: _FORTIFY_SOURCE's __read_chk & co., pread64 and
 * pwrite64; see "the names a program may reach these by"), defined here with default
 * visibility; and sigaction, signal, bsd_signal and sysv_signal, which
 * wrap the program's handlers so that a hooked call knows it is inside
 * one, with longjmp, _longjmp, siglongjmp and __longjmp_chk, by which a
 * handler may leave (see "Signal handlers" at the end).  A program (and every library it links: libpq, libcurl,
 * hiredis) calls them through the PLT, and the dynamic linker binds the
 * first definition in lookup order: the executable's, then the libraries'
 * in load order.  libweft comes before the C library, so its definitions
 * win; a preloaded libweft-hook.so comes before everything.
 *
 * Two ways in, one implementation.  This file is compiled into libweft
 * (static and shared) and, with preload.c, into libweft-hook.so.  The
 * functions are always there; whether they act is one flag, `hook_on`,
 * set by weft_init from weft_runtime_opts.hook, else $WEFT_HOOK, else "on" only
 * in libweft-hook.so.  Off, each is a load, a branch and a call through a
 * pointer to the C library's.  Measured (weft-bench micro --only hook,
 * idle machine, 2026-12-02): a 1-byte pipe write+read costs 315 ns as
 * syscall(2), 365 ns through write/read with hooks off -- that difference
 * holds glibc's own wrappers (cancellation points) as well as this
 * pass-through; the two are not separated -- and 435 ns with hooks on.  I chose always-present over a separate opt-in library for
 * programs that link weft: a second library would have to come before the
 * C library in every link line (easy to get wrong, silently), and a
 * program that links weft statically gets the hooks from the same archive.
 * The cost of the choice: a program linking libweft has its read() et al.
 * pass through here even when it never turns hooks on -- measured above.
 *
 * The next definition.  weft__libc (src/libc/libc.c, the floor under every
 * layer): dlsym(RTLD_NEXT, name), looked up once, at load (a constructor)
 * or at the first call, whichever comes first: the C library's, or a
 * sanitizer's interceptor in front of it, which then still sees every
 * call.  The library's own calls of these functions never come here
 * (src/libc/real.h, put in front of every library file by src/prelude.h).
 * This file and libc.c are the two compiled with WEFT__NO_LIBC_REWRITE:
 * they name the functions themselves.
 *
 * When a call parks.  Hooks on, the caller a vthread (weft__self(): a
 * platform thread, a carrier's scheduler and the blocking pool's threads
 * are not) and not inside a signal handler, and the call would block.  Each call first tries the
 * operation without blocking, whatever the file's flags: MSG_DONTWAIT for
 * the socket calls, preadv2/pwritev2 with RWF_NOWAIT for read/write and
 * their vector and positioned forms (sockets, pipes, and the page cache of
 * regular files), a zero timeout for poll, select and epoll_wait.  The
 * common case -- data there, room there -- is one system call, as libc's.
 * Only when that would block does it look further (F_GETFL, fstat):
 *  - the program's own O_NONBLOCK (or MSG_DONTWAIT): EAGAIN, as libc.  On
 *    the epoll backend weft itself makes some files O_NONBLOCK (a listening
 *    socket, a connecting one: epoll.c); the fd table remembers those
 *    (weft__io_nb_ours: the backend's nb_ours) and they count as blocking;
 *  - a regular file or block device: weft_readv & co. (a ring operation,
 *    or the blocking pool on epoll), which never waits for readiness;
 *  - a blocking socket, pipe, tty ...: park on readiness (weft_poll, with
 *    SO_RCVTIMEO / SO_SNDTIMEO as a deadline) and try again.  A blocking
 *    write or send goes on until all is written, as the kernel's would.
 *  - accept, connect: weft_accept / weft_connect (ring operations; on
 *    epoll, accept makes the listening socket O_NONBLOCK for good, as
 *    above, and connect starts non-blocking for the one call and gives the
 *    socket its blocking mode back before it waits, then learns the
 *    outcome from connect itself, as a blocking connect does); fsync:
 *    weft_fsync; the sleeps: weft_sleep; close: weft_close (it ends the
 *    calls in flight on the fd); getaddrinfo: the blocking pool;
 *  - poll and select on several fds: weft__poll_any (io.c), each fd
 *    waiting through the backend's own registration, so that a call makes
 *    no file of its own (one at the fd limit works as libc's); select's
 *    sets are read as the kernel reads them, nfds bits long whatever
 *    FD_SETSIZE says, and an fd beyond the file table is ignored.
 * The flags of a file are never changed behind the program's back except
 * by the epoll backend's accept (documented in epoll.c): a program that
 * then sets O_NONBLOCK on that listening socket itself is not seen, and
 * its accept parks rather than failing with EAGAIN.  A platform thread's
 * accept on such a socket gets the wait its blocking socket promised
 * (platform_accept), not an EAGAIN it never asked for.
 *
 * errno.  A carrier is an OS thread and errno is its thread-local; glibc
 * declares __errno_location const, so foreign code compiled against it may
 * compute errno's address once and read it after a call.  If the vthread
 * parked inside the call and resumed on another carrier, that read would
 * see the old carrier's errno -- whatever another vthread left there.  So a
 * hooked call that may park pins its vthread to its carrier for the call's
 * length (weft__pin_begin: the wake goes to that carrier's mailbox) and
 * sets errno after the park, on that carrier -- unless the vthread has
 * its own TLS (weft_thread_opts.own_tls): its errno is in its own block,
 * wherever it resumes, so it is not pinned.  Pinning only across hooked
 * calls (not for the vthread's life) keeps work stealing for everything
 * else; what it does not cover is foreign code that keeps errno's address
 * across a call back into weft's own API that parks (a callback doing
 * weft_sleep): such code spawns with weft_thread_opts.pinned.  The cost is one
 * hand-off through the mailbox per park instead of the waker's LIFO slot.
 *
 * Cancellation and deadlines fail the call with ECANCELED and ETIMEDOUT
 * rather than EINTR: cancellation is sticky, and code that retries on EINTR
 * (most does) would spin.
 */
#define _GNU_SOURCE
#include "../io/io.h"
#include "hook.h"

#ifndef WEFT__NO_LIBC_REWRITE
#error "hook.c defines read, write, close ... itself: compile it with -DWEFT__NO_LIBC_REWRITE (CMakeLists.txt)"
#endif

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>

/* the hooked functions: exported from libweft.so and libweft-hook.so.
 * Never inlined into one another: the fortified and large-file names call
 * the plain ones, and inlined (or folded by -fipa-icf) a hook's frame came
 * out of libdw as an inline instance of itself with a wrong call site, so
 * the dump named hook.c, not the program, as a parked call's site. */
#define HOOK_API __attribute__((visibility("default"), noinline))
/* The sigaction family is called by a sanitizer's own start-up (TSan's,
 * from a shared libweft, before its thread state exists): not instrumented
 * (the stubs and the lookup of libc's functions they may reach first are
 * not either: libc.c). */
#define SIG_NOSAN __attribute__((no_sanitize("thread")))

/* ------------------------------------------------------------------------ */
/* on or off                                                                 */
/* ------------------------------------------------------------------------ */

static _Atomic int hook_on;
static void wrap_installed(void);
/* set by preload.c's constructor in libweft-hook.so: on unless told not */
__attribute__((visibility("hidden"))) int weft__hook_preloaded;

int weft__hook_wanted(int cfg_hook) {
    if (cfg_hook == WEFT_HOOK_ON) return 1;
    if (cfg_hook == WEFT_HOOK_OFF) return 0;
    const char *v = getenv("WEFT_HOOK");
    return v && *v ? strcmp(v, "0") != 0 : weft__hook_preloaded;
}

void weft__hook_start(int cfg_hook) {
    int on = weft__hook_wanted(cfg_hook);
    if (on) wrap_installed(); /* handlers weft has not seen (signal handlers, below) */
    atomic_store(&hook_on, on);
}

void weft__hook_stop(void) { atomic_store(&hook_on, 0); }

int weft_hook_active(void) { return atomic_load(&hook_on); }

/* How many signal handlers the calling OS thread is inside (see "Signal
 * handlers" below): written only by this thread, in the trampolines. */
static WEFT_TLS int sig_depth;

/* The calling thread is a vthread of a runtime with hooks on, and not in a
 * signal handler. */
static inline int hooked(void) {
    return atomic_load_explicit(&hook_on, memory_order_relaxed) && !sig_depth && weft__self() != NULL;
}

/* (locks.c) */
int weft__hook_here(void) { return hooked(); }
/* trap.c's vfork: the child shares this thread's TLS block, and with it
 * these.  Its calls are the C library's, as in a handler (sig_depth), and
 * its sigactions its own process's: weft's tables of the program's
 * handlers are the parent's memory (seen: Python's child, resetting every
 * handler to SIG_DFL before its exec, erased the parent's SIGHUP handler,
 * and the parent's pause never returned). */
static WEFT_TLS int vfork_child;
void weft__hook_vfork(int on) {
    sig_depth += on ? 1 : -1;
    vfork_child = on;
}
int weft__hook_on(void) { return atomic_load_explicit(&hook_on, memory_order_relaxed) && !sig_depth; }

static inline ssize_t fail(int e) {
    errno = e;
    return -1;
}
/* A weft result (>= 0 or -errno) as libc returns it. */
static inline ssize_t as_libc(ssize_t r) { return r < 0 ? fail((int)-r) : r; }

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */

/* 1 if the program made fd O_NONBLOCK, 0 if not, -errno. */
static int user_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -errno;
    if (!(fl & O_NONBLOCK)) return 0;
    return !weft__io_nb_ours(fd);
}

/* 1 if fd is O_NONBLOCK only because the epoll backend made it so (and
 * the runtime is up, with hooks on, not in a handler); 0 if not. */
static int hook_in_epoll_nb(int fd) {
    return atomic_load_explicit(&hook_on, memory_order_relaxed) && !sig_depth && weft__io.nb_ours &&
           weft__running() && weft__io.nb_ours(fd);
}

/* The absolute deadline a blocking socket's SO_RCVTIMEO / SO_SNDTIMEO
 * gives a call starting now; 0: none (or not a socket). */
static int64_t sock_deadline(int fd, int opt) {
    struct timeval tv;
    socklen_t l = sizeof tv;
    if (getsockopt(fd, SOL_SOCKET, opt, &tv, &l) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0)) return 0;
    return weft_now() + (int64_t)tv.tv_sec * 1000000000 + (int64_t)tv.tv_usec * 1000;
}

/* A wait a signal handler may interrupt (sched.c, "Interrupts"): begun
 * with weft__intr_begin(t, kind), ended here with what the wait returned:
 * -EINTR where a handler interrupted it (and the vthread is not cancelled
 * itself), else r. */
/* (hook.h: set here, on the vthread's own TLS, when a pthread_cancel
 * ended the wait; the interposer's TRAP_SCOPE acts on it as it returns) */
WEFT_TLS unsigned char weft__vpt_act;
/* (the trap's calls: not acted on inside its handler -- the next
 * interposer's return does) */
static WEFT_TLS unsigned char in_trap;

int weft__hook_in_trap(void) { return in_trap != 0; }

static int intr_result(weft_thread *t, int r) {
    int sig = weft__intr_end(t);
    if (__builtin_expect(sig == WEFT__INTR_CANCEL, 0))
        weft__vpt_act = (unsigned char)((weft__vpt_act & WEFT__ACT_PREEMPT) | (in_trap ? 0 : WEFT__ACT_LOOK));
    return sig && r == -ECANCELED && !weft_cancelled() ? -EINTR : r;
}

/* Parks until fd is ready for ev.  A timeout at the call's own deadline dl
 * (a socket timeout) is -EAGAIN, as libc's; the vthread's deadline is
 * -ETIMEDOUT.  A handler without SA_RESTART ends it with -EINTR.  Returns
 * >= 0 or -errno. */
static int wait_ready(int fd, int ev, int64_t dl) {
    weft_thread *t = weft__self();
    weft__intr_begin(t, WEFT__INTR_RESTART);
    int w = intr_result(t, weft_poll(fd, ev, dl));
    if (w == -ETIMEDOUT && dl && weft_now() >= dl) return -EAGAIN;
    return w;
}

static size_t iov_total(const struct iovec *iov, int cnt) {
    size_t t = 0;
    for (int i = 0; i < cnt; i++) t += iov[i].iov_len;
    return t;
}

/* Copies iov (cnt entries) into *out, skipping the first `skip` bytes:
 * the part of a vector still to write.  Small vectors use buf (8
 * entries); returns the new count, or -ENOMEM. */
static int iov_rest(const struct iovec *iov, int cnt, size_t skip, struct iovec *buf, struct iovec **out) {
    int i = 0;
    while (i < cnt && skip >= iov[i].iov_len) skip -= iov[i++].iov_len;
    int n = cnt - i;
    struct iovec *v = n <= 8 ? buf : malloc((size_t)n * sizeof *v);
    if (!v) return -ENOMEM;
    for (int k = 0; k < n; k++) v[k] = iov[i + k];
    if (n) {
        v[0].iov_base = (char *)v[0].iov_base + skip;
        v[0].iov_len -= skip;
    }
    *out = v;
    return n;
}

/* ------------------------------------------------------------------------ */
/* read, write and their vector and positioned forms                        */
/* ------------------------------------------------------------------------ */

enum { RD, WR };

/* One attempt that cannot block: at off, or the file position (off -1). */
static ssize_t try_rw(int dir, int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t r = dir == RD ? preadv2(fd, iov, cnt, off, RWF_NOWAIT) : pwritev2(fd, iov, cnt, off, RWF_NOWAIT);
    return r < 0 ? -errno : r;
}

/* The plain call (on a file that cannot block, or after readiness). */
static ssize_t plain_rw(int dir, int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t r;
    if (off < 0) r = dir == RD ? weft__libc.readv(fd, iov, cnt) : weft__libc.writev(fd, iov, cnt);
    else r = dir == RD ? preadv(fd, iov, cnt, off) : pwritev(fd, iov, cnt, off);
    return r < 0 ? -errno : r;
}

static int is_file(int fd, int *err) {
    struct stat st;
    if (fstat(fd, &st) < 0) {
        *err = -errno;
        return 0;
    }
    *err = 0;
    return S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode);
}

/*
 * The rest of a hooked read or write whose attempt (result `first`) would
 * have blocked -- or, for a write, wrote only part.  Parks, pinned.  A
 * blocking writer goes on until everything is written or an error comes
 * (then: what was written, as the kernel's blocking write).
 */
static ssize_t rw_slow(int dir, int fd, const struct iovec *iov, int cnt, off_t off, ssize_t first) {
    int err;
    int file = is_file(fd, &err);
    if (err) return first > 0 ? first : err;
    int pin = weft__pin_begin();
    ssize_t r;
    if (file) {
        /* the page cache missed (or RWF_NOWAIT is not supported here): a
         * ring operation or the blocking pool; no readiness to wait for.
         * A partial write to a file is returned, as libc's. */
        if (first >= 0) r = first;
        else if (off < 0) r = dir == RD ? weft_readv(fd, iov, cnt) : weft_writev(fd, iov, cnt);
        else r = dir == RD ? weft_preadv(fd, iov, cnt, off) : weft_pwritev(fd, iov, cnt, off);
        goto out;
    }
    int nb = user_nonblock(fd);
    if (nb < 0 || nb) {
        /* the program's own O_NONBLOCK: as libc (a partial write stands;
         * where RWF_NOWAIT is not supported the plain call cannot block) */
        r = first >= 0 || first == -EAGAIN ? first : nb < 0 ? nb : plain_rw(dir, fd, iov, cnt, off);
        goto out;
    }
    int64_t dl = sock_deadline(fd, dir == RD ? SO_RCVTIMEO : SO_SNDTIMEO);
    size_t want = iov_total(iov, cnt), done = first > 0 ? (size_t)first : 0;
    struct iovec small[8], *rest = NULL;
    for (;;) {
        int w = wait_ready(fd, dir == RD ? POLLIN : POLLOUT, dl);
        if (w < 0) {
            r = done ? (ssize_t)done : w;
            break;
        }
        const struct iovec *v = iov;
        int vc = cnt;
        if (done) {
            if (rest && rest != small) free(rest);
            vc = iov_rest(iov, cnt, done, small, &rest);
            if (vc < 0) {
                r = (ssize_t)done;
                break;
            }
            v = rest;
        }
        r = try_rw(dir, fd, v, vc, off < 0 ? -1 : off + (off_t)done);
        /* no RWF_NOWAIT on this file (a tty): after readiness, the plain
         * call (another reader could take the data first and block this
         * carrier: the monitor would report it) */
        if (r == -EOPNOTSUPP) r = plain_rw(dir, fd, v, vc, off < 0 ? -1 : off + (off_t)done);
        if (r == -EAGAIN) continue;
        if (r < 0) {
            r = done ? (ssize_t)done : r;
            break;
        }
        if (dir == RD || r == 0) break;
        done += (size_t)r;
        if (done >= want) {
            r = (ssize_t)done;
            break;
        }
    }
    if (rest && rest != small) free(rest);
out:
    weft__pin_end(pin);
    return r;
}

static ssize_t hook_rw(int dir, int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t r = try_rw(dir, fd, iov, cnt, off);
    if (r >= 0) {
        if (dir == RD || r == 0 || (size_t)r >= iov_total(iov, cnt)) return r;
        /* part written: a blocking socket or pipe writes the rest */
        return rw_slow(dir, fd, iov, cnt, off, r);
    }
    if (r != -EAGAIN && r != -EOPNOTSUPP) return r;
    return rw_slow(dir, fd, iov, cnt, off, r);
}

HOOK_API ssize_t read(int fd, void *buf, size_t n) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.read(fd, buf, n);
    struct iovec v = {buf, n};
    return as_libc(hook_rw(RD, fd, &v, 1, -1));
}

HOOK_API ssize_t write(int fd, const void *buf, size_t n) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.write(fd, buf, n);
    struct iovec v = {(void *)buf, n};
    return as_libc(hook_rw(WR, fd, &v, 1, -1));
}

/* sendfile to a blocking socket or pipe.  The kernel's would hold the
 * carrier until the peer had read it all -- and the peer may be a vthread
 * parked on this very carrier's ring, whose completions only this carrier
 * reaps (seen: CPython's test_socket, SendfileUsingSendfileTest, hung
 * under weft-run).  So it runs as reads of in (this file's read and pread:
 * they park too) and this file's write, which parks until all is taken,
 * 64 KiB at a time; what it returns, where *off or in's position ends and
 * the bytes sent are sendfile's.  To a regular file, or to a descriptor
 * the program made non-blocking, it is the kernel's own. */
#define SENDFILE_CHUNK (64 * 1024)
HOOK_API ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.sendfile(out, in, off, n);
    struct stat st;
    if (fstat(out, &st) < 0 || !(S_ISSOCK(st.st_mode) || S_ISFIFO(st.st_mode)) || user_nonblock(out) != 0)
        return weft__libc.sendfile(out, in, off, n);
    if (off && *off < 0) return fail(EINVAL);
    char *buf = malloc(SENDFILE_CHUNK);
    if (!buf) return fail(ENOMEM);
    size_t done = 0;
    int err = 0;
    while (done < n) {
        size_t want = n - done < SENDFILE_CHUNK ? n - done : SENDFILE_CHUNK;
        ssize_t k = off ? pread(in, buf, want, *off) : read(in, buf, want);
        if (k < 0) err = errno;
        if (k <= 0) break;
        struct iovec v = {buf, (size_t)k};
        ssize_t w = hook_rw(WR, out, &v, 1, -1);
        if (w < 0) {
            err = (int)-w;
            w = 0;
        }
        if (off) *off += w;
        else if (w < k) (void)lseek(in, (off_t)w - k, SEEK_CUR); /* (what was read and not sent) */
        done += (size_t)w;
        if (w < k || (size_t)k < want) break;
    }
    free(buf);
    if (!done && err) return fail(err);
    return (ssize_t)done;
}

HOOK_API ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.readv(fd, iov, cnt);
    if (cnt < 0 || cnt > IOV_MAX) return fail(EINVAL);
    return as_libc(hook_rw(RD, fd, iov, cnt, -1));
}

HOOK_API ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.writev(fd, iov, cnt);
    if (cnt < 0 || cnt > IOV_MAX) return fail(EINVAL);
    return as_libc(hook_rw(WR, fd, iov, cnt, -1));
}

HOOK_API ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.pread(fd, buf, n, off);
    if (off < 0) return fail(EINVAL); /* preadv2's -1 would mean "the file position" */
    struct iovec v = {buf, n};
    return as_libc(hook_rw(RD, fd, &v, 1, off));
}

HOOK_API ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.pwrite(fd, buf, n, off);
    if (off < 0) return fail(EINVAL);
    struct iovec v = {(void *)buf, n};
    return as_libc(hook_rw(WR, fd, &v, 1, off));
}

/* ------------------------------------------------------------------------ */
/* the socket calls                                                          */
/* ------------------------------------------------------------------------ */

/* What a socket call's loop keeps between attempts. */
typedef struct sock_wait {
    int fd, ev, flags;
    int pin;     /* -1 until the first wait: then weft__pin_begin's */
    int64_t dl;  /* SO_RCVTIMEO / SO_SNDTIMEO */
} sock_wait;

/* An attempt with MSG_DONTWAIT found nothing: -EAGAIN where the call
 * itself would not block, else parks until the socket is ready (0) or
 * the wait ends (-errno). */
static int sock_block(sock_wait *w) {
    if (w->flags & MSG_DONTWAIT) return -EAGAIN;
    if (w->pin < 0) {
        int nb = user_nonblock(w->fd);
        if (nb) return nb < 0 ? nb : -EAGAIN;
        w->dl = sock_deadline(w->fd, w->ev == POLLIN ? SO_RCVTIMEO : SO_SNDTIMEO);
        w->pin = weft__pin_begin();
    }
    int r = wait_ready(w->fd, w->ev, w->dl);
    return r < 0 ? r : 0;
}

static void sock_done(sock_wait *w) {
    if (w->pin >= 0) weft__pin_end(w->pin);
}

/* MSG_WAITALL goes on after a short read: on a stream socket, and when the
 * call may wait (the kernel ignores it with MSG_PEEK or MSG_DONTWAIT, and
 * on datagram and seqpacket sockets, whose one read is one message).
 * Asked only after a short read. */
static int waitall_goes_on(int fd, int flags) {
    if (!(flags & MSG_WAITALL) || (flags & (MSG_DONTWAIT | MSG_PEEK))) return 0;
    int type = 0;
    socklen_t l = sizeof type;
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) == 0 && type == SOCK_STREAM;
}

static ssize_t recv_common(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl) {
    sock_wait w = {fd, POLLIN, flags, -1, 0};
    size_t got = 0;
    int waitall = -1; /* not asked yet */
    ssize_t r;
    for (;;) {
        /* recvfrom with NULL address is recv */
        r = weft__libc.recvfrom(fd, (char *)buf + got, n - got, flags | MSG_DONTWAIT, sa, sl);
        if (r < 0) r = -errno;
        if (r == -EWOULDBLOCK) r = -EAGAIN;
        if (r > 0 && got + (size_t)r < n && (waitall >= 0 ? waitall : (waitall = waitall_goes_on(fd, flags)))) {
            got += (size_t)r; /* MSG_WAITALL: the whole buffer, or EOF */
            continue;
        }
        if (r >= 0) {
            r += (ssize_t)got;
            break;
        }
        if (r != -EAGAIN) { /* what came before the error is the answer */
            r = got ? (ssize_t)got : r;
            break;
        }
        int b = sock_block(&w);
        if (b < 0) {
            r = got ? (ssize_t)got : b;
            break;
        }
    }
    sock_done(&w);
    return r;
}

HOOK_API ssize_t recv(int fd, void *buf, size_t n, int flags) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.recv(fd, buf, n, flags);
    return as_libc(recv_common(fd, buf, n, flags, NULL, NULL));
}

HOOK_API ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *sa, socklen_t *sl) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.recvfrom(fd, buf, n, flags, sa, sl);
    return as_libc(recv_common(fd, buf, n, flags, sa, sl));
}

HOOK_API ssize_t recvmsg(int fd, struct msghdr *m, int flags) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.recvmsg(fd, m, flags);
    if (!m) return fail(EFAULT);
    sock_wait w = {fd, POLLIN, flags, -1, 0};
    /* after a short read with MSG_WAITALL (recv_common), the rest goes
     * into what is left of the vector; the name and ancillary data came
     * with the first part, and the flags of every part are told */
    struct msghdr rest = {0};
    struct iovec small[8], *v = NULL;
    size_t want = 0, got = 0;
    ssize_t r;
    for (;;) {
        r = weft__libc.recvmsg(fd, got ? &rest : m, flags | MSG_DONTWAIT);
        if (r < 0) r = errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (r > 0) {
            if (got) m->msg_flags |= rest.msg_flags;
            if (!got) want = iov_total(m->msg_iov, (int)m->msg_iovlen);
            if (got + (size_t)r < want && (got || waitall_goes_on(fd, flags))) {
                got += (size_t)r;
                if (v && v != small) free(v);
                int vc = iov_rest(m->msg_iov, (int)m->msg_iovlen, got, small, &v);
                if (vc < 0) {
                    v = NULL;
                    r = (ssize_t)got;
                    break;
                }
                rest = (struct msghdr){.msg_iov = v, .msg_iovlen = (size_t)vc};
                continue;
            }
        }
        if (r >= 0) {
            r += (ssize_t)got;
            break;
        }
        if (r != -EAGAIN || (r = sock_block(&w)) < 0) {
            r = got ? (ssize_t)got : r;
            break;
        }
    }
    if (v && v != small) free(v);
    sock_done(&w);
    return as_libc(r);
}

/* send, sendto, sendmsg: a blocking stream socket sends everything (what
 * was sent when an error or timeout comes later), as the kernel's. */
static ssize_t send_common(int fd, const struct msghdr *m0, int flags) {
    sock_wait w = {fd, POLLOUT, flags, -1, 0};
    struct msghdr m = *m0;
    size_t want = iov_total(m0->msg_iov, (int)m0->msg_iovlen), done = 0;
    struct iovec small[8], *rest = NULL;
    int checked = 0; /* blocking mode known (a partial send on a blocking socket goes on) */
    ssize_t r;
    for (;;) {
        r = weft__libc.sendmsg(fd, &m, flags | MSG_DONTWAIT);
        if (r < 0) r = errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (r >= 0) {
            done += (size_t)r;
            if (done >= want || r == 0 || (flags & MSG_DONTWAIT)) break;
            if (!checked) {
                int nb = user_nonblock(fd);
                if (nb) break; /* the program's O_NONBLOCK: the partial count */
                checked = 1;
            }
            if (rest && rest != small) free(rest);
            int vc = iov_rest(m0->msg_iov, (int)m0->msg_iovlen, done, small, &rest);
            if (vc < 0) break;
            m.msg_iov = rest;
            m.msg_iovlen = (size_t)vc;
            m.msg_control = NULL; /* ancillary data went with the first part */
            m.msg_controllen = 0;
            r = -EAGAIN; /* wait for room */
        }
        if (r != -EAGAIN) break;
        int b = sock_block(&w);
        if (b < 0) {
            r = b;
            break;
        }
    }
    if (rest && rest != small) free(rest);
    sock_done(&w);
    return done ? (ssize_t)done : r;
}

HOOK_API ssize_t send(int fd, const void *buf, size_t n, int flags) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.send(fd, buf, n, flags);
    struct iovec v = {(void *)buf, n};
    struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1};
    return as_libc(send_common(fd, &m, flags));
}

HOOK_API ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *sa, socklen_t sl) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.sendto(fd, buf, n, flags, sa, sl);
    struct iovec v = {(void *)buf, n};
    struct msghdr m = {.msg_name = (void *)sa, .msg_namelen = sa ? sl : 0, .msg_iov = &v, .msg_iovlen = 1};
    return as_libc(send_common(fd, &m, flags));
}

HOOK_API ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.sendmsg(fd, m, flags);
    if (!m) return fail(EFAULT);
    if (m->msg_iovlen > IOV_MAX) return fail(EMSGSIZE);
    return as_libc(send_common(fd, m, flags));
}

/* The socket's own timeout (opt) as the vthread's deadline for one call
 * of weft's; restore with the returned value. */
static int64_t deadline_push(int fd, int opt, int64_t *dl) {
    *dl = sock_deadline(fd, opt);
    int64_t old = weft_deadline_set(0);
    weft_deadline_set(*dl && (!old || *dl < old) ? *dl : old);
    return old;
}

/*
 * A platform thread's accept on a listening socket that the epoll backend
 * made O_NONBLOCK (a vthread's hooked accept: epoll.c) and the program did
 * not: the EAGAIN the program never asked for becomes the wait its
 * blocking socket promised -- poll(2), honouring SO_RCVTIMEO, then again.
 * Only after an EAGAIN, so an accept that finds a connection costs what
 * libc's does.  (Until weft_shutdown: the table that remembers whose flag
 * it is goes with the runtime.)
 */
static int platform_accept(int fd, struct sockaddr *sa, socklen_t *sl, int flags, int r) {
    if (r >= 0 || errno != EAGAIN || hook_in_epoll_nb(fd) <= 0) return r;
    int64_t dl = sock_deadline(fd, SO_RCVTIMEO);
    for (;;) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int ms = -1;
        if (dl) {
            int64_t left = dl - weft_now();
            if (left <= 0) return (int)fail(EAGAIN);
            ms = (int)((left + 999999) / 1000000);
        }
        int k = weft__libc.poll(&pf, 1, ms);
        if (k < 0) return -1; /* EINTR from a handler, as the blocking call's */
        r = weft__libc.accept4(fd, sa, sl, flags);
        if (r >= 0 || errno != EAGAIN) return r;
        if (!hook_in_epoll_nb(fd)) return r; /* the program's own O_NONBLOCK now */
    }
}

HOOK_API int accept4(int fd, struct sockaddr *sa, socklen_t *sl, int flags) {
    TRAP_SCOPE;
    if (!hooked()) return platform_accept(fd, sa, sl, flags, weft__libc.accept4(fd, sa, sl, flags));
    int nb = user_nonblock(fd);
    if (nb < 0) return (int)fail(-nb);
    if (nb || (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))) return weft__libc.accept4(fd, sa, sl, flags);
    int pin = weft__pin_begin();
    int64_t dl;
    int64_t old = deadline_push(fd, SO_RCVTIMEO, &dl);
    weft_thread *t = weft__self();
    weft__intr_begin(t, WEFT__INTR_RESTART);
    int r = intr_result(t, weft_accept(fd, sa, sl, flags));
    weft_deadline_set(old);
    if (r == -ETIMEDOUT && dl && weft_now() >= dl) r = -EAGAIN;
    weft__pin_end(pin);
    return (int)as_libc(r);
}

HOOK_API int accept(int fd, struct sockaddr *sa, socklen_t *sl) {
    TRAP_SCOPE;
    if (!hooked()) return platform_accept(fd, sa, sl, 0, weft__libc.accept(fd, sa, sl));
    return accept4(fd, sa, sl, 0);
}

HOOK_API int connect(int fd, const struct sockaddr *sa, socklen_t sl) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.connect(fd, sa, sl);
    int nb = user_nonblock(fd);
    if (nb < 0) return (int)fail(-nb);
    if (nb) return weft__libc.connect(fd, sa, sl); /* EINPROGRESS, as asked */
    int pin = weft__pin_begin();
    int64_t dl;
    int64_t old = deadline_push(fd, SO_SNDTIMEO, &dl);
    int r;
    if (weft__io.connect_keeps_flags) {
        r = weft_connect(fd, sa, sl); /* a ring operation: the flags stay */
    } else {
        /* weft_connect would leave the socket O_NONBLOCK: start it so for
         * one call, give the program its blocking socket back at once (the
         * connection goes on in the kernel), then wait for it */
        int fl = fcntl(fd, F_GETFL);
        r = fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
        if (r == 0) {
            r = weft__libc.connect(fd, sa, sl) == 0 ? 0 : -errno;
            fcntl(fd, F_SETFL, fl);
        }
        /* Then the outcome, learnt as a blocking connect learns it: from
         * connect itself, which reports the error once and leaves the
         * socket ready for another try.  (SO_ERROR would take the error and
         * leave the socket "connecting": the program's next connect would
         * fail with ECONNABORTED.)  Once the socket is writable or failed,
         * this connect cannot block. */
        while (r == -EINPROGRESS || r == -EINTR || r == -EALREADY) {
            r = weft_poll(fd, POLLOUT, 0);
            if (r < 0) break;
            r = weft__libc.connect(fd, sa, sl) == 0 ? 0 : -errno;
            if (r == -EISCONN) r = 0;
        }
    }
    weft_deadline_set(old);
    /* the socket's send timeout ends a blocking connect with EINPROGRESS */
    if (r == -ETIMEDOUT && dl && weft_now() >= dl) r = -EINPROGRESS;
    weft__pin_end(pin);
    return (int)as_libc(r);
}

/* ------------------------------------------------------------------------ */
/* poll, select, epoll_wait                                                  */
/* ------------------------------------------------------------------------ */

/* An absolute deadline from a relative timeout in ms (< 0: none). */
static int64_t ms_deadline(int ms) { return ms < 0 ? 0 : weft_now() + (int64_t)ms * 1000000; }
static int64_t ts_ns(const struct timespec *ts);
static int64_t ts_deadline(const struct timespec *ts) {
    if (!ts) return 0;
    return weft_now() + ts_ns(ts);
}

/*
 * Waits until one of fds may be ready (1), dl passes (0) or the wait fails
 * (-errno).  One fd: weft_poll on it.  Several: weft__poll_any, each fd
 * through the backend's own registration (a poll on the ring, a waiter on
 * the shared epoll set) -- no file per call, so a program at its fd limit
 * polls as it would with libc.  No fd at all: a sleep.  Each revents says
 * what its fd's wait saw (POLLNVAL: not open).  The caller looks again
 * with a zero timeout: readiness may be gone by then, and it then waits
 * again.
 */
static int wait_any(struct pollfd *fds, nfds_t n, int64_t dl) {
    nfds_t live = 0, one = 0;
    for (nfds_t i = 0; i < n; i++)
        if (fds[i].fd >= 0) live++, one = i;
    int r;
    /* (poll and select end with EINTR whatever the handler's flags) */
    weft_thread *t = weft__self();
    weft__intr_begin(t, WEFT__INTR_ALWAYS);
    if (live == 0) {
        r = weft__sleep_until_at(dl ? dl : INT64_MAX, "poll", 0);
        if (r == 0) {
            weft__intr_end(t);
            return 0; /* the sleep ended: timeout */
        }
    } else if (live == 1) {
        r = weft_poll(fds[one].fd, fds[one].events, dl);
        if (r >= 0 || r == -EBADF) {
            fds[one].revents = r >= 0 ? (short)r : POLLNVAL;
            r = 1;
        }
    } else {
        r = weft__poll_any(fds, n, dl);
    }
    r = intr_result(t, r);
    if (r == -ETIMEDOUT && dl && weft_now() >= dl) return 0;
    return r;
}

/* poll and ppoll after their first look found nothing. */
static int poll_wait(struct pollfd *fds, nfds_t n, int64_t dl, const sigset_t *m) {
    int pin = weft__pin_begin();
    static const struct timespec zero = {0, 0};
    int r;
    for (;;) {
        r = wait_any(fds, n, dl);
        if (r <= 0) break;
        r = weft__libc.ppoll(fds, n, &zero, m);
        if (r < 0) r = -errno;
        if (r != 0) break;
    }
    if (r == 0) /* a timeout: nothing ready, as the kernel's */
        for (nfds_t i = 0; i < n; i++) fds[i].revents = 0;
    weft__pin_end(pin);
    return r;
}

HOOK_API int poll(struct pollfd *fds, nfds_t n, int timeout) {
    TRAP_SCOPE;
    if (!hooked() || timeout == 0) return weft__libc.poll(fds, n, timeout);
    int r = weft__libc.poll(fds, n, 0);
    if (r != 0) return r;
    return (int)as_libc(poll_wait(fds, n, ms_deadline(timeout), NULL));
}

HOOK_API int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *m) {
    TRAP_SCOPE;
    if (!hooked() || (ts && ts->tv_sec == 0 && ts->tv_nsec == 0)) return weft__libc.ppoll(fds, n, ts, m);
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)) return (int)fail(EINVAL);
    static const struct timespec zero = {0, 0};
    int r = weft__libc.ppoll(fds, n, &zero, m);
    if (r != 0) return r;
    return (int)as_libc(poll_wait(fds, n, ts_deadline(ts), m));
}

/* ------------------------------------------------------------------------ */
/* the names a program may reach these by instead                           */
/* ------------------------------------------------------------------------ */

/*
 * _FORTIFY_SOURCE.  A program built with -D_FORTIFY_SOURCE=1 or 2 (Debian
 * builds its packages with 2) and optimisation calls __read_chk instead of
 * read wherever the compiler knows the buffer's size, and so on for pread,
 * recv, recvfrom, poll and ppoll.  Without these, every such call went to
 * the C library and held its carrier ("pinned"), while the same program
 * built plainly parked.  Each is the C library's check -- the buffer holds
 * what the call may write, else __chk_fail ("*** buffer overflow detected
 * ***: terminated", as glibc's own) -- then the hooked call, which is the
 * C library's when hooks are off.  The other _chk functions glibc exports
 * never block (string and memory copies, readlink, getcwd, FD_SET's
 * __fdelt_chk) or are stdio's (whose internal calls are another matter).
 *
 * Large-file names.  A program built with _FILE_OFFSET_BITS=64 calls
 * pread64 and pwrite64 (on x86-64 the same functions under a second name):
 * they come here too.
 */
extern void __chk_fail(void) __attribute__((noreturn));
HOOK_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
HOOK_API ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
HOOK_API ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen);
HOOK_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
HOOK_API ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa,
                                socklen_t *sl);
HOOK_API int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
HOOK_API int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *m, size_t fdslen);
_Static_assert(sizeof(off64_t) == sizeof(off_t), "pread64 is pread only where off_t is 64 bits");

HOOK_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
    TRAP_SCOPE;
    if (n > buflen) __chk_fail();
    return read(fd, buf, n);
}

HOOK_API ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen) {
    TRAP_SCOPE;
    if (n > buflen) __chk_fail();
    return pread(fd, buf, n, off);
}

HOOK_API ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen) {
    TRAP_SCOPE;
    if (n > buflen) __chk_fail();
    return pread(fd, buf, n, (off_t)off);
}

HOOK_API ssize_t pread64(int fd, void *buf, size_t n, off64_t off) { return pread(fd, buf, n, (off_t)off); }

HOOK_API ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) { return pwrite(fd, buf, n, (off_t)off); }

HOOK_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags) {
    TRAP_SCOPE;
    if (n > buflen) __chk_fail();
    return recv(fd, buf, n, flags);
}

HOOK_API ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags, struct sockaddr *sa,
                                socklen_t *sl) {
    if (n > buflen) __chk_fail();
    return recvfrom(fd, buf, n, flags, sa, sl);
}

HOOK_API int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen) {
    TRAP_SCOPE;
    if (fdslen / sizeof *fds < n) __chk_fail();
    return poll(fds, n, timeout);
}

HOOK_API int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *m, size_t fdslen) {
    TRAP_SCOPE;
    if (fdslen / sizeof *fds < n) __chk_fail();
    return ppoll(fds, n, ts, m);
}

/* select's sets are arrays of longs, nfds bits long, whatever FD_SETSIZE
 * says (the kernel reads that many; a program may pass larger sets):
 * read them by hand, not with FD_ISSET, which stops at FD_SETSIZE. */
#define SET_BITS (8 * sizeof(unsigned long))
static size_t set_bytes(int nfds) { return ((size_t)nfds + SET_BITS - 1) / SET_BITS * sizeof(unsigned long); }
static int set_has(const void *set, int fd) {
    return (int)((((const unsigned long *)set)[fd / SET_BITS] >> (fd % SET_BITS)) & 1);
}

/* select and pselect: their sets as a pollfd array, waited on as poll's;
 * every look is the real call with a zero timeout on the caller's sets,
 * put back from a copy before each.  An fd beyond the process's file
 * table is ignored, as the kernel does (the look said nothing of it; its
 * wait says POLLNVAL and it is dropped).  A failed call (EINTR above all)
 * leaves the sets as they were passed, as the kernel's does: a program
 * may call again with them (CPython's select retries so after a handler
 * ran; before, it found them emptied by the last look, and slept for good
 * on no fd -- seen: asyncio's subprocess tests, on SIGCHLD). */
static int select_common(int nfds, fd_set *rs, fd_set *ws, fd_set *es, int64_t dl, const sigset_t *m) {
    if (nfds < 0) return -EINVAL;
    /* the kernel reads no further than its file table, which is never
     * larger than the hard limit */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY && (rlim_t)nfds > rl.rlim_max)
        nfds = (int)rl.rlim_max;
    size_t bytes = set_bytes(nfds);
    fd_set small[3];
    char *save = bytes <= sizeof(fd_set) ? (char *)small : malloc(3 * bytes);
    if (!save) return -ENOMEM;
    fd_set *sets[3] = {rs, ws, es};
    for (int k = 0; k < 3; k++)
        if (sets[k]) memcpy(save + k * bytes, sets[k], bytes);
    static const struct timespec zero = {0, 0};
    struct pollfd *pf = NULL;
    nfds_t n = 0;
    int pin = -1, r;
    for (;;) {
        for (int k = 0; k < 3; k++)
            if (sets[k]) memcpy(sets[k], save + k * bytes, bytes);
        r = weft__libc.pselect(nfds, rs, ws, es, &zero, m);
        if (r < 0) r = -errno;
        if (r != 0) break;
        if (pin < 0) { /* first time: build the wait */
            nfds_t want = 0;
            for (int fd = 0; fd < nfds; fd++)
                if ((rs && set_has(save, fd)) || (ws && set_has(save + bytes, fd)) || (es && set_has(save + 2 * bytes, fd)))
                    want++;
            pf = malloc(sizeof *pf * (want ? want : 1));
            if (!pf) {
                r = -ENOMEM;
                break;
            }
            for (int fd = 0; fd < nfds; fd++) {
                short ev = (short)((rs && set_has(save, fd) ? POLLIN : 0) | (ws && set_has(save + bytes, fd) ? POLLOUT : 0) |
                                   (es && set_has(save + 2 * bytes, fd) ? POLLPRI : 0));
                if (ev) pf[n++] = (struct pollfd){.fd = fd, .events = ev};
            }
            pin = weft__pin_begin();
        }
        r = wait_any(pf, n, dl);
        if (r <= 0) {
            for (int k = 0; k < 3; k++) {
                if (!sets[k]) continue;
                if (r == 0) memset(sets[k], 0, bytes); /* timeout: nothing ready */
                else memcpy(sets[k], save + k * bytes, bytes); /* failed: as passed */
            }
            break;
        }
        for (nfds_t i = 0; i < n; i++)
            if (pf[i].revents & POLLNVAL) pf[i].fd = -1; /* beyond the table (or closed: the look says EBADF) */
    }
    if (pin >= 0) weft__pin_end(pin);
    free(pf);
    if (save != (char *)small) free(save);
    return r;
}

HOOK_API int select(int nfds, fd_set *rs, fd_set *ws, fd_set *es, struct timeval *tv) {
    TRAP_SCOPE;
    if (!hooked() || (tv && tv->tv_sec == 0 && tv->tv_usec == 0)) return weft__libc.select(nfds, rs, ws, es, tv);
    if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0)) return (int)fail(EINVAL);
    /* a tv_usec of a second or more counts as whole seconds, as glibc's */
    int64_t dl = 0;
    if (tv) {
        struct timespec t = {tv->tv_sec, (tv->tv_usec % 1000000) * 1000};
        long carry = tv->tv_usec / 1000000;
        t.tv_sec = tv->tv_sec > LONG_MAX - carry ? LONG_MAX : tv->tv_sec + carry;
        dl = weft_now() + ts_ns(&t);
    }
    int r = select_common(nfds, rs, ws, es, dl, NULL);
    if (tv) { /* Linux: the time not slept */
        int64_t left = dl - weft_now();
        if (left < 0) left = 0;
        tv->tv_sec = left / 1000000000;
        tv->tv_usec = (left % 1000000000) / 1000;
    }
    return (int)as_libc(r);
}

HOOK_API int pselect(int nfds, fd_set *rs, fd_set *ws, fd_set *es, const struct timespec *ts, const sigset_t *m) {
    TRAP_SCOPE;
    if (!hooked() || (ts && ts->tv_sec == 0 && ts->tv_nsec == 0)) return weft__libc.pselect(nfds, rs, ws, es, ts, m);
    if (ts && (ts->tv_sec < 0 || ts->tv_nsec < 0 || ts->tv_nsec >= 1000000000)) return (int)fail(EINVAL);
    return (int)as_libc(select_common(nfds, rs, ws, es, ts_deadline(ts), m));
}

static int epoll_common(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *m) {
    int r = weft__libc.epoll_pwait(ep, ev, max, 0, m);
    if (r != 0 || timeout == 0) return r < 0 ? -errno : r;
    int64_t dl = ms_deadline(timeout);
    int pin = weft__pin_begin();
    for (;;) {
        weft_thread *t = weft__self();
        weft__intr_begin(t, WEFT__INTR_ALWAYS);
        int w = intr_result(t, weft_poll(ep, POLLIN, dl));
        if (w == -ETIMEDOUT && dl && weft_now() >= dl) {
            r = 0;
            break;
        }
        if (w < 0) {
            r = w;
            break;
        }
        r = weft__libc.epoll_pwait(ep, ev, max, 0, m);
        if (r < 0) r = -errno;
        if (r != 0) break;
    }
    weft__pin_end(pin);
    return r;
}

HOOK_API int epoll_wait(int ep, struct epoll_event *ev, int max, int timeout) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.epoll_wait(ep, ev, max, timeout);
    return (int)as_libc(epoll_common(ep, ev, max, timeout, NULL));
}

HOOK_API int epoll_pwait(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *m) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.epoll_pwait(ep, ev, max, timeout, m);
    return (int)as_libc(epoll_common(ep, ev, max, timeout, m));
}

/* ------------------------------------------------------------------------ */
/* sleeps                                                                    */
/* ------------------------------------------------------------------------ */

/* Sleeps until dl (monotonic), pinned; 0 or -ECANCELED / -ETIMEDOUT. */
static int sleep_until(int64_t dl, const char *what) {
    int pin = weft__pin_begin();
    weft_thread *t = weft__self();
    weft__intr_begin(t, WEFT__INTR_ALWAYS); /* (a sleep ends with EINTR whatever the handler's flags) */
    int r = intr_result(t, weft__sleep_until_at(dl, what, 0));
    weft__pin_end(pin);
    return r;
}

int weft__hook_sleep_until(int64_t dl, const char *what) { return sleep_until(dl, what); }

static void set_left(struct timespec *rem, int64_t dl) {
    if (!rem) return;
    int64_t left = dl - weft_now();
    if (left < 0) left = 0;
    rem->tv_sec = left / 1000000000;
    rem->tv_nsec = left % 1000000000;
}

static int ts_valid(const struct timespec *ts) {
    return ts && ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000;
}

static int64_t ts_ns(const struct timespec *ts) {
    if (ts->tv_sec > INT64_MAX / 1000000000 - 1) return INT64_MAX / 2;
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

HOOK_API int nanosleep(const struct timespec *req, struct timespec *rem) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.nanosleep(req, rem);
    if (!req) return (int)fail(EFAULT);
    if (!ts_valid(req)) return (int)fail(EINVAL);
    int64_t dl = weft_now() + ts_ns(req);
    int r = sleep_until(dl, "nanosleep");
    if (r == 0) return 0;
    set_left(rem, dl);
    return (int)fail(-r);
}

HOOK_API int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem) {
    TRAP_SCOPE;
    if (!hooked() || (clk != CLOCK_MONOTONIC && clk != CLOCK_REALTIME && clk != CLOCK_BOOTTIME && clk != CLOCK_TAI))
        return weft__libc.clock_nanosleep(clk, flags, req, rem);
    if (!req) return EFAULT;
    if (!ts_valid(req)) return EINVAL;
    int64_t dl;
    if (flags & TIMER_ABSTIME) {
        /* an absolute time on clk, as a distance from now on weft's clock */
        struct timespec now;
        clock_gettime(clk, &now);
        int64_t d = ts_ns(req) - ts_ns(&now);
        dl = weft_now() + (d > 0 ? d : 0);
    } else {
        dl = weft_now() + ts_ns(req);
    }
    int r = sleep_until(dl, "clock_nanosleep");
    if (r == 0) return 0;
    if (!(flags & TIMER_ABSTIME)) set_left(rem, dl);
    return -r; /* clock_nanosleep returns the error, not -1 */
}

HOOK_API int usleep(useconds_t us) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.usleep(us);
    int r = sleep_until(weft_now() + (int64_t)us * 1000, "usleep");
    return r == 0 ? 0 : (int)fail(-r);
}

HOOK_API unsigned sleep(unsigned s) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.sleep(s);
    int64_t dl = weft_now() + (int64_t)s * 1000000000;
    int r = sleep_until(dl, "sleep");
    if (r == 0) return 0;
    errno = -r;
    int64_t left = dl - weft_now();
    return left > 0 ? (unsigned)((left + 999999999) / 1000000000) : 0;
}

/* pause and sigsuspend: the vthread parks until a handler interrupts it
 * (sched.c, "Interrupts": a foreign main), and they return -1 with EINTR,
 * as the kernel's.  Before, they blocked the carrier, and the signal --
 * delivered to whichever thread the kernel picked -- never ended them.
 * sigsuspend's mask is not put in place for the wait: a vthread's mask is
 * its carrier's (weft.h, "Signal handlers"). */
HOOK_API int pause(void) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.pause();
    return (int)fail(-sleep_until(INT64_MAX, "pause"));
}

HOOK_API int sigsuspend(const sigset_t *m) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.sigsuspend(m);
    if (weft__vsig_on()) return weft__vsig_suspend(m); /* (signals.c: its mask for the wait) */
    return (int)fail(-sleep_until(INT64_MAX, "sigsuspend"));
}

/* kill(getpid(), sig) from a vthread: the kernel gives a process-directed
 * signal to the process's first thread when that one does not block it --
 * in a program that has one thread, the caller, whose handler has run by
 * the time kill returns.  Under weft the caller is a vthread and the
 * kernel's first thread is not its carrier: the handler ran on another
 * thread, later, with another pthread_self (a foreign program saw its
 * handler on the calling thread 177 times in 200 here; issue 27 saw 0).
 * So such a kill goes to
 * the calling carrier's thread, with what kill would have put in the
 * siginfo (SI_USER, our pid and uid: rt_tgsigqueueinfo allows it for our
 * own process), and the handler runs on the vthread before kill returns.
 * Any other kill -- another process, a group, sig 0, a platform thread --
 * is the C library's. */
int weft__hook_raise_here(int sig, int code) {
    pid_t me = getpid();
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = sig;
    si.si_code = code;
    si.si_pid = me;
    si.si_uid = getuid();
    /* (no park between the two calls: the carrier is the caller's; not
     * trapped, whoever calls -- the trap answers a vthread's gettid with
     * its own tid, which the kernel does not know) */
    unsigned char o = weft__sud_allow();
    long r = syscall(SYS_rt_tgsigqueueinfo, me, (pid_t)syscall(SYS_gettid), sig, &si);
    int e = errno;
    weft__sud_restore(o);
#ifdef WEFT__LIBC_TSAN
    /* TSan defers a handler to the thread's next intercepted call; its own
     * kill runs the pending ones before returning when the pid is ours --
     * so a probe through it (signal 0) keeps kill's promise here too */
    if (r == 0) weft__libc.kill(me, 0);
#endif
    return r < 0 ? -e : 0;
}

HOOK_API int kill(pid_t pid, int sig) {
    TRAP_SCOPE;
    if (!hooked() || sig <= 0 || sig >= _NSIG) return weft__libc.kill(pid, sig);
    if (pid != getpid()) return weft__libc.kill(pid, sig);
    int r = weft__hook_raise_here(sig, SI_USER);
    return r < 0 ? (int)fail(-r) : 0;
}

/* pidfd_send_signal(2) to our own process -- a /proc/PID directory or a
 * pidfd_open descriptor of it (CPython's signal.pidfd_send_signal) -- is
 * kill(getpid(), sig): the handler runs on the caller before the call
 * returns (trapped: the C library's wrapper and a raw syscall alike).
 * 1 if fd names this process. */
static int pidfd_is_self(int fd) {
    struct stat a, b;
    if (fstat(fd, &a) < 0) return 0;
    if (S_ISDIR(a.st_mode)) return stat("/proc/self", &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
    int f = open(path, O_RDONLY | O_CLOEXEC);
    if (f < 0) return 0;
    ssize_t n = weft__libc.read(f, buf, sizeof buf - 1);
    weft__libc.close(f);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strstr(buf, "\nPid:");
    return p && atol(p + 5) == (long)getpid();
}

static long trapped_pidfd_signal(const long a[6], int *done) {
    int sig = (int)a[1];
    const siginfo_t *info = (const siginfo_t *)a[2];
    *done = 0;
    if (!hooked() || a[3] != 0 || sig <= 0 || sig >= _NSIG || info || !pidfd_is_self((int)a[0])) return 0;
    *done = 1;
    return weft__hook_raise_here(sig, SI_USER);
}

/* ------------------------------------------------------------------------ */
/* files, close, name lookup                                                 */
/* ------------------------------------------------------------------------ */

HOOK_API int fsync(int fd) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.fsync(fd);
    int pin = weft__pin_begin();
    int r = weft_fsync(fd);
    weft__pin_end(pin);
    return (int)as_libc(r);
}

HOOK_API int fdatasync(int fd) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.fdatasync(fd);
    int pin = weft__pin_begin();
    int r = weft_fdatasync(fd);
    weft__pin_end(pin);
    return (int)as_libc(r);
}

/*
 * The program's close and close_range leave weft's own descriptors alone
 * (libc/fds.c): to the program those numbers are not open, and closing
 * them would stop the runtime (a carrier asleep on a closed ring).  So a
 * close of one answers EBADF, as the kernel does for a number that is not
 * open, and a close_range closes the ranges between them.  Always, hooks
 * on or off, on any thread: one bit test.
 */
HOOK_API int close(int fd) {
    TRAP_SCOPE;
    if (__builtin_expect(weft__fd_owned(fd), 0)) {
        errno = EBADF;
        return -1;
    }
    /* On any thread while hooks are on: weft_close ends the hooked calls
     * in flight on fd and forgets what the epoll backend knew of it. */
    if (!atomic_load_explicit(&hook_on, memory_order_relaxed) || sig_depth || !weft__running())
        return weft__libc.close(fd);
    int pin = weft__pin_begin();
    int r = weft_close(fd);
    weft__pin_end(pin);
    return (int)as_libc(r);
}

/* (the C library's close_range is the system call; so is this one's, made
 * for each run of numbers between weft's) */
HOOK_API int close_range(unsigned first, unsigned last, int flags) {
    TRAP_SCOPE;
    if (first > last) {
        errno = EINVAL;
        return -1;
    }
    unsigned from = first;
    for (;;) {
        int own = weft__fd_next_owned(from, last);
        unsigned to = own < 0 ? last : (unsigned)own - 1;
        if (own < 0 || (unsigned)own > from) {
            long r = syscall(SYS_close_range, from, to, flags);
            if (r < 0) return -1; /* (errno: the kernel's) */
        }
        if (own < 0 || (unsigned)own >= last) return 0;
        from = (unsigned)own + 1;
    }
}

typedef struct gai_job {
    const char *node, *service;
    const struct addrinfo *hints;
    struct addrinfo **res;
    int ret, err;
} gai_job;

static void *gai_run(void *arg) {
    gai_job *j = arg;
    j->ret = weft__libc.getaddrinfo(j->node, j->service, j->hints, j->res);
    j->err = errno;
    return NULL;
}

HOOK_API int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
    TRAP_SCOPE;
    if (!hooked()) return weft__libc.getaddrinfo(node, service, hints, res);
    gai_job j = {node, service, hints, res, 0, 0};
    int pin = weft__pin_begin();
    int r = weft_blocking(gai_run, &j, NULL);
    weft__pin_end(pin);
    if (r < 0) { /* the pool could not take it: ask here, blocking */
        return weft__libc.getaddrinfo(node, service, hints, res);
    }
    if (j.ret == EAI_SYSTEM) errno = j.err;
    return j.ret;
}

/* ------------------------------------------------------------------------ */
/* a trapped system call (trap.c)                                            */
/* ------------------------------------------------------------------------ */

/*
 * A system call the C library made on its own (stdio's read, ...), or that
 * code made without the C library, trapped on a carrier: the interposer
 * that stands for it does its work, as if the call had come through the
 * PLT.  The kernel's arguments are the C library's, but for these: recv
 * and send are recvfrom and sendto (NULL addresses); select and pselect
 * are pselect6, whose sixth argument is {the mask, its size}; ppoll and
 * epoll_pwait carry the mask's size, which the interposers do not need.
 * The kernel's pselect6 writes the time left back, which the interposer
 * does not (glibc's select reads it back, so a trapped select's timeval
 * is left as it was: POSIX allows either).  clock_nanosleep returns its
 * error; the others -1 and errno.
 */
static int hook_trapped(long nr, const long a[6], long *ret) {
    long r;
    switch (nr) {
    case SYS_read: r = read((int)a[0], (void *)a[1], (size_t)a[2]); break;
    case SYS_close: /* (only weft's own are refused: the rest is made as it is, as before) */
        if (!weft__fd_owned((int)a[0])) return 0;
        *ret = -EBADF;
        return 1;
    /* fstat of one of weft's own: EBADF, as close's -- to the program the
     * number is not open (a program that counts its descriptors by
     * fstat-ing every number, as CPython's test of pass_fds does, counted
     * the runtime's; trapped, the C library's fstat among them) */
    case SYS_fstat:
        if (!weft__fd_owned((int)a[0])) return 0;
        *ret = -EBADF;
        return 1;
    case SYS_newfstatat:
        if (!(a[3] & AT_EMPTY_PATH) || !a[1] || *(const char *)a[1] || !weft__fd_owned((int)a[0])) return 0;
        *ret = -EBADF;
        return 1;
#ifdef SYS_statx
    case SYS_statx:
        if (!(a[2] & AT_EMPTY_PATH) || !a[1] || *(const char *)a[1] || !weft__fd_owned((int)a[0])) return 0;
        *ret = -EBADF;
        return 1;
#endif
#ifdef SYS_pause /* (x86-64's; aarch64 and riscv64 have only ppoll, pselect6, epoll_pwait and sigsuspend) */
    case SYS_pause: r = pause(); break;
#endif
    case SYS_kill: r = kill((pid_t)a[0], (int)a[1]); break;
    case SYS_rt_sigsuspend: r = sigsuspend((const sigset_t *)a[0]); break;
    case SYS_sched_yield: r = sched_yield(); break; /* (threads.c's, where it is built) */
    case SYS_rt_sigtimedwait: /* (sigwait's own, glibc's) */
        if (!hooked() || !weft__vsig_on()) return 0;
        *ret = weft__vsig_trapped_wait(a);
        return 1;
#ifdef SYS_pidfd_send_signal
    case SYS_pidfd_send_signal: {
        int done;
        long v = trapped_pidfd_signal(a, &done);
        if (!done) return 0;
        *ret = v;
        return 1;
    }
#endif
    case SYS_rt_sigpending:
        if (!weft__vsig_on()) return 0;
        *ret = weft__vsig_trapped_pending(a);
        return 1;
#ifdef SYS_close_range
    case SYS_close_range: r = close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]); break;
#endif
    case SYS_write: r = write((int)a[0], (const void *)a[1], (size_t)a[2]); break;
    case SYS_readv: r = readv((int)a[0], (const struct iovec *)a[1], (int)a[2]); break;
    case SYS_writev: r = writev((int)a[0], (const struct iovec *)a[1], (int)a[2]); break;
    case SYS_pread64: r = pread((int)a[0], (void *)a[1], (size_t)a[2], (off_t)a[3]); break;
    case SYS_pwrite64: r = pwrite((int)a[0], (const void *)a[1], (size_t)a[2], (off_t)a[3]); break;
    case SYS_recvfrom:
        r = recvfrom((int)a[0], (void *)a[1], (size_t)a[2], (int)a[3], (struct sockaddr *)a[4], (socklen_t *)a[5]);
        break;
    case SYS_sendto:
        r = sendto((int)a[0], (const void *)a[1], (size_t)a[2], (int)a[3], (const struct sockaddr *)a[4],
                   (socklen_t)a[5]);
        break;
    case SYS_recvmsg: r = recvmsg((int)a[0], (struct msghdr *)a[1], (int)a[2]); break;
    case SYS_sendmsg: r = sendmsg((int)a[0], (const struct msghdr *)a[1], (int)a[2]); break;
    case SYS_accept: r = accept((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]); break;
    case SYS_accept4: r = accept4((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2], (int)a[3]); break;
    case SYS_connect: r = connect((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]); break;
#ifdef SYS_poll
    case SYS_poll: r = poll((struct pollfd *)a[0], (nfds_t)a[1], (int)a[2]); break;
#endif
    case SYS_ppoll:
        r = ppoll((struct pollfd *)a[0], (nfds_t)a[1], (const struct timespec *)a[2], (const sigset_t *)a[3]);
        break;
#ifdef SYS_select
    case SYS_select:
        r = select((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3], (struct timeval *)a[4]);
        break;
#endif
    case SYS_pselect6: {
        const sigset_t *m = a[5] ? *(const sigset_t *const *)a[5] : NULL;
        r = pselect((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3], (const struct timespec *)a[4], m);
        break;
    }
#ifdef SYS_epoll_wait
    case SYS_epoll_wait: r = epoll_wait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3]); break;
#endif
    case SYS_epoll_pwait:
        r = epoll_pwait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3], (const sigset_t *)a[4]);
        break;
    case SYS_nanosleep: r = nanosleep((const struct timespec *)a[0], (struct timespec *)a[1]); break;
    case SYS_sendfile: r = sendfile((int)a[0], (int)a[1], (off_t *)a[2], (size_t)a[3]); break;
    case SYS_gettid: { /* a vthread's own tid, its TCB's (as gettid's interposer answers: threads.c) */
        weft_thread *t = weft__self();
        if (!t || !t->tls) return 0;
        *ret = weft__tls_tid();
        return 1;
    }
    case SYS_tgkill:
    case SYS_tkill: { /* to its own tid (raise, abort): its carrier's, the one the kernel knows */
        weft_thread *t = weft__self();
        long tid = nr == SYS_tgkill ? a[1] : a[0];
        int sig = (int)(nr == SYS_tgkill ? a[2] : a[1]);
        if (nr == SYS_tgkill && a[0] != getpid()) return 0;
        if (!t || !t->tls || tid != weft__tls_tid()) {
            /* another vthread's tid (the kernel knows none of them) */
            long k = weft__vpt_tid_kill(tid, sig);
            if (k == 1) return 0;
            *ret = k;
            return 1;
        }
        long real = syscall(SYS_gettid);
        r = nr == SYS_tgkill ? syscall(SYS_tgkill, a[0], real, a[2]) : syscall(SYS_tkill, real, a[1]);
        break;
    }
    case SYS_clock_nanosleep:
        r = clock_nanosleep((clockid_t)a[0], (int)a[1], (const struct timespec *)a[2], (struct timespec *)a[3]);
        *ret = -r;
        return 1;
    default: return 0;
    }
    *ret = r < 0 ? -errno : r;
    return 1;
}

int weft__hook_trapped(long nr, const long a[6], long *ret) {
    in_trap++;
    int r = hook_trapped(nr, a, ret);
    in_trap--;
    return r;
}

/* ------------------------------------------------------------------------ */
/* signal handlers                                                           */
/* ------------------------------------------------------------------------ */

/*
 * A handler runs on whatever the signal interrupted: a vthread's code, or
 * the carrier in the middle of a switch or a park, holding the scheduler's
 * own locks.  A hooked call that parked from there would wait for the very
 * lock its carrier holds.  So, as libc's do, a hooked call made inside a
 * handler goes straight to the C library: hooked() reads sig_depth, the
 * number of handlers the OS thread is inside -- one thread-local load, no
 * system call on the hooked path.
 *
 * Who counts.  The program's handlers are registered through sigaction
 * and signal, defined here in front of the C library's (always, hooks on
 * or off: a handler installed before weft_init or before the hooks went on
 * must be counted too).  The kernel is given a trampoline instead -- one
 * for plain handlers, one for SA_SIGINFO ones, so that each calls its
 * handler with the arguments its kind takes -- that raises sig_depth, calls
 * the program's handler and lowers it.  The handler itself lives in a table
 * per kind and signal, written before the kernel is told, so a signal that
 * comes between the two runs the old handler through the old trampoline or
 * the new one through the new (never one kind's handler through the other
 * kind's call).  The flags and mask go to the kernel as given (SA_ONSTACK,
 * SA_RESTART, SA_RESETHAND ... keep their meaning); SIG_DFL and SIG_IGN go
 * as they are.  What a sigaction reports as the old action is the
 * program's handler, never a trampoline: a library that saves and later
 * restores a handler restores the program's.  sigaction is async-signal-
 * safe and a handler may call it: the table is updated under a spin flag
 * taken with every signal blocked on the calling thread, so a handler can
 * never spin on its own thread's flag.
 *
 * Handlers the kernel had before: a library that installed one with the
 * raw system call, or before libweft was loaded (dlopen), is found when
 * the hooks go on (weft__hook_start asks the kernel for each signal) and
 * wrapped then.  The fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE,
 * SIGTRAP, SIGSYS) are left out of that pass: their handlers are often a
 * sanitizer's or a runtime's own, which must see the fault as the kernel
 * delivered it.
 *
 * Leaving by a jump.  A handler may leave by siglongjmp (or longjmp) to
 * code outside it, and the trampoline's decrement then never runs.  So
 * longjmp, _longjmp, siglongjmp and __longjmp_chk are defined here too: on
 * a thread inside a handler they set the count back to 0 -- the jump
 * leaves the handler, as it almost always does -- then jump with the C
 * library's (looked up at load, since a handler must not call dlsym).  A
 * jump that stays inside a handler (its own sigsetjmp) loses the count
 * for the rest of that handler.
 *
 * A platform thread's handler is counted too, and changes nothing there:
 * its hooked calls were the C library's already.  Limits: sigset(3) and
 * sigvec are not wrapped (a handler installed through them
 * is found only by weft__hook_start's pass); signal() gives BSD semantics
 * (SA_RESTART) and forgets siginterrupt(3)'s choice for that signal.  And
 * weft's own blocking calls (weft_sleep, weft_mutex_lock, weft_chan_send
 * ...) must not be made in a handler at all: they park.
 */

#ifndef _NSIG
#define _NSIG 65
#endif

typedef void (*plain_fn)(int);
typedef void (*info_fn)(int, siginfo_t *, void *);

static plain_fn _Atomic sig_plain[_NSIG];
static info_fn _Atomic sig_info[_NSIG];
static _Atomic unsigned char sig_restart[_NSIG]; /* its handler has SA_RESTART (for weft__intr_post) */
/* SIG_DFL signals a vthread's mask blocks: the kernel has tramp_catch for
 * them while the program's action is SIG_DFL (signals.c, "Default
 * actions") */
static _Atomic unsigned char sig_caught[_NSIG];
/* weft's preemption signal (trap.c; 0: none): see weft__hook_take_signal */
static _Atomic int preempt_sig;

int weft__hook_sig_restart(int sig) {
    return sig > 0 && sig < _NSIG && atomic_load_explicit(&sig_restart[sig], memory_order_relaxed);
}
static atomic_flag sig_lock = ATOMIC_FLAG_INIT;

/* (the system call trap, trap.c: a handler runs untrapped -- its hooked
 * calls go to the C library anyway -- and whatever it interrupted gets
 * its selector back, so that the C library's rt_sigreturn that follows
 * traps exactly when the interrupted code was the program's) */
/* (errno as the handler left it: a trampoline's own calls must not
 * change what the interrupted code reads) */
static void intr_post(int sig) {
    int e = errno;
    weft__intr_post(sig, atomic_load_explicit(&sig_restart[sig], memory_order_relaxed));
    errno = e;
}

/* Whether the signal runs here: a vthread's mask may keep it for later or
 * for another (signals.c, "The model"); errno as it was. */
static int here(int sig, siginfo_t *si) {
    int e = errno;
    int r = weft__vsig_here(sig, si);
    errno = e;
    return r;
}

/* (both trampolines are given to the kernel with SA_SIGINFO: the
 * siginfo tells a signal sent to one thread from one sent to the process) */
static void tramp_plain(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    unsigned char trap_o = weft__sud_allow();
    if (!here(sig, si)) {
        weft__sud_restore(trap_o);
        return;
    }
    sig_depth++;
    atomic_signal_fence(memory_order_seq_cst);
    plain_fn h = atomic_load_explicit(&sig_plain[sig], memory_order_acquire);
    if (h) h(sig);
    atomic_signal_fence(memory_order_seq_cst);
    sig_depth--;
    /* the wait a handler interrupts (sched.c, "Interrupts") */
    if (h && !weft__vsig_on()) intr_post(sig); /* (on a vthread: it was not waiting; signals.c) */
    weft__sud_restore(trap_o);
}

static void tramp_info(int sig, siginfo_t *si, void *uc) {
    unsigned char trap_o = weft__sud_allow();
    if (!here(sig, si)) {
        weft__sud_restore(trap_o);
        return;
    }
    sig_depth++;
    atomic_signal_fence(memory_order_seq_cst);
    info_fn h = atomic_load_explicit(&sig_info[sig], memory_order_acquire);
    if (h) h(sig, si, uc);
    atomic_signal_fence(memory_order_seq_cst);
    sig_depth--;
    if (h && !weft__vsig_on()) intr_post(sig); /* (on a vthread: it was not waiting; signals.c) */
    weft__sud_restore(trap_o);
}

/* (the kernel's mask of this OS thread, never a vthread's virtual one:
 * the system call itself, not the C library's pthread_sigmask, which
 * signals.c's interposer stands in front of) */
SIG_NOSAN static void sig_table_lock(uint64_t *saved) {
    uint64_t all = ~(1ull << (SIGSYS - 1)); /* (the trap's: a trapped call under the lock needs it) */
    unsigned char o = weft__sud_allow(); /* (the OS thread's yield, never a trapped one that would park) */
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, saved, sizeof all);
    while (atomic_flag_test_and_set_explicit(&sig_lock, memory_order_acquire)) syscall(SYS_sched_yield);
    weft__sud_restore(o);
}

SIG_NOSAN static void sig_table_unlock(const uint64_t *saved) {
    atomic_flag_clear_explicit(&sig_lock, memory_order_release);
    unsigned char o = weft__sud_allow();
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, saved, NULL, sizeof *saved);
    weft__sud_restore(o);
}

/* The catcher of a SIG_DFL signal a vthread blocks: where it is to act,
 * its default action (signals.c, "Default actions"). */
static void tramp_catch(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    unsigned char trap_o = weft__sud_allow();
    if (here(sig, si)) {
        int e = errno;
        weft__hook_default_action(sig);
        errno = e;
    }
    weft__sud_restore(trap_o);
}

static int dfl_ignored(int sig) { return sig == SIGCHLD || sig == SIGURG || sig == SIGWINCH || sig == SIGCONT; }

/* sig's default action, now, on this thread: ignore; stop (the process,
 * as the kernel's group stop: by SIGSTOP); or terminate -- SIG_DFL back
 * in the kernel and sig raised unblocked here, of which the process dies
 * (with a core where sig's default makes one). */
void weft__hook_default_action(int sig) {
    if (sig <= 0 || sig >= _NSIG || dfl_ignored(sig)) return;
    unsigned char o = weft__sud_allow();
    pid_t me = getpid();
    long tid = syscall(SYS_gettid);
    if (sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
        syscall(SYS_tgkill, me, tid, SIGSTOP);
        weft__sud_restore(o);
        return;
    }
    struct sigaction d;
    memset(&d, 0, sizeof d);
    d.sa_handler = SIG_DFL;
    weft__libc.sigaction(sig, &d, NULL);
    uint64_t b = 1ull << (sig - 1);
    syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &b, NULL, sizeof b);
    syscall(SYS_tgkill, me, tid, sig);
    weft__sud_restore(o); /* (not reached, but for a signal whose default the kernel ignores after all) */
}

int weft__hook_caught(int sig) {
    return sig > 0 && sig < _NSIG && atomic_load(&sig_caught[sig]) &&
           !atomic_load_explicit(&sig_plain[sig], memory_order_relaxed) &&
           !atomic_load_explicit(&sig_info[sig], memory_order_relaxed);
}

/* the kernel's action for tramp_catch */
static void catch_action(struct sigaction *k) {
    memset(k, 0, sizeof *k);
    k->sa_sigaction = tramp_catch;
    k->sa_flags = SA_SIGINFO | SA_RESTART;
}

/* A handler that is a function of the program's (not SIG_DFL, SIG_IGN,
 * SIG_HOLD, SIG_ERR). */
SIG_NOSAN static int is_function(const struct sigaction *a) {
    void *h = (a->sa_flags & SA_SIGINFO) ? (void *)a->sa_sigaction : (void *)a->sa_handler;
    return h != (void *)SIG_DFL && h != (void *)SIG_IGN && h != (void *)SIG_ERR
#ifdef SIG_HOLD
           && h != (void *)SIG_HOLD
#endif
        ;
}

/* sigaction with the table lock held. */
SIG_NOSAN static int sigaction_locked(int sig, const struct sigaction *act, struct sigaction *old) {
    plain_fn was_plain = atomic_load_explicit(&sig_plain[sig], memory_order_relaxed);
    info_fn was_info = atomic_load_explicit(&sig_info[sig], memory_order_relaxed);
    struct sigaction k;
    const struct sigaction *give = act;
    if (act && is_function(act)) {
        atomic_store_explicit(&sig_restart[sig], (act->sa_flags & SA_RESTART) != 0, memory_order_relaxed);
        k = *act;
        if (act->sa_flags & SA_SIGINFO) {
            atomic_store_explicit(&sig_info[sig], act->sa_sigaction, memory_order_release);
            k.sa_sigaction = tramp_info;
        } else {
            atomic_store_explicit(&sig_plain[sig], act->sa_handler, memory_order_release);
            k.sa_sigaction = tramp_plain;
            k.sa_flags |= SA_SIGINFO;
        }
        give = &k;
    } else if (act && act->sa_handler == SIG_DFL && atomic_load(&sig_caught[sig])) {
        /* the program's default, which a vthread blocks: still caught */
        atomic_store_explicit(&sig_plain[sig], NULL, memory_order_release);
        atomic_store_explicit(&sig_info[sig], NULL, memory_order_release);
        atomic_store_explicit(&sig_restart[sig], 1, memory_order_relaxed);
        catch_action(&k);
        k.sa_mask = act->sa_mask;
        give = &k;
    }
    int r = weft__libc.sigaction(sig, give, old);
    if (r < 0) {
        int e = errno;
        atomic_store_explicit(&sig_plain[sig], was_plain, memory_order_relaxed);
        atomic_store_explicit(&sig_info[sig], was_info, memory_order_relaxed);
        errno = e;
        return r;
    }
    if (old && (old->sa_flags & SA_SIGINFO)) { /* the program's action, not ours */
        if (old->sa_sigaction == tramp_info) {
            old->sa_sigaction = was_info;
        } else if (old->sa_sigaction == tramp_plain) {
            old->sa_handler = was_plain;
            old->sa_flags &= ~SA_SIGINFO;
        } else if (old->sa_sigaction == tramp_catch) {
            old->sa_handler = SIG_DFL;
            old->sa_flags &= ~(SA_SIGINFO | SA_RESTART);
        }
    }
    return r;
}

/* Catches, from now on, each signal of set (the kernel's layout) whose
 * action is SIG_DFL: a vthread's mask has begun to block them
 * (signals.c).  May run in a handler (the trap's): the table's lock
 * blocks every signal on the OS thread, as for sigaction. */
void weft__hook_catch_default(uint64_t set) {
    set &= ~((1ull << (SIGKILL - 1)) | (1ull << (SIGSTOP - 1)) | (1ull << (SIGSEGV - 1)) | (1ull << (SIGBUS - 1)) |
             (1ull << (SIGILL - 1)) | (1ull << (SIGFPE - 1)) | (1ull << (SIGTRAP - 1)) | (1ull << (SIGSYS - 1)));
    int ps = atomic_load(&preempt_sig);
    if (ps > 0) set &= ~(1ull << (ps - 1)); /* (weft's: its own handler stays) */
    for (uint64_t p = set; p; p &= p - 1) {
        int sig = __builtin_ctzll(p) + 1;
        if (sig >= _NSIG || atomic_load_explicit(&sig_caught[sig], memory_order_relaxed)) continue;
        uint64_t saved;
        sig_table_lock(&saved);
        struct sigaction cur;
        if (!atomic_load(&sig_caught[sig]) && weft__libc.sigaction(sig, NULL, &cur) == 0 &&
            !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
            struct sigaction k;
            catch_action(&k);
            atomic_store(&sig_caught[sig], 1);
            atomic_store_explicit(&sig_restart[sig], 1, memory_order_relaxed);
            weft__libc.sigaction(sig, &k, NULL);
        } else {
            atomic_store(&sig_caught[sig], 1); /* (a handler of the program's, or ignored: if it goes back to SIG_DFL) */
        }
        sig_table_unlock(&saved);
    }
}

/* Weft's preemption signal (trap.c, "Preemption"): the kernel's action is
 * weft's for good; the program's is kept here (under the table's lock) and
 * the handler hands it what is not weft's (weft__hook_dispatch). */
static struct sigaction preempt_prog;

/* (the table's lock held) the program's action for preempt_sig becomes
 * a: its handler in the table, as sigaction_locked puts it */
SIG_NOSAN static void preempt_set(int sig, const struct sigaction *a) {
    preempt_prog = *a;
    plain_fn p = NULL;
    info_fn f = NULL;
    if (is_function(a)) {
        if (a->sa_flags & SA_SIGINFO) f = a->sa_sigaction;
        else p = a->sa_handler;
    }
    atomic_store_explicit(&sig_restart[sig], (a->sa_flags & SA_RESTART) != 0, memory_order_relaxed);
    atomic_store_explicit(&sig_plain[sig], p, memory_order_release);
    atomic_store_explicit(&sig_info[sig], f, memory_order_release);
}

void weft__hook_take_signal(int sig, const struct sigaction *was) {
    uint64_t saved;
    sig_table_lock(&saved);
    struct sigaction a = *was;
    if ((a.sa_flags & SA_SIGINFO) && a.sa_sigaction == tramp_info) {
        a.sa_sigaction = atomic_load(&sig_info[sig]);
    } else if ((a.sa_flags & SA_SIGINFO) && a.sa_sigaction == tramp_plain) {
        a.sa_handler = atomic_load(&sig_plain[sig]);
        a.sa_flags &= ~SA_SIGINFO;
    } else if ((a.sa_flags & SA_SIGINFO) && a.sa_sigaction == tramp_catch) {
        a.sa_handler = SIG_DFL;
        a.sa_flags &= ~(SA_SIGINFO | SA_RESTART);
    }
    preempt_set(sig, &a);
    atomic_store(&preempt_sig, sig);
    sig_table_unlock(&saved);
}

/* preempt_sig came, and was not weft's: the program's action */
void weft__hook_dispatch(int sig, siginfo_t *si, void *uc) {
    if (atomic_load_explicit(&sig_info[sig], memory_order_acquire)) tramp_info(sig, si, uc);
    else if (atomic_load_explicit(&sig_plain[sig], memory_order_acquire)) tramp_plain(sig, si, uc);
    /* (else SIG_DFL or SIG_IGN: SIGURG's default is to ignore it) */
}

SIG_NOSAN HOOK_API int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (sig <= 0 || sig >= _NSIG) return weft__libc.sigaction(sig, act, old); /* EINVAL, as libc */
    if (__builtin_expect(vfork_child, 0)) { /* (the tables only read: the program's old action) */
        int r = weft__libc.sigaction(sig, act, old);
        if (r == 0 && old && (old->sa_flags & SA_SIGINFO)) {
            if (old->sa_sigaction == tramp_info) {
                old->sa_sigaction = atomic_load_explicit(&sig_info[sig], memory_order_relaxed);
            } else if (old->sa_sigaction == tramp_plain) {
                old->sa_handler = atomic_load_explicit(&sig_plain[sig], memory_order_relaxed);
                old->sa_flags &= ~SA_SIGINFO;
            } else if (old->sa_sigaction == tramp_catch) {
                old->sa_handler = SIG_DFL;
                old->sa_flags &= ~(SA_SIGINFO | SA_RESTART);
            }
        }
        return r;
    }
    if (sig == atomic_load_explicit(&preempt_sig, memory_order_relaxed)) {
        uint64_t saved;
        sig_table_lock(&saved);
        if (old) *old = preempt_prog;
        if (act) preempt_set(sig, act);
        sig_table_unlock(&saved);
        return 0;
    }
    if ((!act || (!is_function(act) && !atomic_load_explicit(&sig_caught[sig], memory_order_relaxed))) && !old)
        return weft__libc.sigaction(sig, act, old);
    uint64_t saved;
    sig_table_lock(&saved);
    int r = sigaction_locked(sig, act, old);
    int e = errno;
    sig_table_unlock(&saved);
    errno = e;
    return r;
}

/* glibc's signal(): BSD semantics (the handler stays, SA_RESTART, the
 * signal blocked while its handler runs) */
SIG_NOSAN HOOK_API sighandler_t signal(int sig, sighandler_t h) {
    struct sigaction a, o;
    memset(&a, 0, sizeof a);
    a.sa_handler = h;
    sigemptyset(&a.sa_mask);
    if (sig > 0 && sig < _NSIG) sigaddset(&a.sa_mask, sig);
    a.sa_flags = SA_RESTART;
    if (sigaction(sig, &a, &o) < 0) return SIG_ERR;
    return o.sa_handler;
}

SIG_NOSAN HOOK_API sighandler_t bsd_signal(int sig, sighandler_t h) { return signal(sig, h); }

/* System V semantics: the handler is reset on delivery and the signal not
 * blocked (what signal() is in glibc under strict ISO C) */
SIG_NOSAN HOOK_API sighandler_t sysv_signal(int sig, sighandler_t h) {
    struct sigaction a, o;
    memset(&a, 0, sizeof a);
    a.sa_handler = h;
    sigemptyset(&a.sa_mask);
    a.sa_flags = SA_RESETHAND | SA_NODEFER;
    if (sigaction(sig, &a, &o) < 0) return SIG_ERR;
    return o.sa_handler;
}
SIG_NOSAN HOOK_API sighandler_t __sysv_signal(int sig, sighandler_t h) { return sysv_signal(sig, h); }

/* Wraps the handlers the kernel has that did not come through sigaction
 * above (see the top of this section). */
static void wrap_installed(void) {
    uint64_t saved;
    sig_table_lock(&saved);
    for (int sig = 1; sig < _NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP || sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE ||
            sig == SIGTRAP || sig == SIGSYS || sig == atomic_load(&preempt_sig))
            continue;
        struct sigaction k;
        if (weft__libc.sigaction(sig, NULL, &k) < 0 || !is_function(&k)) continue;
        if ((k.sa_flags & SA_SIGINFO) && (k.sa_sigaction == tramp_info || k.sa_sigaction == tramp_plain ||
                                          k.sa_sigaction == tramp_catch))
            continue;
        sigaction_locked(sig, &k, NULL);
    }
    sig_table_unlock(&saved);
}

/* longjmp and its kin: leave the handler count behind (see "Leaving by a
 * jump" above); the C library's are looked up at load (libc.c). */
__attribute__((noreturn)) static void jump(int which, struct __jmp_buf_tag *env, int val) {
    sig_depth = 0;
    atomic_signal_fence(memory_order_seq_cst);
    weft__jump_fn f = __atomic_load_n(&weft__libc_jump[which], __ATOMIC_ACQUIRE);
    if (!f) { /* before the constructor (another library's) */
        weft__libc_jumps_resolve();
        f = weft__libc_jump[which] ? weft__libc_jump[which] : weft__libc_jump[WEFT__J_LONGJMP];
    }
    f(env, val);
    __builtin_unreachable();
}

HOOK_API void longjmp(jmp_buf env, int val) { jump(WEFT__J_LONGJMP, env, val); }
HOOK_API void _longjmp(jmp_buf env, int val) { jump(WEFT__J__LONGJMP, env, val); }
HOOK_API void siglongjmp(sigjmp_buf env, int val) { jump(WEFT__J_SIGLONGJMP, env, val); }
HOOK_API __attribute__((noreturn)) void __longjmp_chk(struct __jmp_buf_tag *env, int val);
HOOK_API void __longjmp_chk(struct __jmp_buf_tag *env, int val) { jump(WEFT__J_CHK, env, val); }
