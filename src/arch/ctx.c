/*
 * Building a fresh context for weft__ctx_switch: a frame laid out as the
 * architecture's switch (switch_<arch>.S) restores it, whose return goes
 * to weft__ctx_trampoline, which calls entry(arg, switch_arg).  The
 * callee-saved registers start at 0 (the frame pointer among them: walks
 * end there) and the floating-point control at the defaults a new process
 * gets.
 */
#include "arch.h"

#include <string.h>

void weft__ctx_trampoline(void);

#if defined(__x86_64__)
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
#elif defined(__aarch64__)
/* lr signed as the switch's paciasp signs it: key A, modifier the stack
 * pointer the switch's autiasp will run with.  pacia1716 (x17 with x16)
 * is a hint: where the CPU or the kernel has no pointer authentication it
 * leaves x17 as it is, as autiasp then does. */
static uint64_t sign_lr(uint64_t lr, uint64_t modifier) {
    register uint64_t x17 __asm__("x17") = lr;
    register uint64_t x16 __asm__("x16") = modifier;
    __asm__("hint 8" : "+r"(x17) : "r"(x16)); /* pacia1716 */
    return x17;
}

void *weft__ctx_make(void *hi, void (*entry)(void *, void *), void *arg) {
    uintptr_t top = ((uintptr_t)hi & ~(uintptr_t)15) - 16;
    uint64_t *f = (uint64_t *)(top - 176); /* switch_aarch64.S's frame */
    memset(f, 0, 176);
    f[0] = (uint64_t)(uintptr_t)entry; /* x19 */
    f[1] = (uint64_t)(uintptr_t)arg;   /* x20 */
    /* f[10]: x29 = 0; f[11]: x30, authenticated at sp == top */
    f[11] = sign_lr((uint64_t)(uintptr_t)weft__ctx_trampoline, top);
    /* f[12..19]: d8-d15; f[20]: FPCR 0 (round to nearest, no flush) */
    return f;
}
#elif defined(__riscv) && __riscv_xlen == 64
void *weft__ctx_make(void *hi, void (*entry)(void *, void *), void *arg) {
    uintptr_t top = ((uintptr_t)hi & ~(uintptr_t)15) - 16;
    uint64_t *f = (uint64_t *)(top - 208); /* switch_riscv64.S's frame */
    memset(f, 0, 208);
    f[0] = (uint64_t)(uintptr_t)weft__ctx_trampoline; /* ra */
    f[2] = (uint64_t)(uintptr_t)entry;                /* s1 */
    f[3] = (uint64_t)(uintptr_t)arg;                  /* s2 */
    /* f[1]: s0 (fp) = 0; f[25]: fcsr 0 (round to nearest) */
    return f;
}
#else
#error "weft: no context switch for this architecture (x86-64, aarch64 and riscv64 have one)"
#endif
