/*
 * arch layer: the context switch and stack allocation.  Knows nothing of
 * vthreads: it switches stack pointers and hands out stack slots whose top
 * WEFT__STACK_TOP bytes the caller uses for its own descriptor.
 */
#ifndef WEFT_ARCH_H
#define WEFT_ARCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <pthread.h>

/* Which sanitizer builds this: first, since the inline functions below
 * depend on it (they were once above it, and the spawn path's unpoisoning
 * of a reused stack was compiled out). */
#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif

/* ---- the environment ------------------------------------------------------ */

/*
 * $name as a decimal integer in [lo, hi]: 1 with *out set,
 * 0 when it is unset or empty (*out untouched), or -EINVAL after one line
 * on stderr naming it ("weft: WEFT_CARRIERS=abc is not a carrier count
 * (1 to 1024)").  Every WEFT_* variable that weft_init reads goes through
 * it, so a bad value fails weft_init the same way whichever it is (here,
 * in the lowest layer, so that every layer can).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
static inline int weft__env_long(const char *name, long lo, long hi, const char *what, long *out) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "weft: %s=%s is not %s\n", name, v, what);
        return -EINVAL;
    }
    *out = x;
    return 1;
}

/* ---- context switch (switch_<arch>.S: x86_64; aarch64, riscv64) -------- */

/*
 * Saves the callee-saved registers, MXCSR and the x87 control word on the
 * current stack, stores the stack pointer in *save_sp, loads to_sp and
 * restores the same from there.  Returns when something switches back to
 * *save_sp, with the `arg` that switcher passed.  A context made by
 * weft__ctx_make starts in entry(arg, switch_arg).
 */
void *weft__ctx_switch(void **save_sp, void *to_sp, void *arg);

/* Prepares a fresh context below hi: the first switch to the returned stack
 * pointer calls entry(arg, switch_arg), which must never return. */
void *weft__ctx_make(void *hi, void (*entry)(void *, void *), void *arg);

/* ---- stacks (stack.c) --------------------------------------------------- */

/* Bytes at the top of every stack slot that belong to the slot's owner
 * (the vthread descriptor lives there, in the page the stack starts on). */
#define WEFT__STACK_TOP 512

enum {
    WEFT__GUARD_MADVISE = 1, /* MADV_GUARD_INSTALL: no extra VMA (Linux >= 6.13) */
    WEFT__GUARD_MPROTECT = 2, /* PROT_NONE page: one more VMA per stack */
    WEFT__GUARD_CANARY = 3,  /* no guard page: a canary checked at each switch */
};

/*
 * The head of a slot's top area.  stack.c owns these fields; the owner's
 * descriptor embeds this struct as its first member.
 */
typedef struct weft__stack {
    char *lo;                  /* lowest usable byte (above the guard) */
    size_t size;               /* usable bytes, descriptor area included */
    struct weft__stack *next;  /* free-list link while cached */
    uint64_t seq_base;         /* a value never seen before in this slot */
    uint8_t guard;             /* WEFT__GUARD_* */
    uint8_t odd;               /* not the default size: own mapping */
    void *slab;                /* the slab it was carved from */
} weft__stack;

#define WEFT__CANARY 0x5745465443414e59ull /* "WEFTCANY" */

/* A per-carrier cache of free stacks of the default size (no locking: one
 * owner).  An array, so that caching a stack never touches its (possibly
 * cold) memory; the newest are reused first. */
#define WEFT__STACK_CACHE_CAP 512
typedef struct weft__stack_cache {
    uint32_t n;
    weft__stack *s[WEFT__STACK_CACHE_CAP];
} weft__stack_cache;

int weft__stacks_init(size_t default_size); /* 0 or -errno */
void weft__stacks_fini(void);                /* unmaps every slab */
int weft__stacks_guard_mode(void);

/* A stack of `size` bytes (0 = default) or NULL (-ENOMEM).  cache may be
 * NULL (platform thread). */
weft__stack *weft__stack_get(weft__stack_cache *cache, size_t size);
void weft__stack_put(weft__stack_cache *cache, weft__stack *s);

/* The spawn/exit fast paths: a default-size stack from / back to the cache,
 * or NULL / 0 when the out-of-line functions above must do it. */
static inline weft__stack *weft__stack_get_cached(weft__stack_cache *cache) {
    if (!cache->n) return NULL;
    return cache->s[--cache->n]; /* (clean under ASan: weft__stack_done) */
}

/*
 * The owner of stack s has run its last frame: sp is the stack pointer it
 * left with (its last switch saved it).  Called once, off s, before s can
 * be handed out again.  Under ASan it unpoisons what the frames still on s
 * had poisoned -- [sp, top): frames that returned unpoisoned themselves, and
 * nothing is ever poisoned below the lowest live frame -- so that a stack
 * is always clean in the caches and a new owner starts on it as on fresh
 * memory.  Else nothing.
 */
#ifdef WEFT_ASAN
void weft__stack_done(weft__stack *s, const void *sp);
#else
static inline void weft__stack_done(weft__stack *s, const void *sp) { (void)s, (void)sp; }
#endif

static inline int weft__stack_put_cached(weft__stack_cache *cache, weft__stack *s) {
    if (s->odd || cache->n == WEFT__STACK_CACHE_CAP) return 0;
    cache->s[cache->n++] = s;
    return 1;
}

/* Called by an idle carrier: if spawns recently ran out of made stacks,
 * carves a batch ahead into the depot (in parallel with the spawner) and
 * returns how many; else returns 0 at once. */
int weft__stacks_refill(void);

/* Called by an idle carrier: returns one batch of surplus cached stacks'
 * memory to the kernel if the depot is above its high-water mark; returns
 * 1 if it did, 0 if there was nothing to do. */
int weft__stacks_trim(void);

/* Called by an idle carrier after a lull (see trim_due): moves what its
 * cache holds beyond a few stacks to the depot and returns the pages below
 * the top page of one batch of depot stacks; 1 if it did something. */
int weft__stacks_idle_trim(weft__stack_cache *cache);

/* Called by a carrier that stops spawning for good or for long (a retired
 * spare): gives everything its cache holds to the depot, where the other
 * carriers' trims reach it. */
void weft__stacks_cache_flush(weft__stack_cache *cache);

/* When the idle trim will have work for this carrier (weft_now's clock
 * base is CLOCK_MONOTONIC), or INT64_MAX if it has none. */
int64_t weft__stacks_trim_due(const weft__stack_cache *cache);

/* Walks every slot ever handed out (for the thread dump).  fn gets the
 * slot's top-area head; it must treat the memory as racy. */
void weft__stacks_walk(void (*fn)(weft__stack *s, void *ctx), void *ctx);
void weft__stacks_counts(uint64_t *slots, uint64_t *bytes);

/* In a child process after fork (the scheduler's pthread_atfork handler,
 * single-threaded): forgets every stack of the parent's runtime -- its
 * slabs stay mapped, so that a vthread that forked goes on on its own
 * stack in the child, and are never handed out again -- and resets the
 * allocator for a fresh runtime. */
void weft__stacks_fork_child(void);
/* Around a fork (the parent's side): the allocator's lock is held, so no
 * carrier is carving stacks -- and calling malloc, whose lock a sanitizer's
 * allocator may not take across fork itself -- while the process is
 * copied. */
void weft__stacks_fork_prepare(void);
void weft__stacks_fork_parent(void);

/* Memory a fork child abandons (the parent runtime's queues, tables,
 * carriers): kept reachable from here for good, so that LeakSanitizer,
 * which checks a child that ends with exit(), does not report it, and
 * never freed -- a thread that did not survive the fork may have left it
 * half-updated.  Cheap: the pages are the parent's, copy-on-write. */
void weft__fork_keep(void *p);

/* Is addr in the guard page (or just below) of stack s? */
int weft__stack_guard_hit(const weft__stack *s, const void *addr);
/* Resident bytes of s, by mincore (dump only). */
size_t weft__stack_resident(const weft__stack *s);

/* ---- a TLS block and TCB of its own (tls.c) -------------------------------- */

/* 0 if own TLS blocks can be made here, else -ENOTSUP (sanitizer builds;
 * a C library without what tls.c needs, after one line on stderr saying
 * what).  Probes once; later calls answer at once. */
int weft__tls_probe(void);
/* A block from the pool (*reused = 1) or a new one (0); NULL: no memory.
 * Only after a successful probe. */
void *weft__tls_get(int *reused);
/* Back to the pool: after weft__tls_end ran on it and nothing runs on it. */
void weft__tls_put(void *tp);
/* WEFT__TLS_EXTRA bytes of block tp that are its user's, not glibc's (a
 * record that lives as long as the block is held: hook/threads.c's),
 * 64-byte aligned, on the block's own pages.  A new block's are zero, a
 * reused one's as its last user left them. */
#define WEFT__TLS_EXTRA 128
void *weft__tls_extra(void *tp);
/* Block tp's pthread_t (the address of glibc's descriptor: tp itself on
 * x86-64, below it under TLS variant I -- aarch64, riscv64), and back. */
void *weft__tls_handle(void *tp);
void *weft__tls_tp_of(void *handle);
/* On the new context, its block the thread pointer, before its code:
 * the tid for id, rseq, and a reused block's modules back to their
 * initial images (libc's kept), or a new one's ctype tables.  Rewrites
 * every __thread variable but libc's: the caller restores its own. */
void weft__tls_start(uint64_t id, int reused);
/* On the context as it ends, on its block: thread_local and pthread key
 * destructors (they may block), keys cleared, the global locale. */
void weft__tls_end(void);
/* The tid glibc records as the calling thread's (a mutex's owner): an own
 * block's fake one, else the kernel thread's. */
int weft__tls_tid(void);
/* the tid in block tp's TCB (-1: no own TLS here); whether tid is one of
 * the made-up ones weft gives blocks (the kernel gives none there) */
int weft__tls_tid_of(const void *tp);
int weft__tls_tid_is_ours(long tid);
/* Block tp's cancellation is enabled (glibc's cancelhandling, bit 0 clear). */
int weft__tls_cancel_enabled(const void *tp);
/* Blocks made and not freed (pooled ones included: they stay for the
 * process's life). */
size_t weft__tls_blocks(void);
/* The bytes of one block: its static TLS and TCB, as ld.so lays them out
 * (the DTV, a few dozen bytes, apart); 0 before a successful probe. */
size_t weft__tls_block_bytes(void);
/* Fork: the pool's lock. */
void weft__tls_fork_prepare(void);
void weft__tls_fork_parent(void);
void weft__tls_fork_child(void);
/* The calling thread's thread pointer (%fs:0), and setting it: wrfsbase
 * where weft__tls_fsgsbase (probed), else arch_prctl. */
void *weft__tp_get(void);
extern int weft__tls_fsgsbase;
void weft__tp_set_syscall(void *tp); /* (inline: errno is TLS, it is not written) */
static inline void weft__tp_set(void *tp) {
#if defined(__x86_64__)
    if (__builtin_expect(weft__tls_fsgsbase, 1)) __asm__ volatile("wrfsbase %0" ::"r"(tp) : "memory");
    else weft__tp_set_syscall(tp);
#elif defined(__aarch64__)
    __asm__ volatile("msr tpidr_el0, %0" ::"r"(tp) : "memory");
#elif defined(__riscv)
    __asm__ volatile("mv tp, %0" ::"r"(tp) : "memory");
#endif
}

/* ---- the system call trap (sud_x86_64.S; hook/trap.c) ------------------ */

/* The range the kernel never traps (the restorer's rt_sigreturn), the
 * restorer itself, and a trapped clone made again (sud_x86_64.S says
 * how the child gets back to the program). */
extern const char weft__sud_range_lo[], weft__sud_range_hi[];
void weft__sud_restorer(void);
long weft__sud_clone(long nr, const long args[6], const long long *gregs, int keep_sp);
/* A trapped vfork made as one: the frames below gregs' stack pointer kept
 * in save (cap bytes; -ENOMEM if they need more) while the child runs,
 * the call made on alt_top's stack. */
long weft__sud_vfork(const long long *gregs, char *save, size_t cap, char *alt_top);
/* Syscall user dispatch for the calling thread, sel its selector byte
 * (0 allow, 1 trap); 0 or -errno (-EINVAL: a kernel before 5.11). */
int weft__sud_arm(unsigned char *sel);
void weft__sud_disarm(void);

/* ---- sanitizer and valgrind hooks -------------------------------------- */


#ifdef WEFT_ASAN
void __sanitizer_start_switch_fiber(void **fake_stack_save, const void *bottom, size_t size);
void __sanitizer_finish_switch_fiber(void *fake_stack_save, const void **bottom_old, size_t *size_old);
void __asan_unpoison_memory_region(void const volatile *addr, size_t size);
#endif
#ifdef WEFT_TSAN
void *__tsan_get_current_fiber(void);
void *__tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void *fiber);
void __tsan_switch_to_fiber(void *fiber, unsigned flags);
void __tsan_set_fiber_name(void *fiber, const char *name);
#endif

#endif /* WEFT_ARCH_H */
