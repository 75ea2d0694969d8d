/*
 * weft/signal.h -- signals as an API (Go's os/signal.Notify).  Included by
 * weft.h; the conventions stated there apply.
 *
 * A weft program that stops on SIGINT or SIGTERM asks for them once, then
 * waits for them in a vthread like for anything else:
 *
 *   sigset_t ss;
 *   sigemptyset(&ss);
 *   sigaddset(&ss, SIGINT);
 *   sigaddset(&ss, SIGTERM);
 *   weft_signal_notify(&ss);                 // from now on they are caught
 *   ...
 *   int sig = weft_signal_wait(&ss, 0);      // parks until one arrives
 *   weft_scope_shutdown(server);             // graceful shutdown
 *
 * weft_signal_notify(set) installs weft's handler for each signal in set
 * (it replaces a handler of the program's); from then on an arrival is
 * counted, whichever thread the kernel delivers it to, and wakes the
 * waiters.  Do not block the signals (pthread_sigmask): one blocked in
 * every thread never arrives.  Returns 0, or -EINVAL (set NULL, empty, or
 * holding SIGKILL, SIGSTOP or a fault -- SIGSEGV, SIGBUS, SIGILL, SIGFPE),
 * or the error of starting the runtime, making its eventfd or sigaction.
 *
 * weft_signal_wait(set, deadline_ns) takes one arrival of a signal in set
 * -- one that came before the call counts -- and returns its number (the
 * lowest first when several wait); it parks until one comes.  Any number of
 * threads, vthreads and platform threads, may wait, on overlapping sets:
 * each arrival goes to one of them.  Returns the signal, or -ETIMEDOUT (at
 * deadline_ns: absolute, weft_now(); 0 = none; the effective deadline
 * applies too), -ECANCELED, -EINVAL (set as above, or holding a signal not
 * notified), -ECHILD (in a fork child that has not called
 * weft_signal_notify itself).  Two arrivals of one signal before either is
 * delivered are one, as the kernel merges them.
 *
 * weft_signal_reset(set) gives the signals of set their default action
 * again (SIG_DFL) and drops their arrivals not taken.  Returns 0 or -EINVAL
 * (set as above).
 */
/* weft.h first: it includes this header where its concept stands, after
 * the types and sections this one uses; so this header compiles alone. */
#include "../weft.h"

#ifndef WEFT_SIGNAL_H
#define WEFT_SIGNAL_H

#include <signal.h>
#include <sys/select.h> /* sigset_t, also under -std=c11 without POSIX feature macros */

WEFT_API int weft_signal_notify(const sigset_t *set);
WEFT_API int weft_signal_wait(const sigset_t *set, int64_t deadline_ns);
WEFT_API int weft__signal_wait_at(const sigset_t *set, int64_t deadline_ns, const char *file, int line);
#define weft_signal_wait(set, d) weft__signal_wait_at((set), (d), __FILE__, __LINE__)
WEFT_API int weft_signal_reset(const sigset_t *set);

#endif /* WEFT_SIGNAL_H */
