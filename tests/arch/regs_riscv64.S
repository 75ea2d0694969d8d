/* The register fill and check (switch_regs.c, tests/lib/test_threads.c):
 * every callee-saved register and the FP rounding mode. */
    .text

/* long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed): fills every
 * callee-saved register and the rounding mode from seed, calls fn(arg) -- a
 * switch (switch_regs.c) or a move to another carrier (test_threads.c) --
 * then counts those that changed. */
    .globl  weft_test_regs_call
    .type   weft_test_regs_call, @function
    .p2align 2
weft_test_regs_call:
    addi    sp, sp, -224
    sd      ra, 0(sp)
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
    sd      t0, 200(sp)             /* the caller's fcsr */
    sd      a2, 208(sp)             /* seed */
    .irp    i, 0,1,2,3,4,5,6,7,8,9,10,11
    addi    s\i, a2, \i + 1
    addi    t0, a2, \i + 40
    fmv.d.x fs\i, t0
    .endr
    andi    t0, a2, 3
    fsrm    t0
    mv      t1, a0
    mv      a0, a1
    jalr    t1
    ld      a2, 208(sp)
    li      a0, 0
    .irp    i, 0,1,2,3,4,5,6,7,8,9,10,11
    addi    t0, a2, \i + 1
    sub     t1, s\i, t0
    snez    t1, t1
    add     a0, a0, t1
    addi    t0, a2, \i + 40
    fmv.x.d t1, fs\i
    sub     t1, t1, t0
    snez    t1, t1
    add     a0, a0, t1
    .endr
    frrm    t1
    andi    t0, a2, 3
    sub     t1, t1, t0
    snez    t1, t1
    add     a0, a0, t1
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
    addi    sp, sp, 224
    ret
    .size   weft_test_regs_call, .-weft_test_regs_call
    .section .note.GNU-stack,"",@progbits
