/*
 * The two pieces of the system call trap (hook/trap.c) that must be
 * written in assembly, x86-64 System V.
 *
 * weft__sud_restorer: a SIGSYS handler's return.  Syscall user dispatch
 * (prctl PR_SET_SYSCALL_USER_DISPATCH) traps every system call made
 * outside one range of addresses while the carrier's selector byte says
 * BLOCK -- rt_sigreturn too.  The handler puts the selector back to BLOCK
 * before it returns (the interrupted code is the program's), so the
 * rt_sigreturn that ends it must be made from inside the range: this
 * restorer is the range (weft__sud_range_lo .. _hi), and trap.c installs
 * it as the handler's sa_restorer with the raw rt_sigaction (glibc's
 * sigaction puts its own restorer in, which lies outside).
 *
 * weft__sud_clone: a trapped clone, clone3 or fork made again from the
 * handler.  The parent returns here with the result, like any call.  The
 * child comes back from the kernel on the stack the call gave it (or, for
 * a fork, on a copy of the parent's) but inside this function, not where
 * the program called clone: it takes the registers the program had at the
 * trap from the signal frame's gregs (which it can still read: a fork's
 * copy of memory, or a vfork's parent that waits until the child has
 * exec'd or exited) and jumps to the instruction after the program's own
 * syscall with rax 0, as the kernel would have returned it there.  The
 * child has no syscall user dispatch of its own (the kernel clears it in
 * a new task), so nothing it does traps.  trap.c calls this only where
 * the child cannot race its parent for the frame (see there).
 */
    .text

    .globl  weft__sud_range_lo
    .hidden weft__sud_range_lo
    .globl  weft__sud_range_hi
    .hidden weft__sud_range_hi
    .globl  weft__sud_restorer
    .hidden weft__sud_restorer
    .type   weft__sud_restorer, @function

/*
 * The restorer's call frame information describes the kernel's signal
 * frame, so that an unwinder (the dump's, libdw; gdb) walks from the
 * handler on into the code the trap interrupted -- the program's frames,
 * where a trapped wait's call site is.  At the restorer the stack pointer
 * is the frame's ucontext (the handler's return popped pretcode), whose
 * mcontext gregs start 40 bytes in (uc_flags, uc_link, uc_stack), in
 * <sys/ucontext.h>'s REG_* order: so the caller's CFA is its saved rsp
 * (gregs[15]) and each register is saved at 40 + 8 * its REG_ index.
 * The description starts one byte early (the nop): an unwinder looks a
 * return address up at address - 1.  Offsets are written as two-byte
 * SLEB128s (valid for 0 to 8191).
 */
#define UC_GREG(i) (40 + 8 * (i))
    .macro cfi_saved dwarf_reg, greg
    .cfi_escape 0x10, \dwarf_reg, 3, 0x77, (UC_GREG(\greg) & 0x7f) | 0x80, UC_GREG(\greg) >> 7
    .endm

    .p2align 4
    .cfi_startproc simple
    .cfi_signal_frame
    /* DW_CFA_def_cfa_expression: *(rsp + gregs[REG_RSP]) */
    .cfi_escape 0x0f, 4, 0x77, (UC_GREG(15) & 0x7f) | 0x80, UC_GREG(15) >> 7, 0x06
    cfi_saved 8, 0    /* r8 */
    cfi_saved 9, 1
    cfi_saved 10, 2
    cfi_saved 11, 3
    cfi_saved 12, 4
    cfi_saved 13, 5
    cfi_saved 14, 6
    cfi_saved 15, 7   /* r15 */
    cfi_saved 5, 8    /* rdi */
    cfi_saved 4, 9    /* rsi */
    cfi_saved 6, 10   /* rbp */
    cfi_saved 3, 11   /* rbx */
    cfi_saved 1, 12   /* rdx */
    cfi_saved 0, 13   /* rax */
    cfi_saved 2, 14   /* rcx */
    cfi_saved 16, 16  /* rip: the return address column */
weft__sud_sigframe:              /* (a name for the frame in backtraces) */
    nop
weft__sud_range_lo:
weft__sud_restorer:
    movl    $15, %eax           /* __NR_rt_sigreturn */
    syscall
weft__sud_range_hi:             /* the address after the syscall: the kernel checks that one */
    hlt
    .cfi_endproc
    .size   weft__sud_restorer, . - weft__sud_restorer
    .type   weft__sud_sigframe, @function
    .size   weft__sud_sigframe, . - weft__sud_sigframe

/* long weft__sud_clone(long nr, const long args[6], const long long *gregs, int keep_sp)
 * args: rdi, rsi, rdx, r10, r8, r9 of the call; gregs: the signal frame's
 * (REG_* order of <sys/ucontext.h>); keep_sp: the child keeps the stack
 * pointer the kernel gave it (the call named a stack), else takes gregs'. */
    .globl  weft__sud_clone
    .hidden weft__sud_clone
    .type   weft__sud_clone, @function
    .p2align 4
weft__sud_clone:
    .cfi_startproc
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    pushq   %r12
    .cfi_adjust_cfa_offset 8
    pushq   %r13
    .cfi_adjust_cfa_offset 8
    movq    %rdx, %r12          /* gregs: kept by the kernel across the call */
    movl    %ecx, %r13d         /* keep_sp */
    movq    %rdi, %rax
    movq    %rsi, %rbx
    movq    0(%rbx), %rdi
    movq    8(%rbx), %rsi
    movq    16(%rbx), %rdx
    movq    24(%rbx), %r10
    movq    32(%rbx), %r8
    movq    40(%rbx), %r9
    syscall
    testq   %rax, %rax
    jz      1f
    popq    %r13
    .cfi_adjust_cfa_offset -8
    popq    %r12
    .cfi_adjust_cfa_offset -8
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    ret
1:  /* the child */
    movq    %r12, %r11
    testl   %r13d, %r13d
    jnz     2f
    movq    15*8(%r11), %rsp    /* REG_RSP */
2:  movq    0*8(%r11), %r8
    movq    1*8(%r11), %r9
    movq    2*8(%r11), %r10
    movq    4*8(%r11), %r12
    movq    5*8(%r11), %r13
    movq    6*8(%r11), %r14
    movq    7*8(%r11), %r15
    movq    8*8(%r11), %rdi
    movq    9*8(%r11), %rsi
    movq    10*8(%r11), %rbp
    movq    11*8(%r11), %rbx
    movq    12*8(%r11), %rdx
    movq    16*8(%r11), %rcx    /* REG_RIP: after the program's syscall, as the kernel leaves rcx */
    movq    17*8(%r11), %r11    /* REG_EFL: as the kernel leaves r11 */
    xorl    %eax, %eax
    jmp     *%rcx
    .cfi_endproc
    .size   weft__sud_clone, . - weft__sud_clone

/* long weft__sud_vfork(const long long *gregs, char *save, size_t cap, char *alt_top)
 * A trapped vfork made as a vfork (hook/trap.c, trapped_vfork).  The
 * child shares the parent's memory and runs on the program's stack from
 * the program's stack pointer down -- over this call's own frame, the
 * handler's and the signal frame, all of which lie below it.  So: those
 * bytes, [this frame's stack pointer, gregs[REG_RSP]), are copied to save
 * (at most cap bytes: more answers -ENOMEM, nothing done), the call is
 * made on alt_top (a stack of the caller's that the child never
 * touches), the child goes back to the program as weft__sud_clone's does,
 * and the parent -- which the kernel holds until the child has exec'd or
 * exited -- copies the bytes back and returns through them as if nothing
 * had been there.  What the child wrote at or above gregs[REG_RSP], the
 * program's own frames, stays written: as under the kernel's vfork. */
    .globl  weft__sud_vfork
    .hidden weft__sud_vfork
    .type   weft__sud_vfork, @function
    .p2align 4
weft__sud_vfork:
    .cfi_startproc
    pushq   %rbx
    .cfi_adjust_cfa_offset 8
    pushq   %rbp
    .cfi_adjust_cfa_offset 8
    pushq   %r12
    .cfi_adjust_cfa_offset 8
    pushq   %r13
    .cfi_adjust_cfa_offset 8
    pushq   %r14
    .cfi_adjust_cfa_offset 8
    pushq   %r15
    .cfi_adjust_cfa_offset 8
    movq    %rdi, %r12          /* gregs */
    movq    %rsi, %r13          /* save */
    movq    %rsp, %r14          /* lo */
    movq    15*8(%rdi), %r15    /* hi: the program's stack pointer (REG_RSP) */
    movq    %r15, %rbp
    subq    %r14, %rbp          /* the length, kept across the call */
    jbe     8f                  /* (hi not above this frame: not the stack this expects) */
    cmpq    %rdx, %rbp
    ja      8f
    movq    %rcx, %rbx          /* alt_top */
    cld
    movq    %rbp, %rcx
    movq    %r14, %rsi
    movq    %r13, %rdi
    rep movsb                   /* save <- [lo, hi) */
    movq    %rbx, %rsp
    .cfi_def_cfa %r14, 56       /* (6 pushes and the return address above lo) */
    movl    $58, %eax           /* __NR_vfork */
    syscall
    testq   %rax, %rax
    jz      1f
    movq    %rax, %rbx          /* the parent, the child gone: its pid, or -errno */
    movq    %rbp, %rcx
    movq    %r13, %rsi
    movq    %r14, %rdi
    rep movsb                   /* [lo, hi) <- save */
    movq    %r14, %rsp
    .cfi_def_cfa %rsp, 56
    movq    %rbx, %rax
    jmp     9f
8:  movq    $-12, %rax          /* -ENOMEM: nothing done */
9:  popq    %r15
    .cfi_adjust_cfa_offset -8
    popq    %r14
    .cfi_adjust_cfa_offset -8
    popq    %r13
    .cfi_adjust_cfa_offset -8
    popq    %r12
    .cfi_adjust_cfa_offset -8
    popq    %rbp
    .cfi_adjust_cfa_offset -8
    popq    %rbx
    .cfi_adjust_cfa_offset -8
    ret
1:  /* the child: back to the program (gregs still intact: the child has
     * written nothing yet), as weft__sud_clone's child */
    movq    %r12, %r11
    movq    15*8(%r11), %rsp    /* REG_RSP */
    movq    0*8(%r11), %r8
    movq    1*8(%r11), %r9
    movq    2*8(%r11), %r10
    movq    4*8(%r11), %r12
    movq    5*8(%r11), %r13
    movq    6*8(%r11), %r14
    movq    7*8(%r11), %r15
    movq    8*8(%r11), %rdi
    movq    9*8(%r11), %rsi
    movq    10*8(%r11), %rbp
    movq    11*8(%r11), %rbx
    movq    12*8(%r11), %rdx
    movq    16*8(%r11), %rcx    /* REG_RIP */
    movq    17*8(%r11), %r11    /* REG_EFL */
    xorl    %eax, %eax
    jmp     *%rcx
    .cfi_endproc
    .size   weft__sud_vfork, . - weft__sud_vfork

    .section .note.GNU-stack,"",@progbits
