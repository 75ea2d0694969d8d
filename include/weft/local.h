/*
 * weft/local.h -- what to use instead of a C thread-local (included by
 * weft.h).
 *
 * Why.  A vthread may resume on another carrier after any blocking call, so
 * a __thread variable read after the call may be another carrier's -- and
 * the compiler may even keep the address it computed before the call.
 * What replaces each use of C TLS:
 *
 *   errno                weft's own calls return -errno and never use
 *                        errno; a libc call's errno is safe to read right
 *                        after the call, with no weft blocking call in
 *                        between (the hooked libc calls keep the vthread
 *                        on its carrier while they run: weft.h, WEFT_HOOK);
 *   per-request state    (a request id, a user, a deadline budget, an
 *                        arena, a DB connection) scoped values when it is
 *                        set once for a call tree and read below it,
 *                        inherited by structured forks; vthread-locals
 *                        (below) when each vthread keeps its own mutable
 *                        value, like a pthread key;
 *   code that needs      a library that keeps __thread state across a
 *   __thread itself      blocking call (or keeps errno's address): spawn
 *                        its vthread with weft_thread_opts.pinned, which keeps it
 *                        on one carrier (or run it on a platform thread).
 *
 * ---- Vthread-local storage (pthread_key_t, Java's ThreadLocal) ----------
 *
 *   static weft_local_key arena_key;
 *   weft_local_key_create(&arena_key, arena_free);     // once
 *   weft_local_set(arena_key, arena_new());            // in a vthread
 *   arena *a = weft_local_get(arena_key);              // anywhere below, after any blocking call
 *
 * A value belongs to the vthread that set it, whatever carrier it runs on;
 * called from a platform thread (not a vthread) it belongs to that thread.
 * Values start NULL in every thread; nothing is inherited (weft_spawn, a
 * scope's fork, an executor's task each start empty).  Storage is made on
 * a thread's first set of a non-NULL value: threads that set nothing cost
 * nothing.  A get is two loads (no lock, no hash, no branch), inlined:
 * about a __thread read, cheaper than pthread_getspecific (weft-bench
 * micro --only local).
 *
 * Destructors, as pthread's: when a vthread's function returns -- on the
 * vthread itself (it may block), before weft_join of it returns -- each
 * non-NULL value whose key has a destructor is set to NULL and the
 * destructor called with it; if destructors set values again, the pass
 * repeats, 4 passes at most (PTHREAD_DESTRUCTOR_ITERATIONS), then what is
 * left is dropped.  Each value is destroyed exactly once.  A platform
 * thread's run at its exit (pthread_exit or return from its start
 * function; not at exit() for the main thread, as pthread's).  A daemon
 * vthread still running at weft_shutdown is abandoned: its storage is
 * freed, its destructors are not run.  Code run by weft_blocking, and an
 * executor's platform pool threads, see their own pool thread's storage;
 * completion handlers (weft/async.h) see their dispatcher's, which every
 * handler it runs shares: keep per-operation state in the handler's ctx.
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_LOCAL_H
#define WEFT_LOCAL_H

/* A key: its index and a 47-bit generation of that index (local.c).  64
 * bits, so that a generation never comes round again while a value kept
 * under an old key may still be held. */
typedef uint64_t weft_local_key;

/*
 * Makes a key, with a destructor (NULL: none).  Returns 0, -EINVAL (k
 * NULL), or -EAGAIN when 16,384 keys exist.  Needs no runtime.  Keys are
 * reused after weft_local_key_delete with a new value: what threads kept
 * under the deleted key is never returned through the new one, nor given
 * to its destructor, however many keys were made and deleted meanwhile
 * (each index counts its keys in 47 bits; an index whose count ran out
 * would be retired, not reused -- at a million keys a second, after
 * four years of making keys at that one index).
 */
WEFT_API int weft_local_key_create(weft_local_key *k, void (*destructor)(void *));

/*
 * Deletes a key (as pthread_key_delete: runs no destructor; values left in
 * threads are dropped, not freed -- free them first if they own memory).
 * The key must not be used afterwards.  Returns 0 or -EINVAL (no such key).
 */
WEFT_API int weft_local_key_delete(weft_local_key k);

/* The calling thread's value for k; NULL when it set none.  k must be a
 * live key (as pthread_getspecific's: a deleted key reads whatever the
 * next key made at its index holds). */
WEFT_API void *weft_local_get(weft_local_key k);

/* Sets the calling thread's value for k.  Returns 0, -EINVAL (k is not a
 * live key) or -ENOMEM (the thread's storage could not grow; nothing
 * changed).  Setting NULL where nothing was set allocates nothing. */
WEFT_API int weft_local_set(weft_local_key k, void *value);

/* ---- Scoped values (Java's ScopedValue, JEP 506) ------------------------
 *
 *   static weft_scoped_key request_id = WEFT_SCOPED_KEY("request-id");
 *
 *   static int handle(void *req) {
 *       ...  void *id; if (weft_scoped_get(&request_id, &id) == 0) log_with(id);
 *   }
 *   weft_binding b[] = {{&request_id, id}, {&user, u}};
 *   weft_scoped_run(b, 2, handle, req);
 *
 * A key is a static object compared by address (its name is for humans).
 * weft_scoped_run binds its keys for the dynamic extent of fn(arg): any
 * code fn calls, on the same thread, reads them with weft_scoped_get, after
 * any blocking call.  Bindings are immutable: to change one, bind it again
 * in a nested weft_scoped_run, which shadows the outer binding until it
 * returns, then the outer one is seen again.  The values themselves are
 * the caller's pointers: weft neither copies nor frees what they point to,
 * and never shows them (weft_dump counts bindings, nothing more).
 *
 * Inheritance (structured, as StructuredTaskScope's forks):
 *  - a scope's forks (weft_fork) see the bindings of the thread that opened
 *    the scope, as they were when it opened it -- not bindings made later
 *    by anyone, the opener included;
 *  - weft_parallel_for / _reduce: every body sees the caller's bindings,
 *    on whichever worker it runs (the helpers are joined before the call
 *    returns; Java's parallel streams, on pool threads, do not carry them);
 *  - weft_spawn, weft_submit and every executor, weft_blocking, completion
 *    handlers and platform threads start with no bindings: they may outlive
 *    the binding, so a value they need is passed as their argument (as
 *    Java's executors and Thread.start do not carry ScopedValues).  A task
 *    that WEFT_REJECT_CALLER_RUNS runs on the submitter sees the
 *    submitter's bindings, being on its thread (as in Java).
 * A scope opened inside a weft_scoped_run must be closed before fn returns
 * (the scope's rule: nothing outlives it).  One left open is closed as fn
 * returns -- cancelling and joining its forks, with one line on stderr --
 * so that no fork ever reads a binding that is gone.
 */
typedef struct weft_scoped_key {
    const char *name;
} weft_scoped_key;

#define WEFT_SCOPED_KEY(n) {.name = (n)}

typedef struct weft_binding {
    weft_scoped_key *key;
    void *value;
} weft_binding;

/*
 * Binds b[0 .. n-1] (a key bound twice: the later binding wins) on the
 * calling thread, runs fn(arg), unbinds, and returns fn's result.  Returns
 * -EINVAL without calling fn when fn is NULL, b is NULL with n > 0, or a
 * key is NULL; -ENOMEM when more than 8 bindings could not be copied.
 * b is copied: the caller may reuse it once fn runs.  Works on vthreads and
 * platform threads; nests to any depth (each level takes about 200 bytes
 * of its caller's stack; more than 8 bindings in one call, a malloc).
 */
WEFT_API int weft_scoped_run(const weft_binding *b, size_t n, int (*fn)(void *), void *arg);

/*
 * The calling thread's binding of key: 0 and *value (if value is not
 * NULL), or -ENOENT when key is not bound here, -EINVAL when key is NULL.
 * A few loads per enclosing weft_scoped_run level, no lock.
 */
WEFT_API int weft_scoped_get(weft_scoped_key *key, void **value);

/* ---- The gets' inline fast path ------------------------------------------
 *
 * Not API: what the two gets above read, laid out here so that a get
 * compiles to a few loads in the caller instead of a call (a call alone
 * costs more than pthread_getspecific's whole body).  The layout may change
 * with any version of weft (rebuild against its header); the library
 * asserts at build time what it can (src/sched/sched.c, local.c).
 *
 * Locals.  Every OS thread has a window: an array of one value per key
 * index, as big as the key table, whose pages are touched only where keys
 * are used.  A carrier's window holds the values of the vthread it runs
 * (the scheduler copies them in as it lets the vthread run and clears them
 * as it stops: nothing for a vthread that set nothing); a platform
 * thread's is its storage (or a shared empty one until it sets anything).
 * A key's bits 3..16 are its index times 8, the byte offset of its slot,
 * so a get is the window's address from the thread pointer, then the slot.
 *
 * Scoped values: the vthread running on the calling OS thread's carrier
 * (the carrier's first field) and its innermost frame, at a fixed offset.
 *
 * Thread-locals are read by an asm volatile statement, never by a C access
 * to a __thread variable: the compiler may keep a thread-local's address
 * (or the thread pointer) in a register across a call, and after a
 * blocking call the vthread may be on another carrier -- the very hazard
 * this header is about.  An asm volatile statement is executed where it
 * stands, every time.  x86-64, aarch64 and riscv64 with GCC or Clang
 * (the initial-exec sequence of each: %fs, tpidr_el0, tp); other targets
 * (or WEFT_NO_INLINE_GETS defined) call the functions.
 */
typedef struct weft__sframe {         /* one weft_scoped_run's bindings, on its caller's stack */
    const struct weft__sframe *prev;  /* the frame that was innermost when it began */
    const weft_scoped_key *k0;        /* the first binding, inline */
    void *v0;
    unsigned n;                       /* bindings: k0/v0, then more[0 .. n-2]; keys distinct */
    unsigned total;                   /* distinct keys bound through the chain from here */
    const weft_binding *more;
} weft__sframe;
#define WEFT__LOCAL_SLOT_MASK 0x1fff8u /* a key's slot offset in a window: index * 8 (bits 17-63: a generation) */
#define WEFT__THREAD_SCOPED_OFF 320    /* offsetof(struct weft_thread, scoped) */

#if (defined(__x86_64__) || defined(__aarch64__) || (defined(__riscv) && __riscv_xlen == 64)) && \
    defined(__GNUC__) && !defined(WEFT_NO_INLINE_GETS)
#include <errno.h>

/* A thread-local's offset from the thread pointer (initial-exec: from the
 * GOT), the same in every thread, so not volatile -- the compiler may keep
 * it; and the thread pointer itself, read afresh every time (volatile). */
#if defined(__x86_64__)
#define WEFT__TLS_OFF(sym, off) __asm__("movq " #sym "@gottpoff(%%rip), %0" : "=r"(off))
#define WEFT__TLS_LOAD(off, v) __asm__ volatile("movq %%fs:(%1), %0" : "=r"(v) : "r"(off))
#elif defined(__aarch64__)
#define WEFT__TLS_OFF(sym, off) \
    __asm__("adrp %0, :gottprel:" #sym "\n\tldr %0, [%0, #:gottprel_lo12:" #sym "]" : "=r"(off))
#define WEFT__TLS_LOAD(off, v)                                                        \
    do {                                                                              \
        const char *weft__tp_;                                                        \
        __asm__ volatile("mrs %0, tpidr_el0" : "=r"(weft__tp_));                      \
        __asm__ volatile("ldr %0, [%1, %2]" : "=r"(v) : "r"(weft__tp_), "r"(off) : "memory"); \
    } while (0)
#else
#define WEFT__TLS_OFF(sym, off) __asm__("la.tls.ie %0, " #sym : "=r"(off))
#define WEFT__TLS_LOAD(off, v) __asm__ volatile("add %0, %1, tp\n\tld %0, 0(%0)" : "=&r"(v) : "r"(off) : "memory")
#endif

/* The vthread running on the calling OS thread's carrier, or NULL. */
static inline const char *weft__vthread_now(void) {
    long off;
    const char *const *c;
    WEFT__TLS_OFF(weft__tls_carrier, off);
    WEFT__TLS_LOAD(off, c);
    return c ? *c : (const char *)0;
}

static inline void *weft__local_get_fast(weft_local_key k) {
    long off; /* the window pointer's offset from the thread pointer */
    const char *w;
    WEFT__TLS_OFF(weft__tls_window, off);
    WEFT__TLS_LOAD(off, w);
    /* (a relaxed atomic load is a plain mov; it tells a TSan build that
     * key_delete's clear of the slot is no race) */
    return __atomic_load_n((void *const *)(w + (k & WEFT__LOCAL_SLOT_MASK)), __ATOMIC_RELAXED);
}

static inline int weft__scoped_get_fast(weft_scoped_key *key, void **value) {
    const char *t = weft__vthread_now();
    if (__builtin_expect(!t, 0)) return (weft_scoped_get)(key, value);
    for (const weft__sframe *f = *(const weft__sframe *const *)(t + WEFT__THREAD_SCOPED_OFF); f; f = f->prev) {
        if (f->k0 == key) {
            if (value) *value = f->v0;
            return 0;
        }
        for (unsigned i = 1; i < f->n; i++)
            if (f->more[i - 1].key == key) {
                if (value) *value = f->more[i - 1].value;
                return 0;
            }
    }
    return key ? -ENOENT : -EINVAL;
}

#define weft_local_get(k) weft__local_get_fast(k)
#define weft_scoped_get(key, value) weft__scoped_get_fast((key), (value))
#endif

#endif /* WEFT_LOCAL_H */
