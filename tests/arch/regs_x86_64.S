/* long weft_test_regs_switch(void **save, void *to, uint64_t seed) -- see
 * switch_regs.c: fills every callee-saved register and MXCSR's rounding mode
 * with values made from seed, switches (weft__ctx_switch(save, to, 0)),
 * and once switched back counts the registers that do not hold them. */
    .text
    .globl  weft_test_regs_switch
    .type   weft_test_regs_switch, @function
weft_test_regs_switch:
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
    xorl    %edx, %edx
    call    weft__ctx_switch
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
    .size   weft_test_regs_switch, .-weft_test_regs_switch

/* long weft_test_regs_call(void (*fn)(void *), void *arg, uint64_t seed): the same
 * fill and check around fn(arg) instead of a switch -- a call into the runtime
 * that may move the caller to another carrier (tests/lib/test_threads.c). */
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
