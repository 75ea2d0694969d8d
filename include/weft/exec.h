/*
 * weft/exec.h -- executors (java.util.concurrent.ExecutorService and its
 * kinds).  Included by weft.h; the conventions stated there apply.
 *
 * An executor runs tasks `void *fn(void *arg)` submitted to it and hands back
 * a weft_future (weft/future.h) for each, completed with fn's return value.
 * One interface, four kinds, one constructor each (weft_executor_create_KIND
 * (&e, ...): e is stored in its first parameter, 0 or -errno returned):
 *
 *   _create_virtual(&e)            a new vthread per task (Java's
 *                                  newVirtualThreadPerTaskExecutor);
 *                                  _create_group(&e, g) the same, its
 *                                  vthreads in carrier group g;
 *   _create_fixed(&e, n, cap, p)   n platform threads and a FIFO queue of
 *                                  cap tasks (0 = unbounded), policy p when
 *                                  it is full (newFixedThreadPool, or
 *                                  ThreadPoolExecutor with a bounded queue);
 *   _create_cached(&e, max, ka)    platform threads made on demand, at most
 *                                  max (0 = no limit), each ending after ka
 *                                  ns idle (newCachedThreadPool);
 *   _create_scheduled(&e, n)       n platform threads running tasks after a
 *                                  delay or periodically
 *                                  (ScheduledThreadPoolExecutor).
 *
 * Tasks on platform-thread executors run on those threads: their blocking
 * weft calls block the pthread, as work on Java's pools does.  The threads
 * start lazily, with the first tasks.  A process-wide effect: as pools
 * grow, weft grows the kernel's futex hash for the process (Linux 6.16+
 * sizes it for the CPUs, not the threads; PR_FUTEX_HASH), to twice the
 * pool threads alive, at most 65,536 buckets; it never shrinks it.
 *
 * Results and errors -- one rule: weft_submit returns NULL only for a bad
 * argument or when out of memory.  Every other refusal is a future already
 * failed, with:
 *   -EBUSY      rejected by WEFT_REJECT_ABORT (the queue is full);
 *   -ECANCELED  dropped by WEFT_REJECT_DISCARD, or, for a queued task, by
 *               WEFT_REJECT_DISCARD_OLDEST, weft_executor_close_now or a
 *               cancel of its future;
 *   -ESHUTDOWN  submitted after weft_executor_shutdown/close;
 *   -ETIMEDOUT / -ECANCELED  a WEFT_REJECT_BLOCK submitter's wait for room
 *               passed its deadline / was cancelled (the task was not
 *               queued);
 *   -EAGAIN / -ENOMEM  no thread could be started to run it.
 * Unlike Java's DiscardPolicy, whose futures never complete, every future
 * weft_submit returns is eventually filled.
 *
 * Cancelling a task: weft_future_cancel (or weft_future_fail) on its
 * future.  A task still queued is taken off the queue and never runs; a
 * running one is cancelled as a thread is (weft_cancel): its blocking weft
 * calls return -ECANCELED and weft_cancelled() says 1 -- on pool threads
 * too, where a task's cancellation ends with the task.  The future keeps
 * the first fill: the cancel.
 *
 * Ownership: the future returned is the caller's (one reference); dropping
 * it does not cancel the task (the executor holds its own reference until
 * the task has run).  An executor lives until weft_executor_close or
 * _close_now, which free it.
 *
 * Thread safety: every call may come from any vthread or platform thread,
 * tasks included (a task may submit to its own executor; it must not close
 * it).
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_EXEC_H
#define WEFT_EXEC_H

#include "future.h"

#ifdef __cplusplus
extern "C" {
#endif


/* What a full queue does with a new task (weft_executor_create_fixed). */
typedef enum {
    WEFT_REJECT_ABORT,          /* refuse it: its future fails with -EBUSY */
    WEFT_REJECT_CALLER_RUNS,    /* run it on the submitter, before weft_submit returns */
    WEFT_REJECT_DISCARD,        /* drop it: its future fails with -ECANCELED */
    WEFT_REJECT_DISCARD_OLDEST, /* drop the oldest queued task (-ECANCELED) and queue this one */
    WEFT_REJECT_BLOCK,          /* the submitter waits for room (deadline and cancellation apply) */
} weft_reject_policy;

/* Constructors: each stores the new executor in *e and returns 0, or (*e
 * then NULL where e is not) -EINVAL for a bad argument (e NULL, threads <
 * 1, max_threads < 0, an unknown policy, a NULL group) or -ENOMEM.  None
 * starts a thread. */
WEFT_API int weft_executor_create_virtual(weft_executor **e);
WEFT_API int weft_executor_create_fixed(weft_executor **e, int threads, size_t queue_capacity,
                                        weft_reject_policy policy);
/* max_threads 0: no limit.  When max_threads run, further tasks wait in a
 * FIFO queue (no rejection).  keep_alive_ns <= 0: 60 s, as Java's. */
WEFT_API int weft_executor_create_cached(weft_executor **e, int max_threads, int64_t keep_alive_ns);
WEFT_API int weft_executor_create_scheduled(weft_executor **e, int threads);
/* A virtual executor (a new vthread per task) whose vthreads run in carrier
 * group g (weft.h, "Carrier groups"); -EINVAL for a NULL g.  Its kind is
 * "group:<name>".  Close the executor before g: a task submitted while g
 * closes is refused (its future fails with -ESHUTDOWN), and g must not be
 * used at all once weft_group_close returned.  (A virtual executor's
 * vthreads go where weft_spawn with a NULL group puts them: the
 * submitting vthread's own group, or the default one.) */
WEFT_API int weft_executor_create_group(weft_executor **e, weft_group *g);

/*
 * Submits fn(arg).  Returns its future (see "Results and errors" above), or
 * NULL when e or fn is NULL or memory ran out.  On WEFT_REJECT_BLOCK
 * executors a full queue makes the caller wait (park a vthread, block a
 * pthread) until there is room, the caller's effective deadline passes or
 * it is cancelled.
 */
WEFT_API weft_future *weft_submit(weft_executor *e, void *(*fn)(void *), void *arg);
/* weft_submit with its own deadline for a WEFT_REJECT_BLOCK wait
 * (absolute, weft_now(); 0 = none; the effective deadline applies too). */
WEFT_API weft_future *weft_submit_until(weft_executor *e, void *(*fn)(void *), void *arg, int64_t deadline_ns);

/*
 * Scheduled executors only (NULL for any other).  weft_schedule runs fn
 * once, delay_ns from now.  weft_schedule_every runs it first after
 * first_ns, then again and again: fixed_rate != 0 at first + k * period
 * (a late run is followed by the next at once, never overlapping),
 * fixed_rate == 0 with period_ns between the end of one run and the start
 * of the next.  A periodic task stops when it returns non-NULL (its future
 * then completes with that value), when its future is cancelled, or at
 * shutdown; a stopped-by-cancel or shutdown future fails with -ECANCELED.
 * weft_submit on a scheduled executor is weft_schedule with delay 0.
 * Times: a delay_ns or first_ns of 0 or less means now (as Java's
 * ScheduledExecutorService treats a negative delay); period_ns must be
 * positive (NULL otherwise).  A time beyond the clock's range (weft_now()
 * plus delay, or a run's time plus period, past INT64_MAX) is saturated to
 * INT64_MAX -- never, in practice -- instead of wrapping to the past: such
 * a task does not run (a periodic one does not run again), and a one-shot
 * one keeps close waiting until it is cancelled (close_now cancels it).
 * At shutdown delayed one-shot tasks still run (close waits for them) and
 * periodic ones stop -- Java's defaults.
 */
WEFT_API weft_future *weft_schedule(weft_executor *e, void *(*fn)(void *), void *arg, int64_t delay_ns);
WEFT_API weft_future *weft_schedule_every(weft_executor *e, void *(*fn)(void *), void *arg, int64_t first_ns,
                                          int64_t period_ns, int fixed_rate);

/* Stops taking tasks (submissions then fail with -ESHUTDOWN; WEFT_REJECT_BLOCK
 * waiters wake and fail so); what was submitted still runs.  Returns at
 * once: 0, or -EINVAL. */
WEFT_API int weft_executor_shutdown(weft_executor *e);
/*
 * Waits until a shut-down executor has run every task it took and its
 * threads have ended (awaitTermination).  Returns 0, -EINVAL when e was not
 * shut down, -ETIMEDOUT at deadline_ns (absolute; 0 = none; the effective
 * deadline applies) or -ECANCELED.
 */
WEFT_API int weft_executor_await(weft_executor *e, int64_t deadline_ns);
/*
 * Shuts e down, waits for every task submitted to it, and frees it (Java's
 * close()).  If the caller is cancelled while waiting, the remaining tasks
 * are cancelled as by weft_executor_close_now and the wait goes on
 * uncancelled.  Returns 0, or -ECANCELED in that case.  Not from a task of e.
 * e is gone then: a second close (or close_now) is a use after free, which
 * the runtime stops, where it can tell, with "weft: weft_executor_close(...):
 * not an open executor" and the caller's address, then abort
 * (docs/errors.md, "Misuse").
 */
WEFT_API int weft_executor_close(weft_executor *e);
/*
 * Shuts e down, cancels every queued task (its future fails with -ECANCELED;
 * it never runs) and every running one (weft_cancel), waits for the running
 * ones to return, and frees e.  Returns the number of queued tasks cancelled
 * (Java's shutdownNow() list), or -EINVAL.
 */
WEFT_API int weft_executor_close_now(weft_executor *e);

/* Counters, as the articles' harnesses print them.  "threads" are the
 * executor's own threads: pool threads, or the vthreads of a virtual one. */
typedef struct weft_executor_stats {
    uint64_t threads_started; /* threads ever started */
    uint64_t threads_live;    /* started and not ended */
    uint64_t threads_peak;    /* highest threads_live */
    uint64_t queued;          /* tasks waiting for a thread now */
    uint64_t queued_peak;     /* highest queued */
    uint64_t submitted;       /* tasks taken (queued or handed to a thread) */
    uint64_t completed;       /* runs of a task's fn that returned */
    uint64_t rejected;        /* refused or dropped by the policy (incl. CALLER_RUNS runs), or after shutdown */
    uint64_t cancelled;       /* taken off the queue before running (cancel, close_now) */
} weft_executor_stats;

/* Fills *s with e's counters: a consistent snapshot.  Any time before
 * close.  Returns 0 or -EINVAL. */
WEFT_API int weft_executor_stats_get(weft_executor *e, weft_executor_stats *s);
/* "virtual", "fixed:N", "cached", "scheduled:N" (the dump's label). */
WEFT_API const char *weft_executor_kind(const weft_executor *e);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_EXEC_H */
