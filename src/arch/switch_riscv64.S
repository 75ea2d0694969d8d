/*
 * Context switch for riscv64 (LP64D); the x86-64 one (switch_x86_64.S)
 * says what a switch is.  A suspended context is its stack pointer; the
 * 208 bytes above it hold, from low to high: ra, s0-s11, fs0-fs11 and
 * fcsr (the rounding mode is the context's own, as MXCSR is on x86-64).
 * These are the registers the psABI says a callee must preserve.  s0 is
 * the frame pointer and is saved like the others, so frame walks of a
 * suspended context start from it.
 */
    .text

/* void *weft__ctx_switch(void **save_sp, void *to_sp, void *arg) */
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, @function
    .p2align 2
weft__ctx_switch:
    .cfi_startproc
    addi    sp, sp, -208
    .cfi_def_cfa_offset 208
    sd      ra, 0(sp)
    .cfi_offset ra, -208
    sd      s0, 8(sp)
    sd      s1, 16(sp)
    sd      s2, 24(sp)
    sd      s3, 32(sp)
    sd      s4, 40(sp)
    sd      s5, 48(sp)
    sd      s6, 56(sp)
    sd      s7, 64(sp)
    sd      s8, 72(sp)
    sd      s9, 80(sp)
    sd      s10, 88(sp)
    sd      s11, 96(sp)
    fsd     fs0, 104(sp)
    fsd     fs1, 112(sp)
    fsd     fs2, 120(sp)
    fsd     fs3, 128(sp)
    fsd     fs4, 136(sp)
    fsd     fs5, 144(sp)
    fsd     fs6, 152(sp)
    fsd     fs7, 160(sp)
    fsd     fs8, 168(sp)
    fsd     fs9, 176(sp)
    fsd     fs10, 184(sp)
    fsd     fs11, 192(sp)
    frcsr   t0
    sd      t0, 200(sp)
    sd      sp, 0(a0)
    mv      sp, a1
    ld      t0, 200(sp)
    fscsr   t0
    ld      ra, 0(sp)
    ld      s0, 8(sp)
    ld      s1, 16(sp)
    ld      s2, 24(sp)
    ld      s3, 32(sp)
    ld      s4, 40(sp)
    ld      s5, 48(sp)
    ld      s6, 56(sp)
    ld      s7, 64(sp)
    ld      s8, 72(sp)
    ld      s9, 80(sp)
    ld      s10, 88(sp)
    ld      s11, 96(sp)
    fld     fs0, 104(sp)
    fld     fs1, 112(sp)
    fld     fs2, 120(sp)
    fld     fs3, 128(sp)
    fld     fs4, 136(sp)
    fld     fs5, 144(sp)
    fld     fs6, 152(sp)
    fld     fs7, 160(sp)
    fld     fs8, 168(sp)
    fld     fs9, 176(sp)
    fld     fs10, 184(sp)
    fld     fs11, 192(sp)
    addi    sp, sp, 208
    .cfi_def_cfa_offset 0
    mv      a0, a2
    ret
    .cfi_endproc
    .size   weft__ctx_switch, .-weft__ctx_switch

/*
 * First code a new context runs: entry and its argument were placed in s1
 * and s2 by weft__ctx_make; the switch's arg is in a0.  Calls entry(arg,
 * switch_arg).  s0 (fp) is 0 so that frame walks end here.
 */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, @function
    .p2align 2
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined ra
    mv      a1, a0
    mv      a0, s2
    jalr    s1
    unimp
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline

    .section .note.GNU-stack,"",@progbits
