/*
 * Context switch for aarch64 (AAPCS64); the x86-64 one (switch_x86_64.S)
 * says what a switch is.  A suspended context is its stack pointer; the
 * 176 bytes above it hold, from low to high: x19-x28, x29 (fp) and x30
 * (lr), d8-d15 (the low halves of v8-v15: all the ABI keeps of them), and
 * FPCR with a pad word.  These are the registers a callee must preserve,
 * and FPCR's modes (rounding, flush-to-zero) are the context's own, as
 * MXCSR and the x87 control word are on x86-64.
 *
 * Hardening, on machines that have it (the instructions are hints -- no-ops
 * -- on those that do not):
 *  - BTI: every global entry starts with `bti c`, and the object carries
 *    the GNU property note that says so (below), so that the linker can
 *    mark a program built with -mbranch-protection=bti and the kernel then
 *    enforces it.
 *  - Pointer authentication: lr is signed at entry with sp as the modifier
 *    (paciasp) and saved signed; the other context's saved lr is
 *    authenticated (autiasp) once sp is back at the value it had when that
 *    context signed it.  A fresh context's lr -- the trampoline -- is
 *    signed by ctx.c with the sp the first switch into it ends at, so its
 *    first return authenticates as any other.
 * The unwind description marks the signed lr (.cfi_negate_ra_state).
 */
    .text

/* void *weft__ctx_switch(void **save_sp, void *to_sp, void *arg) */
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, %function
    .p2align 4
weft__ctx_switch:
    .cfi_startproc
    hint    34                  /* bti c */
    hint    25                  /* paciasp */
    .cfi_negate_ra_state
    sub     sp, sp, #176
    .cfi_def_cfa_offset 176
    stp     x19, x20, [sp, #0]
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    stp     x25, x26, [sp, #48]
    stp     x27, x28, [sp, #64]
    stp     x29, x30, [sp, #80]
    .cfi_offset x29, -96
    .cfi_offset x30, -88
    stp     d8, d9, [sp, #96]
    stp     d10, d11, [sp, #112]
    stp     d12, d13, [sp, #128]
    stp     d14, d15, [sp, #144]
    mrs     x9, fpcr
    str     x9, [sp, #160]
    mov     x9, sp
    str     x9, [x0]
    mov     sp, x1
    ldr     x9, [sp, #160]
    msr     fpcr, x9
    ldp     x19, x20, [sp, #0]
    ldp     x21, x22, [sp, #16]
    ldp     x23, x24, [sp, #32]
    ldp     x25, x26, [sp, #48]
    ldp     x27, x28, [sp, #64]
    ldp     x29, x30, [sp, #80]
    ldp     d8, d9, [sp, #96]
    ldp     d10, d11, [sp, #112]
    ldp     d12, d13, [sp, #128]
    ldp     d14, d15, [sp, #144]
    add     sp, sp, #176
    .cfi_def_cfa_offset 0
    mov     x0, x2
    hint    29                  /* autiasp */
    .cfi_negate_ra_state
    ret
    .cfi_endproc
    .size   weft__ctx_switch, .-weft__ctx_switch

/*
 * First code a new context runs (entered by the switch's ret): entry and
 * its argument were placed in x19 and x20 by weft__ctx_make; the switch's
 * arg is in x0.  Calls entry(arg, switch_arg).  x29 is 0 so that frame
 * walks end here.
 */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, %function
    .p2align 4
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    hint    34                  /* bti c */
    mov     x1, x0
    mov     x0, x20
    blr     x19
    brk     #0x3e8
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline

/* GNU_PROPERTY_AARCH64_FEATURE_1_AND: BTI (1) | PAC (2) */
    .section .note.gnu.property, "a"
    .p2align 3
    .word   4
    .word   16
    .word   5                   /* NT_GNU_PROPERTY_TYPE_0 */
    .asciz  "GNU"
    .word   0xc0000000
    .word   4
    .word   3
    .word   0

    .section .note.GNU-stack,"",%progbits
