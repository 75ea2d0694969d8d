/*
 * A thread-local storage block and thread control block of its own, for a
 * context that is not a kernel thread (glibc; x86-64, aarch64, riscv64):
 * what a vthread with weft_thread_opts.own_tls runs with, so that
 * __thread variables, errno, stdio's lock owner, malloc's per-thread
 * cache, pthread keys and pthread_self() are its own wherever it runs.  Knows nothing of vthreads:
 * sched asks for a block, sets it as the thread pointer when it switches
 * to the vthread, and gives it back.
 *
 * The block.  x86-64's fs base is the thread pointer: it points at the TCB
 * (glibc's struct pthread, whose first bytes are tcbhead_t), and the
 * static TLS of every module lies below it at offsets fixed at load time
 * (the initial-exec model reads %fs:-OFFSET directly) -- TLS variant II.
 * aarch64 (tpidr_el0) and riscv64 (tp) use variant I: the thread pointer
 * points at a two-word TCB header (the DTV pointer and a reserved word;
 * riscv64 keeps it just below), the static TLS lies above it, and struct
 * pthread right below, so pthread_self() is the thread pointer less a
 * constant (T.pre, measured on the calling thread at the probe; 0 on
 * x86-64).  glibc's own descriptions of the descriptor's fields are
 * offsets from its start; T.off_* hold them from the thread pointer, so
 * the same code serves both variants.  Variant I's block is [descriptor]
 * [TCB header, static TLS][the user's bytes], the thread pointer aligned
 * as glibc aligns it; the header's other fields -- x86-64's canary and
 * pointer guard -- are process-wide globals there, nothing to copy.
 *
 * We do not lay the static TLS out ourselves: ld.so's own allocator,
 * _dl_allocate_tls (GLIBC_PRIVATE, what pthread_create uses), makes the static TLS with every module's
 * initial image, the TCB zeroed, and the DTV through which dynamic TLS
 * (__tls_get_addr, dlopen'd modules) finds its blocks -- so a module
 * dlopen'd later works as it does in a thread glibc made.  What
 * pthread_create would then fill in of the TCB we fill in:
 *  - (x86-64) tcbhead_t: tcb and self point at the block; the rest of the header
 *    (multiple_threads, sysinfo, the stack-protector canary at %fs:0x28,
 *    the pointer guard at %fs:0x30, CET's feature_1, the shadow stack
 *    base) is copied from the calling thread's, as pthread_create copies
 *    the creator's -- they are process-wide values, so a frame whose
 *    prologue ran on one block and whose epilogue runs on another checks
 *    the same canary;
 *  - the tid, at the offset glibc publishes for libthread_db
 *    (_thread_db_pthread_tid): glibc's mutexes record it as the owner
 *    (recursive and error-checking mutexes compare it), so each block has
 *    its own, 0x00800000 + the caller's id -- above Linux's pid limit
 *    (2^22), so it never names a real thread, and below 2^30 (the futex
 *    word's tid mask).  raise() and abort() ask the kernel for the real
 *    tid; pthread_kill(another block) answers ESRCH;
 *  - the robust mutex list head (where get_robust_list says the calling
 *    thread's is, relative to its thread pointer): empty, pointing at
 *    itself, with the same futex offset;
 *  - the rseq area's cpu_id (at __rseq_offset): -1, "not registered" --
 *    the kernel updates only the registered one, the carrier's; so
 *    sched_getcpu asks the kernel instead of reading a stale 0;
 *  - ctype's per-thread table pointers: __ctype_init, on the block, as a
 *    new thread runs it (weft__tls_start);
 *  - the cancellation state (_thread_db_pthread_cancelhandling): 0 --
 *    enabled, deferred, not cancelled -- as each vthread starts, since a
 *    block whose last thread left by pthread_exit has EXITING set
 *    (hook/threads.c runs pthread_exit and cancellation on a block);
 *  - the descriptor's links in glibc's thread lists
 *    (_thread_db_pthread_list): linked to themselves, in no list.  A fork
 *    from a vthread with its own TLS makes that block the child's only
 *    thread, and glibc's fork child unlinks it from the list it was on
 *    and adds it to the running ones: left zero, that unlink wrote
 *    through a NULL pointer (seen: bash under weft-run, SIGSEGV at 0x8).
 * The offsets come from glibc's own descriptions (the _thread_db_*
 * symbols, get_robust_list, __rseq_offset), checked against the calling
 * thread at the probe: a glibc whose layout does not match is refused
 * with one line naming what did not match, never guessed at.
 *
 * The pool.  A block is given back when its vthread ends and handed to
 * the next one (a LIFO list under a mutex) -- not freed: glibc frees a
 * thread's malloc cache (tcache) and detaches its arena only in its own
 * thread-exit path, which we cannot call, so freeing a block would leak
 * the cache with every vthread; kept, the cache serves the next one, as
 * a carrier's serves its vthreads.  What must not leak from one vthread
 * to the next is reset: as a vthread ends (weft__tls_end, on its own
 * block) C++ thread_local destructors run (__call_tls_dtors), then the
 * pthread key destructors (up to PTHREAD_DESTRUCTOR_ITERATIONS rounds,
 * as glibc's thread exit), then every key's value is cleared and its
 * locale set back to the global one.  (The keys' table has 1024 entries:
 * a thread that holds no value -- none of its own key slots, the 32 in
 * the descriptor and the second-level arrays it points at, is set --
 * skips the rounds, as glibc's exit does on its specific_used flag.)  As
 * a reused block starts
 * (weft__tls_start) every module's TLS except libc's goes back to its
 * initial image -- libc's keeps its malloc cache and arena, errno is
 * zeroed.  Pooled blocks stay for the process's life (a runtime started
 * again reuses them), as glibc's stack cache keeps its threads' blocks:
 * as many as own-TLS vthreads were alive at once, about 5 KiB each plus
 * what their malloc caches hold.
 *
 * The blocks' memory.  A block's bytes are the static TLS below the TCB
 * (every module's, plus glibc's surplus for modules dlopen'd later), the
 * TCB (glibc's struct pthread, 2.3 KiB), then WEFT__TLS_EXTRA bytes that
 * are the block's user's (weft__tls_extra: hook/threads.c keeps a virtual
 * pthread's record there, which lives exactly as long as its block is
 * held) -- about 4.4 KiB in all here, carved one after the other from 32 MiB
 * slabs (never unmapped: blocks are pooled).  Whoever holds a million
 * threads unjoined holds a million blocks (a pthread_t is its block's
 * address), so a block's first touch is what such a burst pays for:
 * on this VM a fresh 4 KiB page costs 5-12 us at its first touch, and a
 * fault one by one up to 21 us.  So each slab is marked for transparent
 * huge pages (MADV_HUGEPAGE) and populated 2 MiB at a time
 * (MADV_POPULATE_WRITE, ~450 blocks): measured, a 2 MiB piece populated
 * as one huge page then costs ~0.03 us a 4 KiB page at first touch
 * (against 5.2 us populated as 4 KiB pages, 11.9 us faulted one by one),
 * and 1,000,000 pthreads under weft-run went from 46 s to 17 s with this
 * and the stacks going back at each thread's end (hook/threads.c).  Where
 * THP is off the populate still spares the faults.  The first slab (about
 * 7,000 blocks) is the exception, populated in 4 KiB pages, 16 KiB at
 * first and twice as much each time up to 256 KiB: a program with a few
 * threads then keeps a few blocks' worth of memory, not 2 MiB (nor 256 KiB
 * for main's one block) (python3 -m http.server under weft-run held 26.8 MB
 * against 20.4 MB natively).
 *
 * The switch.  weft__tp_set: wrfsbase where the CPU and kernel allow user
 * space to write the fs base (AT_HWCAP2's FSGSBASE bit, Linux 5.9+), a
 * few cycles; else arch_prctl(ARCH_SET_FS), a system call (about 1 us on
 * a VM) -- at each switch to or from an own-TLS vthread, so there the
 * price is real and weft-bench micro's switch-tls line shows it.  The
 * system call is made inline (no errno: errno is TLS, and the write would
 * land in whichever block is current).
 *
 * What it cannot do, said where asked: sanitizer builds keep their
 * per-thread state in TLS (ASan's fake stacks, TSan's thread state), so
 * there weft__tls_probe answers -ENOTSUP; so it does on a glibc without
 * the symbols above.  Known gaps, in weft.h: a module dlopen'd with
 * initial-exec TLS while own-TLS vthreads live is not initialised in
 * their blocks (glibc does it only for the threads it lists);
 * pthread_getattr_np(pthread_self()) reports no stack; a robust or PI
 * mutex's owner is the fake tid, which the kernel does not know.
 *
 * Threads: the probe runs once (pthread_once); get and put take the pool's
 * lock; start and end run on the vthread, on its own block.
 */
#define _GNU_SOURCE
#include "arch.h"

#if defined(__x86_64__)
#include <asm/prctl.h>
#endif
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <locale.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef HWCAP2_FSGSBASE
#define HWCAP2_FSGSBASE (1 << 1)
#endif

#define TID_BASE 0x00800000u
#define TID_SPAN (0x3fffffffu - TID_BASE)
#define HDR_COPY_LO 0x18 /* tcbhead_t: after tcb, dtv, self */
#define HDR_COPY_HI 0x80 /* ... up to the rtld save area */
#define KEYS_MAX 1024    /* PTHREAD_KEYS_MAX */
#define KEY_ROUNDS 4     /* PTHREAD_DESTRUCTOR_ITERATIONS */
#define SPECIFIC_N 32    /* struct pthread's specific[] */

int weft__tls_fsgsbase;

struct key_struct { /* glibc's struct pthread_key_struct (checked at the probe) */
    uintptr_t seq;
    void (*destr)(void *);
};

static struct {
    pthread_once_t once;
    int state; /* 0, or -ENOTSUP */
    void *(*allocate)(void *);
    void (*deallocate)(void *, bool);
    void (*ctype_init)(void);
    void (*call_tls_dtors)(void);
    size_t block_bytes; /* _dl_get_tls_static_info: static TLS and TCB, one block */
    size_t block_align, tcb_bytes, tcb_room, stride;
    size_t pre;       /* thread pointer - glibc's struct pthread: 0 on x86-64 (TLS variant II), its
                       * size and the TCB header's below the pointer on aarch64 and riscv64 (variant I) */
    size_t extra_off; /* weft__tls_extra: the user's bytes, from the thread pointer */
    /* the slab blocks are carved from ("The blocks' memory") */
    char *slab;     /* the next block's start */
    char *slab_end; /* its slab's end */
    char *pop_end;  /* populated up to here */
    size_t pop_step; /* POP_FIRST..POP_SMALL in the first slab, POP_BYTES after */
    const struct key_struct *keys;
    /* (from the thread pointer, so negative under variant I, where the
     * descriptor lies below it; glibc's _thread_db_ offsets are from the
     * descriptor's start) */
    ptrdiff_t off_tid, off_specific, off_robust, off_rseq, off_list, off_cancel;
    intptr_t robust_futex_offset;
    int have_robust; /* the kernel keeps robust lists (off_robust, robust_futex_offset are known) */
    int have_rseq;
    int keys_fast; /* specific_1stblock lies right below specific[] (holds_keys) */
    /* the pool */
    pthread_mutex_t lock;
    void **free;
    size_t nfree, cap;
    _Atomic size_t made;
} T = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static inline char *tp_self(void) {
    char *tp;
#if defined(__x86_64__)
    __asm__ volatile("mov %%fs:0, %0" : "=r"(tp));
#elif defined(__aarch64__)
    __asm__ volatile("mrs %0, tpidr_el0" : "=r"(tp));
#elif defined(__riscv)
    __asm__ volatile("mv %0, tp" : "=r"(tp));
#endif
    return tp;
}

void *weft__tp_get(void) { return tp_self(); }

void weft__tp_set_syscall(void *tp) {
#if defined(__x86_64__)
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"((long)SYS_arch_prctl), "D"((long)ARCH_SET_FS), "S"(tp)
                     : "rcx", "r11", "memory");
    (void)ret; /* cannot fail for a mapped user address */
#else
    weft__tp_set(tp); /* (a register user code may write: no system call) */
#endif
}

__attribute__((unused)) static const uint32_t *desc(const char *name) { return dlvsym(RTLD_DEFAULT, name, "GLIBC_PRIVATE"); }

__attribute__((unused)) static void refuse(const char *what) {
    fprintf(stderr, "weft: own TLS for vthreads is not available: %s; vthreads asking for it are refused "
                    "(-ENOTSUP)\n", what);
    T.state = -ENOTSUP;
}

static void probe(void) {
#if defined(WEFT_ASAN) || defined(WEFT_TSAN)
    /* (no line: a sanitizer build is told in weft.h and the README) */
    T.state = -ENOTSUP;
    return;
#elif !defined(__x86_64__) && !defined(__aarch64__) && !(defined(__riscv) && __riscv_xlen == 64)
    return refuse("own TLS blocks are laid out for x86-64, aarch64 and riscv64 only");
#else
#if defined(__x86_64__)
    weft__tls_fsgsbase = (getauxval(AT_HWCAP2) & HWCAP2_FSGSBASE) != 0;
#endif
    T.allocate = (void *(*)(void *))dlvsym(RTLD_DEFAULT, "_dl_allocate_tls", "GLIBC_PRIVATE");
    T.deallocate = (void (*)(void *, bool))dlvsym(RTLD_DEFAULT, "_dl_deallocate_tls", "GLIBC_PRIVATE");
    T.ctype_init = (void (*)(void))dlvsym(RTLD_DEFAULT, "__ctype_init", "GLIBC_PRIVATE");
    T.call_tls_dtors = (void (*)(void))dlvsym(RTLD_DEFAULT, "__call_tls_dtors", "GLIBC_PRIVATE");
    T.keys = dlvsym(RTLD_DEFAULT, "__pthread_keys", "GLIBC_PRIVATE");
    void (*static_info)(size_t *, size_t *) =
        (void (*)(size_t *, size_t *))dlvsym(RTLD_DEFAULT, "_dl_get_tls_static_info", "GLIBC_PRIVATE");
    if (static_info) {
        size_t align = 0;
        static_info(&T.block_bytes, &align);
        T.block_align = align < 64 ? 64 : align;
    }
    const uint32_t *tid = desc("_thread_db_pthread_tid"), *spec = desc("_thread_db_pthread_specific");
    const uint32_t *kseq = desc("_thread_db_pthread_key_struct_seq"), *kdes = desc("_thread_db_pthread_key_struct_destr");
    const uint32_t *ksz = desc("_thread_db_sizeof_pthread_key_struct"), *psz = desc("_thread_db_sizeof_pthread");
    const uint32_t *lst = desc("_thread_db_pthread_list"), *can = desc("_thread_db_pthread_cancelhandling");
    if (!T.allocate || !T.deallocate || !T.ctype_init || !T.keys || !tid || !spec || !kseq || !kdes || !ksz || !psz ||
        !lst || !can)
        return refuse("this C library does not export what it needs (_dl_allocate_tls, __pthread_keys, "
                      "the _thread_db_ descriptions: glibc 2.35+)");
    char *tp = tp_self(), *self = (char *)pthread_self();
#if defined(__x86_64__)
    if (self != tp) return refuse("glibc's thread descriptor is not at the thread pointer (TLS variant II)");
#else
    /* variant I: the descriptor (and, on riscv64, the TCB header) below the
     * thread pointer, the static TLS above it */
    if (self >= tp || (size_t)(tp - self) < psz[0] || (size_t)(tp - self) > psz[0] + 64)
        return refuse("glibc's thread descriptor does not end at the thread pointer (TLS variant I)");
#endif
    T.pre = (size_t)(tp - self);
    T.off_tid = (ptrdiff_t)tid[2] - (ptrdiff_t)T.pre;
    T.off_specific = (ptrdiff_t)spec[2] - (ptrdiff_t)T.pre;
    if (tid[0] != 32 || *(int *)(tp + T.off_tid) != (int)syscall(SYS_gettid))
        return refuse("glibc's thread descriptor does not hold the tid where _thread_db_pthread_tid says");
    if (spec[0] != 64 * SPECIFIC_N || kseq[2] != 0 || kdes[2] != sizeof(uintptr_t) || ksz[0] != sizeof(struct key_struct) ||
        spec[2] + 8 * SPECIFIC_N > psz[0])
        return refuse("glibc's pthread key layout is not the one this weft was written for");
    /* the thread list's links: a list_t {next, prev}, linked in a list */
    T.off_list = (ptrdiff_t)lst[2] - (ptrdiff_t)T.pre;
    /* (glibc points a thread's specific[0] at its own 32 slots) */
    T.keys_fast = ((void **)(tp + T.off_specific))[0] == (void *)(tp + T.off_specific - 2 * sizeof(void *) * SPECIFIC_N);
    T.tcb_bytes = psz[0];
    if (!T.block_bytes || (T.block_align & (T.block_align - 1)))
        return refuse("glibc's static TLS size or alignment is not usable");
#if defined(__x86_64__)
    T.tcb_room = (T.tcb_bytes + 63) & ~(size_t)63; /* (the user's bytes after it: weft__tls_extra) */
    T.extra_off = T.tcb_room;
    /* (slabs are 2 MiB-aligned and the stride a multiple of the block's
     * alignment: at 64 bytes, every block's TCB lands aligned with no
     * slack; a larger alignment gets its own worth of slack) */
    T.stride = (T.block_bytes + (T.tcb_room - T.tcb_bytes) + WEFT__TLS_EXTRA + (T.block_align > 64 ? T.block_align : 0) +
                T.block_align - 1) & ~(T.block_align - 1);
    if (T.tcb_bytes > T.block_bytes) return refuse("glibc's static TLS size does not hold its thread descriptor");
#else
    /* [descriptor: pre][TCB at the thread pointer, static TLS: block_bytes]
     * [the user's bytes], the thread pointer aligned as glibc aligns it */
    T.tcb_room = (T.pre + T.block_align - 1) & ~(T.block_align - 1);
    T.extra_off = (T.block_bytes + 63) & ~(size_t)63;
    T.stride = (T.tcb_room + T.extra_off + WEFT__TLS_EXTRA + T.block_align - 1) & ~(T.block_align - 1);
#endif
    T.off_cancel = (ptrdiff_t)can[2] - (ptrdiff_t)T.pre;
    if (can[0] != 32 || can[2] + 4 > psz[0])
        return refuse("glibc's thread descriptor does not hold its cancellation state where "
                      "_thread_db_pthread_cancelhandling says");
    void **ln = (void **)(tp + T.off_list);
    if (lst[0] != 128 || lst[2] + 2 * sizeof(void *) > psz[0] || !ln[0] || ((void **)ln[0])[1] != ln)
        return refuse("glibc's thread descriptor does not hold its list links where _thread_db_pthread_list says");
    void *head = NULL;
    size_t len = 0;
    long rl = syscall(SYS_get_robust_list, 0, &head, &len);
    if (rl != 0 && errno == ENOSYS) {
        /* no robust lists (qemu-user has none): glibc then refuses robust
         * mutexes (ENOTSUP), so nothing reads a block's list head */
        T.have_robust = 0;
    } else if (rl != 0 || !head || (char *)head < self || (size_t)((char *)head - self) + 3 * sizeof(void *) > psz[0]) {
        return refuse("the robust mutex list is not in glibc's thread descriptor");
    } else {
        T.have_robust = 1;
        T.off_robust = (char *)head - tp;
        T.robust_futex_offset = ((intptr_t *)head)[1];
    }
    extern __attribute__((weak)) const ptrdiff_t __rseq_offset;
    extern __attribute__((weak)) const unsigned int __rseq_size;
    if (&__rseq_offset && &__rseq_size && __rseq_size >= 8) {
        T.have_rseq = 1;
        T.off_rseq = __rseq_offset; /* (from the thread pointer: glibc's definition) */
    }
    T.state = 0;
#endif
}

int weft__tls_probe(void) {
    pthread_once(&T.once, probe);
    return T.state;
}

/* Fills in what _dl_allocate_tls leaves to the thread library. */
static void tcb_fill(char *tp) {
#if defined(__x86_64__)
    char *me = tp_self();
    ((void **)tp)[0] = tp; /* tcb */
    ((void **)tp)[2] = tp; /* self */
    memcpy(tp + HDR_COPY_LO, me + HDR_COPY_LO, HDR_COPY_HI - HDR_COPY_LO);
#endif
#if !defined(__x86_64__)
    /* variant I: the TCB header is the DTV pointer, which _dl_allocate_tls
     * set, and a reserved word; the stack-protector canary and pointer
     * guard are globals there, not per-thread copies.  struct pthread
     * starts with its own small header instead, whose first int is
     * multiple_threads -- x86-64 has it in tcbhead_t, copied above --
     * which riscv64's glibc (2.41 here) reads for SINGLE_THREAD_P: left 0,
     * malloc took no arena lock on an own block, and two vthreads on two
     * carriers corrupted the heap.  Copied from the calling thread, as
     * pthread_create does (never gscope_flag, next to it: a thread's own
     * "inside a dl scope" mark). */
    *(int *)(tp - T.pre) = *(const int *)(tp_self() - T.pre);
#endif
    void **ln = (void **)(tp + T.off_list);
    ln[0] = ln[1] = ln; /* list: linked to itself (below, "fork") */
    if (!T.have_robust) return;
    void **rh = (void **)(tp + T.off_robust);
    rh[0] = rh;                              /* list: empty */
    ((intptr_t *)rh)[1] = T.robust_futex_offset; /* futex_offset */
    rh[2] = NULL;                            /* list_op_pending */
}

#define SLAB_BYTES ((size_t)32 << 20) /* a slab's mapping ("The blocks' memory") */
#define POP_BYTES ((size_t)2 << 20)   /* populated at a time: one huge page */
#define POP_SMALL ((size_t)256 << 10) /* ... in the first slab: 4 KiB pages, */
#define POP_FIRST ((size_t)16 << 10)  /* ... growing from this (doubled each time) */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A fresh block's memory (the lock held): the next one of the slab, a
 * new slab when it is used up; populated POP_BYTES at a time.  Returns
 * the thread pointer -- where the TCB starts, aligned as glibc aligns it
 * (nptl's allocate_stack) -- or NULL. */
static char *carve(void) {
    if (!T.slab || T.slab_end - T.slab < (ptrdiff_t)T.stride) {
        /* POP_BYTES-aligned, so that each populated piece can be one huge page */
        char *p = mmap(NULL, SLAB_BYTES + POP_BYTES, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return NULL;
        char *base = (char *)(((uintptr_t)p + POP_BYTES - 1) & ~(uintptr_t)(POP_BYTES - 1));
        if (base > p) munmap(p, (size_t)(base - p));
        if (base + SLAB_BYTES < p + SLAB_BYTES + POP_BYTES)
            munmap(base + SLAB_BYTES, (size_t)(p + SLAB_BYTES + POP_BYTES - (base + SLAB_BYTES)));
        /* the first slab in small pieces: a program with a few threads
         * keeps a few blocks' pages, not a huge page's 2 MiB */
        T.pop_step = T.slab ? POP_BYTES : POP_FIRST;
        if (T.slab) (void)madvise(base, SLAB_BYTES, MADV_HUGEPAGE); /* (refused where THP is off) */
        T.slab = T.pop_end = base;
        T.slab_end = base + SLAB_BYTES;
    }
    char *start = T.slab;
    T.slab += T.stride;
    while (T.slab > T.pop_end) {
        /* (failing, the faults come one by one) */
        (void)madvise(T.pop_end, T.pop_step, MADV_POPULATE_WRITE);
        T.pop_end += T.pop_step;
        if (T.pop_step < POP_SMALL) T.pop_step *= 2; /* (the first slab's) */
    }
#if defined(__x86_64__)
    return (char *)(((uintptr_t)start + T.stride - WEFT__TLS_EXTRA - T.tcb_room) & ~(uintptr_t)(T.block_align - 1));
#else
    return start + T.tcb_room; /* (start is aligned: slabs are, and the stride) */
#endif
}

void *weft__tls_extra(void *tp) { return (char *)tp + T.extra_off; }

void *weft__tls_handle(void *tp) { return (char *)tp - T.pre; }

void *weft__tls_tp_of(void *handle) { return (char *)handle + T.pre; }

void *weft__tls_get(int *reused) {
    pthread_mutex_lock(&T.lock);
    void *tp = T.nfree ? T.free[--T.nfree] : NULL;
    char *mem = tp ? NULL : carve();
    pthread_mutex_unlock(&T.lock);
    if (tp) {
        *reused = 1;
        return tp;
    }
    if (!mem) return NULL;
    /* ld.so lays out the static TLS below mem and gives it a DTV (a small
     * malloc): what nptl's pthread_create does with its stack's top */
    tp = T.allocate(mem);
    if (!tp) return NULL; /* (the block is lost: address space, never touched again) */
    tcb_fill(tp);
    atomic_fetch_add_explicit(&T.made, 1, memory_order_relaxed);
    *reused = 0;
    return tp;
}

void weft__tls_put(void *tp) {
    pthread_mutex_lock(&T.lock);
    if (T.nfree == T.cap) {
        size_t cap = T.cap ? T.cap * 2 : 64;
        void **f = realloc(T.free, cap * sizeof *f);
        if (!f) { /* cannot keep it: free it (its malloc cache is lost) */
            pthread_mutex_unlock(&T.lock);
            for (int i = 1; i < SPECIFIC_N; i++) free(((void **)((char *)tp + T.off_specific))[i]);
            T.deallocate(tp, false); /* (its DTV; the block is the slab's) */
            atomic_fetch_sub_explicit(&T.made, 1, memory_order_relaxed);
            return;
        }
        T.free = f;
        T.cap = cap;
    }
    T.free[T.nfree++] = tp;
    pthread_mutex_unlock(&T.lock);
}

int weft__tls_tid(void) {
    /* (the probe's offset; a sanitizer build, or a C library the probe
     * refused, has no own TLS: the kernel's tid is the thread's there) */
    if (weft__tls_probe() == 0) return *(const int *)(tp_self() + T.off_tid);
    return (int)syscall(SYS_gettid);
}

int weft__tls_tid_of(const void *tp) { return weft__tls_probe() == 0 ? *(const int *)((const char *)tp + T.off_tid) : -1; }

int weft__tls_tid_is_ours(long tid) { return tid >= (long)TID_BASE && tid < (long)TID_BASE + (long)TID_SPAN; }

int weft__tls_cancel_enabled(const void *tp) {
    return !(__atomic_load_n((const int *)((const char *)tp + T.off_cancel), __ATOMIC_RELAXED) & 1);
}

size_t weft__tls_blocks(void) { return atomic_load_explicit(&T.made, memory_order_relaxed); }

size_t weft__tls_block_bytes(void) { return T.state == 0 ? T.block_bytes + T.pre : 0; }

/* ---- on the vthread, on its own block ------------------------------------- */

struct reinit {
    const char *errno_at; /* libc's block holds errno: it is kept */
};

static int reinit_module(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    const struct reinit *ri = arg;
    char *data = info->dlpi_tls_data; /* this thread's block of the module, if it has one */
    if (!info->dlpi_tls_modid || !data) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_TLS) continue;
        if (ri->errno_at >= data && ri->errno_at < data + ph->p_memsz) return 0; /* libc's */
        memcpy(data, (const char *)(info->dlpi_addr + ph->p_vaddr), ph->p_filesz);
        memset(data + ph->p_filesz, 0, ph->p_memsz - ph->p_filesz);
    }
    return 0;
}

void weft__tls_start(uint64_t id, int reused) {
    char *tp = tp_self();
    *(int *)(tp + T.off_tid) = (int)(TID_BASE + (uint32_t)(id % TID_SPAN));
    if (T.have_rseq) ((int32_t *)(tp + T.off_rseq))[1] = -1; /* cpu_id: not registered */
    /* cancellation enabled, deferred, not cancelled -- a block whose last
     * thread left by pthread_exit or a cancellation has EXITING set */
    __atomic_store_n((int *)(tp + T.off_cancel), 0, __ATOMIC_RELAXED);
    if (reused) {
        struct reinit ri = {.errno_at = (const char *)&errno};
        dl_iterate_phdr(reinit_module, &ri);
        errno = 0;
    } else {
        T.ctype_init();
    }
}

/* Whether the calling thread holds a value for any key: its own 32 slots
 * in the descriptor (specific_1stblock, right below specific[]) and the
 * second-level arrays specific[1..] points at (where the probe found
 * that layout; elsewhere, say yes). */
static int holds_keys(void) {
    if (!T.keys_fast) return 1;
    const char *tp = tp_self();
    const struct key_data {
        uintptr_t seq;
        void *data;
    } *blk = (const struct key_data *)(tp + T.off_specific) - SPECIFIC_N;
    for (int i = 0;;) {
        if (blk)
            for (int j = 0; j < SPECIFIC_N; j++)
                if (blk[j].data) return 1;
        if (++i == SPECIFIC_N) return 0;
        blk = ((const struct key_data *const *)(tp + T.off_specific))[i];
    }
}

static void tls_end_keys(void) {
    for (int round = 0; round < KEY_ROUNDS; round++) {
        int called = 0;
        for (unsigned k = 0; k < KEYS_MAX; k++) {
            uintptr_t seq = __atomic_load_n(&T.keys[k].seq, __ATOMIC_ACQUIRE);
            void (*d)(void *) = T.keys[k].destr;
            if (!(seq & 1) || !d) continue;
            void *v = pthread_getspecific(k);
            if (!v) continue;
            pthread_setspecific(k, NULL);
            d(v);
            called = 1;
        }
        if (!called) break;
    }
    /* what is left (keys without a destructor, or past the rounds) is not
     * the next vthread's */
    for (unsigned k = 0; k < KEYS_MAX; k++)
        if ((__atomic_load_n(&T.keys[k].seq, __ATOMIC_ACQUIRE) & 1) && pthread_getspecific(k)) pthread_setspecific(k, NULL);
}

void weft__tls_end(void) {
    if (T.call_tls_dtors) T.call_tls_dtors();
    if (holds_keys()) tls_end_keys();
    uselocale(LC_GLOBAL_LOCALE);
}

/* ---- fork ------------------------------------------------------------------ */

void weft__tls_fork_prepare(void) { pthread_mutex_lock(&T.lock); }
void weft__tls_fork_parent(void) { pthread_mutex_unlock(&T.lock); }
void weft__tls_fork_child(void) { pthread_mutex_init(&T.lock, NULL); }
