/*
 * The observe layer's entry points for the runtime (runtime/runtime.c),
 * which starts and stops it with the rest: the dump on a signal, and the
 * live console.  Everything observe offers users is in weft.h.
 */
#ifndef WEFT_OBSERVE_H
#define WEFT_OBSERVE_H

/* dump.c, from weft_init: WEFT_DUMP_ON_SIGQUIT=text|json arms the dump on
 * SIGQUIT; in a fork child, re-arms what the parent had armed. */
void weft__dump_env(void);

/* console.c: the live console (weft.h, "The live console").  start: from
 * weft_init, under its lock, once the carriers run; path: the
 * configuration's (NULL: $WEFT_CONSOLE).  Returns 0 (no console asked
 * for, or one serving), or -errno after one line on stderr.  stop: from
 * weft_shutdown, before the carriers stop (and from weft_init's failure
 * path); does nothing when none runs. */
int weft__console_start(const char *path);
void weft__console_stop(void);

#endif /* WEFT_OBSERVE_H */
