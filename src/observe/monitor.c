/*
 * The monitor's eyes: what a stalled carrier is doing, where, and the line
 * that says so.
 *
 * Split.  Noticing a stall and compensating for it are scheduling: they
 * live with the monitor thread in sched.c ("The monitor", "Spares"), next
 * to the counters and queues they read.  What this file does is only
 * looking: given a carrier's OS thread and the vthread it has been running
 * without a switch for the threshold, say whether the thread is blocked in
 * the kernel (pinned) or computing (a hog), name the system call, and find
 * the blocking call's site on the vthread's stack.  It runs on the monitor
 * thread, once per stall (never per look), so it may read files and take
 * the loader's lock; nothing here is on any carrier's path.
 *
 * Pinned or hog.  /proc/self/task/<tid>/syscall says "running" for a
 * thread the kernel counts as runnable (on a CPU or waiting for one: a hog
 * on a loaded machine stays a hog), else the system call's number, its six
 * arguments, and the user stack pointer and program counter at the call
 * ("-1 sp pc" when blocked outside a system call: a page fault).  The
 * kernel reads it only while the thread stays off the CPU, so the values
 * are consistent.  "Running" is not yet "computing": on a loaded machine a
 * carrier may be runnable and not run for tens of milliseconds, and then
 * even a vthread that yields all the time makes no progress the monitor
 * can see.  So the monitor passes the CPU time the carrier's thread used
 * since it first saw no progress (its CPU clock): a hog has computed at
 * least HOG_CPU_NS meanwhile.  One that has not is either between two
 * blocking calls (a loop of sleeps: "running" is read twice more, 200 us
 * apart) or waiting for a CPU, which no spare carrier would give it: not
 * a stall, the monitor looks again later.  Where /proc cannot be read (a
 * sandbox), the CPU time alone decides (the system call then unknown).
 *
 * The call site.  The vthread's stack is [t->stk.lo, t): its frames are
 * all there while it blocks.  From the reported sp upwards, the first word
 * that is a return address -- inside an executable, readable PT_LOAD
 * segment of a loaded object (dl_iterate_phdr) and right after a call
 * instruction -- and lies outside the C library (the module of
 * __errno_location) is where the program called into libc: the call site.
 * (When the pc is not in libc, the system call was made there, and the pc
 * is the site.)  Above it, the site function's frame record -- a saved
 * frame pointer that points further up the stack, followed by a return
 * address whose call could have entered the site function (could_call:
 * stale records of earlier calls lie in its locals) -- leads along the
 * chain to its callers, up to SITE_FRAMES in all (weft and its tests keep
 * frame pointers; a caller without them ends the chain early).  Words are
 * read racily (the thread may return meanwhile) and only inside the
 * stack's bounds; the worst a stale word can give is a wrong frame, never
 * a fault.  Sanitizers are told not to look at these reads (the stack
 * holds ASan's redzones, and the vthread's own writes race with them by
 * design).  A hog's line names no site: a running thread's registers can
 * only be had by interrupting it with a signal, which would also end a
 * foreign system call early (EINTR) -- not something a monitor may do to
 * code it does not own.
 *
 * What is not found here: no unwind tables are read (a site function
 * built without frame pointers ends the chain at its first frame), and a
 * statically linked program, whose libc is in the same module, gets the
 * first return address above sp, in libc.
 *
 * Names.  The site is kept as return addresses and named only when shown:
 * in a line the monitor writes, or in a dump (weft__stall_site_name).  A
 * stall nobody is told of (the default's short ones) names nothing: naming
 * loads libdw, its DWARF and, through debuginfod, libcurl and GnuTLS --
 * some 12 MB a server kept for its life after one silent stall under load.
 * A frame is named by weft__symbolize: the default uses libdw
 * (symbolize.c: "fn+0x4f (file.c:12, /path/module+0x1234)", static
 * functions included), the module offset being what addr2line takes; while
 * a dump holds libdw, or where it knows nothing of the address, dladdr
 * ("fn+0x4f (/path/module+0x1234)"; a program's own functions then need
 * -rdynamic).
 *
 * Costs: per stall, one or three small /proc reads, one walk of the loaded
 * objects' headers, a few hundred words of stack;
 * a carrier the kernel does not run is probed again at each look (three
 * reads) until it runs or turns out to be a stall.
 */
#define _GNU_SOURCE
#include "../sched/sched.h"
#include "symbolize.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SITE_FRAMES WEFT__SITE_FRAMES /* frames named in a pinned line */
#define SCAN_WORDS 512    /* how far above sp a return address into the program is looked for */
#define RECORD_WORDS 8192 /* and the site's frame record above it (frames with big buffers: 64 KiB) */
#define MAX_SEGS 256
#define HOG_CPU_NS 1000000 /* a hog has computed at least this long during its stall */

/* ---- system call names ---------------------------------------------------- */

static const struct {
    long nr;
    const char *name;
} sysnames[] = {
    {SYS_read, "read"}, {SYS_write, "write"}, {SYS_close, "close"}, {SYS_readv, "readv"},
    {SYS_writev, "writev"}, {SYS_pread64, "pread64"}, {SYS_pwrite64, "pwrite64"},
    {SYS_ioctl, "ioctl"}, {SYS_nanosleep, "nanosleep"}, {SYS_clock_nanosleep, "clock_nanosleep"},
    {SYS_futex, "futex"}, {SYS_ppoll, "ppoll"}, {SYS_pselect6, "pselect6"},
    {SYS_epoll_pwait, "epoll_pwait"}, {SYS_connect, "connect"}, {SYS_accept, "accept"},
    {SYS_accept4, "accept4"}, {SYS_recvfrom, "recvfrom"}, {SYS_sendto, "sendto"},
    {SYS_recvmsg, "recvmsg"}, {SYS_sendmsg, "sendmsg"}, {SYS_recvmmsg, "recvmmsg"},
    {SYS_sendmmsg, "sendmmsg"}, {SYS_fsync, "fsync"}, {SYS_fdatasync, "fdatasync"},
    {SYS_openat, "openat"}, {SYS_flock, "flock"}, {SYS_fcntl, "fcntl"}, {SYS_wait4, "wait4"},
    {SYS_waitid, "waitid"}, {SYS_sendfile, "sendfile"}, {SYS_msgrcv, "msgrcv"}, {SYS_msgsnd, "msgsnd"},
    {SYS_semop, "semop"}, {SYS_semtimedop, "semtimedop"}, {SYS_rt_sigtimedwait, "rt_sigtimedwait"},
    {SYS_rt_sigsuspend, "rt_sigsuspend"}, {SYS_io_uring_enter, "io_uring_enter"},
    {SYS_io_getevents, "io_getevents"}, {SYS_sched_yield, "sched_yield"}, {SYS_getrandom, "getrandom"},
    {SYS_splice, "splice"}, {SYS_copy_file_range, "copy_file_range"}, {SYS_mmap, "mmap"},
    {SYS_munmap, "munmap"}, {SYS_madvise, "madvise"}, {SYS_sync_file_range, "sync_file_range"},
#ifdef SYS_restart_syscall
    {SYS_restart_syscall, "restart_syscall"}, /* a sleep resumed after a signal */
#endif
#ifdef SYS_poll
    {SYS_poll, "poll"},
#endif
#ifdef SYS_select
    {SYS_select, "select"},
#endif
#ifdef SYS_epoll_wait
    {SYS_epoll_wait, "epoll_wait"},
#endif
#ifdef SYS_pause
    {SYS_pause, "pause"},
#endif
#ifdef SYS_open
    {SYS_open, "open"},
#endif
#ifdef SYS_epoll_pwait2
    {SYS_epoll_pwait2, "epoll_pwait2"},
#endif
#ifdef SYS_futex_waitv
    {SYS_futex_waitv, "futex_waitv"},
#endif
};

const char *weft__syscall_name(long nr) {
    for (size_t i = 0; i < sizeof sysnames / sizeof sysnames[0]; i++)
        if (sysnames[i].nr == nr) return sysnames[i].name;
    return NULL;
}

/* ---- reading another thread's stack ---------------------------------------- */

/* One word of a stack the monitor does not own: racy by design, and it may
 * be an ASan redzone. */
__attribute__((noinline, no_sanitize("address", "thread"))) static uintptr_t peek(uintptr_t a) {
    return *(volatile const uintptr_t *)a;
}

__attribute__((noinline, no_sanitize("address", "thread"))) static unsigned char peek_byte(uintptr_t a) {
    return *(volatile const unsigned char *)a;
}

/* ---- code addresses ---------------------------------------------------------- */

typedef struct seg {
    uintptr_t lo, hi;
} seg;

typedef struct segs {
    int n;
    seg s[MAX_SEGS];
} segs;

static int seg_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    segs *S = arg;
    for (int i = 0; i < info->dlpi_phnum && S->n < MAX_SEGS; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || !(ph->p_flags & PF_R)) continue;
        S->s[S->n].lo = (uintptr_t)info->dlpi_addr + ph->p_vaddr;
        S->s[S->n].hi = S->s[S->n].lo + ph->p_memsz;
        S->n++;
    }
    return 0;
}

/* The code segment holding a, or NULL. */
static const seg *code_seg(const segs *S, uintptr_t a) {
    for (int i = 0; i < S->n; i++)
        if (a >= S->s[i].lo && a < S->s[i].hi) return &S->s[i];
    return NULL;
}

/* a is a return address: in code, right after a call instruction. */
static int is_ret(const segs *S, uintptr_t a) {
    const seg *g = code_seg(S, a);
    if (!g || a - g->lo < 8) return 0;
#if defined(__x86_64__)
    if (peek_byte(a - 5) == 0xE8) return 1; /* call rel32 */
    for (int k = 2; k <= 7; k++)            /* call r/m64: FF /2 (with or without REX, SIB, disp) */
        if (peek_byte(a - (uintptr_t)k) == 0xFF && ((peek_byte(a - (uintptr_t)k + 1) >> 3) & 7) == 2) return 1;
    return 0;
#elif defined(__aarch64__)
    uint32_t insn = (uint32_t)peek_byte(a - 4) | (uint32_t)peek_byte(a - 3) << 8 |
                    (uint32_t)peek_byte(a - 2) << 16 | (uint32_t)peek_byte(a - 1) << 24;
    return (insn & 0xFC000000u) == 0x94000000u /* bl */ || (insn & 0xFFFFFC1Fu) == 0xD63F0000u /* blr */;
#elif defined(__riscv)
    /* jal ra / jalr ra (also the end of `call`: auipc ra + jalr ra), or a
     * compressed c.jalr (ra implied) in the two bytes before */
    uint32_t insn = (uint32_t)peek_byte(a - 4) | (uint32_t)peek_byte(a - 3) << 8 |
                    (uint32_t)peek_byte(a - 2) << 16 | (uint32_t)peek_byte(a - 1) << 24;
    uint32_t half = (uint32_t)peek_byte(a - 2) | (uint32_t)peek_byte(a - 1) << 8;
    return (insn & 0xFFFu) == 0x0EFu /* jal ra */ || (insn & 0x7FFFu) == 0x00E7u /* jalr ra */ ||
           ((half & 0xF07Fu) == 0x9002u && (half & 0x0F80u) != 0) /* c.jalr */;
#else
    return 1;
#endif
}

/* The call just before return address ret could have entered the function
 * that code address `callee` lies in.  A direct call (x86-64 call rel32)
 * names its target: the callee's start where dladdr knows it, else at
 * most 1 MiB before callee; or a PLT stub (a jmp through the GOT, perhaps
 * after endbr64), which may lead anywhere.  Any other call is indirect:
 * it could have.  This tells the site function's frame record from stale
 * ones left in its locals by earlier, deeper calls. */
static int could_call(const segs *S, uintptr_t ret, uintptr_t callee) {
#if defined(__x86_64__)
    if (peek_byte(ret - 5) != 0xE8) return 1;
    uint32_t rel = (uint32_t)peek_byte(ret - 4) | (uint32_t)peek_byte(ret - 3) << 8 |
                   (uint32_t)peek_byte(ret - 2) << 16 | (uint32_t)peek_byte(ret - 1) << 24;
    uintptr_t target = ret + (uintptr_t)(intptr_t)(int32_t)rel;
    if (!code_seg(S, target) || !code_seg(S, target + 7)) return 0;
    unsigned char b0 = peek_byte(target), b1 = peek_byte(target + 1);
    if ((b0 == 0xFF && b1 == 0x25) || (b0 == 0xF2 && b1 == 0xFF) ||
        (b0 == 0xF3 && b1 == 0x0F && peek_byte(target + 2) == 0x1E && peek_byte(target + 3) == 0xFA &&
         (peek_byte(target + 4) == 0xF2 || peek_byte(target + 4) == 0xFF)))
        return 1; /* a PLT stub */
    Dl_info di;
    if (dladdr((void *)callee, &di) && di.dli_saddr && (uintptr_t)di.dli_saddr <= callee &&
        callee - (uintptr_t)di.dli_saddr < (1u << 20))
        return target == (uintptr_t)di.dli_saddr;
    return target <= callee && callee - target < (1u << 20);
#else
    (void)S, (void)ret, (void)callee;
    return 1;
#endif
}

static uintptr_t module_base(uintptr_t a) {
    Dl_info di;
    return dladdr((void *)a, &di) ? (uintptr_t)di.dli_fbase : 0;
}

int weft__pc_in_libc(uintptr_t pc) {
    uintptr_t b = module_base(pc);
    return b && b == module_base((uintptr_t)&__errno_location);
}

/* ---- naming a frame ------------------------------------------------------------ */

static int dladdr_symbolize(uintptr_t pc, char *buf, size_t cap) {
    Dl_info di;
    if (!dladdr((void *)pc, &di) || !di.dli_fname) return snprintf(buf, cap, "0x%lx", (unsigned long)pc);
    const char *mod = di.dli_fname && *di.dli_fname ? di.dli_fname : "?";
    unsigned long moff = (unsigned long)(pc - (uintptr_t)di.dli_fbase);
    if (di.dli_sname)
        return snprintf(buf, cap, "%s+0x%lx (%s+0x%lx)", di.dli_sname, (unsigned long)(pc - (uintptr_t)di.dli_saddr),
                        mod, moff);
    return snprintf(buf, cap, "0x%lx (%s+0x%lx)", (unsigned long)pc, mod, moff);
}

/* libdw's names, file and line (symbolize.c), or dladdr's while a dump
 * holds the symbolizer */
static int libdw_symbolize(uintptr_t pc, char *buf, size_t cap) {
    return weft__sym_name(pc, buf, cap, dladdr_symbolize);
}

weft__symbolizer weft__symbolize = libdw_symbolize;

/* ---- the call site ---------------------------------------------------------------- */

/* Fills frames (SITE_FRAMES, 0 after the last) with the return addresses
 * of the blocking call's site and its callers: see "The call site" at the
 * top.  Names none of them (weft__stall_site_name does, when shown). */
static void find_site(const weft_thread *t, uintptr_t sp, uintptr_t pc, uintptr_t frames[SITE_FRAMES]) {
    memset(frames, 0, SITE_FRAMES * sizeof *frames);
    static segs S; /* (the monitor thread only) */
    S.n = 0;
    dl_iterate_phdr(seg_cb, &S);
    uintptr_t lo = (uintptr_t)__atomic_load_n(&t->stk.lo, __ATOMIC_RELAXED), top = (uintptr_t)t;
    int nf = 0;
    uintptr_t from = sp; /* where the site's frame record is looked for */
    int on_stack = sp >= lo && sp < top && !(sp & 7);
    uintptr_t libc = module_base((uintptr_t)&__errno_location);
    if (pc && module_base(pc) != libc) {
        frames[nf++] = pc; /* the system call was made right there */
    } else if (on_stack) {
        uintptr_t first_any = 0;
        for (uintptr_t a = sp; a + 8 <= top && a < sp + SCAN_WORDS * 8; a += 8) {
            uintptr_t w = peek(a);
            if (!is_ret(&S, w)) continue;
            if (!first_any) first_any = w;
            if (module_base(w) != libc) {
                frames[nf++] = w;
                from = a + 8;
                break;
            }
        }
        if (!nf && first_any) frames[nf++] = first_any; /* all in one module (a static program) */
    }
    if (nf && on_stack) {
        /* the site's frame record: a saved frame pointer further up, then a
         * return address; then the chain */
        uintptr_t fp = 0;
        for (uintptr_t q = from; q + 16 <= top && q < from + RECORD_WORDS * 8; q += 8) {
            uintptr_t w = peek(q), r = peek(q + 8);
            if (w > q && w + 16 <= top && !(w & 7) && is_ret(&S, r) && could_call(&S, r, frames[0])) {
                fp = q;
                break;
            }
        }
        while (fp && nf < SITE_FRAMES) {
            uintptr_t ret = peek(fp + 8), next = peek(fp);
            if (!is_ret(&S, ret) || !could_call(&S, ret, frames[nf - 1])) break;
            frames[nf++] = ret;
            if (next <= fp || next + 16 > top || (next & 7)) break;
            fp = next;
        }
    }
}

void weft__stall_site_name(const uintptr_t site[WEFT__SITE_FRAMES], char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < WEFT__SITE_FRAMES && site[i] && at + 8 < cap; i++) {
        if (i) at += (size_t)snprintf(out + at, cap - at, " <- ");
        if (at >= cap) break;
        int k = weft__symbolize(site[i], out + at, cap - at);
        if (k < 0) break;
        at += (size_t)k;
    }
    if (at >= cap) out[cap - 1] = 0;
}

/* ---- classifying ----------------------------------------------------------------- */

/* 1: running; 0: blocked (*nr: the system call, or -1; *sp, *pc); -1: unreadable */
static int proc_syscall(int tid, long *nr, uintptr_t *sp, uintptr_t *pc) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t k = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (k <= 0) return -1;
    buf[k] = 0;
    if (!strncmp(buf, "running", 7)) return 1;
    char *p = buf, *end;
    long n = strtol(p, &end, 10);
    if (end == p) return -1;
    unsigned long long v[8];
    int nv = 0;
    for (p = end; nv < 8;) {
        while (*p == ' ') p++;
        if (!*p || *p == '\n') break;
        v[nv++] = strtoull(p, &end, 0);
        if (end == p) break;
        p = end;
    }
    *nr = n;
    /* "nr a0 .. a5 sp pc", or "-1 sp pc" */
    *sp = nv >= 2 ? (uintptr_t)v[nv - 2] : 0;
    *pc = nv >= 2 ? (uintptr_t)v[nv - 1] : 0;
    return 0;
}

int weft__stall_probe(int tid, int64_t cpu_ns, const weft_thread *t, weft__stall_info *out) {
    out->kind = WEFT__STALL_HOG;
    out->sysno = -2;
    memset(out->site, 0, sizeof out->site);
    long nr = -2;
    uintptr_t sp = 0, pc = 0;
    int st = proc_syscall(tid, &nr, &sp, &pc);
    if (st == 1 && cpu_ns >= HOG_CPU_NS) return 0; /* computing */
    for (int tries = 0; st == 1 && tries < 2; tries++) {
        /* running, without having computed: between two blocking calls? */
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
        st = proc_syscall(tid, &nr, &sp, &pc);
    }
    if (st == 1) return cpu_ns < 0 ? 0 : -1; /* (no CPU clock: say computing) */
    if (st < 0) {
        /* no /proc: the CPU clock alone tells computing from blocked */
        if (cpu_ns < 0 || cpu_ns >= HOG_CPU_NS) return 0;
        out->kind = WEFT__STALL_PINNED;
        return 0;
    }
    out->kind = WEFT__STALL_PINNED;
    out->sysno = nr;
    find_site(t, sp, pc, out->site);
    return 0;
}

/* ---- the line ---------------------------------------------------------------------- */

void weft__stall_log(int begin, int kind, uint64_t vid, const char *vname, int carrier, long sysno,
                     int64_t held_ns, const uintptr_t *site) {
    char b[1024];
    const char *what = kind == WEFT__STALL_PINNED ? "pinned" : "hog";
    long long ms = (long long)(held_ns / 1000000);
    int k;
    if (!begin) {
        k = snprintf(b, sizeof b, "weft: %s: vthread #%llu \"%s\" released carrier %d after %lld ms\n", what,
                     (unsigned long long)vid, vname, carrier, ms);
    } else if (kind == WEFT__STALL_PINNED) {
        char call[64];
        const char *name = weft__syscall_name(sysno);
        if (sysno == -1) snprintf(call, sizeof call, "the kernel outside a system call");
        else if (sysno < 0) snprintf(call, sizeof call, "the kernel (system call unknown)");
        else if (name) snprintf(call, sizeof call, "%s (syscall %ld)", name, sysno);
        else snprintf(call, sizeof call, "syscall %ld", sysno);
        char where[512] = "";
        if (site) weft__stall_site_name(site, where, sizeof where);
        k = snprintf(b, sizeof b, "weft: pinned: vthread #%llu \"%s\" blocked in %s on carrier %d for %lld ms, at %s\n",
                     (unsigned long long)vid, vname, call, carrier, ms, *where ? where : "an unknown site");
    } else {
        k = snprintf(b, sizeof b,
                     "weft: hog: vthread #%llu \"%s\" has held carrier %d for %lld ms without a switch (computing)\n",
                     (unsigned long long)vid, vname, carrier, ms);
    }
    if (k < 0) return;
    size_t n = (size_t)k < sizeof b ? (size_t)k : sizeof b - 1;
    if (n && b[n - 1] != '\n') b[n - 1] = '\n'; /* (truncated) */
    ssize_t w = write(2, b, n);
    (void)w;
}
