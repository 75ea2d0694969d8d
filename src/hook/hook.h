/*
 * The hook layer's entry points for the runtime (runtime/runtime.c).  The
 * interposers themselves (hook.c, locks.c) are reached by the dynamic
 * linker, not by a declaration; the C library's own functions are in libc/real.h.
 */
#ifndef WEFT_HOOK_H
#define WEFT_HOOK_H

/* weft_init: switch the hooks on or off for this runtime (cfg->hook); and
 * weft_shutdown: off */
void weft__hook_start(int cfg_hook);
void weft__hook_stop(void);

/* For the interposers of locks.c: the hooks are on and the caller is a
 * vthread, not in a signal handler (a call may park); the hooks are on and
 * the caller not in a handler (any thread). */
int weft__hook_here(void);
int weft__hook_on(void);

#endif /* WEFT_HOOK_H */
