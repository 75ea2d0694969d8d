/*
 * observe layer internals: stacks of parked vthreads and the names of
 * their frames (symbolize.c).  Used by the dump (dump.c) and the monitor's
 * stall lines (monitor.c, through weft__symbolize).
 */
#ifndef WEFT_SYMBOLIZE_H
#define WEFT_SYMBOLIZE_H

#include "../sched/sched.h"

#include <stdint.h>

/* One source-level frame of a code address.  A pc inside inlined code
 * yields several: the innermost inlined function first, each with the
 * place it stands at (for an inlined one's caller: the inlining call's
 * line), the real function last.  Strings point into libdw's data, which
 * lives as long as the process: never freed, never moved. */
typedef struct weft__sym_frame {
    const char *func;  /* NULL: unknown */
    uintptr_t off;     /* pc - the function's start (the real function only) */
    const char *file;  /* NULL: no line information */
    int line;
    int inlined;       /* this frame was inlined into the next one */
} weft__sym_frame;

/* Everything known about a pc (cached: resolved once per process). */
typedef struct weft__sym {
    uintptr_t pc;
    const char *module;  /* the object's path, NULL if the pc is in none */
    uintptr_t mod_off;   /* pc - the module's load address (what addr2line takes) */
    int weft;            /* the frame is weft's own code (its src/ files, or its module) */
    int n;               /* frames (0 when nothing resolved: pc and module only) */
    weft__sym_frame f[];
} weft__sym;

/* Stack that a call into libdw may need: below this much room left, a
 * frame is not resolved (symbolize.c, "Stack room"). */
#define WEFT__SYM_STACK_NEED ((size_t)512 * 1024)
/* Bytes of stack left below the caller (a vthread's, or its OS thread's). */
size_t weft__sym_stack_left(void);

/* The symbolizer's lock: held around every use of what follows, so that
 * dumps on several threads and the monitor never run libdw at once.  The
 * first lock after start loads the process's modules (lazily: the first
 * dump pays for it). */
void weft__sym_lock(void);
void weft__sym_unlock(void);

/* The frames of return address pc (looked up at pc - 1, so that the line
 * is the call's).  Lock held.  Never NULL for a non-zero pc (on memory
 * shortage a static record with the pc alone). */
const weft__sym *weft__sym_get(uintptr_t pc);

/* 1 if file (a __FILE__ or DWARF path) is one of weft's own sources.
 * Lock held (the first lock learns where they are). */
int weft__sym_is_weft_file(const char *file);

/* The stack of parked vthread t: the return addresses from the frame that
 * switched it out up to its entry, at most max, into pcs; returns their
 * count (0: its saved context is not readable).  Unwinds with the DWARF
 * call frame information through libdw, so code built without frame
 * pointers is walked too; falls back to the frame-pointer chain when libdw
 * cannot.  Lock held.  Reads t's stack racily (it may run meanwhile) but
 * only inside its bounds: a stale word gives a wrong frame, never a fault. */
int weft__sym_stack(const weft_thread *t, uintptr_t *pcs, int max);

/* weft__symbolize for the monitor: "fn+0x4f (file.c:12, /path/module+0x1234)";
 * takes the lock only if it is free, else (a dump holds it) or when libdw
 * knows nothing of pc, answers with fallback (dladdr's names). */
int weft__sym_name(uintptr_t pc, char *buf, size_t cap, int (*fallback)(uintptr_t, char *, size_t));

/* 1 if code address pc lies in the C library's module (the one that holds
 * __errno_location; monitor.c, which finds call sites the same way). */
int weft__pc_in_libc(uintptr_t pc);

/* The unwinder: "libdw", or "frame pointers" where libdw's could not be
 * set up; and how many stacks since the lock was taken libdw could not
 * walk past their first frame (walked by the frame-pointer chain). */
const char *weft__sym_unwinder(void);
int weft__sym_fp_walks(void);

#endif /* WEFT_SYMBOLIZE_H */
