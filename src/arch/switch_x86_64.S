/*
 * Context switch for x86-64 System V.
 *
 * A suspended context is its stack pointer; on the stack below the return
 * address lie, from high to low: rbp, rbx, r12, r13, r14, r15, and one
 * 8-byte slot holding MXCSR (low 4 bytes) and the x87 control word.  These are
 * exactly the registers the ABI says a callee must preserve, so a switch is a
 * function call that happens to return on another stack.  The caller-saved
 * registers are already dead at the call, which is what makes this cheaper
 * than swapcontext (no signal mask, no syscall).
 *
 * rbp is saved like any other register and not touched otherwise, so frame
 * pointer chains stay intact: gdb, perf and weft_dump walk a suspended
 * vthread's stack from the saved rbp.
 */
    .text

/* void *weft__ctx_switch(void **save_sp, void *to_sp, void *arg)
 * arg comes out as the return value of the switch that resumes in the
 * target (or as entry's second argument in a fresh context): the scheduler
 * passes the carrier along, so the resumed side need not look it up. */
    .globl  weft__ctx_switch
    .hidden weft__ctx_switch
    .type   weft__ctx_switch, @function
    .p2align 4
weft__ctx_switch:
    .cfi_startproc
    pushq   %rbp
    pushq   %rbx
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    subq    $8, %rsp
    stmxcsr (%rsp)
    fnstcw  4(%rsp)
    movq    %rsp, (%rdi)
    movq    %rsi, %rsp
    movq    %rdx, %rax
    ldmxcsr (%rsp)
    fldcw   4(%rsp)
    addq    $8, %rsp
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbx
    popq    %rbp
    /* ret, not pop + jmp: the scheduler switches from one call site
     * (switch_out), so the return-stack predictor's guess -- the caller on
     * the old stack -- is the right address on the new one too, and the
     * call/ret pairs stay balanced */
    ret
    .cfi_endproc
    .size   weft__ctx_switch, .-weft__ctx_switch

/*
 * First code a new context runs: entry and its argument were placed in r12
 * and r13 by weft__ctx_make; the switch's arg is in rax.  Calls
 * entry(arg, switch_arg).  rbp is 0 so that stack walks end here.
 */
    .globl  weft__ctx_trampoline
    .hidden weft__ctx_trampoline
    .type   weft__ctx_trampoline, @function
    .p2align 4
weft__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r13, %rdi
    movq    %rax, %rsi
    callq   *%r12
    ud2
    .cfi_endproc
    .size   weft__ctx_trampoline, .-weft__ctx_trampoline

    .section .note.GNU-stack,"",@progbits
