/*
 * Vthread-local storage (weft_local_*) and scoped values (weft_scoped_*):
 * what C code keeps per request instead of a __thread variable, which a
 * vthread cannot keep across a blocking call (it may resume on another
 * carrier, whose thread-locals are not its own).
 *
 * Keys.  A process-wide table of KEYS_MAX slots, each holding the live key
 * value and its destructor; a key is (generation << 17) | (index << 3) --
 * its index times 8 is its slot's byte offset in a window, below -- so
 * never 0, and a slot that is deleted and made again gives a new value.
 * The generation has 47 bits (a key is 64): a parked vthread may hold an
 * entry under a deleted key for as long as it likes, and only a key equal
 * to that one could bring the entry back to life (its copy-in and its
 * destructor pass compare keys), so a generation must never come round
 * while such an entry may exist.  15 bits (a 32-bit key) came round after
 * 32,767 deletes at one index -- issue 23: a parked holder then read its
 * old value through the new key, whose destructor got it.  47 bits take
 * 1.4e14 deletes at one index, and an index whose generations run out is
 * retired (never reused) rather than wrapped, so the promise holds
 * outright.  The get is unchanged (it masks the key's slot bits), and an
 * entry in a vthread's storage stays 16 bytes: the key holds the index.
 * Creating and deleting take a mutex (rare); freed indices are reused in
 * FIFO order.  As pthread_key_delete, deleting runs no destructor and
 * leaves the values; a deleted key must not be used again (set answers
 * -EINVAL; get reads its index's slot, which is the next key's once the
 * index is reused -- UB in pthread too).
 *
 * Windows: what a get reads.  Each OS thread's weft__tls_window points at
 * an array of KEYS_MAX values, one per index (128 KiB of address space,
 * mapped MAP_NORESERVE: only pages where used keys lie are ever touched;
 * keys are handed out from index 0 up, so a program's few keys share the
 * first page).  A get is that TLS load and one indexed load: no lock, no
 * hash, no bounds check (every index has a slot), no branch -- inlined
 * into the caller (weft/local.h), about the cost of a __thread read.
 *  - A platform thread's window is its storage: a shared all-NULL one
 *    (zero_slots) until its first set of a non-NULL value maps its own.
 *  - A carrier's window holds the values of the vthread it runs: the
 *    scheduler copies them in as the vthread's code starts to run
 *    (gate_out, weft__locals_enter) and clears them as it stops (gate_in,
 *    weft__locals_leave); a vthread that set nothing costs the switch one
 *    load and a not-taken branch each way.
 * A vthread's own storage is a small array of (index, key, value) entries,
 * allocated by its first set of a non-NULL value and grown by doubling --
 * a million vthreads that set nothing cost nothing, one that sets one key
 * costs 80 bytes (room for 4) -- and hangs off its descriptor (weft_thread.locals), so
 * it follows the vthread from carrier to carrier.  Only the vthread
 * touches it.  A set writes the entry and the window slot.
 *
 * Deleted keys and windows.  A carrier copies in only entries whose key is
 * still the live key of their index (a parked vthread may hold entries of
 * keys deleted since): every delete bumps key_epoch, and a copy-in that
 * finds its storage checked at an older epoch drops the dead entries
 * first (purge), so the common copy-in is a store per entry and looks at
 * no key.  weft_local_key_delete clears the index's slot in
 * every window (all are on a list, W), so that once it returns no window
 * holds a value under the index and the next key made there reads NULL
 * everywhere.  A copy-in that read the key as live just before the delete
 * could write the slot after a clear: each copy-in makes its window's
 * `copying` count odd before it reads the keys and even when done; the
 * deleter stores the key's deletion and the new epoch, runs membarrier(2) (a full barrier on
 * every CPU running us: the asymmetric Dekker of sched.c's yield FIFO),
 * then clears each window's slot once the copy-in it finds there (an odd
 * count) is over -- any copy-in begun after the barrier sees the new
 * epoch, and the key deleted.  Without membarrier (or under TSan, which does not model it)
 * both sides use sequentially consistent atomics instead.
 *
 * This replaced a first design (issue 14's first session) in which a get
 * read the carrier's TLS pointer, its current vthread, the vthread's array,
 * its bounds and the slot's key: 5.2x a __thread read on one machine,
 * 2.2-3.1x on another, where the issue asks <= 2x.  A get that reads a
 * per-thread pointer and checks a slot (bounds and key) measured 2.0-2.3x
 * at best (weft-bench micro --only local, aligned loops): the checks, not
 * the loads, were the cost, and the window has none.  Its price is paid
 * by vthreads that use locals: a copy in and a clear per entry per switch.
 *
 * Destructors (pthread's rule).  When a vthread's function returns, still
 * on the vthread (they may block) and before any weft_join of it returns,
 * every non-NULL value whose key is live with a destructor is taken out
 * (its entry and slot set to NULL) and the destructor called with it; if
 * destructors set values again the pass repeats, up to DTOR_ROUNDS passes
 * (PTHREAD_DESTRUCTOR_ITERATIONS); what is left after that is dropped.
 * Then the storage is freed.  A platform thread's run the same way over
 * its window at its exit, from a pthread key destructor, and its window is
 * unmapped.  A daemon vthread still running at weft_shutdown is abandoned:
 * its storage is freed, its destructors do not run (it never returned: its
 * values may be in use on its stack).
 *
 * Scoped values (JEP 506).  weft_scoped_run pushes a frame (sched.h,
 * weft__sframe) on its caller's stack: the bindings (copied, duplicates
 * dropped, the last one winning), the frame that was innermost, and how
 * many distinct keys the chain binds.  The thread's innermost frame is a
 * pointer (weft_thread.scoped, or a __thread one on a platform thread);
 * fn's return pops it.  A get walks the chain from the innermost frame,
 * comparing key addresses: the first binding of a frame is inline, so a
 * binding three levels up costs four dependent loads after the thread's.
 * Bindings are never written once linked (immutable, so no reader needs
 * a lock: a scope's forks read their opener's frames from other carriers,
 * and the scope layer's join and close order those reads before the
 * frame's end).  Lifetime: a frame lives as long as its weft_scoped_run
 * call; everything that may read it from another thread is structured
 * inside it -- a scope opened inside the call (closed before it returns:
 * weft__scoped_exit_hook closes one left open, the scope layer's
 * structure rule), a parallel loop's helpers (joined before the loop
 * returns).  weft_spawn and the executors start with no bindings.
 */
#define _GNU_SOURCE
#include "sched.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define IDX_BITS 14
#define KEYS_MAX (1u << IDX_BITS)          /* 16384 keys at once */
#define IDX_MASK (KEYS_MAX - 1)
#define IDX_SHIFT 3                        /* index * 8: its slot's byte offset */
#define GEN_SHIFT (IDX_SHIFT + IDX_BITS)   /* 17 */
#define GEN_MAX ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1) /* then the index is retired */
#define KEY_IDX(k) (((k) >> IDX_SHIFT) & IDX_MASK)
#define DTOR_ROUNDS 4                      /* PTHREAD_DESTRUCTOR_ITERATIONS */
#define SCOPED_ON_STACK 8                  /* bindings copied without malloc */
#define WINDOW_BYTES ((size_t)KEYS_MAX * sizeof(void *))

_Static_assert(WEFT__LOCAL_SLOT_MASK == (IDX_MASK << IDX_SHIFT), "weft/local.h: the slot mask");
_Static_assert((1u << IDX_SHIFT) == sizeof(void *), "an index times 8 is its slot's offset");

static struct {
    pthread_mutex_t lock;
    uint32_t fresh;                  /* indices never handed out start here */
    uint32_t free_head, free_n;      /* freed indices: a FIFO ring */
    uint16_t free_ring[KEYS_MAX];
    uint64_t gen[KEYS_MAX];          /* last generation handed out per index */
} K = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The live key of each index (0: none) and its destructor: read by sets,
 * copy-ins and destructor passes on any thread, written under K.lock. */
static struct {
    _Atomic weft_local_key key;
    void (*_Atomic dtor)(void *);
} keys[KEYS_MAX];

/* A vthread's storage: entries in the order first set. */
typedef struct weft__locals weft__locals;
typedef struct lentry {
    weft_local_key key; /* the key it was set under (live, or deleted since): its index too */
    void *value;
} lentry;
struct weft__locals {
    uint32_t n, cap;
    unsigned long epoch; /* key_epoch when its entries were last checked live */
    lentry e[];
};

/* Bumped by every key_delete: a storage checked at the current epoch holds
 * no entry of a deleted key, and a copy-in copies it without looking. */
static _Atomic unsigned long key_epoch;

/* A window (see the top comment), on the list W while it exists. */
struct weft__window {
    void *_Atomic *slots;      /* KEYS_MAX, mapped */
    _Atomic unsigned copying;  /* a carrier's: odd while in weft__locals_enter */
    uint32_t hw;               /* a platform thread's: 1 + the highest index it set */
    struct weft__window *next, *prev;
};

static struct {
    pthread_mutex_t lock;
    weft__window *head;
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

_Atomic long weft__locals_live;

/* The shared empty window: read, never written (.bss: its pages are the
 * zero page until read, and only the first is, in practice). */
static void *zero_slots[KEYS_MAX];
/* what the inline get reads (weft/local.h): this OS thread's window */
WEFT_API WEFT_TLS void *const *weft__tls_window = (void *const *)zero_slots;

static WEFT_TLS weft__window *tls_pwin;             /* a platform thread's own window, once it set a value */
static WEFT_TLS const weft__sframe *tls_scoped;     /* a platform thread's innermost frame */
static pthread_key_t plat_key;                      /* runs tls_pwin's destructors at exit */
static pthread_once_t plat_once = PTHREAD_ONCE_INIT;

void (*_Atomic weft__scoped_exit_hook)(const weft__sframe *f);

/* Where the calling OS thread's window pointer is (the out-of-line get).
 * Not inlined: the address is computed afresh at each call, never kept
 * from before a switch. */
__attribute__((noinline)) static void *const **window_tls(void) { return &weft__tls_window; }

/* The deleter's side of the copy-in race (top comment): 1 when
 * membarrier(PRIVATE_EXPEDITED) is ours, so copy-ins may use plain
 * stores; decided at the first window made, before any copy-in. */
#ifndef WEFT_TSAN
static int fast_dekker;
#endif
static pthread_once_t dekker_once = PTHREAD_ONCE_INIT;
static void dekker_decide(void) {
#ifndef WEFT_TSAN
    fast_dekker = weft__membarrier_ready(); /* (spares.c: registered once) */
#endif
}

static weft__window *window_new(void) {
    pthread_once(&dekker_once, dekker_decide);
    weft__window *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    void *m = mmap(NULL, WINDOW_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        free(w);
        return NULL;
    }
    w->slots = m;
    pthread_mutex_lock(&W.lock);
    w->next = W.head;
    if (W.head) W.head->prev = w;
    W.head = w;
    pthread_mutex_unlock(&W.lock);
    return w;
}

static void window_free(weft__window *w) {
    pthread_mutex_lock(&W.lock);
    if (w->prev) w->prev->next = w->next;
    else W.head = w->next;
    if (w->next) w->next->prev = w->prev;
    pthread_mutex_unlock(&W.lock);
    munmap((void *)w->slots, WINDOW_BYTES);
    free(w);
}

weft__window *weft__window_carrier_attach(void) {
    weft__window *w = window_new();
    /* (NULL: no memory; the carrier does not start) */
    if (w) weft__tls_window = (void *const *)w->slots; /* the carrier's own thread, at its start */
    return w;
}

void weft__window_carrier_detach(weft__window *w) {
    weft__tls_window = (void *const *)zero_slots; /* at the carrier thread's end */
    if (w) window_free(w);
}

static inline void slot_put(weft__window *w, uint32_t i, void *v) {
    atomic_store_explicit(&w->slots[i], v, memory_order_relaxed);
}

/* Drops L's entries whose key is no longer live (deleted since they were
 * set), as of epoch ep.  Runs for the storage's owner (its vthread, or the
 * carrier about to run it). */
__attribute__((noinline)) static void purge(weft__locals *L, unsigned long ep) {
    uint32_t m = 0;
    for (uint32_t j = 0; j < L->n; j++)
        if (atomic_load(&keys[KEY_IDX(L->e[j].key)].key) == L->e[j].key) L->e[m++] = L->e[j];
    L->n = m;
    L->epoch = ep;
}

void weft__locals_enter(weft__window *w, weft_thread *t) {
    weft__locals *L = t->locals;
    /* (only this carrier writes its count) */
    unsigned seq = atomic_load_explicit(&w->copying, memory_order_relaxed) + 1; /* odd: copying */
#ifndef WEFT_TSAN
    if (fast_dekker) {
        atomic_store_explicit(&w->copying, seq, memory_order_relaxed);
        atomic_signal_fence(memory_order_seq_cst); /* the CPU's order: the deleter's membarrier */
    } else
#endif
        atomic_store(&w->copying, seq);
    unsigned long ep = atomic_load(&key_epoch);
    if (__builtin_expect(L->epoch != ep, 0)) purge(L, ep);
    void *_Atomic *slots = w->slots;
    for (uint32_t j = 0, n = L->n; j < n; j++)
        atomic_store_explicit(&slots[KEY_IDX(L->e[j].key)], L->e[j].value, memory_order_relaxed);
    atomic_store_explicit(&w->copying, seq + 1, memory_order_release);
}

void weft__locals_leave(weft__window *w, const weft_thread *t) {
    const weft__locals *L = t->locals;
    void *_Atomic *slots = w->slots;
    for (uint32_t j = 0, n = L->n; j < n; j++)
        atomic_store_explicit(&slots[KEY_IDX(L->e[j].key)], NULL, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* keys                                                                      */
/* ------------------------------------------------------------------------ */

int weft_local_key_create(weft_local_key *k, void (*destructor)(void *)) {
    if (!k) return -EINVAL;
    pthread_mutex_lock(&K.lock);
    uint32_t idx;
    if (K.free_n) {
        idx = K.free_ring[K.free_head];
        K.free_head = (K.free_head + 1) % KEYS_MAX;
        K.free_n--;
    } else if (K.fresh < KEYS_MAX) {
        idx = K.fresh++;
    } else {
        pthread_mutex_unlock(&K.lock);
        return -EAGAIN; /* as pthread_key_create past PTHREAD_KEYS_MAX */
    }
    uint64_t g = K.gen[idx] + 1; /* never 0: no key is 0; never past GEN_MAX (key_delete) */
    K.gen[idx] = g;
    weft_local_key key = (g << GEN_SHIFT) | ((weft_local_key)idx << IDX_SHIFT);
    atomic_store_explicit(&keys[idx].dtor, destructor, memory_order_relaxed);
    atomic_store_explicit(&keys[idx].key, key, memory_order_release);
    pthread_mutex_unlock(&K.lock);
    *k = key;
    return 0;
}

/* No window holds a value under index i once this returns (top comment:
 * "Deleted keys and windows").  Called with keys[i].key already 0 (a
 * sequentially consistent store).  A copy-in that began before the
 * barrier may have read the key as live: each window is cleared only once
 * the copy-in it was in then (odd count) is over; one that begins after
 * the barrier reads the key as deleted and copies nothing there. */
static void windows_clear(uint32_t i) {
    pthread_mutex_lock(&W.lock);
#ifndef WEFT_TSAN
    if (fast_dekker) syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
#endif
    /* (otherwise both sides' sequentially consistent accesses order it) */
    for (weft__window *w = W.head; w; w = w->next) {
        unsigned s = atomic_load(&w->copying);
        if (s & 1)
            for (int spins = 0; atomic_load_explicit(&w->copying, memory_order_acquire) == s; spins++)
                if (spins > 1000) sched_yield();
        slot_put(w, i, NULL);
    }
    pthread_mutex_unlock(&W.lock);
}

int weft_local_key_delete(weft_local_key k) {
    uint32_t idx = (uint32_t)KEY_IDX(k);
    pthread_mutex_lock(&K.lock);
    if (!k || atomic_load_explicit(&keys[idx].key, memory_order_relaxed) != k) {
        pthread_mutex_unlock(&K.lock);
        return -EINVAL;
    }
    atomic_store(&keys[idx].key, 0);
    atomic_store_explicit(&keys[idx].dtor, NULL, memory_order_relaxed);
    atomic_fetch_add(&key_epoch, 1); /* copy-ins from now on check their entries first */
    windows_clear(idx);
    if (K.gen[idx] < GEN_MAX) { /* else retired: its next key would repeat a generation */
        K.free_ring[(K.free_head + K.free_n) % KEYS_MAX] = (uint16_t)idx;
        K.free_n++;
    }
    pthread_mutex_unlock(&K.lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* storage                                                                   */
/* ------------------------------------------------------------------------ */

static void plat_exit(void *unused);

static void plat_key_make(void) {
    if (pthread_key_create(&plat_key, plat_exit) != 0) plat_key = (pthread_key_t)-1;
}

/* (the inline get's body, for callers built without it) */
void *(weft_local_get)(weft_local_key k) {
    void *const *w = *window_tls();
    return w[KEY_IDX(k)];
}

/* The calling platform thread's window, made if need be (NULL: no memory). */
static weft__window *plat_window(void) {
    if (tls_pwin) return tls_pwin;
    weft__window *w = window_new();
    if (!w) return NULL;
    tls_pwin = w;
    weft__tls_window = (void *const *)w->slots;
    /* a non-NULL value of plat_key makes pthread call plat_exit */
    pthread_once(&plat_once, plat_key_make);
    if (plat_key != (pthread_key_t)-1) pthread_setspecific(plat_key, w);
    return w;
}

/* t's entry for key k's index, made if need be (under k); NULL when out of
 * memory.  ep: key_epoch as read before the caller checked its key live --
 * a new storage is "checked" as of then, not as of now (a delete in
 * between must make the next copy-in purge). */
static lentry *entry_for(weft_thread *t, weft_local_key k, unsigned long ep) {
    weft__locals *L = t->locals;
    uint64_t i = KEY_IDX(k);
    if (L)
        for (uint32_t j = 0; j < L->n; j++)
            if (KEY_IDX(L->e[j].key) == i) return &L->e[j];
    if (!L || L->n == L->cap) {
        uint32_t ncap = L ? L->cap * 2 : 4;
        weft__locals *N = realloc(L, sizeof *N + (size_t)ncap * sizeof N->e[0]);
        if (!N) return NULL;
        if (!L) {
            N->n = 0;
            N->epoch = ep;
            atomic_fetch_add_explicit(&weft__locals_live, 1, memory_order_relaxed);
        }
        N->cap = ncap;
        t->locals = L = N;
    }
    lentry *e = &L->e[L->n++];
    e->key = k;
    e->value = NULL;
    return e;
}

int weft_local_set(weft_local_key k, void *value) {
    uint32_t i = (uint32_t)KEY_IDX(k);
    unsigned long ep = atomic_load(&key_epoch); /* before the check (entry_for) */
    if (!k || atomic_load(&keys[i].key) != k) return -EINVAL;
    weft__carrier *c = weft__tls_carrier; /* no switch in here */
    weft_thread *t = c ? weft__carrier_cur(c) : NULL;
    if (!t) {
        if (c) return -EPERM; /* the scheduler's own context: no user code runs there */
        if (!tls_pwin && !value) return 0; /* NULL it stays, and nothing is made */
        weft__window *w = plat_window();
        if (!w) return -ENOMEM;
        slot_put(w, i, value);
        if (i + 1 > w->hw) w->hw = i + 1;
        return 0;
    }
    weft__window *w = weft__carrier_window(c);
    if (!value && !t->locals) return 0;
    lentry *e = entry_for(t, k, ep);
    if (!e) return -ENOMEM;
    e->key = k;
    e->value = value;
    slot_put(w, i, value);
    return 0;
}

/* pthread's destructor passes over t's storage, then frees it.  Runs on t,
 * which a destructor may move to another carrier: its window is looked up
 * afresh after every call.  A destructor's set may grow the storage. */
static void vthread_destructors(weft_thread *t) {
    for (int round = 0; round < DTOR_ROUNDS; round++) {
        int called = 0;
        for (uint32_t j = 0; j < t->locals->n; j++) {
            lentry *e = &t->locals->e[j];
            weft_local_key k = e->key;
            void *v = e->value;
            if (!v) continue;
            uint32_t i = (uint32_t)KEY_IDX(k);
            e->value = NULL;
            weft__window *w = weft__carrier_window(weft__carrier_self());
            if (w) slot_put(w, i, NULL); /* (none: a fork's child, which ends in weft__fatal) */
            void (*d)(void *) = atomic_load_explicit(&keys[i].dtor, memory_order_relaxed);
            /* a key deleted (or deleted and made again) since: no destructor */
            if (!d || atomic_load_explicit(&keys[i].key, memory_order_acquire) != k) continue;
            d(v);
            called = 1;
        }
        if (!called) break;
    }
    weft__window *w = weft__carrier_window(weft__carrier_self());
    if (w) weft__locals_leave(w, t); /* what is left is dropped */
    free(t->locals);
    t->locals = NULL;
}

void weft__locals_end(weft_thread *self) {
    vthread_destructors(self);
    atomic_fetch_sub_explicit(&weft__locals_live, 1, memory_order_relaxed);
}

void weft__locals_abandon(weft_thread *t) {
    free(t->locals);
    t->locals = NULL;
    atomic_fetch_sub_explicit(&weft__locals_live, 1, memory_order_relaxed);
}

/* A platform thread's exit (pthread calls it for plat_key): the destructor
 * passes over its window, then the window goes.  (A destructor that sets a
 * value again after that makes a new window and sets plat_key again:
 * pthread then comes back, as it should.) */
static void plat_exit(void *unused) {
    (void)unused;
    weft__window *w = tls_pwin;
    if (!w) return;
    for (int round = 0; round < DTOR_ROUNDS; round++) {
        int called = 0;
        for (uint32_t i = 0; i < w->hw; i++) {
            void *v = atomic_load_explicit(&w->slots[i], memory_order_relaxed);
            if (!v) continue;
            slot_put(w, i, NULL);
            void (*d)(void *) = atomic_load_explicit(&keys[i].dtor, memory_order_relaxed);
            if (!d || !atomic_load_explicit(&keys[i].key, memory_order_acquire)) continue;
            d(v);
            called = 1;
        }
        if (!called) break;
    }
    tls_pwin = NULL;
    weft__tls_window = (void *const *)zero_slots;
    window_free(w);
}

/* ------------------------------------------------------------------------ */
/* scoped values                                                             */
/* ------------------------------------------------------------------------ */

/* The calling thread's innermost frame and where it is kept.  Each call
 * reads the TLS pointer afresh (noinline: weft_scoped_run calls it again
 * after fn, which may have moved the vthread to another carrier). */
__attribute__((noinline)) static const weft__sframe **scoped_slot(weft_thread **self) {
    weft__carrier *c = weft__carrier_self();
    weft_thread *t = c ? weft__carrier_cur(c) : NULL;
    *self = t;
    return t ? &t->scoped : &tls_scoped;
}

const weft__sframe *weft__scoped_current(void) {
    weft_thread *t;
    return *scoped_slot(&t);
}

void weft__scoped_adopt(const weft__sframe *f) {
    weft_thread *t;
    const weft__sframe **slot = scoped_slot(&t);
    *slot = f;
    if (t) atomic_store_explicit(&t->scoped_n, weft__sframe_total(f), memory_order_relaxed);
}

/* 1 and *value when key is bound in the chain from f, else 0. */
static inline int find(const weft__sframe *f, const weft_scoped_key *key, void **value) {
    for (; f; f = f->prev) {
        if (f->k0 == key) {
            *value = f->v0;
            return 1;
        }
        for (uint32_t i = 1; i < f->n; i++)
            if (f->more[i - 1].key == key) {
                *value = f->more[i - 1].value;
                return 1;
            }
    }
    return 0;
}

int (weft_scoped_get)(weft_scoped_key *key, void **value) {
    /* no switch in here: the TLS pointer may be read directly (sched.h) */
    weft__carrier *c = weft__tls_carrier;
    weft_thread *t = c ? weft__carrier_cur(c) : NULL;
    const weft__sframe *f = t ? t->scoped : tls_scoped;
    void *v;
    if (!find(f, key, &v)) return key ? -ENOENT : -EINVAL;
    if (value) *value = v;
    return 0;
}

int weft_scoped_run(const weft_binding *b, size_t n, int (*fn)(void *), void *arg) {
    if (!fn || (n && !b)) return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!b[i].key) return -EINVAL;
    if (n == 0) return fn(arg); /* binds nothing: no frame */
    if (n > UINT32_MAX / 2) return -EINVAL;
    /* the copy: distinct keys, the last binding of a key winning (as
     * ScopedValue.where(k, a).where(k, b) binds b) */
    weft_binding small[SCOPED_ON_STACK], *copy = small;
    if (n > SCOPED_ON_STACK && !(copy = malloc(n * sizeof *copy))) return -ENOMEM;
    uint32_t m = 0;
    for (size_t i = n; i-- > 0;) {
        uint32_t j = 0;
        while (j < m && copy[j].key != b[i].key) j++;
        if (j == m) copy[m++] = b[i];
    }
    weft_thread *self;
    const weft__sframe **slot = scoped_slot(&self);
    const weft__sframe *prev = *slot;
    /* distinct keys through the chain: the new ones not bound further out */
    uint32_t fresh = 0;
    for (uint32_t j = 0; j < m; j++) {
        void *unused;
        if (!find(prev, copy[j].key, &unused)) fresh++;
    }
    weft__sframe f = {.prev = prev, .k0 = copy[0].key, .v0 = copy[0].value, .n = m,
                      .total = weft__sframe_total(prev) + fresh, .more = copy + 1};
    *slot = &f;
    if (self) atomic_store_explicit(&self->scoped_n, f.total, memory_order_relaxed);
    int r = fn(arg);
    /* scopes opened inside this binding and left open close now, while their
     * forks can still read f (scope.c) */
    void (*hook)(const weft__sframe *) = atomic_load_explicit(&weft__scoped_exit_hook, memory_order_acquire);
    if (hook) hook(&f);
    slot = scoped_slot(&self); /* fn may have moved this vthread to another carrier */
    *slot = prev;
    if (self) atomic_store_explicit(&self->scoped_n, weft__sframe_total(prev), memory_order_relaxed);
    if (copy != small) free(copy);
    return r;
}
