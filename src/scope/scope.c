/*
 * Structured concurrency: scopes and tasks.
 *
 * Structures.  A scope (malloc'd) has, under its mutex, two doubly linked
 * lists of task records -- `live` (forked, not finished) and `kept`
 * (finished, the program still holds the handle) -- the counts of tasks
 * forked and not yet ended, the policy's outcome (first error, the
 * winner's result), a shutdown flag, and at most one joiner (parker +
 * token).  Every task runs in a detached vthread: a server's scope that
 * lives for months holds only what its live tasks need, as Java's
 * StructuredTaskScope tracks only live threads.
 *
 * Records.  A task's record (struct weft_task, 72 bytes) is what its
 * handle reads: state, result, error.  It goes on `live` at fork; the
 * vthread stores its descriptor in it as it starts (t->thread) and, as it
 * finishes, records the outcome, clears t->thread and moves the record to
 * `kept` -- or frees it, if the program has let go of the handle
 * (weft_task_release, or weft_fork_released, which never gives one).
 * weft_task_release of a finished task frees it at once; close frees what
 * is left on `kept`.  A vthread's descriptor is read only from a record
 * on `live`, under the scope's lock: the vthread cannot finish (it needs
 * that lock to leave `live`), so the descriptor cannot be freed or reused
 * while it is read -- what makes it safe to cancel a task's vthread at any
 * time.  A record forked before the vthread starts has no descriptor yet;
 * the vthread, taking the lock to store it, sees a shutdown made meanwhile
 * and cancels itself.
 *
 * Ownership chains.  The scopes a thread owns form a chain from its
 * innermost scope (weft_thread.scopes, or a thread-local for a platform
 * thread) through scope->owner_prev.  Each scope also records its parent
 * in the tree: the owner's enclosing scope, or else the scope of the task
 * the owner runs for -- the tree weft_dump prints.
 *
 * Locks.  One global registry mutex R guards the list of live scopes and
 * every ownership chain; each scope's own mutex guards its tasks and
 * counts.  Order: R, then scope locks from parent to child.  Cancelling a
 * tree (shutdown, a failure under FAIL_FAST, weft_cancel of an owner)
 * takes R, then walks: under the scope's lock, for each record on `live`,
 * weft__cancel_one its vthread and recurse into the scopes that vthread
 * owns (their locks inside this one: parent to child).  Scopes stay
 * throughout: one cannot be closed (unlinked, freed) while R is held.
 *
 * Completion.  A task's vthread runs fn, then under the scope's lock
 * records the outcome, applies the policy (FAIL_FAST sees every failure
 * here, released or not) and takes its record off `live`.  If the policy
 * asks for a shutdown, the vthread does it next.  Then it ends, and only
 * once it has ended -- its locals' destructors run, its stack released, no
 * longer live in the counters -- does its carrier call task_ended
 * (weft__on_exit), which decrements `running` and wakes the joiner if join
 * can now return.  So "nothing forked in a scope outlives close" holds to
 * the last instruction, as joining each vthread made it hold before; the
 * scope cannot be freed while `running` counts a task.
 *
 * Close.  Shuts the scope down, waits (uncancellable park) until no task
 * runs, unlinks it from the registry and its owner's chain, and frees it
 * and the records still kept.  The free poisons the scope's magic word
 * first, and close, join, fork and shutdown check it: a call with a closed
 * scope stops the program with a message rather than freeing twice
 * (sched.h, "heap objects"); a task's calls check its record's the same
 * way (released, or its scope closed).
 *
 * Scoped values (weft/local.h, sched/local.c).  A scope captures its
 * opener's innermost scoped-value frame at open, and each task's vthread
 * adopts it before running fn: forks see the opener's bindings as they were
 * at open.  The frames live on the opener's stack, inside the
 * weft_scoped_run calls that made them, so the scope must end before the
 * innermost of them returns.  Structured code does that (a scope is closed
 * by its opener, before it returns from the function that opened it); for
 * code that does not, weft_scoped_run calls scoped_exit as its fn returns,
 * which closes -- with one line on stderr -- every scope of the calling
 * thread opened inside that frame and still open.  Those are exactly the
 * innermost ones of its chain whose captured frame is that frame (scopes
 * opened inside a nested binding were closed by its own return first), so
 * close waits for their forks before the frame goes.  A task's own leftover
 * scopes are closed by task_main the same way, before its vthread ends.
 *
 * Left open.  A scope outlives the function that opened it only by
 * mistake, and then its tasks keep weft_shutdown waiting forever (they are
 * not daemons).  So a vthread whose function returns with a scope open
 * (sched calls weft__scopes_left_hook), or a platform thread that calls
 * weft_shutdown with one open (runtime.c), stops the program: a line per
 * scope -- its id, policy, tasks forked and running, the live tasks'
 * vthreads -- then a thread dump, then abort, as a debug runtime would.
 * A task's leftovers are closed instead (task_main, above), and so are
 * those of a scoped-value frame (scoped_exit): both have a closer of
 * their own that is still running.
 *
 * Fork.  In a child process the scopes open at the fork belong to the
 * parent's runtime: their tasks' vthreads are not in the child, and their
 * locks may have been held by threads that are not either.  A pthread_atfork
 * child handler reinitialises R and moves the registry's scopes to a list
 * of their own (kept, never freed: reachable for LeakSanitizer); each scope
 * carries the fork generation it was opened in, and on a stale one join
 * returns -ECHILD, fork returns NULL, shutdown does nothing and close only
 * unlinks it from its owner's chain -- none of them waits, none touches its
 * lock.  Its tasks read as they were at the fork.
 */
#define _GNU_SOURCE
#include "scope.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t R = PTHREAD_MUTEX_INITIALIZER;
static weft_scope *live_head;
static weft_scope *forked_head; /* a parent process's scopes, in a child (see "Fork") */
static _Atomic uint64_t next_id = 1;

static int stale(const weft_scope *s) { return s->fork_gen != weft__fork_gen(); }

/* A closed scope is freed: a call with it after close is a use after free,
 * stopped with a message where it can be (sched.h, "heap objects"). */
_Static_assert(offsetof(weft_scope, magic) >= 32 && offsetof(weft_scope, magic) + 4 <= sizeof(weft_scope) - 8,
               "the magic word must lie where glibc's free leaves it");
#define CHECK_OPEN(s, call) WEFT__CHECK_LIVE(s, WEFT__MAGIC_SCOPE, call, "not an open scope (closed already?)")
_Static_assert(offsetof(weft_task, magic) >= 32 && offsetof(weft_task, magic) + 4 <= sizeof(weft_task) - 8,
               "the magic word must lie where glibc's free leaves it");
#define CHECK_TASK(t, call) \
    WEFT__CHECK_LIVE(t, WEFT__MAGIC_TASK, call, "not a task handle (released already, or its scope closed?)")

static void fork_child(void) {
    R = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (!live_head) return;
    weft_scope *tail = live_head;
    while (tail->live_next) tail = tail->live_next;
    tail->live_next = forked_head;
    if (forked_head) forked_head->live_prev = tail;
    forked_head = live_head;
    live_head = NULL;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, fork_child); }

/* The calling thread's innermost owned scope, as an lvalue. */
static weft_scope **owned_head(void) {
    weft_thread *self = weft__self();
    return self ? (weft_scope **)&self->scopes : (weft_scope **)weft__platform_scopes();
}

static void cancel_tree_locked(weft_scope *s, int external);

/* Cancels the scopes t owns (R held) -- not those it opened inside a
 * shield (weft_shield_begin): the shield keeps its cancellation from them
 * as from its own blocking calls. */
static void cancel_owned_locked(weft_thread *t) {
    for (weft_scope *s = t->scopes; s; s = s->owner_prev)
        if (!s->shielded) cancel_tree_locked(s, 1);
}

/* Shuts s down and cancels its running tasks and their scopes (R held).
 * external: the shutdown comes from outside the policy (a cancellation,
 * weft_scope_shutdown, the deadline), so join answers -ECANCELED unless
 * the policy already had its answer. */
static void cancel_tree_locked(weft_scope *s, int external) {
    pthread_mutex_lock(&s->lock);
    s->shutdown = 1;
    if (external) s->cancelled = 1;
    /* a vthread on `live` cannot finish while we hold the lock ("Records");
     * one not started yet cancels itself as it starts */
    for (weft_task *t = s->live; t; t = t->next) {
        if (!t->thread) continue;
        weft__cancel_one(t->thread);
        cancel_owned_locked(t->thread);
    }
    /* a joiner waiting for the policy: shutdown is an answer */
    if (s->joiner) {
        weft__unpark(s->joiner, s->joiner_token, WEFT__PS_WOKEN);
        s->joiner = NULL;
    }
    pthread_mutex_unlock(&s->lock);
}

/* weft_scoped_run's frame f ends (sched/local.c): close what was opened
 * inside it and left open (see "Scoped values"). */
static void scoped_exit(const weft__sframe *f) {
    weft_scope **head = owned_head();
    while (*head && (*head)->bindings == f) {
        static _Atomic int told;
        if (!atomic_exchange(&told, 1))
            fprintf(stderr, "weft: weft_scoped_run returned with scope #%llu, opened inside it, still open: "
                            "closing it\n", (unsigned long long)(*head)->id);
        weft_scope_close(*head);
    }
}

void weft__scopes_left_open(const char *who, weft_scope *head) {
    fprintf(stderr, "weft: %s with %s still open -- a scope must be closed (weft_scope_close) before the "
                    "function that opened it returns; its tasks would keep weft_shutdown waiting forever:\n",
            who, head && head->owner_prev ? "scopes" : "a scope");
    for (weft_scope *s = head; s; s = s->owner_prev) {
        pthread_mutex_lock(&s->lock);
        fprintf(stderr, "weft:   scope #%llu (%s), %llu task%s forked, %d running", (unsigned long long)s->id,
                s->policy == WEFT_SCOPE_FAIL_FAST ? "FAIL_FAST" : s->policy == WEFT_SCOPE_FIRST_SUCCESS ? "FIRST_SUCCESS" : "ALL",
                (unsigned long long)s->ntasks, s->ntasks == 1 ? "" : "s", s->running);
        int k = 0, unstarted = 0, more = 0;
        for (weft_task *t = s->live; t; t = t->next) {
            if (!t->thread) unstarted++;
            else if (k == 16) more++;
            else fprintf(stderr, "%s #%llu", k++ ? "," : ": vthreads", (unsigned long long)weft_id(t->thread));
        }
        if (more) fprintf(stderr, " and %d more", more);
        if (unstarted) fprintf(stderr, "%s%d not started yet", k ? "; " : ": ", unstarted);
        fprintf(stderr, "\n");
        pthread_mutex_unlock(&s->lock);
    }
    void (*dump)(void) = atomic_load_explicit(&weft__fatal_dump_hook, memory_order_acquire);
    if (dump) dump();
    abort();
}

static void scopes_left(weft_thread *t) {
    char name[32], who[96];
    weft__thread_name(t, name);
    snprintf(who, sizeof who, "vthread #%llu \"%s\" returned", (unsigned long long)weft_id(t), name);
    weft__scopes_left_open(who, t->scopes);
}

static void cancel_hook(weft_thread *t) {
    pthread_mutex_lock(&R);
    cancel_owned_locked(t);
    pthread_mutex_unlock(&R);
}

void weft_scope_shutdown(weft_scope *s) {
    if (!s) return;
    CHECK_OPEN(s, "weft_scope_shutdown");
    if (stale(s)) return;
    pthread_mutex_lock(&R);
    cancel_tree_locked(s, 1);
    pthread_mutex_unlock(&R);
}

int weft_scope_create(weft_scope **out, weft_scope_policy policy, int64_t deadline_ns) {
    if (!out) return -EINVAL;
    *out = NULL;
    if ((unsigned)policy > WEFT_SCOPE_FIRST_SUCCESS || deadline_ns < 0) return -EINVAL;
    int r = weft__ensure_init();
    if (r < 0) return r;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_atfork);
    weft_scope *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    pthread_mutex_init(&s->lock, NULL);
    s->magic = WEFT__MAGIC_SCOPE;
    s->id = atomic_fetch_add(&next_id, 1);
    s->fork_gen = weft__fork_gen();
    s->policy = policy;
    int64_t eff = weft__effective_deadline(0);
    s->deadline = deadline_ns && (!eff || deadline_ns < eff) ? deadline_ns : eff;
    weft_thread *self = weft__self();
    s->owner = self;
    s->owner_id = self ? weft_id(self) : 0;
    s->bindings = weft__scoped_current();
    s->shielded = weft__shielded();
    s->inherited = weft__sframe_total(s->bindings);
    if (!atomic_load_explicit(&weft__cancel_hook, memory_order_relaxed))
        atomic_store_explicit(&weft__cancel_hook, cancel_hook, memory_order_release);
    if (!atomic_load_explicit(&weft__scoped_exit_hook, memory_order_relaxed))
        atomic_store_explicit(&weft__scoped_exit_hook, scoped_exit, memory_order_release);
    if (!atomic_load_explicit(&weft__scopes_left_hook, memory_order_relaxed))
        atomic_store_explicit(&weft__scopes_left_hook, scopes_left, memory_order_release);
    weft_scope **head = owned_head();
    pthread_mutex_lock(&R);
    s->owner_prev = *head;
    if (*head) s->parent = *head;
    else if (self && atomic_load_explicit(&self->task, memory_order_relaxed))
        s->parent = ((weft_task *)atomic_load_explicit(&self->task, memory_order_relaxed))->scope;
    *head = s;
    s->live_next = live_head;
    if (live_head) live_head->live_prev = s;
    live_head = s;
    pthread_mutex_unlock(&R);
    /* opened by a thread already cancelled: born shut down */
    if (weft_cancelled()) weft_scope_shutdown(s);
    *out = s;
    return 0;
}

static void list_push(weft_task **head, weft_task *t) {
    t->prev = NULL;
    t->next = *head;
    if (*head) (*head)->prev = t;
    *head = t;
}

static void list_del(weft_task **head, weft_task *t) {
    if (t->prev) t->prev->next = t->next;
    else *head = t->next;
    if (t->next) t->next->prev = t->prev;
    t->prev = t->next = NULL;
}

static void task_free(weft_task *t) {
    WEFT__KILL(t);
    free(t);
}

/* A task's vthread has ended (its carrier calls this: weft__on_exit). */
static void task_ended(void *arg) {
    weft_scope *s = arg;
    pthread_mutex_lock(&s->lock);
    s->running--;
    if (s->joiner && (s->running == 0 || s->shutdown)) {
        weft__unpark(s->joiner, s->joiner_token, WEFT__PS_WOKEN);
        s->joiner = NULL;
    }
    pthread_mutex_unlock(&s->lock); /* last touch of s */
}

/* The task's vthread. */
static void *task_main(void *arg) {
    weft_task *t = arg;
    weft_scope *s = t->scope;
    weft_thread *self = weft__self();
    self->scope_deadline = s->deadline;
    weft__scoped_adopt(s->bindings); /* the opener's bindings at open */
    atomic_store_explicit(&self->task, t, memory_order_relaxed);
    atomic_store_explicit(&self->task_scope, s->id, memory_order_relaxed);
    weft__on_exit(task_ended, s);
    pthread_mutex_lock(&s->lock);
    t->thread = self;
    if (s->shutdown) weft__cancel_one(self); /* shut down before we could be reached */
    int (*fn)(void *, void **) = t->fn;
    void *fa = t->arg;
    pthread_mutex_unlock(&s->lock);
    void *result = NULL;
    int rc = fn(fa, &result);
    int cancelled = weft_cancelled();
    /* my own scopes must be closed by now; if fn left any open, close them
     * (a structure violation, but nothing may outlive its scope) */
    while (self->scopes) {
        static _Atomic int told;
        if (!atomic_exchange(&told, 1))
            fprintf(stderr, "weft: a task returned with scope #%llu still open: closing it\n",
                    (unsigned long long)((weft_scope *)self->scopes)->id);
        weft_scope_close(self->scopes);
    }
    int shut = 0;
    pthread_mutex_lock(&s->lock);
    int st = rc == 0 ? WEFT_TASK_SUCCEEDED : (rc == -ECANCELED || (cancelled && s->shutdown)) ? WEFT_TASK_CANCELLED
                                                                                               : WEFT_TASK_FAILED;
    if (rc != 0 && !s->first_error && st == WEFT_TASK_FAILED) s->first_error = rc;
    if (!s->shutdown) {
        if (s->policy == WEFT_SCOPE_FAIL_FAST && st == WEFT_TASK_FAILED) shut = 1;
        if (s->policy == WEFT_SCOPE_FIRST_SUCCESS && st == WEFT_TASK_SUCCEEDED) {
            s->has_winner = 1;
            s->winner_result = result;
            shut = 1;
        }
    }
    list_del(&s->live, t);
    t->thread = NULL;
    atomic_store_explicit(&self->task, NULL, memory_order_relaxed);
    if (t->released) {
        free(t); /* nobody can ask (its magic went at the release) */
    } else {
        t->result = result;
        t->error = rc;
        atomic_store(&t->state, st);
        list_push(&s->kept, t);
    }
    pthread_mutex_unlock(&s->lock); /* last touch of t */
    if (shut) {
        pthread_mutex_lock(&R);
        cancel_tree_locked(s, 0);
        pthread_mutex_unlock(&R);
    }
    return NULL; /* `running` still counts us: task_ended, once we are gone */
}

/* Fork's common part: the record, on `live` and running, or (the scope
 * shut down) on `kept`, cancelled; NULL without memory or a vthread. */
static weft_task *fork_task(weft_scope *s, int (*fn)(void *, void **), void *arg, int released) {
    weft_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->scope = s;
    t->fn = fn;
    t->arg = arg;
    t->magic = WEFT__MAGIC_TASK;
    t->released = (unsigned char)released;
    pthread_mutex_lock(&s->lock);
    s->ntasks++;
    if (s->shutdown) { /* never runs */
        t->error = -ECANCELED;
        atomic_store(&t->state, WEFT_TASK_CANCELLED);
        if (released) {
            pthread_mutex_unlock(&s->lock);
            free(t);
            errno = ECANCELED;
            return NULL;
        }
        list_push(&s->kept, t);
        pthread_mutex_unlock(&s->lock);
        return t;
    }
    atomic_store(&t->state, WEFT_TASK_RUNNING);
    s->running++;
    list_push(&s->live, t);
    pthread_mutex_unlock(&s->lock);
    weft_thread_opts a = {.name = "task"};
    int r = weft_spawn(NULL, task_main, t, &a); /* detached: its stack goes as it ends */
    if (r < 0) {
        pthread_mutex_lock(&s->lock);
        list_del(&s->live, t);
        s->running--;
        s->ntasks--;
        pthread_mutex_unlock(&s->lock);
        free(t);
        errno = -r;
        return NULL;
    }
    return t; /* (released: the vthread's now -- it may have ended and freed it already) */
}

weft_task *weft_fork(weft_scope *s, int (*fn)(void *arg, void **result), void *arg) {
    if (!s || !fn) {
        errno = EINVAL;
        return NULL;
    }
    CHECK_OPEN(s, "weft_fork");
    if (s->closing || stale(s)) {
        errno = stale(s) ? ECHILD : EINVAL;
        return NULL;
    }
    return fork_task(s, fn, arg, 0);
}

int weft_fork_released(weft_scope *s, int (*fn)(void *arg, void **result), void *arg) {
    if (!s || !fn) return -EINVAL;
    CHECK_OPEN(s, "weft_fork_released");
    if (stale(s)) return -ECHILD;
    if (s->closing) return -EINVAL;
    return fork_task(s, fn, arg, 1) ? 0 : -errno;
}

void weft_task_release(weft_task *t) {
    if (!t) return;
    CHECK_TASK(t, "weft_task_release");
    weft_scope *s = t->scope;
    if (stale(s)) { /* a parent process's: its lock may be held by a thread not here */
        WEFT__KILL(t);
        return;
    }
    pthread_mutex_lock(&s->lock);
    WEFT__KILL(t);
    if (atomic_load(&t->state) == WEFT_TASK_RUNNING) { /* on `live` (the state changes under the lock) */
        t->released = 1; /* its vthread frees it as it finishes */
    } else {
        list_del(&s->kept, t);
        free(t);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Join's answer once it may return (lock held): the policy's answer if it
 * has one; else, if the scope was shut down from outside, -ETIMEDOUT or
 * -ECANCELED; else (every task done) the outcome of them all. */
static int outcome_locked(weft_scope *s) {
    if (s->policy == WEFT_SCOPE_FIRST_SUCCESS && s->has_winner) return 0;
    if (s->policy == WEFT_SCOPE_FAIL_FAST && s->first_error) return s->first_error;
    if (s->cancelled) return s->timed_out ? -ETIMEDOUT : -ECANCELED;
    if (s->running == 0) return s->first_error;
    return -ECANCELED;
}

int weft__scope_join_at(weft_scope *s, const char *file, int line) {
    if (!s) return -EINVAL;
    CHECK_OPEN(s, "weft_scope_join");
    if (stale(s)) return -ECHILD;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->running == 0 || s->shutdown) {
            int r = outcome_locked(s);
            pthread_mutex_unlock(&s->lock);
            return r;
        }
        weft__parker *p;
        uint64_t tok = weft__park_begin(&p, WEFT__PK_GENERIC);
        if (!tok) {
            pthread_mutex_unlock(&s->lock);
            weft_scope_shutdown(s);
            return -ECANCELED;
        }
        s->joiner = p;
        s->joiner_token = tok;
        pthread_mutex_unlock(&s->lock);
        int r = weft__park_wait(p, tok, s->deadline, WEFT__WHY_SCOPE, s, file, line);
        pthread_mutex_lock(&s->lock);
        if (s->joiner == p) s->joiner = NULL;
        pthread_mutex_unlock(&s->lock);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
            pthread_mutex_lock(&s->lock);
            int settled = s->running == 0 || (s->shutdown && !s->cancelled);
            int o = outcome_locked(s);
            pthread_mutex_unlock(&s->lock);
            if (settled) return o; /* the answer was there as the wait ended */
            if (r == -ETIMEDOUT) {
                pthread_mutex_lock(&s->lock);
                s->timed_out = 1;
                pthread_mutex_unlock(&s->lock);
            }
            weft_scope_shutdown(s);
            /* an answer the policy already had stands */
            pthread_mutex_lock(&s->lock);
            o = outcome_locked(s);
            pthread_mutex_unlock(&s->lock);
            return o == -ECANCELED || o == -ETIMEDOUT ? r : o;
        }
    }
}

int(weft_scope_join)(weft_scope *s) { return weft__scope_join_at(s, NULL, 0); }

void *weft_scope_result(weft_scope *s) {
    if (!s) return NULL;
    if (stale(s)) return s->has_winner ? s->winner_result : NULL; /* as at the fork; no lock */
    pthread_mutex_lock(&s->lock);
    void *r = s->has_winner ? s->winner_result : NULL;
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Close of a parent process's scope in a fork child: out of the caller's
 * chain (with the scopes opened inside it first, as close does), if it is
 * there; nothing waited for, nothing freed (see "Fork"). */
static void close_stale(weft_scope *s) {
    s->closing = 1;
    weft_scope **head = owned_head();
    weft_scope *x = *head;
    while (x && x != s) x = x->owner_prev;
    if (!x) return;
    while (*head && *head != s) weft_scope_close(*head);
    pthread_mutex_lock(&R);
    *head = s->owner_prev;
    pthread_mutex_unlock(&R);
}

void weft_scope_close(weft_scope *s) {
    if (!s) return;
    CHECK_OPEN(s, "weft_scope_close");
    if (s->closing) return; /* (a close in progress, further out: scoped_exit, task_main) */
    if (stale(s)) {
        close_stale(s);
        return;
    }
    weft_scope **head = owned_head();
    /* scopes opened inside s and still open close first */
    while (*head && *head != s) {
        static _Atomic int told;
        if (!atomic_exchange(&told, 1))
            fprintf(stderr, "weft: scope #%llu closed while scope #%llu opened inside it is open: closing that first\n",
                    (unsigned long long)s->id, (unsigned long long)(*head)->id);
        weft_scope_close(*head);
    }
    s->closing = 1;
    weft_scope_shutdown(s);
    /* wait, uninterruptibly, until no task runs */
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->running == 0) {
            pthread_mutex_unlock(&s->lock);
            break;
        }
        weft__parker *p;
        uint64_t tok = weft__park_begin_nocancel(&p, WEFT__PK_GENERIC);
        s->joiner = p;
        s->joiner_token = tok;
        pthread_mutex_unlock(&s->lock);
        weft__park_wait(p, tok, 0, WEFT__WHY_SCOPE, s, NULL, 0);
        pthread_mutex_lock(&s->lock);
        if (s->joiner == p) s->joiner = NULL;
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_lock(&R);
    if (*head == s) *head = s->owner_prev;
    else { /* not the innermost of this thread: unlink from wherever it is */
        for (weft_scope **pp = head; *pp; pp = &(*pp)->owner_prev)
            if (*pp == s) {
                *pp = s->owner_prev;
                break;
            }
    }
    if (s->live_prev) s->live_prev->live_next = s->live_next;
    else live_head = s->live_next;
    if (s->live_next) s->live_next->live_prev = s->live_prev;
    pthread_mutex_unlock(&R);
    weft_task *t = s->kept; /* (`live` is empty: nothing runs) */
    while (t) {
        weft_task *nx = t->next;
        task_free(t);
        t = nx;
    }
    pthread_mutex_destroy(&s->lock);
    WEFT__KILL(s);
    free(s);
}

int weft_task_state(weft_task *t) {
    if (!t) return -EINVAL;
    CHECK_TASK(t, "weft_task_state");
    return atomic_load(&t->state);
}

void *weft_task_result(weft_task *t) {
    if (!t) return NULL;
    CHECK_TASK(t, "weft_task_result");
    return atomic_load(&t->state) == WEFT_TASK_SUCCEEDED ? t->result : NULL;
}

int weft_task_error(weft_task *t) {
    if (!t) return -EINVAL;
    CHECK_TASK(t, "weft_task_error");
    int st = atomic_load(&t->state);
    return st == WEFT_TASK_FAILED || st == WEFT_TASK_CANCELLED ? t->error : 0;
}

/* ---- for the dump -------------------------------------------------------- */

void weft__scopes_lock(void) { pthread_mutex_lock(&R); }
void weft__scopes_unlock(void) { pthread_mutex_unlock(&R); }
weft_scope *weft__scopes_first(void) { return live_head; }
