/*
 * weft/scope.h -- structured concurrency (included by weft.h).
 *
 * A scope owns the vthreads forked in it: nothing forked in a scope
 * outlives weft_scope_close.  As Java's StructuredTaskScope:
 *
 *   weft_scope *s;
 *   if (weft_scope_create(&s, WEFT_SCOPE_FAIL_FAST, 0) < 0) ...
 *   weft_task *inv = weft_fork(s, update_inventory, order);
 *   weft_task *ord = weft_fork(s, update_order, order);
 *   int r = weft_scope_join(s);        // 0, or the first failure
 *   ... weft_task_result(inv) ...
 *   weft_scope_close(s);
 *
 * Policies:
 *   WEFT_SCOPE_ALL            join waits for every task; returns the first
 *                             failure (by completion order) or 0;
 *   WEFT_SCOPE_FAIL_FAST      the first failure cancels the other tasks and
 *                             is what join returns (ShutdownOnFailure);
 *   WEFT_SCOPE_FIRST_SUCCESS  the first success cancels the others; join
 *                             returns 0 and weft_scope_result() gives its
 *                             result; if every task fails, the first failure
 *                             (ShutdownOnSuccess).
 *
 * A task is `int fn(void *arg, void **result)`: it returns 0 (success,
 * *result its value) or an error, by convention a negative errno; a task
 * that sees -ECANCELED from a blocking call should return it.
 *
 * Deadlines.  A scope's deadline (absolute weft_now() ns; 0 = none) is
 * capped by the effective deadline of the thread that opens it, and applies
 * to every blocking call of its tasks, nested scopes included.  When it
 * passes, the scope shuts down (its tasks are cancelled) and join returns
 * -ETIMEDOUT.
 *
 * Cancellation.  Shutting a scope down cancels its running tasks
 * (weft_cancel), and cancelling a vthread cancels the scopes it owns, their
 * tasks, their tasks' scopes ... transitively.  A cancelled owner's
 * weft_scope_join returns -ECANCELED after shutting the scope down.
 *
 * Join does not wait for the cancelled.  Once FAIL_FAST has its failure or
 * FIRST_SUCCESS its success, weft_scope_join returns at once: the other
 * tasks have been cancelled, not finished.  Cancellation is cooperative
 * (their next blocking call returns -ECANCELED), so a task that is
 * computing, or that ignores the -ECANCELED, still runs, and
 * weft_task_state reads WEFT_TASK_RUNNING for it, until it returns -- or
 * until weft_scope_close, which waits for it (and then frees every task).
 * So after such a join, use what the policy answered (the failure, the
 * winner's result) and treat a task that reads RUNNING as having no
 * answer.  A scope shut down by its deadline or from outside is the same.
 * This is Java's StructuredTaskScope: join() returns once the scope is
 * shut down, subtasks possibly still running, their Subtask.state()
 * UNAVAILABLE; close() waits for them all.
 *
 * Ownership.  The thread that opens a scope (a vthread or a platform
 * thread) owns it: it forks, joins and closes it; scopes opened by one
 * thread nest, and closing a scope first closes the scopes opened inside it
 * and still open (a structure violation, reported once on stderr).  Tasks
 * are valid until weft_scope_close, which cancels what still runs, waits
 * for every task to finish (uninterruptibly: nothing may outlive it) and
 * frees the scope and its tasks.  A scope still open when the function
 * that opened it returns -- a vthread's function, or weft_main's, or a
 * platform thread reaching weft_shutdown -- would keep weft_shutdown
 * waiting for its tasks forever: the runtime names the scope and its
 * tasks on stderr, writes a thread dump and aborts instead.  (A task's
 * function that leaves one open has it closed for it, with one line.)
 *
 * Memory.  A scope holds only what its live tasks need: a task's vthread
 * (its stack, its descriptor) goes back the moment the task ends, as in
 * Java, where a scope tracks only live threads.  What stays is the task's
 * record -- state, result, error: 72 bytes -- for its handle, until the
 * program lets go of it with weft_task_release, or until close.  A scope
 * that lives as long as a server (a task per connection) forks with
 * weft_fork_released, which keeps no record at all: its memory is that of
 * the connections open now, not of every one ever served.  Policies see
 * every task's outcome either way (a released task's failure still fails
 * a FAIL_FAST scope).
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_SCOPE_H
#define WEFT_SCOPE_H

typedef enum { WEFT_SCOPE_ALL = 0, WEFT_SCOPE_FAIL_FAST = 1, WEFT_SCOPE_FIRST_SUCCESS = 2 } weft_scope_policy;
enum { WEFT_TASK_RUNNING = 0, WEFT_TASK_SUCCEEDED = 1, WEFT_TASK_FAILED = 2, WEFT_TASK_CANCELLED = 3 };


/* Opens a scope owned by the calling thread and stores it in *s.  Returns
 * 0, or (*s then NULL where s is not) -EINVAL (s NULL, an unknown policy,
 * deadline_ns < 0), -ENOMEM, or the error of starting the runtime (as
 * weft_init's). */
WEFT_API int weft_scope_create(weft_scope **s, weft_scope_policy policy, int64_t deadline_ns);

/*
 * Starts fn(arg, &result) in a new vthread of scope s.  Returns the task, or
 * NULL with errno set: EINVAL (s or fn NULL, or s closing), ECHILD (s is a
 * parent process's), ENOMEM or weft_spawn's error.  A fork
 * into a scope already shut down (policy satisfied, deadline passed,
 * cancelled) returns a task that never runs, in state WEFT_TASK_CANCELLED.
 */
WEFT_API weft_task *weft_fork(weft_scope *s, int (*fn)(void *arg, void **result), void *arg);

/*
 * weft_fork without a handle: for tasks whose outcome only the policy
 * needs (a connection's task in a server's scope).  Nothing of the task
 * stays once it ends.  Returns 0; -EINVAL (s or fn NULL, or s closing),
 * -ECANCELED (s is shut down: fn will not run), -ECHILD (s is a parent
 * process's), -ENOMEM or weft_spawn's error.
 */
WEFT_API int weft_fork_released(weft_scope *s, int (*fn)(void *arg, void **result), void *arg);

/*
 * Lets go of a task's handle: its record is freed at once if the task has
 * finished, else as it finishes.  The task itself goes on, and the policy
 * still sees its outcome.  After it, t is gone: any call with it is a use
 * after free, which the runtime stops where it can tell (as a closed
 * scope's).  NULL does nothing.
 */
WEFT_API void weft_task_release(weft_task *t);

/* Waits as the policy says (see above).  Returns 0, the failure, -ETIMEDOUT
 * (the scope's deadline) or -ECANCELED (the caller was cancelled, or the
 * scope was shut down from outside).  May be called again. */
WEFT_API int weft__scope_join_at(weft_scope *s, const char *file, int line);
WEFT_API int weft_scope_join(weft_scope *s);
#define weft_scope_join(s) weft__scope_join_at((s), __FILE__, __LINE__)

/* Shuts the scope down: cancels its running tasks; later forks do not run. */
WEFT_API void weft_scope_shutdown(weft_scope *s);

/* FIRST_SUCCESS: the winning task's result (NULL before there is one). */
WEFT_API void *weft_scope_result(weft_scope *s);

/* Cancels and joins what is left, then frees s and its tasks.  s is gone
 * then: a second close (or any call with s) is a use after free, which the
 * runtime stops, where it can tell, with "weft: weft_scope_close(...): not
 * an open scope" and the caller's address, then abort (docs/errors.md,
 * "Misuse"). */
WEFT_API void weft_scope_close(weft_scope *s);

WEFT_API int weft_task_state(weft_task *t);    /* WEFT_TASK_* */
WEFT_API void *weft_task_result(weft_task *t); /* after success */
WEFT_API int weft_task_error(weft_task *t);    /* after failure: what fn returned; -ECANCELED if cancelled */

#endif /* WEFT_SCOPE_H */
