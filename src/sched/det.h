/*
 * Deterministic mode (det.c): the scheduler's hooks.  sched.c calls these at
 * its decision points when weft__det_on is set; see det.c's top comment for
 * the design and what is and is not guaranteed.
 */
#ifndef WEFT_SCHED_DET_H
#define WEFT_SCHED_DET_H

#include "sched.h"

#include <stdatomic.h>

/* 1 between a deterministic weft_init and the matching weft_shutdown (and
 * from load with $WEFT_DETERMINISTIC set: det.c).  Written by weft_init /
 * weft_shutdown while no carrier runs; read everywhere, relaxed (a plain
 * load: one predictable branch per decision) -- atomic because a platform
 * thread may read it while another starts the runtime. */
extern _Atomic int weft__det_on;
#define WEFT__DET_ON() atomic_load_explicit(&weft__det_on, memory_order_relaxed)

/* weft_init: is the mode asked for (cfg->deterministic, else
 * $WEFT_DETERMINISTIC)?  1 on (*seed, *trace set: trace NULL for none),
 * 0 off, -EINVAL for a bad seed or flag. */
int weft__det_resolve(const weft_runtime_opts *cfg, uint64_t *seed, const char **trace);
/* weft_init, before any carrier starts: resets the clock, the generator
 * and the run set, opens the trace (-errno if it cannot). */
int weft__det_start(uint64_t seed, const char *trace);
/* weft_shutdown, after the carriers ended: closes the trace, frees the set. */
void weft__det_stop(void);
/* the fork child: forgets the parent's mode (its run set names vthreads
 * that do not exist here; the fresh runtime resolves the mode again) */
void weft__det_fork_child(void);

/* The virtual clock (ns; starts at WEFT__DET_EPOCH). */
int64_t weft__det_now(void);
/* The carrier, idle with timers pending: the clock jumps to `to`. */
void weft__det_jump(int64_t to);
/* While no runtime runs: a platform thread's real wait for virtual
 * deadline t ended; the clock moves to t if it is behind (CAS). */
void weft__det_clock_reach(int64_t t);
/* A deadline on the virtual clock as a CLOCK_MONOTONIC one, for a platform
 * thread's real wait: now + (d - virtual now). 0 stays 0. */
int64_t weft__det_real_deadline(int64_t d);

/* A platform thread's timed wait, on the virtual clock: registered while
 * it waits (the node on its stack); the carrier ends it with TIMEDOUT when
 * the clock reaches its deadline, and counts it among the pending timers
 * it may jump to.  _add and _del from the waiting thread; _fire and _min
 * from the carrier. */
typedef struct weft__det_pwait {
    struct weft__det_pwait *next, *prev;
    weft__parker *p;
    uint64_t token;
    int64_t deadline;
} weft__det_pwait;
void weft__det_pwait_add(weft__det_pwait *w);
void weft__det_pwait_del(weft__det_pwait *w);
int64_t weft__det_pwait_min(void); /* INT64_MAX: none */
void weft__det_pwait_fire(int64_t now);

/* A seeded choice in [0, n) for a decision made on the carrier (n > 1:
 * one draw; n <= 1: 0, no draw).  On any other thread (a platform thread,
 * the blocking pool) 0 and no draw: their timing is real, and drawing
 * there would make the carrier's sequence depend on it. */
uint32_t weft__det_choose(uint32_t n, const char *what);

/* The run set: every runnable vthread, owned by the carrier thread. */
void weft__det_push(weft_thread *t);
/* The seeded pick (NULL when the set is empty); writes the trace line. */
weft_thread *weft__det_pick(void);
/* A vthread that came from outside (the injection queue): traced. */
void weft__det_note_inject(weft_thread *t);

/* Parks of vthreads that something outside the carrier may end: an I/O
 * operation the kernel or the blocking pool completes (hold 1: the clock
 * waits a little for it before it jumps), or an asynchronous operations'
 * dispatcher, which may have operations in the kernel (hold 0).  While
 * any is open, an idle carrier with no timer is not deadlocked.  Carrier
 * thread only. */
void weft__det_io_begin(int hold);
void weft__det_io_end(int hold);
/* How long (real ns) the idle carrier waits for outside input before the
 * clock jumps: WEFT__DET_GRACE_NS while a platform thread is active (below),
 * WEFT__DET_IO_WAIT_NS while I/O is outstanding, else 0. */
int64_t weft__det_hold_ns(void);
void weft__det_waited(void);          /* such a wait passed: the jump may go */
/* A platform thread handed work in, or the carrier woke one: active. */
void weft__det_platform_active(void);
/* A platform thread begins to wait in weft; returns 1 if one was active
 * (the carrier may be holding the clock for it: kick it). */
int weft__det_platform_parks(void);

/* A deadlock (det.c, "Deadlock"): the idle carrier with no timer pending
 * (min: its earliest, INT64_MAX for none) asks how long (real ns) to wait
 * before it is declared -- INT64_MAX while something outside may still
 * wake a vthread; 0: now, and weft__det_deadlock reports it (a line and
 * weft_dump on stderr) and ends the process with WEFT__DET_DEADLOCK_EXIT.
 * A pick resets the count. */
int64_t weft__det_deadlock_in(int64_t min);
/* A platform thread of weft's (an executor's pool thread) begins (+1) or
 * ends (-1) a task: while any runs, no deadlock (any thread). */
void weft__det_work(int d);
_Noreturn void weft__det_deadlock(void);

#define WEFT__DET_EPOCH 1000000000000LL  /* the virtual clock's start: 1000 s */
#define WEFT__DET_TICK_NS 1000           /* the clock's advance per scheduling decision */
#define WEFT__DET_IO_WAIT_NS 5000000     /* how long (real) the idle carrier waits for I/O before a jump */
#define WEFT__DET_GRACE_NS 100000000     /* ... and for an active platform thread */
#define WEFT__DET_DEADLOCK_NS 1000000000LL /* how long (real) nothing may happen before a deadlock is declared */
#define WEFT__DET_DEADLOCK_EXIT 2         /* the exit status of a deadlocked program (as Go's) */

#endif /* WEFT_SCHED_DET_H */
