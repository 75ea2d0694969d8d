/*
 * Structured concurrency: scopes and tasks.
 *
 * Structures.  A scope (malloc'd) has a mutex-guarded list of its tasks
 * (malloc'd, freed with the scope), counts of tasks started and still
 * running, the policy's outcome (first error, first success), a shutdown
 * flag, and at most one joiner (parker + token).  Every task runs in a
 * joinable vthread whose descriptor points at the task (weft_thread.task);
 * the scope keeps the descriptors valid until close joins them, which is
 * what makes it safe to weft_cancel a task's vthread at any time before.
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
 * takes R, then walks: for each task still running, weft__cancel_one its
 * vthread and recurse into the scopes that vthread owns.  Descriptors are
 * valid throughout: a scope cannot be closed (unlinked, joined, freed)
 * while R is held.
 *
 * Completion.  A task's vthread runs fn, then under the scope's lock
 * records the outcome, applies the policy, decrements `running`, and wakes
 * the joiner if join can now return.  After that unlock it never touches
 * the scope or the task again.  If the policy asks for a shutdown, the
 * vthread does it before the final accounting (while it still counts as
 * running, so the scope cannot be freed under it).
 *
 * Close.  Shuts the scope down, waits (uncancellable park) until no task
 * runs, joins every vthread (uncancellable), unlinks it from the registry
 * and its owner's chain, and frees it.  A task keeps its vthread's
 * descriptor (weft__thread_of of the handle: the tree walks read it), not
 * the handle.  The free poisons the scope's magic word first, and close,
 * join, fork and shutdown check it: a call with a closed scope stops the
 * program with a message rather than freeing twice (sched.h, "heap
 * objects").
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

/* Cancels the scopes t owns (R held). */
static void cancel_owned_locked(weft_thread *t) {
    for (weft_scope *s = t->scopes; s; s = s->owner_prev) cancel_tree_locked(s, 1);
}

/* Shuts s down and cancels its running tasks and their scopes (R held).
 * external: the shutdown comes from outside the policy (a cancellation,
 * weft_scope_shutdown, the deadline), so join answers -ECANCELED unless
 * the policy already had its answer. */
static void cancel_tree_locked(weft_scope *s, int external) {
    pthread_mutex_lock(&s->lock);
    s->shutdown = 1;
    if (external) s->cancelled = 1;
    pthread_mutex_unlock(&s->lock);
    /* the task list only grows, and only its owner appends; a task's
     * vthread is valid until close, which needs R */
    for (weft_task *t = s->tasks; t; t = t->next) {
        if (atomic_load(&t->state) != WEFT_TASK_RUNNING || !t->thread) continue;
        weft__cancel_one(t->thread);
        cancel_owned_locked(t->thread);
    }
    /* a joiner waiting for the policy: shutdown is an answer */
    pthread_mutex_lock(&s->lock);
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
    s->inherited = weft__sframe_total(s->bindings);
    if (!atomic_load_explicit(&weft__cancel_hook, memory_order_relaxed))
        atomic_store_explicit(&weft__cancel_hook, cancel_hook, memory_order_release);
    if (!atomic_load_explicit(&weft__scoped_exit_hook, memory_order_relaxed))
        atomic_store_explicit(&weft__scoped_exit_hook, scoped_exit, memory_order_release);
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

/* The task's vthread. */
static void *task_main(void *arg) {
    weft_task *t = arg;
    weft_scope *s = t->scope;
    weft_thread *self = weft__self();
    self->scope_deadline = s->deadline;
    weft__scoped_adopt(s->bindings); /* the opener's bindings at open */
    atomic_store_explicit(&self->task, t, memory_order_relaxed);
    void *result = NULL;
    int rc = t->fn(t->arg, &result);
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
    t->result = result;
    t->error = rc;
    int st = rc == 0 ? WEFT_TASK_SUCCEEDED : (rc == -ECANCELED || (cancelled && s->shutdown)) ? WEFT_TASK_CANCELLED
                                                                                               : WEFT_TASK_FAILED;
    if (rc != 0 && !s->first_error && st == WEFT_TASK_FAILED) s->first_error = rc;
    if (!s->shutdown) {
        if (s->policy == WEFT_SCOPE_FAIL_FAST && st == WEFT_TASK_FAILED) shut = 1;
        if (s->policy == WEFT_SCOPE_FIRST_SUCCESS && st == WEFT_TASK_SUCCEEDED) {
            s->winner = t;
            shut = 1;
        }
    }
    atomic_store(&t->state, st);
    pthread_mutex_unlock(&s->lock);
    if (shut) {
        pthread_mutex_lock(&R);
        cancel_tree_locked(s, 0);
        pthread_mutex_unlock(&R);
    }
    pthread_mutex_lock(&s->lock);
    s->running--;
    if (s->joiner && (s->running == 0 || s->shutdown)) {
        weft__unpark(s->joiner, s->joiner_token, WEFT__PS_WOKEN);
        s->joiner = NULL;
    }
    pthread_mutex_unlock(&s->lock); /* last touch of s and t */
    return NULL;
}

weft_task *weft_fork(weft_scope *s, int (*fn)(void *arg, void **result), void *arg) {
    if (!s || !fn) return NULL;
    CHECK_OPEN(s, "weft_fork");
    if (s->closing || stale(s)) return NULL;
    weft_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->scope = s;
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_lock(&s->lock);
    int shut = s->shutdown;
    if (!shut) s->running++;
    atomic_store(&t->state, shut ? WEFT_TASK_CANCELLED : WEFT_TASK_RUNNING);
    if (shut) t->error = -ECANCELED;
    pthread_mutex_unlock(&s->lock);
    if (!shut) {
        weft_thread_opts a = {.name = "task"};
        weft_thread *th;
        int r = weft_spawn(&th, task_main, t, &a);
        if (r < 0) {
            pthread_mutex_lock(&s->lock);
            s->running--;
            pthread_mutex_unlock(&s->lock);
            free(t);
            return NULL;
        }
        t->thread = weft__thread_of(th); /* the descriptor: the tree walks read it (sched.h, "handles") */
    }
    /* append (owner only); published under R so that tree walkers see a
     * task only with its thread set */
    pthread_mutex_lock(&R);
    t->next = NULL;
    if (s->tasks_tail) s->tasks_tail->next = t;
    else s->tasks = t;
    s->tasks_tail = t;
    s->ntasks++;
    int late_shut = s->shutdown && !shut;
    if (late_shut && t->thread) { /* shut down while we were spawning */
        weft__cancel_one(t->thread);
        cancel_owned_locked(t->thread);
    }
    pthread_mutex_unlock(&R);
    return t;
}

/* Join's answer once it may return (lock held): the policy's answer if it
 * has one; else, if the scope was shut down from outside, -ETIMEDOUT or
 * -ECANCELED; else (every task done) the outcome of them all. */
static int outcome_locked(weft_scope *s) {
    if (s->policy == WEFT_SCOPE_FIRST_SUCCESS && s->winner) return 0;
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
    if (stale(s)) return s->winner ? s->winner->result : NULL; /* as at the fork; no lock */
    pthread_mutex_lock(&s->lock);
    void *r = s->winner ? s->winner->result : NULL;
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
    for (weft_task *t = s->tasks; t; t = t->next)
        if (t->thread) weft__join_nocancel(t->thread, NULL);
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
    weft_task *t = s->tasks;
    while (t) {
        weft_task *nx = t->next;
        free(t);
        t = nx;
    }
    pthread_mutex_destroy(&s->lock);
    WEFT__KILL(s);
    free(s);
}

int weft_task_state(weft_task *t) { return t ? atomic_load(&t->state) : -EINVAL; }

void *weft_task_result(weft_task *t) {
    return t && atomic_load(&t->state) == WEFT_TASK_SUCCEEDED ? t->result : NULL;
}

int weft_task_error(weft_task *t) {
    if (!t) return -EINVAL;
    int st = atomic_load(&t->state);
    return st == WEFT_TASK_FAILED || st == WEFT_TASK_CANCELLED ? t->error : 0;
}

/* ---- for the dump -------------------------------------------------------- */

void weft__scopes_lock(void) { pthread_mutex_lock(&R); }
void weft__scopes_unlock(void) { pthread_mutex_unlock(&R); }
weft_scope *weft__scopes_first(void) { return live_head; }
