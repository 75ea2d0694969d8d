/*
 * weft.h -- Project Loom for C: virtual threads on a work-stealing pool of
 * carrier threads.
 *
 * Conventions, stated once for the whole API:
 *
 *  - Functions that can fail return >= 0 on success and a negative errno
 *    value on failure (-EINVAL, -ENOMEM, -ECANCELED, -ETIMEDOUT, ...), as
 *    liburing does.  errno is never the channel for weft results.
 *  - Constructors -- weft_<type>_create, and weft_spawn for a vthread --
 *    store the new object through their first parameter and return 0 or
 *    -errno (weft_spawn(&t, ...), weft_chan_create(&c, ...),
 *    weft_future_create(&f), weft_scope_create(&s, ...),
 *    weft_group_create(&g, ...), weft_file_create(&f, ...)); on failure
 *    the out-parameter is set to NULL where it can be.  A type that comes
 *    in kinds with different parameters has one constructor per kind,
 *    weft_<type>_create_<kind> (weft_executor_create_virtual(&e),
 *    _fixed(&e, threads, queue, policy), _cached, _scheduled, _group):
 *    each kind's parameters are required and checked by the compiler, as
 *    Java's Executors.newFixedThreadPool(n) & co. and libuv's uv_tcp_init /
 *    uv_timer_init are one call per kind -- not one call with a kind field
 *    in an options struct, most of whose fields would not apply to a given
 *    kind.  What an operation returns is not a constructor: a future from
 *    weft_submit, _then, _all, _any or an _async call, a task from
 *    weft_fork, is returned as a pointer: NULL on failure, with errno set
 *    to the reason (EINVAL, ENOMEM ...; docs/errors.md says when) -- the
 *    one place a weft call sets errno, as malloc(3) does.
 *  - A call that never waits is named with try_ before its verb
 *    (weft_mutex_try_lock, weft_sem_try_acquire, weft_chan_try_send,
 *    weft_try_select); it returns -EAGAIN (or -EBUSY, as its comment says)
 *    where its waiting twin would wait.
 *  - Options are a struct named after what they configure, weft_<what>_opts
 *    (weft_runtime_opts for weft_init, weft_thread_opts for weft_spawn,
 *    weft_group_opts, weft_file_opts, weft_async_opts); NULL, or a zero
 *    field, means the default.
 *  - Times are int64_t nanoseconds of CLOCK_MONOTONIC (weft_now()).  A
 *    deadline is an absolute time of that clock; 0 means "no deadline".
 *    One rule, everywhere: a parameter or field named deadline_ns (or
 *    deadline) is such an absolute time; any other *_ns (weft_sleep's ns,
 *    delay_ns, period_ns, keep_alive_ns, pin_threshold_ns) is a duration.
 *    A blocking call takes its deadline in one of two ways: the calling
 *    thread's deadline (weft_deadline_set), which every blocking call
 *    honours, or a per-call one, given to the call's _until twin
 *    (weft_mutex_lock_until, weft_chan_recv_until, weft_recv_until ...) or
 *    as its last parameter where waiting is the call's purpose (weft_poll,
 *    weft_select, weft_future_get).  A per-call deadline adds to the
 *    thread's: the earlier of the two applies.
 *  - Every blocking call is a cancellation point: once the calling vthread
 *    has been cancelled (weft_cancel), the call returns -ECANCELED.
 *    Cancellation is sticky, like a cancelled Go context: a cancelled vthread
 *    gets -ECANCELED from every later blocking call, so it winds down.
 *  - Every blocking call honours the caller's deadline (weft_deadline_set) and
 *    returns -ETIMEDOUT when it passes.
 *  - Every blocking call also works on an ordinary pthread ("platform
 *    thread"): it then blocks that pthread.
 *  - A vthread may resume on another carrier after any blocking call, so a C
 *    thread-local (errno included) read before such a call may not be the one
 *    read after it -- and the compiler may keep a thread-local's address
 *    (errno's too) across the call.  What is safe instead (weft/local.h):
 *      errno:                weft's own calls return -errno; read a libc
 *                            call's errno before the next weft blocking call;
 *      per-request state:    scoped values (weft_scoped_run / _get: set once
 *                            for a call tree, inherited by its scopes' forks)
 *                            or vthread-locals (weft_local_get / _set: a
 *                            pthread_key_t that follows the vthread);
 *      code that needs C TLS itself (a library keeping __thread state across
 *                            blocking calls): spawn it with
 *                            weft_thread_opts.own_tls ("Own TLS", below),
 *                            or weft_thread_opts.pinned.
 *  - Vthreads are not preempted: one that computes holds its carrier until
 *    it blocks or yields.  What that carrier alone would have run next -- a
 *    vthread it woke, one that yielded, a due timer -- is moved to another
 *    carrier by the runtime's monitor thread within about 20 ms (with one
 *    carrier, or all busy: to a spare carrier, within pin_threshold_ns); I/O
 *    completions on its ring, and vthreads pinned to it, wait for it.
 *  - Call-site capture: the blocking calls record where they were called
 *    from, for weft_dump.  Those that take no fd (weft_join, weft_sleep,
 *    weft_park, the locks, channels, futures, scope joins) are macros that
 *    pass __FILE__ and __LINE__ to a weft__*_at function, defined right
 *    after the function they stand for; the real function stays callable
 *    as (weft_sleep)(ns) or through a pointer.  The I/O calls (weft_read
 *    ... weft_close) record their return address, fd and operation
 *    instead; any other wait is placed by its stack's first frame outside
 *    weft.
 *
 * The header reads as an index: the types, then one section per concept
 * in layer order -- runtime, virtual threads, carrier groups, time and
 * cancellation, parking, blocking-style I/O, synchronisation, channels,
 * futures, scopes, vthread-locals, executors, file channels, completion
 * handlers, parallel work, observe -- each section either here or in the
 * weft/CONCEPT.h it includes at its place.  Every such header also compiles
 * on its own (it includes this header first).  Last comes the
 * compatibility section: earlier names kept working, deprecated.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; the API is what this marks. */
#if defined(__GNUC__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

/*
 * Every object weft hands out is an opaque handle, declared here once; each
 * section below (or the header it includes) says how one is made, used and
 * ended.
 */
typedef struct weft_thread weft_thread;     /* a virtual thread ("Virtual threads") */
typedef struct weft_group weft_group;       /* a carrier group ("Carrier groups") */
typedef struct weft_chan weft_chan;         /* a channel (weft/chan.h) */
typedef struct weft_future weft_future;     /* a future (weft/future.h) */
typedef struct weft_scope weft_scope;       /* a structured scope (weft/scope.h) */
typedef struct weft_task weft_task;         /* a scope's forked task (weft/scope.h) */
typedef struct weft_executor weft_executor; /* an executor (weft/exec.h) */
typedef struct weft_file weft_file;         /* a file channel (weft/file.h) */

/* ------------------------------------------------------------------------ */
/* Runtime                                                                  */
/* ------------------------------------------------------------------------ */

enum { WEFT_IO_AUTO = 0, WEFT_IO_URING = 1, WEFT_IO_EPOLL = 2 };

/*
 * Runtime configuration.  A zero field means "the default":
 *   carriers    number of carrier threads; default $WEFT_CARRIERS, else the
 *               number of online CPUs.
 *   stack_size  bytes reserved per vthread stack (rounded up to pages);
 *               default $WEFT_STACK_SIZE, else 256 KiB.  Only touched pages
 *               cost memory.
 *   io          I/O backend (WEFT_IO_*); default $WEFT_IO, else auto.
 *   hook        libc interposition (WEFT_HOOK_*, below); default $WEFT_HOOK
 *               (1 on, 0 off), else off -- on in libweft-hook.so.
 *   pin_threshold_ns
 *               how long a vthread may hold its carrier without a switch
 *               before the monitor reports it (pinned or hog, see "Observe"
 *               below) and compensates; default $WEFT_PIN_THRESHOLD_MS
 *               (milliseconds; negative: off), else 20 ms.  Negative: the
 *               monitor neither reports nor compensates.
 *   max_compensate
 *               the most spare carriers that run at once to compensate for
 *               stalled ones; default $WEFT_MAX_COMPENSATE (negative: none),
 *               else 256, as Loom's scheduler (at most 1024 carriers in
 *               all).  Negative: stalls are reported but not compensated.
 *   deterministic
 *               deterministic mode (WEFT_DET_*, below); default
 *               $WEFT_DETERMINISTIC=SEED (unset or empty: off).
 *   deterministic_seed
 *               the seed, with deterministic = WEFT_DET_ON (any value, 0
 *               included).
 *   trace       deterministic mode: a file that gets one line per
 *               scheduling decision; default $WEFT_TRACE (unset: none).
 *   own_tls     every vthread gets its own TLS block ("Own TLS", below)
 *               unless its weft_thread_opts.own_tls is negative: 1 on, -1
 *               off; default $WEFT_OWN_TLS (1 on, 0 off), else off
 *               (libweft-hook.so gives the program's main its own unless
 *               WEFT_OWN_TLS is set).  Where
 *               blocks cannot be made (a sanitizer build, a C library
 *               that is not glibc 2.35+ on x86-64, aarch64 or riscv64)
 *               one line on stderr says
 *               so and vthreads run without.
 *   trap        the system call trap ("The system call trap", below): 1
 *               on, -1 off; default $WEFT_TRAP (1 on, 0 off), else off
 *               -- on in libweft-hook.so with the hooks.  It traps only
 *               vthreads with their own TLS (the C library knows its
 *               internal locks' owners by the thread pointer), so it
 *               turns own_tls on unless that was said off; then it stays
 *               off, said on stderr.
 *               It needs the hooks on; where it cannot be had (the hooks
 *               off, a kernel before 5.11, a sanitizer build) one line on
 *               stderr says so and the runtime runs without it.
 *   virtual_pthreads
 *               the process's threads are vthreads ("Virtual pthreads",
 *               below): 1 on, -1 off; default $WEFT_VIRTUAL_PTHREADS (1
 *               on, 0 off), else off -- on in libweft-hook.so (weft-run
 *               --threads vthread, its default).  It needs the hooks on
 *               and own TLS; where there is none (a sanitizer build)
 *               threads stay the kernel's, said on stderr when asked.
 *   console     the live console's Unix socket (see "The live console"
 *               under "Observe"): a path, or "1" for the default path
 *               /tmp/weft-<uid>/<pid>.sock; default $WEFT_CONSOLE (unset,
 *               empty or "0": no console).
 *
 * Deterministic mode (for tests: find a race under many seeds, replay it
 * with one).  One carrier (carriers is ignored), no monitor and no spare
 * carriers (pin_threshold_ns and max_compensate are ignored; under
 * weft-run a monitor thread delivers signals and does nothing else), no
 * preemption, and:
 *  - the next vthread to run is drawn by a generator seeded with the seed
 *    among all runnable vthreads, at every decision point: a yield (which
 *    may pick the yielder again), a block, an exit; so are a select's
 *    choice among its ready cases and the waiter a mutex unlock wakes
 *    (weft_cond, weft_sem and weft_rwlock stay FIFO, as documented);
 *  - virtual time: weft_now() and every sleep, deadline and timer run on
 *    a clock that starts at 1000 s, advances 1 us per scheduling decision,
 *    and, when no vthread can run and a timer is pending, jumps to that
 *    timer -- after giving outstanding I/O (a vthread's, or a completion
 *    handler's: weft/async.h) 5 ms of real time to complete,
 *    and a platform thread that is active in the runtime (it just spawned
 *    or woke a vthread, or was woken, and has not waited in weft since)
 *    up to 100 ms: sleeps never wait for real.  A platform thread's timed
 *    wait runs on the virtual clock too (the carrier ends it);
 *  - I/O completions run when the seeded pick chooses them, but when the
 *    kernel (or the blocking pool, whose threads are outside the mode)
 *    completes an operation is real time: a program is deterministic only
 *    as far as its I/O's timing is;
 *  - the same seed gives the same interleaving -- and the same trace, byte
 *    for byte -- for a program whose platform thread spawns one root
 *    vthread and joins it (weft_main): what platform threads hand in
 *    arrives in real time, and vthread ids (which restart at 1) are
 *    deterministic on the same terms.
 * A deadlock -- a non-daemon vthread waits, none can run, no timer is
 * pending, and no I/O, no blocking-pool job, no pool task and no active
 * platform thread is left that could wake one, for 1 s of real time -- is
 * reported: one line on stderr with the
 * seed and step, weft_dump's on stderr, and the process exits with status
 * 2 (weft_*_async operations once started keep this check quiet: their
 * dispatcher may be waiting on the kernel).
 * A vthread that computes without a switch holds the only carrier; tests
 * that need several carriers or real time cannot run in this mode.
 * weft_init fails with -EINVAL for a bad deterministic flag or a
 * $WEFT_DETERMINISTIC that is not an unsigned integer, or with the open's
 * -errno when the trace cannot be created.
 */
enum { WEFT_DET_DEFAULT = 0, WEFT_DET_ON = 1, WEFT_DET_OFF = 2 };

typedef struct weft_runtime_opts {
    int carriers;
    size_t stack_size;
    int io;
    int hook;
    int64_t pin_threshold_ns;
    int max_compensate;
    int deterministic;
    uint64_t deterministic_seed;
    const char *trace;
    const char *console;
    int own_tls;
    int trap;
    int virtual_pthreads;
} weft_runtime_opts;

/*
 * Blocking code weft did not write (libpq, libcurl, hiredis ...).  libweft
 * defines read, write, readv, writev, pread, pwrite, recv, send, recvfrom,
 * sendto, recvmsg, sendmsg, accept, accept4, connect, poll, ppoll, select,
 * pselect, epoll_wait, epoll_pwait, nanosleep, clock_nanosleep, usleep,
 * sleep, pause, sigsuspend, kill, fsync, fdatasync, sendfile (to a
 * blocking socket or pipe: as reads and a parking write), close, close_range and
 * getaddrinfo in front of the C library's -- and the names a build may reach them by instead:
 * _FORTIFY_SOURCE's __read_chk, __pread_chk, __pread64_chk, __recv_chk,
 * __recvfrom_chk, __poll_chk and __ppoll_chk, and _FILE_OFFSET_BITS=64's
 * pread64 and pwrite64.  Off (the default), each is the C library's after one load and
 * a branch.  On -- WEFT_HOOK=1, weft_runtime_opts.hook = WEFT_HOOK_ON, or the
 * same code preloaded as libweft-hook.so (LD_PRELOAD; `weft-run PROG`) --
 * such a call made on a vthread parks the vthread instead of blocking its
 * carrier, honouring the vthread's deadline and cancellation, and returns
 * what the C library's would, errno included:
 *  - an fd the program made O_NONBLOCK (or MSG_DONTWAIT) answers EAGAIN at
 *    once, as it would; a blocking socket's SO_RCVTIMEO / SO_SNDTIMEO are
 *    honoured (EAGAIN, as libc);
 *  - cancellation makes the call fail with ECANCELED and the vthread's
 *    deadline with ETIMEDOUT (not EINTR: a loop that retries on EINTR
 *    would spin on a cancelled vthread); poll's, select's and sleep's own
 *    timeouts end them as usual;
 *  - ppoll's and pselect's signal masks apply to their first, immediate
 *    look only: a vthread does not own its carrier's signal mask;
 *  - getaddrinfo runs on the blocking pool (weft_blocking);
 *  - close is weft_close: a call in flight on the fd, on any vthread, ends
 *    with EBADF;
 *  - close and close_range leave weft's own descriptors (a carrier's ring
 *    and eventfd, the epoll sets, the console's socket) alone, always, on
 *    any thread: to the program those numbers are not open -- close of one
 *    answers EBADF, close_range closes the numbers around them -- so a
 *    close loop over every number, or close_range(3, ~0U, 0), does not
 *    stop the runtime.  (dup2 and dup3 onto one of them are not stopped:
 *    a program does that only to a number it opened);
 *  - a vthread resumes on the carrier it parked on while inside a hooked
 *    call, so code that keeps errno's address across the call (glibc's
 *    __errno_location is const) reads the right errno;
 *  - poll and select on any number of fds make no file of their own (at
 *    the fd limit they work as libc's); select takes sets larger than
 *    FD_SETSIZE, as the kernel does.
 * Locks too: libweft defines pthread_mutex_lock, _timedlock, _clocklock
 * and _unlock, pthread_cond_wait, _timedwait, _clockwait, _signal and
 * _broadcast, C11's mtx_lock, mtx_timedlock, mtx_unlock, cnd_wait,
 * cnd_timedwait, cnd_signal and cnd_broadcast (so C++'s std::mutex and
 * std::condition_variable), sem_wait, sem_timedwait, sem_clockwait and
 * sem_post, and pthread_rwlock_rdlock, _wrlock, their timed and clock
 * forms and _unlock.  Hooks on, a vthread that waits for such a lock, or
 * on such a condition variable or semaphore, parks; a wake reaches its waiter
 * whichever side -- vthread or kernel thread -- waits and wakes.  The
 * mutex's owner, recursion count and errors stay the C library's (an
 * error-checking mutex's EDEADLK, a recursive one's count: right per
 * vthread with own TLS, below; without it the owner is the carrier, and
 * an error-checking mutex relocked by its holder waits rather than answer
 * EDEADLK, which could be another vthread's on that carrier).  These waits are not cancelled by
 * weft_cancel (a lock cannot fail with ECANCELED) and are not
 * pthread_cancel points; a condition variable may wake a waiter
 * spuriously, as POSIX allows.  PI, priority-protected, robust and
 * process-shared mutexes, and process-shared condition variables,
 * semaphores (sem_open's too) and rwlocks, are the C library's as ever;
 * so are all of them in a ThreadSanitizer build, where TSan intercepts
 * them itself (ahead of a shared libweft) and these are not built.
 * On a platform thread every hooked function is the C library's (one
 * exception, on the epoll backend: a listening socket a vthread accepted
 * on is O_NONBLOCK underneath, and a platform thread's accept on it still
 * waits, as on the blocking socket the program made).
 *
 * What does not park (yet), and what then happens:
 *  - calls the C library makes internally (stdio's read under fgets or
 *    fread, printf's write, popen's and system's waits), and those of a
 *    statically linked C library;
 *  - the other locks weft did not write (barriers, glibc's internal locks
 *    -- stdio's, malloc's), and the locks above when the hooks are off: they end in futex(2), which holds the
 *    carrier;
 *  - __thread / thread_local variables are the carrier's: a vthread may
 *    read another's value after a blocking call (weft/local.h has
 *    vthread-locals and scoped values), and a recursive or error-checking
 *    pthread mutex takes the carrier thread for its owner -- unless the
 *    vthread has its own TLS ("Own TLS", below).
 * Such a call that holds its carrier past pin_threshold_ns is reported and
 * compensated for by a spare carrier (The monitor, below), up to
 * max_compensate (256); at that bound the waiting work waits for a stall to
 * end.  With the hooks off, a vthread holding a pthread mutex across a
 * blocking call, and a waiter for that mutex blocking its carrier, can
 * wait for good: turn the hooks on, or use weft_mutex.
 *
 * Own TLS (weft_thread_opts.own_tls, weft_runtime_opts.own_tls,
 * $WEFT_OWN_TLS; glibc 2.35+ on x86-64, aarch64 or riscv64).  A vthread
 * with its own TLS runs with a static TLS block and thread control block
 * of its own, made as glibc makes a thread's and set as the thread
 * pointer (x86-64's fs base, aarch64's tpidr_el0, riscv64's tp) at every
 * switch to it.  Then wherever it runs, these are its own:
 * __thread / thread_local variables (initialised, and C++ thread_local
 * destructors run when it ends), errno (so hooked calls need not pin it
 * to its carrier), pthread_self(), pthread keys (their destructors run as
 * it ends, on it), the owner of recursive and error-checking pthread
 * mutexes and of stdio's FILE locks, uselocale's locale, malloc's
 * per-thread cache.  The price: a block of static TLS and TCB (about 4.3
 * KiB with glibc 2.36; weft_stats.tls_block_bytes), kept in a pool for
 * the process's life once made (as many as such vthreads were alive at
 * once), and at each switch to or from such a vthread a write of the
 * thread pointer: on x86-64 one wrfsbase instruction where the CPU and
 * kernel allow it (FSGSBASE, Linux 5.9+), else an arch_prctl system call
 * -- microseconds on a VM whose hypervisor traps the write (weft-bench
 * micro: switch-tls); elsewhere a register write.
 * A vthread that ends gives its block to the next: that one starts with
 * every module's __thread variables at their initial values, errno 0, no
 * key values, the global locale.  Rules and limits:
 *  - pthread_self() names the vthread, not a kernel thread: pthread_kill()
 *    and pthread_setaffinity_np() on it fail (ESRCH);
 *    pthread_setname_np(pthread_self()) names its carrier, and
 *    pthread_getattr_np(pthread_self()) describes the main thread's stack,
 *    not the vthread's; gettid() is its carrier's.  raise() and abort()
 *    reach the thread that runs them.
 *  - Own TLS makes a lock's owner right, not its wait a park: that is the
 *    hooks' (above), for pthread and C11 mutexes and condition variables.
 *  - PI and robust pthread mutexes record a thread id the kernel does not
 *    know: a contended PI mutex and a robust mutex whose owner dies do not
 *    work on such a vthread.  Use normal, recursive or error-checking ones.
 *  - A module dlopen'd while such vthreads live, whose TLS is initial-exec
 *    (static), is not set up in their blocks: dlopen libraries that use
 *    __thread with the default (dynamic) model, as -fPIC builds do.
 *  - Sanitizer builds (ASan, TSan) keep their per-thread state in TLS:
 *    there own TLS is refused (-ENOTSUP, or the runtime's line).
 *
 * The system call trap (weft_runtime_opts.trap, $WEFT_TRAP; Linux 5.11+,
 * x86-64).  The hooks see a call only when it comes through the PLT; the
 * C library makes most of its own system calls directly -- stdio's read
 * and write (fgets, fread, getline, fwrite, fflush, printf), the waits
 * of popen, pclose and system, its internal locks' futex waits -- as do
 * libraries that make raw system calls, and each of those held its
 * carrier.  With the trap on, every system call a vthread's code makes
 * outside weft traps (Linux's syscall user dispatch: a SIGSYS on the
 * vthread's own stack) and weft makes it instead: one that a hook stands
 * for goes through that hook and parks if it would block; a futex wait
 * and a blocking wait4 run on the blocking pool while the vthread parks;
 * every other call is made as it is.  weft's own system calls are not
 * trapped.  weft_stats.trapped counts the trapped calls.  Rules and
 * limits:
 *  - The price of a trapped call is a signal's delivery and return: 3.3
 *    us more than the same call through the PLT hook on a 2-core VM
 *    (2026-12-05, weft-bench micro --only hook, mode trap), of which the
 *    kernel's bare trap takes 3.1 us (mode trap-floor: a SIGSYS handler
 *    that only makes the call).  The PLT hooks stay the fast path, the
 *    trap is the net under them.  Calls through the PLT are not trapped,
 *    nor calls inside a signal handler.
 *  - stdio FILEs and other state of the C library shared between vthreads
 *    need own TLS (above): its locks are recursive, and without own TLS
 *    two vthreads on one carrier are one owner to them.
 *  - A trapped futex wait parks its vthread while the carrier's io_uring
 *    makes the kernel's wait (Linux 6.7+).  With the epoll backend or an
 *    older kernel it holds a blocking-pool thread while it waits
 *    (WEFT_BLOCKING_MAX, 64 by default; past it the waits queue, and a
 *    wake that comes first makes the queued wait return at once).  PI
 *    futexes are made as they are: they block the carrier.
 *  - A vthread that creates a kernel thread (pthread_create) runs
 *    untrapped from that call to its next hooked call.  fork, vfork, posix_spawn,
 *    popen and system work as they would.  A vfork is the kernel's: the
 *    child shares memory until it execs or exits, its carrier waits
 *    meanwhile, and its calls go straight to the C library (it is no
 *    vthread), with the vthread's signal mask.
 *  - SIGSYS is weft's while the trap is on: a program must not install
 *    its own SIGSYS handler or keep SIGSYS blocked on a vthread (weft
 *    unblocks it).  A program that uses seccomp's SECCOMP_RET_TRAP should
 *    leave the trap off.
 *  - Sanitizer builds refuse it: their runtimes make raw system calls.
 *
 * Virtual pthreads (weft_runtime_opts.virtual_pthreads,
 * $WEFT_VIRTUAL_PTHREADS; on under weft-run).  Every thread the process
 * creates -- pthread_create, C11 thrd_create, C++ std::thread -- is a
 * vthread with its own TLS (above), so a library that makes threads
 * inside, or a program weft did not compile, gets vthreads; its pthread_t
 * is its own TCB, as glibc's.  glibc's thread API behaves as glibc's:
 * pthread_join (it parks a vthread), _tryjoin_np, _timedjoin_np,
 * _clockjoin_np, _detach, _exit and thrd_exit (cleanup handlers and C++
 * destructors run as the stack unwinds), deferred pthread_cancel, _self,
 * _equal, gettid (0x800000 and up, distinct per thread), _setname_np and
 * _getname_np (the name weft_dump shows), _getattr_np (its stack), keys
 * and their destructors; main may leave by pthread_exit, and the process
 * exits 0 once its last thread has ended.  A stack size asked for above
 * the runtime's default (stack_size) is honoured; smaller, or glibc's own
 * default (RLIMIT_STACK), gets the runtime's default.  What stays a
 * kernel thread, with one line on stderr naming the reason, once per
 * reason: attributes that set an explicit scheduling policy or priority,
 * a CPU affinity, or a stack the program provides.  Also
 * kernel threads, without a line: threads made before weft_init (a
 * constructor's) or after weft_shutdown, and a clone(2) the program makes
 * itself.  pthread_kill of a virtual pthread: of itself, the handler runs
 * on it before the call returns; of another, the signal is raised on that
 * vthread's carrier as its next hooked call returns -- at once if it waits
 * in one, which then ends with EINTR where the handler would end it (no
 * SA_RESTART, or a sleep, poll or select).  Each virtual pthread has its
 * own signal mask (pthread_sigmask, sigprocmask, the attributes'
 * pthread_attr_setsigmask_np; inherited by the threads it creates; main's
 * is the one the process started with): a signal it blocks stays pending
 * for it, or for the process, until it unblocks it (its handler then runs
 * before the unblocking call returns) or takes it with sigwait,
 * sigwaitinfo or sigtimedwait, which park; sigsuspend waits with its mask;
 * a process-directed signal goes to a thread that does not block it, main
 * first, and one every thread blocks does not run a handler or a default
 * action anywhere (hook/signals.c).  tgkill or tkill with a vthread's tid
 * (gettid's: not the kernel's) is pthread_kill of its thread (the system
 * call trap).  A thread that computes for 10 ms without a switch is
 * preempted where it runs the program's own code, or, if it was inside
 * one of weft's functions, as that function returns to the program
 * (hook/trap.c, "Preemption"; WEFT_PREEMPT=0: never).  Not yet: a handler's own sa_mask
 * is its carrier's, not the vthread's; a mask is carried across exec from
 * a fork child, not from a thread's own execve or into posix_spawn's;
 * a signal to a vthread that computes without a hooked call waits for its
 * next one or its preemption; asynchronous
 * cancellation; a cancellation acts where a hooked call waits (read,
 * sleep, poll, accept ...: its EINTR return) and at pthread_testcancel,
 * not at the C library's other cancellation points.  The cost over a
 * vthread's: its TLS block (about 4.4 KiB, allocated in bulk from huge
 * pages) and a thread-pointer write at each switch (the own-TLS line of
 * weft-bench micro).  A thread that has ended and is not yet joined keeps
 * only its TLS block (its pthread_t, its result): its stack goes back as
 * it ends, so a program that starts a million threads and joins them
 * later holds about 5 KiB per thread (bench/tpc/million.sh).
 *
 * Signal handlers.  Inside a signal handler, on any thread, every hooked
 * function is the C library's: it goes to the kernel and, like libc's,
 * blocks the thread it runs on (a carrier, if the signal landed on one)
 * rather than parking -- a handler may interrupt a carrier in the middle
 * of a switch.  So a handler may make the async-signal-safe calls POSIX
 * lists (write, nanosleep, poll ...) as usual.  It must not call weft's
 * own blocking functions (weft_sleep, weft_read, weft_mutex_lock,
 * weft_chan_send, weft_join ...): they park, and a park from a handler can
 * deadlock its carrier.  To tell it, libweft defines sigaction, signal,
 * bsd_signal and sysv_signal too (always, hooks on or off): the kernel
 * gets a small trampoline that counts the handler in and out, and the
 * program sees its own handler, flags and mask wherever sigaction reports
 * the old action.  A handler another library installed with the raw
 * system call is wrapped when the hooks go on (fault signals -- SIGSEGV,
 * SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS -- are left as they are).  A
 * handler may leave by siglongjmp or longjmp: libweft defines those too,
 * and a jump made inside a handler counts it out.
 *
 * A handler interrupts a blocking call as the kernel's would -- for a
 * foreign main under weft-run / libweft-hook.so, the vthread a
 * process-directed signal is meant for (the kernel gives a program's first
 * thread first choice): once the program's handler has run, wherever it
 * ran, a hooked sleep (nanosleep, clock_nanosleep, usleep, sleep), poll,
 * ppoll, select, pselect or epoll_wait main is parked in ends with EINTR
 * (nanosleep with the time left), and so does a read, write, recv, send
 * or accept on a pipe or socket unless the handler has SA_RESTART (then
 * it goes on, as the kernel restarts it); pause and sigsuspend park until
 * then and return -1 with EINTR (sigsuspend's mask is not put in place).
 * kill(getpid(), sig) from a vthread goes to its own carrier's thread
 * (SI_USER, as kill's): the handler runs on the vthread before kill
 * returns, as on a program's only thread.  The monitor thread carries the
 * interrupt to the vthread (a handler may not park or lock), so it comes
 * a moment after the handler; in deterministic mode a monitor runs for
 * this alone.  Every virtual pthread's hooked waits end the same way, and
 * masks and signals sent to one thread are each vthread's (above).
 */
enum { WEFT_HOOK_DEFAULT = 0, WEFT_HOOK_ON = 1, WEFT_HOOK_OFF = 2 };

/*
 * Starts the runtime.  Optional: the first weft call initialises it with the
 * defaults.  Returns 0, -EALREADY if it is already running, -EINVAL for a bad
 * configuration, or -ENOMEM / -EAGAIN when carriers cannot be created.
 *
 * The I/O backend: auto uses io_uring where it can be set up, else epoll,
 * and says why in one line on stderr (once per process): container
 * runtimes forbid io_uring by default (Docker's seccomp profile, since 25),
 * and kernel.io_uring_disabled may.  io_uring asked for by name
 * (WEFT_IO=uring, or io = WEFT_IO_URING) has no fallback: where it cannot
 * be used, weft_init -- and so every call that would start the runtime --
 * fails with the kernel's answer (-EPERM under seccomp or the sysctl,
 * -ENOSYS without io_uring), after one line on stderr that says so.
 */
WEFT_API int weft_init(const weft_runtime_opts *cfg);

/*
 * Waits until every non-daemon vthread has finished, then stops the carriers
 * and frees everything the runtime owns (stacks, queues, timers).  Daemon
 * vthreads still alive are abandoned, their stacks freed.  Must be called from
 * a platform thread: called from a vthread it prints an error and returns
 * without doing anything.  The runtime may be initialised again afterwards.
 */
WEFT_API void weft_shutdown(void);

/*
 * Runs fn(arg) as a vthread named "main", waits for it, shuts the runtime down
 * and returns fn's result (or a negative errno if it could not start: -EINVAL
 * for a NULL fn, weft_init's and weft_spawn's).
 */
WEFT_API int weft_main(int (*fn)(void *), void *arg);

/* 1 while a runtime runs with libc interposition on (weft_runtime_opts.hook). */
WEFT_API int weft_hook_active(void);

/*
 * fork().  The child of a process running weft has none of its carriers,
 * vthreads or helper threads (fork copies only the calling thread), so weft
 * abandons the parent's runtime in the child and starts a fresh one,
 * configured as the parent's was, on the child's next weft call that needs a
 * runtime (weft_spawn, weft_main, weft_read on a vthread ...; weft_init with
 * a configuration of the child's own).  The
 * child never touches the parent's io_uring rings or epoll sets: its copies
 * are closed as it starts.  system(), posix_spawn and fork+exec work as
 * usual, from vthreads (they block the carrier while they wait) and from
 * platform threads.
 *
 * The parent's vthreads do not exist in the child.  Handles from before the
 * fork are refused: weft_join, weft_detach, weft_cancel and weft_unpark
 * return -ECHILD; so does weft_scope_join on a scope opened before the fork
 * (weft_fork into it returns NULL, weft_scope_close only forgets it).  Like
 * a pthread mutex after fork, a weft mutex, condition, semaphore, channel or
 * future that the parent's vthreads held or waited on at the fork is in
 * whatever state they left it: a child must not rely on one (a lock they
 * held stays held; a parent's waiter is never woken in the child).  Stacks,
 * queues and tables of the parent's runtime stay in the child's memory
 * (copy-on-write, so untouched they cost nothing) and are never reused.
 *
 * fork() from a vthread: the child goes on, on that vthread's stack, as an
 * ordinary platform thread -- weft_self() is NULL there, weft calls block
 * it and start the child's fresh runtime -- and it must end with _exit,
 * exit or exec: returning from the vthread's function (or from a
 * weft_blocking function that forked) in the child stops it with a message
 * (there is nothing to return to).  Its stack is the vthread's (256 KiB by
 * default).  fork() while another thread is inside weft_init or
 * weft_shutdown is not supported.
 */

/* ------------------------------------------------------------------------ */
/* Virtual threads                                                          */
/* ------------------------------------------------------------------------ */


/*
 * Spawn attributes; a NULL attr or zero fields mean the defaults.
 *   name        copied (up to 31 bytes); shown by weft_dump.
 *   stack_size  reserve this many bytes instead of the runtime default.
 *   pinned      run only on the carrier it first runs on (for code that
 *               keeps C thread-locals across blocking calls).
 *   daemon      weft_shutdown does not wait for it.
 *   own_tls     1: a TLS block and thread control block of its own
 *               ("Own TLS", below); -1: not, whatever the runtime's
 *               default; 0: the runtime's default
 *               (weft_runtime_opts.own_tls).  weft_spawn fails with
 *               -ENOTSUP where blocks cannot be made (sanitizer builds).
 *   group       run only on this carrier group's carriers.  NULL: the
 *               spawning vthread's own group (a vthread of a group keeps
 *               its children in it, as Java's custom schedulers do for
 *               structured forks); from a platform thread, the default
 *               group.  weft_group_default() names the default group
 *               explicitly (a group's vthread handing work back to the
 *               shared pool).
 */
typedef struct weft_thread_opts {
    const char *name;
    size_t stack_size;
    int pinned;
    int daemon;
    weft_group *group;
    int own_tls;
} weft_thread_opts;

/*
 * Starts fn(arg) in a new vthread.  *t receives its handle, which must be
 * passed to exactly one of weft_join or weft_detach.  If t is NULL the vthread
 * starts detached.  A handle is valid until the weft_join or weft_detach
 * that frees its vthread returns, or, once detached, until the vthread
 * ends; a handle used after that is refused with -ESRCH by every call that
 * takes one (weft_join, _detach, _cancel, _unpark; weft_id gives 0), even
 * when its stack and descriptor have gone to a new vthread since: the
 * handle carries a generation of the descriptor, which freeing bumps (a
 * stale handle could pass for a new one only after 16,777,215 more uses
 * of its stack; sched.c, "Handles").  So a double join, or a join after a
 * detach, is an error, as pthread's, but one that is always reported.  Works from vthreads and platform threads.  Returns 0,
 * -ENOMEM (no memory or address space for a stack), -EINVAL, or
 * -ESHUTDOWN (attr->group is being closed: weft_group_close); in a
 * ThreadSanitizer build, -EAGAIN while 7,500 vthreads live (TSan counts
 * each as a thread and ends the process past 8,128: README, "Sanitizers").
 * The new vthread inherits nothing of the spawner's vthread-locals or
 * scoped values (weft/local.h): it may outlive the spawner's bindings, as
 * Java's Thread.start does not carry ScopedValues.  Pass what it needs in
 * arg, or fork it in a scope (weft_fork), whose tasks see the bindings.
 */
WEFT_API int weft_spawn(weft_thread **t, void *(*fn)(void *), void *arg, const weft_thread_opts *attr);

/*
 * Waits for t to finish and stores fn's return value in *result (if not
 * NULL), then frees t.  Parks a vthread; blocks a platform thread.  Returns 0,
 * -EDEADLK when t is the caller, -EINVAL when someone else already joins t
 * or t is detached, -ESRCH when t is no longer a handle (joined already, or
 * detached and ended), or -ECANCELED / -ETIMEDOUT (t is then still joinable).
 * A vthread that has already finished is reaped even by a cancelled caller,
 * so an owner can always collect what it spawned.
 */
WEFT_API int weft_join(weft_thread *t, void **result);
WEFT_API int weft__join_at(weft_thread *t, void **result, const char *file, int line);
#define weft_join(t, r) weft__join_at((t), (r), __FILE__, __LINE__) /* call-site capture */

/* Lets t free itself when it finishes (frees it now if it has).  Returns 0,
 * -EINVAL when someone joins it or it is detached already, or -ESRCH when t
 * is no longer a handle (joined, or detached and ended). */
WEFT_API int weft_detach(weft_thread *t);

/* The calling vthread's handle (the one weft_spawn gave; equal to it), or
 * NULL on a platform thread. */
WEFT_API weft_thread *weft_self(void);

/* A vthread's id: unique for the process's lifetime, starting at 1; 0 for
 * NULL or a handle no longer valid. */
WEFT_API uint64_t weft_id(const weft_thread *t);

/* A vthread's name ("" when it has none, or t is no longer valid). */
WEFT_API const char *weft_name(const weft_thread *t);

/* Renames the calling vthread (copied, up to 31 bytes; NULL or "": no
 * name), as weft_thread_opts.name names it at spawn: what weft_dump shows.  A
 * program that learns what a vthread is for only after it started (the
 * main vthread of weft_main, a worker taking a job) says so here.  Four
 * stores: cheap enough for a connection's path.  Returns 0, or -EPERM on
 * a platform thread. */
WEFT_API int weft_set_name(const char *name);

/*
 * Lets other runnable vthreads on this carrier run, then continues.  On a
 * platform thread it calls sched_yield().  Returns 0.
 */
WEFT_API int weft_yield(void);

/* ------------------------------------------------------------------------ */
/* Carrier groups                                                           */
/* ------------------------------------------------------------------------ */

/*
 * A carrier group is a set of carriers of its own -- a scheduler of its
 * own, as Loom's custom schedulers are -- so that CPU-bound work does not
 * take the carriers that latency-sensitive vthreads need.  The default
 * group is the runtime's pool (weft_runtime_opts.carriers, and the monitor's
 * spares).  A vthread spawned into a group runs only on that group's
 * carriers, all its life: its wake-ups, timers and I/O completions, from
 * whatever thread, queue it to a carrier of its group (never run it on
 * another group's carrier).  Blocking I/O goes through the carrier's own
 * ring or epoll set, as in the default group.  Groups are fixed in size:
 * the monitor moves work that a computing vthread strands on one carrier
 * to the other carriers of the same group, but starts spare carriers for
 * the default group only.  Carriers in all, default and groups together,
 * are at most 1024 (less the spares' reserve: 2 x weft_runtime_opts.carriers by
 * default).
 */

/* Options for weft_group_create; NULL or zero fields are the defaults. */
typedef struct weft_group_opts {
    /* The group's vthreads compute on purpose (batch work, weft_parallel_for
     * jobs): the monitor logs no hog event for them and counts none in
     * weft_stats.hogs.  Work they strand on their carrier is still moved
     * to the group's other carriers, and a carrier blocked in a system
     * call is still reported as pinned. */
    int compute;
} weft_group_opts;

/*
 * Starts a group of `carriers` carriers (threads named "weft-g<id>.<k>"),
 * named `name` (copied, up to 31 bytes; NULL: "group-<id>") for weft_dump
 * and weft_group_stats, and stores it in *g.  Returns 0, or (*g then
 * NULL) -EINVAL (g NULL, carriers < 1), -EAGAIN (no carrier index left:
 * the total above), -ENOMEM, -ESHUTDOWN (weft_shutdown has begun),
 * -EOPNOTSUPP (deterministic mode: its one carrier runs everything), or a
 * thread's or poller's start error.  Starts the runtime if it is not
 * running.  Called from a vthread, it holds that vthread's carrier while
 * the threads start (each makes its ring: well under a millisecond
 * apiece); so does the last step of weft_group_close, which joins them.
 */
WEFT_API int weft_group_create(weft_group **g, const char *name, int carriers, const weft_group_opts *opts);

/*
 * Closes g: refuses new spawns into it (weft_spawn returns -ESHUTDOWN,
 * the futures of its executors (weft_executor_create_group) fail so),
 * waits until every vthread of g has finished (daemons too; one that has
 * finished need not have been joined), then stops its carriers and frees
 * g: the pointer is invalid afterwards, as after free().  Parks a vthread, blocks a platform thread;
 * not interrupted by cancellation or deadlines (as weft_scope_close).
 * Returns 0; -EINVAL for NULL or the default group; -EDEADLK when the
 * caller is a vthread of g (it would wait for itself); -EBUSY when another
 * weft_group_close of g is in progress (only the first closes it; close a
 * group once).  weft_shutdown closes the groups still open, after their
 * non-daemon vthreads ended.
 */
WEFT_API int weft_group_close(weft_group *g);

/* The default group (the runtime's pool; starts the runtime if needed, NULL
 * if it cannot start), and the calling vthread's group (NULL on a platform
 * thread). */
WEFT_API weft_group *weft_group_default(void);
WEFT_API weft_group *weft_group_self(void);

/* A group as weft_group_stats_get sees it: racy sums, each exact when read
 * but not all at one instant. */
typedef struct weft_group_stats {
    unsigned id;          /* 0: the default group */
    char name[32];
    int carriers;         /* its carriers (the default group: configured, spares not counted) */
    int compute;          /* made with weft_group_opts.compute */
    uint64_t live;        /* its vthreads not finished (the default group: 0, not counted) */
    uint64_t started;     /* vthreads ever spawned into it (the default group: 0, not counted) */
    uint64_t runnable;    /* vthreads queued to run on its carriers */
    uint64_t switches;    /* switches into a vthread on its carriers */
    uint64_t steals;      /* vthreads its carriers took from one another */
} weft_group_stats;

/* Fills *s for g (NULL: the default group).  Returns 0, or -EINVAL for a
 * NULL s.  weft_dump shows every group (text and JSON). */
WEFT_API int weft_group_stats_get(weft_group *g, weft_group_stats *s);

/* ------------------------------------------------------------------------ */
/* Time, deadlines, cancellation                                            */
/* ------------------------------------------------------------------------ */

/* CLOCK_MONOTONIC in nanoseconds; in deterministic mode (weft_runtime_opts) the
 * virtual clock, which starts at 1000 s. */
WEFT_API int64_t weft_now(void);

/*
 * Sleeps for ns nanoseconds (until the absolute time deadline_ns).  A
 * sleeping vthread costs no CPU and holds no carrier.  Returns 0 when the
 * time has come, -ECANCELED when cancelled first, -ETIMEDOUT when the
 * caller's own deadline (weft_deadline_set) comes first.
 * weft_sleep_until(INT64_MAX) sleeps until cancelled; a deadline in the
 * past (0 and negative ones too) returns 0 at once, as weft_sleep(ns <= 0).
 */
WEFT_API int weft_sleep(int64_t ns);
WEFT_API int weft_sleep_until(int64_t deadline_ns);
WEFT_API int weft__sleep_until_at(int64_t deadline_ns, const char *file, int line);
WEFT_API int64_t weft__sleep_deadline(int64_t ns);
#define weft_sleep(ns) weft__sleep_until_at(weft__sleep_deadline(ns), __FILE__, __LINE__)
#define weft_sleep_until(d) weft__sleep_until_at((d), __FILE__, __LINE__)

/*
 * Sets the calling thread's deadline (absolute, weft_now(); 0 = none) for
 * all its blocking calls and returns the previous one: restore that, not 0,
 * when done -- `int64_t saved = weft_deadline_set(d); ...;
 * weft_deadline_set(saved);` -- so that a caller's deadline survives the
 * callee.  For one I/O call, weft_X_until ("Blocking-style I/O") does this.
 */
WEFT_API int64_t weft_deadline_set(int64_t deadline_ns);

/*
 * Cancels t: the blocking call it is in, or the next one it makes, returns
 * -ECANCELED, and so do all its later blocking calls.  Returns 0, or
 * -ESRCH when t is no longer a valid handle (joined, or detached and
 * finished): nothing is cancelled then.
 */
WEFT_API int weft_cancel(weft_thread *t);

/* 1 when the calling vthread has been cancelled (and is not inside a
 * shield), else 0. */
WEFT_API int weft_cancelled(void);

/*
 * Shielded cleanup (Trio's shielded cancel scope, Kotlin's
 * withContext(NonCancellable)).  Between weft_shield_begin and
 * weft_shield_end the calling thread's blocking calls run even though it
 * is cancelled -- by weft_cancel, its scope's shutdown, or a deadline of
 * its own or of its scopes -- so a cancelled connection can still tell a
 * hub it is leaving with a blocking channel send, or send a goodbye line
 * with weft_send.  They are bounded instead by the shield's own deadline
 * (absolute, weft_now(); 0 = none, which lets cleanup block forever: give
 * one), and by each call's own (_until).  weft_cancelled() reads 0 inside.
 * A cancellation that came before or during the shield is not lost: it
 * applies again at weft_shield_end, which then returns -ECANCELED (else
 * 0).  Scopes opened inside a shield are shielded too: the thread's
 * cancellation does not reach their tasks.  Shields nest; end them in
 * reverse order, on the thread that began them:
 *
 *   weft_shield sh;
 *   weft_shield_begin(&sh, weft_now() + 2000000000); // 2 s
 *   weft_chan_send(hub, &leaving);            // completes though cancelled
 *   weft_send(fd, "bye\n", 4, MSG_NOSIGNAL);
 *   weft_shield_end(&sh);                     // -ECANCELED: cancelled again
 *
 * weft_shield_begin returns 0, or -EINVAL (sh NULL, deadline_ns < 0).
 */
typedef struct weft_shield {
    int64_t saved_deadline, saved_scope_deadline;
    int saved_shielded;
} weft_shield;
WEFT_API int weft_shield_begin(weft_shield *sh, int64_t deadline_ns);
WEFT_API int weft_shield_end(weft_shield *sh);

/* ------------------------------------------------------------------------ */
/* Parking (java.util.concurrent.locks.LockSupport)                         */
/* ------------------------------------------------------------------------ */

/*
 * Each vthread holds one permit, initially unavailable.  weft_park consumes
 * the permit if it is available, otherwise parks until weft_unpark makes it
 * available, the deadline passes (-ETIMEDOUT), or the vthread is cancelled
 * (-ECANCELED).  It may also return 0 spuriously, so callers re-check their
 * condition in a loop.  From a platform thread weft_park blocks the pthread
 * (it cannot be unparked: use it only with a deadline).
 * weft_unpark makes t's permit available and wakes t if it is parked (0),
 * or returns -ESRCH when t is no longer a valid handle.  Both work from
 * any thread.
 */
WEFT_API int weft_park(int64_t deadline_ns);
WEFT_API int weft__park_at(int64_t deadline_ns, const char *file, int line);
#define weft_park(d) weft__park_at((d), __FILE__, __LINE__)
WEFT_API int weft_unpark(weft_thread *t);

/* ------------------------------------------------------------------------ */
/* Blocking-style I/O                                                       */
/* ------------------------------------------------------------------------ */

/*
 * Each call blocks the calling vthread -- never its carrier -- until the
 * operation completes, and returns what the system call would (a count, an
 * fd, 0) or -errno.  Every call is a cancellation point and honours the
 * effective deadline (weft_deadline_set): it then returns -ECANCELED or
 * -ETIMEDOUT, after making sure the kernel no longer touches the buffer.  A
 * call that the kernel completed in the same instant as its cancellation
 * returns the completed result (no byte read or written is ever lost); the
 * cancellation stays pending for the next call.
 *
 * Backends: io_uring (one ring per carrier; submissions are batched and
 * flushed when the carrier runs out of work or every few operations) or,
 * when io_uring cannot start or WEFT_IO=epoll, epoll with non-blocking
 * attempts and readiness parking, and a pool of platform threads for
 * regular files.  Called from a platform thread, the same functions block
 * that thread (honouring its deadline where the operation can wait).
 *
 * fds need no special flags; O_NONBLOCK on a socket is fine and is what
 * weft_sendfile wants on its output (see there).  The epoll backend makes
 * an fd O_NONBLOCK only where no per-call flag exists -- pipes and other
 * non-socket fds, a socket it connects, a listening socket it accepts on;
 * reads and writes on sockets carry MSG_DONTWAIT instead.  An fd may
 * be closed with close(2) behind weft's back and its number reused by any
 * kind of file: no call on the new file blocks its carrier or loses its
 * deadline because of the old one.
 */
WEFT_API ssize_t weft_read(int fd, void *buf, size_t n);
WEFT_API ssize_t weft_write(int fd, const void *buf, size_t n);   /* may write less than n, like write(2) */
WEFT_API ssize_t weft_write_all(int fd, const void *buf, size_t n); /* loops until n are written or an error */
WEFT_API ssize_t weft_pread(int fd, void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_pwrite(int fd, const void *buf, size_t n, off_t off);
WEFT_API ssize_t weft_preadv(int fd, const struct iovec *iov, int iovcnt, off_t off);
WEFT_API ssize_t weft_pwritev(int fd, const struct iovec *iov, int iovcnt, off_t off);
WEFT_API ssize_t weft_readv(int fd, const struct iovec *iov, int iovcnt);
WEFT_API ssize_t weft_writev(int fd, const struct iovec *iov, int iovcnt);
WEFT_API ssize_t weft_recv(int fd, void *buf, size_t n, int flags);
WEFT_API ssize_t weft_send(int fd, const void *buf, size_t n, int flags);
/* flags as accept4(2): SOCK_NONBLOCK, SOCK_CLOEXEC */
WEFT_API int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags);
WEFT_API int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);
/*
 * Sends up to n bytes of file `in` from *off (advanced) to `out`, zero-copy
 * (sendfile(2)).  Returns the count sent (at least 1 unless n == 0 or end of
 * file) or -errno.  Parks while `out` is full.
 */
WEFT_API ssize_t weft_sendfile(int out, int in, off_t *off, size_t n);
/*
 * Waits until fd is ready for `events` (POLLIN, POLLOUT ...) or deadline_ns
 * (absolute, weft_now(); 0 = none; the effective deadline applies too).
 * Returns the ready events (> 0), -ETIMEDOUT or -ECANCELED.
 */
WEFT_API int weft_poll(int fd, int events, int64_t deadline_ns);
/*
 * Closes fd (close(2); never retried).  As closing a socket in Go or Java,
 * it first ends the calls other vthreads have in flight on fd -- a read,
 * accept or poll blocked on it returns -EBADF -- and close(2) comes only
 * when no vthread's call is using fd any more, so the number is never
 * reused under one.  The caller waits for that, uncancellably
 * (microseconds when calls were in flight, nothing extra otherwise).  A
 * call started on fd meanwhile waits for the close, then finds fd closed
 * (-EBADF) -- or, as with close(2) itself, the new socket another thread's
 * socket() got the number for (but -EBADF if yet another close of the
 * number began while it waited: its own file may be the one closed).  No
 * close leaves anything behind that could act on the number's next file.
 * Not interrupted: a platform thread's call
 * (a plain system call, as with close(2)), a regular file's read already
 * under way (it ends by itself; the close waits for it), and anything on
 * io_uring kernels before 5.19 (no cancel-by-fd: weft_close is close(2)
 * there) -- shutdown(2) a socket to wake its readers in those cases.
 * Returns 0 or -errno.
 */
WEFT_API int weft_close(int fd);
WEFT_API int weft_fsync(int fd);
WEFT_API int weft_fdatasync(int fd);

/*
 * Per-call deadlines.  weft_X_until(..., deadline_ns) is weft_X under the
 * earlier of deadline_ns (absolute, weft_now(); 0 = none) and the calling
 * thread's own deadline, which it leaves as it found it: a server gives
 * one send or one read its timeout without touching what the vthread's
 * caller set.  Same results as weft_X, -ETIMEDOUT included; the dump names
 * the caller's line, as for weft_X.
 */
WEFT_API ssize_t weft_read_until(int fd, void *buf, size_t n, int64_t deadline_ns);
WEFT_API ssize_t weft_write_until(int fd, const void *buf, size_t n, int64_t deadline_ns);
WEFT_API ssize_t weft_write_all_until(int fd, const void *buf, size_t n, int64_t deadline_ns);
WEFT_API ssize_t weft_recv_until(int fd, void *buf, size_t n, int flags, int64_t deadline_ns);
WEFT_API ssize_t weft_send_until(int fd, const void *buf, size_t n, int flags, int64_t deadline_ns);
WEFT_API int weft_accept_until(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags, int64_t deadline_ns);
WEFT_API int weft_connect_until(int fd, const struct sockaddr *addr, socklen_t addrlen, int64_t deadline_ns);
WEFT_API ssize_t weft_sendfile_until(int out, int in, off_t *off, size_t n, int64_t deadline_ns);
/*
 * Runs fn(arg) -- foreign code that may block in the kernel -- on a pool of
 * platform threads while the calling vthread parks; *result gets its return
 * value.  Not cancellable (the code runs to its end); returns 0 or -ENOMEM /
 * -EAGAIN when the pool cannot take it.  From a platform thread fn runs
 * right there.
 */
WEFT_API int weft_blocking(void *(*fn)(void *), void *arg, void **result);
/* The backend in use: WEFT_IO_URING or WEFT_IO_EPOLL (starts the runtime). */
WEFT_API int weft_io_backend(void);

/* ------------------------------------------------------------------------ */
/* Synchronisation: mutex, condition, semaphore, rwlock, latch, once        */
/* ------------------------------------------------------------------------ */

#include "weft/sync.h"

/* ------------------------------------------------------------------------ */
/* Channels and select                                                      */
/* ------------------------------------------------------------------------ */

#include "weft/chan.h"

/* ------------------------------------------------------------------------ */
/* Futures                                                                  */
/* ------------------------------------------------------------------------ */

#include "weft/future.h"

/* ------------------------------------------------------------------------ */
/* Signals                                                                  */
/* ------------------------------------------------------------------------ */

#include "weft/signal.h"

/* ------------------------------------------------------------------------ */
/* Structured concurrency: scopes and tasks                                 */
/* ------------------------------------------------------------------------ */

#include "weft/scope.h"

/* ------------------------------------------------------------------------ */
/* Vthread-local storage and scoped values                                  */
/* ------------------------------------------------------------------------ */

#include "weft/local.h"

/* ------------------------------------------------------------------------ */
/* Executors                                                                */
/* ------------------------------------------------------------------------ */

#include "weft/exec.h"

/* ------------------------------------------------------------------------ */
/* File channels                                                            */
/* ------------------------------------------------------------------------ */

#include "weft/file.h"

/* ------------------------------------------------------------------------ */
/* Completion handlers on sockets, and timers                               */
/* ------------------------------------------------------------------------ */

#include "weft/async.h"

/* ------------------------------------------------------------------------ */
/* Parallel work on the carriers                                            */
/* ------------------------------------------------------------------------ */

#include "weft/parallel.h"

/* ------------------------------------------------------------------------ */
/* Observe                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * The monitor.  weft has no preemption: a vthread runs until it blocks in
 * weft or yields.  One that calls a blocking system call weft does not own
 * (a library's read(), nanosleep(), a foreign lock) blocks its carrier's OS
 * thread with it -- the carrier is *pinned* -- and one that computes for
 * long holds its carrier too (a *hog*).  Either way the vthreads queued
 * behind it wait.  A monitor thread looks at the carriers while any is busy
 * (every 1 to 10 ms; it sleeps without a deadline while all are idle, and
 * nothing on the switch, wake or timer paths pays for it).  A vthread that
 * has held its carrier without a switch for longer than pin_threshold_ns is
 * one event:
 *   - it is counted (weft_stats.pinned or .hogs) and shown by weft_dump on
 *     its carrier's line until it ends;
 *   - one line goes to stderr once it has lasted a second -- at once
 *     with $WEFT_MONITOR=log, never with off, nor by default under
 *     weft-run: a program's stderr is its own, and a short stall is
 *     weft's business -- as Java's
 *     -Djdk.tracePinnedThreads, e.g.
 *       weft: pinned: vthread #12 "worker" blocked in nanosleep (syscall 35)
 *       on carrier 0 for 20 ms, at fetch+0x4f (/usr/bin/app+0x1234) <- ...
 *     naming the call site found on the vthread's stack (dladdr: the
 *     program needs -rdynamic for its own function names), and one more
 *     when it ends ("released carrier 0 after 215 ms");
 *   - while it lasts and other vthreads are waiting for a carrier, the
 *     runtime runs a spare carrier in its place (as Loom compensates for
 *     blocking file I/O, and Go's sysmon hands off a P), at most
 *     max_compensate at once.  Spares are made when first needed (at most
 *     max_compensate of them, each a thread with its own I/O ring or epoll
 *     set: two descriptors), retired when the stall ends (they finish what
 *     is theirs, then sleep, costing nothing) and reused; they end at
 *     weft_shutdown.  At the bound -- every spare allowed busy, carriers
 *     stalled, vthreads waiting -- nothing more is started: the waiting
 *     work runs when a stall ends, and one line says so on stderr (once a
 *     second at most, once the bound has held a second -- at once with
 *     $WEFT_MONITOR=log, never with off): "weft: 2 carrier(s) stalled
 *     and all 4 spare carriers busy (max_compensate): ...".  Go adds
 *     threads up to 10,000 and then stops the program; Loom compensates up
 *     to 256 and lets the work wait.  A vthread pinned to
 *     a stalled carrier (weft_thread_opts.pinned) waits for it all the same, as do
 *     the I/O completions of that carrier's ring.
 * A vthread that only calls weft_yield with nothing else to run does not
 * hold its carrier in this sense.
 */
typedef struct weft_stats {
    uint64_t started;   /* vthreads ever started */
    uint64_t live;      /* started and not finished */
    uint64_t peak;      /* highest live seen (sampled; see weft_stats_get) */
    uint64_t switches;  /* context switches into a vthread */
    uint64_t steals;    /* vthreads taken from another carrier's queue */
    uint64_t parks;     /* times a vthread parked */
    uint64_t pinned;    /* pinned events: carriers blocked in a system call weft does not own (above) */
    uint64_t carriers;  /* carrier threads configured (spares not included) */
    uint64_t stacks;    /* stacks mapped (live + cached) */
    uint64_t stack_bytes_reserved; /* address space reserved for stacks */
    uint64_t hogs;      /* hog events: vthreads that computed past the threshold */
    uint64_t spares;    /* spare carriers the monitor has made (they last until weft_shutdown) */
    uint64_t compensating; /* spare carriers active now, compensating for stalls */
    uint64_t tls_blocks;   /* own TLS blocks made (weft_thread_opts.own_tls): in use and pooled */
    uint64_t tls_block_bytes; /* the bytes of one: static TLS and thread control block */
    uint64_t trapped;         /* system calls the trap caught (weft_runtime_opts.trap), since load */
} weft_stats;

/*
 * Fills *s.  live and peak are exact when read in a quiescent moment; while
 * vthreads are starting and ending on several carriers at once peak is
 * sampled in steps of at most 32 per carrier.
 */
WEFT_API void weft_stats_get(weft_stats *s);

enum { WEFT_DUMP_TEXT = 0, WEFT_DUMP_JSON = 1 };

/*
 * Writes a thread dump to fd: every carrier (idle, running vthread #N,
 * "pinned in <syscall> since <t> by vthread #N", "held by vthread #N for
 * X ms"; spares marked as such) with the monitor's totals, then every live
 * vthread with its id, name, state
 * (running on carrier k, runnable, parked on <what> since <t>, sleeping until
 * <t>), for a parked one the call it waits in ("call": weft_recv with its
 * "fd", weft_mutex_lock ...), the source location of that call ("site",
 * "site_function") and its stack, frame by frame ("backtrace": function,
 * offset, file, line, module, module_offset; inlined functions as frames
 * of their own, "inlined": true), named with libdw -- static functions
 * too, no -rdynamic needed; unwound by DWARF call frame information, so
 * code built without frame pointers is walked -- and its stack use; then
 * the vthreads grouped by identical stack, largest group first ("stacks":
 * count, call, site, ids, backtrace); and every live executor with its
 * counters (weft/exec.h).  WEFT_DUMP_JSON writes the same as one JSON
 * object.  The first dump of a process reads its modules' symbols
 * (cached for the next).  Returns 0, -EINVAL for an unknown format, or a
 * negative errno from write(2).  Safe to call while vthreads run: it reads
 * a racy snapshot and never stops them; dumps on several threads take
 * turns.  Called on a vthread, it parks while a thread with room for
 * libdw's stack writes it.
 */
WEFT_API int weft_dump(int fd, int format);

/*
 * Makes signal `signo` (SIGQUIT, as the JVM does) write a dump to fd in
 * `format`: the handler only wakes a dedicated thread, which writes the
 * dump, so it is safe whatever the program was doing.  signo 0 turns it
 * off.  Returns 0 or -errno.  Setting WEFT_DUMP_ON_SIGQUIT=text or =json in
 * the environment does the same at weft_init, writing to stderr.
 */
WEFT_API int weft_dump_on_signal(int signo, int fd, int format);

/*
 * The live console.  With weft_runtime_opts.console or $WEFT_CONSOLE set,
 * weft_init serves a read-only snapshot of the runtime on a Unix socket,
 * for `weft-top PID|SOCKET` (and any program that speaks its framing: one
 * line "weft-console 1 <bytes>\n", then that many bytes of one JSON
 * object -- {"weft_console":{...},"weft_dump":{...}} -- every second while
 * the client stays connected; weft-top(1) describes the fields).
 *  - It costs nothing while nobody is connected: one platform thread
 *    ("weft-console") blocked in poll(2) on the socket; no counter, clock
 *    read or branch is added to any scheduling path.  The per-carrier
 *    figures (busy %, runnable, steals, parks) are the counters the
 *    carriers keep anyway and their threads' CPU clocks, read when a
 *    snapshot is taken.
 *  - The path "1" means /tmp/weft-<uid>/<pid>.sock, where weft-top finds it
 *    from the pid alone; the directory is made 0700 and must be the
 *    caller's, not a link, with no access for others.  Another path: its
 *    directory must not be writable by others unless sticky (as /tmp).
 *  - The socket is made 0600 (before listen(2): nobody can connect while
 *    its mode is the umask's), and each connection's peer is checked with
 *    SO_PEERCRED: only the process's own effective uid, and root (who can
 *    read the process's memory anyway), are served; any other is closed
 *    at once without a byte (a line on stderr says so: at most one a
 *    second, the rest counted in one "N more connections refused" line).
 *  - A socket file left by a process that died is replaced; one that a
 *    live process serves is an error (-EADDRINUSE), as is a path that
 *    exists and is not a socket (-EEXIST) or a directory that fails the
 *    check above (-EPERM): weft_init fails, after one line on stderr.
 *  - Read-only: bytes a client sends are read and thrown away; nothing it
 *    sends changes anything.  Each client is sent to on its own (the
 *    sockets are nonblocking): one that reads slowly or not at all delays
 *    no other, and one that does not take a whole snapshot within 2 s is
 *    dropped, so a stuck client never holds anything in the runtime.
 *  - At most 64 clients at once.  A newcomer then takes the place of the
 *    client that has left what it was sent unread longest, if that is over
 *    2 s; when every client reads, the newcomer gets the line
 *    "weft-console full 64\n" and is closed (weft-top says the console is
 *    full), logged as a refusal.
 *  - weft_shutdown closes the socket and removes its file.  A fork child
 *    has no console (the socket is its parent's).
 */

/* ------------------------------------------------------------------------ */
/* Compatibility: names of the contract that 0.1 renamed (deprecated)       */
/* ------------------------------------------------------------------------ */

/* WEFT-COMPAT-BEGIN (scripts/api-rename.sh leaves this section alone)
 *
 * ../shared/DESIGN.md -- the API contract that tests are written against --
 * names these; 0.1 renamed them to follow one rule each (see the
 * conventions at the top).  They keep working, with their old shape and
 * behaviour, as inline wrappers of the new calls, and are deprecated: a use
 * warns (-Wdeprecated-declarations) and names the replacement.  Define
 * WEFT_ALLOW_DEPRECATED to use them without the warning, or
 * WEFT_NO_DEPRECATED to leave them out (what weft's own code builds with).
 *
 *   weft_config                 weft_runtime_opts (the same struct)
 *   weft_attr                   weft_thread_opts (the same struct)
 *   weft_mutex_trylock(m)       weft_mutex_try_lock(m)
 *   weft_chan_new(es, cap)      weft_chan_create(&c, es, cap); NULL with errno set
 *   weft_group_new(name, n)     weft_group_create(&g, name, n, NULL); NULL with errno set
 *   weft_file_open(p, fl, m, o) weft_file_create(&f, p, fl, m, o); NULL with errno set
 *   weft_future_new()           weft_future_create(&f); NULL with errno set
 *   weft_scope_open(p, d)       weft_scope_create(&s, p, d); NULL with errno set
 *   weft_executor_virtual()     weft_executor_create_virtual(&e); NULL with errno set
 *   weft_executor_fixed(n, q, p) weft_executor_create_fixed(&e, n, q, p); NULL with errno set
 *   weft_executor_cached(n, ka) weft_executor_create_cached(&e, n, ka); NULL with errno set
 *   weft_executor_scheduled(n)  weft_executor_create_scheduled(&e, n); NULL with errno set
 *   weft_executor_group(g)      weft_executor_create_group(&e, g); NULL with errno set
 * (every one sets errno to the reason when it returns NULL, as the
 * replacement's return value gives it; weft_executor_group is not one of
 * DESIGN.md's names, but goes with its siblings).
 */
#ifndef WEFT_NO_DEPRECATED
#if defined(__GNUC__) && !defined(WEFT_ALLOW_DEPRECATED)
#define WEFT__DEPRECATED(use) __attribute__((deprecated("use " use)))
#else
#define WEFT__DEPRECATED(use)
#endif
#include <errno.h>

typedef weft_runtime_opts weft_config WEFT__DEPRECATED("weft_runtime_opts");
typedef weft_thread_opts weft_attr WEFT__DEPRECATED("weft_thread_opts");

WEFT__DEPRECATED("weft_mutex_try_lock") static inline int weft_mutex_trylock(weft_mutex *m) {
    return weft_mutex_try_lock(m);
}

WEFT__DEPRECATED("weft_chan_create") static inline weft_chan *weft_chan_new(size_t elem_size, size_t capacity) {
    weft_chan *c;
    int r = weft_chan_create(&c, elem_size, capacity);
    if (r < 0) errno = -r;
    return r == 0 ? c : NULL;
}

WEFT__DEPRECATED("weft_group_create") static inline weft_group *weft_group_new(const char *name, int carriers) {
    weft_group *g;
    int r = weft_group_create(&g, name, carriers, NULL);
    if (r < 0) errno = -r;
    return g;
}

WEFT__DEPRECATED("weft_file_create")
static inline weft_file *weft_file_open(const char *path, int flags, mode_t mode, const weft_file_opts *o) {
    weft_file *f;
    int r = weft_file_create(&f, path, flags, mode, o);
    if (r < 0) errno = -r;
    return f;
}

WEFT__DEPRECATED("weft_future_create") static inline weft_future *weft_future_new(void) {
    weft_future *f;
    int r = weft_future_create(&f);
    if (r < 0) errno = -r;
    return r == 0 ? f : NULL;
}

WEFT__DEPRECATED("weft_scope_create")
static inline weft_scope *weft_scope_open(weft_scope_policy policy, int64_t deadline_ns) {
    weft_scope *s;
    int r = weft_scope_create(&s, policy, deadline_ns);
    if (r < 0) errno = -r;
    return r == 0 ? s : NULL;
}

WEFT__DEPRECATED("weft_executor_create_virtual") static inline weft_executor *weft_executor_virtual(void) {
    weft_executor *e;
    int r = weft_executor_create_virtual(&e);
    if (r < 0) errno = -r;
    return r == 0 ? e : NULL;
}

WEFT__DEPRECATED("weft_executor_create_fixed")
static inline weft_executor *weft_executor_fixed(int threads, size_t queue_capacity, weft_reject_policy policy) {
    weft_executor *e;
    int r = weft_executor_create_fixed(&e, threads, queue_capacity, policy);
    if (r < 0) errno = -r;
    return r == 0 ? e : NULL;
}

WEFT__DEPRECATED("weft_executor_create_cached")
static inline weft_executor *weft_executor_cached(int max_threads, int64_t keep_alive_ns) {
    weft_executor *e;
    int r = weft_executor_create_cached(&e, max_threads, keep_alive_ns);
    if (r < 0) errno = -r;
    return r == 0 ? e : NULL;
}

WEFT__DEPRECATED("weft_executor_create_scheduled") static inline weft_executor *weft_executor_scheduled(int threads) {
    weft_executor *e;
    int r = weft_executor_create_scheduled(&e, threads);
    if (r < 0) errno = -r;
    return r == 0 ? e : NULL;
}

WEFT__DEPRECATED("weft_executor_create_group") static inline weft_executor *weft_executor_group(weft_group *g) {
    weft_executor *e;
    int r = weft_executor_create_group(&e, g);
    if (r < 0) errno = -r;
    return r == 0 ? e : NULL;
}
#endif /* WEFT_NO_DEPRECATED */
/* WEFT-COMPAT-END */

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
