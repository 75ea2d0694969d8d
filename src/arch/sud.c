/*
 * The system call trap's registration (arch.h; hook/trap.c says what the
 * trap is for, sud_<arch>.S holds the restorer whose address range the
 * kernel lets through).  Apart from ctx.c so that the context switch can be
 * built alone (tests/arch/switch_regs.c, for every architecture).
 */
#include "arch.h"

#include <errno.h>

#if defined(__x86_64__) /* (sud_x86_64.S holds the range) */
#include <sys/prctl.h>
#ifndef PR_SET_SYSCALL_USER_DISPATCH
#define PR_SET_SYSCALL_USER_DISPATCH 59
#define PR_SYS_DISPATCH_ON 1
#define PR_SYS_DISPATCH_OFF 0
#endif

/* The kernel lets through a call whose return address lies in [lo, lo +
 * len): the restorer's syscall and the byte after it. */
int weft__sud_arm(unsigned char *sel) {
    unsigned long lo = (unsigned long)weft__sud_range_lo;
    unsigned long len = (unsigned long)(weft__sud_range_hi - weft__sud_range_lo) + 1;
    if (prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, lo, len, sel) != 0) return -errno;
    return 0;
}

void weft__sud_disarm(void) { prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_OFF, 0, 0, 0); }
#else
/* Linux has syscall user dispatch on x86 alone: the trap is not built
 * here (hook/trap.c says so when asked for it). */
int weft__sud_arm(unsigned char *sel) {
    (void)sel;
    return -ENOSYS;
}

void weft__sud_disarm(void) {}
#endif
