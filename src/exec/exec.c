/*
 * Executors: a virtual-thread-per-task executor and pools of platform
 * threads (fixed, cached, scheduled) behind one interface (weft/exec.h).
 *
 * Objects and who owns them.
 *  - weft_executor: made by a constructor, freed by close / close_now --
 *    or, when asynchronous operations that name it are pending (async/async.c
 *    holds a reference for each: `refs`), by the last of them, shut.  A
 *    close checks the magic word and poisons it as the owner lets go, so
 *    a second close stops the program with a message (sched.h "heap
 *    objects"), even while an operation still keeps the memory.  One
 *    pthread mutex (`lock`) guards everything in it; it is held for queue
 *    and list surgery and counter updates only -- never across a park, a
 *    task's fn or a future's fill -- so a vthread may take it (a holder
 *    never waits for anything but the lock's other holders).
 *  - task: one per submission, malloc'd, with two references: the runner
 *    side (whoever will run or drop it: the queue, a pool thread, the task's
 *    vthread) and the watch (below).  The executor also holds one reference
 *    on the task's future, dropped when the task is freed.  A task counts in
 *    `outstanding` until both references are gone, so an executor outlives
 *    every callback that can touch it: close waits for outstanding == 0.
 *  - worker: one per pool thread, malloc'd, freed by its thread when it
 *    leaves (under the lock).
 *
 * Cancellation through the future.  Every task's future carries a watch
 * (sync/future_int.h) that runs when the future is filled.  When the
 * runner filled it (the task returned) the watch only drops its
 * reference.  Otherwise the owner cancelled (or failed) it, and under the
 * lock: a QUEUED task is taken off its queue and never runs; a RUNNING one
 * is cancelled where it runs -- weft_cancel on its vthread, or the pool
 * thread's platform cancel (sched.h weft__pcancel_*), which a pool thread
 * clears under the lock when the task is done, so a cancel never leaks into
 * the next task.  `finished` (set by the runner before it fills the future)
 * tells a late watch that there is nothing left to cancel.
 *
 * Task states (under the lock): QUEUED -> RUNNING -> DONE, or QUEUED ->
 * CANCELLED (owner's cancel, close_now, DISCARD_OLDEST, a periodic task at
 * shutdown).  A periodic task goes RUNNING -> QUEUED between runs.  The
 * virtual executor's tasks are QUEUED from submission until their vthread
 * starts; they sit in no queue.
 *
 * Waiting.  BLOCK submitters, idle pool threads and closers wait on lists of
 * records on their own stacks (sync/waitq.h: parker and token), linked under the
 * lock, as futures' getters do: a waker unlinks a record and unparks it; if
 * the unpark loses (the waiter timed out or was cancelled in that instant)
 * it wakes the next one, so no wake is lost.  Pool threads park on their
 * platform park word (futex); vthreads park and free their carrier.
 *
 * Pools (ThreadPoolExecutor's rule): a task goes to an idle thread if one
 * waits; else a new thread while fewer than `core` run; else the queue if
 * it has room; else a new thread while fewer than `max` run; else the
 * rejection policy.  A cached pool (core 0) prefers a new thread to the
 * queue, and queues once `max` threads run.  A scheduled pool keeps its
 * queue as a binary heap ordered by (when, seq); its threads wait until
 * the earliest task is due.  A `when` is saturated at INT64_MAX (never):
 * now + delay, or a run's when + period, wrapped past INT64_MAX into the
 * past made a task due at once, and a periodic one ran again and again,
 * holding the pool's threads from every other task.
 *
 * The registry.  Live executors are on one list (reg_lock) for weft_dump.
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "../sched/det.h"
#include "../sync/future_int.h"
#include "exec.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EX_VIRTUAL, EX_POOL, EX_SCHED };
enum { T_QUEUED, T_RUNNING, T_DONE, T_CANCELLED };

#include "../sched/heap.h"
#include "../sync/waitq.h"

/* ---- objects ---------------------------------------------------------------- */

typedef struct worker worker;

typedef struct task {
    weft__fnode watch;          /* first: the watch callback gets the task from it */
    struct task *next, *prev;   /* FIFO queue or running list */
    weft_executor *ex;
    void *(*fn)(void *);
    void *arg;
    weft_future *fut;           /* the executor's reference */
    _Atomic int refs;           /* runner side + watch */
    _Atomic int finished;       /* fn returned for the last time */
    int state;                  /* T_*, under the lock */
    int cancel_req;             /* cancelled while RUNNING (under the lock) */
    worker *w;                  /* the pool thread running it */
    weft_thread *vt;            /* the vthread running it (virtual) */
    /* scheduled */
    int64_t when, period;
    int fixed_rate;
    ptrdiff_t hidx;             /* in the heap (sched/heap.h), or -1 */
    uint64_t seq;
} task;

struct worker {
    worker *next, *prev;
    weft_executor *ex;
    weft__pcancel *pc;          /* set by the thread itself, under the lock */
    task *first;                /* the task it was started for */
    int index;
};

struct weft_executor {
    pthread_mutex_t lock;
    int kind;
    int shut;
    int core, max;              /* pool threads: ThreadPoolExecutor's core and max (0: none) */
    int grow_first;             /* cached: a new thread before the queue */
    size_t cap;                 /* queue capacity, 0 = unbounded */
    int64_t keep_alive;         /* ns an idle thread above core waits before it ends (0: forever) */
    int policy;
    uint32_t magic;             /* WEFT__MAGIC_EXEC; _DEAD once closed (sched.h: 32 bytes in, not last) */
    char label[32];
    weft_group *group;          /* virtual: the group its vthreads go to (NULL: the submitter's, as weft_spawn) */
    task *qh, *qt;              /* FIFO queue (pools) */
    weft__heap heap;            /* scheduled: min-heap of tasks on (when, seq) */
    uint64_t seq;
    task *running;              /* tasks running now (pools and virtual) */
    worker *workers;
    int nthreads, next_index;
    weft__waitq idle, blockers, closers;
    uint64_t outstanding;       /* tasks not yet freed */
    weft_executor_stats st;     /* all but completed */
    _Atomic uint64_t completed; /* counted before the future is filled: a
                                 * caller who has every result sees them all */
    weft_executor *reg_next, *reg_prev;
    _Atomic int refs;           /* the owner's, until close; one per pending
                                 * asynchronous operation naming e (async.c) */
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static weft_executor *reg_head;

/* ---- small helpers (lock held) ---------------------------------------------- */

static void lock(weft_executor *e) { pthread_mutex_lock(&e->lock); }
static void unlock(weft_executor *e) { pthread_mutex_unlock(&e->lock); }

static int wait_on(weft_executor *e, weft__waitq *l, int64_t deadline, int nocancel) {
    return weft__wq_wait_mutex(&e->lock, l, deadline, nocancel, e);
}

static void list_link(task **head, task *t) {
    t->prev = NULL;
    t->next = *head;
    if (*head) (*head)->prev = t;
    *head = t;
}

static void list_unlink(task **head, task *t) {
    if (t->prev) t->prev->next = t->next;
    else *head = t->next;
    if (t->next) t->next->prev = t->prev;
    t->next = t->prev = NULL;
}

static int earlier(const void *x, const void *y) {
    const task *a = x, *b = y;
    return a->when < b->when || (a->when == b->when && a->seq < b->seq);
}

static int heap_add(weft_executor *e, task *t) { return weft__heap_push(&e->heap, t, earlier, offsetof(task, hidx)); }

static void heap_remove(weft_executor *e, task *t) { weft__heap_remove(&e->heap, t, earlier, offsetof(task, hidx)); }

static void note_queued(weft_executor *e, int delta) {
    e->st.queued = (uint64_t)((int64_t)e->st.queued + delta);
    if (e->st.queued > e->st.queued_peak) e->st.queued_peak = e->st.queued;
}

/* Puts t on the queue (state QUEUED).  The heap may need to grow: -ENOMEM. */
static int q_push(weft_executor *e, task *t) {
    t->state = T_QUEUED;
    if (e->kind == EX_SCHED) {
        t->seq = e->seq;
        if (heap_add(e, t) < 0) return -ENOMEM;
        e->seq++;
    } else {
        t->next = NULL;
        t->prev = e->qt;
        if (e->qt) e->qt->next = t;
        else e->qh = t;
        e->qt = t;
    }
    note_queued(e, 1);
    return 0;
}

static void q_remove(weft_executor *e, task *t) {
    if (e->kind == EX_SCHED) {
        heap_remove(e, t);
    } else {
        if (t->prev) t->prev->next = t->next;
        else e->qh = t->next;
        if (t->next) t->next->prev = t->prev;
        else e->qt = t->prev;
        t->next = t->prev = NULL;
    }
    note_queued(e, -1);
}

/* The task that is due first, or NULL. */
static task *q_first(weft_executor *e) { return e->kind == EX_SCHED ? weft__heap_first(&e->heap) : e->qh; }

/* Drops one of t's references, the lock held.  Returns 1 when it was the
 * last: t is out of `outstanding` and the caller frees it (task_free) after
 * unlocking. */
static int task_drop_locked(weft_executor *e, task *t, int n) {
    if (atomic_fetch_sub(&t->refs, n) != n) return 0;
    if (--e->outstanding == 0 && e->shut) weft__wq_wake_all(&e->closers);
    return 1;
}

static void task_free(task *t) {
    weft_future_unref(t->fut); /* filled by now: this only frees it */
    free(t);
}

/* Drops a reference without the lock held. */
static void task_drop(task *t, int n) {
    if (atomic_fetch_sub(&t->refs, n) != n) return;
    weft_executor *e = t->ex;
    lock(e);
    if (--e->outstanding == 0 && e->shut) weft__wq_wake_all(&e->closers);
    unlock(e);
    task_free(t);
}

/* ---- the watch: a task's future was filled ------------------------------------ */

static void on_filled(weft__fnode *n) {
    task *t = (task *)n;
    if (atomic_load(&t->finished)) { /* the runner's own fill, or a fill after the last run */
        task_drop(t, 1);
        return;
    }
    weft_executor *e = t->ex;
    lock(e);
    int last = 0;
    switch (t->state) {
    case T_QUEUED: /* cancelled before it ran */
        t->state = T_CANCELLED;
        e->st.cancelled++;
        if (e->kind != EX_VIRTUAL) { /* (a virtual task's vthread drops its runner side) */
            q_remove(e, t);
            weft__wq_wake_one(&e->blockers);
            if (e->shut) weft__wq_wake_all(&e->idle); /* a thread waiting for it may be done */
            atomic_fetch_sub(&t->refs, 1); /* the queue's: the watch's is still held */
        }
        break;
    case T_RUNNING:
        t->cancel_req = 1;
        if (t->vt) weft_cancel(t->vt);
        else if (t->w && t->w->pc) weft__pcancel_fire(t->w->pc);
        break;
    default: /* DONE, or CANCELLED by someone who dropped the runner side */
        break;
    }
    last = task_drop_locked(e, t, 1);
    unlock(e);
    if (last) task_free(t);
}

/* ---- tasks ---------------------------------------------------------------- */

static task *task_new(weft_executor *e, void *(*fn)(void *), void *arg) {
    task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (weft_future_create(&t->fut) < 0) {
        free(t);
        return NULL;
    }
    t->ex = e;
    t->fn = fn;
    t->arg = arg;
    atomic_init(&t->refs, 2);
    atomic_init(&t->finished, 0);
    t->watch.watch = on_filled;
    return t;
}

/* A task that never got in: its future fails with err (a new future,
 * returned to the caller), and it is freed. */
static weft_future *refuse(task *t, int err) {
    weft_future *f = t->fut;
    weft_future_fail(f, err);
    free(t);
    return f; /* the executor's reference becomes the caller's */
}

/* After the task was taken (queued or started), outside the lock: the
 * watch goes on, and the caller gets its reference. */
static weft_future *accepted(task *t) {
    weft_future *f = weft_future_ref(t->fut);
    weft__future_watch(f, &t->watch); /* may run at once (and free t) */
    return f;
}

/* ---- pool threads ----------------------------------------------------------- */

static void *worker_main(void *arg);

/* Pool threads alive in every executor: the futex hash is fitted to them
 * (weft__futex_hash_fit: a sleeping pool thread is a futex waiter). */
static _Atomic long pool_threads;

/* Starts a pool thread, lock held; first (may be NULL) becomes its RUNNING
 * task.  0 or -errno. */
static int worker_start(weft_executor *e, task *first) {
    worker *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    w->ex = e;
    w->first = first;
    w->index = e->next_index++;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    /* deterministic mode: a new pool thread is a platform thread at work
     * (det.c) until it waits in weft, as one woken is -- the carrier must
     * not take a vthread waiting for its task for a deadlock */
    if (__builtin_expect(WEFT__DET_ON(), 0)) weft__det_platform_active();
    int r = pthread_create(&tid, &a, worker_main, w);
    pthread_attr_destroy(&a);
    if (r) {
        free(w);
        return -r;
    }
    w->prev = NULL;
    w->next = e->workers;
    if (e->workers) e->workers->prev = w;
    e->workers = w;
    e->nthreads++;
    weft__futex_hash_fit(atomic_fetch_add_explicit(&pool_threads, 1, memory_order_relaxed) + 1);
    e->st.threads_started++;
    e->st.threads_live++;
    if (e->st.threads_live > e->st.threads_peak) e->st.threads_peak = e->st.threads_live;
    if (first) {
        first->state = T_RUNNING;
        first->w = w;
        list_link(&e->running, first);
    }
    return 0;
}

/* when + period (period > 0), saturated: a period too long for the clock
 * means never again, not a time in the past and a run at once. */
static int64_t when_after(int64_t when, int64_t period) {
    return period > INT64_MAX - when ? INT64_MAX : when + period;
}

/* The next task for w, RUNNING on it, or NULL when w should end; lock held. */
static task *take(weft_executor *e, worker *w) {
    int expired = 0;
    for (;;) {
        task *t = q_first(e);
        int64_t deadline = 0;
        if (t && e->kind == EX_SCHED) {
            int64_t now = weft_now();
            if (t->when > now) {
                deadline = t->when;
                t = NULL;
            }
        }
        if (t) {
            q_remove(e, t);
            weft__wq_wake_one(&e->blockers);
            t->state = T_RUNNING;
            t->w = w;
            list_link(&e->running, t);
            return t;
        }
        if (e->shut && !q_first(e)) return NULL;
        if (expired && e->nthreads > e->core) return NULL;
        if (!deadline && e->keep_alive && e->nthreads > e->core) deadline = weft__sleep_deadline(e->keep_alive);
        int r = wait_on(e, &e->idle, deadline, 1);
        if (r == -ETIMEDOUT && e->kind != EX_SCHED) expired = 1;
    }
}

/* The end of a run, lock held: DONE, counted, off the running list, the
 * thread's cancellation forgotten.  1 when t is to be freed. */
static int run_done(weft_executor *e, task *t, worker *w) {
    t->state = T_DONE;
    list_unlink(&e->running, t);
    t->w = NULL;
    t->vt = NULL;
    if (w) weft__pcancel_clear();
    return task_drop_locked(e, t, 1);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    weft_executor *e = w->ex;
    weft__pcancel *pc = weft__pcancel_enable();
    char name[16];
    snprintf(name, sizeof name, "weft-pool-%d", w->index);
    pthread_setname_np(pthread_self(), name);
    lock(e);
    w->pc = pc;
    task *t = w->first;
    w->first = NULL;
    if (t && t->cancel_req) weft__pcancel_fire(pc);
    task *dead = NULL;
    for (;;) {
        if (!t) t = take(e, w);
        if (!t) break;
        unlock(e);
        if (dead) {
            task_free(dead);
            dead = NULL;
        }
        /* (deterministic mode: a task at work on a pool thread may still
         * wake a vthread, so an idle carrier is no deadlock meanwhile) */
        int det = WEFT__DET_ON();
        if (__builtin_expect(det, 0)) weft__det_work(1);
        void *r = t->fn(t->arg);
        if (__builtin_expect(det, 0)) weft__det_work(-1);
        if (t->period) { /* scheduled periodically: again, unless it stopped */
            lock(e);
            if (!r && !e->shut && !weft_future_done(t->fut)) {
                t->when = t->fixed_rate ? when_after(t->when, t->period) : weft__sleep_deadline(t->period);
                list_unlink(&e->running, t);
                t->w = NULL;
                t->cancel_req = 0;
                weft__pcancel_clear();
                if (q_push(e, t) == 0) {
                    atomic_fetch_add(&e->completed, 1);
                    t = NULL;
                    continue; /* the lock held, as at the top */
                }
                list_link(&e->running, t); /* no memory to queue it again: it stops */
                t->w = w;
            }
            unlock(e);
        }
        atomic_store(&t->finished, 1);
        atomic_fetch_add(&e->completed, 1);
        if (t->period && !r) weft_future_cancel(t->fut); /* stopped by a cancel or the shutdown */
        else weft_future_complete(t->fut, r);           /* -EALREADY if cancelled meanwhile */
        lock(e);
        if (run_done(e, t, w)) dead = t;
        t = NULL;
    }
    /* leave (the lock held) */
    if (w->prev) w->prev->next = w->next;
    else e->workers = w->next;
    if (w->next) w->next->prev = w->prev;
    e->nthreads--;
    atomic_fetch_sub_explicit(&pool_threads, 1, memory_order_relaxed);
    e->st.threads_live--;
    if (e->nthreads == 0 && e->shut) weft__wq_wake_all(&e->closers);
    free(w);
    unlock(e); /* a closer may free e from here on */
    if (dead) task_free(dead);
    weft__pcancel_disable();
    return NULL;
}

/* ---- the virtual executor's vthreads ------------------------------------------ */

static void *vtask_main(void *arg) {
    task *t = arg;
    weft_executor *e = t->ex;
    lock(e);
    int run = t->state == T_QUEUED && !t->cancel_req;
    if (run) {
        t->state = T_RUNNING;
        t->vt = weft_self();
    } else if (t->state == T_QUEUED) { /* close_now came before it started */
        t->state = T_CANCELLED;
        e->st.cancelled++;
    } /* else CANCELLED by its owner's cancel */
    unlock(e);
    if (run) {
        void *r = t->fn(t->arg);
        atomic_store(&t->finished, 1);
        atomic_fetch_add(&e->completed, 1);
        weft_future_complete(t->fut, r); /* -EALREADY if cancelled meanwhile */
    } else {
        weft_future_cancel(t->fut); /* -EALREADY after its owner's cancel */
    }
    lock(e);
    int last;
    if (run) {
        last = run_done(e, t, NULL);
    } else {
        list_unlink(&e->running, t);
        last = task_drop_locked(e, t, 1); /* the runner side */
    }
    e->st.threads_live--;
    if (e->st.threads_live == 0 && e->shut) weft__wq_wake_all(&e->closers);
    unlock(e); /* a closer may free e from here on */
    if (last) task_free(t);
    return NULL;
}

/* ---- constructors ------------------------------------------------------------ */

static weft_executor *ex_new(int kind, const char *label) {
    weft_executor *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    pthread_mutex_init(&e->lock, NULL);
    atomic_init(&e->refs, 1);
    e->magic = WEFT__MAGIC_EXEC;
    e->kind = kind;
    snprintf(e->label, sizeof e->label, "%s", label);
    pthread_mutex_lock(&reg_lock);
    e->reg_next = reg_head;
    if (reg_head) reg_head->reg_prev = e;
    reg_head = e;
    pthread_mutex_unlock(&reg_lock);
    return e;
}

int weft_executor_create_virtual(weft_executor **out) {
    if (!out) return -EINVAL;
    *out = ex_new(EX_VIRTUAL, "virtual");
    return *out ? 0 : -ENOMEM;
}

/* The virtual executor with its vthreads spawned into g (weft.h, "Carrier
 * groups"): everything else is the virtual executor's. */
int weft_executor_create_group(weft_executor **out, weft_group *g) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (!g) return -EINVAL;
    weft_group_stats gs;
    weft_group_stats_get(g, &gs);
    char label[32];
    snprintf(label, sizeof label, "group:%.25s", gs.name);
    weft_executor *e = ex_new(EX_VIRTUAL, label);
    if (!e) return -ENOMEM;
    e->group = g;
    *out = e;
    return 0;
}

int weft_executor_create_fixed(weft_executor **out, int threads, size_t queue_capacity, weft_reject_policy policy) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (threads < 1 || (unsigned)policy > WEFT_REJECT_BLOCK) return -EINVAL;
    char label[32];
    snprintf(label, sizeof label, "fixed:%d", threads);
    weft_executor *e = ex_new(EX_POOL, label);
    if (!e) return -ENOMEM;
    e->core = e->max = threads;
    e->cap = queue_capacity;
    e->policy = policy;
    *out = e;
    return 0;
}

int weft_executor_create_cached(weft_executor **out, int max_threads, int64_t keep_alive_ns) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (max_threads < 0) return -EINVAL;
    weft_executor *e = ex_new(EX_POOL, "cached");
    if (!e) return -ENOMEM;
    e->core = 0;
    e->max = max_threads ? max_threads : INT_MAX;
    e->grow_first = 1;
    e->keep_alive = keep_alive_ns > 0 ? keep_alive_ns : 60 * (int64_t)1000000000;
    *out = e;
    return 0;
}

int weft_executor_create_scheduled(weft_executor **out, int threads) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (threads < 1) return -EINVAL;
    char label[32];
    snprintf(label, sizeof label, "scheduled:%d", threads);
    weft_executor *e = ex_new(EX_SCHED, label);
    if (!e) return -ENOMEM;
    e->core = e->max = threads;
    *out = e;
    return 0;
}

const char *weft_executor_kind(const weft_executor *e) { return e ? e->label : NULL; }

/* ---- submission ----------------------------------------------------------------- */

static weft_future *submit_virtual(weft_executor *e, task *t) {
    lock(e);
    if (e->shut) {
        e->st.rejected++;
        unlock(e);
        return refuse(t, ESHUTDOWN);
    }
    e->outstanding++;
    e->st.submitted++;
    e->st.threads_started++;
    e->st.threads_live++;
    if (e->st.threads_live > e->st.threads_peak) e->st.threads_peak = e->st.threads_live;
    t->state = T_QUEUED;
    list_link(&e->running, t); /* so that close_now finds it before it starts */
    unlock(e);
    weft_thread_opts a = {.name = "executor task", .group = e->group};
    int r = weft_spawn(NULL, vtask_main, t, &a);
    if (r < 0) {
        lock(e);
        list_unlink(&e->running, t);
        e->outstanding--;
        e->st.submitted--;
        e->st.threads_started--;
        e->st.threads_live--;
        e->st.rejected++;
        if (e->shut && e->outstanding == 0) weft__wq_wake_all(&e->closers);
        unlock(e);
        return refuse(t, r);
    }
    return accepted(t);
}

/* A scheduled task in, lock held.  0 or -errno. */
static int sched_push(weft_executor *e, task *t) {
    int r = q_push(e, t);
    if (r < 0) return r;
    if (e->nthreads < e->core) {
        if (worker_start(e, NULL) < 0 && e->nthreads == 0) {
            q_remove(e, t);
            return -EAGAIN;
        }
    } else if (q_first(e) == t) {
        weft__wq_wake_one(&e->idle); /* due before what the idle threads wait for */
    }
    return 0;
}

static weft_future *submit_pool(weft_executor *e, task *t, int64_t deadline) {
    task *victim = NULL;
    lock(e);
    for (;;) {
        if (e->shut) {
            e->st.rejected++;
            unlock(e);
            return refuse(t, ESHUTDOWN);
        }
        if (e->kind == EX_SCHED) {
            int r = sched_push(e, t);
            if (r < 0) {
                e->st.rejected++;
                unlock(e);
                return refuse(t, -r);
            }
            break;
        }
        if (e->idle.head) { /* an idle thread takes it */
            q_push(e, t); /* a FIFO push cannot fail */
            weft__wq_wake_one(&e->idle);
            break;
        }
        int grow = e->nthreads < e->core || (e->grow_first && e->nthreads < e->max);
        if (grow) {
            int r = worker_start(e, t);
            if (r == 0) break;
            if (e->nthreads == 0) { /* nobody will ever run it */
                e->st.rejected++;
                unlock(e);
                return refuse(t, -r);
            }
            q_push(e, t); /* a running thread will */
            break;
        }
        if (e->cap == 0 || e->st.queued < e->cap) {
            q_push(e, t);
            break;
        }
        if (e->nthreads < e->max && worker_start(e, t) == 0) break;
        /* saturated: the policy */
        if (e->policy == WEFT_REJECT_BLOCK) {
            int r = wait_on(e, &e->blockers, deadline, 0);
            if (r < 0) { /* (a waker whose wake lost to this woke the next) */
                e->st.rejected++;
                unlock(e);
                return refuse(t, -r);
            }
            continue;
        }
        e->st.rejected++;
        if (e->policy == WEFT_REJECT_DISCARD_OLDEST && e->qh) {
            victim = e->qh;
            q_remove(e, victim);
            victim->state = T_CANCELLED; /* its runner side is ours now */
            q_push(e, t);
            break;
        }
        unlock(e);
        if (e->policy == WEFT_REJECT_CALLER_RUNS) {
            void *r = t->fn(t->arg);
            weft_future_complete(t->fut, r);
            weft_future *f = t->fut;
            free(t);
            return f;
        }
        return refuse(t, e->policy == WEFT_REJECT_DISCARD ? ECANCELED : EBUSY);
    }
    e->outstanding++;
    e->st.submitted++;
    unlock(e);
    if (victim) {
        weft_future_cancel(victim->fut);
        task_drop(victim, 1);
    }
    return accepted(t);
}

weft_future *weft_submit_until(weft_executor *e, void *(*fn)(void *), void *arg, int64_t deadline_ns) {
    if (!e || !fn) return errno = EINVAL, NULL;
    task *t = task_new(e, fn, arg);
    if (!t) return errno = ENOMEM, NULL;
    if (e->kind == EX_VIRTUAL) return submit_virtual(e, t);
    t->when = weft_now();
    return submit_pool(e, t, deadline_ns);
}

weft_future *weft_submit(weft_executor *e, void *(*fn)(void *), void *arg) {
    return weft_submit_until(e, fn, arg, 0);
}

static weft_future *schedule(weft_executor *e, void *(*fn)(void *), void *arg, int64_t first, int64_t period,
                             int fixed_rate) {
    if (!e || !fn || e->kind != EX_SCHED || period < 0) return errno = EINVAL, NULL;
    task *t = task_new(e, fn, arg);
    if (!t) return errno = ENOMEM, NULL;
    t->when = weft__sleep_deadline(first); /* (saturated; now for first <= 0) */
    t->period = period;
    t->fixed_rate = fixed_rate != 0;
    return submit_pool(e, t, 0);
}

weft_future *weft_schedule(weft_executor *e, void *(*fn)(void *), void *arg, int64_t delay_ns) {
    return schedule(e, fn, arg, delay_ns, 0, 0);
}

weft_future *weft_schedule_every(weft_executor *e, void *(*fn)(void *), void *arg, int64_t first_ns,
                                 int64_t period_ns, int fixed_rate) {
    if (period_ns <= 0) return errno = EINVAL, NULL;
    return schedule(e, fn, arg, first_ns, period_ns, fixed_rate);
}

/* ---- shutdown and close ---------------------------------------------------------- */

/* Takes queued tasks off, lock held: all of them (all != 0) or the periodic
 * ones.  Each becomes CANCELLED; its runner side passes to the caller, who
 * fails their futures and drops that reference after unlocking
 * (cancel_list).  Returns them as a list through next. */
static task *unqueue(weft_executor *e, int all, int *count) {
    task *out = NULL;
    int n = 0;
    for (;;) {
        task *t = NULL;
        if (e->kind == EX_SCHED) {
            for (size_t i = 0; i < e->heap.n; i++)
                if (all || ((task *)e->heap.a[i])->period) {
                    t = e->heap.a[i];
                    break;
                }
        } else if (all) {
            t = e->qh;
        }
        if (!t) break;
        q_remove(e, t);
        t->state = T_CANCELLED;
        e->st.cancelled++;
        t->next = out;
        out = t;
        n++;
    }
    if (n && e->shut) weft__wq_wake_all(&e->idle); /* threads waiting for a task due later may be done */
    if (count) *count = n;
    return out;
}

static void cancel_list(task *l) {
    while (l) {
        task *next = l->next;
        weft_future_cancel(l->fut); /* -EALREADY if its owner cancelled it first */
        task_drop(l, 1);
        l = next;
    }
}

/* Shuts e down, lock held; returns the periodic tasks it took off. */
static task *shut_locked(weft_executor *e) {
    if (e->shut) return NULL;
    e->shut = 1;
    weft__wq_wake_all(&e->blockers);
    weft__wq_wake_all(&e->idle);
    task *l = unqueue(e, 0, NULL);
    if (e->outstanding == 0) weft__wq_wake_all(&e->closers);
    return l;
}

int weft_executor_shutdown(weft_executor *e) {
    if (!e) return -EINVAL;
    lock(e);
    task *l = shut_locked(e);
    unlock(e);
    cancel_list(l);
    return 0;
}

static int quiet(const weft_executor *e) { return e->outstanding == 0 && e->nthreads == 0 && e->st.threads_live == 0; }

static int await_locked(weft_executor *e, int64_t deadline, int nocancel) {
    while (!quiet(e)) {
        int r = wait_on(e, &e->closers, deadline, nocancel);
        if (r < 0) return r;
    }
    return 0;
}

int weft_executor_await(weft_executor *e, int64_t deadline_ns) {
    if (!e) return -EINVAL;
    lock(e);
    int r = e->shut ? await_locked(e, deadline_ns, 0) : -EINVAL;
    unlock(e);
    return r;
}

/* Cancels what is queued and what runs, lock held; the queued list comes
 * back for cancel_list. */
static task *cancel_all_locked(weft_executor *e, int *count) {
    task *l = unqueue(e, 1, count);
    for (task *t = e->running; t; t = t->next) {
        t->cancel_req = 1;
        if (t->vt) weft_cancel(t->vt);
        else if (t->w && t->w->pc) weft__pcancel_fire(t->w->pc);
    }
    return l;
}

/* A closed executor is freed: a close after that is a use after free,
 * stopped with a message where it can be (sched.h, "heap objects"). */
_Static_assert(offsetof(struct weft_executor, magic) >= 32 &&
               offsetof(struct weft_executor, magic) + 4 <= sizeof(struct weft_executor) - 8,
               "the magic word must lie where glibc's free leaves it");
#define CHECK_OPEN(e, call) WEFT__CHECK_LIVE(e, WEFT__MAGIC_EXEC, call, "not an open executor (closed already?)")

static void ex_free(weft_executor *e) {
    pthread_mutex_lock(&reg_lock);
    if (e->reg_prev) e->reg_prev->reg_next = e->reg_next;
    else reg_head = e->reg_next;
    if (e->reg_next) e->reg_next->reg_prev = e->reg_prev;
    pthread_mutex_unlock(&reg_lock);
    /* the last thread to leave unlocked e->lock as its last touch of e */
    pthread_mutex_lock(&e->lock);
    pthread_mutex_unlock(&e->lock);
    WEFT__KILL(e); /* closed: a second close stops, even while an operation keeps e */
    weft__executor_unref(e); /* the owner's: an operation's keeps it (shut) */
}

/* An asynchronous operation's reference (exec.h): a closed executor's
 * memory lives on, shut, until the operation has handed it its handler --
 * which it refuses (-ESHUTDOWN), so the dispatcher runs it. */
void weft__executor_ref(weft_executor *e) { atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); }

void weft__executor_unref(weft_executor *e) {
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
    pthread_mutex_destroy(&e->lock);
    weft__heap_fini(&e->heap);
    free(e);
}

int weft_executor_close(weft_executor *e) {
    if (!e) return -EINVAL;
    CHECK_OPEN(e, "weft_executor_close");
    lock(e);
    task *l = shut_locked(e);
    unlock(e);
    cancel_list(l);
    lock(e);
    int r = await_locked(e, 0, 0);
    if (r < 0) { /* cancelled (or the caller's deadline): cancel the rest, then wait for it */
        l = cancel_all_locked(e, NULL);
        unlock(e);
        cancel_list(l);
        lock(e);
        await_locked(e, 0, 1);
        r = -ECANCELED;
    }
    unlock(e);
    ex_free(e);
    return r;
}

int weft_executor_close_now(weft_executor *e) {
    if (!e) return -EINVAL;
    CHECK_OPEN(e, "weft_executor_close_now");
    int n = 0;
    lock(e);
    task *l = shut_locked(e);
    unlock(e);
    cancel_list(l);
    lock(e);
    l = cancel_all_locked(e, &n);
    unlock(e);
    cancel_list(l);
    lock(e);
    await_locked(e, 0, 1);
    unlock(e);
    ex_free(e);
    return n;
}

/* ---- counters -------------------------------------------------------------------- */

int weft_executor_stats_get(weft_executor *e, weft_executor_stats *s) {
    if (!e || !s) return -EINVAL;
    lock(e);
    *s = e->st;
    s->completed = atomic_load(&e->completed);
    unlock(e);
    return 0;
}

void weft__executors_each(void (*fn)(const char *label, const weft_executor_stats *s, int shut, void *ctx),
                          void *ctx) {
    pthread_mutex_lock(&reg_lock);
    for (weft_executor *e = reg_head; e; e = e->reg_next) {
        lock(e);
        weft_executor_stats s = e->st;
        s.completed = atomic_load(&e->completed);
        int shut = e->shut;
        unlock(e);
        fn(e->label, &s, shut, ctx);
    }
    pthread_mutex_unlock(&reg_lock);
}
