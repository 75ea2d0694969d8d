/* The register fill and check (switch_regs.c, tests/lib/test_threads.c):
 * every callee-saved register and the FP rounding mode. */
    .text

/* long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed): fills every
 * callee-saved register and the rounding mode from seed, calls fn(arg) -- a
 * switch (switch_regs.c) or a move to another carrier (test_threads.c) --
 * then counts those that changed. */
    .macro  chk reg, k
    add     x9, x2, #\k
    cmp     \reg, x9
    cinc    x0, x0, ne
    .endm
    .macro  chkd reg, k
    fmov    x10, \reg
    add     x9, x2, #\k
    cmp     x10, x9
    cinc    x0, x0, ne
    .endm
    .globl  weft_test_regs_call
    .type   weft_test_regs_call, %function
weft_test_regs_call:
    hint    34                      /* bti c */
    stp     x29, x30, [sp, #-176]!
    mov     x29, sp
    stp     x19, x20, [sp, #16]
    stp     x21, x22, [sp, #32]
    stp     x23, x24, [sp, #48]
    stp     x25, x26, [sp, #64]
    stp     x27, x28, [sp, #80]
    stp     d8, d9, [sp, #96]
    stp     d10, d11, [sp, #112]
    stp     d12, d13, [sp, #128]
    stp     d14, d15, [sp, #144]
    mrs     x9, fpcr
    stp     x9, x2, [sp, #160]      /* the caller's FPCR, seed */
    add     x19, x2, #19
    add     x20, x2, #20
    add     x21, x2, #21
    add     x22, x2, #22
    add     x23, x2, #23
    add     x24, x2, #24
    add     x25, x2, #25
    add     x26, x2, #26
    add     x27, x2, #27
    add     x28, x2, #28
    add     x9, x2, #8
    fmov    d8, x9
    add     x9, x2, #9
    fmov    d9, x9
    add     x9, x2, #10
    fmov    d10, x9
    add     x9, x2, #11
    fmov    d11, x9
    add     x9, x2, #12
    fmov    d12, x9
    add     x9, x2, #13
    fmov    d13, x9
    add     x9, x2, #14
    fmov    d14, x9
    add     x9, x2, #15
    fmov    d15, x9
    and     x9, x2, #3
    lsl     x9, x9, #22             /* FPCR.RMode */
    msr     fpcr, x9
    mov     x9, x0
    mov     x0, x1
    blr     x9
    ldr     x2, [sp, #168]
    mov     x0, #0
    chk     x19, 19
    chk     x20, 20
    chk     x21, 21
    chk     x22, 22
    chk     x23, 23
    chk     x24, 24
    chk     x25, 25
    chk     x26, 26
    chk     x27, 27
    chk     x28, 28
    chkd    d8, 8
    chkd    d9, 9
    chkd    d10, 10
    chkd    d11, 11
    chkd    d12, 12
    chkd    d13, 13
    chkd    d14, 14
    chkd    d15, 15
    mrs     x10, fpcr
    and     x9, x2, #3
    lsl     x9, x9, #22
    cmp     x10, x9
    cinc    x0, x0, ne
    ldr     x9, [sp, #160]
    msr     fpcr, x9
    ldp     x19, x20, [sp, #16]
    ldp     x21, x22, [sp, #32]
    ldp     x23, x24, [sp, #48]
    ldp     x25, x26, [sp, #64]
    ldp     x27, x28, [sp, #80]
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    ldp     x29, x30, [sp], #176
    ret
    .size   weft_test_regs_call, .-weft_test_regs_call

/* BTI | PAC: this object has its landing pad (a BTI-enforcing run needs
 * every object of the program marked) */
    .section .note.gnu.property, "a"
    .p2align 3
    .word   4
    .word   16
    .word   5
    .asciz  "GNU"
    .word   0xc0000000
    .word   4
    .word   3
    .word   0
    .section .note.GNU-stack,"",%progbits
