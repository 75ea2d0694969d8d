/*
 * Stacks for vthreads.
 *
 * What: every vthread runs on a stack slot carved from a large anonymous
 * mapping (a slab of 256 slots).  A slot is [guard page][usable stack], and
 * the top WEFT__STACK_TOP bytes of the usable part hold the vthread's
 * descriptor, so a vthread that has used a little stack costs exactly one
 * resident page: the one its stack starts on.
 *
 * Why this way (this VM: a first-touch page fault costs up to ~21 us, a
 * syscall ~1.1 us, MADV_POPULATE_WRITE ~0.6-2 us a page):
 *  - Slots are carved in batches of 64: one process_madvise(2) call installs
 *    the 64 guards (MADV_GUARD_INSTALL, Linux >= 6.13: guard markers in the
 *    page tables, no extra VMA) and one more populates the 64 top pages
 *    (MADV_POPULATE_WRITE), instead of 128 syscalls or 64 page faults.
 *    The first batches are smaller (8, 8, 16, 32, then 64: as many as were
 *    carved before), so that a program with a handful of threads -- most
 *    programs under weft-run -- does not hold 64 populated top pages.
 *  - Freed stacks are reused with their pages: a per-carrier cache (an
 *    array, no lock) in front of a global depot (an array under one mutex,
 *    moved in batches of up to 64).  Caching a stack never touches its
 *    memory.  Nothing is unmapped before weft__stacks_fini.
 *  - Memory is returned above a high-water mark: when the depot holds more
 *    than DEPOT_HOT stacks, idle carriers zap the surplus (MADV_DONTNEED,
 *    64 at a time, down to DEPOT_HOT / 2) and keep them as "cold" slots whose
 *    address space is reused later (their top page is populated again when
 *    handed out).  Zapping is kept off the exit/join path: its syscalls and
 *    TLB shootdowns would slow exactly the bursts that freed the stacks.
 *    Idle carriers that carve ahead during a spawn burst (weft__stacks_
 *    refill) stop at an eighth of the default stacks in use -- at least
 *    two batches (or half of those in use, if fewer), at most DEPOT_HOT --
 *    counting the batches in flight, and
 *    revive cold slots before carving new ones, so the slots carved stay
 *    within live + DEPOT_HOT + a batch + the carriers' caches whatever the
 *    number of spawns (scope.open_scope_*_bounded checks it).  Each slot
 *    carved ahead holds its populated top page: a flat DEPOT_HOT ahead
 *    left 1,000 sleeping Python threads under weft-run with 3,096 unused
 *    stacks, 12 KiB of RSS a thread on top of their own 18 KiB (native
 *    threads: 17.7 KiB); in proportion, a burst of a million still has
 *    DEPOT_HOT carved ahead of it once 32,768 are running.
 *  - After an idle period (no stack taken from or given back to the depot
 *    for TRIM_IDLE_NS) the high-water mark drops: idle carriers move what
 *    their cache holds beyond CACHE_KEEP to the depot, zap the depot down to
 *    DEPOT_IDLE stacks (to the cold list, as above), and return everything
 *    below the top page of those left (MADV_DONTNEED, 64 stacks a call),
 *    keeping the page with the descriptor.  The depot's bottom `nshallow`
 *    entries are those already trimmed (takes and puts work at the top, so
 *    they stay a prefix).  A burst after the lull pays the page faults
 *    again; a server that once had 10,000 connections no longer keeps
 *    their stacks' ~8-30 KiB each for good.  A lull is 10 s: at 1 s, a
 *    server whose load came in bursts a second or two apart (ab runs,
 *    cron-like clients) paid a page fault per request in every burst --
 *    http-db at C = 1000 measured ~3,000 faults per 3,000 requests and 1 %
 *    less throughput than the platform pool, which never gives its
 *    threads' stacks back.  Go keeps freed stack spans until a GC (at
 *    least every 2 minutes) and its scavenger returns memory gradually;
 *    10 s still gives a one-off spike's memory back soon.
 *    $WEFT_STACK_IDLE_MS sets it (README, "Environment").
 *  - Guards: MADV_GUARD_INSTALL where the kernel has it.  Elsewhere an
 *    mprotect(PROT_NONE) guard costs a VMA of its own, and vm.max_map_count
 *    would cap the process near 32k stacks, so mprotect guards are used while
 *    a VMA budget lasts, then slots go unguarded with a canary at their
 *    bottom, checked at every switch (one notice on stderr).
 *  - Stacks of a non-default size get a mapping of their own and are kept
 *    on a list for reuse by size (never unmapped before fini either).
 *  - Neighbouring slots put their head at different offsets within the top
 *    page (head_of's colour), against 4K aliasing between two vthreads.
 *
 * Threads: the caches are owned by one carrier each; the depot, the slab
 * list and the cold list are under `lock`.  weft__stacks_walk reads slabs
 * under the lock and slot contents racily (thread dump).
 *
 * ASan: a stack is clean (unpoisoned) whenever it is free, and so is the
 * shadow of a slab when fini unmaps it.  A vthread's frames poison their
 * redzones on entry and unpoison them on return, so what a vthread leaves
 * poisoned is exactly its frames still live at its last switch: [its
 * saved sp, top), a few hundred bytes.  The scheduler unpoisons that as a
 * vthread ends (weft__stack_done) and, at shutdown, for the daemons it
 * abandons, before fini.  That matters: ASan neither clears the shadow of
 * a new mapping nor of an unmapped one (libasan 12: a remap at the same
 * address reads poisoned), so a slab mapped where an earlier one was
 * would inherit its poison.  Unpoisoning instead the whole stack at every
 * spawn -- 1 MiB under sanitizers, a 128 KiB memset of shadow that also
 * makes it resident -- cost 20-30 us a spawn on a reused stack, and 1.3 GB
 * of shadow for 10k fresh ones; whole slabs at map and unmap time, 32 MiB
 * of memset each.
 *
 * Fork: a child forgets the parent's stacks (weft__stacks_fork_child) but
 * leaves them mapped: a vthread that called fork() goes on in the child on
 * its own stack (as a platform thread), and a pre-fork handle can still be
 * read and refused.  Copy-on-write: they cost the child nothing it does
 * not touch.
 *
 * Invariants: a slot's seq_base is unique over the process's life (taken
 * from a global counter when its top page is (re)populated), so park tokens
 * from a dead vthread never match a new one in the same slot.
 */
#define _GNU_SOURCE
#include "arch.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define WEFT_VALGRIND 1
#endif
#endif

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define PAGE 4096u
#define SLAB_SLOTS 256u
#define CARVE_BATCH 64u
#define CARVE_FIRST 8u   /* the first batches: they grow with the slots carved (carve_batch) */
#define CACHE_BATCH 64u
#define DEPOT_HOT 4096u
#define CACHE_KEEP 64u               /* a carrier's cache keeps these whole through a lull */
#define DEPOT_IDLE 512u              /* ... and the depot these, less their deep pages */
#define TRIM_IDLE_NS 10000000000LL   /* a lull: the depot untouched this long ($WEFT_STACK_IDLE_MS) */
#define REFILL_SHIFT 3              /* idle carriers carve up to in-use >> this ahead ... */
#define REFILL_MAX DEPOT_HOT        /* ... and never more than this */
#define REFILL_WINDOW_NS 20000000   /* ... while spawns ran dry twice in 20 ms */
#define IOV_MAX_BATCH 1024u
/* The largest stack: a slab of SLAB_SLOTS of them (plus guards) must not
 * overflow size_t, and no address space holds more anyway (x86-64 gives a
 * process 128 TiB); a larger size is -ENOMEM, not a size that wrapped to a
 * small one. */
#define STACK_MAX ((size_t)1 << 40)

typedef struct slab {
    char *base;
    size_t slot_size; /* guard page + usable */
    uint32_t nslots;
    uint32_t carved;
    uint32_t guard;   /* mode used for the slots carved so far */
    unsigned *vg_ids; /* valgrind stack ids, per slot */
    uint8_t *coldmap; /* 1 = slot zapped (cold) */
    struct slab *next;
} slab;

static struct {
    pthread_mutex_t lock;
    size_t default_size;  /* usable bytes of a default slot */
    int guard_mode;
    int pidfd;            /* for process_madvise; -1 if unavailable */
    long vma_budget;      /* mprotect guards left */
    int canary_noticed;
    slab *slabs;          /* newest first */
    slab *cur;            /* default-size slab being carved */
    weft__stack **depot;  /* hot free stacks of the default size (an array) */
    uint32_t ndepot, capdepot;
    uint32_t nshallow;    /* depot[0, nshallow): deep pages already returned */
    uint32_t refilling;   /* slots being carved by weft__stacks_refill, bound for the depot */
    uint32_t ncarved;     /* default slots carved, in use or not (cold and depot ones too) */
    weft__stack *odd;     /* free stacks of other sizes */
    struct cold { weft__stack *s; slab *sl; uint8_t guard; } *cold; /* zapped slots */
    size_t ncold, capcold;
    int64_t trim_idle_ns; /* TRIM_IDLE_NS, or $WEFT_STACK_IDLE_MS */
    _Atomic uint64_t seq_counter;
    _Atomic uint32_t ndepot_hint; /* ndepot, readable without the lock */
    _Atomic uint32_t nshallow_hint;
    _Atomic int64_t last_active;  /* a spawn or exit last used the depot (coarse clock) */
    _Atomic int64_t last_demand;  /* when a spawn last found no stack made */
    _Atomic int64_t prev_demand;  /* ... and the time before that */
    uint64_t bytes_total;
    int inited;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER, .pidfd = -1};

static size_t round_page(size_t n) { return (n + PAGE - 1) & ~(size_t)(PAGE - 1); }

/* Nanoseconds on a monotonic clock (CLOCK_MONOTONIC, weft_now's, or its
 * coarse twin: cheaper, up to a tick behind). */
static int64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* madvise over many ranges: process_madvise where the kernel allows it for
 * the calling process (Linux >= 6.13 for any advice), else one call each. */
static int madvise_many(struct iovec *iov, size_t n, int advice) {
    size_t done = 0;
    if (S.pidfd >= 0) {
        while (done < n) {
            size_t k = n - done > IOV_MAX_BATCH ? IOV_MAX_BATCH : n - done;
            long r = syscall(SYS_process_madvise, S.pidfd, iov + done, k, advice, 0);
            if (r < 0) break;
            /* r is bytes advised; all-or-error in practice */
            done += k;
        }
        if (done == n) return 0;
    }
    for (; done < n; done++)
        if (madvise(iov[done].iov_base, iov[done].iov_len, advice) != 0) return -errno;
    return 0;
}

static int probe_guard_install(void) {
    char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    int ok = madvise(p, PAGE, MADV_GUARD_INSTALL) == 0;
    munmap(p, 2 * PAGE);
    return ok;
}

static int probe_process_madvise(void) {
#ifdef WEFT_VALGRIND
    if (RUNNING_ON_VALGRIND) return -1; /* valgrind 3.19 knows neither syscall */
#endif
#ifdef SYS_pidfd_open
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    if (fd < 0) return -1;
    char *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { close(fd); return -1; }
    struct iovec v = {p, PAGE};
    long r = syscall(SYS_process_madvise, fd, &v, 1, MADV_POPULATE_WRITE, 0);
    munmap(p, PAGE);
    if (r < 0) { close(fd); return -1; }
    return fd;
#else
    return -1;
#endif
}

static long count_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 1000;
    long n = 0;
    int c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static long max_map_count(void) {
    FILE *f = fopen("/proc/sys/vm/max_map_count", "r");
    long v = 65530;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1) v = 65530;
        fclose(f);
    }
    return v;
}

int weft__stacks_init(size_t default_size) {
    pthread_mutex_lock(&S.lock);
    if (S.inited) { pthread_mutex_unlock(&S.lock); return 0; }
    if (default_size > STACK_MAX) { pthread_mutex_unlock(&S.lock); return -ENOMEM; }
    size_t sz = round_page(default_size < 16 * PAGE ? 16 * PAGE : default_size);
    const char *g = getenv("WEFT_STACK_GUARD");
    long lull_ms = TRIM_IDLE_NS / 1000000;
    int bad_guard = g && *g && strcmp(g, "default") != 0 && strcmp(g, "mprotect") != 0 && strcmp(g, "canary") != 0;
    if (bad_guard) fprintf(stderr, "weft: WEFT_STACK_GUARD=%s is not default, mprotect or canary\n", g);
    if (bad_guard ||
        weft__env_long("WEFT_STACK_IDLE_MS", 0, LONG_MAX / 1000000, "a lull in ms (0 or more)", &lull_ms) < 0) {
        pthread_mutex_unlock(&S.lock);
        return -EINVAL;
    }
    S.default_size = sz;
    if (g && strcmp(g, "mprotect") == 0) S.guard_mode = WEFT__GUARD_MPROTECT;
    else if (g && strcmp(g, "canary") == 0) S.guard_mode = WEFT__GUARD_CANARY;
    else if (probe_guard_install()) S.guard_mode = WEFT__GUARD_MADVISE;
    else S.guard_mode = WEFT__GUARD_MPROTECT;
    if (S.guard_mode == WEFT__GUARD_MPROTECT) {
        /* Leave room for the rest of the program: a quarter of the limit,
         * and at least 4096 maps, stay free. */
        long maxm = max_map_count(), used = count_maps();
        long reserve = maxm / 4 > 4096 ? maxm / 4 : 4096;
        const char *b = getenv("WEFT_STACK_VMA_BUDGET"); /* tests */
        S.vma_budget = b ? atol(b) : (maxm - used - reserve) / 2;
        if (S.vma_budget < 0) S.vma_budget = 0;
    }
    S.trim_idle_ns = (int64_t)lull_ms * 1000000;
    S.pidfd = weft__fd_own(probe_process_madvise());
    S.inited = 1;
    pthread_mutex_unlock(&S.lock);
    return 0;
}

int weft__stacks_guard_mode(void) { return S.guard_mode; }

static void init_head(weft__stack *s, char *lo, size_t size, int guard, int odd) {
    s->lo = lo;
    s->size = size;
    s->next = NULL;
    s->seq_base = atomic_fetch_add_explicit(&S.seq_counter, 1, memory_order_relaxed) << 32;
    s->guard = (uint8_t)guard;
    s->odd = (uint8_t)odd;
    if (guard == WEFT__GUARD_CANARY) *(volatile uint64_t *)lo = WEFT__CANARY;
}

/*
 * The head (and the descriptor after it) sits WEFT__STACK_TOP bytes below
 * the slot's top, lowered by a per-slot "colour": 0, 768, 1536 or 2304
 * bytes.  The stack starts right below the descriptor, so two vthreads
 * switching on one carrier -- one storing its registers, the other loading
 * its own a few cycles later -- touch different offsets within their pages
 * whenever their colours differ (always for neighbouring slots); at the same
 * offsets the loads stall on 4K store-to-load aliasing, which made a yield
 * cost 13 ns instead of 8.  The steps leave 1.2 KiB of the top page below
 * the lowest descriptor for frames: a parked vthread's park path takes
 * about 430 bytes, so a shallow vthread still costs one resident page.
 */
#define COLOURS 4
#define COLOUR_STEP 768
static weft__stack *head_of(char *slot, size_t slot_size) {
    size_t colour = (((uintptr_t)slot / slot_size) % COLOURS) * COLOUR_STEP;
    return (weft__stack *)(slot + slot_size - WEFT__STACK_TOP - colour);
}

/* Decide the guard for the next n slots (lock held). */
static int next_guard(uint32_t n) {
    if (S.guard_mode != WEFT__GUARD_MPROTECT) return S.guard_mode;
    if (S.vma_budget >= (long)n) { S.vma_budget -= n; return WEFT__GUARD_MPROTECT; }
    if (!S.canary_noticed) {
        S.canary_noticed = 1;
        fprintf(stderr, "weft: notice: VMA budget for mprotect stack guards used up "
                        "(vm.max_map_count %ld); further stacks are unguarded and "
                        "checked by a canary at every switch\n", max_map_count());
    }
    return WEFT__GUARD_CANARY;
}

/* Guards and populates `n` slots starting at slot index `first` of sl,
 * whose slots were reserved by the caller, into out[].  Returns 0 or -1. */
static int carve(slab *sl, uint32_t first, uint32_t n, int guard, weft__stack **out) {
    struct iovec iov[CARVE_BATCH];
    size_t usable = sl->slot_size - PAGE;
    for (uint32_t i = 0; i < n; i++) {
        iov[i].iov_base = sl->base + (size_t)(first + i) * sl->slot_size;
        iov[i].iov_len = PAGE;
    }
    if (guard == WEFT__GUARD_MADVISE) {
        if (madvise_many(iov, n, MADV_GUARD_INSTALL) != 0) return -1;
    } else if (guard == WEFT__GUARD_MPROTECT) {
        for (uint32_t i = 0; i < n; i++)
            if (mprotect(iov[i].iov_base, PAGE, PROT_NONE) != 0) return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        iov[i].iov_base = (char *)iov[i].iov_base + sl->slot_size - PAGE;
    (void)madvise_many(iov, n, MADV_POPULATE_WRITE); /* best effort: faults otherwise */
    for (uint32_t i = 0; i < n; i++) {
        char *slot = sl->base + (size_t)(first + i) * sl->slot_size;
        weft__stack *s = head_of(slot, sl->slot_size);
        init_head(s, slot + PAGE, usable, guard, 0);
        s->slab = sl;
#ifdef WEFT_VALGRIND
        sl->vg_ids[first + i] = VALGRIND_STACK_REGISTER(slot + PAGE, slot + sl->slot_size);
#endif
        out[i] = s;
    }
    return 0;
}

static slab *new_slab(size_t slot_size, uint32_t nslots) {
    slab *sl = calloc(1, sizeof *sl);
    if (!sl) return NULL;
    size_t len = slot_size * nslots;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (p == MAP_FAILED) { free(sl); return NULL; }
#ifdef WEFT_VALGRIND
    sl->vg_ids = calloc(nslots, sizeof *sl->vg_ids);
#endif
    sl->coldmap = calloc(nslots, 1);
    if (!sl->coldmap) { munmap(p, len); free(sl); return NULL; }
    sl->base = p;
    sl->slot_size = slot_size;
    sl->nslots = nslots;
    sl->next = S.slabs;
    S.slabs = sl;
    S.bytes_total += len;
    return sl;
}

/* Re-populates up to n cold slots into out[] (lock held); returns how many. */
static uint32_t revive_cold(uint32_t n, weft__stack **out) {
    struct iovec iov[CARVE_BATCH];
    if (n > CARVE_BATCH) n = CARVE_BATCH;
    if (n > S.ncold) n = (uint32_t)S.ncold;
    for (uint32_t i = 0; i < n; i++) {
        weft__stack *s = S.cold[S.ncold - 1 - i].s;
        iov[i].iov_base = (void *)((uintptr_t)s & ~(uintptr_t)(PAGE - 1)); /* its top page */
        iov[i].iov_len = PAGE;
    }
    (void)madvise_many(iov, n, MADV_POPULATE_WRITE);
    size_t usable = S.default_size;
    for (uint32_t i = 0; i < n; i++) {
        struct cold c = S.cold[--S.ncold];
        weft__stack *s = c.s;
        char *slot = c.sl->base + (size_t)((char *)s - c.sl->base) / c.sl->slot_size * c.sl->slot_size;
        /* an mprotect or madvise guard stays in place across MADV_DONTNEED;
         * a canary slot gets its canary back in init_head */
        init_head(s, slot + PAGE, usable, c.guard, 0);
        s->slab = c.sl;
        c.sl->coldmap[((char *)s - c.sl->base) / c.sl->slot_size] = 0;
        out[i] = s;
    }
    return n;
}

/* Takes up to `want` default stacks from the depot (newest first) or the
 * cold list into out[] (lock held); returns how many. */
static void shallow_clamp(void) {
    if (S.nshallow > S.ndepot) S.nshallow = S.ndepot;
    atomic_store_explicit(&S.nshallow_hint, S.nshallow, memory_order_relaxed);
}

static uint32_t depot_take(uint32_t want, weft__stack **out) {
    uint32_t n = want < S.ndepot ? want : S.ndepot;
    if (n) {
        S.ndepot -= n;
        memcpy(out, S.depot + S.ndepot, n * sizeof *out);
        shallow_clamp();
        return n;
    }
    return S.ncold ? revive_cold(want, out) : 0;
}

/* Carves a batch of fresh default slots into out[] (room for CARVE_BATCH).
 * The lock covers only the reservation: the guard and populate syscalls --
 * the expensive part -- run outside it, so several carriers can carve at
 * once.  Returns how many (0: no memory or address space). */
static uint32_t carve_batch(weft__stack **out) {
    pthread_mutex_lock(&S.lock);
    slab *sl = S.cur;
    if (!sl || sl->carved == sl->nslots) {
        sl = new_slab(S.default_size + PAGE, SLAB_SLOTS);
        if (!sl) {
            pthread_mutex_unlock(&S.lock);
            return 0;
        }
        S.cur = sl;
    }
    uint32_t first = sl->carved, k = sl->nslots - sl->carved;
    /* as many as carved so far, from CARVE_FIRST up to CARVE_BATCH: a
     * program with a few threads keeps a few populated top pages, not 64
     * (256 KiB), and a spawn burst reaches full batches after 4 */
    uint32_t grow = S.ncarved < CARVE_FIRST ? CARVE_FIRST : S.ncarved;
    if (k > grow) k = grow;
    if (k > CARVE_BATCH) k = CARVE_BATCH;
    sl->carved += k; /* reserved; the dump reads not-yet-made heads as free */
    S.ncarved += k;
    int guard = next_guard(k);
    pthread_mutex_unlock(&S.lock);
    return carve(sl, first, k, guard, out) == 0 ? k : 0;
}

/* Appends n stacks to the depot (lock held).  Returns 0 or -1 (no memory
 * to grow it: the caller keeps them). */
static int depot_put(weft__stack **in, uint32_t n) {
    if (S.ndepot + n > S.capdepot) {
        size_t cap = S.capdepot ? S.capdepot * 2 : 4096;
        while (cap < S.ndepot + n) cap *= 2;
        weft__stack **d = realloc(S.depot, cap * sizeof *d);
        if (!d) return -1;
        S.depot = d;
        S.capdepot = cap;
    }
    memcpy(S.depot + S.ndepot, in, n * sizeof *in);
    S.ndepot += n;
    atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
    return 0;
}

static void zap_surplus(uint32_t floor);

int weft__stacks_trim(void) {
    if (!S.inited || atomic_load_explicit(&S.ndepot_hint, memory_order_relaxed) <= DEPOT_HOT) return 0;
    pthread_mutex_lock(&S.lock);
    int did = 0;
    if (S.ndepot > DEPOT_HOT) {
        zap_surplus(DEPOT_HOT / 2);
        did = 1;
    }
    atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
    pthread_mutex_unlock(&S.lock);
    return did;
}

/* How many stacks the depot may hold carved ahead (lock held): an eighth
 * of the default stacks in use (those carved, less the depot's, the cold
 * ones and a refill's in flight -- the carriers' caches count as in use),
 * at least two batches or half of those in use (whichever is fewer; no
 * fewer than CARVE_FIRST), at most REFILL_MAX. */
static uint32_t refill_target(void) {
    size_t idle = (size_t)S.ndepot + S.ncold + S.refilling;
    size_t used = S.ncarved > idle ? S.ncarved - idle : 0;
    size_t t = used >> REFILL_SHIFT;
    /* the floor: two batches, but no more than half of those in use (a
     * program with 20 threads had 128 slots carved ahead, 512 KiB) */
    size_t floor = used / 2 < 2 * CARVE_BATCH ? used / 2 : 2 * CARVE_BATCH;
    if (floor < CARVE_FIRST) floor = CARVE_FIRST;
    if (t < floor) t = floor;
    return t > REFILL_MAX ? REFILL_MAX : (uint32_t)t;
}

int weft__stacks_refill(void) {
    if (!S.inited || atomic_load_explicit(&S.ndepot_hint, memory_order_relaxed) >= REFILL_MAX) return 0;
    int64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
    /* a burst: spawns ran dry twice within the window, the last time recently */
    if (now - atomic_load_explicit(&S.prev_demand, memory_order_relaxed) > REFILL_WINDOW_NS) return 0;
    weft__stack *made[CARVE_BATCH];
    uint32_t got;
    int r;
    pthread_mutex_lock(&S.lock);
    /* the target counts the batches other carriers are carving: several
     * idle carriers refilling at once must not carry the depot past it
     * (nor past DEPOT_HOT, where trim would zap the surplus) */
    if (S.ndepot + S.refilling + CARVE_BATCH > refill_target()) {
        pthread_mutex_unlock(&S.lock);
        return 0;
    }
    if (S.ncold) {
        /* zapped slots first: carving fresh ones while they wait would
         * grow the address space at each trim-and-refill round (a long
         * spawn-heavy run carved ~1,200 slots more per million tasks) */
        got = revive_cold(CARVE_BATCH, made);
        r = depot_put(made, got);
        pthread_mutex_unlock(&S.lock);
        return r == 0 ? (int)got : 0; /* (on failure they stay carved: walked, unused) */
    }
    S.refilling += CARVE_BATCH;
    pthread_mutex_unlock(&S.lock);
    got = carve_batch(made);
    pthread_mutex_lock(&S.lock);
    S.refilling -= CARVE_BATCH;
    r = got ? depot_put(made, got) : -1;
    pthread_mutex_unlock(&S.lock);
    return r == 0 ? (int)got : 0; /* (on failure the made slots stay carved: walked, unused) */
}

/* Returns the memory of one batch of depot stacks above floor (lock held). */
static void zap_surplus(uint32_t floor) {
    struct iovec iov[CARVE_BATCH];
    {
        uint32_t n = 0;
        if (S.ncold + CARVE_BATCH > S.capcold) {
            size_t cap = S.capcold ? S.capcold * 2 : 1024;
            struct cold *c = realloc(S.cold, cap * sizeof *c);
            if (!c) return; /* keep them hot */
            S.cold = c;
            S.capcold = cap;
        }
        while (n < CARVE_BATCH && S.ndepot > floor) {
            weft__stack *s = S.depot[--S.ndepot];
            slab *sl = s->slab;
            S.cold[S.ncold++] = (struct cold){s, sl, s->guard};
            sl->coldmap[((char *)s - sl->base) / sl->slot_size] = 1;
            iov[n].iov_base = s->lo;
            iov[n].iov_len = (size_t)((char *)s - s->lo) + WEFT__STACK_TOP;
            n++;
        }
        shallow_clamp();
        (void)madvise_many(iov, n, MADV_DONTNEED);
    }
}


int64_t weft__stacks_trim_due(const weft__stack_cache *cache) {
    if (!S.inited) return INT64_MAX;
    if (cache->n <= CACHE_KEEP && atomic_load_explicit(&S.nshallow_hint, memory_order_relaxed) >=
                                      atomic_load_explicit(&S.ndepot_hint, memory_order_relaxed))
        return INT64_MAX;
    return atomic_load_explicit(&S.last_active, memory_order_relaxed) + S.trim_idle_ns;
}

void weft__stacks_cache_flush(weft__stack_cache *cache) {
    if (!S.inited || cache->n == 0) return;
    pthread_mutex_lock(&S.lock);
    if (depot_put(cache->s, cache->n) == 0) cache->n = 0; /* (no memory: they stay here) */
    atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
    pthread_mutex_unlock(&S.lock);
}

int weft__stacks_idle_trim(weft__stack_cache *cache) {
    int64_t due = weft__stacks_trim_due(cache);
    /* the fine clock, the one the carrier slept until `due` by (the coarse
     * one may still read a little earlier) */
    if (due == INT64_MAX || clock_ns(CLOCK_MONOTONIC) < due) return 0;
    pthread_mutex_lock(&S.lock);
    if (cache->n > CACHE_KEEP) {
        /* the oldest go; the newest (most likely still warm) stay */
        uint32_t k = cache->n - CACHE_KEEP;
        if (depot_put(cache->s, k) == 0) {
            memmove(cache->s, cache->s + k, CACHE_KEEP * sizeof *cache->s);
            cache->n = CACHE_KEEP;
        }
    }
    if (S.ndepot > DEPOT_IDLE) { /* beyond what a lull keeps: all of it */
        zap_surplus(DEPOT_IDLE);
        atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
        pthread_mutex_unlock(&S.lock);
        return 1;
    }
    struct iovec iov[CARVE_BATCH];
    uint32_t n = 0;
    while (n < CARVE_BATCH && S.nshallow < S.ndepot) {
        weft__stack *s = S.depot[S.nshallow++];
        /* everything below the top page (a canary slot keeps its bottom
         * page, where the canary is) */
        char *lo = s->lo + (s->guard == WEFT__GUARD_CANARY ? PAGE : 0);
        char *top = (char *)((uintptr_t)s & ~(uintptr_t)(PAGE - 1));
        if (top > lo) {
            iov[n].iov_base = lo;
            iov[n].iov_len = (size_t)(top - lo);
            n++;
        }
    }
    atomic_store_explicit(&S.nshallow_hint, S.nshallow, memory_order_relaxed);
    atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
    if (n) (void)madvise_many(iov, n, MADV_DONTNEED);
    pthread_mutex_unlock(&S.lock);
    return 1;
}

/* ASan: see weft__stack_done in arch.h and "ASan" at the top. */
#ifdef WEFT_ASAN
void weft__stack_done(weft__stack *s, const void *sp) {
    const char *lo = sp, *top = (const char *)s;
    if (lo < s->lo || lo > top) lo = s->lo; /* not a stack pointer of s: all of it */
    __asan_unpoison_memory_region(lo, (size_t)(top - lo));
}
#endif

weft__stack *weft__stack_get(weft__stack_cache *cache, size_t size) {
    if (size > STACK_MAX) return NULL; /* (round_page would wrap it to a small one) */
    size_t want = size ? round_page(size) : S.default_size;
    if (want < 16 * PAGE) want = 16 * PAGE;
    if (want == S.default_size) {
        weft__stack *hit = cache ? weft__stack_get_cached(cache) : NULL;
        if (hit) return hit;
        /* refill: a batch from the depot, or carve one (and let idle
         * carriers help if this keeps happening) */
        weft__stack *got[CARVE_BATCH];
        uint32_t n;
        pthread_mutex_lock(&S.lock);
        n = depot_take(cache ? CACHE_BATCH : 1, got);
        atomic_store_explicit(&S.ndepot_hint, S.ndepot, memory_order_relaxed);
        pthread_mutex_unlock(&S.lock);
        int64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
        atomic_store_explicit(&S.last_active, now, memory_order_relaxed);
        if (!n) {
            atomic_store_explicit(&S.prev_demand, atomic_load_explicit(&S.last_demand, memory_order_relaxed),
                                  memory_order_relaxed);
            atomic_store_explicit(&S.last_demand, now, memory_order_relaxed);
            n = carve_batch(got);
            if (!n) return NULL;
            if (!cache && n > 1) { /* a platform thread keeps one */
                pthread_mutex_lock(&S.lock);
                if (depot_put(got + 1, n - 1) != 0) { /* no memory: they stay carved, unused */ }
                pthread_mutex_unlock(&S.lock);
                n = 1;
            }
        }
        if (!cache) return got[0];
        memcpy(cache->s + cache->n, got, n * sizeof *got);
        cache->n += n;
        return cache->s[--cache->n];
    }
    /* another size: reuse one of that size, or map one for itself */
    pthread_mutex_lock(&S.lock);
    weft__stack **pp = &S.odd;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->size == want) {
            weft__stack *s = *pp;
            *pp = s->next;
            pthread_mutex_unlock(&S.lock);
            s->next = NULL;
            return s;
        }
    slab *sl = new_slab(want + PAGE, 1);
    weft__stack *s = NULL;
    if (sl) {
        int guard = next_guard(1);
        sl->carved = 1;
        if (carve(sl, 0, 1, guard, &s) == 0) s->odd = 1;
        else s = NULL;
    }
    pthread_mutex_unlock(&S.lock);
    return s;
}

void weft__stack_put(weft__stack_cache *cache, weft__stack *s) {
    if (s->odd) {
        pthread_mutex_lock(&S.lock);
        s->next = S.odd;
        S.odd = s;
        pthread_mutex_unlock(&S.lock);
        return;
    }
    if (cache && cache->n < WEFT__STACK_CACHE_CAP) {
        cache->s[cache->n++] = s; /* no touch of s: it may be cold in this cache */
        return;
    }
    atomic_store_explicit(&S.last_active, clock_ns(CLOCK_MONOTONIC_COARSE), memory_order_relaxed);
    pthread_mutex_lock(&S.lock);
    if (cache) {
        /* full: the older half goes to the depot in one locked step */
        uint32_t half = WEFT__STACK_CACHE_CAP / 2;
        if (depot_put(cache->s, half) == 0) {
            memmove(cache->s, cache->s + half, (cache->n - half) * sizeof *cache->s);
            cache->n -= half;
            cache->s[cache->n++] = s;
            pthread_mutex_unlock(&S.lock);
            return;
        }
    }
    if (depot_put(&s, 1) != 0) {
        /* no memory for the depot array: drop the stack's pages at least,
         * its address space stays carved (and unused) until shutdown */
        madvise(s->lo, (size_t)((char *)s - s->lo), MADV_DONTNEED);
    }
    pthread_mutex_unlock(&S.lock);
}

void weft__stacks_fini(void) {
    pthread_mutex_lock(&S.lock);
    for (slab *sl = S.slabs, *nx; sl; sl = nx) {
        nx = sl->next;
#ifdef WEFT_VALGRIND
        for (uint32_t i = 0; i < sl->carved; i++) VALGRIND_STACK_DEREGISTER(sl->vg_ids[i]);
        free(sl->vg_ids);
#endif
        munmap(sl->base, sl->slot_size * sl->nslots);
        free(sl->coldmap);
        free(sl);
    }
    free(S.cold);
    weft__fd_close_own(S.pidfd);
    /* everything but the lock and seq_counter (seqs stay unique across
     * restarts of the runtime) */
    free(S.depot);
    S.slabs = S.cur = NULL;
    S.depot = NULL;
    S.odd = NULL;
    S.ndepot = S.capdepot = 0;
    S.refilling = 0;
    S.ncarved = 0;
    S.nshallow = 0;
    atomic_store(&S.nshallow_hint, 0);
    atomic_store(&S.ndepot_hint, 0);
    S.cold = NULL;
    S.ncold = S.capcold = 0;
    S.bytes_total = 0;
    S.pidfd = -1;
    S.canary_noticed = 0;
    S.inited = 0;
    pthread_mutex_unlock(&S.lock);
}

/* ---- fork ---------------------------------------------------------------- */

static struct kept {
    struct kept *next;
    void *p;
} *kept_head;

void weft__fork_keep(void *p) {
    if (!p) return;
    struct kept *k = malloc(sizeof *k);
    if (!k) return; /* LSan may then report p: nothing worse */
    k->p = p;
    k->next = kept_head;
    kept_head = k;
}

void weft__stacks_fork_prepare(void) { pthread_mutex_lock(&S.lock); }
void weft__stacks_fork_parent(void) { pthread_mutex_unlock(&S.lock); }

void weft__stacks_fork_child(void) {
    /* held by prepare for the forking thread, which is this one: a fresh one */
    S.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (!S.inited) return;
    /* the parent's pidfd: process_madvise with it would advise the parent */
    weft__fd_close_own(S.pidfd);
    S.pidfd = -1;
    /* the slabs stay mapped (a vthread that forked runs on one; a stale
     * handle's descriptor is still readable), their bookkeeping is kept
     * reachable, and nothing of theirs is handed out again */
    weft__fork_keep(S.slabs); /* (a list) */
    weft__fork_keep(S.depot);
    weft__fork_keep(S.cold);
    S.slabs = S.cur = NULL;
    S.depot = NULL;
    S.odd = NULL;
    S.ndepot = S.capdepot = 0;
    S.refilling = 0;
    S.ncarved = 0;
    atomic_store(&S.ndepot_hint, 0);
    S.nshallow = 0;
    atomic_store(&S.nshallow_hint, 0);
    S.cold = NULL;
    S.ncold = S.capcold = 0;
    S.bytes_total = 0;
    S.canary_noticed = 0;
    S.inited = 0;
}

void weft__stacks_walk(void (*fn)(weft__stack *s, void *ctx), void *ctx) {
    pthread_mutex_lock(&S.lock);
    for (slab *sl = S.slabs; sl; sl = sl->next)
        for (uint32_t i = 0; i < sl->carved; i++) {
            char *slot = sl->base + (size_t)i * sl->slot_size;
            /* skip cold (zapped) slots: reading them would fault pages in */
            if (!sl->coldmap[i]) fn(head_of(slot, sl->slot_size), ctx);
        }
    pthread_mutex_unlock(&S.lock);
}

void weft__stacks_counts(uint64_t *slots, uint64_t *bytes) {
    pthread_mutex_lock(&S.lock);
    uint64_t n = 0;
    for (slab *sl = S.slabs; sl; sl = sl->next) n += sl->carved;
    *slots = n;
    *bytes = S.bytes_total;
    pthread_mutex_unlock(&S.lock);
}

int weft__stack_guard_hit(const weft__stack *s, const void *addr) {
    const char *a = addr;
    /* the guard page, or up to 64 KiB below the stack for large frames
     * that jumped over it */
    return a < s->lo && a >= s->lo - 16 * PAGE;
}

size_t weft__stack_resident(const weft__stack *s) {
    size_t len = (size_t)((const char *)s - s->lo) + WEFT__STACK_TOP;
    size_t pages = (len + PAGE - 1) / PAGE;
    unsigned char vec[256];
    size_t res = 0;
    for (size_t off = 0; off < pages; off += sizeof vec) {
        size_t k = pages - off < sizeof vec ? pages - off : sizeof vec;
        if (mincore(s->lo + off * PAGE, k * PAGE, vec) != 0) return 0;
        for (size_t i = 0; i < k; i++) res += vec[i] & 1;
    }
    return res * PAGE;
}
