/*
 * Names for code addresses, and the stacks of parked vthreads, for the
 * dump and the monitor (symbolize.h).
 *
 * What.  A code address becomes its module and offset in it, its function
 * and offset, its source file and line, and the functions inlined there
 * (each with its own line and the line of the inlining call), read with
 * elfutils' libdwfl from the process's own modules: the ELF symbol table
 * names static functions too (no -rdynamic needed, unlike dladdr), the
 * DWARF line table gives file:line when the code was built with -g.
 * Nothing of this runs before the first dump, libdw itself not even
 * loaded: the first lock opens libdw.so.1 (dlopen, its functions found
 * with dlsym into one table, DW) -- linked instead, libdw, libelf and
 * their compressors were loaded and relocated by every process that
 * started libweft, for a dump most processes never make: /bin/true with
 * libweft-hook.so preloaded took 15.1 ms an exec linked, 13.0 ms with
 * the dlopen (200 runs, 3 times each), and libdw and libelf alone held
 * ~280 KiB of a program's RSS.
 * Where libdw.so.1 cannot be opened (Debian's libdw1 not installed),
 * frames are named by dladdr alone: module+offset and the exported
 * symbols.  Then the lock makes the
 * Dwfl (dwfl_linux_proc_report: /proc/self/maps, one module per mapped
 * object; each module's ELF and DWARF are opened on first use), and every
 * address resolved is kept in a hash table for the life of the process,
 * so a second dump of the same stacks costs lookups only.  An address in
 * no known module (dlopen'ed since) makes the module list be read again,
 * once per lock.  A frame that cannot be named keeps its address and, if
 * any, module+offset.  The strings come from libdw's own data, which lives
 * as long as the Dwfl, which lives as long as the process.
 *
 * Stacks.  A parked vthread's context is its saved stack pointer: the
 * switch pushed its callee-saved registers and the return address into the
 * code that switched it out (switch_x86_64.S: sp[0] MXCSR and x87 control
 * word, then r15, r14, r13, r12, rbx, rbp, return address).  Those
 * registers plus rsp = sp + 64 and rip = the return address are the
 * complete state the DWARF call frame information needs, so the stack is
 * unwound by libdwfl's unwinder (dwfl_attach_state with callbacks of our
 * own: one "thread", the vthread being walked, and a memory reader that
 * answers only inside that vthread's stack).  This walks frames built
 * without frame pointers (a program compiled with plain -O2), which the
 * frame-pointer chain cannot; where libdw fails (no unwinder for the
 * architecture, a module without CFI) the chain from the saved rbp is
 * walked instead, as before.  Words of the stack are read racily: the
 * vthread may be woken and run while it is walked; reads stay inside
 * [stk.lo, t) and are hidden from the sanitizers (the stack holds ASan's
 * redzones; the vthread's later writes race with them by design).  The
 * worst a stale word gives is a wrong frame, never a fault.
 *
 * Running carriers are not unwound: their registers can only be had by
 * stopping the thread with a signal, which would also end a foreign system
 * call early (EINTR), and a computing vthread's stack changes under the
 * reader.  The dump shows what runs where, and for a pinned carrier the
 * blocking call's site as the monitor found it (monitor.c) and named it
 * here.
 *
 * Stack room.  libdw needs a lot of stack (reading a line table puts
 * some 150 KiB of arrays on it): more than a vthread's or a 256 KiB
 * thread's stack can spare.  Every call into libdw first checks that
 * WEFT__SYM_STACK_NEED bytes are left below it; where they are not, the
 * address keeps its module+offset (dladdr) and is not cached.  The dump
 * runs where there is room (dump.c: a thread of its own with a big
 * stack); the monitor's thread has 2 MiB.
 *
 * Threads.  libdw is not thread-safe: one mutex guards the Dwfl, the cache
 * and the unwinder's target.  The dump holds it while it writes its
 * stacks (so concurrent dumps take turns); the monitor's symbolizer only
 * tries it and names the frame with dladdr when a dump holds it, so that
 * a long dump never delays a compensating carrier.  None of this runs in
 * a signal handler: the SIGQUIT dump is written by its own thread
 * (dump.c).  A fork child forgets the Dwfl (the parent may have been in
 * the middle of a lookup) and makes its own on its first dump.
 *
 * Cost.  Nothing at all on any path but the dump's and the monitor's
 * stall lines.  The first dump of a process pays for reading the modules'
 * symbol tables and DWARF (tens of milliseconds for a big program).
 *
 * DEBUGINFOD_URLS: libdw's standard search for separate debug files asks
 * debuginfod servers when that variable is set; a dump then may wait for
 * the network.  Unset it for a process whose dumps must not.
 */
#define _GNU_SOURCE
#include "symbolize.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#define MAX_INLINE 16

/* ---- libdw, opened at the first lock ------------------------------------------ */

/* Every libdw function used here, found with dlsym once libdw.so.1 is open. */
#define WEFT__DW_FUNCS(X) \
    X(dwarf_attr) \
    X(dwarf_attr_integrate) \
    X(dwarf_filesrc) \
    X(dwarf_formstring) \
    X(dwarf_formudata) \
    X(dwarf_getscopes) \
    X(dwarf_getsrcfiles) \
    X(dwarf_tag) \
    X(dwfl_addrmodule) \
    X(dwfl_attach_state) \
    X(dwfl_begin) \
    X(dwfl_frame_pc) \
    X(dwfl_getthread_frames) \
    X(dwfl_lineinfo) \
    X(dwfl_linux_proc_find_elf) \
    X(dwfl_linux_proc_report) \
    X(dwfl_module_addrdie) \
    X(dwfl_module_addrinfo) \
    X(dwfl_module_getsrc) \
    X(dwfl_module_info) \
    X(dwfl_report_begin) \
    X(dwfl_report_begin_add) \
    X(dwfl_report_end) \
    X(dwfl_standard_find_debuginfo) \
    X(dwfl_thread_state_register_pc) \
    X(dwfl_thread_state_registers)

/* (its two functions are filled in by dw_open) */
static Dwfl_Callbacks proc_callbacks;

static struct {
#define X(f) __typeof__(f) *f;
    WEFT__DW_FUNCS(X)
#undef X
} DW;

/* 1 when libdw.so.1 and every function above were found; else 0, DW left
 * empty, and the frames are named by dladdr alone.  Tried once a process
 * (S.lock held): a fork child keeps the parent's libdw and DW.  (A
 * function pointer from dlsym's void *: POSIX guarantees the conversion,
 * through memcpy so that ISO C's rule against casting one to the other
 * is kept.) */
static int dw_open(void) {
    static int opened = -1;
    if (opened >= 0) return opened;
    opened = 0;
    void *h = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    void *f;
#define X(fn)                                      \
    if (!(f = dlsym(h, #fn))) goto missing;        \
    memcpy(&DW.fn, &f, sizeof f);
    WEFT__DW_FUNCS(X)
#undef X
    proc_callbacks.find_elf = DW.dwfl_linux_proc_find_elf;
    proc_callbacks.find_debuginfo = DW.dwfl_standard_find_debuginfo;
    return opened = 1;
missing:
    memset(&DW, 0, sizeof DW);
    dlclose(h);
    return 0;
}

static struct {
    pthread_mutex_t lock;
    int tried;          /* the Dwfl was made (or could not be) */
    Dwfl *d;
    int attached;       /* the unwinder's callbacks are attached to d */
    int refreshed;      /* the module list was read again during this lock */
    int fp_walks;       /* stacks walked by the frame-pointer chain during this lock */
    /* pc -> its record: open addressing, a power of 2, at most half full */
    const weft__sym **tab;
    size_t cap, used;
    /* weft's own code: its source folder (from __FILE__) and its module */
    size_t src_len;
    uintptr_t self_base;
    int self_shared;
    /* the vthread being unwound */
    uintptr_t lo, hi;
    Dwarf_Word rbx, rbp, rsp, r12_15[4], rip;
    uintptr_t *pcs;
    int n, max;
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ---- reading a stack we do not own ----------------------------------------- */

__attribute__((noinline, no_sanitize("address", "thread"))) static uintptr_t peek(uintptr_t a) {
    return *(volatile const uintptr_t *)a;
}

/* (not a + 8 <= hi: a word the unwinder makes up near the top of the
 * address space wraps that to 0 -- seen: -8, read, SIGSEGV) */
static int in_stack(uintptr_t a) { return a >= S.lo && a < S.hi && S.hi - a >= 8; }

/* ---- the Dwfl ---------------------------------------------------------------- */

static pid_t u_next_thread(Dwfl *d, void *arg, void **targ) {
    (void)d;
    if (*targ) return 0;
    *targ = arg;
    return 1;
}

static bool u_get_thread(Dwfl *d, pid_t tid, void *arg, void **targ) {
    (void)d;
    if (tid != 1) return false;
    *targ = arg;
    return true;
}

static bool u_memory_read(Dwfl *d, Dwarf_Addr a, Dwarf_Word *res, void *arg) {
    (void)d;
    (void)arg;
    if (!in_stack((uintptr_t)a)) return false;
    *res = peek((uintptr_t)a);
    return true;
}

static bool u_set_initial(Dwfl_Thread *th, void *targ) {
    (void)targ;
    /* DWARF numbering (x86-64 psABI): 3 rbx, 6 rbp, 7 rsp, 12-15 r12-r15,
     * 16 the return address column */
    Dwarf_Word bp_sp[2] = {S.rbp, S.rsp};
    if (!DW.dwfl_thread_state_registers(th, 3, 1, &S.rbx) || !DW.dwfl_thread_state_registers(th, 6, 2, bp_sp) ||
        !DW.dwfl_thread_state_registers(th, 12, 4, S.r12_15) || !DW.dwfl_thread_state_registers(th, 16, 1, &S.rip))
        return false;
    DW.dwfl_thread_state_register_pc(th, S.rip);
    return true;
}

static const Dwfl_Thread_Callbacks unwind_callbacks = {
    .next_thread = u_next_thread,
    .get_thread = u_get_thread,
    .memory_read = u_memory_read,
    .set_initial_registers = u_set_initial,
};

static void report_modules(int add) {
    if (add) DW.dwfl_report_begin_add(S.d);
    else DW.dwfl_report_begin(S.d);
    DW.dwfl_linux_proc_report(S.d, getpid());
    DW.dwfl_report_end(S.d, NULL, NULL);
}

static void fork_child(void) {
    /* the parent's other threads are gone, and one may have held the lock
     * in the middle of a lookup: start again (the old Dwfl is let go) */
    S.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    S.tried = 0;
    S.d = NULL;
    S.attached = 0;
    S.tab = NULL;
    S.cap = S.used = 0;
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, fork_child); }

static void start(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_atfork);
    S.tried = 1;
    /* "<root>/src/observe/symbolize.c": weft's sources are under <root>/src/ */
    const char *me = __FILE__, *tail = "observe/symbolize.c";
    size_t ml = strlen(me), tl = strlen(tail);
    S.src_len = ml > tl && !strcmp(me + ml - tl, tail) ? ml - tl : 0;
    Dl_info di, dm;
    if (dladdr((void *)&weft__sym_get, &di) && di.dli_fbase) {
        S.self_base = (uintptr_t)di.dli_fbase;
        /* shared: libweft.so is a module of its own, not the program's */
        void *phdr = (void *)getauxval(AT_PHDR);
        S.self_shared = phdr && dladdr(phdr, &dm) && dm.dli_fbase != di.dli_fbase;
    }
    if (!dw_open()) return;
    S.d = DW.dwfl_begin(&proc_callbacks);
    if (!S.d) return;
    report_modules(0);
    S.attached = DW.dwfl_attach_state(S.d, NULL, 1, &unwind_callbacks, NULL);
}

void weft__sym_lock(void) {
    pthread_mutex_lock(&S.lock);
    S.refreshed = 0;
    S.fp_walks = 0;
    if (!S.tried) start();
}

void weft__sym_unlock(void) { pthread_mutex_unlock(&S.lock); }

/* ---- stack room ------------------------------------------------------------------ */

/* Bytes of stack left below the caller's frame: a vthread's own stack, or
 * the OS thread's (its low end looked up once per thread). */
size_t weft__sym_stack_left(void) {
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    weft_thread *self = weft__self();
    if (self) {
        uintptr_t lo = (uintptr_t)self->stk.lo;
        return sp > lo ? sp - lo : 0;
    }
    static __thread uintptr_t lo;
    if (!lo) {
        pthread_attr_t a;
        void *addr = NULL;
        size_t size = 0;
        if (pthread_getattr_np(pthread_self(), &a) == 0) {
            if (pthread_attr_getstack(&a, &addr, &size) != 0) addr = NULL;
            pthread_attr_destroy(&a);
        }
        lo = addr ? (uintptr_t)addr : sp; /* unknown: no room, libdw is not called */
    }
    return sp > lo ? sp - lo : 0;
}

/* ---- naming one address ------------------------------------------------------ */

static const char *die_name(Dwarf_Die *d) {
    Dwarf_Attribute a;
    const char *s = DW.dwarf_formstring(DW.dwarf_attr_integrate(d, DW_AT_linkage_name, &a));
    if (!s) s = DW.dwarf_formstring(DW.dwarf_attr_integrate(d, DW_AT_name, &a));
    return s;
}

static int is_weft_file(const char *file) {
    return S.src_len && !strncmp(file, __FILE__, S.src_len);
}

int weft__sym_is_weft_file(const char *file) { return file && is_weft_file(file); }

/* A source file's name as it was given to the compiler -- what __FILE__
 * says, and so what a blocking call's macro records: libdw joins a
 * relative name to the compilation directory, and a dump that read
 * "/home/u/chat.c:15" for an io call beside "chat.c:21" for a channel
 * call (issue 25) named one file two ways.  A name given absolute stays so. */
static const char *as_compiled(Dwarf_Die *cu, const char *file) {
    Dwarf_Attribute at;
    const char *dir = file && cu ? DW.dwarf_formstring(DW.dwarf_attr(cu, DW_AT_comp_dir, &at)) : NULL;
    size_t n = dir ? strlen(dir) : 0;
    if (n && strncmp(file, dir, n) == 0 && file[n] == '/' && file[n + 1]) return file + n + 1;
    return file;
}

static weft__sym *resolve(uintptr_t pc) {
    uintptr_t a = pc - 1; /* a return address: the call is the byte before */
    weft__sym_frame f[MAX_INLINE + 1];
    int n = 0;
    const char *mod = NULL;
    uintptr_t moff = 0;
    Dwarf_Die *cu_of_frames = NULL; /* (libdw's, kept as long as S.d) */
    Dwfl_Module *m = S.d ? DW.dwfl_addrmodule(S.d, a) : NULL;
    if (!m && S.d && !S.refreshed) { /* dlopen'ed since the list was read */
        S.refreshed = 1;
        report_modules(1);
        m = DW.dwfl_addrmodule(S.d, a);
    }
    if (m) {
        Dwarf_Addr start = 0;
        mod = DW.dwfl_module_info(m, NULL, &start, NULL, NULL, NULL, NULL, NULL);
        moff = pc - (uintptr_t)start;
        GElf_Off off = 0;
        GElf_Sym sym;
        const char *fn = DW.dwfl_module_addrinfo(m, a, &off, &sym, NULL, NULL, NULL);
        const char *file = NULL;
        int line = 0;
        Dwfl_Line *l = DW.dwfl_module_getsrc(m, a);
        if (l) file = DW.dwfl_lineinfo(l, NULL, &line, NULL, NULL, NULL);
        /* the inlined functions at a, innermost first: each stands at the
         * current place, and the place moves to its inlining call */
        Dwarf_Addr bias = 0;
        Dwarf_Die *cu = DW.dwfl_module_addrdie(m, a, &bias), *scopes = NULL;
        cu_of_frames = cu;
        int ns = cu ? DW.dwarf_getscopes(cu, a - bias, &scopes) : 0;
        Dwarf_Files *files = NULL;
        size_t nfiles = 0;
        const char *subprogram = NULL;
        for (int i = 0; i < ns; i++) {
            int tag = DW.dwarf_tag(&scopes[i]);
            if (tag == DW_TAG_subprogram) {
                subprogram = die_name(&scopes[i]);
                break;
            }
            if (tag != DW_TAG_inlined_subroutine || n == MAX_INLINE) continue;
            f[n++] = (weft__sym_frame){.func = die_name(&scopes[i]), .file = file, .line = line, .inlined = 1};
            Dwarf_Attribute at;
            Dwarf_Word v;
            file = NULL;
            line = 0;
            if (DW.dwarf_formudata(DW.dwarf_attr(&scopes[i], DW_AT_call_file, &at), &v) == 0) {
                if (!files && DW.dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = NULL;
                if (files && v < nfiles) file = DW.dwarf_filesrc(files, v, NULL, NULL);
            }
            if (DW.dwarf_formudata(DW.dwarf_attr(&scopes[i], DW_AT_call_line, &at), &v) == 0) line = (int)v;
        }
        free(scopes);
        if (fn || subprogram || file)
            f[n++] = (weft__sym_frame){.func = fn ? fn : subprogram, .off = fn ? (uintptr_t)off + 1 : 0,
                                       .file = file, .line = line};
    }
    weft__sym *s = malloc(sizeof *s + (size_t)n * sizeof s->f[0]);
    if (!s) return NULL;
    int own_src = n && f[n - 1].file ? is_weft_file(f[n - 1].file) : -1; /* (the full name) */
    for (int i = 0; i < n; i++) f[i].file = as_compiled(cu_of_frames, f[i].file);
    s->pc = pc;
    s->module = mod;
    s->mod_off = moff;
    s->n = n;
    memcpy(s->f, f, (size_t)n * sizeof f[0]);
    /* weft's own frame: its sources; without line information, its name
     * or (shared library) its module */
    const weft__sym_frame *outer = n ? &s->f[n - 1] : NULL;
    if (outer && outer->file) s->weft = own_src;
    else if (outer && outer->func && !strncmp(outer->func, "weft_", 5)) s->weft = 1;
    else if (S.self_shared && m) {
        Dl_info di;
        s->weft = dladdr((void *)a, &di) && (uintptr_t)di.dli_fbase == S.self_base;
    } else s->weft = 0;
    return s;
}

static size_t slot_of(uintptr_t pc, size_t cap) {
    uint64_t h = (uint64_t)pc * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (cap - 1);
}

static int grow(void) {
    size_t cap = S.cap ? 2 * S.cap : 1024;
    const weft__sym **t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < S.cap; i++) {
        if (!S.tab[i]) continue;
        size_t k = slot_of(S.tab[i]->pc, cap);
        while (t[k]) k = (k + 1) & (cap - 1);
        t[k] = S.tab[i];
    }
    free(S.tab);
    S.tab = t;
    S.cap = cap;
    return 0;
}

const weft__sym *weft__sym_get(uintptr_t pc) {
    static weft__sym bare; /* memory or stack short: the pc alone (lock held: one user) */
    if (S.cap) {
        for (size_t k = slot_of(pc, S.cap);; k = (k + 1) & (S.cap - 1)) {
            if (!S.tab[k]) break;
            if (S.tab[k]->pc == pc) return S.tab[k];
        }
    }
    if (weft__sym_stack_left() < WEFT__SYM_STACK_NEED) { /* not cached: a thread with room resolves it */
        bare = (weft__sym){.pc = pc};
        Dl_info di;
        if (dladdr((void *)pc, &di) && di.dli_fname) {
            bare.module = di.dli_fname;
            bare.mod_off = pc - (uintptr_t)di.dli_fbase;
        }
        return &bare;
    }
    weft__sym *s = resolve(pc);
    if (!s || ((S.used + 1) * 2 > S.cap && grow() < 0)) {
        free(s);
        bare = (weft__sym){.pc = pc};
        return &bare;
    }
    size_t k = slot_of(pc, S.cap);
    while (S.tab[k]) k = (k + 1) & (S.cap - 1);
    S.tab[k] = s;
    S.used++;
    return s;
}

/* ---- stacks -------------------------------------------------------------------- */

static int u_frame(Dwfl_Frame *fr, void *arg) {
    (void)arg;
    Dwarf_Addr pc;
    bool activation;
    if (!DW.dwfl_frame_pc(fr, &pc, &activation) || !pc) return DWARF_CB_ABORT;
    S.pcs[S.n++] = (uintptr_t)pc;
    return S.n < S.max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

/* The frame-pointer chain from the saved rbp (weft and its tests keep
 * frame pointers; code without them ends the chain early or, worse, sends
 * it through a stale word: which is why libdw goes first). */
static int fp_walk(uintptr_t fp, uintptr_t pc, uintptr_t *pcs, int max) {
    int n = 0;
    while (n < max && pc) {
        pcs[n++] = pc;
        if (!in_stack(fp) || !in_stack(fp + 8) || (fp & 7)) break;
        uintptr_t nfp = peek(fp);
        pc = peek(fp + 8);
        if (nfp <= fp) break; /* frames go up the stack */
        fp = nfp;
    }
    return n;
}

int weft__sym_stack(const weft_thread *t, uintptr_t *pcs, int max) {
    uintptr_t sp = (uintptr_t)__atomic_load_n(&t->sp, __ATOMIC_RELAXED);
    S.lo = (uintptr_t)__atomic_load_n(&t->stk.lo, __ATOMIC_RELAXED);
    S.hi = (uintptr_t)t;
    if (max <= 0 || !in_stack(sp) || !in_stack(sp + 56) || (sp & 7)) return 0;
    int room = weft__sym_stack_left() >= WEFT__SYM_STACK_NEED;
    S.r12_15[3] = peek(sp + 8);  /* r15 */
    S.r12_15[2] = peek(sp + 16); /* r14 */
    S.r12_15[1] = peek(sp + 24); /* r13 */
    S.r12_15[0] = peek(sp + 32); /* r12 */
    S.rbx = peek(sp + 40);
    S.rbp = peek(sp + 48);
    S.rip = peek(sp + 56);
    S.rsp = sp + 64;
    S.pcs = pcs;
    S.max = max;
    S.n = 0;
    if (S.attached && room) DW.dwfl_getthread_frames(S.d, 1, u_frame, NULL); /* ends with -1 at the stack's end */
    /* libdw could not get past the first frame: the chain may */
    if (S.n < 2) {
        S.fp_walks++;
        S.n = fp_walk((uintptr_t)S.rbp, (uintptr_t)S.rip, pcs, max);
    }
    return S.n;
}

const char *weft__sym_unwinder(void) { return S.attached ? "libdw" : "frame pointers"; }

int weft__sym_fp_walks(void) { return S.fp_walks; }

/* ---- the monitor's names --------------------------------------------------------- */

/* weft__symbolize for the monitor's pinned lines: "fn+0x4f (file.c:12,
 * /path/module+0x1234)" when the lock is free, dladdr's name otherwise. */
int weft__sym_name(uintptr_t pc, char *buf, size_t cap, int (*fallback)(uintptr_t, char *, size_t)) {
    if (weft__sym_stack_left() < WEFT__SYM_STACK_NEED || pthread_mutex_trylock(&S.lock) != 0)
        return fallback(pc, buf, cap);
    S.refreshed = 0;
    if (!S.tried) start();
    const weft__sym *s = weft__sym_get(pc);
    int k;
    if (!s->n) {
        pthread_mutex_unlock(&S.lock);
        return fallback(pc, buf, cap);
    }
    const weft__sym_frame *f = &s->f[s->n - 1];
    const char *file = f->file ? strrchr(f->file, '/') : NULL;
    file = file ? file + 1 : f->file;
    char where[160] = "";
    if (file) snprintf(where, sizeof where, "%s:%d, ", file, f->line);
    k = snprintf(buf, cap, "%s+0x%lx (%s%s+0x%lx)", f->func ? f->func : "?", (unsigned long)f->off, where,
                 s->module ? s->module : "?", (unsigned long)s->mod_off);
    pthread_mutex_unlock(&S.lock);
    return k;
}
