/*
 * Vthread-local storage (weft_local_*) and scoped values (weft_scoped_*):
 * what C code keeps per request instead of a __thread variable, which a
 * vthread cannot keep across a blocking call (it may resume on another
 * carrier, whose thread-locals are not its own).
 *
 * Keys.  A process-wide table of KEYS_MAX slots, each holding the live key
 * value and its destructor; a key is (generation << IDX_BITS) | index, so
 * never 0, and a slot that is deleted and made again gives a new value:
 * storage left under the old one is never read through the new one (a get
 * compares the whole key).  Creating and deleting take a mutex (rare);
 * freed indices are reused in FIFO order, so a slot's generation (18 bits)
 * wraps only after 2^18 reuses of that very index.  As pthread_key_delete,
 * deleting runs no destructor and leaves values where they are; a deleted
 * key must not be used again (set answers -EINVAL; get may still answer
 * the caller's own old value: UB in pthread, harmless here).
 *
 * Storage.  Per thread, an array indexed by key index: {key, value} pairs,
 * allocated by the first set of a non-NULL value and grown (doubling) to
 * the highest index set -- a million vthreads that set nothing cost
 * nothing, one that sets key 3 costs 8 pairs.  A vthread's array hangs off
 * its descriptor (weft_thread.locals), so it follows the vthread from
 * carrier to carrier; a platform thread's hangs off a __thread pointer.
 * Only the owning thread touches its array, so nothing in it is atomic.
 * A get: the carrier's TLS pointer, its current vthread, the array, a
 * bounds check and a compare -- no lock, no hash, no atomic RMW.  On a
 * vthread it is inlined into the caller (weft/local.h, "The gets' inline
 * fast path"): a call alone cost more than pthread_getspecific's body
 * (measured: 1.25 ns out of line, 0.86 inline, pthread_getspecific 1.1,
 * a bare __thread load 0.17 -- weft-bench micro --only local).  The
 * carrier is read there by an asm statement, which the compiler neither
 * hoists nor caches across a call, unlike a C access to a __thread
 * variable.  Rejected: a TLS pointer to the running vthread's array,
 * which would save one load per get but cost every context switch a load
 * and a store; and a get without the bounds check (every array the size
 * of the key table: 256 KiB per vthread that sets anything).
 *
 * Destructors (pthread's rule).  When a vthread's function returns, still
 * on the vthread (they may block) and before any weft_join of it returns,
 * every non-NULL value whose key is live with a destructor is taken out
 * (its pair set to NULL) and the destructor called with it; if destructors
 * set values again the pass repeats, up to DTOR_ROUNDS passes
 * (PTHREAD_DESTRUCTOR_ITERATIONS); what is left after that is dropped.
 * Then the array is freed.  A platform thread's run the same way at its
 * exit, from a pthread key destructor.  A daemon vthread still running at
 * weft_shutdown is abandoned: its array is freed, its destructors do not
 * run (it never returned: its values may be in use on its stack).
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
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define IDX_BITS 14
#define KEYS_MAX (1u << IDX_BITS)          /* 16384 keys at once */
#define IDX_MASK (KEYS_MAX - 1)
#define GEN_MAX ((1u << (32 - IDX_BITS)) - 1)
#define DTOR_ROUNDS 4                      /* PTHREAD_DESTRUCTOR_ITERATIONS */
#define SCOPED_ON_STACK 8                  /* bindings copied without malloc */

typedef struct weft__locals weft__locals; /* (laid out in weft/local.h, for the inline get) */

static struct {
    pthread_mutex_t lock;
    uint32_t fresh;                  /* indices never handed out start here */
    uint32_t free_head, free_n;      /* freed indices: a FIFO ring */
    uint16_t free_ring[KEYS_MAX];
    uint32_t gen[KEYS_MAX];          /* last generation handed out per index */
} K = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The live key of each index (0: none) and its destructor: read by sets
 * and by destructor passes on any thread, written under K.lock. */
static struct {
    _Atomic weft_local_key key;
    void (*_Atomic dtor)(void *);
} keys[KEYS_MAX];

_Atomic long weft__locals_live;

static WEFT_TLS weft__locals *tls_plocals;          /* a platform thread's storage */
static WEFT_TLS const weft__sframe *tls_scoped;     /* a platform thread's innermost frame */
static pthread_key_t plat_key;                      /* runs tls_plocals' destructors at exit */
static pthread_once_t plat_once = PTHREAD_ONCE_INIT;

void (*_Atomic weft__scoped_exit_hook)(const weft__sframe *f);

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
    uint32_t g = K.gen[idx] == GEN_MAX ? 1 : K.gen[idx] + 1; /* never 0: no key is 0 */
    K.gen[idx] = g;
    weft_local_key key = (g << IDX_BITS) | idx;
    atomic_store_explicit(&keys[idx].dtor, destructor, memory_order_relaxed);
    atomic_store_explicit(&keys[idx].key, key, memory_order_release);
    pthread_mutex_unlock(&K.lock);
    *k = key;
    return 0;
}

int weft_local_key_delete(weft_local_key k) {
    uint32_t idx = k & IDX_MASK;
    pthread_mutex_lock(&K.lock);
    if (!k || atomic_load_explicit(&keys[idx].key, memory_order_relaxed) != k) {
        pthread_mutex_unlock(&K.lock);
        return -EINVAL;
    }
    atomic_store_explicit(&keys[idx].key, 0, memory_order_relaxed);
    atomic_store_explicit(&keys[idx].dtor, NULL, memory_order_relaxed);
    K.free_ring[(K.free_head + K.free_n) % KEYS_MAX] = (uint16_t)idx;
    K.free_n++;
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

void *(weft_local_get)(weft_local_key k) {
    /* no switch in here: the TLS pointer may be read directly (sched.h) */
    weft__carrier *c = weft__tls_carrier;
    weft_thread *t = c ? weft__carrier_cur(c) : NULL;
    const weft__locals *L = t ? t->locals : tls_plocals;
    uint32_t i = k & IDX_MASK;
    if (L && i < L->cap && L->s[i].key == k) return L->s[i].value;
    return NULL;
}

/* Grows *slot to hold index i; NULL when out of memory (nothing changed). */
static weft__locals *grow(weft__locals **slot, uint32_t i, int platform) {
    weft__locals *L = *slot;
    uint32_t cap = L ? L->cap : 0;
    uint32_t ncap = cap ? cap * 2 : 8;
    while (ncap <= i) ncap *= 2;
    if (ncap > KEYS_MAX) ncap = KEYS_MAX;
    weft__locals *N = realloc(L, sizeof *N + (size_t)ncap * sizeof N->s[0]);
    if (!N) return NULL;
    memset(&N->s[cap], 0, (size_t)(ncap - cap) * sizeof N->s[0]);
    N->cap = ncap;
    *slot = N;
    if (!L) {
        if (platform) {
            /* a non-NULL value of plat_key makes pthread call plat_exit */
            pthread_once(&plat_once, plat_key_make);
            if (plat_key != (pthread_key_t)-1) pthread_setspecific(plat_key, N);
        } else {
            atomic_fetch_add_explicit(&weft__locals_live, 1, memory_order_relaxed);
        }
    }
    return N;
}

int weft_local_set(weft_local_key k, void *value) {
    uint32_t i = k & IDX_MASK;
    if (!k || atomic_load_explicit(&keys[i].key, memory_order_relaxed) != k) return -EINVAL;
    weft__carrier *c = weft__tls_carrier; /* no switch in here */
    weft_thread *t = c ? weft__carrier_cur(c) : NULL;
    weft__locals **slot = t ? &t->locals : &tls_plocals;
    weft__locals *L = *slot;
    if (!L || i >= L->cap) {
        if (!value) return 0; /* nothing stored there: NULL it stays, and nothing is allocated */
        if (!(L = grow(slot, i, !t))) return -ENOMEM;
    }
    L->s[i].key = k;
    L->s[i].value = value;
    return 0;
}

/* pthread's destructor passes over *slot, then frees it.  *slot may be
 * reallocated by a destructor's set: re-read after every call.  The slot
 * itself stays put (a descriptor field, or a platform thread's TLS). */
static void run_destructors(weft__locals **slot) {
    for (int round = 0; round < DTOR_ROUNDS; round++) {
        int called = 0;
        for (uint32_t i = 0; *slot && i < (*slot)->cap; i++) {
            weft__locals *L = *slot;
            weft_local_key k = L->s[i].key;
            void *v = L->s[i].value;
            if (!k || !v) continue;
            L->s[i].value = NULL;
            void (*d)(void *) = atomic_load_explicit(&keys[i].dtor, memory_order_relaxed);
            /* a key deleted (or deleted and made again) since: no destructor */
            if (!d || atomic_load_explicit(&keys[i].key, memory_order_acquire) != k) continue;
            d(v);
            called = 1;
        }
        if (!called) break;
    }
    free(*slot);
    *slot = NULL;
}

void weft__locals_end(weft_thread *self) {
    run_destructors(&self->locals);
    atomic_fetch_sub_explicit(&weft__locals_live, 1, memory_order_relaxed);
}

void weft__locals_abandon(weft_thread *t) {
    free(t->locals);
    t->locals = NULL;
    atomic_fetch_sub_explicit(&weft__locals_live, 1, memory_order_relaxed);
}

static void plat_exit(void *unused) {
    (void)unused;
    /* (a destructor that sets a value again reallocates tls_plocals and
     * calls pthread_setspecific: pthread then comes back, as it should) */
    if (tls_plocals) run_destructors(&tls_plocals);
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
