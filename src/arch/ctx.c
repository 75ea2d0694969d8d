/*
 * Building a fresh context for weft__ctx_switch (see switch_x86_64.S for the
 * frame layout this must match).
 */
#include "arch.h"

#include <string.h>

void weft__ctx_trampoline(void);

void *weft__ctx_make(void *hi, void (*entry)(void *, void *), void *arg) {
    /* The trampoline is entered by `ret`, with rsp 16-byte aligned, so that
     * its `call` gives entry the ABI's alignment. */
    uintptr_t top = ((uintptr_t)hi & ~(uintptr_t)15) - 16;
    uint64_t *sp = (uint64_t *)top;
    *--sp = (uint64_t)(uintptr_t)weft__ctx_trampoline; /* return address */
    *--sp = 0;                              /* rbp: ends frame-pointer walks */
    *--sp = 0;                              /* rbx */
    *--sp = (uint64_t)(uintptr_t)entry;     /* r12 */
    *--sp = (uint64_t)(uintptr_t)arg;       /* r13 */
    *--sp = 0;                              /* r14 */
    *--sp = 0;                              /* r15 */
    /* MXCSR: all exceptions masked, round to nearest; x87 CW: the same
     * defaults a new process gets. */
    *--sp = (uint64_t)0x1F80u | ((uint64_t)0x037Fu << 32);
    return sp;
}
