/* The register fill and check (switch_regs.c, tests/lib/test_threads.c):
 * every callee-saved register and the FP rounding mode. */
    .text

/* long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed): fills every
 * callee-saved register and the rounding mode from seed, calls fn(arg) -- a
 * switch (switch_regs.c) or a move to another carrier (test_threads.c) --
 * then counts those that changed. */
    .globl  weft_test_regs_call
    .type   weft_test_regs_call, @function
weft_test_regs_call:
    pushq   %rbp
    pushq   %rbx
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    subq    $24, %rsp               /* 0: seed, 8: the caller's MXCSR, 12: ours */
    movq    %rdx, (%rsp)
    stmxcsr 8(%rsp)
    movl    %edx, %eax
    andl    $3, %eax
    shll    $13, %eax
    orl     $0x1F80, %eax
    movl    %eax, 12(%rsp)
    ldmxcsr 12(%rsp)
    leaq    1(%rdx), %rbx
    leaq    2(%rdx), %rbp
    leaq    3(%rdx), %r12
    leaq    4(%rdx), %r13
    leaq    5(%rdx), %r14
    leaq    6(%rdx), %r15
    movq    %rdi, %rax
    movq    %rsi, %rdi
    call    *%rax
    movq    (%rsp), %rdx
    xorl    %ecx, %ecx
    leaq    1(%rdx), %rax
    cmpq    %rax, %rbx
    je      1f
    incq    %rcx
1:  leaq    2(%rdx), %rax
    cmpq    %rax, %rbp
    je      2f
    incq    %rcx
2:  leaq    3(%rdx), %rax
    cmpq    %rax, %r12
    je      3f
    incq    %rcx
3:  leaq    4(%rdx), %rax
    cmpq    %rax, %r13
    je      4f
    incq    %rcx
4:  leaq    5(%rdx), %rax
    cmpq    %rax, %r14
    je      5f
    incq    %rcx
5:  leaq    6(%rdx), %rax
    cmpq    %rax, %r15
    je      6f
    incq    %rcx
6:  stmxcsr 16(%rsp)
    movl    16(%rsp), %eax
    cmpl    12(%rsp), %eax
    je      7f
    incq    %rcx
7:  ldmxcsr 8(%rsp)
    movq    %rcx, %rax
    addq    $24, %rsp
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbx
    popq    %rbp
    ret
    .size   weft_test_regs_call, .-weft_test_regs_call
    .section .note.GNU-stack,"",@progbits
