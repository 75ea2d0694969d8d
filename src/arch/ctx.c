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

/* The system call trap's registration (arch.h; hook/trap.c says what it is
 * for).  The kernel lets through a call whose return address lies in
 * [lo, lo + len): the restorer's syscall and the byte after it. */
#include <errno.h>
#include <sys/prctl.h>
#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#define PR_SYS_DISPATCH_OFF 0
#endif

int weft__sud_arm(unsigned char *sel) {
    unsigned long lo = (unsigned long)weft__sud_range_lo;
    unsigned long len = (unsigned long)(weft__sud_range_hi - weft__sud_range_lo) + 1;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, lo, len, sel) != 0) return -errno;
    return 0;
}

void weft__sud_disarm(void) { prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0); }
